//! English text to misaki phonemes, the input Kokoro-82M v1.0 was trained on, without GPL code.
//!
//! Kokoro reads misaki's phoneme alphabet, so this crate reproduces misaki 0.9.4's English
//! G2P: the gold and silver lexicons (taken as JSON text, so the model file decides which
//! lexicon is used), misaki's tokenizer, its spaCy-compatible part-of-speech tagger for
//! heteronyms, its stress rules and its number reading. That core comes from the crate
//! `misaki-rs` (MIT) with its `espeak` feature off: misaki's own fallback for unknown words
//! is espeak-ng, which is GPL-3 and is not linked here.
//!
//! What `misaki-rs` lacks, and this crate adds:
//! - lexicons from the caller ([`Lexicon::from_json`]): `misaki-rs` parses its own embedded
//!   copy (byte-identical to misaki 0.9.4's), which [`G2p::new`] replaces with the given one;
//! - a letter-to-sound fallback for words missing from the lexicon ([`fallback`]), where
//!   `misaki-rs` without espeak emits `❓`;
//! - text normalization misaki does not do ([`normalize`]): clock times, numeric dates,
//!   phone numbers, number ranges, arithmetic signs, Roman numerals after names, web
//!   addresses, abbreviations such as `St.` and `Jan.`, units after numbers, decades,
//!   fractions;
//! - sentences, and pieces within a caller's symbol limit ([`G2p::with_max_symbols`]), cut
//!   by the workspace's one text splitter (`audiocpp-text`), the one the engine cuts
//!   requests with;
//! - an output of misaki's symbols only ([`SYMBOLS`]; Kokoro's vocabulary holds them all).
//! - bounded work on hostile input: tokens over 40 characters are cut (a 4,000-character
//!   `AbAb…` took misaki-rs 125 s whole, 0.2 s cut), and a panic inside misaki-rs becomes
//!   an error.
//!
//! # Accuracy (measured 2026-12-01 on this machine)
//! - Against python misaki 0.9.4 itself (spaCy `en_core_web_sm` 3.8.0, `fallback=None`) on
//!   in-lexicon text, 135 written sentences (7 of them with `%`, measured 2026-12-05) plus
//!   150 of random gold-lexicon words per dialect: 284 of 285 US and 283 of 284 GB texts
//!   match exactly (99.6%). The one difference is deliberate: a sentence ending in `p.m.`
//!   keeps its period, which misaki folds into the abbreviation. `tests/reference.rs`
//!   asserts at least 99%, and every sentence with `%` exactly; the fixture and the script
//!   that writes it are in `tests/fixtures/`.
//! - The letter-to-sound rules alone against the US gold lexicon (every 20th plain word,
//!   3,458 words): phoneme error rate 0.176, 29.2% of words exact without stress marks,
//!   22.1% with them (`tests/letter_to_sound.rs`).
//! - The 61 out-of-lexicon lines of `tests/fixtures/oov.txt` (names, coinages, acronyms,
//!   numbers, money, dates, times, abbreviations, units), phonemized here, spoken by the f32
//!   Kokoro ONNX in onnxruntime and transcribed by Whisper base (faster-whisper, beam 5),
//!   scored by `tests/fixtures/oov_round_trip.py`. US (`af_heart`): word error rate 0.077;
//!   names 0.30 and coined words 0.12 (mostly spelling: `Branigan`, `Thornberry`),
//!   acronyms 0.02, numbers 0.015, abbreviations, dates, times, money and units 0.
//!   GB (`bf_emma`): 0.086; names 0.27, coined words 0.14, abbreviations 0.03, units 0,
//!   dates 0.18 only because the list's expected words are in US order (`december twenty
//!   fifth`) where the GB reading says `the 25th of December`, which Whisper wrote as
//!   `25 December 2024`. Bound for the engine's round trip on this list: 0.12 overall, 0.05
//!   on the number, money, time, unit and acronym lines (and on dates with a US voice).
//! - Cost: [`G2p::new`] takes about 0.4 s of CPU and 145 MB peak memory (misaki-rs parses
//!   its own lexicons and tagger before the given lexicon replaces its tables); a sentence
//!   takes about 4 ms.
//!
//! # Licences
//! misaki-rs is MIT (it embeds misaki's lexicons, Apache-2.0, and weights ported from
//! spaCy's `en_core_web_sm`, MIT); misaki's lexicons given to [`Lexicon::from_json`] are
//! Apache-2.0. Every dependency is permissive (MIT, Apache-2.0, BSD-3-Clause for
//! `waken_snowball`, WTFPL for `language-tokenizer`); none is GPL.

pub mod fallback;
pub mod normalize;

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use misaki_rs::lexicon::PhonemeEntry;

/// Every symbol [`G2p::phonemize`] may emit: misaki's US and GB phoneme sets (with misaki's
/// `ɾ`→`T` and `ʔ`→`t` rewrite applied), its punctuation, and the word space. All of them are
/// in Kokoro's `vocab.json` (a test checks it against the pinned file).
pub const SYMBOLS: &str = "AIOQWYabdfhijklmnpstuvwzæðŋɐɑɒɔəɛɜɡɪɹʃʊʌʒʤʧˈˌːθᵊᵻT;:,.!?—…\"“”() ";

/// What can go wrong building or running the front end.
#[derive(Debug, thiserror::Error)]
pub enum G2pError {
    /// A lexicon's JSON text could not be read as misaki's format.
    #[error("the {which} lexicon is not misaki's JSON format ({reason}); use the lexicon JSON files of the misaki 0.9.4 wheel, as `--task convert --family kokoro` embeds them")]
    BadLexicon {
        /// Which of the two texts (`gold` or `silver`).
        which: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// The phonemizer failed on this text (an internal error, reported instead of a panic).
    #[error("phonemizing {text:?} failed: {reason}")]
    Phonemize {
        /// The sentence (cut to 80 characters) that failed.
        text: String,
        /// What went wrong.
        reason: String,
    },
}

/// English variety: selects the lexicons' phoneme conventions and the fallback's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// American English (misaki's `us_*` lexicons).
    Us,
    /// British English (misaki's `gb_*` lexicons).
    Gb,
}

/// A pronunciation lexicon: misaki's gold (hand-checked, with part-of-speech variants) and
/// silver (larger, plain) tables for one dialect.
pub struct Lexicon {
    gold: HashMap<String, PhonemeEntry>,
    silver: HashMap<String, PhonemeEntry>,
}

impl Lexicon {
    /// Parses the texts of misaki's `<dialect>_gold.json` and `<dialect>_silver.json`.
    pub fn from_json(gold: &str, silver: &str) -> Result<Lexicon, G2pError> {
        Ok(Lexicon {
            gold: parse_table(gold, "gold")?,
            silver: parse_table(silver, "silver")?,
        })
    }

    /// Whether `word` (exactly as written, or lowercased) has an entry.
    pub fn contains(&self, word: &str) -> bool {
        let lower = word.to_lowercase();
        [word, lower.as_str()]
            .iter()
            .any(|w| self.gold.contains_key(*w) || self.silver.contains_key(*w))
    }

    /// Number of entries in the gold and silver tables.
    pub fn len(&self) -> (usize, usize) {
        (self.gold.len(), self.silver.len())
    }

    /// Whether both tables are empty.
    pub fn is_empty(&self) -> bool {
        self.gold.is_empty() && self.silver.is_empty()
    }
}

fn parse_table(text: &str, which: &'static str) -> Result<HashMap<String, PhonemeEntry>, G2pError> {
    let bad = |reason: String| G2pError::BadLexicon { which, reason };
    let table: HashMap<String, PhonemeEntry> =
        serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    if table.is_empty() {
        return Err(bad("it has no entries".into()));
    }
    for (word, entry) in &table {
        if let PhonemeEntry::Tagged(variants) = entry {
            if !variants.contains_key("DEFAULT") {
                return Err(bad(format!(
                    "the entry {word:?} has part-of-speech variants but no DEFAULT"
                )));
            }
        }
    }
    Ok(table)
}

/// One sentence of the input and its phonemes, at most the symbol limit long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sentence {
    /// The sentence as written (after whitespace clean-up), for logs and streaming.
    pub text: String,
    /// Its misaki phonemes: only symbols of [`SYMBOLS`].
    pub phonemes: String,
}

/// The English front end: text in, sentences of misaki phonemes out.
pub struct G2p {
    inner: misaki_rs::G2P,
    dialect: Dialect,
    max_symbols: usize,
}

impl G2p {
    /// A front end speaking `dialect` with `lexicon`, unknown words going to
    /// [`fallback::LetterToSound`]. Costs about a quarter second: `misaki-rs` parses its
    /// embedded tables before the given lexicon replaces them.
    pub fn new(lexicon: Lexicon, dialect: Dialect) -> G2p {
        let language = match dialect {
            Dialect::Us => misaki_rs::Language::EnglishUS,
            Dialect::Gb => misaki_rs::Language::EnglishGB,
        };
        let words = Arc::new(fallback::plain_entries(&lexicon.gold));
        let letters = fallback::LetterToSound::new(dialect, words);
        let mut inner = misaki_rs::G2P::with_fallback(language, Some(Box::new(letters)));
        inner.lexicon.golds = lexicon.gold;
        inner.lexicon.silvers = lexicon.silver;
        G2p {
            inner,
            dialect,
            max_symbols: usize::MAX,
        }
    }

    /// Sets the most symbols one [`Sentence`] may hold (a model's context); at least 16.
    /// Without it a sentence's phonemes are never cut.
    pub fn with_max_symbols(mut self, max_symbols: usize) -> G2p {
        self.max_symbols = max_symbols.max(16);
        self
    }

    /// The dialect this front end speaks.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Splits `text` into sentences ([`audiocpp_text::sentences`], white space inside
    /// each collapsed to single spaces) and phonemizes each; a sentence whose phonemes
    /// exceed the symbol limit is cut again ([`audiocpp_text::split_to_limit`]).
    /// Sentences with nothing to say (only punctuation) are left out.
    pub fn phonemize(&self, text: &str) -> Result<Vec<Sentence>, G2pError> {
        let mut out = Vec::new();
        for sentence in audiocpp_text::sentences(text) {
            let sentence = sentence.split_whitespace().collect::<Vec<_>>().join(" ");
            let phonemes = self.phonemize_sentence(&sentence)?;
            for piece in audiocpp_text::split_to_limit(&phonemes, self.max_symbols) {
                out.push(Sentence {
                    text: sentence.clone(),
                    phonemes: piece,
                });
            }
        }
        Ok(out)
    }

    /// The phonemes of one sentence, without splitting (may exceed the symbol limit).
    pub fn phonemize_sentence(&self, sentence: &str) -> Result<String, G2pError> {
        let normalized = normalize::normalize(sentence, self.dialect);
        let raw = self.misaki(&normalized, sentence)?;
        let mut phonemes = clean(&raw);
        // misaki folds a final period into an abbreviation (`a.m.`); the sentence still ends.
        let last = sentence.trim_end().chars().last();
        if let Some(end) = last.filter(|c| ".!?".contains(*c)) {
            if !phonemes.is_empty() && !phonemes.ends_with(|c: char| ";:,.!?—…\"“”()".contains(c))
            {
                phonemes.push(end);
            }
        }
        Ok(phonemes)
    }

    fn misaki(&self, text: &str, original: &str) -> Result<String, G2pError> {
        let failed = |reason: String| G2pError::Phonemize {
            text: cut(original),
            reason,
        };
        match catch_unwind(AssertUnwindSafe(|| self.inner.g2p(text))) {
            Ok(Ok((phonemes, _))) => Ok(phonemes),
            Ok(Err(e)) => Err(failed(e.to_string())),
            Err(panic) => Err(failed(format!(
                "internal panic: {}",
                panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default()
            ))),
        }
    }
}

fn cut(text: &str) -> String {
    text.chars().take(80).collect()
}

/// Keeps only [`SYMBOLS`], with single spaces and no space before punctuation.
fn clean(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        let c = if c.is_whitespace() { ' ' } else { c };
        if !SYMBOLS.contains(c) {
            continue;
        }
        if c == ' ' && (out.is_empty() || out.ends_with(' ')) {
            continue;
        }
        out.push(c);
    }
    let trimmed = out.trim_end();
    let spoken = trimmed.chars().any(|c| !";:,.!?—…\"“”() ".contains(c));
    if spoken {
        trimmed.to_string()
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_drops_unknown_symbols_and_extra_spaces() {
        assert_eq!(clean("  həlˈO ❓  wˈɜɹld !"), "həlˈO wˈɜɹld !");
        assert_eq!(clean(" . , "), "");
    }

    #[test]
    fn the_front_end_can_be_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<G2p>();
        shared::<Lexicon>();
    }

    #[test]
    fn bad_lexicons_name_the_table() {
        let err = Lexicon::from_json("{", "{}").err().unwrap().to_string();
        assert!(err.contains("gold"), "{err}");
        let err = Lexicon::from_json(r#"{"a":"ɐ"}"#, "{}")
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("silver") && err.contains("no entries"),
            "{err}"
        );
        let err = Lexicon::from_json(r#"{"a":{"NN":"ɐ"}}"#, r#"{"b":"b"}"#)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("DEFAULT"), "{err}");
    }
}
