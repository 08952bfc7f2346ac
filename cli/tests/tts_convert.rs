//! `--task convert --family kokoro` on the pinned Kokoro sources: every broken input (a
//! truncated ONNX, a voice file of the wrong size, an op the export does not use, an
//! unknown weight type, a missing or unknown source) is exit 2 with the reason and no
//! output; `--source NAME=PATH` and the named flags (`--voices`, `--vocab`,
//! `--lexicons`) reach the family alike. What the converter writes is checked by the
//! engine's tests (engine/tests/kokoro_convert.rs).

mod common;

use std::path::{Path, PathBuf};

use common::{assert_user_error, assets, cli, s, specs, Run};

/// The Kokoro sources `cargo xtask test` fetches (int8 ONNX, vocab, lexicons, voices).
fn kokoro_dir() -> PathBuf {
    let d = assets().join("kokoro");
    assert!(
        d.join("kokoro.onnx").is_file() && d.join("voices/af_heart.bin").is_file(),
        "Kokoro assets are missing in {}: run `cargo xtask test`",
        d.display()
    );
    d
}

/// Runs the kokoro converter on `model` with the pinned voices/vocab/lexicons unless
/// `extra` overrides them.
fn convert(model: &Path, voices: &Path, out: &Path, extra: &[&str]) -> Run {
    let vocab = assets().join("kokoro-vocab.json");
    let lexicons = assets().join("misaki");
    let specs = specs();
    let mut args = vec![
        "--task",
        "convert",
        "--family",
        "kokoro",
        "--model",
        s(model),
        "--voices",
        s(voices),
        "--vocab",
        s(&vocab),
        "--lexicons",
        s(&lexicons),
        "--out",
        s(out),
        "--model-spec-override",
        s(&specs),
    ];
    args.extend_from_slice(extra);
    cli(&args)
}

/// Nothing at `out`, and no partial file beside it.
fn assert_nothing_written(out: &Path) {
    assert!(!out.exists(), "{} was written", out.display());
    let dir = out.parent().unwrap();
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(left.is_empty(), "partial files left: {left:?}");
}

#[test]
fn a_truncated_onnx_is_exit_2_with_nothing_written() {
    let src = kokoro_dir();
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(src.join("kokoro.onnx")).unwrap();
    let bad = dir.path().join("kokoro.onnx");
    std::fs::write(&bad, &bytes[..bytes.len() / 2]).unwrap();
    let out = dir.path().join("out.gguf");
    let run = convert(&bad, &src.join("voices"), &out, &[]);
    assert_user_error(&run, "truncated");
    assert!(run.stderr.contains(s(&bad)), "{}", run.stderr);
    assert_nothing_written(&out);
}

#[test]
fn a_voice_file_of_the_wrong_size_is_exit_2_naming_it() {
    let src = kokoro_dir();
    let dir = tempfile::tempdir().unwrap();
    let voices = dir.path().join("voices");
    std::fs::create_dir(&voices).unwrap();
    std::fs::copy(src.join("voices/af_heart.bin"), voices.join("af_heart.bin")).unwrap();
    let mut short = std::fs::read(src.join("voices/am_adam.bin")).unwrap();
    short.truncate(short.len() - 4);
    std::fs::write(voices.join("am_adam.bin"), short).unwrap();
    let out = dir.path().join("out.gguf");
    let run = convert(&src.join("kokoro.onnx"), &voices, &out, &[]);
    assert_user_error(&run, "am_adam.bin");
    assert!(run.stderr.contains("522240 bytes"), "{}", run.stderr);
    assert_nothing_written(&out);
}

#[test]
fn an_op_the_export_does_not_use_is_exit_2_naming_it() {
    let src = kokoro_dir();
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = std::fs::read(src.join("kokoro.onnx")).unwrap();
    // NodeProto.op_type is field 4 (tag 0x22); "Atan" -> "Xtan" keeps the length.
    let pattern = b"\x22\x04Atan";
    let at = bytes
        .windows(pattern.len())
        .position(|w| w == pattern)
        .expect("the export has an Atan node");
    bytes[at + 2] = b'X';
    let bad = dir.path().join("kokoro.onnx");
    std::fs::write(&bad, bytes).unwrap();
    let out = dir.path().join("out.gguf");
    let run = convert(&bad, &src.join("voices"), &out, &[]);
    assert_user_error(&run, "op 'Xtan'");
    assert_nothing_written(&out);
}

#[test]
fn bad_flags_are_exit_2_before_any_work() {
    let src = kokoro_dir();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    let model = src.join("kokoro.onnx");
    let run = convert(&model, &src.join("voices"), &out, &["--quantize", "q4_k"]);
    assert_user_error(
        &run,
        "--quantize 'q4_k' for kokoro (expected f32, f16 or q8_0)",
    );
    let run = convert(&model, &dir.path().join("nope"), &out, &[]);
    assert_user_error(&run, "--voices");
    let run = cli(&[
        "--task",
        "convert",
        "--family",
        "kokoro",
        "--model",
        s(&model),
        "--out",
        s(&out),
    ]);
    assert_user_error(&run, "needs --voices");
    assert_nothing_written(&out);
}

#[test]
fn sources_are_passed_by_name_and_the_family_says_which_it_takes() {
    let src = kokoro_dir();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    let model = src.join("kokoro.onnx");
    let nope = dir.path().join("nope");
    let convert_with = |family: &str, model: &Path, extra: &[&str]| {
        let mut args = vec![
            "--task",
            "convert",
            "--family",
            family,
            "--model",
            s(model),
            "--out",
            s(&out),
        ];
        args.extend_from_slice(extra);
        cli(&args)
    };
    // `--source voices=DIR` is `--voices DIR`: the family checks it the same way.
    let voices = format!("voices={}", s(&nope));
    let run = convert_with("kokoro", &model, &["--source", &voices]);
    assert_user_error(
        &run,
        &format!("--voices '{}' does not exist or is not a folder", s(&nope)),
    );
    let voices = format!("voices={}", s(&src.join("voices")));
    let run = convert_with(
        "kokoro",
        &model,
        &["--source", &voices, "--source", "speakers=x"],
    );
    assert_user_error(
        &run,
        "parameter 'speakers' is not a source of family 'kokoro' (it takes: voices, vocab, lexicons)",
    );
    let run = convert_with(
        "kokoro",
        &model,
        &["--voices", s(&nope), "--source", &voices],
    );
    assert_user_error(&run, "the source 'voices' is given twice");
    let run = convert_with("kokoro", &model, &["--source", "voices"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("is not NAME=PATH"), "{}", run.stderr);
    let whisper = assets().join("whisper-tiny.en-ct2");
    let run = convert_with("whisper", &whisper, &["--source", "vocab=x"]);
    assert_user_error(
        &run,
        "--vocab is not a source of family 'whisper' (it takes: none)",
    );
    assert_nothing_written(&out);
}
