//! Reading a request body within the server's limits: a body declared over the size limit
//! is refused (413) before a byte is read and drained in the background, a body that
//! trickles is cut at `body_timeout_ms` (408), and an audio request's multipart or JSON
//! body becomes one [`AudioRequest`], its audio decoded within the audio limits.

use std::time::Duration;

use axum::extract::{FromRequest, Multipart, Request};
use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use serde::Deserialize;

use crate::error::{field_of, ApiError};
use crate::AppState;

/// A request's audio and options, from multipart or JSON.
#[derive(Default)]
pub struct AudioRequest {
    pub model: Option<String>,
    pub audio: Option<Vec<u8>>,
    pub response_format: Option<String>,
    pub language: Option<String>,
    pub params: VadParamsPatch,
    pub probabilities: bool,
    /// `stream=true`: answer as server-sent events.
    pub stream: bool,
    /// `timestamp_granularities[]` values.
    pub granularities: Vec<String>,
}

/// VAD parameters a request may override.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VadParamsPatch {
    pub threshold: Option<f32>,
    pub min_speech_duration_ms: Option<u32>,
    pub min_silence_duration_ms: Option<u32>,
    pub speech_pad_ms: Option<u32>,
    pub max_speech_duration_s: Option<f32>,
}

/// JSON form of a request: audio as base64.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRequest {
    model: String,
    audio_base64: String,
    #[serde(default)]
    task: Option<String>,
    #[serde(default)]
    response_format: Option<String>,
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    params: Option<VadParamsPatch>,
    #[serde(default)]
    return_probabilities: bool,
    /// `word` and/or `segment`, as the multipart `timestamp_granularities[]` fields.
    #[serde(default)]
    timestamp_granularities: Vec<String>,
}

/// How long the rest of a refused upload is read and dropped before the connection
/// closes.
const DRAIN_TIME: Duration = Duration::from_secs(5);

/// `req` back, unless its `Content-Length` says the body is over `limit`: then the caller
/// answers 413 before a byte of the body is read, and what the client still sends is read
/// and dropped in the background (at most `drain_bytes`, within [`DRAIN_TIME`]), so the
/// client sees the 413 instead of a connection reset in the middle of its upload.
pub fn unless_declared_over(
    headers: &HeaderMap,
    req: Request,
    limit: usize,
    drain_bytes: usize,
) -> Option<Request> {
    let declared = headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_none_or(|n| n <= limit) {
        return Some(req);
    }
    drain_in_background(req.into_body(), drain_bytes);
    None
}

/// Reads and drops what the client still sends of a refused body (at most
/// `drain_bytes`, within [`DRAIN_TIME`]), so it sees the answer, not a reset.
pub fn drain_in_background(body: axum::body::Body, drain_bytes: usize) {
    tokio::spawn(async move {
        let drain = axum::body::to_bytes(body, drain_bytes);
        let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
    });
}

/// Reads `body` into `buf` until it ends (true) or `buf` holds more than `limit` bytes
/// (false); `Err` when the body fails.
pub async fn read_until(
    body: &mut axum::body::Body,
    buf: &mut Vec<u8>,
    limit: usize,
) -> Result<bool, axum::Error> {
    use hyper::body::Body as _;
    while buf.len() <= limit {
        let frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut *body).poll_frame(cx)).await;
        match frame {
            None => return Ok(true),
            Some(frame) => {
                if let Ok(data) = frame?.into_data() {
                    buf.extend_from_slice(&data);
                }
            }
        }
    }
    Ok(false)
}

async fn read_request(
    headers: &HeaderMap,
    req: Request,
    limit: usize,
) -> Result<AudioRequest, ApiError> {
    let Some(req) = unless_declared_over(headers, req, limit, limit.saturating_mul(4)) else {
        return Err(too_large());
    };
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    if content_type.starts_with("multipart/form-data") {
        let mut mp = Multipart::from_request(req, &())
            .await
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let mut out = AudioRequest::default();
        while let Some(field) = mp.next_field().await.map_err(multipart_error)? {
            let name = field.name().unwrap_or_default().to_string();
            match name.as_str() {
                "file" => out.audio = Some(field.bytes().await.map_err(multipart_error)?.to_vec()),
                "model" => out.model = Some(field.text().await.map_err(multipart_error)?),
                "response_format" => {
                    out.response_format = Some(field.text().await.map_err(multipart_error)?)
                }
                "language" => out.language = Some(field.text().await.map_err(multipart_error)?),
                "return_probabilities" => {
                    out.probabilities = field.text().await.map_err(multipart_error)? == "true"
                }
                "stream" => out.stream = field.text().await.map_err(multipart_error)? == "true",
                "timestamp_granularities[]" | "timestamp_granularities" => out
                    .granularities
                    .push(field.text().await.map_err(multipart_error)?),
                "threshold" => {
                    let t = field.text().await.map_err(multipart_error)?;
                    out.params.threshold = Some(t.parse().map_err(|_| {
                        ApiError::bad_request(format!("threshold '{t}' is not a number"))
                    })?);
                }
                _ => {}
            }
        }
        Ok(out)
    } else if content_type.starts_with("application/json") {
        let bytes = axum::body::to_bytes(req.into_body(), limit)
            .await
            .map_err(|_| too_large())?;
        let j: JsonRequest = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))?;
        if let Some(t) = &j.task {
            if t != "vad" && t != "asr" {
                return Err(ApiError::bad_request(format!(
                    "unknown task '{t}' (expected vad or asr)"
                )));
            }
        }
        let audio = base64::engine::general_purpose::STANDARD
            .decode(j.audio_base64.as_bytes())
            .map_err(|e| ApiError::bad_request(format!("audio_base64 is not base64: {e}")))?;
        Ok(AudioRequest {
            model: Some(j.model),
            audio: Some(audio),
            response_format: j.response_format,
            language: j.language,
            params: j.params.unwrap_or_default(),
            probabilities: j.return_probabilities,
            stream: false,
            granularities: j.timestamp_granularities,
        })
    } else {
        Err(ApiError::bad_request(
            "send multipart/form-data (file, model) or application/json (model, audio_base64)",
        ))
    }
}

/// [`read_request`] bounded by `body_timeout_ms`: a client that trickles its body is
/// answered 408 instead of holding a connection and a buffer forever.
pub async fn read_request_within(
    state: &AppState,
    headers: &HeaderMap,
    req: Request,
) -> Result<AudioRequest, ApiError> {
    let limit = Duration::from_millis(state.cfg.body_timeout_ms);
    tokio::time::timeout(limit, read_request(headers, req, state.cfg.max_body_bytes))
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
}

pub fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        "request body is larger than max_body_bytes",
    )
}

pub fn multipart_error(e: axum::extract::multipart::MultipartError) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        too_large()
    } else {
        ApiError::bad_request(e.body_text())
    }
}

/// An uploaded file's samples at `rate`, decoded within `limits` (400 `invalid_audio`
/// naming what is wrong).
pub fn decode_upload(
    audio: &[u8],
    rate: u32,
    limits: &audiocpp_engine::audio::AudioLimits,
) -> Result<Vec<f32>, ApiError> {
    audiocpp_engine::audio::from_bytes(audio, rate, limits)
        .map(|a| a.samples)
        .map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_audio",
                format!(
                    "cannot decode audio: {}",
                    audiocpp_engine::error::spell_parameters(&e, &field_of)
                ),
            )
        })
}
