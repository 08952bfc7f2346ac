//! The bidirectional LSTM as a ggml graph (ggml has no LSTM op): one batched product
//! projects the whole sequence for both directions, then each step is a small product
//! with the recurrent weights plus element-wise gates, both directions at once (the
//! backward one runs over the time-reversed sequence). Every op is an ordinary ggml op,
//! so the scheduler can run it on any backend, and each output element is computed by
//! one thread in a fixed order: the result does not depend on the thread count.
//!
//! Gates follow ONNX's order i, o, f, c: `i, o, f = sigmoid(.)`, `c' = tanh(.)`,
//! `c = f c + i c'`, `h = o tanh(c)`, zero initial states (PyTorch's `nn.LSTM`).

use crate::error::Result;
use crate::ggml::{Context, Tensor};

use super::weights::Weights;

/// Graph nodes one step adds (with a margin), for sizing graphs.
pub const NODES_PER_STEP: usize = 20;

/// A loaded bidirectional LSTM, named by its ONNX scope (`<scope>.W`, `.R`, `.B`).
///
/// Upstream: the `nn.LSTM(..., bidirectional=True)` layers of `hexgrad/kokoro@dfb907a02bba`
/// kokoro/modules.py L48, L95, L97 and L142.
pub struct BiLstm {
    scope: String,
}

impl BiLstm {
    /// The LSTM whose tensors are `<scope>.W`, `<scope>.R` and `<scope>.B`.
    pub fn new(scope: &str) -> Self {
        BiLstm {
            scope: scope.to_string(),
        }
    }

    /// Its tensors' names and dims after load, for `input` features and `hidden` units.
    pub fn tensor_shapes(&self, input: i64, hidden: i64) -> Vec<(String, Vec<i64>)> {
        vec![
            (format!("{}.W", self.scope), vec![input, 4 * hidden, 2]),
            (format!("{}.R", self.scope), vec![hidden, 4 * hidden, 2]),
            (format!("{}.B", self.scope), vec![4 * hidden, 1, 2]),
        ]
    }

    /// Runs over `x` [in, T] (one column per step); `reverse` is an i32 tensor
    /// [T] holding T-1 .. 0. Returns [2H, T]: the forward states, then the backward
    /// ones, per step (PyTorch's layout).
    ///
    /// Upstream: `onnx/onnx@v1.22.0` onnx/defs/doc_strings.cc L348-L353 (the LSTM
    /// equations) and onnx/defs/rnn/defs.cc L314-L345 (the `[iofc]` layout of W, R and B).
    pub fn build<'a>(
        &self,
        ctx: &'a Context,
        w: &'a Weights,
        x: Tensor<'a>,
        reverse: Tensor<'a>,
    ) -> Result<Tensor<'a>> {
        let wx = w.get(&format!("{}.W", self.scope))?;
        let wh = w.get(&format!("{}.R", self.scope))?;
        let b = w.get(&format!("{}.B", self.scope))?;
        let [input, gates4, _, _] = wx.ne();
        let hidden = gates4 / 4;
        let steps = x.ne()[1];
        let x = ctx.reshape(ctx.cont(x), &[input, steps, 1]);
        let x_rev = ctx.reshape(
            ctx.get_rows(ctx.reshape(x, &[input, steps]), reverse),
            &[input, steps, 1],
        );
        let both = ctx.concat(x, x_rev, 2); // [in, T, 2]
        let proj = ctx.add(ctx.mul_mat(wx, both), b); // [4H, T, 2]
                                                      // [4H, 2, T]: each step's gates for both directions side by side, so a step's
                                                      // slice is contiguous, laid out as the recurrent product's result.
        let proj = ctx.cont(ctx.permute(proj, [0, 2, 1, 3]));
        let g = gates4 as usize;
        let t_len = steps as usize;
        let mut h: Option<Tensor<'a>> = None;
        let mut c: Option<Tensor<'a>> = None;
        let mut outputs = Vec::with_capacity(t_len);
        for t in 0..t_len {
            let xt = ctx.view_3d(proj, [gates4, 1, 2], g, g, 2 * t * g);
            // The projection first, so that the product and its sum are adjacent graph
            // nodes, which ggml's CUDA backend runs as one kernel (x + y == y + x: the
            // same bits either way); that fused kernel reads the addend with the
            // product's strides, which the contiguous step slice has.
            let z = match h {
                Some(h) => ctx.add(xt, ctx.mul_mat(wh, h)),
                None => ctx.cont(xt),
            };
            let (sg, th) = (ctx.sigmoid(z), ctx.tanh(z));
            let gate = |src: Tensor<'a>, k: usize| {
                ctx.view_3d(src, [hidden, 1, 2], hidden as usize, g, k * hidden as usize)
            };
            let (i, o, f, cand) = (gate(sg, 0), gate(sg, 1), gate(sg, 2), gate(th, 3));
            let ic = ctx.mul(i, cand);
            let c_new = match c {
                Some(c) => ctx.add(ctx.mul(f, c), ic),
                None => ic,
            };
            let h_new = ctx.mul(o, ctx.tanh(c_new));
            outputs.push(h_new);
            h = Some(h_new);
            c = Some(c_new);
        }
        let states = concat_all(ctx, outputs); // [H, T, 2]
        let fwd = ctx.view_3d(
            states,
            [hidden, steps, 1],
            hidden as usize,
            hidden as usize * t_len,
            0,
        );
        let bwd = ctx.view_3d(
            states,
            [hidden, steps, 1],
            hidden as usize,
            hidden as usize * t_len,
            hidden as usize * t_len,
        );
        let fwd = ctx.reshape(ctx.cont(fwd), &[hidden, steps]);
        let bwd = ctx.get_rows(ctx.reshape(ctx.cont(bwd), &[hidden, steps]), reverse);
        Ok(ctx.concat(fwd, bwd, 0))
    }
}

/// Joins per-step states [H, 1, 2] along the step axis as a balanced tree (each value
/// is copied log2(T) times, instead of T times by a running concatenation).
fn concat_all<'a>(ctx: &'a Context, mut parts: Vec<Tensor<'a>>) -> Tensor<'a> {
    while parts.len() > 1 {
        let mut next = Vec::with_capacity(parts.len().div_ceil(2));
        let mut it = parts.into_iter();
        while let Some(a) = it.next() {
            next.push(match it.next() {
                Some(b) => ctx.concat(a, b, 1),
                None => a,
            });
        }
        parts = next;
    }
    parts.pop().expect("an LSTM runs at least one step")
}

#[cfg(test)]
mod tests {
    use super::BiLstm;
    use crate::backend::{Runtime, RuntimeOptions};
    use crate::families::kokoro::weights::Weights;
    use crate::ggml::{Context, DType, HostTensor};
    use crate::model_file::{ModelFile, ModelFormat};

    /// Deterministic pseudo-random values in -scale..scale.
    fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }

    fn tensor(name: &str, ne: &[i64], data: &[f32]) -> HostTensor {
        HostTensor {
            name: name.into(),
            dtype: DType::F32,
            ne: ne.to_vec(),
            data: data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// ONNX's LSTM (gates i, o, f, c) in f64 over `x` [T][I] for direction `d` of
    /// DynamicQuantizeLSTM-layout weights (W [dirs][I][4H], R [dirs][H][4H], B [dirs][8H]).
    #[allow(clippy::too_many_arguments)]
    fn reference(
        x: &[Vec<f32>],
        w: &[f32],
        r: &[f32],
        b: &[f32],
        d: usize,
        input: usize,
        hidden: usize,
        reverse: bool,
    ) -> Vec<Vec<f64>> {
        let g = 4 * hidden;
        let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
        let (mut h, mut c) = (vec![0f64; hidden], vec![0f64; hidden]);
        let mut out = vec![vec![]; x.len()];
        let order: Vec<usize> = if reverse {
            (0..x.len()).rev().collect()
        } else {
            (0..x.len()).collect()
        };
        for t in order {
            let mut z = vec![0f64; g];
            for (k, zk) in z.iter_mut().enumerate() {
                let mut acc = (b[d * 2 * g + k] + b[d * 2 * g + g + k]) as f64;
                for i in 0..input {
                    acc += x[t][i] as f64 * w[(d * input + i) * g + k] as f64;
                }
                for (j, hj) in h.iter().enumerate() {
                    acc += hj * r[(d * hidden + j) * g + k] as f64;
                }
                *zk = acc;
            }
            for j in 0..hidden {
                let (i, o, f, cand) = (
                    sig(z[j]),
                    sig(z[hidden + j]),
                    sig(z[2 * hidden + j]),
                    z[3 * hidden + j].tanh(),
                );
                c[j] = f * c[j] + i * cand;
                h[j] = o * c[j].tanh();
            }
            out[t] = h.clone();
        }
        out
    }

    /// Runs the graph BiLSTM on `x` with `threads` worker threads.
    fn run_graph(file: &ModelFile, x: &[f32], input: i64, steps: i64, threads: usize) -> Vec<f32> {
        let opts = RuntimeOptions {
            threads,
            ..RuntimeOptions::default()
        };
        let runtime = Runtime::new(&opts).unwrap();
        let w = Weights::load(file, &runtime).unwrap();
        let ctx = Context::new(4096, 4096).unwrap();
        let x_in = ctx.new_tensor(DType::F32, &[input, steps], "x");
        let rev = ctx.new_i32_tensor(&[steps], "reverse");
        x_in.mark_input();
        rev.mark_input();
        let y = BiLstm::new("test.lstm").build(&ctx, &w, x_in, rev).unwrap();
        y.mark_output();
        let mut graph = ctx.new_graph(4096);
        graph.expand(y);
        let reverse: Vec<i32> = (0..steps as i32).rev().collect();
        let mut sched = runtime.scheduler(4096).unwrap();
        sched
            .compute_with(&mut graph, &[(x_in, x)], &[(rev, &reverse)])
            .unwrap();
        y.read_f32().unwrap()
    }

    #[test]
    fn the_graph_bilstm_matches_onnx_lstm_at_any_thread_count() {
        let (input, hidden, steps) = (6usize, 4usize, 7usize);
        let g = 4 * hidden;
        let w = values(2 * input * g, 1, 0.5);
        let r = values(2 * hidden * g, 2, 0.5);
        let b = values(2 * 2 * g, 3, 0.3);
        let x = values(steps * input, 4, 1.0);
        let file = ModelFile {
            path: "test.gguf".into(),
            format: ModelFormat::Gguf,
            family: None,
            metadata: vec![],
            tensors: vec![
                tensor("test.lstm.W", &[g as i64, input as i64, 2], &w),
                tensor("test.lstm.R", &[g as i64, hidden as i64, 2], &r),
                tensor("test.lstm.B", &[2 * g as i64, 2], &b),
            ],
        };
        let ours = run_graph(&file, &x, input as i64, steps as i64, 1);
        let rows: Vec<Vec<f32>> = x.chunks(input).map(<[f32]>::to_vec).collect();
        let fwd = reference(&rows, &w, &r, &b, 0, input, hidden, false);
        let bwd = reference(&rows, &w, &r, &b, 1, input, hidden, true);
        for t in 0..steps {
            for j in 0..hidden {
                let col = &ours[t * 2 * hidden..(t + 1) * 2 * hidden];
                assert!((col[j] as f64 - fwd[t][j]).abs() < 1e-5, "fwd t{t} h{j}");
                assert!(
                    (col[hidden + j] as f64 - bwd[t][j]).abs() < 1e-5,
                    "bwd t{t} h{j}"
                );
            }
        }
        assert_eq!(ours, run_graph(&file, &x, input as i64, steps as i64, 2));
    }
}
