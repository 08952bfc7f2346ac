//! How close the letter-to-sound rules come to the lexicon: every 20th plain word of the US
//! gold lexicon (4 to 12 letters) is read by the rules alone and compared with its entry.
//! The rules only ever see words the lexicon lacks, so this is their accuracy on ordinary
//! English spelling; the bounds are the measured values with a small margin.

mod common;

use std::sync::Arc;

use audiocpp_g2p::fallback::{plain_entries, LetterToSound};
use audiocpp_g2p::Dialect;

/// Phoneme error rate (edit distance over symbols, stress marks left out) at most this.
const MAX_PHONEME_ERROR_RATE: f64 = 0.19;
/// Share of words whose symbols (stress aside) come out exactly, at least this.
const MIN_EXACT: f64 = 0.27;

fn edit_distance(a: &[char], b: &[char]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, y) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (row[j + 1] + 1)
                .min(row[j] + 1)
                .min(prev + usize::from(x != y));
            prev = cur;
        }
    }
    row[b.len()]
}

fn unstressed(p: &str) -> Vec<char> {
    p.chars()
        .filter(|c| !"ˈˌ".contains(*c))
        .map(|c| if c == 'ɾ' || c == 'ʔ' { 't' } else { c })
        .collect()
}

#[test]
fn rules_come_close_to_the_lexicon() {
    let dir = common::assets().join("misaki");
    let gold = std::fs::read_to_string(dir.join("us_gold.json")).unwrap();
    let table = serde_json::from_str(&gold).unwrap();
    let words = plain_entries(&table);
    let mut sample: Vec<(&String, &String)> = words
        .iter()
        .filter(|(w, _)| (4..=12).contains(&w.len()) && w.chars().all(|c| c.is_ascii_lowercase()))
        .collect();
    sample.sort();
    let sample: Vec<_> = sample.into_iter().step_by(20).collect();
    let rules = LetterToSound::new(Dialect::Us, Arc::new(Default::default()));
    let (mut errors, mut symbols, mut exact, mut stressed_exact) = (0, 0, 0, 0);
    for (word, expected) in &sample {
        let ours = rules.rules(word);
        let (e, o) = (unstressed(expected), unstressed(&ours));
        let d = edit_distance(&e, &o);
        errors += d;
        symbols += e.len();
        exact += usize::from(d == 0);
        if d > 0 && std::env::var_os("G2P_SHOW_MISSES").is_some() {
            eprintln!("{word}\t{expected}\t{ours}");
        }
        stressed_exact += usize::from(ours == expected.replace('ɾ', "t"));
    }
    let per = errors as f64 / symbols as f64;
    let exact_rate = exact as f64 / sample.len() as f64;
    eprintln!(
        "letter-to-sound on {} lexicon words: phoneme error rate {:.3}, exact {:.3} (with stress {:.3})",
        sample.len(),
        per,
        exact_rate,
        stressed_exact as f64 / sample.len() as f64
    );
    assert!(sample.len() > 3000, "{} words sampled", sample.len());
    assert!(per <= MAX_PHONEME_ERROR_RATE, "phoneme error rate {per:.3}");
    assert!(exact_rate >= MIN_EXACT, "exact {exact_rate:.3}");
}
