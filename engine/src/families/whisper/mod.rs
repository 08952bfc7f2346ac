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

pub mod ct2;
pub mod mel;
pub mod model;
pub mod tokenizer;

use std::path::{Path, PathBuf};

use crate::asr::{DecodeOptions, Segment, Transcript};
use crate::backend::Runtime;
use crate::error::{EngineError, Result};
use crate::families::{Conversion, ConvertOptions, Family, LoaderInfo};
use crate::ggml::{self, DType, GgufValue, HostTensor, Scheduler};
use crate::model_file::ModelFile;
use crate::spec::ModelSpec;
use crate::tasks::Recognizer;

use mel::MelParams;
use model::{HParams, WhisperNet};
use tokenizer::Tokenizer;

/// The family's registry entry: ASR, and conversion from CTranslate2.
pub const FAMILY: Family = Family {
    info: LoaderInfo {
        family: "whisper",
        tasks: &["asr", "convert"],
        formats: &[
            "gguf",
            "ctranslate2 (model.bin + tokenizer.json [+ config.json]; convert only)",
        ],
        description:
            "OpenAI Whisper speech recognition (tiny.en tested), greedy decoding without timestamps",
    },
    spec: Some(include_str!("../../../../model_specs/whisper.json")),
    legacy: &[],
    convert: Some(convert),
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

/// The registry's converter: a CTranslate2 model (its `model.bin` or folder) through
/// [`convert_ct2`], `quantize` naming a [`WeightType`]; no further sources.
fn convert(
    model: &Path,
    spec_override: Option<&Path>,
    opts: &ConvertOptions,
) -> Result<Conversion> {
    opts.only_sources(FAMILY.info.family, &[])?;
    let weights = match &opts.quantize {
        Some(q) => q.parse()?,
        None => WeightType::Keep,
    };
    let spec = crate::tasks::resolve_source_spec(FAMILY.info.family, model, spec_override)?;
    let c = convert_ct2(model, &spec, weights)?;
    Ok(Conversion {
        spec,
        source_format: c.source_format,
        metadata: c.metadata,
        tensors: c.tensors,
    })
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
    }
}

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

/// What a conversion produces: GGUF metadata (without the audiocpp keys) and tensors.
pub struct Converted {
    /// Container description for `audiocpp.source_format`.
    pub source_format: String,
    /// Hyper-parameters, vocabulary, suppression lists.
    pub metadata: Vec<(String, GgufValue)>,
    /// Weights and the mel filterbank.
    pub tensors: Vec<HostTensor>,
}

fn ct2_paths(path: &Path) -> (PathBuf, PathBuf) {
    if path.is_dir() {
        (path.join("model.bin"), path.to_path_buf())
    } else {
        (
            path.to_path_buf(),
            path.parent().map(Path::to_path_buf).unwrap_or_default(),
        )
    }
}

fn count_layers(m: &ct2::Ct2Model, prefix: &str) -> usize {
    (0..)
        .take_while(|i| {
            let p = format!("{prefix}/layer_{i}/");
            m.variables.iter().any(|v| v.name.starts_with(&p))
        })
        .count()
}

/// How the converter stores the linear layers' weights; every other tensor (the token
/// embedding included) keeps its CTranslate2 type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightType {
    /// As in the CTranslate2 file (f16 or f32).
    #[default]
    Keep,
    /// ggml Q8_0 (8-bit blocks of 32 with an f16 scale) for the linear layers.
    Q8_0,
}

impl std::str::FromStr for WeightType {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "keep" | "f16" => Ok(WeightType::Keep),
            "q8_0" => Ok(WeightType::Q8_0),
            other => Err(EngineError::Usage(format!(
                "unknown parameter 'quantize' '{other}' (expected q8_0, or f16 to keep the model's type)"
            ))),
        }
    }
}

/// True for the linear layers' weights, the ones Q8_0 applies to. The token embedding
/// (also the output projection) stays in the model's type: quantizing it turned the
/// first word of the espeak clip `phrase_en_us` from "Speech" into "The" (as
/// faster-whisper's int8 does), keeping it f16 gives the exact phrase.
fn is_linear_weight(name: &str) -> bool {
    model::is_matmul_weight(name) && name != "decoder.embeddings.weight"
}

/// The type a converted tensor is stored in: a pure decision from its name, its dims and
/// the requested weight type. Quantized rows must be whole blocks; tensors that are not
/// keep `source`.
pub fn stored_type(name: &str, ne: &[i64], source: DType, want: WeightType) -> DType {
    let q = DType::Q8_0;
    let whole_blocks = ne
        .first()
        .is_some_and(|&n| (n as usize).is_multiple_of(q.block_len()));
    match want {
        WeightType::Q8_0 if is_linear_weight(name) && whole_blocks => q,
        _ => source,
    }
}

fn store(t: HostTensor, want: WeightType) -> Result<HostTensor> {
    let dtype = stored_type(&t.name, &t.ne, t.dtype, want);
    if dtype == t.dtype {
        return Ok(t);
    }
    let values = t.to_f32();
    let data = ggml::quantize_rows(dtype, &values, t.ne[0] as usize)?;
    Ok(HostTensor { dtype, data, ..t })
}

/// Reads a CTranslate2 Whisper model (`model.bin` or its folder, with `tokenizer.json`
/// and optionally `config.json` beside it) into GGUF tensors and metadata, storing the
/// matrix weights as `weights` asks.
pub fn convert_ct2(path: &Path, spec: &ModelSpec, weights: WeightType) -> Result<Converted> {
    let (bin, dir) = ct2_paths(path);
    let bad = |reason: String| EngineError::Model {
        path: bin.clone(),
        reason,
    };
    let read = |p: &Path| {
        std::fs::read(p).map_err(|source| EngineError::Io {
            path: p.to_path_buf(),
            source,
        })
    };
    let bytes = read(&bin)?;
    let m = ct2::parse(&bytes).map_err(|e| bad(format!("not a CTranslate2 model.bin: {e}")))?;
    drop(bytes);
    if m.spec != "WhisperSpec" {
        return Err(bad(format!(
            "CTranslate2 model of spec '{}', expected WhisperSpec",
            m.spec
        )));
    }
    let var = |name: &str| {
        m.get(name)
            .ok_or_else(|| bad(format!("variable '{name}' is missing")))
    };
    let dims = |name: &str, rank: usize| -> Result<Vec<usize>> {
        let v = var(name)?;
        if v.shape.len() != rank {
            return Err(bad(format!("variable '{name}' has shape {:?}", v.shape)));
        }
        Ok(v.shape.clone())
    };
    let heads = |name: &str| -> Result<usize> {
        var(name)?
            .scalar_int()
            .filter(|&h| h > 0)
            .map(|h| h as usize)
            .ok_or_else(|| bad(format!("'{name}' is not a positive integer")))
    };
    if let Some(act) = m.get("decoder/activation").and_then(|v| v.scalar_int()) {
        if act != 3 {
            return Err(bad(format!(
                "decoder activation {act} is not GELU (3); not a Whisper model"
            )));
        }
    }
    let conv1 = dims("encoder/conv1/weight", 3)?;
    let enc_pos = dims("encoder/position_encodings/encodings", 2)?;
    let dec_pos = dims("decoder/position_encodings/encodings", 2)?;
    let emb = dims("decoder/embeddings/weight", 2)?;
    let hp = HParams {
        n_mels: conv1[1],
        n_audio_ctx: enc_pos[0],
        n_audio_state: conv1[0],
        n_audio_head: heads("encoder/num_heads")?,
        n_audio_layer: count_layers(&m, "encoder"),
        n_text_ctx: dec_pos[0],
        n_text_state: emb[1],
        n_text_head: heads("decoder/num_heads")?,
        n_text_layer: count_layers(&m, "decoder"),
        n_vocab: emb[0],
    };
    if hp.n_audio_layer == 0
        || hp.n_text_layer == 0
        || !hp.n_audio_state.is_multiple_of(hp.n_audio_head)
        || !hp.n_text_state.is_multiple_of(hp.n_text_head)
    {
        return Err(bad(describe_dimensions(&hp)));
    }
    let mut tensors = Vec::new();
    for (name, ne) in hp.tensor_shapes() {
        let v = var(&name.replace('.', "/"))?;
        let want: Vec<usize> = ne.iter().rev().map(|&d| d as usize).collect();
        if v.shape != want {
            return Err(bad(format!(
                "variable '{}' has shape {:?}, expected {want:?}",
                v.name, v.shape
            )));
        }
        let dtype = match v.dtype {
            ct2::Ct2Type::F16 => DType::F16,
            ct2::Ct2Type::F32 => DType::F32,
            other => {
                return Err(bad(format!(
                    "variable '{}' is {other:?}; quantized CTranslate2 models are not supported (convert it with ct2-transformers-converter's --quantization float16 or float32)",
                    v.name
                )))
            }
        };
        let t = HostTensor {
            name,
            dtype,
            ne,
            data: v.data.clone(),
        };
        tensors.push(store(t, weights)?);
    }
    let mp = mel_params(spec, hp.n_mels)?;
    let filters = mel::filterbank(&mp);
    tensors.push(HostTensor {
        name: MEL_FILTERS.into(),
        dtype: DType::F32,
        ne: vec![(mp.n_fft / 2 + 1) as i64, mp.n_mels as i64],
        data: filters.iter().flat_map(|v| v.to_le_bytes()).collect(),
    });

    let tok_path = dir.join("tokenizer.json");
    let tok_json = String::from_utf8(read(&tok_path)?).map_err(|_| EngineError::Model {
        path: tok_path.clone(),
        reason: "not UTF-8".into(),
    })?;
    let vocab = tokenizer::vocab_from_tokenizer_json(&tok_json, hp.n_vocab).map_err(|reason| {
        EngineError::Model {
            path: tok_path.clone(),
            reason,
        }
    })?;
    Tokenizer::new(vocab.clone()).map_err(|reason| EngineError::Model {
        path: tok_path.clone(),
        reason,
    })?;
    let cfg_path = dir.join("config.json");
    let config: serde_json::Value = if cfg_path.is_file() {
        serde_json::from_slice(&read(&cfg_path)?).map_err(|e| EngineError::Model {
            path: cfg_path.clone(),
            reason: e.to_string(),
        })?
    } else {
        serde_json::Value::Null
    };
    let ids = |key: &str| -> Vec<u32> {
        config[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_u64())
                    .map(|v| v as u32)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut metadata: Vec<(String, GgufValue)> = HPARAM_KEYS
        .iter()
        .zip(hp.values())
        .map(|(k, v)| (format!("whisper.{k}"), GgufValue::U32(v as u32)))
        .collect();
    metadata.push(("whisper.n_fft".into(), GgufValue::U32(mp.n_fft as u32)));
    metadata.push(("whisper.hop_length".into(), GgufValue::U32(mp.hop as u32)));
    metadata.push((
        "whisper.suppress_ids".into(),
        GgufValue::U32Array(ids("suppress_ids")),
    ));
    metadata.push((
        "whisper.suppress_ids_begin".into(),
        GgufValue::U32Array(ids("suppress_ids_begin")),
    ));
    metadata.push((TOKENS_KEY.into(), GgufValue::StrArray(vocab)));
    Ok(Converted {
        source_format: format!("ctranslate2:{}:v{}", m.spec, m.version),
        metadata,
        tensors,
    })
}

fn mel_params(spec: &ModelSpec, n_mels: usize) -> Result<MelParams> {
    let size = |key: &str| -> Result<usize> {
        let v = spec.hparam_i64(key)?;
        usize::try_from(v).map_err(|_| EngineError::BadSpec {
            origin: spec.family.clone(),
            reason: format!("hparams.{key} = {v} is negative"),
        })
    };
    let p = MelParams {
        sample_rate: spec.sample_rate,
        n_fft: size("n_fft")?,
        hop: size("hop_length")?,
        n_mels,
    };
    p.validate().map_err(|reason| EngineError::BadSpec {
        origin: spec.family.clone(),
        reason,
    })?;
    Ok(p)
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

/// The decode [`Whisper::decode_with_fallback`] kept for one window, with the numbers
/// the fallback judged it by (each of the window's segments reports them, as OpenAI's
/// segments do).
struct WindowDecode {
    tokens: Vec<u32>,
    temperature: f32,
    attempt: Attempt,
    passes: usize,
}

/// The temperatures faster-whisper and OpenAI's Whisper fall back through.
pub const FALLBACK_TEMPERATURES: [f32; 6] = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0];

/// How a window's decode at one temperature went, for the fallback decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Attempt {
    /// zlib compression ratio of the text (bytes / compressed bytes).
    pub compression_ratio: f32,
    /// Mean log-probability per token (end-of-text included).
    pub avg_logprob: f32,
    /// Probability of the no-speech token at the start.
    pub no_speech: f32,
}

/// Whether a window must be decoded again at the next temperature (faster-whisper's
/// `generate_with_fallback`): too repetitive or too unlikely, unless it is silence
/// (likely no speech and unlikely text), which is dropped instead.
pub fn needs_fallback(a: &Attempt, opts: &DecodeOptions) -> bool {
    let repetitive = opts
        .compression_ratio_threshold
        .is_some_and(|t| a.compression_ratio > t);
    let unlikely = a.avg_logprob < opts.log_prob_threshold;
    let silence = a.no_speech > opts.no_speech_threshold && unlikely;
    (repetitive || unlikely) && !silence
}

/// Bytes of the UTF-8 text over the bytes of its zlib stream at level 6 (Python's
/// `zlib.compress` default, which faster-whisper uses). zlib-rs is a port of zlib's
/// deflate and gives the same sizes; miniz_oxide compresses repetitions, the very thing
/// this ratio detects, markedly worse.
pub fn compression_ratio(text: &str) -> f32 {
    let bytes = text.as_bytes();
    if bytes.is_empty() {
        return 0.0;
    }
    let mut out = vec![0u8; zlib_rs::compress_bound(bytes.len())];
    let (compressed, rc) = zlib_rs::compress_slice(&mut out, bytes, zlib_rs::DeflateConfig::new(6));
    let n = if rc == zlib_rs::ReturnCode::Ok {
        compressed.len()
    } else {
        bytes.len()
    };
    bytes.len() as f32 / n.max(1) as f32
}

/// A small deterministic generator (SplitMix64) for sampling at temperatures above 0.
#[derive(Debug, Clone)]
pub struct Sampler(u64);

impl Sampler {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Sampler(seed)
    }

    /// A uniform number in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The next token from masked logits: the argmax at temperature 0, else a draw from
/// softmax(logits / temperature) with `u` uniform in [0, 1). Returns the token and its
/// log-probability under the untempered distribution.
pub fn pick_token(logits: &[f32], temperature: f32, u: f64) -> (usize, f32) {
    let (best, best_logprob) = argmax_logprob(logits);
    let max = logits[best];
    let logprob = |i: usize| logits[i] - max + best_logprob;
    if temperature <= 0.0 {
        return (best, best_logprob);
    }
    let weights: Vec<f64> = logits
        .iter()
        .map(|&l| {
            if l.is_finite() {
                (((l - max) / temperature) as f64).exp()
            } else {
                0.0
            }
        })
        .collect();
    let total: f64 = weights.iter().sum();
    let mut target = u * total;
    let mut chosen = best;
    for (i, w) in weights.iter().enumerate() {
        if *w > 0.0 {
            chosen = i;
            if target < *w {
                break;
            }
            target -= w;
        }
    }
    (chosen, logprob(chosen))
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

    fn transcribe(&mut self, samples: &[f32], opts: &DecodeOptions) -> Result<Transcript> {
        Whisper::transcribe(self, samples, opts)
    }
}

/// A loaded Whisper model.
pub struct Whisper {
    net: WhisperNet,
    sched: Scheduler,
    hp: HParams,
    mel: MelParams,
    filters: Vec<f32>,
    tok: Tokenizer,
    suppress: Vec<u32>,
    suppress_begin: Vec<u32>,
    sample_rate: u32,
    defaults: DecodeOptions,
}

fn meta_u32(file: &ModelFile, key: &str) -> Result<u32> {
    file.metadata
        .iter()
        .find_map(|(k, v)| match v {
            GgufValue::U32(x) if k == key => Some(*x),
            _ => None,
        })
        .ok_or_else(|| EngineError::Model {
            path: file.path.clone(),
            reason: format!("metadata '{key}' is missing (convert the model again: task 'convert', family 'whisper')"),
        })
}

fn meta_u32s(file: &ModelFile, key: &str) -> Vec<u32> {
    file.metadata
        .iter()
        .find_map(|(k, v)| match v {
            GgufValue::U32Array(x) if k == key => Some(x.clone()),
            _ => None,
        })
        .unwrap_or_default()
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
/// layer index, a 0 in a shape for a size the hyper-parameters decide.
fn check_spec(file: &ModelFile, spec: &ModelSpec, hp: &HParams) -> Result<()> {
    for (pattern, want) in &spec.tensors {
        let layers = if pattern.starts_with("encoder") {
            hp.n_audio_layer
        } else {
            hp.n_text_layer
        };
        let names: Vec<String> = if pattern.contains("{i}") {
            (0..layers)
                .map(|i| pattern.replace("{i}", &i.to_string()))
                .collect()
        } else {
            vec![pattern.clone()]
        };
        for name in names {
            let t = file.tensor(&name).ok_or_else(|| EngineError::Model {
                path: file.path.clone(),
                reason: format!("tensor '{name}' is missing (is this a whisper model?)"),
            })?;
            let fits = t.ne.len() == want.len()
                && t.ne.iter().zip(want).all(|(&got, &w)| w == 0 || got == w);
            if !fits {
                return Err(EngineError::Model {
                    path: file.path.clone(),
                    reason: format!(
                        "tensor '{name}' has shape {:?}, the whisper spec expects {want:?}",
                        t.ne
                    ),
                });
            }
        }
    }
    Ok(())
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
            *slot = meta_u32(&file, &format!("whisper.{key}"))? as usize;
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
            n_fft: meta_u32(&file, "whisper.n_fft")? as usize,
            hop: meta_u32(&file, "whisper.hop_length")? as usize,
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
        let vocab = file
            .metadata
            .iter()
            .find_map(|(k, v)| match v {
                GgufValue::StrArray(x) if k == TOKENS_KEY => Some(x.clone()),
                _ => None,
            })
            .ok_or_else(|| bad(format!("metadata '{TOKENS_KEY}' is missing")))?;
        if vocab.len() != hp.n_vocab {
            return Err(bad(format!(
                "{} tokens for a vocabulary of {}",
                vocab.len(),
                hp.n_vocab
            )));
        }
        let tok = Tokenizer::new(vocab).map_err(bad)?;
        let net = WhisperNet::new(hp, tensors, runtime, &path)?;
        let sched = net.scheduler()?;
        Ok(Whisper {
            net,
            sched,
            hp,
            mel,
            filters: to_f32(filters_t).map_err(|e| bad(e.to_string()))?,
            tok,
            suppress: meta_u32s(&file, "whisper.suppress_ids"),
            suppress_begin: meta_u32s(&file, "whisper.suppress_ids_begin"),
            sample_rate: spec.sample_rate,
            defaults: default_options(spec),
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
        mel::log_mel(samples, &self.mel, &self.filters)
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
        self.net.encode(&mut self.sched, &input)?;
        let sot = self.tok.specials().sot;
        let logits = self.net.decode(&mut self.sched, &[sot], 0, 1)?;
        let lang_logits: Vec<f32> = langs.iter().map(|(_, id)| logits[*id as usize]).collect();
        let (best, _) = argmax_logprob(&lang_logits);
        Ok((langs[best].0.clone(), softmax_at(&lang_logits, best)))
    }

    fn prompt(&self, opts: &DecodeOptions) -> Result<Vec<u32>> {
        let s = self.tok.specials();
        let mut prompt = vec![s.sot];
        if let Some(lang) = self.language_token(&opts.language)? {
            prompt.extend([lang, s.transcribe]);
        }
        if opts.without_timestamps {
            prompt.push(s.no_timestamps);
        }
        Ok(prompt)
    }

    /// Transcribes 16 kHz mono audio window by window (30 s each; with timestamp tokens,
    /// the next window starts at the last timestamp of one that ends inside speech, as
    /// faster-whisper's `generate_segments` seeks).
    /// `opts.language` must be a language code: resolve `auto` first with
    /// [`Whisper::resolve_language`].
    pub fn transcribe(&mut self, samples: &[f32], opts: &DecodeOptions) -> Result<Transcript> {
        let prompt = self.prompt(opts)?;
        let (mel, n_frames) = self.log_mel(samples);
        let content = n_frames.saturating_sub(1);
        let window = 2 * self.hp.n_audio_ctx;
        let per_second = self.mel.sample_rate as f64 / self.mel.hop as f64;
        // A timestamp step is one encoder position: window / n_audio_ctx mel frames.
        let frames_per_step = window / self.hp.n_audio_ctx;
        let step_seconds = frames_per_step as f64 / per_second;
        let max_initial = (!opts.without_timestamps)
            .then(|| (opts.max_initial_timestamp as f64 / step_seconds).round() as usize);
        let tb = self.tok.specials().timestamp_begin;
        let mut sampler = Sampler::new(opts.seed);
        let mut segments = Vec::new();
        let mut decode_passes = 0;
        let mut seek = 0;
        while seek < content {
            let size = window.min(content - seek);
            let input = mel::window(&mel, self.hp.n_mels, n_frames, seek, window);
            self.net.encode(&mut self.sched, &input)?;
            let kept = self.decode_with_fallback(&prompt, max_initial, opts, &mut sampler)?;
            decode_passes += kept.passes;
            let stats = kept.attempt;
            let silent = stats.no_speech > opts.no_speech_threshold
                && stats.avg_logprob < opts.log_prob_threshold;
            let tokens = kept.tokens;
            let offset = seek as f64 / per_second;
            let split = if !opts.without_timestamps {
                split_at_timestamps(&tokens, tb, size / frames_per_step)
            } else {
                WindowSplit {
                    pieces: vec![(0, size / frames_per_step, tokens)],
                    advance_steps: None,
                }
            };
            let advance = match split.advance_steps {
                Some(steps) if !silent => (steps * frames_per_step).max(1),
                _ => size,
            };
            if !silent {
                for (start, end, tokens) in split.pieces {
                    let text_tokens: Vec<u32> =
                        tokens.iter().copied().filter(|&t| t < tb).collect();
                    let text = self.tok.decode(&text_tokens);
                    // faster-whisper drops a piece of no duration or no words.
                    if start == end || text.trim().is_empty() {
                        continue;
                    }
                    segments.push(Segment {
                        start: offset + start as f64 * step_seconds,
                        end: offset + end as f64 * step_seconds,
                        text,
                        tokens: text_tokens,
                        seek,
                        temperature: kept.temperature,
                        avg_logprob: stats.avg_logprob,
                        compression_ratio: stats.compression_ratio,
                        no_speech_prob: stats.no_speech,
                    });
                }
            }
            seek += advance;
        }
        Ok(Transcript {
            segments,
            decode_passes,
        })
    }

    /// Decodes the current window at each of `opts.temperatures` until a result passes
    /// [`needs_fallback`]; when none does, the most likely one (among those not too
    /// repetitive, if any) is kept. Returns it with its temperature, the numbers it was
    /// judged by and the number of decoder passes it took.
    fn decode_with_fallback(
        &mut self,
        prompt: &[u32],
        max_initial: Option<usize>,
        opts: &DecodeOptions,
        sampler: &mut Sampler,
    ) -> Result<WindowDecode> {
        let temperatures: &[f32] = if opts.temperatures.is_empty() {
            &[0.0]
        } else {
            &opts.temperatures
        };
        let tb = self.tok.specials().timestamp_begin;
        let mut tried = Vec::new();
        let mut passes = 0;
        for &t in temperatures {
            let draws = if t > 0.0 { opts.best_of.max(1) } else { 1 };
            let mut best: Option<(Vec<u32>, f32, f32, f64)> = None;
            for _ in 0..draws {
                let (tokens, no_speech, avg, sum) =
                    self.sample_window(prompt, max_initial, t, sampler)?;
                passes += 1;
                if best.as_ref().is_none_or(|b| sum > b.3) {
                    best = Some((tokens, no_speech, avg, sum));
                }
            }
            let (tokens, no_speech, avg, _) = best.expect("at least one draw");
            let text: Vec<u32> = tokens.iter().copied().filter(|&x| x < tb).collect();
            let attempt = Attempt {
                compression_ratio: compression_ratio(self.tok.decode(&text).trim()),
                avg_logprob: avg,
                no_speech,
            };
            if !needs_fallback(&attempt, opts) {
                return Ok(WindowDecode {
                    tokens,
                    temperature: t,
                    attempt,
                    passes,
                });
            }
            tried.push((attempt, t, tokens));
        }
        let not_repetitive = |a: &Attempt| {
            opts.compression_ratio_threshold
                .is_none_or(|th| a.compression_ratio <= th)
        };
        let pool: Vec<&(Attempt, f32, Vec<u32>)> =
            if tried.iter().any(|(a, _, _)| not_repetitive(a)) {
                tried.iter().filter(|(a, _, _)| not_repetitive(a)).collect()
            } else {
                tried.iter().collect()
            };
        let (attempt, temperature, tokens) = pool
            .into_iter()
            .max_by(|x, y| x.0.avg_logprob.total_cmp(&y.0.avg_logprob))
            .expect("at least one temperature");
        Ok(WindowDecode {
            tokens: tokens.clone(),
            temperature: *temperature,
            attempt: *attempt,
            passes,
        })
    }

    /// Decodes the current window at one temperature (0: greedy): tokens, no-speech
    /// probability, mean log-probability (end-of-text included, divided by tokens + 1)
    /// and the summed log-probability.
    /// With `max_initial` (in timestamp steps), timestamp tokens are predicted under
    /// Whisper's rules ([`apply_timestamp_rules`]); without it they are suppressed.
    fn sample_window(
        &mut self,
        prompt: &[u32],
        max_initial: Option<usize>,
        temperature: f32,
        sampler: &mut Sampler,
    ) -> Result<(Vec<u32>, f32, f32, f64)> {
        let s = self.tok.specials().clone();
        let n_vocab = self.hp.n_vocab;
        let mut banned = vec![false; n_vocab];
        let fixed = [
            s.transcribe,
            s.translate,
            s.sot,
            s.sot_prev,
            s.sot_lm,
            s.no_speech,
            s.no_timestamps,
        ];
        for &id in self.suppress.iter().chain(&fixed) {
            if let Some(b) = banned.get_mut(id as usize) {
                *b = true;
            }
        }
        if max_initial.is_none() {
            for b in banned.iter_mut().skip(s.timestamp_begin as usize) {
                *b = true;
            }
        }
        let logits = self.net.decode(&mut self.sched, prompt, 0, prompt.len())?;
        let sot_pos = prompt.iter().position(|&t| t == s.sot).unwrap_or(0);
        let no_speech = softmax_at(
            &logits[sot_pos * n_vocab..(sot_pos + 1) * n_vocab],
            s.no_speech as usize,
        );
        let mut last = logits[(prompt.len() - 1) * n_vocab..].to_vec();
        let mut n_past = prompt.len();
        let mut tokens = Vec::new();
        let mut sum_logprob = 0f64;
        let max_new = self
            .hp
            .n_text_ctx
            .saturating_sub(prompt.len())
            .min(self.hp.n_text_ctx / 2);
        loop {
            for (i, l) in last.iter_mut().enumerate() {
                let begin = tokens.is_empty() && self.suppress_begin.contains(&(i as u32));
                if banned[i] || begin {
                    *l = f32::NEG_INFINITY;
                }
            }
            if let Some(max_initial) = max_initial {
                apply_timestamp_rules(
                    &mut last,
                    &tokens,
                    s.timestamp_begin as usize,
                    s.eot as usize,
                    max_initial,
                );
            }
            let u = if temperature > 0.0 {
                sampler.uniform()
            } else {
                0.0
            };
            let (best, logprob) = pick_token(&last, temperature, u);
            sum_logprob += logprob as f64;
            if best as u32 == s.eot || tokens.len() >= max_new {
                break;
            }
            tokens.push(best as u32);
            last = self
                .net
                .decode(&mut self.sched, &[best as u32], n_past, 1)?;
            n_past += 1;
        }
        let avg = sum_logprob / (tokens.len() + 1) as f64;
        Ok((tokens, no_speech, avg as f32, sum_logprob))
    }
}

/// Whisper's timestamp rules (OpenAI's `ApplyTimestampRules`, which CTranslate2 follows)
/// on the next token's logits, given the tokens generated so far in this window:
/// timestamps come in pairs (a lone timestamp is followed by another or end-of-text,
/// a pair by text), never decrease, the first token is a timestamp no later than
/// `max_initial` steps, and when the timestamps' total probability beats every text
/// token, a timestamp is chosen.
pub fn apply_timestamp_rules(
    logits: &mut [f32],
    tokens: &[u32],
    tb: usize,
    eot: usize,
    max_initial: usize,
) {
    let is_ts = |t: u32| t as usize >= tb;
    let last_ts = tokens.last().is_some_and(|&t| is_ts(t));
    let penultimate_ts = tokens.len() < 2 || is_ts(tokens[tokens.len() - 2]);
    if last_ts {
        if penultimate_ts {
            logits[tb..].fill(f32::NEG_INFINITY);
        } else {
            logits[..eot].fill(f32::NEG_INFINITY);
        }
    }
    if let Some(&t) = tokens.iter().rev().find(|&&t| is_ts(t)) {
        let floor = if last_ts && !penultimate_ts {
            t as usize
        } else {
            t as usize + 1
        };
        let n = logits.len();
        logits[tb..floor.min(n)].fill(f32::NEG_INFINITY);
    }
    if tokens.is_empty() {
        logits[..tb].fill(f32::NEG_INFINITY);
        let last_allowed = tb + max_initial;
        if last_allowed + 1 < logits.len() {
            logits[last_allowed + 1..].fill(f32::NEG_INFINITY);
        }
    }
    let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return;
    }
    let sum = |r: &[f32]| -> f64 { r.iter().map(|&l| ((l - max) as f64).exp()).sum() };
    let ts_mass = sum(&logits[tb..]);
    let text_max = logits[..tb]
        .iter()
        .cloned()
        .fold(f32::NEG_INFINITY, f32::max);
    if ts_mass > 0.0 && ts_mass.ln() > (text_max - max) as f64 {
        logits[..tb].fill(f32::NEG_INFINITY);
    }
}

/// A window's tokens cut into segments: (start step, end step, tokens) each, and how
/// far the next window starts (in timestamp steps; `None`: after the whole window).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowSplit {
    /// Segments as (start, end, tokens with their timestamps).
    pub pieces: Vec<(usize, usize, Vec<u32>)>,
    /// Where the next window starts, when the window ended inside speech.
    pub advance_steps: Option<usize>,
}

/// Cuts a window's tokens at each pair of consecutive timestamps (faster-whisper's
/// `generate_segments`); `window_steps` is the window's length in timestamp steps.
pub fn split_at_timestamps(tokens: &[u32], tb: u32, window_steps: usize) -> WindowSplit {
    let step = |t: u32| (t - tb) as usize;
    let single_ending =
        tokens.len() >= 2 && tokens[tokens.len() - 2] < tb && tokens[tokens.len() - 1] >= tb;
    let mut cuts: Vec<usize> = (1..tokens.len())
        .filter(|&i| tokens[i] >= tb && tokens[i - 1] >= tb)
        .collect();
    if cuts.is_empty() {
        let end = tokens
            .iter()
            .rev()
            .find(|&&t| t >= tb)
            .map(|&t| step(t))
            .filter(|&e| e > 0)
            .unwrap_or(window_steps);
        return WindowSplit {
            pieces: vec![(0, end, tokens.to_vec())],
            advance_steps: None,
        };
    }
    if single_ending {
        cuts.push(tokens.len());
    }
    let mut pieces = Vec::new();
    let mut from = 0;
    for &cut in &cuts {
        let piece = &tokens[from..cut];
        let start = piece.first().filter(|&&t| t >= tb).map_or(0, |&t| step(t));
        let end = piece
            .last()
            .filter(|&&t| t >= tb)
            .map_or(start, |&t| step(t));
        pieces.push((start, end, piece.to_vec()));
        from = cut;
    }
    let advance_steps = if single_ending {
        None
    } else {
        Some(step(tokens[from - 1]))
    };
    WindowSplit {
        pieces,
        advance_steps,
    }
}

fn softmax_at(logits: &[f32], i: usize) -> f32 {
    let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    (((logits[i] - max) as f64).exp() / sum) as f32
}

/// The largest logit's index and its log-probability, `-ln(sum(exp(l - max)))`: one
/// pass of f32 exponentials (each exact to an ulp) summed in f64.
fn argmax_logprob(logits: &[f32]) -> (usize, f32) {
    let (best, &max) = logits
        .iter()
        .enumerate()
        .fold((0, &f32::NEG_INFINITY), |acc, (i, l)| {
            if *l > *acc.1 {
                (i, l)
            } else {
                acc
            }
        });
    let sum: f64 = logits
        .iter()
        .filter(|l| l.is_finite())
        .map(|&l| (l - max).exp() as f64)
        .sum();
    (best, -(sum.ln() as f32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_linear_weights_with_whole_blocks_are_quantized() {
        let q = WeightType::Q8_0;
        let f16 = DType::F16;
        let lin = "decoder.layer_0.ffn.linear_1.weight";
        assert_eq!(stored_type(lin, &[1536, 384], f16, q), DType::Q8_0);
        assert_eq!(stored_type(lin, &[1536, 384], f16, WeightType::Keep), f16);
        // Rows that do not split into blocks of 32 stay as they are.
        assert_eq!(stored_type(lin, &[40, 384], f16, q), f16);
        for other in [
            "decoder.embeddings.weight",
            "decoder.layer_0.ffn.linear_1.bias",
            "encoder.conv1.weight",
            "encoder.layer_0.ffn.layer_norm.gamma",
            "decoder.position_encodings.encodings",
        ] {
            assert_eq!(stored_type(other, &[384, 384], f16, q), f16, "{other}");
        }
        assert!("q8_0".parse::<WeightType>().is_ok());
        let err = "q4".parse::<WeightType>().unwrap_err().to_string();
        assert!(err.contains("q8_0"), "{err}");
    }

    const TB: u32 = 100;

    #[test]
    fn timestamp_pairs_cut_segments_and_set_the_next_window() {
        // <|0.00|> a b <|1.00|><|1.20|> c <|2.00|>: ends on a lone timestamp after
        // text (speech continues past it), so the whole window is consumed.
        let t = [TB, 1, 2, TB + 50, TB + 60, 3, TB + 100];
        let split = split_at_timestamps(&t, TB, 1500);
        assert_eq!(
            split.pieces,
            vec![
                (0, 50, vec![TB, 1, 2, TB + 50]),
                (60, 100, vec![TB + 60, 3, TB + 100])
            ]
        );
        assert_eq!(split.advance_steps, None);
        // Ends on a pair: the next window starts at the last timestamp.
        let t = [TB, 1, TB + 40, TB + 40, 2, TB + 90, TB + 90];
        let split = split_at_timestamps(&t, TB, 1500);
        assert_eq!(split.pieces.len(), 2);
        assert_eq!(split.advance_steps, Some(90));
        // No pair: one segment up to the last timestamp, or the window without one.
        let split = split_at_timestamps(&[TB, 1, 2, TB + 70], TB, 1500);
        assert_eq!(split.pieces, vec![(0, 70, vec![TB, 1, 2, TB + 70])]);
        assert_eq!(split_at_timestamps(&[1, 2], TB, 1500).pieces[0].1, 1500);
    }

    #[test]
    fn timestamp_rules_follow_whisper() {
        let n = TB as usize + 200;
        let eot = TB as usize - 5;
        let allowed = |tokens: &[u32], logits: &[f32]| -> Vec<usize> {
            let mut l = logits.to_vec();
            apply_timestamp_rules(&mut l, tokens, TB as usize, eot, 50);
            (0..n).filter(|&i| l[i].is_finite()).collect()
        };
        let flat = vec![0f32; n];
        // First token: a timestamp no later than step 50.
        assert_eq!(
            allowed(&[], &flat),
            (TB as usize..=TB as usize + 50).collect::<Vec<_>>()
        );
        // After a lone timestamp following text: a timestamp not before it, or eot.
        let mut eot_heavy = flat.clone();
        eot_heavy[eot] = 10.0;
        let after = allowed(&[TB, 1, TB + 30], &eot_heavy);
        assert!(after.contains(&eot) && after.contains(&(TB as usize + 30)));
        assert!(!after.contains(&1) && !after.contains(&(TB as usize + 29)));
        // After a pair: text only, unless timestamps dominate.
        let mut text_heavy = flat.clone();
        text_heavy[7] = 10.0;
        let after = allowed(&[TB, 1, TB + 30, TB + 30], &text_heavy);
        assert!(after.contains(&7) && after.iter().all(|&i| i < TB as usize));
        // Timestamps' total probability above the best text token forces a timestamp.
        let mut ts_heavy = flat.clone();
        ts_heavy[TB as usize + 80..].fill(3.0);
        let after = allowed(&[TB, 1], &ts_heavy);
        assert!(after.iter().all(|&i| i >= TB as usize), "{after:?}");
    }

    /// Python's `len(b) / len(zlib.compress(b))` for the same strings.
    #[test]
    fn compression_ratio_matches_python_zlib() {
        let the = "the ".repeat(20);
        let please =
            "Please call stellar and ask for to bring these things with the from the store. "
                .repeat(3);
        for (text, want) in [
            ("Speech recognition in Rust is working today.", 44.0 / 52.0),
            (the.trim_end(), 79.0 / 15.0),
            (please.as_str(), 237.0 / 78.0),
        ] {
            let got = compression_ratio(text);
            assert!((got - want).abs() < 0.05, "{text:?}: {got} vs {want}");
        }
        assert_eq!(compression_ratio(""), 0.0);
    }

    fn options() -> DecodeOptions {
        DecodeOptions {
            language: "en".into(),
            no_speech_threshold: 0.6,
            log_prob_threshold: -1.0,
            without_timestamps: false,
            max_initial_timestamp: 1.0,
            temperatures: FALLBACK_TEMPERATURES.to_vec(),
            compression_ratio_threshold: Some(2.4),
            best_of: 5,
            seed: 0,
        }
    }

    #[test]
    fn fallback_on_repetitive_or_unlikely_text_but_not_on_silence() {
        let o = options();
        let a = |compression_ratio, avg_logprob, no_speech| Attempt {
            compression_ratio,
            avg_logprob,
            no_speech,
        };
        assert!(!needs_fallback(&a(1.2, -0.3, 0.01), &o));
        assert!(needs_fallback(&a(3.0, -0.3, 0.01), &o));
        assert!(needs_fallback(&a(1.2, -1.5, 0.01), &o));
        // Silence: likely no speech and unlikely text is dropped, not retried.
        assert!(!needs_fallback(&a(1.2, -1.5, 0.9), &o));
        assert!(needs_fallback(&a(3.0, -0.3, 0.9), &o));
        let off = DecodeOptions {
            compression_ratio_threshold: None,
            ..o
        };
        assert!(!needs_fallback(&a(3.0, -0.3, 0.01), &off));
    }

    #[test]
    fn sampling_follows_the_tempered_distribution() {
        let logits = [0.0f32, 1.0, f32::NEG_INFINITY, 2.0];
        // Greedy: the argmax and its log-softmax.
        let (i, lp) = pick_token(&logits, 0.0, 0.9);
        let norm = (1f64 + 1f64.exp() + 2f64.exp()).ln() as f32;
        assert_eq!(i, 3);
        assert!((lp - (2.0 - norm)).abs() < 1e-5);
        // At temperature 1, draws land with probabilities softmax(logits).
        let mut sampler = Sampler::new(7);
        let mut counts = [0usize; 4];
        let n = 20_000;
        for _ in 0..n {
            counts[pick_token(&logits, 1.0, sampler.uniform()).0] += 1;
        }
        assert_eq!(counts[2], 0, "a masked token is never drawn");
        for (k, l) in [(0, 0.0f32), (1, 1.0), (3, 2.0)] {
            let p = (l - norm).exp() as f64;
            let got = counts[k] as f64 / n as f64;
            assert!((got - p).abs() < 0.015, "token {k}: {got} vs {p}");
        }
        let (mut a, mut b) = (Sampler::new(3), Sampler::new(3));
        assert_eq!(a.uniform(), b.uniform(), "same seed, same draws");
    }

    /// Q8_0 stores round(x / d) with d = max|x| / 127 per block of 32 and d as f16: each
    /// value comes back within d / 2 (plus the f16 rounding of d, < 0.1 % of max|x|).
    #[test]
    fn q8_0_round_trip_is_within_half_a_step() {
        let row = 96;
        let data: Vec<f32> = (0..row * 3)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013 * (1.0 + (i / 32) as f32))
            .collect();
        let bytes = ggml::quantize_rows(DType::Q8_0, &data, row).unwrap();
        assert_eq!(bytes.len(), 3 * 3 * 34);
        let t = HostTensor {
            name: "w".into(),
            dtype: DType::Q8_0,
            ne: vec![row as i64, 3],
            data: bytes,
        };
        let back = t.to_f32();
        assert_eq!(back.len(), data.len());
        for (block, (x, y)) in data.chunks(32).zip(back.chunks(32)).enumerate() {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            let tol = amax / 127.0 / 2.0 + amax * 1e-3;
            for (a, b) in x.iter().zip(y) {
                assert!(
                    (a - b).abs() <= tol,
                    "block {block}: {a} -> {b} (tol {tol})"
                );
            }
        }
        assert!(ggml::quantize_rows(DType::Q8_0, &data, 40).is_err());
        assert!(ggml::quantize_rows(DType::F16, &data, row).is_err());
    }
}
