//! A forked Kokoro model ([`TtsModel::fork`]) shares its weights with the model it came
//! from (the same device buffers, no second upload) and speaks exactly as it does, also
//! while both run at once on two threads: what the server's `parallel` workers rely on.
//! Kokoro q8_0 (`common::kokoro_gguf`) on one sentence, one thread per model.

mod common;

use audiocpp_engine::backend::RuntimeOptions;
use audiocpp_engine::tts::{SpeechInput, SpeechRequest, TtsModel};

#[test]
fn a_fork_shares_the_weights_and_speaks_the_same_side_by_side() {
    let opts = RuntimeOptions {
        threads: 1,
        ..RuntimeOptions::default()
    };
    let mut first = TtsModel::load("kokoro", &common::kokoro_gguf("q8_0"), None, &opts).unwrap();
    let mut second = first.fork().expect("forking the model");
    let addresses = first.weight_addresses();
    assert!(!addresses.is_empty(), "the model reports no weight buffer");
    assert_eq!(
        second.weight_addresses(),
        addresses,
        "the fork has weight buffers of its own instead of sharing the model's"
    );
    let req = SpeechRequest {
        input: SpeechInput::Text("Two workers, one set of weights.".into()),
        voice: None,
        speed: 1.0,
        options: Default::default(),
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
