//! `cargo xtask bench asr`: Whisper tiny.en and base in audiocpp (GGUF in f16 and q8_0) against
//! faster-whisper (the same CTranslate2 model in float32 and int8) on ~60 s of speech,
//! at 1 and 2 threads, in one run: real-time factor and peak RSS side by side, with
//! ratios. Reported, never asserted.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use crate::assets;
use crate::project::{project_root, target_dir};

/// The Whisper models the bench runs: (name, the CTranslate2 folder in the assets).
const MODELS: [(&str, &str); 2] = [
    ("tiny.en", "whisper-tiny.en-ct2"),
    ("base", "whisper-base-ct2"),
];

/// The weight types each model is converted to: (file suffix, the `--quantize` value).
const WEIGHTS: [(&str, Option<&str>); 2] = [("f16", None), ("q8_0", Some("q8_0"))];

/// Stages the host package, converts each model both ways and runs the Python driver
/// once per model.
pub fn bench(repeat: u32) -> Result<()> {
    let a = assets::ensure()?;
    let root = project_root();
    let cli = super::exe(&crate::dist::host_package()?, "audiocpp_cli");
    let out_dir = target_dir().join("bench-asr");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    for (model, folder) in MODELS {
        let ct2 = a.dir.join(folder);
        let mut ggufs = Vec::new();
        for (suffix, quantize) in WEIGHTS {
            let out = out_dir.join(format!("whisper-{model}-{suffix}.gguf"));
            convert(&cli, &ct2, &root.join("model_specs"), quantize, &out)?;
            ggufs.push(out);
        }
        println!("== bench asr: audiocpp (ggml) vs faster-whisper (CTranslate2), Whisper {model}");
        super::run_driver(
            &a.python,
            "asr_bench.py",
            "ASR",
            &[
                ("--cli", cli.as_os_str()),
                ("--ct2", ct2.as_os_str()),
                ("--f16", ggufs[0].as_os_str()),
                ("--q8", ggufs[1].as_os_str()),
                ("--audio", a.dir.join("clips/long.wav").as_os_str()),
            ],
            repeat,
        )?;
    }
    Ok(())
}

/// Converts the CTranslate2 model to `out` (every run, so the GGUF always comes from
/// the converter being measured).
fn convert(cli: &Path, ct2: &Path, specs: &Path, quantize: Option<&str>, out: &Path) -> Result<()> {
    let mut cmd = Command::new(cli);
    cmd.args(["--task", "convert", "--family", "whisper", "--model"])
        .arg(ct2)
        .arg("--out")
        .arg(out)
        .arg("--model-spec-override")
        .arg(specs);
    if let Some(q) = quantize {
        cmd.args(["--quantize", q]);
    }
    let run = cmd
        .output()
        .with_context(|| format!("running {}", cli.display()))?;
    anyhow::ensure!(
        run.status.success(),
        "converting {} to {} failed: {}",
        ct2.display(),
        out.display(),
        String::from_utf8_lossy(&run.stderr).trim()
    );
    Ok(())
}
