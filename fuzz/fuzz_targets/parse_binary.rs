//! Fuzzes the PE/ELF/Mach-O dependency parser of `cargo xtask verify-deps`: the
//! whole-buffer parse and the incremental (headers-first) parse must never panic, and must
//! agree whenever both succeed. Run it bounded with `cargo xtask fuzz` semantics:
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run parse_binary <corpus> -- -max_total_time=30`
//! (see `xtask::verify_deps::fuzz`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use xtask::verify_deps::{input, parse};

fuzz_target!(|data: &[u8]| {
    let whole = parse(data);
    let (incremental, _) = input::parse_incremental(data.len() as u64, |offset, len| {
        Ok(data[offset as usize..(offset + len) as usize].to_vec())
    })
    .expect("reading from memory cannot fail");
    if let (Ok(a), Ok(b)) = (&whole, &incremental) {
        assert_eq!(a, b, "whole-buffer and incremental parses disagree");
    }
});
