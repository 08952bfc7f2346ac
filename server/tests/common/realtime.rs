//! What the live-transcription tests share: a server with Whisper tiny.en cut by Silero
//! behind an API key, the test phrase at the realtime API's rate, its PCM16 bytes, and
//! the HTTP endpoint's transcript of the same samples to compare a live one against.

use std::path::Path;

use serde_json::{json, Value};

use super::Server;

/// The realtime client's rate (OpenAI's pcm16).
pub const RATE: u32 = 24_000;

/// A server in `dir` with Whisper tiny.en (model id `tiny`) and Silero as its
/// `vad_model`, behind `key`.
pub fn server(dir: &Path, key: &str) -> Server {
    let gguf = super::whisper_tiny_gguf(dir);
    let silero = super::assets("ggml-silero-v6.2.0.bin").join("ggml-silero-v6.2.0.bin");
    let cfg = json!({
        "port": 0, "threads": 2, "api_key": key,
        "models": [{ "id": "tiny", "path": gguf, "family": "whisper", "task": "asr", "vad_model": silero }],
    });
    Server::start(dir, &cfg)
}

/// The ASR phrase with a second of silence on each side, at [`RATE`].
pub fn phrase_24k() -> Vec<f32> {
    let wav = super::assets("clips-asr/phrase_en_us.wav").join("clips-asr/phrase_en_us.wav");
    let a = audiocpp_engine::audio::load(&wav, 16_000).unwrap();
    let a = audiocpp_engine::audio::resample(a, RATE).unwrap();
    let pad = vec![0.0f32; RATE as usize];
    [&pad[..], &a.samples, &pad].concat()
}

/// `samples` as little-endian PCM16, as the realtime API takes them.
pub fn pcm16(samples: &[f32]) -> Vec<u8> {
    samples
        .iter()
        .flat_map(|s| ((s.clamp(-1.0, 1.0) * 32767.0).round() as i16).to_le_bytes())
        .collect()
}

/// The transcription endpoint's text for `samples` ([`RATE`]) sent as a WAV of the same
/// PCM16 values, with `key`.
pub fn http_transcript(server: &Server, key: &str, samples: &[f32]) -> String {
    let mut wav = std::io::Cursor::new(Vec::new());
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: RATE,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::new(&mut wav, spec).unwrap();
    for s in samples {
        w.write_sample((s.clamp(-1.0, 1.0) * 32767.0).round() as i16)
            .unwrap();
    }
    w.finalize().unwrap();
    let (ct, body) = super::multipart(&[("model", "tiny")], Some(("a.wav", wav.get_ref())));
    let resp = super::send(
        ureq::post(&server.url("/v1/audio/transcriptions"))
            .set("Authorization", &format!("Bearer {key}")),
        &ct,
        &body,
    );
    assert_eq!(resp.status(), 200);
    let v: Value = resp.into_json().unwrap();
    v["text"].as_str().unwrap().to_string()
}
