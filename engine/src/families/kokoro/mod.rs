//! Kokoro-82M text to speech (StyleTTS 2 with an iSTFTNet decoder) on ggml.

pub mod adain;
pub mod decoder;
pub mod generator;
pub mod istft;
pub mod source;
