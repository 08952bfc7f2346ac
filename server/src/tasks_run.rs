//! `POST /v1/tasks/run`: voice activity detection on an uploaded file (multipart or JSON
//! with base64 audio), the segments in seconds and samples, the probabilities on request.

use std::sync::Arc;

use audiocpp_engine::task::Task;
use audiocpp_engine::vad::{VadOutput, VadParams};
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::body::{decode_upload, read_request_within, VadParamsPatch};
use crate::error::{engine_error, ApiError};
use crate::pool::{slot_by_id, with_model, with_timing, Loaded, Slot};
use crate::AppState;

/// `POST /v1/tasks/run`.
pub async fn run_task(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    req: Request,
) -> Result<Response, ApiError> {
    let r = read_request_within(&state, &headers, req).await?;
    let slot = slot_by_id(&state, r.model.as_deref(), Task::Vad)?;
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

/// Runs VAD on a slot's model with the model's defaults and the request's overrides.
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
