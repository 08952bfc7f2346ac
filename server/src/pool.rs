//! The served models: one slot per config entry with `parallel` workers, made at start
//! or on first use (lazy): the first loaded from the file, the others forked from it
//! (sharing its weights). A request takes any free worker for its whole run (503
//! `server_busy` when none frees up within `busy_timeout_ms`), runs on a blocking
//! thread, and a worker that panicked is rebuilt alone before its next request.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use audiocpp_engine::asr::AsrModel;
use audiocpp_engine::backend::RuntimeOptions;
use audiocpp_engine::task::Task;
use audiocpp_engine::tts::TtsModel;
use audiocpp_engine::vad::VadModel;
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use tokio::sync::{Mutex, OwnedMutexGuard, OwnedSemaphorePermit, Semaphore};

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

/// Where one worker of a served model stands.
pub enum SlotState {
    /// Not made yet (a lazy model not requested yet).
    Unloaded,
    /// Ready to run.
    Ready(Loaded),
    /// It panicked: its state is unknown, so it is rebuilt before its next request
    /// (forked from it where the family forks: the weights are read-only and stay good).
    Stale(Loaded),
    /// Making it failed (the reason is in the log); requests get 503 until a restart.
    Failed,
}

/// A served model: its config entry and its workers.
pub struct Slot {
    pub entry: ModelEntry,
    /// One per request run at once (`parallel`).
    workers: Vec<Arc<Mutex<SlotState>>>,
    /// One permit per usable worker: a request holds one while it holds a worker.
    free: Arc<Semaphore>,
    /// Held while the workers are made; true once that was tried.
    made: Mutex<bool>,
    /// Workers that run requests: `parallel` until they are made, then those that
    /// could be (a family that does not fork serves with one).
    usable: AtomicUsize,
    /// Permits of workers that could not be made, still held by requests.
    excess: AtomicUsize,
    /// Requests waiting to be decoded together (`batch` above 1).
    pub queue: Arc<crate::batch::Queue>,
}

/// A worker taken for one request ([`acquire`]); dropping it frees the worker.
pub struct Taken {
    // Dropped first: the worker is free again before its permit is given back.
    worker: OwnedMutexGuard<SlotState>,
    _permit: OwnedSemaphorePermit,
}

impl Deref for Taken {
    type Target = SlotState;
    fn deref(&self) -> &SlotState {
        &self.worker
    }
}

impl DerefMut for Taken {
    fn deref_mut(&mut self) -> &mut SlotState {
        &mut self.worker
    }
}

impl Slot {
    /// A slot of `entry` with `n` unmade workers.
    fn new(entry: &ModelEntry, n: usize) -> Self {
        Slot {
            entry: entry.clone(),
            workers: (0..n)
                .map(|_| Arc::new(Mutex::new(SlotState::Unloaded)))
                .collect(),
            free: Arc::new(Semaphore::new(n)),
            made: Mutex::new(false),
            usable: AtomicUsize::new(n),
            excess: AtomicUsize::new(0),
            queue: Arc::default(),
        }
    }

    /// Requests it runs at once (`parallel`, or fewer when workers could not be made).
    pub fn parallel(&self) -> usize {
        self.usable.load(Ordering::Relaxed)
    }

    /// Its status for `GET /v1/models`: `not_loaded`, `failed` (every worker), `busy`
    /// (every worker running or being made) or `ready`.
    pub fn status(&self) -> &'static str {
        if self.made.try_lock().is_err() {
            // The workers are being made (or a request is checking that they are).
            return "busy";
        }
        let mut locked = false;
        for w in &self.workers {
            match w.try_lock().as_deref() {
                Ok(SlotState::Ready(_) | SlotState::Stale(_)) => return "ready",
                Ok(SlotState::Unloaded) => return "not_loaded",
                Ok(SlotState::Failed) => {}
                Err(_) => locked = true,
            }
        }
        if locked {
            "busy"
        } else {
            "failed"
        }
    }

    /// Makes the workers once (the caller holds `made`): the first loaded, the others
    /// forked from it; those that could not be made are marked failed and their
    /// permits dropped, so requests wait only for the ones that run.
    async fn make_workers(&self, runtime: &RuntimeOptions) -> Result<(), String> {
        let made = make(&self.entry, runtime, self.workers.len()).await;
        let (models, error) = match made {
            Ok(models) => (models, None),
            Err(e) => (Vec::new(), Some(e)),
        };
        let usable = models.len();
        let mut models = models.into_iter();
        for w in &self.workers {
            // Free: no request takes a worker before `made` is true.
            *w.lock().await = models.next().map_or(SlotState::Failed, SlotState::Ready);
        }
        if usable > 0 {
            // Permits held by requests waiting for `made` cannot be forgotten here:
            // what is left over, `excess`, those requests forget (see `acquire`).
            let missing = self.workers.len() - usable;
            let forgotten = self.free.forget_permits(missing);
            self.excess.store(missing - forgotten, Ordering::Relaxed);
            self.usable.store(usable, Ordering::Relaxed);
        }
        error.map_or(Ok(()), Err)
    }
}

/// Makes a slot for every configured model with `entry.workers(threads)` workers,
/// loading the ones that are not lazy; a model that fails to load is logged and marked
/// failed. Errors when none could be loaded.
pub async fn slots(
    models: &[ModelEntry],
    runtime: &RuntimeOptions,
) -> Result<BTreeMap<String, Slot>, String> {
    let mut slots = BTreeMap::new();
    let mut failed = 0;
    for entry in models {
        let slot = Slot::new(entry, entry.workers(runtime.threads));
        if !entry.lazy {
            *slot.made.lock().await = true;
            if let Err(e) = slot.make_workers(runtime).await {
                eprintln!("error: {e}; serving the other models");
                failed += 1;
            }
        }
        slots.insert(entry.id.clone(), slot);
    }
    if failed == models.len() {
        return Err("no model could be loaded (see the errors above)".into());
    }
    Ok(slots)
}

/// `n` workers of a configured model on a blocking thread: one loaded ([`load`]), the
/// others forked from it. A fork that fails is logged and the workers made so far
/// serve; an error only when none could be made.
async fn make(
    entry: &ModelEntry,
    runtime: &RuntimeOptions,
    n: usize,
) -> Result<Vec<Loaded>, String> {
    let id = entry.id.clone();
    let (entry, runtime) = (entry.clone(), runtime.clone());
    tokio::task::spawn_blocking(move || {
        let first = load(&entry, &runtime)?;
        let mut made = vec![first];
        while made.len() < n {
            match fork(&made[0], &entry, &runtime) {
                Ok(w) => made.push(w),
                Err(e) => {
                    eprintln!("error: {e}; it serves with {} of {n} workers", made.len());
                    break;
                }
            }
        }
        Ok(made)
    })
    .await
    .map_err(|e| format!("model '{id}': loading it panicked: {e}"))?
}

/// Loads a configured model (and an ASR model's VAD model), on the calling thread.
fn load(entry: &ModelEntry, runtime: &RuntimeOptions) -> Result<Loaded, String> {
    let spec = entry.model_spec_override.as_deref();
    let loaded = match entry.task {
        Task::Asr => AsrModel::load(&entry.family, &entry.path, spec, runtime)
            .and_then(|m| Ok(Loaded::Asr(Box::new(m), load_vad(entry, runtime)?))),
        Task::Tts => TtsModel::load(&entry.family, &entry.path, spec, runtime)
            .map(|m| Loaded::Tts(Box::new(m))),
        _ => VadModel::load(&entry.family, &entry.path, spec, runtime)
            .map(|m| Loaded::Vad(Box::new(m))),
    };
    loaded.map_err(|e| engine_error(entry, e))
}

/// An ASR model's VAD model, when it has one (small: every worker loads its own).
fn load_vad(
    entry: &ModelEntry,
    runtime: &RuntimeOptions,
) -> audiocpp_engine::error::Result<Option<Box<VadModel>>> {
    // A spec folder serves both models; a single spec file is the ASR model's.
    let vad_spec = entry.model_spec_override.as_deref().filter(|p| p.is_dir());
    Ok(match &entry.vad_model {
        Some(v) => Some(Box::new(VadModel::load(
            &entry.vad_family,
            v,
            vad_spec,
            &runtime.for_vad(entry.vad_backend.parse()?),
        )?)),
        None => None,
    })
}

/// One more worker like `model`, sharing its weights: an ASR model forked with a VAD
/// model of its own, a TTS model forked (an error for a family that does not fork).
/// A VAD model is loaded again (config checks keep those at one worker).
fn fork(model: &Loaded, entry: &ModelEntry, runtime: &RuntimeOptions) -> Result<Loaded, String> {
    match model {
        Loaded::Asr(m, _) => m
            .fork()
            .and_then(|f| Ok(Loaded::Asr(Box::new(f), load_vad(entry, runtime)?))),
        Loaded::Tts(m) => m.fork().map(|f| Loaded::Tts(Box::new(f))),
        Loaded::Vad(_) => return load(entry, runtime),
    }
    .map_err(|e| engine_error(entry, e))
}

/// A worker that panicked made afresh: forked from it (its weights are read-only and
/// stay good), or loaded again from the file when its family does not fork.
fn rebuild(old: &Loaded, entry: &ModelEntry, runtime: &RuntimeOptions) -> Result<Loaded, String> {
    fork(old, entry, runtime).or_else(|_| load(entry, runtime))
}

/// An engine error as one line naming the model.
fn engine_error(entry: &ModelEntry, e: audiocpp_engine::error::EngineError) -> String {
    format!("model '{}': {}", entry.id, e.message_in(&field_of))
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

/// A permit to take one of `slot`'s workers, waiting until `deadline` (503
/// `server_busy` after it).
async fn take_permit(
    slot: &Slot,
    deadline: tokio::time::Instant,
) -> Result<OwnedSemaphorePermit, ApiError> {
    tokio::time::timeout_at(deadline, slot.free.clone().acquire_owned())
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_busy",
                format!("model '{}' is busy; retry later", slot.entry.id),
            )
        })?
        .map_err(|_| internal())
}

/// Takes a free worker of a slot for one request: waits at most `busy_timeout_ms` for
/// one (503 `server_busy`), makes the workers first if lazy, rebuilds one that
/// panicked, and refuses a failed one (503).
pub async fn acquire(state: &Arc<AppState>, slot: &Slot) -> Result<Taken, ApiError> {
    let busy = Duration::from_millis(state.cfg.busy_timeout_ms);
    let deadline = tokio::time::Instant::now() + busy;
    let mut permit = take_permit(slot, deadline).await?;
    {
        let mut made = slot.made.lock().await;
        if !*made {
            *made = true;
            if let Err(e) = slot.make_workers(&state.runtime).await {
                eprintln!("error: {e}; the model is marked failed, the others keep serving");
            }
        }
    }
    // Workers that could not be made give up their permits: requests that got one
    // while the workers were made forget it and wait for another.
    while slot
        .excess
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |e| e.checked_sub(1))
        .is_ok()
    {
        permit.forget();
        permit = take_permit(slot, deadline).await?;
    }
    // The permit leaves at least one usable worker free; a failed one is taken only
    // when every worker failed.
    let mut taken = None;
    for w in &slot.workers {
        if let Ok(g) = w.clone().try_lock_owned() {
            let failed = matches!(*g, SlotState::Failed);
            if taken.is_none() || !failed {
                taken = Some(g);
            }
            if !failed {
                break;
            }
        }
    }
    let mut worker = taken.ok_or_else(internal)?;
    if matches!(*worker, SlotState::Stale(_)) {
        let SlotState::Stale(old) = std::mem::replace(&mut *worker, SlotState::Unloaded) else {
            unreachable!("matched above");
        };
        let (entry, runtime) = (slot.entry.clone(), state.runtime.clone());
        let rebuilt = tokio::task::spawn_blocking(move || rebuild(&old, &entry, &runtime))
            .await
            .unwrap_or_else(|e| Err(format!("rebuilding it panicked: {e}")));
        *worker = match rebuilt {
            Ok(w) => SlotState::Ready(w),
            Err(e) => {
                eprintln!("error: {e}; the worker is marked failed, the others keep serving");
                SlotState::Failed
            }
        };
    }
    if matches!(*worker, SlotState::Failed | SlotState::Unloaded) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "model_load_failed",
            format!(
                "model '{}' failed to load (the reason is in the server log); fix it and restart the server",
                slot.entry.id
            ),
        ));
    }
    Ok(Taken {
        worker,
        _permit: permit,
    })
}

/// Runs `work` on a taken worker ([`acquire`]) on the calling (blocking) thread; a
/// panic in it is logged, marks the worker for a rebuild, and answers 500.
pub fn run_guarded<T>(
    guard: &mut SlotState,
    id: &str,
    work: impl FnOnce(&mut Loaded) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    let SlotState::Ready(loaded) = guard else {
        unreachable!("acquire returns ready workers only");
    };
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(loaded)));
    run.unwrap_or_else(|detail| {
        // The worker's state is unknown after a panic: rebuild it before its next run.
        eprintln!(
            "error: model '{id}' panicked: {}; the worker is rebuilt on its next request",
            panic_text(&*detail)
        );
        if let SlotState::Ready(l) = std::mem::replace(guard, SlotState::Unloaded) {
            *guard = SlotState::Stale(l);
        }
        Err(internal())
    })
}

/// Runs `work` on a free worker of a slot on a blocking thread, waiting at most
/// `busy_timeout_ms` for one (503 `server_busy`) and loading the model first if lazy.
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
