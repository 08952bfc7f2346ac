//! Prints the phonemes of each line of standard input, one sentence per line, for trying
//! the front end by hand: `cargo run --release -p audiocpp-g2p --example phonemize --
//! DIR [us|gb] < text.txt`, DIR holding misaki's `<dialect>_gold.json` and `_silver.json`.

use std::io::BufRead;
use std::process::ExitCode;
use std::time::Instant;

use audiocpp_g2p::{Dialect, G2p, Lexicon};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: phonemize LEXICON_DIR [us|gb] < text");
        return ExitCode::from(2);
    };
    let dialect = match args.next().as_deref() {
        None | Some("us") => Dialect::Us,
        Some("gb") => Dialect::Gb,
        Some(other) => {
            eprintln!("unknown dialect {other:?}: use us or gb");
            return ExitCode::from(2);
        }
    };
    let prefix = if dialect == Dialect::Us { "us" } else { "gb" };
    let read = |name: String| {
        let path = std::path::Path::new(&dir).join(name);
        std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))
    };
    let lexicon = read(format!("{prefix}_gold.json"))
        .and_then(|gold| Ok((gold, read(format!("{prefix}_silver.json"))?)))
        .and_then(|(gold, silver)| Lexicon::from_json(&gold, &silver).map_err(|e| e.to_string()));
    let lexicon = match lexicon {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let g2p = G2p::new(lexicon, dialect);
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let started = Instant::now();
        match g2p.phonemize(&line) {
            Ok(sentences) => {
                let phonemes: Vec<String> = sentences.into_iter().map(|s| s.phonemes).collect();
                println!("{}", phonemes.join(" "));
            }
            Err(e) => println!("error: {e}"),
        }
        eprintln!("{:?}", started.elapsed());
    }
    ExitCode::SUCCESS
}
