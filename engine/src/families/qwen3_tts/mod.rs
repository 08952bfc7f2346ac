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
pub mod talker;
pub mod tokenizer;
pub mod transformer;

use crate::backend::Runtime;
use crate::error::{EngineError, Result};
use crate::families::{Family, LoaderInfo};
use crate::ggml::{HostTensor, Scheduler};
use crate::layers::{Layers, WeightUse};
use crate::model_file::ModelFile;
use crate::sampling::{Choice, Sampler};
use crate::spec::ModelSpec;
use crate::task::Task;
use crate::tts::{SpeechInput, SpeechOptions, Synthesizer};
use crate::weights::{WeightStore, WeightTensor};

use decode::{Decoding, Layout, Text};
use hparams::HParams;
use talker::{PredictorInput, Talker};
use tokenizer::TextTokenizer;

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
];

/// The registry's TTS loader.
fn load(file: ModelFile, spec: &ModelSpec, runtime: Runtime) -> Result<Box<dyn Synthesizer>> {
    Ok(Box::new(Qwen3Tts::load(file, spec, runtime)?))
}

/// A loaded Qwen3-TTS model.
pub struct Qwen3Tts {
    hp: HParams,
    talker: Talker,
    codec: codec::Codec,
    tokenizer: TextTokenizer,
    /// Speakers in the order listed (the spec's default first).
    voices: Vec<String>,
    layers: Layers,
    /// One scheduler per graph kind, kept between requests; declared before the weights
    /// and the runtime so that they are freed first.
    talker_sched: Scheduler,
    predictor_sched: Scheduler,
    codec_sched: Scheduler,
    weights: WeightStore,
    runtime: Runtime,
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

/// A request as the pipeline takes it.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// The text to speak.
    pub text: &'a str,
    /// The preset speaker.
    pub speaker: &'a str,
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
        let layers = Layers::new(&runtime);
        let (codec_host, model_host): (Vec<HostTensor>, Vec<HostTensor>) =
            std::mem::take(&mut file.tensors)
                .into_iter()
                .partition(|t| t.name.starts_with("codec."));
        let codec_tensors = codec::prepare(codec_host, &hp.codec)?;
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
        if voices.is_empty() {
            return Err(file.invalid("the model has no preset speakers (a Base or VoiceDesign model needs a voice to clone or a description)".into()));
        }
        Ok(Qwen3Tts {
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
        let speaker = hp.speaker(req.speaker).ok_or_else(|| {
            EngineError::Usage(format!(
                "parameter 'voice' '{}' is not a speaker of this model (voices: {})",
                req.speaker,
                self.voices.join(", ")
            ))
        })?;
        let language =
            decode::language_id(hp, req.language, Some(req.speaker)).map_err(EngineError::Usage)?;
        let prefix = decode::codec_prefix(hp, language, Some(speaker.id));
        let text_ids = self.tokenize(&decode::assistant_turn(req.text))?;
        let instruction_ids = match req.instructions.filter(|i| !i.is_empty()) {
            Some(i) if hp.takes_instructions() => {
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

    /// The talker's input rows of `layout`'s prompt, its trailing text rows, and the
    /// `tts_pad` row added once those are exhausted.
    pub fn prompt_rows(&mut self, layout: &Layout) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
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
        let codecs: Vec<u32> = layout.rows.iter().filter_map(|(_, c)| *c).collect();
        let codec_rows = if codecs.is_empty() {
            Vec::new()
        } else {
            self.talker
                .codec_rows(&self.weights, &mut self.talker_sched, &codecs)?
        };
        let (mut ti, mut ci) = (0, 0);
        let mut rows = vec![0f32; layout.rows.len() * hidden];
        for (r, (t, c)) in layout.rows.iter().enumerate() {
            let row = &mut rows[r * hidden..(r + 1) * hidden];
            if let Text::Token(_) = t {
                row.copy_from_slice(&text_rows[ti * hidden..(ti + 1) * hidden]);
                ti += 1;
            }
            if c.is_some() {
                for (x, y) in row
                    .iter_mut()
                    .zip(&codec_rows[ci * hidden..(ci + 1) * hidden])
                {
                    *x += y;
                }
                ci += 1;
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
        let (prompt, trailing, pad) = self.prompt_rows(&layout)?;
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

    fn check_options(&self, o: &SpeechOptions) -> Result<()> {
        if let Some(l) = &o.language {
            self.hp.language_id(l).map_err(EngineError::Usage)?;
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
        let req = Request {
            text,
            speaker: voice,
            language: options.language.as_deref().unwrap_or("auto"),
            instructions: options.instructions.as_deref(),
            streaming_text: false,
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
        let mut samples = Vec::with_capacity(generation.frames.len() * spf);
        self.decode_frames(&generation.frames, &mut |chunk| {
            samples.extend_from_slice(chunk);
            Ok(())
        })?;
        Ok(Some(samples))
    }
}
