//! What every speech-recognition family takes and returns: decoding options, timed
//! segments and the transcript, shaped as OpenAI's transcription API reports them
//! (`verbose_json` segments), so that [`crate::tasks::AsrModel`], the CLI and the server
//! name no family. A family fills them in its own terms (Whisper's windows and tokens).

use serde::Serialize;

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
}

/// What a [`crate::tasks::Recognizer`] produced for one stretch of audio.
#[derive(Debug, Clone)]
pub struct Transcript {
    /// The segments that held speech.
    pub segments: Vec<Segment>,
    /// Decoder passes over all windows, each sampled draw counted: one per window when
    /// greedy decoding passes its checks, more when temperature fallback had to sample.
    pub decode_passes: usize,
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
}
