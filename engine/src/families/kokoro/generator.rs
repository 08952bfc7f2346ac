//! Kokoro's iSTFTNet generator (graph part): per upsampling stage a LeakyReLU 0.1, a
//! transposed convolution, the harmonic source's STFT brought to the stage's rate by a
//! strided convolution and an AdaIN residual block (added in), and the mean of three
//! AdaIN residual blocks (kernels 3/7/11, dilations 1/3/5, Snake activations); then
//! LeakyReLU 0.01 and `conv_post`, whose channels split into the magnitude (`exp`) and
//! the phase (`sin`) of the inverse STFT ([`super::istft`]).

use crate::error::{EngineError, Result};
use crate::ggml::{profile, Context, DType, Tensor};

use super::adain::{dims_of, expect_shape, AdaIn1d, Conv1d, WeightLookup, INSTANCE_NORM_EPS};

/// The generator's hyper-parameters that no weight shape tells (Kokoro v1.0's
/// `istftnet` config: upsample rates [10, 6], dilations [1, 3, 5], iSTFT hop 5).
///
/// Upstream: `config['istftnet']`, passed at `hexgrad/kokoro@dfb907a02bba` kokoro/model.py
/// L62-L65 (the values are in Kokoro-82M's `config.json`, not in that repository).
#[derive(Debug, Clone)]
pub struct GeneratorConfig {
    /// Stride of each transposed convolution.
    pub upsample_rates: Vec<i32>,
    /// Dilations of the three convolution pairs of every AdaIN residual block.
    pub resblock_dilations: Vec<i32>,
    /// Hop of the inverse STFT in samples.
    pub istft_hop: i32,
}

impl GeneratorConfig {
    /// The values of Kokoro-82M v1.0 (its `config.json`, `istftnet`).
    pub fn kokoro_v1() -> Self {
        GeneratorConfig {
            upsample_rates: vec![10, 6],
            resblock_dilations: vec![1, 3, 5],
            istft_hop: 5,
        }
    }
}

/// iSTFTNet's AdaINResBlock1: for each dilation, `x += conv2(snake(adain2(conv1(
/// snake(adain1(x))))))` with Snake `x + sin^2(alpha x) / alpha` (alpha per channel).
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L34-L77 (`AdaINResBlock1`).
#[derive(Debug, Clone)]
pub struct AdaInResBlock1 {
    stages: Vec<SnakeStage>,
}

#[derive(Debug, Clone)]
struct SnakeStage {
    adain1: AdaIn1d,
    alpha1: String,
    conv1: Conv1d,
    adain2: AdaIn1d,
    alpha2: String,
    conv2: Conv1d,
}

/// Snake `v + sin(alpha v)^2 / alpha` of `v = adain(x)` for `x` [T, C], `alpha`
/// [1, C, 1] (ONNX shape): the AdaIN (normalisation and affine step) and the Snake
/// computed as one layer.
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L70-L71 and L73-L74 (AdaIN
/// then Snake1D).
fn ada_in_snake<'a>(
    ctx: &'a Context,
    w: &'a dyn WeightLookup,
    adain: &AdaIn1d,
    x: Tensor<'a>,
    style: Tensor<'a>,
    alpha: &str,
) -> Result<Tensor<'a>> {
    let [_, c, _, _] = x.ne();
    let (gamma, beta) = adain.style_affine(ctx, w, style)?;
    let a = ctx.reshape(ctx.to_f32(w.tensor(alpha)?), &[1, c]);
    w.layers()
        .ada_in_snake(ctx, x, INSTANCE_NORM_EPS, gamma, beta, a)
}

impl AdaInResBlock1 {
    /// Loads `{prefix}.{adain1,adain2}.{j}`, `{prefix}.{alpha1,alpha2}.{j}` and
    /// `{prefix}.{convs1,convs2}.{j}` for each dilation `j`.
    pub fn load(w: &dyn WeightLookup, prefix: &str, dilations: &[i32]) -> Result<Self> {
        let mut stages = Vec::new();
        for (j, &d) in dilations.iter().enumerate() {
            let conv1 = Conv1d::load(w, prefix, &format!("convs1.{j}"), true, 1, d)?;
            let conv2 = Conv1d::load(w, prefix, &format!("convs2.{j}"), true, 1, 1)?;
            let c = conv1.out_channels;
            stages.push(SnakeStage {
                adain1: AdaIn1d::load(w, &format!("{prefix}.adain1.{j}"))?,
                alpha1: expect_shape(w, &format!("{prefix}.alpha1.{j}"), &[1, c, 1])?,
                conv1,
                adain2: AdaIn1d::load(w, &format!("{prefix}.adain2.{j}"))?,
                alpha2: expect_shape(w, &format!("{prefix}.alpha2.{j}"), &[1, c, 1])?,
                conv2,
            });
        }
        Ok(AdaInResBlock1 { stages })
    }

    /// The block for `x` [T, C] and `style`; returns [T, C].
    ///
    /// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L68-L77
    /// (`AdaINResBlock1.forward`).
    pub fn build<'a>(
        &self,
        ctx: &'a Context,
        w: &'a dyn WeightLookup,
        mut x: Tensor<'a>,
        style: Tensor<'a>,
    ) -> Result<Tensor<'a>> {
        for s in &self.stages {
            let mut t = ada_in_snake(ctx, w, &s.adain1, x, style, &s.alpha1)?;
            t = s.conv1.build(ctx, w, t)?;
            t = ada_in_snake(ctx, w, &s.adain2, t, style, &s.alpha2)?;
            t = s.conv2.build(ctx, w, t)?;
            x = ctx.add(t, x);
        }
        Ok(x)
    }
}

/// A transposed convolution with PyTorch's padding `(K - stride) / 2`: [L, IC] ->
/// [L * stride, OC], computed as [`conv_transpose_by_product`] computes it (one tap
/// product, here on the stored or transposed tap matrix, and an overlap-add), so its
/// kernel must be whole strides. ggml's has no padding: the full result is cropped.
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L270-L273 (`Generator.ups`,
/// padding `(k - u) // 2`).
#[derive(Debug, Clone)]
struct ConvTranspose1d {
    weight: String,
    bias: String,
    kernel: i64,
    out_channels: i64,
    stride: i32,
    /// The file stores the tap product's matrix [IC, K * OC] (q8_0 files, packed for
    /// the engine's int8 kernel on the CPU) instead of the ONNX kernel [K, OC, IC].
    stored_as_taps: bool,
}

impl ConvTranspose1d {
    fn load(w: &dyn WeightLookup, prefix: &str, stride: i32) -> Result<Self> {
        let weight = format!("{prefix}.weight");
        let [kernel, out_channels, _, _] = dims_of(w, &weight)?;
        let bias = expect_shape(w, &format!("{prefix}.bias"), &[out_channels])?;
        let s = stride as i64;
        if s <= 0 || kernel < s || (kernel - s) % 2 != 0 || kernel % s != 0 {
            return Err(EngineError::BadSpec {
                origin: "kokoro".into(),
                reason: format!(
                    "'{weight}': kernel {kernel} does not fit stride {stride} (the generator \
                     needs a kernel of whole strides, at least one)"
                ),
            });
        }
        let stored_as_taps = matches!(w.tensor(&weight)?.dtype(), Some(DType::Q8_0 | DType::I8));
        Ok(ConvTranspose1d {
            weight,
            bias,
            kernel,
            out_channels,
            stride,
            stored_as_taps,
        })
    }

    fn build<'a>(
        &self,
        ctx: &'a Context,
        w: &'a dyn WeightLookup,
        x: Tensor<'a>,
    ) -> Result<Tensor<'a>> {
        let [l, _, _, _] = x.ne();
        let s = self.stride as i64;
        let kernel = w.tensor(&self.weight)?;
        // An f16 kernel is widened: the product runs in f32 (as the reference checks of
        // the f16 file measured it).
        let matrix = if self.stored_as_taps {
            kernel
        } else {
            tap_matrix(ctx, ctx.to_f32(kernel))
        };
        let taps = w
            .layers()
            .linear(ctx, matrix, None, ctx.cont(ctx.transpose(x)))?;
        let full = overlap_add(ctx, taps, self.kernel, self.out_channels, l, s);
        let full_len = (l - 1) * s + self.kernel;
        let pad = ((self.kernel - s) / 2) as usize;
        let y =
            ctx.cont(ctx.view_2d_strided(full, [l * s, self.out_channels], full_len as usize, pad));
        Ok(ctx.add(
            y,
            ctx.reshape(ctx.to_f32(w.tensor(&self.bias)?), &[1, self.out_channels]),
        ))
    }
}

/// A transposed convolution (padding 0) as one matrix product and an overlap-add:
/// same operands and result as [`Context::conv_transpose_1d_f32`] (`kernel` [K, OC, IC],
/// `input` [L, IC], result [(L - 1) * stride + K, OC]). ggml's CPU kernel for that op
/// takes one short dot product per output tap and was half the decoder's time; the
/// product goes through the blocked matrix kernels instead. The product gives every tap
/// of every step, [K * OC, L]; with K = m * stride, tap block j of step t lands on output
/// block t + j, so the output is the sum of m zero-padded, shifted copies. Any other K
/// takes ggml's op.
pub(super) fn conv_transpose_by_product<'a>(
    ctx: &'a Context,
    kernel: Tensor<'a>,
    input: Tensor<'a>,
    stride: i32,
) -> Tensor<'a> {
    let [k, oc, _, _] = kernel.ne();
    let [l, _, _, _] = input.ne();
    let s = stride as i64;
    if s <= 0 || k % s != 0 {
        return ctx.conv_transpose_1d_f32(kernel, input, stride);
    }
    let x = ctx.cont(ctx.transpose(input)); // [IC, L]
    let taps = ctx.mul_mat(tap_matrix(ctx, kernel), x); // [K*OC, L]
    overlap_add(ctx, taps, k, oc, l, s)
}

/// The matrix of the tap product, [IC, K * OC] (row `oc * K + k`), of a transposed
/// convolution's f32 `kernel` [K, OC, IC]: what a q8_0 file stores in its place.
fn tap_matrix<'a>(ctx: &'a Context, kernel: Tensor<'a>) -> Tensor<'a> {
    let [k, oc, ic, _] = kernel.ne();
    ctx.cont(ctx.transpose(ctx.reshape(kernel, &[k * oc, ic])))
}

/// The transposed convolution (padding 0, [(L - 1) * stride + K, OC]) from `taps`
/// [K * OC, L], every tap of every step (row `oc * K + k`), for a kernel of `k` = m x
/// `s` taps: the sum of the m tap blocks, each shifted by its block index.
fn overlap_add<'a>(
    ctx: &'a Context,
    taps: Tensor<'a>,
    k: i64,
    oc: i64,
    l: i64,
    s: i64,
) -> Tensor<'a> {
    let m = k / s;
    let (ku, ocu, su) = (k as usize, oc as usize, s as usize);
    let mut out: Option<Tensor<'a>> = None;
    for j in 0..m {
        let block = ctx.view_3d(taps, [s, oc, l], ku, ku * ocu, j as usize * su);
        let block = ctx.cont(ctx.permute(block, [0, 2, 1, 3])); // [s, L, OC]
        let shifted = ctx.pad_zeros(block, [0, j as i32], [0, (m - 1 - j) as i32]);
        out = Some(match out {
            Some(acc) => ctx.add(acc, shifted),
            None => shifted,
        });
    }
    let out = out.expect("a kernel of at least one stride");
    ctx.reshape(out, &[(l + m - 1) * s, oc])
}

/// The generator's graph from the decoder features to the iSTFT's magnitude and phase.
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L257-L297
/// (`Generator.__init__`).
#[derive(Debug, Clone)]
pub struct Generator {
    ups: Vec<ConvTranspose1d>,
    noise_convs: Vec<Conv1d>,
    noise_res: Vec<AdaInResBlock1>,
    resblocks: Vec<Vec<AdaInResBlock1>>,
    conv_post: Conv1d,
    /// FFT bins of the iSTFT (`n_fft / 2 + 1`): conv_post gives magnitudes then phases.
    pub bins: i64,
    /// Channels of the source STFT the noise convolutions read (2 * bins).
    pub source_channels: i64,
}

/// The magnitude and phase the generator gives, each [L, bins] (time fastest).
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L323-L324 (`spec`, `phase`).
pub struct Spectrum<'a> {
    /// `exp` of the first half of conv_post's channels.
    pub magnitude: Tensor<'a>,
    /// `sin` of the second half.
    pub phase: Tensor<'a>,
}

impl Generator {
    /// Loads the generator under `prefix` (`decoder.decoder.generator`).
    pub fn load(w: &dyn WeightLookup, prefix: &str, cfg: &GeneratorConfig) -> Result<Self> {
        let stages = cfg.upsample_rates.len();
        let mut ups = Vec::new();
        let mut noise_convs = Vec::new();
        let mut noise_res = Vec::new();
        let mut resblocks = Vec::new();
        let mut per_stage = 0;
        while w
            .tensor(&format!("{prefix}.resblocks.{per_stage}.convs1.0.weight"))
            .is_ok()
        {
            per_stage += 1;
        }
        if stages == 0 || per_stage % stages != 0 || per_stage == 0 {
            return Err(EngineError::BadSpec {
                origin: "kokoro".into(),
                reason: format!(
                    "'{prefix}': {per_stage} residual blocks for {stages} upsampling stages"
                ),
            });
        }
        let per_stage = per_stage / stages;
        for (i, &rate) in cfg.upsample_rates.iter().enumerate() {
            ups.push(ConvTranspose1d::load(
                w,
                &format!("{prefix}.ups.{i}"),
                rate,
            )?);
            // The source STFT runs at the last stage's rate; earlier stages get it
            // through a strided convolution (stride = the later stages' upsampling).
            let stride: i32 = cfg.upsample_rates[i + 1..].iter().product();
            let conv = Conv1d::load(w, prefix, &format!("noise_convs.{i}"), true, stride, 1)?;
            let pad = if i + 1 < stages { (stride + 1) / 2 } else { 0 };
            noise_convs.push(conv.with_pad(pad));
            noise_res.push(AdaInResBlock1::load(
                w,
                &format!("{prefix}.noise_res.{i}"),
                &cfg.resblock_dilations,
            )?);
            let mut blocks = Vec::new();
            for j in 0..per_stage {
                blocks.push(AdaInResBlock1::load(
                    w,
                    &format!("{prefix}.resblocks.{}", i * per_stage + j),
                    &cfg.resblock_dilations,
                )?);
            }
            resblocks.push(blocks);
        }
        let conv_post = Conv1d::load(w, prefix, "conv_post", true, 1, 1)?;
        let bins = conv_post.out_channels / 2;
        let source_channels = noise_convs[0].in_channels;
        Ok(Generator {
            ups,
            noise_convs,
            noise_res,
            resblocks,
            conv_post,
            bins,
            source_channels,
        })
    }

    /// The generator for decoder features `x` [T, C], the source STFT `source`
    /// [frames, 2 * bins] (magnitudes then phases, frames = T * prod(rates) + 1) and
    /// the decoder style [style_dim].
    ///
    /// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L306-L324
    /// (`Generator.forward` after the source, which [`super::source`] computes).
    pub fn build<'a>(
        &self,
        ctx: &'a Context,
        w: &'a dyn WeightLookup,
        mut x: Tensor<'a>,
        source: Tensor<'a>,
        style: Tensor<'a>,
    ) -> Result<Spectrum<'a>> {
        let last = self.ups.len() - 1;
        for (i, up) in self.ups.iter().enumerate() {
            x = ctx.leaky_relu(x, 0.1);
            let mut xs = self.noise_convs[i].build(ctx, w, source)?;
            xs = self.noise_res[i].build(ctx, w, xs, style)?;
            profile::mark_stage(xs, &format!("noise_{i}"));
            x = up.build(ctx, w, x)?;
            profile::mark_stage(x, &format!("ups_{i}"));
            if i == last {
                x = ctx.pad_reflect_1d(x, 1, 0);
            }
            x = ctx.add(x, xs);
            let mut sum: Option<Tensor<'a>> = None;
            for block in &self.resblocks[i] {
                let y = block.build(ctx, w, x, style)?;
                sum = Some(match sum {
                    Some(s) => ctx.add(s, y),
                    None => y,
                });
            }
            let n = self.resblocks[i].len() as f32;
            x = ctx.scale(sum.expect("at least one block per stage"), 1.0 / n);
            profile::mark_stage(x, &format!("resblocks_{i}"));
        }
        x = ctx.leaky_relu(x, 0.01);
        let post = self.conv_post.build(ctx, w, x)?; // [L, 2 * bins]
        profile::mark_stage(post, "conv_post");
        let [l, _, _, _] = post.ne();
        let half = |k: i64| ctx.view_2d_strided(post, [l, self.bins], l as usize, (k * l) as usize);
        Ok(Spectrum {
            magnitude: ctx.exp(ctx.cont(half(0))),
            phase: ctx.sin(ctx.cont(half(self.bins))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::ConvTranspose1d;
    use crate::error::EngineError;
    use crate::ggml::{Context, DType};

    /// A bare context with a kernel of `dtype` and dims `ne`, and its bias.
    fn weights(dtype: DType, ne: &[i64]) -> Context {
        let ctx = Context::new(4, 0).unwrap();
        ctx.new_tensor(dtype, ne, "up.weight");
        ctx.new_tensor(DType::F32, &[ne[1]], "up.bias");
        ctx
    }

    fn refusal(ctx: &Context, stride: i32) -> String {
        match ConvTranspose1d::load(ctx, "up", stride) {
            Err(EngineError::BadSpec { reason, .. }) => reason,
            other => panic!("stride {stride}: expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_kernel_of_whole_strides_loads_in_either_form() {
        let f32_kernel = ConvTranspose1d::load(&weights(DType::F32, &[20, 4, 3]), "up", 10);
        assert!(!f32_kernel.unwrap().stored_as_taps);
        // A bare context's dims are the tensor's own: a q8_0 tensor [32, 30] reads as a
        // kernel of 32 taps and 30 output channels.
        let taps = ConvTranspose1d::load(&weights(DType::Q8_0, &[32, 30]), "up", 16);
        assert!(taps.unwrap().stored_as_taps);
    }

    #[test]
    fn a_kernel_that_is_not_whole_strides_is_refused_at_load() {
        let reason = refusal(&weights(DType::F32, &[14, 4, 3]), 6);
        assert!(
            reason.contains("'up.weight': kernel 14 does not fit stride 6"),
            "{reason}"
        );
        assert!(reason.contains("whole strides"), "{reason}");
        let reason = refusal(&weights(DType::Q8_0, &[32, 30]), 10);
        assert!(
            reason.contains("kernel 32 does not fit stride 10"),
            "{reason}"
        );
        let reason = refusal(&weights(DType::F32, &[20, 4, 3]), 0);
        assert!(reason.contains("stride 0"), "{reason}");
    }
}
