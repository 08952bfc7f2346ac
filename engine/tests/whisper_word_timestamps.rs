//! Word timestamps ([`DecodeOptions::word_timestamps`]) against faster-whisper's
//! `word_timestamps=True` on the same CTranslate2 weights (float32 against our f16,
//! greedy, English; `asr-real/<model>/word_reference.json`, computed by
//! `xtask/python/asr_word_reference.py`), on the real speech clips of
//! `whisper_real_speech.rs`: tiny.en and base.
//!
//! Asserted, per model over all clips: the same words in the same order (compared
//! after [`whisper_common::words`]' normalisation, as the word error rates are; at most
//! [`MAX_WORD_MISMATCH`] words of either side may lack a partner, the clips where the
//! transcripts differ being few), and over the words both have, the start and end
//! times within [`MEDIAN_BOUND`] s of faster-whisper's at the median and within
//! [`MAX_BOUND`] s at most; every word lies inside its segment and times never run
//! backwards; probabilities lie in (0, 1] and within [`PROBABILITY_BOUND`] of
//! faster-whisper's at the median. Measured when the bounds were set:
//! docs/models/whisper.md.

mod whisper_common;

use audiocpp_engine::asr::{AsrOutput, DecodeOptions};
use serde_json::Value;
use whisper_common::*;

/// The clips (those of whisper_real_speech.rs).
const CLIPS: [&str; 12] = [
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
    "pocketsphinx/librivox_joined.wav",
    "pocketsphinx/all_joined.wav",
];

/// Median |difference| of word starts and ends from faster-whisper's, in seconds.
const MEDIAN_BOUND: f64 = 0.1;
/// Largest |difference| of word starts and ends, in seconds.
const MAX_BOUND: f64 = 1.0;
/// Median |difference| of word probabilities.
const PROBABILITY_BOUND: f64 = 0.05;
/// Words, ours and faster-whisper's together, that have no partner on the other
/// side, per model.
const MAX_WORD_MISMATCH: usize = 4;

/// A word as compared: its text, start, end and probability.
type W = (String, f64, f64, f64);

fn our_words(out: &AsrOutput) -> Vec<W> {
    let mut words = Vec::new();
    for s in &out.segments {
        let mut last = s.start;
        for w in &s.words {
            assert!(
                w.start <= w.end && w.start >= s.start - 1e-6 && w.end <= s.end + 1e-6,
                "word {:?} {}-{} outside its segment {}-{}",
                w.word,
                w.start,
                w.end,
                s.start,
                s.end
            );
            assert!(
                w.start + 1e-6 >= last,
                "word {:?} starts before the one before it",
                w.word
            );
            assert!(
                w.probability > 0.0 && w.probability <= 1.0,
                "probability {} of {:?}",
                w.probability,
                w.word
            );
            last = w.start;
            words.push((w.word.clone(), w.start, w.end, f64::from(w.probability)));
        }
    }
    words
}

fn their_words(clip: &Value) -> Vec<W> {
    clip["segments"]
        .as_array()
        .expect("reference segments")
        .iter()
        .flat_map(|s| s["words"].as_array().expect("reference words").iter())
        .map(|w| {
            (
                w["word"].as_str().unwrap().to_string(),
                w["start"].as_f64().unwrap(),
                w["end"].as_f64().unwrap(),
                w["probability"].as_f64().unwrap(),
            )
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty(), "nothing to take the median of");
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A word as the word error rates compare it ([`whisper_common::words`]: case, punctuation,
/// numbers up to twenty).
fn norm(word: &str) -> String {
    words(word).join(" ")
}

/// The pairs of words that are the same text after [`norm`], in order (a longest
/// common subsequence), and how many of `theirs` have no partner.
fn matched<'a>(ours: &'a [W], theirs: &'a [W]) -> (Vec<(&'a W, &'a W)>, usize) {
    let (n, m) = (ours.len(), theirs.len());
    let (a, b): (Vec<String>, Vec<String>) = (
        ours.iter().map(|w| norm(&w.0)).collect(),
        theirs.iter().map(|w| norm(&w.0)).collect(),
    );
    let mut l = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            l[i][j] = if a[i] == b[j] {
                l[i + 1][j + 1] + 1
            } else {
                l[i + 1][j].max(l[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut pairs) = (0, 0, Vec::new());
    while i < n && j < m {
        if a[i] == b[j] {
            pairs.push((&ours[i], &theirs[j]));
            i += 1;
            j += 1;
        } else if l[i + 1][j] >= l[i][j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    let unmatched = m - pairs.len();
    (pairs, unmatched)
}

fn check(model_name: &str) {
    let reference = reference(&format!("asr-real/{model_name}/word_reference.json"));
    let mut model = load(model_name, None, 1);
    let opts = DecodeOptions {
        word_timestamps: true,
        ..greedy(&model)
    };
    let (mut starts, mut ends, mut probs, mut worst, mut unmatched, mut total) =
        (Vec::new(), Vec::new(), Vec::new(), 0f64, 0, 0);
    for clip in CLIPS {
        let out = model
            .run_file(&asset(clip), &opts)
            .unwrap_or_else(|e| panic!("{clip}: {e}"));
        let ours = our_words(&out);
        let theirs = their_words(reference_clip(&reference, clip));
        let (pairs, missing) = matched(&ours, &theirs);
        for (o, t) in &pairs {
            let (ds, de) = ((o.1 - t.1).abs(), (o.2 - t.2).abs());
            starts.push(ds);
            ends.push(de);
            probs.push((o.3 - t.3).abs());
            worst = worst.max(ds).max(de);
        }
        eprintln!(
            "{model_name} {clip}: {} words, {} matched, {missing} of faster-whisper's unmatched",
            ours.len(),
            pairs.len()
        );
        if missing > 0 || ours.len() != theirs.len() {
            let text = |w: &[W]| w.iter().map(|x| x.0.as_str()).collect::<String>();
            eprintln!(
                "  ours: {}\n  faster-whisper: {}",
                text(&ours),
                text(&theirs)
            );
        }
        unmatched += missing + ours.len().saturating_sub(pairs.len());
        total += theirs.len();
    }
    let (ms, me, mp) = (median(starts), median(ends), median(probs));
    eprintln!(
        "{model_name}: {total} words, {unmatched} unmatched; |start| median {ms:.3} s, |end| median {me:.3} s, worst {worst:.3} s; |probability| median {mp:.4}"
    );
    assert!(unmatched <= MAX_WORD_MISMATCH, "{unmatched} words differ");
    assert!(
        ms <= MEDIAN_BOUND && me <= MEDIAN_BOUND,
        "medians {ms} and {me} s"
    );
    assert!(worst <= MAX_BOUND, "a word {worst} s off");
    assert!(
        mp <= PROBABILITY_BOUND,
        "probabilities off by {mp} at the median"
    );
}

#[test]
fn tiny_en_words_match_faster_whisper() {
    check("tiny.en");
}

#[test]
fn base_words_match_faster_whisper() {
    check("base");
}

/// Without alignment heads in the file, word timestamps are refused with the remedy.
#[test]
fn a_model_without_alignment_heads_refuses_word_timestamps() {
    let dir = tempfile::tempdir().unwrap();
    let ct2 = dir.path().join("ct2");
    std::fs::create_dir(&ct2).unwrap();
    let src = assets().join("whisper-tiny.en-ct2");
    for f in ["model.bin", "tokenizer.json", "vocabulary.txt"] {
        std::os::unix::fs::symlink(src.join(f), ct2.join(f)).unwrap();
    }
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    let mut config = config.as_object().unwrap().clone();
    config.remove("alignment_heads");
    std::fs::write(ct2.join("config.json"), Value::Object(config).to_string()).unwrap();
    let out = dir.path().join("no-heads.gguf");
    audiocpp_engine::tasks::convert(
        "whisper",
        &ct2,
        Some(&root().join("model_specs")),
        &out,
        &Default::default(),
    )
    .unwrap();
    let mut model = audiocpp_engine::asr::AsrModel::load(
        "whisper",
        &out,
        None,
        &audiocpp_engine::backend::RuntimeOptions {
            threads: 1,
            ..Default::default()
        },
    )
    .unwrap();
    let opts = DecodeOptions {
        word_timestamps: true,
        ..greedy(&model)
    };
    let err = model
        .run_file(&asset(CLIPS[1]), &opts)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("alignment heads") && err.contains("convert it again"),
        "{err}"
    );
    // Without word timestamps the same file transcribes.
    assert!(!model
        .run_file(&asset(CLIPS[1]), &greedy(&model))
        .unwrap()
        .text
        .is_empty());
}
