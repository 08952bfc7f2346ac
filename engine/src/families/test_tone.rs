//! A test-only text-to-speech family: one tone per character, pitched by the voice,
//! its length set by the speed, scaled by a gain tensor from the model file. It
//! exercises the TTS task interface ([`crate::tts::TtsModel`]) and the registry the
//! way a real family (Kokoro) does: a module with its `FAMILY` entry, one line in the
//! registry and a spec. The spec's optional hparam `compute_ms_per_char` makes each call
//! take that long per character, standing in for a real model's compute, so tests can
//! watch streamed audio leave before synthesis ends. Compiled only into test builds
//! (feature `test-families`).

use crate::backend::Runtime;
use crate::error::{EngineError, Result};
use crate::families::{Family, LoaderInfo};
use crate::ggml::DType;
use crate::model_file::ModelFile;
use crate::spec::ModelSpec;
use crate::task::Task;
use crate::tts::{SpeechInput, SpeechOptions, Synthesizer};

/// What the family is.
pub const INFO: LoaderInfo = LoaderInfo {
    family: "test_tone",
    tasks: &[Task::Tts],
    formats: &["gguf"],
    description: "test-only: one tone per character",
};

/// The family's registry entry: TTS only.
pub const FAMILY: Family = Family {
    info: INFO,
    spec: None,
    legacy: &[],
    sources: &[],
    convert: None,
    vad: None,
    asr: None,
    tts: Some(load),
};

/// The voices and their pitch in Hz; the first is the default.
const VOICES: &[(&str, f32)] = &[("low", 220.0), ("high", 440.0)];

/// Seconds of tone per character at speed 1.
pub const CHAR_SECONDS: f32 = 0.05;

/// The most `compute_ms_per_char` a spec may ask for.
const MAX_COMPUTE_MS_PER_CHAR: u64 = 1000;

/// The loaded "model".
struct ToneModel {
    gain: f32,
    sample_rate: u32,
    compute_ms_per_char: u64,
    runtime: Runtime,
}

/// Writes a test_tone model as `--task convert` makes GGUFs: the family and the spec
/// embedded, and the one tensor `tone.gain`. For tests of the front ends.
pub fn write_model(
    path: &std::path::Path,
    sample_rate: u32,
    gain: f32,
    compute_ms_per_char: u64,
) -> Result<()> {
    let spec = serde_json::json!({
        "family": INFO.family, "task": "tts", "description": INFO.description,
        "sample_rate": sample_rate,
        "hparams": { "compute_ms_per_char": compute_ms_per_char },
        "tensors": { "tone.gain": [1] }, "defaults": {},
    });
    let meta = [
        (
            crate::model_file::GGUF_FAMILY_KEY.to_string(),
            crate::ggml::GgufValue::Str(INFO.family.into()),
        ),
        (
            crate::spec::GGUF_SPEC_KEY.to_string(),
            crate::ggml::GgufValue::Str(spec.to_string()),
        ),
    ];
    let gain = crate::ggml::HostTensor {
        name: "tone.gain".into(),
        dtype: DType::F32,
        ne: vec![1],
        data: gain.to_le_bytes().to_vec(),
    };
    crate::ggml::write_gguf(path, &meta, &[gain])?;
    Ok(())
}

/// Loads the model: its one tensor, `tone.gain` ([1] f32), checked by name and shape.
pub fn load(file: ModelFile, spec: &ModelSpec, runtime: Runtime) -> Result<Box<dyn Synthesizer>> {
    let t = file
        .tensor("tone.gain")
        .filter(|t| t.dtype == DType::F32 && t.ne == [1])
        .ok_or_else(|| EngineError::Model {
            path: file.path.clone(),
            reason: "tensor 'tone.gain' ([1] f32) is missing".into(),
        })?;
    let compute_ms_per_char = match spec.hparams.get("compute_ms_per_char") {
        None => 0,
        Some(v) => v
            .as_u64()
            .filter(|ms| *ms <= MAX_COMPUTE_MS_PER_CHAR)
            .ok_or_else(|| EngineError::Model {
                path: file.path.clone(),
                reason: format!(
                    "hparam 'compute_ms_per_char' is {v}; it must be an integer from 0 to {MAX_COMPUTE_MS_PER_CHAR}"
                ),
            })?,
    };
    Ok(Box::new(ToneModel {
        gain: t.to_f32()[0],
        sample_rate: spec.sample_rate,
        compute_ms_per_char,
        runtime,
    }))
}

impl Synthesizer for ToneModel {
    fn sample_rate(&self) -> u32 {
        self.sample_rate
    }

    fn voices(&self) -> Vec<String> {
        VOICES.iter().map(|(v, _)| v.to_string()).collect()
    }

    fn takes_phonemes(&self) -> bool {
        false
    }

    fn device(&self) -> String {
        self.runtime.device().name.clone()
    }

    fn synthesize(
        &mut self,
        input: &SpeechInput,
        voice: &str,
        speed: f32,
        _options: &SpeechOptions,
        max_samples: usize,
    ) -> Result<Option<Vec<f32>>> {
        let (SpeechInput::Text(text) | SpeechInput::Phonemes(text)) = input;
        let pitch = VOICES
            .iter()
            .find(|(v, _)| *v == voice)
            .map(|(_, p)| *p)
            .expect("TtsModel checks the voice");
        let chars = text.chars().count();
        let per_char = (CHAR_SECONDS / speed * self.sample_rate as f32) as usize;
        let n = per_char * chars;
        if n > max_samples {
            return Ok(None);
        }
        if self.compute_ms_per_char > 0 {
            std::thread::sleep(std::time::Duration::from_millis(
                self.compute_ms_per_char * chars as u64,
            ));
        }
        let step = std::f32::consts::TAU * pitch / self.sample_rate as f32;
        Ok(Some(
            (0..n)
                .map(|i| self.gain * (step * i as f32).sin())
                .collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::RuntimeOptions;
    use crate::tts::{SpeechInput, SpeechRequest, TtsModel};

    const RATE: u32 = 8000;

    /// A test_tone GGUF with its spec embedded, as `--task convert` makes them.
    fn model(dir: &std::path::Path) -> std::path::PathBuf {
        let path = dir.join("tone.gguf");
        super::write_model(&path, RATE, 0.5, 0).unwrap();
        path
    }

    fn request(text: &str, voice: Option<&str>, speed: f32) -> SpeechRequest {
        SpeechRequest {
            input: SpeechInput::Text(text.into()),
            voice: voice.map(str::to_string),
            speed,
            options: Default::default(),
        }
    }

    fn zero_crossings(x: &[f32]) -> usize {
        x.windows(2)
            .filter(|w| (w[0] < 0.0) != (w[1] < 0.0))
            .count()
    }

    #[test]
    fn a_tts_family_loads_through_the_registry_and_speaks() {
        let dir = tempfile::tempdir().unwrap();
        let path = model(dir.path());
        let mut tts = TtsModel::load("test_tone", &path, None, &RuntimeOptions::default()).unwrap();
        assert_eq!(tts.sample_rate(), RATE);
        assert_eq!(tts.voices(), ["low", "high"]);

        let low = tts.run(&request("abcd", None, 1.0)).unwrap();
        assert_eq!((low.voice.as_str(), low.sample_rate), ("low", RATE));
        assert_eq!(low.spec_source, "gguf-metadata");
        assert_eq!(low.samples.len(), 4 * 400, "0.05 s per character");
        assert!((low.audio_seconds - 0.2).abs() < 1e-9);
        let peak = low.samples.iter().fold(0f32, |m, x| m.max(x.abs()));
        assert!((peak - 0.5).abs() < 1e-3, "the file's gain: {peak}");

        let fast = tts.run(&request("abcd", None, 2.0)).unwrap();
        assert_eq!(
            fast.samples.len(),
            low.samples.len() / 2,
            "speed 2 halves it"
        );
        let high = tts.run(&request("abcd", Some("high"), 1.0)).unwrap();
        let (zl, zh) = (zero_crossings(&low.samples), zero_crossings(&high.samples));
        assert!(
            zh > zl * 19 / 10 && zh < zl * 21 / 10,
            "an octave up: {zl} -> {zh}"
        );
    }

    #[test]
    fn markup_and_terminal_escapes_are_not_spoken() {
        let dir = tempfile::tempdir().unwrap();
        let path = model(dir.path());
        let mut tts = TtsModel::load("test_tone", &path, None, &RuntimeOptions::default()).unwrap();
        // One tone per character: the audio's length counts what was spoken.
        let spoken = |tts: &mut TtsModel, text: &str| {
            tts.run(&request(text, None, 1.0)).unwrap().samples.len() / 400
        };
        assert_eq!(spoken(&mut tts, "ab. cd"), 5, "two pieces, ab. and cd");
        assert_eq!(
            spoken(&mut tts, r#"<speak>ab.<break time="1s"/>cd</speak>"#),
            5,
            "the tags are removed, the break ends a piece"
        );
        assert_eq!(
            spoken(&mut tts, "\u{1b}[1;31mab\u{1b}[0m"),
            2,
            "ANSI colours are removed"
        );
        assert_eq!(spoken(&mut tts, "a < b"), 5, "not markup: read as written");
        let err = tts
            .run(&request("<speak><break/></speak>\u{1b}[0m", None, 1.0))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("parameter 'input' has nothing to say once its markup"),
            "{err}"
        );
    }

    #[test]
    fn tts_requests_are_checked_by_parameter() {
        let dir = tempfile::tempdir().unwrap();
        let path = model(dir.path());
        let mut tts = TtsModel::load("test_tone", &path, None, &RuntimeOptions::default()).unwrap();
        let refused = |tts: &mut TtsModel, req: SpeechRequest, needle: &str| {
            let err = tts.run(&req).expect_err(needle).to_string();
            assert!(err.contains(needle), "{err}");
        };
        refused(
            &mut tts,
            request(" ", None, 1.0),
            "parameter 'input' is empty",
        );
        refused(
            &mut tts,
            request("a", None, 0.0),
            "parameter 'speed' 0 is out of range",
        );
        refused(
            &mut tts,
            request("a", None, f32::NAN),
            "parameter 'speed' NaN is out of range",
        );
        refused(
            &mut tts,
            request("a", Some("alto"), 1.0),
            "voices: low, high",
        );
        let phonemes = SpeechRequest {
            input: SpeechInput::Phonemes("həˈloʊ".into()),
            voice: None,
            speed: 1.0,
            options: Default::default(),
        };
        refused(&mut tts, phonemes, "takes text, not phonemes");
        let asr = crate::asr::AsrModel::load("test_tone", &path, None, &RuntimeOptions::default());
        assert!(
            asr.is_err_and(|e| e.to_string().contains("does not support task 'asr'")),
            "the registry's tasks decide what loads"
        );
    }
}
