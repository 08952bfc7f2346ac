//! Every transcription format of the real server transcribes the whole of a multi-window
//! clip: Whisper tiny.en (converted from the pinned CTranslate2 wheel) on the 60 s clip
//! of 13 sentences, decoded greedily as the reference was (a spec override with
//! temperature 0 only). `json`, `text`, `verbose_json`, `srt` and `vtt` all give the
//! same text, with a word error rate <= 0.05 against faster-whisper's default
//! transcript (asr_reference.json: greedy, timestamp tokens on); the segments of
//! `verbose_json`, `srt` and `vtt` cover >= 95% of the speech reference Silero finds
//! (vad_reference.json). Before, `json` and `text` decoded without timestamp tokens and
//! lost the clip's first 30 s window.

use std::path::{Path, PathBuf};

mod common;
use common::{root, wer, words, Server};

/// Max word error rate of each format's text against faster-whisper's default one.
const MAX_WER: f64 = 0.05;
/// Least share of the reference speech the segments must cover.
const MIN_SPEECH_COVERAGE: f64 = 0.95;

fn assets() -> PathBuf {
    common::assets("asr_reference.json")
}

fn long_clip() -> PathBuf {
    let p = assets().join("clips/long.wav");
    assert!(
        p.is_file(),
        "missing {}: run `cargo xtask test`",
        p.display()
    );
    p
}

/// A spec folder with the shipped Whisper spec decoding greedily only.
fn greedy_specs(dir: &Path) -> PathBuf {
    let mut spec: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("model_specs/whisper.json")).unwrap(),
    )
    .unwrap();
    spec["defaults"]["temperatures"] = serde_json::json!([0.0]);
    let folder = dir.join("specs");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("whisper.json"), spec.to_string()).unwrap();
    folder
}

fn start(dir: &Path) -> Server {
    let gguf = common::whisper_tiny_gguf(dir);
    let cfg = serde_json::json!({
        "port": 0,
        "threads": 2,
        "models": [{ "id": "tiny", "path": gguf, "family": "whisper", "task": "asr",
                     "model_spec_override": greedy_specs(dir) }],
    });
    Server::start(dir, &cfg)
}

/// The body of a transcription of `wav` in `format` (status 200 required).
fn transcribe(server: &Server, wav: &[u8], format: &str) -> String {
    let (content_type, body) = common::multipart(
        &[("model", "tiny"), ("response_format", format)],
        Some(("long.wav", wav)),
    );
    let resp = ureq::post(&server.url("/v1/audio/transcriptions"))
        .set("Content-Type", &content_type)
        .send_bytes(&body)
        .unwrap_or_else(|e| panic!("{format}: {e}"));
    assert_eq!(resp.status(), 200, "{format}");
    resp.into_string().unwrap()
}

/// Segments of an SRT or WebVTT body: (start, end, text) per cue.
fn cues(body: &str) -> Vec<(f64, f64, String)> {
    let seconds = |t: &str| -> f64 {
        let t = t.trim().replace(',', ".");
        let parts: Vec<f64> = t.split(':').map(|x| x.parse().unwrap()).collect();
        assert_eq!(parts.len(), 3, "timestamp '{t}'");
        parts[0] * 3600.0 + parts[1] * 60.0 + parts[2]
    };
    let lines: Vec<&str> = body.lines().collect();
    lines
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            let (a, b) = l.split_once(" --> ")?;
            Some((
                seconds(a),
                seconds(b),
                lines.get(i + 1).unwrap_or(&"").to_string(),
            ))
        })
        .collect()
}

/// The speech reference Silero finds in the clip named like `clip`, in seconds.
fn reference_speech(clip: &Path) -> Vec<(f64, f64)> {
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(assets().join("vad_reference.json")).unwrap(),
    )
    .unwrap();
    let (_, entry) = v
        .as_object()
        .unwrap()
        .iter()
        .find(|(k, _)| Path::new(k).file_name() == clip.file_name())
        .expect("vad_reference.json has the long clip");
    entry["onnx_segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x[0].as_f64().unwrap() / 16000.0,
                x[1].as_f64().unwrap() / 16000.0,
            )
        })
        .collect()
}

/// The share of `speech` inside the union of `segments`.
fn coverage(speech: &[(f64, f64)], segments: &[(f64, f64)]) -> f64 {
    let mut sorted = segments.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut union: Vec<(f64, f64)> = Vec::new();
    for (a, b) in sorted {
        match union.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => union.push((a, b)),
        }
    }
    let covered: f64 = speech
        .iter()
        .flat_map(|&(s, e)| {
            union
                .iter()
                .map(move |&(a, b)| (e.min(b) - s.max(a)).max(0.0))
        })
        .sum();
    covered / speech.iter().map(|(s, e)| e - s).sum::<f64>()
}

#[test]
fn every_format_transcribes_every_window() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let clip = long_clip();
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(assets().join("asr_reference.json")).unwrap(),
    )
    .unwrap();
    let (_, want) = reference["clips"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(k, _)| Path::new(k).file_name() == clip.file_name())
        .expect("asr_reference.json has the long clip");
    let theirs = want["text"].as_str().unwrap();
    let speech = reference_speech(&clip);
    let wav = std::fs::read(&clip).unwrap();

    let json: serde_json::Value = serde_json::from_str(&transcribe(&server, &wav, "json")).unwrap();
    let text = transcribe(&server, &wav, "text");
    let verbose: serde_json::Value =
        serde_json::from_str(&transcribe(&server, &wav, "verbose_json")).unwrap();
    let verbose_segments: Vec<(f64, f64, String)> = verbose["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["start"].as_f64().unwrap(),
                x["end"].as_f64().unwrap(),
                x["text"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let srt = cues(&transcribe(&server, &wav, "srt"));
    let vtt = cues(&transcribe(&server, &wav, "vtt"));

    let full = json["text"].as_str().unwrap();
    assert_eq!(
        text.trim_end(),
        full,
        "text and json give the same transcript"
    );
    assert_eq!(
        verbose["text"].as_str(),
        Some(full),
        "verbose_json and json agree"
    );
    for (format, segments) in [
        ("verbose_json", &verbose_segments),
        ("srt", &srt),
        ("vtt", &vtt),
    ] {
        let joined: Vec<&str> = segments.iter().map(|(_, _, t)| t.as_str()).collect();
        assert_eq!(
            words(&joined.join(" ")),
            words(full),
            "{format}: the segments hold the transcript"
        );
        let times: Vec<(f64, f64)> = segments.iter().map(|&(a, b, _)| (a, b)).collect();
        let covered = coverage(&speech, &times);
        eprintln!(
            "{format}: {} segments cover {covered:.3} of the speech",
            segments.len()
        );
        assert!(
            covered >= MIN_SPEECH_COVERAGE,
            "{format}: segments cover {covered:.3} of the speech Silero finds: {times:?}"
        );
    }
    let wer = wer(full, theirs);
    eprintln!("WER vs faster-whisper's default transcript: {wer:.4}\n  ours:   {full}\n  theirs: {theirs}");
    assert!(
        wer <= MAX_WER,
        "WER {wer:.4} against faster-whisper's default transcript"
    );
}
