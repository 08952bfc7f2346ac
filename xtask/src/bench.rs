//! `cargo xtask bench`: speed and memory measured against a peer in the same run,
//! printed as ratios (never asserted as timed unit tests).

use std::process::{Command, ExitCode};

use anyhow::{Context, Result};

use crate::assets;
use crate::project::project_root;
use crate::test::cargo;

mod asr;

/// What to benchmark.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Suite {
    /// Silero VAD vs onnxruntime on ~60 s of speech, 1 and 2 threads, plus peak RSS.
    Vad,
    /// verify-deps on a 5,000-file, 1 GB package tree.
    Deps,
    /// Kernel-name classification and a 1.3 GB kernel-tree filter vs `cp -r`.
    Kernels,
    /// Whisper tiny.en (f16, q8_0) vs faster-whisper (float32, int8) on ~60 s of speech.
    Asr,
    /// Everything above.
    All,
}

/// Flags of `cargo xtask bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which benchmark to run.
    #[arg(value_enum, default_value = "all")]
    pub suite: Suite,
    /// Repetitions per measurement (medians are printed).
    #[arg(long, default_value_t = 5)]
    pub repeat: u32,
}

/// Runs the verb.
pub fn run(args: Args) -> Result<ExitCode> {
    let all = matches!(args.suite, Suite::All);
    if all || matches!(args.suite, Suite::Vad) {
        bench_vad(args.repeat)?;
    }
    if all || matches!(args.suite, Suite::Deps) {
        crate::verify_deps::bench::bench()?;
    }
    if all || matches!(args.suite, Suite::Kernels) {
        crate::kernels::bench::bench()?;
    }
    if all || matches!(args.suite, Suite::Asr) {
        asr::bench(args.repeat)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn bench_vad(repeat: u32) -> Result<()> {
    let a = assets::ensure()?;
    let root = project_root();
    let status = cargo()
        .current_dir(&root)
        .args(["build", "--release", "-p", "audiocpp-cli"])
        .status()
        .context("building audiocpp_cli")?;
    anyhow::ensure!(status.success(), "building audiocpp_cli failed");
    let cli = crate::project::target_dir()
        .join("release")
        .join(format!("audiocpp_cli{}", std::env::consts::EXE_SUFFIX));
    println!("== bench vad: audiocpp (ggml) vs onnxruntime (official Silero ONNX)");
    let status = Command::new(&a.python)
        .arg(root.join("xtask/python/vad_bench.py"))
        .arg("--cli")
        .arg(&cli)
        .arg("--model")
        .arg(a.dir.join("ggml-silero-v6.2.0.bin"))
        .arg("--specs")
        .arg(root.join("model_specs"))
        .arg("--onnx")
        .arg(a.dir.join("silero_vad.onnx"))
        .arg("--audio")
        .arg(a.dir.join("clips/long.wav"))
        .arg("--repeat")
        .arg(repeat.to_string())
        .status()
        .context("running the VAD bench")?;
    anyhow::ensure!(status.success(), "the VAD bench failed");
    Ok(())
}
