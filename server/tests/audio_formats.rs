//! Audio formats in and out of the real server, each through our own transcription
//! endpoint (Whisper tiny.en converted from the pinned CTranslate2 model):
//!
//! - input: the ASR phrase clip as AAC (M4A, ADTS), MP3 and Vorbis (Ogg, WebM),
//!   committed fixtures (test-support/fixtures/formats), is transcribed as the exact
//!   phrase, and as Opus (Ogg, WebM) within `OPUS_MAX_WER` of it; ALAC, which no decoder here reads, and a file that is no audio are a 400
//!   `invalid_audio` whose message is one line naming what is wrong;
//! - output: Kokoro (q8_0) speaking the phrase with `response_format: "flac"` answers
//!   `audio/flac` holding the WAV answer's samples bit for bit, and that FLAC, sent to
//!   the transcription endpoint, gives the WAV's transcript, which is the phrase's
//!   words.

use std::path::Path;

mod common;
use common::Server;

const PHRASE: &str = "Speech recognition in Rust is working today.";

fn start(dir: &Path, tts: bool) -> Server {
    let gguf = common::whisper_tiny_gguf(dir);
    let mut models = vec![serde_json::json!(
        { "id": "tiny", "path": gguf, "family": "whisper", "task": "asr" }
    )];
    if tts {
        models.push(serde_json::json!(
            { "id": "kokoro", "path": common::kokoro_q8_gguf(), "family": "kokoro", "task": "tts" }
        ));
    }
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
    let server = start(dir.path(), false);
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
        heard.iter().all(|(name, text)| {
            let wer = common::wer(text.as_str().unwrap_or(""), PHRASE);
            wer <= audiocpp_test_support::fixture_max_wer(name)
        }),
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
        refused(name, &bytes, "audio in ALAC, which is not read here");
    }
    refused(
        "notes.txt",
        b"these are notes, not audio",
        "not a recognised audio format",
    );
}

/// The body of a speech request for the phrase in `format` (status 200 required).
fn speak(server: &Server, format: &str) -> (String, Vec<u8>) {
    let body = serde_json::json!(
        { "model": "kokoro", "input": PHRASE, "voice": "af_heart", "response_format": format }
    );
    let a = common::post_json(server, "/v1/audio/speech", &body);
    assert_eq!(
        a.status,
        200,
        "{format}: {}",
        String::from_utf8_lossy(&a.body)
    );
    (a.content_type, a.body)
}

#[test]
fn a_flac_answer_is_the_wavs_audio_and_transcribes_as_the_phrase() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), true);
    let (wav_type, wav) = speak(&server, "wav");
    let (flac_type, flac) = speak(&server, "flac");
    assert_eq!(
        (wav_type.as_str(), flac_type.as_str()),
        ("audio/wav", "audio/flac")
    );
    assert_eq!(&flac[..4], b"fLaC");
    let limits = audiocpp_engine::audio::AudioLimits::default();
    let from_wav = audiocpp_engine::audio::decode(&wav, &limits).unwrap();
    let from_flac = audiocpp_engine::audio::decode(&flac, &limits).unwrap();
    assert_eq!(from_flac.sample_rate, from_wav.sample_rate);
    assert!(from_flac.samples == from_wav.samples, "lossless");
    println!(
        "{} samples at {} Hz: wav {} bytes, flac {} bytes",
        from_wav.samples.len(),
        from_wav.sample_rate,
        wav.len(),
        flac.len()
    );
    let (status, heard_wav) = transcribe(&server, "speech.wav", &wav);
    assert_eq!(status, 200, "{heard_wav}");
    let (status, heard_flac) = transcribe(&server, "speech.flac", &flac);
    assert_eq!(status, 200, "{heard_flac}");
    assert_eq!(heard_flac["text"], heard_wav["text"]);
    // Kokoro's "Rust" is heard as "rust": the words, not their case.
    let text = heard_flac["text"].as_str().unwrap();
    assert_eq!(common::words(text), common::words(PHRASE), "{text}");
}
