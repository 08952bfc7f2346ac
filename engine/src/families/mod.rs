//! Model families, one module each, and the registry `--list-loaders` prints.

pub mod silero_vad;
pub mod whisper;

use serde::Serialize;

/// What a family loader accepts, for `--list-loaders`.
#[derive(Debug, Clone, Serialize)]
pub struct LoaderInfo {
    /// Family name (`--family`).
    pub family: &'static str,
    /// Tasks it runs (`--task`).
    pub tasks: &'static [&'static str],
    /// Weight formats it reads.
    pub formats: &'static [&'static str],
    /// One line about it.
    pub description: &'static str,
}

/// Every family this build can load.
pub const LOADERS: &[LoaderInfo] = &[
    LoaderInfo {
        family: "silero_vad",
        tasks: &["vad", "convert"],
        formats: &["gguf", "ggml-silero (whisper.cpp .bin)"],
        description: "Silero VAD v5/v6, 16 kHz speech probabilities and segments",
    },
    LoaderInfo {
        family: "whisper",
        tasks: &["asr", "convert"],
        formats: &[
            "gguf",
            "ctranslate2 (model.bin + tokenizer.json [+ config.json]; convert only)",
        ],
        description:
            "OpenAI Whisper speech recognition (tiny.en tested), greedy decoding without timestamps",
    },
];

/// The loader of a family, or an error listing the known ones.
pub fn find(family: &str) -> crate::error::Result<&'static LoaderInfo> {
    LOADERS.iter().find(|l| l.family == family).ok_or_else(|| {
        crate::error::EngineError::UnknownFamily {
            family: family.to_string(),
            known: LOADERS
                .iter()
                .map(|l| l.family)
                .collect::<Vec<_>>()
                .join(", "),
        }
    })
}
