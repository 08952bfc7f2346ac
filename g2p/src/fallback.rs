//! Pronunciations for words the lexicon lacks (names, coinages), in misaki's phoneme set.
//!
//! misaki sends such words to espeak-ng, which is GPL-3; this is a rule-based replacement
//! written for this crate. A word is tried, in order, as: an acronym (all capitals, or no
//! vowel letter as in `www`: letters spelled, the last one stressed), a lexicon word after case folding, a compound of two
//! lexicon words (`quibblewort` = `quibble` + `wort`), a lexicon stem with a suffix
//! (`-s`, `-son`, `-ville`, ...), and finally English letter-to-sound rules: consonant and
//! vowel digraphs, r-coloured vowels, the silent final `e` that lengthens the vowel before
//! it, reduced unstressed vowels, and stress on the first syllable (or before suffixes such
//! as `-tion`, `-ic`, `-ius`). British output comes from the same rules with the GB vowels.

use std::collections::HashMap;
use std::sync::Arc;

use misaki_rs::fallback::{Fallback, FallbackError};
use misaki_rs::lexicon::PhonemeEntry;

use crate::normalize::cardinal_words;
use crate::Dialect;

/// The gold lexicon's plain entries (lowercase alphabetic keys, one pronunciation), which
/// the fallback builds compounds and suffixed words from; single letters keep their case.
pub fn plain_entries(gold: &HashMap<String, PhonemeEntry>) -> HashMap<String, String> {
    gold.iter()
        .filter_map(|(word, entry)| {
            let phonemes = match entry {
                PhonemeEntry::Simple(p) => p.clone(),
                PhonemeEntry::Tagged(variants) => variants.get("DEFAULT")?.clone()?,
            };
            let letter = word.chars().count() == 1 && word.chars().all(|c| c.is_ascii_uppercase());
            let plain_word = word.chars().all(|c| c.is_ascii_lowercase());
            (letter || plain_word).then(|| (word.clone(), phonemes))
        })
        .collect()
}

/// The fallback given to misaki for unknown words.
pub struct LetterToSound {
    dialect: Dialect,
    words: Arc<HashMap<String, String>>,
}

/// Never fails: a word with nothing readable in it (emoji, other scripts) is silent, so
/// one such word does not cost the whole sentence.
impl Fallback for LetterToSound {
    fn phonemize(&self, word: &str) -> Result<String, FallbackError> {
        Ok(self.word(word))
    }
}

/// Suffixes read without stress after a known stem, with their US and GB phonemes.
const WEAK_SUFFIXES: &[(&str, &str, &str)] = &[
    ("son", "sən", "sən"),
    ("sen", "sən", "sən"),
    ("ton", "tən", "tən"),
    ("ville", "vɪl", "vɪl"),
    ("berg", "bɜɹɡ", "bɜːɡ"),
    ("burg", "bɜɹɡ", "bɜːɡ"),
    ("field", "fild", "fiːld"),
    ("ford", "fəɹd", "fəd"),
    ("ham", "həm", "həm"),
    ("land", "lənd", "lənd"),
    ("ley", "li", "li"),
    ("ly", "li", "li"),
    ("ness", "nəs", "nəs"),
    ("less", "ləs", "ləs"),
    ("ful", "fᵊl", "fᵊl"),
    ("ment", "mənt", "mənt"),
    ("ism", "ɪzəm", "ɪzəm"),
    ("ist", "ɪst", "ɪst"),
    ("er", "əɹ", "ə"),
    ("ers", "əɹz", "əz"),
    ("s", "z", "z"),
];

impl LetterToSound {
    /// A fallback for `dialect` that may build on the plain lexicon entries `words`.
    pub fn new(dialect: Dialect, words: Arc<HashMap<String, String>>) -> LetterToSound {
        LetterToSound { dialect, words }
    }

    /// The phonemes of `text`: its letter runs and digit runs read in turn.
    pub fn word(&self, text: &str) -> String {
        let mut parts = Vec::new();
        for run in runs(text) {
            let phonemes = if run.chars().all(|c| c.is_ascii_digit()) {
                self.digits(&run)
            } else {
                self.letters(&run)
            };
            if !phonemes.is_empty() {
                parts.push(phonemes);
            }
        }
        parts.join(" ")
    }

    fn digits(&self, run: &str) -> String {
        let spoken = match run.parse::<u64>() {
            Ok(n) if run.len() <= 4 && !run.starts_with('0') => cardinal_words(n),
            _ => run
                .chars()
                .map(|c| cardinal_words(c.to_digit(10).unwrap_or(0) as u64))
                .collect::<Vec<_>>()
                .join(" "),
        };
        spoken
            .split(' ')
            .filter_map(|w| self.words.get(w).cloned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn letters(&self, run: &str) -> String {
        let letters: String = run.chars().filter(|c| c.is_alphabetic()).collect();
        if letters.is_empty() {
            return String::new();
        }
        let no_vowel = !letters
            .chars()
            .any(|c| "aeiouyAEIOUY".contains(c) || !c.is_ascii());
        if letters.chars().all(|c| c.is_uppercase()) || no_vowel {
            return self.spell(&letters);
        }
        let lower = ascii_fold(&letters.to_lowercase());
        if lower.is_empty() {
            return String::new();
        }
        if let Some(p) = self.words.get(&lower) {
            return p.clone();
        }
        if let Some(p) = self.possessive_or_irish(run) {
            return p;
        }
        if let Some(rest) = lower.strip_prefix("mc").filter(|r| r.len() > 2) {
            return format!("mək{}", self.letters(rest));
        }
        if let Some(p) = self.suffixed(&lower) {
            return p;
        }
        if let Some(p) = self.compound(&lower) {
            return p;
        }
        self.rules(&lower)
    }

    /// `O'Brien`, `D'Angelo`, `McArthur`-like prefixes and a trailing `'s`.
    fn possessive_or_irish(&self, run: &str) -> Option<String> {
        let lower = run.to_lowercase().replace('’', "'");
        if let Some(stem) = lower.strip_suffix("'s") {
            let stem = self.letters(stem);
            return Some(format!("{stem}{}", plural_ending(&stem, self.dialect)));
        }
        if let Some(rest) = lower.strip_prefix("o'") {
            let o = if self.dialect == Dialect::Gb {
                "Q"
            } else {
                "O"
            };
            return Some(format!("ˌ{o}{}", self.letters(rest)));
        }
        if let Some(rest) = lower.strip_prefix("d'") {
            return Some(format!("d{}", self.letters(rest)));
        }
        None
    }

    fn spell(&self, letters: &str) -> String {
        let mut out = String::new();
        for c in letters.chars() {
            let upper = c.to_ascii_uppercase().to_string();
            let name = self
                .words
                .get(&upper)
                .cloned()
                .unwrap_or_else(|| letter_name(c, self.dialect).to_string());
            out.push_str(&name.replace('ˈ', "ˌ"));
        }
        match out.rfind('ˌ') {
            Some(i) => {
                out.replace_range(i..i + 'ˌ'.len_utf8(), "ˈ");
                out
            }
            None => out,
        }
    }

    /// A known stem plus a weak suffix (`johnson`, `smithville`).
    fn suffixed(&self, word: &str) -> Option<String> {
        for (suffix, us, gb) in WEAK_SUFFIXES {
            let Some(stem) = word.strip_suffix(suffix) else {
                continue;
            };
            if stem.len() < 3 {
                continue;
            }
            let stem_phonemes = self
                .words
                .get(stem)
                .or_else(|| stem.strip_suffix('e').and_then(|s| self.words.get(s)))?;
            let ending = match (*suffix, self.dialect) {
                ("s", _) => plural_ending(stem_phonemes, self.dialect),
                (_, Dialect::Us) => us,
                (_, Dialect::Gb) => gb,
            };
            return Some(format!("{stem_phonemes}{ending}"));
        }
        None
    }

    /// Two lexicon words, each at least three letters, the longest first part preferred;
    /// the second part's primary stress becomes secondary.
    fn compound(&self, word: &str) -> Option<String> {
        let n = word.len();
        (3..=n.saturating_sub(3)).rev().find_map(|cut| {
            let (left, right) = (word.get(..cut)?, word.get(cut..)?);
            let l = self.words.get(left)?;
            let r = self.words.get(right)?;
            Some(format!("{l}{}", r.replace('ˈ', "ˌ")))
        })
    }

    /// Letter-to-sound rules on a lowercase ASCII word.
    pub fn rules(&self, word: &str) -> String {
        for (prefix, us, gb) in STRESSLESS_PREFIXES {
            if let Some(rest) = word.strip_prefix(prefix) {
                if rest.len() >= 4 && rest.bytes().any(is_vowel_letter) {
                    let head = if self.dialect == Dialect::Us { us } else { gb };
                    return format!("{head}{}", self.rules(rest));
                }
            }
        }
        for (suffix, us, gb) in RULE_SUFFIXES {
            if let Some(stem) = word.strip_suffix(suffix) {
                if stem.len() >= 3 && stem.bytes().any(is_vowel_letter) {
                    let tail = if self.dialect == Dialect::Us { us } else { gb };
                    return format!("{}{tail}", self.rules(&restore_stem(stem, suffix)));
                }
            }
        }
        let segments = segment(word);
        render(&segments, stressed_syllable(word, &segments), self.dialect)
    }
}

/// Prefixes read with secondary stress before a stem that carries its own.
const STRESSLESS_PREFIXES: &[(&str, &str, &str)] = &[
    ("un", "ˌʌn", "ˌʌn"),
    ("dis", "dˌɪs", "dˌɪs"),
    ("mis", "mˌɪs", "mˌɪs"),
    ("non", "nˌɑn", "nˌɒn"),
    ("over", "ˌOvəɹ", "ˌQvə"),
    ("under", "ˌʌndəɹ", "ˌʌndə"),
];

/// Suffixes the rules strip, reading the stem alone and appending these phonemes.
const RULE_SUFFIXES: &[(&str, &str, &str)] = &[
    ("fully", "fᵊli", "fᵊli"),
    ("ness", "nəs", "nəs"),
    ("less", "ləs", "ləs"),
    ("ful", "fᵊl", "fᵊl"),
    ("ment", "mənt", "mənt"),
    ("ly", "li", "li"),
    ("ing", "ɪŋ", "ɪŋ"),
];

/// The stem's spelling before a suffix: `hopp-ing` → `hop`, `vap-ing` → `vape`.
fn restore_stem(stem: &str, suffix: &str) -> String {
    let b = stem.as_bytes();
    let n = b.len();
    if suffix != "ing" || n < 3 {
        return stem.to_string();
    }
    let (c3, c2, c1) = (b[n - 3], b[n - 2], b[n - 1]);
    if c1 == c2 && !is_vowel_letter(c1) && !matches!(c1, b'l' | b's' | b'z') {
        return stem[..n - 1].to_string();
    }
    let cvc = !is_vowel_letter(c3) && is_vowel_letter(c2) && c2 != b'y' && !is_vowel_letter(c1);
    if cvc && !matches!(c1, b'w' | b'x' | b'y' | b'r' | b'n' | b'l') {
        return format!("{stem}e");
    }
    stem.to_string()
}

/// Letter runs (with inner apostrophes) and digit runs of `text`; anything else separates.
fn runs(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut digits = false;
    for c in text.chars() {
        let is_digit = c.is_ascii_digit();
        let is_letter =
            c.is_alphabetic() || (matches!(c, '\'' | '’') && !current.is_empty() && !digits);
        if (is_digit || is_letter) && (current.is_empty() || digits == is_digit) {
            digits = is_digit;
            current.push(c);
        } else {
            if !current.is_empty() {
                out.push(std::mem::take(&mut current));
            }
            if is_digit || c.is_alphabetic() {
                digits = is_digit;
                current.push(c);
            }
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out.into_iter()
        .map(|r| r.trim_end_matches(['\'', '’']).to_string())
        .filter(|r| !r.is_empty())
        .collect()
}

/// Latin letters with their accents removed (`é` → `e`); other letters dropped.
fn ascii_fold(word: &str) -> String {
    word.chars()
        .filter_map(|c| match c {
            'a'..='z' | '\'' | '’' => Some(c),
            'à' | 'á' | 'â' | 'ã' | 'ä' | 'å' => Some('a'),
            'ç' => Some('c'),
            'è' | 'é' | 'ê' | 'ë' => Some('e'),
            'ì' | 'í' | 'î' | 'ï' => Some('i'),
            'ñ' => Some('n'),
            'ò' | 'ó' | 'ô' | 'õ' | 'ö' | 'ø' => Some('o'),
            'ù' | 'ú' | 'û' | 'ü' => Some('u'),
            'ý' | 'ÿ' => Some('y'),
            _ => None,
        })
        .filter(|c| c.is_ascii_lowercase())
        .collect()
}

/// `-s` after a pronunciation: `s` after a voiceless sound, `ᵻz` (GB `ɪz`) after a
/// sibilant, `z` otherwise.
fn plural_ending(phonemes: &str, dialect: Dialect) -> &'static str {
    match phonemes.chars().last() {
        Some('p' | 't' | 'k' | 'f' | 'θ') => "s",
        Some('s' | 'z' | 'ʃ' | 'ʒ' | 'ʧ' | 'ʤ') => match dialect {
            Dialect::Us => "ᵻz",
            Dialect::Gb => "ɪz",
        },
        _ => "z",
    }
}

/// A letter's name when the lexicon has none (misaki's lexicons do).
fn letter_name(c: char, dialect: Dialect) -> &'static str {
    let us = match c.to_ascii_lowercase() {
        'a' => "ˈA",
        'b' => "bˈi",
        'c' => "sˈi",
        'd' => "dˈi",
        'e' => "ˈi",
        'f' => "ˈɛf",
        'g' => "ʤˈi",
        'h' => "ˈAʧ",
        'i' => "ˈI",
        'j' => "ʤˈA",
        'k' => "kˈA",
        'l' => "ˈɛl",
        'm' => "ˈɛm",
        'n' => "ˈɛn",
        'o' => "ˈO",
        'p' => "pˈi",
        'q' => "kjˈu",
        'r' => "ˈɑɹ",
        's' => "ˈɛs",
        't' => "tˈi",
        'u' => "jˈu",
        'v' => "vˈi",
        'w' => "dˈʌbᵊljˌu",
        'x' => "ˈɛks",
        'y' => "wˈI",
        'z' => "zˈi",
        _ => "",
    };
    match (dialect, us) {
        (Dialect::Gb, "ˈO") => "ˈQ",
        (Dialect::Gb, "ˈɑɹ") => "ˈɑː",
        (Dialect::Gb, "zˈi") => "zˈɛd",
        _ => us,
    }
}

/// One sound of a word: a consonant string, or a vowel nucleus with its stressed and
/// unstressed forms.
#[derive(Debug, Clone, PartialEq)]
enum Segment {
    Consonant(&'static str),
    Vowel {
        stressed: &'static str,
        unstressed: &'static str,
    },
}

fn vowel(stressed: &'static str, unstressed: &'static str) -> Segment {
    Segment::Vowel {
        stressed,
        unstressed,
    }
}

fn is_vowel_letter(c: u8) -> bool {
    matches!(c, b'a' | b'e' | b'i' | b'o' | b'u' | b'y')
}

/// Splits a lowercase ASCII word into sounds, longest spelling first.
fn segment(word: &str) -> Vec<Segment> {
    use Segment::Consonant as C;
    let w = word.as_bytes();
    let n = w.len();
    let at = |i: usize| -> u8 { w.get(i).copied().unwrap_or(0) };
    let rest = |i: usize| -> &str { word.get(i..).unwrap_or("") };
    let vowel_count = w.iter().filter(|c| is_vowel_letter(**c)).count();
    let mut out: Vec<Segment> = Vec::new();
    let mut i = 0;
    while i < n {
        let r = rest(i);
        let c = at(i);
        let next = at(i + 1);
        let prev = if i > 0 { at(i - 1) } else { 0 };
        let start = i == 0;
        let soft = |x: u8| matches!(x, b'e' | b'i' | b'y');
        // Whole-syllable endings first.
        let ending: Option<(usize, Vec<Segment>)> = if r == "tion" || r == "tions" {
            Some((
                r.len(),
                vec![
                    C("ʃ"),
                    vowel("ə", "ə"),
                    C(if r.len() == 5 { "nz" } else { "n" }),
                ],
            ))
        } else if r == "sion" {
            let sh = if i > 0 && is_vowel_letter(prev) {
                "ʒ"
            } else {
                "ʃ"
            };
            Some((4, vec![C(sh), vowel("ə", "ə"), C("n")]))
        } else if r == "cian" || r == "tian" {
            Some((4, vec![C("ʃ"), vowel("ə", "ə"), C("n")]))
        } else if r == "cious" || r == "tious" {
            Some((5, vec![C("ʃ"), vowel("ə", "ə"), C("s")]))
        } else if r == "cial" || r == "tial" {
            Some((4, vec![C("ʃ"), vowel("ə", "ə"), C("l")]))
        } else if r == "shire" {
            Some((5, vec![C("ʃ"), vowel("əɹ", "əɹ")]))
        } else if r == "ture" {
            Some((4, vec![C("ʧ"), vowel("əɹ", "əɹ")]))
        } else if r == "ous" {
            Some((3, vec![vowel("ə", "ə"), C("s")]))
        } else if i > 0
            && !is_vowel_letter(prev)
            && ((r == "al" && vowel_count > 2) || (r == "le" && vowel_count > 1))
        {
            Some((2, vec![vowel("ᵊl", "ᵊl")]))
        } else if (r == "ed") && i >= 2 && vowel_count > 1 {
            let seg = match prev {
                b't' | b'd' => vec![vowel("ᵻd", "ᵻd")],
                b'p' | b'k' | b'f' | b's' | b'x' | b'h' => vec![C("t")],
                _ => vec![C("d")],
            };
            Some((2, seg))
        } else if r == "es"
            && i >= 2
            && matches!(prev, b's' | b'x' | b'z' | b'h')
            && vowel_count > 1
        {
            Some((2, vec![vowel("ᵻz", "ᵻz")]))
        } else if r == "es" && i >= 2 && !is_vowel_letter(prev) && vowel_count > 2 {
            // A silent e before the plural s (Hargreaves).
            let voiceless = matches!(prev, b'p' | b't' | b'k' | b'f');
            Some((2, vec![C(if voiceless { "s" } else { "z" })]))
        } else {
            None
        };
        if let Some((len, segs)) = ending {
            out.extend(segs);
            i += len;
            continue;
        }
        // Vowels.
        if is_vowel_letter(c) && !(c == b'y' && (start || is_vowel_letter(next))) {
            let (len, seg) = vowel_at(word, i, vowel_count);
            out.push(seg);
            i += len;
            continue;
        }
        // Consonants.
        let (len, sound): (usize, &'static str) = match (c, next) {
            (b't', b'c') if at(i + 2) == b'h' => (3, "ʧ"),
            (b's', b'c') if at(i + 2) == b'h' => (3, "sk"),
            (b'c', b'h') if at(i + 2) == b'r' => (2, "k"),
            (b'c', b'h') => (2, "ʧ"),
            (b'c', b'k') => (2, "k"),
            (b'c', b'z') => (2, "ʧ"),
            (b'c', b'c') if soft(at(i + 2)) => (2, "ks"),
            (b'c', b'c') => (2, "k"),
            (b'c', x) if soft(x) => (1, "s"),
            (b'c', _) => (1, "k"),
            (b'p', b'h') => (2, "f"),
            (b's', b'h') => (2, "ʃ"),
            (b't', b'h') => (2, "θ"),
            (b'w', b'h') => (2, "w"),
            (b'g', b'h') if start => (2, "ɡ"),
            (b'g', b'h') => (2, ""),
            (b'k', b'n') if start => (2, "n"),
            (b'w', b'r') if start => (2, "ɹ"),
            (b'g', b'n') if start || i + 2 == n => (2, "n"),
            (b'p', b's') if start => (2, "s"),
            (b'm', b'b') if i + 2 == n => (2, "m"),
            (b'q', b'u') => (2, "kw"),
            (b'q', _) => (1, "k"),
            (b'x', _) if start => (1, "z"),
            (b'x', _) => (1, "ks"),
            (b'd', b'g') if soft(at(i + 2)) => (2, "ʤ"),
            (b'g', b'g') => (2, "ɡ"),
            (b'g', x) if soft(x) && !start => (1, "ʤ"),
            (b'g', _) => (1, "ɡ"),
            (b'n', b'g') => (2, "ŋ"),
            (b'n', b'k') => (2, "ŋk"),
            (b'j', _) => (1, "ʤ"),
            (b'y', _) => (1, "j"),
            (b'r', b'r') => (2, "ɹ"),
            (b'r', _) => (1, "ɹ"),
            (b's', b's') => (2, "s"),
            (b's', _) if i > 0 && is_vowel_letter(prev) && is_vowel_letter(next) => (1, "z"),
            (b's', 0) if i > 0 && !matches!(prev, b'p' | b't' | b'k' | b'f' | b'u' | b'i') => {
                (1, "z")
            }
            (b's', _) => (1, "s"),
            (b'z', _) => (1, "z"),
            (b'h', _) => (1, "h"),
            (b'b', _) => (1 + usize::from(next == b'b'), "b"),
            (b'd', _) => (1 + usize::from(next == b'd'), "d"),
            (b'f', _) => (1 + usize::from(next == b'f'), "f"),
            (b'k', _) => (1 + usize::from(next == b'k'), "k"),
            (b'l', _) => (1 + usize::from(next == b'l'), "l"),
            (b'm', _) => (1 + usize::from(next == b'm'), "m"),
            (b'n', _) => (1 + usize::from(next == b'n'), "n"),
            (b'p', _) => (1 + usize::from(next == b'p'), "p"),
            (b't', _) => (1 + usize::from(next == b't'), "t"),
            (b'v', _) => (1, "v"),
            (b'w', _) => (1, "w"),
            _ => (1, ""),
        };
        if !sound.is_empty() {
            out.push(C(sound));
        }
        i += len;
    }
    out
}

/// The vowel sound starting at `word[i]` and how many letters it takes.
fn vowel_at(word: &str, i: usize, vowel_count: usize) -> (usize, Segment) {
    let w = word.as_bytes();
    let n = w.len();
    let at = |k: usize| -> u8 { w.get(k).copied().unwrap_or(0) };
    let r = word.get(i..).unwrap_or("");
    let c = at(i);
    let last = i + 1 == n;
    let two = r.get(..2).unwrap_or("");
    let r_follows = |k: usize| at(k) == b'r' && !is_vowel_letter(at(k + 1)) && at(k + 1) != b'r';
    // A long u after a lip or back consonant starts with j (cute, humid); after t, d, n, s,
    // l, r it does not (tune, rule) in American English.
    let yod = i > 0
        && matches!(
            at(i - 1),
            b'p' | b'b' | b'f' | b'v' | b'm' | b'k' | b'c' | b'h' | b'g'
        );
    // Magic e: vowel, one consonant, final e (or -es/-ed), and the e is not the only vowel.
    let magic = {
        let cons = at(i + 1);
        let e_at = i + 2;
        cons != 0
            && !is_vowel_letter(cons)
            && !matches!(cons, b'r' | b'w' | b'x')
            && at(e_at) == b'e'
            && (e_at + 1 == n || (e_at + 2 == n && matches!(at(e_at + 1), b's' | b'd')))
    };
    // Silent final e.
    if c == b'e' && last && vowel_count > 1 {
        return (1, Segment::Consonant(""));
    }
    let trigraph = r.get(..3).unwrap_or("");
    match trigraph {
        "eau" => return (3, vowel("O", "O")),
        "igh" => return (3, vowel("I", "I")),
        "air" | "are" if trigraph == "air" || i + 3 == n => return (3, vowel("ɛɹ", "əɹ")),
        "ear" | "eer" => return (3, vowel("ɪɹ", "ɪɹ")),
        "ire" if i + 3 == n => return (3, vowel("Iəɹ", "Iəɹ")),
        "ore" if i + 3 == n => return (3, vowel("ɔɹ", "ɔɹ")),
        "ure" if i + 3 == n => return (3, vowel("jʊɹ", "jəɹ")),
        "our" => return (3, vowel("ɔɹ", "əɹ")),
        _ => {}
    }
    let digraph = match two {
        "ai" | "ay" => Some(vowel("A", "A")),
        "ei" => Some(vowel("A", "A")),
        "ey" if i + 2 == n => Some(vowel("i", "i")),
        "ey" => Some(vowel("A", "A")),
        "ee" | "ea" => Some(vowel("i", "i")),
        "ie" if i + 2 == n && vowel_count <= 2 => Some(vowel("I", "I")),
        "ie" => Some(vowel("i", "i")),
        "oa" => Some(vowel("O", "O")),
        "oe" if i + 2 == n => Some(vowel("O", "O")),
        "oo" => Some(vowel("u", "u")),
        "ou" => Some(vowel("W", "W")),
        "ow" if i + 2 == n => Some(vowel("O", "O")),
        "ow" => Some(vowel("W", "W")),
        "oi" | "oy" => Some(vowel("Y", "Y")),
        "au" | "aw" => Some(vowel("ɔ", "ɔ")),
        "ew" | "ue" | "ui" | "eu" => Some(vowel("u", "u")),
        _ => None,
    };
    if let Some(seg) = digraph {
        return (2, seg);
    }
    // r-coloured vowels: a vowel before r that is not followed by a vowel.
    if r_follows(i + 1) {
        let seg = match c {
            b'a' => vowel("ɑɹ", "əɹ"),
            b'o' => vowel("ɔɹ", "ɔɹ"),
            _ => vowel("ɜɹ", "əɹ"),
        };
        return (2, seg);
    }
    // Long before -tion, -sion, -cian, -tian (nation, lotion), except i (vision).
    let before_shun = ["tion", "sion", "cian", "tian"]
        .iter()
        .any(|e| word.get(i + 1..).is_some_and(|rest| rest.starts_with(e)));
    if magic || (before_shun && c != b'i') {
        let seg = match c {
            b'a' => vowel("A", "A"),
            b'e' => vowel("i", "i"),
            b'i' | b'y' => vowel("I", "I"),
            b'o' => vowel("O", "O"),
            _ if yod => vowel("ju", "ju"),
            _ => vowel("u", "u"),
        };
        return (1, seg);
    }
    // A vowel before another vowel (hiatus) or at the end of the word.
    let hiatus = is_vowel_letter(at(i + 1)) && at(i + 1) != b'y';
    if last || hiatus {
        let seg = match c {
            b'a' => vowel("ɑ", "ə"),
            b'e' => vowel("i", "i"),
            b'i' => vowel("i", "i"),
            b'o' => vowel("O", "O"),
            b'u' => vowel("u", "u"),
            _ if vowel_count <= 1 => vowel("I", "I"),
            _ => vowel("i", "i"),
        };
        return (1, seg);
    }
    // Open syllable: a, o or u, one consonant, then a vowel: long when stressed (vapor,
    // total, humid), but short before -ic and -ity (dramatic, sanity); e and i there are
    // as often short as long, so they stay short.
    let open = {
        let cons = at(i + 1);
        cons != 0
            && !is_vowel_letter(cons)
            && !matches!(cons, b'x' | b'w' | b'h')
            && is_vowel_letter(at(i + 2))
            && at(i + 2) != b'y'
            && matches!(c, b'o' | b'u')
            && !["ic", "ics", "ical", "ity"].contains(&word.get(i + 2..).unwrap_or(""))
    };
    if open {
        let seg = match c {
            b'a' => vowel("A", "ə"),
            b'o' => vowel("O", "ə"),
            _ if yod => vowel("ju", "jə"),
            _ => vowel("u", "ə"),
        };
        return (1, seg);
    }
    let seg = match c {
        b'a' => vowel("æ", "ə"),
        b'e' => vowel("ɛ", "ə"),
        b'i' => vowel("ɪ", "ɪ"),
        b'o' => vowel("ɑ", "ə"),
        b'u' => vowel("ʌ", "ə"),
        _ => vowel("ɪ", "ɪ"),
    };
    (1, seg)
}

/// Suffixes that put the stress on the syllable just before them, with their syllable count.
const PRE_STRESSING: &[(&str, usize)] = &[
    ("tion", 1),
    ("tions", 1),
    ("sion", 1),
    ("cian", 1),
    ("tian", 1),
    ("cious", 1),
    ("tious", 1),
    ("cial", 1),
    ("tial", 1),
    ("ic", 1),
    ("ics", 1),
    ("ical", 1),
    ("ity", 2),
    ("ius", 2),
    ("ium", 2),
    ("ia", 2),
    ("ian", 2),
    ("ion", 2),
    ("ious", 2),
    ("eous", 2),
    ("ina", 1),
    ("ino", 1),
    ("ini", 1),
    ("ez", 1),
];

/// The index (among vowel segments) of the stressed syllable.
fn stressed_syllable(word: &str, segments: &[Segment]) -> usize {
    let syllables = segments
        .iter()
        .filter(|s| matches!(s, Segment::Vowel { stressed, .. } if !stressed.starts_with('ᵊ') && !stressed.starts_with('ᵻ')))
        .count();
    if syllables <= 1 {
        return 0;
    }
    for (suffix, count) in PRE_STRESSING {
        if word.ends_with(suffix) && syllables > *count {
            return syllables - count - 1;
        }
    }
    let weak_start = [
        "be", "de", "re", "con", "com", "ex", "in", "im", "pre", "pro", "ob", "ad",
    ]
    .iter()
    .any(|p| word.starts_with(p) && word.len() > p.len() + 2);
    if syllables == 2 && weak_start {
        return 1;
    }
    // Words of three or more syllables ending in a or o (mostly names from Spanish,
    // Italian, Japanese: Rivera, Okonkwo) stress the last syllable but one.
    if syllables >= 3 && word.ends_with(['a', 'o']) {
        return syllables - 2;
    }
    0
}

/// Writes the segments out, the stressed vowel marked with `ˈ` and the others reduced.
fn render(segments: &[Segment], stressed: usize, dialect: Dialect) -> String {
    let mut out = String::new();
    let mut syllable = 0;
    let syllables = segments
        .iter()
        .filter(|s| matches!(s, Segment::Vowel { stressed, .. } if !stressed.starts_with('ᵊ') && !stressed.starts_with('ᵻ')))
        .count();
    for seg in segments {
        match seg {
            Segment::Consonant(s) => out.push_str(s),
            Segment::Vowel {
                stressed: full,
                unstressed,
            } => {
                let syllabic = !full.starts_with('ᵊ') && !full.starts_with('ᵻ');
                if syllabic && syllable == stressed {
                    out.push('ˈ');
                    out.push_str(full);
                } else if *unstressed == "ɪ" && syllable + 1 < syllables {
                    // An unstressed i before the last syllable is a schwa (matrimony).
                    out.push('ə');
                } else {
                    out.push_str(unstressed);
                }
                if syllabic {
                    syllable += 1;
                }
            }
        }
    }
    match dialect {
        Dialect::Us => out,
        Dialect::Gb => to_british(&out),
    }
}

/// The GB form of a US rule output: non-rhotic, `a` for TRAP, `ɒ` for LOT, `Q` for GOAT,
/// long FLEECE and GOOSE under stress.
fn to_british(us: &str) -> String {
    let mut s = us
        .replace("ɜɹ", "ɜː")
        .replace("ɑɹ", "ɑː")
        .replace("ɔɹ", "ɔː")
        .replace("ɛɹ", "ɛː")
        .replace("ɪɹ", "ɪə")
        .replace("ʊɹ", "ʊə")
        .replace("əɹ", "ə")
        .replace('æ', "a")
        .replace('O', "Q")
        .replace("ˈi", "ˈiː")
        .replace("ˈu", "ˈuː");
    let lot: Vec<char> = s.chars().collect();
    s = lot
        .iter()
        .enumerate()
        .map(|(k, c)| match (c, lot.get(k + 1)) {
            ('ɑ', Some('ː')) => 'ɑ',
            ('ɑ', _) => 'ɒ',
            _ => *c,
        })
        .collect();
    let chars: Vec<char> = s.chars().collect();
    let vowels = "AIOQWYaiuæɑɒɔəɛɜɪʊʌᵻ";
    chars
        .iter()
        .enumerate()
        .filter(|(k, c)| {
            **c != 'ɹ'
                || chars[k + 1..]
                    .iter()
                    .find(|n| !"ˈˌ".contains(**n))
                    .is_some_and(|n| vowels.contains(*n))
        })
        .map(|(_, c)| *c)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lts(dialect: Dialect) -> LetterToSound {
        let words: HashMap<String, String> = [
            ("quibble", "kwˈɪbᵊl"),
            ("wort", "wˈɜɹt"),
            ("john", "ʤˈɑn"),
            ("smith", "smˈɪθ"),
            ("A", "ˈA"),
            ("B", "bˈi"),
            ("I", "ˈI"),
            ("one", "wˈʌn"),
            ("twenty", "twˈɛnti"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        LetterToSound::new(dialect, Arc::new(words))
    }

    #[test]
    fn acronyms_are_spelled_with_final_stress() {
        assert_eq!(lts(Dialect::Us).word("ABI"), "ˌAbˌiˈI");
        assert_eq!(lts(Dialect::Us).word("bb"), "bˌibˈi");
        assert_eq!(lts(Dialect::Us).word("B"), "bˈi");
    }

    #[test]
    fn compounds_and_suffixes_reuse_the_lexicon() {
        let f = lts(Dialect::Us);
        assert_eq!(f.word("quibblewort"), "kwˈɪbᵊlwˌɜɹt");
        assert_eq!(f.word("Johnson"), "ʤˈɑnsən");
        assert_eq!(f.word("smithville"), "smˈɪθvɪl");
        assert_eq!(f.word("Smith's"), "smˈɪθs");
        assert_eq!(f.word("21"), "twˈɛnti wˈʌn");
    }

    #[test]
    fn rules_read_regular_spellings() {
        let f = lts(Dialect::Us);
        for (word, expected) in [
            ("blick", "blˈɪk"),
            ("frane", "fɹˈAn"),
            ("starbuck", "stˈɑɹbək"),
            ("nation", "nˈAʃən"),
            ("plomb", "plˈɑm"),
            ("kneet", "nˈit"),
            ("zorbatic", "zɔɹbˈætɪk"),
        ] {
            assert_eq!(f.rules(word), expected, "{word}");
        }
    }

    #[test]
    fn british_rules_are_non_rhotic() {
        let f = lts(Dialect::Gb);
        assert_eq!(f.rules("starbuck"), "stˈɑːbək");
        assert_eq!(f.rules("blot"), "blˈɒt");
    }
}
