//! audiocpp engine: audio-model inference (voice activity detection, speech recognition,
//! speech synthesis) on ggml with CPU, CUDA and HIP/ROCm backends.
//!
//! Front ends (the CLI and the server) load models and convert them through [`tasks`],
//! run them through the task modules [`vad`], [`asr`] and [`tts`] (each holds its
//! contract with the families, its family-neutral code and its run methods on the one
//! loaded-model type, [`loaded::Loaded`]) and write through [`output`]. Model code lives in
//! [`families`], implements those contracts and asks [`layers`] for its layers; all
//! `unsafe` is confined to [`ggml`] and [`cpu_kernels`]. The modules form layers with no
//! import circle (`xtask/tests/tidy.rs` checks it): ggml and the kernels at the floor,
//! then the runtime, the contracts, the families, and [`tasks`] on top.
#![deny(unsafe_code, unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod asr;
pub mod audio;
mod audio_opus;
pub mod backend;
pub mod cpu_kernels;
pub mod dsp;
pub mod error;
pub mod families;
pub mod ggml;
pub mod gguf_check;
pub mod kernel_guard;
pub mod layers;
pub mod loaded;
pub mod model_file;
pub mod output;
pub mod sampling;
pub mod spec;
pub mod task;
pub mod tasks;
pub mod tts;
pub mod vad;
pub mod weights;

pub use error::{EngineError, Result};

/// The engine version (also the CLI's `--version`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
