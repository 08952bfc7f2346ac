//! `--task vad`: speech segments of an audio file, printed and optionally written as JSON
//! (`--vad-chunks-out`).

use std::path::Path;

use audiocpp_engine::audio;
use audiocpp_engine::task::Task;
use audiocpp_engine::vad::{VadModel, VadOutput};

use crate::flags::Flags;
use crate::print::{self, out};
use crate::{check_output, usage, write_then_print, Failure};

/// Runs the VAD model `model` of `family` on `--audio`.
pub fn run(flags: &Flags, family: &str, model: &Path) -> Result<(), Failure> {
    let audio = flags.audio.input(Task::Vad)?;
    let opts = flags.runtime.options()?;
    if flags.asr.vad_model.is_some() {
        return Err(usage(
            "--vad-model is for --task asr; --task vad takes the VAD model as --model",
        ));
    }
    let limits = flags.audio.limits()?;
    let spec = flags.runtime.model_spec_override.as_deref();
    check_output("--vad-chunks-out", flags.vad.vad_chunks_out.as_deref())?;
    let mut vad = VadModel::load(family, model, spec, &opts)?;
    let params = flags.vad.params(vad.default_params());
    let samples = audio::load_limited(audio, vad.sample_rate(), &limits)?.samples;
    let out = vad.run_samples(&samples, &params)?;
    write_then_print(
        &[(
            "--vad-chunks-out",
            flags.vad.vad_chunks_out.as_deref(),
            &|| segments_json(&out),
        )],
        "the segments are",
        || {
            if flags.json {
                let mut v = serde_json::to_value(&out).expect("serialises");
                v["segments"] = serde_json::Value::from(segments(&out));
                print::json(&v)
            } else {
                print_lines(&out)
            }
        },
    )
}

/// VAD segments as every output names them (docs/errors.md): `start` and `end` in
/// seconds, `start_sample` and `end_sample` at the model's rate.
fn segments(out: &VadOutput) -> Vec<serde_json::Value> {
    let rate = out.sample_rate as f64;
    out.segments
        .iter()
        .map(|s| {
            serde_json::json!({
                "start": s.start as f64 / rate, "end": s.end as f64 / rate,
                "start_sample": s.start, "end_sample": s.end,
            })
        })
        .collect()
}

/// The `--vad-chunks-out` file.
fn segments_json(out: &VadOutput) -> String {
    serde_json::to_string_pretty(
        &serde_json::json!({ "sample_rate": out.sample_rate, "segments": segments(out) }),
    )
    .expect("serialises")
}

/// The `key=value` result.
fn print_lines(out: &VadOutput) -> Result<(), Failure> {
    let rate = out.sample_rate as f64;
    out!("task=vad");
    out!("family={}", out.family);
    out!("device={}", out.device);
    out!("spec_source={}", out.spec_source);
    out!("audio_seconds={:.3}", out.audio_seconds);
    out!("windows={}", out.probabilities.len());
    out!("segments={}", out.segments.len());
    for (i, s) in out.segments.iter().enumerate() {
        out!(
            "segment.{i}={:.3}-{:.3}",
            s.start as f64 / rate,
            s.end as f64 / rate
        );
    }
    out!("inference_ms={:.2}", out.inference_ms);
    if out.audio_seconds > 0.0 {
        out!("rtf={:.5}", out.inference_ms / 1000.0 / out.audio_seconds);
    }
    Ok(())
}
