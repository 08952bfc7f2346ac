//! A request whose graph fails mid-compute (a custom op panicking inside ggml's worker
//! threads, injected with the engine's test-only `fault-injection` feature, which this
//! crate's dev-dependencies switch on) gets a 500 with a generic message, the reason in
//! the server's log only, and the server, still up, serves the next request correctly.

use std::path::PathBuf;
use std::process::Stdio;

mod common;
use common::Server;

const PHRASE: &str = "Speech recognition in Rust is working today.";

fn assets() -> PathBuf {
    common::assets("whisper-tiny.en-ct2/model.bin")
}

/// A transcription request for `wav` to the model `tiny`: status and JSON body.
fn transcribe(base: &str, wav: &[u8]) -> (u16, serde_json::Value) {
    let (content_type, body) = common::multipart(&[("model", "tiny")], Some(("a.wav", wav)));
    let resp = common::send(
        ureq::post(&format!("{base}/v1/audio/transcriptions")),
        &content_type,
        &body,
    );
    let status = resp.status();
    (status, resp.into_json().unwrap_or(serde_json::Value::Null))
}

#[test]
fn a_panicking_op_fails_its_request_and_the_server_serves_the_next() {
    // The fault is injected into the engine's CPU kernels; a CPU without them runs
    // ggml's ops only, where nothing would fail.
    if !audiocpp_engine::ggml::attention_kernel_available() {
        eprintln!("this CPU lacks AVX2/FMA: the engine's custom ops do not run here");
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run on a CPU with AVX2"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let gguf = common::whisper_tiny_gguf(dir.path());
    let cfg = serde_json::json!({
        "port": 0,
        "threads": 2,
        "models": [{ "id": "tiny", "path": gguf, "family": "whisper", "task": "asr" }],
    });
    let cfg_path = common::write_config(dir.path(), &cfg);
    let mut server = Server::spawn(
        common::server_command(&cfg_path)
            .env("AUDIOCPP_FAULT_INJECT_OP_PANICS", "1")
            .env_remove("AUDIOCPP_CPU_KERNELS")
            .stderr(Stdio::piped()),
    );
    let base = server.base.clone();
    let wav = std::fs::read(assets().join("clips-asr/phrase_en_us.wav")).unwrap();

    let (failed, v) = transcribe(&base, &wav);
    let (ok, w) = transcribe(&base, &wav);
    let alive = server.is_running();
    let log = server.stop();

    assert_eq!(failed, 500, "{v}");
    assert_eq!(v["error"]["code"], "inference_failed", "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        !message.contains("fault injected") && message.contains("server log"),
        "the client gets a generic message, not the panic: {message}"
    );
    assert!(
        log.contains("panicked: fault injected into"),
        "the reason is in the server's log: {log}"
    );
    assert!(alive, "the server survived the failed request");
    assert_eq!(ok, 200, "{w}");
    assert_eq!(w["text"], PHRASE, "the next request is served correctly");
}
