//! A cloned voice as a Base model reuses it: the reference's x-vector, and for in-context
//! cloning its codes and transcript (the official `VoiceClonePromptItem`), saved as a
//! small JSON file so the encoders do not run again. The file names the model shape it
//! was made with; another shape refuses it.
//!
//! Upstream: `qwen-tts==0.1.1` qwen_tts/inference/qwen3_tts_model.py L40-L51
//! (`VoiceClonePromptItem`), L401-L456 (`create_voice_clone_prompt`).

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::tts::MAX_VOICE_FILE_BYTES as MAX_VOICE_BYTES;

/// What the file says it is.
const FORMAT: &str = "audiocpp-voice";
/// Its version.
const VERSION: u32 = 1;

/// A reusable cloned voice.
#[derive(Debug, Clone, PartialEq)]
pub struct ClonePrompt {
    /// The speaker encoder's x-vector (the talker's width).
    pub x_vector: Vec<f32>,
    /// The reference's frames of codes, for in-context cloning; `None` clones from the
    /// x-vector alone.
    pub codes: Option<Vec<Vec<u32>>>,
    /// The reference's transcript (in-context cloning).
    pub ref_text: Option<String>,
}

/// The model shape a voice fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    /// Width of the x-vector.
    pub x_vector: usize,
    /// Codes per frame.
    pub code_groups: usize,
    /// Codes per codebook.
    pub codebook_size: usize,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    format: String,
    version: u32,
    family: String,
    shape: Shape,
    mode: String,
    ref_text: Option<String>,
    x_vector: Vec<f32>,
    ref_codes: Option<Vec<Vec<u32>>>,
}

impl ClonePrompt {
    /// Whether it clones in context (with the reference's codes and text).
    pub fn in_context(&self) -> bool {
        self.codes.is_some()
    }

    /// The voice file of this voice, made for `shape`.
    pub fn to_bytes(&self, shape: Shape) -> Vec<u8> {
        let file = File {
            format: FORMAT.into(),
            version: VERSION,
            family: "qwen3_tts".into(),
            shape,
            mode: if self.in_context() {
                "in_context"
            } else {
                "x_vector_only"
            }
            .into(),
            ref_text: self.ref_text.clone(),
            x_vector: self.x_vector.clone(),
            ref_codes: self.codes.clone(),
        };
        serde_json::to_vec(&file).expect("plain data serializes")
    }

    /// Reads a voice file and checks it against the model's `shape`; errors say what
    /// is wrong and what to do.
    pub fn from_bytes(bytes: &[u8], shape: Shape) -> Result<Self> {
        let bad = |why: String| {
            EngineError::Usage(format!(
                "the voice file {why}; make the voice again with this model (--ref-audio, --ref-text, --voice-out)"
            ))
        };
        if bytes.len() > MAX_VOICE_BYTES {
            return Err(bad(format!(
                "is {} bytes, over the {MAX_VOICE_BYTES} a voice takes",
                bytes.len()
            )));
        }
        let f: File =
            serde_json::from_slice(bytes).map_err(|e| bad(format!("is not a voice file ({e})")))?;
        if f.format != FORMAT || f.version != VERSION || f.family != "qwen3_tts" {
            return Err(bad(format!(
                "is '{}' version {} of family '{}', not a qwen3_tts voice of version {VERSION}",
                f.format, f.version, f.family
            )));
        }
        if f.shape != shape {
            return Err(bad(format!(
                "was made for a model of shape {:?}, this one is {shape:?}",
                f.shape
            )));
        }
        if f.x_vector.len() != shape.x_vector || f.x_vector.iter().any(|v| !v.is_finite()) {
            return Err(bad(format!(
                "holds an x-vector of {} values (finite: {}), the model takes {}",
                f.x_vector.len(),
                f.x_vector.iter().all(|v| v.is_finite()),
                shape.x_vector
            )));
        }
        let in_context = match f.mode.as_str() {
            "in_context" => true,
            "x_vector_only" => false,
            other => return Err(bad(format!("has mode '{other}'"))),
        };
        let codes = match (in_context, f.ref_codes, &f.ref_text) {
            (false, _, _) => None,
            (true, Some(codes), Some(text)) if !codes.is_empty() && !text.trim().is_empty() => {
                let fits = codes.iter().all(|frame| {
                    frame.len() == shape.code_groups
                        && frame.iter().all(|&c| (c as usize) < shape.codebook_size)
                });
                if !fits {
                    return Err(bad(format!(
                        "holds reference codes that are not frames of {} codes below {}",
                        shape.code_groups, shape.codebook_size
                    )));
                }
                Some(codes)
            }
            (true, _, _) => {
                return Err(bad(
                    "clones in context but lacks the reference's codes or transcript".into(),
                ))
            }
        };
        Ok(ClonePrompt {
            x_vector: f.x_vector,
            codes,
            ref_text: f.ref_text,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: Shape = Shape {
        x_vector: 2,
        code_groups: 2,
        codebook_size: 4,
    };

    #[test]
    fn a_voice_reads_back_and_refuses_another_shape() {
        let v = ClonePrompt {
            x_vector: vec![0.25, -1.5e-7],
            codes: Some(vec![vec![0, 3], vec![1, 2]]),
            ref_text: Some("Hello.".into()),
        };
        let bytes = v.to_bytes(SHAPE);
        assert_eq!(ClonePrompt::from_bytes(&bytes, SHAPE).unwrap(), v);
        let other = Shape {
            x_vector: 3,
            ..SHAPE
        };
        assert!(ClonePrompt::from_bytes(&bytes, other).is_err());
        let text = String::from_utf8(bytes).unwrap();
        for broken in [
            text.replace("[0,3]", "[0,4]"),
            text.replace("\"Hello.\"", "\" \""),
            text.replace("0.25", "1e99"),
            text[..text.len() / 2].to_string(),
        ] {
            let e = ClonePrompt::from_bytes(broken.as_bytes(), SHAPE).unwrap_err();
            assert!(e.to_string().contains("voice file"), "{e}");
        }
    }
}
