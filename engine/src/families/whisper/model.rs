//! Whisper's encoder and decoder as ggml graphs: one builder per block (conv stem,
//! attention, feed-forward, encoder layer, decoder layer), composed by `encode` (one
//! 30 s window, which also fills the cross-attention keys and values) and `decode`
//! (new tokens against the self-attention cache). Weights and caches live on the device
//! in their own buffers; the scheduler runs the graphs.
//!
//! Upstream: `openai/whisper@v20250625` whisper/model.py (the weights come converted by
//! CTranslate2; the math is OpenAI's).

use std::path::Path;
use std::sync::Arc;

use super::row::Row;
use crate::backend::Runtime;
use crate::cpu_kernels::logits::LogitsSummary;
use crate::error::Result;
use crate::ggml::{Buffer, Context, DType, HostTensor, InputShapes, Prepared, Scheduler, Tensor};
use crate::layers::{Layers, WeightUse};
use crate::weights::{WeightStore, WeightTensor};

/// Model dimensions (from the GGUF metadata).
///
/// Upstream: `openai/whisper@v20250625` whisper/model.py L25-L36 (`ModelDimensions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HParams {
    /// Mel bins of the input.
    pub n_mels: usize,
    /// Encoder positions (frames after the stride-2 conv).
    pub n_audio_ctx: usize,
    /// Encoder width.
    pub n_audio_state: usize,
    /// Encoder attention heads.
    pub n_audio_head: usize,
    /// Encoder layers.
    pub n_audio_layer: usize,
    /// Decoder positions.
    pub n_text_ctx: usize,
    /// Decoder width.
    pub n_text_state: usize,
    /// Decoder attention heads.
    pub n_text_head: usize,
    /// Decoder layers.
    pub n_text_layer: usize,
    /// Vocabulary size.
    pub n_vocab: usize,
}

impl HParams {
    /// Every weight tensor with its dims in ggml order (`ne[0]` first).
    pub fn tensor_shapes(&self) -> Vec<(String, Vec<i64>)> {
        let (m, a, t) = (
            self.n_mels as i64,
            self.n_audio_state as i64,
            self.n_text_state as i64,
        );
        let mut v: Vec<(String, Vec<i64>)> = vec![
            ("encoder.conv1.weight".into(), vec![3, m, a]),
            ("encoder.conv1.bias".into(), vec![a]),
            ("encoder.conv2.weight".into(), vec![3, a, a]),
            ("encoder.conv2.bias".into(), vec![a]),
            (
                "encoder.position_encodings.encodings".into(),
                vec![a, self.n_audio_ctx as i64],
            ),
            ("encoder.layer_norm.gamma".into(), vec![a]),
            ("encoder.layer_norm.beta".into(), vec![a]),
            (
                "decoder.embeddings.weight".into(),
                vec![t, self.n_vocab as i64],
            ),
            (
                "decoder.position_encodings.encodings".into(),
                vec![t, self.n_text_ctx as i64],
            ),
            ("decoder.layer_norm.gamma".into(), vec![t]),
            ("decoder.layer_norm.beta".into(), vec![t]),
        ];
        let lin = |v: &mut Vec<(String, Vec<i64>)>, p: String, i: i64, o: i64| {
            v.push((format!("{p}.weight"), vec![i, o]));
            v.push((format!("{p}.bias"), vec![o]));
        };
        let ln = |v: &mut Vec<(String, Vec<i64>)>, p: String, d: i64| {
            v.push((format!("{p}.gamma"), vec![d]));
            v.push((format!("{p}.beta"), vec![d]));
        };
        for l in 0..self.n_audio_layer {
            let p = format!("encoder.layer_{l}");
            ln(&mut v, format!("{p}.self_attention.layer_norm"), a);
            lin(&mut v, format!("{p}.self_attention.linear_0"), a, 3 * a);
            lin(&mut v, format!("{p}.self_attention.linear_1"), a, a);
            ln(&mut v, format!("{p}.ffn.layer_norm"), a);
            lin(&mut v, format!("{p}.ffn.linear_0"), a, 4 * a);
            lin(&mut v, format!("{p}.ffn.linear_1"), 4 * a, a);
        }
        for l in 0..self.n_text_layer {
            let p = format!("decoder.layer_{l}");
            ln(&mut v, format!("{p}.self_attention.layer_norm"), t);
            lin(&mut v, format!("{p}.self_attention.linear_0"), t, 3 * t);
            lin(&mut v, format!("{p}.self_attention.linear_1"), t, t);
            ln(&mut v, format!("{p}.attention.layer_norm"), t);
            lin(&mut v, format!("{p}.attention.linear_0"), t, t);
            lin(&mut v, format!("{p}.attention.linear_1"), a, 2 * t);
            lin(&mut v, format!("{p}.attention.linear_2"), t, t);
            ln(&mut v, format!("{p}.ffn.layer_norm"), t);
            lin(&mut v, format!("{p}.ffn.linear_0"), t, 4 * t);
            lin(&mut v, format!("{p}.ffn.linear_1"), 4 * t, t);
        }
        v
    }
}

/// Layer-norm epsilon of Whisper.
const LN_EPS: f32 = 1e-5;
/// Graph node budget (the encoder of large models stays far below it).
const GRAPH_NODES: usize = 4096;

/// The token embedding, which is also the output projection.
const EMBEDDING: &str = "decoder.embeddings.weight";

/// True for the weights that only ever feed a matrix product (linear layers and the
/// token embedding, which is also the output projection): these may stay f16 or be
/// block-quantized; every other tensor (norms, biases, positions, conv kernels) is f32.
pub fn is_matmul_weight(name: &str) -> bool {
    name == EMBEDDING || (name.contains(".linear_") && name.ends_with(".weight"))
}

/// What each weight feeds, for [`Layers::store`]: the linear layers' weights, the conv
/// stem's kernels, and everything else (the token embedding, also read by row, stays
/// as it is).
fn weight_use(name: &str) -> WeightUse {
    if name.contains(".linear_") && name.ends_with(".weight") {
        WeightUse::Linear
    } else if name.starts_with("encoder.conv") && name.ends_with(".weight") {
        WeightUse::Conv1d
    } else {
        WeightUse::Plain
    }
}

/// Width of the conv stem's kernels.
const CONV_KERNEL_WIDTH: i64 = 3;

/// Weights and caches on the device.
///
/// Upstream: `openai/whisper@v20250625` whisper/model.py L252-L276 (`Whisper.__init__`),
/// the caches as `Whisper.install_kv_cache_hooks` L310-L341 keeps them.
pub struct WhisperNet {
    hp: HParams,
    /// Shared by the model's forks ([`WhisperNet::fork`]); read-only once uploaded.
    weights: Arc<WeightStore>,
    /// Cache slot 0 serves [`Whisper::transcribe`](super::Whisper); more are added for
    /// requests decoded as one batch ([`WhisperNet::add_slots`]).
    caches: Caches,
    runtime: Runtime,
    /// Which implementation computes each layer on this runtime.
    layers: Layers,
}

/// The requests' caches: per decoder layer the cross-attention keys and values of the
/// current window (f16) and the self-attention keys and values (f32), each one tensor
/// whose last axis is the request's slot, so that a step over every slot reads them
/// as one batch.
struct Caches {
    ctx: Context,
    _buf: Buffer,
    slots: usize,
}

impl Caches {
    fn new(hp: HParams, runtime: &Runtime, slots: usize) -> Result<Self> {
        let ctx = Context::new(4 * hp.n_text_layer + 4, 0)?;
        let (t, a_ctx, t_ctx, n) = (
            hp.n_text_state as i64,
            hp.n_audio_ctx as i64,
            hp.n_text_ctx as i64,
            slots as i64,
        );
        for l in 0..hp.n_text_layer {
            ctx.new_tensor(DType::F16, &[t, a_ctx, n], &format!("cross_k.{l}"));
            ctx.new_tensor(DType::F16, &[a_ctx, t, n], &format!("cross_v.{l}"));
            ctx.new_tensor(DType::F32, &[t, t_ctx, n], &format!("self_k.{l}"));
            ctx.new_tensor(DType::F32, &[t_ctx, t, n], &format!("self_v.{l}"));
        }
        let buf = Buffer::alloc_context(&ctx, runtime.main())?;
        // Zeros, not whatever the memory held: a decoder step reads the whole
        // self-attention cache under a mask, and a masked NaN would still poison its
        // softmax.
        buf.clear(0);
        Ok(Caches {
            ctx,
            _buf: buf,
            slots,
        })
    }
}

/// Which attention a block computes.
///
/// Upstream: `openai/whisper@v20250625` whisper/model.py L224-L225 (`TextDecoder`'s causal
/// `mask`).
enum Mask<'a> {
    None,
    Causal(i32),
    /// An input of 0 and -inf per cached position (the fixed-shape decoder step).
    Input(Tensor<'a>),
}

impl WhisperNet {
    /// Uploads `tensors` (exactly [`HParams::tensor_shapes`], each in the type it will
    /// compute in: see [`is_matmul_weight`]) and allocates the caches. Self-attention
    /// keys are cached position-major ([state, positions]), cross-attention keys
    /// head-major ([head_dim, positions, heads]), values transposed ([positions,
    /// state]), so that attention reads them all without copying. Each weight is
    /// stored as its layer computes from it on this runtime ([`Layers::store`]), then
    /// uploaded through the [`WeightStore`] (which frees each host copy once it is on
    /// the device); `path` is the file they came from, for errors.
    pub fn new(
        hp: HParams,
        tensors: Vec<HostTensor>,
        runtime: Runtime,
        path: &Path,
    ) -> Result<Self> {
        let layers = Layers::new(&runtime);
        let tensors = tensors.into_iter().flat_map(|t| {
            let stages = if t.name == EMBEDDING {
                layers.logit_stages(&t)
            } else {
                Vec::new()
            };
            let usage = weight_use(&t.name);
            std::iter::once(layers.store(t, usage))
                .chain(stages)
                .map(|t| Ok(WeightTensor::from(t)))
        });
        let weights = Arc::new(WeightStore::upload(path, tensors, &runtime)?);
        Self::with_weights(hp, weights, runtime, layers)
    }

    /// A network over `weights` with caches of its own on `runtime`.
    fn with_weights(
        hp: HParams,
        weights: Arc<WeightStore>,
        runtime: Runtime,
        layers: Layers,
    ) -> Result<Self> {
        let caches = Caches::new(hp, &runtime, 1)?;
        Ok(WhisperNet {
            hp,
            weights,
            caches,
            runtime,
            layers,
        })
    }

    /// A second network for another thread: the same weights (shared, not copied), its
    /// own caches and its own backends ([`Runtime::fork`]).
    pub fn fork(&self) -> Result<Self> {
        Self::with_weights(
            self.hp,
            Arc::clone(&self.weights),
            self.runtime.fork()?,
            self.layers,
        )
    }

    /// Where the weights' device memory starts (equal for a network and its forks).
    pub fn weight_addresses(&self) -> Vec<usize> {
        self.weights.base_addresses()
    }

    /// The runtime (device) the model runs on.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// A scheduler sized for this model's graphs.
    pub fn scheduler(&self) -> Result<Scheduler> {
        self.runtime.scheduler(GRAPH_NODES)
    }

    fn w(&self, name: &str) -> Tensor<'_> {
        self.weights
            .tensor(name)
            .unwrap_or_else(|| panic!("weight {name} was created at load"))
    }

    /// Cache tensor `name` of every slot ([state or positions, ..., slots]).
    fn cache(&self, name: &str) -> Tensor<'_> {
        self.caches
            .ctx
            .tensor_by_name(name)
            .unwrap_or_else(|| panic!("cache {name} was created with the others"))
    }

    /// Cache tensor `name` of slot `slot`, as a view in `ctx`.
    fn c<'a>(&'a self, ctx: &'a Context, slot: usize, name: &str) -> Tensor<'a> {
        let all = self.cache(name);
        let [a, b, _, _] = all.ne();
        ctx.view_2d_rows(all, a, b, slot * (a * b) as usize)
    }

    /// Decoder layer `l`'s cross-attention keys of the `slots` slots from `slot` on, as
    /// stored: head-major, [head_dim, positions, heads, slots], so that a decoder step
    /// reads each head's keys as one run of memory. `encode` writes a slot through this
    /// view; the steps read it as [`Self::cross_keys`].
    fn cross_keys_stored<'a>(
        &'a self,
        ctx: &'a Context,
        l: usize,
        slot: usize,
        slots: usize,
    ) -> Tensor<'a> {
        let all = self.cache(&format!("cross_k.{l}"));
        let (d, h, a_ctx) = (
            self.hp.n_text_state,
            self.hp.n_text_head,
            self.hp.n_audio_ctx,
        );
        let dh = d / h;
        ctx.view_4d(
            all,
            [dh as i64, a_ctx as i64, h as i64, slots as i64],
            [dh, dh * a_ctx, d * a_ctx],
            slot * d * a_ctx,
        )
    }

    /// The same keys as the attention reads them: [head_dim, heads, positions, slots].
    fn cross_keys<'a>(
        &'a self,
        ctx: &'a Context,
        l: usize,
        slot: usize,
        slots: usize,
    ) -> Tensor<'a> {
        ctx.permute(self.cross_keys_stored(ctx, l, slot, slots), [0, 2, 1, 3])
    }

    /// Cache slots: requests this network can hold at once.
    pub fn slots(&self) -> usize {
        self.caches.slots
    }

    /// Makes room for `n` requests' caches when there is less: every slot's caches
    /// are made again (zeroed), so call it before the requests start.
    pub fn add_slots(&mut self, n: usize) -> Result<()> {
        if n > self.caches.slots {
            self.caches = Caches::new(self.hp, &self.runtime, n)?;
        }
        Ok(())
    }

    /// Whether a decoder step over `n` slots runs them as one batch throughout
    /// ([`Layers::batches_attention`]): then a step is built over every slot at once.
    pub fn steps_every_slot(&self, n: usize) -> bool {
        n > 1 && self.layers.batches_attention()
    }

    /// The layer norm `p` (gain and bias) over each column of `x`.
    ///
    /// Upstream: `openai/whisper@v20250625` whisper/model.py L39-L41 (`LayerNorm`).
    fn layer_norm<'a>(&'a self, ctx: &'a Context, x: Tensor<'a>, p: &str) -> Tensor<'a> {
        let n = ctx.norm(x, LN_EPS);
        ctx.add(
            ctx.mul(n, self.w(&format!("{p}.gamma"))),
            self.w(&format!("{p}.beta")),
        )
    }

    /// The linear layer `p` (weight and bias) applied to `x`.
    ///
    /// Upstream: `openai/whisper@v20250625` whisper/model.py L44-L50 (`Linear`).
    fn linear<'a>(&'a self, ctx: &'a Context, x: Tensor<'a>, p: &str) -> Result<Tensor<'a>> {
        let (w, b) = (self.w(&format!("{p}.weight")), self.w(&format!("{p}.bias")));
        self.layers.linear(ctx, w, Some(b), x)
    }

    /// [`Self::linear`] over the `columns` tokens of a decoder step, each its own
    /// request's: one product, or one per column where [`Layers::batches_columns`]
    /// says so (so that a column gets the bits of a step alone).
    fn step_linear<'a>(
        &'a self,
        ctx: &'a Context,
        x: Tensor<'a>,
        p: &str,
        columns: usize,
    ) -> Result<Tensor<'a>> {
        let w = self.w(&format!("{p}.weight"));
        if columns <= 1 || self.layers.batches_columns(w) {
            return self.linear(ctx, x, p);
        }
        let rows = x.ne()[0];
        let mut joined = None;
        for i in 0..columns {
            let y = self.linear(ctx, ctx.view_2d_rows(x, rows, 1, i * rows as usize), p)?;
            joined = Some(joined.map_or(y, |j| ctx.concat(j, y, 1)));
        }
        Ok(joined.expect("at least two columns"))
    }

    /// The decoder's scaled dot-product attention over heads against a cache. `q` and
    /// `k` are [head_dim, heads, len] views, `vt` the values transposed per head,
    /// [len, head_dim, heads] with `len` contiguous; returns [state, q_len] and the
    /// unscaled scores `q.k` ([kv_len, q_len, heads], what word alignment reads). Several
    /// queries (the prompt) are made contiguous so that they take ggml's blocked GEMM.
    ///
    /// Upstream: `openai/whisper@v20250625` whisper/model.py L114-L139
    /// (`MultiHeadAttention.qkv_attention`).
    fn attention<'a>(
        &'a self,
        ctx: &'a Context,
        q: Tensor<'a>,
        k: Tensor<'a>,
        vt: Tensor<'a>,
        mask: Mask<'a>,
    ) -> Result<(Tensor<'a>, Tensor<'a>)> {
        let [dh, heads, t, batches] = q.ne();
        let qp = ctx.permute(q, [0, 2, 1, 3]);
        let qp = if t > 1 { ctx.cont(qp) } else { qp };
        let kp = ctx.permute(k, [0, 2, 1, 3]);
        let kq = self.layers.mul_mat(ctx, kp, qp)?;
        let scale = 1.0 / (dh as f32).sqrt();
        let probs = match mask {
            Mask::None => ctx.soft_max_scaled(kq, scale),
            Mask::Causal(n_past) => ctx.soft_max_scaled(ctx.diag_mask_inf(kq, n_past), scale),
            Mask::Input(m) => ctx.soft_max_masked(kq, m, scale),
        };
        let out = self.layers.mul_mat(ctx, vt, probs)?;
        // [head_dim, t, heads] to [head_dim, heads, t]: with one query the two orders
        // are the same bytes, and no copy is made (a kernel less a layer on a GPU).
        let merged = if t == 1 {
            out
        } else {
            ctx.cont(ctx.permute(out, [0, 2, 1, 3]))
        };
        Ok((ctx.reshape(merged, &[dh * heads, t * batches]), kq))
    }

    /// Splits a [width, len] tensor whose rows are `parts` stacked projections into the
    /// `part`-th one as a [head_dim, heads, len] view.
    ///
    /// Upstream: `openai/whisper@v20250625` whisper/model.py L119-L121 (the head split of
    /// `qkv_attention`).
    fn heads<'a>(
        &self,
        ctx: &'a Context,
        x: Tensor<'a>,
        part: usize,
        parts: usize,
        width: usize,
        heads: usize,
    ) -> Tensor<'a> {
        let len = x.ne()[1];
        let dh = width / heads;
        ctx.view_3d(
            x,
            [dh as i64, heads as i64, len],
            dh,
            parts * width,
            part * width,
        )
    }

    /// A transposed value cache ([capacity, width, slots], positions adjacent) as
    /// per-head matrices over the first `len` positions of the `slots` slots from `slot`
    /// on: [len, head_dim, heads, slots]. The lone step reads one slot, the step over
    /// every slot all of them.
    ///
    /// Upstream: `openai/whisper@v20250625` whisper/model.py L121 (the values' head split)
    /// over the cache of `Whisper.install_kv_cache_hooks` L310-L341.
    fn values_t<'a>(
        &self,
        ctx: &'a Context,
        cache: Tensor<'a>,
        len: usize,
        slot: usize,
        slots: usize,
    ) -> Tensor<'a> {
        let [cap, width, _, _] = cache.ne();
        let (cap, width) = (cap as usize, width as usize);
        let heads = self.hp.n_text_head;
        let dh = width / heads;
        ctx.view_4d(
            cache,
            [len as i64, dh as i64, heads as i64, slots as i64],
            [cap, cap * dh, cap * width],
            slot * cap * width,
        )
    }

    /// The pre-norm MLP with its residual: `x + linear_1(gelu(linear_0(norm(x))))`.
    ///
    /// Upstream: `openai/whisper@v20250625` whisper/model.py L154-L158 and L170
    /// (`ResidualAttentionBlock.mlp`).
    fn ffn<'a>(
        &'a self,
        ctx: &'a Context,
        x: Tensor<'a>,
        p: &str,
        columns: usize,
    ) -> Result<Tensor<'a>> {
        let h = self.layer_norm(ctx, x, &format!("{p}.ffn.layer_norm"));
        // The exact GELU: ggml's tanh form (an f16 table on the CPU) is 10% faster but
        // moved a borderline window's transcript away from faster-whisper's.
        let h = self.layers.gelu(
            ctx,
            self.step_linear(ctx, h, &format!("{p}.ffn.linear_0"), columns)?,
        )?;
        Ok(ctx.add(
            x,
            self.step_linear(ctx, h, &format!("{p}.ffn.linear_1"), columns)?,
        ))
    }

    /// Conv stem block `i`: 1-D conv (kernel 3, padding 1) with bias, then GELU; takes
    /// [time, channels] and returns [channels, time].
    ///
    /// Upstream: `openai/whisper@v20250625` whisper/model.py L179-L180 and L193-L194
    /// (`AudioEncoder.conv1`, `conv2`, each followed by GELU).
    fn conv_gelu<'a>(
        &'a self,
        ctx: &'a Context,
        x: Tensor<'a>,
        i: usize,
        stride: i32,
    ) -> Result<Tensor<'a>> {
        let w = self.w(&format!("encoder.conv{i}.weight"));
        let y = self
            .layers
            .conv_1d(ctx, w, CONV_KERNEL_WIDTH, x, stride, 1)?;
        self.layers
            .gelu(ctx, ctx.add(y, self.w(&format!("encoder.conv{i}.bias"))))
    }

    /// Encoder layer `l`: pre-norm self-attention and MLP, each with its residual.
    ///
    /// Upstream: `openai/whisper@v20250625` whisper/model.py L160-L171
    /// (`ResidualAttentionBlock.forward`, without cross-attention).
    fn encoder_layer<'a>(
        &'a self,
        ctx: &'a Context,
        x: Tensor<'a>,
        l: usize,
    ) -> Result<Tensor<'a>> {
        let p = format!("encoder.layer_{l}");
        let h = self.hp.n_audio_head;
        let n = self.layer_norm(ctx, x, &format!("{p}.self_attention.layer_norm"));
        let qkv = self.linear(ctx, n, &format!("{p}.self_attention.linear_0"))?;
        let att = self.layers.self_attention(ctx, qkv, h)?;
        let x = ctx.add(
            x,
            self.linear(ctx, att, &format!("{p}.self_attention.linear_1"))?,
        );
        self.ffn(ctx, x, &p, 1)
    }

    /// Runs the encoder on one window of log-mel features (`n_mels` rows of
    /// `2 * n_audio_ctx` frames) and stores every decoder layer's cross-attention keys
    /// and values in the cache; the encoder output itself stays on the device.
    ///
    /// Upstream: `openai/whisper@v20250625` whisper/model.py L188-L204
    /// (`AudioEncoder.forward`; positions from `sinusoids` L62-L68), the cross-attention
    /// keys and values computed once as `MultiHeadAttention.forward` L101-L109 reuses them.
    pub fn encode(&self, sched: &mut Scheduler, slot: usize, mel: &[f32]) -> Result<()> {
        let hp = self.hp;
        let ctx = Context::new(GRAPH_NODES, GRAPH_NODES)?;
        let frames = 2 * hp.n_audio_ctx as i64;
        let x_in = ctx.new_tensor(DType::F32, &[frames, hp.n_mels as i64, 1], "mel");
        x_in.mark_input();
        let x = self.conv_gelu(&ctx, x_in, 1, 1)?;
        let time_major = self
            .layers
            .transposed(&ctx, ctx.reshape(x, &[hp.n_audio_state as i64, frames]))?;
        let x = self.conv_gelu(&ctx, time_major, 2, 2)?;
        let x = ctx.reshape(x, &[hp.n_audio_state as i64, hp.n_audio_ctx as i64]);
        let mut x = ctx.add(x, self.w("encoder.position_encodings.encodings"));
        for l in 0..hp.n_audio_layer {
            x = self.encoder_layer(&ctx, x, l)?;
        }
        let enc = self.layer_norm(&ctx, x, "encoder.layer_norm");
        let mut graph = ctx.new_graph(GRAPH_NODES);
        let t = hp.n_text_state;
        for l in 0..hp.n_text_layer {
            let kv = self.linear(&ctx, enc, &format!("decoder.layer_{l}.attention.linear_1"))?;
            let k = ctx.permute(self.heads(&ctx, kv, 0, 2, t, hp.n_text_head), [0, 2, 1, 3]);
            let v = ctx.view_2d_rows(kv, t as i64, hp.n_audio_ctx as i64, t);
            graph.expand(ctx.cpy(k, self.cross_keys_stored(&ctx, l, slot, 1)));
            graph.expand(ctx.cpy(
                self.layers.transposed(&ctx, v)?,
                self.c(&ctx, slot, &format!("cross_v.{l}")),
            ));
        }
        sched.compute(&mut graph, &[(x_in, mel)])?;
        Ok(())
    }

    /// Decoder layer `l` for the new tokens `x`, writing their keys and values into
    /// the cache where `write` says: causal self-attention over the cache,
    /// cross-attention over the encoder output and the MLP, each pre-norm with its
    /// residual. Returns the layer's output and, for a pass over one slot
    /// ([`CacheWrite::At`]), its cross-attention scores.
    ///
    /// Upstream: `openai/whisper@v20250625` whisper/model.py L160-L171
    /// (`ResidualAttentionBlock.forward` with cross-attention) and L92-L112
    /// (`MultiHeadAttention.forward`).
    fn decoder_layer<'a>(
        &'a self,
        ctx: &'a Context,
        graph: &mut crate::ggml::Graph<'a>,
        x: Tensor<'a>,
        l: usize,
        write: &CacheWrite<'a>,
    ) -> Result<(Tensor<'a>, Option<Tensor<'a>>)> {
        let hp = self.hp;
        let p = format!("decoder.layer_{l}");
        let (d, h) = (hp.n_text_state, hp.n_text_head);
        let cap = hp.n_text_ctx;
        let n_new = x.ne()[1];
        let split = |t: Tensor<'a>| self.heads(ctx, t, 0, 1, d, h);
        let self_kv = |slot: usize| {
            (
                self.c(ctx, slot, &format!("self_k.{l}")),
                self.c(ctx, slot, &format!("self_v.{l}")),
            )
        };
        let self_v_all = || self.cache(&format!("self_v.{l}"));
        let cross_kv = |slot: usize| {
            (
                self.cross_keys(ctx, l, slot, 1),
                self.values_t(
                    ctx,
                    self.cache(&format!("cross_v.{l}")),
                    hp.n_audio_ctx,
                    slot,
                    1,
                ),
            )
        };
        // Self-attention with the cache: store the new keys/values first (the writes
        // enter the graph before the reads, and ggml runs nodes in order), then attend
        // over the cache.
        let columns = match write {
            CacheWrite::At { .. } => 1,
            CacheWrite::Steps { steps, .. } => steps.len(),
        };
        let n = self.layer_norm(ctx, x, &format!("{p}.self_attention.layer_norm"));
        let qkv = self.step_linear(ctx, n, &format!("{p}.self_attention.linear_0"), columns)?;
        let att = match write {
            CacheWrite::At { slot, n_past } => {
                let (n_past, (cache_k, cache_v)) = (*n_past, self_kv(*slot));
                let k_new = ctx.view_2d_rows(qkv, d as i64, n_new, d);
                graph.expand(ctx.cpy(
                    k_new,
                    ctx.view_2d_rows(cache_k, d as i64, n_new, n_past * d),
                ));
                let v_new = ctx.transpose(ctx.view_2d_rows(qkv, d as i64, n_new, 2 * d));
                let v_slot = ctx.view_3d(cache_v, [n_new, d as i64, 1], cap, cap * d, n_past);
                graph.expand(ctx.cpy(v_new, v_slot));
                let n_kv = n_past + n_new as usize;
                self.attention(
                    ctx,
                    self.heads(ctx, qkv, 0, 3, d, h),
                    split(ctx.view_2d_rows(cache_k, d as i64, n_kv as i64, 0)),
                    self.values_t(ctx, self_v_all(), n_kv, *slot, 1),
                    Mask::Causal(n_past as i32),
                )?
                .0
            }
            // Every slot's column at once: keys written in one op, attention as one
            // product batched over the slots (the heads and slots as its batch axes).
            CacheWrite::Steps {
                steps,
                every: Some(every),
            } => {
                let (k_all, v_all) = (self.cache(&format!("self_k.{l}")), self_v_all());
                let slots = steps.len();
                let k_rows = ctx.reshape(k_all, &[d as i64, (cap * slots) as i64]);
                let k_new = ctx.view_2d_rows(qkv, d as i64, slots as i64, d);
                graph.expand(ctx.set_rows(k_rows, k_new, every.rows));
                for (i, st) in steps.iter().enumerate() {
                    let v_new = ctx.view_3d(qkv, [1, d as i64, 1], 1, d, i * 3 * d + 2 * d);
                    let v_flat = ctx.reshape(self_kv(st.slot).1, &[1, (cap * d) as i64]);
                    graph.expand(ctx.set_rows(v_flat, v_new, st.v_rows));
                }
                let (dh, n_kv) = (d / h, every.n_kv);
                let q = ctx.view_4d(
                    qkv,
                    [dh as i64, h as i64, 1, slots as i64],
                    [dh, 3 * d, 3 * d],
                    0,
                );
                let k = ctx.view_4d(
                    k_all,
                    [dh as i64, h as i64, n_kv as i64, slots as i64],
                    [dh, d, d * cap],
                    0,
                );
                let vt = self.values_t(ctx, v_all, n_kv, 0, slots);
                self.attention(ctx, q, k, vt, Mask::Input(every.masks))?.0
            }
            // Each column is one token of its own slot, with the ops of a lone step.
            CacheWrite::Steps { steps, every: None } => self.per_column(ctx, steps, |i, st| {
                let (Some(row), Some(mask)) = (st.row, st.mask) else {
                    return Err(crate::error::EngineError::Usage(
                        "a column of a step over every slot has no row or mask of its own".into(),
                    ));
                };
                let (cache_k, cache_v) = self_kv(st.slot);
                let col = ctx.view_2d_rows(qkv, 3 * d as i64, 1, i * 3 * d);
                graph.expand(ctx.set_rows(cache_k, ctx.view_2d_rows(col, d as i64, 1, d), row));
                // The value cache is transposed (positions adjacent): the new value is
                // one column, written element by element as rows of one value.
                let v_new = ctx.view_3d(col, [1, d as i64, 1], 1, d, 2 * d);
                let v_flat = ctx.reshape(cache_v, &[1, (cap * d) as i64]);
                graph.expand(ctx.set_rows(v_flat, v_new, st.v_rows));
                Ok(self
                    .attention(
                        ctx,
                        self.heads(ctx, col, 0, 3, d, h),
                        split(ctx.view_2d_rows(cache_k, d as i64, st.n_kv as i64, 0)),
                        self.values_t(ctx, self_v_all(), st.n_kv, st.slot, 1),
                        Mask::Input(mask),
                    )?
                    .0)
            })?,
        };
        let x = ctx.add(
            x,
            self.step_linear(ctx, att, &format!("{p}.self_attention.linear_1"), columns)?,
        );
        // Cross-attention over the encoder output (keys/values cached by `encode`).
        let n = self.layer_norm(ctx, x, &format!("{p}.attention.layer_norm"));
        let q = self.step_linear(ctx, n, &format!("{p}.attention.linear_0"), columns)?;
        let (att, cross_scores) = match write {
            CacheWrite::At { slot, .. } => {
                let (k, v) = cross_kv(*slot);
                let (att, scores) = self.attention(ctx, split(q), k, v, Mask::None)?;
                (att, Some(scores))
            }
            CacheWrite::Steps {
                steps,
                every: Some(_),
            } => {
                let slots = steps.len() as i64;
                let dh = d / h;
                let q = ctx.view_4d(q, [dh as i64, h as i64, 1, slots], [dh, d, d], 0);
                let k = self.cross_keys(ctx, l, 0, steps.len());
                let cross_v = self.cache(&format!("cross_v.{l}"));
                let vt = self.values_t(ctx, cross_v, hp.n_audio_ctx, 0, steps.len());
                (self.attention(ctx, q, k, vt, Mask::None)?.0, None)
            }
            CacheWrite::Steps { steps, every: None } => {
                let att = self.per_column(ctx, steps, |i, st| {
                    let (k, v) = cross_kv(st.slot);
                    let col = ctx.view_2d_rows(q, d as i64, 1, i * d);
                    Ok(self.attention(ctx, split(col), k, v, Mask::None)?.0)
                })?;
                (att, None)
            }
        };
        let x = ctx.add(
            x,
            self.step_linear(ctx, att, &format!("{p}.attention.linear_2"), columns)?,
        );
        Ok((self.ffn(ctx, x, &p, columns)?, cross_scores))
    }

    /// `one(i, step)` for each column `i` of a step over `steps`, joined as columns
    /// (the lone column itself when there is one).
    fn per_column<'a>(
        &'a self,
        ctx: &'a Context,
        steps: &[StepSlot<'a>],
        mut one: impl FnMut(usize, &StepSlot<'a>) -> Result<Tensor<'a>>,
    ) -> Result<Tensor<'a>> {
        let mut joined: Option<Tensor<'a>> = None;
        for (i, st) in steps.iter().enumerate() {
            let t = one(i, st)?;
            joined = Some(match joined {
                Some(j) => ctx.concat(j, t, 1),
                None => t,
            });
        }
        joined.ok_or_else(|| {
            crate::error::EngineError::Usage("a decoder step needs at least one column".into())
        })
    }

    /// Feeds `tokens` after `n_past` cached positions; returns the logits of the last
    /// `n_logits` positions (n_vocab values each). A graph for these positions only:
    /// the prompt of a window, and language detection.
    ///
    /// Upstream: `openai/whisper@v20250625` whisper/model.py L227-L249
    /// (`TextDecoder.forward`; the logits against the token embedding at L245-L247).
    pub fn decode(
        &self,
        sched: &mut Scheduler,
        slot: usize,
        tokens: &[u32],
        n_past: usize,
        n_logits: usize,
    ) -> Result<Vec<f32>> {
        let hp = self.hp;
        let nodes = self.decoder_nodes();
        let ctx = Context::new(nodes, nodes)?;
        let n = tokens.len() as i64;
        let ids = ctx.new_i32_tensor(&[n], "tokens");
        ids.mark_input();
        let mut graph = ctx.new_graph(nodes);
        let d = hp.n_text_state;
        let pos = ctx.view_2d_rows(
            self.w("decoder.position_encodings.encodings"),
            d as i64,
            n,
            n_past * d,
        );
        let x = ctx.add(ctx.get_rows(self.w(EMBEDDING), ids), pos);
        let k = n_logits.clamp(1, tokens.len());
        let (logits, _) = self.decoder_scores(
            &ctx,
            &mut graph,
            x,
            &CacheWrite::At { slot, n_past },
            k,
            &[],
        )?;
        let ids_i32: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        sched.compute_with(&mut graph, &[], &[(ids, &ids_i32)])?;
        Ok(logits.read_f32()?)
    }

    /// Nodes (and tensors) of a decoder graph: about 70 per layer. A context sized for
    /// the encoder's graph would be allocated and paged in on every token.
    fn decoder_nodes(&self) -> usize {
        128 * self.hp.n_text_layer + 128
    }

    /// The decoder's layers, final norm and logits over `x` (the new tokens'
    /// embeddings plus positions): the logits of the last `n_logits` positions, and
    /// the cross-attention scores of the `layers` listed (marked as outputs, in that
    /// order).
    fn decoder_scores<'a>(
        &'a self,
        ctx: &'a Context,
        graph: &mut crate::ggml::Graph<'a>,
        x: Tensor<'a>,
        write: &CacheWrite<'a>,
        n_logits: usize,
        layers: &[usize],
    ) -> Result<(Tensor<'a>, Vec<Tensor<'a>>)> {
        let (last, scores) = self.decoder_states(ctx, graph, x, write, n_logits, layers)?;
        // The logits are a read of the whole embedding (40 MB in f16 for tiny) per token.
        let logits = self.layers.mul_mat(ctx, self.w(EMBEDDING), last)?;
        logits.mark_output();
        graph.expand(logits);
        Ok((logits, scores))
    }

    /// The decoder's layers and final norm over `x`: the states of the last `n_logits`
    /// positions, and the cross-attention scores of `layers` (see
    /// [`WhisperNet::decoder_scores`]).
    fn decoder_states<'a>(
        &'a self,
        ctx: &'a Context,
        graph: &mut crate::ggml::Graph<'a>,
        mut x: Tensor<'a>,
        write: &CacheWrite<'a>,
        n_logits: usize,
        layers: &[usize],
    ) -> Result<(Tensor<'a>, Vec<Tensor<'a>>)> {
        let d = self.hp.n_text_state;
        let mut scores = Vec::new();
        for l in 0..self.hp.n_text_layer {
            let (y, cross) = self.decoder_layer(ctx, graph, x, l, write)?;
            if let Some(cross) = cross.filter(|_| layers.contains(&l)) {
                cross.mark_output();
                scores.push((l, cross));
            }
            x = y;
        }
        let x = self.layer_norm(ctx, x, "decoder.layer_norm");
        let n = x.ne()[1] as usize;
        let last = ctx.view_2d_rows(x, d as i64, n_logits as i64, (n - n_logits) * d);
        let scores = layers
            .iter()
            .filter_map(|l| scores.iter().find(|(k, _)| k == l).map(|(_, t)| *t))
            .collect();
        Ok((last, scores))
    }

    /// The forced-alignment pass of word timestamps: the decoder reads `tokens` (the
    /// window's start sequence, `<|notimestamps|>`, its text tokens and end-of-text)
    /// from position 0 against the current window's encoder output, and returns the
    /// logits of every position ([n_vocab] each) and, for each of `layers`, its
    /// cross-attention scores `q.k / sqrt(head_dim)` as [heads][positions][n_audio_ctx].
    /// It overwrites the self-attention cache: run it once a window is decoded.
    ///
    /// Upstream: `openai/whisper@v20250625` whisper/timing.py L163-L205 (`find_alignment`:
    /// one forward pass with hooks on the cross-attention) and whisper/model.py
    /// L114-L139 (the scores `qk` it reads).
    pub fn align_pass(
        &self,
        sched: &mut Scheduler,
        slot: usize,
        tokens: &[u32],
        layers: &[usize],
    ) -> Result<(Vec<f32>, Vec<Vec<f32>>)> {
        let hp = self.hp;
        let nodes = self.decoder_nodes();
        let ctx = Context::new(nodes, nodes)?;
        let n = tokens.len() as i64;
        let ids = ctx.new_i32_tensor(&[n], "tokens");
        ids.mark_input();
        let mut graph = ctx.new_graph(nodes);
        let d = hp.n_text_state;
        let pos = ctx.view_2d_rows(
            self.w("decoder.position_encodings.encodings"),
            d as i64,
            n,
            0,
        );
        let x = ctx.add(ctx.get_rows(self.w(EMBEDDING), ids), pos);
        let (logits, scores) = self.decoder_scores(
            &ctx,
            &mut graph,
            x,
            &CacheWrite::At { slot, n_past: 0 },
            tokens.len(),
            layers,
        )?;
        for t in &scores {
            graph.expand(*t);
        }
        let ids_i32: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        sched.compute_with(&mut graph, &[], &[(ids, &ids_i32)])?;
        let scale = 1.0 / ((d / hp.n_text_head) as f32).sqrt();
        let scores = scores
            .iter()
            .map(|t| Ok(t.read_f32()?.into_iter().map(|v| v * scale).collect()))
            .collect::<Result<Vec<Vec<f32>>>>()?;
        Ok((logits.read_f32()?, scores))
    }

    /// A context with room for the graph of a decoder step over `columns` slots
    /// ([`WhisperNet::build_step`]).
    pub fn step_context(&self, columns: usize) -> Result<Context> {
        let nodes = self.step_nodes(columns);
        Ok(Context::new(nodes, nodes)?)
    }

    /// Nodes of a step graph over `columns` slots: each column adds its attention
    /// and its token choice.
    fn step_nodes(&self, columns: usize) -> usize {
        self.decoder_nodes() + 64 * columns.saturating_sub(1) * (self.hp.n_text_layer + 1)
    }

    /// The decoder step for one token in each of `slots` (its cache slot and the
    /// cache positions its attention reads), as a graph of fixed shape built once and
    /// computed for every token of every window: the tokens, their positions and the
    /// cache rows they write are inputs, and each slot's self-attention reads the
    /// first `n_kv` positions of its cache through a mask (0 up to the token's
    /// position, -inf after), so that no node changes from token to token
    /// ([`crate::ggml::Scheduler::prepare`]). The slots' tokens go through the linear
    /// layers and the logits as the columns of one batch (the weights are read once
    /// for all); attention and the token choice run per column with the ops of a
    /// lone step, so that a column gets the bits a step of its slot alone gets where
    /// the products sum each column alike (the CPU kernels; see the tests).
    ///
    /// Upstream: `openai/whisper@v20250625` whisper/model.py L227-L249
    /// (`TextDecoder.forward` for one token with the cache).
    ///
    /// Beside the logits the graph summarises each column's text tokens, those below
    /// `head` (end-of-text) with `head_ban` masked (the ones suppressed at every
    /// step): their largest logit (on a tie, the backend's argmax picks), its value
    /// and its softmax probability, after which come the logits from `head` on. At
    /// temperature 0 that summary is all the host reads back ([`DecoderStep::row`]).
    pub fn build_step<'a>(
        &'a self,
        ctx: &'a Context,
        slots: &[(usize, usize)],
        head: usize,
        head_ban: &[u32],
    ) -> Result<(crate::ggml::Graph<'a>, DecoderStep<'a>)> {
        let hp = self.hp;
        let d = hp.n_text_state;
        if let Some(&(slot, _)) = slots.iter().find(|(s, _)| *s >= self.slots()) {
            return Err(crate::error::EngineError::Usage(format!(
                "cache slot {slot} of a network with {} slots",
                self.slots()
            )));
        }
        let columns = slots.len() as i64;
        // Every slot in order, all attending alike: one batch where the layers say so.
        let every_n_kv = (self.layers.batches_attention()
            && slots.len() > 1
            && slots.len() == self.slots()
            && slots
                .iter()
                .enumerate()
                .all(|(i, &(s, n))| s == i && n == slots[0].1))
        .then(|| slots[0].1.clamp(1, hp.n_text_ctx));
        let own = every_n_kv.is_none();
        let n_vocab = hp.n_vocab;
        let head = head.clamp(1, n_vocab);
        let head_ban: Vec<i32> = head_ban
            .iter()
            .filter(|&&t| (t as usize) < head)
            .map(|&t| t as i32)
            .collect();
        let stages = self
            .weights
            .tensor(&format!("{EMBEDDING}.q8"))
            .zip(self.weights.tensor(&format!("{EMBEDDING}.q8_bounds")));
        // A step over every slot chooses the tokens of all its columns at once (the
        // two-stage logits are the CPU kernels', which never step every slot).
        let at_once = every_n_kv.is_some() && stages.is_none();
        let ban_copies = if at_once { slots.len() } else { 1 };
        // The ids as the ban input holds them: for every column at once, each copy
        // moved to its column of the flattened logits.
        let ban_ids: Vec<i32> = (0..ban_copies)
            .flat_map(|c| head_ban.iter().map(move |&t| t + (c * n_vocab) as i32))
            .collect();
        let n_ban = ban_ids.len() as i64;
        // The text tokens in `blocks` blocks of `block` (the last padded with the floor),
        // each reduced on its own (by its own thread block on a GPU: one row of 50,000
        // would be one) and with one floor more, so that the argmax names a row even
        // where every logit of a block is -inf or NaN (ggml-cuda's would give -1).
        let (block, blocks) = summary_blocks(head);
        let pad = block * blocks - head;
        let floor_cols = if at_once { slots.len() } else { 1 };
        // The step's inputs, as views of one i32 and one f32 input: a step writes each of
        // the two in one copy.
        let n_kvs: Vec<i64> = slots
            .iter()
            .map(|&(_, n)| n.clamp(1, hp.n_text_ctx) as i64)
            .collect();
        let (mut ints, mut floats) = (InputShapes::default(), InputShapes::default());
        let (tokens, positions) = (ints.add(&[columns]), ints.add(&[columns]));
        let every = every_n_kv.map(|n_kv| {
            let rows = ints.add(&[columns]);
            (rows, floats.add(&[n_kv as i64, 1, 1, columns]), n_kv)
        });
        let own_inputs: Vec<_> = n_kvs
            .iter()
            .map(|&n_kv| {
                let row_mask = own.then(|| (ints.add(&[1]), floats.add(&[n_kv, 1])));
                (row_mask, ints.add(&[d as i64]))
            })
            .collect();
        let ban = (n_ban > 0).then(|| (ints.add(&[n_ban]), floats.add(&[1, n_ban])));
        let floor = floats.add(&[1, blocks as i64, floor_cols as i64]);
        let pad_floor = (pad > 0).then(|| floats.add(&[pad as i64, floor_cols as i64]));
        let ints = ctx.make_inputs(DType::I32, &ints, "step_ints");
        let floats = ctx.make_inputs(DType::F32, &floats, "step_floats");
        let (tokens, positions) = (ints.get(tokens), ints.get(positions));
        let every = every.map(|(rows, masks, n_kv)| EverySlot {
            rows: ints.get(rows),
            masks: floats.get(masks),
            n_kv,
        });
        let steps: Vec<StepSlot<'a>> = slots
            .iter()
            .zip(&n_kvs)
            .zip(own_inputs)
            .map(|((&(slot, _), &n_kv), (row_mask, v_rows))| StepSlot {
                slot,
                row: row_mask.map(|(row, _)| ints.get(row)),
                v_rows: ints.get(v_rows),
                mask: row_mask.map(|(_, mask)| floats.get(mask)),
                n_kv: n_kv as usize,
            })
            .collect();
        let ban = ban.map(|(ids, value)| (ints.get(ids), floats.get(value)));
        let floor = floats.get(floor);
        let pad_floor = pad_floor.map(|p| floats.get(p));
        let mut graph = ctx.new_graph(self.step_nodes(slots.len()));
        let pos = ctx.get_rows(self.w("decoder.position_encodings.encodings"), positions);
        let x = ctx.add(ctx.get_rows(self.w(EMBEDDING), tokens), pos);
        let write = CacheWrite::Steps {
            steps: steps.clone(),
            every,
        };
        let (last, _) = self.decoder_states(ctx, &mut graph, x, &write, slots.len(), &[])?;
        let summarise = |logits: Tensor<'a>, graph: &mut crate::ggml::Graph<'a>| {
            // The logits as [n_vocab, columns]; the text tokens chosen among per column.
            let cols = logits.ne()[1];
            let flat = ctx.reshape(logits, &[1, n_vocab as i64 * cols]);
            let banned = match ban {
                Some((ids, value)) => ctx.set_rows(flat, value, ids),
                None => flat,
            };
            let banned = ctx.reshape(banned, &[n_vocab as i64, cols]);
            let text = ctx.view_2d_rows(banned, head as i64, cols, 0);
            let text = match pad_floor {
                Some(p) => ctx.concat(text, p, 0),
                None if cols > 1 => ctx.cont(text),
                None => text,
            };
            let (block, rows) = (block as i64, blocks as i64 * cols);
            let text = ctx.concat(ctx.reshape(text, &[block, blocks as i64, cols]), floor, 0);
            let text = ctx.reshape(text, &[block + 1, rows]);
            let best = ctx.argmax(text);
            let per_block = |t: Tensor<'a>| {
                ctx.get_rows(
                    ctx.reshape(t, &[1, block + 1, rows]),
                    ctx.reshape(best, &[1, rows]),
                )
            };
            let top = per_block(text);
            let p_top = per_block(ctx.soft_max(text));
            let tail = ctx.view_2d_rows(logits, (n_vocab - head) as i64, cols, head);
            let summary = ctx.concat(
                ctx.concat(tail, ctx.reshape(top, &[blocks as i64, cols]), 0),
                ctx.reshape(p_top, &[blocks as i64, cols]),
                0,
            );
            for t in [logits, best, summary] {
                t.mark_output();
                graph.expand(t);
            }
            (best, summary)
        };
        let mut columns = Vec::with_capacity(steps.len());
        if at_once {
            let logits = self.layers.mul_mat(ctx, self.w(EMBEDDING), last)?;
            let (best, summary) = summarise(logits, &mut graph);
            for (at, st) in steps.into_iter().enumerate() {
                columns.push(StepColumn {
                    inputs: st,
                    whole: None,
                    logits,
                    best,
                    summary,
                    at,
                });
            }
        } else {
            let scored = self.layers.step_logits(
                ctx,
                self.w(EMBEDDING),
                stages,
                last,
                head,
                ban.map(|(ids, _)| ids),
            )?;
            for (st, (logits, whole)) in steps.into_iter().zip(scored) {
                let (best, summary) = summarise(logits, &mut graph);
                columns.push(StepColumn {
                    inputs: st,
                    whole,
                    logits,
                    best,
                    summary,
                    at: 0,
                });
            }
        }
        let step = DecoderStep {
            tokens,
            positions,
            ban: ban.map(|(ids, value)| {
                let minus_inf = vec![f32::NEG_INFINITY; ban_ids.len()];
                (ids, value, ban_ids, minus_inf)
            }),
            floors: std::iter::once((floor, blocks * floor_cols))
                .chain(pad_floor.map(|p| (p, pad * floor_cols)))
                .map(|(t, n)| (t, vec![HEAD_FLOOR; n]))
                .collect(),
            block,
            blocks,
            columns,
            every,
            at_once,
            head,
            n_vocab,
            width: d,
            capacity: hp.n_text_ctx,
        };
        Ok((graph, step))
    }
}

/// Where a decoder pass writes its new keys and values, and which cache positions its
/// self-attention reads.
enum CacheWrite<'a> {
    /// At positions `n_past..` of `slot` (copies into views of the cache: a graph for
    /// those positions only), attending causally over the positions up to the new ones.
    At { slot: usize, n_past: usize },
    /// One token per column, each into its own slot ([`StepSlot`]); with `every`, the
    /// columns are every slot in order, run as one batch.
    Steps {
        steps: Vec<StepSlot<'a>>,
        every: Option<EverySlot<'a>>,
    },
}

/// One column of a decoder step: the token at the position the input `row` holds
/// (the key's cache row in `slot`; `v_rows` holds the value's element indices in the
/// slot's transposed value cache), attending the first `n_kv` positions under the
/// input `mask`. A step over every slot ([`EverySlot`]) has its rows and masks there.
#[derive(Clone)]
struct StepSlot<'a> {
    slot: usize,
    row: Option<Tensor<'a>>,
    v_rows: Tensor<'a>,
    mask: Option<Tensor<'a>>,
    n_kv: usize,
}

/// The inputs of a step over every slot at once: the keys' cache rows across the
/// slots (i32 [slots]: slot * capacity + position) and the masks (f32 [n_kv, 1, 1,
/// slots]), every slot attending its first `n_kv` positions.
#[derive(Clone, Copy)]
struct EverySlot<'a> {
    rows: Tensor<'a>,
    masks: Tensor<'a>,
    n_kv: usize,
}

/// What the host reads after a decoder step ([`DecoderStep::run`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// The summary ([`DecoderStep::row`]): greedy decoding.
    Summary,
    /// Every logit ([`DecoderStep::logits`]): sampling at a temperature.
    Logits,
}

/// The value the step graph puts after the text tokens' logits: below any logit a
/// model gives, and finite, so that every backend's argmax lands on a row.
const HEAD_FLOOR: f32 = -f32::MAX / 2.0;

/// The inputs and outputs of a fixed-shape decoder step ([`WhisperNet::build_step`]).
pub struct DecoderStep<'a> {
    /// The columns' tokens and positions (i32 [columns]).
    tokens: Tensor<'a>,
    positions: Tensor<'a>,
    /// The head's banned ids, the -inf row they take, the ids' values and the row's.
    ban: Option<(Tensor<'a>, Tensor<'a>, Vec<i32>, Vec<f32>)>,
    /// The inputs that hold [`HEAD_FLOOR`]: one after each block of the head, and
    /// the padding of its last block (for each column when the step chooses every
    /// column's token at once, else for one).
    floors: Vec<(Tensor<'a>, Vec<f32>)>,
    /// The head's blocks ([`summary_blocks`]).
    block: usize,
    blocks: usize,
    columns: Vec<StepColumn<'a>>,
    /// The rows and masks of a step over every slot at once.
    every: Option<EverySlot<'a>>,
    /// The columns share their logits, argmax and summary tensors (each its column).
    at_once: bool,
    head: usize,
    n_vocab: usize,
    width: usize,
    capacity: usize,
}

/// One column's inputs and outputs in a [`DecoderStep`].
struct StepColumn<'a> {
    inputs: StepSlot<'a>,
    /// The two-stage logits' switch ([`Layers::step_logits`]): 1 when every logit is
    /// read, 0 when the summary is.
    whole: Option<Tensor<'a>>,
    logits: Tensor<'a>,
    /// The head's largest logit (i32 [1]; on a tie, whichever the backend's argmax picks).
    best: Tensor<'a>,
    /// The logits from `head` on, then the head's largest logit and its probability.
    summary: Tensor<'a>,
    /// The column of `logits`, `best` and `summary` that is this one's (0 where each
    /// column has tensors of its own).
    at: usize,
}

/// One column's token in a step ([`DecoderStep::run_columns`]): the token, the cache
/// position it goes to (after the prompt and the tokens before it) and what is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepInput {
    pub token: u32,
    pub n_past: usize,
    pub read: Read,
}

impl DecoderStep<'_> {
    /// Positions the step can reach in column `i`: a token fed at `n_past` needs
    /// `n_past < n_kv`.
    pub fn positions(&self, i: usize) -> usize {
        self.columns.get(i).map_or(0, |c| c.inputs.n_kv)
    }

    /// Columns of the step (the slots it was built for, in that order).
    pub fn columns(&self) -> usize {
        self.columns.len()
    }

    /// Feeds `token` at cache position `n_past` of a one-column step
    /// ([`Self::run_columns`]).
    pub fn run(
        &self,
        graph: &mut Prepared<'_, '_, '_>,
        token: u32,
        n_past: usize,
        read: Read,
    ) -> Result<()> {
        self.run_columns(
            graph,
            &[StepInput {
                token,
                n_past,
                read,
            }],
        )
    }

    /// Feeds each column its input through the prepared step graph; each column's
    /// scores are then read as its `read` says: [`Self::logits`] after
    /// [`Read::Logits`], [`Self::row`] after either.
    pub fn run_columns(
        &self,
        graph: &mut Prepared<'_, '_, '_>,
        inputs: &[StepInput],
    ) -> Result<()> {
        if inputs.len() != self.columns.len() {
            return Err(crate::error::EngineError::Usage(format!(
                "a decoder step of {} columns was given {} tokens",
                self.columns.len(),
                inputs.len()
            )));
        }
        for (c, input) in self.columns.iter().zip(inputs) {
            if input.n_past >= c.inputs.n_kv {
                return Err(crate::error::EngineError::Usage(format!(
                    "decoder position {} is past the step's {} cached positions",
                    input.n_past, c.inputs.n_kv
                )));
            }
        }
        let masks: Vec<Vec<f32>> = self
            .columns
            .iter()
            .zip(inputs)
            .map(|(c, input)| {
                (0..c.inputs.n_kv)
                    .map(|j| {
                        if j <= input.n_past {
                            0.0
                        } else {
                            f32::NEG_INFINITY
                        }
                    })
                    .collect()
            })
            .collect();
        let v_rows: Vec<Vec<i32>> = inputs
            .iter()
            .map(|input| {
                (0..self.width)
                    .map(|j| (j * self.capacity + input.n_past) as i32)
                    .collect()
            })
            .collect();
        let rows: Vec<[i32; 1]> = inputs.iter().map(|i| [i.n_past as i32]).collect();
        let wholes: Vec<[i32; 1]> = inputs
            .iter()
            .map(|i| [i32::from(i.read == Read::Logits)])
            .collect();
        let tokens: Vec<i32> = inputs.iter().map(|i| i.token as i32).collect();
        let positions: Vec<i32> = inputs.iter().map(|i| i.n_past as i32).collect();
        // A step over every slot: the keys' rows across the slots' caches, and the
        // masks side by side.
        let every_rows: Vec<i32> = self
            .columns
            .iter()
            .zip(inputs)
            .map(|(c, i)| (c.inputs.slot * self.capacity + i.n_past) as i32)
            .collect();
        let every_masks: Vec<f32> = masks.concat();
        let mut floats: Vec<_> = self.floors.iter().map(|(t, v)| (*t, &v[..])).collect();
        let mut ints = vec![(self.tokens, &tokens[..]), (self.positions, &positions[..])];
        if let Some(every) = &self.every {
            floats.push((every.masks, &every_masks[..]));
            ints.push((every.rows, &every_rows[..]));
        }
        for (i, c) in self.columns.iter().enumerate() {
            if let Some(mask) = c.inputs.mask {
                floats.push((mask, &masks[i][..]));
            }
            if let Some(row) = c.inputs.row {
                ints.push((row, &rows[i][..]));
            }
            ints.push((c.inputs.v_rows, &v_rows[i][..]));
            if let Some(switch) = c.whole {
                ints.push((switch, &wholes[i][..]));
            }
        }
        if let Some((ids, value, banned, minus_inf)) = &self.ban {
            floats.push((*value, &minus_inf[..]));
            ints.push((*ids, &banned[..]));
        }
        graph.compute(&floats, &ints)?;
        Ok(())
    }

    /// Every logit of column `i` in the last step (the text tokens of the head ban
    /// masked); each one the product's after [`Read::Logits`] (after [`Read::Summary`],
    /// text logits far below the largest may be the first stage's, see
    /// [`Layers::step_logits`]).
    pub fn logits(&self, i: usize) -> Result<Vec<f32>> {
        let c = self.column(i)?;
        let all = c.logits.read_f32()?;
        Ok(all
            .chunks(self.n_vocab)
            .nth(c.at)
            .map(<[f32]>::to_vec)
            .unwrap_or_default())
    }

    fn column(&self, i: usize) -> Result<&StepColumn<'_>> {
        self.columns.get(i).ok_or_else(|| {
            crate::error::EngineError::Usage(format!(
                "column {i} of a decoder step of {} columns",
                self.columns.len()
            ))
        })
    }

    /// Column `i`'s scores of the last step as the host needs them at temperature 0:
    /// the text tokens' summary and the logits from end-of-text on (a few KB instead
    /// of the whole row).
    pub fn row(&self, i: usize) -> Result<Row> {
        let c = self.column(i)?;
        self.row_of(&c.summary.read_f32()?, &c.best.read_i32()?, c.at)
    }

    /// Column `i`'s row of the last step, as `read` says: every logit
    /// ([`Self::logits`]) or the summary ([`Self::row`]).
    pub fn read(&self, i: usize, read: Read) -> Result<Row> {
        match read {
            Read::Logits => Ok(Row::full(self.logits(i)?)),
            Read::Summary => self.row(i),
        }
    }

    /// Every column's row of the last step, as `reads` says for each ([`Self::read`]);
    /// tensors the columns share are read once.
    pub fn rows(&self, reads: &[Read]) -> Result<Vec<Row>> {
        if !self.at_once {
            return (0..self.columns.len())
                .zip(reads)
                .map(|(i, &read)| self.read(i, read))
                .collect();
        }
        let Some(first) = self.columns.first() else {
            return Ok(Vec::new());
        };
        let (summary, best) = (first.summary.read_f32()?, first.best.read_i32()?);
        let logits = if reads.contains(&Read::Logits) {
            first.logits.read_f32()?
        } else {
            Vec::new()
        };
        self.columns
            .iter()
            .zip(reads)
            .map(|(c, read)| match read {
                Read::Logits => Ok(Row::full(
                    logits
                        .chunks(self.n_vocab)
                        .nth(c.at)
                        .map(<[f32]>::to_vec)
                        .unwrap_or_default(),
                )),
                Read::Summary => self.row_of(&summary, &best, c.at),
            })
            .collect()
    }

    /// Column `at`'s row from a read of the summary and the argmax.
    fn row_of(&self, summary: &[f32], best: &[i32], at: usize) -> Result<Row> {
        let blocks = self.blocks;
        let width = self.n_vocab - self.head + 2 * blocks;
        let mut tail = summary
            .chunks(width)
            .nth(at)
            .map(<[f32]>::to_vec)
            .unwrap_or_default();
        let best = best.get(at * blocks..(at + 1) * blocks);
        let (Some(best), true) = (best, tail.len() == width) else {
            return Err(crate::error::EngineError::Usage(
                "the decoder step's summary is short".into(),
            ));
        };
        let p_top = tail.split_off(width - blocks);
        let top = tail.split_off(width - 2 * blocks);
        let head = join_blocks(best, &top, &p_top, self.block, self.head);
        Ok(Row::summarized(head, self.head, tail))
    }
}

/// The blocks a step summarises the `head` text tokens in, `(length, count)`: about
/// the square root of `head` each, so that a GPU reduces them in parallel and the host
/// joins a few hundred of them.
fn summary_blocks(head: usize) -> (usize, usize) {
    let block = (head as f64).sqrt().ceil().max(1.0) as usize;
    (block, head.div_ceil(block))
}

/// The head's summary from its blocks': each block's argmax `best` (`block` when its
/// floor was chosen), largest logit `top` and that logit's softmax probability in its
/// block `p_top`. The first block with the largest value gives the token (the first
/// largest of the head, as one argmax over it); Σ e^(l - max) adds each block's
/// e^(top - max) / p_top. A head with no finite logit below `head` has max -inf.
fn join_blocks(
    best: &[i32],
    top: &[f32],
    p_top: &[f32],
    block: usize,
    head: usize,
) -> LogitsSummary {
    let valid = |b: usize| {
        let i = usize::try_from(best[b]).ok().filter(|&i| i < block)?;
        let token = b * block + i;
        (token < head && top[b] > HEAD_FLOOR && p_top[b] > 0.0).then_some(token)
    };
    let n = best.len().min(top.len()).min(p_top.len());
    let mut first: Option<(usize, f32)> = None;
    for (b, &t) in top.iter().enumerate().take(n) {
        if let Some(token) = valid(b) {
            if first.is_none_or(|(_, m)| t > m) {
                first = Some((token, t));
            }
        }
    }
    let Some((argmax, max)) = first else {
        return LogitsSummary {
            argmax: 0,
            max: f32::NEG_INFINITY,
            sum_exp: 1.0,
        };
    };
    let sum_exp = (0..n)
        .filter(|&b| valid(b).is_some())
        .map(|b| ((top[b] - max) as f64).exp() / f64::from(p_top[b]))
        .sum();
    LogitsSummary {
        argmax,
        max,
        sum_exp,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::RuntimeOptions;

    /// A one-layer network of random f32 weights with a vocabulary of 300 tokens.
    fn random_net() -> WhisperNet {
        random_net_with(16, DType::F32)
    }

    /// A random network whose decoder is `text_state` wide, its embedding stored as
    /// `embedding`.
    fn random_net_with(text_state: usize, embedding: DType) -> WhisperNet {
        let hp = HParams {
            n_mels: 8,
            n_audio_ctx: 8,
            n_audio_state: 16,
            n_audio_head: 2,
            n_audio_layer: 1,
            n_text_ctx: 16,
            n_text_state: text_state,
            n_text_head: 2,
            n_text_layer: 1,
            n_vocab: 300,
        };
        let mut state = 1u64;
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        let tensors = hp
            .tensor_shapes()
            .into_iter()
            .map(|(name, ne)| {
                let n: i64 = ne.iter().product();
                let values: Vec<f32> = (0..n).map(|_| next()).collect();
                if name == EMBEDDING && embedding == DType::F16 {
                    let data = values
                        .iter()
                        .flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes())
                        .collect();
                    return HostTensor {
                        name,
                        dtype: DType::F16,
                        ne,
                        data,
                    };
                }
                let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                HostTensor {
                    name,
                    dtype: DType::F32,
                    ne,
                    data,
                }
            })
            .collect();
        let runtime = Runtime::new(&RuntimeOptions::default()).unwrap();
        WhisperNet::new(hp, tensors, runtime, Path::new("random.gguf")).unwrap()
    }

    /// Encodes a fixed mel window of the random network's size, for the decoder to
    /// attend to.
    fn encode_a_window(net: &WhisperNet) {
        let mut sched = net.scheduler().unwrap();
        let mel: Vec<f32> = (0..8 * 16)
            .map(|i| (i * 37 % 23) as f32 / 23.0 - 0.5)
            .collect();
        net.encode(&mut sched, 0, &mel).unwrap();
    }

    /// What the step graph summarises of the text tokens (the head ban masked, the
    /// floor after them) chooses the token the whole row does, with the same
    /// log-probability; also when every text token is banned.
    #[test]
    fn the_step_summary_chooses_as_the_whole_row() {
        let net = random_net();
        encode_a_window(&net);
        // 16 blocks of 16, the last padded; and 16 whole blocks
        for (head, ban) in [250, 256].into_iter().flat_map(|head| {
            [
                (head, vec![3u32, 17, 120, 260]),
                (head, (0..head as u32).collect()),
            ]
        }) {
            let mut step_sched = net.scheduler().unwrap();
            let ctx = net.step_context(1).unwrap();
            let (mut graph, step) = net.build_step(&ctx, &[(0, 8)], head, &ban).unwrap();
            let mut prepared = step_sched.prepare(&mut graph).unwrap();
            for (pos, token) in [(0usize, 5u32), (1, 270), (2, 42)] {
                step.run(&mut prepared, token, pos, Read::Summary).unwrap();
                let ids = || ban.iter().map(|&t| t as usize);
                let mut whole = Row::full(step.logits(0).unwrap());
                whole.mask(ids());
                let mut part = step.row(0).unwrap();
                part.mask(ids());
                assert!(part.logits().is_none());
                for (a, b) in [(0, 300), (0, head), (head, 300)] {
                    assert_eq!(whole.max_in(a, b), part.max_in(a, b), "{a}..{b}");
                }
                let (wb, wl) = whole.argmax_logprob();
                let (pb, pl) = part.argmax_logprob();
                assert_eq!(wb, pb, "token at position {pos}");
                assert!((wl - pl).abs() < 1e-5, "{wl} against {pl}");
                if ban.len() == head {
                    assert!(wb >= head, "a banned text token {wb} was chosen");
                }
            }
        }
    }

    /// A read of the summary or of the blocks' argmax too short for the column is an
    /// error, not a panic and not a row made of what was there.
    #[test]
    fn a_short_summary_is_an_error() {
        let net = random_net();
        let ctx = net.step_context(1).unwrap();
        let (_graph, step) = net.build_step(&ctx, &[(0, 8)], 250, &[]).unwrap();
        let summary = vec![0.0; 300 - 250 + 2 * step.blocks];
        let best = vec![0; step.blocks];
        assert!(step.row_of(&summary, &best, 0).is_ok());
        for (summary, best, at) in [
            (&summary[1..], &best[..], 0),
            (&summary[..], &best[1..], 0),
            (&summary[..], &best[..], 1),
        ] {
            let err = step.row_of(summary, best, at).unwrap_err();
            assert!(err.to_string().contains("summary is short"), "{err}");
        }
    }

    /// Blocks join as one summary of the whole head: a tie goes to the first block,
    /// a block whose floor won or whose top is NaN or past the head adds nothing.
    #[test]
    fn blocks_join_as_one_summary() {
        let (block, head) = (4, 10);
        assert_eq!(summary_blocks(head), (4, 3));
        assert_eq!(summary_blocks(1), (1, 1));
        let s = join_blocks(&[1, 3, 0], &[2.0, 2.0, 1.0], &[0.5, 0.25, 1.0], block, head);
        assert_eq!((s.argmax, s.max), (1, 2.0));
        let expected = 2.0 + 4.0 + (-1.0f64).exp();
        assert!((s.sum_exp - expected).abs() < 1e-12, "{}", s.sum_exp);
        // the floor won the first block, the second's top is NaN, the third's token
        // (8 + 3) is past the head
        let s = join_blocks(
            &[4, 0, 3],
            &[HEAD_FLOOR, f32::NAN, 5.0],
            &[1.0; 3],
            block,
            head,
        );
        assert_eq!(s.max, f32::NEG_INFINITY);
        let s = join_blocks(&[-1, 2, 1], &[9.0, 3.0, 3.5], &[1.0, 0.5, 1.0], block, head);
        assert_eq!((s.argmax, s.max), (9, 3.5));
    }

    /// With an f16 embedding on the CPU kernels the step's logits come in two stages
    /// (`Layers::step_logits`): read as a summary, the step chooses the token the
    /// whole f16 row does, its logits from end-of-text on are that row's bit for bit,
    /// and only text logits far below the top differ (some do: the first stage ran).
    #[test]
    fn two_stage_logits_choose_as_the_f16_row() {
        use crate::cpu_kernels as k;
        if !(k::q8_kernel_available() && k::f16_product_available()) {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run the CPU kernels"
            );
            return;
        }
        let net = random_net_with(32, DType::F16);
        assert!(
            net.weights.tensor(&format!("{EMBEDDING}.q8")).is_some(),
            "no q8_0 copy"
        );
        encode_a_window(&net);
        let head = 250;
        let ban = vec![3u32, 17, 120, 260];
        let ctx = net.step_context(1).unwrap();
        let (mut graph, step) = net.build_step(&ctx, &[(0, 8)], head, &ban).unwrap();
        let mut step_sched = net.scheduler().unwrap();
        let mut prepared = step_sched.prepare(&mut graph).unwrap();
        let mut approximated = 0;
        for (pos, token) in [(0usize, 5u32), (1, 270), (2, 42), (3, 7), (4, 199)] {
            step.run(&mut prepared, token, pos, Read::Logits).unwrap();
            let exact = step.logits(0).unwrap();
            step.run(&mut prepared, token, pos, Read::Summary).unwrap();
            let first = step.logits(0).unwrap();
            assert_eq!(exact[head..], first[head..], "the logits after the text");
            approximated += exact.iter().zip(&first).filter(|(a, b)| a != b).count();
            let ids = || ban.iter().map(|&t| t as usize);
            let mut whole = Row::full(exact);
            whole.mask(ids());
            let mut part = step.row(0).unwrap();
            part.mask(ids());
            let (wb, wl) = whole.argmax_logprob();
            let (pb, pl) = part.argmax_logprob();
            assert_eq!(wb, pb, "token at position {pos}");
            assert_eq!(whole.max_in(0, head), part.max_in(0, head));
            assert!((wl - pl).abs() < 0.05, "log-probability {wl} against {pl}");
        }
        assert!(approximated > 0, "every logit was the f16 product's");
    }
}
