//! `--task tts` and `--list-voices`: speaks text or phonemes into a 16-bit WAV through the
//! engine's one output writer (`--out -`: the WAV to standard output, the report to
//! standard error), or lists a model's voices and languages.
//!
//! The engine checks every request ([`TtsModel::check`]); what this module checks first
//! is the CLI's own: flags of other tasks, exactly one input flag, and the cheap
//! parameters (speed, the speech limit, the output path) before a model is loaded, with
//! errors that name the flag the user gave.

use std::path::Path;

use audiocpp_engine::output;
use audiocpp_engine::tts::{self, SpeechInput, SpeechOptions, SpeechRequest, TtsModel};

use crate::flags::Flags;
use crate::print::{self, out};
use crate::{check_output, usage, Failure};

/// The largest `--text-file` read: far more text than an hour of speech, and a bound on
/// what a mistaken path (a disk image, a log) makes the CLI read.
const MAX_TEXT_FILE_BYTES: u64 = 1 << 20;

/// Speaks the input (or lists the voices) with the model `model` of `family`.
pub fn run(flags: &Flags, family: &str, model: &Path) -> Result<(), Failure> {
    if let Some(flag) = [
        ("--audio", flags.audio.audio.is_some()),
        ("--text-out", flags.asr.text_out.is_some()),
        ("--vad-model", flags.asr.vad_model.is_some()),
        ("--quantize", flags.convert.quantize.is_some()),
    ]
    .iter()
    .find(|(_, given)| *given)
    .map(|(f, _)| f)
    {
        return Err(usage(format!("{flag} is not a flag of --task tts")));
    }
    let opts = flags.runtime.options()?;
    let spec = flags.runtime.model_spec_override.as_deref();
    if flags.list_voices {
        let tts = TtsModel::load(family, model, spec, &opts)?;
        return list_voices(&tts, family, flags.json);
    }
    let t = &flags.tts;
    let clone = clone_flags(flags)?;
    if let Some(c) = clone.as_ref().filter(|_| no_speech_input(flags)) {
        // Only a voice file is made: --voice-out and no text.
        let Some(voice_out) = &c.voice_out else {
            return Err(usage(
                "--ref-audio without --text makes only a voice: give --voice-out FILE.json, or --text to speak",
            ));
        };
        if flags.out.is_some() {
            return Err(usage(
                "--out: nothing to speak; give --text (or leave --out out to only save the voice)",
            ));
        }
        check_output("--voice-out", Some(voice_out))?;
        let mut tts = TtsModel::load(family, model, spec, &opts)?;
        let made = make_voice(&mut tts, c)?;
        return report_voice_only(voice_out, flags.json, &made);
    }
    let input = speech_input(flags)?;
    tts::check_speed(t.speed)?;
    let max_speech_s = t.max_speech_s.unwrap_or(tts::DEFAULT_MAX_SPEECH_S);
    tts::check_max_speech_s(max_speech_s)?;
    let out_path = flags
        .out
        .as_deref()
        .ok_or_else(|| usage("--task tts needs --out FILE.wav (or --out - for standard output)"))?;
    // Refuse an output that cannot be written (a directory, no such folder) before
    // synthesizing.
    check_output("--out", Some(out_path))?;
    check_output(
        "--voice-out",
        clone.as_ref().and_then(|c| c.voice_out.as_deref()),
    )?;
    let saved_voice = match (&t.voice, &clone) {
        (Some(v), None) if is_voice_file(v) => Some(tts::read_voice_file(Path::new(v))?),
        _ => None,
    };
    let mut tts = TtsModel::load(family, model, spec, &opts)?;
    let (voice, cloned_voice) = match (&clone, saved_voice) {
        (Some(c), _) => {
            let made = make_voice(&mut tts, c)?;
            (Some(made.label), Some(std::sync::Arc::new(made.bytes)))
        }
        (None, Some(bytes)) => {
            let label = t.voice.as_deref().map(voice_label);
            (label, Some(std::sync::Arc::new(bytes)))
        }
        (None, None) => (t.voice.clone(), None),
    };
    if matches!(input, SpeechInput::Phonemes(_)) && !tts.takes_phonemes() {
        return Err(usage(format!(
            "--phonemes: family '{family}' takes text, not phonemes (use --text)"
        )));
    }
    let req = SpeechRequest {
        input,
        voice,
        speed: t.speed,
        options: SpeechOptions {
            language: flags.asr.language.clone(),
            instructions: t.instructions.clone(),
            temperature: t.temperature,
            seed: t.seed,
            max_frames: t.max_frames,
            cloned_voice,
        },
    };
    tts.check(&req)?;
    let mut samples = Vec::new();
    let stats = tts.run_streamed(&req, max_speech_s, &mut |chunk| {
        samples.extend_from_slice(chunk);
        Ok(())
    })?;
    if let Err(e) = output::write_wav(out_path, &samples, stats.sample_rate) {
        return Err(keep_speech(
            Failure::from(e).of_flag("--out"),
            out_path,
            &samples,
            stats.sample_rate,
        ));
    }
    let rtf = if stats.audio_seconds > 0.0 {
        stats.inference_ms / 1000.0 / stats.audio_seconds
    } else {
        0.0
    };
    let to_stdout = out_path.as_os_str() == "-";
    let report = if flags.json {
        let mut v = serde_json::to_value(&stats).expect("serialises");
        v["task"] = "tts".into();
        v["out"] = out_path.display().to_string().into();
        v["rtf"] = rtf.into();
        serde_json::to_string_pretty(&v).expect("serialises")
    } else {
        format!(
            "task=tts\nfamily={}\ndevice={}\nspec_source={}\nvoice={}\nsample_rate={}\nsentences={}\naudio_seconds={:.3}\nfirst_audio_ms={:.2}\ninference_ms={:.2}\nrtf={rtf:.5}\nout={}",
            stats.family,
            stats.device,
            stats.spec_source,
            stats.voice,
            stats.sample_rate,
            stats.sentences,
            stats.audio_seconds,
            stats.first_audio_ms,
            stats.inference_ms,
            out_path.display()
        )
    };
    if to_stdout {
        eprintln!("{report}");
    } else {
        out!("{report}");
    }
    Ok(())
}

/// The failure of writing `--out` after the speech was made: the speech is saved in the
/// temp folder instead (a disk that filled during synthesis, a folder removed meanwhile)
/// and the message says where, so the synthesis is not lost. Nothing is saved for
/// `--out -` (standard output itself failed).
fn keep_speech(f: Failure, out_path: &Path, samples: &[f32], rate: u32) -> Failure {
    if out_path.as_os_str() == "-" {
        return f;
    }
    let kept = std::env::temp_dir().join(format!("audiocpp-tts-{}.wav", std::process::id()));
    match output::write_wav(&kept, samples, rate) {
        Ok(()) => Failure {
            message: format!(
                "{}; the speech was saved to '{}' instead",
                f.message,
                kept.display()
            ),
            ..f
        },
        Err(_) => f,
    }
}

/// `--list-voices`: the model's rate, voices and languages.
fn list_voices(tts: &TtsModel, family: &str, json: bool) -> Result<(), Failure> {
    let voices = tts.voices();
    let languages = tts.languages();
    if json {
        return print::json(&serde_json::json!({
            "family": family, "sample_rate": tts.sample_rate(), "voices": voices,
            "languages": languages,
        }));
    }
    out!("family={family}");
    out!("sample_rate={}", tts.sample_rate());
    out!("voices={}", voices.len());
    for v in &voices {
        out!("voice={v}");
    }
    for l in &languages {
        out!("language={l}");
    }
    Ok(())
}

/// What `--task tts` speaks, from exactly one of --text, --text-file, --phonemes.
fn speech_input(flags: &Flags) -> Result<SpeechInput, Failure> {
    let t = &flags.tts;
    let given: Vec<&str> = [
        ("--text", t.text.is_some()),
        ("--text-file", t.text_file.is_some()),
        ("--phonemes", t.phonemes.is_some()),
    ]
    .iter()
    .filter(|(_, g)| *g)
    .map(|(f, _)| *f)
    .collect();
    if given.len() > 1 {
        return Err(usage(format!(
            "{} were given; --task tts speaks one of them",
            given.join(" and ")
        )));
    }
    let (flag, input) = if let Some(text) = &t.text {
        ("--text", SpeechInput::Text(text.clone()))
    } else if let Some(p) = &t.phonemes {
        ("--phonemes", SpeechInput::Phonemes(p.clone()))
    } else if let Some(path) = &t.text_file {
        ("--text-file", SpeechInput::Text(read_text_file(path)?))
    } else {
        return Err(usage(
            "--task tts needs --text TEXT, --text-file FILE or --phonemes PHONEMES",
        ));
    };
    let (SpeechInput::Text(text) | SpeechInput::Phonemes(text)) = &input;
    if text.trim().is_empty() {
        return Err(usage(format!("{flag} is empty: give something to speak")));
    }
    Ok(input)
}

/// The UTF-8 text of `--text-file`, at most [`MAX_TEXT_FILE_BYTES`] of it.
fn read_text_file(path: &Path) -> Result<String, Failure> {
    let cannot = |why: String| usage(format!("--text-file '{}': {why}", path.display()));
    let file = std::fs::File::open(path).map_err(|e| cannot(format!("cannot read it: {e}")))?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(file, MAX_TEXT_FILE_BYTES + 1),
        &mut bytes,
    )
    .map_err(|e| cannot(format!("cannot read it: {e}")))?;
    if bytes.len() as u64 > MAX_TEXT_FILE_BYTES {
        return Err(cannot(format!(
            "it is larger than {MAX_TEXT_FILE_BYTES} bytes; split it into smaller files"
        )));
    }
    String::from_utf8(bytes).map_err(|e| cannot(format!("it is not UTF-8 text ({e})")))
}

/// `--ref-audio` and what goes with it, checked before a model is loaded.
struct CloneFlags {
    ref_audio: std::path::PathBuf,
    ref_text: Option<String>,
    x_vector_only: bool,
    voice_out: Option<std::path::PathBuf>,
}

/// A voice made from `--ref-audio`: the voice file, saved to `--voice-out` when given.
struct MadeVoice {
    bytes: Vec<u8>,
    label: String,
}

/// The cloning flags, or `None` without `--ref-audio`; the flags that need it, or that
/// contradict it, are refused naming themselves.
fn clone_flags(flags: &Flags) -> Result<Option<CloneFlags>, Failure> {
    let t = &flags.tts;
    let Some(ref_audio) = &t.ref_audio else {
        for (flag, given) in [
            ("--ref-text", t.ref_text.is_some()),
            ("--x-vector-only", t.x_vector_only),
            ("--voice-out", t.voice_out.is_some()),
        ] {
            if given {
                return Err(usage(format!(
                    "{flag} goes with --ref-audio FILE (the recording to clone the voice of)"
                )));
            }
        }
        return Ok(None);
    };
    if let Some(v) = &t.voice {
        return Err(usage(format!(
            "--voice '{v}' and --ref-audio were both given: speak in one voice (a cloned voice saved with --voice-out is --voice FILE.json)"
        )));
    }
    if t.x_vector_only && t.ref_text.is_some() {
        return Err(usage(
            "--x-vector-only clones from the speaker embedding alone and takes no --ref-text; give one of them",
        ));
    }
    if !t.x_vector_only && t.ref_text.as_deref().is_none_or(|r| r.trim().is_empty()) {
        return Err(usage(
            "--ref-audio needs --ref-text \"what the recording says\" (in-context cloning), or --x-vector-only",
        ));
    }
    Ok(Some(CloneFlags {
        ref_audio: ref_audio.clone(),
        ref_text: t.ref_text.clone(),
        x_vector_only: t.x_vector_only,
        voice_out: t.voice_out.clone(),
    }))
}

/// True when none of --text, --text-file, --phonemes was given.
fn no_speech_input(flags: &Flags) -> bool {
    let t = &flags.tts;
    t.text.is_none() && t.text_file.is_none() && t.phonemes.is_none()
}

/// A `--voice` value that names a voice file rather than one of the model's voices.
fn is_voice_file(voice: &str) -> bool {
    voice.to_ascii_lowercase().ends_with(".json") || voice.contains('/') || voice.contains('\\')
}

/// The name a voice file is reported under: its file name without `.json`.
fn voice_label(path: &str) -> String {
    let p = Path::new(path);
    p.file_stem()
        .unwrap_or(p.as_os_str())
        .to_string_lossy()
        .into_owned()
}

/// Clones the voice of `--ref-audio` and saves it to `--voice-out` when given.
fn make_voice(tts: &mut TtsModel, c: &CloneFlags) -> Result<MadeVoice, Failure> {
    let audio = audiocpp_engine::audio::load(&c.ref_audio, tts.sample_rate())?;
    let bytes = tts.clone_voice(audio, c.ref_text.as_deref(), c.x_vector_only)?;
    if let Some(out) = &c.voice_out {
        output::write_bytes(out, &bytes)?;
    }
    let label = match &c.voice_out {
        Some(out) => voice_label(&out.to_string_lossy()),
        None => "cloned".into(),
    };
    Ok(MadeVoice { bytes, label })
}

/// The report of a run that only made a voice file.
fn report_voice_only(out_path: &Path, json: bool, made: &MadeVoice) -> Result<(), Failure> {
    if json {
        return print::json(&serde_json::json!({
            "task": "tts", "voice": made.label, "voice_out": out_path.display().to_string(),
            "voice_bytes": made.bytes.len(),
        }));
    }
    out!("task=tts");
    out!("voice={}", made.label);
    out!("voice_out={}", out_path.display());
    out!("voice_bytes={}", made.bytes.len());
    Ok(())
}
