//! Qwen3-TTS-12Hz (CustomVoice: preset speakers, optional instructions) on ggml.
//!
//! The GGUF comes from the Hugging Face release folder through `--task convert --family
//! qwen3_tts` ([`convert`]): the talker, code predictor and codec decoder weights, the
//! text tokenizer and the hyper-parameters ([`hparams`]). [`Qwen3Tts::generate`] is the
//! pipeline:
//! 1. the text and an optional instruction are wrapped in the chat template and
//!    tokenized ([`tokenizer`]); the prompt rows are text embeddings through the text
//!    projection plus codec embeddings (think tags, language, speaker) ([`decode`]);
//! 2. the talker ([`talker`]) reads the prompt and chooses each frame's first code; the
//!    code predictor chooses the frame's other fifteen; the frame's sixteen embeddings
//!    plus the next text row are the talker's next input; until the end of speech or
//!    the frame limit;
//! 3. the codec decoder ([`codec`]) turns the frames into 1920 samples each at 24 kHz,
//!    in chunks of 300 frames with 25 of left context.
//!
//! Every op runs through the ggml scheduler on the runtime's device; numerics are checked
//! against the official code on random-weight checkpoints (`docs/models/qwen3_tts.md`).

pub mod codec;
pub mod convert;
pub mod decode;
pub mod hparams;
pub mod mimi;
pub mod speaker;
pub mod talker;
pub mod tokenizer;
pub mod transformer;
pub mod voice;

use std::sync::Arc;

use crate::backend::Runtime;
use crate::error::{EngineError, Result};
use crate::families::{Family, LoaderInfo};
use crate::ggml::{HostTensor, Scheduler};
use crate::layers::{Layers, WeightUse};
use crate::model_file::ModelFile;
use crate::sampling::{Choice, Sampler};
use crate::spec::ModelSpec;
use crate::task::Task;
use crate::tts::{SpeechInput, SpeechOptions, Synthesizer, VoiceSample};
use crate::weights::{WeightStore, WeightTensor};

use decode::{Codec, Decoding, Layout, SpeakerRow, Text};
use hparams::HParams;
use talker::{PredictorInput, Talker};
use tokenizer::TextTokenizer;
use voice::ClonePrompt;

/// What the family is.
pub const INFO: LoaderInfo = LoaderInfo {
    family: "qwen3_tts",
    tasks: &[Task::Tts, Task::Convert],
    formats: &[
        "gguf",
        "huggingface folder (Qwen3-TTS-12Hz CustomVoice: config.json, model.safetensors, tokenizer files, speech_tokenizer/; convert only)",
    ],
    description: "Qwen3-TTS-12Hz text to speech (24 kHz): talker, code predictor and 12 Hz codec, preset speakers",
};

/// The family's registry entry: TTS, and conversion from the release folder.
pub const FAMILY: Family = Family {
    info: INFO,
    spec: Some(include_str!("../../../../model_specs/qwen3_tts.json")),
    legacy: &[],
    sources: &[crate::model_file::SourceFormat::HuggingFace],
    convert: Some(convert::convert),
    vad: None,
    asr: None,
    tts: Some(load),
};

/// GGUF key of the text tokenizer (`tokenizer.json` text).
pub const TOKENIZER_KEY: &str = "tokenizer.huggingface.json";

/// The options a request may set ([`SpeechOptions`]).
const OPTIONS: &[&str] = &[
    "language",
    "instructions",
    "temperature",
    "seed",
    "max_frames",
    "cloned_voice",
];

/// The shortest reference recording a voice is cloned from: the speaker encoder's
/// statistics and the in-context prompt need some speech.
pub const MIN_REFERENCE_S: f64 = 1.0;
/// The longest: each second is 12.5 prompt rows the talker attends over for every
/// frame it makes, and the codec encoder's first convolutions hold about 30 MB of
/// activations per second on the CPU; the official guidance is a few seconds.
pub const MAX_REFERENCE_S: f64 = 30.0;

/// The registry's TTS loader.
fn load(file: ModelFile, spec: &ModelSpec, runtime: Runtime) -> Result<Box<dyn Synthesizer>> {
    Ok(Box::new(Qwen3Tts::load(file, spec, runtime)?))
}

/// A loaded Qwen3-TTS model.
pub struct Qwen3Tts {
    hp: HParams,
    talker: Talker,
    codec: codec::Codec,
    /// The speaker encoder and codec encoder of a Base model, with their schedulers.
    encoders: Option<Encoders>,
    tokenizer: Arc<TextTokenizer>,
    /// Speakers in the order listed (the spec's default first).
    voices: Vec<String>,
    layers: Layers,
    /// One scheduler per graph kind, kept between requests; declared before the weights
    /// and the runtime so that they are freed first.
    talker_sched: Scheduler,
    predictor_sched: Scheduler,
    codec_sched: Scheduler,
    /// Shared with the forks ([`Qwen3Tts::fork`]): read-only once uploaded.
    weights: Arc<WeightStore>,
    runtime: Runtime,
}

/// What a model is made of besides its schedulers: what [`Qwen3Tts::load`] reads and
/// [`Qwen3Tts::fork`] shares.
struct Parts {
    hp: HParams,
    talker: Talker,
    codec: codec::Codec,
    encoders: Option<(speaker::Speaker, mimi::Mimi)>,
    tokenizer: Arc<TextTokenizer>,
    voices: Vec<String>,
    layers: Layers,
    weights: Arc<WeightStore>,
    runtime: Runtime,
}

/// A Base model's encoders of reference audio.
struct Encoders {
    speaker: speaker::Speaker,
    mimi: mimi::Mimi,
    speaker_sched: Scheduler,
    mimi_sched: Scheduler,
}

/// What one generation made: each frame's codes and what the numeric checks compare.
#[derive(Debug, Clone, Default)]
pub struct Generation {
    /// Every frame's codes, group 0 first.
    pub frames: Vec<Vec<u32>>,
    /// Group-0 codes chosen (one more than the frames when the limit stopped it).
    pub group0: Vec<u32>,
    /// The talker's raw logits of the first steps (up to three).
    pub first_logits: Vec<Vec<f32>>,
    /// Whether the end of speech stopped it.
    pub stopped_by_eos: bool,
}

/// Who speaks a request.
#[derive(Debug, Clone, Copy)]
pub enum Speaker<'a> {
    /// A preset speaker of a CustomVoice model, by name.
    Preset(&'a str),
    /// A voice a Base model cloned.
    Clone(&'a ClonePrompt),
    /// The voice a VoiceDesign model's instruction describes.
    Design,
}

/// A request as the pipeline takes it.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// The text to speak.
    pub text: &'a str,
    /// Who speaks.
    pub speaker: Speaker<'a>,
    /// The language (`auto` or one of the model's).
    pub language: &'a str,
    /// An instruction, for models that take them.
    pub instructions: Option<&'a str>,
    /// Feed the text one token per frame instead of all in the prompt.
    pub streaming_text: bool,
    /// How codes are chosen.
    pub decoding: Decoding,
    /// Seed of the sampler.
    pub seed: u64,
    /// The most frames.
    pub max_frames: usize,
}

impl Qwen3Tts {
    /// Loads and checks the model in `file` onto `runtime`'s device.
    pub fn load(mut file: ModelFile, spec: &ModelSpec, runtime: Runtime) -> Result<Self> {
        let hp = HParams::read(&file)?;
        let tokenizer = TextTokenizer::from_json(file.require::<&str>(TOKENIZER_KEY)?)
            .map_err(|r| file.invalid(r))?;
        if tokenizer.vocab_size() > hp.text_vocab {
            return Err(file.invalid(format!(
                "the tokenizer has {} tokens for a text embedding of {} rows",
                tokenizer.vocab_size(),
                hp.text_vocab
            )));
        }
        if spec.sample_rate != hp.codec.sample_rate {
            return Err(file.invalid(format!(
                "the spec says {} Hz and the codec {} Hz",
                spec.sample_rate, hp.codec.sample_rate
            )));
        }
        spec.check_tensors(&file, &|pattern| {
            if pattern.starts_with("codec.") {
                hp.codec.transformer.layers
            } else if pattern.starts_with("predictor.") {
                hp.predictor.layers
            } else {
                hp.talker.layers
            }
        })?;
        let talker = Talker::load(&file, &hp)?;
        let codec = codec::Codec::load(&file, &hp.codec)?;
        let encoders = match &hp.clone {
            Some((s, m)) => Some((
                speaker::Speaker::load(&file, s)?,
                mimi::Mimi::load(&file, m)?,
            )),
            None => None,
        };
        let layers = Layers::new(&runtime);
        let (codec_host, model_host): (Vec<HostTensor>, Vec<HostTensor>) =
            std::mem::take(&mut file.tensors)
                .into_iter()
                .partition(|t| t.name.starts_with("codec."));
        let (codebooks, model_host): (Vec<HostTensor>, Vec<HostTensor>) = model_host
            .into_iter()
            .partition(|t| mimi::is_codebook(&t.name));
        let mut codec_tensors = codec::prepare(codec_host, &hp.codec)?;
        if let Some((_, m)) = &hp.clone {
            codec_tensors.extend(mimi::prepare(codebooks, m)?);
        }
        let tensors = model_host
            .into_iter()
            .map(|t| {
                let usage = if convert::is_linear(&t.name) {
                    WeightUse::Linear
                } else {
                    WeightUse::Plain
                };
                Ok(WeightTensor::from(layers.store(t, usage)))
            })
            .chain(codec_tensors.into_iter().map(Ok));
        let weights = WeightStore::upload(&file.path, tensors, &runtime)?;
        let mut voices: Vec<String> = hp.speakers.iter().map(|s| s.name.clone()).collect();
        if let Some(default) = spec.defaults.get("voice").and_then(|v| v.as_str()) {
            if let Some(i) = voices.iter().position(|n| n == default) {
                let v = voices.remove(i);
                voices.insert(0, v);
            }
        }
        if voices.is_empty() && hp.model_type == "custom_voice" {
            return Err(file.invalid("the CustomVoice model has no preset speakers".into()));
        }
        Self::with_schedulers(Parts {
            hp,
            talker,
            codec,
            encoders,
            tokenizer: Arc::new(tokenizer),
            voices,
            layers,
            weights: Arc::new(weights),
            runtime,
        })
    }

    /// The model from its parts, with schedulers of its own on `parts.runtime`.
    fn with_schedulers(parts: Parts) -> Result<Self> {
        let Parts {
            hp,
            talker,
            codec,
            encoders,
            tokenizer,
            voices,
            layers,
            weights,
            runtime,
        } = parts;
        let encoders = match encoders {
            Some((speaker, mimi)) => Some(Encoders {
                speaker_sched: runtime.scheduler(speaker.nodes())?,
                mimi_sched: runtime.scheduler(mimi.nodes())?,
                speaker,
                mimi,
            }),
            None => None,
        };
        Ok(Qwen3Tts {
            encoders,
            talker_sched: runtime.scheduler(talker.talker_nodes() + 4 * hp.code_groups)?,
            predictor_sched: runtime.scheduler(talker.predictor_nodes())?,
            codec_sched: runtime.scheduler(codec.nodes() + 8 * hp.codec.quantizers)?,
            hp,
            talker,
            codec,
            tokenizer,
            voices,
            layers,
            weights,
            runtime,
        })
    }

    /// A second model for another thread: the weights and tokenizer shared (not
    /// copied), schedulers and backends of its own ([`Runtime::fork`]); it speaks and
    /// clones voices as `self` does, sample for sample. The caches live per request.
    pub fn fork(&self) -> Result<Self> {
        Self::with_schedulers(Parts {
            hp: self.hp.clone(),
            talker: self.talker.clone(),
            codec: self.codec.clone(),
            encoders: self
                .encoders
                .as_ref()
                .map(|e| (e.speaker.clone(), e.mimi.clone())),
            tokenizer: Arc::clone(&self.tokenizer),
            voices: self.voices.clone(),
            layers: self.layers,
            weights: Arc::clone(&self.weights),
            runtime: self.runtime.fork()?,
        })
    }

    /// Where the weights' device memory starts (equal for a model and its forks).
    pub fn weight_addresses(&self) -> Vec<usize> {
        self.weights.base_addresses()
    }

    /// The model's hyper-parameters.
    pub fn hparams(&self) -> &HParams {
        &self.hp
    }

    /// The ids of `text` (added tokens matched).
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer.encode(text).map_err(EngineError::Usage)
    }

    /// The prompt layout of a request: the tokenized turns and the codec prefix.
    pub fn layout(&self, req: &Request<'_>) -> Result<Layout> {
        let hp = &self.hp;
        let (language, row) = match req.speaker {
            Speaker::Preset(name) => {
                let speaker = hp.speaker(name).ok_or_else(|| {
                    EngineError::Usage(format!(
                        "parameter 'voice' '{name}' is not a speaker of this model (voices: {})",
                        if self.voices.is_empty() {
                            "none".to_string()
                        } else {
                            self.voices.join(", ")
                        }
                    ))
                })?;
                let language = decode::language_id(hp, req.language, Some(name))
                    .map_err(EngineError::Usage)?;
                (language, SpeakerRow::Preset(speaker.id))
            }
            Speaker::Clone(_) => {
                if hp.clone.is_none() {
                    return Err(EngineError::Usage(format!(
                        "this model (type '{}') does not clone voices; a Base model does",
                        hp.model_type
                    )));
                }
                let language =
                    decode::language_id(hp, req.language, None).map_err(EngineError::Usage)?;
                (language, SpeakerRow::XVector)
            }
            Speaker::Design => {
                let language =
                    decode::language_id(hp, req.language, None).map_err(EngineError::Usage)?;
                (language, SpeakerRow::None)
            }
        };
        let prefix = decode::codec_prefix(hp, language, row);
        let text_ids = self.tokenize(&decode::assistant_turn(req.text))?;
        if let Speaker::Clone(ClonePrompt {
            codes: Some(codes),
            ref_text: Some(ref_text),
            ..
        }) = req.speaker
        {
            let ref_ids = self.tokenize(&decode::reference_turn(ref_text))?;
            return decode::icl_layout(
                hp,
                &text_ids,
                &ref_ids,
                &prefix,
                codes.len(),
                req.streaming_text,
            );
        }
        let instruction_ids = match req.instructions.filter(|i| !i.is_empty()) {
            Some(i) if hp.takes_instructions() && !matches!(req.speaker, Speaker::Clone(_)) => {
                Some(self.tokenize(&decode::instruction_turn(i))?)
            }
            _ => None,
        };
        decode::layout(
            hp,
            &text_ids,
            instruction_ids.as_deref(),
            &prefix,
            req.streaming_text,
        )
    }

    /// The talker's input rows of `layout`'s prompt (with `clone`'s x-vector and
    /// reference frames where it has them), its trailing text rows, and the `tts_pad`
    /// row added once those are exhausted.
    pub fn prompt_rows(
        &mut self,
        layout: &Layout,
        clone: Option<&ClonePrompt>,
    ) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
        let hidden = self.hp.talker.hidden;
        let texts: Vec<u32> = layout
            .rows
            .iter()
            .filter_map(|(t, _)| match t {
                Text::Token(i) => Some(*i),
                Text::None => None,
            })
            .chain(layout.trailing.iter().copied())
            .chain([self.hp.text_ids.tts_pad])
            .collect();
        let text_rows =
            self.talker
                .text_rows(&self.weights, &self.layers, &mut self.talker_sched, &texts)?;
        let ids: Vec<u32> = layout
            .rows
            .iter()
            .filter_map(|(_, c)| match c {
                Codec::Id(i) => Some(*i),
                _ => None,
            })
            .collect();
        let id_rows = if ids.is_empty() {
            Vec::new()
        } else {
            self.talker
                .codec_rows(&self.weights, &mut self.talker_sched, &ids)?
        };
        let reference = match clone.and_then(|c| c.codes.as_ref()) {
            Some(codes)
                if layout
                    .rows
                    .iter()
                    .any(|(_, c)| matches!(c, Codec::Frame(_))) =>
            {
                self.talker
                    .frame_rows(&self.weights, &mut self.talker_sched, codes)?
            }
            _ => Vec::new(),
        };
        let (mut ti, mut ci) = (0, 0);
        let mut rows = vec![0f32; layout.rows.len() * hidden];
        for (r, (t, c)) in layout.rows.iter().enumerate() {
            let row = &mut rows[r * hidden..(r + 1) * hidden];
            if let Text::Token(_) = t {
                row.copy_from_slice(&text_rows[ti * hidden..(ti + 1) * hidden]);
                ti += 1;
            }
            let codec: &[f32] = match *c {
                Codec::None => continue,
                Codec::Id(_) => {
                    ci += 1;
                    &id_rows[(ci - 1) * hidden..ci * hidden]
                }
                Codec::Frame(k) => {
                    reference.get(k * hidden..(k + 1) * hidden).ok_or_else(|| {
                        EngineError::Usage(
                            "the prompt refers to reference frames the voice lacks".into(),
                        )
                    })?
                }
                Codec::XVector => match clone {
                    Some(v) if v.x_vector.len() == hidden => &v.x_vector,
                    _ => {
                        return Err(EngineError::Usage(format!(
                            "the cloned voice's x-vector is not {hidden} values wide"
                        )))
                    }
                },
            };
            for (x, y) in row.iter_mut().zip(codec) {
                *x += y;
            }
        }
        let pad = text_rows[text_rows.len() - hidden..].to_vec();
        let trailing = text_rows[ti * hidden..text_rows.len() - hidden].to_vec();
        Ok((rows, trailing, pad))
    }

    /// Generates the frames of `req`; `keep_going` is asked before each frame (a caller
    /// stops a request whose audio would pass its limit).
    pub fn generate(
        &mut self,
        req: &Request<'_>,
        keep_going: &mut dyn FnMut(usize) -> bool,
    ) -> Result<Generation> {
        let hp = self.hp.clone();
        let hidden = hp.talker.hidden;
        let layout = self.layout(req)?;
        let clone = match req.speaker {
            Speaker::Clone(c) => Some(c),
            _ => None,
        };
        let (prompt, trailing, pad) = self.prompt_rows(&layout, clone)?;
        let prompt_len = prompt.len() / hidden;
        let cache = self
            .talker
            .talker_cache(&self.runtime, prompt_len + req.max_frames + 1)?;
        let predictor_cache = self.talker.predictor_cache(&self.runtime)?;
        let mut rng = Sampler::new(req.seed);
        let (mut logits, mut last) = self.talker.step(
            &self.weights,
            &self.layers,
            &mut self.talker_sched,
            &cache,
            0,
            &prompt,
            None,
        )?;
        let mut out = Generation::default();
        // max_new_tokens = max_frames + 1: the last group-0 code never gets its frame.
        for step in 0..=req.max_frames {
            if out.first_logits.len() < 3 {
                out.first_logits.push(logits.clone());
            }
            let code = decode::next_code(&hp, &mut logits, &out.group0, &req.decoding, &mut rng);
            if code == hp.codec_ids.eos {
                out.stopped_by_eos = true;
                break;
            }
            out.group0.push(code);
            if step == req.max_frames || !keep_going(out.frames.len() + 1) {
                break;
            }
            let frame = self.sub_codes(&predictor_cache, &last, code, &req.decoding, &mut rng)?;
            // Upstream: modeling_qwen3_tts.py L1689-L1692 (the text row of this step, then
            // `tts_pad` once the text is exhausted).
            let text = trailing.chunks(hidden).nth(step).unwrap_or(&pad);
            let (next, h) = self.talker.step(
                &self.weights,
                &self.layers,
                &mut self.talker_sched,
                &cache,
                prompt_len + step,
                text,
                Some(&frame),
            )?;
            out.frames.push(frame);
            logits = next;
            last = h;
        }
        Ok(out)
    }

    /// The frame of group-0 code `code`: the code predictor's codes for groups 1 and up,
    /// from the talker's last hidden state `hidden`.
    fn sub_codes(
        &mut self,
        cache: &transformer::KvCache,
        hidden: &[f32],
        code: u32,
        d: &Decoding,
        rng: &mut Sampler,
    ) -> Result<Vec<u32>> {
        let mut frame = vec![code];
        let mut input = PredictorInput::Start { hidden, code };
        let mut n_past = 0;
        for group in 0..self.hp.code_groups - 1 {
            let logits = self.talker.predict(
                &self.weights,
                &self.layers,
                &mut self.predictor_sched,
                cache,
                n_past,
                input,
                group,
            )?;
            n_past += if group == 0 { 2 } else { 1 };
            let c = crate::sampling::choose(&logits, &d.predictor, rng) as u32;
            frame.push(c);
            input = PredictorInput::Code(c);
        }
        Ok(frame)
    }

    /// The samples of `frames`, decoded in the official chunks; `on_chunk` gets each
    /// chunk's samples as they are made.
    pub fn decode_frames(
        &mut self,
        frames: &[Vec<u32>],
        on_chunk: &mut dyn FnMut(&[f32]) -> Result<()>,
    ) -> Result<()> {
        let spf = self.hp.codec.samples_per_frame();
        let (codec, w, layers, runtime, sched) = (
            &self.codec,
            &self.weights,
            &self.layers,
            &self.runtime,
            &mut self.codec_sched,
        );
        codec::decode(
            frames,
            spf,
            |chunk| codec.forward(w, layers, runtime, sched, chunk),
            on_chunk,
        )
    }

    /// One pass of the codec over `frames` (no chunks), for the checks of chunking.
    pub fn decode_one_pass(&mut self, frames: &[Vec<u32>]) -> Result<Vec<f32>> {
        self.codec.forward(
            &self.weights,
            &self.layers,
            &self.runtime,
            &mut self.codec_sched,
            frames,
        )
    }

    /// The shape a voice file must have for this model.
    pub fn voice_shape(&self) -> voice::Shape {
        voice::Shape {
            x_vector: self.hp.talker.hidden,
            code_groups: self.hp.code_groups,
            codebook_size: self.hp.codec.codebook_size,
        }
    }

    /// The voice of a reference recording (`samples`, mono at the codec's rate): its
    /// x-vector, and unless `x_vector_only` its codes and `transcript`.
    pub fn clone_prompt(
        &mut self,
        samples: &[f32],
        transcript: Option<&str>,
        x_vector_only: bool,
    ) -> Result<ClonePrompt> {
        let rate = self.hp.codec.sample_rate as f64;
        let Some(enc) = self.encoders.as_mut() else {
            return Err(EngineError::Usage(format!(
                "this model (type '{}') does not clone voices; a Qwen3-TTS Base model does",
                self.hp.model_type
            )));
        };
        let seconds = samples.len() as f64 / rate;
        if !(MIN_REFERENCE_S..=MAX_REFERENCE_S).contains(&seconds) {
            return Err(EngineError::Usage(format!(
                "the reference audio is {seconds:.2} s; give a clip of {MIN_REFERENCE_S} to {MAX_REFERENCE_S} s of the voice (a few seconds of clear speech clone best)"
            )));
        }
        let transcript = transcript.map(str::trim).filter(|t| !t.is_empty());
        if transcript.is_none() && !x_vector_only {
            return Err(EngineError::Usage(
                "parameter 'ref_text' is missing: give what the reference clip says, or clone from the speaker embedding alone (x_vector_only)".into(),
            ));
        }
        let x_vector = enc
            .speaker
            .x_vector(&self.weights, &mut enc.speaker_sched, samples)?;
        let codes = if x_vector_only {
            None
        } else {
            Some(enc.mimi.encode(
                &self.weights,
                &self.layers,
                &self.runtime,
                &mut enc.mimi_sched,
                samples,
            )?)
        };
        Ok(ClonePrompt {
            x_vector,
            codes,
            ref_text: transcript.map(str::to_string),
        })
    }

    /// The samples of a generation for `speaker`: for an in-context clone, the decoding
    /// of the reference frames and the new ones together, less the reference's part.
    pub fn speech(&mut self, speaker: Speaker<'_>, frames: &[Vec<u32>]) -> Result<Vec<f32>> {
        let reference = match speaker {
            Speaker::Clone(ClonePrompt { codes: Some(c), .. }) => c.as_slice(),
            _ => &[],
        };
        let all: Vec<Vec<u32>> = reference.iter().chain(frames).cloned().collect();
        let mut samples = Vec::with_capacity(all.len() * self.hp.codec.samples_per_frame());
        self.decode_frames(&all, &mut |chunk| {
            samples.extend_from_slice(chunk);
            Ok(())
        })?;
        let cut = decode::reference_cut(reference.len(), frames.len(), samples.len());
        samples.drain(..cut);
        Ok(samples)
    }

    /// The decoding the options and the model's defaults ask for.
    fn decoding(&self, options: &SpeechOptions) -> Decoding {
        let s = self.hp.sampling;
        let temperature = |t: f32, sample: bool| match options.temperature {
            Some(t) => t,
            None if sample => t,
            None => 0.0,
        };
        Decoding {
            talker: Choice {
                temperature: temperature(s.temperature, s.do_sample),
                top_k: s.top_k,
                top_p: s.top_p,
            },
            repetition_penalty: s.repetition_penalty,
            predictor: Choice {
                temperature: temperature(s.sub_temperature, s.sub_do_sample),
                top_k: s.sub_top_k,
                top_p: s.sub_top_p,
            },
        }
    }
}

impl Synthesizer for Qwen3Tts {
    fn sample_rate(&self) -> u32 {
        self.hp.codec.sample_rate
    }

    fn voices(&self) -> Vec<String> {
        self.voices.clone()
    }

    fn takes_phonemes(&self) -> bool {
        false
    }

    fn device(&self) -> String {
        self.runtime.device().name.clone()
    }

    fn languages(&self) -> Vec<String> {
        self.hp.language_names()
    }

    fn takes_options(&self) -> &'static [&'static str] {
        OPTIONS
    }

    fn default_voice(&self, options: &SpeechOptions) -> Result<String> {
        match self.hp.model_type.as_str() {
            _ if options.cloned_voice.is_some() => Ok("cloned".into()),
            "voice_design" => Ok("designed".into()),
            "base" => Err(EngineError::Usage(
                "parameter 'voice': a Base model speaks in a cloned voice; give a reference clip and its transcript (ref_audio, ref_text) or a saved voice".into(),
            )),
            _ => self.voices.first().cloned().ok_or_else(|| {
                EngineError::Usage("parameter 'voice': this model has no voices".into())
            }),
        }
    }

    fn fork(&self) -> Result<Box<dyn Synthesizer>> {
        Ok(Box::new(Qwen3Tts::fork(self)?))
    }

    fn weight_addresses(&self) -> Vec<usize> {
        Qwen3Tts::weight_addresses(self)
    }

    fn clone_voice(&mut self, sample: &VoiceSample<'_>) -> Result<Vec<u8>> {
        let prompt = self.clone_prompt(sample.samples, sample.transcript, sample.x_vector_only)?;
        Ok(prompt.to_bytes(self.voice_shape()))
    }

    fn check_options(&self, o: &SpeechOptions) -> Result<()> {
        if let Some(l) = &o.language {
            self.hp.language_id(l).map_err(EngineError::Usage)?;
        }
        if let Some(bytes) = &o.cloned_voice {
            if self.hp.clone.is_none() {
                return Err(EngineError::Usage(format!(
                    "parameter 'cloned_voice': this model (type '{}') does not clone voices; a Qwen3-TTS Base model does",
                    self.hp.model_type
                )));
            }
            ClonePrompt::from_bytes(bytes, self.voice_shape())?;
            if o.instructions
                .as_deref()
                .is_some_and(|i| !i.trim().is_empty())
            {
                return Err(EngineError::Usage(
                    "parameter 'instructions': a cloned voice speaks as its recording; leave the instructions out".into(),
                ));
            }
        }
        if o.instructions
            .as_deref()
            .is_some_and(|i| !i.trim().is_empty())
            && !self.hp.takes_instructions()
        {
            return Err(EngineError::Usage(format!(
                "parameter 'instructions': this model (size '{}') does not follow instructions; leave them out or use a 1.7B model",
                self.hp.model_size
            )));
        }
        if let Some(t) = o.temperature {
            if !(t.is_finite() && (0.0..=2.0).contains(&t)) {
                return Err(EngineError::Usage(format!(
                    "parameter 'temperature' {t} is out of range: give 0 (greedy) to 2"
                )));
            }
        }
        if o.max_frames == Some(0) {
            return Err(EngineError::Usage(
                "parameter 'max_frames' must be at least 1".into(),
            ));
        }
        Ok(())
    }

    fn synthesize(
        &mut self,
        input: &SpeechInput,
        voice: &str,
        speed: f32,
        options: &SpeechOptions,
        max_samples: usize,
    ) -> Result<Option<Vec<f32>>> {
        let SpeechInput::Text(text) = input else {
            return Err(EngineError::Usage(
                "parameter 'input': family 'qwen3_tts' takes text, not phonemes".into(),
            ));
        };
        if speed != 1.0 {
            return Err(EngineError::Usage(format!(
                "parameter 'speed' {speed}: family 'qwen3_tts' speaks at its own rate; leave it at 1 (or describe the pace in parameter 'instructions')"
            )));
        }
        let spf = self.hp.codec.samples_per_frame();
        let limit = max_samples / spf;
        let clone = match &options.cloned_voice {
            Some(bytes) => Some(ClonePrompt::from_bytes(bytes, self.voice_shape())?),
            None => None,
        };
        let speaker = match (&clone, self.hp.model_type.as_str()) {
            (Some(c), _) => Speaker::Clone(c),
            (None, "voice_design") => Speaker::Design,
            (None, _) => Speaker::Preset(voice),
        };
        let req = Request {
            text,
            speaker,
            language: options.language.as_deref().unwrap_or("auto"),
            instructions: options.instructions.as_deref(),
            // As the official entry points: a clone feeds the text frame by frame.
            streaming_text: matches!(speaker, Speaker::Clone(_)),
            decoding: self.decoding(options),
            seed: options.seed.unwrap_or(0),
            max_frames: options
                .max_frames
                .unwrap_or(self.hp.sampling.max_new_tokens.saturating_sub(1))
                .max(1),
        };
        let mut over = false;
        let generation = self.generate(&req, &mut |frames| {
            over = frames > limit;
            !over
        })?;
        if over {
            return Ok(None);
        }
        Ok(Some(self.speech(speaker, &generation.frames)?))
    }
}
