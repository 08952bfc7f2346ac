//! What the Qwen3-TTS reference tests share: the fixtures' expected values (a JSON that
//! names arrays in a little-endian `.bin`), conversion and loading of a fixture
//! checkpoint on the CPU, and the comparisons.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use audiocpp_engine::backend::{Runtime, RuntimeOptions};
use audiocpp_engine::families::qwen3_tts::{Qwen3Tts, FAMILY};
use audiocpp_engine::families::ConvertOptions;
use audiocpp_engine::sampling::Choice;
use serde_json::Value;

/// The fixture folder `name` (`qwen3_tts`, `qwen3_tts_clone`).
pub fn fixtures(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The expected values of a checkpoint: its JSON and the arrays of its `.bin`.
pub struct Expected {
    pub json: Value,
    bin: Vec<u8>,
}

impl Expected {
    /// `expected_{checkpoint}.json` and `.bin` of fixture folder `dir`.
    pub fn load(dir: &Path, checkpoint: &str) -> Expected {
        let json =
            std::fs::read_to_string(dir.join(format!("expected_{checkpoint}.json"))).unwrap();
        Expected {
            json: serde_json::from_str(&json).unwrap(),
            bin: std::fs::read(dir.join(format!("expected_{checkpoint}.bin"))).unwrap(),
        }
    }

    /// The array `name` (f32, or i32 widened to f32), flattened, and its shape.
    pub fn array(&self, name: &str) -> (Vec<f32>, Vec<usize>) {
        let a = &self.json["arrays"][name];
        assert!(a.is_object(), "no array {name}");
        let dtype = a["dtype"].as_str().unwrap();
        let shape: Vec<usize> = a["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        let n: usize = shape.iter().product();
        let at = a["offset"].as_u64().unwrap() as usize;
        let values = self.bin[at..at + 4 * n]
            .chunks_exact(4)
            .map(|b| {
                let b = [b[0], b[1], b[2], b[3]];
                match dtype {
                    "f32" => f32::from_le_bytes(b),
                    "i32" => i32::from_le_bytes(b) as f32,
                    other => panic!("{name}: dtype {other}"),
                }
            })
            .collect();
        (values, shape)
    }

    /// The array `name` of shape [frames, groups] as frames of codes.
    pub fn frames(&self, name: &str) -> Vec<Vec<u32>> {
        let (codes, shape) = self.array(name);
        codes
            .chunks(shape[1])
            .map(|f| f.iter().map(|&c| c as u32).collect())
            .collect()
    }
}

/// Converts checkpoint folder `src` with `quantize` into `dir` and loads it on the CPU.
pub fn model(src: &Path, quantize: &str, dir: &Path) -> Qwen3Tts {
    let name = src.file_name().unwrap().to_string_lossy();
    let out = dir.join(format!("{name}-{quantize}.gguf"));
    audiocpp_engine::tasks::convert(
        "qwen3_tts",
        src,
        None,
        &out,
        &ConvertOptions {
            quantize: Some(quantize.into()),
            sources: Vec::new(),
        },
    )
    .unwrap();
    let resolved = FAMILY.resolve_model(&out, None).unwrap();
    // One thread: the tests run side by side on small machines.
    let runtime = Runtime::new(&RuntimeOptions {
        threads: 1,
        ..RuntimeOptions::default()
    })
    .unwrap();
    Qwen3Tts::load(resolved.file, &resolved.spec, runtime).unwrap()
}

/// The largest difference between a run's first talker logits and those the case
/// recorded (`talker_logits_raw_first3`, as many steps as it holds).
pub fn first_logits_diff(exp: &Expected, case: &Value, first_logits: &[Vec<f32>]) -> f32 {
    let (want, shape) = exp.array(case["arrays"]["talker_logits_raw_first3"].as_str().unwrap());
    let got: Vec<f32> = first_logits
        .iter()
        .take(shape[0])
        .flatten()
        .copied()
        .collect();
    max_abs_diff(&got, &want)
}

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

pub use audiocpp_test_support::snr_db;

pub const GREEDY: Choice = Choice {
    temperature: 0.0,
    top_k: 0,
    top_p: 1.0,
};
