//! `cargo xtask bench deps`: verify a package tree the size of a real ROCm package
//! (5,000 files, 1 GB, mostly kernel files) and print files/s. Checking must cost one small
//! read per kernel file, so the time is dominated by headers, not file sizes.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;

use crate::context::RunContext;
use crate::verify_deps::synth::{self, PeSpec};
use crate::verify_deps::{check, input, Policy};

/// One timed verification.
#[derive(Debug, Clone, Copy)]
pub struct BenchResult {
    /// Files in the tree.
    pub files: u64,
    /// Their total size.
    pub bytes_total: u64,
    /// Bytes read to verify them.
    pub bytes_read: u64,
    /// Wall time of the warm run.
    pub seconds: f64,
    /// Whether the tree passed the check (it is built to).
    pub passed: bool,
}

impl BenchResult {
    /// Files verified per second.
    pub fn files_per_second(&self) -> f64 {
        self.files as f64 / self.seconds.max(1e-9)
    }
}

/// The full bench: a 5,000-file, 1 GB rocm6 tree under the target dir, verified warm.
pub fn bench(ctx: &RunContext) -> anyhow::Result<()> {
    let dir = crate::project::target_dir().join("verify-deps-bench");
    let r = bench_tree(ctx, &dir, 5_000, 1 << 30)?;
    println!(
        "verify-deps bench: {} files, {:.1} MB, {:.3} s warm, {:.0} files/s, read {:.2} MB ({:.3}% of the bytes), {}",
        r.files,
        r.bytes_total as f64 / 1e6,
        r.seconds,
        r.files_per_second(),
        r.bytes_read as f64 / 1e6,
        100.0 * r.bytes_read as f64 / r.bytes_total.max(1) as f64,
        if r.passed { "package passed" } else { "package FAILED" }
    );
    anyhow::ensure!(
        r.passed,
        "the bench package should pass verify-deps --track rocm6"
    );
    Ok(())
}

/// Builds (once; reused while its size marker matches) a rocm6-shaped tree of `files`
/// files and about `bytes` bytes under `dir`, verifies it once to warm the page cache,
/// then times a second run.
pub fn bench_tree(
    ctx: &RunContext,
    dir: &Path,
    files: usize,
    bytes: u64,
) -> anyhow::Result<BenchResult> {
    let pkg = dir.join("audiocpp-windows-hip-rocm6");
    let marker = dir.join(format!("complete-{files}-{bytes}"));
    if !marker.exists() {
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
        write_tree(&pkg, files, bytes)?;
        std::fs::write(&marker, b"")?;
    }
    let policy = Policy::new(ctx.tracks()?, ctx.tracks_path(), Some("rocm6"))?;
    let run = || -> anyhow::Result<(crate::verify_deps::Report, f64)> {
        let t = Instant::now();
        let p = input::read_dir(&pkg)?;
        let r = check(&p, &policy);
        Ok((r, t.elapsed().as_secs_f64()))
    };
    run()?; // warm
    let (report, seconds) = run()?;
    if !report.passed() {
        eprint!("{}", report.render_text());
    }
    Ok(BenchResult {
        files: report.stats.files,
        bytes_total: report.stats.bytes_total,
        bytes_read: report.stats.bytes_read,
        seconds,
        passed: report.passed(),
    })
}

fn write(path: PathBuf, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// Writes a clean `rocm6` package at `pkg`: executables, ggml libraries and CPU
/// variants, the HIP runtime and CRT DLLs (PE files from [`synth`]), then hipBLASLt kernel
/// files (`.dat` data, `.co`/`.hsaco` AMDGPU ELF headers) up to `files` files and about
/// `bytes` bytes in all. Tests plant faults into it.
pub fn write_tree(pkg: &Path, files: usize, bytes: u64) -> anyhow::Result<()> {
    let lib = pkg.join("hipblaslt/library");
    std::fs::create_dir_all(&lib).with_context(|| format!("creating {}", lib.display()))?;
    let crt = ["MSVCP140.dll", "VCRUNTIME140.dll", "VCRUNTIME140_1.dll"];
    let api = "api-ms-win-crt-runtime-l1-1-0.dll";
    let dll = |imports: &[&str]| synth::pe(&PeSpec::new(true, imports));
    let mut bins: Vec<(String, Vec<u8>)> = vec![
        (
            "audiocpp_cli.exe".into(),
            synth::pe(&PeSpec::new(
                false,
                &[
                    "ggml.dll",
                    "ggml-base.dll",
                    "KERNEL32.dll",
                    "VCRUNTIME140.dll",
                    api,
                ],
            )),
        ),
        (
            "audiocpp_server.exe".into(),
            synth::pe(&PeSpec::new(
                false,
                &[
                    "ggml.dll",
                    "ggml-base.dll",
                    "KERNEL32.dll",
                    "WS2_32.dll",
                    api,
                ],
            )),
        ),
        (
            "ggml.dll".into(),
            dll(&["ggml-base.dll", "KERNEL32.dll", crt[0], crt[1], crt[2]]),
        ),
        (
            "ggml-base.dll".into(),
            dll(&["KERNEL32.dll", crt[0], crt[1], crt[2], api]),
        ),
        // ggml-hip built with the hipBLASLt GEMM route (gemm/): no hipBLAS, no rocBLAS.
        (
            "ggml-hip.dll".into(),
            dll(&[
                "ggml-base.dll",
                "hipblaslt.dll",
                "amdhip64_6.dll",
                "KERNEL32.dll",
                crt[0],
                crt[1],
            ]),
        ),
        (
            "hipblaslt.dll".into(),
            dll(&["amdhip64_6.dll", "KERNEL32.dll", crt[0], crt[1], crt[2]]),
        ),
        (
            "amdhip64_6.dll".into(),
            dll(&[
                "KERNEL32.dll",
                "ADVAPI32.dll",
                "SETUPAPI.dll",
                crt[0],
                crt[1],
            ]),
        ),
        ("amd_comgr_2.dll".into(), {
            let mut s = PeSpec::new(true, &["KERNEL32.dll", crt[0], crt[1]]);
            s.delay_imports = vec!["VERSION.dll".into()];
            synth::pe(&s)
        }),
        (
            "msvcp140.dll".into(),
            dll(&["KERNEL32.dll", "vcruntime140.dll", api]),
        ),
        ("vcruntime140.dll".into(), dll(&["KERNEL32.dll", api])),
        (
            "vcruntime140_1.dll".into(),
            dll(&["KERNEL32.dll", "vcruntime140.dll"]),
        ),
    ];
    for v in [
        "x64",
        "sse42",
        "sandybridge",
        "haswell",
        "skylakex",
        "icelake",
        "alderlake",
        "zen4",
    ] {
        bins.push((
            format!("ggml-cpu-{v}.dll"),
            dll(&["ggml-base.dll", "KERNEL32.dll", crt[0], crt[1]]),
        ));
    }
    for (name, b) in &bins {
        write(pkg.join(name), b)?;
    }
    let kernels = files.saturating_sub(bins.len()).max(1);
    let per = (bytes / kernels as u64).max(64) as usize;
    // A buffer of pseudo-random bytes (xorshift, fixed seed) reused for every file.
    let mut fill = vec![0u8; per + 8192];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for chunk in fill.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let n = chunk.len();
        chunk.copy_from_slice(&x.to_le_bytes()[..n]);
    }
    let amdgpu = synth::elf(&synth::ElfSpec {
        machine: 224,
        ..Default::default()
    });
    let targets = [
        "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1200", "gfx1201",
    ];
    for i in 0..kernels {
        let gfx = targets[i % targets.len()];
        let size = (per + (i * 4099) % 4096)
            .saturating_sub(2048)
            .max(amdgpu.len() + 8);
        let mut data = fill[(i * 7) % 4096..][..size].to_vec();
        let name = match i % 3 {
            0 => {
                format!("TensileLibrary_Type_HH_Contraction_l_Ailk_Bljk_Cijk_Dijk_{gfx}_{i:05}.dat")
            }
            1 => {
                data[..amdgpu.len()].copy_from_slice(&amdgpu);
                format!("TensileLibrary_Type_HH_Contraction_l_Ailk_Bljk_Cijk_Dijk_{gfx}_{i:05}.co")
            }
            _ => {
                data[..amdgpu.len()].copy_from_slice(&amdgpu);
                format!("Kernels.so-000-{gfx}-{i:05}.hsaco")
            }
        };
        write(lib.join(name), &data)?;
    }
    Ok(())
}
