//! `verify-deps --track`: the declared-set rules of packaging/tracks.toml on packages
//! written with `verify_deps::synth` (real PE/ELF files; `verify_deps.rs` checks the
//! writer against objdump), a bounded deterministic fuzz loop over the parser, and a
//! small run of the bench.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use xtask::bench::deps as bench;
use xtask::tracks::TracksFile;
use xtask::verify_deps::binary::Machine;
use xtask::verify_deps::synth::{self, ElfSpec, PeSpec};
use xtask::verify_deps::{self, fuzz, input, Policy, Report, Rule};

fn policy(track: Option<&str>) -> Policy {
    let path = TracksFile::default_path();
    let tracks = TracksFile::load(&path).unwrap();
    Policy::new(&tracks, &path, track).unwrap()
}

fn check(dir: &Path, track: Option<&str>) -> Report {
    let pkg = input::read_dir(dir).unwrap();
    verify_deps::check(&pkg, &policy(track))
}

fn rocm6_tree(dir: &Path) -> std::path::PathBuf {
    let pkg = dir.join("audiocpp-windows-hip-rocm6");
    bench::write_tree(&pkg, 60, 600_000).unwrap();
    pkg
}

fn messages(r: &Report, rule: Rule) -> Vec<String> {
    r.of_rule(rule).iter().map(|f| f.to_string()).collect()
}

fn dll(path: &Path, imports: &[&str]) {
    std::fs::write(path, synth::pe(&PeSpec::new(true, imports))).unwrap();
}

#[test]
fn clean_rocm6_package_passes_through_the_cli() {
    let tmp = tempfile::tempdir().unwrap();
    let pkg = rocm6_tree(tmp.path());
    let r = check(&pkg, Some("rocm6"));
    assert!(r.passed(), "{}", r.render_text());
    assert!(r.gpu_code_files > 0);
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["verify-deps", "--track", "rocm6"])
        .arg(&pkg)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("amd_comgr_2.dll  [Pe x64 runtime-loaded]"),
        "{text}"
    );
    assert!(text.contains("VERSION.dll  system [delay]"), "{text}");
    assert!(text.contains("API sets, not followed"), "{text}");
}

#[test]
fn undeclared_and_absent_files_fail() {
    let tmp = tempfile::tempdir().unwrap();
    let pkg = rocm6_tree(tmp.path());
    dll(&pkg.join("zlib1.dll"), &["KERNEL32.dll"]);
    std::fs::remove_file(pkg.join("hipblaslt.dll")).unwrap();
    let r = check(&pkg, Some("rocm6"));
    assert_eq!(
        messages(&r, Rule::Undeclared),
        ["zlib1.dll: not in the declared set of track rocm6; remove it from the package or declare it in packaging/tracks.toml"]
    );
    assert!(messages(&r, Rule::DeclaredAbsent).iter().any(|m| m
        .starts_with("hipblaslt.dll: declared by track rocm6 (runtime) but not in the package")));
    assert!(messages(&r, Rule::Missing)
        .iter()
        .any(|m| m.starts_with("audiocpp_cli.exe -> ggml.dll")
            || m.contains("-> hipblaslt.dll: missing")));
}

#[test]
fn declared_but_unreachable_fails_unless_runtime_loaded() {
    let tmp = tempfile::tempdir().unwrap();
    let pkg = rocm6_tree(tmp.path());
    // Nothing imports vcruntime140_1.dll any more.
    let crt = ["MSVCP140.dll", "VCRUNTIME140.dll"];
    dll(
        &pkg.join("ggml.dll"),
        &["ggml-base.dll", "KERNEL32.dll", crt[0], crt[1]],
    );
    dll(
        &pkg.join("ggml-base.dll"),
        &["KERNEL32.dll", crt[0], crt[1]],
    );
    dll(
        &pkg.join("hipblaslt.dll"),
        &["amdhip64_6.dll", "KERNEL32.dll", crt[0], crt[1]],
    );
    let r = check(&pkg, Some("rocm6"));
    assert_eq!(
        messages(&r, Rule::Unreachable),
        ["vcruntime140_1.dll: declared by track rocm6 as imported, but no executable or plugin imports it; remove it, or declare it load = \"runtime_loaded\" with loaded_by"]
    );
    // amd_comgr_2.dll is imported by nothing either, but it is declared runtime-loaded.
    assert!(
        r.findings
            .iter()
            .all(|f| !f.to_string().contains("amd_comgr")),
        "{}",
        r.render_text()
    );
}

#[test]
fn runtime_loaded_companion_needs_its_loader() {
    let tmp = tempfile::tempdir().unwrap();
    let pkg = rocm6_tree(tmp.path());
    std::fs::remove_file(pkg.join("amdhip64_6.dll")).unwrap();
    let r = check(&pkg, Some("rocm6"));
    assert!(messages(&r, Rule::LoaderUnreachable).iter().any(|m| m.starts_with(
        "amd_comgr_2.dll: runtime-loaded by amdhip64_6.dll, which is not in the package or not reachable"
    )), "{}", r.render_text());
}

#[test]
fn rocm6_package_against_the_rocm7_track_fails_on_the_major() {
    let tmp = tempfile::tempdir().unwrap();
    let pkg = rocm6_tree(tmp.path());
    let r = check(&pkg, Some("rocm7"));
    assert!(
        messages(&r, Rule::MixedRuntimeMajors)
            .iter()
            .any(|m| m.contains("ROCm 6 in track rocm7, which is ROCm 7")),
        "{}",
        r.render_text()
    );
    // And mixing both majors in one package fails with both witnesses.
    dll(&pkg.join("amdhip64_7.dll"), &["KERNEL32.dll"]);
    dll(
        &pkg.join("hipblaslt.dll"),
        &["amdhip64_7.dll", "KERNEL32.dll", "MSVCP140.dll"],
    );
    let r = check(&pkg, None);
    let m = messages(&r, Rule::MixedRuntimeMajors);
    assert!(
        m.iter()
            .any(|m| m.starts_with("two ROCm majors in one package: 6 (") && m.contains("7 (")),
        "{m:?}"
    );
}

#[test]
fn x86_plugin_in_an_x64_track_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let pkg = rocm6_tree(tmp.path());
    let mut spec = PeSpec::new(true, &["KERNEL32.dll"]);
    spec.machine = Machine::X86;
    std::fs::write(pkg.join("ggml-cpu-x86.dll"), synth::pe(&spec)).unwrap();
    let r = check(&pkg, Some("rocm6"));
    assert_eq!(
        messages(&r, Rule::WrongMachine),
        ["ggml-cpu-x86.dll: wrong machine type (Pe x86, track rocm6 is Pe x64)"]
    );
}

#[test]
fn linux_track_with_origin_runpath_passes_and_absolute_rpath_warns() {
    let tmp = tempfile::tempdir().unwrap();
    let pkg = tmp.path().join("audiocpp-linux-cpu");
    std::fs::create_dir_all(pkg.join("lib")).unwrap();
    let elf =
        |path: &str, spec: ElfSpec| std::fs::write(pkg.join(path), synth::elf(&spec)).unwrap();
    let needed = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    for exe in ["audiocpp_cli", "audiocpp_server"] {
        elf(
            exe,
            ElfSpec {
                machine: 62,
                executable: true,
                needed: needed(&["libggml-base.so.0", "libstdc++.so.6", "libc.so.6"]),
                runpath: vec!["$ORIGIN/lib".into()],
                ..Default::default()
            },
        );
    }
    elf(
        "lib/libggml-base.so.0",
        ElfSpec {
            machine: 62,
            needed: needed(&["libm.so.6", "libc.so.6"]),
            soname: Some("libggml-base.so.0".into()),
            ..Default::default()
        },
    );
    elf(
        "lib/libggml-cpu-haswell.so",
        ElfSpec {
            machine: 62,
            needed: needed(&["libggml-base.so.0", "libc.so.6"]),
            runpath: vec!["$ORIGIN".into()],
            ..Default::default()
        },
    );
    let r = check(&pkg, Some("linux-cpu"));
    assert!(r.passed(), "{}", r.render_text());
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    // A plugin without $ORIGIN cannot find libggml-base, and an absolute rpath leaks.
    elf(
        "lib/libggml-cpu-haswell.so",
        ElfSpec {
            machine: 62,
            needed: needed(&["libggml-base.so.0", "libgomp.so.1"]),
            rpath: vec!["/opt/rocm/lib".into()],
            ..Default::default()
        },
    );
    let r = check(&pkg, Some("linux-cpu"));
    assert_eq!(
        messages(&r, Rule::Forbidden),
        ["lib/libggml-cpu-haswell.so -> libgomp.so.1: forbidden (GNU OpenMP runtime; build with GGML_OPENMP=OFF)"]
    );
    assert!(messages(&r, Rule::Missing)[0].starts_with(
        "lib/libggml-cpu-haswell.so -> libggml-base.so.0: missing (it is in the package at lib/libggml-base.so.0 but no RPATH/RUNPATH"
    ));
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("'/opt/rocm/lib' points outside the package")),
        "{:?}",
        r.warnings
    );
}

/// xorshift64*: a fixed-seed generator so every run mutates the same way.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Seeds: the cargo-fuzz seeds (written PE32/PE32+ with delay imports, ELF), plus a
/// mingw runtime DLL when present (the mingw tests require it anyway).
fn seeds() -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = fuzz::seeds().into_iter().map(|(_, b)| b).collect();
    if let Ok(b) = std::fs::read("/usr/lib/gcc/x86_64-w64-mingw32/12-win32/libgcc_s_seh-1.dll") {
        seeds.push(b);
    }
    seeds
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..1 + rng.below(8) {
        if b.is_empty() {
            break;
        }
        match rng.below(5) {
            0 => {
                let i = rng.below(b.len());
                b[i] = rng.next() as u8;
            }
            1 if b.len() >= 4 => {
                // Overwrite a header-area word with an interesting value.
                let i = rng.below(b.len().min(1024).saturating_sub(4));
                let v = [0u32, 0xffff_ffff, 0x8000_0000, b.len() as u32, 0x1000, 40][rng.below(6)];
                b[i..i + 4].copy_from_slice(&v.to_le_bytes());
            }
            1 | 2 => b.truncate(rng.below(b.len()) + 1),
            3 => {
                let i = rng.below(b.len());
                let n = rng.below(64).min(b.len() - i);
                b.drain(i..i + n);
            }
            _ => {
                let i = rng.below(b.len());
                b.insert(i, rng.next() as u8);
            }
        }
    }
    b
}

/// The bounded fuzz loop: mutated seeds through both the whole-buffer and the incremental
/// parser, for at most 5 s; any panic fails the test. The same two calls are the
/// cargo-fuzz target in fuzz/.
#[test]
fn parser_never_panics_on_mutated_binaries() {
    let seeds = seeds();
    let mut rng = Rng(0x5eed_0fa0_d10c_9900);
    let start = Instant::now();
    let mut runs = 0u32;
    while start.elapsed() < Duration::from_secs(5) && runs < 200_000 {
        let seed = &seeds[rng.below(seeds.len())];
        let data = mutate(&mut rng, seed);
        let whole = verify_deps::parse(&data);
        let (inc, _) = input::parse_incremental(data.len() as u64, |o, n| {
            Ok(data[o as usize..(o + n) as usize].to_vec())
        })
        .unwrap();
        if let (Ok(a), Ok(b)) = (&whole, &inc) {
            assert_eq!(a, b, "whole-buffer and incremental parses disagree");
        }
        runs += 1;
    }
    assert!(runs > 1000, "only {runs} runs");
}

#[test]
fn bench_reads_headers_not_whole_files() {
    let tmp = tempfile::tempdir().unwrap();
    let ctx = xtask::context::RunContext::default();
    let r = bench::bench_tree(&ctx, tmp.path(), 400, 40 << 20).unwrap();
    assert!(r.passed);
    assert_eq!(r.files, 400);
    assert!(r.bytes_total > 35 << 20, "{r:?}");
    assert!(
        r.bytes_read * 100 < r.bytes_total,
        "read {} of {}",
        r.bytes_read,
        r.bytes_total
    );
}
