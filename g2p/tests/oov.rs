//! The out-of-lexicon list (`fixtures/oov.txt`) the Whisper round trip speaks: every line
//! really holds something the lexicons lack, and every line comes out as Kokoro symbols
//! with no word left silent.

mod common;

use audiocpp_g2p::Dialect;

struct Case {
    kind: String,
    text: String,
    heard: String,
}

fn cases() -> Vec<Case> {
    common::fixture_lines("oov.txt")
        .into_iter()
        .map(|line| {
            let cols: Vec<&str> = line.split('\t').collect();
            assert_eq!(
                cols.len(),
                3,
                "oov.txt line without three columns: {line:?}"
            );
            Case {
                kind: cols[0].to_string(),
                text: cols[1].to_string(),
                heard: cols[2].to_string(),
            }
        })
        .collect()
}

#[test]
fn the_list_is_long_enough_and_really_out_of_lexicon() {
    let cases = cases();
    assert!(cases.len() >= 50, "{} cases", cases.len());
    let lexicon = common::lexicon(Dialect::Us);
    for case in &cases {
        let words: Vec<&str> = case
            .text
            .split(|c: char| c.is_whitespace() || ",.;:!?".contains(c))
            .filter(|w| !w.is_empty())
            .collect();
        let has_digits = words.iter().any(|w| w.chars().any(|c| c.is_ascii_digit()));
        let missing: Vec<&&str> = words.iter().filter(|w| !lexicon.contains(w)).collect();
        match case.kind.as_str() {
            "number" | "money" | "date" | "time" | "unit" => assert!(
                has_digits,
                "{:?} has no number, so it is not a number case",
                case.text
            ),
            "abbreviation" => assert!(case.text.contains('.'), "{:?}", case.text),
            "name" | "word" | "acronym" => assert!(
                !missing.is_empty(),
                "every word of {:?} is in the lexicon",
                case.text
            ),
            other => panic!("unknown kind {other:?}"),
        }
        assert!(!case.heard.is_empty());
    }
}

#[test]
fn every_case_is_spoken_in_kokoro_symbols() {
    let vocab = common::kokoro_vocab();
    for dialect in [Dialect::Us, Dialect::Gb] {
        let g2p = common::g2p(dialect);
        for case in cases() {
            let sentences = g2p.phonemize(&case.text).unwrap();
            let phonemes: Vec<&str> = sentences.iter().map(|s| s.phonemes.as_str()).collect();
            let phonemes = phonemes.join(" ");
            eprintln!("{dialect:?}\t{}\t{phonemes}", case.text);
            for c in phonemes.chars() {
                assert!(vocab.contains(&c), "{c:?} in {phonemes:?}");
            }
            // Each written word yields at least one spoken word: nothing fell silent.
            let written = case
                .text
                .split_whitespace()
                .filter(|w| w.chars().any(char::is_alphanumeric))
                .count();
            let spoken = phonemes
                .split(' ')
                .filter(|w| w.chars().any(char::is_alphabetic))
                .count();
            assert!(
                spoken >= written,
                "{:?} gave {spoken} spoken words for {written} written: {phonemes}",
                case.text
            );
        }
    }
}
