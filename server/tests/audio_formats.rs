//! Audio formats into the real server, through our own transcription endpoint (Whisper
//! tiny.en converted from the pinned CTranslate2 model): the ASR phrase clip as AAC
//! (M4A, ADTS), MP3 and Vorbis (Ogg, WebM), committed fixtures
//! (test-support/fixtures/formats), is transcribed as the exact phrase; Opus in Ogg and
//! WebM, which no decoder here reads, and a file that is no audio are a 400
//! `invalid_audio` whose message is one line naming what is wrong.

use std::path::Path;

mod common;
use common::Server;

const PHRASE: &str = "Speech recognition in Rust is working today.";

fn start(dir: &Path) -> Server {
    let gguf = common::whisper_tiny_gguf(dir);
    let models = vec![serde_json::json!(
        { "id": "tiny", "path": gguf, "family": "whisper", "task": "asr" }
    )];
    let cfg = serde_json::json!({ "port": 0, "threads": 2, "models": models });
    Server::start(dir, &cfg)
}

/// The status and body of a `json` transcription of the file `name` holding `bytes`.
fn transcribe(server: &Server, name: &str, bytes: &[u8]) -> (u16, serde_json::Value) {
    let (content_type, body) = common::multipart(
        &[("model", "tiny"), ("language", "en")],
        Some((name, bytes)),
    );
    let resp = common::send(
        ureq::post(&server.url("/v1/audio/transcriptions")),
        &content_type,
        &body,
    );
    let status = resp.status();
    let text = resp.into_string().unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}: {text}"));
    (status, v)
}

#[test]
fn compressed_inputs_give_the_phrase_and_the_rest_a_one_line_400() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let heard: Vec<(&str, serde_json::Value)> = audiocpp_test_support::DECODED_FORMATS
        .iter()
        .map(|name| {
            let bytes = std::fs::read(audiocpp_test_support::format_fixture(name)).unwrap();
            let (status, v) = transcribe(&server, name, &bytes);
            assert_eq!(status, 200, "{name}: {v}");
            (*name, v["text"].clone())
        })
        .collect();
    assert!(
        heard.iter().all(|(_, text)| text == PHRASE),
        "every file gives the phrase: {heard:#?}"
    );
    let refused = |name: &str, bytes: &[u8], needle: &str| {
        let (status, v) = transcribe(&server, name, bytes);
        assert_eq!(status, 400, "{name}: {v}");
        assert_eq!(v["error"]["code"], "invalid_audio", "{name}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{name}: {msg}");
        assert!(!msg.contains('\n'), "{name}: one line: {msg}");
    };
    for name in audiocpp_test_support::UNDECODED_FORMATS {
        let bytes = std::fs::read(audiocpp_test_support::format_fixture(name)).unwrap();
        refused(name, &bytes, "audio in Opus, which is not read here");
    }
    refused(
        "notes.txt",
        b"these are notes, not audio",
        "not a recognised audio format",
    );
}
