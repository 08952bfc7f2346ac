//! Silero VAD v5/v6 on ggml.
//!
//! Per 512-sample window at 16 kHz the model sees the previous 64 samples as context
//! (zeros at the start), reflect-pads 64 samples on the right, takes a 4-frame STFT
//! (conv with the stored Fourier basis, magnitude), runs four conv+ReLU blocks, one LSTM
//! cell step (state carried across windows) and a sigmoid head. This is the official
//! model's streaming semantics (its ONNX export), which whisper.cpp's port simplifies.
//!
//! Everything that does not depend on the previous window is batched: the STFT and the
//! conv encoder run for a whole chunk of windows at once, the LSTM input projection is
//! one matrix product, and only the recurrence is unrolled step by step in the graph.
//!
//! Upstream: `snakers4/silero-vad@v6.2.1` src/silero_vad/tinygrad_model.py L4-L71
//! (`TinySileroVAD`, the one open definition of the model; the packaged models are
//! TorchScript and ONNX only) and the ggml port in `ggml-org/whisper.cpp@v1.9.3`
//! src/whisper.cpp L4543-L4677.

use std::path::Path;

use crate::backend::Runtime;
use crate::error::{EngineError, Result};
use crate::families::{Conversion, ConvertOptions, Family, LegacyFormat, LoaderInfo};
use crate::ggml::{self, Context, DType, GgufValue, HostTensor, Tensor};
use crate::model_file::{ByteReader, LegacyContents, ModelFile, ModelFormat};
use crate::spec::ModelSpec;
use crate::task::Task;
use crate::vad::{SpeechDetector, VadParams};
use crate::weights::{f32_tensor, WeightStore};

/// The family's registry entry: VAD, and conversion of whisper.cpp's `.bin` (or a GGUF)
/// to a GGUF with the spec embedded.
pub const FAMILY: Family = Family {
    info: LoaderInfo {
        family: "silero_vad",
        tasks: &[Task::Vad, Task::Convert],
        formats: &["gguf", "ggml-silero (whisper.cpp .bin)"],
        description: "Silero VAD v5/v6, 16 kHz speech probabilities and segments",
    },
    spec: Some(include_str!("../../../model_specs/silero_vad.json")),
    legacy: &[LegacyFormat {
        magic: *b"lmgg",
        read: parse_legacy,
    }],
    sources: &[],
    convert: Some(convert),
    vad: Some(load_detector),
    asr: None,
    tts: None,
};

/// The registry's VAD loader: [`SileroVad::load`].
fn load_detector(
    file: ModelFile,
    spec: &ModelSpec,
    runtime: Runtime,
) -> Result<Box<dyn SpeechDetector>> {
    Ok(Box::new(SileroVad::load(&file, spec, runtime)?))
}

/// The registry's converter: reads the `.bin` or GGUF, checks its tensors against the
/// spec and passes them on unchanged (no `quantize`, no further sources).
fn convert(
    model: &Path,
    spec_override: Option<&Path>,
    opts: &ConvertOptions,
) -> Result<Conversion> {
    let family = FAMILY.info.family;
    opts.only_sources(family, &[])?;
    if let Some(q) = &opts.quantize {
        return Err(EngineError::Usage(format!(
            "parameter 'quantize' '{q}' is not offered for family '{family}': its weights stay as they are"
        )));
    }
    let resolved = FAMILY.resolve_model(model, spec_override)?;
    check_tensors(&resolved.file, &resolved.spec)?;
    Ok(Conversion {
        spec: resolved.spec,
        source_format: resolved.file.format.to_string(),
        metadata: resolved.file.metadata,
        tensors: resolved.file.tensors,
    })
}

/// The spec's segmentation defaults (`defaults` of `model_specs/silero_vad.json`),
/// Silero's own where the spec gives none.
///
/// Upstream: `snakers4/silero-vad@v6.2.1` src/silero_vad/utils_vad.py L212-L227
/// (`get_speech_timestamps`); `ggml-org/whisper.cpp@v1.9.3` src/whisper.cpp L4462-L4472
/// (`whisper_vad_default_params`).
pub fn default_params(spec: &ModelSpec) -> VadParams {
    let d = VadParams::default();
    let ms = |key: &str, fallback: u32| spec.default_f64(key).map_or(fallback, |v| v as u32);
    VadParams {
        threshold: spec
            .default_f64("threshold")
            .map_or(d.threshold, |v| v as f32),
        neg_threshold: spec.default_f64("neg_threshold").map(|v| v as f32),
        min_speech_duration_ms: ms("min_speech_duration_ms", d.min_speech_duration_ms),
        min_silence_duration_ms: ms("min_silence_duration_ms", d.min_silence_duration_ms),
        speech_pad_ms: ms("speech_pad_ms", d.speech_pad_ms),
        max_speech_duration_s: spec.default_f64("max_speech_duration_s").map(|v| v as f32),
    }
}

/// Windows per graph: bounds memory on long audio and keeps graphs small.
const CHUNK_WINDOWS: usize = 256;
/// Upper bound of graph nodes per LSTM step (views, gates, head).
const NODES_PER_STEP: usize = 24;

/// Parses whisper.cpp's legacy Silero container (magic, model-type string, version,
/// hyper-parameters, then tensor records until EOF).
///
/// Upstream: `ggml-org/whisper.cpp@v1.9.3` src/whisper.cpp L4788-L4860 and L5015-L5095
/// (`whisper_vad_init_with_params`); the writer is models/convert-silero-vad-to-ggml.py
/// L31-L185.
pub fn parse_legacy(bytes: &[u8]) -> std::result::Result<LegacyContents, String> {
    let mut r = ByteReader::new(bytes, 4);
    let type_len = r.i32()?;
    if !(1..=64).contains(&type_len) {
        return Err(format!("legacy ggml header has an implausible model-type length {type_len}; only Silero VAD .bin files are supported in this format"));
    }
    let model_type = String::from_utf8_lossy(r.take(type_len as usize)?).into_owned();
    if !model_type.starts_with("silero") {
        return Err(format!(
            "legacy ggml model type '{model_type}' is not supported (expected silero-16k)"
        ));
    }
    let version = format!("{}.{}.{}", r.i32()?, r.i32()?, r.i32()?);
    let mut meta = vec![
        (
            "general.architecture".to_string(),
            GgufValue::Str("silero_vad".into()),
        ),
        (
            "silero.model_type".to_string(),
            GgufValue::Str(model_type.clone()),
        ),
        (
            "silero.version".to_string(),
            GgufValue::Str(version.clone()),
        ),
    ];
    let mut u32_meta = |key: &str, v: i32| -> std::result::Result<(), String> {
        if v < 0 {
            return Err(format!("header field {key} is negative ({v})"));
        }
        meta.push((format!("silero.{key}"), GgufValue::U32(v as u32)));
        Ok(())
    };
    u32_meta("window_samples", r.i32()?)?;
    u32_meta("context_samples", r.i32()?)?;
    let n_layers = r.i32()?;
    if !(1..=16).contains(&n_layers) {
        return Err(format!("header says {n_layers} encoder layers"));
    }
    u32_meta("encoder_layers", n_layers)?;
    for i in 0..n_layers {
        u32_meta(&format!("encoder.{i}.in_channels"), r.i32()?)?;
        u32_meta(&format!("encoder.{i}.out_channels"), r.i32()?)?;
        u32_meta(&format!("encoder.{i}.kernel_size"), r.i32()?)?;
    }
    u32_meta("lstm_input_size", r.i32()?)?;
    u32_meta("lstm_hidden_size", r.i32()?)?;
    u32_meta("final_conv_in", r.i32()?)?;
    u32_meta("final_conv_out", r.i32()?)?;

    let mut tensors = Vec::new();
    while !r.at_end() {
        let at = r.pos();
        let n_dims = r.i32()?;
        let name_len = r.i32()?;
        let type_id = r.i32()?;
        if !(0..=4).contains(&n_dims) || !(1..=256).contains(&name_len) {
            return Err(format!(
                "tensor record at offset {at} is corrupt (n_dims {n_dims}, name length {name_len})"
            ));
        }
        let dtype = DType::from_ggml_id(type_id as u32).ok_or_else(|| {
            format!("tensor record at offset {at} has unsupported ggml type {type_id}")
        })?;
        let mut ne = Vec::new();
        for _ in 0..n_dims {
            let d = r.i32()?;
            if d <= 0 {
                return Err(format!("tensor record at offset {at} has dimension {d}"));
            }
            ne.push(d as i64);
        }
        let name = String::from_utf8_lossy(r.take(name_len as usize)?).into_owned();
        let n: i64 = ne.iter().product();
        let data = r
            .take(n as usize * dtype.size())
            .map_err(|e| format!("tensor '{name}': {e}"))?
            .to_vec();
        tensors.push(HostTensor {
            name,
            dtype,
            ne,
            data,
        });
    }
    if tensors.is_empty() {
        return Err("the file has a header but no tensors (truncated?)".into());
    }
    Ok(LegacyContents {
        format: ModelFormat::GgmlLegacy {
            model_type,
            version,
        },
        metadata: meta,
        tensors,
    })
}

fn squeeze(ne: &[i64]) -> Vec<i64> {
    let mut v: Vec<i64> = ne.to_vec();
    while v.len() > 1 && v.last() == Some(&1) {
        v.pop();
    }
    if v.is_empty() {
        v.push(1);
    }
    v
}

/// Checks that the file has every tensor the spec lists, with the listed shape.
pub fn check_tensors(file: &ModelFile, spec: &ModelSpec) -> Result<()> {
    spec.check_tensors(file, &|_| 0)
}

/// Builds the 640-sample model inputs of every window: 64 samples of context (the end
/// of the previous window, zeros first), the 512-sample window (the last one
/// zero-padded), then 64 samples reflected from the window's end.
///
/// Upstream: `snakers4/silero-vad@v6.2.1` src/silero_vad/utils_vad.py L75-L78 and L87
/// (`OnnxWrapper`'s context), src/silero_vad/tinygrad_model.py L39-L48 (windows) and L58
/// (reflect pad).
pub fn frames(samples: &[f32], window: usize, context: usize) -> Vec<f32> {
    let n_windows = samples.len().div_ceil(window);
    let reflect = context;
    let frame_len = context + window + reflect;
    let mut out = Vec::with_capacity(n_windows * frame_len);
    let get = |i: isize| -> f32 {
        if i < 0 {
            0.0
        } else {
            samples.get(i as usize).copied().unwrap_or(0.0)
        }
    };
    for w in 0..n_windows {
        let start = (w * window) as isize - context as isize;
        let base = out.len();
        for j in 0..(context + window) {
            out.push(get(start + j as isize));
        }
        // reflect without repeating the edge: x[n-2], x[n-3], ...
        let input_len = context + window;
        for j in 0..reflect {
            out.push(out[base + input_len - 2 - j]);
        }
    }
    out
}

/// Loaded Silero weights on a device, ready to run.
///
/// Upstream: `snakers4/silero-vad@v6.2.1` src/silero_vad/tinygrad_model.py L13-L25
/// (`TinySileroVAD.__init__`); `ggml-org/whisper.cpp@v1.9.3` src/whisper.cpp L4369-L4422
/// (`whisper_vad_hparams`, `whisper_vad_model`).
pub struct SileroVad {
    weights: WeightStore,
    runtime: Runtime,
    window: usize,
    context: usize,
    hop: i32,
    strides: Vec<i32>,
    padding: i32,
    hidden: usize,
    sample_rate: u32,
    defaults: VadParams,
}

impl SpeechDetector for SileroVad {
    fn sample_rate(&self) -> u32 {
        self.sample_rate
    }

    fn window(&self) -> usize {
        self.window
    }

    fn device(&self) -> String {
        self.runtime.device().name.clone()
    }

    fn default_params(&self) -> VadParams {
        self.defaults.clone()
    }

    fn probabilities(&mut self, samples: &[f32]) -> Result<Vec<f32>> {
        SileroVad::probabilities(self, samples)
    }
}

/// Weight tensor names (ggml order shapes are in the spec).
///
/// Upstream: as `ggml-org/whisper.cpp@v1.9.3` models/convert-silero-vad-to-ggml.py L84-L107
/// names them.
const BASIS: &str = "_model.stft.forward_basis_buffer";
const W_IH: &str = "_model.decoder.rnn.weight_ih";
const W_HH: &str = "_model.decoder.rnn.weight_hh";
const B_IH: &str = "_model.decoder.rnn.bias_ih";
const B_HH: &str = "_model.decoder.rnn.bias_hh";
const HEAD_W: &str = "_model.decoder.decoder.2.weight";
const HEAD_B: &str = "_model.decoder.decoder.2.bias";

fn enc_w(i: usize) -> String {
    format!("_model.encoder.{i}.reparam_conv.weight")
}
fn enc_b(i: usize) -> String {
    format!("_model.encoder.{i}.reparam_conv.bias")
}

impl SileroVad {
    /// Checks the file against the spec and uploads the weights (as f32) to the device.
    pub fn load(file: &ModelFile, spec: &ModelSpec, runtime: Runtime) -> Result<Self> {
        check_tensors(file, spec)?;
        let window = spec.hparam_i64("window_samples")? as usize;
        let context = spec.hparam_i64("context_samples")? as usize;
        let hop = spec.hparam_i64("stft_hop")? as i32;
        let strides: Vec<i32> = spec
            .hparam_i64_list("encoder_strides")?
            .into_iter()
            .map(|s| s as i32)
            .collect();
        let padding = spec.hparam_i64("encoder_padding")? as i32;
        let hidden = spec
            .tensors
            .get(W_HH)
            .and_then(|s| s.first())
            .copied()
            .unwrap_or(128) as usize;

        let host = spec.tensors.iter().map(|(name, ne)| {
            let t = file.tensor(name).expect("checked above");
            Ok(f32_tensor(name.clone(), squeeze(ne), t.to_f32()))
        });
        let weights = WeightStore::upload(&file.path, host, &runtime)?;
        Ok(SileroVad {
            weights,
            runtime,
            window,
            context,
            hop,
            strides,
            padding,
            hidden,
            sample_rate: spec.sample_rate,
            defaults: default_params(spec),
        })
    }

    /// The runtime (device) the model runs on.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Samples per probability.
    pub fn window(&self) -> usize {
        self.window
    }

    fn weight(&self, name: &str) -> Tensor<'_> {
        self.weights
            .tensor(name)
            .expect("weights were created from the spec")
    }

    /// One speech probability per window of 16 kHz mono audio, with fresh state.
    ///
    /// Upstream: `snakers4/silero-vad@v6.2.1` src/silero_vad/utils_vad.py L314 and
    /// L324-L329 (`get_speech_timestamps`' window loop); `ggml-org/whisper.cpp@v1.9.3`
    /// src/whisper.cpp L5120-L5205 (`whisper_vad_detect_speech`).
    pub fn probabilities(&mut self, samples: &[f32]) -> Result<Vec<f32>> {
        let frames = frames(samples, self.window, self.context);
        let frame_len = self.context * 2 + self.window;
        let n_windows = frames.len() / frame_len;
        let mut probs = Vec::with_capacity(n_windows);
        let mut h = vec![0f32; self.hidden];
        let mut c = vec![0f32; self.hidden];
        let graph_size = CHUNK_WINDOWS * NODES_PER_STEP + 256;
        let mut sched = self.runtime.scheduler(graph_size)?;
        let threads = self.runtime.threads();
        for chunk in frames.chunks(CHUNK_WINDOWS * frame_len) {
            let n = chunk.len() / frame_len;
            self.runtime.set_threads(threads);
            let gates = self.encode(&mut sched, chunk, n, frame_len)?;
            // The recurrence is hundreds of tiny ops: one thread avoids a barrier per op,
            // which costs more than the ops (and stalls badly on a loaded machine).
            self.runtime.set_threads(1);
            let (p, h2, c2) = self.recur(&mut sched, &gates, n, &h, &c, graph_size)?;
            probs.extend(p);
            h = h2;
            c = c2;
        }
        self.runtime.set_threads(threads);
        Ok(probs)
    }

    /// STFT, encoder and LSTM input projection for `n` windows at once: returns the
    /// input-side gate pre-activations (with both biases), [4H] per window.
    ///
    /// Upstream: `snakers4/silero-vad@v6.2.1` src/silero_vad/tinygrad_model.py L59-L64;
    /// `ggml-org/whisper.cpp@v1.9.3` src/whisper.cpp L4543-L4589
    /// (`whisper_vad_build_stft_layer`, `whisper_vad_build_encoder_layer`) and L4599-L4600
    /// (input projection).
    fn encode(
        &self,
        sched: &mut ggml::Scheduler,
        frames: &[f32],
        n: usize,
        frame_len: usize,
    ) -> Result<Vec<f32>> {
        let ctx = Context::new(64, 64)?;
        let x_in = ctx.new_tensor(DType::F32, &[frame_len as i64, 1, n as i64], "frames");
        x_in.mark_input();

        // STFT magnitude: [2B, F, n] -> real/imag halves -> [B, F*n]
        let stft = ctx.conv_1d_f32(self.weight(BASIS), x_in, self.hop, 0);
        let [bins2, frames_per_window, _, _] = stft.ne();
        let bins = bins2 / 2;
        let cols = frames_per_window * n as i64;
        let flat = ctx.reshape(stft, &[bins2, cols]);
        let re = ctx.view_2d_rows(flat, bins, cols, 0);
        let im = ctx.view_2d_rows(flat, bins, cols, bins as usize);
        let mag = ctx.sqrt(ctx.add(ctx.mul(re, re), ctx.mul(im, im)));
        let mut x = ctx.reshape(mag, &[bins, frames_per_window, n as i64]);

        // Encoder: conv blocks take [L, C, n] (time fastest) and give [C, L, n].
        for (i, &stride) in self.strides.iter().enumerate() {
            let time_major = ctx.cont(ctx.permute(x, [1, 0, 2, 3]));
            let y = ctx.conv_1d_f32(self.weight(&enc_w(i)), time_major, stride, self.padding);
            x = ctx.relu(ctx.add(y, self.weight(&enc_b(i))));
        }
        let [feat, len, _, _] = x.ne();
        if len != 1 {
            return Err(EngineError::BadSpec {
                origin: "silero_vad".into(),
                reason: format!(
                    "encoder leaves {len} frames per window, expected 1 (check encoder_strides)"
                ),
            });
        }
        let feats = ctx.reshape(x, &[feat, n as i64]);
        let bias = ctx.add(self.weight(B_IH), self.weight(B_HH));
        let gates = ctx.add(ctx.mul_mat(self.weight(W_IH), feats), bias); // [4H, n]
        gates.mark_output();
        let mut graph = ctx.new_graph(64);
        graph.expand(gates);
        sched.compute(&mut graph, &[(x_in, frames)])?;
        Ok(gates.read_f32()?)
    }

    /// The LSTM recurrence and the sigmoid head, unrolled over `n` windows from state
    /// (h0, c0); returns the probabilities and the final state.
    ///
    /// Upstream: `snakers4/silero-vad@v6.2.1` src/silero_vad/tinygrad_model.py L65-L70
    /// (`LSTMCell`, ReLU, `final_conv`, sigmoid); `ggml-org/whisper.cpp@v1.9.3`
    /// src/whisper.cpp L4591-L4634 (`whisper_vad_build_lstm_layer`) and L4663-L4667.
    fn recur(
        &self,
        sched: &mut ggml::Scheduler,
        gates: &[f32],
        n: usize,
        h0: &[f32],
        c0: &[f32],
        graph_size: usize,
    ) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
        let ctx = Context::new(graph_size * 2, graph_size)?;
        let hid = self.hidden as i64;
        let hu = self.hidden;
        let gin = ctx.new_tensor(DType::F32, &[4 * hid, n as i64], "gates");
        gin.mark_input();
        let h_in = ctx.new_tensor(DType::F32, &[hid], "h0");
        h_in.mark_input();
        let c_in = ctx.new_tensor(DType::F32, &[hid], "c0");
        c_in.mark_input();
        let mut graph = ctx.new_graph(graph_size);
        let (mut h, mut c) = (h_in, c_in);
        let mut outs = Vec::with_capacity(n);
        for t in 0..n {
            let g = ctx.add(
                ctx.view_1d(gin, 4 * hid, t * 4 * hu),
                ctx.mul_mat(self.weight(W_HH), h),
            );
            let s = ctx.sigmoid(g);
            let i_g = ctx.view_1d(s, hid, 0);
            let f_g = ctx.view_1d(s, hid, hu);
            let o_g = ctx.view_1d(s, hid, 3 * hu);
            let cand = ctx.tanh(ctx.view_1d(g, hid, 2 * hu));
            c = ctx.add(ctx.mul(f_g, c), ctx.mul(i_g, cand));
            h = ctx.mul(o_g, ctx.tanh(c));
            let logit = ctx.add(
                ctx.mul_mat(self.weight(HEAD_W), ctx.relu(h)),
                self.weight(HEAD_B),
            );
            let p = ctx.sigmoid(logit);
            p.mark_output();
            graph.expand(p);
            outs.push(p);
        }
        h.mark_output();
        c.mark_output();
        graph.expand(h);
        graph.expand(c);
        sched.compute(&mut graph, &[(gin, gates), (h_in, h0), (c_in, c0)])?;
        let mut probs = Vec::with_capacity(n);
        for p in outs {
            probs.push(p.read_f32()?[0]);
        }
        Ok((probs, h.read_f32()?, c.read_f32()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_carry_context_and_reflect_right() {
        let x: Vec<f32> = (1..=10).map(|v| v as f32).collect();
        // window 4, context 2: frame = 2 ctx + 4 samples + 2 reflected
        let f = frames(&x, 4, 2);
        assert_eq!(f.len(), 3 * 8);
        assert_eq!(&f[0..8], &[0., 0., 1., 2., 3., 4., 3., 2.]);
        assert_eq!(&f[8..16], &[3., 4., 5., 6., 7., 8., 7., 6.]);
        // last window zero-padded: 9, 10, 0, 0; reflection of [7, 8, 9, 10, 0, 0]
        assert_eq!(&f[16..24], &[7., 8., 9., 10., 0., 0., 0., 10.]);
    }

    #[test]
    fn legacy_parser_rejects_garbage_and_truncation() {
        assert!(parse_legacy(b"lmgg\xff\xff\xff\x7f").is_err());
        let mut b = b"lmgg".to_vec();
        b.extend(6i32.to_le_bytes());
        b.extend(b"whisp!");
        assert!(parse_legacy(&b).err().unwrap().contains("not supported"));
        let mut b = b"lmgg".to_vec();
        b.extend(10i32.to_le_bytes());
        b.extend(b"silero-16k");
        b.extend(6i32.to_le_bytes());
        assert!(parse_legacy(&b).err().unwrap().contains("truncated"));
    }
}
