//! `--task info`: loads a model as its family's task would and prints the family, the
//! spec's source and the hyper-parameters from the file.

mod common;
use common::*;

#[test]
fn info_describes_a_legacy_silero_model_and_a_converted_whisper_one() {
    let run = cli(&[
        "--task",
        "info",
        "--family",
        "silero_vad",
        "--model",
        s(&silero_bin()),
        "--model-spec-override",
        s(&specs()),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.value("family").as_deref(), Some("silero_vad"));
    assert_eq!(run.value("loaded_for").as_deref(), Some("vad"));
    assert!(
        run.value("spec_source")
            .is_some_and(|s| s.starts_with("override:")),
        "{}",
        run.stdout
    );
    assert_eq!(run.value("device").as_deref(), Some("CPU"));

    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("tiny.en.gguf");
    let ct2 = assets().join("whisper-tiny.en-ct2");
    let convert = convert_whisper(&ct2, &gguf, &[]);
    assert_eq!(convert.code, 0, "{}", convert.stderr);
    let run = cli(&[
        "--task",
        "info",
        "--family",
        "whisper",
        "--model",
        s(&gguf),
        "--json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["family"], "whisper");
    assert_eq!(
        v["loaded_for"],
        serde_json::Value::Null,
        "the JSON names it `task`"
    );
    assert_eq!(v["task"], "asr");
    assert_eq!(v["spec_source"], "gguf-metadata");
    let hp: std::collections::BTreeMap<String, serde_json::Value> = v["hyper_parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|kv| (kv[0].as_str().unwrap().to_string(), kv[1].clone()))
        .collect();
    assert_eq!(hp["whisper.n_mels"], 80);
    assert_eq!(hp["whisper.n_audio_state"], 384, "tiny's width");
    assert_eq!(hp["whisper.n_vocab"], 51864, "tiny.en's vocabulary");
    let largest = v["largest_tensor_bytes"].as_u64().unwrap();
    assert!(largest > 0 && largest < v["tensor_bytes"].as_u64().unwrap());

    let wrong = cli(&[
        "--task",
        "info",
        "--family",
        "silero_vad",
        "--model",
        s(&gguf),
    ]);
    assert_user_error(&wrong, "is a 'whisper' model, not 'silero_vad'");
}

/// Loading a model holds its weights about once: `--task info` of Whisper base (f16)
/// peaks at no more than the file, its largest tensor, the q8_0 copy of its embedding
/// that the CPU's two-stage logits read (1.25 bytes a value over whole groups of 16
/// rows, `Layers::logit_stages`) and 32 MiB (measured by GNU time), since the weight
/// store uploads host copies batch by batch and frees each batch.
#[test]
fn loading_whisper_base_peaks_below_file_plus_largest_tensor_plus_32_mib() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("base.gguf");
    let convert = convert_whisper(&assets().join("whisper-base-ct2"), &gguf, &[]);
    assert_eq!(convert.code, 0, "{}", convert.stderr);
    let out = std::process::Command::new("/usr/bin/time")
        .args(["-f", "peak_kib=%M", env!("CARGO_BIN_EXE_audiocpp_cli")])
        .args(["--task", "info", "--family", "whisper", "--json", "--model"])
        .arg(&gguf)
        .output()
        .expect("GNU time runs (apt-get install time)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let peak_kib: u64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("peak_kib="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak in {stderr}"));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let file = std::fs::metadata(&gguf).unwrap().len();
    let largest = v["largest_tensor_bytes"].as_u64().unwrap();
    let hp = |key: &str| {
        v["hyper_parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|kv| kv[0] == key)
            .and_then(|kv| kv[1].as_u64())
            .unwrap_or_else(|| panic!("no {key}"))
    };
    let (width, vocab) = (hp("whisper.n_text_state"), hp("whisper.n_vocab"));
    assert_eq!((width, vocab), (512, 51865), "base's decoder");
    let copy = width * (vocab / 16 * 16) * 5 / 4;
    let bound_kib = (file + largest + copy) / 1024 + 32 * 1024;
    assert!(
        peak_kib <= bound_kib,
        "loading Whisper base peaked at {peak_kib} KiB, above {bound_kib} KiB (file {file} B + largest tensor {largest} B + logits' q8_0 copy {copy} B + 32 MiB)"
    );
}
