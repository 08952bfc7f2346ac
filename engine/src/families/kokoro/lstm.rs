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
        let g = gates4 as usize;
        let t_len = steps as usize;
        let mut h: Option<Tensor<'a>> = None;
        let mut c: Option<Tensor<'a>> = None;
        let mut outputs = Vec::with_capacity(t_len);
        for t in 0..t_len {
            let xt = ctx.view_3d(proj, [gates4, 1, 2], g, g * t_len, t * g);
            let z = match h {
                Some(h) => ctx.add(ctx.mul_mat(wh, h), xt),
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
