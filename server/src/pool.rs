//! The served models: one slot per config entry, loaded at start or on first use (lazy),
//! taken by one request at a time (a busy model answers 503 `server_busy` after
//! `busy_timeout_ms`), run on a blocking thread, and reloaded after a panic.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use audiocpp_engine::asr::AsrModel;
use audiocpp_engine::backend::RuntimeOptions;
use audiocpp_engine::task::Task;
use audiocpp_engine::tts::TtsModel;
use audiocpp_engine::vad::VadModel;
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use tokio::sync::Mutex;

use crate::config::ModelEntry;
use crate::error::{field_of, internal, panic_text, ApiError};
use crate::AppState;

/// An engine model of one task.
pub enum Loaded {
    /// Voice activity detection.
    Vad(Box<VadModel>),
    /// Speech recognition, with the VAD model that cuts its audio when configured.
    Asr(Box<AsrModel>, Option<Box<VadModel>>),
    /// Speech synthesis.
    Tts(Box<TtsModel>),
}

/// Where a served model stands.
pub enum SlotState {
    /// Lazy and not requested yet.
    Unloaded,
    /// Ready to run.
    Ready(Loaded),
    /// Loading failed (the reason is in the log); requests get 503 until a restart.
    Failed,
}

/// A served model: its config entry and its state.
pub struct Slot {
    pub entry: ModelEntry,
    pub model: Arc<Mutex<SlotState>>,
}

/// Makes a slot for every configured model, loading the ones that are not lazy; a model
/// that fails to load is logged and marked failed. Errors when none could be loaded.
pub async fn slots(
    models: &[ModelEntry],
    runtime: &RuntimeOptions,
) -> Result<BTreeMap<String, Slot>, String> {
    let mut slots = BTreeMap::new();
    let mut failed = 0;
    for entry in models {
        let model = if entry.lazy {
            SlotState::Unloaded
        } else {
            match load(entry, runtime).await {
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
    if failed == models.len() {
        return Err("no model could be loaded (see the errors above)".into());
    }
    Ok(slots)
}

/// Loads a configured model (and an ASR model's VAD model) on a blocking thread.
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
                        &runtime.for_vad(entry.vad_backend.parse()?),
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

/// The 404 for a model id the server does not serve.
pub fn model_not_found(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "model_not_found",
        format!("model '{id}' is not served here (see GET /v1/models)"),
    )
}

/// The served model a request's `model` field names, checked to do `task`.
pub fn slot_by_id<'a>(
    state: &'a AppState,
    id: Option<&str>,
    task: Task,
) -> Result<&'a Slot, ApiError> {
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

/// Takes a slot's model for one request: waits at most `busy_timeout_ms` for it (503
/// `server_busy`), loads it first if lazy, and refuses a failed one (503).
pub async fn acquire(
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
pub fn run_guarded<T>(
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
pub async fn with_model<T, F>(
    state: &Arc<AppState>,
    slot: &Slot,
    work: F,
) -> Result<(T, f64), ApiError>
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

/// `resp` with the timing headers of a run ([`with_model`]'s wall time): the wall time
/// in milliseconds and, for audio of a known length, the real-time factor.
pub fn with_timing(mut resp: Response, wall_ms: f64, audio_s: f64) -> Response {
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
