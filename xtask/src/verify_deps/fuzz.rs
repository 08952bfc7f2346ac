//! A bounded cargo-fuzz run of the binary parser (`fuzz/fuzz_targets/parse_binary.rs`),
//! for `cargo xtask test`. The corpus is seeded with written PE32/PE32+/ELF files under the
//! target dir, so the repository holds no generated files.
//!
//! cargo-fuzz passes `-Zsanitizer=address`, a nightly flag: on a stable toolchain the run
//! sets `RUSTC_BOOTSTRAP=1`. Needs `cargo install cargo-fuzz`.

use std::process::Command;

use anyhow::Context;

use super::binary::Machine;
use super::synth::{self, ElfSpec, PeSpec};

/// Seed inputs: PE32+ and PE32 with regular and delay imports, an ELF executable with
/// NEEDED/SONAME/RPATH/RUNPATH, an AMDGPU code object header.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut pe64 = PeSpec::new(true, &["KERNEL32.dll", "MSVCP140.dll"]);
    pe64.delay_imports = vec!["amd_comgr_2.dll".into()];
    let mut pe32 = pe64.clone();
    pe32.machine = Machine::X86;
    vec![
        ("pe64.dll", synth::pe(&pe64)),
        ("pe32.dll", synth::pe(&pe32)),
        (
            "exe.elf",
            synth::elf(&ElfSpec {
                machine: 62,
                executable: true,
                needed: vec!["libc.so.6".into(), "libggml.so".into()],
                soname: Some("x".into()),
                rpath: vec!["$ORIGIN".into()],
                runpath: vec!["$ORIGIN/lib".into()],
            }),
        ),
        (
            "code-object.co",
            synth::elf(&ElfSpec {
                machine: 224,
                ..Default::default()
            }),
        ),
    ]
}

/// Runs `cargo fuzz run parse_binary` for at most `seconds` (libFuzzer's
/// `-max_total_time`), with the corpus and build under the target dir. A crash fails.
pub fn run(seconds: u32) -> anyhow::Result<()> {
    let root = crate::project::project_root();
    let target = crate::project::target_dir();
    let corpus = target.join("fuzz-corpus/parse_binary");
    std::fs::create_dir_all(&corpus).with_context(|| format!("creating {}", corpus.display()))?;
    for (name, bytes) in seeds() {
        std::fs::write(corpus.join(name), bytes)?;
    }
    let status = Command::new("cargo")
        .current_dir(&root)
        .env("RUSTC_BOOTSTRAP", "1")
        .args(["fuzz", "run", "parse_binary", "--target-dir"])
        .arg(target.join("fuzz"))
        .arg(&corpus)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .status()
        .context("running cargo fuzz (install it with `cargo install cargo-fuzz`)")?;
    anyhow::ensure!(
        status.success(),
        "cargo fuzz run parse_binary failed ({status})"
    );
    Ok(())
}
