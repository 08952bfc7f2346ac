//! The real `openai` Python package against `POST /v1/audio/speech`, speaking with the
//! test-only family `test_tone` (0.05 s per character at speed 1; the engine feature
//! `test-families` comes from this crate's dev-dependency):
//! `client.audio.speech.create` and `with_streaming_response.create` write files that
//! Python's `wave` reads with the right rate and length, the streamed one
//! (`stream_format="audio"`) arrives in pieces, the first before synthesis ends, and
//! mp3 is refused as a `BadRequestError` naming our formats.

use std::process::Command;

use audiocpp_engine::families::test_tone;

mod common;
use common::Server;

const RATE: u32 = 24_000;

const CLIENT: &str = r#"
import json, sys, time, wave
import openai
from openai import OpenAI
base, outdir, text, long_text = sys.argv[1:5]
client = OpenAI(base_url=base + "/v1", api_key="test-key", max_retries=0)
out = {}

def read(path):
    with wave.open(path, "rb") as w:
        frames = len(w.readframes(1 << 30)) // (w.getsampwidth() * w.getnchannels())
        return [w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes(), frames]

r = client.audio.speech.create(model="tone", voice="high", input=text, response_format="wav")
r.write_to_file(outdir + "/whole.wav")
out["whole"] = read(outdir + "/whole.wav")

with client.audio.speech.with_streaming_response.create(
        model="tone", voice="low", input=text, response_format="wav", speed=2.0) as resp:
    resp.stream_to_file(outdir + "/streamed_whole.wav")
out["streamed_whole"] = read(outdir + "/streamed_whole.wav")

t0 = time.monotonic()
arrivals = []
with client.audio.speech.with_streaming_response.create(
        model="slow", voice="high", input=long_text, response_format="wav", stream_format="audio") as resp:
    with open(outdir + "/stream.wav", "wb") as f:
        for chunk in resp.iter_bytes():
            arrivals.append(time.monotonic() - t0)
            f.write(chunk)
out["stream"] = read(outdir + "/stream.wav")
out["arrivals"] = arrivals
with open(outdir + "/stream.wav", "rb") as f:
    out["stream_sizes"] = [int.from_bytes(f.read(8)[4:], "little")]

try:
    client.audio.speech.create(model="tone", voice="high", input="hi", response_format="mp3")
    out["mp3"] = "accepted"
except openai.BadRequestError as e:
    out["mp3"] = [e.status_code, str(e)]
print(json.dumps(out))
"#;

#[test]
fn openai_client_speaks_through_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let tone = dir.path().join("tone.gguf");
    let slow = dir.path().join("slow.gguf");
    test_tone::write_model(&tone, RATE, 0.5, 0).unwrap();
    // 15 ms of "compute" per character: 0.3 s per sentence below.
    test_tone::write_model(&slow, RATE, 0.5, 15).unwrap();
    let cfg = serde_json::json!({
        "port": 0,
        "threads": 1,
        "api_key": "test-key",
        "models": [
            { "id": "tone", "path": tone, "family": "test_tone", "task": "tts" },
            { "id": "slow", "path": slow, "family": "test_tone", "task": "tts" },
        ],
    });
    let server = Server::start(dir.path(), &cfg);
    let base = server.base.clone();
    let text = "Hello there. How are you? Fine.";
    // Five sentences of about 20 characters.
    let long_text = "The first sentence. The second one now. The third one here. \
                     The fourth one then. The fifth and last.";
    let out = Command::new(common::python())
        .arg("-c")
        .arg(CLIENT)
        .arg(&base)
        .arg(dir.path())
        .arg(text)
        .arg(long_text)
        .output()
        .unwrap();
    drop(server);
    assert!(
        out.status.success(),
        "openai client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("openai client got: {v}");
    let per_char = |speed: f32| (test_tone::CHAR_SECONDS / speed * RATE as f32) as u64;
    // 12 + 12 + 5 characters spoken (not the spaces between sentences).
    let n = per_char(1.0) * 29;
    assert_eq!(
        v["whole"],
        serde_json::json!([RATE, 1, 2, n, n]),
        "rate, mono, 16-bit, the header's length and the real one"
    );
    let n2 = per_char(2.0) * 29;
    assert_eq!(v["streamed_whole"], serde_json::json!([RATE, 1, 2, n2, n2]));
    // Streamed sentence by sentence: OpenAI's unknown-length header, the real length
    // in the data.
    // Every character but the four spaces between the five sentences.
    let long_chars = long_text.chars().count() as u64 - 4;
    let stream = &v["stream"];
    assert_eq!(stream[0], RATE);
    assert_eq!(stream[4].as_u64(), Some(per_char(1.0) * long_chars));
    assert_eq!(v["stream_sizes"][0].as_u64(), Some(u32::MAX as u64));
    let arrivals: Vec<f64> = v["arrivals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_f64().unwrap())
        .collect();
    assert!(arrivals.len() >= 2, "in pieces: {arrivals:?}");
    let (first, last) = (arrivals[0], *arrivals.last().unwrap());
    assert!(
        last >= 1.2 && first + 0.6 < last,
        "the first audio came before synthesis ended: {arrivals:?}"
    );
    assert_eq!(v["mp3"][0], 400);
    assert!(
        v["mp3"][1].as_str().unwrap().contains("wav, pcm"),
        "{}",
        v["mp3"]
    );
}
