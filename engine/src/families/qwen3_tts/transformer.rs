//! The decoder layer all three of Qwen3-TTS's transformers are made of, and the key/value
//! cache it attends over.
//!
//! A pre-norm layer: `h = x + attn(rms(x))`, `y = h + mlp(rms(h))`, with RMSNorm, grouped
//! query attention (query head `i` reads key/value head `i / (heads / kv_heads)`), rotary
//! positions in the NeoX layout and a SwiGLU MLP, `down(silu(gate(z)) * up(z))`. The talker
//! and the code predictor normalise each query and key head (`q_norm`, `k_norm`); the
//! codec's transformer has no head norms but scales each branch per channel
//! (`*_layer_scale.scale`) and sees a sliding window of past frames, which its mask says.
//! The talker's multimodal RoPE reduces to this one for speech: its three position rows
//! are equal.
//!
//! Upstream: `qwen-tts==0.1.1` qwen_tts/core/models/modeling_qwen3_tts.py L727-L806
//! (`Qwen3TTSTalkerAttention`), L1348-L1425 (`Qwen3TTSTalkerDecoderLayer`), L596-L613
//! (`Qwen3TTSRMSNorm`), L842-L856 (`Qwen3TTSTalkerTextMLP`); the codec's in
//! core/tokenizer_12hz/modeling_qwen3_tts_tokenizer_v2.py L421-L472
//! (`Qwen3TTSTokenizerV2DecoderTransformerLayer`).

use crate::backend::Runtime;
use crate::error::Result;
use crate::ggml::{Buffer, Context, DType, Tensor};
use crate::layers::Layers;
use crate::model_file::ModelFile;
use crate::weights::WeightStore;

use super::hparams::Decoder;

/// Which of the two layer variants a stack is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Query and key heads RMS-normalised (the talker, the code predictor).
    HeadNorms,
    /// Attention and MLP outputs scaled per channel (the codec decoder's transformer).
    LayerScales,
    /// Layer scales, LayerNorm with a bias instead of RMSNorm and a GELU MLP (`fc1`,
    /// `fc2`) instead of SwiGLU (the codec encoder's, Mimi's, transformer).
    Mimi,
}

/// One layer's weights, checked by name and shape at load; kept by name.
#[derive(Clone)]
pub struct DecoderLayer {
    prefix: String,
    variant: Variant,
    d: Decoder,
}

impl DecoderLayer {
    /// Checks the weights of the layer under `prefix` (`...layers.{l}`) in the file.
    pub fn load(file: &ModelFile, prefix: &str, d: &Decoder, variant: Variant) -> Result<Self> {
        let (h, q, kv, i) = (
            d.hidden as i64,
            (d.heads * d.head_dim) as i64,
            (d.kv_heads * d.head_dim) as i64,
            d.intermediate as i64,
        );
        let mut shapes = vec![
            ("input_layernorm.weight", vec![h]),
            ("post_attention_layernorm.weight", vec![h]),
            ("self_attn.q_proj.weight", vec![h, q]),
            ("self_attn.k_proj.weight", vec![h, kv]),
            ("self_attn.v_proj.weight", vec![h, kv]),
            ("self_attn.o_proj.weight", vec![q, h]),
        ];
        match variant {
            Variant::HeadNorms | Variant::LayerScales => {
                shapes.push(("mlp.gate_proj.weight", vec![h, i]));
                shapes.push(("mlp.up_proj.weight", vec![h, i]));
                shapes.push(("mlp.down_proj.weight", vec![i, h]));
            }
            Variant::Mimi => {
                shapes.push(("input_layernorm.bias", vec![h]));
                shapes.push(("post_attention_layernorm.bias", vec![h]));
                shapes.push(("mlp.fc1.weight", vec![h, i]));
                shapes.push(("mlp.fc2.weight", vec![i, h]));
            }
        }
        match variant {
            Variant::HeadNorms => {
                shapes.push(("self_attn.q_norm.weight", vec![d.head_dim as i64]));
                shapes.push(("self_attn.k_norm.weight", vec![d.head_dim as i64]));
            }
            Variant::LayerScales | Variant::Mimi => {
                shapes.push(("self_attn_layer_scale.scale", vec![h]));
                shapes.push(("mlp_layer_scale.scale", vec![h]));
            }
        }
        for (name, ne) in shapes {
            file.expect_dims(&format!("{prefix}.{name}"), &ne)?;
        }
        Ok(DecoderLayer {
            prefix: prefix.to_string(),
            variant,
            d: *d,
        })
    }

    /// The layer over `x` [hidden, T] at positions `pos` (i32, T values), storing its
    /// keys and values in layer `l` of `cache` after `n_past` positions and attending
    /// over all of them, under `mask` ([n_past + T, T], 0 or -inf) when one is given.
    #[allow(clippy::too_many_arguments)]
    pub fn build<'a>(
        &self,
        ctx: &'a Context,
        graph: &mut crate::ggml::Graph<'a>,
        w: &'a WeightStore,
        layers: &Layers,
        x: Tensor<'a>,
        pos: Tensor<'a>,
        cache: &'a KvCache,
        l: usize,
        n_past: usize,
        mask: Option<Tensor<'a>>,
    ) -> Result<Tensor<'a>> {
        let d = self.d;
        let t = x.ne()[1];
        let n = self.norm(ctx, w, x, "input_layernorm");
        let heads = |proj: &str, norm: &str, count: usize| -> Result<Tensor<'a>> {
            let y = layers.linear(ctx, w.tensor(&self.name(proj)).expect("checked"), None, n)?;
            let y = ctx.reshape(y, &[d.head_dim as i64, count as i64, t]);
            Ok(match self.variant {
                Variant::HeadNorms => rms_norm(ctx, w, y, &self.name(norm), d.rms_eps),
                Variant::LayerScales | Variant::Mimi => y,
            })
        };
        let q = ctx.rope_neox(
            heads(
                "self_attn.q_proj.weight",
                "self_attn.q_norm.weight",
                d.heads,
            )?,
            pos,
            d.rope_theta,
        );
        let k = ctx.rope_neox(
            heads(
                "self_attn.k_proj.weight",
                "self_attn.k_norm.weight",
                d.kv_heads,
            )?,
            pos,
            d.rope_theta,
        );
        let v = layers.linear(
            ctx,
            w.tensor(&self.name("self_attn.v_proj.weight"))
                .expect("checked"),
            None,
            n,
        )?;
        let v = ctx.reshape(v, &[d.head_dim as i64, d.kv_heads as i64, t]);
        // Keys and values join the cache before the reads (ggml runs nodes in order).
        graph.expand(ctx.cpy(
            ctx.permute(k, [0, 2, 1, 3]),
            cache.keys(ctx, l, n_past, t as usize),
        ));
        graph.expand(ctx.cpy(
            ctx.permute(v, [1, 2, 0, 3]),
            cache.values(ctx, l, n_past, t as usize),
        ));
        let n_kv = n_past + t as usize;
        let qp = ctx.permute(q, [0, 2, 1, 3]);
        let qp = if t > 1 { ctx.cont(qp) } else { qp };
        let scores = ctx.mul_mat(cache.keys(ctx, l, 0, n_kv), qp); // [n_kv, T, heads]
        let scale = 1.0 / (d.head_dim as f32).sqrt();
        let probs = match mask {
            Some(m) => ctx.soft_max_masked(scores, m, scale),
            None => ctx.soft_max_scaled(scores, scale),
        };
        let o = ctx.mul_mat(cache.values(ctx, l, 0, n_kv), probs); // [head_dim, T, heads]
        let o = ctx.reshape(
            ctx.cont(ctx.permute(o, [0, 2, 1, 3])),
            &[(d.heads * d.head_dim) as i64, t],
        );
        let o = layers.linear(
            ctx,
            w.tensor(&self.name("self_attn.o_proj.weight"))
                .expect("checked"),
            None,
            o,
        )?;
        let h = ctx.add(x, self.scaled(ctx, w, o, "self_attn_layer_scale.scale"));
        let z = self.norm(ctx, w, h, "post_attention_layernorm");
        let lin = |name: &str, x: Tensor<'a>| {
            layers.linear(ctx, w.tensor(&self.name(name)).expect("checked"), None, x)
        };
        let m = match self.variant {
            Variant::HeadNorms | Variant::LayerScales => {
                let gate = ctx.silu(lin("mlp.gate_proj.weight", z)?);
                lin(
                    "mlp.down_proj.weight",
                    ctx.mul(gate, lin("mlp.up_proj.weight", z)?),
                )?
            }
            // Upstream: transformers==4.57.3 models/mimi/modeling_mimi.py L577-L590
            // (`MimiMLP`, exact GELU).
            Variant::Mimi => lin("mlp.fc2.weight", ctx.gelu_erf(lin("mlp.fc1.weight", z)?))?,
        };
        Ok(ctx.add(h, self.scaled(ctx, w, m, "mlp_layer_scale.scale")))
    }

    fn name(&self, tail: &str) -> String {
        format!("{}.{tail}", self.prefix)
    }

    /// The norm `{name}` of each column of `x`: RMSNorm, or LayerNorm with its bias in
    /// the Mimi variant.
    fn norm<'a>(
        &self,
        ctx: &'a Context,
        w: &'a WeightStore,
        x: Tensor<'a>,
        name: &str,
    ) -> Tensor<'a> {
        let weight = self.name(&format!("{name}.weight"));
        match self.variant {
            Variant::HeadNorms | Variant::LayerScales => {
                rms_norm(ctx, w, x, &weight, self.d.rms_eps)
            }
            Variant::Mimi => ctx.add(
                ctx.mul(
                    ctx.norm(x, self.d.rms_eps),
                    w.tensor(&weight).expect("checked"),
                ),
                w.tensor(&self.name(&format!("{name}.bias")))
                    .expect("checked"),
            ),
        }
    }

    /// `y` times the per-channel scale `scale` in the layer-scale variant, else `y`.
    fn scaled<'a>(
        &self,
        ctx: &'a Context,
        w: &'a WeightStore,
        y: Tensor<'a>,
        scale: &str,
    ) -> Tensor<'a> {
        match self.variant {
            Variant::LayerScales | Variant::Mimi => {
                ctx.mul(y, w.tensor(&self.name(scale)).expect("checked"))
            }
            Variant::HeadNorms => y,
        }
    }
}

/// RMSNorm of each column of `x` with the gain `weight`.
///
/// Upstream: modeling_qwen3_tts.py L596-L613 (`Qwen3TTSRMSNorm.forward`).
pub fn rms_norm<'a>(
    ctx: &'a Context,
    w: &'a WeightStore,
    x: Tensor<'a>,
    weight: &str,
    eps: f32,
) -> Tensor<'a> {
    ctx.mul(
        ctx.rms_norm(x, eps),
        w.tensor(weight).expect("checked at load"),
    )
}

/// The keys and values of one decoder stack, on the device: per layer, keys
/// [head_dim, capacity, kv_heads] (positions along axis 1) and values transposed,
/// [capacity, head_dim, kv_heads], so attention reads both without a copy.
pub struct KvCache {
    ctx: Context,
    _buf: Buffer,
    head_dim: usize,
    kv_heads: usize,
    capacity: usize,
}

impl KvCache {
    /// A cache for `capacity` positions of the stack `d` on `runtime`'s device.
    pub fn new(runtime: &Runtime, d: &Decoder, capacity: usize) -> Result<Self> {
        let ctx = Context::new(2 * d.layers + 4, 0)?;
        let (hd, kvh, cap) = (d.head_dim as i64, d.kv_heads as i64, capacity as i64);
        for l in 0..d.layers {
            ctx.new_tensor(DType::F32, &[hd, cap, kvh], &format!("k.{l}"));
            ctx.new_tensor(DType::F32, &[cap, hd, kvh], &format!("v.{l}"));
        }
        let buf = Buffer::alloc_context(&ctx, runtime.main())?;
        Ok(KvCache {
            ctx,
            _buf: buf,
            head_dim: d.head_dim,
            kv_heads: d.kv_heads,
            capacity,
        })
    }

    /// Positions it holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Layer `l`'s keys of positions `start..start + len`: [head_dim, len, kv_heads].
    fn keys<'a>(&'a self, ctx: &'a Context, l: usize, start: usize, len: usize) -> Tensor<'a> {
        let k = self
            .ctx
            .tensor_by_name(&format!("k.{l}"))
            .expect("made with the cache");
        let (hd, cap) = (self.head_dim, self.capacity);
        ctx.view_3d(
            k,
            [hd as i64, len as i64, self.kv_heads as i64],
            hd,
            hd * cap,
            start * hd,
        )
    }

    /// Layer `l`'s values of positions `start..start + len`: [len, head_dim, kv_heads].
    fn values<'a>(&'a self, ctx: &'a Context, l: usize, start: usize, len: usize) -> Tensor<'a> {
        let v = self
            .ctx
            .tensor_by_name(&format!("v.{l}"))
            .expect("made with the cache");
        let (hd, cap) = (self.head_dim, self.capacity);
        ctx.view_3d(
            v,
            [len as i64, hd as i64, self.kv_heads as i64],
            cap,
            cap * hd,
            start,
        )
    }
}
