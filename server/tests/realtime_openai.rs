//! Live transcription driven by the real `openai` Python package's realtime client
//! (`client.realtime.connect(extra_query={"intent": "transcription"})`, the GA API, over
//! the `websockets` package its `realtime` extra names; both pinned in the test venv)
//! against the real server with Whisper tiny.en and Silero VAD:
//!
//! - the greeting is `session.created` with a transcription session (the client sends no
//!   `OpenAI-Beta` header), which the client parses as its `SessionCreatedEvent` (the
//!   beta `transcription_session.created` the server sent before parsed as an untyped
//!   fallback event);
//! - a GA `session.update` (`session.type` transcription, fields under `audio.input`) is
//!   answered with `session.updated` in the GA shape, which the client parses as its
//!   transcription session (`RealtimeTranscriptionSessionCreateRequest`): the beta
//!   shape the server answered before parsed as a conversation session without `audio`;
//! - the ASR phrase with a second of silence on each side, at 24 kHz, appended in 100 ms
//!   chunks through `input_audio_buffer.append`, gives a server-VAD turn whose deltas
//!   (at least one) and `...transcription.completed` the client parses into its own
//!   event classes, the transcript within one word of the transcription endpoint's for
//!   the same audio (as server/tests/realtime.rs checks with a plain WebSocket client);
//! - an unknown event type sent through the client gets an `error` event that the client
//!   parses as its `RealtimeErrorEvent`, naming the client event.
//!
//! The beta client (`client.beta.realtime.connect`, which sends `OpenAI-Beta:
//! realtime=v1`) is greeted with `transcription_session.created` and its
//! `transcription_session.update` answered with `transcription_session.updated`, which it
//! parses as its `TranscriptionSessionUpdatedEvent`. A client limitation: the beta client
//! turns `base_url` into `wss://` whatever its scheme (the GA one maps `http` to `ws`),
//! so against a plain-HTTP server it needs `websocket_base_url="ws://HOST:PORT/v1"`.
//!
//! A missing venv python or `websockets` fails the test (the script's import fails).

use std::process::Command;

use serde_json::{json, Value};

mod common;
use common::realtime::{self, http_transcript, pcm16, phrase_24k};

const KEY: &str = "realtime-openai-key";

const CLIENT: &str = r#"
import base64, json, signal, sys
import websockets  # the realtime extra's dependency: fail loudly when it is missing
from openai import OpenAI

signal.alarm(600)  # a server that stops answering fails the test instead of hanging it
base, key, pcm_path = sys.argv[1], sys.argv[2], sys.argv[3]
client = OpenAI(base_url=base + "/v1", api_key=key, max_retries=0)
pcm = open(pcm_path, "rb").read()
out = {"events": []}

def record(event):
    d = {"type": event.type, "class": type(event).__name__}
    for field in ("item_id", "delta", "transcript"):
        if getattr(event, field, None) is not None:
            d[field] = getattr(event, field)
    if event.type == "error":
        d["error"] = {"code": event.error.code, "type": event.error.type,
                      "message": event.error.message, "event_id": event.error.event_id}
    if getattr(event, "session", None) is not None:
        s = event.session
        d["session_class"] = type(s).__name__
        d["session"] = s.model_dump() if hasattr(s, "model_dump") else s
    out["events"].append(d)
    return d

with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
    record(conn.recv())
    conn.session.update(session={
        "type": "transcription",
        "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": 24000},
            "transcription": {"model": "tiny", "language": "en"},
            "turn_detection": {"type": "server_vad", "threshold": 0.5,
                               "prefix_padding_ms": 300, "silence_duration_ms": 500},
        }},
    })
    record(conn.recv())
    step = 24000 // 10 * 2
    for at in range(0, len(pcm), step):
        conn.input_audio_buffer.append(audio=base64.b64encode(pcm[at:at + step]).decode())
    for event in conn:
        if record(event)["type"] == "conversation.item.input_audio_transcription.completed":
            break
    conn.send({"type": "response.nope", "event_id": "bad_1"})
    record(conn.recv())
# The beta client (`OpenAI-Beta: realtime=v1`, the model in the query) and its update.
# It always turns base_url into wss://, so a plain-HTTP server needs websocket_base_url.
beta = OpenAI(base_url=base + "/v1", api_key=key, max_retries=0,
              websocket_base_url=base.replace("http://", "ws://") + "/v1")
with beta.beta.realtime.connect(model="tiny", extra_query={"intent": "transcription"}) as conn:
    first = conn.recv()
    conn.transcription_session.update(session={
        "input_audio_format": "pcm16",
        "input_audio_transcription": {"model": "tiny", "language": "en"},
    })
    updated = conn.recv()
    out["beta"] = [first.type, updated.type, type(updated).__name__,
                   updated.session.input_audio_transcription.language]
print(json.dumps(out))
"#;

#[test]
fn openai_realtime_client_transcribes_a_phrase_live() {
    let dir = tempfile::tempdir().unwrap();
    let server = realtime::server(dir.path(), KEY);
    let phrase = phrase_24k();
    let pcm_path = dir.path().join("phrase_24k.pcm");
    std::fs::write(&pcm_path, pcm16(&phrase)).unwrap();
    let reference = http_transcript(&server, KEY, &phrase);
    assert!(
        common::words(&reference).len() >= 5,
        "reference: {reference:?}"
    );

    let out = Command::new(common::python())
        .arg("-c")
        .arg(CLIENT)
        .arg(&server.base)
        .arg(KEY)
        .arg(&pcm_path)
        .output()
        .unwrap();
    drop(server);
    assert!(
        out.status.success(),
        "openai realtime client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let events = v["events"].as_array().unwrap();
    eprintln!("openai client got: {events:#?}");
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();

    assert_eq!(types[0], "session.created", "{types:?}");
    assert_eq!(events[0]["class"], "SessionCreatedEvent", "{events:#?}");
    assert_eq!(
        events[0]["session_class"], "RealtimeTranscriptionSessionCreateRequest",
        "{events:#?}"
    );
    assert_eq!(types[1], "session.updated", "{types:?}");
    let updated = &events[1];
    assert_eq!(
        updated["session_class"], "RealtimeTranscriptionSessionCreateRequest",
        "{updated}"
    );
    let input = &updated["session"]["audio"]["input"];
    assert_eq!(input["transcription"]["model"], "tiny", "{updated}");
    assert_eq!(input["transcription"]["language"], "en", "{updated}");
    assert_eq!(input["turn_detection"]["type"], "server_vad", "{updated}");
    assert!(
        !types[..types.len() - 1].contains(&"error"),
        "an error before the bad event: {events:#?}"
    );
    let deltas = events
        .iter()
        .filter(|e| e["type"] == "conversation.item.input_audio_transcription.delta")
        .inspect(|e| {
            assert_eq!(
                e["class"],
                "ConversationItemInputAudioTranscriptionDeltaEvent"
            )
        })
        .count();
    assert!(deltas >= 1, "no delta: {types:?}");
    let completed = events
        .iter()
        .find(|e| e["type"] == "conversation.item.input_audio_transcription.completed")
        .unwrap_or_else(|| panic!("no completed: {types:?}"));
    assert_eq!(
        completed["class"],
        "ConversationItemInputAudioTranscriptionCompletedEvent"
    );
    let transcript = completed["transcript"].as_str().unwrap();
    let wer = common::wer(transcript, &reference);
    assert!(
        wer <= 1.0 / common::words(&reference).len() as f64 + 1e-9,
        "realtime {transcript:?} vs HTTP {reference:?}: WER {wer}"
    );

    assert_eq!(
        v["beta"],
        json!([
            "transcription_session.created",
            "transcription_session.updated",
            "TranscriptionSessionUpdatedEvent",
            "en"
        ]),
        "the beta client"
    );

    let error = events.last().unwrap();
    assert_eq!(error["type"], "error", "{error}");
    assert_eq!(error["class"], "RealtimeErrorEvent", "{error}");
    assert_eq!(error["error"]["code"], "unknown_event_type", "{error}");
    assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
    assert_eq!(error["error"]["event_id"], "bad_1", "{error}");
}
