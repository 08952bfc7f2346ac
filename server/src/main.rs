//! `audiocpp_server`: a local HTTP server over the engine with OpenAI-style endpoints.
//!
//! Thin by design: configuration, routing, limits and error bodies live here; all audio
//! work is the engine's, run off the async workers on blocking threads, one request at
//! a time per model (a busy model answers 503 `server_busy` after `busy_timeout_ms`).

mod config;
mod languages;
mod listener;
mod speech;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use audiocpp_engine::asr::{AsrModel, AsrOutput};
use audiocpp_engine::backend::{BackendKind, RuntimeOptions};
use audiocpp_engine::task::Task;
use audiocpp_engine::tts::TtsModel;
use audiocpp_engine::vad::{VadModel, VadOutput, VadParams};
use axum::extract::{DefaultBodyLimit, Multipart, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use clap::Parser;
use config::{Config, ModelEntry};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Mutex;
use tower_http::cors::AllowOrigin;

/// Command-line flags (each overrides the config file's value).
#[derive(Debug, Parser)]
#[command(name = "audiocpp_server", version = audiocpp_engine::VERSION, about = "OpenAI-compatible audio server on the audiocpp engine")]
struct Flags {
    /// Configuration file (host, port, backend, models...).
    #[arg(long)]
    config: PathBuf,
    /// Address to bind.
    #[arg(long)]
    host: Option<String>,
    /// Port to bind (0: any free port).
    #[arg(long)]
    port: Option<u32>,
    /// Backend: cpu, cuda, hip (rocm), vulkan, metal, best.
    #[arg(long)]
    backend: Option<String>,
    /// Device index among the backend's devices.
    #[arg(long)]
    device: Option<usize>,
    /// The most CPU threads per inference (fewer while other programs take the cores).
    #[arg(long)]
    threads: Option<usize>,
}

/// An engine model of either task.
enum Loaded {
    /// Voice activity detection.
    Vad(Box<VadModel>),
    /// Speech recognition, with the VAD model that cuts its audio when configured.
    Asr(Box<AsrModel>, Option<Box<VadModel>>),
    /// Speech synthesis.
    Tts(Box<TtsModel>),
}

/// Where a served model stands.
enum SlotState {
    /// Lazy and not requested yet.
    Unloaded,
    /// Ready to run.
    Ready(Loaded),
    /// Loading failed (the reason is in the log); requests get 503 until a restart.
    Failed,
}

/// A served model: its config entry and its state.
struct Slot {
    entry: ModelEntry,
    model: Arc<Mutex<SlotState>>,
}

/// Shared server state.
struct AppState {
    cfg: Config,
    slots: BTreeMap<String, Slot>,
    api_key: Option<String>,
    runtime: RuntimeOptions,
    /// When the server started (Unix seconds): the `created` of its model objects.
    started_unix_s: u64,
}

/// An OpenAI-style error response.
struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    /// The request parameter at fault, when one is.
    param: Option<&'static str>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            param: None,
        }
    }
    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }
    /// A 400 naming the parameter at fault.
    fn bad_param(param: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            param: Some(param),
            ..Self::bad_request(message)
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let kind = match self.status {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::SERVICE_UNAVAILABLE => "server_busy",
            s if s.is_server_error() => "server_error",
            _ => "invalid_request_error",
        };
        let body = json!({ "error": { "message": self.message, "type": kind, "param": self.param, "code": self.code } });
        (self.status, Json(body)).into_response()
    }
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    audiocpp_engine::error::set_warning_spelling(field_of);
    let mut cfg = match Config::load(&flags.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(h) = flags.host {
        cfg.host = h;
    }
    if let Some(p) = flags.port {
        cfg.port = p;
    }
    if let Some(b) = flags.backend {
        cfg.backend = b;
    }
    if flags.device.is_some() {
        cfg.device = flags.device;
    }
    if let Some(t) = flags.threads {
        cfg.threads = t;
    }
    if let Err(e) = cfg.validate() {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(serve(cfg)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

async fn serve(cfg: Config) -> Result<(), String> {
    let runtime = RuntimeOptions {
        backend: cfg
            .backend
            .parse::<BackendKind>()
            .map_err(|e| e.to_string())?,
        device: cfg.device,
        threads: cfg.threads,
    };
    let api_key = match cfg.api_key.clone() {
        Some(k) => Some(k),
        None => match std::env::var("AUDIOCPP_API_KEY") {
            Ok(k) if k.is_empty() => {
                return Err("AUDIOCPP_API_KEY is set but empty: set a key or unset it".into())
            }
            Ok(k) => Some(k),
            Err(_) => None,
        },
    };
    let mut slots = BTreeMap::new();
    let mut failed = 0;
    for entry in &cfg.models {
        let model = if entry.lazy {
            SlotState::Unloaded
        } else {
            match load(entry, &runtime).await {
                Ok(m) => SlotState::Ready(m),
                Err(e) => {
                    eprintln!("error: {e}; serving the other models");
                    failed += 1;
                    SlotState::Failed
                }
            }
        };
        slots.insert(
            entry.id.clone(),
            Slot {
                entry: entry.clone(),
                model: Arc::new(Mutex::new(model)),
            },
        );
    }
    if failed == cfg.models.len() {
        return Err("no model could be loaded (see the errors above)".into());
    }
    let addr = format!("{}:{}", cfg.host, cfg.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let local: SocketAddr = listener.local_addr().map_err(|e| e.to_string())?;
    if api_key.is_none() && !local.ip().is_loopback() {
        eprintln!(
            "warning: listening on {local}, beyond this machine, with no api_key: anyone who can reach it can use it (set api_key in the config or AUDIOCPP_API_KEY)"
        );
    }
    let limits = listener::ConnectionLimits {
        max_connections: cfg.max_connections,
        header_timeout: Duration::from_millis(cfg.header_timeout_ms),
        shutdown_timeout: Duration::from_millis(cfg.shutdown_timeout_ms),
    };
    let state = Arc::new(AppState {
        cfg,
        slots,
        api_key,
        runtime,
        started_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    });
    let app = router(state.clone());
    println!("audiocpp_server listening on http://{local}");
    listener::serve(listener, app, limits, shutdown_signal()).await;
    eprintln!("audiocpp_server stopped");
    Ok(())
}

async fn load(entry: &ModelEntry, runtime: &RuntimeOptions) -> Result<Loaded, String> {
    let id = entry.id.clone();
    let (entry, runtime) = (entry.clone(), runtime.clone());
    tokio::task::spawn_blocking(move || {
        let spec = entry.model_spec_override.as_deref();
        let loaded = match entry.task {
            Task::Asr => AsrModel::load(&entry.family, &entry.path, spec, &runtime).and_then(|m| {
                // A spec folder serves both models; a single spec file is the ASR model's.
                let vad_spec = spec.filter(|p| p.is_dir());
                let vad = match &entry.vad_model {
                    Some(v) => Some(Box::new(VadModel::load(
                        &entry.vad_family,
                        v,
                        vad_spec,
                        &runtime,
                    )?)),
                    None => None,
                };
                Ok(Loaded::Asr(Box::new(m), vad))
            }),
            Task::Tts => TtsModel::load(&entry.family, &entry.path, spec, &runtime)
                .map(|m| Loaded::Tts(Box::new(m))),
            _ => VadModel::load(&entry.family, &entry.path, spec, &runtime)
                .map(|m| Loaded::Vad(Box::new(m))),
        };
        loaded.map_err(|e| format!("model '{}': {}", entry.id, e.message_in(&field_of)))
    })
    .await
    .map_err(|e| format!("model '{id}': loading it panicked: {e}"))?
}

fn router(state: Arc<AppState>) -> Router {
    let v1 = Router::new()
        .route("/v1/models", get(list_models))
        .route("/v1/models/{id}", get(get_model))
        .route("/v1/tasks/run", post(run_task))
        .route("/v1/audio/transcriptions", post(transcriptions))
        .route("/v1/audio/speech", post(speech::speech))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            require_api_key,
        ));
    let mut app = Router::new()
        .route("/health", get(health))
        .merge(v1)
        .layer(DefaultBodyLimit::max(state.cfg.max_body_bytes))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            panic_response,
        ))
        .with_state(state.clone());
    if !state.cfg.cors_origins.is_empty() {
        // `*` is tower-http's "any" (a list holding it panics); the config check keeps
        // it the only entry and every other entry a valid origin.
        let origins = if state.cfg.cors_origins.iter().any(|o| o == "*") {
            AllowOrigin::any()
        } else {
            AllowOrigin::list(
                state
                    .cfg
                    .cors_origins
                    .iter()
                    .filter_map(|o| o.parse::<HeaderValue>().ok()),
            )
        };
        app = app.layer(
            tower_http::cors::CorsLayer::new()
                .allow_origin(origins)
                .allow_methods([Method::GET, Method::POST])
                .allow_headers([
                    axum::http::header::CONTENT_TYPE,
                    axum::http::header::AUTHORIZATION,
                ]),
        );
    }
    app
}

/// A handler's panic as the client sees it: a generic 500; the detail goes to the log.
fn panic_response(detail: Box<dyn std::any::Any + Send + 'static>) -> Response {
    eprintln!(
        "error: a request handler panicked: {}",
        panic_text(&*detail)
    );
    internal().into_response()
}

/// The message a panic carries, for the log.
fn panic_text(detail: &(dyn std::any::Any + Send)) -> String {
    detail
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| detail.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

/// The 500 every internal failure answers with; what went wrong is in the log only.
fn internal() -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal_error",
        "internal server error (the details are in the server log)",
    )
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    eprintln!("audiocpp_server: shutting down, finishing in-flight requests");
}

async fn require_api_key(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    req: Request,
    next: Next,
) -> Response {
    if let Some(key) = &state.api_key {
        let given = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token);
        if given != Some(key.as_str()) {
            // Read (and drop) the body first, up to the size limit and the body timeout,
            // so the client gets the 401 instead of a connection reset while it sends.
            let _ = tokio::time::timeout(
                Duration::from_millis(state.cfg.body_timeout_ms),
                axum::body::to_bytes(req.into_body(), state.cfg.max_body_bytes),
            )
            .await;
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_api_key",
                "missing or wrong API key (send Authorization: Bearer <key>)",
            )
            .into_response();
        }
    }
    next.run(req).await
}

/// The token of an `Authorization: Bearer <token>` header; the scheme name is
/// case-insensitive (RFC 9110), so `bearer` works too.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start())
}

async fn health(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    Json(
        json!({ "status": "ok", "version": audiocpp_engine::VERSION, "models": state.slots.len() }),
    )
}

/// One model as OpenAI's model object, with its family, task and load status.
fn model_object(state: &AppState, slot: &Slot) -> serde_json::Value {
    // A model running (or loading) holds its lock: say so instead of waiting for it.
    let status = match slot.model.try_lock().as_deref() {
        Ok(SlotState::Unloaded) => "not_loaded",
        Ok(SlotState::Ready(_)) => "ready",
        Ok(SlotState::Failed) => "failed",
        Err(_) => "busy",
    };
    json!({
        "id": slot.entry.id, "object": "model", "created": state.started_unix_s,
        "owned_by": "audiocpp", "family": slot.entry.family, "task": slot.entry.task,
        "status": status,
    })
}

async fn list_models(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let mut data = Vec::new();
    for slot in state.slots.values() {
        data.push(model_object(&state, slot));
    }
    Json(json!({ "object": "list", "data": data }))
}

async fn get_model(
    State(state): State<Arc<AppState>>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let slot = state.slots.get(&id).ok_or_else(|| model_not_found(&id))?;
    Ok(Json(model_object(&state, slot)))
}

fn model_not_found(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "model_not_found",
        format!("model '{id}' is not served here (see GET /v1/models)"),
    )
}

/// A request's audio and options, from multipart or JSON.
#[derive(Default)]
struct AudioRequest {
    model: Option<String>,
    audio: Option<Vec<u8>>,
    response_format: Option<String>,
    language: Option<String>,
    params: VadParamsPatch,
    probabilities: bool,
    /// `stream=true`: answer as server-sent events.
    stream: bool,
    /// `timestamp_granularities[]` values.
    granularities: Vec<String>,
}

/// VAD parameters a request may override.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct VadParamsPatch {
    threshold: Option<f32>,
    min_speech_duration_ms: Option<u32>,
    min_silence_duration_ms: Option<u32>,
    speech_pad_ms: Option<u32>,
    max_speech_duration_s: Option<f32>,
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
}

/// `req` back, unless its `Content-Length` says the body is over `limit`: then the caller
/// answers 413 before a byte of the body is read, and what the client still sends is read
/// and dropped in the background (at most `drain_bytes`, within [`DRAIN_TIME`]), so the
/// client sees the 413 instead of a connection reset in the middle of its upload.
pub(crate) fn unless_declared_over(
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
    let body = req.into_body();
    tokio::spawn(async move {
        let drain = axum::body::to_bytes(body, drain_bytes);
        let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
    });
    None
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
            granularities: Vec::new(),
        })
    } else {
        Err(ApiError::bad_request(
            "send multipart/form-data (file, model) or application/json (model, audio_base64)",
        ))
    }
}

/// How long the rest of a refused upload is read and dropped before the connection
/// closes.
const DRAIN_TIME: Duration = Duration::from_secs(5);

/// [`read_request`] bounded by `body_timeout_ms`: a client that trickles its body is
/// answered 408 instead of holding a connection and a buffer forever.
async fn read_request_within(
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

fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        "request body is larger than max_body_bytes",
    )
}

fn multipart_error(e: axum::extract::multipart::MultipartError) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        too_large()
    } else {
        ApiError::bad_request(e.body_text())
    }
}

use axum::extract::FromRequest;

fn slot<'a>(state: &'a AppState, req: &AudioRequest, task: Task) -> Result<&'a Slot, ApiError> {
    slot_by_id(state, req.model.as_deref(), task)
}

/// The served model a request's `model` field names, checked to do `task`.
fn slot_by_id<'a>(state: &'a AppState, id: Option<&str>, task: Task) -> Result<&'a Slot, ApiError> {
    let id = id.ok_or_else(|| ApiError::bad_param("model", "the 'model' field is required"))?;
    let slot = state.slots.get(id).ok_or_else(|| model_not_found(id))?;
    if slot.entry.task != task {
        return Err(ApiError::bad_request(format!(
            "model '{id}' does task '{}', not '{task}'",
            slot.entry.task
        )));
    }
    Ok(slot)
}

/// How the server's errors name an engine parameter
/// ([`audiocpp_engine::error::PARAMETERS`]): a request's JSON (or form) field, or a
/// server.json key; never a CLI flag.
pub(crate) fn field_of(parameter: &str) -> Option<String> {
    Some(match parameter {
        p if REQUEST_FIELDS.contains(&p) => format!("field '{p}'"),
        "audio" => "field 'file' (or 'audio_base64')".to_string(),
        "temperature" | "seed" | "max_frames" => format!("field 'options.{parameter}'"),
        "family"
        | "backend"
        | "device"
        | "threads"
        | "model_spec_override"
        | "max_audio_s"
        | "min_sample_rate_hz"
        | "max_speech_s" => format!("server.json key '{parameter}'"),
        _ => return None,
    })
}

/// The engine parameters that are request fields (the rest are server.json keys).
const REQUEST_FIELDS: &[&str] = &[
    "model",
    "language",
    "temperatures",
    "input",
    "voice",
    "speed",
    "instructions",
    "threshold",
    "min_speech_duration_ms",
    "min_silence_duration_ms",
    "speech_pad_ms",
    "max_speech_duration_s",
];

/// An engine error as the server answers it: a user error is a 400 in the server's
/// terms (fields, server.json keys), its `param` the first request field it names; any
/// other is logged and answered 500 without details.
pub(crate) fn engine_error(e: audiocpp_engine::EngineError) -> ApiError {
    if e.is_user_error() {
        let message = e.message_in(&field_of);
        let param = audiocpp_engine::error::parameters_named(&e.to_string())
            .into_iter()
            .find(|p| REQUEST_FIELDS.contains(p));
        ApiError {
            param,
            ..ApiError::bad_request(message)
        }
    } else {
        eprintln!("error: inference failed: {e}");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "inference_failed",
            "inference failed (the details are in the server log)",
        )
    }
}

fn decode_upload(
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

/// Takes a slot's model for one request: waits at most `busy_timeout_ms` for it (503
/// `server_busy`), loads it first if lazy, and refuses a failed one (503).
async fn acquire(
    state: &Arc<AppState>,
    slot: &Slot,
) -> Result<tokio::sync::OwnedMutexGuard<SlotState>, ApiError> {
    let busy = Duration::from_millis(state.cfg.busy_timeout_ms);
    let mut guard = tokio::time::timeout(busy, slot.model.clone().lock_owned())
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_busy",
                format!("model '{}' is busy; retry later", slot.entry.id),
            )
        })?;
    if matches!(*guard, SlotState::Unloaded) {
        *guard = match load(&slot.entry, &state.runtime).await {
            Ok(loaded) => SlotState::Ready(loaded),
            Err(e) => {
                eprintln!("error: {e}; the model is marked failed, the others keep serving");
                SlotState::Failed
            }
        };
    }
    if matches!(*guard, SlotState::Failed) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "model_load_failed",
            format!(
                "model '{}' failed to load (the reason is in the server log); fix it and restart the server",
                slot.entry.id
            ),
        ));
    }
    Ok(guard)
}

/// Runs `work` on a taken model ([`acquire`]) on the calling (blocking) thread; a panic
/// in it is logged, marks the model for a reload, and answers 500.
fn run_guarded<T>(
    guard: &mut SlotState,
    id: &str,
    work: impl FnOnce(&mut Loaded) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    let SlotState::Ready(loaded) = guard else {
        unreachable!("acquire returns ready models only");
    };
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(loaded)));
    run.unwrap_or_else(|detail| {
        // The model's state is unknown after a panic: load it afresh next time.
        eprintln!(
            "error: model '{id}' panicked: {}; it is reloaded on the next request",
            panic_text(&*detail)
        );
        *guard = SlotState::Unloaded;
        Err(internal())
    })
}

/// Runs `work` on a slot's model on a blocking thread, waiting at most
/// `busy_timeout_ms` for the model (503 `server_busy`) and loading it first if lazy.
/// Returns the result and the wall time in milliseconds.
async fn with_model<T, F>(state: &Arc<AppState>, slot: &Slot, work: F) -> Result<(T, f64), ApiError>
where
    T: Send + 'static,
    F: FnOnce(&mut Loaded) -> Result<T, ApiError> + Send + 'static,
{
    let mut guard = acquire(state, slot).await?;
    let started = Instant::now();
    let id = slot.entry.id.clone();
    let result = tokio::task::spawn_blocking(move || run_guarded(&mut guard, &id, work))
        .await
        .map_err(|e| {
            eprintln!("error: inference task failed: {e}");
            internal()
        })??;
    Ok((result, started.elapsed().as_secs_f64() * 1000.0))
}

/// Runs VAD on a slot's model.
async fn run_vad(
    state: &Arc<AppState>,
    slot: &Slot,
    audio: Vec<u8>,
    patch: VadParamsPatch,
) -> Result<(VadOutput, f64), ApiError> {
    let limits = state.cfg.audio_limits();
    with_model(state, slot, move |loaded| {
        let Loaded::Vad(model) = loaded else {
            return Err(ApiError::bad_request("this model does not do vad"));
        };
        let d = model.default_params();
        let params = VadParams {
            threshold: patch.threshold.unwrap_or(d.threshold),
            min_speech_duration_ms: patch
                .min_speech_duration_ms
                .unwrap_or(d.min_speech_duration_ms),
            min_silence_duration_ms: patch
                .min_silence_duration_ms
                .unwrap_or(d.min_silence_duration_ms),
            speech_pad_ms: patch.speech_pad_ms.unwrap_or(d.speech_pad_ms),
            max_speech_duration_s: patch.max_speech_duration_s.or(d.max_speech_duration_s),
            neg_threshold: d.neg_threshold,
        };
        let samples = decode_upload(&audio, model.sample_rate(), &limits)?;
        model.run_samples(&samples, &params).map_err(engine_error)
    })
    .await
}

/// Runs speech recognition on a slot's model.
async fn run_asr(
    state: &Arc<AppState>,
    slot: &Slot,
    audio: Vec<u8>,
    language: Option<String>,
) -> Result<(AsrOutput, f64), ApiError> {
    let limits = state.cfg.audio_limits();
    with_model(state, slot, move |loaded| {
        let Loaded::Asr(model, vad) = loaded else {
            return Err(ApiError::bad_request("this model does not do asr"));
        };
        let mut opts = model.default_options();
        if let Some(l) = language.filter(|l| !l.is_empty()) {
            opts.language = l;
        }
        let samples = decode_upload(&audio, model.sample_rate(), &limits)?;
        match vad {
            Some(vad) => {
                let params = vad.asr_chunking_params();
                model.run_samples_with_vad(&samples, &opts, vad, &params)
            }
            None => model.run_samples(&samples, &opts),
        }
        .map_err(engine_error)
    })
    .await
}

fn with_timing(mut resp: Response, wall_ms: f64, audio_s: f64) -> Response {
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("{wall_ms:.2}")) {
        h.insert("x-audiocpp-wall-ms", v);
    }
    if audio_s > 0.0 {
        if let Ok(v) = HeaderValue::from_str(&format!("{:.5}", wall_ms / 1000.0 / audio_s)) {
            h.insert("x-audiocpp-rtf", v);
        }
    }
    resp
}

async fn run_task(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    req: Request,
) -> Result<Response, ApiError> {
    let r = read_request_within(&state, &headers, req).await?;
    let slot = slot(&state, &r, Task::Vad)?;
    let audio = r
        .audio
        .ok_or_else(|| ApiError::bad_request("no audio: send a 'file' part or 'audio_base64'"))?;
    let (out, wall) = run_vad(&state, slot, audio, r.params).await?;
    let rate = out.sample_rate as f64;
    let segments: Vec<serde_json::Value> = out
        .segments
        .iter()
        .map(|s| json!({ "start": s.start as f64 / rate, "end": s.end as f64 / rate, "start_sample": s.start, "end_sample": s.end }))
        .collect();
    let mut body = json!({
        "model": slot.entry.id, "task": "vad", "family": out.family, "device": out.device,
        "duration": out.audio_seconds, "windows": out.probabilities.len(), "segments": segments,
    });
    if r.probabilities {
        body["probabilities"] = json!(out.probabilities);
    }
    Ok(with_timing(
        Json(body).into_response(),
        wall,
        out.audio_seconds,
    ))
}

async fn transcriptions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    req: Request,
) -> Result<Response, ApiError> {
    let r = read_request_within(&state, &headers, req).await?;
    let format = r.response_format.clone().unwrap_or_else(|| "json".into());
    if !["json", "text", "verbose_json", "srt", "vtt"].contains(&format.as_str()) {
        return Err(ApiError::bad_request(format!(
            "response_format '{format}' is not one of json, text, verbose_json, srt, vtt"
        )));
    }
    if let Some(g) = r.granularities.iter().find(|g| *g != "segment") {
        return Err(ApiError::bad_request(format!(
            "timestamp_granularities '{g}' is not supported: this server gives segment timestamps only (response_format=verbose_json)"
        )));
    }
    if r.stream && !["json", "text"].contains(&format.as_str()) {
        return Err(ApiError::bad_request(format!(
            "stream=true is for response_format json or text, not '{format}'"
        )));
    }
    let slot = slot(&state, &r, Task::Asr)?;
    let audio = r
        .audio
        .ok_or_else(|| ApiError::bad_request("no audio: send a 'file' part or 'audio_base64'"))?;
    // Every format decodes alike (timestamp tokens, every window read); the formats
    // differ only in what they show.
    let (out, wall) = run_asr(&state, slot, audio, r.language.clone()).await?;
    let resp = match format.as_str() {
        _ if r.stream => transcript_events(&out),
        "text" => (
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; charset=utf-8",
            )],
            format!("{}\n", out.text),
        )
            .into_response(),
        "srt" | "vtt" => (
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; charset=utf-8",
            )],
            subtitles(&out, format == "vtt"),
        )
            .into_response(),
        "verbose_json" => {
            let segments: Vec<serde_json::Value> = out
                .segments
                .iter()
                .enumerate()
                .map(|(i, s)| json!({
                    "id": i, "seek": s.seek, "start": s.start, "end": s.end, "text": s.text,
                    "tokens": s.tokens, "temperature": s.temperature, "avg_logprob": s.avg_logprob,
                    "compression_ratio": s.compression_ratio, "no_speech_prob": s.no_speech_prob,
                }))
                .collect();
            Json(json!({
                "task": "transcribe", "language": languages::name(&out.language),
                "duration": out.audio_seconds, "text": out.text, "segments": segments,
            }))
            .into_response()
        }
        _ => Json(json!({ "text": out.text })).into_response(),
    };
    Ok(with_timing(resp, wall, out.audio_seconds))
}

/// A finished transcript as the server-sent events OpenAI's streaming transcription
/// sends: one `transcript.text.delta` per segment, then `transcript.text.done`.
fn transcript_events(out: &AsrOutput) -> Response {
    let mut body = String::new();
    for seg in &out.segments {
        let e = json!({ "type": "transcript.text.delta", "delta": seg.text, "logprobs": null });
        body.push_str(&format!("data: {e}\n\n"));
    }
    let done = json!({ "type": "transcript.text.done", "text": out.text, "logprobs": null });
    body.push_str(&format!("data: {done}\n\n"));
    (
        [
            (axum::http::header::CONTENT_TYPE, "text/event-stream"),
            (axum::http::header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// SRT or WebVTT cues, one per segment.
fn subtitles(out: &AsrOutput, vtt: bool) -> String {
    let stamp = |t: f64| {
        let ms = (t * 1000.0).round() as u64;
        let (h, m, s, f) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
        if vtt {
            format!("{h:02}:{m:02}:{s:02}.{f:03}")
        } else {
            format!("{h:02}:{m:02}:{s:02},{f:03}")
        }
    };
    let mut text = if vtt {
        "WEBVTT\n\n".to_string()
    } else {
        String::new()
    };
    for (i, seg) in out.segments.iter().enumerate() {
        if !vtt {
            text.push_str(&format!("{}\n", i + 1));
        }
        text.push_str(&format!(
            "{} --> {}\n{}\n\n",
            stamp(seg.start),
            stamp(seg.end),
            seg.text.trim()
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use audiocpp_engine::EngineError;

    #[test]
    fn engine_errors_name_fields_and_keys_never_flags() {
        let e = engine_error(EngineError::Usage(
            "unknown parameter 'language' 'xx': this model knows 99 language codes".into(),
        ));
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.param, Some("language"));
        assert_eq!(
            e.message,
            "unknown field 'language' 'xx': this model knows 99 language codes"
        );
        let e = engine_error(EngineError::Usage(
            "the speech passed the limit; raise parameter 'max_speech_s'".into(),
        ));
        assert_eq!(e.param, None, "a config key is no request field");
        assert!(e.message.ends_with("raise server.json key 'max_speech_s'"));
        for p in audiocpp_engine::error::PARAMETERS {
            let text = format!("parameter '{p}' is wrong");
            let spelled = audiocpp_engine::error::spell_parameters(&text, &field_of);
            assert!(!spelled.contains("--"), "{spelled}");
        }
    }
}
