//! Whisper on real speech: the pocketsphinx test clips (Debian's `pocketsphinx-testdata`,
//! pinned by version and SHA-256 in xtask/assets.toml: five LibriVox readings and five
//! "cards" phrases, plus the LibriVox five joined (26.7 s) and all ten joined (39.4 s),
//! each clip followed by 0.5 s of silence) transcribed by tiny.en and base, f16 and
//! q8_0, greedily with timestamp tokens, the way the references ran faster-whisper on
//! the same CTranslate2 weights (`asr-real/<model>/asr_reference.json`: float32 for our
//! f16, int8 for our q8_0).
//!
//! Word error rates (after [`whisper_common::words`]: case, punctuation, hyphens, `Mr.` and
//! numbers up to twenty normalised), over all twelve clips, measured when the bounds
//! were set (docs/models/whisper.md):
//!
//! | model   | weights | ours vs transcripts | faster-whisper vs transcripts | ours vs faster-whisper |
//! |---------|---------|---------------------|-------------------------------|------------------------|
//! | tiny.en | f16     | 0.043               | 0.043 (float32)               | 0.004                  |
//! | tiny.en | q8_0    | 0.047               | 0.067 (int8)                  | 0.020                  |
//! | base    | f16     | 0.039               | 0.039 (float32)               | 0                      |
//! | base    | q8_0    | 0.039               | 0.039 (int8)                  | 0.020                  |
//!
//! Asserted for each model and weight type: ours against the transcripts within
//! [`TRUTH_MARGIN`] of faster-whisper's against the same transcripts, and within
//! [`Bounds::truth`] absolutely; ours against faster-whisper's within
//! [`Bounds::peer`].
//!
//! The re-read at a window's seek point: tiny.en's first window of the LibriVox join
//! ends on a timestamp pair at 23.76 s, past the start of "He might even..." (23.44 s),
//! so the window read again from 23.76 s begins "might even": the word "He" is lost.
//! faster-whisper does exactly the same (the rule is OpenAI's: seek to the last
//! timestamp of a window that ends inside speech), and
//! `reread_matches_faster_whisper` holds ours to it, segment for segment, seek for
//! seek.

mod whisper_common;

use audiocpp_engine::asr::AsrOutput;
use serde_json::Value;
use whisper_common::*;

/// The single clips, in the order of their transcription files.
const CLIPS: [&str; 10] = [
    "pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0870.wav",
    "pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0880.wav",
    "pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0890.wav",
    "pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0920.wav",
    "pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0930.wav",
    "pocketsphinx/cards/001.wav",
    "pocketsphinx/cards/002.wav",
    "pocketsphinx/cards/003.wav",
    "pocketsphinx/cards/004.wav",
    "pocketsphinx/cards/005.wav",
];

/// The joined clips and how many of [`CLIPS`] each holds, from the first.
const JOINED: [(&str, usize); 2] = [
    ("pocketsphinx/librivox_joined.wav", 5),
    ("pocketsphinx/all_joined.wav", 10),
];

/// How far our word error rate against the transcripts may exceed faster-whisper's.
const TRUTH_MARGIN: f64 = 0.02;

/// The word error rates one model and weight type is held to.
struct Bounds {
    /// Ours against the transcripts.
    truth: f64,
    /// Ours against faster-whisper's (its float32 for f16, int8 for q8_0).
    peer: f64,
}

/// The transcripts of [`CLIPS`], read from the package's transcription files
/// (`<s> words </s> (id)` lines).
fn transcripts() -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for file in [
        "pocketsphinx/librivox/transcription",
        "pocketsphinx/cards/cards.transcription",
    ] {
        let text = std::fs::read_to_string(asset(file)).unwrap();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let inner = line
                .split("<s>")
                .nth(1)
                .and_then(|r| r.split("</s>").next())
                .unwrap_or_else(|| panic!("{file}: unexpected line {line:?}"));
            out.push(words(inner));
        }
    }
    assert_eq!(out.len(), CLIPS.len(), "one transcript per clip");
    out
}

/// Every clip with its transcript: the single ones, then the joined ones.
fn clips_with_truth() -> Vec<(&'static str, Vec<String>)> {
    let truth = transcripts();
    let mut all: Vec<(&str, Vec<String>)> = CLIPS.iter().copied().zip(truth.clone()).collect();
    for (clip, n) in JOINED {
        all.push((clip, truth[..n].concat()));
    }
    all
}

/// Transcribes `clip` greedily.
fn transcribe(model: &mut audiocpp_engine::asr::AsrModel, clip: &str) -> AsrOutput {
    let opts = greedy(model);
    model
        .run_file(&asset(clip), &opts)
        .unwrap_or_else(|e| panic!("{clip}: {e}"))
}

/// The faster-whisper result our `quantize` is compared with.
fn peer<'a>(reference: &'a Value, clip: &str, quantize: Option<&str>) -> &'a Value {
    let c = reference_clip(reference, clip);
    if quantize.is_some() {
        &c["int8"]
    } else {
        c
    }
}

/// Transcribes every clip with `model` converted as `quantize` and checks the word
/// error rates against the transcripts and faster-whisper's.
fn check(model_name: &str, quantize: Option<&str>, bounds: Bounds) {
    let reference = reference(&format!("asr-real/{model_name}/asr_reference.json"));
    let mut model = load(model_name, quantize, 1);
    let (mut ours_truth, mut fw_truth, mut ours_fw, mut n_truth, mut n_fw) = (0, 0, 0, 0, 0);
    let label = format!("{model_name} {}", quantize.unwrap_or("f16"));
    for (clip, truth) in clips_with_truth() {
        let out = transcribe(&mut model, clip);
        let theirs = peer(&reference, clip, quantize)["text"]
            .as_str()
            .expect("a reference text");
        let (o, f) = (words(&out.text), words(theirs));
        let (a, b, c) = (
            word_errors(&o, &truth),
            word_errors(&f, &truth),
            word_errors(&o, &f),
        );
        eprintln!(
            "{label} {clip}: errors ours {a}, faster-whisper {b}, between {c} / {} words",
            truth.len()
        );
        if c > 0 {
            eprintln!("  ours: {}\n  faster-whisper: {theirs}", out.text);
        }
        ours_truth += a;
        fw_truth += b;
        ours_fw += c;
        n_truth += truth.len();
        n_fw += f.len();
    }
    let (ours, fw, between) = (
        ours_truth as f64 / n_truth as f64,
        fw_truth as f64 / n_truth as f64,
        ours_fw as f64 / n_fw as f64,
    );
    eprintln!("{label}: WER ours {ours:.4}, faster-whisper {fw:.4} (against the transcripts), ours against faster-whisper {between:.4}");
    assert!(
        ours <= bounds.truth,
        "{label}: WER {ours:.4} against the transcripts, bound {}",
        bounds.truth
    );
    assert!(
        ours <= fw + TRUTH_MARGIN,
        "{label}: WER {ours:.4} against the transcripts, faster-whisper's {fw:.4} + {TRUTH_MARGIN}"
    );
    assert!(
        between <= bounds.peer,
        "{label}: WER {between:.4} against faster-whisper, bound {}",
        bounds.peer
    );
}

#[test]
fn tiny_en_f16_within_bounds() {
    check(
        "tiny.en",
        None,
        Bounds {
            truth: 0.06,
            peer: 0.02,
        },
    );
}

#[test]
fn tiny_en_q8_0_within_bounds() {
    check(
        "tiny.en",
        Some("q8_0"),
        Bounds {
            truth: 0.07,
            peer: 0.04,
        },
    );
}

#[test]
fn base_f16_within_bounds() {
    check(
        "base",
        None,
        Bounds {
            truth: 0.06,
            peer: 0.02,
        },
    );
}

#[test]
fn base_q8_0_within_bounds() {
    check(
        "base",
        Some("q8_0"),
        Bounds {
            truth: 0.06,
            peer: 0.04,
        },
    );
}

/// tiny.en (f16) on the LibriVox join: the same segments as faster-whisper's, text,
/// times and seeks, including the window read again from 23.76 s (mel frame 2376)
/// that loses "He".
#[test]
fn reread_matches_faster_whisper() {
    let clip = JOINED[0].0;
    let reference = reference("asr-real/tiny.en/asr_reference.json");
    let theirs = reference_clip(&reference, clip)["segments"]
        .as_array()
        .expect("reference segments");
    let mut model = load("tiny.en", None, 1);
    let ours = transcribe(&mut model, clip).segments;
    let view =
        |text: &str, start: f64, end: f64, seek: u64| format!("{seek} {start:.2}-{end:.2}{text}");
    let ours: Vec<String> = ours
        .iter()
        .map(|s| view(&s.text, s.start, s.end, s.seek as u64))
        .collect();
    let theirs: Vec<String> = theirs
        .iter()
        .map(|s| {
            view(
                s["text"].as_str().unwrap(),
                s["start"].as_f64().unwrap(),
                s["end"].as_f64().unwrap(),
                s["seek"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(ours, theirs, "segments against faster-whisper's");
    let reread = ours.last().expect("segments");
    assert!(
        reread.starts_with("2376 23.76-") && reread.contains(" might even have been made amiable"),
        "the window read again from 23.76 s: {reread}"
    );
}
