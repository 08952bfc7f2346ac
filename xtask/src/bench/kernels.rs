//! Benchmark of the kernel filter: classify 50,000 names, then filter a 1.3 GB tree of
//! real (zero-filled) files and compare with GNU `cp -r` of the kept files.
//!
//! The tree is written under `<target dir>/kernels-bench/` and removed at the end.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::gpu_target::{classify, ArchClass};
use crate::kernels::filter::{
    execute, parse_targets, plan, CoverageNotes, ExecuteOptions, LinkMode,
};
use crate::kernels::fixtures::{
    bench_tree, listing_entries, rocm6_targets, write_tree, Fill, HIPBLASLT_711_LISTING,
    ROCBLAS_644_LISTING, ROCBLAS_724_LISTING,
};
use crate::kernels::report::human_mb;

/// Names classified by the first measurement.
pub const CLASSIFY_NAMES: usize = 50_000;

/// Runs the benchmark and prints timings and ratios.
pub fn bench(ctx: &crate::context::RunContext) -> anyhow::Result<()> {
    bench_classify()?;
    let dir = crate::project::target_dir().join("kernels-bench");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing old {}", dir.display()))?;
    }
    let result = bench_filter(ctx, &dir);
    let cleanup =
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()));
    result.and(cleanup)
}

fn bench_classify() -> anyhow::Result<()> {
    let mut names: Vec<String> = Vec::with_capacity(CLASSIFY_NAMES);
    let listed: Vec<&str> = [
        ROCBLAS_644_LISTING,
        ROCBLAS_724_LISTING,
        HIPBLASLT_711_LISTING,
    ]
    .into_iter()
    .flat_map(listing_entries)
    .map(|(name, _)| name)
    .collect();
    let folders = ["", "gfx1100/", "gfx942/"];
    'fill: for folder in folders.iter().cycle() {
        for name in &listed {
            if names.len() == CLASSIFY_NAMES {
                break 'fill;
            }
            names.push(format!("{folder}{name}"));
        }
    }
    let start = Instant::now();
    let mut specific = 0usize;
    for name in &names {
        if classify(Path::new(name))? != ArchClass::Independent {
            specific += 1;
        }
    }
    let took = start.elapsed();
    println!(
        "classify: {} names in {:.1} ms ({:.0} ns/name, {} arch-specific)",
        names.len(),
        ms(took),
        took.as_nanos() as f64 / names.len() as f64,
        specific
    );
    Ok(())
}

fn bench_filter(ctx: &crate::context::RunContext, dir: &Path) -> anyhow::Result<()> {
    let src = dir.join("sdk");
    let spec = bench_tree();
    let start = Instant::now();
    let files = write_tree(&spec, &src, Fill::Zeros)?;
    let total: u64 = files.iter().map(|f| f.size).sum();
    println!(
        "generate: {} files, {} in {:.1} s",
        files.len(),
        human_mb(total),
        start.elapsed().as_secs_f64()
    );

    settle();
    let names = rocm6_targets(ctx)?;
    let targets = parse_targets(&names.iter().map(String::as_str).collect::<Vec<_>>())?;
    let start = Instant::now();
    let plan = plan(&src, &targets, &CoverageNotes::default())?;
    let plan_time = start.elapsed();
    println!(
        "plan: {} kept ({}), {} dropped ({}) in {:.1} ms",
        plan.libraries.iter().map(|l| l.kept.len()).sum::<usize>(),
        human_mb(plan.kept_bytes()),
        plan.libraries
            .iter()
            .map(|l| l.dropped.len())
            .sum::<usize>(),
        human_mb(plan.dropped_bytes()),
        ms(plan_time)
    );

    // Each way runs ROUNDS times, interleaved, and the best time counts: the disk is
    // shared and one order alone measures writeback of the previous step.
    let mut best = [Duration::MAX; 3];
    let mut counts = (0, 0);
    for _ in 0..ROUNDS {
        for (way, slot) in best.iter_mut().enumerate() {
            let dst = dir.join(format!("out-{way}"));
            settle();
            let start = Instant::now();
            match way {
                0 => copy_with_cp(&plan, &src, &dst)?,
                _ => {
                    let link = if way == 1 {
                        LinkMode::Auto
                    } else {
                        LinkMode::Copy
                    };
                    let summary = execute(&plan, &dst, &ExecuteOptions { force: false, link })?;
                    if way == 1 {
                        counts = (summary.linked, summary.copied);
                    }
                }
            }
            let took = start.elapsed() + if way == 0 { Duration::ZERO } else { plan_time };
            *slot = (*slot).min(took);
            std::fs::remove_dir_all(&dst).with_context(|| format!("removing {}", dst.display()))?;
        }
    }
    println!("best of {ROUNDS}, plan time included in the filter's:");
    println!("cp -r of the kept files: {:.1} ms", ms(best[0]));
    println!(
        "filter (hard links): {:.1} ms ({} linked, {} copied); ratio to cp -r {:.2}",
        ms(best[1]),
        counts.0,
        counts.1,
        best[1].as_secs_f64() / best[0].as_secs_f64().max(1e-9)
    );
    println!(
        "filter (--copy): {:.1} ms; ratio to cp -r {:.2}",
        ms(best[2]),
        best[2].as_secs_f64() / best[0].as_secs_f64().max(1e-9)
    );
    Ok(())
}

/// Rounds per measurement.
const ROUNDS: usize = 3;

/// The baseline: GNU `cp -r --parents` of exactly the kept files, per library folder.
fn copy_with_cp(
    plan: &crate::kernels::filter::FilterPlan,
    src: &Path,
    dst: &Path,
) -> anyhow::Result<()> {
    for lib in &plan.libraries {
        let to = dst.join(&lib.dest_dir);
        std::fs::create_dir_all(&to).with_context(|| format!("creating {}", to.display()))?;
        let status = Command::new("cp")
            .arg("--parents")
            .arg("-r")
            .arg("-t")
            .arg(&to)
            .args(lib.kept.iter().map(|f| &f.rel_path))
            .current_dir(src.join(&lib.source_dir))
            .status()
            .context("running cp")?;
        anyhow::ensure!(status.success(), "cp failed with {status}");
    }
    Ok(())
}

/// Flushes dirty pages (`sync`) so one measurement does not pay for the last one's
/// writeback; a missing `sync` only makes the numbers noisier.
fn settle() {
    let _ = Command::new("sync").status();
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
