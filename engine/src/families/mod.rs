//! Model families, one module each, and their registry: what each family is
//! ([`LoaderInfo`], which `--list-loaders` prints), which legacy containers it reads
//! ([`LEGACY_FORMATS`]), and what it loads for the text-to-speech task ([`tts_loader`]).
//! A new family is a module here, its lines in these tables and a model spec.
//!
//! The test-only family [`test_tone`] is compiled into this crate's own tests and, through
//! the cargo feature `test-families`, into the CLI's and server's tests (their
//! dev-dependency turns it on); release and `dist` builds never carry it, and a
//! `deployment` build with it does not compile.

#[cfg(all(feature = "deployment", feature = "test-families"))]
compile_error!(
    "the test-only families (feature `test-families`) must not be in a deployment build"
);

pub mod kokoro;
pub mod silero_vad;
#[cfg(any(test, feature = "test-families"))]
pub mod test_tone;
pub mod whisper;

use serde::Serialize;

use crate::backend::Runtime;
use crate::model_file::LegacyContents;
use crate::spec::ModelSpec;
use crate::tasks::Synthesizer;

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
    kokoro::INFO,
];

/// The loader of a family, or an error listing the known ones.
pub fn find(family: &str) -> crate::error::Result<&'static LoaderInfo> {
    all_loaders().find(|l| l.family == family).ok_or_else(|| {
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

/// A legacy (pre-GGUF) container a family reads: its first four bytes and its reader.
pub struct LegacyFormat {
    /// The container's magic.
    pub magic: [u8; 4],
    /// The family whose files use it.
    pub family: &'static str,
    /// Parses the whole file (the magic included), or says why not.
    pub read: fn(&[u8]) -> std::result::Result<LegacyContents, String>,
}

/// Every legacy container this build reads; [`crate::model_file::read`] picks the
/// reader by magic, knowing no family itself.
pub const LEGACY_FORMATS: &[LegacyFormat] = &[LegacyFormat {
    magic: *b"lmgg",
    family: "silero_vad",
    read: silero_vad::parse_legacy,
}];

/// The legacy container whose magic `bytes` start with.
pub fn legacy_format(bytes: &[u8]) -> Option<&'static LegacyFormat> {
    LEGACY_FORMATS
        .iter()
        .find(|f| bytes.get(..4) == Some(&f.magic[..]))
}

/// Loads a family's speech synthesizer from a read model file and its spec.
pub type TtsLoader = fn(
    &crate::model_file::ModelFile,
    &ModelSpec,
    Runtime,
) -> crate::error::Result<Box<dyn Synthesizer>>;

/// The text-to-speech loader of `family`, if it has one (the shipped families', then in
/// test builds the test-only ones').
pub fn tts_loader(family: &str) -> Option<TtsLoader> {
    TTS_LOADERS
        .iter()
        .chain(TEST_TTS_LOADERS)
        .find(|(f, _)| *f == family)
        .map(|(_, load)| *load)
}

/// The shipped families that speak, with their loaders.
const TTS_LOADERS: &[(&str, TtsLoader)] = &[(kokoro::INFO.family, kokoro::load)];

/// The test-only families that speak (test builds only).
#[cfg(any(test, feature = "test-families"))]
const TEST_TTS_LOADERS: &[(&str, TtsLoader)] = &[(test_tone::INFO.family, test_tone::load)];
/// No test-only family outside test builds.
#[cfg(not(any(test, feature = "test-families")))]
const TEST_TTS_LOADERS: &[(&str, TtsLoader)] = &[];

/// The test-only families (test builds only).
#[cfg(any(test, feature = "test-families"))]
const TEST_ONLY: &[LoaderInfo] = &[test_tone::INFO];
/// No test-only family outside test builds.
#[cfg(not(any(test, feature = "test-families")))]
const TEST_ONLY: &[LoaderInfo] = &[];

/// Every family this build loads: [`LOADERS`] and, in test builds, the test-only
/// families (what `--list-loaders` prints, so a build's listing shows whether it
/// carries them).
pub fn all_loaders() -> impl Iterator<Item = &'static LoaderInfo> {
    LOADERS.iter().chain(TEST_ONLY)
}
