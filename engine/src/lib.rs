//! audiocpp engine: audio-model inference (VAD today; ASR and TTS families next) on ggml
//! with CPU, CUDA and HIP/ROCm backends.
//!
//! Front ends (the CLI and the server) call the task functions in [`tasks`]; model code
//! lives in [`families`] and asks [`layers`] for its layers; all `unsafe` is confined to
//! [`ggml`] and [`cpu_kernels`].
#![deny(unsafe_code, unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod audio;
pub mod backend;
pub mod cpu_kernels;
pub mod error;
pub mod families;
pub mod ggml;
pub mod gguf_check;
pub mod kernel_guard;
pub mod layers;
pub mod model_file;
pub mod output;
pub mod spec;
pub mod tasks;
pub mod vad;
pub mod weights;

pub use error::{EngineError, Result};

/// The engine version (also the CLI's `--version`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
