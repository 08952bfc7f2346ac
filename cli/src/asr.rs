//! `--task asr`: the transcript of an audio file (whole, or cut by a VAD model first with
//! `--vad-model`), printed and optionally written as text, as JSON segments and as
//! SRT or WebVTT subtitles.

use std::path::Path;

use audiocpp_engine::asr::{AsrModel, AsrOutput};
use audiocpp_engine::audio;
use audiocpp_engine::task::Task;
use audiocpp_engine::vad::VadModel;

use crate::flags::Flags;
use crate::print::{self, out};
use crate::{check_output, usage, write_then_print, Failure};

/// The most chunks `--batch` decodes at once: each holds its own decoder caches.
const MAX_BATCH: usize = 32;

/// Transcribes `--audio` with the model `model` of `family`.
pub fn run(flags: &Flags, family: &str, model: &Path) -> Result<(), Failure> {
    let audio = flags.audio.input(Task::Asr)?;
    let opts = flags.runtime.options()?;
    let limits = flags.audio.limits()?;
    let spec = flags.runtime.model_spec_override.as_deref();
    if flags.asr.word_timestamps && flags.asr.without_timestamps {
        // Words are timed inside timestamped segments and the next window starts at the
        // last word's end; --without-timestamps promises whole windows read back to back.
        return Err(usage(
            "--word-timestamps needs timestamp decoding: drop --without-timestamps",
        ));
    }
    check_output("--text-out", flags.asr.text_out.as_deref())?;
    check_output("--segments-out", flags.asr.segments_out.as_deref())?;
    let vtt = match &flags.asr.subtitles_out {
        None => false,
        Some(path) => {
            let ext = path
                .extension()
                .and_then(|e| e.to_str())
                .map(str::to_lowercase);
            match ext.as_deref() {
                Some("srt") => false,
                Some("vtt") => true,
                _ => {
                    return Err(usage(format!(
                        "--subtitles-out '{}': name the file .srt or .vtt (the format follows the extension)",
                        path.display()
                    )))
                }
            }
        }
    };
    check_output("--subtitles-out", flags.asr.subtitles_out.as_deref())?;
    // Every flag is checked before the model loads: a mistyped one costs no load.
    if let Some(t) = &flags.asr.temperatures {
        if t.is_empty() || t.iter().any(|&x| !(0.0..=2.0).contains(&x)) {
            return Err(usage(format!(
                "--temperatures {t:?}: give values between 0 and 2, e.g. 0,0.2,0.4"
            )));
        }
    }
    if flags.vad.vad_chunks_out.is_some() {
        return Err(usage("--vad-chunks-out is for --task vad"));
    }
    let tuning = flags.vad.tuning();
    if let (None, Some((flag, _))) = (
        &flags.asr.vad_model,
        tuning.iter().find(|(_, given)| *given),
    ) {
        return Err(usage(format!(
            "{flag} tunes the VAD of --task asr: give --vad-model FILE too (or run --task vad)"
        )));
    }
    let batch =
        match (flags.asr.batch, &flags.asr.vad_model) {
            (None, _) => 1,
            (Some(_), None) => return Err(usage(
                "--batch decodes the chunks --vad-model cuts together: give --vad-model FILE too",
            )),
            (Some(n), Some(_)) if (1..=MAX_BATCH).contains(&n) => n,
            (Some(n), Some(_)) => {
                return Err(usage(format!(
                    "--batch {n}: give 1 to {MAX_BATCH} chunks decoded at once"
                )))
            }
        };
    // The VAD model and its backend, when one is given.
    let vad = match &flags.asr.vad_model {
        None => None,
        Some(vad_path) => {
            if !vad_path.is_file() {
                return Err(usage(format!(
                    "--vad-model '{}' does not exist or is not a file",
                    vad_path.display()
                )));
            }
            let backend = flags
                .asr
                .vad_backend
                .parse()
                .map_err(|e| usage(format!("--vad-backend: {e}")))?;
            Some((vad_path, backend))
        }
    };
    let mut asr = AsrModel::load(family, model, spec, &opts)?;
    let mut decode = asr.default_options();
    if let Some(lang) = &flags.asr.language {
        decode.language = lang.clone();
    }
    decode.without_timestamps = flags.asr.without_timestamps;
    decode.word_timestamps = flags.asr.word_timestamps;
    if let Some(t) = &flags.asr.temperatures {
        decode.temperatures = t.clone();
    }
    let (out, vad_device) = match vad {
        Some((vad_path, vad_backend)) => {
            // A spec folder serves both models; a single spec file is the ASR model's.
            let specs = spec.filter(|p| p.is_dir());
            let vad_opts = opts.for_vad(vad_backend);
            let mut vad = VadModel::load(&flags.asr.vad_family, vad_path, specs, &vad_opts)
                .map_err(|e| {
                    let f = Failure::from(e);
                    Failure {
                        message: format!("--vad-model: {}", f.message),
                        ..f
                    }
                })?;
            let params = flags.vad.params(vad.asr_chunking_params());
            let samples = audio::load_limited(audio, asr.sample_rate(), &limits)?.samples;
            let out = asr.run_samples_with_vad(&samples, &decode, &mut vad, &params, batch)?;
            (out, Some(vad.device()))
        }
        None => {
            let samples = audio::load_limited(audio, asr.sample_rate(), &limits)?.samples;
            (asr.run_samples(&samples, &decode)?, None)
        }
    };
    write_then_print(
        &[
            ("--text-out", flags.asr.text_out.as_deref(), &|| {
                format!("{}\n", out.text)
            }),
            ("--segments-out", flags.asr.segments_out.as_deref(), &|| {
                segments_json(&out)
            }),
            (
                "--subtitles-out",
                flags.asr.subtitles_out.as_deref(),
                &|| out.subtitles(vtt, flags.asr.word_timestamps),
            ),
        ],
        "the transcript is",
        || {
            if flags.json {
                let mut v = json(&out, flags.asr.timestamps);
                if let Some(d) = &vad_device {
                    v["vad_device"] = d.as_str().into();
                }
                print::json(&v)
            } else {
                print_lines(&out, vad_device.as_deref(), flags.asr.timestamps)
            }
        },
    )
}

/// The `--json` result: segments carry their times only with `--timestamps`; their
/// `words` (with `--word-timestamps`) always carry theirs.
fn json(out: &AsrOutput, timestamps: bool) -> serde_json::Value {
    let mut v = serde_json::to_value(out).expect("serialises");
    if !timestamps {
        for seg in v["segments"].as_array_mut().into_iter().flatten() {
            if let Some(fields) = seg.as_object_mut() {
                fields.remove("start");
                fields.remove("end");
            }
        }
    }
    v
}

/// The `key=value` result (`vad_device`: where `--vad-model` ran).
fn print_lines(out: &AsrOutput, vad_device: Option<&str>, timestamps: bool) -> Result<(), Failure> {
    out!("task=asr");
    out!("family={}", out.family);
    out!("device={}", out.device);
    if let Some(d) = vad_device {
        out!("vad_device={d}");
    }
    out!("spec_source={}", out.spec_source);
    out!("audio_seconds={:.3}", out.audio_seconds);
    out!("language={}", out.language);
    if let Some(p) = out.language_probability {
        out!("language_probability={p:.4}");
    }
    out!("segments={}", out.segments.len());
    for (i, s) in out.segments.iter().enumerate() {
        if timestamps {
            out!("segment.{i}={:.2}-{:.2} {}", s.start, s.end, s.text.trim());
        } else {
            out!("segment.{i}={}", s.text.trim());
        }
    }
    for (i, w) in out.segments.iter().flat_map(|s| &s.words).enumerate() {
        out!("word.{i}={:.2}-{:.2} {}", w.start, w.end, w.word.trim());
    }
    out!("text={}", out.text);
    out!("decode_passes={}", out.decode_passes);
    out!("decoder_steps={}", out.decoder_steps);
    if out.decoder_steps > 0 {
        out!(
            "decoder_step_ms={:.4}",
            out.decoder_ms / out.decoder_steps as f64
        );
    }
    out!("inference_ms={:.2}", out.inference_ms);
    if out.audio_seconds > 0.0 {
        out!("rtf={:.5}", out.inference_ms / 1000.0 / out.audio_seconds);
    }
    Ok(())
}

/// The `--segments-out` file: each segment's `words` too with `--word-timestamps`.
fn segments_json(out: &AsrOutput) -> String {
    let segs: Vec<serde_json::Value> = out
        .segments
        .iter()
        .map(|s| {
            let mut seg =
                serde_json::json!({ "start": s.start, "end": s.end, "text": s.text.trim() });
            if !s.words.is_empty() {
                seg["words"] = serde_json::to_value(&s.words).expect("serialises");
            }
            seg
        })
        .collect();
    serde_json::to_string_pretty(&serde_json::json!({
        "audio_seconds": out.audio_seconds, "text": out.text, "segments": segs,
    }))
    .expect("serialises")
}
