//! Helpers shared by the engine's Whisper tests: the pinned test assets (fetched by
//! `cargo xtask test`; a missing one fails loudly), models converted once per test
//! binary, the faster-whisper references, and word error rates.

#![allow(dead_code, unused_imports)]

use std::path::{Path, PathBuf};

use audiocpp_engine::asr::{AsrModel, DecodeOptions};
use audiocpp_engine::backend::RuntimeOptions;
use audiocpp_engine::families::ConvertOptions;
use audiocpp_engine::tasks;
use serde_json::Value;

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The pinned test assets (`AUDIOCPP_TEST_ASSETS`, else `target/test-assets`).
pub fn assets() -> PathBuf {
    let dir = std::env::var_os("AUDIOCPP_TEST_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/test-assets"));
    assert!(
        dir.join("whisper-tiny.en-ct2/model.bin").is_file(),
        "test assets are missing in {}: run `cargo xtask test`, which fetches the pinned models and makes the reference results",
        dir.display()
    );
    dir
}

/// A file under the assets, which must exist.
pub fn asset(rel: &str) -> PathBuf {
    let p = assets().join(rel);
    assert!(
        p.is_file(),
        "missing {}: run `cargo xtask test`",
        p.display()
    );
    p
}

/// The Whisper models the tests convert: (name, CTranslate2 folder in the assets).
pub const MODELS: [(&str, &str); 2] = [
    ("tiny.en", "whisper-tiny.en-ct2"),
    ("base", "whisper-base-ct2"),
];

/// `model` ("tiny.en" or "base") converted to GGUF with `quantize` (`None`: f16, or
/// "q8_0"), kept in the target folder until this test binary or the model changes.
pub fn gguf(model: &str, quantize: Option<&str>) -> PathBuf {
    let key = format!("{model}-{}", quantize.unwrap_or("f16"));
    let (_, folder) = MODELS
        .iter()
        .find(|(m, _)| *m == model)
        .unwrap_or_else(|| panic!("no model {model}"));
    let ct2 = assets().join(folder);
    let spec = root().join("model_specs/whisper.json");
    audiocpp_test_support::cached_by_binary(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        &format!("whisper-{key}.gguf"),
        &[&ct2.join("model.bin"), &spec],
        |out| {
            let opts = ConvertOptions {
                quantize: quantize.map(str::to_string),
                sources: Vec::new(),
            };
            tasks::convert(
                "whisper",
                &ct2,
                Some(&root().join("model_specs")),
                out,
                &opts,
            )
            .unwrap_or_else(|e| panic!("converting {model} ({key}): {e}"));
        },
    )
}

/// A converted model loaded on the CPU with `threads` threads.
pub fn load(model: &str, quantize: Option<&str>, threads: usize) -> AsrModel {
    let opts = RuntimeOptions {
        threads,
        ..RuntimeOptions::default()
    };
    AsrModel::load("whisper", &gguf(model, quantize), None, &opts)
        .unwrap_or_else(|e| panic!("loading {model}: {e}"))
}

/// Greedy decoding in English with timestamp tokens: what the references ran
/// (faster-whisper with `beam_size=1`, `temperature=0`, no previous-text prompt).
pub fn greedy(model: &AsrModel) -> DecodeOptions {
    DecodeOptions {
        language: "en".into(),
        temperatures: vec![0.0],
        ..model.default_options()
    }
}

/// The faster-whisper reference JSON in `rel` (under the assets).
pub fn reference(rel: &str) -> Value {
    let p = asset(rel);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A clip's entry in a reference, found by the end of its path (the reference names
/// clips by the path they had when it was made).
pub fn reference_clip<'a>(reference: &'a Value, clip: &str) -> &'a Value {
    reference["clips"]
        .as_object()
        .expect("a reference has clips")
        .iter()
        .find(|(k, _)| k.ends_with(clip))
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("the reference has no clip {clip}: run `cargo xtask test`"))
}

/// Numbers Whisper writes as digits, as the transcripts spell them.
const NUMBERS: [&str; 21] = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
];

/// A transcript as words to compare, the few rules of OpenAI's English normaliser
/// that these clips need: lower case, hyphens split words, punctuation dropped, `mr`
/// spelt `mister`, numbers up to twenty spelt out.
pub fn words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .replace('-', " ")
        .split_whitespace()
        .map(|w| {
            w.chars()
                .filter(|c| c.is_alphanumeric() || *c == '\'')
                .collect::<String>()
        })
        .filter(|w| !w.is_empty())
        .map(|w| match w.as_str() {
            "mr" => "mister".to_string(),
            _ => w
                .parse::<usize>()
                .ok()
                .and_then(|n| NUMBERS.get(n))
                .map_or(w.clone(), |n| n.to_string()),
        })
        .collect()
}

pub use audiocpp_test_support::word_errors;

/// `samples` of a major chord (root, third, fifth) at 16 kHz whose root glides between
/// 220 and 440 Hz every four seconds: music-like tones with no speech in them.
pub fn tones(samples: usize) -> Vec<f32> {
    use std::f32::consts::PI;
    let rate = 16_000.0;
    let mut phase = [0f32; 3];
    (0..samples)
        .map(|i| {
            let t = i as f32 / rate;
            let root = 220.0 * 2f32.powf(0.5 + 0.5 * (2.0 * PI * t / 8.0).sin());
            let mut v = 0.0;
            for (p, ratio) in phase.iter_mut().zip([1.0, 1.26, 1.5]) {
                *p = (*p + 2.0 * PI * root * ratio / rate) % (2.0 * PI);
                v += 0.1 * p.sin();
            }
            v
        })
        .collect()
}
