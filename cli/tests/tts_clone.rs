//! Voice cloning through `audiocpp_cli --task tts` on the reduced random Qwen3-TTS Base
//! checkpoint of `engine/tests/fixtures/qwen3_tts_clone` (the engine's tests check its
//! numerics against the official code): a clip becomes a voice file whose x-vector is
//! the official one, the file speaks exactly as the inline clip does, and every bad
//! cloning input is exit 2 naming the flag with nothing written.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

mod common;
use common::{assert_user_error, cli_in, exe, root, s, specs, Run};

fn fixtures() -> PathBuf {
    root().join("engine/tests/fixtures/qwen3_tts_clone")
}

/// The Base and VoiceDesign fixtures converted with the CLI (f32: exact), kept in the
/// test scratch folder until the CLI, the spec or the fixture changes.
fn converted() -> &'static (PathBuf, PathBuf) {
    static MODELS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    MODELS.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let convert = |checkpoint: &str| {
            let src = fixtures().join(checkpoint);
            let inputs = [
                exe(),
                &specs().join("qwen3_tts.json"),
                &src.join("model.safetensors"),
                &src.join("speech_tokenizer/model.safetensors"),
            ];
            let out = dir.join(format!("cli-qwen3-{checkpoint}.gguf"));
            audiocpp_test_support::cached(&out, &inputs, |out| {
                let run = cli_in(
                    dir,
                    &[
                        "--task",
                        "convert",
                        "--family",
                        "qwen3_tts",
                        "--model",
                        s(&src),
                        "--quantize",
                        "f32",
                        "--model-spec-override",
                        s(&specs()),
                        "--out",
                        s(out),
                    ],
                );
                assert_eq!(run.code, 0, "{}", run.stderr);
            })
        };
        (convert("base"), convert("voice_design"))
    })
}

/// The reference clip and what it says, as the official fixture recorded them.
fn reference() -> (PathBuf, String) {
    let exp: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("expected_base.json")).unwrap())
            .unwrap();
    let text = exp["voices"]["ref24k_icl"]["ref_text"].as_str().unwrap();
    (fixtures().join("ref_24k.wav"), text.to_string())
}

fn tts(dir: &Path, model: &Path, extra: &[&str]) -> Run {
    let mut args = vec![
        "--task",
        "tts",
        "--family",
        "qwen3_tts",
        "--model",
        s(model),
    ];
    args.extend_from_slice(extra);
    cli_in(dir, &args)
}

/// Greedy and short: a reproducible sentence.
const SHORT: [&str; 8] = [
    "--text",
    "See you today.",
    "--language",
    "english",
    "--temperature",
    "0",
    "--max-frames",
    "10",
];

fn samples(path: &Path) -> Vec<i16> {
    hound::WavReader::open(path)
        .unwrap()
        .samples::<i16>()
        .map(|x| x.unwrap())
        .collect()
}

#[test]
fn a_clip_becomes_a_voice_file_that_speaks_as_the_clip_does() {
    let (base, _) = converted();
    let (clip, text) = reference();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // The voice alone: no text, no --out.
    let run = tts(
        d,
        base,
        &[
            "--ref-audio",
            s(&clip),
            "--ref-text",
            &text,
            "--voice-out",
            "me.json",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.value("voice_out").as_deref(), Some("me.json"));
    let file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("me.json")).unwrap()).unwrap();
    assert_eq!(
        run.value("voice_bytes"),
        Some(
            std::fs::metadata(d.join("me.json"))
                .unwrap()
                .len()
                .to_string()
        )
    );
    // Its x-vector is the official one (the engine's tests bound it at 1e-3).
    let exp = audiocpp_test_support::root().join("engine/tests/fixtures/qwen3_tts_clone");
    let want = official_x_vector(&exp);
    let got: Vec<f32> = file["x_vector"]
        .as_array()
        .expect("the voice file holds its x-vector")
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    assert_eq!(got.len(), want.len());
    let d_x = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(d_x < 1e-3, "x-vector differs by {d_x}");

    // Speaking with the file is speaking with the clip.
    let mut with_file = vec!["--voice", "me.json", "--out", "file.wav"];
    with_file.extend_from_slice(&SHORT);
    let run = tts(d, base, &with_file);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.value("voice").as_deref(), Some("me"));
    let mut inline = vec![
        "--ref-audio",
        s(&clip),
        "--ref-text",
        &text,
        "--out",
        "inline.wav",
    ];
    inline.extend_from_slice(&SHORT);
    let run = tts(d, base, &inline);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let (a, b) = (samples(&d.join("file.wav")), samples(&d.join("inline.wav")));
    assert!(
        !a.is_empty() && a.iter().any(|&x| x != 0),
        "speech was made"
    );
    assert_eq!(a, b, "the saved voice speaks as the clip does");

    // x-vector only: no transcript, a different voice file.
    let run = tts(
        d,
        base,
        &[
            "--ref-audio",
            s(&clip),
            "--x-vector-only",
            "--voice-out",
            "xv.json",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let xv: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("xv.json")).unwrap()).unwrap();
    assert_eq!(xv["x_vector"], file["x_vector"]);
    assert_ne!(xv, file, "an x-vector-only voice carries no codes");
}

/// The x-vector the official code made of the 24 kHz reference.
fn official_x_vector(fixtures: &Path) -> Vec<f32> {
    let exp: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixtures.join("expected_base.json")).unwrap())
            .unwrap();
    let name = exp["voices"]["ref24k_icl"]["arrays"]["xvector"]
        .as_str()
        .unwrap();
    let entry = &exp["arrays"][name];
    let bin = std::fs::read(fixtures.join("expected_base.bin")).unwrap();
    let offset = entry["offset"].as_u64().unwrap() as usize;
    let count = entry["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .product::<usize>();
    bin[offset..offset + 4 * count]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn bad_cloning_inputs_exit_2_naming_the_flag_and_write_nothing() {
    let (base, design) = converted();
    let (clip, text) = reference();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Half a second of the clip.
    let short = d.join("short.wav");
    let mut w = hound::WavWriter::create(
        &short,
        hound::WavSpec {
            channels: 1,
            sample_rate: 24_000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        },
    )
    .unwrap();
    for x in hound::WavReader::open(&clip)
        .unwrap()
        .samples::<i16>()
        .take(12_000)
    {
        w.write_sample(x.unwrap()).unwrap();
    }
    w.finalize().unwrap();
    std::fs::write(d.join("junk.json"), b"{\"not\": \"a voice\"}").unwrap();
    let clip = s(&clip);
    let cases: Vec<(&Path, Vec<&str>, &str)> = vec![
        (
            base,
            vec!["--ref-text", &text, "--voice-out", "v.json"],
            "--ref-text goes with --ref-audio",
        ),
        (
            base,
            vec!["--x-vector-only", "--text", "Hi.", "--out", "o.wav"],
            "--x-vector-only goes with --ref-audio",
        ),
        (
            base,
            vec!["--ref-audio", clip, "--voice-out", "v.json"],
            "--ref-audio needs --ref-text",
        ),
        (
            base,
            vec![
                "--ref-audio",
                clip,
                "--ref-text",
                &text,
                "--x-vector-only",
                "--voice-out",
                "v.json",
            ],
            "takes no --ref-text",
        ),
        (
            base,
            vec!["--ref-audio", clip, "--ref-text", &text],
            "give --voice-out FILE.json, or --text",
        ),
        (
            base,
            vec![
                "--ref-audio",
                clip,
                "--ref-text",
                &text,
                "--voice",
                "vivian",
                "--voice-out",
                "v.json",
            ],
            "speak in one voice",
        ),
        (
            base,
            vec![
                "--ref-audio",
                s(&short),
                "--ref-text",
                &text,
                "--voice-out",
                "v.json",
            ],
            "give a clip of 1 to 30 s",
        ),
        (
            base,
            vec![
                "--ref-audio",
                "missing.wav",
                "--ref-text",
                &text,
                "--voice-out",
                "v.json",
            ],
            "missing.wav",
        ),
        (
            base,
            vec![
                "--ref-audio",
                clip,
                "--ref-text",
                &text,
                "--voice-out",
                "no/such/dir/v.json",
            ],
            "no/such/dir",
        ),
        (
            base,
            vec!["--voice", "missing.json", "--text", "Hi.", "--out", "o.wav"],
            "missing.json",
        ),
        (
            base,
            vec!["--voice", "junk.json", "--text", "Hi.", "--out", "o.wav"],
            "is not a voice file",
        ),
        (
            base,
            vec!["--text", "Hi.", "--out", "o.wav"],
            "speaks in a cloned voice",
        ),
        (
            design,
            vec![
                "--ref-audio",
                clip,
                "--ref-text",
                &text,
                "--voice-out",
                "v.json",
            ],
            "does not clone voices",
        ),
    ];
    for (model, args, needle) in cases {
        let run = tts(d, model, &args);
        assert_user_error(&run, needle);
        for made in ["v.json", "o.wav"] {
            assert!(!d.join(made).exists(), "{args:?} wrote {made}");
        }
    }
}
