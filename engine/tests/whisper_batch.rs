//! Several requests decoded as one batch (`AsrModel::run_batch`: one thread runs the
//! graphs, the requests' decoder steps as one graph over their cache slots) give each
//! request the transcript it gets alone, bit for bit: the same text, segment times,
//! tokens, log-probabilities, word times and decoder passes. The batch mixes what a
//! server sees at once: three human-speech clips (one with word timestamps), 30 s of
//! music-like tones that fall back to sampling at higher temperatures (so sampled steps
//! run in the batch too), and a request that fails (a language an English-only model
//! lacks), which must fail alone; all five at once, and two at a time with each next
//! request starting in the cache slot of one that ended. Tiny.en q8_0 and f16 on the
//! CPU kernels.

mod whisper_common;

use audiocpp_engine::asr::{AsrOutput, DecodeOptions};
use whisper_common::*;

/// What must match between a request alone and in the batch (floats as bits).
fn key(o: &AsrOutput) -> impl PartialEq + std::fmt::Debug {
    let segments: Vec<_> = o
        .segments
        .iter()
        .map(|s| {
            let words: Vec<_> = s
                .words
                .iter()
                .map(|w| (w.word.clone(), w.start.to_bits(), w.end.to_bits()))
                .collect();
            (
                s.start.to_bits(),
                s.end.to_bits(),
                s.tokens.clone(),
                s.avg_logprob.to_bits(),
                s.temperature.to_bits(),
                words,
            )
        })
        .collect();
    (o.text.clone(), segments, o.decode_passes, o.decoder_steps)
}

fn clip(name: &str, rate: u32) -> Vec<f32> {
    let path = asset(&format!(
        "pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-{name}.wav"
    ));
    audiocpp_engine::audio::load(&path, rate).unwrap().samples
}

fn batch_matches_alone(quantize: Option<&str>) {
    let mut model = load("tiny.en", quantize, 1);
    let rate = model.sample_rate();
    let greedy = greedy(&model);
    let words = DecodeOptions {
        word_timestamps: true,
        ..greedy.clone()
    };
    let fallback = DecodeOptions {
        language: "en".into(),
        ..model.default_options()
    };
    let german = DecodeOptions {
        language: "de".into(),
        ..greedy.clone()
    };
    let audio = [
        clip("0870", rate),
        clip("0880", rate),
        clip("0890", rate),
        tones(16_000 * 30),
    ];
    let inputs: Vec<(&[f32], &DecodeOptions)> = vec![
        (&audio[0], &greedy),
        (&audio[1], &words),
        (&audio[3], &fallback),
        (&audio[0], &german),
        (&audio[2], &greedy),
    ];
    let alone: Vec<_> = inputs
        .iter()
        .map(|(samples, opts)| model.run_samples(samples, opts))
        .collect();
    // All at once, and two at a time (each next request starting in the slot of one
    // that ended).
    for width in [inputs.len(), 2] {
        let batch = model.run_batch(&inputs, width).expect("the batch runs");
        assert_eq!(batch.len(), inputs.len());
        for (i, (a, b)) in alone.iter().zip(&batch).enumerate() {
            match (a, b) {
                (Ok(a), Ok(b)) => assert_eq!(key(b), key(a), "request {i}, width {width}"),
                (Err(a), Err(b)) => assert_eq!(b.to_string(), a.to_string(), "request {i}"),
                _ => panic!(
                    "request {i}, width {width}: alone {:?}, in the batch {:?}",
                    a.as_ref().map(|o| &o.text),
                    b.as_ref().map(|o| &o.text)
                ),
            }
        }
    }
    let texts: Vec<&str> = alone
        .iter()
        .map(|o| o.as_ref().map_or("", |o| o.text.as_str()))
        .collect();
    assert!(
        texts[0].len() > 20 && texts[1].len() > 20 && texts[4].len() > 20,
        "{texts:?}"
    );
    assert!(alone[3].is_err(), "an English-only model took language de");
    let words = &alone[1].as_ref().unwrap().segments[0].words;
    assert!(!words.is_empty(), "no word timestamps");
    let tones = alone[2].as_ref().unwrap();
    assert!(
        tones.decode_passes > 1,
        "the tones did not fall back to sampling ({} passes)",
        tones.decode_passes
    );
}

#[test]
fn q8_0_requests_in_a_batch_get_their_transcripts_alone() {
    batch_matches_alone(Some("q8_0"));
}

#[test]
fn f16_requests_in_a_batch_get_their_transcripts_alone() {
    batch_matches_alone(None);
}
