//! The real server binary on a free loopback port, driven over HTTP: endpoints, OpenAI
//! style errors, limits, the API key, the busy guard under load, and graceful shutdown.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{root, Server};

fn assets() -> PathBuf {
    common::assets("ggml-silero-v6.2.0.bin")
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
    common::write_config(dir, &cfg)
}

fn start(extra: serde_json::Value) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), extra);
    Server::spawn(&mut common::server_command(&cfg)).owning(dir)
}

fn clip(name: &str) -> Vec<u8> {
    std::fs::read(assets().join("clips").join(name)).unwrap()
}

fn multipart(fields: &[(&str, &str)], file: Option<&[u8]>) -> (String, Vec<u8>) {
    common::multipart(fields, file.map(|f| ("a.wav", f)))
}

/// Status and JSON body of a request, whatever the status.
fn post(
    url: &str,
    content_type: &str,
    body: &[u8],
    auth: Option<&str>,
) -> (u16, serde_json::Value, Option<String>) {
    let mut req = ureq::post(url);
    if let Some(a) = auth {
        req = req.set("Authorization", a);
    }
    let resp = common::send(req, content_type, body);
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
        br#"{"model": "silero", "input": "hi"}"#,
        None,
    );
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("does task 'vad', not 'tts'"));

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
        (
            serde_json::json!({ "models": [{ "id": "a", "path": "server.json", "family": "whisper", "task": "asr", "vad_model": "server.json", "vad_backend": "tpu" }] }),
            "model 'a': vad_backend: unknown backend 'tpu'",
        ),
        (
            serde_json::json!({ "models": [{ "id": "a", "path": "server.json", "family": "whisper", "task": "asr", "parallel": 0 }] }),
            "model 'a': parallel is 0; it must be at least 1",
        ),
        (
            serde_json::json!({ "models": [{ "id": "a", "path": "server.json", "family": "whisper", "task": "asr", "parallel": 1000 }] }),
            "model 'a': parallel 1000 is more than 64",
        ),
        (
            serde_json::json!({ "models": [{ "id": "a", "path": "server.json", "family": "silero_vad", "task": "vad", "parallel": 2 }] }),
            "model 'a': parallel 2 is for task 'asr' and 'tts' models; 'vad' models run one request at a time",
        ),
        (
            serde_json::json!({ "models": [{ "id": "a", "path": "server.json", "family": "whisper", "task": "asr", "batch": 0 }] }),
            "model 'a': batch 0 is not between 1 and 32",
        ),
        (
            serde_json::json!({ "models": [{ "id": "a", "path": "server.json", "family": "whisper", "task": "asr", "batch": 33 }] }),
            "model 'a': batch 33 is not between 1 and 32",
        ),
        (
            serde_json::json!({ "models": [{ "id": "a", "path": "server.json", "family": "kokoro", "task": "tts", "batch": 2 }] }),
            "model 'a': batch 2 is for task 'asr' models, not 'tts'",
        ),
    ];
    for (extra, needle) in cases {
        let cfg = write_config(dir.path(), extra);
        let o = common::run_to_exit(&cfg);
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
    s.terminate();
    let (status, v, _) = inflight.join().unwrap();
    assert_eq!(status, 200, "the in-flight request completes: {v}");
    let code = s.child.wait().unwrap();
    assert!(code.success(), "clean exit after SIGTERM: {code:?}");
}

/// A WAV header claiming `rate` Hz over `samples` 16-bit samples.
fn wav_at(rate: u32, samples: usize) -> Vec<u8> {
    let mut cur = std::io::Cursor::new(Vec::new());
    {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: rate,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::new(&mut cur, spec).unwrap();
        for i in 0..samples {
            w.write_sample((i % 200) as i16).unwrap();
        }
        w.finalize().unwrap();
    }
    cur.into_inner()
}

#[test]
fn a_1_hz_header_is_refused_before_it_is_resampled() {
    let s = start(serde_json::json!({}));
    // 84 KB at 1 Hz would be 11.7 hours (2.7 GB) of 16 kHz samples.
    let (status, v, _) = vad_multipart(&s, &wav_at(1, 42_000));
    assert_eq!(status, 400, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("below the limit of 4000 Hz"), "{msg}");
    assert!(msg.contains("min_sample_rate_hz"), "{msg}");
    let s = start(serde_json::json!({ "max_audio_s": 1.0 }));
    let (status, v, _) = vad_multipart(&s, &wav_at(16000, 32_000));
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("over the limit of 1 s (max_audio_s)"));
}

/// Raw bytes to a server and whatever comes back before it closes (or `wait` passes).
fn raw_exchange(base: &str, bytes: &[u8], wait: Duration) -> (String, Duration) {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://");
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(wait)).unwrap();
    c.write_all(bytes).unwrap();
    let t0 = Instant::now();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    (String::from_utf8_lossy(&got).into_owned(), t0.elapsed())
}

#[test]
fn a_huge_content_length_is_refused_before_the_body() {
    use std::io::{Read, Write};
    let s = start(serde_json::json!({}));
    let head = "POST /v1/tasks/run HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 1000000000000\r\n\r\n";
    let mut c = std::net::TcpStream::connect(s.base.trim_start_matches("http://")).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(head.as_bytes()).unwrap();
    let t0 = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("payload_too_large") {
        let n = c.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "closed without an answer: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    let took = t0.elapsed();
    let resp = String::from_utf8_lossy(&got);
    assert!(resp.starts_with("HTTP/1.1 413"), "{resp}");
    assert!(took < Duration::from_secs(2), "answered at once: {took:?}");
}

/// A speech body whose Content-Length is over the speech limit (64 KiB) but under what
/// the server drains: the client uploads all of it and then reads a 413, not a reset.
#[test]
fn a_speech_body_declared_over_its_limit_gets_413_after_the_whole_upload() {
    use std::io::{Read, Write};
    let s = start(serde_json::json!({}));
    let body = format!(
        "{{\"model\":\"kokoro\",\"voice\":\"af_heart\",\"input\":\"{}\"}}",
        "a".repeat(32 << 20)
    );
    let head = format!(
        "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut c = std::net::TcpStream::connect(s.base.trim_start_matches("http://")).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(head.as_bytes()).unwrap();
    c.write_all(body.as_bytes())
        .expect("the server drains the rest of a refused upload, so the whole body is sent");
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    let resp = String::from_utf8_lossy(&got);
    assert!(resp.starts_with("HTTP/1.1 413"), "{resp}");
    assert!(
        resp.contains("payload_too_large") && resp.contains("at most 65536 bytes"),
        "{resp}"
    );
}

#[test]
fn slow_and_idle_clients_are_closed_and_the_cap_answers_503() {
    let s = start(serde_json::json!({ "header_timeout_ms": 500, "max_connections": 16 }));
    let addr = s.base.trim_start_matches("http://").to_string();
    // A client sending its header a byte at a time is closed once the timeout passes.
    let slow = {
        let addr = addr.clone();
        std::thread::spawn(move || {
            use std::io::Write;
            let mut c = std::net::TcpStream::connect(&addr).unwrap();
            let t0 = Instant::now();
            for b in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: "
                .iter()
                .cycle()
            {
                if c.write_all(&[*b]).is_err() || t0.elapsed() > Duration::from_secs(10) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            t0.elapsed()
        })
    };
    let took = slow.join().unwrap();
    assert!(
        took < Duration::from_secs(5),
        "the slow client is closed after the header timeout, not kept: {took:?}"
    );
    // 16 idle connections fill the cap; the 17th gets 503 at once, then they are closed
    // as idle and the server answers again.
    let idle: Vec<std::net::TcpStream> = (0..16)
        .map(|_| std::net::TcpStream::connect(&addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let (resp, _) = raw_exchange(
        &s.base,
        b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(resp.starts_with("HTTP/1.1 503"), "{resp}");
    assert!(resp.contains("max_connections"), "{resp}");
    std::thread::sleep(Duration::from_millis(1200));
    let (resp, _) = raw_exchange(
        &s.base,
        b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(
        resp.starts_with("HTTP/1.1 200"),
        "idle connections were closed: {resp}"
    );
    drop(idle);
}

#[test]
fn an_idle_keep_alive_connection_is_closed_after_the_header_timeout() {
    use std::io::{Read, Write};
    let s = start(serde_json::json!({ "header_timeout_ms": 500 }));
    let mut c = std::net::TcpStream::connect(s.base.trim_start_matches("http://")).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // One request on a keep-alive connection (HTTP/1.1's default), answered in full.
    c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let t0 = Instant::now();
    while !String::from_utf8_lossy(&got).contains("\r\n\r\n") || got.last() != Some(&b'}') {
        let n = c.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "closed before the answer: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
        assert!(t0.elapsed() < Duration::from_secs(10), "no answer");
    }
    assert!(String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"));
    // Then the client sends nothing: the server closes the connection once the header
    // timeout has passed, instead of keeping the socket (and its slot) forever.
    let idle_from = Instant::now();
    let n = c.read(&mut buf).unwrap_or(0);
    let idle = idle_from.elapsed();
    assert_eq!(n, 0, "nothing more is sent on an idle connection");
    assert!(
        idle >= Duration::from_millis(400) && idle < Duration::from_secs(5),
        "closed after about the 500 ms header timeout, not at once and not never: {idle:?}"
    );
}

#[test]
fn sigterm_is_not_held_up_by_a_half_sent_request() {
    let mut s = start(serde_json::json!({ "header_timeout_ms": 30000 }));
    let addr = s.base.trim_start_matches("http://").to_string();
    let mut half = std::net::TcpStream::connect(&addr).unwrap();
    std::io::Write::write_all(&mut half, b"POST /v1/tasks/run HTTP/1.1\r\nHost: x\r\n").unwrap();
    let idle = std::net::TcpStream::connect(&addr).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    s.terminate();
    let code = s.exit_within(
        Duration::from_secs(10),
        "SIGTERM waits for a half-sent request",
    );
    assert!(code.success(), "{code:?}");
    drop((half, idle));
}

#[test]
fn openai_surface_cors_and_keys() {
    let s = start(serde_json::json!({ "api_key": "sekrit", "cors_origins": ["*"] }));
    let (ct, body) = multipart(&[("model", "silero")], Some(&clip("silence.wav")));
    let url = format!("{}/v1/tasks/run", s.base);
    let (status, _, _) = post(&url, &ct, &body, Some("bearer sekrit"));
    assert_eq!(status, 200, "the scheme is case-insensitive");
    let m: serde_json::Value = ureq::get(&format!("{}/v1/models/silero", s.base))
        .set("Authorization", "Bearer sekrit")
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    assert_eq!(m["id"], "silero");
    assert_eq!(m["object"], "model");
    assert!(m["created"].as_u64().unwrap() > 1_700_000_000, "{m}");
    let missing = ureq::get(&format!("{}/v1/models/nope", s.base))
        .set("Authorization", "Bearer sekrit")
        .call();
    assert!(matches!(missing, Err(ureq::Error::Status(404, _))));

    let dir = tempfile::tempdir().unwrap();
    for (extra, needle) in [
        (serde_json::json!({ "api_key": "" }), "api_key is empty"),
        (
            serde_json::json!({ "cors_origins": ["*", "http://a"] }),
            "must be the only entry",
        ),
        (
            serde_json::json!({ "cors_origins": ["not an origin"] }),
            "is not an origin",
        ),
        (
            serde_json::json!({ "max_connections": 0 }),
            "max_connections is 0",
        ),
    ] {
        let cfg = write_config(dir.path(), extra);
        let o = common::run_to_exit(&cfg);
        assert_eq!(o.status.code(), Some(2));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(needle), "{needle}: {err}");
    }
    let cfg = write_config(dir.path(), serde_json::json!({ "host": "0.0.0.0" }));
    let mut child = common::server_command(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.starts_with("warning: listening on 0.0.0.0"), "{line}");
}

#[test]
fn a_model_that_fails_to_load_is_marked_failed_and_the_others_serve() {
    let dir = tempfile::tempdir().unwrap();
    // The last tensor claims 2^27 elements: ggml would abort in its allocator.
    let seed = dir.path().join("seed.gguf");
    let cli = Path::new(env!("CARGO_BIN_EXE_audiocpp_server")).with_file_name("audiocpp_cli");
    assert!(
        Command::new(&cli)
            .args(["--task", "convert", "--family", "silero_vad", "--model"])
            .arg(assets().join("ggml-silero-v6.2.0.bin"))
            .arg("--out")
            .arg(&seed)
            .arg("--model-spec-override")
            .arg(root().join("model_specs"))
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success(),
        "convert with {}",
        cli.display()
    );
    let mut bytes = std::fs::read(&seed).unwrap();
    let last_dims = last_tensor_dim_offset(&bytes);
    bytes[last_dims..last_dims + 8].copy_from_slice(&(1u64 << 27).to_le_bytes());
    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, &bytes).unwrap();
    let s = start(serde_json::json!({ "models": [
        { "id": "silero", "path": seed, "family": "silero_vad", "task": "vad" },
        { "id": "bad", "path": bad, "family": "silero_vad", "task": "vad", "lazy": true },
        { "id": "bad-eager", "path": bad, "family": "silero_vad", "task": "vad" },
    ]}));
    for id in ["bad", "bad-eager", "bad"] {
        let (ct, body) = multipart(&[("model", id)], Some(&clip("silence.wav")));
        let (status, v, _) = post(&format!("{}/v1/tasks/run", s.base), &ct, &body, None);
        assert_eq!(status, 503, "{v}");
        assert_eq!(v["error"]["code"], "model_load_failed", "{v}");
    }
    let (status, v, _) = vad_multipart(&s, &clip("silence.wav"));
    assert_eq!(status, 200, "the good model still serves: {v}");
    let models: serde_json::Value = ureq::get(&format!("{}/v1/models", s.base))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    let status_of = |id: &str| {
        models["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id)
            .unwrap()["status"]
            .clone()
    };
    assert_eq!(status_of("bad"), "failed");
    assert_eq!(status_of("silero"), "ready");
}

/// Offset of the last tensor's first dimension in a GGUF's tensor table (found by
/// walking the table).
fn last_tensor_dim_offset(b: &[u8]) -> usize {
    let u64_at = |p: usize| u64::from_le_bytes(b[p..p + 8].try_into().unwrap()) as usize;
    let u32_at = |p: usize| u32::from_le_bytes(b[p..p + 4].try_into().unwrap()) as usize;
    let (n_tensors, n_kv) = (u64_at(8), u64_at(16));
    let mut p = 24;
    fn skip(b: &[u8], p: usize, t: usize) -> usize {
        let u64_at = |p: usize| u64::from_le_bytes(b[p..p + 8].try_into().unwrap()) as usize;
        match t {
            0 | 1 | 7 => p + 1,
            2 | 3 => p + 2,
            4..=6 => p + 4,
            10..=12 => p + 8,
            8 => p + 8 + u64_at(p),
            9 => {
                let et = u32::from_le_bytes(b[p..p + 4].try_into().unwrap()) as usize;
                let n = u64_at(p + 4);
                (0..n).fold(p + 12, |q, _| skip(b, q, et))
            }
            _ => panic!("type {t}"),
        }
    }
    for _ in 0..n_kv {
        p += 8 + u64_at(p);
        let t = u32_at(p);
        p = skip(b, p + 4, t);
    }
    let mut last = 0;
    for _ in 0..n_tensors {
        p += 8 + u64_at(p);
        let n_dims = u32_at(p);
        last = p + 4;
        p += 4 + 8 * n_dims + 12;
    }
    last
}
