//! `GET /v1/models` and `GET /v1/models/{id}`: the served models as OpenAI's model
//! objects, with their family, task, load status,
//! `parallel` (requests run at once) and `batch` (requests decoded together).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::Json;
use serde_json::json;

use crate::error::ApiError;
use crate::pool::{model_not_found, Slot};
use crate::AppState;

/// One model as OpenAI's model object, with its family, task and load status.
fn model_object(state: &AppState, slot: &Slot) -> serde_json::Value {
    // Workers running (or loading) hold their locks: the status never waits for them.
    let status = slot.status();
    json!({
        "id": slot.entry.id, "object": "model", "created": state.started_unix_s,
        "owned_by": "audiocpp", "family": slot.entry.family, "task": slot.entry.task,
        "status": status, "parallel": slot.parallel(), "batch": slot.entry.batch,
    })
}

/// `GET /v1/models`.
pub async fn list_models(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let mut data = Vec::new();
    for slot in state.slots.values() {
        data.push(model_object(&state, slot));
    }
    Json(json!({ "object": "list", "data": data }))
}

/// `GET /v1/models/{id}`.
pub async fn get_model(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let slot = state.slots.get(&id).ok_or_else(|| model_not_found(&id))?;
    Ok(Json(model_object(&state, slot)))
}
