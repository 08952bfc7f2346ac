//! OpenAI Whisper (speech recognition) on ggml.
//!
//! Weights come from CTranslate2 models (what faster-whisper uses), converted once to
//! GGUF by [`convert_ct2`]: tensors keep CTranslate2's names with `/` as `.`, the
//! tokenizer vocabulary, the mel filterbank and the hyper-parameters travel in the file.
//! Linear layers may be stored as Q8_0 ([`WeightType`]). [`Whisper`] runs the log-mel
//! front end, the encoder per 30 s window and greedy decoding with faster-whisper's
//! temperature fallback and timestamp tokens (segments, windows seeking to the last
//! timestamp), the way faster-whisper does with `beam_size=1` and
//! `condition_on_previous_text=False`. Without timestamp tokens
//! ([`DecodeOptions::without_timestamps`], faster-whisper's `without_timestamps=True`)
//! each window is one segment, and a window whose text ends early loses the rest.

pub mod alignment;
mod batch;
pub mod convert;
pub mod ct2;
pub mod decode;
pub mod mel;
pub mod model;
pub mod row;
pub mod timestamps;
pub mod tokenizer;

use std::path::Path;
use std::sync::Arc;

use crate::asr::{DecodeOptions, Recognizer, Transcript};
use crate::backend::Runtime;
use crate::error::{EngineError, Result};
use crate::families::{Family, LoaderInfo};
use crate::ggml::{DType, HostTensor, Scheduler};
use crate::model_file::ModelFile;
use crate::spec::ModelSpec;
use crate::task::Task;

pub use convert::{convert_ct2, stored_type, Converted, WeightType};
use decode::{argmax_logprob, softmax_at};
pub use decode::{
    compression_ratio, needs_fallback, pick_token, Attempt, Sampler, FALLBACK_TEMPERATURES,
};
use mel::MelParams;
use model::{HParams, WhisperNet};
pub use timestamps::{apply_timestamp_rules, split_at_timestamps, WindowSplit};
use tokenizer::Tokenizer;

/// The family's registry entry: ASR, and conversion from CTranslate2.
pub const FAMILY: Family = Family {
    info: LoaderInfo {
        family: "whisper",
        tasks: &[Task::Asr, Task::Convert],
        formats: &[
            "gguf",
            "ctranslate2 (model.bin + tokenizer.json [+ config.json]; convert only)",
        ],
        description:
            "OpenAI Whisper speech recognition (tiny.en and base tested), greedy with temperature fallback and timestamps",
    },
    spec: Some(include_str!("../../../../model_specs/whisper.json")),
    legacy: &[],
    sources: &[crate::model_file::SourceFormat::CTranslate2],
    convert: Some(convert::convert),
    vad: None,
    asr: Some(load_recognizer),
    tts: None,
};

/// The registry's ASR loader: [`Whisper::load`].
fn load_recognizer(
    file: ModelFile,
    spec: &ModelSpec,
    runtime: Runtime,
) -> Result<Box<dyn Recognizer>> {
    Ok(Box::new(Whisper::load(file, spec, runtime)?))
}

/// The spec's decoding defaults (`defaults` of `model_specs/whisper.json`), with
/// faster-whisper's where the spec gives none.
pub fn default_options(spec: &ModelSpec) -> DecodeOptions {
    DecodeOptions {
        language: spec
            .defaults
            .get("language")
            .and_then(|v| v.as_str())
            .unwrap_or("auto")
            .to_string(),
        no_speech_threshold: spec.default_f64("no_speech_threshold").unwrap_or(0.6) as f32,
        log_prob_threshold: spec.default_f64("log_prob_threshold").unwrap_or(-1.0) as f32,
        without_timestamps: false,
        max_initial_timestamp: 1.0,
        temperatures: spec
            .defaults
            .get("temperatures")
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.as_f64())
                    .map(|t| t as f32)
                    .collect()
            })
            .unwrap_or_else(|| FALLBACK_TEMPERATURES.to_vec()),
        compression_ratio_threshold: Some(
            spec.default_f64("compression_ratio_threshold")
                .unwrap_or(2.4) as f32,
        ),
        best_of: spec.default_f64("best_of").unwrap_or(5.0) as usize,
        seed: 0,
        silence_floor_db: Some(spec.default_f64("silence_floor_db").unwrap_or(-60.0) as f32),
        word_timestamps: false,
    }
}

/// GGUF key of the alignment heads: (decoder layer, head) pairs, flattened.
pub const ALIGNMENT_HEADS_KEY: &str = "whisper.alignment_heads";

/// GGUF key of the tokenizer vocabulary (id order).
pub const TOKENS_KEY: &str = "tokenizer.ggml.tokens";
/// GGUF tensor holding the mel filterbank ([n_fft/2+1, n_mels] in ggml order).
pub const MEL_FILTERS: &str = "mel_filters";

const HPARAM_KEYS: [&str; 10] = [
    "n_mels",
    "n_audio_ctx",
    "n_audio_state",
    "n_audio_head",
    "n_audio_layer",
    "n_text_ctx",
    "n_text_state",
    "n_text_head",
    "n_text_layer",
    "n_vocab",
];

impl HParams {
    fn values(&self) -> [usize; 10] {
        [
            self.n_mels,
            self.n_audio_ctx,
            self.n_audio_state,
            self.n_audio_head,
            self.n_audio_layer,
            self.n_text_ctx,
            self.n_text_state,
            self.n_text_head,
            self.n_text_layer,
            self.n_vocab,
        ]
    }

    fn from_values(v: [usize; 10]) -> Self {
        HParams {
            n_mels: v[0],
            n_audio_ctx: v[1],
            n_audio_state: v[2],
            n_audio_head: v[3],
            n_audio_layer: v[4],
            n_text_ctx: v[5],
            n_text_state: v[6],
            n_text_head: v[7],
            n_text_layer: v[8],
            n_vocab: v[9],
        }
    }
}

/// The hyper-parameters in words, for the error that refuses them: which are zero, or
/// which width does not split into its heads.
fn describe_dimensions(hp: &HParams) -> String {
    let zero: Vec<&str> = HPARAM_KEYS
        .iter()
        .zip(hp.values())
        .filter(|(_, v)| *v == 0)
        .map(|(k, _)| *k)
        .collect();
    if !zero.is_empty() {
        return format!("hyper-parameters {} are 0", zero.join(", "));
    }
    format!(
        "inconsistent dimensions: n_audio_state {} must split into n_audio_head {} and n_text_state {} into n_text_head {}",
        hp.n_audio_state, hp.n_audio_head, hp.n_text_state, hp.n_text_head
    )
}

impl Recognizer for Whisper {
    fn sample_rate(&self) -> u32 {
        self.sample_rate
    }

    fn device(&self) -> String {
        self.runtime().device().name.clone()
    }

    fn default_options(&self) -> DecodeOptions {
        self.defaults.clone()
    }

    fn window_samples(&self) -> usize {
        Whisper::window_samples(self)
    }

    fn frames_at(&self, sample: usize) -> usize {
        Whisper::frames_at(self, sample)
    }

    fn features(&self, samples: &[f32]) -> (Vec<f32>, usize) {
        self.log_mel(samples)
    }

    fn resolve_language(
        &mut self,
        samples: &[f32],
        language: &str,
    ) -> Result<(String, Option<f32>)> {
        Whisper::resolve_language(self, samples, language)
    }

    fn transcribe_batch(
        &mut self,
        jobs: &[(&[f32], &DecodeOptions)],
        width: usize,
    ) -> Result<Vec<Result<Transcript>>> {
        Whisper::transcribe_batch(self, jobs, width)
    }

    fn transcribe(&mut self, samples: &[f32], opts: &DecodeOptions) -> Result<Transcript> {
        Whisper::transcribe(self, samples, opts)
    }

    fn fork(&self) -> Result<Box<dyn Recognizer>> {
        Ok(Box::new(Whisper::fork(self)?))
    }

    fn weight_addresses(&self) -> Vec<usize> {
        self.net.weight_addresses()
    }
}

/// A loaded Whisper model.
pub struct Whisper {
    net: WhisperNet,
    /// Runs the encoder and the prompt's decoder graphs.
    sched: Scheduler,
    /// Runs the decoder step graph, which keeps its allocation from token to token
    /// while the encoder and prompts run on `sched`.
    step_sched: Scheduler,
    hp: HParams,
    mel: MelParams,
    filters: Vec<f32>,
    /// Shared by the model's forks (the vocabulary is the biggest host table).
    tok: Arc<Tokenizer>,
    suppress: Vec<u32>,
    suppress_begin: Vec<u32>,
    /// The (decoder layer, head) pairs whose cross-attention follows the audio (word
    /// timestamps); empty when the file names none.
    alignment_heads: Vec<(usize, usize)>,
    sample_rate: u32,
    defaults: DecodeOptions,
}

/// A token list of the file's metadata; empty when the file has none.
fn list(file: &ModelFile, key: &str) -> Vec<u32> {
    file.meta::<&[u32]>(key).unwrap_or_default().to_vec()
}

/// A tensor that the network needs as plain floats (norms, positions, the mel filters):
/// a quantized one means the file was not made by this converter.
fn to_f32(t: &HostTensor) -> Result<Vec<f32>> {
    if t.dtype.block_len() > 1 {
        return Err(EngineError::Usage(format!(
            "tensor '{}' is {:?}; only matrix weights may be quantized (re-convert the model)",
            t.name, t.dtype
        )));
    }
    Ok(t.to_f32())
}

/// A weight as the network computes with it: matrix weights as stored (f16, f32 or
/// Q8_0), everything else as f32.
fn compute_tensor(t: HostTensor, name: String, path: &Path) -> Result<HostTensor> {
    if model::is_matmul_weight(&name) {
        return Ok(HostTensor { name, ..t });
    }
    let values = to_f32(&t).map_err(|e| EngineError::Model {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(HostTensor {
        name,
        dtype: DType::F32,
        ne: t.ne.clone(),
        data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    })
}

/// Checks the spec's tensor list against the file: `{i}` in a name stands for every
/// layer index of its stack (encoder or decoder).
fn check_spec(file: &ModelFile, spec: &ModelSpec, hp: &HParams) -> Result<()> {
    spec.check_tensors(file, &|pattern| {
        if pattern.starts_with("encoder") {
            hp.n_audio_layer
        } else {
            hp.n_text_layer
        }
    })
}

impl Whisper {
    /// Checks a converted GGUF against the spec and its own hyper-parameters, then
    /// uploads the weights to the runtime's device (matrix weights in their stored type,
    /// the rest as f32).
    /// Takes the file's weight tensors (uploaded, not copied: loading holds each weight
    /// once on the host).
    pub fn load(mut file: ModelFile, spec: &ModelSpec, runtime: Runtime) -> Result<Self> {
        let mut v = [0usize; 10];
        for (slot, key) in v.iter_mut().zip(HPARAM_KEYS) {
            *slot = file.require::<u32>(&format!("whisper.{key}"))? as usize;
        }
        let hp = HParams::from_values(v);
        let path = file.path.clone();
        let bad = |reason: String| EngineError::Model {
            path: path.clone(),
            reason,
        };
        if hp.values().contains(&0)
            || !hp.n_audio_state.is_multiple_of(hp.n_audio_head)
            || !hp.n_text_state.is_multiple_of(hp.n_text_head)
        {
            return Err(bad(describe_dimensions(&hp)));
        }
        check_spec(&file, spec, &hp)?;
        let mut tensors = Vec::new();
        for (name, ne) in hp.tensor_shapes() {
            let at = file
                .tensors
                .iter()
                .position(|t| t.name == name)
                .ok_or_else(|| bad(format!("tensor '{name}' is missing")))?;
            let t = file.tensors.swap_remove(at);
            if t.ne != ne {
                return Err(bad(format!(
                    "tensor '{name}' has shape {:?}, the hyper-parameters need {ne:?}",
                    t.ne
                )));
            }
            tensors.push(compute_tensor(t, name, &path)?);
        }
        let mel = MelParams {
            sample_rate: spec.sample_rate,
            n_fft: file.require::<u32>("whisper.n_fft")? as usize,
            hop: file.require::<u32>("whisper.hop_length")? as usize,
            n_mels: hp.n_mels,
        };
        mel.validate()
            .map_err(|e| bad(format!("metadata whisper.{e}")))?;
        let filters_t = file
            .tensor(MEL_FILTERS)
            .ok_or_else(|| bad(format!("tensor '{MEL_FILTERS}' is missing")))?;
        if filters_t.ne != [(mel.n_fft / 2 + 1) as i64, hp.n_mels as i64] {
            return Err(bad(format!("'{MEL_FILTERS}' has shape {:?}", filters_t.ne)));
        }
        let vocab = file.require::<&[String]>(TOKENS_KEY)?.to_vec();
        if vocab.len() != hp.n_vocab {
            return Err(bad(format!(
                "{} tokens for a vocabulary of {}",
                vocab.len(),
                hp.n_vocab
            )));
        }
        let tok = Tokenizer::new(vocab).map_err(bad)?;
        let heads = list(&file, ALIGNMENT_HEADS_KEY);
        if !heads.len().is_multiple_of(2) {
            return Err(bad(format!(
                "{ALIGNMENT_HEADS_KEY} holds {} values, not (layer, head) pairs",
                heads.len()
            )));
        }
        let alignment_heads: Vec<(usize, usize)> = heads
            .chunks(2)
            .map(|p| (p[0] as usize, p[1] as usize))
            .collect();
        if let Some((l, h)) = alignment_heads
            .iter()
            .find(|&&(l, h)| l >= hp.n_text_layer || h >= hp.n_text_head)
        {
            return Err(bad(format!(
                "{ALIGNMENT_HEADS_KEY} names layer {l} head {h}, beyond the decoder's {} layers of {} heads",
                hp.n_text_layer, hp.n_text_head
            )));
        }
        let net = WhisperNet::new(hp, tensors, runtime, &path)?;
        let sched = net.scheduler()?;
        let step_sched = net.scheduler()?;
        Ok(Whisper {
            net,
            sched,
            step_sched,
            hp,
            mel,
            filters: to_f32(filters_t).map_err(|e| bad(e.to_string()))?,
            tok: Arc::new(tok),
            suppress: list(&file, "whisper.suppress_ids"),
            suppress_begin: list(&file, "whisper.suppress_ids_begin"),
            alignment_heads,
            sample_rate: spec.sample_rate,
            defaults: default_options(spec),
        })
    }

    /// A second model for another thread: the weights and the vocabulary shared (not
    /// copied), caches, schedulers and backends of its own; it transcribes as `self`
    /// does, bit for bit.
    pub fn fork(&self) -> Result<Self> {
        let net = self.net.fork()?;
        let sched = net.scheduler()?;
        let step_sched = net.scheduler()?;
        Ok(Whisper {
            net,
            sched,
            step_sched,
            hp: self.hp,
            mel: self.mel,
            filters: self.filters.clone(),
            tok: Arc::clone(&self.tok),
            suppress: self.suppress.clone(),
            suppress_begin: self.suppress_begin.clone(),
            alignment_heads: self.alignment_heads.clone(),
            sample_rate: self.sample_rate,
            defaults: self.defaults.clone(),
        })
    }

    /// The runtime (device) the model runs on.
    pub fn runtime(&self) -> &Runtime {
        self.net.runtime()
    }

    /// Samples in one input window (30 s for every Whisper size): what
    /// [`Whisper::transcribe`] encodes at a time.
    pub fn window_samples(&self) -> usize {
        2 * self.hp.n_audio_ctx * self.mel.hop
    }

    /// The mel frame at sample `sample` (the unit of a segment's `seek`).
    pub fn frames_at(&self, sample: usize) -> usize {
        sample / self.mel.hop
    }

    /// True for multilingual models (English-only ones have one token fewer).
    pub fn is_multilingual(&self) -> bool {
        self.hp.n_vocab >= 51865
    }

    /// Log-mel features of 16 kHz mono audio: `n_mels` rows of the returned frame count.
    pub fn log_mel(&self, samples: &[f32]) -> (Vec<f32>, usize) {
        let threads = crate::backend::threads_free_now(self.net.runtime().threads());
        mel::log_mel_threads(samples, &self.mel, &self.filters, threads)
    }

    /// The language codes this model accepts: every language token of a multilingual
    /// model, just `en` for an English-only one.
    pub fn languages(&self) -> Vec<String> {
        if self.is_multilingual() {
            self.tok.languages().into_iter().map(|(c, _)| c).collect()
        } else {
            vec!["en".into()]
        }
    }

    /// Checks a language code against [`Whisper::languages`]: a usage error naming a few
    /// valid codes when it is not one of them.
    fn language_token(&self, code: &str) -> Result<Option<u32>> {
        if !self.is_multilingual() {
            if code == "en" {
                return Ok(None);
            }
            return Err(EngineError::Usage(format!(
                "this Whisper model is English-only; parameter 'language' '{code}' is not available (use en, auto or a multilingual model)"
            )));
        }
        let langs = self.tok.languages();
        if let Some((_, id)) = langs.iter().find(|(c, _)| c == code) {
            return Ok(Some(*id));
        }
        let few: Vec<&str> = langs.iter().take(8).map(|(c, _)| c.as_str()).collect();
        Err(EngineError::Usage(format!(
            "unknown parameter 'language' '{code}': this model knows {} language codes, e.g. {}, ... (or auto to detect it)",
            langs.len(),
            few.join(", ")
        )))
    }

    /// Resolves `language` for `samples`: `auto` on a multilingual model runs
    /// [`Whisper::detect_language`] and returns the language with its probability; `auto`
    /// on an English-only model is `en`; any other code is checked and returned as is.
    pub fn resolve_language(
        &mut self,
        samples: &[f32],
        language: &str,
    ) -> Result<(String, Option<f32>)> {
        if language != "auto" {
            self.language_token(language)?;
            return Ok((language.to_string(), None));
        }
        if !self.is_multilingual() {
            return Ok(("en".into(), None));
        }
        let (code, p) = self.detect_language(samples)?;
        Ok((code, Some(p)))
    }

    /// Detects the spoken language as OpenAI Whisper and faster-whisper do: the first
    /// 30 s window is encoded, the decoder reads `<|startoftranscript|>` alone, and the
    /// softmax over the language tokens' logits picks the most probable language.
    /// Returns its code and probability.
    pub fn detect_language(&mut self, samples: &[f32]) -> Result<(String, f32)> {
        let langs = self.tok.languages();
        if !self.is_multilingual() || langs.is_empty() {
            return Err(EngineError::Usage(
                "language detection needs a multilingual Whisper model; this one is English-only (set parameter 'language' to en)".into(),
            ));
        }
        let (mel, n_frames) = self.log_mel(samples);
        let window = 2 * self.hp.n_audio_ctx;
        let input = mel::window(&mel, self.hp.n_mels, n_frames, 0, window);
        self.net.encode(&mut self.sched, 0, &input)?;
        let sot = self.tok.specials().sot;
        let logits = self.net.decode(&mut self.sched, 0, &[sot], 0, 1)?;
        let lang_logits: Vec<f32> = langs.iter().map(|(_, id)| logits[*id as usize]).collect();
        let (best, _) = argmax_logprob(&lang_logits);
        Ok((langs[best].0.clone(), softmax_at(&lang_logits, best)))
    }
}
