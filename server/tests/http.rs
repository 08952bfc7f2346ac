//! The real server binary on a free loopback port, driven over HTTP: endpoints, OpenAI
//! style errors, limits, the API key, the busy guard under load, and graceful shutdown.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::root;

fn assets() -> PathBuf {
    common::assets("ggml-silero-v6.2.0.bin")
}

struct Server {
    child: Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn write_config(dir: &Path, extra: serde_json::Value) -> PathBuf {
    let mut cfg = serde_json::json!({
        "port": 0,
        "threads": 1,
        "models": [{
            "id": "silero", "path": assets().join("ggml-silero-v6.2.0.bin"), "family": "silero_vad", "task": "vad",
            "model_spec_override": root().join("model_specs"),
        }],
    });
    for (k, v) in extra.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    let p = dir.join("server.json");
    std::fs::write(&p, serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
    p
}

fn start(extra: serde_json::Value) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), extra);
    let mut child = Command::new(env!("CARGO_BIN_EXE_audiocpp_server"))
        .arg("--config")
        .arg(&cfg)
        .env_remove("AUDIOCPP_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line.trim().rsplit(' ').next().unwrap().to_string();
    assert!(
        base.starts_with("http://127.0.0.1:"),
        "unexpected banner: {line}"
    );
    Server {
        child,
        base,
        _dir: dir,
    }
}

fn clip(name: &str) -> Vec<u8> {
    std::fs::read(assets().join("clips").join(name)).unwrap()
}

fn multipart(fields: &[(&str, &str)], file: Option<&[u8]>) -> (String, Vec<u8>) {
    let boundary = "audiocppboundary7d1f";
    let mut body = Vec::new();
    for (k, v) in fields {
        body.extend(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n")
                .as_bytes(),
        );
    }
    if let Some(f) = file {
        body.extend(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\n").as_bytes());
        body.extend(f);
        body.extend(b"\r\n");
    }
    body.extend(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// Status and JSON body of a request, whatever the status.
fn post(
    url: &str,
    content_type: &str,
    body: &[u8],
    auth: Option<&str>,
) -> (u16, serde_json::Value, Option<String>) {
    let mut req = ureq::post(url).set("Content-Type", content_type);
    if let Some(a) = auth {
        req = req.set("Authorization", a);
    }
    let resp = match req.send_bytes(body) {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{url}: {e}"),
    };
    let status = resp.status();
    let wall = resp.header("x-audiocpp-wall-ms").map(str::to_string);
    let v: serde_json::Value =
        serde_json::from_str(&resp.into_string().unwrap()).unwrap_or(serde_json::Value::Null);
    (status, v, wall)
}

fn vad_multipart(server: &Server, wav: &[u8]) -> (u16, serde_json::Value, Option<String>) {
    let (ct, body) = multipart(&[("model", "silero")], Some(wav));
    post(&format!("{}/v1/tasks/run", server.base), &ct, &body, None)
}

#[test]
fn health_models_and_vad_over_multipart_and_json() {
    let s = start(serde_json::json!({}));
    let health: serde_json::Value = ureq::get(&format!("{}/health", s.base))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    assert_eq!(health["status"], "ok");
    let models: serde_json::Value = ureq::get(&format!("{}/v1/models", s.base))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "silero");

    let (status, v, wall) = vad_multipart(&s, &clip("speech_gaps.wav"));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["segments"].as_array().unwrap().len(), 3, "{v}");
    assert!(wall.is_some(), "timing header present");

    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(clip("speech_gaps_48k_f32.wav"));
    let body =
        serde_json::json!({ "model": "silero", "audio_base64": b64, "return_probabilities": true });
    let (status, v, _) = post(
        &format!("{}/v1/tasks/run", s.base),
        "application/json",
        body.to_string().as_bytes(),
        None,
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["segments"].as_array().unwrap().len(), 3);
    assert!(v["probabilities"].as_array().unwrap().len() > 100);
}

#[test]
fn errors_have_openai_bodies_and_status_codes() {
    let s = start(serde_json::json!({ "max_body_bytes": 100000 }));
    let (status, v, _) = vad_multipart(&s, b"RIFF....WAVEnot really audio");
    assert_eq!(status, 400);
    assert_eq!(v["error"]["code"], "invalid_audio", "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("cannot decode audio"));

    let (ct, body) = multipart(&[("model", "nope")], Some(&clip("silence.wav")));
    let (status, v, _) = post(&format!("{}/v1/tasks/run", s.base), &ct, &body, None);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (404, Some("model_not_found"))
    );

    // Over the limit, but small enough to sit in the socket buffers while the server
    // answers early.
    let (status, v, _) = vad_multipart(&s, &clip("long.wav")[..150_000]);
    assert_eq!(status, 413, "{v}");
    assert_eq!(v["error"]["code"], "payload_too_large");

    let (ct, body) = multipart(&[("model", "silero")], Some(&clip("silence.wav")));
    let (status, v, _) = post(
        &format!("{}/v1/audio/transcriptions", s.base),
        &ct,
        &body,
        None,
    );
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("does task 'vad', not 'asr'"));

    let (status, v, _) = post(
        &format!("{}/v1/audio/speech", s.base),
        "application/json",
        b"{}",
        None,
    );
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (501, Some("tts_unavailable"))
    );

    let (status, _, _) = post(
        &format!("{}/v1/tasks/run", s.base),
        "text/plain",
        b"hi",
        None,
    );
    assert_eq!(status, 400);
}

#[test]
fn api_key_is_required_when_configured() {
    let s = start(serde_json::json!({ "api_key": "sekrit" }));
    let (ct, body) = multipart(&[("model", "silero")], Some(&clip("silence.wav")));
    let url = format!("{}/v1/tasks/run", s.base);
    let (status, v, _) = post(&url, &ct, &body, None);
    assert_eq!(
        (status, v["error"]["type"].as_str()),
        (401, Some("authentication_error"))
    );
    let (status, _, _) = post(&url, &ct, &body, Some("Bearer wrong"));
    assert_eq!(status, 401);
    let (status, _, _) = post(&url, &ct, &body, Some("Bearer sekrit"));
    assert_eq!(status, 200);
    assert_eq!(
        ureq::get(&format!("{}/health", s.base))
            .call()
            .unwrap()
            .status(),
        200,
        "health stays open"
    );
}

#[test]
fn bad_configs_exit_2_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(serde_json::Value, &str)> = vec![
        (
            serde_json::json!({ "port": 70000 }),
            "port 70000 is out of range",
        ),
        (serde_json::json!({ "bogus": 1 }), "unknown field `bogus`"),
        (
            serde_json::json!({ "models": [{ "id": "a", "path": "missing.bin", "family": "silero_vad", "task": "vad" }] }),
            "does not exist",
        ),
        (
            serde_json::json!({ "models": [{ "id": "a", "path": "server.json", "family": "whisperx", "task": "vad" }] }),
            "unknown model family 'whisperx'",
        ),
        (
            serde_json::json!({ "models": [{ "id": "a", "path": "server.json", "family": "silero_vad", "task": "asr" }] }),
            "does not do task 'asr'",
        ),
        (
            serde_json::json!({ "models": [{ "id": "a", "path": "server.json", "family": "silero_vad", "task": "vad", "vad_model": "server.json" }] }),
            "vad_model is for task 'asr' models",
        ),
        (
            serde_json::json!({ "models": [{ "id": "a", "path": "server.json", "family": "whisper", "task": "asr", "vad_model": "no-vad.bin" }] }),
            "no-vad.bin' does not exist",
        ),
    ];
    for (extra, needle) in cases {
        let cfg = write_config(dir.path(), extra);
        let o = Command::new(env!("CARGO_BIN_EXE_audiocpp_server"))
            .arg("--config")
            .arg(&cfg)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(needle), "{needle}: {err}");
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[test]
fn load_gives_only_200_or_503_and_reports_latency() {
    let s = start(serde_json::json!({ "busy_timeout_ms": 200 }));
    let wav = clip("voice_f3.wav");
    let deadline = Instant::now() + Duration::from_secs(10);
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..50 {
            scope.spawn(|| {
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let (status, v, _) = vad_multipart(&s, &wav);
                    assert!(
                        status == 200 || (status == 503 && v["error"]["code"] == "server_busy"),
                        "{status} {v}"
                    );
                    results
                        .lock()
                        .unwrap()
                        .push((status, t.elapsed().as_secs_f64() * 1000.0));
                }
            });
        }
    });
    let r = results.into_inner().unwrap();
    let mut ok: Vec<f64> = r
        .iter()
        .filter(|(s, _)| *s == 200)
        .map(|(_, ms)| *ms)
        .collect();
    ok.sort_by(|a, b| a.partial_cmp(b).unwrap());
    assert!(!ok.is_empty(), "some requests succeed");
    eprintln!(
        "load: 50 clients x 10 s: {} requests, {} ok ({:.1}/s), {} busy; ok latency p50 {:.0} ms, p99 {:.0} ms",
        r.len(),
        ok.len(),
        ok.len() as f64 / 10.0,
        r.len() - ok.len(),
        percentile(&ok, 0.5),
        percentile(&ok, 0.99)
    );
    assert_eq!(
        ureq::get(&format!("{}/health", s.base))
            .call()
            .unwrap()
            .status(),
        200,
        "still alive"
    );
}

#[test]
fn sigterm_finishes_in_flight_requests() {
    let mut s = start(serde_json::json!({}));
    let wav = clip("long.wav");
    let base = s.base.clone();
    let inflight = std::thread::spawn(move || {
        let (ct, body) = multipart(&[("model", "silero")], Some(&wav));
        post(&format!("{base}/v1/tasks/run"), &ct, &body, None)
    });
    std::thread::sleep(Duration::from_millis(50));
    let pid = s.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let (status, v, _) = inflight.join().unwrap();
    assert_eq!(status, 200, "the in-flight request completes: {v}");
    let code = s.child.wait().unwrap();
    assert!(code.success(), "clean exit after SIGTERM: {code:?}");
}
