//! The real `openai` Python package against the real server: Whisper tiny.en (converted
//! from the pinned CTranslate2 wheel to GGUF through the engine) served next to Silero
//! VAD, and `client.audio.transcriptions.create` in three response formats.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

const PHRASE: &str = "Speech recognition in Rust is working today.";

mod common;
use common::root;

fn assets() -> PathBuf {
    common::assets("whisper-tiny.en-ct2/model.bin")
}

fn python() -> PathBuf {
    let p = std::env::var_os("AUDIOCPP_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| assets().join("venv/bin/python"));
    assert!(
        p.is_file(),
        "the test venv's python is missing ({}): run `cargo xtask test`",
        p.display()
    );
    p
}

const CLIENT: &str = r#"
import json, sys
from openai import OpenAI
base, wav = sys.argv[1], sys.argv[2]
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
print(json.dumps(out))
"#;

#[test]
fn openai_client_transcribes_through_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("tiny.en.gguf");
    audiocpp_engine::tasks::convert(
        "whisper",
        &assets().join("whisper-tiny.en-ct2"),
        None,
        &gguf,
        audiocpp_engine::families::whisper::WeightType::Keep,
    )
    .unwrap();
    let cfg = serde_json::json!({
        "port": 0,
        "threads": 2,
        "api_key": "test-key",
        "models": [
            { "id": "tiny", "path": gguf, "family": "whisper", "task": "asr" },
            { "id": "silero", "path": assets().join("ggml-silero-v6.2.0.bin"), "family": "silero_vad", "task": "vad",
              "model_spec_override": root().join("model_specs") },
        ],
    });
    let cfg_path = dir.path().join("server.json");
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_audiocpp_server"))
        .arg("--config")
        .arg(&cfg_path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line.trim().rsplit(' ').next().unwrap().to_string();
    let wav = assets().join("clips-asr/phrase_en_us.wav");
    let out = Command::new(python())
        .arg("-c")
        .arg(CLIENT)
        .arg(&base)
        .arg(&wav)
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
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
    // No language was sent: the model's default (auto) resolves to en on tiny.en.
    assert_eq!(v["language"], "en");
    let srt = v["srt"].as_str().unwrap();
    assert!(srt.starts_with("1\n00:00:00,000 --> 00:00:"), "{srt}");
    assert!(srt.contains(PHRASE), "{srt}");
}
