//! Two conversions racing to one output file (issue 43, item 1): each writer has a
//! partial file of its own and renames it over the target, so the file left is one
//! conversion whole (the last to finish), never a mix, and both runs report the size
//! of what they wrote.
//!
//! Real inputs: Whisper tiny.en and base, CTranslate2 (the pinned test assets; `cargo
//! xtask test` fetches them, `AUDIOCPP_TEST_ASSETS` points elsewhere).

use std::path::{Path, PathBuf};
use std::time::Duration;

use audiocpp_engine::families::ConvertOptions;
use audiocpp_engine::tasks;

fn assets() -> PathBuf {
    let dir = std::env::var_os("AUDIOCPP_TEST_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-assets"));
    for model in ["whisper-tiny.en-ct2", "whisper-base-ct2"] {
        assert!(
            dir.join(model).join("model.bin").is_file(),
            "test asset {model} is missing in {}: run `cargo xtask test`, which fetches the pinned models",
            dir.display()
        );
    }
    dir
}

fn specs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../model_specs")
}

fn convert(ct2: &Path, out: &Path) -> audiocpp_engine::Result<u64> {
    tasks::convert(
        "whisper",
        ct2,
        Some(&specs()),
        out,
        &ConvertOptions::default(),
    )
    .map(|c| c.bytes)
}

/// The files in `dir` other than `keep`.
fn others(dir: &Path, keep: &[&Path]) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !keep.contains(&p.as_path()))
        .map(|p| p.display().to_string())
        .collect()
}

#[test]
fn two_converts_to_one_file_leave_one_of_them_whole() {
    let a = assets();
    let (tiny, base) = (a.join("whisper-tiny.en-ct2"), a.join("whisper-base-ct2"));
    let dir = tempfile::tempdir().unwrap();
    // Each model alone, for the bytes a whole file of it has.
    let (tiny_alone, base_alone) = (dir.path().join("tiny.gguf"), dir.path().join("base.gguf"));
    convert(&tiny, &tiny_alone).unwrap();
    convert(&base, &base_alone).unwrap();
    let wholes = [
        std::fs::read(&tiny_alone).unwrap(),
        std::fs::read(&base_alone).unwrap(),
    ];
    assert_ne!(wholes[0].len(), wholes[1].len());
    // The probe's race (base, then tiny.en 0.3 s later) and the other order: the
    // smaller model's write lands inside the larger one's.
    for (first, second, stagger_ms) in [(&base, &tiny, 300), (&tiny, &base, 0), (&base, &tiny, 0)] {
        let out = dir.path().join("raced.gguf");
        let (r1, r2) = std::thread::scope(|s| {
            let h1 = s.spawn(|| convert(first, &out));
            std::thread::sleep(Duration::from_millis(stagger_ms));
            let h2 = s.spawn(|| convert(second, &out));
            (h1.join().unwrap(), h2.join().unwrap())
        });
        let (n1, n2) = (r1.unwrap(), r2.unwrap());
        let left = std::fs::read(&out).unwrap();
        let sizes = [n1, n2];
        assert!(
            sizes.contains(&(left.len() as u64)),
            "the file is {} bytes, neither run's {sizes:?}",
            left.len()
        );
        assert!(
            wholes.contains(&left),
            "the file left ({} bytes) is not one conversion whole",
            left.len()
        );
        assert_eq!(
            others(dir.path(), &[&tiny_alone, &base_alone, &out]),
            Vec::<String>::new(),
            "no partial file is left"
        );
        std::fs::remove_file(&out).unwrap();
    }
}
