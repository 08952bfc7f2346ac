//! Kokoro-82M text to speech (StyleTTS 2 with an iSTFTNet decoder) on ggml.

pub mod adain;
