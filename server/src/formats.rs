//! A finished transcript in the shapes OpenAI's transcription API answers with besides
//! plain JSON: verbose_json, SRT and WebVTT cues, plain text, and server-sent events.

use audiocpp_engine::asr::AsrOutput;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::languages;

/// `text` as a `text/plain` UTF-8 answer.
pub fn plain_text(text: String) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response()
}

/// `verbose_json`: the language by name, the duration, every segment with its decoding
/// statistics when `segments`, and every word with its start and end (OpenAI's top-level
/// `words`) when `words`.
pub fn verbose_json(out: &AsrOutput, segments: bool, words: bool) -> serde_json::Value {
    let segment_list: Vec<serde_json::Value> = out
        .segments
        .iter()
        .enumerate()
        .map(|(i, s)| {
            json!({
                "id": i, "seek": s.seek, "start": s.start, "end": s.end, "text": s.text,
                "tokens": s.tokens, "temperature": s.temperature, "avg_logprob": s.avg_logprob,
                "compression_ratio": s.compression_ratio, "no_speech_prob": s.no_speech_prob,
            })
        })
        .collect();
    let mut v = json!({
        "task": "transcribe", "language": languages::name(&out.language),
        "duration": out.audio_seconds, "text": out.text,
    });
    if segments {
        v["segments"] = json!(segment_list);
    }
    if words {
        let words: Vec<serde_json::Value> = out
            .segments
            .iter()
            .flat_map(|s| &s.words)
            .map(|w| json!({ "word": w.word.trim(), "start": w.start, "end": w.end }))
            .collect();
        v["words"] = json!(words);
    }
    v
}

/// A finished transcript as the server-sent events OpenAI's streaming transcription
/// sends: one `transcript.text.delta` per segment, then `transcript.text.done`.
pub fn transcript_events(out: &AsrOutput) -> Response {
    let mut body = String::new();
    for seg in &out.segments {
        let e = json!({ "type": "transcript.text.delta", "delta": seg.text, "logprobs": null });
        body.push_str(&format!("data: {e}\n\n"));
    }
    let done = json!({ "type": "transcript.text.done", "text": out.text, "logprobs": null });
    body.push_str(&format!("data: {done}\n\n"));
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// SRT or WebVTT cues, one per segment.
pub fn subtitles(out: &AsrOutput, vtt: bool) -> String {
    out.subtitles(vtt, false)
}
