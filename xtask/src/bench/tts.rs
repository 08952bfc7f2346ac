//! `cargo xtask bench tts`: Kokoro-82M in audiocpp (our GGUF in f32, f16 and q8_0) against
//! onnxruntime on the same phonemes and voice, in one run: the int8 ONNX export (what
//! the wheels ship) and the dequantized f32 graph the numerical checks compare against,
//! at 1 and 2 threads. With `--family qwen3_tts`: Qwen3-TTS 1.7B (the real architecture
//! with random weights; no released weights can be fetched here) in f16 and q8_0 against
//! the official qwen-tts code in PyTorch, a fixed number of frames. Real-time factor
//! (synthesis time / audio duration) and peak RSS side by side, with ratios. Reported,
//! never asserted.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use crate::assets;
use crate::project::{project_root, target_dir};

/// The TTS family a bench times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Family {
    /// Kokoro-82M against onnxruntime.
    Kokoro,
    /// Qwen3-TTS 1.7B (random weights) against the official code.
    #[value(name = "qwen3_tts")]
    Qwen3Tts,
}

/// Makes (once) a venv with the Qwen3-TTS reference's pins, the full-size random
/// checkpoint (once), converts it to f16 and q8_0 with this host's package's CLI, and runs
/// the Python driver.
pub fn bench_qwen3(
    ctx: &crate::context::RunContext,
    repeat: u32,
    python: Option<&Path>,
) -> Result<()> {
    let dir = target_dir().join("bench-qwen3");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let python = match python {
        Some(p) => p.to_path_buf(),
        None => qwen3_venv(&dir)?,
    };
    let script = project_root().join("xtask/python/qwen3_tts_fixtures.py");
    let checkpoint = dir.join("full_1b7_random");
    if !checkpoint.join("model.safetensors").is_file() {
        let status = Command::new(&python)
            .arg(&script)
            .arg("--full-size")
            .arg(&checkpoint)
            .arg("--cache")
            .arg(dir.join("cache"))
            .status()
            .context("making the full-size random checkpoint")?;
        anyhow::ensure!(
            status.success(),
            "the full-size checkpoint could not be made"
        );
    }
    let cli = super::exe(&crate::dist::host_package(ctx)?, "audiocpp_cli");
    let mut ggufs = Vec::new();
    for q in ["f16", "q8_0"] {
        let out = dir.join(format!("qwen3-tts-1b7-{q}.gguf"));
        if !out.is_file() {
            let run = Command::new(&cli)
                .args(["--task", "convert", "--family", "qwen3_tts", "--model"])
                .arg(&checkpoint)
                .args(["--quantize", q, "--out"])
                .arg(&out)
                .output()
                .with_context(|| format!("running {}", cli.display()))?;
            anyhow::ensure!(
                run.status.success(),
                "converting {} failed: {}",
                checkpoint.display(),
                String::from_utf8_lossy(&run.stderr).trim()
            );
        }
        ggufs.push(out);
    }
    println!("== bench tts --family qwen3_tts: audiocpp (ggml) vs the official qwen-tts (PyTorch)");
    super::run_driver(
        &python,
        "qwen3_tts_bench.py",
        "Qwen3-TTS",
        &[
            ("--cli", cli.as_os_str()),
            ("--checkpoint", checkpoint.as_os_str()),
            ("--gguf-f16", ggufs[0].as_os_str()),
            ("--gguf-q8_0", ggufs[1].as_os_str()),
        ],
        &[],
        repeat,
    )
}

/// The venv of the Qwen3-TTS reference (xtask/python/qwen3_tts_requirements.txt plus
/// qwen-tts without its demo's dependencies), made under `dir` once.
fn qwen3_venv(dir: &Path) -> Result<std::path::PathBuf> {
    let venv = dir.join("venv");
    let python = venv.join("bin/python");
    let stamp = venv.join(".complete");
    if stamp.is_file() {
        return Ok(python);
    }
    let run = |cmd: &mut Command, what: &str| -> Result<()> {
        let status = cmd.status().with_context(|| what.to_string())?;
        anyhow::ensure!(status.success(), "{what} failed");
        Ok(())
    };
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        "making the Qwen3-TTS venv",
    )?;
    let reqs = project_root().join("xtask/python/qwen3_tts_requirements.txt");
    run(
        Command::new(&python)
            .args(["-m", "pip", "install", "-q", "-r"])
            .arg(&reqs),
        "installing xtask/python/qwen3_tts_requirements.txt",
    )?;
    run(
        Command::new(&python).args(["-m", "pip", "install", "-q", "--no-deps", "qwen-tts==0.1.1"]),
        "installing qwen-tts==0.1.1",
    )?;
    std::fs::write(&stamp, "")?;
    Ok(python)
}

/// The weight types the GGUF is converted to: (file suffix, the `--quantize` value).
const WEIGHTS: [(&str, &str); 3] = [("f32", "f32"), ("f16", "f16"), ("q8_0", "q8_0")];

/// Builds and stages this host's package (the CLI users get, with its CPU variant
/// picked at start, as the other benches run it), converts the Kokoro sources to each
/// weight type with its CLI and runs the Python driver.
pub fn bench(ctx: &crate::context::RunContext, repeat: u32) -> Result<()> {
    let a = assets::ensure()?;
    let src = a.dir.join(assets::KOKORO_DIR);
    let out_dir = target_dir().join("bench-tts");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let cli = super::exe(&crate::dist::host_package(ctx)?, "audiocpp_cli");
    let mut ggufs = Vec::new();
    for (suffix, quantize) in WEIGHTS {
        let out = out_dir.join(format!("kokoro-{suffix}.gguf"));
        convert(&cli, &a.dir, quantize, &out)?;
        ggufs.push(out);
    }
    println!("== bench tts: audiocpp (ggml) vs onnxruntime, Kokoro-82M, voice af_heart");
    super::run_driver(
        &a.python,
        "tts_bench.py",
        "TTS",
        &[
            ("--cli", cli.as_os_str()),
            ("--gguf-f32", ggufs[0].as_os_str()),
            ("--gguf-f16", ggufs[1].as_os_str()),
            ("--gguf-q8_0", ggufs[2].as_os_str()),
            ("--onnx-int8", src.join("kokoro.onnx").as_os_str()),
            ("--onnx-f32", src.join("kokoro-f32.onnx").as_os_str()),
            ("--voices", src.join("voices").as_os_str()),
            ("--vocab", a.dir.join(assets::KOKORO_VOCAB).as_os_str()),
        ],
        &[],
        repeat,
    )
}

/// Converts the Kokoro sources in the asset dir `assets` to `out` (every run, so the
/// GGUF always comes from the converter being measured).
fn convert(cli: &Path, assets: &Path, quantize: &str, out: &Path) -> Result<()> {
    let src = assets.join(assets::KOKORO_DIR);
    let run = Command::new(cli)
        .args(["--task", "convert", "--family", "kokoro", "--model"])
        .arg(src.join("kokoro.onnx"))
        .arg("--voices")
        .arg(src.join("voices"))
        .arg("--vocab")
        .arg(assets.join(assets::KOKORO_VOCAB))
        .arg("--lexicons")
        .arg(assets.join(assets::MISAKI_DIR))
        .arg("--out")
        .arg(out)
        .arg("--model-spec-override")
        .arg(project_root().join("model_specs"))
        .args(["--quantize", quantize])
        .output()
        .with_context(|| format!("running {}", cli.display()))?;
    anyhow::ensure!(
        run.status.success(),
        "converting {} to {} failed: {}",
        src.display(),
        out.display(),
        String::from_utf8_lossy(&run.stderr).trim()
    );
    Ok(())
}
