//! `cargo xtask bench asr`: Whisper tiny.en and base in audiocpp (GGUF in f16 and q8_0) against
//! faster-whisper (the same CTranslate2 model in float32 and int8) on ~60 s of speech,
//! at 1 and 2 threads, in one run: real-time factor and peak RSS side by side, with
//! ratios. Both decode greedily in their default mode, with timestamp tokens (every
//! window read, seeking to the last timestamp). Reported, never asserted.
//!
//! `--cpu-isa avx2` measures what a CPU without AVX-512 gets, on this one: our kernels
//! capped at AVX2 (`AUDIOCPP_CPU_KERNELS=avx2`), ggml's CPU variants up to Haswell (a
//! copy of the package without the others), and faster-whisper with CTranslate2's and
//! MKL's dispatch capped at AVX2 (`CT2_FORCE_CPU_ISA`, `MKL_ENABLE_INSTRUCTIONS`).

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

/// The CPU the bench acts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CpuIsa {
    /// This CPU, with everything it has.
    Native,
    /// A CPU with AVX2 and FMA but no AVX-512 (Zen 2/3, Intel desktop chips).
    Avx2,
}

impl CpuIsa {
    /// The flag's spelling.
    pub fn name(self) -> &'static str {
        match self {
            CpuIsa::Native => "native",
            CpuIsa::Avx2 => "avx2",
        }
    }

    /// What both sides are told, so that neither uses more than the ISA.
    fn env(self) -> &'static [(&'static str, &'static str)] {
        match self {
            CpuIsa::Native => &[],
            CpuIsa::Avx2 => &[
                ("AUDIOCPP_CPU_KERNELS", "avx2"),
                ("CT2_FORCE_CPU_ISA", "AVX2"),
                ("MKL_ENABLE_INSTRUCTIONS", "AVX2"),
            ],
        }
    }
}

/// ggml's dynamically loaded CPU variants that need no more than AVX2, FMA, F16C and
/// BMI2 (ggml's `GGML_CPU_ALL_VARIANTS` names; Haswell is the best of them).
const AVX2_GGML_VARIANTS: [&str; 6] = [
    "x64",
    "sse42",
    "sandybridge",
    "ivybridge",
    "piledriver",
    "haswell",
];

/// True for a ggml CPU variant library (`libggml-cpu-<name>.so`, `ggml-cpu-<name>.dll`)
/// that needs more than AVX2 (pure): the bench's AVX2 package leaves it out.
pub fn beyond_avx2(file_name: &str) -> bool {
    let stem = file_name.strip_prefix("lib").unwrap_or(file_name);
    let variant = stem
        .strip_prefix("ggml-cpu-")
        .and_then(|v| v.strip_suffix(".so").or_else(|| v.strip_suffix(".dll")));
    variant.is_some_and(|v| !AVX2_GGML_VARIANTS.contains(&v))
}

/// A copy of the staged package in `out` without the ggml CPU variants beyond AVX2
/// (see [`beyond_avx2`]); returns the files it left out.
fn avx2_package(package: &Path, out: &Path) -> Result<Vec<String>> {
    if out.exists() {
        std::fs::remove_dir_all(out).with_context(|| format!("removing {}", out.display()))?;
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut left_out = Vec::new();
    for entry in
        std::fs::read_dir(package).with_context(|| format!("listing {}", package.display()))?
    {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if beyond_avx2(&name) {
            left_out.push(name);
        } else if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), out.join(&name))
                .with_context(|| format!("copying {}", entry.path().display()))?;
        }
    }
    left_out.sort();
    Ok(left_out)
}

/// Stages the host package, converts each model both ways and runs the Python driver
/// once per model, as the CPU `isa` says.
pub fn bench(ctx: &crate::context::RunContext, repeat: u32, isa: CpuIsa) -> Result<()> {
    let a = assets::ensure()?;
    let root = project_root();
    let out_dir = target_dir().join("bench-asr");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let mut package = crate::dist::host_package(ctx)?;
    if isa == CpuIsa::Avx2 {
        #[cfg(target_arch = "x86_64")]
        anyhow::ensure!(
            std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma"),
            "--cpu-isa avx2 needs a CPU with AVX2 and FMA; this one has not"
        );
        let copy = out_dir.join("package-avx2");
        let left_out = avx2_package(&package, &copy)?;
        println!(
            "== bench asr as an AVX2 CPU: {}; left out of the package: {}",
            isa.env()
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" "),
            if left_out.is_empty() {
                "nothing (ggml is linked statically: its build decides)".to_string()
            } else {
                left_out.join(", ")
            }
        );
        package = copy;
    }
    let cli = super::exe(&package, "audiocpp_cli");
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
            isa.env(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ggml_cpu_variants_beyond_avx2_are_left_out() {
        for name in [
            "libggml-cpu-skylakex.so",
            "libggml-cpu-zen4.so",
            "ggml-cpu-icelake.dll",
            "libggml-cpu-alderlake.so",
            "libggml-cpu-sapphirerapids.so",
        ] {
            assert!(beyond_avx2(name), "{name}");
        }
        for name in [
            "libggml-cpu-haswell.so",
            "ggml-cpu-x64.dll",
            "libggml-cpu-sse42.so",
            "libggml-base.so.0",
            "libggml.so.0",
            "audiocpp_cli",
            "libggml-cpu-haswell.so.bak",
        ] {
            assert!(!beyond_avx2(name), "{name}");
        }
    }
}
