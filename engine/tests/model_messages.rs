//! What the engine says about a model it cannot load as given (issue 43, item 6): a
//! released model in a format families only convert from (a CTranslate2 folder or its
//! `model.bin`, an ONNX file, a Hugging Face folder) names the conversion that makes it
//! loadable; and a model's own record of its family can be read without loading it
//! (`families::family_of_model`), so a front end can do without parameter 'family'.
//!
//! Real inputs: the pinned test assets (`cargo xtask test` fetches them) and the
//! committed Qwen3-TTS random-weight checkpoint.

mod common;

use std::path::{Path, PathBuf};

use audiocpp_engine::asr::AsrModel;
use audiocpp_engine::backend::RuntimeOptions;
use audiocpp_engine::families;
use audiocpp_engine::ggml::{write_gguf, DType, GgufValue, HostTensor};
use audiocpp_engine::tts::TtsModel;

fn assets() -> PathBuf {
    let dir = std::env::var_os("AUDIOCPP_TEST_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-assets"));
    for file in [
        "whisper-tiny.en-ct2/model.bin",
        "kokoro/kokoro.onnx",
        "ggml-silero-v6.2.0.bin",
    ] {
        assert!(
            dir.join(file).is_file(),
            "test asset {file} is missing in {}: run `cargo xtask test`",
            dir.display()
        );
    }
    dir
}

fn qwen3_checkpoint() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qwen3_tts/tiny_a")
}

#[test]
fn released_models_given_to_a_task_name_the_conversion() {
    let a = assets();
    let opts = RuntimeOptions::default();
    let ct2 = a.join("whisper-tiny.en-ct2");
    for model in [ct2.clone(), ct2.join("model.bin")] {
        let err = AsrModel::load("whisper", &model, None, &opts)
            .err()
            .expect("a CTranslate2 model does not load")
            .to_string();
        assert!(
            err.contains("is a CTranslate2 model, which is converted, not loaded")
                && err.contains("task 'convert', family 'whisper'"),
            "{}: {err}",
            model.display()
        );
    }
    let onnx = a.join("kokoro/kokoro.onnx");
    let err = TtsModel::load("kokoro", &onnx, None, &opts)
        .err()
        .expect("an ONNX model does not load")
        .to_string();
    assert!(
        err.contains("is an ONNX model") && err.contains("task 'convert', family 'kokoro'"),
        "{err}"
    );
    let hf = qwen3_checkpoint();
    for model in [hf.clone(), hf.join("model.safetensors")] {
        let err = TtsModel::load("qwen3_tts", &model, None, &opts)
            .err()
            .expect("a Hugging Face model does not load")
            .to_string();
        assert!(
            err.contains("is a Hugging Face (safetensors) model")
                && err.contains("task 'convert', family 'qwen3_tts'"),
            "{}: {err}",
            model.display()
        );
    }
    // A folder that is no model at all says so.
    let err = AsrModel::load("whisper", &a.join("clips"), None, &opts)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("is a folder, not a model file"), "{err}");
}

#[test]
fn a_model_names_its_own_family() {
    let a = assets();
    let family = |p: &Path| families::family_of_model(p).map(|f| f.info.family);
    assert_eq!(family(&common::kokoro_gguf("q8_0")).unwrap(), "kokoro");
    assert_eq!(
        family(&a.join("ggml-silero-v6.2.0.bin")).unwrap(),
        "silero_vad"
    );
    let err = family(&a.join("whisper-tiny.en-ct2"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("task 'convert', family 'whisper'"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let tensor = HostTensor {
        name: "t".into(),
        dtype: DType::F32,
        ne: vec![4],
        data: vec![0; 16],
    };
    let anonymous = dir.path().join("anonymous.gguf");
    write_gguf(&anonymous, &[], std::slice::from_ref(&tensor)).unwrap();
    let err = family(&anonymous).unwrap_err().to_string();
    assert!(
        err.contains("does not say which family it is") && err.contains("set parameter 'family'"),
        "{err}"
    );
    let unknown = dir.path().join("unknown.gguf");
    let meta = [(
        "audiocpp.family".to_string(),
        GgufValue::Str("not_a_family".into()),
    )];
    write_gguf(&unknown, &meta, &[tensor]).unwrap();
    let err = family(&unknown).unwrap_err().to_string();
    assert!(err.contains("not_a_family"), "{err}");
}
