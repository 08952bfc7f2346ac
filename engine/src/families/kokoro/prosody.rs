//! StyleTTS 2's prosody predictor: the duration encoder (BiLSTMs over the PL-BERT
//! features with the style appended, each followed by an AdaLayerNorm), the duration
//! LSTM and projection (durations are `round(sum(sigmoid(.)) / speed)`, at least 1,
//! computed on the host by [`durations`]), and, over frames, the shared BiLSTM and the
//! F0 and energy (N) branches of AdainResBlk1d blocks.

use crate::error::Result;
use crate::ggml::{Context, Tensor};

use super::adain::{AdainResBlk1d, Conv1d};
use super::albert::linear;
use super::lstm::BiLstm;
use super::weights::Weights;
use super::HParams;

/// Tensor-name prefix of the predictor.
const PREFIX: &str = "encoder.predictor";
/// Tensor-name scope of the shared BiLSTM (an anonymous ONNX node's scope).
const SHARED: &str = "encoder.shared";
/// AdaLayerNorm epsilon (the ONNX graph's).
const LN_EPS: f32 = 1e-5;

/// The duration encoder's LSTM of layer `l`.
fn encoder_lstm(l: usize) -> BiLstm {
    BiLstm::new(&format!("{PREFIX}.text_encoder.lstms.{}", 2 * l))
}

/// The name prefix of the duration encoder's AdaLayerNorm of layer `l`.
fn ada_norm(l: usize) -> String {
    format!("{PREFIX}.text_encoder.lstms.{}.fc", 2 * l + 1)
}

/// Every tensor of the duration half and the shared BiLSTM (the F0/N blocks check
/// their own when they are built).
pub fn tensor_shapes(hp: &HParams) -> Vec<(String, Vec<i64>)> {
    let (c, s) = (hp.hidden, hp.style_dim);
    let mut v = Vec::new();
    for l in 0..hp.duration_layers {
        v.extend(encoder_lstm(l).tensor_shapes(c + s, c / 2));
        v.push((format!("{}.weight", ada_norm(l)), vec![2 * c, s]));
        v.push((format!("{}.bias", ada_norm(l)), vec![2 * c]));
    }
    v.extend(BiLstm::new(&format!("{PREFIX}.lstm")).tensor_shapes(c + s, c / 2));
    v.extend(BiLstm::new(SHARED).tensor_shapes(c + s, c / 2));
    v.push((
        format!("{PREFIX}.duration_proj.linear_layer.weight"),
        vec![hp.max_duration, c],
    ));
    v.push((
        format!("{PREFIX}.duration_proj.linear_layer.bias"),
        vec![hp.max_duration],
    ));
    v
}

/// AdaLayerNorm: `(1 + gamma(s)) norm(x) + beta(s)` over each column of `x` [C, T].
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/modules.py L72-L88 (`AdaLayerNorm`).
fn ada_layer_norm<'a>(
    ctx: &'a Context,
    w: &'a Weights,
    x: Tensor<'a>,
    style: Tensor<'a>,
    prefix: &str,
) -> Result<Tensor<'a>> {
    let c = x.ne()[0];
    let h = linear(ctx, w, style, prefix)?; // [2C, 1]
    let gamma = ctx.view_1d(h, c, 0);
    let beta = ctx.view_1d(h, c, c as usize);
    let n = ctx.norm(x, LN_EPS);
    Ok(ctx.add(ctx.add(n, ctx.mul(n, gamma)), beta))
}

/// The duration encoder's output `d` [hidden + style, T] for the PL-BERT features
/// `d_en` [hidden, T]; `style` is the predictor style [S, 1], `style_cols` it repeated
/// T times [S, T].
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/modules.py L137-L176 (`DurationEncoder`),
/// called at kokoro/model.py L105.
pub fn duration_encoder<'a>(
    ctx: &'a Context,
    w: &'a Weights,
    hp: &HParams,
    d_en: Tensor<'a>,
    style: Tensor<'a>,
    style_cols: Tensor<'a>,
    reverse: Tensor<'a>,
) -> Result<Tensor<'a>> {
    let mut x = ctx.concat(d_en, style_cols, 0);
    for l in 0..hp.duration_layers {
        let y = encoder_lstm(l).build(ctx, w, x, reverse)?;
        let y = ada_layer_norm(ctx, w, y, style, &ada_norm(l))?;
        x = ctx.concat(y, style_cols, 0);
    }
    Ok(x)
}

/// The sigmoid of the duration logits [max_duration, T] for `d` [hidden + style, T].
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/model.py L106-L108 (`predictor.lstm`,
/// `duration_proj`, sigmoid; the layers: kokoro/modules.py L95-L96).
pub fn duration_probabilities<'a>(
    ctx: &'a Context,
    w: &'a Weights,
    d: Tensor<'a>,
    reverse: Tensor<'a>,
) -> Result<Tensor<'a>> {
    let x = BiLstm::new(&format!("{PREFIX}.lstm")).build(ctx, w, d, reverse)?;
    let logits = linear(ctx, w, x, &format!("{PREFIX}.duration_proj.linear_layer"))?;
    Ok(ctx.sigmoid(logits))
}

/// Each token's duration in frames before rounding (`sum / speed`) and rounded (at
/// least 1), from the sigmoid probabilities (`max_duration` per token). `speed` must be
/// positive (the task checks it is in 0.25..=4).
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/model.py L108-L109
/// (`KModel.forward_with_tokens`).
pub fn durations(probabilities: &[f32], max_duration: usize, speed: f32) -> (Vec<f32>, Vec<usize>) {
    assert!(speed > 0.0, "the speed is checked before synthesis");
    let raw: Vec<f32> = probabilities
        .chunks_exact(max_duration)
        .map(|p| p.iter().sum::<f32>() / speed)
        .collect();
    let frames = raw.iter().map(|&d| (d.round() as usize).max(1)).collect();
    (raw, frames)
}

/// The token index of every frame: token `i` repeated `frames[i]` times.
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/model.py L110-L114 (the alignment
/// `pred_aln_trg`).
pub fn frame_tokens(frames: &[usize]) -> Vec<i32> {
    frames
        .iter()
        .enumerate()
        .flat_map(|(i, &n)| std::iter::repeat_n(i as i32, n))
        .collect()
}

/// The frame-level half: the shared BiLSTM, then the F0 and energy (N) branches,
/// each three AdainResBlk1d blocks (the second upsamples x2) and a 1x1 projection.
/// Loading checks every tensor's name and dims.
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/modules.py L97-L107
/// (`ProsodyPredictor.shared`, `F0`, `N`, `F0_proj`, `N_proj`).
#[derive(Clone)]
pub struct F0N {
    f0: Vec<AdainResBlk1d>,
    n: Vec<AdainResBlk1d>,
    f0_proj: Conv1d,
    n_proj: Conv1d,
}

impl F0N {
    /// Loads both branches.
    pub fn load(w: &Weights) -> Result<Self> {
        let branch = |name: &str| -> Result<Vec<AdainResBlk1d>> {
            (0..3)
                .map(|i| AdainResBlk1d::load(w, &format!("{PREFIX}.{name}.{i}"), i == 1))
                .collect()
        };
        Ok(F0N {
            f0: branch("F0")?,
            n: branch("N")?,
            f0_proj: Conv1d::load(w, PREFIX, "F0_proj", true, 1, 1)?,
            n_proj: Conv1d::load(w, PREFIX, "N_proj", true, 1, 1)?,
        })
    }

    /// F0 and N [2F] each for the frame-level features `en` [hidden + style, F]
    /// (the branches run on time-fastest [T, C] activations, as [`AdainResBlk1d`]
    /// takes them).
    ///
    /// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/modules.py L124-L134
    /// (`ProsodyPredictor.F0Ntrain`), called at kokoro/model.py L115.
    pub fn build<'a>(
        &self,
        ctx: &'a Context,
        w: &'a Weights,
        en: Tensor<'a>,
        style: Tensor<'a>,
        reverse: Tensor<'a>,
    ) -> Result<(Tensor<'a>, Tensor<'a>)> {
        let x = BiLstm::new(SHARED).build(ctx, w, en, reverse)?;
        let x = ctx.cont(ctx.transpose(x)); // [F, hidden]
        crate::ggml::profile::mark_stage(x, "shared_lstm");
        let branch = |blocks: &[AdainResBlk1d], proj: &Conv1d| -> Result<Tensor<'a>> {
            let mut y = x;
            for block in blocks {
                y = block.build(ctx, w, y, style)?;
            }
            let y = proj.build(ctx, w, y)?; // [2F, 1]
            Ok(ctx.reshape(y, &[y.ne()[0]]))
        };
        Ok((
            branch(&self.f0, &self.f0_proj)?,
            branch(&self.n, &self.n_proj)?,
        ))
    }
}
