//! The voices API on the real server binary, cloning with the committed random-weight
//! Qwen3-TTS Base checkpoint (`engine/tests/fixtures/qwen3_tts_clone/base`, converted
//! here) from its reference clip: an upload gives an id, the list shows it beside each
//! model's preset voices, speech in it equals speech with the same clip sent inline,
//! it survives a restart and a deletion removes it; the refusals (no API key, no
//! voices_dir, too many voices, bad clips and names) name what to fix.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use base64::Engine as _;
use serde_json::{json, Value};

mod common;
use common::Server;

const KEY: &str = "test-key";

/// The fixture folder of the cloning checkpoints.
fn fixtures() -> PathBuf {
    common::qwen3_clone_fixtures()
}

/// The Base checkpoint converted to GGUF once for the whole file, in the test scratch
/// folder (a temporary folder in a static would never be removed).
fn base_gguf() -> &'static Path {
    static GGUF: OnceLock<PathBuf> = OnceLock::new();
    GGUF.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("server-voices");
        std::fs::create_dir_all(&dir).unwrap();
        common::qwen3_base_gguf(&dir)
    })
}

/// The reference clip and what it says.
fn reference() -> (Vec<u8>, String) {
    let wav = std::fs::read(fixtures().join("ref_24k.wav")).unwrap();
    let exp: Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("expected_base.json")).unwrap())
            .unwrap();
    let text = exp["voices"]["ref24k_icl"]["ref_text"]
        .as_str()
        .unwrap()
        .to_string();
    (wav, text)
}

/// A config serving `base` (the Base checkpoint) and `tone` (test_tone), with `extra`
/// keys; its files in `dir`.
fn config(dir: &Path, extra: Value) -> Value {
    let tone = dir.join("tone.gguf");
    audiocpp_engine::families::test_tone::write_model(&tone, 24_000, 0.5, 0).unwrap();
    let mut cfg = json!({
        "port": 0,
        "threads": 1,
        "models": [
            { "id": "base", "path": base_gguf(), "family": "qwen3_tts", "task": "tts" },
            { "id": "tone", "path": tone, "family": "test_tone", "task": "tts" },
        ],
    });
    for (k, v) in extra.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    cfg
}

/// An answer's status and body.
struct Answer {
    status: u16,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&self.body)))
    }

    /// The error's `param` and message, checking the answer is OpenAI's error JSON.
    fn error(&self, status: u16) -> (Value, String) {
        let j = self.json();
        assert_eq!(self.status, status, "{j}");
        let e = &j["error"];
        assert!(e["type"].is_string() && e["code"].is_string(), "{j}");
        (
            e["param"].clone(),
            e["message"].as_str().unwrap().to_string(),
        )
    }

    /// The samples of a WAV answer.
    fn samples(&self) -> Vec<i16> {
        assert_eq!(self.status, 200, "{}", String::from_utf8_lossy(&self.body));
        let r = hound::WavReader::new(std::io::Cursor::new(&self.body)).unwrap();
        let s: Vec<i16> = r.into_samples().map(Result::unwrap).collect();
        assert!(!s.is_empty());
        s
    }
}

fn answer(resp: ureq::Response) -> Answer {
    let status = resp.status();
    let mut body = Vec::new();
    resp.into_reader().read_to_end(&mut body).unwrap();
    Answer { status, body }
}

fn authed(req: ureq::Request, key: Option<&str>) -> ureq::Request {
    match key {
        Some(k) => req.set("Authorization", &format!("Bearer {k}")),
        None => req,
    }
}

fn get(server: &Server, path: &str, key: Option<&str>) -> Answer {
    match authed(ureq::get(&server.url(path)), key).call() {
        Ok(r) | Err(ureq::Error::Status(_, r)) => answer(r),
        Err(e) => panic!("{e}"),
    }
}

fn delete(server: &Server, id: &str, key: Option<&str>) -> Answer {
    let url = server.url(&format!("/v1/audio/voices/{id}"));
    match authed(ureq::delete(&url), key).call() {
        Ok(r) | Err(ureq::Error::Status(_, r)) => answer(r),
        Err(e) => panic!("{e}"),
    }
}

/// Uploads a voice: the text `fields` and the clip `clip`.
fn upload(
    server: &Server,
    fields: &[(&str, &str)],
    clip: Option<&[u8]>,
    key: Option<&str>,
) -> Answer {
    let (ct, body) = common::multipart(fields, clip.map(|c| ("ref.wav", c)));
    answer(common::send(
        authed(ureq::post(&server.url("/v1/audio/voices")), key),
        &ct,
        &body,
    ))
}

fn speak(server: &Server, body: &Value, key: Option<&str>) -> Answer {
    answer(common::send(
        authed(ureq::post(&server.url("/v1/audio/speech")), key),
        "application/json",
        body.to_string().as_bytes(),
    ))
}

/// A short greedy speech request to `base`, with `extra` fields.
fn speech_body(extra: Value) -> Value {
    let mut b = json!({
        "model": "base",
        "input": "Hello there.",
        "options": { "temperature": 0, "max_frames": 20 },
    });
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

/// The list's entry of `model`.
fn entry(list: &Value, model: &str) -> Value {
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["model"] == model)
        .unwrap_or_else(|| panic!("no {model} in {list}"))
        .clone()
}

/// The stored voices' ids of `model` in a list.
fn stored_ids(list: &Value, model: &str) -> Vec<String> {
    entry(list, model)["voices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_string())
        .collect()
}

/// A 24 kHz mono 16-bit WAV of a 200 Hz tone lasting `seconds`.
fn tone_wav(seconds: f32) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 24_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::new(&mut out, spec).unwrap();
    for i in 0..(seconds * 24_000.0) as usize {
        let t = i as f32 / 24_000.0;
        w.write_sample(((t * 200.0 * std::f32::consts::TAU).sin() * 8000.0) as i16)
            .unwrap();
    }
    w.finalize().unwrap();
    out.into_inner()
}

#[test]
fn a_stored_voice_speaks_as_the_inline_clone_survives_a_restart_and_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        json!({ "api_key": KEY, "voices_dir": "voices" }),
    );
    // A voice upload cut off by a crash: a temporary file in voices_dir.
    let voices = dir.path().join("voices");
    std::fs::create_dir_all(&voices).unwrap();
    let stray = voices.join(".tmp-voice_0123456789abcdef.json");
    std::fs::write(&stray, b"{\"id\": \"voice_0123456789abcdef\", \"na").unwrap();
    let server = Server::start(dir.path(), &cfg);
    assert!(
        !stray.exists(),
        "the interrupted upload is cleaned at start"
    );
    let key = Some(KEY);

    let (wav, text) = reference();
    let up = upload(
        &server,
        &[
            ("name", "Reference voice"),
            ("model", "base"),
            ("text", &text),
        ],
        Some(&wav),
        key,
    );
    assert_eq!(up.status, 200, "{}", String::from_utf8_lossy(&up.body));
    let voice = up.json();
    let id = voice["id"].as_str().unwrap().to_string();
    assert!(
        id.starts_with("voice_") && id.len() == 22,
        "unexpected id {id}"
    );
    assert_eq!(
        (&voice["name"], &voice["model"], &voice["object"]),
        (&json!("Reference voice"), &json!("base"), &json!("voice"))
    );
    assert!(voices.join(format!("{id}.json")).is_file());

    // The list: per model, its presets and its stored voices; never the stray file.
    let list = get(&server, "/v1/audio/voices", key);
    assert_eq!(list.status, 200);
    let list = list.json();
    assert_eq!(stored_ids(&list, "base"), vec![id.clone()]);
    assert_eq!(entry(&list, "tone")["presets"], json!(["low", "high"]));
    assert_eq!(stored_ids(&list, "tone"), Vec::<String>::new());
    assert!(entry(&list, "base")["presets"].is_array());
    let only_tone = get(&server, "/v1/audio/voices?model=tone", key).json();
    assert_eq!(
        only_tone["data"].as_array().unwrap().len(),
        1,
        "{only_tone}"
    );
    assert_eq!(only_tone["data"][0]["model"], "tone");
    let (_, message) = get(&server, "/v1/audio/voices?modle=tone", key).error(400);
    assert!(message.contains("model=ID"), "{message}");

    // The stored voice speaks exactly as the same clip cloned inline.
    let stored = speak(&server, &speech_body(json!({ "voice": id })), key).samples();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&wav);
    let inline_body = speech_body(json!({ "ref_audio": b64, "ref_text": text }));
    assert!(
        inline_body.to_string().len() > 64 << 10,
        "the inline body is over the speech body limit without ref_audio"
    );
    let inline = speak(&server, &inline_body, key).samples();
    assert_eq!(stored, inline);
    let as_data_uri = speech_body(json!({
        "ref_audio": format!("data:audio/wav;base64,{b64}"), "ref_text": text
    }));
    assert_eq!(speak(&server, &as_data_uri, key).samples(), inline);
    let x_vector_only = speech_body(json!({ "ref_audio": b64, "x_vector_only_mode": true }));
    assert_ne!(
        speak(&server, &x_vector_only, key).samples(),
        inline,
        "the speaker embedding alone is another voice than the in-context clone"
    );

    // It speaks with its own model only.
    let other = speak(
        &server,
        &json!({ "model": "tone", "input": "Hi.", "voice": id }),
        key,
    );
    let (param, message) = other.error(400);
    assert_eq!(param, "voice");
    assert!(message.contains("base"), "{message}");

    // A restart keeps it.
    drop(server);
    let server = Server::start(dir.path(), &cfg);
    let list = get(&server, "/v1/audio/voices?model=base", key).json();
    assert_eq!(stored_ids(&list, "base"), vec![id.clone()]);
    let again = speak(&server, &speech_body(json!({ "voice": { "id": id } })), key);
    assert_eq!(again.samples(), stored);

    // Deleted, it is gone.
    let del = delete(&server, &id, key);
    assert_eq!(del.status, 200);
    assert_eq!(del.json()["deleted"], true);
    assert!(!voices.join(format!("{id}.json")).exists());
    let list = get(&server, "/v1/audio/voices", key).json();
    assert_eq!(stored_ids(&list, "base"), Vec::<String>::new());
    let (param, message) = speak(&server, &speech_body(json!({ "voice": id })), key).error(400);
    assert_eq!(param, "voice");
    assert!(message.contains("not a stored voice"), "{message}");
    let (_, message) = delete(&server, &id, key).error(404);
    assert!(message.contains(&id), "{message}");
}

#[test]
fn the_voices_api_needs_an_api_key_and_a_voices_dir() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &config(dir.path(), json!({ "voices_dir": "voices" })),
    );
    let (wav, text) = reference();
    let refusals = [
        get(&server, "/v1/audio/voices", None),
        upload(
            &server,
            &[("name", "v"), ("model", "base"), ("text", &text)],
            Some(&wav),
            None,
        ),
        delete(&server, "voice_0123456789abcdef", None),
        speak(
            &server,
            &speech_body(json!({ "voice": "voice_0123456789abcdef" })),
            None,
        ),
    ];
    for a in refusals {
        let (_, message) = a.error(403);
        assert!(message.contains("set api_key"), "{message}");
    }
    assert_eq!(
        std::fs::read_dir(dir.path().join("voices"))
            .unwrap()
            .count(),
        0,
        "nothing is stored"
    );
    drop(server);

    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &config(dir.path(), json!({ "api_key": KEY })));
    let (_, message) = get(&server, "/v1/audio/voices", Some(KEY)).error(404);
    assert!(message.contains("set voices_dir"), "{message}");
}

/// An upload's form fields and clip, the field its 400 names, and what it says.
type BadUpload<'a> = (&'a [(&'a str, &'a str)], Option<&'a [u8]>, &'a str, &'a str);

#[test]
fn uploads_are_checked_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &config(
            dir.path(),
            json!({ "api_key": KEY, "voices_dir": dir.path().join("v"), "max_voices": 1 }),
        ),
    );
    let key = Some(KEY);
    let (wav, text) = reference();
    let short = tone_wav(0.5);
    let cases: [BadUpload; 7] = [
        (
            &[("name", "v"), ("model", "base"), ("text", &text)],
            Some(&short),
            "file",
            "0.50 s",
        ),
        (
            &[("name", "v"), ("model", "base"), ("text", &text)],
            Some(b"not audio at all"),
            "file",
            "cannot decode audio",
        ),
        (
            &[("name", "v"), ("model", "base"), ("text", &text)],
            None,
            "file",
            "'file'",
        ),
        (
            &[("name", "v"), ("model", "base")],
            Some(&wav),
            "text",
            "x_vector_only: true",
        ),
        (
            &[("name", "../etc"), ("model", "base"), ("text", &text)],
            Some(&wav),
            "name",
            "not a voice name",
        ),
        (
            &[("model", "base"), ("text", &text)],
            Some(&wav),
            "name",
            "'name'",
        ),
        (
            &[("name", "v"), ("model", "tone"), ("text", &text)],
            Some(&wav),
            "model",
            "does not clone voices",
        ),
    ];
    for (fields, clip, param, says) in cases {
        let (p, message) = upload(&server, fields, clip, key).error(400);
        assert_eq!(p, param, "{fields:?}: {message}");
        assert!(message.contains(says), "{fields:?}: {message}");
    }
    let (_, message) = upload(
        &server,
        &[("name", "v"), ("model", "nope"), ("text", &text)],
        Some(&wav),
        key,
    )
    .error(404);
    assert!(message.contains("nope"), "{message}");

    // The speaker embedding alone needs no transcript; then the store is full.
    let first = upload(
        &server,
        &[
            ("name", "x vector"),
            ("model", "base"),
            ("x_vector_only", "true"),
        ],
        Some(&wav),
        key,
    );
    assert_eq!(
        first.status,
        200,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    let id = first.json()["id"].as_str().unwrap().to_string();
    let (_, message) = upload(
        &server,
        &[("name", "second"), ("model", "base"), ("text", &text)],
        Some(&wav),
        key,
    )
    .error(409);
    assert!(message.contains("max_voices"), "{message}");
    let list = get(&server, "/v1/audio/voices?model=base", key).json();
    assert_eq!(stored_ids(&list, "base"), vec![id]);

    // Inline clones: bad base64 and a clip too short name ref_audio; a big body
    // without ref_audio is over the speech body limit.
    let (p, _) = speak(
        &server,
        &speech_body(json!({ "ref_audio": "%%%", "ref_text": text })),
        key,
    )
    .error(400);
    assert_eq!(p, "ref_audio");
    let short_b64 = base64::engine::general_purpose::STANDARD.encode(&short);
    let (p, message) = speak(
        &server,
        &speech_body(json!({ "ref_audio": short_b64, "ref_text": text })),
        key,
    )
    .error(400);
    assert_eq!(p, "ref_audio", "{message}");
    let (p, _) = speak(&server, &speech_body(json!({ "ref_text": text })), key).error(400);
    assert_eq!(p, "ref_audio");
    let big = speech_body(json!({ "instructions": "x".repeat(70 << 10) }));
    let (_, message) = speak(&server, &big, key).error(413);
    assert!(message.contains("ref_audio"), "{message}");
}

/// Posts a JSON body to the voices API.
fn post_json(server: &Server, body: &Value, key: Option<&str>) -> Answer {
    answer(common::send(
        authed(ureq::post(&server.url("/v1/audio/voices")), key),
        "application/json",
        body.to_string().as_bytes(),
    ))
}

#[test]
fn a_stored_kokoro_blend_is_listed_speaks_as_the_blend_itself_and_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let tone = dir.path().join("tone.gguf");
    audiocpp_engine::families::test_tone::write_model(&tone, 24_000, 0.5, 0).unwrap();
    let cfg = json!({
        "port": 0,
        "threads": 2,
        "api_key": KEY,
        "voices_dir": "voices",
        "models": [
            { "id": "kokoro", "path": common::kokoro_q8_gguf(), "family": "kokoro", "task": "tts" },
            { "id": "tone", "path": tone, "family": "test_tone", "task": "tts" },
        ],
    });
    let server = Server::start(dir.path(), &cfg);
    let key = Some(KEY);
    const BLEND: &str = "af_heart:0.7+af_bella:0.3";

    // Stored from a JSON body and from a form.
    let up = post_json(
        &server,
        &json!({ "name": "Heart and Bella", "model": "kokoro", "blend": BLEND }),
        key,
    );
    assert_eq!(up.status, 200, "{}", String::from_utf8_lossy(&up.body));
    let v = up.json();
    let id = v["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("voice_"), "{v}");
    assert_eq!(
        (&v["name"], &v["model"], &v["blend"]),
        (&json!("Heart and Bella"), &json!("kokoro"), &json!(BLEND))
    );
    let voices = dir.path().join("voices");
    assert!(voices.join(format!("{id}.json")).is_file());
    let form = upload(
        &server,
        &[
            ("name", "Mostly Bella"),
            ("model", "kokoro"),
            ("blend", "af_bella:3 + af_heart"),
        ],
        None,
        key,
    );
    assert_eq!(form.status, 200, "{}", String::from_utf8_lossy(&form.body));
    let id2 = form.json()["id"].as_str().unwrap().to_string();

    // Listed with the model, beside its presets.
    let list = get(&server, "/v1/audio/voices?model=kokoro", key).json();
    let kokoro = entry(&list, "kokoro");
    let presets = kokoro["presets"].as_array().unwrap();
    assert!(presets.contains(&json!("af_heart")) && presets.contains(&json!("af_bella")));
    // Both were stored within a second: the list orders them by id then.
    let mut both = vec![id.clone(), id2.clone()];
    both.sort();
    assert_eq!(stored_ids(&list, "kokoro"), both);
    let blend_of = |id: &str| {
        kokoro["voices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["id"] == id)
            .unwrap()["blend"]
            .clone()
    };
    assert_eq!(blend_of(&id), BLEND);
    assert_eq!(blend_of(&id2), "af_bella:3 + af_heart");

    // Spoken by id, the audio is the blend's own, and not a preset's.
    let say = |voice: &str| {
        speak(
            &server,
            &json!({ "model": "kokoro", "input": "Hello there.", "voice": voice }),
            key,
        )
        .samples()
    };
    let by_id = say(&id);
    assert_eq!(by_id, say(BLEND));
    assert_ne!(by_id, say("af_heart"));
    assert_eq!(say(&id2), say("af_bella:3 + af_heart"));
    // Only with its own model.
    let (param, message) = speak(
        &server,
        &json!({ "model": "tone", "input": "Hi.", "voice": id }),
        key,
    )
    .error(400);
    assert_eq!(param, "voice");
    assert!(message.contains("kokoro"), "{message}");

    // Refusals name the field and store nothing.
    let bad = [
        (
            json!({ "name": "x", "model": "kokoro", "blend": "af_heart:0.5+zz_nobody:0.5" }),
            "blend",
            "zz_nobody",
        ),
        (
            json!({ "name": "x", "model": "kokoro", "blend": "af_heart:0+af_bella:1" }),
            "blend",
            "above 0",
        ),
        (
            json!({ "name": "x", "model": "kokoro", "blend": "af_heart:-0.3+af_bella:1" }),
            "blend",
            "above 0",
        ),
        (
            json!({ "name": "x", "model": "kokoro", "blend": "af_heart:lots" }),
            "blend",
            "not a number",
        ),
        (
            json!({ "name": "x", "model": "kokoro", "blend": "af_heart+" }),
            "blend",
            "empty",
        ),
        (
            json!({ "name": "x", "model": "kokoro", "blend": "af_heart:1".repeat(40) }),
            "blend",
            "256",
        ),
        (
            json!({ "name": "x", "model": "tone", "blend": "low:0.5+high:0.5" }),
            "blend",
            "does not blend",
        ),
        (
            json!({ "model": "kokoro", "blend": BLEND }),
            "name",
            "'name'",
        ),
    ];
    for (body, param, says) in bad {
        let (p, message) = post_json(&server, &body, key).error(400);
        assert_eq!(p, param, "{body}: {message}");
        assert!(message.contains(says), "{body}: {message}");
    }
    let (_, message) = post_json(
        &server,
        &json!({ "name": "x", "model": "kokoro", "voice": BLEND }),
        key,
    )
    .error(400);
    assert!(message.contains("unknown field"), "{message}");
    let (p, _) = upload(
        &server,
        &[("name", "x"), ("model", "kokoro"), ("blend", BLEND)],
        Some(&tone_wav(2.0)),
        key,
    )
    .error(400);
    assert_eq!(p, "blend", "a blend and a clip at once");
    let list = get(&server, "/v1/audio/voices?model=kokoro", key).json();
    assert_eq!(stored_ids(&list, "kokoro"), both);

    // A restart keeps it; deleted, it is gone.
    drop(server);
    let server = Server::start(dir.path(), &cfg);
    let again = speak(
        &server,
        &json!({ "model": "kokoro", "input": "Hello there.", "voice": { "id": id } }),
        key,
    );
    assert_eq!(again.samples(), by_id);
    assert_eq!(delete(&server, &id, key).json()["deleted"], true);
    assert!(!voices.join(format!("{id}.json")).exists());
    let list = get(&server, "/v1/audio/voices?model=kokoro", key).json();
    assert_eq!(stored_ids(&list, "kokoro"), vec![id2]);
    let (param, message) = speak(
        &server,
        &json!({ "model": "kokoro", "input": "Hello there.", "voice": id }),
        key,
    )
    .error(400);
    assert_eq!(param, "voice");
    assert!(message.contains("not a stored voice"), "{message}");
}
