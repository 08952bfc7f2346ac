//! A forked Qwen3-TTS model ([`TtsModel::fork`]) shares its weights with the model it
//! came from (the same device buffers, no second upload), clones a voice to the same
//! bytes and speaks exactly as it does, also while both run at once on two threads:
//! what the server's `parallel` workers rely on. The committed random-weight Base
//! checkpoint (`tests/fixtures/qwen3_tts_clone/base`), one thread per model.

use std::sync::Arc;

use audiocpp_engine::backend::RuntimeOptions;
use audiocpp_engine::tts::{SpeechInput, SpeechOptions, SpeechRequest, TtsModel};

#[test]
fn a_fork_shares_the_weights_clones_and_speaks_the_same_side_by_side() {
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
    let opts = RuntimeOptions {
        threads: 1,
        ..RuntimeOptions::default()
    };
    let mut first = TtsModel::load("qwen3_tts", &gguf, None, &opts).unwrap();
    let mut second = first.fork().expect("forking the model");
    let addresses = first.weight_addresses();
    assert!(!addresses.is_empty(), "the model reports no weight buffer");
    assert_eq!(
        second.weight_addresses(),
        addresses,
        "the fork has weight buffers of its own instead of sharing the model's"
    );
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
    let alone = first.run(&req).unwrap().samples;
    assert!(!alone.is_empty());
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| first.run(&req).unwrap().samples);
        let b = s.spawn(|| second.run(&req).unwrap().samples);
        (a.join().unwrap(), b.join().unwrap())
    });
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a), bits(&alone), "the model side by side");
    assert_eq!(bits(&b), bits(&alone), "the fork side by side");
}
