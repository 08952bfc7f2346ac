//! What the workspace's integration tests share, written once: where the pinned test
//! assets and the test venv's Python are (each failing loudly, naming the remedy, when
//! missing), running one of the workspace's binaries and capturing what it printed,
//! and the word-level and signal metrics the speech tests assert on.
//!
//! A dev-dependency only (never in a release build, never published), and free of the
//! engine so that the engine's own tests can use it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("test-support sits in the workspace root")
        .to_path_buf()
}

/// The pinned test assets' folder: `AUDIOCPP_TEST_ASSETS`, or `target/test-assets` where
/// `cargo xtask test` fetches them. Not checked; see [`assets`].
pub fn assets_dir() -> PathBuf {
    std::env::var_os("AUDIOCPP_TEST_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/test-assets"))
}

/// The pinned test assets' folder, checked to hold each of `required` (files inside
/// it); fails loudly, naming the missing file and the remedy.
pub fn assets(required: &[&str]) -> PathBuf {
    let dir = assets_dir();
    for r in required {
        assert!(
            dir.join(r).is_file(),
            "test assets are missing in {} ({r} is not there): run `cargo xtask test`, which fetches the pinned models and makes the reference results",
            dir.display()
        );
    }
    dir
}

/// The file `rel` among the test assets, checked to exist.
pub fn asset(rel: &str) -> PathBuf {
    assets(&[rel]).join(rel)
}

/// A clip the asset step generated (`clips/<name>`), checked to exist.
pub fn clip(name: &str) -> PathBuf {
    asset(&format!("clips/{name}"))
}

/// The compressed audio files of the ASR phrase clip committed in
/// `test-support/fixtures/formats` (made by the `make.py` beside them), in the order
/// of that script: AAC in MP4 and ADTS, MP3, Opus in Ogg and WebM, Vorbis in Ogg and
/// WebM.
pub const DECODED_FORMATS: [&str; 7] = [
    "phrase.m4a",
    "phrase.aac",
    "phrase.mp3",
    "phrase.opus",
    "phrase_opus.webm",
    "phrase.ogg",
    "phrase_vorbis.webm",
];

/// How far from the phrase Whisper tiny.en may hear the Opus fixtures: Opus at 24 kbit/s
/// changes the synthetic voice enough that tiny.en hears "speech recognition in rusted
/// working today" from our decode (2 word errors of 7); FFmpeg's decode, resampled by
/// FFmpeg, is heard as "speech recognition in rust is working today". Every other
/// fixture gives the exact phrase.
pub const OPUS_MAX_WER: f64 = 0.3;

/// The word error rate a fixture's transcript may have: 0 but for Opus.
pub fn fixture_max_wer(name: &str) -> f64 {
    if name.contains("opus") {
        OPUS_MAX_WER
    } else {
        0.0
    }
}

/// The committed file in a codec no decoder here reads: half a second of the phrase
/// clip in ALAC (M4A).
pub const UNDECODED_FORMATS: [&str; 1] = ["clip_alac.m4a"];

/// A committed audio fixture of `test-support/fixtures/formats`, checked to exist.
pub fn format_fixture(name: &str) -> PathBuf {
    let p = root().join("test-support/fixtures/formats").join(name);
    assert!(p.is_file(), "missing fixture {}", p.display());
    p
}

/// The repository's model spec folder.
pub fn specs() -> PathBuf {
    root().join("model_specs")
}

/// The pinned Kokoro sources a convert reads: the int8 ONNX and the named `--source`
/// inputs (`voices`, `vocab`, `lexicons`), each checked to exist.
pub fn kokoro_sources() -> (PathBuf, Vec<(String, PathBuf)>) {
    let a = assets(&[
        "kokoro/kokoro.onnx",
        "kokoro/voices/af_heart.bin",
        "kokoro-vocab.json",
        "misaki/us_gold.json",
    ]);
    let sources = [
        ("voices", a.join("kokoro/voices")),
        ("vocab", a.join("kokoro-vocab.json")),
        ("lexicons", a.join("misaki")),
    ];
    (
        a.join("kokoro/kokoro.onnx"),
        sources.map(|(n, p)| (n.to_string(), p)).into(),
    )
}

/// `out`, made by `make(out)` unless the stamp file beside it records the same `inputs`
/// (their modification times and sizes) as now; one maker at a time in this process.
/// For models the tests convert once and reuse until the converter or its spec changes.
pub fn cached(out: &Path, inputs: &[&Path], make: impl FnOnce(&Path)) -> PathBuf {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut stamp = out.as_os_str().to_owned();
    stamp.push(".stamp");
    let want: Vec<String> = inputs
        .iter()
        .map(|p| {
            let m = std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            format!("{:?} {}", m.modified().unwrap(), m.len())
        })
        .collect();
    let want = want.join(" | ");
    if out.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) {
        return out.to_path_buf();
    }
    make(out);
    std::fs::write(&stamp, want).unwrap();
    out.to_path_buf()
}

/// [`cached`] for a converter compiled into the running test binary: `name` in `dir`
/// (the crate's `CARGO_TARGET_TMPDIR`) prefixed with the binary's name, made again when
/// the binary or one of `inputs` changed. Kept across runs in the target folder, so
/// nothing piles up in the system's temp folder.
pub fn cached_by_binary(
    dir: &Path,
    name: &str,
    inputs: &[&Path],
    make: impl FnOnce(&Path),
) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let stem = exe.file_stem().unwrap().to_string_lossy().into_owned();
    let mut all = vec![exe.as_path()];
    all.extend_from_slice(inputs);
    cached(&dir.join(format!("{stem}-{name}")), &all, make)
}

/// The test venv's Python (numpy, onnxruntime, faster-whisper, openai):
/// `AUDIOCPP_TEST_PYTHON`, or the venv among the assets; fails loudly when missing.
pub fn python() -> PathBuf {
    let p = std::env::var_os("AUDIOCPP_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| assets_dir().join("venv/bin/python"));
    assert!(
        p.is_file(),
        "the test venv's python is missing ({}): run `cargo xtask test`",
        p.display()
    );
    p
}

/// A path as `&str` (the tests' paths are UTF-8).
pub fn s(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// What one run of a binary printed, and how it ended.
pub struct Run {
    /// The exit code (-1 when a signal ended it).
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The value of a `key=value` line of standard output.
    pub fn value(&self, key: &str) -> Option<String> {
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_string))
    }
}

/// Runs `exe` with `args` in `cwd` with extra environment variables `env`, to its end;
/// fails when it panicked (a user error must never be a panic).
pub fn run(exe: &Path, cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> Run {
    let out = Command::new(exe)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(cwd)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", exe.display()));
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        !run.stderr.contains("panicked"),
        "{} panicked: {}",
        exe.display(),
        run.stderr
    );
    run
}

/// Asserts a usage or input failure: exit code 2, `needle` on standard error, and
/// nothing on standard output.
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

/// Lower-case words without punctuation (apostrophes kept), as a word error rate
/// compares them.
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

/// Word-level edit distance between `hyp` and `reference`.
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

/// Word error rate of the text `hyp` against the text `reference`: [`word_errors`] of
/// their [`words`] over the reference's word count.
pub fn wer(hyp: &str, reference: &str) -> f64 {
    let (h, r) = (words(hyp), words(reference));
    word_errors(&h, &r) as f64 / r.len().max(1) as f64
}

/// Signal-to-noise ratio in dB of `x` against `reference` (the noise is their
/// difference); the lengths must agree.
pub fn snr_db(reference: &[f32], x: &[f32]) -> f64 {
    assert_eq!(reference.len(), x.len(), "lengths differ");
    let (mut signal, mut noise) = (0f64, 0f64);
    for (&r, &v) in reference.iter().zip(x) {
        signal += (r as f64).powi(2);
        noise += (r as f64 - v as f64).powi(2);
    }
    10.0 * (signal / noise.max(1e-30)).log10()
}

/// The package README's template (`packaging/readme/package.md`), whose commands and
/// server.json the CLI's and the server's tests parse, so that a renamed flag or
/// server.json key fails a test instead of a new user.
pub fn package_readme() -> String {
    let path = root().join("packaging/readme/package.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The commands of the package README's code blocks that start with `program` (the
/// template's `{{cli}}` or `{{server}}`), each split into its words as a POSIX shell
/// would (quotes, backslash-continued lines), with `program` as the first word and
/// `{{backend}}` as `cpu`.
pub fn package_readme_commands(program: &str) -> Vec<Vec<String>> {
    let readme = package_readme();
    let mut commands = Vec::new();
    let mut in_code = false;
    let mut pending = String::new();
    for line in readme.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if !in_code {
            continue;
        }
        pending.push_str(line.trim_end_matches('\\'));
        if line.ends_with('\\') {
            pending.push(' ');
            continue;
        }
        let command = std::mem::take(&mut pending).replace("{{backend}}", "cpu");
        if command.trim_start().starts_with(program) {
            commands.push(shell_words(&command));
        }
    }
    commands
}

/// The package README's ```json code blocks (its sample server.json).
pub fn package_readme_json_blocks() -> Vec<String> {
    let readme = package_readme();
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in readme.lines() {
        match (&mut current, line.starts_with("```")) {
            (None, true) if line.trim() == "```json" => current = Some(String::new()),
            (Some(_), true) => blocks.extend(current.take()),
            (Some(b), false) => {
                b.push_str(line);
                b.push('\n');
            }
            _ => {}
        }
    }
    blocks
}

/// `line` split into words as a POSIX shell would for the README's commands: blanks
/// separate, single and double quotes group (no escapes inside), `#` starts a comment.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, '#') if word.is_none() => break,
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    assert!(quote.is_none(), "unclosed quote in {line:?}");
    words.extend(word);
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_their_errors() {
        assert_eq!(words("Don't stop, Rust!  "), ["don't", "stop", "rust"]);
        let r = words("speech recognition in rust");
        assert_eq!(word_errors(&words("speech recognition in rust"), &r), 0);
        assert_eq!(word_errors(&words("speech in rusty"), &r), 2);
        assert_eq!(wer("", "a b c d"), 1.0);
        assert_eq!(wer("a b x d", "a b c d"), 0.25);
    }

    #[test]
    fn snr_falls_as_the_noise_grows() {
        let r = [1.0f32, -1.0, 0.5, -0.5];
        let near: Vec<f32> = r.iter().map(|x| x * 1.01).collect();
        let far: Vec<f32> = r.iter().map(|x| x * 1.5).collect();
        assert!((snr_db(&r, &near) - 40.0).abs() < 1e-3);
        assert!(snr_db(&r, &near) > snr_db(&r, &far));
    }

    #[cfg(unix)]
    #[test]
    fn a_run_is_captured_and_a_value_read() {
        let dir = std::env::temp_dir();
        let sh = Path::new("/bin/sh");
        let r = run(
            sh,
            &dir,
            &[("X", "7")],
            &["-c", "echo x=$X; echo oops >&2; exit 2"],
        );
        assert_eq!(r.value("x").as_deref(), Some("7"));
        assert_eq!((r.code, r.stderr.trim()), (2, "oops"));
    }
}
