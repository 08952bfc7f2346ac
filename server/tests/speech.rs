//! `POST /v1/audio/speech` on the real server binary, speaking with the test-only family
//! `test_tone` (one tone per character at the voice's pitch, 0.05 s per character at
//! speed 1; this crate's dev-dependency turns on the engine's `test-families`): the WAV
//! and PCM answers, whole and streamed sentence by sentence (the first audio out before
//! synthesis ends), the FLAC answer (whole only, the WAV's samples), every bad field as
//! a 400 naming it, the output limit, the busy guard, and the config checks.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use audiocpp_engine::families::test_tone;

mod common;
use common::{Answer, Server};

const RATE: u32 = 24_000;

/// A test_tone model file.
fn model(dir: &Path, name: &str, compute_ms_per_char: u64) -> PathBuf {
    let p = dir.join(name);
    test_tone::write_model(&p, RATE, 0.5, compute_ms_per_char).unwrap();
    p
}

/// The server with `tone` (instant) and `slow` (20 ms of "compute" per character)
/// served, and `extra` config keys.
fn start(extra: serde_json::Value) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = serde_json::json!({
        "port": 0,
        "threads": 1,
        "models": [
            { "id": "tone", "path": model(dir.path(), "tone.gguf", 0), "family": "test_tone", "task": "tts" },
            { "id": "slow", "path": model(dir.path(), "slow.gguf", 20), "family": "test_tone", "task": "tts" },
        ],
    });
    for (k, v) in extra.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    Server::start(dir.path(), &cfg).owning(dir)
}

fn speak(server: &Server, body: &serde_json::Value) -> Answer {
    common::post_json(server, "/v1/audio/speech", body)
}

/// The error body's `param` and `message` of a 400.
fn refused(server: &Server, body: serde_json::Value) -> (String, String) {
    let a = speak(server, &body);
    assert_eq!(
        a.status,
        400,
        "{body}: {}",
        String::from_utf8_lossy(&a.body)
    );
    let v: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    (
        v["error"]["param"].as_str().unwrap_or("").to_string(),
        v["error"]["message"].as_str().unwrap().to_string(),
    )
}

fn samples_of(pcm: &[u8]) -> Vec<i16> {
    pcm.chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect()
}

fn pitch_hz(x: &[i16]) -> f64 {
    let z = x.windows(2).filter(|w| (w[0] < 0) != (w[1] < 0)).count();
    z as f64 / 2.0 / (x.len() as f64 / RATE as f64)
}

/// Samples test_tone makes for `chars` characters at `speed`.
fn expected_len(chars: usize, speed: f32) -> usize {
    (test_tone::CHAR_SECONDS / speed * RATE as f32) as usize * chars
}

const TEXT: &str = "Hello there. How are you? Fine.";
/// The characters spoken: the sentences without the spaces between them.
const TEXT_CHARS: usize = 12 + 12 + 5;

#[test]
fn wav_and_pcm_whole_and_streamed_carry_the_same_audio() {
    let server = start(serde_json::json!({}));
    let wav = speak(
        &server,
        &serde_json::json!({ "model": "tone", "input": TEXT, "voice": "high", "response_format": "wav" }),
    );
    assert_eq!(wav.status, 200, "{}", String::from_utf8_lossy(&wav.body));
    assert_eq!(wav.content_type, "audio/wav");
    let mut r = hound::WavReader::new(std::io::Cursor::new(&wav.body)).unwrap();
    let spec = r.spec();
    assert_eq!(
        (spec.sample_rate, spec.channels, spec.bits_per_sample),
        (RATE, 1, 16)
    );
    let samples: Vec<i16> = r.samples::<i16>().map(|x| x.unwrap()).collect();
    let n = expected_len(TEXT_CHARS, 1.0);
    assert_eq!(samples.len(), n, "exact length in the header");
    assert!((pitch_hz(&samples) - 440.0).abs() < 10.0);
    assert_eq!(wav.header("x-audiocpp-sentences").as_deref(), Some("3"));
    assert_eq!(
        wav.header("x-audiocpp-sample-rate").as_deref(),
        Some("24000")
    );
    let wall: f64 = wav.header("x-audiocpp-wall-ms").unwrap().parse().unwrap();
    let rtf: f64 = wav.header("x-audiocpp-rtf").unwrap().parse().unwrap();
    assert!(wall >= 0.0 && rtf >= 0.0);
    assert!(wav.header("content-length").is_some(), "a whole answer");

    // No response_format: wav, our default; no voice: the first (220 Hz); speed 2.
    let default = speak(
        &server,
        &serde_json::json!({ "model": "tone", "input": TEXT, "speed": 2.0 }),
    );
    assert_eq!(default.content_type, "audio/wav");
    let low = samples_of(&default.body[44..]);
    assert_eq!(low.len(), expected_len(TEXT_CHARS, 2.0));
    assert!((pitch_hz(&low) - 220.0).abs() < 10.0);

    let pcm = speak(
        &server,
        &serde_json::json!({ "model": "tone", "input": TEXT, "voice": "high", "response_format": "pcm" }),
    );
    assert_eq!(pcm.status, 200);
    assert_eq!(pcm.content_type, "audio/pcm");
    assert_eq!(pcm.body, wav.body[44..], "pcm is the wav's data");

    // Streamed: the same samples; the WAV header has OpenAI's unknown length.
    let streamed = speak(
        &server,
        &serde_json::json!({ "model": "tone", "input": TEXT, "voice": "high", "response_format": "wav", "stream_format": "audio" }),
    );
    assert_eq!(streamed.status, 200);
    assert!(streamed.header("content-length").is_none(), "chunked");
    assert_eq!(&streamed.body[4..8], &[0xff; 4]);
    assert_eq!(&streamed.body[40..44], &[0xff; 4]);
    assert_eq!(streamed.body[44..], wav.body[44..]);
    assert_eq!(streamed.body[..4], wav.body[..4]);
    let streamed_pcm = speak(
        &server,
        &serde_json::json!({ "model": "tone", "input": TEXT, "voice": "high", "response_format": "pcm", "stream_format": "audio" }),
    );
    assert_eq!(streamed_pcm.body, pcm.body);
    // `instructions` is accepted and ignored.
    let with_instructions = speak(
        &server,
        &serde_json::json!({ "model": "tone", "input": TEXT, "voice": "high", "response_format": "pcm", "instructions": "cheerfully" }),
    );
    assert_eq!(with_instructions.body, pcm.body);

    // FLAC: the WAV's samples, losslessly; made whole, never streamed.
    let flac = speak(
        &server,
        &serde_json::json!({ "model": "tone", "input": TEXT, "voice": "high", "response_format": "flac" }),
    );
    assert_eq!(flac.status, 200, "{}", String::from_utf8_lossy(&flac.body));
    assert_eq!(flac.content_type, "audio/flac");
    assert_eq!(
        flac.header("x-audiocpp-sample-rate").as_deref(),
        Some("24000")
    );
    assert!(flac.header("content-length").is_some(), "a whole answer");
    assert!(
        flac.body.len() < wav.body.len(),
        "{} bytes",
        flac.body.len()
    );
    let decoded =
        audiocpp_engine::audio::decode(&flac.body, &Default::default()).expect("the FLAC decodes");
    assert_eq!(decoded.sample_rate, RATE);
    let flac_samples: Vec<i16> = decoded
        .samples
        .iter()
        .map(|x| (x * 32768.0).round() as i16)
        .collect();
    assert_eq!(flac_samples, samples, "the WAV's samples");
}

/// Reads a streamed answer over a raw connection: when its first audio byte came and
/// when the answer ended, from the moment the request was sent.
fn timed_stream(server: &Server, body: &serde_json::Value) -> (Duration, Duration, Vec<u8>) {
    let mut resp = ureq::post(&format!("{}/v1/audio/speech", server.base))
        .set("Content-Type", "application/json");
    resp = resp.timeout(Duration::from_secs(60));
    let t0 = Instant::now();
    let r = resp.send_string(&body.to_string()).unwrap();
    let mut reader = r.into_reader();
    let mut first = [0u8; 1];
    reader.read_exact(&mut first).unwrap();
    let t_first = t0.elapsed();
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).unwrap();
    let t_end = t0.elapsed();
    let mut all = first.to_vec();
    all.extend(rest);
    (t_first, t_end, all)
}

#[test]
fn a_streamed_answer_sends_audio_before_synthesis_ends() {
    let server = start(serde_json::json!({}));
    // Four sentences of 20 characters: 0.4 s of compute each on `slow`.
    let text =
        "Sentence number one. Sentence number two. Sentence numb three. Sentence numbr four.";
    let (first, end, body) = timed_stream(
        &server,
        &serde_json::json!({ "model": "slow", "input": text, "response_format": "pcm", "stream_format": "audio" }),
    );
    assert_eq!(samples_of(&body).len(), expected_len(80, 1.0));
    assert!(
        end >= Duration::from_millis(1500),
        "four sentences take 1.6 s: {end:?}"
    );
    assert!(
        first + Duration::from_millis(900) < end,
        "the first sentence's audio came at {first:?}, the end at {end:?}"
    );
    // Whole (the default): nothing before the end.
    let (first, end, _) = timed_stream(
        &server,
        &serde_json::json!({ "model": "slow", "input": text, "response_format": "pcm" }),
    );
    assert!(
        first + Duration::from_millis(300) > end,
        "{first:?} vs {end:?}"
    );
}

#[test]
fn every_bad_field_is_a_400_naming_it() {
    let server = start(serde_json::json!({}));
    for f in ["mp3", "opus", "aac"] {
        let (param, msg) = refused(
            &server,
            serde_json::json!({ "model": "tone", "input": "hi", "response_format": f }),
        );
        assert_eq!(param, "response_format");
        assert!(msg.contains(&format!("'{f}' is not available")), "{msg}");
        assert!(
            msg.contains("wav, pcm, flac"),
            "names the formats we have: {msg}"
        );
    }
    let (param, msg) = refused(
        &server,
        serde_json::json!({ "model": "tone", "input": "hi", "response_format": "flac", "stream_format": "audio" }),
    );
    assert_eq!(param, "stream_format");
    assert!(msg.contains("a flac answer is sent whole"), "{msg}");
    let (param, _) = refused(
        &server,
        serde_json::json!({ "model": "tone", "input": "hi", "response_format": "xyz" }),
    );
    assert_eq!(param, "response_format");
    for speed in [0.0, 0.2, 4.01, -1.0] {
        let (param, msg) = refused(
            &server,
            serde_json::json!({ "model": "tone", "input": "hi", "speed": speed }),
        );
        assert_eq!(param, "speed");
        assert!(msg.contains("from 0.25 to 4"), "{msg}");
    }
    for input in [serde_json::json!(""), serde_json::json!("  \n")] {
        let (param, msg) = refused(
            &server,
            serde_json::json!({ "model": "tone", "input": input }),
        );
        assert_eq!(param, "input");
        assert!(msg.contains("input is empty"), "{msg}");
    }
    let (param, _) = refused(&server, serde_json::json!({ "model": "tone" }));
    assert_eq!(param, "input");
    let (param, msg) = refused(
        &server,
        serde_json::json!({ "model": "tone", "input": "é".repeat(4097) }),
    );
    assert_eq!(param, "input");
    assert!(
        msg.contains("4097 characters, over the limit of 4096"),
        "{msg}"
    );
    let at_limit = speak(
        &server,
        &serde_json::json!({ "model": "tone", "input": "é".repeat(4096), "response_format": "pcm" }),
    );
    assert_eq!(at_limit.status, 200, "4096 characters are allowed");
    let (param, msg) = refused(
        &server,
        serde_json::json!({ "model": "tone", "input": "hi", "voice": "alloy" }),
    );
    assert_eq!(param, "voice");
    assert!(msg.contains("voices: low, high"), "{msg}");
    let by_id = speak(
        &server,
        &serde_json::json!({ "model": "tone", "input": "hi", "voice": { "id": "high" } }),
    );
    assert_eq!(by_id.status, 200);
    let (param, _) = refused(
        &server,
        serde_json::json!({ "model": "tone", "input": "hi", "stream_format": "sse" }),
    );
    assert_eq!(param, "stream_format");
    let (param, _) = refused(&server, serde_json::json!({ "input": "hi" }));
    assert_eq!(param, "model");
    let (_, msg) = refused(
        &server,
        serde_json::json!({ "model": "tone", "input": "hi", "pitch": 2 }),
    );
    assert!(msg.contains("unknown field `pitch`"), "{msg}");
    let unknown = speak(
        &server,
        &serde_json::json!({ "model": "nope", "input": "hi" }),
    );
    assert_eq!(unknown.status, 404);
    let form = ureq::post(&format!("{}/v1/audio/speech", server.base))
        .set("Content-Type", "text/plain")
        .send_string("hi");
    assert!(matches!(form, Err(ureq::Error::Status(400, _))));
    // A tts model is not a transcription model.
    let (ct, body) = (
        "multipart/form-data; boundary=b",
        "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\ntone\r\n--b--\r\n",
    );
    let r = ureq::post(&format!("{}/v1/audio/transcriptions", server.base))
        .set("Content-Type", ct)
        .send_string(body);
    match r {
        Err(ureq::Error::Status(400, r)) => {
            let text = r.into_string().unwrap();
            assert!(text.contains("does task 'tts', not 'asr'"), "{text}")
        }
        other => panic!("{:?}", other.map(|r| r.status())),
    }
}

#[test]
fn the_speech_limit_refuses_whole_answers_and_cuts_streams() {
    let server = start(serde_json::json!({ "max_speech_s": 1.5 }));
    let text = "Hello there. ".repeat(5);
    let (param, msg) = refused(
        &server,
        serde_json::json!({ "model": "tone", "input": text, "response_format": "pcm" }),
    );
    assert_eq!(param, "");
    assert!(
        msg.contains("the speech passed the limit of 1.5 s of audio at sentence 3 of 5"),
        "{msg}"
    );
    // Streamed: the first sentences went out, then the stream is cut (no clean end).
    // Each sentence is 0.6 s of audio, so the third passes the limit and is refused as
    // soon as its length is known, without its synthesis (a cut right after the first
    // chunk has its own test below).
    let r = ureq::post(&format!("{}/v1/audio/speech", server.base))
        .set("Content-Type", "application/json")
        .send_string(
            &serde_json::json!({ "model": "slow", "input": text, "response_format": "pcm", "stream_format": "audio" })
                .to_string(),
        )
        .unwrap();
    let mut body = Vec::new();
    let read = r.into_reader().read_to_end(&mut body);
    assert!(
        read.is_err(),
        "a cut stream is an error, not an end: {} bytes",
        body.len()
    );
    // The model serves the next request.
    let ok = speak(
        &server,
        &serde_json::json!({ "model": "tone", "input": "Hello there.", "response_format": "pcm" }),
    );
    assert_eq!(samples_of(&ok.body).len(), expected_len(12, 1.0));
}

#[test]
fn a_stream_cut_right_after_its_first_sentence_still_delivers_that_sentence() {
    // The second sentence passes the limit and is refused at once, so the cut follows
    // the first chunk within microseconds: the response head and that chunk must still
    // reach the client before the connection closes. Repeated, as the cut once raced
    // the head.
    let server = start(serde_json::json!({ "max_speech_s": 1.0 }));
    let body = serde_json::json!({
        "model": "tone",
        "input": "Hello there. ".repeat(3),
        "response_format": "pcm",
        "stream_format": "audio",
    })
    .to_string();
    for attempt in 0..25 {
        let r = ureq::post(&format!("{}/v1/audio/speech", server.base))
            .set("Content-Type", "application/json")
            .send_string(&body)
            .unwrap_or_else(|e| panic!("attempt {attempt}: no response head: {e}"));
        assert_eq!(r.status(), 200);
        let mut pcm = Vec::new();
        let read = r.into_reader().read_to_end(&mut pcm);
        assert!(
            read.is_err(),
            "attempt {attempt}: a cut stream is an error, not an end"
        );
        assert_eq!(
            samples_of(&pcm).len(),
            expected_len(12, 1.0),
            "attempt {attempt}: the first sentence, whole"
        );
    }
}

#[test]
fn a_busy_model_answers_503_while_it_streams() {
    let server = start(serde_json::json!({ "busy_timeout_ms": 200 }));
    let base = server.base.clone();
    let long = std::thread::spawn(move || {
        let r = ureq::post(&format!("{base}/v1/audio/speech"))
            .set("Content-Type", "application/json")
            .send_string(
                &serde_json::json!({ "model": "slow", "input": "One two three four five six. Seven eight nine ten eleven.", "response_format": "pcm", "stream_format": "audio" })
                    .to_string(),
            )
            .unwrap();
        let mut b = Vec::new();
        r.into_reader().read_to_end(&mut b).unwrap();
        b.len()
    });
    std::thread::sleep(Duration::from_millis(300));
    let busy = speak(
        &server,
        &serde_json::json!({ "model": "slow", "input": "hi" }),
    );
    assert_eq!(busy.status, 503, "{}", String::from_utf8_lossy(&busy.body));
    let v: serde_json::Value = serde_json::from_slice(&busy.body).unwrap();
    assert_eq!(v["error"]["code"], "server_busy");
    let other = speak(
        &server,
        &serde_json::json!({ "model": "tone", "input": "hi" }),
    );
    assert_eq!(other.status, 200, "another model is not held up");
    assert_eq!(long.join().unwrap(), expected_len(56, 1.0) * 2);
    let models: serde_json::Value = ureq::get(&format!("{}/v1/models", server.base))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    let tone = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "tone")
        .unwrap();
    assert_eq!(tone["task"], "tts");
    assert_eq!(tone["family"], "test_tone");
}

#[test]
fn bad_tts_configs_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let tone = model(dir.path(), "tone.gguf", 0);
    let cases = [
        (
            serde_json::json!({ "models": [{ "id": "t", "path": tone, "family": "whisper", "task": "tts" }] }),
            "family 'whisper' does not do task 'tts'",
        ),
        (
            serde_json::json!({ "max_speech_s": 0, "models": [{ "id": "t", "path": tone, "family": "test_tone", "task": "tts" }] }),
            "max_speech_s is 0",
        ),
    ];
    for (cfg, needle) in cases {
        let out = common::run_to_exit(&common::write_config(dir.path(), &cfg));
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{err}");
    }
}

/// Where a streamed answer stood when SIGTERM came and when it ended, and how the
/// server exited.
struct Drained {
    /// Samples received in all.
    samples: usize,
    /// Whether the body ended properly (its final chunk) rather than being cut.
    whole: bool,
    /// From SIGTERM to the body's end or cut.
    after_signal: Duration,
    /// The exit status.
    exit: std::process::ExitStatus,
    /// What the server wrote to stderr.
    log: String,
}

/// Starts the server on `cfg` (written into `dir`) with its stderr kept.
fn start_logged(dir: tempfile::TempDir, cfg: &serde_json::Value) -> Server {
    let mut cmd = common::server_command(&common::write_config(dir.path(), cfg));
    cmd.stderr(std::process::Stdio::piped());
    Server::spawn(&mut cmd).owning(dir)
}

/// Sends the streamed speech request `body`, sends SIGTERM to the server once the first
/// bytes came, reads on to the end and waits for the server's exit.
fn sigterm_during(mut server: Server, body: &serde_json::Value) -> (Drained, Vec<u8>) {
    let r = ureq::post(&server.url("/v1/audio/speech"))
        .set("Content-Type", "application/json")
        .timeout(Duration::from_secs(120))
        .send_string(&body.to_string())
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut reader = r.into_reader();
    let mut bytes = vec![0u8; 1];
    reader.read_exact(&mut bytes).unwrap();
    let signalled = Instant::now();
    server.terminate();
    let whole = reader.read_to_end(&mut bytes).is_ok();
    let after_signal = signalled.elapsed();
    let exit = server.exit_within(
        Duration::from_secs(60),
        "the server did not exit after SIGTERM",
    );
    let d = Drained {
        samples: bytes.len() / 2,
        whole,
        after_signal,
        exit,
        log: server.stop(),
    };
    (d, bytes)
}

/// Starts the `slow` model (20 ms of compute per character) with `shutdown_timeout_ms`,
/// streams `chars` characters in sentences of 20 as PCM, and sends SIGTERM once the
/// first bytes came ([`sigterm_during`]).
fn stream_through_sigterm(shutdown_timeout_ms: u64, chars: usize) -> Drained {
    let dir = tempfile::tempdir().unwrap();
    let cfg = serde_json::json!({
        "port": 0,
        "threads": 1,
        "shutdown_timeout_ms": shutdown_timeout_ms,
        "models": [{ "id": "slow", "path": model(dir.path(), "slow.gguf", 20), "family": "test_tone", "task": "tts" }],
    });
    let server = start_logged(dir, &cfg);
    assert_eq!(chars % 20, 0);
    let text: String = (0..chars / 20)
        .map(|i| format!("Sentence number {i:03}. "))
        .collect();
    sigterm_during(
        server,
        &serde_json::json!({ "model": "slow", "input": text, "response_format": "pcm", "stream_format": "audio" }),
    )
    .0
}

#[test]
fn sigterm_lets_a_streamed_kokoro_answer_finish_whole() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = serde_json::json!({
        "port": 0,
        "threads": 2,
        "models": [{ "id": "kokoro", "path": common::kokoro_q8_gguf(), "family": "kokoro", "task": "tts" }],
    });
    let server = start_logged(dir, &cfg);
    let text = "The stream starts with this sentence. Then the server is told to stop. \
                It finishes the answer it has begun, sentence by sentence. \
                Only then does it exit.";
    let body = |stream: bool| {
        let mut b =
            serde_json::json!({ "model": "kokoro", "input": text, "response_format": "pcm" });
        if stream {
            b["stream_format"] = "audio".into();
        }
        b
    };
    let whole = speak(&server, &body(false));
    assert_eq!(whole.status, 200);
    let (d, streamed) = sigterm_during(server, &body(true));
    assert!(
        d.whole,
        "the stream ended properly, {:?} after SIGTERM; log: {}",
        d.after_signal, d.log
    );
    assert_eq!(
        streamed.len(),
        whole.body.len(),
        "all the audio, {:?} after SIGTERM",
        d.after_signal
    );
    assert!(streamed == whole.body, "the same audio as unhurried");
    assert!(d.exit.success(), "{:?}; log: {}", d.exit, d.log);
}

#[test]
fn sigterm_lets_a_streamed_answer_finish_within_the_shutdown_timeout() {
    // 200 characters: 4 s of compute, 10 s of audio; SIGTERM after the first sentence.
    let d = stream_through_sigterm(60_000, 200);
    assert!(
        d.whole,
        "the stream ended properly, not cut, {:?} after SIGTERM; log: {}",
        d.after_signal, d.log
    );
    assert_eq!(d.samples, expected_len(200, 1.0), "all the audio");
    assert!(
        d.after_signal >= Duration::from_millis(2500),
        "synthesis went on after the signal: {:?}",
        d.after_signal
    );
    assert!(d.exit.success(), "{:?}; log: {}", d.exit, d.log);
    assert!(!d.log.contains("cut"), "{}", d.log);
}

#[test]
fn sigterm_cuts_a_stream_still_running_after_the_shutdown_timeout() {
    let d = stream_through_sigterm(1500, 200);
    assert!(!d.whole, "a cut stream is an error, not an end");
    assert!(
        d.samples > 0 && d.samples < expected_len(200, 1.0),
        "{} samples",
        d.samples
    );
    assert!(
        d.after_signal >= Duration::from_millis(1400)
            && d.after_signal < Duration::from_millis(3500),
        "cut at the 1.5 s shutdown timeout, not before nor long after: {:?}",
        d.after_signal
    );
    assert!(
        d.log.contains("still open after 1500 ms; closing them"),
        "{}",
        d.log
    );
    assert!(d.exit.success(), "{:?}; log: {}", d.exit, d.log);
}
