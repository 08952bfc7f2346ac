//! Whisper's tokenizer, decode side: GPT-2 byte-level BPE token strings (from the
//! Hugging Face `tokenizer.json`) mapped back to bytes, plus the special tokens
//! (`<|endoftext|>`, `<|startoftranscript|>`, languages, tasks, timestamps).

use std::collections::HashMap;

/// GPT-2's byte-to-character table: printable Latin-1 bytes map to themselves, the
/// rest to code points from 256 up, in byte order.
///
/// Upstream: `openai/gpt-2@9b63575ef427` src/encoder.py L8-L28 (`bytes_to_unicode`).
fn byte_to_char() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        table[b as usize] = if printable {
            b as char
        } else {
            let c = char::from_u32(next).expect("valid code point");
            next += 1;
            c
        };
    }
    table
}

/// Builds the id-ordered token list of a Whisper `tokenizer.json` (BPE vocab plus
/// added tokens), extended to `n_vocab` with the timestamp tokens `<|0.00|>`...
///
/// Upstream: the special-token order of `openai/whisper@v20250625` whisper/tokenizer.py
/// L330-L363 (`get_encoding`; timestamps at L350).
pub fn vocab_from_tokenizer_json(json: &str, n_vocab: usize) -> Result<Vec<String>, String> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("tokenizer.json is not JSON: {e}"))?;
    let vocab = v["model"]["vocab"]
        .as_object()
        .ok_or("tokenizer.json has no model.vocab (expected a byte-level BPE tokenizer)")?;
    let mut tokens: Vec<Option<String>> = vec![None; n_vocab];
    let mut put = |tok: &str, id: u64| -> Result<(), String> {
        let slot = tokens
            .get_mut(id as usize)
            .ok_or_else(|| format!("token '{tok}' has id {id}, beyond the model's {n_vocab}"))?;
        *slot = Some(tok.to_string());
        Ok(())
    };
    for (tok, id) in vocab {
        put(tok, id.as_u64().ok_or("a vocab id is not an integer")?)?;
    }
    for added in v["added_tokens"].as_array().into_iter().flatten() {
        let tok = added["content"]
            .as_str()
            .ok_or("an added token has no content")?;
        put(tok, added["id"].as_u64().ok_or("an added token has no id")?)?;
    }
    let last = tokens
        .iter()
        .rposition(Option::is_some)
        .ok_or("tokenizer.json has no tokens")?;
    let mut out = Vec::with_capacity(n_vocab);
    for (id, t) in tokens.into_iter().enumerate() {
        match t {
            Some(t) => out.push(t),
            None if id > last => out.push(format!("<|{:.2}|>", (id - last - 1) as f64 * 0.02)),
            None => return Err(format!("tokenizer.json has no token with id {id}")),
        }
    }
    Ok(out)
}

/// Token ids with a special role.
///
/// Upstream: `openai/whisper@v20250625` whisper/tokenizer.py L175-L209 (`Tokenizer`'s
/// special-token properties; `<|nospeech|>` there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecialTokens {
    /// `<|endoftext|>`.
    pub eot: u32,
    /// `<|startoftranscript|>`.
    pub sot: u32,
    /// `<|translate|>`.
    pub translate: u32,
    /// `<|transcribe|>`.
    pub transcribe: u32,
    /// `<|startoflm|>`.
    pub sot_lm: u32,
    /// `<|startofprev|>`.
    pub sot_prev: u32,
    /// `<|nocaptions|>` (the no-speech token).
    pub no_speech: u32,
    /// `<|notimestamps|>`.
    pub no_timestamps: u32,
    /// The first timestamp token, `<|0.00|>`.
    pub timestamp_begin: u32,
}

/// Decodes token ids to text.
///
/// Upstream: `openai/whisper@v20250625` whisper/tokenizer.py L131-L159 (`Tokenizer` and its
/// `__post_init__`).
#[derive(Debug, Clone)]
pub struct Tokenizer {
    tokens: Vec<String>,
    ids: HashMap<String, u32>,
    char_to_byte: HashMap<char, u8>,
    specials: SpecialTokens,
}

impl Tokenizer {
    /// A tokenizer over the id-ordered token strings; fails when a special token is absent.
    pub fn new(tokens: Vec<String>) -> Result<Self, String> {
        let ids: HashMap<String, u32> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let id = |s: &str| {
            ids.get(s).copied().ok_or_else(|| {
                format!("the vocabulary has no {s} token (not a Whisper tokenizer?)")
            })
        };
        let specials = SpecialTokens {
            eot: id("<|endoftext|>")?,
            sot: id("<|startoftranscript|>")?,
            translate: id("<|translate|>")?,
            transcribe: id("<|transcribe|>")?,
            sot_lm: id("<|startoflm|>")?,
            sot_prev: id("<|startofprev|>")?,
            no_speech: id("<|nocaptions|>").or_else(|_| id("<|nospeech|>"))?,
            no_timestamps: id("<|notimestamps|>")?,
            timestamp_begin: id("<|0.00|>")?,
        };
        let char_to_byte = byte_to_char()
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect();
        Ok(Tokenizer {
            tokens,
            ids,
            char_to_byte,
            specials,
        })
    }

    /// The language codes a multilingual model can be told or can detect, with their
    /// token ids: the `<|xx|>` tokens between `<|startoftranscript|>` and `<|translate|>`,
    /// in vocabulary order (English first).
    ///
    /// Upstream: `openai/whisper@v20250625` whisper/tokenizer.py L225-L235
    /// (`Tokenizer.all_language_tokens`, `all_language_codes`).
    pub fn languages(&self) -> Vec<(String, u32)> {
        let s = &self.specials;
        (s.sot + 1..s.translate)
            .filter_map(|id| {
                let t = self.tokens.get(id as usize)?;
                let code = t.strip_prefix("<|")?.strip_suffix("|>")?;
                Some((code.to_string(), id))
            })
            .collect()
    }

    /// The special token ids.
    pub fn specials(&self) -> &SpecialTokens {
        &self.specials
    }

    /// The id of a token string (e.g. `<|en|>`).
    pub fn id(&self, token: &str) -> Option<u32> {
        self.ids.get(token).copied()
    }

    /// Vocabulary size.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// True for an empty vocabulary (never for a loaded model).
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Text of the ordinary (non-special) tokens among `ids`.
    ///
    /// Upstream: `openai/whisper@v20250625` whisper/tokenizer.py L164-L166
    /// (`Tokenizer.decode`, which drops only the timestamp tokens).
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            if id >= self.specials.eot {
                continue;
            }
            if let Some(tok) = self.tokens.get(id as usize) {
                bytes.extend(tok.chars().filter_map(|c| self.char_to_byte.get(&c)));
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_table_is_a_bijection_with_gpt2_spacing() {
        let t = byte_to_char();
        let set: std::collections::HashSet<char> = t.iter().copied().collect();
        assert_eq!(set.len(), 256);
        assert_eq!(t[b' ' as usize], '\u{120}');
        assert_eq!(t[b'\n' as usize], '\u{10a}');
        assert_eq!(t[b'A' as usize], 'A');
    }

    #[test]
    fn decodes_byte_level_tokens_and_skips_specials() {
        let json = r#"{"model":{"vocab":{"Ġhello":0,"Ġw":1,"orld":2,".":3}},
            "added_tokens":[{"id":4,"content":"<|endoftext|>"},{"id":5,"content":"<|startoftranscript|>"},
            {"id":6,"content":"<|translate|>"},{"id":7,"content":"<|transcribe|>"},
            {"id":8,"content":"<|startoflm|>"},{"id":9,"content":"<|startofprev|>"},
            {"id":10,"content":"<|nocaptions|>"},{"id":11,"content":"<|notimestamps|>"}]}"#;
        let vocab = vocab_from_tokenizer_json(json, 14).unwrap();
        assert_eq!(vocab[12], "<|0.00|>");
        assert_eq!(vocab[13], "<|0.02|>");
        let t = Tokenizer::new(vocab).unwrap();
        assert_eq!(t.specials().timestamp_begin, 12);
        assert_eq!(t.decode(&[5, 0, 1, 2, 3, 4]), " hello world.");
        assert!(vocab_from_tokenizer_json(json, 5).is_err());
        assert!(vocab_from_tokenizer_json("{}", 5).is_err());
    }

    #[test]
    fn language_tokens_are_those_between_sot_and_translate() {
        let json = r#"{"model":{"vocab":{"a":0}},
            "added_tokens":[{"id":1,"content":"<|endoftext|>"},{"id":2,"content":"<|startoftranscript|>"},
            {"id":3,"content":"<|en|>"},{"id":4,"content":"<|de|>"},
            {"id":5,"content":"<|translate|>"},{"id":6,"content":"<|transcribe|>"},
            {"id":7,"content":"<|startoflm|>"},{"id":8,"content":"<|startofprev|>"},
            {"id":9,"content":"<|nospeech|>"},{"id":10,"content":"<|notimestamps|>"}]}"#;
        let t = Tokenizer::new(vocab_from_tokenizer_json(json, 12).unwrap()).unwrap();
        assert_eq!(
            t.languages(),
            [("en".to_string(), 3), ("de".to_string(), 4)]
        );
    }
}
