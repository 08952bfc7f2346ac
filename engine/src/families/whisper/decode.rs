//! Whisper's decoding, as faster-whisper runs it with `beam_size=1`: each 30 s window
//! encoded once, decoded greedily (or sampled, at a fallback temperature) token by token
//! under the suppression and timestamp rules, retried at the next temperature when the
//! text is too repetitive or too unlikely, and cut into timed segments
//! ([`super::timestamps`]); the next window starts at the last timestamp of one that ends
//! inside speech.

use crate::asr::{DecodeOptions, Segment, Transcript, Word};
use crate::error::{EngineError, Result};
pub use crate::sampling::Sampler;

use super::alignment::{
    add_word_timestamps, attention_matrix, negative_dtw, word_timings, TimedPiece, WordTiming,
};
use super::mel;
use super::mel::MelParams;
use super::model::{DecoderStep, HParams, Read, StepInput, WhisperNet};
use super::row::Row;
use super::timestamps::{apply_timestamp_rules, split_at_timestamps, WindowSplit};
use super::tokenizer::Tokenizer;
use super::Whisper;
use crate::ggml::{Prepared, Scheduler};

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

impl Whisper {
    pub(super) fn prompt(&self, opts: &DecodeOptions) -> Result<Vec<u32>> {
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
        let n_kv = prompt.len() + max_new(self.hp, &prompt);
        let (decoding, net, sched, step_sched) = self.parts();
        // One decoder step graph for the whole call: every token of every window runs it.
        let ctx = net.step_context(1)?;
        let eot = decoding.tok.specials().eot as usize;
        let (mut graph, step) = net.build_step(&ctx, &[(0, n_kv)], eot, decoding.suppress)?;
        let mut alone = Alone {
            net,
            sched,
            step: &step,
            graph: step_sched.prepare(&mut graph)?,
        };
        decoding.run(&mut alone, samples, opts, &prompt)
    }

    /// The parts of the model a call reads ([`Decoding`]), the network, and the
    /// schedulers of the encoder and prompts and of the decoder step.
    pub(super) fn parts(&mut self) -> (Decoding<'_>, &WhisperNet, &mut Scheduler, &mut Scheduler) {
        let Whisper {
            net,
            sched,
            step_sched,
            hp,
            mel,
            filters,
            tok,
            suppress,
            suppress_begin,
            alignment_heads,
            ..
        } = self;
        let decoding = Decoding {
            hp: *hp,
            mel: *mel,
            filters,
            tok,
            suppress,
            suppress_begin,
            alignment_heads,
            threads: crate::backend::threads_free_now(net.runtime().threads()),
        };
        (decoding, net, sched, step_sched)
    }
}

/// The most tokens a window's text may have after `prompt` (OpenAI's `sample_len`).
pub(super) fn max_new(hp: HParams, prompt: &[u32]) -> usize {
    hp.n_text_ctx
        .saturating_sub(prompt.len())
        .min(hp.n_text_ctx / 2)
}

/// What decoding a request reads of the model, shared by the requests of a batch.
#[derive(Clone, Copy)]
pub(super) struct Decoding<'w> {
    pub hp: HParams,
    pub mel: MelParams,
    pub filters: &'w [f32],
    pub tok: &'w Tokenizer,
    pub suppress: &'w [u32],
    pub suppress_begin: &'w [u32],
    /// The (decoder layer, head) pairs of word alignment.
    pub alignment_heads: &'w [(usize, usize)],
    /// The most CPU threads the log-mel front end runs on.
    pub threads: usize,
}

/// What decoding a request asks of the network: run on graphs of its own ([`Alone`]),
/// or as a member of a batch whose decoder steps run as one graph
/// ([`super::batch`]).
pub(super) trait WindowNet {
    /// Encodes a window of log-mel features into the request's cross-attention cache.
    fn encode(&mut self, mel: &[f32]) -> Result<()>;
    /// Feeds the prompt from position 0; the logits of each of its positions.
    fn prompt(&mut self, tokens: &[u32]) -> Result<Vec<f32>>;
    /// The forced-alignment pass ([`WhisperNet::align_pass`]).
    fn align(&mut self, tokens: &[u32], layers: &[usize]) -> Result<(Vec<f32>, Vec<Vec<f32>>)>;
    /// One token through the decoder step; its row, read as `input.read` says.
    fn step(&mut self, input: StepInput) -> Result<Row>;
    /// Cache positions the step reaches.
    fn positions(&self) -> usize;
}

/// A request run alone: cache slot 0 of the network and its own step graph.
struct Alone<'w, 's, 'g> {
    net: &'w WhisperNet,
    sched: &'w mut Scheduler,
    step: &'g DecoderStep<'g>,
    graph: Prepared<'s, 'g, 'g>,
}

impl WindowNet for Alone<'_, '_, '_> {
    fn encode(&mut self, mel: &[f32]) -> Result<()> {
        self.net.encode(self.sched, 0, mel)
    }

    fn prompt(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.net.decode(self.sched, 0, tokens, 0, tokens.len())
    }

    fn align(&mut self, tokens: &[u32], layers: &[usize]) -> Result<(Vec<f32>, Vec<Vec<f32>>)> {
        self.net.align_pass(self.sched, 0, tokens, layers)
    }

    fn step(&mut self, input: StepInput) -> Result<Row> {
        self.step.run_columns(&mut self.graph, &[input])?;
        self.step.read(0, input.read)
    }

    fn positions(&self) -> usize {
        self.step.positions(0)
    }
}

impl Decoding<'_> {
    /// [`Whisper::transcribe`] of `samples` after `prompt` (made from `opts`) on `net`.
    pub(super) fn run(
        &self,
        net: &mut dyn WindowNet,
        samples: &[f32],
        opts: &DecodeOptions,
        prompt: &[u32],
    ) -> Result<Transcript> {
        let prompt = prompt.to_vec();
        let (mel, n_frames) = mel::log_mel_threads(samples, &self.mel, self.filters, self.threads);
        let content = n_frames.saturating_sub(1);
        let hp = self.hp;
        let window = 2 * hp.n_audio_ctx;
        let per_second = self.mel.sample_rate as f64 / self.mel.hop as f64;
        // A timestamp step is one encoder position: window / n_audio_ctx mel frames.
        let frames_per_step = window / hp.n_audio_ctx;
        let step_seconds = frames_per_step as f64 / per_second;
        let max_initial = (!opts.without_timestamps)
            .then(|| (opts.max_initial_timestamp as f64 / step_seconds).round() as usize);
        let tb = self.tok.specials().timestamp_begin;
        let max_new = max_new(hp, &prompt);
        let (hop, rate) = (self.mel.hop, self.mel.sample_rate as usize);
        let floor = opts.silence_floor_db.map(|db| 10f32.powf(db / 20.0));
        if opts.word_timestamps && self.alignment_heads.is_empty() {
            return Err(EngineError::Usage(
                "word timestamps need the model's alignment heads (GGUF metadata whisper.alignment_heads), which this file lacks: convert it again from a CTranslate2 model whose config.json lists alignment_heads".into(),
            ));
        }
        // The start of the sequence the alignment pass reads: the prompt without
        // <|notimestamps|> (faster-whisper's `sot_sequence`).
        let no_ts = self.tok.specials().no_timestamps;
        let sot_sequence: Vec<u32> = prompt.iter().copied().filter(|&t| t != no_ts).collect();
        let mut last_speech = 0.0;
        let alignment_heads = self.alignment_heads;
        let mut dec = WindowDecoder {
            net,
            tok: self.tok,
            suppress: self.suppress,
            suppress_begin: self.suppress_begin,
            n_vocab: hp.n_vocab,
            n_audio_ctx: hp.n_audio_ctx,
            positions_per_second: 1.0 / step_seconds,
            max_new,
            steps: 0,
            step_time: std::time::Duration::ZERO,
        };
        let mut sampler = Sampler::new(opts.seed);
        let mut segments = Vec::new();
        let mut decode_passes = 0;
        let mut seek = 0;
        while seek < content {
            let size = window.min(content - seek);
            let audio =
                &samples[(seek * hop).min(samples.len())..((seek + size) * hop).min(samples.len())];
            if floor.is_some_and(|f| below_floor(audio, rate / 10, f)) {
                seek += size;
                continue;
            }
            let input = mel::window(&mel, hp.n_mels, n_frames, seek, window);
            dec.net.encode(&input)?;
            let kept = dec.decode_with_fallback(&prompt, max_initial, opts, &mut sampler)?;
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
                    pieces: vec![(0, size / frames_per_step, tokens.clone())],
                    advance_steps: None,
                }
            };
            let mut next = seek
                + match split.advance_steps {
                    Some(steps) if !silent => (steps * frames_per_step).max(1),
                    _ => size,
                };
            if !silent {
                let mut pieces: Vec<TimedPiece> = split
                    .pieces
                    .iter()
                    .map(|(start, end, tokens)| TimedPiece {
                        start: offset + *start as f64 * step_seconds,
                        end: offset + *end as f64 * step_seconds,
                        text_tokens: tokens.iter().copied().filter(|&t| t < tb).collect(),
                        words: Vec::new(),
                    })
                    .collect();
                if opts.word_timestamps {
                    let text: Vec<u32> = pieces
                        .iter()
                        .flat_map(|p| p.text_tokens.iter().copied())
                        .collect();
                    if !text.is_empty() {
                        let alignment = dec.align(&sot_sequence, &text, size, alignment_heads)?;
                        add_word_timestamps(&mut pieces, alignment, offset, last_speech);
                    }
                    // faster-whisper seeks to the last word's end instead of the last
                    // timestamp, unless the window ended on a lone timestamp.
                    let single_ending = tokens.len() >= 2
                        && tokens[tokens.len() - 2] < tb
                        && tokens[tokens.len() - 1] >= tb;
                    let last_end = pieces
                        .iter()
                        .rev()
                        .find_map(|p| p.words.last().map(|w| w.2))
                        .or(pieces.last().map(|p| p.end));
                    if let Some(end) = last_end {
                        if !single_ending && end > offset {
                            next = (end * per_second).round() as usize;
                        }
                        last_speech = end;
                    }
                }
                for (piece, (start, end, _)) in pieces.into_iter().zip(&split.pieces) {
                    let text = dec.tok.decode(&piece.text_tokens);
                    // faster-whisper drops a piece of no duration or no words.
                    if start == end || text.trim().is_empty() {
                        continue;
                    }
                    segments.push(Segment {
                        start: piece.start,
                        end: piece.end,
                        text,
                        tokens: piece.text_tokens,
                        seek,
                        temperature: kept.temperature,
                        avg_logprob: stats.avg_logprob,
                        compression_ratio: stats.compression_ratio,
                        no_speech_prob: stats.no_speech,
                        words: piece
                            .words
                            .into_iter()
                            .map(|(word, start, end, probability)| Word {
                                word,
                                start,
                                end,
                                probability: probability as f32,
                            })
                            .collect(),
                    });
                }
            }
            // A window always moves on, even when its last word ends where it started.
            seek = next.max(seek + 1);
        }
        Ok(Transcript {
            segments,
            decode_passes,
            decoder_steps: dec.steps,
            decoder_ms: dec.step_time.as_secs_f64() * 1000.0,
        })
    }
}

/// What decoding a window needs for one request: its network and the model's
/// tables.
struct WindowDecoder<'w, 'n> {
    net: &'n mut dyn WindowNet,
    tok: &'w Tokenizer,
    suppress: &'w [u32],
    suppress_begin: &'w [u32],
    n_vocab: usize,
    /// Encoder positions of a window.
    n_audio_ctx: usize,
    /// Encoder positions per second of audio (50: one per timestamp step).
    positions_per_second: f64,
    /// The most tokens a window's text may have (OpenAI's `sample_len`).
    max_new: usize,
    /// Step graphs run so far, and their time with the token choices.
    steps: usize,
    step_time: std::time::Duration,
}

impl WindowDecoder<'_, '_> {
    /// The words of the current window's text `text` (its pieces' text tokens in
    /// order) with their times from the window's start: the alignment pass over
    /// `sot_sequence`, `<|notimestamps|>`, `text` and end-of-text, then the cost matrix
    /// of the alignment `heads` over the window's `frames` mel frames (half as many
    /// encoder positions), dynamic time warping and the words' probabilities.
    ///
    /// Upstream: `openai/whisper@v20250625` whisper/timing.py L163-L240
    /// (`find_alignment`), as CTranslate2's `Whisper.align` computes it for
    /// faster-whisper.
    fn align(
        &mut self,
        sot_sequence: &[u32],
        text: &[u32],
        frames: usize,
        heads: &[(usize, usize)],
    ) -> Result<Vec<WordTiming>> {
        let s = self.tok.specials();
        let mut input = sot_sequence.to_vec();
        input.push(s.no_timestamps);
        input.extend_from_slice(text);
        input.push(s.eot);
        let mut layers: Vec<usize> = heads.iter().map(|&(l, _)| l).collect();
        layers.sort_unstable();
        layers.dedup();
        let (logits, scores) = self.net.align(&input, &layers)?;
        let (n, total) = (input.len(), self.n_audio_ctx);
        let per_head: Vec<Vec<f32>> = heads
            .iter()
            .map(|&(l, h)| {
                let k = layers.iter().position(|&x| x == l).expect("listed above");
                scores[k][h * n * total..(h + 1) * n * total].to_vec()
            })
            .collect();
        let matrix = attention_matrix(&per_head, n, total, frames / 2);
        let offset = sot_sequence.len();
        let rows = text.len() + 1;
        let width = matrix.len() / n;
        let path = negative_dtw(
            &matrix[offset * width..(offset + rows) * width],
            rows,
            width,
        );
        let eot = s.eot as usize;
        let probs: Vec<f32> = text
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                let row = &logits[(offset + i) * self.n_vocab..(offset + i) * self.n_vocab + eot];
                softmax_at(row, t as usize)
            })
            .collect();
        Ok(word_timings(
            self.tok,
            text,
            &probs,
            &path,
            self.positions_per_second,
        ))
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
    /// and the summed log-probability. The prompt runs as one graph, every later token
    /// through the prepared step graph.
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
        let n_vocab = self.n_vocab;
        let fixed = [
            s.transcribe,
            s.translate,
            s.sot,
            s.sot_prev,
            s.sot_lm,
            s.no_speech,
            s.no_timestamps,
        ];
        // Token ids masked at every step (a short list: a pass over the whole vocabulary
        // per step costs as much as the rest of the host's work).
        let mut banned: Vec<usize> = self
            .suppress
            .iter()
            .chain(&fixed)
            .map(|&id| id as usize)
            .filter(|&id| id < n_vocab)
            .collect();
        if max_initial.is_none() {
            banned.extend(s.timestamp_begin as usize..n_vocab);
        }
        let logits = self.net.prompt(prompt)?;
        let sot_pos = prompt.iter().position(|&t| t == s.sot).unwrap_or(0);
        let no_speech = softmax_at(
            &logits[sot_pos * n_vocab..(sot_pos + 1) * n_vocab],
            s.no_speech as usize,
        );
        let mut row = Row::full(logits[(prompt.len() - 1) * n_vocab..].to_vec());
        let mut n_past = prompt.len();
        let mut tokens = Vec::new();
        let mut sum_logprob = 0f64;
        let max_new = self
            .max_new
            .min(self.net.positions().saturating_sub(prompt.len()));
        let started = std::time::Instant::now();
        let steps_before = self.steps;
        loop {
            let begin: &[u32] = if tokens.is_empty() {
                self.suppress_begin
            } else {
                &[]
            };
            row.mask(
                banned
                    .iter()
                    .copied()
                    .chain(begin.iter().map(|&t| t as usize)),
            );
            if let Some(max_initial) = max_initial {
                apply_timestamp_rules(
                    &mut row,
                    &tokens,
                    s.timestamp_begin as usize,
                    s.eot as usize,
                    max_initial,
                );
            }
            let (best, logprob) = match row.logits() {
                Some(logits) if temperature > 0.0 => {
                    pick_token(logits, temperature, sampler.uniform())
                }
                _ => row.argmax_logprob(),
            };
            sum_logprob += logprob as f64;
            if best as u32 == s.eot || tokens.len() >= max_new {
                break;
            }
            tokens.push(best as u32);
            let read = if temperature > 0.0 {
                Read::Logits
            } else {
                Read::Summary
            };
            // Greedy decoding reads the step's summary, sampling every logit.
            row = self.net.step(StepInput {
                token: best as u32,
                n_past,
                read,
            })?;
            n_past += 1;
            self.steps += 1;
        }
        if self.steps > steps_before {
            self.step_time += started.elapsed();
        }
        let avg = sum_logprob / (tokens.len() + 1) as f64;
        Ok((tokens, no_speech, avg as f32, sum_logprob))
    }
}

/// True when every `frame`-sample stretch of `samples` (the last one may be shorter)
/// has an RMS level below `floor` (linear, 1.0 = full scale): a window of digital
/// silence or of noise far below any speech.
pub fn below_floor(samples: &[f32], frame: usize, floor: f32) -> bool {
    let limit = f64::from(floor) * f64::from(floor);
    samples.chunks(frame.max(1)).all(|c| {
        let energy: f64 = c.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
        energy / (c.len() as f64) < limit
    })
}

pub(super) fn softmax_at(logits: &[f32], i: usize) -> f32 {
    let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    (((logits[i] - max) as f64).exp() / sum) as f32
}

/// The largest logit's index and its log-probability, `-ln(sum(exp(l - max)))`, from
/// the vectorised row summary (f32 exponentials within 3e-7, summed in f64).
pub(super) fn argmax_logprob(logits: &[f32]) -> (usize, f32) {
    let s = crate::cpu_kernels::logits::summarize(logits);
    (s.argmax, -(s.sum_exp.ln() as f32))
}

#[cfg(test)]
mod tests {
    use super::*;

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
            silence_floor_db: Some(-60.0),
            word_timestamps: false,
        }
    }

    #[test]
    fn only_a_window_below_the_floor_in_every_frame_is_silent() {
        let floor = 10f32.powf(-60.0 / 20.0);
        assert!(below_floor(&[0.0; 16000], 1600, floor));
        // -70 dBFS noise-like samples: silent; one frame at -40 dBFS: not.
        let quiet: Vec<f32> = (0..16000)
            .map(|i| if i % 2 == 0 { 3e-4 } else { -3e-4 })
            .collect();
        assert!(below_floor(&quiet, 1600, floor));
        let mut speech = quiet.clone();
        speech[8000..9600]
            .iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = if i % 2 == 0 { 0.01 } else { -0.01 });
        assert!(!below_floor(&speech, 1600, floor));
        assert!(below_floor(&[], 1600, floor), "nothing is silence");
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
}
