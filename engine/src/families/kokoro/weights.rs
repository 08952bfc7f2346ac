//! Kokoro's weight store: every tensor of the GGUF except the voices, uploaded once to
//! the device, each looked up by name with an error naming the tensor when it is
//! missing or misshapen.
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

use std::collections::HashMap;
use std::path::PathBuf;

use crate::backend::Runtime;
use crate::error::{EngineError, Result};
use crate::ggml::{Buffer, Context, DType, HostTensor, Tensor};
use crate::model_file::ModelFile;

/// Prefix of the voice tensors, which stay on the host.
pub const VOICE_PREFIX: &str = "voice.";
/// Name suffix of the transposed copies of MatMul weights.
const TRANSPOSED_SUFFIX: &str = "#T";

/// The device copy of the model's weights.
pub struct Weights {
    ctx: Context,
    _buf: Buffer,
    /// Model name -> the ggml name (`w<index>`: ggml truncates names at 63 bytes, and
    /// ALBERT's module paths are longer).
    names: HashMap<String, String>,
    path: PathBuf,
}

impl Weights {
    /// Converts and uploads every non-voice tensor of `file` to `runtime`'s device.
    pub fn load(file: &ModelFile, runtime: &Runtime) -> Result<Self> {
        let bad = |reason: String| EngineError::Model {
            path: file.path.clone(),
            reason,
        };
        let mut tensors = Vec::new();
        for t in &file.tensors {
            if t.name.starts_with(VOICE_PREFIX) {
                continue;
            }
            let t = device_layout(t, file).map_err(bad)?;
            if let Some(transposed) = matmul_transposed(&t) {
                tensors.push(transposed);
            }
            tensors.push(t);
        }
        let ctx = Context::new(tensors.len() + 4, 0)?;
        let mut names = HashMap::new();
        for (i, t) in tensors.iter().enumerate() {
            let short = format!("w{i}");
            ctx.new_tensor(DType::F32, &t.ne, &short);
            names.insert(t.name.clone(), short);
        }
        let buf = Buffer::alloc_context(&ctx, runtime.main())?;
        for (i, t) in tensors.into_iter().enumerate() {
            let on_device = ctx
                .tensor_by_name(&format!("w{i}"))
                .expect("created above with this name");
            on_device.write_f32(&t.data)?;
        }
        Ok(Weights {
            ctx,
            _buf: buf,
            names,
            path: file.path.clone(),
        })
    }

    /// The tensor `name`, or an error naming it.
    pub fn get(&self, name: &str) -> Result<Tensor<'_>> {
        self.names
            .get(name)
            .and_then(|short| self.ctx.tensor_by_name(short))
            .ok_or_else(|| self.error(format!("tensor '{name}' is missing")))
    }

    /// The transposed copy of the 2-D MatMul weight `name` (ggml [in, out]).
    pub fn get_t(&self, name: &str) -> Result<Tensor<'_>> {
        self.names
            .get(&format!("{name}{TRANSPOSED_SUFFIX}"))
            .and_then(|short| self.ctx.tensor_by_name(short))
            .ok_or_else(|| self.error(format!("tensor '{name}' (a 2-D MatMul weight) is missing")))
    }

    /// Checks that every `(name, ne)` exists with those dims (in the device layout).
    pub fn check(&self, expected: &[(String, Vec<i64>)]) -> Result<()> {
        for (name, ne) in expected {
            let t = self.get(name)?;
            let have = t.ne();
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
            path: self.path.clone(),
            reason: format!("{reason}; convert the ONNX again (task 'convert', family 'kokoro')"),
        }
    }
}

/// The AdaIN blocks find their weights in the store.
impl super::adain::WeightLookup for Weights {
    fn tensor(&self, name: &str) -> Result<Tensor<'_>> {
        self.get(name)
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
    use super::transpose;

    #[test]
    fn transpose_swaps_rows_and_columns_per_batch() {
        let m = [1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12.];
        assert_eq!(
            transpose(&m, 2, 3, 2),
            [1., 4., 2., 5., 3., 6., 7., 10., 8., 11., 9., 12.]
        );
    }
}
