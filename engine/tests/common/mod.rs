//! Helpers shared by the engine's integration tests: the workspace's test support
//! (assets, word and signal metrics) and the models the tests convert with the engine's
//! own converters from the pinned sources.

#![allow(dead_code, unused_imports)]

use std::path::{Path, PathBuf};

use audiocpp_engine::families::ConvertOptions;

pub use audiocpp_test_support::{assets, assets_dir, snr_db, specs};

/// The Kokoro sources `cargo xtask test` fetches (int8 ONNX, voices), checked.
pub fn kokoro_dir() -> PathBuf {
    assets(&["kokoro/kokoro.onnx", "kokoro/voices/af_heart.bin"]).join("kokoro")
}

/// Converts the pinned Kokoro sources (the int8 ONNX, every voice, the vocabulary and
/// lexicons) with weight type `quantize` into `out`, with the repository's specs.
pub fn convert_kokoro(quantize: &str, out: &Path) -> audiocpp_engine::tasks::ConvertOutput {
    let (onnx, sources) = audiocpp_test_support::kokoro_sources();
    let options = ConvertOptions {
        quantize: Some(quantize.to_string()),
        sources,
    };
    audiocpp_engine::tasks::convert("kokoro", &onnx, Some(&specs()), out, &options)
        .unwrap_or_else(|e| panic!("converting Kokoro ({quantize}): {e}"))
}

/// A Kokoro GGUF (`quantize`: `f32`, `f16` or `q8_0`), converted by [`convert_kokoro`]
/// and cached in this crate's test scratch folder under the test binary's name, made
/// again when that binary (which holds the converter) or the spec changed.
pub fn kokoro_gguf(quantize: &str) -> PathBuf {
    audiocpp_test_support::cached_by_binary(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        &format!("kokoro-{quantize}.gguf"),
        &[&specs().join("kokoro.json")],
        |out| {
            convert_kokoro(quantize, out);
        },
    )
}

/// Whisper tiny.en converted from the pinned CTranslate2 model (f16, the repository's
/// specs) into `dir`; returns the GGUF's path.
pub fn whisper_tiny_gguf(dir: &Path) -> PathBuf {
    let ct2 = assets(&["whisper-tiny.en-ct2/model.bin"]).join("whisper-tiny.en-ct2");
    let out = dir.join("whisper-tiny.en.gguf");
    audiocpp_engine::tasks::convert(
        "whisper",
        &ct2,
        Some(&specs()),
        &out,
        &ConvertOptions::default(),
    )
    .unwrap_or_else(|e| panic!("converting Whisper tiny.en: {e}"));
    out
}
