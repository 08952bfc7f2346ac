//! StyleTTS 2's text encoder: a symbol embedding, `depth` x (conv k5, LayerNorm over
//! channels, LeakyReLU 0.2), then a BiLSTM. Its output, expanded to frames, is the
//! decoder's content input (`asr`). Convolutions run through the project's f32 im2col
//! product (`ggml_conv_1d` rounds its input to f16).

use crate::error::Result;
use crate::ggml::{Context, Tensor};

use super::albert::layer_norm;
use super::lstm::BiLstm;
use super::weights::Weights;
use super::HParams;

/// Tensor-name prefix of the text encoder.
const PREFIX: &str = "encoder.text_encoder";
/// LayerNorm epsilon (the ONNX graph's).
const LN_EPS: f32 = 1e-5;
/// LeakyReLU slope.
const SLOPE: f32 = 0.2;

/// The name of conv `i`'s weight.
fn conv_weight(i: usize) -> String {
    format!("{PREFIX}.cnn.{i}.0.weight")
}

/// The BiLSTM.
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/modules.py L48 (`TextEncoder.lstm`).
fn lstm() -> BiLstm {
    BiLstm::new(&format!("{PREFIX}.lstm"))
}

/// Every tensor the text encoder reads, with its dims after load.
pub fn tensor_shapes(hp: &HParams) -> Vec<(String, Vec<i64>)> {
    let c = hp.hidden;
    let mut v = vec![(format!("{PREFIX}.embedding.weight"), vec![c, hp.n_symbols])];
    for i in 0..hp.text_encoder_depth {
        v.push((conv_weight(i), vec![hp.text_encoder_kernel, c, c]));
        v.push((format!("{PREFIX}.cnn.{i}.0.bias"), vec![c]));
        v.push((format!("{PREFIX}.cnn.{i}.1.gamma"), vec![c]));
        v.push((format!("{PREFIX}.cnn.{i}.1.beta"), vec![c]));
    }
    v.extend(lstm().tensor_shapes(c, c / 2));
    v
}

/// A 1-D convolution (same padding) of `x` [C_in, T] with the [K, C_in, C_out] kernel
/// `weight` and bias `bias`, returning [C_out, T].
///
/// Upstream: `nn.Conv1d` with padding `(k - 1) / 2`, as `hexgrad/kokoro@dfb907a02bba`
/// kokoro/modules.py L39-L43 builds the text encoder's.
pub fn conv1d<'a>(
    ctx: &'a Context,
    w: &'a Weights,
    x: Tensor<'a>,
    weight: &str,
    bias: &str,
) -> Result<Tensor<'a>> {
    let kernel = w.get(weight)?;
    let k = kernel.ne()[0];
    let [c, t, _, _] = x.ne();
    let time_major = ctx.reshape(ctx.cont(ctx.transpose(x)), &[t, c, 1]);
    let y = ctx.conv_1d_f32(kernel, time_major, 1, ((k - 1) / 2) as i32);
    let y = ctx.reshape(y, &[kernel.ne()[2], t]);
    Ok(ctx.add(y, w.get(bias)?))
}

/// The text encoder's output [hidden, T] for token ids `ids` (i32 [T]); `reverse`
/// is the i32 tensor T-1 .. 0 the BiLSTM needs.
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/modules.py L35-L69 (`TextEncoder`),
/// called at kokoro/model.py L116.
pub fn build<'a>(
    ctx: &'a Context,
    w: &'a Weights,
    hp: &HParams,
    ids: Tensor<'a>,
    reverse: Tensor<'a>,
) -> Result<Tensor<'a>> {
    let mut x = ctx.get_rows(w.get(&format!("{PREFIX}.embedding.weight"))?, ids);
    for i in 0..hp.text_encoder_depth {
        let y = conv1d(
            ctx,
            w,
            x,
            &conv_weight(i),
            &format!("{PREFIX}.cnn.{i}.0.bias"),
        )?;
        let y = layer_norm(
            ctx,
            w,
            y,
            &format!("{PREFIX}.cnn.{i}.1"),
            "gamma",
            "beta",
            LN_EPS,
        )?;
        x = ctx.leaky_relu(y, SLOPE);
    }
    lstm().build(ctx, w, x, reverse)
}
