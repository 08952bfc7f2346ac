//! `GET /v1/realtime?intent=transcription`: OpenAI's realtime transcription sessions over
//! a WebSocket. The client appends base64 PCM16 (24 kHz mono, little-endian) with
//! `input_audio_buffer.append`; server VAD (the ASR model's Silero `vad_model`) cuts
//! turns, or the client commits them; each turn is transcribed on the model's slot (one
//! run at a time with the HTTP endpoints), with `...transcription.delta` events while
//! the turn grows and `...transcription.completed` once it ends.
//!
//! Partial text follows LocalAgreement-2 (whisper_streaming): the growing turn is decoded
//! every [`PARTIAL_EVERY_S`] of audio, and only the words two consecutive decodes agree
//! on are sent, so deltas only append. At the end of a turn the final decode's words
//! past those sent follow in a last delta, and `completed` carries the final decode: the
//! deltas joined equal it whenever the partials agreed with it (the usual case).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use audiocpp_engine::task::Task;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::{engine_error, ApiError};
use crate::pool::{model_not_found, with_model, Loaded};
use crate::AppState;

/// The rate of OpenAI's `pcm16` input audio.
const INPUT_RATE: u32 = 24_000;

/// The longest turn in seconds (lower when `max_audio_s` is): a turn this long is
/// committed as if silence followed, which bounds a session's memory and decode time.
const MAX_TURN_S: f64 = 60.0;

/// Turn audio between two partial decodes.
const PARTIAL_EVERY_S: f64 = 1.0;

/// Audio before the unprocessed part that each VAD run starts with, so the detector
/// (fresh state per run) has warmed up by the new windows.
const VAD_CONTEXT_S: f64 = 0.5;

/// Audio before the window where server VAD found speech that Whisper also decodes
/// (not part of the turn's times): Silero crosses its threshold several hundred ms into
/// a soft onset ("Speech" crossed 0.5 at 576-632 ms into the phrase clip), and with
/// OpenAI's 300 ms prefix padding alone the turn's first word was cut ("The recognition
/// ..."). The buffer keeps this much before the VAD's position between turns.
const DECODE_LEAD_S: f64 = 1.0;

/// The most `prefix_padding_ms` and `silence_duration_ms` taken.
const MAX_VAD_MS: u64 = 10_000;

/// A session with no message for this long is told so and closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The least audio `input_audio_buffer.commit` takes (OpenAI's 100 ms).
const MIN_COMMIT_S: f64 = 0.1;

/// Session ids, unique within the process.
static SESSIONS: AtomicU64 = AtomicU64::new(0);

/// The upgrade request's query: OpenAI's `intent` and an optional served `model`.
#[derive(Deserialize)]
pub struct RealtimeQuery {
    intent: Option<String>,
    model: Option<String>,
}

/// `GET /v1/realtime`: checks the query and the model before upgrading, so a wrong one
/// is an HTTP error; the session itself answers `error` events and stays open.
pub async fn realtime(
    State(state): State<Arc<AppState>>,
    Query(q): Query<RealtimeQuery>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    // OpenAI's beta clients say `OpenAI-Beta: realtime=v1`; the GA ones say nothing.
    let beta = headers.get_all("openai-beta").iter().any(|v| {
        v.to_str()
            .is_ok_and(|v| v.split(',').any(|p| p.trim() == "realtime=v1"))
    });
    if let Some(intent) = q.intent.as_deref().filter(|i| *i != "transcription") {
        return Err(ApiError::bad_param(
            "intent",
            format!("intent '{intent}' is not served: only 'transcription'"),
        ));
    }
    let model = match q.model {
        Some(m) => {
            let slot = state.slots.get(&m).ok_or_else(|| model_not_found(&m))?;
            if slot.entry.task != Task::Asr {
                return Err(ApiError::bad_param(
                    "model",
                    format!("model '{m}' does task '{}', not 'asr'", slot.entry.task),
                ));
            }
            m
        }
        None => state
            .slots
            .values()
            .find(|s| s.entry.task == Task::Asr)
            .map(|s| s.entry.id.clone())
            .ok_or_else(|| ApiError::bad_request("no asr model is served here"))?,
    };
    let max_message = state.cfg.max_body_bytes;
    Ok(ws
        .max_message_size(max_message)
        .max_frame_size(max_message)
        .on_upgrade(move |socket| Session::run(state, model, beta, socket)))
}

/// Server VAD settings (OpenAI's `turn_detection` of type `server_vad`).
#[derive(Clone, Copy, PartialEq)]
struct ServerVad {
    threshold: f32,
    prefix_padding_ms: u32,
    silence_duration_ms: u32,
}

impl Default for ServerVad {
    fn default() -> Self {
        ServerVad {
            threshold: 0.5,
            prefix_padding_ms: 300,
            silence_duration_ms: 500,
        }
    }
}

/// The model facts a session needs, read from the loaded model.
#[derive(Clone, Copy)]
struct ModelInfo {
    rate: u32,
    has_vad: bool,
}

/// A turn being heard: from its first sample (prefix padding included) on.
struct Turn {
    item_id: String,
    start: usize,
    /// Where its decodes start: `start`, or up to `DECODE_LEAD_S` before it (server VAD).
    decode_from: usize,
    /// Trailing samples of silence (server VAD).
    silence: usize,
    /// Turn length at the last partial decode.
    decoded_at: usize,
    /// The last partial decode's words.
    hypothesis: Vec<String>,
    /// Words sent as deltas.
    sent: Vec<String>,
}

/// The session's settings, as `session.update` changes them.
#[derive(Clone)]
struct Settings {
    model: String,
    language: Option<String>,
    turn_detection: Option<ServerVad>,
}

/// One WebSocket session: its socket, settings and the audio of the turn being heard.
struct Session {
    ws: WebSocket,
    /// The client asked for the beta protocol (`OpenAI-Beta: realtime=v1`): greeted with
    /// `transcription_session.created` in the beta shape, else `session.created` in the
    /// GA shape.
    beta: bool,
    /// Set once a send failed: the session then ends.
    closed: bool,
    state: Arc<AppState>,
    id: String,
    settings: Settings,
    info: ModelInfo,
    next_event: u64,
    next_item: u64,
    last_item: Option<String>,
    resampler: Resampler,
    /// Audio at the model's rate from absolute sample `base` on.
    audio: Vec<f32>,
    base: usize,
    /// Absolute sample up to which VAD has run.
    vad_at: usize,
    /// Samples per VAD probability, learned from the first run.
    window: Option<usize>,
    turn: Option<Turn>,
}

impl Session {
    /// Reads the model's facts (loading a lazy model), greets the client with
    /// `session.created` (or the beta `transcription_session.created`), then handles its
    /// events until it closes, goes idle or the socket fails.
    async fn run(state: Arc<AppState>, model: String, beta: bool, mut ws: WebSocket) {
        let info = match probe(&state, &model).await {
            Ok(i) => i,
            Err(e) => {
                let body = error_body(&e, None);
                let _ = ws
                    .send(Message::Text(
                        json!({ "event_id": "event_0", "type": "error", "error": body })
                            .to_string()
                            .into(),
                    ))
                    .await;
                let _ = ws.send(Message::Close(None)).await;
                return;
            }
        };
        let n = SESSIONS.fetch_add(1, Ordering::Relaxed);
        let mut s = Session {
            id: format!("sess_{:x}{n:06}", state.started_unix_s),
            ws,
            beta,
            closed: false,
            settings: Settings {
                model,
                language: None,
                turn_detection: info.has_vad.then(ServerVad::default),
            },
            resampler: Resampler::new(INPUT_RATE, info.rate),
            info,
            state,
            next_event: 0,
            next_item: 0,
            last_item: None,
            audio: Vec::new(),
            base: 0,
            vad_at: 0,
            window: None,
            turn: None,
        };
        s.serve().await;
        let _ = s.ws.send(Message::Close(None)).await;
    }

    async fn serve(&mut self) {
        let (created, session) = if self.beta {
            ("transcription_session.created", self.session_object())
        } else {
            ("session.created", self.session_object_ga())
        };
        self.emit(created, json!({ "session": session })).await;
        if !self.info.has_vad {
            let e = self.no_vad_error();
            self.error(&e, None).await;
        }
        while !self.closed {
            let msg = match tokio::time::timeout(IDLE_TIMEOUT, self.ws.recv()).await {
                Err(_) => {
                    let e = ApiError::new(
                        StatusCode::REQUEST_TIMEOUT,
                        "idle_timeout",
                        format!(
                            "no event for {} s: the session is closed",
                            IDLE_TIMEOUT.as_secs()
                        ),
                    );
                    self.error(&e, None).await;
                    return;
                }
                Ok(None) | Ok(Some(Err(_))) => return,
                Ok(Some(Ok(m))) => m,
            };
            match msg {
                Message::Text(t) => self.on_text(t.as_str()).await,
                Message::Binary(_) => {
                    let e = ApiError::bad_request(
                        "binary messages are not taken: send JSON events as text",
                    );
                    self.error(&e, None).await;
                }
                Message::Close(_) => return,
                Message::Ping(_) | Message::Pong(_) => {}
            }
        }
    }

    /// Handles one client event; a bad one gets an `error` event and the session goes on.
    async fn on_text(&mut self, text: &str) {
        let event: Value = match serde_json::from_str(text) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => {
                let e = ApiError::bad_request("an event must be a JSON object");
                return self.error(&e, None).await;
            }
            Err(err) => {
                let e = ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_json",
                    format!("the event is not valid JSON: {err}"),
                );
                return self.error(&e, None).await;
            }
        };
        let result = match event["type"].as_str() {
            Some(kind @ ("transcription_session.update" | "session.update")) => {
                self.update(&event["session"], kind).await
            }
            Some("input_audio_buffer.append") => self.append(&event["audio"]).await,
            Some("input_audio_buffer.commit") => self.commit().await,
            Some("input_audio_buffer.clear") => {
                self.clear();
                self.emit("input_audio_buffer.cleared", json!({})).await;
                Ok(())
            }
            Some(other) => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "unknown_event_type",
                format!(
                    "event type '{other}' is not taken here: a transcription session takes \
                     transcription_session.update, session.update and \
                     input_audio_buffer.append, .commit and .clear"
                ),
            )),
            None => Err(ApiError::bad_param(
                "type",
                "the event has no string 'type'",
            )),
        };
        if let Err(e) = result {
            self.error(&e, event["event_id"].as_str()).await;
        }
    }

    /// `transcription_session.update` (the beta shape) or `session.update` (the GA shape,
    /// its fields under `audio.input`): applied whole or not at all, and answered with
    /// `transcription_session.updated` or `session.updated`.
    async fn update(&mut self, session: &Value, kind: &str) -> Result<(), ApiError> {
        if !session.is_object() {
            return Err(ApiError::bad_param(
                "session",
                "the event needs a 'session' object",
            ));
        }
        if let Some(t) = session["type"].as_str().filter(|t| *t != "transcription") {
            return Err(ApiError::bad_param(
                "session.type",
                format!("session type '{t}' is not served: only 'transcription'"),
            ));
        }
        let ga = &session["audio"]["input"];
        let input = if ga.is_object() { ga } else { session };
        let mut next = self.settings.clone();
        // Format: `pcm16` (beta) or {type: audio/pcm, rate: 24000} (GA).
        match &input[if ga.is_object() {
            "format"
        } else {
            "input_audio_format"
        }] {
            Value::Null => {}
            Value::String(f) if f == "pcm16" => {}
            Value::Object(f)
                if f.get("type").and_then(Value::as_str) == Some("audio/pcm")
                    && f.get("rate")
                        .is_none_or(|r| r.as_u64() == Some(INPUT_RATE as u64)) => {}
            other => {
                return Err(ApiError::bad_param(
                    "session.input_audio_format",
                    format!(
                        "audio format {other} is not taken: only pcm16 (audio/pcm) at 24000 Hz"
                    ),
                ))
            }
        }
        if let Some(nr) = [
            &input["noise_reduction"],
            &input["input_audio_noise_reduction"],
        ]
        .into_iter()
        .find(|v| !v.is_null())
        {
            return Err(ApiError::bad_param(
                "session.input_audio_noise_reduction",
                format!("noise reduction {nr} is not done here: leave it null"),
            ));
        }
        let tr = &input[if ga.is_object() {
            "transcription"
        } else {
            "input_audio_transcription"
        }];
        let mut info = self.info;
        if let Some(m) = tr["model"].as_str() {
            let slot = self.state.slots.get(m).ok_or_else(|| model_not_found(m))?;
            if slot.entry.task != Task::Asr {
                return Err(ApiError::bad_param(
                    "session.input_audio_transcription.model",
                    format!("model '{m}' does task '{}', not 'asr'", slot.entry.task),
                ));
            }
            if m != next.model {
                info = probe(&self.state, m).await?;
                next.model = m.to_string();
            }
        }
        match &tr["language"] {
            Value::Null => {}
            Value::String(l) => next.language = Some(l.clone()).filter(|l| !l.is_empty()),
            other => {
                return Err(ApiError::bad_param(
                    "session.input_audio_transcription.language",
                    format!("language {other} is not a string"),
                ))
            }
        }
        if tr["prompt"].as_str().is_some_and(|p| !p.is_empty()) {
            return Err(ApiError::bad_param(
                "session.input_audio_transcription.prompt",
                "a transcription prompt is not taken here: leave it empty",
            ));
        }
        let td = &input["turn_detection"];
        if input
            .as_object()
            .is_some_and(|o| o.contains_key("turn_detection"))
        {
            next.turn_detection = turn_detection(td, next.turn_detection)?;
        }
        if next.turn_detection.is_some() && !info.has_vad {
            return Err(self.no_vad_error());
        }
        if info.rate != self.info.rate {
            // A model at another rate: the buffered audio is at the old one.
            self.clear();
            self.resampler = Resampler::new(INPUT_RATE, info.rate);
        }
        self.info = info;
        self.settings = next;
        let (updated, session) = if kind == "session.update" {
            ("session.updated", self.session_object_ga())
        } else {
            ("transcription_session.updated", self.session_object())
        };
        self.emit(updated, json!({ "session": session })).await;
        Ok(())
    }

    /// `input_audio_buffer.append`: base64 PCM16 at 24 kHz, resampled to the model's rate;
    /// then server VAD and partial decodes run on what is new.
    async fn append(&mut self, audio: &Value) -> Result<(), ApiError> {
        let b64 = audio.as_str().ok_or_else(|| {
            ApiError::bad_param("audio", "'audio' must be a base64 string of PCM16 audio")
        })?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| ApiError::bad_param("audio", format!("'audio' is not base64: {e}")))?;
        if bytes.len() % 2 != 0 {
            return Err(ApiError::bad_param(
                "audio",
                "'audio' holds an odd number of bytes: PCM16 samples are 2 bytes each",
            ));
        }
        let samples: Vec<f32> = bytes
            .chunks_exact(2)
            .map(|b| f32::from(i16::from_le_bytes([b[0], b[1]])) / 32768.0)
            .collect();
        let mut out = Vec::new();
        self.resampler
            .push(&samples, &mut out)
            .map_err(internal_msg)?;
        self.audio.extend_from_slice(&out);
        self.advance().await
    }

    /// Runs what new audio calls for: server VAD (turn starts and ends), the turn cap,
    /// and a partial decode of the open turn.
    async fn advance(&mut self) -> Result<(), ApiError> {
        let end = self.base + self.audio.len();
        match self.settings.turn_detection {
            Some(vad) => self.detect(vad).await?,
            None => {
                self.vad_at = end;
                if self.turn.is_none() && end > self.base {
                    let item_id = self.new_item();
                    self.turn = Some(Turn::new(item_id, self.base, self.base));
                }
            }
        }
        let heard = match self.settings.turn_detection {
            Some(_) => self.vad_at,
            None => end,
        };
        let Some(t) = &self.turn else {
            self.trim();
            return Ok(());
        };
        let len = heard - t.start;
        if len >= self.max_turn() {
            // A turn at the cap ends here, as if silence followed.
            if self.settings.turn_detection.is_some() {
                let item_id = t.item_id.clone();
                let end_ms = self.ms(heard);
                self.emit(
                    "input_audio_buffer.speech_stopped",
                    json!({ "audio_end_ms": end_ms, "item_id": item_id }),
                )
                .await;
            }
            return self.finish(heard).await;
        }
        if len - t.decoded_at >= self.seconds(PARTIAL_EVERY_S) {
            self.partial(heard).await?;
        }
        Ok(())
    }

    /// Server VAD over the audio not yet seen: probabilities per window (with some audio
    /// before for context), a turn starting at a window at or above the threshold (less
    /// the prefix padding) and ending after `silence_duration_ms` below it.
    async fn detect(&mut self, vad: ServerVad) -> Result<(), ApiError> {
        let end = self.base + self.audio.len();
        let window = self.window.unwrap_or(1);
        if end - self.vad_at < window.max(self.seconds(0.1)) {
            return Ok(());
        }
        let context = self.window.map_or(0, |w| {
            (self.seconds(VAD_CONTEXT_S) / w * w).min((self.vad_at - self.base) / w * w)
        });
        let from = self.vad_at - context;
        let input = self.audio[from - self.base..].to_vec();
        let slot_state = self.state.clone();
        let slot = slot_state
            .slots
            .get(&self.settings.model)
            .ok_or_else(|| model_not_found(&self.settings.model))?;
        let run = with_model(&self.state, slot, move |loaded| {
            let Loaded::Asr(_, Some(vad)) = loaded else {
                return Err(ApiError::bad_request("this model has no vad_model"));
            };
            let params = vad.default_params();
            let out = vad.run_samples(&input, &params).map_err(engine_error)?;
            Ok((out.probabilities, out.window_samples))
        })
        .await;
        let (probs, window) = match run {
            Ok(((p, w), _)) if w > 0 => (p, w),
            Ok(_) => return Err(internal_msg("the VAD model gave no window size")),
            Err(e) => {
                // Audio the VAD could not see (model busy past busy_timeout_ms) counts
                // as heard: the buffer stays bounded.
                self.vad_at = end;
                return Err(e);
            }
        };
        self.window = Some(window);
        let skip = context / window;
        let n_new = (end - from) / window - skip;
        let neg = (vad.threshold - 0.15).max(0.01);
        let silence_needed = self.seconds(vad.silence_duration_ms as f64 / 1000.0);
        let prefix = self.seconds(vad.prefix_padding_ms as f64 / 1000.0);
        for i in 0..n_new {
            let p = probs.get(skip + i).copied().unwrap_or(0.0);
            let w_start = from + (skip + i) * window;
            let w_end = w_start + window;
            self.vad_at = w_end;
            match &mut self.turn {
                None if p >= vad.threshold => {
                    let start = w_start.saturating_sub(prefix).max(self.base);
                    let item_id = self.new_item();
                    let start_ms = self.ms(start);
                    self.emit(
                        "input_audio_buffer.speech_started",
                        json!({ "audio_start_ms": start_ms, "item_id": item_id }),
                    )
                    .await;
                    let lead = self.seconds(DECODE_LEAD_S);
                    let decode_from = start.min(w_start.saturating_sub(lead)).max(self.base);
                    self.turn = Some(Turn::new(item_id, start, decode_from));
                }
                None => {}
                Some(t) if p < neg => {
                    t.silence += window;
                    if t.silence >= silence_needed {
                        let item_id = t.item_id.clone();
                        let end_ms = self.ms(w_end);
                        self.emit(
                            "input_audio_buffer.speech_stopped",
                            json!({ "audio_end_ms": end_ms, "item_id": item_id }),
                        )
                        .await;
                        self.finish(w_end).await?;
                    }
                }
                Some(t) if p >= vad.threshold => t.silence = 0,
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// `input_audio_buffer.commit`: ends the open turn now (with server VAD, a turn in
    /// progress; without, everything appended since the last commit).
    async fn commit(&mut self) -> Result<(), ApiError> {
        let mut out = Vec::new();
        if self.settings.turn_detection.is_none() {
            self.resampler.flush(&mut out).map_err(internal_msg)?;
            self.audio.extend_from_slice(&out);
            self.vad_at = self.base + self.audio.len();
        }
        let end = self.vad_at;
        let empty = || {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "input_audio_buffer_commit_empty",
                format!(
                    "buffer too small: a commit needs at least {} ms of audio{}",
                    (MIN_COMMIT_S * 1000.0) as u32,
                    if self.settings.turn_detection.is_some() {
                        " in a turn (server VAD found no speech in progress)"
                    } else {
                        ""
                    }
                ),
            )
        };
        let Some(t) = &self.turn else {
            return Err(empty());
        };
        if end - t.start < self.seconds(MIN_COMMIT_S) {
            return Err(empty());
        }
        self.finish(end).await
    }

    /// `input_audio_buffer.clear`: drops the buffered audio and any open turn.
    fn clear(&mut self) {
        self.base += self.audio.len();
        self.audio.clear();
        self.vad_at = self.base;
        self.turn = None;
        self.resampler = Resampler::new(INPUT_RATE, self.info.rate);
    }

    /// Decodes the open turn up to `heard` and sends the words this decode and the last
    /// agree on beyond those sent (LocalAgreement-2).
    async fn partial(&mut self, heard: usize) -> Result<(), ApiError> {
        let Some(t) = &self.turn else { return Ok(()) };
        let samples = self.audio[t.decode_from - self.base..heard - self.base].to_vec();
        let len = heard - t.start;
        let text = self.decode(samples, true).await?;
        let Some(t) = &mut self.turn else {
            return Ok(());
        };
        t.decoded_at = len;
        let words: Vec<String> = text.split_whitespace().map(str::to_string).collect();
        let agreed = t
            .hypothesis
            .iter()
            .zip(&words)
            .take_while(|(a, b)| a == b)
            .count();
        t.hypothesis = words;
        if agreed > t.sent.len() {
            let new = t.hypothesis[t.sent.len()..agreed].to_vec();
            let delta = join_after(&t.sent, &new);
            t.sent.extend(new);
            let item_id = t.item_id.clone();
            self.emit(
                "conversation.item.input_audio_transcription.delta",
                json!({ "item_id": item_id, "content_index": 0, "delta": delta, "logprobs": null }),
            )
            .await;
        }
        Ok(())
    }

    /// Ends the open turn at `end`: committed and item events, the final decode, the
    /// words past those sent as a last delta, and `completed` (or `failed`).
    async fn finish(&mut self, end: usize) -> Result<(), ApiError> {
        let Some(t) = self.turn.take() else {
            return Ok(());
        };
        let previous = self.last_item.replace(t.item_id.clone());
        self.emit(
            "input_audio_buffer.committed",
            json!({ "previous_item_id": previous, "item_id": t.item_id }),
        )
        .await;
        self.emit(
            "conversation.item.created",
            json!({
                "previous_item_id": previous,
                "item": {
                    "id": t.item_id, "object": "realtime.item", "type": "message",
                    "status": "completed", "role": "user",
                    "content": [{ "type": "input_audio", "transcript": null }],
                },
            }),
        )
        .await;
        let samples = self.audio[t.decode_from - self.base..end - self.base].to_vec();
        let seconds = (end - t.start) as f64 / self.info.rate as f64;
        // The audio up to the turn's end is done with.
        self.trim_to(end);
        match self.decode(samples, false).await {
            Ok(text) => {
                let words: Vec<&str> = text.split_whitespace().collect();
                let rest: Vec<String> = words
                    .iter()
                    .skip(t.sent.len())
                    .map(|w| w.to_string())
                    .collect();
                if !rest.is_empty() {
                    let delta = join_after(&t.sent, &rest);
                    self.emit(
                        "conversation.item.input_audio_transcription.delta",
                        json!({ "item_id": t.item_id, "content_index": 0, "delta": delta, "logprobs": null }),
                    )
                    .await;
                }
                // The final decode, as the transcription endpoint gives it: partials at
                // 1 s and 2 s of a turn can agree on a word the whole turn corrects.
                let transcript = words.join(" ");
                self.emit(
                    "conversation.item.input_audio_transcription.completed",
                    json!({
                        "item_id": t.item_id, "content_index": 0, "transcript": transcript,
                        "logprobs": null,
                        "usage": { "type": "duration", "seconds": seconds },
                    }),
                )
                .await;
            }
            Err(e) => {
                let error = error_body(&e, None);
                self.emit(
                    "conversation.item.input_audio_transcription.failed",
                    json!({ "item_id": t.item_id, "content_index": 0, "error": error }),
                )
                .await;
            }
        }
        Ok(())
    }

    /// Transcribes samples at the model's rate on the model's slot; a `partial` decode
    /// is greedy only (no temperature fallback), as its end is cut mid-speech anyway.
    async fn decode(&mut self, samples: Vec<f32>, partial: bool) -> Result<String, ApiError> {
        let slot = self
            .state
            .slots
            .get(&self.settings.model)
            .ok_or_else(|| model_not_found(&self.settings.model))?;
        let language = self.settings.language.clone();
        let (text, _) = with_model(&self.state, slot, move |loaded| {
            let Loaded::Asr(model, _) = loaded else {
                return Err(ApiError::bad_request("this model does not do asr"));
            };
            let mut opts = model.default_options();
            if let Some(l) = language {
                opts.language = l;
            }
            if partial {
                opts.temperatures = vec![0.0];
            }
            model
                .run_samples(&samples, &opts)
                .map(|o| o.text)
                .map_err(engine_error)
        })
        .await?;
        Ok(text)
    }

    /// Drops audio no longer needed: outside a turn, all but the prefix padding and the
    /// VAD context before the last VAD run's end.
    fn trim(&mut self) {
        if self.turn.is_some() {
            return;
        }
        let pad = self
            .settings
            .turn_detection
            .map_or(0, |v| self.seconds(v.prefix_padding_ms as f64 / 1000.0));
        let keep = pad
            .max(self.seconds(VAD_CONTEXT_S))
            .max(self.seconds(DECODE_LEAD_S))
            + self.window.unwrap_or(0);
        self.trim_to(self.vad_at.saturating_sub(keep));
    }

    /// Drops the audio before absolute sample `at`.
    fn trim_to(&mut self, at: usize) {
        if at > self.base {
            let n = (at - self.base).min(self.audio.len());
            self.audio.drain(..n);
            self.base += n;
        }
    }

    fn max_turn(&self) -> usize {
        self.seconds(MAX_TURN_S.min(self.state.cfg.max_audio_s))
    }

    fn seconds(&self, s: f64) -> usize {
        (s * self.info.rate as f64) as usize
    }

    fn ms(&self, sample: usize) -> u64 {
        (sample as u64 * 1000) / self.info.rate as u64
    }

    fn new_item(&mut self) -> String {
        self.next_item += 1;
        format!("item_{}_{:04}", &self.id[5..], self.next_item)
    }

    fn no_vad_error(&self) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "server_vad_unavailable",
            format!(
                "model '{}' has no vad_model, which server VAD needs: set its vad_model in \
                 server.json, or send turn_detection null and input_audio_buffer.commit",
                self.settings.model
            ),
        )
    }

    /// The session as OpenAI's transcription session object shows it.
    fn session_object(&self) -> Value {
        let td = self.settings.turn_detection.map(|v| {
            json!({
                "type": "server_vad", "threshold": v.threshold,
                "prefix_padding_ms": v.prefix_padding_ms,
                "silence_duration_ms": v.silence_duration_ms,
            })
        });
        json!({
            "id": self.id, "object": "realtime.transcription_session",
            "input_audio_format": "pcm16",
            "input_audio_transcription": {
                "model": self.settings.model, "language": self.settings.language, "prompt": "",
            },
            "turn_detection": td,
            "input_audio_noise_reduction": null,
            "include": null,
        })
    }

    /// The session in the GA shape (`type` transcription, the settings under
    /// `audio.input`), which `session.updated` carries: OpenAI's GA clients tell a
    /// transcription session from a conversation one by its `type` (openai 3.57.0 read
    /// the beta shape as a conversation session with no `audio`).
    fn session_object_ga(&self) -> Value {
        let beta = self.session_object();
        json!({
            "type": "transcription", "id": self.id, "object": "realtime.transcription_session",
            "audio": { "input": {
                "format": { "type": "audio/pcm", "rate": INPUT_RATE },
                "transcription": beta["input_audio_transcription"],
                "turn_detection": beta["turn_detection"],
                "noise_reduction": null,
            }},
            "include": null,
        })
    }

    /// Sends a server event, with its `event_id` and `type`.
    async fn emit(&mut self, kind: &str, mut body: Value) {
        self.next_event += 1;
        if let Value::Object(o) = &mut body {
            o.insert(
                "event_id".into(),
                json!(format!("event_{}", self.next_event)),
            );
            o.insert("type".into(), json!(kind));
        }
        if self
            .ws
            .send(Message::Text(body.to_string().into()))
            .await
            .is_err()
        {
            self.closed = true;
        }
    }

    /// Sends an `error` event (OpenAI's shape), naming the client event it answers.
    async fn error(&mut self, e: &ApiError, client_event: Option<&str>) {
        let error = error_body(e, client_event);
        self.emit("error", json!({ "error": error })).await;
    }
}

impl Turn {
    fn new(item_id: String, start: usize, decode_from: usize) -> Turn {
        Turn {
            item_id,
            start,
            decode_from,
            silence: 0,
            decoded_at: 0,
            hypothesis: Vec::new(),
            sent: Vec::new(),
        }
    }
}

/// Reads `turn_detection`: null (the client commits turns) or `server_vad`, its
/// fields optional (the current or OpenAI's defaults) and range-checked.
fn turn_detection(td: &Value, current: Option<ServerVad>) -> Result<Option<ServerVad>, ApiError> {
    if td.is_null() {
        return Ok(None);
    }
    if !td.is_object() {
        return Err(ApiError::bad_param(
            "session.turn_detection",
            format!("turn_detection {td} is not an object or null"),
        ));
    }
    let kind = td["type"].as_str().unwrap_or("server_vad");
    if kind != "server_vad" {
        return Err(ApiError::bad_param(
            "session.turn_detection.type",
            format!("turn detection '{kind}' is not done here: only server_vad (or null)"),
        ));
    }
    let mut v = current.unwrap_or_default();
    if let Some(x) = td.get("threshold").filter(|x| !x.is_null()) {
        let t = x
            .as_f64()
            .filter(|t| (0.0..=1.0).contains(t))
            .ok_or_else(|| {
                ApiError::bad_param(
                    "session.turn_detection.threshold",
                    format!("threshold {x} is not a number in 0..1"),
                )
            })?;
        v.threshold = t as f32;
    }
    for (key, field) in [
        (
            "session.turn_detection.prefix_padding_ms",
            &mut v.prefix_padding_ms,
        ),
        (
            "session.turn_detection.silence_duration_ms",
            &mut v.silence_duration_ms,
        ),
    ] {
        let name = key.rsplit('.').next().unwrap_or(key);
        if let Some(x) = td.get(name).filter(|x| !x.is_null()) {
            *field = x
                .as_u64()
                .filter(|ms| *ms <= MAX_VAD_MS)
                .map(|ms| ms as u32)
                .ok_or_else(|| {
                    ApiError::bad_param(
                        key,
                        format!("{name} {x} is not a whole number of ms in 0..={MAX_VAD_MS}"),
                    )
                })?;
        }
    }
    Ok(Some(v))
}

/// `words` as a delta after `sent`: space-separated, with a leading space unless first.
fn join_after(sent: &[String], words: &[String]) -> String {
    let text = words.join(" ");
    if sent.is_empty() {
        text
    } else {
        format!(" {text}")
    }
}

/// Loads the model if lazy and reads its rate and whether it has a VAD model at the same
/// rate.
async fn probe(state: &Arc<AppState>, model: &str) -> Result<ModelInfo, ApiError> {
    let slot = state
        .slots
        .get(model)
        .ok_or_else(|| model_not_found(model))?;
    let (info, _) = with_model(state, slot, |loaded| {
        let Loaded::Asr(m, vad) = loaded else {
            return Err(ApiError::bad_request("this model does not do asr"));
        };
        let rate = m.sample_rate();
        Ok(ModelInfo {
            rate,
            has_vad: vad.as_ref().is_some_and(|v| v.sample_rate() == rate),
        })
    })
    .await?;
    Ok(info)
}

/// OpenAI's `error` object of an error event.
fn error_body(e: &ApiError, client_event: Option<&str>) -> Value {
    let kind = if e.status.is_server_error() {
        "server_error"
    } else {
        "invalid_request_error"
    };
    json!({
        "type": kind, "code": e.code, "message": e.message, "param": e.param,
        "event_id": client_event,
    })
}

/// An internal failure as an error event; the detail goes to the log.
fn internal_msg(detail: impl std::fmt::Display) -> ApiError {
    eprintln!("error: realtime session: {detail}");
    crate::error::internal()
}

/// Streaming resampling from the client's rate to the model's: rubato's synchronous FFT
/// resampler (the one `audio::resample` uses) fed chunk by chunk, its delay dropped.
struct Resampler {
    inner: Option<rubato::FftFixedIn<f32>>,
    pending: Vec<f32>,
    /// Output samples still to drop (the resampler's delay).
    skip: usize,
    rate_in: u32,
    rate_out: u32,
    fed: u64,
    made: u64,
}

impl Resampler {
    fn new(rate_in: u32, rate_out: u32) -> Resampler {
        Resampler {
            inner: None,
            pending: Vec::new(),
            skip: 0,
            rate_in,
            rate_out,
            fed: 0,
            made: 0,
        }
    }

    /// Resamples `x`, appending what is ready to `out`.
    fn push(&mut self, x: &[f32], out: &mut Vec<f32>) -> Result<(), String> {
        use rubato::Resampler as _;
        if self.rate_in == self.rate_out {
            out.extend_from_slice(x);
            return Ok(());
        }
        if self.inner.is_none() {
            let r = rubato::FftFixedIn::<f32>::new(
                self.rate_in as usize,
                self.rate_out as usize,
                1024,
                2,
                1,
            )
            .map_err(|e| e.to_string())?;
            self.skip = r.output_delay();
            self.inner = Some(r);
        }
        let Some(r) = self.inner.as_mut() else {
            return Ok(());
        };
        self.fed += x.len() as u64;
        self.pending.extend_from_slice(x);
        let mut at = 0;
        while self.pending.len() - at >= r.input_frames_next() {
            let n = r.input_frames_next();
            let y = r
                .process(&[&self.pending[at..at + n]], None)
                .map_err(|e| e.to_string())?
                .remove(0);
            at += n;
            let drop = self.skip.min(y.len());
            self.skip -= drop;
            self.made += (y.len() - drop) as u64;
            out.extend_from_slice(&y[drop..]);
        }
        self.pending.drain(..at);
        Ok(())
    }

    /// Pushes out what the input so far still owes (zeros after it), then starts afresh.
    fn flush(&mut self, out: &mut Vec<f32>) -> Result<(), String> {
        if self.inner.is_some() {
            let owed = (self.fed * self.rate_out as u64).div_ceil(self.rate_in as u64);
            let (fed, made) = (self.fed, self.made);
            let mut tail = Vec::new();
            while self.made < owed {
                self.push(&[0.0; 1024], &mut tail)?;
            }
            tail.truncate(owed.saturating_sub(made) as usize);
            debug_assert!(fed <= self.fed);
            out.extend(tail);
        }
        *self = Resampler::new(self.rate_in, self.rate_out);
        Ok(())
    }
}
