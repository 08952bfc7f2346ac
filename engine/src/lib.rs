//! audiocpp engine: audio-model inference (voice activity detection, speech recognition,
//! speech synthesis) on ggml with CPU, CUDA and HIP/ROCm backends.
//!
//! Front ends (the CLI and the server) call the task functions in [`tasks`], which speak
//! the family-neutral types of [`vad`] and [`asr`] and write through [`output`]; model code lives in
//! [`families`] and asks [`layers`] for its layers; all `unsafe` is confined to
//! [`ggml`] and [`cpu_kernels`].
#![deny(unsafe_code, unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod asr;
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
