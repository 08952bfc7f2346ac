//! A forked Whisper model ([`AsrModel::fork`]) shares its weights with the model it
//! came from (the same device buffers, no second upload) and transcribes exactly as it
//! does, also while both run at once on two threads: what the server's `parallel`
//! workers rely on. tiny.en q8_0 on one short clip, one thread per model.

mod whisper_common;

use whisper_common::*;

#[test]
fn a_fork_shares_the_weights_and_transcribes_the_same_side_by_side() {
    let mut first = load("tiny.en", Some("q8_0"), 1);
    let mut second = first.fork().expect("forking the model");
    let addresses = first.weight_addresses();
    assert!(!addresses.is_empty(), "the model reports no weight buffer");
    assert_eq!(
        second.weight_addresses(),
        addresses,
        "the fork has weight buffers of its own instead of sharing the model's"
    );
    let samples = audiocpp_engine::audio::load(
        &asset("pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0870.wav"),
        first.sample_rate(),
    )
    .unwrap()
    .samples;
    let opts = greedy(&first);
    let alone = first.run_samples(&samples, &opts).unwrap();
    assert!(!alone.text.is_empty(), "the clip gave no text");
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| first.run_samples(&samples, &opts).unwrap());
        let b = s.spawn(|| second.run_samples(&samples, &opts).unwrap());
        (a.join().unwrap(), b.join().unwrap())
    });
    for (who, out) in [("the model", &a), ("the fork", &b)] {
        assert_eq!(out.text, alone.text, "{who} side by side");
        let stamps = |o: &audiocpp_engine::asr::AsrOutput| -> Vec<(u64, u64, Vec<u32>)> {
            o.segments
                .iter()
                .map(|s| (s.start.to_bits(), s.end.to_bits(), s.tokens.clone()))
                .collect()
        };
        assert_eq!(stamps(out), stamps(&alone), "{who}'s segments side by side");
    }
}
