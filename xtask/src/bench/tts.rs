//! `cargo xtask bench tts`: Kokoro-82M in audiocpp (our GGUF in f32, f16 and q8_0) against
//! onnxruntime on the same phonemes and voice, in one run: the int8 ONNX export (what
//! the wheels ship) and the dequantized f32 graph the numerical checks compare against,
//! at 1 and 2 threads. Real-time factor (synthesis time / audio duration) and peak RSS
//! side by side, with ratios. Reported, never asserted.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use crate::assets;
use crate::project::{project_root, target_dir};

/// The weight types the GGUF is converted to: (file suffix, the `--quantize` value).
const WEIGHTS: [(&str, &str); 3] = [("f32", "f32"), ("f16", "f16"), ("q8_0", "q8_0")];

/// Builds and stages this host's package (the CLI users get, with its CPU variant
/// picked at start, as the other benches run it), converts the Kokoro sources to each
/// weight type with its CLI and runs the Python driver.
pub fn bench(repeat: u32) -> Result<()> {
    let a = assets::ensure()?;
    let src = a.dir.join(assets::KOKORO_DIR);
    let out_dir = target_dir().join("bench-tts");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let cli = super::exe(&crate::dist::host_package()?, "audiocpp_cli");
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
