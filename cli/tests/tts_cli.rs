//! `audiocpp_cli --task tts` end to end with the test-only family `test_tone` (one tone
//! per character at the voice's pitch, 0.05 s per character at speed 1, scaled by the
//! file's gain; this crate's dev-dependency turns on the engine's `test-families`):
//! the WAV it writes (rate, length, pitch, level), the report, `--list-voices`, stdout
//! output, every bad input as exit 2 naming the flag with nothing written, and that a
//! release (`dist`) build resolves without the test-only families.

use std::path::{Path, PathBuf};
use std::process::Command;

use audiocpp_engine::families::test_tone;

mod common;
use common::{assert_user_error, cli_in, s, Run};

const RATE: u32 = 24_000;
const GAIN: f32 = 0.5;

/// A test_tone model in `dir`.
fn model(dir: &Path) -> PathBuf {
    let p = dir.join("tone.gguf");
    test_tone::write_model(&p, RATE, GAIN, 0).unwrap();
    p
}

fn tts(dir: &Path, extra: &[&str]) -> Run {
    let m = model(dir);
    let mut args = vec!["--task", "tts", "--family", "test_tone", "--model", s(&m)];
    args.extend_from_slice(extra);
    cli_in(dir, &args)
}

fn zero_crossings(x: &[i16]) -> usize {
    x.windows(2).filter(|w| (w[0] < 0) != (w[1] < 0)).count()
}

/// Samples of a 16-bit mono WAV at [`RATE`].
fn read_wav(path: &Path) -> Vec<i16> {
    let mut r = hound::WavReader::open(path).unwrap();
    let spec = r.spec();
    assert_eq!(
        (spec.sample_rate, spec.channels, spec.bits_per_sample),
        (RATE, 1, 16)
    );
    r.samples::<i16>().map(|x| x.unwrap()).collect()
}

/// The samples test_tone makes for `chars` characters at `speed`.
fn expected_len(chars: usize, speed: f32) -> usize {
    (test_tone::CHAR_SECONDS / speed * RATE as f32) as usize * chars
}

#[test]
fn speaks_a_wav_of_the_right_length_pitch_and_level() {
    let dir = tempfile::tempdir().unwrap();
    let text = "Hello there. How are you?";
    let run = tts(
        dir.path(),
        &["--text", text, "--voice", "high", "--out", "out.wav"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.value("task").as_deref(), Some("tts"));
    assert_eq!(run.value("voice").as_deref(), Some("high"));
    assert_eq!(run.value("sample_rate").as_deref(), Some("24000"));
    assert_eq!(
        run.value("sentences").as_deref(),
        Some("2"),
        "split at the period"
    );
    // The spaces between sentences are not spoken: 12 + 12 characters.
    let n = expected_len(24, 1.0);
    let audio_s: f64 = run.value("audio_seconds").unwrap().parse().unwrap();
    assert!((audio_s - n as f64 / RATE as f64).abs() < 1e-3, "{audio_s}");
    assert!(run.value("rtf").unwrap().parse::<f64>().unwrap() >= 0.0);
    let samples = read_wav(&dir.path().join("out.wav"));
    assert_eq!(samples.len(), n);
    let peak = samples.iter().map(|x| x.unsigned_abs()).max().unwrap();
    assert!(
        (peak as f32 / 32767.0 - GAIN).abs() < 2e-3,
        "the file's gain: {peak}"
    );
    // 440 Hz for 1.2 s: about 2 x 440 x 1.2 zero crossings.
    let z = zero_crossings(&samples) as f64 / (n as f64 / RATE as f64);
    assert!((z / 2.0 - 440.0).abs() < 10.0, "pitch {} Hz", z / 2.0);

    // The default voice (the first, 220 Hz) at speed 2 through --text-file and --json.
    std::fs::write(dir.path().join("in.txt"), text).unwrap();
    let run = tts(
        dir.path(),
        &[
            "--text-file",
            "in.txt",
            "--speed",
            "2",
            "--out",
            "slow.wav",
            "--json",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["voice"], "low");
    assert_eq!(v["sentences"], 2);
    assert_eq!(v["sample_rate"], RATE);
    let fast = read_wav(&dir.path().join("slow.wav"));
    assert_eq!(fast.len(), expected_len(24, 2.0), "speed 2 halves it");
    let z = zero_crossings(&fast) as f64 / (fast.len() as f64 / RATE as f64);
    assert!((z / 2.0 - 220.0).abs() < 10.0, "pitch {} Hz", z / 2.0);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(names.is_empty(), "no partial file left: {names:?}");
}

#[test]
fn out_dash_writes_the_wav_to_stdout_and_the_report_to_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let m = model(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_audiocpp_cli"))
        .args(["--task", "tts", "--family", "test_tone", "--model"])
        .arg(&m)
        .args(["--text", "abcd", "--out", "-"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("task=tts"), "{stderr}");
    let wav = dir.path().join("piped.wav");
    std::fs::write(&wav, &out.stdout).unwrap();
    assert_eq!(read_wav(&wav).len(), expected_len(4, 1.0));
}

#[test]
fn list_voices_names_the_models_voices() {
    let dir = tempfile::tempdir().unwrap();
    let m = model(dir.path());
    let run = cli_in(
        dir.path(),
        &["--list-voices", "--family", "test_tone", "--model", s(&m)],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let voices: Vec<&str> = run
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("voice="))
        .collect();
    assert_eq!(voices, ["low", "high"]);
    assert_eq!(run.value("sample_rate").as_deref(), Some("24000"));
    let run = cli_in(
        dir.path(),
        &[
            "--list-voices",
            "--family",
            "test_tone",
            "--model",
            s(&m),
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["voices"], serde_json::json!(["low", "high"]));
    let run = cli_in(
        dir.path(),
        &[
            "--list-voices",
            "--task",
            "vad",
            "--family",
            "test_tone",
            "--model",
            s(&m),
        ],
    );
    assert_user_error(&run, "--list-voices is for TTS models");
    // --task info loads a TTS model as --task tts does.
    let run = cli_in(
        dir.path(),
        &["--task", "info", "--family", "test_tone", "--model", s(&m)],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.value("loaded_for").as_deref(), Some("tts"));
    let device = run.value("device").unwrap();
    assert!(
        !device.is_empty() && !device.starts_with("none"),
        "{device}"
    );
}

/// Every bad input: exit 2, the flag named, and no output file.
#[test]
fn bad_inputs_exit_2_naming_the_flag_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("latin1.txt"), b"caf\xe9").unwrap();
    std::fs::write(dir.path().join("big.txt"), vec![b'a'; (1 << 20) + 1]).unwrap();
    std::fs::create_dir(dir.path().join("folder")).unwrap();
    let long = "Hello there. ".repeat(10);
    let cases: &[(&[&str], &str)] = &[
        (&["--text", "  ", "--out", "o.wav"], "--text is empty"),
        (
            &["--text", "hi", "--voice", "alto", "--out", "o.wav"],
            "--voice 'alto' is not a voice of this model (voices: low, high",
        ),
        (
            &["--text", "hi", "--speed", "0", "--out", "o.wav"],
            "--speed 0 is out of range",
        ),
        (
            &["--text", "hi", "--speed", "4.5", "--out", "o.wav"],
            "--speed 4.5 is out of range",
        ),
        (
            &["--text", "hi", "--speed", "NaN", "--out", "o.wav"],
            "--speed NaN is out of range",
        ),
        (
            &["--text-file", "missing.txt", "--out", "o.wav"],
            "--text-file 'missing.txt': cannot read it",
        ),
        (
            &["--text-file", "latin1.txt", "--out", "o.wav"],
            "--text-file 'latin1.txt': it is not UTF-8 text",
        ),
        (
            &["--text-file", "big.txt", "--out", "o.wav"],
            "--text-file 'big.txt': it is larger than 1048576 bytes",
        ),
        (
            &[
                "--text",
                "hi",
                "--text-file",
                "latin1.txt",
                "--out",
                "o.wav",
            ],
            "--text and --text-file were given",
        ),
        (
            &["--phonemes", "həlˈoʊ", "--out", "o.wav"],
            "--phonemes: family 'test_tone' takes text, not phonemes",
        ),
        (
            &["--out", "o.wav"],
            "--task tts needs --text TEXT, --text-file FILE or --phonemes",
        ),
        (&["--text", "hi"], "--task tts needs --out FILE.wav"),
        (
            &["--text", "hi", "--out", "folder"],
            "output 'folder' is a directory",
        ),
        (
            &["--text", "hi", "--audio", "a.wav", "--out", "o.wav"],
            "--audio is not a flag of --task tts",
        ),
        (
            &["--text", &long, "--max-speech-s", "1", "--out", "o.wav"],
            "the speech passed the limit of 1 s of audio at sentence 2 of 10",
        ),
        (
            &["--text", "hi", "--max-speech-s", "0", "--out", "o.wav"],
            "--max-speech-s 0 must be a positive number",
        ),
        (
            &["--text", "hi", "--max-speech-s", "36001", "--out", "o.wav"],
            "--max-speech-s 36001 must be a positive number of seconds, at most 36000",
        ),
    ];
    for (args, needle) in cases {
        let run = tts(dir.path(), args);
        assert_user_error(&run, needle);
        assert!(
            !dir.path().join("o.wav").exists(),
            "{args:?} wrote an output"
        );
    }
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.contains("partial")),
        "no partial file: {names:?}"
    );
    // The registry decides what a family does.
    let m = model(dir.path());
    let run = cli_in(
        dir.path(),
        &[
            "--task",
            "asr",
            "--family",
            "test_tone",
            "--model",
            s(&m),
            "--audio",
            s(&m),
        ],
    );
    assert_user_error(&run, "does not support task 'asr'");
}

/// `cargo tree` with the features of a `dist` build (`cargo build -p audiocpp-cli -p
/// audiocpp-server --features .../deployment`, no dev-dependencies): the engine
/// resolves without `test-families`; with dev-dependencies (what `cargo test` builds)
/// it has it, so the check can fail.
#[test]
fn a_dist_build_resolves_without_the_test_families_and_a_test_build_with_them() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let tree = |edges: &str| {
        let out = Command::new(&cargo)
            .current_dir(common::root())
            .args([
                "tree",
                "--locked",
                "-p",
                "audiocpp-cli",
                "-p",
                "audiocpp-server",
                "--features",
                "audiocpp-cli/deployment,audiocpp-server/deployment",
                "-e",
                edges,
                "-i",
                "audiocpp-engine",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cargo tree: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let dist = tree("features,normal,build");
    assert!(
        dist.contains("audiocpp-engine feature \"deployment\""),
        "{dist}"
    );
    assert!(!dist.contains("test-families"), "{dist}");
    let test = tree("features,normal,build,dev");
    assert!(
        test.contains("audiocpp-engine feature \"test-families\""),
        "{test}"
    );
    // And this test build lists the test family, so a build's --list-loaders shows
    // whether it carries one.
    let dir = tempfile::tempdir().unwrap();
    let run = cli_in(dir.path(), &["--list-loaders"]);
    assert!(
        run.stdout.contains("loader=test_tone tasks=tts"),
        "{}",
        run.stdout
    );
}
