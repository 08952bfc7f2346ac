//! Word timestamps through the real `openai` Python package: Whisper tiny.en (converted
//! from the pinned CTranslate2 wheel, decoding greedily as the reference did) on real
//! human speech (the ten clips of Debian's pocketsphinx test data joined, 39.4 s: two
//! windows). `client.audio.transcriptions.create(..., response_format="verbose_json",
//! timestamp_granularities=["word"])` gives OpenAI's top-level `words` (word, start,
//! end) and no segments; with `["word", "segment"]` both. The words are faster-whisper's
//! `word_timestamps=True` words (asr-real/tiny.en/word_reference.json, after the word
//! error rate's normalisation), they make up the text, their times never run backwards
//! and lie within the clip, and starts and ends are within 0.1 s of faster-whisper's at
//! the median and 1.0 s at worst (engine/tests/whisper_word_timestamps.rs's bounds).
//! `word` with another response format, and a granularity that is neither `word` nor
//! `segment`, are a 400 whose `param` is `timestamp_granularities`, as OpenAI answers.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{root, words, Server};

/// The clip, under the test assets.
const CLIP: &str = "pocketsphinx/all_joined.wav";

fn assets() -> PathBuf {
    common::assets("asr-real/tiny.en/word_reference.json")
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

const CLIENT: &str = r#"
import json, sys
from openai import OpenAI
base, wav = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=base + "/v1", api_key="test-key", max_retries=0)
out = {}
def words_of(v):
    return [[w.word, w.start, w.end] for w in v.words] if v.words is not None else None
with open(wav, "rb") as f:
    v = client.audio.transcriptions.create(model="tiny", file=f, response_format="verbose_json",
                                           timestamp_granularities=["word"])
    out["word"] = {"text": v.text, "duration": v.duration, "words": words_of(v),
                   "segments": None if v.segments is None else len(v.segments)}
with open(wav, "rb") as f:
    v = client.audio.transcriptions.create(model="tiny", file=f, response_format="verbose_json",
                                           timestamp_granularities=["word", "segment"])
    out["both"] = {"text": v.text, "words": words_of(v),
                   "segments": None if v.segments is None else [[s.start, s.end] for s in v.segments]}
refusals = {}
for fmt, gran in [("json", ["word"]), ("srt", ["word"]), ("text", ["word"]), ("verbose_json", ["char"])]:
    with open(wav, "rb") as f:
        try:
            client.audio.transcriptions.create(model="tiny", file=f, response_format=fmt,
                                               timestamp_granularities=gran)
            refusals[fmt + "/" + gran[0]] = "accepted"
        except Exception as e:
            refusals[fmt + "/" + gran[0]] = [getattr(e, "status_code", None), getattr(e, "param", None), str(e)]
out["refusals"] = refusals
print(json.dumps(out))
"#;

#[test]
fn openai_client_gets_word_timestamps_in_verbose_json() {
    let dir = tempfile::tempdir().unwrap();
    let clip = assets().join(CLIP);
    assert!(
        clip.is_file(),
        "missing {}: run `cargo xtask test`",
        clip.display()
    );
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(assets().join("asr-real/tiny.en/word_reference.json")).unwrap(),
    )
    .unwrap();
    let theirs: Vec<(String, f64, f64)> = reference["clips"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(k, _)| k.ends_with(CLIP))
        .map(|(_, v)| v)
        .expect("the reference has the clip")["segments"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["words"].as_array().unwrap())
        .map(|w| {
            (
                w["word"].as_str().unwrap().to_string(),
                w["start"].as_f64().unwrap(),
                w["end"].as_f64().unwrap(),
            )
        })
        .collect();
    let gguf = common::whisper_tiny_gguf(dir.path());
    let cfg = serde_json::json!({
        "port": 0,
        "threads": 2,
        "api_key": "test-key",
        "models": [{ "id": "tiny", "path": gguf, "family": "whisper", "task": "asr",
                     "model_spec_override": greedy_specs(dir.path()) }],
    });
    let server = Server::start(dir.path(), &cfg);
    let out = Command::new(common::python())
        .arg("-c")
        .arg(CLIENT)
        .arg(&server.base)
        .arg(&clip)
        .output()
        .unwrap();
    drop(server);
    assert!(
        out.status.success(),
        "openai client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("openai client got: {v}");

    let only = &v["word"];
    assert!(
        only["segments"].is_null(),
        "segments only when asked: {only}"
    );
    let duration = only["duration"].as_f64().unwrap();
    let ours: Vec<(String, f64, f64)> = only["words"]
        .as_array()
        .expect("words")
        .iter()
        .map(|w| {
            (
                w[0].as_str().unwrap().to_string(),
                w[1].as_f64().unwrap(),
                w[2].as_f64().unwrap(),
            )
        })
        .collect();
    assert!(!ours.is_empty());
    let text = only["text"].as_str().unwrap();
    let joined: Vec<String> = ours.iter().map(|w| w.0.clone()).collect();
    // OpenAI's words carry no spaces, so "ill" "-disposed" is "ill-disposed" in the text:
    // compare letters and digits.
    let letters = |t: &str| -> String {
        t.chars()
            .filter(|c| c.is_alphanumeric())
            .flat_map(char::to_lowercase)
            .collect()
    };
    assert_eq!(
        letters(&joined.concat()),
        letters(text),
        "the words are the text"
    );
    assert!(
        ours.iter().all(|w| w.0 == w.0.trim()),
        "OpenAI's words carry no spaces: {ours:?}"
    );
    let theirs_text: Vec<String> = theirs.iter().map(|w| w.0.clone()).collect();
    assert_eq!(
        words(&joined.join(" ")),
        words(&theirs_text.join(" ")),
        "faster-whisper's words"
    );
    assert_eq!(ours.len(), theirs.len());
    let mut last = 0.0;
    let mut diffs = Vec::new();
    for (o, t) in ours.iter().zip(&theirs) {
        assert!(
            o.1 + 1e-6 >= last && o.1 <= o.2 && o.2 <= duration + 1e-6,
            "{o:?} runs backwards or past the clip ({duration} s)"
        );
        last = o.1;
        diffs.push((o.1 - t.1).abs());
        diffs.push((o.2 - t.2).abs());
    }
    diffs.sort_by(f64::total_cmp);
    let (median, worst) = (diffs[diffs.len() / 2], *diffs.last().unwrap());
    eprintln!(
        "{} words; vs faster-whisper: median {median:.3} s, worst {worst:.3} s",
        ours.len()
    );
    assert!(
        median <= 0.1 && worst <= 1.0,
        "median {median}, worst {worst}"
    );

    let both = &v["both"];
    assert_eq!(both["words"], only["words"], "the same words with segments");
    assert_eq!(both["text"], only["text"]);
    let segs = both["segments"].as_array().expect("segments when asked");
    assert!(!segs.is_empty());
    let seg_start = segs[0][0].as_f64().unwrap();
    let seg_end = segs.last().unwrap()[1].as_f64().unwrap();
    assert!(ours[0].1 + 1e-6 >= seg_start && ours.last().unwrap().2 <= seg_end + 1e-6);

    for (case, answer) in v["refusals"].as_object().unwrap() {
        assert_eq!(answer[0], 400, "{case}: {answer}");
        assert_eq!(answer[1], "timestamp_granularities", "{case}: {answer}");
    }
    let msg = v["refusals"]["json/word"][2].as_str().unwrap();
    assert!(msg.contains("verbose_json"), "{msg}");
}
