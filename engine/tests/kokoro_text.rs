//! What Kokoro says about text it cannot read (issue 43, item 6): input in another
//! script, or with no words at all, is refused before any synthesis with what it is
//! (not "only punctuation"), and text with English words among others is spoken.
//!
//! Real model: Kokoro q8_0 converted from the pinned release the test assets hold
//! (`common::kokoro_gguf`).

mod common;

use std::path::PathBuf;

use audiocpp_engine::backend::RuntimeOptions;
use audiocpp_engine::tts::{SpeechInput, SpeechRequest, TtsModel};

/// Kokoro q8_0, converted from the pinned release by the tests' common helper.
fn kokoro() -> PathBuf {
    common::kokoro_gguf("q8_0")
}

fn request(text: &str) -> SpeechRequest {
    SpeechRequest {
        input: SpeechInput::Text(text.into()),
        voice: None,
        speed: 1.0,
        options: Default::default(),
    }
}

#[test]
fn text_kokoro_cannot_read_is_named_and_english_among_it_is_spoken() {
    let opts = RuntimeOptions {
        threads: 2,
        ..RuntimeOptions::default()
    };
    let mut tts = TtsModel::load("kokoro", &kokoro(), None, &opts).unwrap();
    for (text, script) in [
        ("Привет, как дела?", "Cyrillic"),
        ("今日は良い天気です。", "Han"),
        ("مرحبا بالعالم", "Arabic"),
        ("שלום עולם", "Hebrew"),
    ] {
        let err = tts.run(&request(text)).unwrap_err().to_string();
        assert!(
            err.contains(&format!("parameter 'input' is written in {script}")),
            "{text}: {err}"
        );
        assert!(err.contains("English text only"), "{err}");
        assert!(!err.contains("only punctuation"), "{err}");
    }
    let err = tts.run(&request("🎉 👍 ✨")).unwrap_err().to_string();
    assert!(
        err.contains("no words or numbers") && err.contains("emoji"),
        "{err}"
    );
    // English with a sentence in another script: the English is spoken, nothing fails
    // half-way.
    let mixed = tts.run(&request("Hello there. Привет.")).unwrap();
    let english = tts.run(&request("Hello there.")).unwrap();
    assert_eq!(mixed.samples.len(), english.samples.len());
    assert!(mixed.audio_seconds > 0.3, "{}", mixed.audio_seconds);
}
