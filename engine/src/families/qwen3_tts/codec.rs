//! The 12 Hz codec decoder ("speech tokenizer" v2): a frame's 16 codes to 1920 samples at
//! 24 kHz. Codebook lookups summed per split (the first codebook, the rest) and projected
//! ([`Codec::dequantize`]), a causal convolution, a sliding-window transformer, two
//! ConvNeXt upsampling stages, then decoder blocks of SnakeBeta, a causal transposed
//! convolution and three dilated residual units, a last SnakeBeta and convolution, and a
//! clamp to [-1, 1]. Long code sequences are decoded in chunks of 300 frames, each with
//! the 25 frames before it as context, as the official decoder does ([`decode`]).
//!
//! Activations are [channels, time] (channels fastest). Every convolution is causal and is
//! computed tap by tap as products with the kernel's taps (laid out [IC, OC] per tap at
//! load), which needs no im2col buffer (the last block's would be 1.5 GB for a chunk).
//!
//! Upstream: `qwen-tts==0.1.1` qwen_tts/core/tokenizer_12hz/modeling_qwen3_tts_tokenizer_v2.py
//! L869-L884 (`Qwen3TTSTokenizerV2Decoder.forward`), L780-L822 and L676-L727 (split RVQ
//! decode), L159-L208 (causal convolutions), L211-L243 (ConvNeXt), L578-L616 (SnakeBeta),
//! L619-L658 (residual unit, decoder block), L886-L897 (`chunked_decode`).

use std::collections::HashMap;

use crate::backend::Runtime;
use crate::error::{EngineError, Result};
use crate::ggml::{Context, DType, HostTensor, Scheduler, Tensor};
use crate::layers::Layers;
use crate::model_file::ModelFile;
use crate::weights::{f32_tensor, WeightStore, WeightTensor};

use super::hparams::Codec as CodecParams;
use super::talker::causal_mask;
use super::transformer::{rms_norm, DecoderLayer, KvCache, Variant};

/// Tensor names of the codec decoder in the file.
const SRC: &str = "codec";
/// Frames per chunk and frames of left context, as the official `chunked_decode`.
pub const CHUNK_FRAMES: usize = 300;
/// Left context of a chunk.
pub const CONTEXT_FRAMES: usize = 25;
/// Kernel width of the decoder's convolutions and of ConvNeXt's depthwise one.
const KERNEL: usize = 7;
/// Dilations of a decoder block's three residual units.
const DILATIONS: [usize; 3] = [1, 3, 9];
/// LayerNorm epsilon of the ConvNeXt blocks (fixed in the upstream code).
const CONVNEXT_EPS: f32 = 1e-6;
/// Floor of a codebook entry's usage count in the dequantisation.
const USAGE_FLOOR: f32 = 1e-5;
/// SnakeBeta's epsilon under `exp(beta)`.
const SNAKE_EPS: f32 = 1e-9;

/// The codec's tensors as the file has them, turned into the forms the graph reads:
/// codebooks divided by their usage, convolution kernels split into taps, SnakeBeta's
/// log-scale parameters exponentiated.
pub fn prepare(tensors: Vec<HostTensor>, p: &CodecParams) -> Result<Vec<WeightTensor>> {
    let mut by_name: HashMap<String, HostTensor> =
        tensors.into_iter().map(|t| (t.name.clone(), t)).collect();
    let mut take = |name: &str| -> Result<HostTensor> {
        by_name.remove(name).ok_or_else(|| EngineError::BadSpec {
            origin: "qwen3_tts".into(),
            reason: format!("codec tensor '{name}' is missing; convert the model again (task 'convert', family 'qwen3_tts')"),
        })
    };
    let mut out = Vec::new();
    let dim = p.codebook_dim / 2;
    for q in 0..p.quantizers {
        let layer = if q == 0 {
            format!("{SRC}.quantizer.rvq_first.vq.layers.0._codebook")
        } else {
            format!("{SRC}.quantizer.rvq_rest.vq.layers.{}._codebook", q - 1)
        };
        let sum = take(&format!("{layer}.embedding_sum"))?;
        let usage = take(&format!("{layer}.cluster_usage"))?.to_f32();
        expect(&sum, &[dim, p.codebook_size])?;
        let mut e = sum.to_f32();
        for (row, &u) in e.chunks_mut(dim).zip(&usage) {
            let u = u.max(USAGE_FLOOR);
            row.iter_mut().for_each(|v| *v /= u);
        }
        out.push(f32_tensor(
            format!("prepared.codebook.{q}"),
            vec![dim as i64, p.codebook_size as i64],
            e,
        ));
    }
    for split in ["rvq_first", "rvq_rest"] {
        let t = take(&format!("{SRC}.quantizer.{split}.output_proj.weight"))?;
        expect(&t, &[1, dim, p.codebook_dim])?;
        out.push(f32_tensor(
            format!("prepared.{split}.output_proj"),
            vec![dim as i64, p.codebook_dim as i64],
            t.to_f32(),
        ));
    }
    let mut conv =
        |name: &str, k: usize, ic: usize, oc: usize, out: &mut Vec<WeightTensor>| -> Result<()> {
            let t = take(&format!("{SRC}.{name}.weight"))?;
            expect(&t, &[k, ic, oc])?;
            out.push(f32_tensor(
                format!("prepared.{name}.taps"),
                vec![ic as i64, oc as i64, k as i64],
                conv_taps(&t.to_f32(), k, ic, oc),
            ));
            let b = take(&format!("{SRC}.{name}.bias"))?;
            expect(&b, &[oc])?;
            out.push(f32_tensor(
                format!("prepared.{name}.bias"),
                vec![oc as i64],
                b.to_f32(),
            ));
            Ok(())
        };
    conv("pre_conv.conv", 3, p.codebook_dim, p.latent_dim, &mut out)?;
    conv(
        "decoder.0.conv",
        KERNEL,
        p.latent_dim,
        p.decoder_dim,
        &mut out,
    )?;
    let n = p.upsample_rates.len();
    for (i, &r) in p.upsample_rates.iter().enumerate() {
        let c = p.block_channels(i + 1);
        for unit in 2..5 {
            conv(
                &format!("decoder.{}.block.{unit}.conv1.conv", i + 1),
                KERNEL,
                c,
                c,
                &mut out,
            )?;
            conv(
                &format!("decoder.{}.block.{unit}.conv2.conv", i + 1),
                1,
                c,
                c,
                &mut out,
            )?;
        }
        let _ = r;
    }
    conv(
        &format!("decoder.{}.conv", n + 2),
        KERNEL,
        p.block_channels(n),
        1,
        &mut out,
    )?;
    let mut transposed =
        |name: &str, k: usize, ic: usize, oc: usize, out: &mut Vec<WeightTensor>| -> Result<()> {
            let t = take(&format!("{SRC}.{name}.weight"))?;
            expect(&t, &[k, oc, ic])?;
            out.push(f32_tensor(
                format!("prepared.{name}.taps"),
                vec![ic as i64, (oc * k) as i64],
                transposed_taps(&t.to_f32(), k, ic, oc),
            ));
            let b = take(&format!("{SRC}.{name}.bias"))?;
            expect(&b, &[oc])?;
            out.push(f32_tensor(
                format!("prepared.{name}.bias"),
                vec![oc as i64],
                b.to_f32(),
            ));
            Ok(())
        };
    for (s, &f) in p.upsampling_ratios.iter().enumerate() {
        transposed(
            &format!("upsample.{s}.0.conv"),
            f,
            p.latent_dim,
            p.latent_dim,
            &mut out,
        )?;
    }
    for (i, &r) in p.upsample_rates.iter().enumerate() {
        transposed(
            &format!("decoder.{}.block.1.conv", i + 1),
            2 * r,
            p.block_channels(i),
            p.block_channels(i + 1),
            &mut out,
        )?;
    }
    let latent = p.latent_dim;
    for s in 0..p.upsampling_ratios.len() {
        let pre = format!("upsample.{s}.1");
        let dw = take(&format!("{SRC}.{pre}.dwconv.conv.weight"))?;
        expect(&dw, &[KERNEL, 1, latent])?;
        let w = dw.to_f32();
        let mut taps = vec![0f32; latent * KERNEL];
        for c in 0..latent {
            for j in 0..KERNEL {
                taps[j * latent + c] = w[c * KERNEL + j];
            }
        }
        out.push(f32_tensor(
            format!("prepared.{pre}.dwconv.taps"),
            vec![latent as i64, KERNEL as i64],
            taps,
        ));
        for name in [
            "dwconv.conv.bias",
            "norm.weight",
            "norm.bias",
            "gamma",
            "pwconv1.bias",
            "pwconv2.bias",
        ] {
            let t = take(&format!("{SRC}.{pre}.{name}"))?;
            let want = if name == "pwconv1.bias" {
                4 * latent
            } else {
                latent
            };
            expect(&t, &[want])?;
            out.push(plain(format!("prepared.{pre}.{name}"), t));
        }
        let w1 = take(&format!("{SRC}.{pre}.pwconv1.weight"))?;
        expect(&w1, &[latent, 4 * latent])?;
        out.push(plain(format!("prepared.{pre}.pwconv1.weight"), w1));
        let w2 = take(&format!("{SRC}.{pre}.pwconv2.weight"))?;
        expect(&w2, &[4 * latent, latent])?;
        out.push(plain(format!("prepared.{pre}.pwconv2.weight"), w2));
    }
    let mut snake = |name: &str, c: usize, out: &mut Vec<WeightTensor>| -> Result<()> {
        let a = take(&format!("{SRC}.{name}.alpha"))?;
        let b = take(&format!("{SRC}.{name}.beta"))?;
        expect(&a, &[c])?;
        expect(&b, &[c])?;
        out.push(f32_tensor(
            format!("prepared.{name}.alpha"),
            vec![c as i64],
            a.to_f32().iter().map(|v| v.exp()).collect(),
        ));
        out.push(f32_tensor(
            format!("prepared.{name}.beta"),
            vec![c as i64],
            b.to_f32()
                .iter()
                .map(|v| 1.0 / (v.exp() + SNAKE_EPS))
                .collect(),
        ));
        Ok(())
    };
    for i in 0..n {
        snake(
            &format!("decoder.{}.block.0", i + 1),
            p.block_channels(i),
            &mut out,
        )?;
        for unit in 2..5 {
            for act in ["act1", "act2"] {
                snake(
                    &format!("decoder.{}.block.{unit}.{act}", i + 1),
                    p.block_channels(i + 1),
                    &mut out,
                )?;
            }
        }
    }
    snake(&format!("decoder.{}", n + 1), p.block_channels(n), &mut out)?;
    let tr = &p.transformer;
    // The transformer's weights go up as they are, under their names.
    let _ = tr;
    let rest: Vec<String> = by_name
        .keys()
        .filter(|k| k.starts_with(&format!("{SRC}.pre_transformer.")))
        .cloned()
        .collect();
    for name in rest {
        let t = by_name.remove(&name).expect("listed above");
        out.push(plain(name, t));
    }
    Ok(out)
}

/// A tensor uploaded as it is (f32), under `name`.
fn plain(name: String, t: HostTensor) -> WeightTensor {
    f32_tensor(name, t.ne.clone(), t.to_f32())
}

/// Checks `t`'s dims (ggml order).
fn expect(t: &HostTensor, ne: &[usize]) -> Result<()> {
    let squeeze = |mut v: Vec<i64>| {
        while v.len() > 1 && v.last() == Some(&1) {
            v.pop();
        }
        v
    };
    let want = squeeze(ne.iter().map(|&n| n as i64).collect());
    let have = squeeze(t.ne.clone());
    if have != want {
        return Err(EngineError::BadSpec {
            origin: "qwen3_tts".into(),
            reason: format!(
                "codec tensor '{}' has dims {:?}, expected {want:?}; convert the model again",
                t.name, t.ne
            ),
        });
    }
    Ok(())
}

/// A Conv1d kernel (PyTorch [OC, IC, K]) as K taps of [IC, OC] (ggml order), one after
/// another: tap `j`'s product with the input shifted by `j` steps.
fn conv_taps(w: &[f32], k: usize, ic: usize, oc: usize) -> Vec<f32> {
    let mut taps = vec![0f32; w.len()];
    for o in 0..oc {
        for i in 0..ic {
            for j in 0..k {
                taps[(j * oc + o) * ic + i] = w[(o * ic + i) * k + j];
            }
        }
    }
    taps
}

/// A ConvTranspose1d kernel (PyTorch [IC, OC, K]) as one [IC, OC * K] matrix whose output
/// row `c + OC * j` is tap `j` of output channel `c`.
fn transposed_taps(w: &[f32], k: usize, ic: usize, oc: usize) -> Vec<f32> {
    let mut taps = vec![0f32; w.len()];
    for i in 0..ic {
        for c in 0..oc {
            for j in 0..k {
                taps[(c + oc * j) * ic + i] = w[(i * oc + c) * k + j];
            }
        }
    }
    taps
}

/// The codec's blocks, checked at load.
#[derive(Clone)]
pub struct Codec {
    p: CodecParams,
    transformer: Vec<DecoderLayer>,
}

impl Codec {
    /// Checks the transformer's weights in the file ([`prepare`] checks the others as it
    /// lays them out).
    pub fn load(w: &ModelFile, p: &CodecParams) -> Result<Self> {
        let tr = &p.transformer;
        let (h, latent) = (tr.hidden as i64, p.latent_dim as i64);
        for (name, ne) in [
            ("codec.pre_transformer.input_proj.weight", vec![latent, h]),
            ("codec.pre_transformer.input_proj.bias", vec![h]),
            ("codec.pre_transformer.output_proj.weight", vec![h, latent]),
            ("codec.pre_transformer.output_proj.bias", vec![latent]),
            ("codec.pre_transformer.norm.weight", vec![h]),
        ] {
            w.expect_dims(name, &ne)?;
        }
        let transformer = (0..tr.layers)
            .map(|l| {
                DecoderLayer::load(
                    w,
                    &format!("codec.pre_transformer.layers.{l}"),
                    tr,
                    Variant::LayerScales,
                )
            })
            .collect::<Result<_>>()?;
        Ok(Codec {
            p: p.clone(),
            transformer,
        })
    }

    /// Graph size of one chunk.
    pub fn nodes(&self) -> usize {
        64 * self.p.transformer.layers
            + 128 * self.p.upsample_rates.len()
            + 64 * self.p.upsampling_ratios.len()
            + 256
    }

    /// Samples of `codes` (frames of `quantizers` codes each), one forward pass.
    pub fn forward(
        &self,
        w: &WeightStore,
        layers: &Layers,
        runtime: &Runtime,
        sched: &mut Scheduler,
        codes: &[Vec<u32>],
    ) -> Result<Vec<f32>> {
        let p = &self.p;
        let t = codes.len();
        let nodes = self.nodes() + 8 * p.quantizers;
        let ctx = Context::new(nodes, nodes)?;
        let mut graph = ctx.new_graph(nodes);
        let mut ints: Vec<(Tensor<'_>, Vec<i32>)> = Vec::new();
        let mut groups = [None, None];
        for q in 0..p.quantizers {
            let idx = ctx.new_i32_tensor(&[t as i64], &format!("codes{q}"));
            idx.mark_input();
            ints.push((idx, codes.iter().map(|f| f[q] as i32).collect()));
            let rows = ctx.get_rows(get(w, &format!("prepared.codebook.{q}")), idx);
            let g = &mut groups[usize::from(q > 0)];
            *g = Some(match g.take() {
                Some(sum) => ctx.add(sum, rows),
                None => rows,
            });
        }
        let [first, rest] = groups.map(|g| g.expect("at least two codebooks"));
        let x = ctx.add(
            ctx.mul_mat(get(w, "prepared.rvq_first.output_proj"), first),
            ctx.mul_mat(get(w, "prepared.rvq_rest.output_proj"), rest),
        );
        let x = causal_conv(&ctx, w, "prepared.pre_conv.conv", x, 3, 1);
        // The transformer over the frames, each seeing the 72 before it.
        let tr = &p.transformer;
        let lin = |name: &str, x| -> Result<Tensor<'_>> {
            layers.linear(
                &ctx,
                get(w, &format!("codec.pre_transformer.{name}.weight")),
                Some(get(w, &format!("codec.pre_transformer.{name}.bias"))),
                x,
            )
        };
        let mut h = lin("input_proj", x)?;
        let pos = ctx.new_i32_tensor(&[t as i64], "pos");
        pos.mark_input();
        let mask = ctx.new_tensor(DType::F32, &[t as i64, t as i64], "mask");
        mask.mark_input();
        let cache = KvCache::new(runtime, tr, t)?;
        for (l, layer) in self.transformer.iter().enumerate() {
            h = layer.build(
                &ctx,
                &mut graph,
                w,
                layers,
                h,
                pos,
                &cache,
                l,
                0,
                Some(mask),
            )?;
        }
        let h = rms_norm(&ctx, w, h, "codec.pre_transformer.norm.weight", tr.rms_eps);
        let mut x = lin("output_proj", h)?;
        for (s, &f) in p.upsampling_ratios.iter().enumerate() {
            x = transposed_conv(&ctx, w, &format!("prepared.upsample.{s}.0.conv"), x, f, f);
            x = convnext(&ctx, w, &format!("prepared.upsample.{s}.1"), x);
        }
        x = causal_conv(&ctx, w, "prepared.decoder.0.conv", x, KERNEL, 1);
        for (i, &r) in p.upsample_rates.iter().enumerate() {
            let b = format!("prepared.decoder.{}.block", i + 1);
            x = snake(&ctx, w, &format!("{b}.0"), x);
            x = transposed_conv(&ctx, w, &format!("{b}.1.conv"), x, 2 * r, r);
            for (unit, &d) in (2..5).zip(&DILATIONS) {
                let u = format!("{b}.{unit}");
                let y = snake(&ctx, w, &format!("{u}.act1"), x);
                let y = causal_conv(&ctx, w, &format!("{u}.conv1.conv"), y, KERNEL, d);
                let y = snake(&ctx, w, &format!("{u}.act2"), y);
                let y = causal_conv(&ctx, w, &format!("{u}.conv2.conv"), y, 1, 1);
                x = ctx.add(x, y);
            }
        }
        let n = p.upsample_rates.len();
        let x = snake(&ctx, w, &format!("prepared.decoder.{}", n + 1), x);
        let x = causal_conv(
            &ctx,
            w,
            &format!("prepared.decoder.{}.conv", n + 2),
            x,
            KERNEL,
            1,
        );
        let y = ctx.clamp(x, -1.0, 1.0);
        y.mark_output();
        graph.expand(y);
        let positions: Vec<i32> = (0..t as i32).collect();
        let window = causal_mask(0, t, Some(p.sliding_window));
        let mut int_inputs: Vec<(Tensor<'_>, &[i32])> = vec![(pos, &positions)];
        int_inputs.extend(ints.iter().map(|(t, v)| (*t, v.as_slice())));
        sched.compute_with(&mut graph, &[(mask, &window)], &int_inputs)?;
        Ok(y.read_f32()?)
    }
}

/// Decodes `codes` as the official `chunked_decode`: chunks of [`CHUNK_FRAMES`] frames,
/// each after the [`CONTEXT_FRAMES`] frames before it (none for the first), whose samples
/// are dropped; `on_chunk` gets each chunk's samples as soon as they exist.
pub fn decode(
    codes: &[Vec<u32>],
    samples_per_frame: usize,
    mut forward: impl FnMut(&[Vec<u32>]) -> Result<Vec<f32>>,
    on_chunk: &mut dyn FnMut(&[f32]) -> Result<()>,
) -> Result<()> {
    let mut start = 0;
    while start < codes.len() {
        let end = (start + CHUNK_FRAMES).min(codes.len());
        let context = if start > CONTEXT_FRAMES {
            CONTEXT_FRAMES
        } else {
            start
        };
        let samples = forward(&codes[start - context..end])?;
        on_chunk(&samples[context * samples_per_frame..])?;
        start = end;
    }
    Ok(())
}

fn get<'a>(w: &'a WeightStore, name: &str) -> Tensor<'a> {
    w.tensor(name)
        .unwrap_or_else(|| panic!("codec weight {name} was prepared at load"))
}

/// A causal convolution of `x` [IC, T] with the taps `{name}.taps` [IC, OC, K] and bias
/// `{name}.bias`, dilated by `dilation`: zeros before the input, then one product per
/// tap with the input shifted by that tap.
///
/// Upstream: modeling_qwen3_tts_tokenizer_v2.py L159-L192 (`CausalConvNet`).
fn causal_conv<'a>(
    ctx: &'a Context,
    w: &'a WeightStore,
    name: &str,
    x: Tensor<'a>,
    k: usize,
    dilation: usize,
) -> Tensor<'a> {
    let taps = get(w, &format!("{name}.taps"));
    let [ic, oc, _, _] = taps.ne();
    let t = x.ne()[1];
    let pad = ((k - 1) * dilation) as i32;
    let xp = if pad > 0 {
        ctx.pad_zeros(x, [0, pad], [0, 0])
    } else {
        x
    };
    let mut y: Option<Tensor<'a>> = None;
    for j in 0..k {
        let tap = ctx.view_2d_rows(taps, ic, oc, j * (ic * oc) as usize);
        let shifted = ctx.view_2d_rows(xp, ic, t, j * dilation * ic as usize);
        let p = ctx.mul_mat(tap, shifted);
        y = Some(match y {
            Some(acc) => ctx.add(acc, p),
            None => p,
        });
    }
    ctx.add(
        y.expect("at least one tap"),
        get(w, &format!("{name}.bias")),
    )
}

/// A causal transposed convolution of `x` [IC, T] with kernel width `k` (the stride
/// `stride` or twice it) and the taps `{name}.taps` [IC, OC * K]: every tap in one
/// product, the taps past the stride overlapping the next step's, and the last `k -
/// stride` samples dropped, so T frames become T * stride.
///
/// Upstream: modeling_qwen3_tts_tokenizer_v2.py L195-L208 (`CausalTransConvNet`).
fn transposed_conv<'a>(
    ctx: &'a Context,
    w: &'a WeightStore,
    name: &str,
    x: Tensor<'a>,
    k: usize,
    stride: usize,
) -> Tensor<'a> {
    let taps = get(w, &format!("{name}.taps"));
    let bias = get(w, &format!("{name}.bias"));
    let oc = bias.ne()[0];
    let t = x.ne()[1];
    let z = ctx.mul_mat(taps, x); // [OC * k, T]: row c + OC * j is tap j
    let s = stride as i64;
    let y = if k == stride {
        ctx.reshape(z, &[oc, t * s])
    } else {
        assert_eq!(
            k,
            2 * stride,
            "checked at load: the decoder's kernels are twice the stride"
        );
        let head = ctx.cont(ctx.view_2d_rows(z, oc * s, t, 0));
        let tail = ctx.cont(ctx.view_2d_rows(z, oc * s, t, (oc * s) as usize));
        let sum = ctx.add(
            ctx.pad_zeros(head, [0, 0], [0, 1]),
            ctx.pad_zeros(tail, [0, 1], [0, 0]),
        );
        ctx.view_2d_rows(ctx.reshape(sum, &[oc, (t + 1) * s]), oc, t * s, 0)
    };
    ctx.add(y, bias)
}

/// SnakeBeta, `x + sin(x * a)^2 * b`, with `a = exp(alpha)` and `b = 1 / (exp(beta) +
/// eps)` per channel, exponentiated at load.
///
/// Upstream: modeling_qwen3_tts_tokenizer_v2.py L578-L616 (`SnakeBeta.forward`).
fn snake<'a>(ctx: &'a Context, w: &'a WeightStore, name: &str, x: Tensor<'a>) -> Tensor<'a> {
    let a = get(w, &format!("{name}.alpha"));
    let b = get(w, &format!("{name}.beta"));
    ctx.add(x, ctx.mul(ctx.sqr(ctx.sin(ctx.mul(x, a))), b))
}

/// A ConvNeXt block over `x` [C, T]: causal depthwise convolution (width 7), LayerNorm
/// over channels, the pointwise MLP with exact GELU, a per-channel scale, the residual.
///
/// Upstream: modeling_qwen3_tts_tokenizer_v2.py L211-L243 (`ConvNeXtBlock.forward`).
fn convnext<'a>(ctx: &'a Context, w: &'a WeightStore, name: &str, x: Tensor<'a>) -> Tensor<'a> {
    let [c, t, _, _] = x.ne();
    let taps = get(w, &format!("{name}.dwconv.taps"));
    let xp = ctx.pad_zeros(x, [0, (KERNEL - 1) as i32], [0, 0]);
    let mut y = ctx.mul(
        ctx.view_2d_rows(xp, c, t, 0),
        ctx.view_2d_rows(taps, c, 1, 0),
    );
    for j in 1..KERNEL {
        let shifted = ctx.view_2d_rows(xp, c, t, j * c as usize);
        y = ctx.add(
            y,
            ctx.mul(shifted, ctx.view_2d_rows(taps, c, 1, j * c as usize)),
        );
    }
    let y = ctx.add(y, get(w, &format!("{name}.dwconv.conv.bias")));
    let y = ctx.add(
        ctx.mul(
            ctx.norm(y, CONVNEXT_EPS),
            get(w, &format!("{name}.norm.weight")),
        ),
        get(w, &format!("{name}.norm.bias")),
    );
    let y = ctx.add(
        ctx.mul_mat(get(w, &format!("{name}.pwconv1.weight")), y),
        get(w, &format!("{name}.pwconv1.bias")),
    );
    let y = ctx.gelu_erf(y);
    let y = ctx.add(
        ctx.mul_mat(get(w, &format!("{name}.pwconv2.weight")), y),
        get(w, &format!("{name}.pwconv2.bias")),
    );
    ctx.add(x, ctx.mul(y, get(w, &format!("{name}.gamma"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_take_the_official_context() {
        let codes: Vec<Vec<u32>> = (0..640).map(|i| vec![i as u32]).collect();
        let mut calls = Vec::new();
        let mut out = Vec::new();
        decode(
            &codes,
            2,
            |c| {
                calls.push((c[0][0], c.len()));
                Ok(c.iter().flat_map(|f| [f[0] as f32, f[0] as f32]).collect())
            },
            &mut |s| {
                out.extend_from_slice(s);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(calls, [(0, 300), (275, 325), (575, 65)]);
        let want: Vec<f32> = (0..640).flat_map(|i| [i as f32, i as f32]).collect();
        assert_eq!(out, want, "each frame once, in order");
    }

    #[test]
    fn taps_are_the_kernel_rearranged() {
        // Conv1d [OC=2, IC=1, K=2]: w[o][0][j] = 10 o + j.
        assert_eq!(
            conv_taps(&[0.0, 1.0, 10.0, 11.0], 2, 1, 2),
            [0.0, 10.0, 1.0, 11.0]
        );
        // ConvTranspose1d [IC=1, OC=2, K=2]: w[0][c][j] = 10 c + j; row c + 2 j.
        assert_eq!(
            transposed_taps(&[0.0, 1.0, 10.0, 11.0], 2, 1, 2),
            [0.0, 10.0, 1.0, 11.0]
        );
    }
}
