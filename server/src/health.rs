//! `GET /health`: whether the server answers, its version and how many models it serves
//! (no API key needed).

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::json;

use crate::AppState;

/// `GET /health`.
pub async fn health(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    Json(
        json!({ "status": "ok", "version": audiocpp_engine::VERSION, "models": state.slots.len() }),
    )
}
