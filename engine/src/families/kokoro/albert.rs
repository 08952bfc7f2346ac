//! PL-BERT, Kokoro's phoneme-level ALBERT: embeddings (word + position + token type 0,
//! LayerNorm), a 128 -> hidden mapping, then one shared transformer layer applied
//! `layers` times (self-attention without a mask, post-LayerNorm, FFN with the tanh
//! GELU). ggml's own GELU is an f16 lookup table on the CPU, so the tanh form is
//! composed from exact f32 ops here.

use crate::error::Result;
use crate::ggml::{Context, Tensor};

use super::weights::Weights;
use super::HParams;

/// Tensor-name prefix of the embeddings.
const EMB: &str = "encoder.bert.embeddings";
/// Tensor-name prefix of the encoder.
const ENC: &str = "encoder.bert.encoder";
/// Tensor-name prefix of the shared layer (PyTorch's
/// `encoder.bert.encoder.albert_layer_groups.0.albert_layers.0`, shortened by the
/// converter: GGUF names are at most 63 bytes).
pub const LAYER: &str = "encoder.bert.layer";
/// LayerNorm epsilon of ALBERT (the ONNX graph's).
const LN_EPS: f32 = 1e-12;
/// sqrt(2 / pi), of the tanh GELU.
const GELU_K: f32 = 0.797_884_6;

/// Every tensor ALBERT reads, with its dims (ggml order, as in the file: a MatMul
/// weight is [out, in]).
pub fn tensor_shapes(hp: &HParams) -> Vec<(String, Vec<i64>)> {
    let (e, d, f) = (hp.bert_embedding, hp.bert_hidden, hp.bert_ffn);
    let mut v = vec![
        (
            format!("{EMB}.word_embeddings.weight"),
            vec![e, hp.n_symbols],
        ),
        (
            format!("{EMB}.position_embeddings.weight"),
            vec![e, hp.bert_positions],
        ),
        (format!("{EMB}.token_type_embeddings.weight"), vec![e, 2]),
        (format!("{EMB}.LayerNorm.weight"), vec![e]),
        (format!("{EMB}.LayerNorm.bias"), vec![e]),
        (
            format!("{ENC}.embedding_hidden_mapping_in.weight"),
            vec![d, e],
        ),
        (format!("{ENC}.embedding_hidden_mapping_in.bias"), vec![d]),
    ];
    for (name, i, o) in [
        ("attention.query", d, d),
        ("attention.key", d, d),
        ("attention.value", d, d),
        ("attention.dense", d, d),
        ("ffn", d, f),
        ("ffn_output", f, d),
    ] {
        v.push((format!("{LAYER}.{name}.weight"), vec![o, i]));
        v.push((format!("{LAYER}.{name}.bias"), vec![o]));
    }
    for name in ["attention.LayerNorm", "full_layer_layer_norm"] {
        v.push((format!("{LAYER}.{name}.weight"), vec![d]));
        v.push((format!("{LAYER}.{name}.bias"), vec![d]));
    }
    v
}

/// `norm(x) * weight + bias` over each column of `x` [d, T].
///
/// Upstream: `nn.LayerNorm`; the text encoder's is `hexgrad/kokoro@dfb907a02bba`
/// kokoro/modules.py L21-L32 (`LayerNorm`).
pub fn layer_norm<'a>(
    ctx: &'a Context,
    w: &'a Weights,
    x: Tensor<'a>,
    prefix: &str,
    weight: &str,
    bias: &str,
    eps: f32,
) -> Result<Tensor<'a>> {
    let n = ctx.norm(x, eps);
    Ok(ctx.add(
        ctx.mul(n, w.get(&format!("{prefix}.{weight}"))?),
        w.get(&format!("{prefix}.{bias}"))?,
    ))
}

/// `x W + b` for `x` [in, T] and the MatMul weight `<prefix>.weight` (ONNX [in, out]).
pub fn linear<'a>(
    ctx: &'a Context,
    w: &'a Weights,
    x: Tensor<'a>,
    prefix: &str,
) -> Result<Tensor<'a>> {
    Ok(ctx.add(
        ctx.mul_mat(w.get_t(&format!("{prefix}.weight"))?, x),
        w.get(&format!("{prefix}.bias"))?,
    ))
}

/// The tanh GELU, `0.5 x (1 + tanh(k (x + 0.044715 x^3)))`, in f32 ops.
///
/// Upstream: `huggingface/transformers@v4.48.0` src/transformers/activations.py L49-L56
/// (`NewGELUActivation`, ALBERT's default `gelu_new`:
/// src/transformers/models/albert/configuration_albert.py L118).
fn gelu_tanh<'a>(ctx: &'a Context, x: Tensor<'a>) -> Tensor<'a> {
    let cube = ctx.mul(ctx.mul(x, x), x);
    let inner = ctx.scale(ctx.add(x, ctx.scale(cube, 0.044_715)), GELU_K);
    ctx.scale(ctx.add(x, ctx.mul(x, ctx.tanh(inner))), 0.5)
}

/// Self-attention over `x` [d, T] with `heads` heads, no mask.
///
/// Upstream: `huggingface/transformers@v4.48.0`
/// src/transformers/models/albert/modeling_albert.py L309-L360 (`AlbertAttention.forward`
/// up to the output projection).
fn attention<'a>(
    ctx: &'a Context,
    w: &'a Weights,
    x: Tensor<'a>,
    heads: i64,
) -> Result<Tensor<'a>> {
    let [d, t, _, _] = x.ne();
    let dh = d / heads;
    let split = |y: Tensor<'a>| ctx.reshape(y, &[dh, heads, t]);
    let q = split(linear(ctx, w, x, &format!("{LAYER}.attention.query"))?);
    let k = split(linear(ctx, w, x, &format!("{LAYER}.attention.key"))?);
    let v = split(linear(ctx, w, x, &format!("{LAYER}.attention.value"))?);
    let qp = ctx.cont(ctx.permute(q, [0, 2, 1, 3])); // [dh, T, heads]
    let kp = ctx.cont(ctx.permute(k, [0, 2, 1, 3]));
    let scores = ctx.mul_mat(kp, qp); // [T_k, T_q, heads]
    let probs = ctx.soft_max_scaled(scores, 1.0 / (dh as f32).sqrt());
    let vt = ctx.cont(ctx.permute(v, [1, 2, 0, 3])); // [T, dh, heads]
    let out = ctx.mul_mat(vt, probs); // [dh, T_q, heads]
    let merged = ctx.cont(ctx.permute(out, [0, 2, 1, 3])); // [dh, heads, T]
    Ok(ctx.reshape(merged, &[d, t]))
}

/// ALBERT's last hidden state [hidden, T] for the token ids `ids` (an i32 tensor [T]).
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/modules.py L179-L183 (`CustomAlbert`)
/// over `huggingface/transformers@v4.48.0`
/// src/transformers/models/albert/modeling_albert.py L214-L253
/// (`AlbertEmbeddings.forward`), L512-L554 (`AlbertTransformer.forward`) and L442-L466
/// (`AlbertLayer.forward`, `ff_chunk`).
pub fn build<'a>(
    ctx: &'a Context,
    w: &'a Weights,
    hp: &HParams,
    ids: Tensor<'a>,
) -> Result<Tensor<'a>> {
    let t = ids.ne()[0];
    let e = hp.bert_embedding;
    let words = ctx.get_rows(w.get(&format!("{EMB}.word_embeddings.weight"))?, ids);
    let positions = ctx.view_2d_rows(
        w.get(&format!("{EMB}.position_embeddings.weight"))?,
        e,
        t,
        0,
    );
    let token_type = ctx.view_1d(w.get(&format!("{EMB}.token_type_embeddings.weight"))?, e, 0);
    let x = ctx.add(ctx.add(words, token_type), positions);
    let x = layer_norm(
        ctx,
        w,
        x,
        &format!("{EMB}.LayerNorm"),
        "weight",
        "bias",
        LN_EPS,
    )?;
    let mut x = linear(ctx, w, x, &format!("{ENC}.embedding_hidden_mapping_in"))?;
    for _ in 0..hp.bert_layers {
        let a = linear(
            ctx,
            w,
            attention(ctx, w, x, hp.bert_heads)?,
            &format!("{LAYER}.attention.dense"),
        )?;
        let a = layer_norm(
            ctx,
            w,
            ctx.add(x, a),
            &format!("{LAYER}.attention.LayerNorm"),
            "weight",
            "bias",
            LN_EPS,
        )?;
        let f = gelu_tanh(ctx, linear(ctx, w, a, &format!("{LAYER}.ffn"))?);
        let f = linear(ctx, w, f, &format!("{LAYER}.ffn_output"))?;
        x = layer_norm(
            ctx,
            w,
            ctx.add(f, a),
            &format!("{LAYER}.full_layer_layer_norm"),
            "weight",
            "bias",
            LN_EPS,
        )?;
    }
    Ok(x)
}
