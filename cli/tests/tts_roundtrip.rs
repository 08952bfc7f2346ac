//! Kokoro through the CLI, heard by our own Whisper: `--task tts --family kokoro`
//! speaks English text (g2p, the ggml graphs, WAV through the output writer), and
//! `--task asr` with Whisper base (multilingual, `--language en`) transcribes it.
//!
//! Asserts: "Speech recognition in Rust is working today." comes back word for word
//! (compared without case and punctuation, which Whisper chooses itself) from voice
//! PHRASE_VOICE; ten everyday sentences spoken in one run by af_heart come back with a word
//! error rate of at most 0.05; the WAV is 24 kHz mono, a whole number of 600-sample
//! frames per sentence, not silent and not clipped.
//!
//! Needs the pinned Kokoro and Whisper base assets (`cargo xtask test` fetches them):
//! the Kokoro GGUF is made from them by `--task convert --family kokoro`
//! ([`common::kokoro_gguf`]).

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The phrase every round trip of the project checks.
const PHRASE: &str = "Speech recognition in Rust is working today.";
/// The voice that says it.
const PHRASE_VOICE: &str = "af_nicole";
/// Everyday sentences for the word error rate (lexicon words, no digits, so that
/// Whisper's spelling of numbers does not count as an error).
const SENTENCES: &[&str] = &[
    "The quick brown fox jumps over the lazy dog.",
    "Please call me back when you get home tonight.",
    "The weather today is sunny with a light breeze.",
    "She sells fresh bread at the market every morning.",
    "We will meet at the library after lunch.",
    "This engine turns written text into natural speech.",
    "Open the window and let the fresh air in.",
    "My favorite color is blue, but I also like green.",
    "The train to the city leaves in a few minutes.",
    "Thank you for listening, and have a wonderful day.",
];
/// The largest word error rate allowed over [`SENTENCES`].
const MAX_WER: f64 = 0.05;

/// Kokoro (f32 weights) converted from the pinned assets, cached across runs.
fn kokoro() -> &'static Path {
    static GGUF: OnceLock<PathBuf> = OnceLock::new();
    GGUF.get_or_init(|| kokoro_gguf("f32"))
}

/// Speaks the text in `text_file` with `voice` into `wav`; returns the run.
fn speak(text_file: &Path, voice: &str, wav: &Path) -> Run {
    let run = cli(&[
        "--task",
        "tts",
        "--family",
        "kokoro",
        "--model",
        s(kokoro()),
        "--text-file",
        s(text_file),
        "--voice",
        voice,
        "--out",
        s(wav),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run
}

/// What Whisper base hears in `wav`.
fn transcribe(wav: &Path) -> String {
    let run = cli(&[
        "--task",
        "asr",
        "--family",
        "whisper",
        "--model",
        s(whisper_base()),
        "--audio",
        s(wav),
        "--language",
        "en",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.value("text").expect("a text= line")
}

/// Checks the WAV's format and level; returns its samples.
fn check_wav(wav: &Path) -> Vec<f32> {
    let mut reader = hound::WavReader::open(wav).unwrap();
    let spec = reader.spec();
    assert_eq!((spec.sample_rate, spec.channels), (24_000, 1), "{spec:?}");
    let samples: Vec<f32> = reader
        .samples::<i16>()
        .map(|x| x.unwrap() as f32 / 32768.0)
        .collect();
    let rms = (samples.iter().map(|x| x * x).sum::<f32>() / samples.len() as f32).sqrt();
    let clipped = samples.iter().filter(|x| x.abs() > 0.999).count();
    assert!(rms > 0.01, "nearly silent: rms {rms}");
    assert!(
        clipped * 1000 < samples.len(),
        "{clipped} of {} samples clipped",
        samples.len()
    );
    samples
}

#[test]
fn whisper_base_hears_kokoro_say_the_phrase_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("phrase.txt");
    std::fs::write(&text, PHRASE).unwrap();
    let wav = dir.path().join("phrase.wav");
    let run = speak(&text, PHRASE_VOICE, &wav);
    assert_eq!(run.value("sample_rate").as_deref(), Some("24000"));
    let samples = check_wav(&wav);
    assert_eq!(samples.len() % 600, 0, "whole 600-sample frames");
    let heard = transcribe(&wav);
    assert_eq!(words(&heard), words(PHRASE), "Whisper heard {heard:?}");
}

#[test]
fn whisper_base_hears_ten_kokoro_sentences_with_few_errors() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("sentences.txt");
    std::fs::write(&text, SENTENCES.join(" ")).unwrap();
    let wav = dir.path().join("sentences.wav");
    let run = speak(&text, "af_heart", &wav);
    assert_eq!(
        run.value("sentences").as_deref(),
        Some(SENTENCES.len().to_string().as_str())
    );
    let samples = check_wav(&wav);
    assert_eq!(samples.len() % 600, 0, "whole 600-sample frames");
    let heard = transcribe(&wav);
    let truth = words(&SENTENCES.join(" "));
    let wer = word_errors(&words(&heard), &truth) as f64 / truth.len() as f64;
    assert!(
        wer <= MAX_WER,
        "word error rate {wer:.3} > {MAX_WER}: Whisper heard {heard:?}"
    );
}
