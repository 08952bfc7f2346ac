//! Style-conditioned blocks shared by Kokoro's prosody predictor (F0 and N branches) and
//! its decoder: AdaIN1d (instance normalisation whose gain and bias come from the style
//! vector, StyleTTS 2) and AdainResBlk1d (two AdaIN + LeakyReLU + conv stages with a
//! shortcut, optionally upsampling time by two).
//!
//! Activations are [T, C] tensors (time fastest, ggml order), the layout instance
//! normalisation and the project's f32 convolution read. Weights are looked up through
//! [`WeightLookup`] by the PyTorch module path the converter names them with; each block
//! checks names and shapes once at load and only keeps the names.

use crate::error::{EngineError, Result};
use crate::ggml::{Context, Tensor};
use crate::layers::Layers;

/// PyTorch's `InstanceNorm1d` epsilon, which the exported graph adds to the variance.
pub(crate) const INSTANCE_NORM_EPS: f32 = 1e-5;
/// The slope of the LeakyReLU between the stages of an [`AdainResBlk1d`].
const RES_BLOCK_SLOPE: f32 = 0.2;

/// Where the blocks find their weight tensors by name (the model's weight store).
pub trait WeightLookup {
    /// The tensor called `name`, or an error naming it and the model file.
    fn tensor(&self, name: &str) -> Result<Tensor<'_>>;

    /// The dims of `name` as the ONNX shape gives them (ggml order). They differ from
    /// the tensor's own for a convolution kernel stored block-quantized, which is
    /// tap-major [K * IC, OC] on the device.
    fn dims(&self, name: &str) -> Result<[i64; 4]> {
        Ok(self.tensor(name)?.ne())
    }

    /// Which implementation computes the layers over these weights: the engine's CPU
    /// kernels when the weights live on a CPU backend that has them; by default
    /// ggml's ops.
    fn layers(&self) -> Layers {
        Layers::with_cpu_kernels(false)
    }
}

/// A bare ggml context holding the weights (tests, tools) looks them up by tensor name.
impl WeightLookup for Context {
    fn tensor(&self, name: &str) -> Result<Tensor<'_>> {
        self.tensor_by_name(name)
            .ok_or_else(|| EngineError::BadSpec {
                origin: "kokoro".into(),
                reason: format!("weight tensor '{name}' is missing"),
            })
    }
}

/// Checks that `name` exists with ggml dims `ne` (trailing 1s ignored) and returns it.
pub(crate) fn expect_shape(w: &dyn WeightLookup, name: &str, ne: &[i64]) -> Result<String> {
    let got = w.dims(name)?;
    let mut want = [1i64; 4];
    want[..ne.len()].copy_from_slice(ne);
    if got != want {
        return Err(EngineError::BadSpec {
            origin: "kokoro".into(),
            reason: format!("weight tensor '{name}' has dims {got:?}, expected {want:?}"),
        });
    }
    Ok(name.to_string())
}

/// The ggml dims of a weight, after checking it exists.
pub(crate) fn dims_of(w: &dyn WeightLookup, name: &str) -> Result<[i64; 4]> {
    w.dims(name)
}

/// The name of a convolution weight: the module path (`{prefix}.{conv}.weight`), or, for
/// the prosody predictor, the ONNX node scope the converter falls back to for the
/// export's anonymous (weight-norm folded) kernels, which lacks the `predictor.` level.
pub(crate) fn conv_weight_name(w: &dyn WeightLookup, prefix: &str, conv: &str) -> String {
    let module = format!("{prefix}.{conv}.weight");
    if w.tensor(&module).is_ok() {
        return module;
    }
    let scope = prefix.replacen(".predictor.", ".", 1);
    format!("{scope}.{conv}.weight")
}

/// A 1-D convolution with an optional bias over a [T, IC] activation; returns [T', OC].
#[derive(Debug, Clone)]
pub(crate) struct Conv1d {
    weight: String,
    bias: Option<String>,
    /// Input and output channels and the kernel width.
    pub(crate) in_channels: i64,
    pub(crate) out_channels: i64,
    kernel_width: i64,
    stride: i32,
    pad: i32,
    dilation: i32,
}

impl Conv1d {
    /// Loads `{prefix}.{conv}.weight` (ONNX [OC, IC, K]) and, when `with_bias`, its bias.
    pub(crate) fn load(
        w: &dyn WeightLookup,
        prefix: &str,
        conv: &str,
        with_bias: bool,
        stride: i32,
        dilation: i32,
    ) -> Result<Self> {
        let weight = conv_weight_name(w, prefix, conv);
        let [kernel, in_channels, out_channels, _] = dims_of(w, &weight)?;
        if kernel < 1 || in_channels < 1 || out_channels < 1 {
            return Err(EngineError::BadSpec {
                origin: "kokoro".into(),
                reason: format!("'{weight}' has dims {kernel} x {in_channels} x {out_channels}"),
            });
        }
        let bias = if with_bias {
            Some(expect_shape(
                w,
                &format!("{prefix}.{conv}.bias"),
                &[out_channels],
            )?)
        } else {
            None
        };
        Ok(Conv1d {
            weight,
            bias,
            in_channels,
            out_channels,
            kernel_width: kernel,
            stride,
            // PyTorch's "same" padding of Kokoro's convolutions.
            pad: ((kernel - 1) * dilation as i64 / 2) as i32,
            dilation,
        })
    }

    /// Overrides the padding (convolutions whose padding is not "same").
    pub(crate) fn with_pad(mut self, pad: i32) -> Self {
        self.pad = pad;
        self
    }

    /// The convolution of `x` [T, IC]; returns [T', OC] (time fastest).
    pub(crate) fn build<'a>(
        &self,
        ctx: &'a Context,
        w: &'a dyn WeightLookup,
        x: Tensor<'a>,
    ) -> Result<Tensor<'a>> {
        let bias = match &self.bias {
            Some(b) => Some(w.tensor(b)?),
            None => None,
        };
        w.layers().conv_1d_time_major(
            ctx,
            w.tensor(&self.weight)?,
            self.kernel_width,
            x,
            [self.stride, self.pad, self.dilation],
            bias,
        )
    }
}

/// Adaptive instance normalisation: `(1 + gamma(s)) * norm(x) + beta(s)`, where
/// `[gamma, beta]` is a linear map of the style vector `s` and `norm` normalises each
/// channel over time.
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L20-L31 (`AdaIN1d`).
#[derive(Debug, Clone)]
pub struct AdaIn1d {
    fc_weight: String,
    fc_bias: String,
    /// The channels it normalises.
    pub channels: i64,
    /// The style vector's length.
    pub style_dim: i64,
}

impl AdaIn1d {
    /// Loads `{prefix}.fc.weight` (ONNX [style, 2C], a MatMul weight) and `{prefix}.fc.bias`.
    pub fn load(w: &dyn WeightLookup, prefix: &str) -> Result<Self> {
        let fc_weight = format!("{prefix}.fc.weight");
        let [two_c, style_dim, _, _] = dims_of(w, &fc_weight)?;
        if two_c % 2 != 0 {
            return Err(EngineError::BadSpec {
                origin: "kokoro".into(),
                reason: format!("'{fc_weight}' has {two_c} outputs, expected gamma and beta"),
            });
        }
        let fc_bias = expect_shape(w, &format!("{prefix}.fc.bias"), &[two_c])?;
        Ok(AdaIn1d {
            fc_weight,
            fc_bias,
            channels: two_c / 2,
            style_dim,
        })
    }

    /// The block for `x` [T, C] and the style `style` [style_dim]; returns [T, C].
    ///
    /// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L27-L31
    /// (`AdaIN1d.forward`).
    pub fn build<'a>(
        &self,
        ctx: &'a Context,
        w: &'a dyn WeightLookup,
        x: Tensor<'a>,
        style: Tensor<'a>,
    ) -> Result<Tensor<'a>> {
        let (gamma, beta) = self.style_affine(ctx, w, style)?;
        let normed = ctx.norm(x, INSTANCE_NORM_EPS);
        Ok(ctx.add(ctx.add(ctx.mul(normed, gamma), normed), beta))
    }

    /// The block's gain and offset for `style`, each [1, C], for layers that fuse the
    /// normalisation and the affine step with what follows.
    ///
    /// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L28-L30 (`fc(s)` split
    /// into gamma and beta).
    pub fn style_affine<'a>(
        &self,
        ctx: &'a Context,
        w: &'a dyn WeightLookup,
        style: Tensor<'a>,
    ) -> Result<(Tensor<'a>, Tensor<'a>)> {
        let c = self.channels;
        let fc = ctx.cont(ctx.transpose(w.tensor(&self.fc_weight)?)); // [style, 2C]
        let h = ctx.add(
            ctx.mul_mat(fc, ctx.reshape(style, &[self.style_dim, 1])),
            ctx.reshape(ctx.to_f32(w.tensor(&self.fc_bias)?), &[2 * c, 1]),
        ); // [2C, 1]
        let gamma = ctx.reshape(ctx.view_1d(h, c, 0), &[1, c]);
        let beta = ctx.reshape(ctx.view_1d(h, c, c as usize), &[1, c]);
        Ok((gamma, beta))
    }
}

/// Nearest-neighbour upsampling of time by two: [T, C] -> [2T, C].
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L328-L337 (`UpSample1d`).
pub fn upsample_nearest_x2<'a>(ctx: &'a Context, x: Tensor<'a>) -> Tensor<'a> {
    let [t, c, _, _] = x.ne();
    let x3 = ctx.reshape(ctx.cont(x), &[1, t, c]);
    ctx.reshape(ctx.concat(x3, x3, 0), &[2 * t, c])
}

/// The depthwise transposed convolution (kernel 3, stride 2, padding 1 and output
/// padding 1) that upsamples an [`AdainResBlk1d`]'s residual. ggml's transposed
/// convolution has no groups, so it is decomposed: output sample `2i` is `x[i] * w1`,
/// sample `2i + 1` is `x[i] * w2 + x[i + 1] * w0` (zero past the end), interleaved.
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L349-L352
/// (`AdainResBlk1d.pool`, a `ConvTranspose1d` with `groups=dim_in`).
#[derive(Debug, Clone)]
pub struct DepthwiseUpsample {
    weight: String,
    bias: String,
    channels: i64,
}

impl DepthwiseUpsample {
    /// Loads `{prefix}.pool.weight` (ONNX [C, 1, 3]) and `{prefix}.pool.bias`.
    pub fn load(w: &dyn WeightLookup, prefix: &str, channels: i64) -> Result<Self> {
        let weight = conv_weight_name(w, prefix, "pool");
        expect_shape(w, &weight, &[3, 1, channels])?;
        let bias = expect_shape(w, &format!("{prefix}.pool.bias"), &[channels])?;
        Ok(DepthwiseUpsample {
            weight,
            bias,
            channels,
        })
    }

    /// [T, C] -> [2T, C].
    pub fn build<'a>(
        &self,
        ctx: &'a Context,
        w: &'a dyn WeightLookup,
        x: Tensor<'a>,
    ) -> Result<Tensor<'a>> {
        let c = self.channels;
        let [t, _, _, _] = x.ne();
        let x = ctx.cont(x);
        let taps = ctx.reshape(ctx.to_f32(w.tensor(&self.weight)?), &[3, c]);
        let tap = |k: usize| ctx.cont(ctx.view_2d_rows(taps, 1, c, k));
        let even = ctx.mul(x, tap(1));
        let next = if t > 1 {
            ctx.pad_zeros(
                ctx.view_2d_strided(x, [t - 1, c], t as usize, 1),
                [0, 0],
                [1, 0],
            )
        } else {
            ctx.scale(x, 0.0)
        };
        let odd = ctx.add(ctx.mul(x, tap(2)), ctx.mul(next, tap(0)));
        let pair = ctx.concat(
            ctx.reshape(even, &[1, t, c]),
            ctx.reshape(odd, &[1, t, c]),
            0,
        );
        let up = ctx.reshape(pair, &[2 * t, c]);
        Ok(ctx.add(up, ctx.reshape(ctx.to_f32(w.tensor(&self.bias)?), &[1, c])))
    }
}

/// StyleTTS 2's AdainResBlk1d: `(residual(x) + shortcut(x)) / sqrt(2)` where the
/// residual is AdaIN, LeakyReLU 0.2, [upsample], conv k3, AdaIN, LeakyReLU, conv k3, and
/// the shortcut is [nearest upsample], [1x1 conv when the channel count changes].
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L340-L381 (`AdainResBlk1d`).
#[derive(Debug, Clone)]
pub struct AdainResBlk1d {
    norm1: AdaIn1d,
    norm2: AdaIn1d,
    conv1: Conv1d,
    conv2: Conv1d,
    shortcut: Option<Conv1d>,
    pool: Option<DepthwiseUpsample>,
    /// Input channels.
    pub dim_in: i64,
    /// Output channels.
    pub dim_out: i64,
}

impl AdainResBlk1d {
    /// Loads the block under the module path `prefix` (e.g.
    /// `decoder.decoder.decode.3`); `upsample` says whether it doubles time.
    pub fn load(w: &dyn WeightLookup, prefix: &str, upsample: bool) -> Result<Self> {
        let norm1 = AdaIn1d::load(w, &format!("{prefix}.norm1"))?;
        let norm2 = AdaIn1d::load(w, &format!("{prefix}.norm2"))?;
        let conv1 = Conv1d::load(w, prefix, "conv1", true, 1, 1)?;
        let conv2 = Conv1d::load(w, prefix, "conv2", true, 1, 1)?;
        let (dim_in, dim_out) = (conv1.in_channels, conv2.out_channels);
        if norm1.channels != dim_in || norm2.channels != conv1.out_channels {
            return Err(EngineError::BadSpec {
                origin: "kokoro".into(),
                reason: format!(
                    "'{prefix}': norms of {} and {} channels around convs {dim_in} -> {} -> {dim_out}",
                    norm1.channels, norm2.channels, conv1.out_channels
                ),
            });
        }
        let shortcut = if dim_in != dim_out {
            Some(Conv1d::load(w, prefix, "conv1x1", false, 1, 1)?)
        } else {
            None
        };
        let pool = if upsample {
            Some(DepthwiseUpsample::load(w, prefix, dim_in)?)
        } else {
            None
        };
        Ok(AdainResBlk1d {
            norm1,
            norm2,
            conv1,
            conv2,
            shortcut,
            pool,
            dim_in,
            dim_out,
        })
    }

    /// True when the block doubles time.
    pub fn upsamples(&self) -> bool {
        self.pool.is_some()
    }

    /// The block for `x` [T, dim_in] and `style` [style_dim]; returns [T or 2T, dim_out].
    ///
    /// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L362-L381
    /// (`AdainResBlk1d._shortcut`, `_residual`, `forward`).
    pub fn build<'a>(
        &self,
        ctx: &'a Context,
        w: &'a dyn WeightLookup,
        x: Tensor<'a>,
        style: Tensor<'a>,
    ) -> Result<Tensor<'a>> {
        let mut r = self.norm1.build(ctx, w, x, style)?;
        r = ctx.leaky_relu(r, RES_BLOCK_SLOPE);
        if let Some(pool) = &self.pool {
            r = pool.build(ctx, w, r)?;
        }
        r = self.conv1.build(ctx, w, r)?;
        r = self.norm2.build(ctx, w, r, style)?;
        r = ctx.leaky_relu(r, RES_BLOCK_SLOPE);
        r = self.conv2.build(ctx, w, r)?;

        let mut s = x;
        if self.pool.is_some() {
            s = upsample_nearest_x2(ctx, s);
        }
        if let Some(conv) = &self.shortcut {
            s = conv.build(ctx, w, s)?;
        }
        Ok(ctx.scale(ctx.add(r, s), std::f32::consts::FRAC_1_SQRT_2))
    }
}
