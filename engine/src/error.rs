//! The engine's error type: every failure names the thing and, for user errors, the remedy.
//!
//! Errors speak the engine's terms: a parameter of an engine call is written
//! `parameter 'NAME'` with NAME one of [`PARAMETERS`], never as a CLI flag. A front end
//! writes each in its own terms with [`EngineError::message_in`] (or
//! [`spell_parameters`] for a message it holds as text): the CLI as its flag
//! (`--max-audio-s`), the server as its request field or server.json key.

use std::path::PathBuf;

/// Everything the engine can fail with. [`EngineError::is_user_error`] tells the front
/// ends which failures are bad input (exit code 2) and which are internal (exit code 1).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A file could not be read.
    #[error("cannot read '{path}': {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// An output file could not be written; a full disk or a folder that may not be
    /// written says so and what to do.
    #[error("cannot write '{path}': {source}{}", write_remedy(source))]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The audio input is not decodable audio.
    #[error("cannot decode audio '{path}': {reason} (supported: WAV in PCM, float, mu-law, A-law or ADPCM; FLAC; MP3; AAC in MP4/M4A or ADTS; Vorbis or Opus in Ogg or WebM)")]
    Audio {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The model file is truncated, corrupt or of the wrong kind.
    #[error("invalid model file '{path}': {reason}")]
    Model {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// No family of that name is known to this build.
    #[error("unknown model family '{family}' (known: {known})")]
    UnknownFamily {
        /// The requested family.
        family: String,
        /// Families this build has.
        known: String,
    },
    /// The family does not do the requested task.
    #[error("family '{family}' does not support task '{task}' (it does: {supported})")]
    WrongTask {
        /// The family.
        family: String,
        /// The requested task.
        task: String,
        /// The tasks it supports.
        supported: String,
    },
    /// The model spec for a family could not be found anywhere.
    #[error("model spec not found for family '{family}' (searched: {searched}). Remedies: set parameter 'model_spec_override' to a spec file or folder, use a GGUF converted by audiocpp_cli (it embeds the spec), use a build with the `deployment` feature (specs compiled in), or put model_specs/{family}.json next to the model or in a parent of the working directory")]
    SpecNotFound {
        /// The family.
        family: String,
        /// Every place looked at, in order.
        searched: String,
    },
    /// A model spec exists but is malformed.
    #[error("invalid model spec '{origin}': {reason}")]
    BadSpec {
        /// Where the spec came from.
        origin: String,
        /// What is wrong.
        reason: String,
    },
    /// The requested backend is not compiled into (or loadable by) this build.
    #[error("{requested} backend requested but it is not included in this build (available: {available})")]
    BackendUnavailable {
        /// The backend asked for, as users spell it (`HIP`, `CUDA`...).
        requested: String,
        /// Backends this build has.
        available: String,
    },
    /// The backend's library sits next to the executable but the OS could not load it
    /// (a library it imports is missing): the fix is to complete the folder, not another
    /// build.
    #[error("{requested} backend library {file} is next to the executable but could not be loaded{reason}; {advice}")]
    BackendNotLoadable {
        /// The backend asked for.
        requested: String,
        /// The library's file name (`ggml-hip.dll`).
        file: String,
        /// The loader's reason in parentheses with a leading space, or empty.
        reason: String,
        /// What to do.
        advice: String,
    },
    /// The backend is built in but no device of that kind was found.
    #[error("{requested} backend is included in this build but no {requested} device was found ({detail}); set parameter 'backend' to cpu, or list the devices this build sees")]
    NoDevice {
        /// The backend asked for.
        requested: String,
        /// Why (driver, runtime library).
        detail: String,
    },
    /// The GPU is there, but the package has no matrix-product kernels for its
    /// architecture ([`crate::kernel_guard`]): one line naming the architecture, the
    /// package and what to do.
    #[error("{0}")]
    GpuNotCovered(String),
    /// An invalid parameter value.
    #[error("{0}")]
    Usage(String),
    /// A failure inside ggml.
    #[error(transparent)]
    Ggml(#[from] crate::ggml::GgmlError),
}

impl EngineError {
    /// True for failures caused by the user's input (files, flags, environment), which
    /// front ends report with exit code 2.
    pub fn is_user_error(&self) -> bool {
        !matches!(self, EngineError::Ggml(_))
    }
}

/// What to do about a write error, after its OS message: room on a full disk, another
/// folder for one that may not be written.
fn write_remedy(source: &std::io::Error) -> &'static str {
    match source.kind() {
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
            "; no space left on device: free space on that disk, or write the output to another one"
        }
        std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem => {
            " (give a path in a folder you can write to)"
        }
        _ => "",
    }
}

impl EngineError {
    /// The message with every `parameter 'NAME'` written as `spell` names it (the front
    /// end's flag or field); a name `spell` does not know stays as it is.
    pub fn message_in(&self, spell: &dyn Fn(&str) -> Option<String>) -> String {
        spell_parameters(&self.to_string(), spell)
    }
}

/// The parameters of the engine's calls, by the names errors give them.
pub const PARAMETERS: &[&str] = &[
    "family",
    "model",
    "audio",
    "backend",
    "device",
    "threads",
    "model_spec_override",
    "quantize",
    "voices",
    "vocab",
    "lexicons",
    "language",
    "temperatures",
    "max_audio_s",
    "min_sample_rate_hz",
    "threshold",
    "min_speech_duration_ms",
    "min_silence_duration_ms",
    "speech_pad_ms",
    "max_speech_duration_s",
    "input",
    "voice",
    "speed",
    "max_speech_s",
    "instructions",
    "temperature",
    "seed",
    "max_frames",
];

/// Rewrites each `parameter 'NAME'` (NAME in [`PARAMETERS`]) of `message` as `spell`
/// names it; names it does not know, and any other text, stay as they are.
pub fn spell_parameters(message: &str, spell: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("parameter '") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "parameter '".len()..];
        let spelled = after.find('\'').and_then(|end| {
            let name = &after[..end];
            PARAMETERS
                .contains(&name)
                .then(|| spell(name))
                .flatten()
                .map(|s| (s, end))
        });
        match spelled {
            Some((s, end)) => {
                out.push_str(&s);
                rest = &after[end + 1..];
            }
            None => {
                out.push_str("parameter '");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The parameters `message` names (`parameter 'NAME'`, NAME in [`PARAMETERS`]), in
/// order: a front end can point at the first (the server's `param`).
pub fn parameters_named(message: &str) -> Vec<&'static str> {
    message
        .split("parameter '")
        .skip(1)
        .filter_map(|rest| {
            let name = &rest[..rest.find('\'')?];
            PARAMETERS.iter().copied().find(|p| *p == name)
        })
        .collect()
}

/// Where the engine's warnings go: standard error, through the front end's spelling of
/// parameters once [`set_warning_spelling`] named one.
pub fn warn(message: &str) {
    let spelled = match WARNING_SPELLING.get() {
        Some(spell) => spell_parameters(message, spell),
        None => message.to_string(),
    };
    eprintln!("warning: {spelled}");
}

/// Sets how the engine's warnings ([`warn`]) spell parameters, once per process (the
/// front end's flags or config keys); a second call is ignored.
pub fn set_warning_spelling(spell: fn(&str) -> Option<String>) {
    let _ = WARNING_SPELLING.set(Box::new(spell));
}

/// The front end's spelling of parameters in warnings.
type Spelling = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// See [`set_warning_spelling`].
static WARNING_SPELLING: std::sync::OnceLock<Spelling> = std::sync::OnceLock::new();

/// Engine result.
pub type Result<T> = std::result::Result<T, EngineError>;

#[cfg(test)]
mod tests {
    use super::*;

    fn flag(name: &str) -> Option<String> {
        (name != "voice").then(|| format!("--{}", name.replace('_', "-")))
    }

    #[test]
    fn parameters_are_spelled_by_the_front_end() {
        assert_eq!(
            spell_parameters(
                "parameter 'max_audio_s' is 0; raise parameter 'max_audio_s'",
                &flag
            ),
            "--max-audio-s is 0; raise --max-audio-s"
        );
        assert_eq!(
            spell_parameters(
                "parameter 'voice' and parameter 'nope' and parameter '",
                &flag
            ),
            "parameter 'voice' and parameter 'nope' and parameter '"
        );
        assert_eq!(
            parameters_named("parameter 'voice' or parameter 'x' or parameter 'speed'"),
            ["voice", "speed"]
        );
        let e = EngineError::Usage("parameter 'threads' 9 is too many".into());
        assert_eq!(e.to_string(), "parameter 'threads' 9 is too many");
        assert_eq!(e.message_in(&flag), "--threads 9 is too many");
    }
}
