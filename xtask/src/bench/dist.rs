//! Benchmark of `dist`: package a 1.3 GB rocm6-sized SDK (ROCm 6.4 rocBLAS plus a
//! hipBLASLt tree, code-like file contents) end to end, then zip the same staged package
//! folder with Info-ZIP's `zip -r -6` and p7zip's `7z a -tzip`. Each tool runs under GNU
//! `time` for wall time and peak RSS; the table prints sizes and ratios against ours.
//!
//! The SDK is generated under `<target dir>/dist-bench/` and removed at the end.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::dist::archive::{self, ZipEntry};
use crate::kernels::fixtures::{bench_tree, Fill};
use crate::kernels::report::human_mb;
use crate::toolset::tools::which;

/// The package the rocm6 track writes.
const PACKAGE: &str = "audiocpp-windows-hip-rocm6";

/// One measured run.
#[derive(Debug)]
struct Measured {
    tool: &'static str,
    seconds: f64,
    peak_rss_kb: u64,
    zip_bytes: u64,
}

/// Runs the benchmark and prints the comparison table.
pub fn bench() -> Result<()> {
    for tool in ["zip", "7z", "time"] {
        if which(tool).is_none() {
            bail!("the dist bench needs `{tool}`: apt-get install zip p7zip-full time");
        }
    }
    let dir = crate::project::target_dir().join("dist-bench");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing old {}", dir.display()))?;
    }
    let result = run(&dir);
    let cleanup =
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()));
    result.and(cleanup)
}

fn run(dir: &Path) -> Result<()> {
    let start = Instant::now();
    let fake = crate::dist::fixtures::windows_hip(dir, 6, &bench_tree(), Fill::Code)?;
    let sdk_bytes = folder_bytes(&fake.sdk)?;
    println!(
        "== bench dist: rocm6 package from a generated SDK of {} (written in {:.1} s)",
        human_mb(sdk_bytes),
        start.elapsed().as_secs_f64()
    );
    let out = dir.join("out");
    let xtask = std::env::current_exe().context("locating the xtask binary")?;
    let mut ours = Command::new(&xtask);
    ours.args([
        "dist",
        "--track",
        "rocm6",
        "--allow-uncovered",
        "--rocm-path",
    ])
    .arg(&fake.sdk)
    .arg("--crt-dir")
    .arg(&fake.crt)
    .arg("--bin-dir")
    .arg(&fake.bin)
    .arg("--out-dir")
    .arg(&out)
    .env("SOURCE_DATE_EPOCH", "1700000000")
    .env("CI", "1");
    let mut results = vec![timed(
        "xtask dist (all steps)",
        ours,
        &out.join(format!("{PACKAGE}.zip")),
    )?];
    let staged = out.join(PACKAGE);
    let staged_bytes = folder_bytes(&staged)?;
    println!(
        "   staged package: {} in {} files (kernels filtered to the rocm6 targets)",
        human_mb(staged_bytes),
        walkdir::WalkDir::new(&staged)
            .into_iter()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_file())
            .count()
    );
    results.push(zip_step_alone(&staged, &dir.join("zip-step.zip"))?);

    let info_zip = dir.join("info-zip.zip");
    let mut zip = Command::new("zip");
    zip.current_dir(&out)
        .args(["-r", "-6", "-q"])
        .arg(&info_zip)
        .arg(PACKAGE);
    results.push(timed("zip -r -6", zip, &info_zip)?);

    let p7 = dir.join("7z.zip");
    let mut seven = Command::new("7z");
    seven
        .current_dir(&out)
        .args(["a", "-tzip", "-bd", "-bso0"])
        .arg(&p7)
        .arg(PACKAGE);
    results.push(timed("7z a -tzip", seven, &p7)?);

    print!("{}", table(&results));
    Ok(())
}

/// Our zip writer alone on the staged folder, timed in this process (no RSS figure).
fn zip_step_alone(staged: &Path, zip: &Path) -> Result<Measured> {
    let mut entries = Vec::new();
    for e in walkdir::WalkDir::new(staged) {
        let e = e?;
        if e.file_type().is_file() {
            let rel = e.path().strip_prefix(staged.parent().unwrap_or(staged))?;
            entries.push(ZipEntry {
                name: rel.to_string_lossy().replace('\\', "/"),
                src: e.path().to_path_buf(),
                executable: false,
            });
        }
    }
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let start = Instant::now();
    archive::write_zip(
        &entries,
        zip,
        archive::zip_time(1_700_000_000),
        threads,
        &|_| {},
    )?;
    Ok(Measured {
        tool: "xtask zip step only",
        seconds: start.elapsed().as_secs_f64(),
        peak_rss_kb: 0,
        zip_bytes: std::fs::metadata(zip)?.len(),
    })
}

/// Runs `cmd` under GNU time and reads back wall seconds and peak RSS.
fn timed(tool: &'static str, cmd: Command, zip: &Path) -> Result<Measured> {
    let report = zip.with_extension("time");
    if let Some(parent) = report.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut wrapped = Command::new(which("time").context("GNU time is missing")?);
    wrapped
        .arg("-f")
        .arg("%e %M")
        .arg("-o")
        .arg(&report)
        .arg(cmd.get_program());
    wrapped.args(cmd.get_args());
    if let Some(dir) = cmd.get_current_dir() {
        wrapped.current_dir(dir);
    }
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            wrapped.env(k, v);
        }
    }
    let output = wrapped
        .output()
        .with_context(|| format!("running {tool}"))?;
    if !output.status.success() {
        bail!(
            "{tool} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let text = std::fs::read_to_string(&report)?;
    let mut fields = text.split_whitespace();
    let seconds: f64 = fields.next().context("no time")?.parse()?;
    let peak_rss_kb: u64 = fields.next().context("no RSS")?.parse()?;
    Ok(Measured {
        tool,
        seconds,
        peak_rss_kb,
        zip_bytes: std::fs::metadata(zip)
            .with_context(|| format!("{tool} wrote no {}", zip.display()))?
            .len(),
    })
}

fn table(results: &[Measured]) -> String {
    let ours = &results[0];
    let mut s = format!(
        "   {:<24} {:>9} {:>11} {:>13} {:>14} {:>12}\n",
        "tool", "wall s", "zip", "peak RSS", "time vs ours", "size vs ours"
    );
    for r in results {
        let rss = if r.peak_rss_kb == 0 {
            "-".to_string()
        } else {
            format!("{:.0} MB", r.peak_rss_kb as f64 / 1024.0)
        };
        s += &format!(
            "   {:<24} {:>9.2} {:>11} {:>13} {:>13.2}x {:>11.3}x\n",
            r.tool,
            r.seconds,
            human_mb(r.zip_bytes),
            rss,
            r.seconds / ours.seconds,
            r.zip_bytes as f64 / ours.zip_bytes as f64
        );
    }
    s
}

fn folder_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for e in walkdir::WalkDir::new(dir) {
        let e = e?;
        if e.file_type().is_file() {
            total += e.metadata()?.len();
        }
    }
    Ok(total)
}
