//! The one place that decides which implementation computes a layer. Model code asks
//! for "a linear layer", "GELU", "self-attention", "a 1-D convolution", "a product that
//! reads a large weight"; [`Layers`], built from the runtime, answers with the engine's
//! CPU kernel ([`crate::cpu_kernels`], run as a ggml custom op) when the graph runs on
//! the CPU backend and this CPU has the kernel, and with ggml's op elsewhere. Like
//! ggml's CPU "extra buffer types", it also chooses a weight's storage at upload
//! ([`Layers::store`]): q8_0 weights packed for the q8_0 kernel, conv kernels packed
//! for the f32 product; the layer then follows the storage it finds.

use crate::backend::Runtime;
use crate::cpu_kernels::{self, refine, PackedQ8};
use crate::error::Result;
use crate::ggml::{Context, DType, HostTensor, Tensor};
use half::slice::HalfFloatSliceExt;

/// Rows of an embedding quantized at a time for [`Layers::logit_stages`] (a multiple
/// of the packed groups' 16).
const LOGIT_STAGE_CHUNK: usize = 1024;

/// Threads at most that make [`Layers::logit_stages`]' copy.
const LOGIT_STAGE_THREADS: usize = 4;

/// What a weight feeds, so that [`Layers::store`] can choose its storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightUse {
    /// The `[k, n]` weight of a linear layer ([`Layers::linear`]).
    Linear,
    /// The `[K, IC, OC]` kernel of a 1-D convolution ([`Layers::conv_1d`]).
    Conv1d,
    /// Anything else (norms, biases, positions, embeddings read by row): as it is.
    Plain,
}

/// Which kernels the engine runs for a model's layers, decided once from the runtime:
/// each is on when graphs run on the CPU backend (and `AUDIOCPP_CPU_KERNELS` does not
/// switch them off, see [`Runtime::cpu_kernels`]) and this CPU has its instructions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layers {
    /// The packed q8_0 product.
    q8: bool,
    /// The float kernels: GELU, the encoder attention, the packed f32 product.
    float: bool,
    /// The f16 product.
    f16: bool,
    /// The CPU backend runs the model (with or without the engine's kernels).
    cpu: bool,
}

impl Layers {
    /// The layers of models that run on `runtime`.
    pub fn new(runtime: &Runtime) -> Self {
        Self::with_cpu_kernels(runtime.cpu_kernels())
    }

    /// The engine's kernels where this CPU has them (`cpu_kernels`), else ggml's ops
    /// everywhere (a GPU backend).
    pub fn with_cpu_kernels(cpu_kernels: bool) -> Self {
        Layers {
            q8: cpu_kernels && cpu_kernels::q8_kernel_available(),
            float: cpu_kernels && cpu_kernels::attention_kernel_available(),
            f16: cpu_kernels && cpu_kernels::f16_product_available(),
            cpu: cpu_kernels,
        }
    }

    /// `t` in the storage its layer computes from: a 2-D q8_0 linear weight re-laid
    /// out for the q8_0 kernel ([`PackedQ8`], an I8 tensor) when it runs and the shape
    /// fits; an f32 conv kernel transposed for the f32 product when it runs and its
    /// outputs are whole runs; anything else unchanged.
    pub fn store(&self, t: HostTensor, usage: WeightUse) -> HostTensor {
        match usage {
            WeightUse::Linear if self.q8 => pack_q8_0(t),
            WeightUse::Conv1d if self.float => pack_conv(t),
            _ => t,
        }
    }

    /// A linear layer, `w x + b`: the q8_0 kernel (with the bias added inside it, one
    /// graph node less) for a weight stored packed, ggml's product otherwise.
    pub fn linear<'a>(
        &self,
        ctx: &'a Context,
        w: Tensor<'a>,
        b: Option<Tensor<'a>>,
        x: Tensor<'a>,
    ) -> Result<Tensor<'a>> {
        if w.dtype() == Some(DType::I8) {
            return Ok(ctx.mul_mat_q8_packed(w, x, b)?);
        }
        let y = ctx.mul_mat(w, x);
        Ok(b.map_or(y, |b| ctx.add(y, b)))
    }

    /// Whether a decoder step over several requests' columns computes the product with
    /// the weight `w` over all columns at once, or one product per column. On the CPU,
    /// at once only where the q8_0 kernel runs: it gives each column the bits a lone
    /// column gets (each row's sums run in one order whatever the columns beside it),
    /// while ggml's products may tile several columns otherwise, so one per column
    /// keeps a request's transcript what it is alone. On a GPU always at once: a step
    /// costs its kernel launches, which one product per column would multiply, and its
    /// columns may round as a lone column's does not (as its products round unlike the
    /// CPU's).
    pub fn batches_columns(&self, w: Tensor<'_>) -> bool {
        !self.cpu || w.dtype() == Some(DType::I8)
    }

    /// Whether a decoder step over several requests' slots runs their attention as one
    /// batched product over every slot's caches (on a GPU: a step costs its kernel
    /// launches, which one attention per column would multiply), or column by column
    /// with the ops of a lone step (on the CPU, which keeps each column's bits).
    pub fn batches_attention(&self) -> bool {
        !self.cpu
    }

    /// The tensors a decoder step's logits against the f16 embedding `t` [k, n] take in
    /// two stages ([`Layers::step_logits`]), when the q8_0 and f16 kernels run: a q8_0
    /// copy of its first rows (whole groups of 16, packed for the q8_0 kernel), named
    /// `<name>.q8`, and its error bounds, `<name>.q8_bounds`. None otherwise. The copy
    /// takes 1.25 bytes a value beside the weight's 2.
    pub fn logit_stages(&self, t: &HostTensor) -> Vec<HostTensor> {
        let (k, n) = match t.ne[..] {
            [k, n] if t.dtype == DType::F16 => (k as usize, n as usize),
            _ => return Vec::new(),
        };
        let rows = n / cpu_kernels::q8::GROUP_COLS * cpu_kernels::q8::GROUP_COLS;
        if !(self.q8 && self.f16) || rows == 0 || !k.is_multiple_of(32) || t.data.len() != 2 * k * n
        {
            return Vec::new();
        }
        // In chunks of rows, so that only one chunk per thread is ever held as f32,
        // spread over a few threads (the quantization is most of the copy's load time).
        use cpu_kernels::q8::{CELL_BYTES, GROUP_COLS};
        let nb = k / 32;
        let mut bytes = vec![0u8; rows / GROUP_COLS * nb * CELL_BYTES];
        let chunks: Vec<(usize, &mut [u8])> = bytes
            .chunks_mut(LOGIT_STAGE_CHUNK / GROUP_COLS * nb * CELL_BYTES)
            .enumerate()
            .collect();
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(LOGIT_STAGE_THREADS);
        let per_thread = chunks.len().div_ceil(threads);
        let data = &t.data;
        let bounds: Option<Vec<f32>> = std::thread::scope(|scope| {
            let mut chunks = chunks;
            let mut workers = Vec::new();
            while !chunks.is_empty() {
                let rest = chunks.split_off(per_thread.min(chunks.len()));
                let mine = std::mem::replace(&mut chunks, rest);
                workers.push(scope.spawn(move || {
                    let mut bounds = vec![0f32; refine::BOUNDS_PER_BLOCK * nb];
                    let (mut values, mut floats) = (Vec::new(), Vec::new());
                    for (i, out) in mine {
                        let start = i * LOGIT_STAGE_CHUNK;
                        let end = (start + LOGIT_STAGE_CHUNK).min(rows);
                        let halves: &[u8] = &data[2 * k * start..2 * k * end];
                        values.clear();
                        values.extend(
                            halves
                                .chunks_exact(2)
                                .map(|b| half::f16::from_le_bytes([b[0], b[1]])),
                        );
                        floats.resize(values.len(), 0f32);
                        values.convert_to_f32_slice(&mut floats);
                        let packed = refine::quantize_q8(&floats, k, &mut bounds)
                            .and_then(|q8| PackedQ8::pack(&q8, k, end - start))?;
                        out.copy_from_slice(&packed.bytes);
                    }
                    Some(bounds)
                }));
            }
            // Every worker is joined (a panic becomes None), then their bounds merged.
            let done: Vec<Option<Vec<f32>>> = workers
                .into_iter()
                .map(|worker| worker.join().ok().flatten())
                .collect();
            done.into_iter().try_fold(
                vec![0f32; refine::BOUNDS_PER_BLOCK * nb],
                |mut all, theirs| {
                    all.iter_mut().zip(theirs?).for_each(|(a, b)| *a = a.max(b));
                    Some(all)
                },
            )
        });
        let Some(bounds) = bounds else {
            return Vec::new();
        };
        let packed = PackedQ8 { k, n: rows, bytes };
        vec![
            HostTensor {
                name: format!("{}.q8", t.name),
                dtype: DType::I8,
                ne: packed.tensor_shape().to_vec(),
                data: packed.bytes,
            },
            HostTensor {
                name: format!("{}.q8_bounds", t.name),
                dtype: DType::F32,
                ne: vec![bounds.len() as i64],
                data: bounds.iter().flat_map(|v| v.to_le_bytes()).collect(),
            },
        ]
    }

    /// One decoder step's logits for each column of `x` [k, m], `w` [k, n] times the
    /// column. With `stages` (the q8_0 copy and bounds of [`Layers::logit_stages`]), in
    /// two stages: a q8_0 product over the text rows (below `head`) for all columns,
    /// then per column the f16 product for the rows that could hold the largest one
    /// not in `ban` and for the rows from `head` on ([`crate::cpu_kernels::refine`]);
    /// the argmax and every logit from `head` on are the f16 product's. Each column's
    /// switch (i32 [1], an input) set to 1 makes every row of that column the f16
    /// product's (sampling reads them all). Without stages: the product's columns (one
    /// product per column where [`Layers::batches_columns`] says so).
    pub fn step_logits<'a>(
        &self,
        ctx: &'a Context,
        w: Tensor<'a>,
        stages: Option<(Tensor<'a>, Tensor<'a>)>,
        x: Tensor<'a>,
        head: usize,
        ban: Option<Tensor<'a>>,
    ) -> Result<Vec<(Tensor<'a>, Option<Tensor<'a>>)>> {
        let m = x.ne()[1] as usize;
        let column = |t: Tensor<'a>, i: usize| {
            if m == 1 {
                t
            } else {
                let rows = t.ne()[0];
                ctx.view_2d_rows(t, rows, 1, i * rows as usize)
            }
        };
        let groups = head.min(w.ne()[1] as usize) / cpu_kernels::q8::GROUP_COLS;
        let Some((q8, bounds)) = stages.filter(|_| groups > 0) else {
            if m > 1 && !self.batches_columns(w) {
                return (0..m)
                    .map(|i| Ok((self.mul_mat(ctx, w, column(x, i))?, None)))
                    .collect();
            }
            let all = self.mul_mat(ctx, w, x)?;
            return Ok((0..m).map(|i| (column(all, i), None)).collect());
        };
        let [cell, blocks, packed_groups, _] = q8.ne();
        let groups = groups.min(packed_groups as usize);
        let text = ctx.view_3d(
            q8,
            [cell, blocks, groups as i64],
            cell as usize,
            (cell * blocks) as usize,
            0,
        );
        let first = ctx.mul_mat_q8_packed(text, x, None)?;
        (0..m)
            .map(|i| {
                let whole = ctx.new_i32_tensor(&[1], "logits_whole");
                whole.mark_input();
                let logits = ctx.refine_logits_cpu(
                    column(first, i),
                    w,
                    column(x, i),
                    bounds,
                    whole,
                    ban,
                    head,
                )?;
                Ok((logits, Some(whole)))
            })
            .collect()
    }

    /// [`Context::mul_mat`] for a product that is a read of a large weight (a decoder
    /// step's logits, attention over an f16 cache): the f16 kernel when `w` is an f16
    /// tensor it takes (rows contiguous, at least 4 per batch, batches along one dim),
    /// which keeps the activations f32; ggml's product otherwise.
    pub fn mul_mat<'a>(
        &self,
        ctx: &'a Context,
        w: Tensor<'a>,
        x: Tensor<'a>,
    ) -> Result<Tensor<'a>> {
        let [_, n, _, n3] = w.ne();
        let fits = w.dtype() == Some(DType::F16) && n >= 4 && n3 == 1 && w.row_contiguous();
        if self.f16 && fits {
            Ok(ctx.mul_mat_f16_cpu(w, x)?)
        } else {
            Ok(ctx.mul_mat(w, x))
        }
    }

    /// `x` [cols, rows] (f32) as a contiguous [rows, cols]: the engine's blocked copy
    /// where the float kernels run and each row's values are adjacent, ggml's copy of
    /// the transposed view otherwise. The same values either way.
    pub fn transposed<'a>(&self, ctx: &'a Context, x: Tensor<'a>) -> Result<Tensor<'a>> {
        let [_, _, b2, b3] = x.ne();
        if self.float && x.dtype() == Some(DType::F32) && x.row_contiguous() && b2 * b3 == 1 {
            return Ok(ctx.transpose_cpu(x)?);
        }
        Ok(ctx.cont(ctx.transpose(x)))
    }

    /// Snake after an AdaIN (iSTFTNet's residual blocks): `v + sin(alpha v)^2 /
    /// alpha` with `v = n * gamma + n + beta`, `n` being `x` [T, C] normalised per
    /// channel over time with `eps`, and `gamma`, `beta`, `alpha` [1, C]. The engine's
    /// one-pass kernel (whose sine is within 1.2e-7 of libm's), or ggml's norm and
    /// eight ops.
    pub fn ada_in_snake<'a>(
        &self,
        ctx: &'a Context,
        x: Tensor<'a>,
        eps: f32,
        gamma: Tensor<'a>,
        beta: Tensor<'a>,
        alpha: Tensor<'a>,
    ) -> Result<Tensor<'a>> {
        if self.float {
            return Ok(ctx.ada_in_snake_cpu(x, eps, gamma, beta, alpha)?);
        }
        let normed = ctx.norm(x, eps);
        let v = ctx.add(ctx.add(ctx.mul(normed, gamma), normed), beta);
        let s = ctx.sqr(ctx.sin(ctx.mul(v, alpha)));
        Ok(ctx.add(v, ctx.div(s, alpha)))
    }

    /// The exact (erf) GELU: the engine's vectorised kernel, or ggml's op.
    pub fn gelu<'a>(&self, ctx: &'a Context, x: Tensor<'a>) -> Result<Tensor<'a>> {
        if self.float {
            Ok(ctx.gelu_erf_cpu(x)?)
        } else {
            Ok(ctx.gelu_erf(x))
        }
    }

    /// Multi-head self-attention without a mask, scale 1/sqrt(head width), of `qkv`
    /// ([3 d, t], each row the stacked query, key and value): [d, t], heads side by
    /// side. The engine's kernel for heads of 64; otherwise ggml's fused attention
    /// (over 1500 positions, materialising the scores, 54 MB per layer for Whisper
    /// tiny, and transposing the values cost more than the products).
    pub fn self_attention<'a>(
        &self,
        ctx: &'a Context,
        qkv: Tensor<'a>,
        heads: usize,
    ) -> Result<Tensor<'a>> {
        let [width, t, _, _] = qkv.ne();
        let d = width as usize / 3;
        if self.float && heads > 0 && d == heads * cpu_kernels::ATTENTION_HEAD_DIM {
            return Ok(ctx.self_attention_cpu(qkv, heads)?);
        }
        let dh = d / heads.max(1);
        let part = |i: usize| {
            let view = ctx.view_3d(qkv, [dh as i64, heads as i64, t], dh, 3 * d, i * d);
            ctx.permute(view, [0, 2, 1, 3])
        };
        let out = ctx.flash_attn(part(0), part(1), part(2), 1.0 / (dh as f32).sqrt());
        Ok(ctx.reshape(out, &[d as i64, t]))
    }

    /// A 1-D convolution (PyTorch cross-correlation) of `input` [L, IC, N] with a
    /// kernel of width `kernel_width` as [`Layers::store`] left it: ggml's convolution
    /// for a [K, IC, OC] kernel, the f32 product over im2col for one packed [OC, IC*K].
    /// Returns [OC, OL, N] (channels fastest).
    pub fn conv_1d<'a>(
        &self,
        ctx: &'a Context,
        kernel: Tensor<'a>,
        kernel_width: i64,
        input: Tensor<'a>,
        stride: i32,
        pad: i32,
    ) -> Result<Tensor<'a>> {
        let [k, ic, _, _] = kernel.ne();
        if k == kernel_width && ic == input.ne()[1] {
            Ok(ctx.conv_1d_f32(kernel, input, stride, pad))
        } else {
            Ok(ctx.conv_1d_f32_packed(kernel, kernel_width, input, stride, pad)?)
        }
    }

    /// A 1-D convolution (PyTorch cross-correlation) of time-major `x` [T, IC] with a
    /// kernel of width `kernel_width` as the weight store holds it, plus `bias` [OC]
    /// (`[stride, pad, dilation]`), returning [T', OC] (time fastest). It follows the
    /// storage [`Layers::store`] chose at upload: the engine's int8 kernel for a packed
    /// q8_0 kernel ([`DType::I8`], which adds the bias itself), int8 products over
    /// im2col for a Q8_0 kernel stored tap-major [K * IC, OC], for an f32 [K, IC, OC] one the
    /// engine's f32 convolution (im2col in cache, the bias inside) where the float
    /// kernels run and ggml's f32 product over im2col elsewhere, and ggml's product for
    /// f16 (which multiplies an f16 matrix only from the left, so channels come out
    /// fastest and are transposed back).
    pub fn conv_1d_time_major<'a>(
        &self,
        ctx: &'a Context,
        kernel: Tensor<'a>,
        kernel_width: i64,
        x: Tensor<'a>,
        [stride, pad, dilation]: [i32; 3],
        bias: Option<Tensor<'a>>,
    ) -> Result<Tensor<'a>> {
        let x = pad_channels_to_kernel(ctx, kernel, kernel_width, x);
        if kernel.dtype() == Some(DType::I8) {
            let bias = bias.map(|b| ctx.to_f32(b));
            return Ok(ctx.conv_1d_q8_packed_time_major(
                kernel,
                kernel_width,
                x,
                [stride, pad, dilation],
                bias,
            )?);
        }
        if self.float && kernel.dtype() == Some(DType::F32) {
            let bias = bias.map(|b| ctx.to_f32(b));
            return Ok(ctx.conv_1d_f32_time_major_cpu(kernel, x, [stride, pad, dilation], bias)?);
        }
        let y = match kernel.dtype() {
            Some(DType::F32) => ctx.conv_1d_f32_time_major(kernel, x, stride, pad, dilation),
            Some(DType::Q8_0) => {
                ctx.conv_1d_quantized_time_major(kernel, kernel_width, x, stride, pad, dilation)?
            }
            _ => {
                let oc = kernel.ne()[2];
                let y = ctx.conv_1d_f32_dilated(kernel, x, stride, pad, dilation);
                let ol = y.ne()[1];
                ctx.cont(ctx.transpose(ctx.reshape(y, &[oc, ol])))
            }
        };
        Ok(match bias {
            Some(b) => {
                let oc = b.ne()[0];
                ctx.add(y, ctx.reshape(ctx.to_f32(b), &[1, oc]))
            }
            None => y,
        })
    }
}

/// `x` [T, IC] with zero channels appended when the block-quantized `kernel` (Q8_0, or
/// packed as I8) has rows of `kernel_width` taps over more channels than `x` has, up
/// to whole blocks of 32: a tap-major kernel row pads each tap's channels with zero
/// weights to whole blocks, and the zero inputs make the product the unpadded one.
/// Anything else (or an input that is not contiguous f32) is returned as it is: the
/// convolution then checks the shapes and refuses.
fn pad_channels_to_kernel<'a>(
    ctx: &'a Context,
    kernel: Tensor<'a>,
    kernel_width: i64,
    x: Tensor<'a>,
) -> Tensor<'a> {
    let row = match kernel.dtype() {
        Some(DType::Q8_0) => kernel.ne()[0],
        Some(DType::I8) => kernel.ne()[1] * DType::Q8_0.block_len() as i64,
        _ => return x,
    };
    let ic = x.ne()[1];
    let padded = padded_channels(ic);
    let fits = x.dtype() == Some(DType::F32) && x.row_contiguous();
    if !fits || kernel_width < 1 || padded == ic || row != kernel_width * padded {
        return x;
    }
    ctx.pad_zeros(x, [0, 0], [0, (padded - ic) as i32])
}

/// `ic` input channels rounded up to whole q8_0 blocks: the channels of each tap a
/// tap-major kernel row holds (the converter pads to this, [`Layers::conv_1d_time_major`]
/// pads its input to match).
pub fn padded_channels(ic: i64) -> i64 {
    let block = DType::Q8_0.block_len() as i64;
    (ic + block - 1) / block * block
}

/// A q8_0 weight re-laid out for the q8_0 kernel ([`PackedQ8`]) when its shape fits;
/// every other tensor as it is.
fn pack_q8_0(t: HostTensor) -> HostTensor {
    if t.dtype != DType::Q8_0 || t.ne.len() != 2 {
        return t;
    }
    match PackedQ8::pack(&t.data, t.ne[0] as usize, t.ne[1] as usize) {
        Some(p) => HostTensor {
            dtype: DType::I8,
            ne: p.tensor_shape().to_vec(),
            data: p.bytes,
            name: t.name,
        },
        None => t,
    }
}

/// An f32 conv kernel [K, IC, OC] transposed for the f32 product (see
/// [`Context::conv_1d_f32_packed`]): [OC, IC*K]. Other tensors, and kernels whose OC is
/// not whole runs of outputs, are returned unchanged.
fn pack_conv(t: HostTensor) -> HostTensor {
    if t.dtype != DType::F32 || t.ne.len() != 3 {
        return t;
    }
    let (k, oc) = ((t.ne[0] * t.ne[1]) as usize, t.ne[2] as usize);
    let w: Vec<f32> = t
        .data
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    match cpu_kernels::pack_f32_transposed(&w, k, oc) {
        Some(packed) => HostTensor {
            dtype: DType::F32,
            ne: vec![oc as i64, k as i64],
            data: packed.iter().flat_map(|v| v.to_le_bytes()).collect(),
            name: t.name,
        },
        None => t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The logits' q8_0 copy, made in chunks over threads, is the one-pass copy of the
    /// same rows (whole groups of 16), with the same bounds; one stage only without the
    /// kernels, for a weight that is not f16 or whose rows are not whole blocks.
    #[test]
    fn the_logit_stages_copy_the_embedding_rows_in_order() {
        let layers = Layers::with_cpu_kernels(true);
        if !(layers.q8 && layers.f16) {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run the CPU kernels"
            );
            return;
        }
        let (k, n) = (64usize, 2 * LOGIT_STAGE_CHUNK + 300);
        let values: Vec<f32> = (0..k * n)
            .map(|i| ((i * 7919) % 1013) as f32 / 500.0 - 1.0)
            .collect();
        let halves: Vec<u16> = values
            .iter()
            .map(|&v| half::f16::from_f32(v).to_bits())
            .collect();
        let t = HostTensor {
            name: "emb".into(),
            dtype: DType::F16,
            ne: vec![k as i64, n as i64],
            data: halves.iter().flat_map(|h| h.to_le_bytes()).collect(),
        };
        let stages = layers.logit_stages(&t);
        let rows = n / 16 * 16;
        let floats: Vec<f32> = halves[..k * rows]
            .iter()
            .map(|&h| half::f16::from_bits(h).to_f32())
            .collect();
        let mut bounds = vec![0f32; refine::BOUNDS_PER_BLOCK * k / 32];
        let q8 = refine::quantize_q8(&floats, k, &mut bounds).unwrap();
        let packed = PackedQ8::pack(&q8, k, rows).unwrap();
        assert_eq!(stages.len(), 2);
        assert_eq!(stages[0].name, "emb.q8");
        assert_eq!(stages[0].ne, packed.tensor_shape().to_vec());
        assert!(stages[0].data == packed.bytes, "the packed copy differs");
        let theirs: Vec<f32> = stages[1]
            .data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(theirs, bounds);
        assert!(Layers::with_cpu_kernels(false).logit_stages(&t).is_empty());
        let odd = HostTensor {
            ne: vec![32, (k * n / 32) as i64 - 1],
            ..t.clone()
        };
        assert!(
            layers.logit_stages(&odd).is_empty(),
            "a length that does not match its dims"
        );
        let f32_weight = HostTensor {
            dtype: DType::F32,
            ..t
        };
        assert!(layers.logit_stages(&f32_weight).is_empty());
    }

    fn q8_weight(name: &str, k: usize, n: usize) -> HostTensor {
        let values: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 - 3.0).collect();
        HostTensor {
            name: name.into(),
            dtype: DType::Q8_0,
            ne: vec![k as i64, n as i64],
            data: crate::ggml::quantize_rows(DType::Q8_0, &values, k).unwrap(),
        }
    }

    fn conv_kernel() -> HostTensor {
        HostTensor {
            name: "conv".into(),
            dtype: DType::F32,
            ne: vec![3, 2, 64],
            data: (0..3 * 2 * 64)
                .flat_map(|i| (i as f32).to_le_bytes())
                .collect(),
        }
    }

    #[test]
    fn weights_are_packed_at_upload_only_where_the_cpu_kernels_run() {
        let ggml = Layers::with_cpu_kernels(false);
        for (t, usage) in [
            (q8_weight("w", 64, 32), WeightUse::Linear),
            (conv_kernel(), WeightUse::Conv1d),
        ] {
            let stored = ggml.store(t.clone(), usage);
            assert_eq!(
                (stored.dtype, &stored.ne, &stored.data),
                (t.dtype, &t.ne, &t.data)
            );
        }
        let cpu = Layers::with_cpu_kernels(true);
        if !(cpu.q8 && cpu.float) {
            eprintln!("this CPU lacks AVX2/FMA: the packing was not exercised");
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run on a CPU with AVX2"
            );
            return;
        }
        let linear = cpu.store(q8_weight("w", 64, 32), WeightUse::Linear);
        let want = PackedQ8::pack(&q8_weight("w", 64, 32).data, 64, 32).unwrap();
        assert_eq!((linear.dtype, linear.data), (DType::I8, want.bytes));
        let plain = cpu.store(q8_weight("emb", 64, 32), WeightUse::Plain);
        assert_eq!(
            plain.dtype,
            DType::Q8_0,
            "a weight read by row stays as it is"
        );
        let odd = cpu.store(q8_weight("w", 64, 24), WeightUse::Linear);
        assert_eq!(
            odd.dtype,
            DType::Q8_0,
            "rows that are not whole groups stay q8_0"
        );
        let conv = cpu.store(conv_kernel(), WeightUse::Conv1d);
        assert_eq!(conv.ne, vec![64, 6]);
        let value =
            |t: &HostTensor, i: usize| f32::from_le_bytes(t.data[4 * i..][..4].try_into().unwrap());
        // Kernel [K=3, IC=2, OC=64] element (c, oc) at oc * 6 + c lands at c * 64 + oc.
        assert_eq!(value(&conv, 5 * 64 + 7), value(&conv_kernel(), 7 * 6 + 5));
    }
}

/// The values of `y`, computed in a graph of its own on `runtime` with `input` written.
#[cfg(test)]
fn computed(
    runtime: &Runtime,
    ctx: &Context,
    input: (Tensor<'_>, &[f32]),
    y: Tensor<'_>,
) -> Vec<f32> {
    y.mark_output();
    let mut graph = ctx.new_graph(64);
    graph.expand(y);
    let mut sched = runtime.scheduler(64).unwrap();
    sched.compute_with(&mut graph, &[input], &[]).unwrap();
    y.read_f32().unwrap()
}

#[cfg(test)]
mod conv_routes {
    //! Both routes of a q8_0 convolution (the engine's fused kernel over the packed
    //! weight, and ggml's im2col and product, which the GPU backends run) against the
    //! plain convolution with the dequantized kernel.
    use super::{Layers, WeightUse};
    use crate::backend::{Runtime, RuntimeOptions};
    use crate::ggml::{quantize_rows, Context, DType, HostTensor};
    use crate::weights::WeightStore;

    #[test]
    fn a_tap_major_q8_0_convolution_gives_the_plain_result_by_either_route() {
        // 40 input channels, stored padded to 64 per tap (the input is padded to match).
        let (ic, padded, k, oc, len, pad, dilation) = (40, 64, 3, 32, 40, 3, 3);
        let wave = |i: usize, f: f32| ((i as f32 * f).sin() + (i as f32 * 0.37).cos()) * 0.5;
        // Tap-major rows: tap `j` of channel `c` at `j * padded + c`, zero past `ic`.
        let kernel: Vec<f32> = (0..oc * k * padded)
            .map(|i| if i % padded < ic { wave(i, 0.61) } else { 0.0 })
            .collect();
        let q8 = HostTensor {
            name: "conv.weight".into(),
            dtype: DType::Q8_0,
            ne: vec![(k * padded) as i64, oc as i64],
            data: quantize_rows(DType::Q8_0, &kernel, k * padded).unwrap(),
        };
        let dequantized = q8.to_f32();
        let x: Vec<f32> = (0..ic * len).map(|i| wave(i, 0.23)).collect(); // [L, IC]
        let ol = len + 2 * pad - dilation * (k - 1);
        let mut plain = vec![0f32; ol * oc]; // [OL, OC], time fastest
        for o in 0..oc {
            for t in 0..ol {
                let mut sum = 0f64;
                for j in 0..k {
                    let at = (t + j * dilation) as isize - pad as isize;
                    if !(0..len as isize).contains(&at) {
                        continue;
                    }
                    for c in 0..ic {
                        sum += f64::from(dequantized[o * k * padded + j * padded + c])
                            * f64::from(x[c * len + at as usize]);
                    }
                }
                plain[o * ol + t] = sum as f32;
            }
        }
        let runtime = Runtime::new(&RuntimeOptions::default()).unwrap();
        let fused = Layers::new(&runtime);
        let mut routes = vec![("ggml", Layers::with_cpu_kernels(false), q8.clone())];
        if fused.q8 {
            let mut packed = fused.store(q8.clone(), WeightUse::Linear);
            packed.name = "conv.packed".into();
            assert_eq!(packed.dtype, DType::I8);
            routes.push(("fused", fused, packed));
        } else {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run on a CPU with the q8_0 kernel"
            );
        }
        let store = WeightStore::upload(
            "test.gguf".as_ref(),
            routes.iter().map(|(_, _, t)| Ok(t.clone().into())),
            &runtime,
        )
        .unwrap();
        let mut results = Vec::new();
        for (route, layers, t) in &routes {
            let ctx = Context::new(64, 64).unwrap();
            let input = ctx.new_tensor(DType::F32, &[len as i64, ic as i64], "x");
            input.mark_input();
            let weight = store.tensor(&t.name).unwrap();
            let y = layers
                .conv_1d_time_major(
                    &ctx,
                    weight,
                    k as i64,
                    input,
                    [1, pad as i32, dilation as i32],
                    None,
                )
                .unwrap();
            let got = super::computed(&runtime, &ctx, (input, &x), y);
            assert_eq!(got.len(), plain.len(), "{route}");
            // The activations are quantized per block of 32 (a step of max|x| / 127):
            // over 120 terms that leaves errors of a few per cent of the largest result,
            // where a wrong tap or channel order gives errors of the results' own size.
            let scale = plain.iter().fold(0f32, |m, v| m.max(v.abs()));
            let worst = got
                .iter()
                .zip(&plain)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst <= 0.05 * scale, "{route}: error {worst} of {scale}");
            results.push(got);
        }
        // Both routes quantize the same blocks the same way: only the order of the
        // float sums differs.
        if let [ggml, fused] = &results[..] {
            let apart = ggml
                .iter()
                .zip(fused)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(apart <= 1e-4, "the routes differ by {apart}");
        } else {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must compare both routes"
            );
        }
    }
}

#[cfg(test)]
mod transposed_routes {
    //! Both routes of a transposed copy (the engine's blocked kernel, and ggml's copy of
    //! the transposed view, which the GPU backends run) against the plain transpose.
    use super::Layers;
    use crate::backend::{Runtime, RuntimeOptions};
    use crate::ggml::{Context, DType};

    /// A contiguous input and a view of every other row give the transpose by either
    /// route; the kernel's route where this CPU has the float kernels.
    #[test]
    fn both_routes_transpose() {
        let (cols, rows) = (70usize, 45usize);
        let x: Vec<f32> = (0..cols * rows * 2).map(|i| i as f32 * 0.5 - 7.0).collect();
        let runtime = Runtime::new(&RuntimeOptions::default()).unwrap();
        let kernels = Layers::new(&runtime);
        if !kernels.float {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run on a CPU with the float kernels"
            );
        }
        for layers in [kernels, Layers::with_cpu_kernels(false)] {
            for every_other in [false, true] {
                let ctx = Context::new(64, 64).unwrap();
                let input = ctx.new_tensor(DType::F32, &[cols as i64, 2 * rows as i64], "x");
                input.mark_input();
                let (src, stride) = if every_other {
                    (
                        ctx.view_3d(input, [cols as i64, rows as i64, 1], 2 * cols, 0, 0),
                        2 * cols,
                    )
                } else {
                    (input, cols)
                };
                let n = if every_other { rows } else { 2 * rows };
                let y = layers.transposed(&ctx, src).unwrap();
                assert_eq!(y.ne(), [n as i64, cols as i64, 1, 1]);
                let got = super::computed(&runtime, &ctx, (input, &x), y);
                for c in 0..cols {
                    for r in 0..n {
                        assert_eq!(
                            got[c * n + r],
                            x[r * stride + c],
                            "{layers:?} {every_other}"
                        );
                    }
                }
            }
        }
    }
}
