//! Qwen's byte-level BPE text tokenizer, through Hugging Face's `tokenizers` crate.
//!
//! The release ships `vocab.json`, `merges.txt` and `tokenizer_config.json` (no
//! `tokenizer.json`); transformers turns them into a fast tokenizer with NFC
//! normalisation, Qwen2's split pattern (isolated matches), byte-level mapping without a
//! prefix space, a BPE without unknown token or byte fallback, and the added tokens of
//! `added_tokens_decoder` matched in the raw text. [`build`] makes the same tokenizer at
//! conversion and stores it as `tokenizer.json` text in the GGUF; [`TextTokenizer`] reads it
//! back at load.
//!
//! Upstream: `transformers==4.57.3` convert_slow_tokenizer.py (`Qwen2Converter`) and
//! models/qwen2/tokenization_qwen2.py (`PRETOKENIZE_REGEX`).

use std::str::FromStr;

use tokenizers::models::bpe::{Merges, Vocab, BPE};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

/// Qwen2's pre-tokenizer pattern (contractions, letter runs with one leading non-letter,
/// single digits, punctuation runs, line breaks, spaces).
pub const SPLIT_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The tokenizer of `vocab.json`, `merges.txt` and `tokenizer_config.json` (its
/// `added_tokens_decoder`), as `tokenizer.json` text; the error says what is wrong with
/// which input.
pub fn build(
    vocab_json: &str,
    merges_txt: &str,
    config: &serde_json::Value,
) -> Result<String, String> {
    let vocab: std::collections::HashMap<String, u32> =
        serde_json::from_str(vocab_json).map_err(|e| format!("vocab.json: {e}"))?;
    let vocab: Vocab = vocab.into_iter().collect();
    let mut merges: Merges = Vec::new();
    for (n, line) in merges_txt.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if (n == 0 && line.starts_with("#version")) || line.is_empty() {
            continue;
        }
        let (a, b) = line
            .split_once(' ')
            .filter(|(_, b)| !b.contains(' '))
            .ok_or_else(|| format!("merges.txt line {} is not two tokens: {line:?}", n + 1))?;
        for t in [a, b] {
            if !vocab.contains_key(t) {
                return Err(format!(
                    "merges.txt line {}: {t:?} is not in vocab.json",
                    n + 1
                ));
            }
        }
        merges.push((a.to_string(), b.to_string()));
    }
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| format!("vocab.json and merges.txt do not make a BPE: {e}"))?;
    let mut tok = Tokenizer::new(bpe);
    tok.with_normalizer(Some(NFC));
    let split = Split::new(
        SplitPattern::Regex(SPLIT_PATTERN.into()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .map_err(|e| format!("the split pattern: {e}"))?;
    tok.with_pre_tokenizer(Some(Sequence::new(vec![
        split.into(),
        ByteLevel::new(false, false, false).into(),
    ])));
    tok.with_decoder(Some(tokenizers::decoders::byte_level::ByteLevel::default()));
    let added = config["added_tokens_decoder"]
        .as_object()
        .ok_or("tokenizer_config.json has no added_tokens_decoder")?;
    let mut added: Vec<(u32, AddedToken)> = added
        .iter()
        .map(|(id, t)| {
            let id: u32 = id
                .parse()
                .map_err(|_| format!("tokenizer_config.json: added token id {id:?}"))?;
            let content = t["content"]
                .as_str()
                .ok_or_else(|| format!("tokenizer_config.json: added token {id} has no content"))?;
            let flag = |k: &str| t[k].as_bool().unwrap_or(false);
            let token = AddedToken::from(content, flag("special"))
                .normalized(flag("normalized"))
                .lstrip(flag("lstrip"))
                .rstrip(flag("rstrip"))
                .single_word(flag("single_word"));
            Ok((id, token))
        })
        .collect::<Result<_, String>>()?;
    added.sort_by_key(|(id, _)| *id);
    for (id, token) in &added {
        tok.add_tokens(std::slice::from_ref(token));
        let got = tok.token_to_id(&token.content);
        if got != Some(*id) {
            return Err(format!(
                "tokenizer_config.json: added token {:?} should be id {id} but the vocabulary gives it {got:?}",
                token.content
            ));
        }
    }
    tok.to_string(false)
        .map_err(|e| format!("serialising the tokenizer: {e}"))
}

/// The text tokenizer a model file carries.
pub struct TextTokenizer(Tokenizer);

impl TextTokenizer {
    /// Reads `tokenizer.json` text.
    pub fn from_json(json: &str) -> Result<Self, String> {
        Tokenizer::from_str(json)
            .map(TextTokenizer)
            .map_err(|e| format!("the tokenizer in the file is not valid: {e}"))
    }

    /// The ids of `text`, added tokens (`<|im_start|>`) matched, no special tokens added.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        self.0
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| format!("tokenizing the text failed: {e}"))
    }

    /// Rows of the text embedding the ids may index.
    pub fn vocab_size(&self) -> usize {
        self.0.get_vocab_size(true)
    }
}
