//! Output files that cannot be written are refused before any model loads, naming the
//! flag, with nothing written (`--text-out`, `--segments-out`, `--subtitles-out`, whose
//! extension must also be `.srt` or `.vtt`, `--vad-chunks-out`,
//! `--out` of tts and convert, `--voice-out`); and a write that still fails after the
//! work loses no result (issue 43, item 4).
//!
//! The models here are garbage: a run that loaded one would fail on the model, so an
//! error naming the output flag shows that the check came before the load.

use std::path::{Path, PathBuf};

use audiocpp_engine::families::test_tone;

mod common;
use common::{assert_user_error, cli_in, cli_in_env, s};

/// A file no loader accepts, and a short silent WAV, in `dir`.
fn garbage_model_and_audio(dir: &Path) {
    std::fs::write(dir.join("garbage.bin"), vec![0x5au8; 4096]).unwrap();
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 16_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(dir.join("a.wav"), spec).unwrap();
    for _ in 0..1600 {
        w.write_sample(0i16).unwrap();
    }
    w.finalize().unwrap();
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// `task`'s flags on the garbage model, with `extra`.
fn args<'a>(task: &'a str, family: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["--task", task, "--family", family, "--model", "garbage.bin"];
    if task != "tts" && task != "convert" {
        a.extend(["--audio", "a.wav"]);
    }
    a.extend_from_slice(extra);
    a
}

#[test]
fn outputs_that_cannot_be_written_are_refused_before_the_model_loads() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    garbage_model_and_audio(d);
    std::fs::create_dir(d.join("folder")).unwrap();
    std::fs::write(d.join("file.txt"), "x").unwrap();
    let before = names(d);
    let no_folder = "there is no folder 'missing' (create the folder first";
    let not_folder = "this is not a folder: 'file.txt'";
    let cases: &[(&[&str], &str)] = &[
        (
            &args("asr", "whisper", &["--text-out", "missing/t.txt"]),
            "--text-out: cannot write 'missing/t.txt': ",
        ),
        (
            &args("asr", "whisper", &["--text-out", "file.txt/t.txt"]),
            not_folder,
        ),
        (
            &args("asr", "whisper", &["--text-out", "folder"]),
            "--text-out: output 'folder' is a directory; give a file path",
        ),
        (
            &args("asr", "whisper", &["--segments-out", "missing/s.json"]),
            "--segments-out: cannot write 'missing/s.json': ",
        ),
        (
            &args("asr", "whisper", &["--subtitles-out", "missing/s.srt"]),
            "--subtitles-out: cannot write 'missing/s.srt': ",
        ),
        (
            &args("asr", "whisper", &["--subtitles-out", "s.txt"]),
            "--subtitles-out 's.txt': name the file .srt or .vtt",
        ),
        (
            &args("vad", "silero_vad", &["--vad-chunks-out", "missing/c.json"]),
            "--vad-chunks-out: cannot write 'missing/c.json': ",
        ),
        (
            &args(
                "tts",
                "kokoro",
                &["--text", "Hello.", "--out", "missing/o.wav"],
            ),
            "--out: cannot write 'missing/o.wav': ",
        ),
        (
            &args("tts", "kokoro", &["--text", "Hello.", "--out", "folder"]),
            "--out: output 'folder' is a directory",
        ),
        (
            &args("convert", "whisper", &["--out", "missing/m.gguf"]),
            "--out: cannot write 'missing/m.gguf': ",
        ),
        (
            &args("convert", "whisper", &["--out", "folder"]),
            "--out: output 'folder' is a directory",
        ),
    ];
    for (a, needle) in cases {
        let started = std::time::Instant::now();
        let run = cli_in(d, a);
        assert_user_error(&run, needle);
        if needle.ends_with(": ") {
            assert!(run.stderr.contains(no_folder), "{a:?}: {}", run.stderr);
        }
        assert!(
            !run.stderr.contains("model"),
            "{a:?}: the model was looked at first: {}",
            run.stderr
        );
        assert_eq!(run.stderr.lines().count(), 1, "one line: {}", run.stderr);
        assert!(started.elapsed().as_secs() < 30, "{a:?} took long");
        assert_eq!(names(d), before, "{a:?} wrote something");
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_read_only_folder_is_refused_before_the_model_loads() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    garbage_model_and_audio(d);
    let mut ro = d.join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    if std::fs::write(ro.join("probe"), "x").is_ok() {
        // Root writes in a 0o555 folder; sysfs takes no new file from anyone.
        ro = PathBuf::from("/sys/kernel");
    }
    let out = ro.join("t.txt");
    let run = cli_in(d, &args("asr", "whisper", &["--text-out", s(&out)]));
    assert_user_error(
        &run,
        &format!(
            "--text-out: cannot write '{}': Permission denied (os error 13) (give a path in a folder you can write to)",
            out.display()
        ),
    );
    assert!(!out.exists());
}

/// Synthesized speech whose `--out` fails after the synthesis (`/dev/full`: the disk
/// filled meanwhile) is saved in the temp folder, and the error says where.
#[cfg(target_os = "linux")]
#[test]
fn speech_that_cannot_be_written_is_kept_and_the_error_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = d.join("tone.gguf");
    test_tone::write_model(&model, 24_000, 0.5, 0).unwrap();
    let tmp = d.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let run = cli_in_env(
        d,
        &[("TMPDIR", s(&tmp))],
        &[
            "--task",
            "tts",
            "--family",
            "test_tone",
            "--model",
            s(&model),
            "--text",
            "Hello there.",
            "--out",
            "/dev/full",
        ],
    );
    assert_user_error(&run, "--out: cannot write '/dev/full': ");
    assert!(
        run.stderr.contains("no space left on device"),
        "{}",
        run.stderr
    );
    let kept = names(&tmp);
    assert_eq!(kept.len(), 1, "{kept:?}");
    let wav = tmp.join(&kept[0]);
    assert!(
        run.stderr.contains(&format!(
            "the speech was saved to '{}' instead",
            wav.display()
        )),
        "{}",
        run.stderr
    );
    let r = hound::WavReader::open(&wav).unwrap();
    assert_eq!(r.spec().sample_rate, 24_000);
    assert!(r.len() > 0);
}
