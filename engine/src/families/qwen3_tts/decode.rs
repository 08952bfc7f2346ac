//! What runs on the host between Qwen3-TTS's graphs: the prompt, laid out row by row as
//! `generate_custom_voice` lays it out, and the generation loop (a talker step, the code
//! predictor's fifteen steps, the next talker input), with the official token choice:
//! repetition penalty on earlier group-0 codes, no end of speech in the first two steps,
//! the talker's upper 1024 ids suppressed but the end of speech, then greedy or sampled
//! (temperature, top-k, top-p).
//!
//! Upstream: `qwen-tts==0.1.1` qwen_tts/inference/qwen3_tts_model.py L732-L839
//! (`generate_custom_voice`) and L265-L285 (the chat template), and
//! core/models/modeling_qwen3_tts.py L2022-L2290 (`Qwen3TTSForConditionalGeneration.generate`:
//! the codec prefix L2108-L2154, the rows L2170-L2232, the talker's generation kwargs
//! L2044-L2066); the processors' order is `transformers==4.57.3`
//! generation/utils.py `_get_logits_processor`.

use crate::error::{EngineError, Result};
use crate::sampling::{self, Choice, Sampler};

use super::hparams::HParams;

/// The assistant turn around the text.
pub fn assistant_turn(text: &str) -> String {
    format!("<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n")
}

/// The user turn an instruction is given in.
pub fn instruction_turn(instructions: &str) -> String {
    format!("<|im_start|>user\n{instructions}<|im_end|>\n")
}

/// Tokens of the assistant turn before the text (`<|im_start|>`, `assistant`, `\n`) and
/// after it (`<|im_end|>`, `\n`, and the next turn's three).
const ROLE: usize = 3;
const TAIL: usize = 5;

/// One prompt row: a text-side part and a codec-side part, summed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Text {
    /// A text token through the text projection.
    Token(u32),
    /// No text part.
    None,
}

/// The codec side of a prompt row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// None.
    None,
    /// The talker's codec embedding of an id (a control id, a language, a speaker).
    Id(u32),
    /// A cloned voice's x-vector, raw.
    XVector,
    /// Frame `k` of a cloned voice's reference codes: its sixteen embeddings summed, as
    /// the talker reads its own frames.
    Frame(usize),
}

/// The prompt as rows of (text part, codec part) and the rows added to the talker's input
/// after it, one per frame (the last repeated once exhausted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The prompt rows.
    pub rows: Vec<(Text, Codec)>,
    /// The text rows added per frame.
    pub trailing: Vec<u32>,
}

/// Who speaks, as the codec prefix says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpeakerRow {
    /// A preset speaker's id (CustomVoice).
    Preset(u32),
    /// A cloned voice's x-vector (Base).
    XVector,
    /// No speaker row (VoiceDesign: the instruction describes the voice).
    None,
}

/// The codec side before the codes: the think tags (with the language when one is
/// given), the speaker, then pad and bos. `language` is the codec id of the request's
/// language (`None` for auto), already overridden by a dialect speaker.
pub fn codec_prefix(hp: &HParams, language: Option<u32>, speaker: SpeakerRow) -> Vec<Codec> {
    let c = hp.codec_ids;
    let mut seq = match language {
        None => vec![c.nothink, c.think_bos, c.think_eos],
        Some(id) => vec![c.think, c.think_bos, id, c.think_eos],
    }
    .into_iter()
    .map(Codec::Id)
    .collect::<Vec<_>>();
    match speaker {
        SpeakerRow::Preset(id) => seq.push(Codec::Id(id)),
        SpeakerRow::XVector => seq.push(Codec::XVector),
        SpeakerRow::None => {}
    }
    seq.extend([Codec::Id(c.pad), Codec::Id(c.bos)]);
    seq
}

/// The language id a request speaks in: its language's, or, for `auto` and Chinese, the
/// dialect of a dialect speaker.
pub fn language_id(
    hp: &HParams,
    language: &str,
    speaker: Option<&str>,
) -> std::result::Result<Option<u32>, String> {
    let mut id = hp.language_id(language)?;
    let lower = language.to_lowercase();
    if lower == "auto" || lower == "chinese" {
        if let Some(dialect) = speaker
            .and_then(|s| hp.speaker(s))
            .and_then(|s| s.dialect.as_deref())
        {
            id = hp
                .languages
                .iter()
                .find(|(n, _)| n == dialect)
                .map(|&(_, id)| id)
                .or(id);
        }
    }
    Ok(id)
}

/// The text between the assistant turn's markers, or the usage error of an empty one.
fn body(text_ids: &[u32]) -> Result<&[u32]> {
    if text_ids.len() <= ROLE + TAIL {
        return Err(EngineError::Usage(
            "parameter 'input' has no text between the chat template's markers".into(),
        ));
    }
    Ok(&text_ids[ROLE..text_ids.len() - TAIL])
}

/// The rows every layout starts with: the instruction turn's (if any), the role's, and
/// the codec prefix's but its last (bos), under `tts_pad` and finally `tts_bos`.
fn head(
    hp: &HParams,
    text_ids: &[u32],
    instruction_ids: Option<&[u32]>,
    prefix: &[Codec],
) -> Vec<(Text, Codec)> {
    let t = hp.text_ids;
    let mut rows = Vec::new();
    if let Some(ids) = instruction_ids {
        rows.extend(ids.iter().map(|&i| (Text::Token(i), Codec::None)));
    }
    rows.extend(
        text_ids[..ROLE]
            .iter()
            .map(|&i| (Text::Token(i), Codec::None)),
    );
    let n = prefix.len();
    for (i, &c) in prefix[..n - 1].iter().enumerate() {
        let text = if i + 2 < n { t.tts_pad } else { t.tts_bos };
        rows.push((Text::Token(text), c));
    }
    rows
}

/// The prompt of `text_ids` (the tokenized assistant turn) with `instruction_ids` (the
/// tokenized instruction turn, if any) and the codec prefix, non-streaming (the whole
/// text in the prompt, the default of `generate_custom_voice`) or streaming (the text fed
/// one token per frame).
pub fn layout(
    hp: &HParams,
    text_ids: &[u32],
    instruction_ids: Option<&[u32]>,
    prefix: &[Codec],
    streaming: bool,
) -> Result<Layout> {
    let body = body(text_ids)?;
    let t = hp.text_ids;
    let mut rows = head(hp, text_ids, instruction_ids, prefix);
    let ids = hp.codec_ids;
    let trailing = if streaming {
        rows.push((Text::Token(body[0]), Codec::Id(ids.bos)));
        body[1..].iter().copied().chain([t.tts_eos]).collect()
    } else {
        rows.extend(body.iter().map(|&i| (Text::Token(i), Codec::Id(ids.pad))));
        rows.push((Text::Token(t.tts_eos), Codec::Id(ids.pad)));
        rows.push((Text::Token(t.tts_pad), Codec::Id(ids.bos)));
        vec![t.tts_pad]
    };
    Ok(Layout { rows, trailing })
}

/// The reference turn around a cloned voice's transcript.
pub fn reference_turn(text: &str) -> String {
    format!("<|im_start|>assistant\n{text}<|im_end|>\n")
}

/// The in-context prompt of a cloned voice: `ref_ids` (the tokenized reference turn),
/// then `text_ids` (the target's), against the codec side bos and the `n_ref` reference
/// frames; non-streaming (all the text over `codec_pad`, then the frames under `tts_pad`)
/// or streaming (text and frames side by side, the text's remainder trailing, or the
/// frames' remainder under `tts_pad`).
///
/// Upstream: modeling_qwen3_tts.py L1968-L2019 (`generate_icl_prompt`), L2188-L2197.
pub fn icl_layout(
    hp: &HParams,
    text_ids: &[u32],
    ref_ids: &[u32],
    prefix: &[Codec],
    n_ref: usize,
    streaming: bool,
) -> Result<Layout> {
    let target = body(text_ids)?;
    if ref_ids.len() <= ROLE + 2 {
        return Err(EngineError::Usage(
            "the cloned voice's reference text is empty: give the clip's transcript".into(),
        ));
    }
    let t = hp.text_ids;
    let c = hp.codec_ids;
    let mut rows = head(hp, text_ids, None, prefix);
    let text: Vec<u32> = ref_ids[ROLE..ref_ids.len() - 2]
        .iter()
        .chain(target)
        .copied()
        .chain([t.tts_eos])
        .collect();
    let codec: Vec<Codec> = std::iter::once(Codec::Id(c.bos))
        .chain((0..n_ref).map(Codec::Frame))
        .collect();
    let trailing = if !streaming {
        rows.extend(text.iter().map(|&i| (Text::Token(i), Codec::Id(c.pad))));
        rows.extend(codec.iter().map(|&k| (Text::Token(t.tts_pad), k)));
        vec![t.tts_pad]
    } else if text.len() > codec.len() {
        rows.extend(text.iter().zip(&codec).map(|(&i, &k)| (Text::Token(i), k)));
        text[codec.len()..].to_vec()
    } else {
        let padded = text.iter().copied().chain(std::iter::repeat(t.tts_pad));
        rows.extend(padded.zip(&codec).map(|(i, &k)| (Text::Token(i), k)));
        vec![t.tts_pad]
    };
    Ok(Layout { rows, trailing })
}

/// Samples of a cloned voice's reference part to drop from the decoding of the reference
/// frames followed by the generated ones, `n_samples` in all, computed in floating point
/// as the official code does (so sometimes one sample short of the reference's frames).
///
/// Upstream: qwen_tts/inference/qwen3_tts_model.py L612-L631.
pub fn reference_cut(n_ref: usize, n_gen: usize, n_samples: usize) -> usize {
    (n_ref as f64 / (n_ref + n_gen) as f64 * n_samples as f64) as usize
}

/// How the talker's and the code predictor's codes are chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decoding {
    /// Group 0.
    pub talker: Choice,
    /// Repetition penalty on group 0.
    pub repetition_penalty: f32,
    /// Groups 1 and up.
    pub predictor: Choice,
}

/// The talker's scores for the next group-0 code, as the official processors leave
/// them: the repetition penalty on every code already chosen, end of speech forbidden in
/// the first two steps, and the vocabulary's upper 1024 ids (control ids, speakers) but
/// the end of speech suppressed.
pub fn talker_scores(hp: &HParams, logits: &mut [f32], history: &[u32], penalty: f32) {
    let mut seen = history.to_vec();
    seen.sort_unstable();
    seen.dedup();
    for &t in &seen {
        if let Some(s) = logits.get_mut(t as usize) {
            *s = if *s < 0.0 { *s * penalty } else { *s / penalty };
        }
    }
    let eos = hp.codec_ids.eos as usize;
    if history.len() < 2 {
        if let Some(s) = logits.get_mut(eos) {
            *s = f32::NEG_INFINITY;
        }
    }
    let vocab = hp.talker_vocab;
    for (i, s) in logits
        .iter_mut()
        .enumerate()
        .skip(vocab.saturating_sub(1024))
    {
        if i != eos {
            *s = f32::NEG_INFINITY;
        }
    }
}

/// The next group-0 code.
pub fn next_code(
    hp: &HParams,
    logits: &mut [f32],
    history: &[u32],
    d: &Decoding,
    rng: &mut Sampler,
) -> u32 {
    talker_scores(hp, logits, history, d.repetition_penalty);
    sampling::choose(logits, &d.talker, rng) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_cut_rounds_as_python() {
        // int(30 / 52 * 4992) in double precision is 2879, one short of 30 frames of 96.
        assert_eq!(reference_cut(30, 22, 52 * 96), 2879);
        assert_eq!(reference_cut(1, 1, 2 * 1920), 1920);
    }

    #[test]
    fn templates_are_the_official_ones() {
        assert_eq!(
            assistant_turn("Hi."),
            "<|im_start|>assistant\nHi.<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(
            instruction_turn("calm"),
            "<|im_start|>user\ncalm<|im_end|>\n"
        );
    }
}
