//! `cargo xtask bench`: speed and memory measured against a peer in the same run,
//! printed as ratios (never asserted as timed unit tests).

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, ExitCode};

use anyhow::{Context, Result};

use crate::assets;
use crate::context::RunContext;
use crate::project::project_root;

mod asr;
pub mod deps;
pub mod dist;
pub mod kernels;
pub mod tts;

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
    /// TTS: Kokoro-82M (f32, f16, q8_0) vs onnxruntime, or with `--family qwen3_tts`
    /// Qwen3-TTS 1.7B (random weights, f16, q8_0) vs the official code; 1 and 2 threads.
    Tts,
    /// audiocpp_server's per-request overhead for VAD and ASR vs direct CLI runs, and
    /// 8 concurrent Whisper clients at parallel 1, 2, 4, 8 vs faster-whisper's
    /// BatchedInferencePipeline (requests/s, p50/p99, peak RSS).
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
    /// The CPU the `asr` bench acts as: `native` (this one), or `avx2`, a CPU without
    /// AVX-512, with both sides capped (our kernels, ggml's CPU variants, CTranslate2
    /// and MKL).
    #[arg(long, value_enum, default_value = "native")]
    pub cpu_isa: asr::CpuIsa,
    /// The family the `tts` bench times.
    #[arg(long, value_enum, default_value = "kokoro")]
    pub family: tts::Family,
    /// `tts --family qwen3_tts`: a Python with torch, transformers 4.57.3 and qwen-tts
    /// 0.1.1 (xtask/python/qwen3_tts_requirements.txt); default: a venv made from those
    /// pins under target/bench-qwen3/ (about 5.4 GB, once).
    #[arg(long)]
    pub qwen3_python: Option<std::path::PathBuf>,
}

/// Runs the verb.
pub fn run(args: Args, ctx: &RunContext) -> Result<ExitCode> {
    let all = matches!(args.suite, Suite::All);
    anyhow::ensure!(
        args.cpu_isa == asr::CpuIsa::Native || matches!(args.suite, Suite::Asr),
        "--cpu-isa applies to the asr bench only: run `cargo xtask bench asr --cpu-isa {}`",
        args.cpu_isa.name()
    );
    // The benches time this very binary (in-process steps, and `dist` run again through
    // current_exe): it must be the optimized build `cargo xtask` users get.
    anyhow::ensure!(
        !cfg!(debug_assertions),
        "this xtask is a debug build, not what users run: run the benches as `cargo xtask bench ...` (built with [profile.xtask])"
    );
    if all || matches!(args.suite, Suite::Vad) {
        bench_vad(ctx, args.repeat)?;
    }
    if all || matches!(args.suite, Suite::Deps) {
        deps::bench(ctx)?;
    }
    if all || matches!(args.suite, Suite::Kernels) {
        kernels::bench(ctx)?;
    }
    if all || matches!(args.suite, Suite::Asr) {
        asr::bench(ctx, args.repeat, args.cpu_isa)?;
    }
    if all || matches!(args.suite, Suite::Tts) {
        match args.family {
            tts::Family::Kokoro => tts::bench(ctx, args.repeat)?,
            tts::Family::Qwen3Tts => {
                tts::bench_qwen3(ctx, args.repeat, args.qwen3_python.as_deref())?
            }
        }
    }
    if all || matches!(args.suite, Suite::Server) {
        bench_server(ctx, args.repeat)?;
    }
    if all || matches!(args.suite, Suite::Dist) {
        dist::bench()?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Executable `name` of a staged package folder (see [`crate::dist::host_package`]).
fn exe(package: &Path, name: &str) -> std::path::PathBuf {
    package.join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
}

/// Runs `xtask/python/<script>` in the reference venv with `--flag value` pairs and
/// `--repeat`, and `env` set for it and what it starts; the driver prints its own table.
fn run_driver(
    python: &Path,
    script: &str,
    what: &str,
    flags: &[(&str, &OsStr)],
    env: &[(&str, &str)],
    repeat: u32,
) -> Result<()> {
    let mut cmd = Command::new(python);
    cmd.arg(project_root().join("xtask/python").join(script));
    cmd.envs(env.iter().copied());
    for (flag, value) in flags {
        cmd.arg(flag).arg(value);
    }
    let status = cmd
        .arg("--repeat")
        .arg(repeat.to_string())
        .status()
        .with_context(|| format!("running the {what} bench"))?;
    anyhow::ensure!(status.success(), "the {what} bench failed");
    Ok(())
}

fn bench_vad(ctx: &RunContext, repeat: u32) -> Result<()> {
    let a = assets::ensure()?;
    let cli = exe(&crate::dist::host_package(ctx)?, "audiocpp_cli");
    println!("== bench vad: audiocpp (ggml) vs onnxruntime (official Silero ONNX)");
    run_driver(
        &a.python,
        "vad_bench.py",
        "VAD",
        &[
            ("--cli", cli.as_os_str()),
            ("--model", a.dir.join("ggml-silero-v6.2.0.bin").as_os_str()),
            ("--specs", project_root().join("model_specs").as_os_str()),
            ("--onnx", a.dir.join("silero_vad.onnx").as_os_str()),
            ("--audio", a.dir.join("clips/long.wav").as_os_str()),
        ],
        &[],
        repeat,
    )
}

fn bench_server(ctx: &RunContext, repeat: u32) -> Result<()> {
    let a = assets::ensure()?;
    let package = crate::dist::host_package(ctx)?;
    let (cli, server) = (
        exe(&package, "audiocpp_cli"),
        exe(&package, "audiocpp_server"),
    );
    run_driver(
        &a.python,
        "server_bench.py",
        "server",
        &[
            ("--server", server.as_os_str()),
            ("--cli", cli.as_os_str()),
            (
                "--vad-model",
                a.dir.join("ggml-silero-v6.2.0.bin").as_os_str(),
            ),
            ("--specs", project_root().join("model_specs").as_os_str()),
            ("--asr-ct2", a.dir.join(assets::WHISPER_CT2_DIR).as_os_str()),
            ("--vad-audio", a.dir.join("clips/long.wav").as_os_str()),
            (
                "--asr-audio",
                a.dir.join("clips-asr/phrase_en_us.wav").as_os_str(),
            ),
            (
                "--conc-audio",
                a.dir.join("clips/speech_gaps.wav").as_os_str(),
            ),
        ],
        &[],
        repeat,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_isa_is_refused_for_other_suites_before_any_work() {
        for suite in [Suite::Vad, Suite::Server, Suite::All] {
            let args = Args {
                suite,
                repeat: 1,
                cpu_isa: asr::CpuIsa::Avx2,
                family: tts::Family::Kokoro,
                qwen3_python: None,
            };
            let err = run(args, &RunContext::default()).unwrap_err();
            assert!(
                err.to_string().contains("bench asr --cpu-isa avx2"),
                "{suite:?}: {err}"
            );
        }
    }
}
