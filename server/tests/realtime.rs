//! Live transcription over `/v1/realtime?intent=transcription` (OpenAI's realtime
//! transcription protocol), driven by a plain WebSocket client (tungstenite, the one
//! axum serves with) against the real server with Whisper tiny.en and Silero VAD:
//!
//! - the ASR phrase, one second of silence on each side, resampled to OpenAI's 24 kHz
//!   and appended in 100 ms chunks, gives one server-VAD turn: speech_started, then
//!   deltas, speech_stopped, committed, item created and completed, in that order, on
//!   one item id; at least one delta comes before speech_stopped (a partial), the
//!   last delta (after committed) is the completed transcript's words past those the
//!   partials sent, and the transcript is within one word of the transcription
//!   endpoint's for the same 24 kHz audio (tiny.en changes "Speech" to "The" with a few
//!   hundred ms more or less of silence before the phrase);
//! - bad events (not JSON, not base64, odd PCM bytes, unknown types, bad settings, an
//!   empty commit) each get an `error` event naming the fault, and the session goes on;
//! - a client with `OpenAI-Beta: realtime=v1` is greeted with the beta
//!   `transcription_session.created`, one without with the GA `session.created`;
//! - the upgrade needs the API key like every `/v1` route.

use std::net::TcpStream;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest, Message, WebSocket};

mod common;
use common::realtime::{self, http_transcript, pcm16, phrase_24k, RATE};
use common::Server;

const KEY: &str = "realtime-test-key";

/// A server with Whisper tiny.en cut by Silero, behind the API key.
fn server() -> Server {
    let dir = tempfile::tempdir().unwrap();
    realtime::server(dir.path(), KEY).owning(dir)
}

/// Opens a session with `key` (none: no Authorization header), in the beta protocol
/// (`OpenAI-Beta: realtime=v1`) or the GA one.
fn connect(
    server: &Server,
    key: Option<&str>,
    beta: bool,
) -> Result<WebSocket<TcpStream>, tungstenite::Error> {
    let url = server
        .url("/v1/realtime?intent=transcription")
        .replace("http://", "ws://");
    let mut req = url.into_client_request().unwrap();
    if let Some(k) = key {
        req.headers_mut()
            .insert("authorization", format!("Bearer {k}").parse().unwrap());
    }
    if beta {
        req.headers_mut()
            .insert("openai-beta", "realtime=v1".parse().unwrap());
    }
    let addr = server.base.trim_start_matches("http://").to_string();
    let stream = TcpStream::connect(addr).unwrap();
    // A server that stops answering fails the test instead of hanging it.
    stream
        .set_read_timeout(Some(Duration::from_secs(600)))
        .unwrap();
    tungstenite::client(req, stream)
        .map(|(ws, _)| ws)
        .map_err(|e| match e {
            tungstenite::HandshakeError::Failure(e) => e,
            tungstenite::HandshakeError::Interrupted(_) => panic!("handshake interrupted"),
        })
}

fn send(ws: &mut WebSocket<TcpStream>, event: &Value) {
    ws.send(Message::text(event.to_string())).unwrap();
}

/// The next server event (failing on a close or a non-text message).
fn next(ws: &mut WebSocket<TcpStream>) -> Value {
    loop {
        match ws.read().unwrap() {
            Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("expected a text event, got {other:?}"),
        }
    }
}

/// Events up to and including the first of type `last`.
fn until(ws: &mut WebSocket<TcpStream>, last: &str) -> Vec<Value> {
    let mut events = Vec::new();
    loop {
        let e = next(ws);
        let done = e["type"] == last;
        events.push(e);
        if done {
            return events;
        }
    }
}

/// Appends `samples` in 100 ms chunks.
fn stream(ws: &mut WebSocket<TcpStream>, samples: &[f32]) {
    for chunk in samples.chunks(RATE as usize / 10) {
        let audio = base64::engine::general_purpose::STANDARD.encode(pcm16(chunk));
        send(
            ws,
            &json!({ "type": "input_audio_buffer.append", "audio": audio }),
        );
    }
}

/// The types of `events`, in order.
fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

/// Checks one turn's events (from its first event to `completed`): the item events on
/// one id; the deltas before `committed` (the partials) and the one after it (the final
/// decode's words past theirs, if any) make up the transcript's words when the final
/// decode agrees with the partials, and in any case the last delta is the transcript's
/// tail past the partials' words. Returns the transcript and how many deltas came
/// before `committed`.
fn check_turn(events: &[Value]) -> (String, usize) {
    let t = types(events);
    let at = |name: &str| {
        t.iter()
            .position(|x| *x == name)
            .unwrap_or_else(|| panic!("no {name} in {t:?}"))
    };
    let (committed, created, completed) = (
        at("input_audio_buffer.committed"),
        at("conversation.item.created"),
        at("conversation.item.input_audio_transcription.completed"),
    );
    assert!(committed < created && created < completed, "{t:?}");
    let item = events[committed]["item_id"].as_str().unwrap();
    assert_eq!(events[created]["item"]["id"], item);
    assert_eq!(events[created]["item"]["role"], "user");
    let (mut partials, mut last) = (String::new(), String::new());
    let mut early = 0;
    for (i, e) in events.iter().enumerate() {
        if e["type"] == "conversation.item.input_audio_transcription.delta" {
            assert_eq!(e["item_id"], item);
            let delta = e["delta"].as_str().unwrap();
            if i < committed {
                partials.push_str(delta);
                early += 1;
            } else {
                assert!(last.is_empty(), "one delta after committed: {t:?}");
                last = delta.to_string();
            }
        }
        assert!(e["event_id"].is_string(), "{e}");
    }
    let transcript = events[completed]["transcript"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(events[completed]["item_id"], item);
    let said: Vec<&str> = transcript.split_whitespace().collect();
    let sent: Vec<&str> = partials.split_whitespace().collect();
    let tail: Vec<&str> = last.split_whitespace().collect();
    assert_eq!(
        said.get(sent.len()..).unwrap_or(&[]),
        &tail[..],
        "the last delta {last:?} is the transcript {transcript:?} past the partials {partials:?}"
    );
    if said.starts_with(&sent) {
        assert_eq!(format!("{partials}{last}"), transcript, "the deltas joined");
    }
    (transcript, early)
}

#[test]
fn a_streamed_phrase_is_one_turn_with_partials_and_the_http_transcript() {
    let server = server();
    let audio = phrase_24k();
    let reference = http_transcript(&server, KEY, &audio);
    assert!(
        common::words(&reference).len() >= 5,
        "reference: {reference:?}"
    );

    let mut ws = connect(&server, Some(KEY), true).unwrap();
    let created = next(&mut ws);
    assert_eq!(
        created["type"], "transcription_session.created",
        "{created}"
    );
    assert_eq!(created["session"]["turn_detection"]["type"], "server_vad");
    send(
        &mut ws,
        &json!({ "type": "transcription_session.update", "session": {
            "input_audio_format": "pcm16",
            "input_audio_transcription": { "model": "tiny", "language": "en" },
            "turn_detection": { "type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500 },
        }}),
    );
    let updated = next(&mut ws);
    assert_eq!(
        updated["type"], "transcription_session.updated",
        "{updated}"
    );
    assert_eq!(
        updated["session"]["input_audio_transcription"]["language"],
        "en"
    );

    stream(&mut ws, &audio);
    let events = until(
        &mut ws,
        "conversation.item.input_audio_transcription.completed",
    );
    let t = types(&events);
    assert_eq!(t[0], "input_audio_buffer.speech_started", "{t:?}");
    let stopped = t
        .iter()
        .position(|x| *x == "input_audio_buffer.speech_stopped")
        .unwrap_or_else(|| panic!("no speech_stopped: {t:?}"));
    assert!(!t.contains(&"error"), "{events:?}");
    let item = events[0]["item_id"].as_str().unwrap();
    assert_eq!(events[stopped]["item_id"], item);
    // The turn starts within the leading second of silence's last 300 ms (the prefix
    // padding) or in the clip, and stops after the speech, within the audio sent (the
    // phrase clip has its own trailing silence, so before the padded end).
    let start_ms = events[0]["audio_start_ms"].as_u64().unwrap();
    let end_ms = events[stopped]["audio_end_ms"].as_u64().unwrap();
    let total_ms = audio.len() as u64 * 1000 / RATE as u64;
    assert!(
        (600..2000).contains(&start_ms),
        "speech started at {start_ms} ms"
    );
    assert!(
        end_ms > start_ms + 2500 && end_ms <= total_ms,
        "speech from {start_ms} ms stopped at {end_ms} ms of {total_ms}"
    );
    let (transcript, early) = check_turn(&events);
    let partials_before_stop = events[..stopped]
        .iter()
        .filter(|e| e["type"] == "conversation.item.input_audio_transcription.delta")
        .count();
    assert!(
        partials_before_stop >= 1 && early >= 1,
        "no delta while speech went on: {t:?}"
    );
    let wer = common::wer(&transcript, &reference);
    assert!(
        wer <= 1.0 / common::words(&reference).len() as f64 + 1e-9,
        "realtime {transcript:?} vs HTTP {reference:?}: WER {wer}"
    );
}

#[test]
fn bad_events_get_error_events_and_the_key_is_needed() {
    let server = server();
    for key in [None, Some("wrong")] {
        match connect(&server, key, false) {
            Err(tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 401),
            other => panic!("key {key:?}: expected a 401, got {:?}", other.map(|_| ())),
        }
    }
    // Without the beta header the greeting is the GA one.
    let mut ws = connect(&server, Some(KEY), false).unwrap();
    let created = next(&mut ws);
    assert_eq!(created["type"], "session.created", "{created}");
    assert_eq!(created["session"]["type"], "transcription", "{created}");
    assert_eq!(
        created["session"]["audio"]["input"]["turn_detection"]["type"], "server_vad",
        "{created}"
    );
    let cases: [(Message, &str); 8] = [
        (Message::text("{not json"), "invalid_json"),
        (Message::text("[1, 2]"), "invalid_request"),
        (
            Message::text(
                r#"{"type": "input_audio_buffer.append", "audio": "@@@", "event_id": "c1"}"#,
            ),
            "invalid_request",
        ),
        (
            Message::text(r#"{"type": "input_audio_buffer.append", "audio": "AAAA"}"#),
            "invalid_request",
        ),
        (
            Message::text(r#"{"type": "response.create"}"#),
            "unknown_event_type",
        ),
        (
            Message::text(
                r#"{"type": "transcription_session.update", "session": {"turn_detection": {"type": "server_vad", "threshold": 7}}}"#,
            ),
            "invalid_request",
        ),
        (
            Message::text(
                r#"{"type": "transcription_session.update", "session": {"input_audio_transcription": {"model": "nope"}}}"#,
            ),
            "model_not_found",
        ),
        (
            Message::text(r#"{"type": "input_audio_buffer.commit"}"#),
            "input_audio_buffer_commit_empty",
        ),
    ];
    let mut errors = Vec::new();
    for (msg, code) in cases {
        let shown = format!("{msg:?}");
        ws.send(msg).unwrap();
        let e = next(&mut ws);
        assert_eq!(e["type"], "error", "{shown}: {e}");
        assert_eq!(e["error"]["code"], code, "{shown}: {e}");
        assert_eq!(e["error"]["type"], "invalid_request_error", "{shown}: {e}");
        assert!(!e["error"]["message"].as_str().unwrap().is_empty());
        errors.push(e);
    }
    // The bad base64 names its client event; the threshold names its field.
    assert_eq!(errors[2]["error"]["event_id"], "c1");
    assert_eq!(
        errors[5]["error"]["param"],
        "session.turn_detection.threshold"
    );
    // The session is still usable and unchanged by the refused updates.
    send(&mut ws, &json!({ "type": "input_audio_buffer.clear" }));
    assert_eq!(next(&mut ws)["type"], "input_audio_buffer.cleared");
    send(
        &mut ws,
        &json!({ "type": "session.update", "session": { "type": "transcription" } }),
    );
    let updated = next(&mut ws);
    assert_eq!(updated["type"], "session.updated", "{updated}");
    // The GA shape answers in the GA shape.
    let input = &updated["session"]["audio"]["input"];
    assert_eq!(updated["session"]["type"], "transcription", "{updated}");
    assert_eq!(input["turn_detection"]["threshold"], 0.5, "{updated}");
    assert_eq!(input["transcription"]["model"], "tiny", "{updated}");
    assert_eq!(input["format"]["rate"], 24_000, "{updated}");
}
