//! Kokoro's weights: every tensor of the GGUF except the voices, re-laid out here and
//! uploaded once through the engine's [`WeightStore`], each looked up by name with an
//! error naming the tensor when it is missing or misshapen.
//!
//! The converter stores tensors exactly as the ONNX initializers are shaped (ggml `ne`
//! = ONNX dims reversed), and [`Weights::get`] returns them so, with two additions:
//! - every 2-D weight other than an embedding table (an ONNX MatMul weight [in, out],
//!   ggml [out, in]) also has a transposed copy, ggml [in, out], from
//!   [`Weights::get_t`], so that a product is one `mul_mat(w_t, x)` with `x` [in, n];
//! - LSTM weights `<scope>.W` / `<scope>.R` are held as ggml [in, 4H, dirs] /
//!   [H, 4H, dirs] whichever of the two ONNX layouts (LSTM's [dirs, 4H, in] or
//!   DynamicQuantizeLSTM's [dirs, in, 4H]) the file has, gate order ONNX's i, o, f, c;
//!   their biases `<scope>.B` ([dirs, 8H]: input then recurrent bias) are summed into
//!   one [4H, 1, dirs] bias.
//!
//! F16 tensors are widened to f32: the graphs compute in f32 throughout (ggml's f16
//! products round the activations to f16, which the F0 accuracy bound does not allow).
//! Q8_0 convolution kernels (the decoder's large ones in a `--quantize q8_0` file) stay
//! Q8_0 on the device for ggml's int8 products. ggml quantizes rows of 32 values, so
//! such a kernel is stored [K * IC', OC], each output channel's row tap-major (tap `k`
//! of input channel `c` at `k * IC' + c`, the ONNX [OC, IC, K] with its last two axes
//! swapped), IC' being IC padded with zero weights to whole blocks of 32: each block is
//! 32 channels of one tap, so the CPU kernel quantizes an input position once for all
//! the taps that read it. Its name is listed in the metadata [`QUANTIZED_KERNELS_KEY`]
//! with its width K in [`QUANTIZED_KERNEL_WIDTHS_KEY`] and its IC in
//! [`QUANTIZED_KERNEL_CHANNELS_KEY`]; [`Weights::dims`] gives its ONNX dims [K, IC, OC].
//! The generator's transposed convolution kernels are stored Q8_0 as the [IC, K * OC] matrix of their tap product,
//! listed in [`QUANTIZED_TRANSPOSED_KERNELS_KEY`] (dims [K, OC, IC]). When the graphs
//! run on the CPU backend and the CPU has the engine's q8_0 kernel, such a kernel is
//! re-laid out at
//! load as a [`crate::cpu_kernels::PackedQ8`] ([`DType::I8`]) by [`Layers::store`], the
//! one place that chooses storage; on other backends it stays Q8_0.

use std::collections::HashMap;

use crate::backend::Runtime;
use crate::error::{EngineError, Result};
use crate::ggml::{DType, GgufValue, HostTensor, Tensor};
use crate::layers::{padded_channels, Layers, WeightUse};
use crate::model_file::ModelFile;
use crate::weights::{f32_tensor, WeightStore, WeightTensor};

/// Metadata: names of the convolution kernels stored block-quantized as tap-major
/// [K * IC, OC].
pub const QUANTIZED_KERNELS_KEY: &str = "kokoro.tap_major_kernels";
/// Metadata: the kernel width K of each of [`QUANTIZED_KERNELS_KEY`], in its order.
pub const QUANTIZED_KERNEL_WIDTHS_KEY: &str = "kokoro.tap_major_kernel_widths";
/// Metadata: the input channels IC (the ONNX kernel's) of each of
/// [`QUANTIZED_KERNELS_KEY`], in its order. A kernel stores each tap's channels padded
/// with zeros to whole blocks of 32, so its rows are K x IC rounded up.
pub const QUANTIZED_KERNEL_CHANNELS_KEY: &str = "kokoro.tap_major_kernel_channels";
/// Metadata of files from earlier converters, whose q8_0 kernels are channel-major
/// [IC * K, OC]: refused with the remedy (convert again), not read as tap-major.
const CHANNEL_MAJOR_KERNELS_KEY: &str = "kokoro.quantized_kernels";

/// Metadata: names of the transposed convolution kernels stored block-quantized as the
/// [IC, K * OC] matrix of their tap product.
pub const QUANTIZED_TRANSPOSED_KERNELS_KEY: &str = "kokoro.quantized_transposed_kernels";
/// Metadata: the kernel width K of each of [`QUANTIZED_TRANSPOSED_KERNELS_KEY`], in its
/// order.
pub const QUANTIZED_TRANSPOSED_KERNEL_WIDTHS_KEY: &str =
    "kokoro.quantized_transposed_kernel_widths";

/// Prefix of the voice tensors, which stay on the host.
pub const VOICE_PREFIX: &str = "voice.";
/// Name suffix of the transposed copies of MatMul weights.
const TRANSPOSED_SUFFIX: &str = "#T";

/// The device copy of the model's weights.
pub struct Weights {
    store: WeightStore,
    /// Where the layers over these weights compute.
    layers: Layers,
    /// ONNX dims (ggml order) of the kernels held block-quantized (stored [K * IC', OC],
    /// or [IC, K * OC] for a transposed one).
    quantized_dims: HashMap<String, [i64; 4]>,
}

impl Weights {
    /// Where each weight buffer's memory starts (see [`WeightStore::base_addresses`]).
    pub fn base_addresses(&self) -> Vec<usize> {
        self.store.base_addresses()
    }

    /// Converts and uploads every non-voice tensor of `file` to `runtime`'s device.
    pub fn load(file: &ModelFile, runtime: &Runtime) -> Result<Self> {
        let bad = |reason: String| EngineError::Model {
            path: file.path.clone(),
            reason,
        };
        if file
            .metadata
            .iter()
            .any(|(k, _)| k == CHANNEL_MAJOR_KERNELS_KEY)
        {
            return Err(bad(format!(
                "its q8_0 convolution kernels are channel-major ('{CHANNEL_MAJOR_KERNELS_KEY}', \
                 an earlier converter's layout); convert the ONNX model again with \
                 `--task convert --family kokoro --quantize q8_0`"
            )));
        }
        let widths =
            listed_widths(file, QUANTIZED_KERNELS_KEY, QUANTIZED_KERNEL_WIDTHS_KEY).map_err(bad)?;
        let channels = listed_widths(file, QUANTIZED_KERNELS_KEY, QUANTIZED_KERNEL_CHANNELS_KEY)
            .map_err(bad)?;
        let transposed_widths = listed_widths(
            file,
            QUANTIZED_TRANSPOSED_KERNELS_KEY,
            QUANTIZED_TRANSPOSED_KERNEL_WIDTHS_KEY,
        )
        .map_err(bad)?;
        let layers = Layers::new(runtime);
        let mut quantized_dims = HashMap::new();
        let tensors = file
            .tensors
            .iter()
            .filter(|t| !t.name.starts_with(VOICE_PREFIX))
            .flat_map(|t| -> Vec<Result<WeightTensor>> {
                let quantized = match (widths.get(&t.name), transposed_widths.get(&t.name)) {
                    (Some(&k), _) => {
                        let ic = channels.get(&t.name).copied().unwrap_or(0);
                        Some(quantized_kernel_dims(t, k, ic))
                    }
                    (None, Some(&k)) => Some(quantized_transposed_kernel_dims(t, k)),
                    (None, None) => None,
                };
                if let Some(dims) = quantized {
                    return match dims {
                        Ok(dims) => {
                            quantized_dims.insert(t.name.clone(), dims);
                            vec![Ok(layers.store(t.clone(), WeightUse::Linear).into())]
                        }
                        Err(e) => vec![Err(bad(e))],
                    };
                }
                match device_layout(t, file) {
                    Ok(t) => matmul_transposed(&t)
                        .into_iter()
                        .chain([t])
                        .map(|t| Ok(t.into_host()))
                        .collect(),
                    Err(e) => vec![Err(bad(e))],
                }
            });
        let store = WeightStore::upload(&file.path, tensors, runtime)?;
        for (key, listed) in [
            (QUANTIZED_KERNELS_KEY, &widths),
            (QUANTIZED_TRANSPOSED_KERNELS_KEY, &transposed_widths),
        ] {
            if let Some(missing) = listed.keys().find(|n| !quantized_dims.contains_key(*n)) {
                return Err(bad(format!(
                    "'{key}' lists '{missing}', which the file lacks"
                )));
            }
        }
        Ok(Weights {
            store,
            layers,
            quantized_dims,
        })
    }

    /// The ONNX dims (ggml order) of `name`: its device dims, except for a kernel held
    /// block-quantized, whose ONNX dims are kept at load.
    pub fn dims(&self, name: &str) -> Result<[i64; 4]> {
        match self.quantized_dims.get(name) {
            Some(&ne) => Ok(ne),
            None => Ok(self.get(name)?.ne()),
        }
    }

    /// The tensor `name`, or an error naming it.
    pub fn get(&self, name: &str) -> Result<Tensor<'_>> {
        self.store
            .tensor(name)
            .ok_or_else(|| self.error(format!("tensor '{name}' is missing")))
    }

    /// The transposed copy of the 2-D MatMul weight `name` (ggml [in, out]).
    pub fn get_t(&self, name: &str) -> Result<Tensor<'_>> {
        self.store
            .tensor(&format!("{name}{TRANSPOSED_SUFFIX}"))
            .ok_or_else(|| self.error(format!("tensor '{name}' (a 2-D MatMul weight) is missing")))
    }

    /// Checks that every `(name, ne)` exists with those dims (in the device layout).
    pub fn check(&self, expected: &[(String, Vec<i64>)]) -> Result<()> {
        for (name, ne) in expected {
            let have = self.dims(name)?;
            let want: Vec<i64> = (0..4).map(|i| ne.get(i).copied().unwrap_or(1)).collect();
            if have[..] != want[..] {
                return Err(self.error(format!(
                    "tensor '{name}' has dims {:?}, expected {ne:?} (ggml order, after load)",
                    trim(&have)
                )));
            }
        }
        Ok(())
    }

    fn error(&self, reason: String) -> EngineError {
        EngineError::Model {
            path: self.store.path().to_path_buf(),
            reason: format!("{reason}; convert the ONNX again (task 'convert', family 'kokoro')"),
        }
    }
}

/// The AdaIN blocks find their weights in the store.
impl super::adain::WeightLookup for Weights {
    fn tensor(&self, name: &str) -> Result<Tensor<'_>> {
        self.get(name)
    }

    fn dims(&self, name: &str) -> Result<[i64; 4]> {
        Weights::dims(self, name)
    }

    fn layers(&self) -> Layers {
        self.layers
    }
}

/// Name -> value (a kernel width or channel count) of the kernels the file stores
/// block-quantized, from the two parallel metadata arrays `names_key` and `widths_key`
/// (none when the file has neither).
fn listed_widths(
    file: &ModelFile,
    names_key: &str,
    widths_key: &str,
) -> std::result::Result<HashMap<String, i64>, String> {
    let find = |key: &str| file.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v);
    match (find(names_key), find(widths_key)) {
        (None, None) => Ok(HashMap::new()),
        (Some(GgufValue::StrArray(names)), Some(GgufValue::U32Array(widths)))
            if names.len() == widths.len() =>
        {
            Ok(names
                .iter()
                .cloned()
                .zip(widths.iter().map(|&k| k as i64))
                .collect())
        }
        _ => Err(format!(
            "metadata '{names_key}' (strings) and '{widths_key}' (as many u32) must come \
             together"
        )),
    }
}

/// The ONNX dims [K, IC, OC, 1] of the block-quantized kernel `t` (tap-major
/// [K * IC', OC], IC' = `ic` rounded up to whole blocks of 32) of width `k`, after
/// checking its type and shape.
fn quantized_kernel_dims(t: &HostTensor, k: i64, ic: i64) -> std::result::Result<[i64; 4], String> {
    let dims = trim(&t.ne);
    let padded = padded_channels(ic);
    match dims[..] {
        [row, oc]
            if t.dtype == DType::Q8_0
                && k >= 1
                && ic >= 1
                && k.checked_mul(padded) == Some(row) =>
        {
            Ok([k, ic, oc, 1])
        }
        _ => Err(format!(
            "quantized kernel '{}' is {:?} of dims {dims:?}, expected Q8_0 [{k} * {padded}, OC] \
             ({ic} input channels padded to blocks of 32)",
            t.name, t.dtype
        )),
    }
}

/// The ONNX dims [K, OC, IC, 1] of the block-quantized transposed kernel `t` (its tap
/// product's matrix, [IC, K * OC]) of width `k`, after checking its type and shape.
fn quantized_transposed_kernel_dims(
    t: &HostTensor,
    k: i64,
) -> std::result::Result<[i64; 4], String> {
    let dims = trim(&t.ne);
    match dims[..] {
        [ic, koc] if t.dtype == DType::Q8_0 && k >= 1 && koc % k == 0 => Ok([k, koc / k, ic, 1]),
        _ => Err(format!(
            "quantized transposed kernel '{}' is {:?} of dims {dims:?}, expected Q8_0 \
             [IC, {k} * OC]",
            t.name, t.dtype
        )),
    }
}

/// Dims without trailing ones.
fn trim(ne: &[i64]) -> Vec<i64> {
    let mut v = ne.to_vec();
    while v.len() > 1 && v.last() == Some(&1) {
        v.pop();
    }
    v
}

/// An f32 tensor in host memory, in the layout it will have on the device.
struct F32Tensor {
    name: String,
    ne: Vec<i64>,
    data: Vec<f32>,
}

impl F32Tensor {
    /// The tensor as the [`WeightStore`] uploads it.
    fn into_host(self) -> WeightTensor {
        f32_tensor(self.name, self.ne, self.data)
    }
}

/// True for the tables that are indexed by `get_rows` rather than multiplied.
fn is_embedding_table(name: &str) -> bool {
    name.contains("embeddings.") || name.contains("embedding.")
}

/// Transposes each of `batches` row-major [rows, cols] matrices to [cols, rows].
fn transpose(data: &[f32], rows: usize, cols: usize, batches: usize) -> Vec<f32> {
    let mut out = vec![0f32; data.len()];
    for b in 0..batches {
        let (src, dst) = (
            &data[b * rows * cols..(b + 1) * rows * cols],
            &mut out[b * rows * cols..(b + 1) * rows * cols],
        );
        for r in 0..rows {
            for c in 0..cols {
                dst[c * rows + r] = src[r * cols + c];
            }
        }
    }
    out
}

/// `t` converted to f32 and re-laid out as the module doc says; `file` gives an LSTM
/// weight the bias of its scope (which tells the hidden size).
fn device_layout(t: &HostTensor, file: &ModelFile) -> std::result::Result<F32Tensor, String> {
    if !matches!(t.dtype, DType::F32 | DType::F16) {
        return Err(format!(
            "tensor '{}' is {:?}; Kokoro reads f32 or f16 tensors",
            t.name, t.dtype
        ));
    }
    let data = t.to_f32();
    let count: i64 = t.ne.iter().product();
    if data.len() as i64 != count {
        return Err(format!(
            "tensor '{}' holds the wrong number of values",
            t.name
        ));
    }
    let dims = trim(&t.ne);
    let lstm_part = t
        .name
        .rsplit_once('.')
        .filter(|(_, role)| matches!(*role, "W" | "R" | "B"));
    if let Some((scope, role)) = lstm_part {
        let bias = file
            .tensor(&format!("{scope}.B"))
            .ok_or_else(|| format!("LSTM '{scope}' has no bias '{scope}.B'"))?;
        let b_dims = trim(&bias.ne);
        let (gates, dirs) = match b_dims[..] {
            [g8, d] if g8 % 8 == 0 => (g8 / 2, d),
            [g8] if g8 % 8 == 0 => (g8 / 2, 1),
            _ => return Err(format!("LSTM bias '{scope}.B' has dims {b_dims:?}")),
        };
        let shape_err = || format!("LSTM tensor '{}' has dims {dims:?}", t.name);
        return Ok(match role {
            "B" => {
                let g = gates as usize;
                let mut sum = Vec::with_capacity(g * dirs as usize);
                for d in 0..dirs as usize {
                    let row = &data[d * 2 * g..(d + 1) * 2 * g];
                    sum.extend((0..g).map(|i| row[i] + row[g + i]));
                }
                F32Tensor {
                    name: t.name.clone(),
                    ne: vec![gates, 1, dirs],
                    data: sum,
                }
            }
            _ => {
                let (a, b, d) = match dims[..] {
                    [a, b, d] => (a, b, d),
                    [a, b] => (a, b, 1),
                    _ => return Err(shape_err()),
                };
                if d != dirs {
                    return Err(shape_err());
                }
                if b == gates {
                    // LSTM layout [dirs, 4H, in]: ggml [in, 4H, dirs] already.
                    F32Tensor {
                        name: t.name.clone(),
                        ne: vec![a, b, d],
                        data,
                    }
                } else if a == gates {
                    // DynamicQuantizeLSTM layout [dirs, in, 4H]: ggml [4H, in, dirs].
                    F32Tensor {
                        name: t.name.clone(),
                        ne: vec![b, a, d],
                        data: transpose(&data, b as usize, a as usize, d as usize),
                    }
                } else {
                    return Err(shape_err());
                }
            }
        });
    }
    Ok(F32Tensor {
        name: t.name.clone(),
        ne: t.ne.clone(),
        data,
    })
}

/// The transposed copy of a 2-D MatMul weight (ggml [out, in] -> [in, out]); `None`
/// for every other tensor.
fn matmul_transposed(t: &F32Tensor) -> Option<F32Tensor> {
    let dims = trim(&t.ne);
    if dims.len() != 2
        || is_embedding_table(&t.name)
        || t.name.rsplit_once('.').is_some_and(|(_, r)| r == "B")
    {
        return None;
    }
    let (out, inp) = (dims[0], dims[1]);
    Some(F32Tensor {
        name: format!("{}{TRANSPOSED_SUFFIX}", t.name),
        ne: vec![inp, out],
        data: transpose(&t.data, inp as usize, out as usize, 1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q8_tensor(name: &str, ne: Vec<i64>, dtype: DType) -> HostTensor {
        HostTensor {
            name: name.into(),
            dtype,
            ne,
            data: Vec::new(),
        }
    }

    #[test]
    fn a_file_with_channel_major_q8_0_kernels_is_refused_with_the_remedy() {
        let file = ModelFile {
            path: "old-q8_0.gguf".into(),
            format: crate::model_file::ModelFormat::Gguf,
            family: Some("kokoro".into()),
            metadata: vec![
                (
                    CHANNEL_MAJOR_KERNELS_KEY.into(),
                    GgufValue::StrArray(vec!["c".into()]),
                ),
                (
                    "kokoro.quantized_kernel_widths".into(),
                    GgufValue::U32Array(vec![3]),
                ),
            ],
            tensors: vec![q8_tensor("c", vec![96, 8], DType::Q8_0)],
        };
        let runtime = Runtime::new(&crate::backend::RuntimeOptions::default()).unwrap();
        match Weights::load(&file, &runtime) {
            Err(EngineError::Model { path, reason }) => {
                assert_eq!(path, std::path::PathBuf::from("old-q8_0.gguf"));
                assert!(reason.contains("channel-major"), "{reason}");
                assert!(reason.contains("convert the ONNX model again"), "{reason}");
            }
            Err(other) => panic!("expected a model error, got {other}"),
            Ok(_) => panic!("an old q8_0 file loaded"),
        }
    }

    #[test]
    fn quantized_kernels_give_their_onnx_dims_or_a_reason() {
        let conv = q8_tensor("c", vec![96, 8], DType::Q8_0);
        assert_eq!(quantized_kernel_dims(&conv, 3, 32), Ok([3, 32, 8, 1]));
        // 20 channels are stored padded to 32.
        assert_eq!(quantized_kernel_dims(&conv, 3, 20), Ok([3, 20, 8, 1]));
        let err = quantized_kernel_dims(&conv, 3, 33).unwrap_err();
        assert!(
            err.contains("[3 * 64, OC]") && err.contains("33 input channels"),
            "{err}"
        );
        // Widths and channel counts come from the file: their product must not overflow.
        let huge = u32::MAX as i64;
        assert!(quantized_kernel_dims(&conv, huge, huge).is_err());
        let up = q8_tensor("u", vec![256, 1536], DType::Q8_0);
        assert_eq!(
            quantized_transposed_kernel_dims(&up, 12),
            Ok([12, 128, 256, 1])
        );
        let err = quantized_transposed_kernel_dims(&up, 7).unwrap_err();
        assert!(err.contains("'u'") && err.contains("[IC, 7 * OC]"), "{err}");
        let f32_up = q8_tensor("u", vec![256, 1536], DType::F32);
        let err = quantized_transposed_kernel_dims(&f32_up, 12).unwrap_err();
        assert!(err.contains("F32"), "{err}");
    }

    #[test]
    fn transpose_swaps_rows_and_columns_per_batch() {
        let m = [1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12.];
        assert_eq!(
            transpose(&m, 2, 3, 2),
            [1., 4., 2., 5., 3., 6., 7., 10., 8., 11., 9., 12.]
        );
    }
}
