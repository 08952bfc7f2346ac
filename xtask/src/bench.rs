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
    /// audiocpp_server's per-request overhead for VAD and ASR vs direct CLI runs.
    Server,
    /// `dist` of a 1.3 GB rocm6-sized SDK vs `zip -r -6` and `7z a -tzip`.
    Dist,
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
    if all || matches!(args.suite, Suite::Server) {
        bench_server(args.repeat)?;
    }
    if all || matches!(args.suite, Suite::Dist) {
        crate::dist::bench::bench()?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Builds the release binaries and returns the path of `name` among them.
fn release_binary(name: &str) -> Result<std::path::PathBuf> {
    let status = cargo()
        .current_dir(project_root())
        .args([
            "build",
            "--release",
            "-p",
            "audiocpp-cli",
            "-p",
            "audiocpp-server",
        ])
        .status()
        .context("building the release binaries")?;
    anyhow::ensure!(status.success(), "building the release binaries failed");
    Ok(crate::project::target_dir()
        .join("release")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX)))
}

fn bench_vad(repeat: u32) -> Result<()> {
    let a = assets::ensure()?;
    let root = project_root();
    let cli = release_binary("audiocpp_cli")?;
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

fn bench_server(repeat: u32) -> Result<()> {
    let a = assets::ensure()?;
    let root = project_root();
    let cli = release_binary("audiocpp_cli")?;
    let server = release_binary("audiocpp_server")?;
    let status = Command::new(&a.python)
        .arg(root.join("xtask/python/server_bench.py"))
        .arg("--server")
        .arg(&server)
        .arg("--cli")
        .arg(&cli)
        .arg("--vad-model")
        .arg(a.dir.join("ggml-silero-v6.2.0.bin"))
        .arg("--specs")
        .arg(root.join("model_specs"))
        .arg("--asr-ct2")
        .arg(a.dir.join(assets::WHISPER_CT2_DIR))
        .arg("--vad-audio")
        .arg(a.dir.join("clips/long.wav"))
        .arg("--asr-audio")
        .arg(a.dir.join("clips-asr/phrase_en_us.wav"))
        .arg("--repeat")
        .arg(repeat.to_string())
        .status()
        .context("running the server bench")?;
    anyhow::ensure!(status.success(), "the server bench failed");
    Ok(())
}
