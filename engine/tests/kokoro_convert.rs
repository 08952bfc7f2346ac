//! The Kokoro converter on the pinned sources: the GGUF holds every weight dequantized
//! exactly as the Python reference dequantizes it (checked against the f32 ONNX that
//! tts_reference.py writes), the voices byte for byte, the vocabulary and the lexicons;
//! f16 stores the matrix weights as f16 (each the f32 value rounded) and the rest as
//! f32. The CLI's tests check what `--task convert` refuses.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use audiocpp_engine::families;
use audiocpp_engine::families::kokoro::onnx::{self, TensorData};
use audiocpp_engine::ggml::{DType, GgufValue};
use common::{assets, convert_kokoro, kokoro_dir, kokoro_gguf};

/// The f32 GGUF, converted once per test run and checked for its tensor count.
fn gguf() -> &'static Path {
    static GGUF: OnceLock<PathBuf> = OnceLock::new();
    GGUF.get_or_init(|| {
        let out = kokoro_gguf("f32");
        let file = families::read_model(&out).unwrap();
        assert_eq!(file.tensors.len(), 539);
        out
    })
}

#[test]
fn every_weight_matches_the_python_dequantization_exactly() {
    let file = families::read_model(gguf()).unwrap();
    assert_eq!(file.family.as_deref(), Some("kokoro"));
    // tts_reference.py's f32 graph: each quantized weight X_quantized became X_f32
    // (LSTM W/R transposed to ONNX LSTM's [dirs, 4*hidden, input] there).
    let f32_onnx = assets(&["kokoro/kokoro-f32.onnx"]).join("kokoro/kokoro-f32.onnx");
    let reference =
        onnx::parse(&std::fs::read(&f32_onnx).expect("run `cargo xtask test`")).unwrap();
    let int8 = onnx::parse(&std::fs::read(kokoro_dir().join("kokoro.onnx")).unwrap()).unwrap();
    let weights = audiocpp_engine::families::kokoro::convert::weights(&int8).unwrap();
    assert_eq!(weights.len(), 485);
    let dequantized = weights.iter().filter(|w| w.dequantized).count();
    assert_eq!(dequantized, 185, "int8 weights");
    let stored: HashMap<&str, _> = file.tensors.iter().map(|t| (t.name.as_str(), t)).collect();
    for w in &weights {
        let t = stored[w.name.as_str()];
        assert_eq!(t.dtype, DType::F32, "{}", w.name);
        // GGUF keeps ggml's dims up to the last one above 1.
        let trim = |ne: &[i64]| {
            let keep = ne.iter().rposition(|&d| d != 1).map_or(1, |i| i + 1);
            ne[..keep].to_vec()
        };
        let ne: Vec<i64> = w.dims.iter().rev().map(|&d| d as i64).collect();
        assert_eq!(trim(&t.ne), trim(&ne), "{}", w.name);
        let ours = t.to_f32();
        let source = if w.dequantized {
            format!("{}_f32", w.source.trim_end_matches("_quantized"))
        } else {
            w.source.clone()
        };
        let r = reference
            .initializer(&source)
            .unwrap_or_else(|| panic!("{source} is not in the reference graph"));
        let TensorData::F32(mut want) = r.data.clone() else {
            panic!("{source} is not f32 in the reference graph");
        };
        if w.name.ends_with(".W") || w.name.ends_with(".R") {
            // Back from [dirs, 4h, in] to the int8 export's [dirs, in, 4h].
            let (d, a, b) = (r.dims[0], r.dims[1], r.dims[2]);
            let mut back = vec![0f32; want.len()];
            for k in 0..d {
                for i in 0..a {
                    for j in 0..b {
                        back[(k * b + j) * a + i] = want[(k * a + i) * b + j];
                    }
                }
            }
            want = back;
        }
        assert!(
            ours.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{} differs from the reference's {source}",
            w.name
        );
    }
    let heart = std::fs::read(kokoro_dir().join("voices/af_heart.bin")).unwrap();
    let voice = stored["voice.af_heart"];
    assert_eq!((voice.ne.clone(), &voice.data), (vec![256, 510], &heart));
    let meta: HashMap<&str, &GgufValue> =
        file.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    assert!(matches!(meta["kokoro.n_token"], GgufValue::U32(178)));
    let GgufValue::StrArray(voices) = meta["kokoro.voices"] else {
        panic!("kokoro.voices is not a string array");
    };
    assert_eq!(voices.len(), 54);
    let (GgufValue::StrArray(symbols), GgufValue::U32Array(ids)) =
        (meta["kokoro.vocab.symbols"], meta["kokoro.vocab.ids"])
    else {
        panic!("the vocabulary is missing");
    };
    let vocab: HashMap<&str, u32> = symbols
        .iter()
        .map(String::as_str)
        .zip(ids.iter().copied())
        .collect();
    assert_eq!(
        (vocab.len(), vocab["ˈ"], vocab[" "], vocab["ɹ"]),
        (114, 156, 16, 123)
    );
    let lexicon =
        std::fs::read_to_string(assets(&["misaki/us_gold.json"]).join("misaki/us_gold.json"))
            .unwrap();
    assert!(matches!(meta["g2p.lexicon.us_gold"], GgufValue::Str(t) if *t == lexicon));
}

#[test]
fn f16_stores_matrix_weights_as_f16_and_the_rest_as_f32() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("kokoro-f16.gguf");
    convert_kokoro("f16", &out);
    let f16 = families::read_model(&out).unwrap();
    let f32 = families::read_model(gguf()).unwrap();
    let type_of = |name: &str| f16.tensor(name).unwrap().dtype;
    assert_eq!(
        type_of("encoder.bert.layer.attention.query.weight"),
        DType::F16
    );
    assert_eq!(type_of("encoder.text_encoder.lstm.W"), DType::F16);
    assert_eq!(
        type_of("decoder.decoder.generator.conv_post.bias"),
        DType::F32
    );
    assert_eq!(type_of("voice.af_heart"), DType::F32);
    // Every f16 value is the f32 one rounded to nearest (ggml's conversion back is exact).
    let w = "decoder.decoder.generator.ups.0.weight";
    let (a, b) = (
        f16.tensor(w).unwrap().to_f32(),
        f32.tensor(w).unwrap().to_f32(),
    );
    let worst = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs() / y.abs().max(1e-4))
        .fold(0f32, f32::max);
    assert!(worst < 1e-3, "{w}: relative error {worst}");
}
