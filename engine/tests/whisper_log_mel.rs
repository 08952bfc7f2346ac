//! Whisper's log-mel front end against faster-whisper's features on every reference
//! clip (`cargo xtask test` computes them into asr_reference.json with the same
//! CTranslate2 tiny.en model): within 1e-4 (max abs; 2.1e-5 measured), one frame more
//! than faster-whisper keeps. The CLI's tests check the transcripts.

mod common;

use std::path::Path;

use audiocpp_engine::asr::AsrModel;
use audiocpp_engine::backend::RuntimeOptions;
use common::{assets, whisper_tiny_gguf};

/// Max |difference| allowed between our log-mel features and faster-whisper's.
const MEL_TOLERANCE: f32 = 1e-4;

#[test]
fn log_mel_matches_faster_whisper() {
    let a = assets(&["asr_reference.json"]);
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("asr_reference.json")).unwrap())
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gguf = whisper_tiny_gguf(dir.path());
    let model = AsrModel::load("whisper", &gguf, None, &RuntimeOptions::default()).unwrap();
    let mut worst = 0f32;
    for (clip, want) in r["clips"].as_object().unwrap() {
        let audio = audiocpp_engine::audio::load(Path::new(clip), 16000).unwrap();
        let (ours, frames) = model.log_mel(&audio.samples);
        let shape = want["mel_shape"].as_array().unwrap();
        let (n_mels, ref_frames) = (
            shape[0].as_u64().unwrap() as usize,
            shape[1].as_u64().unwrap() as usize,
        );
        assert_eq!(frames, ref_frames + 1, "{clip}: frame count");
        let bytes = std::fs::read(want["mel"].as_str().unwrap()).unwrap();
        let theirs: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(theirs.len(), n_mels * ref_frames);
        let mut max = 0f32;
        for m in 0..n_mels {
            for t in 0..ref_frames {
                max = max.max((ours[m * frames + t] - theirs[m * ref_frames + t]).abs());
            }
        }
        eprintln!("{clip}: log-mel max |diff| {max:.2e}");
        worst = worst.max(max);
    }
    assert!(worst <= MEL_TOLERANCE, "log-mel max diff {worst}");
}
