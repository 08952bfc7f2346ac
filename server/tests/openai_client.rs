//! The real `openai` Python package against the real server: Whisper tiny.en (converted
//! from the pinned CTranslate2 wheel to GGUF through the engine) served next to Silero
//! VAD, and `client.audio.transcriptions.create` in three response formats. A second
//! tiny.en entry with `vad_model` transcribes two phrases 70 s apart into two
//! timestamped segments placed in the whole file, skipping the silence.

use std::path::PathBuf;
use std::process::Command;

const PHRASE: &str = "Speech recognition in Rust is working today.";

mod common;
use common::{root, Server};

fn assets() -> PathBuf {
    common::assets("whisper-tiny.en-ct2/model.bin")
}

const CLIENT: &str = r#"
import json, sys
from openai import OpenAI
base, wav, gap_wav = sys.argv[1], sys.argv[2], sys.argv[3]
client = OpenAI(base_url=base + "/v1", api_key="test-key", max_retries=0)
out = {}
with open(wav, "rb") as f:
    out["json"] = client.audio.transcriptions.create(model="tiny", file=f).text
with open(wav, "rb") as f:
    out["srt"] = client.audio.transcriptions.create(model="tiny", file=f, response_format="srt")
with open(wav, "rb") as f:
    v = client.audio.transcriptions.create(model="tiny", file=f, response_format="verbose_json")
    out["verbose_text"] = v.text
    out["language"] = v.language
    out["segments"] = len(v.segments)
    out["segment_stats"] = [[s.seek, s.temperature, s.avg_logprob, s.compression_ratio, s.no_speech_prob] for s in v.segments]
with open(wav, "rb") as f:
    events = client.audio.transcriptions.create(model="tiny", file=f, stream=True)
    out["stream"] = [[e.type, getattr(e, "delta", None) or getattr(e, "text", None)] for e in events]
m = client.models.retrieve("tiny")
out["model"] = [m.id, m.created, m.owned_by]
with open(gap_wav, "rb") as f:
    v = client.audio.transcriptions.create(model="tiny-vad", file=f, response_format="verbose_json")
    out["vad_text"] = v.text
    out["vad_segments"] = [[s.start, s.end] for s in v.segments]
    out["vad_seeks"] = [s.seek for s in v.segments]
print(json.dumps(out))
"#;

#[test]
fn openai_client_transcribes_through_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = common::whisper_tiny_gguf(dir.path());
    let cfg = serde_json::json!({
        "port": 0,
        "threads": 2,
        "api_key": "test-key",
        "models": [
            { "id": "tiny", "path": gguf, "family": "whisper", "task": "asr" },
            { "id": "tiny-vad", "path": gguf, "family": "whisper", "task": "asr",
              "vad_model": assets().join("ggml-silero-v6.2.0.bin"),
              "model_spec_override": root().join("model_specs") },
            { "id": "silero", "path": assets().join("ggml-silero-v6.2.0.bin"), "family": "silero_vad", "task": "vad",
              "model_spec_override": root().join("model_specs") },
        ],
    });
    let server = Server::start(dir.path(), &cfg);
    let base = server.base.clone();
    let wav = assets().join("clips-asr/phrase_en_us.wav");
    let gap_wav = dir.path().join("phrase_gap_phrase.wav");
    let phrase_s = phrase_gap_phrase(&wav, &gap_wav, 70.0);
    let out = Command::new(common::python())
        .arg("-c")
        .arg(CLIENT)
        .arg(&base)
        .arg(&wav)
        .arg(&gap_wav)
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
    assert_eq!(v["json"], PHRASE);
    assert_eq!(v["verbose_text"], PHRASE);
    assert_eq!(v["segments"], 1);
    // The decode's own numbers, as OpenAI fills them: the window at frame 0, greedy
    // (temperature 0) passed the fallback checks, so its text is likely (mean
    // log-probability between -1 and 0), not repetitive (ratio under 2.4) and speech.
    let stats = &v["segment_stats"][0];
    assert_eq!(stats[0], 0, "seek: {stats}");
    assert_eq!(stats[1].as_f64(), Some(0.0), "temperature: {stats}");
    let avg_logprob = stats[2].as_f64().unwrap();
    assert!((-1.0..0.0).contains(&avg_logprob), "avg_logprob: {stats}");
    let ratio = stats[3].as_f64().unwrap();
    assert!((0.5..2.4).contains(&ratio), "compression_ratio: {stats}");
    let no_speech = stats[4].as_f64().unwrap();
    assert!(
        no_speech > 0.0 && no_speech < 0.5,
        "no_speech_prob: {stats}"
    );
    // No language was sent: the model's default (auto) resolves to English on
    // tiny.en, named as OpenAI names it.
    assert_eq!(v["language"], "english");
    let stream = v["stream"].as_array().unwrap();
    assert!(stream.len() >= 2, "{stream:?}");
    assert_eq!(stream[0][0], "transcript.text.delta");
    let last = stream.last().unwrap();
    assert_eq!(last[0], "transcript.text.done");
    assert_eq!(last[1], PHRASE);
    assert_eq!(v["model"][0], "tiny");
    assert!(v["model"][1].as_u64().unwrap() > 1_700_000_000);
    let srt = v["srt"].as_str().unwrap();
    assert!(srt.starts_with("1\n00:00:00,000 --> 00:00:"), "{srt}");
    assert!(srt.contains(PHRASE), "{srt}");
    assert_eq!(v["vad_text"], format!("{PHRASE} {PHRASE}"));
    let segs = v["vad_segments"].as_array().unwrap();
    assert_eq!(segs.len(), 2, "{segs:?}");
    let (first, second) = (segs[0][0].as_f64().unwrap(), segs[1][0].as_f64().unwrap());
    // Each VAD chunk is its own window: its seek (10 ms mel frames) is where the chunk
    // starts in the whole file, just before the segment it holds.
    let seeks = v["vad_seeks"].as_array().unwrap();
    let seek_s = seeks[1].as_f64().unwrap() / 100.0;
    assert!(
        seek_s <= second + 0.01 && second - seek_s < 1.0,
        "the second chunk's window starts at its speech: seeks {seeks:?}, segments {segs:?}"
    );
    assert!(
        (second - first - (phrase_s + 70.0)).abs() < 0.05,
        "the second phrase starts {phrase_s} + 70 s after the first: {segs:?}"
    );
}

/// Writes the clip `phrase`, `gap_s` seconds of silence, then `phrase` again, to `out`;
/// returns the clip's length in seconds.
fn phrase_gap_phrase(phrase: &std::path::Path, out: &std::path::Path, gap_s: f64) -> f64 {
    let mut reader = hound::WavReader::open(phrase).unwrap();
    let spec = reader.spec();
    let samples: Vec<i16> = reader.samples::<i16>().map(|x| x.unwrap()).collect();
    let mut w = hound::WavWriter::create(out, spec).unwrap();
    let silence = vec![0i16; (gap_s * spec.sample_rate as f64) as usize * spec.channels as usize];
    for x in samples.iter().chain(&silence).chain(&samples) {
        w.write_sample(*x).unwrap();
    }
    w.finalize().unwrap();
    samples.len() as f64 / spec.channels as f64 / spec.sample_rate as f64
}
