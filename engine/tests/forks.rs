//! A forked model (`fork()`) shares its weights with the model it came from (the same
//! device buffers, no second upload) and gives exactly what it gives, also while both
//! run at once on two threads: what the server's `parallel` workers rely on. One
//! thread per model: Whisper tiny.en q8_0 on one short clip, Kokoro q8_0 on one
//! sentence, and the committed random-weight Qwen3-TTS Base checkpoint
//! (`tests/fixtures/qwen3_tts_clone/base`), which also clones a voice to the same bytes.

mod common;
mod whisper_common;

use std::sync::Arc;

use audiocpp_engine::asr::AsrOutput;
use audiocpp_engine::backend::RuntimeOptions;
use audiocpp_engine::tts::{SpeechInput, SpeechOptions, SpeechRequest, TtsModel};

/// Asserts that a fork reports the model's weight buffers, not buffers of its own.
fn assert_shared(model: &[usize], fork: &[usize]) {
    assert!(!model.is_empty(), "the model reports no weight buffer");
    assert_eq!(
        fork, model,
        "the fork has weight buffers of its own instead of sharing the model's"
    );
}

/// `run` on the model alone, then on the model and the fork at once on two threads:
/// the three results, alone first.
fn alone_then_side_by_side<M: Send, R: Send>(
    model: &mut M,
    fork: &mut M,
    run: impl Fn(&mut M) -> R + Sync,
) -> [R; 3] {
    let alone = run(model);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| run(model));
        let b = s.spawn(|| run(fork));
        (a.join().unwrap(), b.join().unwrap())
    });
    [alone, a, b]
}

/// Asserts that a TTS model and its fork speak `req` bit for bit as the model alone.
fn assert_speaks_alike(model: &mut TtsModel, fork: &mut TtsModel, req: &SpeechRequest) {
    assert_shared(&model.weight_addresses(), &fork.weight_addresses());
    let bits = |m: &mut TtsModel| -> Vec<u32> {
        m.run(req)
            .unwrap()
            .samples
            .iter()
            .map(|x| x.to_bits())
            .collect()
    };
    let [alone, a, b] = alone_then_side_by_side(model, fork, bits);
    assert!(!alone.is_empty());
    assert_eq!(a, alone, "the model side by side");
    assert_eq!(b, alone, "the fork side by side");
}

#[test]
fn a_whisper_fork_shares_the_weights_and_transcribes_the_same_side_by_side() {
    let mut first = whisper_common::load("tiny.en", Some("q8_0"), 1);
    let mut second = first.fork().expect("forking the model");
    assert_shared(&first.weight_addresses(), &second.weight_addresses());
    let samples = audiocpp_engine::audio::load(
        &whisper_common::asset(
            "pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0870.wav",
        ),
        first.sample_rate(),
    )
    .unwrap()
    .samples;
    let opts = whisper_common::greedy(&first);
    let [alone, a, b] = alone_then_side_by_side(&mut first, &mut second, |m| {
        m.run_samples(&samples, &opts).unwrap()
    });
    assert!(!alone.text.is_empty(), "the clip gave no text");
    let stamps = |o: &AsrOutput| -> Vec<(u64, u64, Vec<u32>)> {
        o.segments
            .iter()
            .map(|s| (s.start.to_bits(), s.end.to_bits(), s.tokens.clone()))
            .collect()
    };
    for (who, out) in [("the model", &a), ("the fork", &b)] {
        assert_eq!(out.text, alone.text, "{who} side by side");
        assert_eq!(stamps(out), stamps(&alone), "{who}'s segments side by side");
    }
}

fn one_thread() -> RuntimeOptions {
    RuntimeOptions {
        threads: 1,
        ..RuntimeOptions::default()
    }
}

#[test]
fn a_kokoro_fork_shares_the_weights_and_speaks_the_same_side_by_side() {
    let mut first =
        TtsModel::load("kokoro", &common::kokoro_gguf("q8_0"), None, &one_thread()).unwrap();
    let mut second = first.fork().expect("forking the model");
    let req = SpeechRequest {
        input: SpeechInput::Text("Two workers, one set of weights.".into()),
        voice: None,
        speed: 1.0,
        options: Default::default(),
    };
    assert_speaks_alike(&mut first, &mut second, &req);
}

#[test]
fn a_qwen3_tts_fork_shares_the_weights_clones_and_speaks_the_same_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qwen3_tts_clone");
    let gguf = dir.path().join("base.gguf");
    audiocpp_engine::tasks::convert(
        "qwen3_tts",
        &fixtures.join("base"),
        None,
        &gguf,
        &Default::default(),
    )
    .unwrap();
    let mut first = TtsModel::load("qwen3_tts", &gguf, None, &one_thread()).unwrap();
    let mut second = first.fork().expect("forking the model");
    let clip = || audiocpp_engine::audio::load(&fixtures.join("ref_24k.wav"), 24_000).unwrap();
    let transcript = Some("Hello, this is a short reference clip.");
    let voice = first.clone_voice(clip(), transcript, false).unwrap();
    assert_eq!(
        second.clone_voice(clip(), transcript, false).unwrap(),
        voice,
        "the fork clones the same voice"
    );
    let req = SpeechRequest {
        input: SpeechInput::Text("Two workers, one set of weights.".into()),
        voice: None,
        speed: 1.0,
        options: SpeechOptions {
            cloned_voice: Some(Arc::new(voice)),
            max_frames: Some(12),
            ..Default::default()
        },
    };
    assert_speaks_alike(&mut first, &mut second, &req);
}
