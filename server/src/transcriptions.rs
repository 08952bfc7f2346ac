//! `POST /v1/audio/transcriptions`: OpenAI's transcription API over an `asr` model (cut
//! by its VAD model first when one is configured), answered as json, text,
//! verbose_json, srt or vtt (`formats`), or as server-sent events with `stream=true`.

use std::sync::Arc;

use audiocpp_engine::asr::AsrOutput;
use audiocpp_engine::task::Task;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::body::{decode_upload, read_request_within};
use crate::error::{engine_error, ApiError};
use crate::formats;
use crate::pool::{slot_by_id, with_model, with_timing, Loaded, Slot};
use crate::AppState;

/// The response formats served.
const FORMATS: [&str; 5] = ["json", "text", "verbose_json", "srt", "vtt"];

/// The `timestamp_granularities[]` values taken (OpenAI's).
const GRANULARITIES: [&str; 2] = ["word", "segment"];

/// `POST /v1/audio/transcriptions`.
pub async fn transcriptions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    req: Request,
) -> Result<Response, ApiError> {
    let r = read_request_within(&state, &headers, req).await?;
    let format = r.response_format.clone().unwrap_or_else(|| "json".into());
    if !FORMATS.contains(&format.as_str()) {
        return Err(ApiError::bad_request(format!(
            "response_format '{format}' is not one of {}",
            FORMATS.join(", ")
        )));
    }
    if let Some(g) = r
        .granularities
        .iter()
        .find(|g| !GRANULARITIES.contains(&g.as_str()))
    {
        return Err(ApiError::bad_param(
            "timestamp_granularities",
            format!("timestamp_granularities '{g}' is not one of word, segment"),
        ));
    }
    let words = r.granularities.iter().any(|g| g == "word");
    if words && format != "verbose_json" {
        // OpenAI answers the same: words exist only in verbose_json.
        return Err(ApiError::bad_param(
            "timestamp_granularities",
            format!(
                "timestamp_granularities 'word' needs response_format verbose_json, not '{format}'"
            ),
        ));
    }
    // OpenAI's verbose_json has segments by default, and only words when only `word`
    // is asked for.
    let segments = !words || r.granularities.iter().any(|g| g == "segment");
    if r.stream && !["json", "text"].contains(&format.as_str()) {
        return Err(ApiError::bad_request(format!(
            "stream=true is for response_format json or text, not '{format}'"
        )));
    }
    let slot = slot_by_id(&state, r.model.as_deref(), Task::Asr)?;
    let audio = r
        .audio
        .ok_or_else(|| ApiError::bad_request("no audio: send a 'file' part or 'audio_base64'"))?;
    // Every format decodes alike (timestamp tokens, every window read); the formats
    // differ only in what they show. Words add the alignment pass, and the next window
    // then starts at the last word's end (faster-whisper's word_timestamps=True).
    let (out, wall, batch) = if slot.entry.batch > 1 {
        let done = crate::batch::transcribe(&state, slot, audio, r.language.clone(), words).await?;
        (done.out, done.wall_ms, Some(done.batch))
    } else {
        let (out, wall) = run_asr(&state, slot, audio, r.language.clone(), words).await?;
        (out, wall, None)
    };
    let resp = match format.as_str() {
        _ if r.stream => formats::transcript_events(&out),
        "text" => formats::plain_text(format!("{}\n", out.text)),
        "srt" | "vtt" => formats::plain_text(formats::subtitles(&out, format == "vtt")),
        "verbose_json" => Json(formats::verbose_json(&out, segments, words)).into_response(),
        _ => Json(json!({ "text": out.text })).into_response(),
    };
    let mut resp = with_timing(resp, wall, out.audio_seconds);
    if let Some(n) = batch {
        // Requests decoded together with this one (itself included).
        resp.headers_mut()
            .insert("x-audiocpp-batch", axum::http::HeaderValue::from(n));
    }
    Ok(resp)
}

/// Runs speech recognition on a slot's model.
async fn run_asr(
    state: &Arc<AppState>,
    slot: &Slot,
    audio: Vec<u8>,
    language: Option<String>,
    words: bool,
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
        opts.word_timestamps = words;
        let samples = decode_upload(&audio, model.sample_rate(), &limits)?;
        match vad {
            Some(vad) => {
                let params = vad.asr_chunking_params();
                model.run_samples_with_vad(&samples, &opts, vad, &params, 1)
            }
            None => model.run_samples(&samples, &opts),
        }
        .map_err(engine_error)
    })
    .await
}
