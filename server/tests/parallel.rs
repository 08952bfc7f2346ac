//! A model's `parallel` workers: with two, two transcriptions sent at once both run
//! (a busy timeout far shorter than one transcription) and give exactly what each gives
//! alone; with one, the second is refused with 503 `server_busy`. `GET /v1/models`
//! reports `parallel`. Whisper tiny.en q8_0 on a 14 s clip, one thread per request.
//! With `batch` 4 on one worker, five requests sent at once are decoded together in
//! rounds (the `X-AudioCPP-Batch` header says how many at once), none refused, each
//! answered what it gets alone, a bad upload among them refused alone.
//! Qwen3-TTS forks too: two cloned-voice speech requests at once both run and give the
//! bytes one gives alone. A TTS family that does not fork serves with one worker and
//! says so in the log.

use std::path::Path;

use base64::Engine as _;

mod common;
use common::Server;

/// A server of tiny.en q8_0 with `parallel` workers and a 50 ms busy timeout.
fn start(dir: &Path, parallel: usize) -> Server {
    start_batched(dir, parallel, 1)
}

/// [`start`] with `batch` requests decoded together.
fn start_batched(dir: &Path, parallel: usize, batch: usize) -> Server {
    let gguf = dir.join("tiny.en-q8_0.gguf");
    if !gguf.is_file() {
        audiocpp_engine::tasks::convert(
            "whisper",
            &common::assets("whisper-tiny.en-ct2/model.bin").join("whisper-tiny.en-ct2"),
            None,
            &gguf,
            &audiocpp_engine::families::ConvertOptions {
                quantize: Some("q8_0".into()),
                sources: Vec::new(),
            },
        )
        .unwrap();
    }
    Server::start(
        dir,
        &serde_json::json!({
            "port": 0, "threads": 1, "busy_timeout_ms": 50,
            "models": [{ "id": "tiny", "path": gguf, "family": "whisper", "task": "asr",
                         "parallel": parallel, "batch": batch }],
        }),
    )
}

/// Status and JSON body of one transcription of `wav`.
fn transcribe(server: &Server, wav: &[u8]) -> (u16, serde_json::Value) {
    let (status, _, v) = transcribe_batched(server, wav);
    (status, v)
}

/// Status, `X-AudioCPP-Batch` header and JSON body of one transcription of `wav`.
fn transcribe_batched(server: &Server, wav: &[u8]) -> (u16, Option<usize>, serde_json::Value) {
    let (ct, body) = common::multipart(
        &[("model", "tiny"), ("response_format", "verbose_json")],
        Some(("a.wav", wav)),
    );
    // A request that never gets its answer fails the test instead of hanging it.
    let resp = common::send(
        ureq::post(&server.url("/v1/audio/transcriptions"))
            .timeout(std::time::Duration::from_secs(300)),
        &ct,
        &body,
    );
    let status = resp.status();
    let batch = resp.header("x-audiocpp-batch").map(|v| v.parse().unwrap());
    (status, batch, resp.into_json().unwrap())
}

/// Two transcriptions of `wav` sent at once.
fn two_at_once(server: &Server, wav: &[u8]) -> [(u16, serde_json::Value); 2] {
    at_once(|| transcribe(server, wav))
}

/// `request` made twice at once, from two threads released together.
fn at_once<R: Send>(request: impl Fn() -> R + Sync) -> [R; 2] {
    let barrier = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        let run = || {
            barrier.wait();
            request()
        };
        let (a, b) = (s.spawn(run), s.spawn(run));
        [a.join().unwrap(), b.join().unwrap()]
    })
}

#[test]
fn two_workers_run_two_requests_at_once_and_one_refuses_the_second() {
    let dir = tempfile::tempdir().unwrap();
    let wav = std::fs::read(common::assets("clips/speech_gaps.wav").join("clips/speech_gaps.wav"))
        .unwrap();

    let server = start(dir.path(), 2);
    let models: serde_json::Value = ureq::get(&server.url("/v1/models"))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    assert_eq!(models["data"][0]["parallel"], 2, "{models}");
    assert_eq!(models["data"][0]["status"], "ready", "{models}");
    let (status, alone) = transcribe(&server, wav.as_slice());
    assert_eq!(status, 200, "{alone}");
    assert!(!alone["text"].as_str().unwrap().is_empty(), "{alone}");
    for (status, v) in two_at_once(&server, &wav) {
        assert_eq!(status, 200, "with two workers both run: {v}");
        assert_eq!(v["text"], alone["text"]);
        assert_eq!(v["segments"], alone["segments"]);
    }
    drop(server);

    let server = start(dir.path(), 1);
    let mut answers = two_at_once(&server, &wav).to_vec();
    answers.sort_by_key(|(status, _)| *status);
    assert_eq!(answers[0].0, 200, "{}", answers[0].1);
    assert_eq!(answers[0].1["text"], alone["text"]);
    assert_eq!(
        (answers[1].0, answers[1].1["error"]["code"].as_str()),
        (503, Some("server_busy")),
        "with one worker the second waits 50 ms and is refused: {}",
        answers[1].1
    );
}

#[test]
fn a_batch_decodes_waiting_requests_together_with_the_answers_they_get_alone() {
    let dir = tempfile::tempdir().unwrap();
    let clip = |name: &str| {
        std::fs::read(common::assets(&format!("clips/{name}")).join(format!("clips/{name}")))
            .unwrap()
    };
    let wavs = [
        clip("speech_gaps.wav"),
        clip("voice_f3.wav"),
        clip("speech_gaps.wav"),
        clip("voice_f3.wav"),
        b"not audio at all".to_vec(),
    ];
    let server = start_batched(dir.path(), 1, 4);
    let models: serde_json::Value = ureq::get(&server.url("/v1/models"))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    assert_eq!(models["data"][0]["batch"], 4, "{models}");
    let alone: Vec<_> = wavs
        .iter()
        .map(|w| transcribe_batched(&server, w))
        .collect();
    for (i, (status, batch, v)) in alone.iter().enumerate() {
        if i == 4 {
            assert_eq!(*status, 400, "{v}");
            assert_eq!(v["error"]["code"], "invalid_audio", "{v}");
        } else {
            assert_eq!(*status, 200, "{v}");
            assert_eq!(*batch, Some(1), "sent alone");
            assert!(!v["text"].as_str().unwrap().is_empty(), "{v}");
        }
    }
    // Released together: the first leads, the others wait for its worker (no 503 at a
    // 50 ms busy timeout) and go in the next round together.
    let barrier = std::sync::Barrier::new(wavs.len());
    let together: Vec<_> = std::thread::scope(|s| {
        let runs: Vec<_> = wavs
            .iter()
            .map(|w| {
                let barrier = &barrier;
                let server = &server;
                s.spawn(move || {
                    barrier.wait();
                    transcribe_batched(server, w)
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let mut largest = 0;
    for (i, ((status, batch, v), (_, _, want))) in together.iter().zip(&alone).enumerate() {
        if i == 4 {
            assert_eq!(*status, 400, "{v}");
            continue;
        }
        assert_eq!(*status, 200, "request {i}: {v}");
        assert_eq!(v["text"], want["text"], "request {i}");
        assert_eq!(v["segments"], want["segments"], "request {i}");
        largest = largest.max(batch.unwrap());
    }
    assert!(
        largest >= 2,
        "no round decoded two requests together: {together:?}"
    );
}

#[test]
fn requests_waiting_for_a_batch_get_the_error_of_a_model_that_fails_to_load() {
    // The leader cannot get a worker (the lazy model fails to load): the requests
    // queued behind it get its 503 instead of waiting for a round that never comes.
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"not a model").unwrap();
    let server = Server::start(
        dir.path(),
        &serde_json::json!({
            "port": 0, "threads": 1, "busy_timeout_ms": 50,
            "models": [{ "id": "tiny", "path": junk, "family": "whisper", "task": "asr",
                         "lazy": true, "parallel": 1, "batch": 3 }],
        }),
    );
    let wav =
        std::fs::read(common::assets("clips/voice_f3.wav").join("clips/voice_f3.wav")).unwrap();
    let barrier = std::sync::Barrier::new(3);
    let answers: Vec<_> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    transcribe_batched(&server, &wav)
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    for (status, _, v) in answers {
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (503, Some("model_load_failed")),
            "{v}"
        );
    }
}

/// A server of `cfg` (written in `dir`) whose log [`Server::stop`] returns, and its
/// `GET /v1/models`.
fn spawn_logged(dir: &Path, cfg: &serde_json::Value) -> (Server, serde_json::Value) {
    let mut cmd = common::server_command(&common::write_config(dir, cfg));
    cmd.stderr(std::process::Stdio::piped());
    let server = Server::spawn(&mut cmd);
    let models = ureq::get(&server.url("/v1/models"))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    (server, models)
}

#[test]
fn a_family_that_does_not_fork_serves_with_one_worker_and_logs_it() {
    let dir = tempfile::tempdir().unwrap();
    let tone = dir.path().join("tone.gguf");
    audiocpp_engine::families::test_tone::write_model(&tone, 24_000, 0.5, 0).unwrap();
    let cfg = serde_json::json!({
        "port": 0, "threads": 1,
        "models": [{ "id": "tone", "path": tone, "family": "test_tone", "task": "tts", "parallel": 3 }],
    });
    let (server, models) = spawn_logged(dir.path(), &cfg);
    assert_eq!(models["data"][0]["parallel"], 1, "{models}");
    let spoken = common::post_json(
        &server,
        "/v1/audio/speech",
        &serde_json::json!({ "model": "tone", "input": "hi" }),
    );
    assert_eq!(spoken.status, 200);
    let log = server.stop();
    assert!(
        log.contains("model 'tone': this model runs one request at a time")
            && log.contains("it serves with 1 of 3 workers"),
        "{log}"
    );
}

#[test]
fn qwen3_tts_serves_two_speech_requests_at_once_with_the_same_audio() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = common::qwen3_clone_fixtures();
    let gguf = common::qwen3_base_gguf(dir.path());
    let cfg = serde_json::json!({
        "port": 0, "threads": 2, "busy_timeout_ms": 50,
        "models": [{ "id": "base", "path": gguf, "family": "qwen3_tts", "task": "tts", "parallel": 2 }],
    });
    let (server, models) = spawn_logged(dir.path(), &cfg);
    assert_eq!(models["data"][0]["parallel"], 2, "{models}");
    let wav = std::fs::read(fixtures.join("ref_24k.wav")).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&wav);
    let body = serde_json::json!({
        "model": "base", "input": "Two workers, one set of weights.",
        "ref_audio": format!("data:audio/wav;base64,{b64}"),
        "ref_text": "Hello, this is a short reference clip.",
        "options": { "temperature": 0, "max_frames": 12 },
    });
    let speak = || common::post_json(&server, "/v1/audio/speech", &body);
    let alone = speak();
    assert_eq!(
        alone.status,
        200,
        "{}",
        String::from_utf8_lossy(&alone.body)
    );
    assert!(alone.body.len() > 44, "a wav with samples");
    for answer in at_once(speak) {
        assert_eq!(
            answer.status,
            200,
            "with two workers both run: {}",
            String::from_utf8_lossy(&answer.body)
        );
        assert!(answer.body == alone.body, "the same audio as alone");
    }
    let log = server.stop();
    assert!(!log.contains("runs one request at a time"), "{log}");
}
