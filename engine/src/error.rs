//! The engine's error type: every failure names the thing and, for user errors, the remedy.

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
    /// An output file could not be written.
    #[error("cannot write '{path}': {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The audio input is not decodable audio.
    #[error("cannot decode audio '{path}': {reason} (supported: WAV 8/16/24/32-bit PCM or float, FLAC, MP3)")]
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
    #[error("model spec not found for family '{family}' (searched: {searched}). Remedies: pass --model-spec-override FILE_OR_DIR, use a GGUF converted by audiocpp_cli (it embeds the spec), use a build with the `deployment` feature (specs compiled in), or put model_specs/{family}.json next to the model or in a parent of the working directory")]
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
    /// The backend is built in but no device of that kind was found.
    #[error("{requested} backend is included in this build but no {requested} device was found ({detail}); use --backend cpu or --list-devices")]
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

/// Engine result.
pub type Result<T> = std::result::Result<T, EngineError>;
