//! Task entry points the front ends call: resolve family and spec, load the model, run.
//!
//! Every task runs through the family registry ([`crate::families::FAMILIES`]): a task
//! asks the family's entry for its loader (VAD, ASR, TTS) or converter and runs the
//! trait object it returns ([`SpeechDetector`], [`Recognizer`], [`Synthesizer`]); no
//! code here names a family.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::backend::{Runtime, RuntimeOptions};
use crate::error::{EngineError, Result};
use crate::families::{self, ConvertOptions, Family};
use crate::ggml::GgufValue;
use crate::model_file::{self, ModelFile, GGUF_FAMILY_KEY};
use crate::spec::{self, ModelSpec, SpecQuery, SpecSource, GGUF_SPEC_KEY};
use crate::vad::{self, Segment, VadParams};

pub use crate::asr::{DecodeOptions, Segment as AsrSegment, Transcript};

/// A model file with its resolved spec.
pub struct ResolvedModel {
    /// The parsed file.
    pub file: ModelFile,
    /// Its spec.
    pub spec: ModelSpec,
    /// Where the spec came from.
    pub spec_source: SpecSource,
}

/// Reads a model and resolves its spec, checking the family matches.
pub fn resolve_model(
    family: &str,
    model: &Path,
    spec_override: Option<&Path>,
) -> Result<ResolvedModel> {
    let entry = families::find(family)?;
    let file = model_file::read(model)?;
    if let Some(f) = &file.family {
        if f != family {
            return Err(EngineError::Usage(format!(
                "'{}' is a '{f}' model, not '{family}' (set parameter 'family' to {f})",
                model.display()
            )));
        }
    }
    let cwd = std::env::current_dir().ok();
    let (spec, spec_source) = spec::resolve(&SpecQuery {
        family,
        override_path: spec_override,
        embedded_in_model: file.meta_str(GGUF_SPEC_KEY),
        compiled_in: entry.spec,
        model_path: Some(model),
        cwd: cwd.as_deref(),
    })?;
    Ok(ResolvedModel {
        file,
        spec,
        spec_source,
    })
}

/// The spec for converting a source model that carries none (a CTranslate2 or ONNX
/// model): the override, else the spec beside the model or compiled in.
pub fn resolve_source_spec(
    family: &str,
    model: &Path,
    spec_override: Option<&Path>,
) -> Result<ModelSpec> {
    let entry = families::find(family)?;
    let cwd = std::env::current_dir().ok();
    let (spec, _) = spec::resolve(&SpecQuery {
        family,
        override_path: spec_override,
        embedded_in_model: None,
        compiled_in: entry.spec,
        model_path: Some(model),
        cwd: cwd.as_deref(),
    })?;
    Ok(spec)
}

/// Checks that `family` does `task`, then reads the model and resolves its spec.
fn resolve_for_task(
    family: &str,
    task: &str,
    model: &Path,
    spec_override: Option<&Path>,
) -> Result<(&'static Family, ResolvedModel)> {
    let entry = families::find(family)?;
    entry.check_task(task)?;
    Ok((entry, resolve_model(family, model, spec_override)?))
}

/// What a VAD run produced.
#[derive(Debug, Clone, Serialize)]
pub struct VadOutput {
    /// Family that ran.
    pub family: String,
    /// Device that ran it.
    pub device: String,
    /// Spec source (`embedded`, `gguf-metadata`, `disk:...`).
    pub spec_source: String,
    /// Audio duration in seconds (after resampling).
    pub audio_seconds: f64,
    /// Model sample rate.
    pub sample_rate: u32,
    /// Samples per probability.
    pub window_samples: usize,
    /// One probability per window.
    pub probabilities: Vec<f32>,
    /// Speech segments in samples.
    pub segments: Vec<Segment>,
    /// Inference wall time in milliseconds (model load excluded).
    pub inference_ms: f64,
}

/// A voice-activity family's model as [`VadModel`] runs it: a family implements it and
/// registers its loader ([`families::Family::vad`]).
pub trait SpeechDetector: Send {
    /// The sample rate it takes.
    fn sample_rate(&self) -> u32;
    /// Samples per probability.
    fn window(&self) -> usize;
    /// The device it runs on.
    fn device(&self) -> String;
    /// The segmentation defaults of its spec.
    fn default_params(&self) -> VadParams;
    /// One speech probability per window of mono audio at [`SpeechDetector::sample_rate`],
    /// with fresh state.
    fn probabilities(&mut self, samples: &[f32]) -> Result<Vec<f32>>;
}

/// A loaded VAD model, reusable across requests.
pub struct VadModel {
    model: Box<dyn SpeechDetector>,
    family: String,
    spec_source: SpecSource,
}

impl VadModel {
    /// Loads a VAD family model onto the device `opts` selects.
    pub fn load(
        family: &str,
        model: &Path,
        spec_override: Option<&Path>,
        opts: &RuntimeOptions,
    ) -> Result<Self> {
        let (entry, resolved) = resolve_for_task(family, "vad", model, spec_override)?;
        Self::from_resolved(entry, resolved, opts)
    }

    /// Loads a resolved VAD model with its family's loader.
    fn from_resolved(
        entry: &Family,
        resolved: ResolvedModel,
        opts: &RuntimeOptions,
    ) -> Result<Self> {
        let (model, family, spec_source) = load_resolved(entry, "vad", entry.vad, resolved, opts)?;
        Ok(VadModel {
            model,
            family,
            spec_source,
        })
    }

    /// The spec's default segmentation parameters.
    pub fn default_params(&self) -> VadParams {
        self.model.default_params()
    }

    /// The model's sample rate.
    pub fn sample_rate(&self) -> u32 {
        self.model.sample_rate()
    }

    /// Segmentation parameters for cutting audio before ASR
    /// ([`AsrModel::run_samples_with_vad`]): the spec's defaults with 400 ms of padding
    /// (faster-whisper's), so that chunk edges keep soft word onsets and endings.
    pub fn asr_chunking_params(&self) -> VadParams {
        VadParams {
            speech_pad_ms: 400,
            ..self.model.default_params()
        }
    }

    /// Runs on mono samples at the model's rate.
    pub fn run_samples(&mut self, samples: &[f32], params: &VadParams) -> Result<VadOutput> {
        params.validate().map_err(EngineError::Usage)?;
        let t0 = Instant::now();
        let sample_rate = self.model.sample_rate();
        let probabilities = self.model.probabilities(samples)?;
        let window = self.model.window();
        let segments =
            vad::speech_segments(&probabilities, window, samples.len(), sample_rate, params);
        Ok(VadOutput {
            family: self.family.clone(),
            device: self.model.device(),
            spec_source: self.spec_source.to_string(),
            audio_seconds: samples.len() as f64 / sample_rate as f64,
            sample_rate,
            window_samples: window,
            probabilities,
            segments,
            inference_ms: t0.elapsed().as_secs_f64() * 1000.0,
        })
    }

    /// Decodes an audio file and runs on it.
    pub fn run_file(&mut self, audio: &Path, params: &VadParams) -> Result<VadOutput> {
        let a = crate::audio::load(audio, self.sample_rate())?;
        self.run_samples(&a.samples, params)
    }
}

/// Loads a resolved model with `loader`, the family's loader for `task` (an error
/// naming the task when it has none), onto the device `opts` selects: the model, its
/// family's name and where its spec came from.
fn load_resolved<T: ?Sized>(
    entry: &Family,
    task: &str,
    loader: Option<families::Loader<T>>,
    resolved: ResolvedModel,
    opts: &RuntimeOptions,
) -> Result<(Box<T>, String, SpecSource)> {
    let load = loader.ok_or_else(|| wrong_task(entry, task))?;
    let runtime = Runtime::new(opts)?;
    let model = load(resolved.file, &resolved.spec, runtime)?;
    Ok((model, entry.info.family.to_string(), resolved.spec_source))
}

/// The error for a family asked for a task it has no loader for.
fn wrong_task(entry: &Family, task: &str) -> EngineError {
    EngineError::WrongTask {
        family: entry.info.family.into(),
        task: task.into(),
        supported: entry.info.tasks.join(", "),
    }
}

/// What a conversion wrote.
#[derive(Debug, Clone, Serialize)]
pub struct ConvertOutput {
    /// The GGUF written.
    pub out: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Tensors written.
    pub tensors: usize,
}

/// Converts a model of a family to GGUF with the spec embedded, written through
/// [`crate::output`] (atomically for a regular file; nothing is left on failure). The
/// family's converter ([`families::Family::convert`]) reads the source (Silero VAD: a
/// ggml `.bin` or GGUF; Whisper: a CTranslate2 model; Kokoro: its ONNX with
/// `options.sources` voices, vocab, lexicons) and applies `options.quantize`.
pub fn convert(
    family: &str,
    model: &Path,
    spec_override: Option<&Path>,
    out: &Path,
    options: &ConvertOptions,
) -> Result<ConvertOutput> {
    let entry = families::find(family)?;
    entry.check_task("convert")?;
    let converter = entry.convert.ok_or_else(|| wrong_task(entry, "convert"))?;
    let c = converter(model, spec_override, options)?;
    let mut metadata: Vec<(String, GgufValue)> = vec![
        (
            GGUF_FAMILY_KEY.to_string(),
            GgufValue::Str(family.to_string()),
        ),
        (GGUF_SPEC_KEY.to_string(), GgufValue::Str(c.spec.to_json())),
        (
            "audiocpp.source_format".to_string(),
            GgufValue::Str(c.source_format),
        ),
    ];
    metadata.extend(
        c.metadata
            .into_iter()
            .filter(|(k, _)| !k.starts_with("audiocpp.") && !k.starts_with("general.alignment")),
    );
    let tensors = c.tensors;
    let bytes = crate::output::write_via_path(out, |tmp| {
        crate::ggml::write_gguf(tmp, &metadata, &tensors).map_err(|e| EngineError::Write {
            path: out.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })
    })?;
    Ok(ConvertOutput {
        out: out.to_path_buf(),
        bytes,
        tensors: tensors.len(),
    })
}

/// What an ASR run produced.
#[derive(Debug, Clone, Serialize)]
pub struct AsrOutput {
    /// Family that ran.
    pub family: String,
    /// Device that ran it.
    pub device: String,
    /// Spec source (`embedded`, `gguf-metadata`, `disk:...`).
    pub spec_source: String,
    /// Audio duration in seconds (after resampling).
    pub audio_seconds: f64,
    /// The language the audio was transcribed as (detected when asked for `auto`).
    pub language: String,
    /// The detected language's probability (softmax over the language tokens); `None`
    /// when the language was given or the model is English-only.
    pub language_probability: Option<f32>,
    /// The whole transcript (segments joined, trimmed).
    pub text: String,
    /// The segments that held speech: one per timed piece (one per 30 s window when
    /// decoding ran without timestamp tokens).
    pub segments: Vec<AsrSegment>,
    /// Decoder passes, each sampled draw counted (see [`Transcript`]): more than
    /// one per window means temperature fallback ran.
    pub decode_passes: usize,
    /// Inference wall time in milliseconds (model load and audio decoding excluded).
    pub inference_ms: f64,
}

/// A speech-recognition family's model as [`AsrModel`] runs it: a family implements it
/// and registers its loader ([`families::Family::asr`]).
pub trait Recognizer: Send {
    /// The sample rate it takes.
    fn sample_rate(&self) -> u32;
    /// The device it runs on.
    fn device(&self) -> String;
    /// The decoding defaults of its spec.
    fn default_options(&self) -> DecodeOptions;
    /// Samples in one input window (what one encoder pass reads).
    fn window_samples(&self) -> usize;
    /// The feature frame at sample `sample` (the unit of a segment's `seek`).
    fn frames_at(&self, sample: usize) -> usize;
    /// The model's input features of mono audio (rows of the returned frame count).
    fn features(&self, samples: &[f32]) -> (Vec<f32>, usize);
    /// Resolves the parameter `language` (a code or `auto`) on `samples`: the language
    /// and, when it was detected, its probability.
    fn resolve_language(
        &mut self,
        samples: &[f32],
        language: &str,
    ) -> Result<(String, Option<f32>)>;
    /// Transcribes mono samples (segment times relative to their start).
    fn transcribe(&mut self, samples: &[f32], opts: &DecodeOptions) -> Result<Transcript>;
}

/// A loaded speech-recognition model, reusable across requests.
pub struct AsrModel {
    model: Box<dyn Recognizer>,
    family: String,
    spec_source: SpecSource,
}

impl AsrModel {
    /// Loads an ASR family model (a GGUF made by `--task convert`) onto the device
    /// `opts` selects.
    pub fn load(
        family: &str,
        model: &Path,
        spec_override: Option<&Path>,
        opts: &RuntimeOptions,
    ) -> Result<Self> {
        let (entry, resolved) = resolve_for_task(family, "asr", model, spec_override)?;
        Self::from_resolved(entry, resolved, opts)
    }

    /// Loads a resolved ASR model with its family's loader.
    fn from_resolved(
        entry: &Family,
        resolved: ResolvedModel,
        opts: &RuntimeOptions,
    ) -> Result<Self> {
        let (model, family, spec_source) = load_resolved(entry, "asr", entry.asr, resolved, opts)?;
        Ok(AsrModel {
            model,
            family,
            spec_source,
        })
    }

    /// The spec's default decoding options.
    pub fn default_options(&self) -> DecodeOptions {
        self.model.default_options()
    }

    /// The model's sample rate.
    pub fn sample_rate(&self) -> u32 {
        self.model.sample_rate()
    }

    /// The model's input features (Whisper: log-mel) of mono audio at the model's rate
    /// (rows of the frame count).
    pub fn log_mel(&self, samples: &[f32]) -> (Vec<f32>, usize) {
        self.model.features(samples)
    }

    /// Transcribes mono samples at the model's rate.
    pub fn run_samples(&mut self, samples: &[f32], opts: &DecodeOptions) -> Result<AsrOutput> {
        self.run_chunks(
            samples,
            &[vad::Segment {
                start: 0,
                end: samples.len(),
            }],
            opts,
        )
    }

    /// Transcribes mono samples at the model's rate chunk by chunk, as a VAD model
    /// found speech: chunks of at most one 30 s window ([`vad::chunks_for_window`]),
    /// so windows start and end in pauses instead of inside words, and long silences
    /// are skipped. Segment times stay relative to the whole audio. The VAD model must
    /// run at the same sample rate.
    pub fn run_samples_with_vad(
        &mut self,
        samples: &[f32],
        opts: &DecodeOptions,
        vad: &mut VadModel,
        params: &VadParams,
    ) -> Result<AsrOutput> {
        let rate = self.sample_rate();
        if vad.sample_rate() != rate {
            return Err(EngineError::Usage(format!(
                "the VAD model runs at {} Hz and the ASR model at {rate} Hz; use a VAD model at {rate} Hz",
                vad.sample_rate(),
            )));
        }
        let t0 = Instant::now();
        let speech = vad.run_samples(samples, params)?.segments;
        let chunks = vad::chunks_for_window(&speech, self.model.window_samples());
        let mut out = self.run_chunks(samples, &chunks, opts)?;
        out.inference_ms = t0.elapsed().as_secs_f64() * 1000.0;
        Ok(out)
    }

    /// Transcribes each chunk of `samples` on its own and joins the results; the
    /// language (when `auto`) is detected on the first chunk.
    fn run_chunks(
        &mut self,
        samples: &[f32],
        chunks: &[vad::Segment],
        opts: &DecodeOptions,
    ) -> Result<AsrOutput> {
        let t0 = Instant::now();
        let rate = self.sample_rate();
        let first = chunks
            .first()
            .map_or(&samples[..0], |c| &samples[c.start..c.end]);
        let (language, language_probability) =
            self.model.resolve_language(first, &opts.language)?;
        let opts = DecodeOptions {
            language: language.clone(),
            ..opts.clone()
        };
        let mut segments = Vec::new();
        let mut decode_passes = 0;
        for c in chunks {
            let part = self.model.transcribe(&samples[c.start..c.end], &opts)?;
            let offset = c.start as f64 / rate as f64;
            let frame_offset = self.model.frames_at(c.start);
            segments.extend(part.segments.into_iter().map(|s| AsrSegment {
                start: s.start + offset,
                end: s.end + offset,
                seek: s.seek + frame_offset,
                ..s
            }));
            decode_passes += part.decode_passes;
        }
        let text = segments
            .iter()
            .map(|s| s.text.as_str())
            .collect::<String>()
            .trim()
            .to_string();
        Ok(AsrOutput {
            family: self.family.clone(),
            device: self.model.device(),
            spec_source: self.spec_source.to_string(),
            audio_seconds: samples.len() as f64 / rate as f64,
            language,
            language_probability,
            text,
            segments,
            decode_passes,
            inference_ms: t0.elapsed().as_secs_f64() * 1000.0,
        })
    }

    /// Decodes an audio file and transcribes it.
    pub fn run_file(&mut self, audio: &Path, opts: &DecodeOptions) -> Result<AsrOutput> {
        let a = crate::audio::load(audio, self.sample_rate())?;
        self.run_samples(&a.samples, opts)
    }
}

/// What `--task info` reports about a model, loaded onto the device as its family's
/// task loads it (so that a run measures what loading costs).
#[derive(Debug, Clone, Serialize)]
pub struct ModelInfo {
    /// The family.
    pub family: String,
    /// The task it was loaded for.
    pub task: String,
    /// The container (`gguf`, `ggml:...`).
    pub format: String,
    /// Where the spec came from (`embedded`, `gguf-metadata`, `disk:...`).
    pub spec_source: String,
    /// The device it was loaded onto.
    pub device: String,
    /// Tensors in the file.
    pub tensors: usize,
    /// Bytes of tensor data in the file.
    pub tensor_bytes: usize,
    /// Bytes of the largest tensor.
    pub largest_tensor_bytes: usize,
    /// The file's numeric metadata: the family's hyper-parameters (`whisper.n_mels`...),
    /// in file order.
    pub hyper_parameters: Vec<(String, serde_json::Value)>,
}

/// Loads a model for the first task its family runs (other than `convert`) and
/// describes it.
pub fn info(
    family: &str,
    model: &Path,
    spec_override: Option<&Path>,
    opts: &RuntimeOptions,
) -> Result<ModelInfo> {
    let entry = families::find(family)?;
    let task = entry
        .info
        .tasks
        .iter()
        .copied()
        .find(|t| *t != "convert")
        .unwrap_or("convert");
    let (entry, resolved) = resolve_for_task(family, task, model, spec_override)?;
    let file = &resolved.file;
    let hyper_parameters = file
        .metadata
        .iter()
        .filter_map(|(k, v)| match v {
            GgufValue::U32(x) => Some((k.clone(), serde_json::Value::from(*x))),
            GgufValue::F32(x) => Some((k.clone(), serde_json::Value::from(*x))),
            _ => None,
        })
        .collect();
    let mut info = ModelInfo {
        family: family.to_string(),
        task: task.to_string(),
        format: file.format.to_string(),
        spec_source: resolved.spec_source.to_string(),
        device: String::new(),
        tensors: file.tensors.len(),
        tensor_bytes: file.data_bytes(),
        largest_tensor_bytes: file.tensors.iter().map(|t| t.data.len()).max().unwrap_or(0),
        hyper_parameters,
    };
    info.device = match task {
        "vad" => VadModel::from_resolved(entry, resolved, opts)?
            .model
            .device(),
        "asr" => AsrModel::from_resolved(entry, resolved, opts)?
            .model
            .device(),
        "tts" => TtsModel::from_resolved(entry, resolved, opts)?
            .synth
            .device(),
        _ => String::from("none (convert only)"),
    };
    Ok(info)
}

/// What a text-to-speech request speaks: text, or phonemes for a family that takes
/// them ([`Synthesizer::takes_phonemes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpeechInput {
    /// Plain text, for the family's own text front end.
    Text(String),
    /// Phonemes in the family's alphabet.
    Phonemes(String),
}

/// One text-to-speech request.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeechRequest {
    /// What to say.
    pub input: SpeechInput,
    /// A voice of [`TtsModel::voices`]; `None` for the family's default (the first).
    pub voice: Option<String>,
    /// Speaking rate, 1 for the voice's own; from 0.25 to 4.
    pub speed: f32,
}

/// What a text-to-speech run produced.
#[derive(Debug, Clone, Serialize)]
pub struct SpeechOutput {
    /// Family that ran.
    pub family: String,
    /// Device that ran it.
    pub device: String,
    /// Spec source (`embedded`, `gguf-metadata`, `disk:...`).
    pub spec_source: String,
    /// The voice that spoke.
    pub voice: String,
    /// Sample rate of `samples`.
    pub sample_rate: u32,
    /// Mono samples in -1..1.
    #[serde(skip)]
    pub samples: Vec<f32>,
    /// Length of the audio in seconds.
    pub audio_seconds: f64,
    /// Inference wall time in milliseconds (model load excluded).
    pub inference_ms: f64,
}

/// A text-to-speech family's model as [`TtsModel`] runs it: a family implements it
/// and registers its loader ([`families::Family::tts`]).
pub trait Synthesizer: Send {
    /// The rate of the samples it makes.
    fn sample_rate(&self) -> u32;
    /// Its voices; the first is the default.
    fn voices(&self) -> Vec<String>;
    /// True when it takes [`SpeechInput::Phonemes`] as well as text.
    fn takes_phonemes(&self) -> bool;
    /// The device it runs on.
    fn device(&self) -> String;
    /// Speaks `input` (non-empty) with `voice` (one of [`Synthesizer::voices`]) at
    /// `speed` (checked by [`TtsModel::run`]); `None` when its audio would pass
    /// `max_samples`, which it says as soon as it knows the length, before making the
    /// audio (a request over its limit costs no synthesis past that point).
    fn synthesize(
        &mut self,
        input: &SpeechInput,
        voice: &str,
        speed: f32,
        max_samples: usize,
    ) -> Result<Option<Vec<f32>>>;
}

/// Speaking rates a request may ask for.
pub const SPEED_RANGE: std::ops::RangeInclusive<f32> = 0.25..=4.0;

/// The longest speech a request makes by default, in seconds (the CLI's
/// `--max-speech-s`, the server's `max_speech_s`): synthesis stops with an error once
/// the audio passes it, so no input makes unbounded audio.
pub const DEFAULT_MAX_SPEECH_S: f64 = 1800.0;

/// The highest speech limit a front end accepts, in seconds (10 h): a 16-bit WAV at
/// 48 kHz holds 12.4 h in its 32-bit sizes.
pub const MAX_SPEECH_LIMIT_S: f64 = 36_000.0;

/// What a streamed text-to-speech run produced, less the samples (which went to the
/// caller sentence by sentence).
#[derive(Debug, Clone, Serialize)]
pub struct SpeechStats {
    /// Family that ran.
    pub family: String,
    /// Device that ran it.
    pub device: String,
    /// Spec source (`embedded`, `gguf-metadata`, `disk:...`).
    pub spec_source: String,
    /// The voice that spoke.
    pub voice: String,
    /// Sample rate of the samples.
    pub sample_rate: u32,
    /// How many pieces the input was split into ([`sentences`]) and synthesized as.
    pub sentences: usize,
    /// Length of the audio in seconds.
    pub audio_seconds: f64,
    /// Wall time until the first sentence's audio was ready, in milliseconds.
    pub first_audio_ms: f64,
    /// Inference wall time in milliseconds (model load excluded).
    pub inference_ms: f64,
}

/// Abbreviations whose period ends no sentence ("Dr. Smith").
const ABBREVIATIONS: &[&str] = &[
    "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "e.g", "i.e", "no", "mt",
];

/// Splits text (or phonemes) into the pieces that are synthesized one after another: a
/// piece ends after `.`, `!`, `?`, `…` (or their CJK forms) and any closing quotes or
/// brackets, when whitespace or the end follows (a CJK mark needs no space), and at a
/// blank line. A lone period after an abbreviation or a single letter ("Dr.", "J.")
/// ends none; a piece without a letter or digit joins its neighbour. Pieces are
/// trimmed; text with no letter or digit at all is one piece.
pub fn sentences(text: &str) -> Vec<&str> {
    let is_terminator = |c: char| matches!(c, '.' | '!' | '?' | '…' | '。' | '！' | '？');
    let is_closer = |c: char| matches!(c, '"' | '\'' | '”' | '’' | ')' | ']' | '»' | '」');
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut pieces = Pieces::default();
    let mut start = 0;
    let mut i = 0;
    while i < chars.len() {
        let (at, c) = chars[i];
        if is_terminator(c) {
            let mut j = i + 1;
            while j < chars.len() && is_terminator(chars[j].1) {
                j += 1;
            }
            while j < chars.len() && is_closer(chars[j].1) {
                j += 1;
            }
            let end = chars.get(j).map_or(text.len(), |(b, _)| *b);
            let boundary =
                j == chars.len() || chars[j].1.is_whitespace() || matches!(c, '。' | '！' | '？');
            let abbreviation = c == '.' && j == i + 1 && ends_with_abbreviation(&text[start..at]);
            if boundary && !abbreviation {
                pieces.push(text, start, end);
                start = end;
            }
            i = j;
        } else {
            let blank_line = c == '\n'
                && text[at + 1..]
                    .trim_start_matches(|c: char| c.is_whitespace() && c != '\n')
                    .starts_with('\n');
            if blank_line {
                pieces.push(text, start, at);
                start = at;
            }
            i += 1;
        }
    }
    pieces.push(text, start, text.len());
    if pieces.ranges.is_empty() {
        let t = text.trim();
        return if t.is_empty() { Vec::new() } else { vec![t] };
    }
    pieces.ranges.iter().map(|&(a, b)| &text[a..b]).collect()
}

/// The byte ranges [`sentences`] has found so far, and where a piece without a letter
/// or digit that came before any other starts (it joins the next one).
#[derive(Default)]
struct Pieces {
    ranges: Vec<(usize, usize)>,
    lead: Option<usize>,
}

impl Pieces {
    /// Adds `text[start..end]`, trimmed: a piece of its own when it holds a letter or a
    /// digit, else joined to the piece before (or the next, when there is none before).
    fn push(&mut self, text: &str, start: usize, end: usize) {
        let piece = &text[start..end];
        let trimmed = piece.trim_start();
        let a = start + (piece.len() - trimmed.len());
        let b = a + trimmed.trim_end().len();
        if a == b {
            return;
        }
        if text[a..b].chars().any(char::is_alphanumeric) {
            self.ranges.push((self.lead.take().unwrap_or(a), b));
        } else if let Some(last) = self.ranges.last_mut() {
            last.1 = b;
        } else {
            self.lead.get_or_insert(a);
        }
    }
}

/// True when `before` (the text up to a period) ends in a known abbreviation or a
/// single letter.
fn ends_with_abbreviation(before: &str) -> bool {
    let word = before
        .rsplit(|c: char| c.is_whitespace() || c == '(' || c == '"')
        .next()
        .unwrap_or("");
    (word.chars().count() == 1 && word.chars().all(char::is_alphabetic))
        || ABBREVIATIONS.contains(&word.to_lowercase().as_str())
}

/// A loaded text-to-speech model, reusable across requests.
pub struct TtsModel {
    synth: Box<dyn Synthesizer>,
    family: String,
    spec_source: SpecSource,
}

impl TtsModel {
    /// Loads a TTS family model onto the device `opts` selects.
    pub fn load(
        family: &str,
        model: &Path,
        spec_override: Option<&Path>,
        opts: &RuntimeOptions,
    ) -> Result<Self> {
        let (entry, resolved) = resolve_for_task(family, "tts", model, spec_override)?;
        Self::from_resolved(entry, resolved, opts)
    }

    /// Loads a resolved TTS model with its family's loader.
    fn from_resolved(
        entry: &Family,
        resolved: ResolvedModel,
        opts: &RuntimeOptions,
    ) -> Result<Self> {
        let (synth, family, spec_source) = load_resolved(entry, "tts", entry.tts, resolved, opts)?;
        Ok(TtsModel {
            synth,
            family,
            spec_source,
        })
    }

    /// The model's voices; the first is the default.
    pub fn voices(&self) -> Vec<String> {
        self.synth.voices()
    }

    /// The rate of the samples it makes.
    pub fn sample_rate(&self) -> u32 {
        self.synth.sample_rate()
    }

    /// True when it takes [`SpeechInput::Phonemes`] as well as text.
    pub fn takes_phonemes(&self) -> bool {
        self.synth.takes_phonemes()
    }

    /// The family it is.
    pub fn family(&self) -> &str {
        &self.family
    }

    /// Checks a request against the model without speaking it (errors name the
    /// parameter: `input`, `voice`, `speed`); returns the voice that will speak.
    pub fn check(&self, req: &SpeechRequest) -> Result<String> {
        let (SpeechInput::Text(text) | SpeechInput::Phonemes(text)) = &req.input;
        if text.trim().is_empty() {
            return Err(EngineError::Usage(
                "parameter 'input' is empty: give the text to speak".into(),
            ));
        }
        if matches!(req.input, SpeechInput::Phonemes(_)) && !self.synth.takes_phonemes() {
            return Err(EngineError::Usage(format!(
                "parameter 'input': family '{}' takes text, not phonemes",
                self.family
            )));
        }
        if !req.speed.is_finite() || !SPEED_RANGE.contains(&req.speed) {
            return Err(EngineError::Usage(format!(
                "parameter 'speed' is {}; it must be from {} to {}",
                req.speed,
                SPEED_RANGE.start(),
                SPEED_RANGE.end()
            )));
        }
        let voices = self.synth.voices();
        match &req.voice {
            None => voices.first().cloned().ok_or_else(|| {
                EngineError::Usage(format!("family '{}' has no voices", self.family))
            }),
            Some(v) if voices.contains(v) => Ok(v.clone()),
            Some(v) => Err(EngineError::Usage(format!(
                "parameter 'voice' is '{v}', which this model does not have (voices: {})",
                voices.join(", ")
            ))),
        }
    }

    /// Checks the request ([`TtsModel::check`]), then speaks it whole, under
    /// [`DEFAULT_MAX_SPEECH_S`].
    pub fn run(&mut self, req: &SpeechRequest) -> Result<SpeechOutput> {
        let mut samples = Vec::new();
        let stats = self.run_streamed(req, DEFAULT_MAX_SPEECH_S, &mut |chunk| {
            samples.extend_from_slice(chunk);
            Ok(())
        })?;
        Ok(SpeechOutput {
            family: stats.family,
            device: stats.device,
            spec_source: stats.spec_source,
            voice: stats.voice,
            sample_rate: stats.sample_rate,
            audio_seconds: stats.audio_seconds,
            samples,
            inference_ms: stats.inference_ms,
        })
    }

    /// Checks the request, then speaks it piece by piece ([`sentences`]), handing each
    /// piece's samples to `on_audio` as soon as they exist (a streaming server sends
    /// them on). Once the audio passes `max_seconds` it stops with an error; an error
    /// from `on_audio` (a client gone) stops it too.
    pub fn run_streamed(
        &mut self,
        req: &SpeechRequest,
        max_seconds: f64,
        on_audio: &mut dyn FnMut(&[f32]) -> Result<()>,
    ) -> Result<SpeechStats> {
        let voice = self.check(req)?;
        if !(max_seconds > 0.0 && max_seconds <= MAX_SPEECH_LIMIT_S) {
            return Err(EngineError::Usage(format!(
                "parameter 'max_speech_s' {max_seconds} must be from 0 to {MAX_SPEECH_LIMIT_S} seconds"
            )));
        }
        let (SpeechInput::Text(text) | SpeechInput::Phonemes(text)) = &req.input;
        let pieces = sentences(text);
        let sample_rate = self.synth.sample_rate();
        let max_samples = (max_seconds * sample_rate as f64).ceil() as usize;
        let t0 = Instant::now();
        let mut first_audio_ms = 0.0;
        let mut total = 0usize;
        for (i, piece) in pieces.iter().enumerate() {
            let input = match req.input {
                SpeechInput::Text(_) => SpeechInput::Text(piece.to_string()),
                SpeechInput::Phonemes(_) => SpeechInput::Phonemes(piece.to_string()),
            };
            let budget = max_samples - total;
            let samples = self
                .synth
                .synthesize(&input, &voice, req.speed, budget)?
                .filter(|s| s.len() <= budget)
                .ok_or_else(|| {
                    EngineError::Usage(format!(
                        "the speech passed the limit of {max_seconds} s of audio at sentence {} of {}; \
                         give a shorter input, or raise parameter 'max_speech_s'",
                        i + 1,
                        pieces.len()
                    ))
                })?;
            total += samples.len();
            if i == 0 {
                first_audio_ms = t0.elapsed().as_secs_f64() * 1000.0;
            }
            on_audio(&samples)?;
        }
        Ok(SpeechStats {
            family: self.family.clone(),
            device: self.synth.device(),
            spec_source: self.spec_source.to_string(),
            voice,
            sample_rate,
            sentences: pieces.len(),
            audio_seconds: total as f64 / sample_rate as f64,
            first_audio_ms,
            inference_ms: t0.elapsed().as_secs_f64() * 1000.0,
        })
    }
}

#[cfg(test)]
mod sentence_tests {
    use super::sentences;

    #[test]
    fn text_splits_at_sentence_ends_only() {
        assert_eq!(
            sentences("Hello there. How are you? Fine!  "),
            ["Hello there.", "How are you?", "Fine!"]
        );
        assert_eq!(
            sentences("Dr. Smith met J. R. Jones at 3.5 km. \"Really?\" she asked."),
            [
                "Dr. Smith met J. R. Jones at 3.5 km.",
                "\"Really?\"",
                "she asked."
            ]
        );
        assert_eq!(
            sentences("Wait... what?! No (really.) Yes"),
            ["Wait...", "what?!", "No (really.)", "Yes"]
        );
        assert_eq!(
            sentences("First paragraph\n\nSecond one\nstill second"),
            ["First paragraph", "Second one\nstill second"]
        );
        assert_eq!(sentences("一つ。二つ！"), ["一つ。", "二つ！"]);
        assert_eq!(sentences("həlˈoʊ. wˈɜɹld!"), ["həlˈoʊ.", "wˈɜɹld!"]);
    }

    #[test]
    fn punctuation_never_stands_alone() {
        assert_eq!(sentences("Hi. ... ! Bye."), ["Hi. ... !", "Bye."]);
        assert_eq!(sentences("... Hi."), ["... Hi."]);
        assert_eq!(sentences(" ?! "), ["?!"]);
        assert!(sentences("  \n ").is_empty());
    }
}
