//! `POST /v1/audio/speech`: OpenAI's speech API over a `tts` model (any family the
//! engine registers for the task). A JSON body (`model`, `input`, `voice`,
//! `response_format`, `speed`, `instructions`, `stream_format`) is checked field by
//! field (400 naming the field), then spoken sentence by sentence
//! (`audiocpp_text::sentences`). The voice is a model's preset voice, a stored voice's
//! id (`voices`), or cloned for this request alone from `ref_audio` and `ref_text`
//! (vLLM-Omni's names for them). By default the whole answer is made first,
//! so a WAV carries its exact length and the timing headers hold the whole run;
//! `stream_format: "audio"` sends each sentence's audio as soon as it exists, as a
//! chunked body (a WAV then has OpenAI's unknown-length header). A FLAC answer
//! (`flac`) is always made whole: its header states the whole audio's length and MD5.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use audiocpp_engine::audio::AudioLimits;
use audiocpp_engine::output::{pcm16_le, wav_header};
use audiocpp_engine::task::Task;
use audiocpp_engine::tts::{self, SpeechInput, SpeechRequest, SpeechStats};
use audiocpp_engine::EngineError;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde::Deserialize;
use tokio::sync::mpsc::error::SendTimeoutError;

use crate::body::{drain_in_background, read_until, unless_declared_over};
use crate::error::{engine_error, internal, ApiError};
use crate::pool::{acquire, run_guarded, slot_by_id, with_model, with_timing, Loaded, Slot};
use crate::voice_store::is_id;
use crate::voices::{clone_voice, stored_voice, CloneFields, StoredVoice};
use crate::AppState;

/// OpenAI's limit on `input`, in characters.
pub const MAX_INPUT_CHARS: usize = 4096;

/// The rate of `pcm` responses: OpenAI's (24 kHz, 16-bit little-endian, mono).
pub const PCM_RATE: u32 = 24_000;

/// The largest speech request body without `ref_audio`: `input` at its limit with every
/// character escaped as `\uXXXX`, with room for the other fields. One with `ref_audio`
/// may take `max_body_bytes`.
const MAX_SPEECH_BODY_BYTES: usize = 64 << 10;

/// The request fields of a one-off clone.
const INLINE_FIELDS: CloneFields = CloneFields {
    file: "ref_audio",
    text: "ref_text",
    x_vector_only: "x_vector_only_mode",
};

/// Audio chunks a streamed answer holds ready for a slow client before synthesis waits.
const STREAM_QUEUE: usize = 2;

/// The formats this server answers in, as named in errors.
const FORMATS: &str = "wav, pcm, flac";

/// A speech request as OpenAI's API defines it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpeechBody {
    model: Option<String>,
    input: Option<String>,
    voice: Option<serde_json::Value>,
    response_format: Option<String>,
    speed: Option<f64>,
    /// Honoured by families that follow instructions (Qwen3-TTS 1.7B), ignored by the
    /// others, as OpenAI's voices without instructions ignore it.
    instructions: Option<String>,
    stream_format: Option<String>,
    /// The reference project's extension, for the options OpenAI's body lacks.
    options: Option<BodyOptions>,
    /// A reference clip (an audio file in base64, or a `data:` URI of one) to clone the
    /// voice from for this request alone, as vLLM-Omni's speech API takes it.
    ref_audio: Option<String>,
    /// What `ref_audio` says.
    ref_text: Option<String>,
    /// Clone from the speaker embedding alone (no `ref_text` needed), as vLLM-Omni.
    x_vector_only_mode: Option<bool>,
}

/// A one-off clone a request asks for.
#[derive(Clone)]
struct InlineClone {
    clip: Vec<u8>,
    text: Option<String>,
    x_vector_only: bool,
}

/// `options` of a speech body: audio.cpp's `speaker`, and the engine's speech options.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BodyOptions {
    /// The voice (audio.cpp's name for a preset speaker).
    speaker: Option<String>,
    language: Option<String>,
    instructions: Option<String>,
    temperature: Option<f32>,
    seed: Option<u64>,
    max_frames: Option<usize>,
}

/// The audio encodings served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// 16-bit PCM WAV at the model's rate.
    Wav,
    /// Headerless 16-bit little-endian PCM at [`PCM_RATE`].
    Pcm,
    /// The WAV answer's samples in FLAC (lossless), made whole ([`crate::flac`]).
    Flac,
}

impl Format {
    fn content_type(self) -> &'static str {
        match self {
            Format::Wav => "audio/wav",
            Format::Pcm => "audio/pcm",
            Format::Flac => "audio/flac",
        }
    }

    /// One piece of audio from the model, encoded (resampled to [`PCM_RATE`] for pcm).
    fn encode(self, samples: &[f32], rate: u32) -> Result<Vec<u8>, EngineError> {
        match self {
            Format::Pcm if rate != PCM_RATE => {
                let audio = audiocpp_engine::audio::Audio {
                    samples: samples.to_vec(),
                    sample_rate: rate,
                };
                let a = audiocpp_engine::audio::resample(audio, PCM_RATE)
                    .map_err(EngineError::Usage)?;
                Ok(pcm16_le(&a.samples))
            }
            _ => Ok(pcm16_le(samples)),
        }
    }

    /// The rate the encoded audio has.
    fn rate(self, model_rate: u32) -> u32 {
        match self {
            Format::Wav | Format::Flac => model_rate,
            Format::Pcm => PCM_RATE,
        }
    }
}

/// A checked request, ready to run.
struct Checked {
    model: String,
    input: String,
    voice: Option<String>,
    speed: f32,
    options: tts::SpeechOptions,
    format: Format,
    stream: bool,
    /// A clone to make before speaking (`ref_audio`).
    inline: Option<InlineClone>,
}

/// Checks every field a model is not needed for.
fn check(body: SpeechBody) -> Result<Checked, ApiError> {
    let format = match body.response_format.as_deref() {
        None | Some("wav") => Format::Wav,
        Some("pcm") => Format::Pcm,
        Some("flac") => Format::Flac,
        Some(f @ ("mp3" | "opus" | "aac")) => {
            return Err(ApiError::bad_param(
                "response_format",
                format!(
                    "response_format '{f}' is not available on this server; use one of {FORMATS}"
                ),
            ))
        }
        Some(f) => {
            return Err(ApiError::bad_param(
                "response_format",
                format!("response_format '{f}' is not a format; use one of {FORMATS}"),
            ))
        }
    };
    let speed = body.speed.unwrap_or(1.0) as f32;
    tts::check_speed(speed).map_err(engine_error)?;
    let input = body
        .input
        .ok_or_else(|| ApiError::bad_param("input", "the 'input' field is required"))?;
    if input.trim().is_empty() {
        return Err(ApiError::bad_param(
            "input",
            "input is empty: give the text to speak",
        ));
    }
    let chars = input.chars().count();
    if chars > MAX_INPUT_CHARS {
        return Err(ApiError::bad_param(
            "input",
            format!("input is {chars} characters, over the limit of {MAX_INPUT_CHARS}; split it into several requests"),
        ));
    }
    let voice = match body.voice {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(v)) => Some(v),
        Some(serde_json::Value::Object(o)) => match o.get("id") {
            Some(serde_json::Value::String(v)) if o.len() == 1 => Some(v.clone()),
            _ => {
                return Err(ApiError::bad_param(
                    "voice",
                    "voice must be a voice name, or {\"id\": NAME}",
                ))
            }
        },
        Some(_) => return Err(ApiError::bad_param("voice", "voice must be a voice name")),
    };
    let o = body.options.unwrap_or_default();
    let voice = match (voice, o.speaker) {
        (Some(v), Some(s)) if v.to_lowercase() != s.to_lowercase() => {
            return Err(ApiError::bad_param(
                "voice",
                format!("voice '{v}' and options.speaker '{s}' name two voices; give one"),
            ))
        }
        (v, s) => v.or(s),
    };
    if body.instructions.is_some() && o.instructions.is_some() {
        return Err(ApiError::bad_param(
            "instructions",
            "instructions and options.instructions are both given; give one",
        ));
    }
    let options = tts::SpeechOptions {
        language: o.language,
        instructions: body
            .instructions
            .or(o.instructions)
            .filter(|i| !i.trim().is_empty()),
        temperature: o.temperature,
        seed: o.seed,
        max_frames: o.max_frames,
        cloned_voice: None,
    };
    let stream = match body.stream_format.as_deref() {
        None => false,
        Some("audio") if format == Format::Flac => {
            return Err(ApiError::bad_param(
                "stream_format",
                "stream_format 'audio' streams wav or pcm; a flac answer is sent whole (its header states the whole length), so leave stream_format out",
            ))
        }
        Some("audio") => true,
        Some("sse") => {
            return Err(ApiError::bad_param(
                "stream_format",
                "stream_format 'sse' is not available on this server; use 'audio' (raw audio, streamed sentence by sentence) or leave it out (the whole file at once)",
            ))
        }
        Some(f) => {
            return Err(ApiError::bad_param(
                "stream_format",
                format!("stream_format '{f}' is not one of audio, sse"),
            ))
        }
    };
    let inline = match body.ref_audio {
        Some(audio) => {
            if let Some(v) = &voice {
                return Err(ApiError::bad_param(
                    "ref_audio",
                    format!("voice '{v}' and ref_audio name two voices; give one"),
                ));
            }
            let b64 = match audio.split_once(";base64,") {
                Some((head, data)) if head.starts_with("data:") => data,
                _ => audio.as_str(),
            };
            let clip = base64::engine::general_purpose::STANDARD
                .decode(b64.trim().as_bytes())
                .map_err(|e| {
                    ApiError::bad_param(
                        "ref_audio",
                        format!("ref_audio is not base64 (of an audio file, or a data: URI of one): {e}"),
                    )
                })?;
            Some(InlineClone {
                clip,
                text: body.ref_text,
                x_vector_only: body.x_vector_only_mode.unwrap_or(false),
            })
        }
        None if body.ref_text.is_some() || body.x_vector_only_mode.is_some() => {
            return Err(ApiError::bad_param(
                "ref_audio",
                "ref_text and x_vector_only_mode go with ref_audio (the clip to clone the voice from); give it",
            ))
        }
        None => None,
    };
    let model = body
        .model
        .ok_or_else(|| ApiError::bad_param("model", "the 'model' field is required"))?;
    Ok(Checked {
        model,
        input,
        voice,
        speed,
        options,
        format,
        stream,
        inline,
    })
}

/// Reads the JSON body within `body_timeout_ms` and [`MAX_SPEECH_BODY_BYTES`], or
/// `max_body_bytes` when it carries `ref_audio`: a body past the first limit is read on
/// only when those first bytes hold the key `"ref_audio"` (written plainly, as every
/// JSON library writes it), so an ordinary request never holds more.
async fn read_body(
    state: &AppState,
    headers: &HeaderMap,
    req: Request,
) -> Result<SpeechBody, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !content_type.starts_with("application/json") {
        return Err(ApiError::bad_request(
            "send the speech request as application/json (model, input, voice, ...)",
        ));
    }
    let small = MAX_SPEECH_BODY_BYTES.min(state.cfg.max_body_bytes);
    let limit = state.cfg.max_body_bytes;
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("a speech request body is at most {small} bytes, or {limit} (max_body_bytes) with ref_audio"),
        )
    };
    // What the client still sends is drained as far as any endpoint of this server reads.
    let drain = state.cfg.max_body_bytes.saturating_mul(4);
    let req = unless_declared_over(headers, req, limit, drain).ok_or_else(too_large)?;
    let mut body = req.into_body();
    let mut bytes = Vec::new();
    let read = async {
        // The first `small` bytes; more only when they hold the ref_audio key.
        let ended = read_until(&mut body, &mut bytes, small).await?;
        if ended || !contains(&bytes, b"\"ref_audio\"") {
            return Ok(ended);
        }
        read_until(&mut body, &mut bytes, limit).await
    };
    let timeout = Duration::from_millis(state.cfg.body_timeout_ms);
    let ended = tokio::time::timeout(timeout, read)
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                format!(
                    "the request body did not arrive within {} ms (body_timeout_ms)",
                    state.cfg.body_timeout_ms
                ),
            )
        })?
        .map_err(|_: axum::Error| too_large())?;
    if !ended {
        drain_in_background(body, drain);
        return Err(too_large());
    }
    let body: SpeechBody = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))?;
    if bytes.len() > small && body.ref_audio.is_none() {
        return Err(too_large());
    }
    Ok(body)
}

/// True when `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The engine request for a checked one, checked against the model (the voice, the
/// options), with its one-off clone made. OpenAI's `instructions` goes only to a family
/// that follows instructions.
fn engine_request(
    model: &mut tts::TtsModel,
    c: &Checked,
    limits: &AudioLimits,
) -> Result<SpeechRequest, ApiError> {
    let mut options = c.options.clone();
    if let Some(i) = &c.inline {
        let voice = clone_voice(
            model,
            &i.clip,
            i.text.as_deref(),
            i.x_vector_only,
            limits,
            &INLINE_FIELDS,
        )?;
        options.cloned_voice = Some(Arc::new(voice));
    }
    if !model.takes_options().contains(&"instructions") {
        options.instructions = None;
    }
    let req = SpeechRequest {
        input: SpeechInput::Text(c.input.clone()),
        voice: c.voice.clone(),
        speed: c.speed,
        options,
    };
    model.check(&req).map_err(engine_error)?;
    Ok(req)
}

/// `POST /v1/audio/speech`.
pub async fn speech(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    req: Request,
) -> Result<Response, ApiError> {
    let body = read_body(&state, &headers, req).await?;
    let mut checked = check(body)?;
    let slot = slot_by_id(&state, Some(&checked.model), Task::Tts)?;
    // Stored voices' ids are all of the store's form; no preset voice is.
    if let Some(v) = checked.voice.as_deref().filter(|v| is_id(v)) {
        match stored_voice(&state, v, &checked.model).await? {
            StoredVoice::Cloned(voice) => checked.options.cloned_voice = Some(voice),
            // Spoken exactly as a request naming the blend itself.
            StoredVoice::Blend(blend) => checked.voice = Some(blend),
        }
    }
    let limits = state.cfg.audio_limits();
    if checked.stream {
        return stream(&state, slot, checked, limits).await;
    }
    let max_s = state.cfg.max_speech_s;
    let format = checked.format;
    let id = slot.entry.id.clone();
    let ((stats, data), wall) = with_model(&state, slot, move |loaded| {
        let Loaded::Tts(model) = loaded else {
            return Err(ApiError::bad_request("this model does not do tts"));
        };
        let req = engine_request(model, &checked, &limits)?;
        let rate = model.sample_rate();
        let mut data = Vec::new();
        let stats = model
            .run_streamed(&req, max_s, &mut |chunk| {
                data.extend(format.encode(chunk, rate)?);
                Ok(())
            })
            .map_err(engine_error)?;
        // Compressed here, on the blocking thread, not on an async worker.
        if format == Format::Flac {
            data = crate::flac::encode(&data, stats.sample_rate).map_err(|e| {
                eprintln!("error: speech of model '{id}': {e}");
                internal()
            })?;
        }
        Ok((stats, data))
    })
    .await?;
    let bytes = match format {
        Format::Wav => {
            let mut b = wav_header(stats.sample_rate, Some(data.len())).to_vec();
            b.extend(data);
            b
        }
        Format::Pcm | Format::Flac => data,
    };
    let resp = ([(header::CONTENT_TYPE, format.content_type())], bytes).into_response();
    let mut resp = with_timing(resp, wall, stats.audio_seconds);
    speech_headers(&mut resp, &stats, format);
    Ok(resp)
}

/// Headers every speech answer carries: the encoded rate, the pieces spoken, and the
/// time until the first piece's audio was ready (for a streamed answer, before the
/// rest was made).
fn speech_headers(resp: &mut Response, stats: &SpeechStats, format: Format) {
    let h = resp.headers_mut();
    for (name, value) in [
        (
            "x-audiocpp-sample-rate",
            format.rate(stats.sample_rate).to_string(),
        ),
        ("x-audiocpp-sentences", stats.sentences.to_string()),
        (
            "x-audiocpp-first-audio-ms",
            format!("{:.2}", stats.first_audio_ms),
        ),
    ] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
}

/// What a streamed answer's synthesis thread reports before its first audio: the
/// encoded rate and the time to the first audio, or why it failed (then answered as an
/// ordinary error).
type FirstAudio = Result<(u32, f64), ApiError>;

/// The streamed answer: synthesis runs on a blocking thread holding the model, and
/// each sentence's audio goes out as it is made. Failures before the first audio are
/// ordinary error answers; later ones cut the stream (logged), so a client never takes
/// a truncated answer for a whole one. A client that stops reading for
/// `body_timeout_ms` is cut off, freeing the model.
async fn stream(
    state: &Arc<AppState>,
    slot: &Slot,
    checked: Checked,
    limits: AudioLimits,
) -> Result<Response, ApiError> {
    let mut guard = acquire(state, slot).await?;
    let (first_tx, first_rx) = tokio::sync::oneshot::channel::<FirstAudio>();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(STREAM_QUEUE);
    let id = slot.entry.id.clone();
    let max_s = state.cfg.max_speech_s;
    let send_timeout = Duration::from_millis(state.cfg.body_timeout_ms);
    let runtime = tokio::runtime::Handle::current();
    let format = checked.format;
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let mut first_tx = Some(first_tx);
        let result = run_guarded(&mut guard, &id, |loaded| {
            let Loaded::Tts(model) = loaded else {
                return Err(ApiError::bad_request("this model does not do tts"));
            };
            let req = engine_request(model, &checked, &limits)?;
            let rate = model.sample_rate();
            let mut header = (format == Format::Wav).then(|| wav_header(rate, None));
            model
                .run_streamed(&req, max_s, &mut |chunk| {
                    let mut bytes = header.take().map(|h| h.to_vec()).unwrap_or_default();
                    bytes.extend(format.encode(chunk, rate)?);
                    if let Some(f) = first_tx.take() {
                        let ms = started.elapsed().as_secs_f64() * 1000.0;
                        let _ = f.send(Ok((format.rate(rate), ms)));
                    }
                    runtime
                        .block_on(tx.send_timeout(Ok(Bytes::from(bytes)), send_timeout))
                        .map_err(|e| {
                            EngineError::Usage(match e {
                                SendTimeoutError::Timeout(_) => format!(
                                    "the client read nothing for {} ms (body_timeout_ms)",
                                    send_timeout.as_millis()
                                ),
                                // The body was dropped: the client went away, or the
                                // server closed the connection at shutdown.
                                SendTimeoutError::Closed(_) => {
                                    "the connection closed before the stream ended".into()
                                }
                            })
                        })
                })
                .map_err(engine_error)
        });
        if let Err(e) = result {
            match first_tx.take() {
                Some(f) => {
                    let _ = f.send(Err(e));
                }
                None => {
                    eprintln!("error: speech stream of model '{id}' cut: {}", e.message);
                    let _ = tx.try_send(Err(std::io::Error::other(e.message)));
                }
            }
        }
    });
    let (rate, first_ms) = first_rx.await.map_err(|_| internal())??;
    let mut resp = Response::new(Body::new(ChunkBody::new(rx)));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    for (name, value) in [
        ("x-audiocpp-sample-rate", rate.to_string()),
        ("x-audiocpp-first-audio-ms", format!("{first_ms:.2}")),
    ] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
    Ok(resp)
}

/// A response body fed by the synthesis thread, chunk by chunk; an error item ends
/// the body with an error, which closes the connection before the chunked body's end.
struct ChunkBody {
    rx: tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>,
    /// An error received and held back for one poll: hyper flushes what it has written
    /// (the response head, the chunks before) when the body is pending, and drops it
    /// unwritten when the body fails in the same turn.
    cut: Option<std::io::Error>,
}

impl ChunkBody {
    fn new(rx: tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>) -> Self {
        ChunkBody { rx, cut: None }
    }
}

impl hyper::body::Body for ChunkBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        if let Some(e) = self.cut.take() {
            return Poll::Ready(Some(Err(e)));
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(Err(e))) => {
                self.cut = Some(e);
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            other => other.map(|item| item.map(|r| r.map(hyper::body::Frame::data))),
        }
    }
}
