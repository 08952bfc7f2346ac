//! The voices API: `POST /v1/audio/voices` clones a voice from a reference clip with a
//! served `tts` model that clones (a Qwen3-TTS Base model), or names a blend of a
//! Kokoro model's preset voices (`blend`), and stores it (`voice_store`),
//! `GET /v1/audio/voices` lists each model's preset voices and stored
//! voices, `DELETE /v1/audio/voices/{id}` deletes one; `POST /v1/audio/speech` speaks
//! in a stored voice by its id. Storing data, it needs an API key (403 without one) and
//! server.json's `voices_dir` (404 without it).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use audiocpp_engine::task::Task;
use audiocpp_engine::tts::TtsModel;
use audiocpp_engine::EngineError;
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequest, Multipart, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::body::{multipart_error, too_large, unless_declared_over};
use crate::error::{engine_error, field_of, internal, ApiError};
use crate::pool::{acquire, slot_by_id, with_model, Loaded, Slot, SlotState};
use crate::voice_store::{CreateError, VoiceData, VoiceMeta, VoiceStore};
use crate::AppState;

/// The longest voice name, in characters.
pub const MAX_NAME_CHARS: usize = 64;

/// The longest blend, in characters: eight voices with their weights fit many times.
pub const MAX_BLEND_CHARS: usize = 256;

/// The families whose voices blend (`voice: "af_heart:0.7+af_bella:0.3"`).
const BLENDING_FAMILIES: &[&str] = &["kokoro"];

/// The request fields a clone's inputs came in, for errors that name them.
pub struct CloneFields {
    /// The reference clip.
    pub file: &'static str,
    /// Its transcript.
    pub text: &'static str,
    /// The switch that clones from the speaker embedding alone.
    pub x_vector_only: &'static str,
}

/// The fields of `POST /v1/audio/voices`.
pub const FORM_FIELDS: CloneFields = CloneFields {
    file: "file",
    text: "text",
    x_vector_only: "x_vector_only",
};

/// The store, when this server may use it: 403 without an API key, 404 without
/// `voices_dir`.
pub fn store_of(state: &AppState) -> Result<MutexGuard<'_, VoiceStore>, ApiError> {
    let store = allowed(state)?;
    // A panic while the lock was held leaves the index as it was before the change.
    Ok(store.lock().unwrap_or_else(|p| p.into_inner()))
}

/// The store's lock, when this server may use it ([`store_of`]'s checks).
fn allowed(state: &AppState) -> Result<&Mutex<VoiceStore>, ApiError> {
    if state.api_key.is_none() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "voices_need_api_key",
            "stored voices are off: this server has no API key, and the voices API stores data; set api_key in server.json (or AUDIOCPP_API_KEY) and restart",
        ));
    }
    state.voices.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "voices_not_configured",
            "this server stores no voices: set voices_dir in server.json and restart",
        )
    })
}

/// Runs `work` on the store on a blocking thread (it touches the disk).
async fn on_store<T: Send + 'static>(
    state: &Arc<AppState>,
    work: impl FnOnce(&mut VoiceStore) -> T + Send + 'static,
) -> Result<T, ApiError> {
    allowed(state)?;
    let state = state.clone();
    tokio::task::spawn_blocking(move || store_of(&state).map(|mut s| work(&mut s)))
        .await
        .map_err(|e| {
            eprintln!("error: voice store task failed: {e}");
            internal()
        })?
}

/// A stored voice as the API shows it.
fn voice_object(m: &VoiceMeta) -> Value {
    let mut v = json!({ "id": m.id, "object": "voice", "name": m.name, "model": m.model, "created": m.created });
    if let Some(b) = &m.blend {
        v["blend"] = json!(b);
    }
    v
}

/// The form of `POST /v1/audio/voices`.
#[derive(Default)]
struct VoiceForm {
    file: Option<Vec<u8>>,
    text: Option<String>,
    name: Option<String>,
    model: Option<String>,
    x_vector_only: Option<String>,
    blend: Option<String>,
}

/// The JSON form of `POST /v1/audio/voices`, which stores a blend (no clip to send).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BlendBody {
    name: Option<String>,
    model: Option<String>,
    blend: Option<String>,
}

/// Reads the multipart form within `max_body_bytes` and `body_timeout_ms`.
async fn read_form(
    state: &AppState,
    headers: &HeaderMap,
    req: Request,
) -> Result<VoiceForm, ApiError> {
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let json = content_type.starts_with("application/json");
    if !json && !content_type.starts_with("multipart/form-data") {
        return Err(ApiError::bad_request(
            "send multipart/form-data: file (the reference clip), text (what it says), name, model; or, for a blend of a model's voices, JSON or a form with name, model, blend",
        ));
    }
    let limit = state.cfg.max_body_bytes;
    let req =
        unless_declared_over(headers, req, limit, limit.saturating_mul(4)).ok_or_else(too_large)?;
    let read = async {
        if json {
            return read_blend_json(req, limit).await;
        }
        let mut mp = Multipart::from_request(req, &())
            .await
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let mut form = VoiceForm::default();
        while let Some(field) = mp.next_field().await.map_err(multipart_error)? {
            let name = field.name().unwrap_or_default().to_string();
            if name == "file" {
                form.file = Some(field.bytes().await.map_err(multipart_error)?.to_vec());
                continue;
            }
            let slot = match name.as_str() {
                "text" => &mut form.text,
                "name" => &mut form.name,
                "model" => &mut form.model,
                "x_vector_only" => &mut form.x_vector_only,
                "blend" => &mut form.blend,
                _ => continue,
            };
            *slot = Some(field.text().await.map_err(multipart_error)?);
        }
        Ok(form)
    };
    tokio::time::timeout(Duration::from_millis(state.cfg.body_timeout_ms), read)
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

/// Reads a JSON body of `POST /v1/audio/voices` (a blend: `name`, `model`, `blend`) of
/// at most `limit` bytes.
async fn read_blend_json(req: Request, limit: usize) -> Result<VoiceForm, ApiError> {
    let bytes = axum::body::to_bytes(req.into_body(), limit)
        .await
        .map_err(|_| too_large())?;
    let b: BlendBody = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::bad_request(format!(
            "invalid JSON body: {e}; a JSON body stores a blend (name, model, blend); a clone is sent as multipart/form-data"
        ))
    })?;
    Ok(VoiceForm {
        name: b.name,
        model: b.model,
        blend: b.blend,
        ..VoiceForm::default()
    })
}

/// A checked voice name: 1 to [`MAX_NAME_CHARS`] letters, digits, spaces, `-`, `_`,
/// `.`, not blank.
fn check_name(name: Option<String>) -> Result<String, ApiError> {
    let name = name.ok_or_else(|| ApiError::bad_param("name", "the 'name' field is required"))?;
    let chars = name.chars().count();
    if name.trim().is_empty()
        || chars > MAX_NAME_CHARS
        || !name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_' | '.'))
    {
        return Err(ApiError::bad_param(
            "name",
            format!("name '{}' is not a voice name: give 1 to {MAX_NAME_CHARS} letters, digits, spaces, '-', '_' or '.'", name.escape_debug()),
        ));
    }
    Ok(name)
}

/// A true/false form field.
fn flag(value: Option<&str>, field: &'static str) -> Result<bool, ApiError> {
    match value {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(v) => Err(ApiError::bad_param(
            field,
            format!("{field} is 'true' or 'false', not '{}'", v.escape_debug()),
        )),
    }
}

/// The voice file `model` makes from the clip `clip` (an audio file's bytes) and its
/// transcript, decoded within `limits`; errors name the request's `fields`.
pub fn clone_voice(
    model: &mut TtsModel,
    clip: &[u8],
    text: Option<&str>,
    x_vector_only: bool,
    limits: &audiocpp_engine::audio::AudioLimits,
    fields: &CloneFields,
) -> Result<Vec<u8>, ApiError> {
    let audio =
        audiocpp_engine::audio::from_bytes(clip, model.sample_rate(), limits).map_err(|e| {
            ApiError::bad_param(
                fields.file,
                format!(
                    "field '{}': cannot decode audio: {}",
                    fields.file,
                    audiocpp_engine::error::spell_parameters(&e, &field_of)
                ),
            )
        })?;
    let voice = model
        .clone_voice(audio, text, x_vector_only)
        .map_err(|e| clone_error(e, fields))?;
    if voice.len() > audiocpp_engine::tts::MAX_VOICE_FILE_BYTES {
        eprintln!("error: the engine made a voice of {} bytes", voice.len());
        return Err(internal());
    }
    Ok(voice)
}

/// A failed clone as the server answers it, naming the field at fault.
fn clone_error(e: EngineError, fields: &CloneFields) -> ApiError {
    if !e.is_user_error() {
        return engine_error(e);
    }
    let message = e.message_in(&field_of);
    if message.contains("parameter 'ref_text'") {
        let message = message
            .replace("parameter 'ref_text'", &format!("field '{}'", fields.text))
            .replace(
                "(x_vector_only)",
                &format!("({}: true)", fields.x_vector_only),
            );
        return ApiError::bad_param(fields.text, message);
    }
    if message.contains("does not clone voices") {
        return ApiError::bad_param("model", format!("field 'model': {message}"));
    }
    ApiError::bad_param(fields.file, format!("field '{}': {message}", fields.file))
}

/// The 409 when `max` voices are stored.
fn full(max: usize) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "too_many_voices",
        format!("{max} voices are stored, the most this server keeps (max_voices); delete one (DELETE /v1/audio/voices/ID) or raise max_voices"),
    )
}

/// `POST /v1/audio/voices`.
pub async fn create_voice(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    req: Request,
) -> Result<Json<Value>, ApiError> {
    let refusal = match store_of(&state) {
        Ok(store) => (store.len() >= store.max()).then(|| full(store.max())),
        Err(e) => Some(e),
    };
    if let Some(e) = refusal {
        // Read (and drop) the upload first, as the API key check does, so the client
        // gets the answer instead of a connection reset while it sends.
        let _ = tokio::time::timeout(
            Duration::from_millis(state.cfg.body_timeout_ms),
            axum::body::to_bytes(req.into_body(), state.cfg.max_body_bytes),
        )
        .await;
        return Err(e);
    }
    let form = read_form(&state, &headers, req).await?;
    let name = check_name(form.name)?;
    let slot = slot_by_id(&state, form.model.as_deref(), Task::Tts)?;
    if let Some(blend) = form.blend {
        if form.file.is_some() || form.text.is_some() || form.x_vector_only.is_some() {
            return Err(ApiError::bad_param(
                "blend",
                "blend mixes the model's preset voices; file, text and x_vector_only clone a voice from a clip: give one or the other",
            ));
        }
        let blend = check_blend(&state, slot, blend).await?;
        let model = slot.entry.id.clone();
        return store(&state, move |s| {
            s.create(&name, &model, VoiceData::Blend(&blend))
        })
        .await;
    }
    let x_vector_only = flag(form.x_vector_only.as_deref(), "x_vector_only")?;
    let clip = form.file.ok_or_else(|| {
        ApiError::bad_param("file", "the 'file' field (the reference clip) is required")
    })?;
    let limits = state.cfg.audio_limits();
    let text = form.text;
    let (voice, _) = with_model(&state, slot, move |loaded| {
        let Loaded::Tts(model) = loaded else {
            return Err(ApiError::bad_request("this model does not do tts"));
        };
        clone_voice(
            model,
            &clip,
            text.as_deref(),
            x_vector_only,
            &limits,
            &FORM_FIELDS,
        )
    })
    .await?;
    let model = slot.entry.id.clone();
    store(&state, move |s| {
        s.create(&name, &model, VoiceData::Cloned(&voice))
    })
    .await
}

/// Stores a voice with `create` and answers with it.
async fn store(
    state: &Arc<AppState>,
    create: impl FnOnce(&mut VoiceStore) -> Result<VoiceMeta, CreateError> + Send + 'static,
) -> Result<Json<Value>, ApiError> {
    match on_store(state, create).await? {
        Ok(meta) => Ok(Json(voice_object(&meta))),
        Err(CreateError::Full(max)) => Err(full(max)),
        Err(CreateError::Io(e)) => {
            eprintln!("error: {e}");
            Err(internal())
        }
    }
}

/// Checks a blend for `slot`'s model: a family whose voices blend, at most
/// [`MAX_BLEND_CHARS`], and every voice one of the model's with a weight above 0 (the
/// engine's check, the model loaded if lazy). Answers the blend trimmed; errors name
/// the field `blend`.
async fn check_blend(
    state: &Arc<AppState>,
    slot: &Slot,
    blend: String,
) -> Result<String, ApiError> {
    let family = &slot.entry.family;
    if !BLENDING_FAMILIES.contains(&family.as_str()) {
        return Err(ApiError::bad_param(
            "blend",
            format!(
                "model '{}' (family {family}) does not blend voices; a Kokoro model does",
                slot.entry.id
            ),
        ));
    }
    let blend = blend.trim().to_string();
    let chars = blend.chars().count();
    if chars > MAX_BLEND_CHARS {
        return Err(ApiError::bad_param(
            "blend",
            format!("blend is {chars} characters, over the limit of {MAX_BLEND_CHARS}"),
        ));
    }
    let checked = blend.clone();
    with_model(state, slot, move |loaded| {
        let Loaded::Tts(model) = loaded else {
            return Err(ApiError::bad_request("this model does not do tts"));
        };
        model.check_voice(&checked).map_err(|e| {
            let message = e
                .message_in(&field_of)
                .replace("field 'voice'", "field 'blend'");
            ApiError::bad_param("blend", message)
        })
    })
    .await?;
    Ok(blend)
}

/// The query of `GET /v1/audio/voices`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only this model's voices.
    model: Option<String>,
}

/// `GET /v1/audio/voices`: per served `tts` model (or the one `model` names), its
/// preset voices (loading a lazy model) and its stored voices.
pub async fn list_voices(
    State(state): State<Arc<AppState>>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    allowed(&state)?;
    let Query(q) = query.map_err(|e| {
        ApiError::bad_request(format!(
            "{}; the only query parameter is model=ID",
            e.body_text()
        ))
    })?;
    let slots: Vec<&Slot> = match q.model.as_deref() {
        Some(id) => vec![slot_by_id(&state, Some(id), Task::Tts)?],
        None => state
            .slots
            .values()
            .filter(|s| s.entry.task == Task::Tts)
            .collect(),
    };
    let mut data = Vec::new();
    for slot in slots {
        let presets = {
            let guard = acquire(&state, slot).await?;
            match &*guard {
                SlotState::Ready(Loaded::Tts(m)) => m.voices(),
                _ => Vec::new(),
            }
        };
        let stored: Vec<Value> = store_of(&state)?
            .list(Some(&slot.entry.id))
            .iter()
            .map(voice_object)
            .collect();
        data.push(json!({ "model": slot.entry.id, "presets": presets, "voices": stored }));
    }
    Ok(Json(json!({ "object": "list", "data": data })))
}

/// The 404 for an id that is not stored.
fn not_found(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "voice_not_found",
        format!(
            "voice '{}' is not stored here (see GET /v1/audio/voices)",
            id.escape_debug()
        ),
    )
}

/// `DELETE /v1/audio/voices/{id}`.
pub async fn delete_voice(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let key = id.clone();
    match on_store(&state, move |s| s.delete(&key)).await? {
        Ok(true) => Ok(Json(
            json!({ "id": id, "object": "voice", "deleted": true }),
        )),
        Ok(false) => Err(not_found(&id)),
        Err(e) => {
            eprintln!("error: {e}");
            Err(internal())
        }
    }
}

/// What a stored voice speaks with, for a speech request.
pub enum StoredVoice {
    /// The engine's voice file of a cloned voice.
    Cloned(Arc<Vec<u8>>),
    /// A blend of the model's preset voices, spoken as if the request named it.
    Blend(String),
}

/// Stored voice `id` for a speech request to `model`: 400 (field `voice`) when it is
/// not stored or was made with another model.
pub async fn stored_voice(
    state: &Arc<AppState>,
    id: &str,
    model: &str,
) -> Result<StoredVoice, ApiError> {
    let meta = store_of(state)?.get(id).cloned().ok_or_else(|| {
        ApiError::bad_param(
            "voice",
            format!(
                "voice '{}' is not a stored voice (deleted?); see GET /v1/audio/voices",
                id.escape_debug()
            ),
        )
    })?;
    if meta.model != model {
        return Err(ApiError::bad_param(
            "voice",
            format!(
                "voice '{id}' was {} with model '{}' and speaks only with it, not with '{model}'",
                if meta.blend.is_some() {
                    "blended"
                } else {
                    "cloned"
                },
                meta.model
            ),
        ));
    }
    if let Some(blend) = meta.blend {
        return Ok(StoredVoice::Blend(blend));
    }
    let key = id.to_string();
    on_store(state, move |s| s.voice_bytes(&key))
        .await?
        .map(|v| StoredVoice::Cloned(Arc::new(v)))
        .map_err(|e| {
            eprintln!("error: {e}");
            internal()
        })
}

/// The store for [`crate::AppState`]: opened from `voices_dir` when set.
pub fn open_store(cfg: &crate::config::Config) -> Result<Option<Mutex<VoiceStore>>, String> {
    cfg.voices_dir
        .as_deref()
        .map(|dir| VoiceStore::open(dir, cfg.max_voices).map(Mutex::new))
        .transpose()
}
