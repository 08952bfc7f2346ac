//! The codec's encoder, which a Base model clones from: 24 kHz reference audio to the
//! frames of sixteen codes the talker reads as the reference's speech. It is Mimi's
//! encoder: a SEANet convolution stack (causal, zero padded, ELU) down to 25 Hz, a causal
//! transformer (LayerNorm, GELU MLP, layer scales), a strided convolution to 12.5 Hz
//! (replicate padded), and the split residual vector quantizer, whose semantic and
//! acoustic halves both quantize the same latent, nearest codeword first.
//!
//! One ggml graph runs all of it; activations are [time, channels] through the SEANet
//! (the project's f32 convolution reads that layout) and [channels, time] through the
//! transformer and the quantizer. Each quantizer layer picks codes by an argmax of
//! `2 r.e - |e|^2`, the nearest codeword.
//!
//! Upstream: `transformers==4.57.3` models/mimi/modeling_mimi.py L204-L341
//! (`MimiConv1d`), L402-L441 (`MimiResnetBlock`), L444-L486 (`MimiEncoder`), L922-L994
//! (`MimiTransformerLayer`), L1199-L1209 and L1269-L1287 (codebook and
//! `MimiResidualVectorQuantizer.encode`), L1318-L1345 (split RVQ), L1403-L1471
//! (downsample, `_encode_frame`); `qwen-tts==0.1.1`
//! qwen_tts/core/tokenizer_12hz/modeling_qwen3_tts_tokenizer_v2.py L961-L991 (`encode`,
//! the first 16 codebooks kept).

use crate::backend::Runtime;
use crate::error::{EngineError, Result};
use crate::ggml::{Context, DType, HostTensor, Scheduler, Tensor};
use crate::layers::Layers;
use crate::model_file::ModelFile;
use crate::weights::{f32_tensor, WeightStore, WeightTensor};

use super::hparams::MimiEncoder as Params;
use super::talker::causal_mask;
use super::transformer::{DecoderLayer, KvCache, Variant};

const P: &str = "mimi";
/// Floor of a codebook entry's usage count, as the codec decoder's.
const USAGE_FLOOR: f32 = 1e-5;

/// The names of the quantizer layers Qwen keeps: the semantic one, then the acoustic ones.
fn quantizer_layers(p: &Params) -> Vec<(String, String)> {
    let semantic = (0..p.semantic).map(|q| {
        (
            "rvq_semantic".to_string(),
            format!("{P}.rvq_semantic.layers.{q}.codebook"),
        )
    });
    let acoustic = (0..p.valid - p.semantic).map(|q| {
        (
            "rvq_acoustic".to_string(),
            format!("{P}.rvq_acoustic.layers.{q}.codebook"),
        )
    });
    semantic.chain(acoustic).collect()
}

/// The quantizers' tensors as the file has them, as the graph reads them: each codebook
/// divided by its usage (`prepared.mimi.codebook.{q}`, [dim, size]) and its rows' squared
/// norms (`prepared.mimi.norms.{q}`, [size]).
pub fn prepare(tensors: Vec<HostTensor>, p: &Params) -> Result<Vec<WeightTensor>> {
    let mut by_name: std::collections::HashMap<String, HostTensor> =
        tensors.into_iter().map(|t| (t.name.clone(), t)).collect();
    let mut out = Vec::new();
    for (q, (_, layer)) in quantizer_layers(p).into_iter().enumerate() {
        let mut take = |name: String| {
            by_name.remove(&name).ok_or_else(|| EngineError::BadSpec {
                origin: "qwen3_tts".into(),
                reason: format!("codec encoder tensor '{name}' is missing; convert the model again (task 'convert', family 'qwen3_tts')"),
            })
        };
        let sum = take(format!("{layer}.embed_sum"))?;
        let usage = take(format!("{layer}.cluster_usage"))?;
        let (dim, size) = (p.codebook_dim, p.codebook_size);
        if sum.ne != [dim as i64, size as i64] || usage.ne != [size as i64] {
            return Err(EngineError::BadSpec {
                origin: "qwen3_tts".into(),
                reason: format!(
                    "codec encoder codebook '{layer}' is {:?} with usage {:?}, expected [{dim}, {size}] and [{size}]",
                    sum.ne, usage.ne
                ),
            });
        }
        let mut e = sum.to_f32();
        let mut norms = Vec::with_capacity(size);
        for (row, &u) in e.chunks_mut(dim).zip(&usage.to_f32()) {
            let u = u.max(USAGE_FLOOR);
            row.iter_mut().for_each(|v| *v /= u);
            norms.push(row.iter().map(|v| v * v).sum::<f32>());
        }
        out.push(f32_tensor(
            format!("prepared.mimi.codebook.{q}"),
            vec![dim as i64, size as i64],
            e,
        ));
        out.push(f32_tensor(
            format!("prepared.mimi.norms.{q}"),
            vec![size as i64, 1],
            norms,
        ));
    }
    Ok(out)
}

/// Whether `name` is one of the quantizers' tensors [`prepare`] takes.
pub fn is_codebook(name: &str) -> bool {
    name.starts_with(&format!("{P}.rvq_")) && name.contains(".codebook.")
}

/// The codec encoder's weights, checked at load.
#[derive(Clone)]
pub struct Mimi {
    p: Params,
    transformer: Vec<DecoderLayer>,
}

/// A SEANet stage's convolutions: (name, kernel, input channels, output channels).
fn seanet_convs(p: &Params) -> Vec<(String, usize, usize, usize)> {
    let mut out = vec![(format!("{P}.seanet.layers.0.conv"), p.kernel, 1, p.filters)];
    let mut layer = 1;
    let mut c = p.filters;
    for &r in p.ratios.iter().rev() {
        for _ in 0..p.residual_layers {
            out.push((
                format!("{P}.seanet.layers.{layer}.block.1.conv"),
                p.residual_kernel,
                c,
                c / p.compress,
            ));
            out.push((
                format!("{P}.seanet.layers.{layer}.block.3.conv"),
                1,
                c / p.compress,
                c,
            ));
            layer += 1;
        }
        layer += 1; // the ELU
        out.push((format!("{P}.seanet.layers.{layer}.conv"), 2 * r, c, 2 * c));
        layer += 1;
        c *= 2;
    }
    out.push((
        format!("{P}.seanet.layers.{}.conv", layer + 1),
        p.last_kernel,
        c,
        p.transformer.hidden,
    ));
    out
}

impl Mimi {
    /// Checks every weight of the codec encoder in the file but the codebooks
    /// ([`prepare`] checks those).
    pub fn load(file: &ModelFile, p: &Params) -> Result<Self> {
        for (name, k, ic, oc) in seanet_convs(p) {
            file.expect_dims(&format!("{name}.weight"), &[k as i64, ic as i64, oc as i64])?;
            file.expect_dims(&format!("{name}.bias"), &[oc as i64])?;
        }
        let h = p.transformer.hidden as i64;
        let s = p.downsample_stride as i64;
        file.expect_dims(&format!("{P}.downsample.conv.weight"), &[2 * s, h, h])?;
        for split in ["rvq_semantic", "rvq_acoustic"] {
            file.expect_dims(
                &format!("{P}.{split}.input_proj.weight"),
                &[1, h, p.codebook_dim as i64],
            )?;
        }
        let transformer = (0..p.transformer.layers)
            .map(|l| {
                DecoderLayer::load(
                    file,
                    &format!("{P}.transformer.layers.{l}"),
                    &p.transformer,
                    Variant::Mimi,
                )
            })
            .collect::<Result<_>>()?;
        Ok(Mimi {
            p: p.clone(),
            transformer,
        })
    }

    /// Graph size of one clip.
    pub fn nodes(&self) -> usize {
        512 + 64 * self.p.transformer.layers
            + 16 * self.p.valid
            + 32 * self.p.ratios.len() * self.p.residual_layers
    }

    /// The frames of 24 kHz mono `samples`, `ceil(len / samples_per_frame)` of them, each
    /// the kept codebooks' codes (semantic first).
    pub fn encode(
        &self,
        w: &WeightStore,
        layers: &Layers,
        runtime: &Runtime,
        sched: &mut Scheduler,
        samples: &[f32],
    ) -> Result<Vec<Vec<u32>>> {
        let p = &self.p;
        let nodes = self.nodes();
        let ctx = Context::new(nodes, nodes)?;
        let mut graph = ctx.new_graph(nodes);
        let input = ctx.new_tensor(DType::F32, &[samples.len() as i64, 1], "samples");
        input.mark_input();
        // SEANet, [T, C].
        let convs = seanet_convs(p);
        let mut convs = convs.iter();
        let mut next = || convs.next().expect("listed by seanet_convs").0.clone();
        let mut x = conv(&ctx, w, &next(), input, 1, 1);
        for &r in p.ratios.iter().rev() {
            for j in 0..p.residual_layers {
                let d = p.dilation_growth.pow(j as u32);
                let y = conv(&ctx, w, &next(), ctx.elu(x), 1, d);
                let y = conv(&ctx, w, &next(), ctx.elu(y), 1, 1);
                x = ctx.add(x, y);
            }
            x = conv(&ctx, w, &next(), ctx.elu(x), r, 1);
        }
        x = conv(&ctx, w, &next(), ctx.elu(x), 1, 1);
        // The transformer, [C, T], causal over the whole clip.
        let t25 = x.ne()[0] as usize;
        let mut h = ctx.cont(ctx.transpose(x));
        let pos = ctx.new_i32_tensor(&[t25 as i64], "pos");
        pos.mark_input();
        let mask = ctx.new_tensor(DType::F32, &[t25 as i64, t25 as i64], "mask");
        mask.mark_input();
        let cache = KvCache::new(runtime, &p.transformer, t25)?;
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
        // Downsample: replicate the first frame before, the last after, then the
        // strided convolution (no bias).
        let hidden = p.transformer.hidden as i64;
        let stride = p.downsample_stride;
        let frames = t25.div_ceil(stride);
        let extra = frames * stride - t25;
        let first = ctx.cont(ctx.view_2d_rows(h, hidden, 1, 0));
        let last = ctx.cont(ctx.view_2d_rows(h, hidden, 1, (t25 - 1) * hidden as usize));
        let mut padded = h;
        for _ in 0..stride {
            padded = ctx.concat(first, padded, 1);
        }
        for _ in 0..extra {
            padded = ctx.concat(padded, last, 1);
        }
        let z = ctx.conv_1d_f32_time_major(
            get(w, &format!("{P}.downsample.conv.weight")),
            ctx.cont(ctx.transpose(padded)),
            stride as i32,
            0,
            1,
        );
        let z = ctx.cont(ctx.transpose(z)); // [hidden, frames]
                                            // The split quantizer: both halves project the same latent.
        let mut codes = Vec::new();
        let mut residual: Option<(String, Tensor<'_>)> = None;
        for (q, (split, _)) in quantizer_layers(p).into_iter().enumerate() {
            let r = match residual.take() {
                Some((s, r)) if s == split => r,
                _ => {
                    let proj = get(w, &format!("{P}.{split}.input_proj.weight"));
                    ctx.mul_mat(ctx.reshape(proj, &[hidden, p.codebook_dim as i64]), z)
                }
            };
            let book = get(w, &format!("prepared.mimi.codebook.{q}"));
            let scores = ctx.sub(
                ctx.scale(ctx.mul_mat(book, r), 2.0),
                get(w, &format!("prepared.mimi.norms.{q}")),
            );
            let idx = ctx.argmax(scores); // [frames], the nearest codeword of each
            idx.mark_output();
            graph.expand(idx);
            codes.push(idx);
            residual = Some((split, ctx.sub(r, ctx.get_rows(book, idx))));
        }
        let positions: Vec<i32> = (0..t25 as i32).collect();
        let m = causal_mask(0, t25, None);
        sched.compute_with(
            &mut graph,
            &[(input, samples), (mask, &m)],
            &[(pos, &positions)],
        )?;
        let columns = codes
            .iter()
            .map(|c| c.read_i32())
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok((0..frames)
            .map(|f| columns.iter().map(|c| c[f] as u32).collect())
            .collect())
    }
}

fn get<'a>(w: &'a WeightStore, name: &str) -> Tensor<'a> {
    w.tensor(name)
        .unwrap_or_else(|| panic!("codec encoder weight {name} was checked at load"))
}

/// A causal convolution of `x` [L, IC] with `{name}.weight` [K, IC, OC] and its bias,
/// strided by `stride` and dilated by `dilation`: zeros before the input (the kernel's
/// span less the stride) and after it (to complete the last window), so the output is
/// `ceil(L / stride)` steps, [ceil(L / stride), OC].
///
/// Upstream: modeling_mimi.py L237-L273 and L321-L341 (`MimiConv1d`).
fn conv<'a>(
    ctx: &'a Context,
    w: &'a WeightStore,
    name: &str,
    x: Tensor<'a>,
    stride: usize,
    dilation: usize,
) -> Tensor<'a> {
    let weight = get(w, &format!("{name}.weight"));
    let k = weight.ne()[0] as usize;
    let span = (k - 1) * dilation + 1;
    let len = x.ne()[0] as usize;
    let before = span - stride;
    let after = len.div_ceil(stride) * stride - len;
    let x = if before + after > 0 {
        ctx.pad_zeros(x, [before as i32, 0], [after as i32, 0])
    } else {
        x
    };
    let y = ctx.conv_1d_f32_time_major(weight, x, stride as i32, 0, dilation as i32);
    let b = get(w, &format!("{name}.bias"));
    ctx.add(y, ctx.reshape(b, &[1, b.ne()[0]]))
}
