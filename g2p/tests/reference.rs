//! The front end against python misaki 0.9.4 itself: `fixtures/misaki_reference.tsv` holds
//! misaki's phonemes for in-lexicon texts (written by `fixtures/make_misaki_reference.py`),
//! and the exact-match rate per dialect must stay at or above what was measured.

mod common;

use audiocpp_g2p::Dialect;

/// Lowest exact-match rates accepted (99.6% measured for both, see the crate docs).
const US_MIN_EXACT: f64 = 0.99;
const GB_MIN_EXACT: f64 = 0.99;

fn rate(dialect: Dialect, tag: &str) -> (usize, usize, Vec<String>) {
    let g2p = common::g2p(dialect);
    let rows = common::fixture_lines("misaki_reference.tsv");
    let mut total = 0;
    let mut exact = 0;
    let mut misses = Vec::new();
    for row in rows {
        let mut cols = row.split('\t');
        let (Some(d), Some(text), Some(expected)) = (cols.next(), cols.next(), cols.next()) else {
            panic!("a reference row without three columns: {row:?}");
        };
        if d != tag {
            continue;
        }
        total += 1;
        let ours: Vec<String> = g2p
            .phonemize(text)
            .unwrap()
            .into_iter()
            .map(|s| s.phonemes)
            .collect();
        let ours = ours.join(" ");
        if ours == expected.trim() {
            exact += 1;
        } else {
            misses.push(format!("{text}\n  misaki: {expected}\n  ours:   {ours}"));
        }
    }
    (exact, total, misses)
}

fn check(dialect: Dialect, tag: &str, min: f64) {
    let (exact, total, misses) = rate(dialect, tag);
    assert!(total >= 250, "{tag}: only {total} reference rows");
    let r = exact as f64 / total as f64;
    eprintln!(
        "{tag}: {exact} of {total} texts match misaki 0.9.4 exactly ({:.1}%)",
        100.0 * r
    );
    for m in &misses {
        eprintln!("{m}");
    }
    assert!(r >= min, "{tag}: exact match {r:.3} below {min}");
}

/// Every reference row whose text has `%` matches misaki exactly (issue 43: `50%` was
/// read as "50" and `12.5%` as "12-5").
#[test]
fn percent_reads_as_python_misaki() {
    let mut checked = 0;
    for row in common::fixture_lines("misaki_reference.tsv") {
        let cols: Vec<&str> = row.split('\t').collect();
        let [d, text, expected] = cols[..] else {
            panic!("a reference row without three columns: {row:?}");
        };
        if !text.contains('%') {
            continue;
        }
        let dialect = match d {
            "us" => Dialect::Us,
            "gb" => Dialect::Gb,
            _ => panic!("unknown dialect {d:?}"),
        };
        let ours: Vec<String> = common::g2p(dialect)
            .phonemize(text)
            .unwrap()
            .into_iter()
            .map(|s| s.phonemes)
            .collect();
        assert_eq!(ours.join(" "), expected.trim(), "{d}: {text}");
        checked += 1;
    }
    assert!(checked >= 14, "only {checked} reference rows with %");
}

#[test]
fn us_matches_python_misaki() {
    check(Dialect::Us, "us", US_MIN_EXACT);
}

#[test]
fn gb_matches_python_misaki() {
    check(Dialect::Gb, "gb", GB_MIN_EXACT);
}
