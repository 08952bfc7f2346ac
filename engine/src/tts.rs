//! The text-to-speech task: its contract with a family ([`Synthesizer`]), the request and
//! what a run produces, the limits every front end shares, and the family-neutral run:
//! the request checked once (input, voice, speed; errors name the engine's parameters),
//! its markup taken out ([`audiocpp_text::speakable`]: SSML tags, terminal escapes),
//! the text cut into sentences ([`audiocpp_text::sentences`]) and spoken one after
//! another under a maximum duration, so a server can stream each sentence as it is made.

use std::time::Instant;

use serde::Serialize;

use crate::error::{EngineError, Result};
use crate::loaded::Loaded;

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
    /// What else the request asks; a family refuses an option it does not take.
    pub options: SpeechOptions,
}

/// What a request may ask beyond its text, voice and speed. Each is a parameter of its
/// name; a family lists those it takes ([`Synthesizer::takes_options`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpeechOptions {
    /// Parameter `language`: the text's language, or `auto`, for multilingual families.
    pub language: Option<String>,
    /// Parameter `instructions`: how to speak (style, emotion, a described voice).
    pub instructions: Option<String>,
    /// Parameter `temperature`: of a family that samples; 0 decodes greedily.
    pub temperature: Option<f32>,
    /// Parameter `seed`: of the sampler, so a sampled result is reproducible.
    pub seed: Option<u64>,
    /// Parameter `max_frames`: the most decoder frames one sentence may take.
    pub max_frames: Option<usize>,
    /// Parameter `cloned_voice`: a voice file a family made from a reference recording
    /// ([`Synthesizer::clone_voice`]), to speak in instead of a named voice.
    pub cloned_voice: Option<std::sync::Arc<Vec<u8>>>,
}

impl SpeechOptions {
    /// The parameter names of the options that are set.
    pub fn set(&self) -> Vec<&'static str> {
        [
            ("language", self.language.is_some()),
            ("instructions", self.instructions.is_some()),
            ("temperature", self.temperature.is_some()),
            ("seed", self.seed.is_some()),
            ("max_frames", self.max_frames.is_some()),
            ("cloned_voice", self.cloned_voice.is_some()),
        ]
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(name, _)| name)
        .collect()
    }
}

/// A reference recording to clone a voice from ([`TtsModel::clone_voice`]).
#[derive(Debug, Clone, PartialEq)]
pub struct VoiceSample<'a> {
    /// Mono samples at the model's rate.
    pub samples: &'a [f32],
    /// What the recording says (parameter `ref_text`); in-context cloning needs it.
    pub transcript: Option<&'a str>,
    /// Clone from the speaker embedding alone (parameter `x_vector_only`): no transcript
    /// needed, less close to the recording.
    pub x_vector_only: bool,
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
/// and registers its loader ([`crate::families::Family::tts`]).
pub trait Synthesizer: Send {
    /// The rate of the samples it makes.
    fn sample_rate(&self) -> u32;
    /// Its voices; the first is the default.
    fn voices(&self) -> Vec<String>;
    /// True when it takes [`SpeechInput::Phonemes`] as well as text.
    fn takes_phonemes(&self) -> bool;
    /// The device it runs on.
    fn device(&self) -> String;
    /// The languages parameter `language` takes (none for a family without one).
    fn languages(&self) -> Vec<String> {
        Vec::new()
    }
    /// The voice a request that names none speaks with: by default the first of
    /// [`Synthesizer::voices`].
    fn default_voice(&self, _options: &SpeechOptions) -> Result<String> {
        self.voices()
            .first()
            .cloned()
            .ok_or_else(|| EngineError::Usage("parameter 'voice': this model has no voices".into()))
    }
    /// Makes a voice from a reference recording: a voice file that
    /// [`SpeechOptions::cloned_voice`] takes back. By default the family clones none.
    fn clone_voice(&mut self, _sample: &VoiceSample<'_>) -> Result<Vec<u8>> {
        Err(EngineError::Usage(
            "this model does not clone voices; a Qwen3-TTS Base model does".into(),
        ))
    }
    /// A second model for another thread that shares the weights (not copied) and has
    /// schedulers and backends of its own: the server runs requests side by side on
    /// forks. By default the family makes none.
    fn fork(&self) -> Result<Box<dyn Synthesizer>> {
        Err(EngineError::Usage(
            "this model runs one request at a time (its family does not fork; Kokoro and Qwen3-TTS do)".into(),
        ))
    }
    /// Where its weights' device memory starts, one address per buffer (a fork gives
    /// the same ones); empty for a family that does not say.
    fn weight_addresses(&self) -> Vec<usize> {
        Vec::new()
    }
    /// Checks that `voice` is one it speaks with: by default one of
    /// [`Synthesizer::voices`]; a family may take more (Kokoro's blends of voices).
    fn check_voice(&self, voice: &str) -> Result<()> {
        let voices = self.voices();
        if voices.iter().any(|v| v == voice) {
            return Ok(());
        }
        Err(EngineError::Usage(format!(
            "parameter 'voice' '{voice}' is not a voice of this model (voices: {})",
            voices.join(", ")
        )))
    }
    /// The [`SpeechOptions`] it reads, by parameter name; a request setting another is
    /// refused by [`TtsModel::check`].
    fn takes_options(&self) -> &'static [&'static str] {
        &[]
    }
    /// Checks the values of the options it takes (a language it knows, a positive
    /// frame limit), before any synthesis.
    fn check_options(&self, _options: &SpeechOptions) -> Result<()> {
        Ok(())
    }
    /// Checks what a request says (its markup already taken out) against what the
    /// family reads with `voice` (text in a script its front end does not read), before
    /// any synthesis, so that a refusal names the reason and no sentence is spoken first.
    fn check_input(&self, _input: &SpeechInput, _voice: &str) -> Result<()> {
        Ok(())
    }
    /// Speaks `input` (non-empty) with `voice` (one of [`Synthesizer::voices`]) at
    /// `speed` (checked by [`TtsModel::run`]); no samples for a piece with nothing the
    /// family reads (a run with no audio at all is refused by [`TtsModel::run_streamed`],
    /// and [`Synthesizer::check_input`] says why up front); `None` when its audio would pass
    /// `max_samples`, which it says as soon as it knows the length, before making the
    /// audio (a request over its limit costs no synthesis past that point).
    fn synthesize(
        &mut self,
        input: &SpeechInput,
        voice: &str,
        speed: f32,
        options: &SpeechOptions,
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

/// The largest voice file a family takes back ([`SpeechOptions::cloned_voice`]): a
/// 20 s reference of Qwen3-TTS at the released sizes is about 60 kB.
pub const MAX_VOICE_FILE_BYTES: usize = 4 << 20;

/// Reads a voice file ([`TtsModel::clone_voice`]'s output) of at most
/// [`MAX_VOICE_FILE_BYTES`]; the family checks what is in it.
pub fn read_voice_file(path: &std::path::Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let io = |source| EngineError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(MAX_VOICE_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() > MAX_VOICE_FILE_BYTES {
        return Err(EngineError::Usage(format!(
            "voice file '{}' is larger than {MAX_VOICE_FILE_BYTES} bytes: it is not a voice file (make one with --ref-audio and --voice-out)",
            path.display()
        )));
    }
    Ok(bytes)
}

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
    /// How many pieces the input was split into ([`audiocpp_text::sentences`]) and
    /// synthesized as.
    pub sentences: usize,
    /// Length of the audio in seconds.
    pub audio_seconds: f64,
    /// Wall time until the first sentence's audio was ready, in milliseconds.
    pub first_audio_ms: f64,
    /// Inference wall time in milliseconds (model load excluded).
    pub inference_ms: f64,
}

/// The input as it is spoken: its markup taken out ([`audiocpp_text::speakable`]).
fn speakable_input(input: &SpeechInput) -> SpeechInput {
    match input {
        SpeechInput::Text(t) => SpeechInput::Text(audiocpp_text::speakable(t)),
        SpeechInput::Phonemes(p) => SpeechInput::Phonemes(audiocpp_text::speakable(p)),
    }
}

/// Checks parameter `speed` (a front end may call it before it loads a model).
pub fn check_speed(speed: f32) -> Result<()> {
    if speed.is_finite() && SPEED_RANGE.contains(&speed) {
        return Ok(());
    }
    Err(EngineError::Usage(format!(
        "parameter 'speed' {speed} is out of range: give a rate from {} to {}",
        SPEED_RANGE.start(),
        SPEED_RANGE.end()
    )))
}

/// Checks parameter `max_speech_s` (a front end may call it before it loads a model).
pub fn check_max_speech_s(max_seconds: f64) -> Result<()> {
    if max_seconds > 0.0 && max_seconds <= MAX_SPEECH_LIMIT_S {
        return Ok(());
    }
    Err(EngineError::Usage(format!(
        "parameter 'max_speech_s' {max_seconds} must be a positive number of seconds, at most {MAX_SPEECH_LIMIT_S}"
    )))
}

/// A loaded text-to-speech model, reusable across requests (loaded by
/// `TtsModel::load`, in [`crate::tasks`]).
pub type TtsModel = Loaded<dyn Synthesizer>;

impl TtsModel {
    /// A second model for another thread ([`Synthesizer::fork`]): the weights shared,
    /// not copied; it speaks as `self` does.
    pub fn fork(&self) -> Result<TtsModel> {
        Ok(Loaded::new(
            self.model.fork()?,
            self.family,
            self.spec_source.clone(),
        ))
    }

    /// Where its weights' device memory starts ([`Synthesizer::weight_addresses`]).
    pub fn weight_addresses(&self) -> Vec<usize> {
        self.model.weight_addresses()
    }

    /// The model's voices; the first is the default.
    pub fn voices(&self) -> Vec<String> {
        self.model.voices()
    }

    /// The rate of the samples it makes.
    pub fn sample_rate(&self) -> u32 {
        self.model.sample_rate()
    }

    /// True when it takes [`SpeechInput::Phonemes`] as well as text.
    pub fn takes_phonemes(&self) -> bool {
        self.model.takes_phonemes()
    }

    /// The languages parameter `language` takes (none for a family without one).
    pub fn languages(&self) -> Vec<String> {
        self.model.languages()
    }

    /// The [`SpeechOptions`] the family reads, by parameter name.
    pub fn takes_options(&self) -> &'static [&'static str] {
        self.model.takes_options()
    }

    /// Checks that `voice` is one it speaks with: a preset voice, or what else its family
    /// takes (Kokoro's blends); for a front end storing a voice before any request.
    pub fn check_voice(&self, voice: &str) -> Result<()> {
        self.model.check_voice(voice)
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
        if audiocpp_text::speakable(text).trim().is_empty() {
            return Err(EngineError::Usage(
                "parameter 'input' has nothing to say once its markup (SSML tags, terminal escape sequences, control characters) is taken out: give the words to speak".into(),
            ));
        }
        if matches!(req.input, SpeechInput::Phonemes(_)) && !self.model.takes_phonemes() {
            return Err(EngineError::Usage(format!(
                "parameter 'input': family '{}' takes text, not phonemes",
                self.family
            )));
        }
        check_speed(req.speed)?;
        let takes = self.model.takes_options();
        if let Some(name) = req.options.set().into_iter().find(|n| !takes.contains(n)) {
            return Err(EngineError::Usage(format!(
                "parameter '{name}' is not taken by family '{}' (it takes: {})",
                self.family,
                if takes.is_empty() {
                    "none of language, instructions, temperature, seed, max_frames, cloned_voice"
                        .to_string()
                } else {
                    takes.join(", ")
                }
            )));
        }
        self.model.check_options(&req.options)?;
        let voice = match &req.voice {
            None => self.model.default_voice(&req.options),
            // A cloned voice's name is only a label (a stored voice's id).
            Some(v) if req.options.cloned_voice.is_some() => Ok(v.clone()),
            Some(v) => self.model.check_voice(v).map(|()| v.clone()),
        }?;
        self.model
            .check_input(&speakable_input(&req.input), &voice)?;
        Ok(voice)
    }

    /// Makes a voice file from the recording `audio` (any rate; resampled to the
    /// model's), for [`SpeechOptions::cloned_voice`].
    pub fn clone_voice(
        &mut self,
        audio: crate::audio::Audio,
        transcript: Option<&str>,
        x_vector_only: bool,
    ) -> Result<Vec<u8>> {
        let audio =
            crate::audio::resample(audio, self.model.sample_rate()).map_err(EngineError::Usage)?;
        self.model.clone_voice(&VoiceSample {
            samples: &audio.samples,
            transcript,
            x_vector_only,
        })
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

    /// Checks the request, takes out its markup ([`audiocpp_text::speakable`]: SSML or
    /// HTML tags and terminal escapes are removed, not read aloud, and not refused: see
    /// there), then speaks it piece by piece ([`audiocpp_text::sentences`]), handing
    /// each piece's samples to `on_audio` as soon as they exist (a streaming server
    /// sends them on). Once the audio passes `max_seconds` it stops with an error; an
    /// error from `on_audio` (a client gone) stops it too.
    pub fn run_streamed(
        &mut self,
        req: &SpeechRequest,
        max_seconds: f64,
        on_audio: &mut dyn FnMut(&[f32]) -> Result<()>,
    ) -> Result<SpeechStats> {
        let voice = self.check(req)?;
        check_max_speech_s(max_seconds)?;
        let (SpeechInput::Text(text) | SpeechInput::Phonemes(text)) = &req.input;
        let text = audiocpp_text::speakable(text);
        let pieces = audiocpp_text::sentences(&text);
        let sample_rate = self.model.sample_rate();
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
                .model
                .synthesize(&input, &voice, req.speed, &req.options, budget)?
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
        if total == 0 {
            return Err(EngineError::Usage(format!(
                "parameter 'input' has nothing family '{}' says: no word of it could be read",
                self.family
            )));
        }
        Ok(SpeechStats {
            family: self.family.to_string(),
            device: self.model.device(),
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
