//! The speech-recognition task: its contract with a family ([`Recognizer`]), what every
//! ASR family takes and returns (decoding options, timed segments and the transcript,
//! shaped as OpenAI's transcription API reports them, `verbose_json` segments), and the
//! family-neutral run: chunking by a VAD, language resolution, joining segments. The
//! CLI and the server name no family; a family fills these in its own terms (Whisper's
//! windows and tokens).

use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use crate::error::{EngineError, Result};
use crate::loaded::Loaded;
use crate::vad::{self, VadModel, VadParams};

/// One transcribed stretch: a timed piece of an input window, or a whole window when
/// decoding ran [`DecodeOptions::without_timestamps`].
#[derive(Debug, Clone, Serialize)]
pub struct Segment {
    /// Start in seconds.
    pub start: f64,
    /// End in seconds.
    pub end: f64,
    /// Text (with its leading space, as Whisper and OpenAI write it).
    pub text: String,
    /// Generated text token ids (no prompt, timestamps or end-of-text).
    pub tokens: Vec<u32>,
    /// Feature frame where the input window this segment was decoded from starts, in the
    /// whole audio: OpenAI's `seek` (Whisper: 10 ms mel frames, 30 s windows).
    pub seek: usize,
    /// Temperature of the decode that was kept for the window (0: greedy).
    pub temperature: f32,
    /// Mean log-probability per token of the window's kept decode.
    pub avg_logprob: f32,
    /// zlib compression ratio of the window's text (high: repetitive).
    pub compression_ratio: f32,
    /// Probability of no speech at the window's start.
    pub no_speech_prob: f32,
    /// Its words with their times, when decoding ran with
    /// [`DecodeOptions::word_timestamps`] (empty otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub words: Vec<Word>,
}

/// One word of a [`Segment`] with its times (OpenAI's `verbose_json` word, plus the
/// probability faster-whisper reports).
#[derive(Debug, Clone, Serialize)]
pub struct Word {
    /// The word (with its leading space and any punctuation merged into it).
    pub word: String,
    /// Start in seconds.
    pub start: f64,
    /// End in seconds.
    pub end: f64,
    /// Mean probability of its tokens.
    pub probability: f32,
}

/// What a [`Recognizer`] produced for one stretch of audio.
#[derive(Debug, Clone)]
pub struct Transcript {
    /// The segments that held speech.
    pub segments: Vec<Segment>,
    /// Decoder passes over all windows, each sampled draw counted: one per window when
    /// greedy decoding passes its checks, more when temperature fallback had to sample.
    pub decode_passes: usize,
    /// Decoder steps (one token each through the prepared step graph) and their wall
    /// time with the token choice that follows each, in milliseconds: what a GPU's
    /// launch and copy costs show in.
    pub decoder_steps: usize,
    pub decoder_ms: f64,
}

/// Decoding options (the engine's parameter names; a family's spec gives the defaults).
#[derive(Debug, Clone)]
pub struct DecodeOptions {
    /// Language code (`en`, `de`, ...) or `auto` (detect it on multilingual models, `en`
    /// on English-only ones, which accept only `en`).
    pub language: String,
    /// A window whose no-speech probability is above this...
    pub no_speech_threshold: f32,
    /// ...and whose mean token log-probability is below this is dropped as silence.
    pub log_prob_threshold: f32,
    /// Suppress timestamp tokens (faster-whisper's `without_timestamps=True`): one
    /// segment per input window, read back to back, and a window whose text ends early
    /// loses the rest of its speech (Whisper tiny.en loses the first 30 s of a 60 s clip
    /// this way, as faster-whisper does). Off (the default, faster-whisper's too):
    /// timestamp tokens are predicted, segments get their own start and end, and a
    /// window that ends inside speech is re-read from its last timestamp.
    pub without_timestamps: bool,
    /// With timestamp tokens, the latest the first timestamp may be, in seconds (1.0 as
    /// in faster-whisper and OpenAI's Whisper).
    pub max_initial_timestamp: f32,
    /// Temperatures tried in order until a window's result passes the checks below
    /// (faster-whisper: 0.0, 0.2, ..., 1.0); 0 is greedy, above 0 samples.
    pub temperatures: Vec<f32>,
    /// A result whose text compresses (zlib) better than this ratio is repetitive and
    /// retried at the next temperature (2.4); `None` disables the check.
    pub compression_ratio_threshold: Option<f32>,
    /// Samples drawn per temperature above 0; the one with the best log-probability wins.
    pub best_of: usize,
    /// Seed of the sampler, so sampled results are reproducible.
    pub seed: u64,
    /// A window whose every 0.1 s frame has an RMS level below this (dBFS) holds no
    /// speech and is skipped before it is encoded (no text, no decoder pass);
    /// `None` reads every window. Whisper, faster-whisper and whisper.cpp without a
    /// VAD transcribe digital silence as " you", one word per window, at a log
    /// probability their no-speech rule keeps: the floor (-60 dBFS by default)
    /// does what their VAD filter does for such windows, for the cost of a sum.
    pub silence_floor_db: Option<f32>,
    /// Word-level timestamps ([`Segment::words`]), from the cross-attention of the
    /// model's alignment heads (faster-whisper's `word_timestamps=True`; with it, a
    /// window that ends inside speech is read again from its last word's end).
    pub word_timestamps: bool,
}

/// A speech-recognition family's model as [`AsrModel`] runs it: a family implements it
/// and registers its loader ([`crate::families::Family::asr`]).
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
    /// Transcribes each `(samples, options)` of `jobs`, each as [`Self::transcribe`]
    /// would: a family that batches requests runs up to `width` together (the next
    /// starting as one ends), others one after another. The outer error fails the
    /// whole batch.
    fn transcribe_batch(
        &mut self,
        jobs: &[(&[f32], &DecodeOptions)],
        _width: usize,
    ) -> Result<Vec<Result<Transcript>>> {
        Ok(jobs
            .iter()
            .map(|(samples, opts)| self.transcribe(samples, opts))
            .collect())
    }
    /// A second model for another thread, which shares the weights (not copied) and has
    /// caches and backends of its own: the server runs requests side by side on forks.
    fn fork(&self) -> Result<Box<dyn Recognizer>>;
    /// Where its weights' device memory starts, one address per buffer: a fork gives the
    /// same ones as the model it came from.
    fn weight_addresses(&self) -> Vec<usize>;
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
    pub segments: Vec<Segment>,
    /// Decoder passes, each sampled draw counted (see [`Transcript`]): more than
    /// one per window means temperature fallback ran.
    pub decode_passes: usize,
    /// Decoder steps and their time (see [`Transcript::decoder_steps`]).
    pub decoder_steps: usize,
    pub decoder_ms: f64,
    /// Inference wall time in milliseconds (model load and audio decoding excluded).
    pub inference_ms: f64,
}

impl AsrOutput {
    /// SRT (`vtt` false) or WebVTT cues: one per segment, or with `words` one per word of
    /// the segments' [`Segment::words`] (word-level subtitles, as whisper.cpp's
    /// `--max-len 1` writes them). The CLI and the server write the same cues.
    pub fn subtitles(&self, vtt: bool, words: bool) -> String {
        let stamp = |t: f64| {
            let ms = (t * 1000.0).round() as u64;
            let (h, m, s, f) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
            if vtt {
                format!("{h:02}:{m:02}:{s:02}.{f:03}")
            } else {
                format!("{h:02}:{m:02}:{s:02},{f:03}")
            }
        };
        let cues: Vec<(f64, f64, &str)> = if words {
            self.segments
                .iter()
                .flat_map(|s| &s.words)
                .map(|w| (w.start, w.end, w.word.trim()))
                .collect()
        } else {
            self.segments
                .iter()
                .map(|s| (s.start, s.end, s.text.trim()))
                .collect()
        };
        let mut text = if vtt {
            "WEBVTT\n\n".to_string()
        } else {
            String::new()
        };
        for (i, (start, end, cue)) in cues.into_iter().enumerate() {
            if !vtt {
                text.push_str(&format!("{}\n", i + 1));
            }
            text.push_str(&format!("{} --> {}\n{cue}\n\n", stamp(start), stamp(end)));
        }
        text
    }
}

/// A loaded speech-recognition model, reusable across requests (loaded by
/// `AsrModel::load`, in [`crate::tasks`]).
pub type AsrModel = Loaded<dyn Recognizer>;

impl AsrModel {
    /// A second model for another thread ([`Recognizer::fork`]): the weights shared, not
    /// copied; it transcribes as `self` does.
    pub fn fork(&self) -> Result<AsrModel> {
        Ok(Loaded::new(
            self.model.fork()?,
            self.family,
            self.spec_source.clone(),
        ))
    }

    /// Where its weights' device memory starts ([`Recognizer::weight_addresses`]).
    pub fn weight_addresses(&self) -> Vec<usize> {
        self.model.weight_addresses()
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
            1,
        )
    }

    /// Transcribes mono samples at the model's rate chunk by chunk, as a VAD model
    /// found speech: chunks of at most one 30 s window ([`vad::chunks_for_window`]),
    /// so windows start and end in pauses instead of inside words, and long silences
    /// are skipped. Segment times stay relative to the whole audio. The VAD model must
    /// run at the same sample rate. Up to `batch` chunks are decoded at once as one
    /// batch ([`Recognizer::transcribe_batch`]; the same transcript, a different speed),
    /// 1 decodes them one after another.
    pub fn run_samples_with_vad(
        &mut self,
        samples: &[f32],
        opts: &DecodeOptions,
        vad: &mut VadModel,
        params: &VadParams,
        batch: usize,
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
        let mut out = self.run_chunks(samples, &chunks, opts, batch)?;
        out.inference_ms = t0.elapsed().as_secs_f64() * 1000.0;
        Ok(out)
    }

    /// Transcribes each chunk of `samples` on its own, `batch` at a time, and joins the
    /// results; the language (when `auto`) is detected on the first chunk.
    fn run_chunks(
        &mut self,
        samples: &[f32],
        chunks: &[vad::Segment],
        opts: &DecodeOptions,
        batch: usize,
    ) -> Result<AsrOutput> {
        let t0 = Instant::now();
        let first = chunks
            .first()
            .map_or(&samples[..0], |c| &samples[c.start..c.end]);
        let (language, language_probability) =
            self.model.resolve_language(first, &opts.language)?;
        let opts = DecodeOptions {
            language: language.clone(),
            ..opts.clone()
        };
        let mut parts = Vec::with_capacity(chunks.len());
        if batch > 1 {
            let jobs: Vec<(&[f32], &DecodeOptions)> = chunks
                .iter()
                .map(|c| (&samples[c.start..c.end], &opts))
                .collect();
            for (c, part) in chunks
                .iter()
                .zip(self.model.transcribe_batch(&jobs, batch)?)
            {
                parts.push((c.start, part?));
            }
        } else {
            for c in chunks {
                parts.push((
                    c.start,
                    self.model.transcribe(&samples[c.start..c.end], &opts)?,
                ));
            }
        }
        Ok(self.output(samples.len(), (language, language_probability), parts, t0))
    }

    /// Transcribes each `(samples, options)` of `inputs` as [`Self::run_samples`] does;
    /// a family that batches requests ([`Recognizer::transcribe_batch`]) decodes up to
    /// `width` together (the next starting as one ends), with the same transcripts. The
    /// outer error fails the whole batch; `inference_ms` is the batch's.
    pub fn run_batch(
        &mut self,
        inputs: &[(&[f32], &DecodeOptions)],
        width: usize,
    ) -> Result<Vec<Result<AsrOutput>>> {
        let t0 = Instant::now();
        let resolved: Vec<Result<(String, Option<f32>)>> = inputs
            .iter()
            .map(|(samples, opts)| self.model.resolve_language(samples, &opts.language))
            .collect();
        let opts: Vec<Option<DecodeOptions>> = inputs
            .iter()
            .zip(&resolved)
            .map(|((_, opts), r)| {
                r.as_ref().ok().map(|(language, _)| DecodeOptions {
                    language: language.clone(),
                    ..(*opts).clone()
                })
            })
            .collect();
        let jobs: Vec<(&[f32], &DecodeOptions)> = inputs
            .iter()
            .zip(&opts)
            .filter_map(|((samples, _), o)| o.as_ref().map(|o| (*samples, o)))
            .collect();
        let mut done = self.model.transcribe_batch(&jobs, width)?.into_iter();
        Ok(inputs
            .iter()
            .zip(resolved)
            .map(|((samples, _), language)| {
                let language = language?;
                let part = done.next().expect("one transcript per job")?;
                Ok(self.output(samples.len(), language, vec![(0, part)], t0))
            })
            .collect())
    }

    /// The output of a run over `n_samples` samples in `language` (and its detected
    /// probability) from the transcripts of its chunks (each with its first sample),
    /// joined in order with times relative to the whole audio.
    fn output(
        &self,
        n_samples: usize,
        (language, language_probability): (String, Option<f32>),
        parts: Vec<(usize, Transcript)>,
        t0: Instant,
    ) -> AsrOutput {
        let rate = self.sample_rate();
        let mut segments = Vec::new();
        let mut decode_passes = 0;
        let (mut decoder_steps, mut decoder_ms) = (0, 0.0);
        for (start, part) in parts {
            let offset = start as f64 / rate as f64;
            let frame_offset = self.model.frames_at(start);
            segments.extend(part.segments.into_iter().map(|s| {
                Segment {
                    start: s.start + offset,
                    end: s.end + offset,
                    seek: s.seek + frame_offset,
                    words: s
                        .words
                        .into_iter()
                        .map(|w| Word {
                            start: w.start + offset,
                            end: w.end + offset,
                            ..w
                        })
                        .collect(),
                    ..s
                }
            }));
            decode_passes += part.decode_passes;
            decoder_steps += part.decoder_steps;
            decoder_ms += part.decoder_ms;
        }
        let text = segments
            .iter()
            .map(|s| s.text.as_str())
            .collect::<String>()
            .trim()
            .to_string();
        AsrOutput {
            family: self.family.to_string(),
            device: self.model.device(),
            spec_source: self.spec_source.to_string(),
            audio_seconds: n_samples as f64 / rate as f64,
            language,
            language_probability,
            text,
            segments,
            decode_passes,
            decoder_steps,
            decoder_ms,
            inference_ms: t0.elapsed().as_secs_f64() * 1000.0,
        }
    }

    /// Decodes an audio file and transcribes it.
    pub fn run_file(&mut self, audio: &Path, opts: &DecodeOptions) -> Result<AsrOutput> {
        let a = crate::audio::load(audio, self.sample_rate())?;
        self.run_samples(&a.samples, opts)
    }
}
