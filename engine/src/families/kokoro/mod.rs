//! Kokoro-82M text to speech. This branch carries the converter (`convert`) and the
//! ONNX reader it uses (`onnx`); the synthesizer is kfront's and kdec's modules.

pub mod convert;
pub mod onnx;
