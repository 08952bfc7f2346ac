//! `dist` on the tracks that strip files as they stage them (`strip_executables`,
//! `crt.strip_debug` in packaging/tracks.toml), with real binaries: small programs built
//! by MinGW-w64 g++ and by cc, and the MinGW runtime DLLs the windows-cpu-gnu track takes
//! from the cross toolchain. Two runs on the same inputs, in different seconds and without
//! SOURCE_DATE_EPOCH (as `cargo xtask dist` is run by hand), must give byte-identical zips
//! (docs/architecture.md section 4, rules 8 and 9), and a stripped PE file must carry its
//! input's header time stamp, never the time of the run that staged it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use xtask::pe_header::PeHeader;
use xtask::tracks::TracksFile;

/// The link time of the test's MinGW programs (2020-09-13): far from any run's time.
const LINK_TIME: u32 = 1_600_000_000;

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Builds `names` into `dir` from one small program, with `compiler` and DWARF (the
/// MinGW one with a C++ thread, so it imports the whole runtime the track bundles).
fn programs(compiler: &str, dir: &Path, names: &[String]) {
    std::fs::create_dir_all(dir).unwrap();
    let src = dir.join("small.cpp");
    std::fs::write(
        &src,
        "#include <string>\n#include <thread>\n\
         int main(int argc, char **) {\n\
           std::string s(argc, '*');\n\
           std::thread t([&] { s += \"!\"; });\n\
           t.join();\n\
           return int(s.size()) - argc - 1;\n\
         }\n",
    )
    .unwrap();
    for name in names {
        let status = Command::new(compiler)
            .args(["-g", "-O1", "-pthread", "-o"])
            .arg(dir.join(name))
            .arg(&src)
            // MinGW's ld stamps the PE header with SOURCE_DATE_EPOCH when it is set.
            .env("SOURCE_DATE_EPOCH", LINK_TIME.to_string())
            .status()
            .unwrap_or_else(|e| {
                panic!("{compiler} is part of the test set-up (packaging/needs.toml): {e}")
            });
        assert!(status.success(), "{compiler} failed for {name}");
    }
}

/// Every entry of the zip `zip`, by name.
fn entries(zip: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let mut z = zip::ZipArchive::new(std::io::Cursor::new(zip)).unwrap();
    (0..z.len())
        .map(|i| {
            let mut f = z.by_index(i).unwrap();
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut f, &mut bytes).unwrap();
            (f.name().to_string(), bytes)
        })
        .collect()
}

/// One `dist` run: the zip's bytes, and the first and last second of the run.
struct Run {
    zip: Vec<u8>,
    seconds: std::ops::RangeInclusive<u64>,
}

/// `dist --track track --bin-dir bin` into `out`, as a person runs it (no
/// SOURCE_DATE_EPOCH: the zip's time is the commit's), then verify-package on the zip.
fn dist(track: &str, package: &str, bin: &Path, out: &Path) -> Run {
    let start = now();
    let o = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["dist", "--track", track, "--bin-dir"])
        .arg(bin)
        .arg("--out-dir")
        .arg(out)
        .env_remove("SOURCE_DATE_EPOCH")
        .env("CI", "1")
        .output()
        .unwrap();
    let end = now();
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let zip = out.join(format!("{package}.zip"));
    let vp = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("verify-package")
        .arg(&zip)
        .output()
        .unwrap();
    assert!(
        vp.status.success(),
        "{}",
        String::from_utf8_lossy(&vp.stdout)
    );
    Run {
        zip: std::fs::read(&zip).unwrap(),
        seconds: start..=end,
    }
}

/// Runs `dist` twice, the second run starting in a later second than the first ended.
fn two_runs(track: &str, package: &str, bin: &Path, out: &Path) -> [Run; 2] {
    let first = dist(track, package, bin, out);
    while now() <= *first.seconds.end() {
        std::thread::sleep(Duration::from_millis(100));
    }
    [first, dist(track, package, bin, out)]
}

/// The entries whose bytes differ between the two runs' zips.
fn differing(runs: &[Run; 2]) -> Vec<String> {
    let (a, b) = (entries(&runs[0].zip), entries(&runs[1].zip));
    let names: BTreeSet<&String> = a
        .keys()
        .chain(b.keys())
        .filter(|n| a.get(*n) != b.get(*n))
        .collect();
    names.into_iter().cloned().collect()
}

#[test]
fn windows_cpu_gnu_stripped_twice_is_byte_identical_with_the_inputs_pe_time_stamps() {
    let tracks = TracksFile::load(&TracksFile::default_path()).unwrap();
    let track = tracks.track("windows-cpu-gnu").unwrap();
    let crt = track.crt.as_ref().unwrap();
    assert!(
        track.strip_executables.is_some() && crt.strip_debug.is_some(),
        "the track strips its executables and its runtime"
    );
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    programs("x86_64-w64-mingw32-g++-posix", &bin, &track.executables);
    // The stripped files and where dist takes them from: the runtime is the cross
    // toolchain's own (no --crt-dir), as in the real package.
    let mut inputs: Vec<(String, PathBuf)> = track
        .executables
        .iter()
        .map(|e| (e.clone(), bin.join(e)))
        .collect();
    for name in &crt.files {
        let found = crt
            .search
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.is_file())
            .unwrap_or_else(|| panic!("{name} in {:?} (packaging/needs.toml)", crt.search));
        inputs.push((name.clone(), found));
    }

    let runs = two_runs(
        "windows-cpu-gnu",
        &track.package,
        &bin,
        &dir.path().join("dist"),
    );
    let mut problems: Vec<String> = differing(&runs)
        .into_iter()
        .map(|n| format!("{n} differs between the two runs"))
        .collect();
    for run in &runs {
        let staged = entries(&run.zip);
        for (name, src) in &inputs {
            let bytes = &staged[&format!("{}/{name}", track.package)];
            let got = PeHeader::read(bytes, name).unwrap().unwrap();
            let input = PeHeader::read(&std::fs::read(src).unwrap(), name)
                .unwrap()
                .unwrap();
            let stamp = u64::from(got.time_date_stamp);
            if run.seconds.contains(&stamp) {
                problems.push(format!(
                    "{name}: PE time stamp {stamp} is the time of the run {:?}",
                    run.seconds
                ));
            } else if got.time_date_stamp != input.time_date_stamp {
                problems.push(format!(
                    "{name}: PE time stamp {stamp}, its input's is {}",
                    input.time_date_stamp
                ));
            }
            // strip writes the checksum of what it wrote: it follows from the bytes.
            if got.check_sum == 0 || !got.check_sum_is_consistent() {
                problems.push(format!(
                    "{name}: PE checksum {:#x}, the image's is {:#x}",
                    got.check_sum, got.computed_check_sum
                ));
            }
        }
    }
    if runs[0].zip != runs[1].zip {
        problems.push("the two zips are not byte-identical".into());
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn linux_cpu_stripped_twice_is_byte_identical() {
    let tracks = TracksFile::load(&TracksFile::default_path()).unwrap();
    let track = tracks.track("linux-cpu").unwrap();
    assert_eq!(track.strip_executables.as_deref(), Some("strip"));
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    programs("c++", &bin, &track.executables);
    let runs = two_runs("linux-cpu", &track.package, &bin, &dir.path().join("dist"));
    // ELF has no header time stamp: strip's output is the same bytes at any time.
    assert_eq!(differing(&runs), Vec::<String>::new());
    assert!(runs[0].zip == runs[1].zip, "the zips are byte-identical");
    let staged = entries(&runs[0].zip);
    for exe in &track.executables {
        let bytes = &staged[&format!("{}/{exe}", track.package)];
        assert!(bytes.starts_with(b"\x7fELF"), "{exe}");
        assert_eq!(PeHeader::read(bytes, exe).unwrap(), None, "{exe}");
        assert_ne!(
            bytes,
            &std::fs::read(bin.join(exe)).unwrap(),
            "{exe} is staged stripped"
        );
    }
}
