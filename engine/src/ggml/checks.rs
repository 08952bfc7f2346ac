//! What ggml asserts about an op's operands, or (in a release build of its CPU backend,
//! where `assert` is compiled out) silently assumes, checked by the wrapper before it
//! hands the tensors to C. A broken rule is a Rust panic naming the op, which the CLI
//! reports and the server's model guard survives, instead of ggml's abort (which ends
//! the process) or a read past a tensor's memory.
//!
//! The rules are those of the CPU backend, the one every graph can fall back to: the
//! types each op computes in, which operands must be contiguous (whole or by rows),
//! the dims that must agree, and the room left in a context and a graph. Row indices
//! are values, known only once the inputs are written: [`row_indices`] makes sure they
//! are inputs, and the scheduler checks them before the compute
//! (`Graph::check_row_indices`).

use std::collections::HashSet;

use llama_cpp_sys_2 as sys;

use super::{DType, Tensor};

/// Panics naming `op` and `why` unless `ok`.
#[track_caller]
pub(super) fn require(ok: bool, op: &str, why: impl FnOnce() -> String) {
    if !ok {
        panic!("ggml {op}: {}", why());
    }
}

/// Panics unless a view of dims `ne` and byte strides `nb` starting `offset` bytes into
/// `a` lies within `a`'s bytes. ggml checks only a contiguous view's size against its
/// source, so a strided view reaching past the end would read (or write) out of bounds
/// when the graph runs.
#[track_caller]
pub(super) fn require_view_inside(
    op: &str,
    a: &Tensor<'_>,
    ne: &[i64],
    nb: &[usize],
    offset: usize,
) {
    let esize = a
        .element_size()
        .unwrap_or_else(|| panic!("ggml {op}: views of block-quantized types are not taken"));
    require(ne.iter().all(|&n| n >= 0), op, || {
        format!("negative dims {ne:?}")
    });
    let end = if ne.contains(&0) {
        Some(offset)
    } else {
        ne.iter()
            .zip(nb)
            .try_fold(offset.checked_add(esize), |end, (&n, &stride)| {
                Some(end?.checked_add((n as usize - 1).checked_mul(stride)?))
            })
            .flatten()
    };
    // ggml's own check, which would abort: the view's elements, counted as if
    // contiguous, from its offset in the tensor that owns the memory.
    // SAFETY: the tensor and the one it views (if any) are live while their context is.
    let (owner_bytes, owner_offset) = unsafe {
        let t = &*a.raw();
        match std::ptr::NonNull::new(t.view_src) {
            Some(owner) => (sys::ggml_nbytes(owner.as_ptr()), t.view_offs),
            None => (sys::ggml_nbytes(a.raw()), 0),
        }
    };
    let dense = ne.iter().try_fold(esize, |n, &d| n.checked_mul(d as usize));
    require(
        ne.contains(&0)
            || dense
                .and_then(|n| n.checked_add(owner_offset)?.checked_add(offset))
                .is_some_and(|e| e <= owner_bytes),
        op,
        || format!("a view of dims {ne:?} at byte {offset} holds more than its source"),
    );
    let size = a.nbytes();
    require(end.is_some_and(|e| e <= size), op, || {
        format!(
            "a view of dims {ne:?}, strides {nb:?} at byte {offset} leaves its {size}-byte source"
        )
    });
}

/// Panics unless `b` broadcasts over `a` (every dim of `a` a multiple of `b`'s; an
/// empty `b` only over an empty `a`).
#[track_caller]
pub(super) fn require_broadcast(op: &str, a: &Tensor<'_>, b: &Tensor<'_>) {
    let (x, y) = (a.ne(), b.ne());
    require(
        if y.contains(&0) {
            x.contains(&0)
        } else {
            x.iter().zip(&y).all(|(&n, &m)| n % m == 0)
        },
        op,
        || format!("dims {y:?} do not broadcast over {x:?}"),
    );
}

/// The dims of a new tensor of a type with blocks of `block_len` values: 1 to 4 of
/// them, none negative, a product that fits `i64` (ggml asserts it) and a first dim of
/// whole blocks.
#[track_caller]
pub(super) fn new_dims(op: &str, block_len: i64, ne: &[i64]) {
    require(!ne.is_empty() && ne.len() <= 4, op, || {
        format!("{} dims, expected 1 to 4", ne.len())
    });
    require(ne.iter().all(|&n| n >= 0), op, || {
        format!("negative dims {ne:?}")
    });
    let count = ne.iter().try_fold(1i64, |n, &d| n.checked_mul(d));
    require(count.is_some(), op, || {
        format!("dims {ne:?} hold more elements than ggml counts")
    });
    require(ne[0] % block_len == 0, op, || {
        format!(
            "a row of {} values is not whole blocks of {block_len}",
            ne[0]
        )
    });
}

/// The name of `t`'s element type, as ggml spells it.
fn type_name(t: &Tensor<'_>) -> String {
    // SAFETY: the tensor is live; ggml returns a static string for every type.
    unsafe { std::ffi::CStr::from_ptr(sys::ggml_type_name((*t.raw()).type_)) }
        .to_string_lossy()
        .into_owned()
}

/// Panics unless `t` (the op's `what`) is one of `types` with each row's values
/// adjacent: what ggml's CPU loops assume when they step through a row.
#[track_caller]
pub(super) fn require_rows_of(op: &str, what: &str, t: &Tensor<'_>, types: &[DType]) {
    require(t.dtype().is_some_and(|d| types.contains(&d)), op, || {
        format!("{what} is {}, expected one of {types:?}", type_name(t))
    });
    require(t.row_contiguous(), op, || {
        format!("{what} is not contiguous by rows")
    });
}

/// Panics unless `t` (the op's `what`) is one of `types` and wholly contiguous.
#[track_caller]
pub(super) fn require_contiguous_of(op: &str, what: &str, t: &Tensor<'_>, types: &[DType]) {
    require(t.dtype().is_some_and(|d| types.contains(&d)), op, || {
        format!("{what} is {}, expected one of {types:?}", type_name(t))
    });
    // SAFETY: a pure layout query on a live tensor.
    let contiguous = unsafe { sys::ggml_is_contiguous(t.raw()) };
    require(contiguous, op, || format!("{what} is not contiguous"));
}

/// Element-wise ops of one operand: f32 or f16 rows of adjacent values.
#[track_caller]
pub(super) fn unary(op: &str, a: &Tensor<'_>) {
    require_rows_of(op, "the input", a, &[DType::F32, DType::F16]);
}

/// Element-wise ops of two operands: `b` broadcasts over `a`, `a`'s rows are adjacent
/// values, and the pair is one the CPU computes (f32 with f32, f16 with f16 or f32).
#[track_caller]
pub(super) fn binary(op: &str, a: &Tensor<'_>, b: &Tensor<'_>) {
    require_broadcast(op, a, b);
    require_rows_of(op, "the first operand", a, &[DType::F32, DType::F16]);
    let pair = (a.dtype(), b.dtype());
    require(
        matches!(
            pair,
            (Some(DType::F32), Some(DType::F32))
                | (Some(DType::F16), Some(DType::F16) | Some(DType::F32))
        ),
        op,
        || {
            format!(
                "{} with {} is not a pair it computes (F32 with F32, F16 with F16 or F32)",
                type_name(a),
                type_name(b)
            )
        },
    );
}

/// Ops that only describe a new layout of their operand (a view): every tensor will do.
pub(super) fn any_layout(_op: &str, _a: &Tensor<'_>) {}

/// Copies into a new layout: ggml's CPU copies element by element only for the
/// unblocked types.
#[track_caller]
pub(super) fn unblocked(op: &str, a: &Tensor<'_>) {
    require(a.element_size().is_some(), op, || {
        format!("the input is {}, a block-quantized type", type_name(a))
    });
}

/// `ggml_mul_mat(a, b)`: `a` [k, m] (f32, f16 or q8_0) times `b` [k, n] broadcast over
/// `a`'s upper dims, both with adjacent row values and `a` not transposed; `b` is f32,
/// or f16 when `a` is f32 or f16 (what the CPU converts it from).
#[track_caller]
pub(super) fn product(a: &Tensor<'_>, b: &Tensor<'_>) {
    let (x, y) = (a.ne(), b.ne());
    require(
        x[0] == y[0] && x[2] > 0 && x[3] > 0 && y[2] % x[2] == 0 && y[3] % x[3] == 0,
        "mul_mat",
        || format!("dims {x:?} and {y:?} do not multiply"),
    );
    // SAFETY: a pure layout query on a live tensor.
    let transposed = unsafe { sys::ggml_is_transposed(a.raw()) };
    require(!transposed, "mul_mat", || {
        "the first operand is transposed".into()
    });
    require_rows_of(
        "mul_mat",
        "the first operand",
        a,
        &[DType::F32, DType::F16, DType::Q8_0],
    );
    let b_types: &[DType] = match a.dtype() {
        Some(DType::F32 | DType::F16) => &[DType::F32, DType::F16],
        _ => &[DType::F32],
    };
    require_rows_of("mul_mat", "the second operand", b, b_types);
}

/// The output length of a 1-D convolution of a kernel of `kernel_ne` ([K, IC, ..])
/// over `input` ([L, IC, N]) with `stride`, `pad` and `dilation`, after checking what
/// ggml's im2col asserts or divides by: stride and dilation of at least 1, a padding
/// of at least 0, matching channels, f32 input rows and at least one output.
#[track_caller]
pub(super) fn conv_1d(
    op: &str,
    kernel_ne: [i64; 4],
    input: &Tensor<'_>,
    stride: i32,
    pad: i32,
    dilation: i32,
) -> i64 {
    require(stride >= 1 && dilation >= 1 && pad >= 0, op, || {
        format!("stride {stride}, padding {pad}, dilation {dilation}: expected 1, 0 and 1 or more")
    });
    let [k, ic, _, _] = kernel_ne;
    let [l, input_ic, _, one] = input.ne();
    require(k >= 1 && ic == input_ic && one == 1, op, || {
        format!(
            "a kernel {kernel_ne:?} does not fit an input {:?} (width, channels, batch)",
            input.ne()
        )
    });
    require_rows_of(op, "the input", input, &[DType::F32]);
    let reach = (dilation as i64).saturating_mul(k - 1);
    let ol = (l + 2 * pad as i64 - reach - 1) / stride as i64 + 1;
    require(ol >= 1 && l + 2 * pad as i64 > reach, op, || {
        format!(
            "an input of {l} samples (padding {pad}) is shorter than the kernel's reach \
             (width {k}, dilation {dilation})"
        )
    });
    ol
}

/// `ggml_flash_attn_ext(q, k, v)`: `q` [d, q_len, heads, b] f32, `k` [d, kv_len,
/// kv_heads, b] and `v` [dv, kv_len, kv_heads, b] of one type (f32 or f16), heads a
/// multiple of kv_heads, every row of adjacent values.
#[track_caller]
pub(super) fn attention(q: &Tensor<'_>, k: &Tensor<'_>, v: &Tensor<'_>) {
    let (qn, kn, vn) = (q.ne(), k.ne(), v.ne());
    require(
        qn[0] == kn[0]
            && kn[2] > 0
            && qn[2] % kn[2] == 0
            && qn[3] == kn[3]
            && vn[1] == kn[1]
            && vn[2] == kn[2]
            && vn[3] == kn[3],
        "flash_attn",
        || format!("q {qn:?}, k {kn:?} and v {vn:?} do not attend"),
    );
    require_rows_of("flash_attn", "q", q, &[DType::F32]);
    require_rows_of("flash_attn", "k", k, &[DType::F32, DType::F16]);
    require_rows_of("flash_attn", "v", v, &[DType::F32, DType::F16]);
    require(k.dtype() == v.dtype(), "flash_attn", || {
        format!("k is {} and v is {}", type_name(k), type_name(v))
    });
}

/// True for an i32 tensor (token ids, positions, row indices).
pub(super) fn is_i32(t: &Tensor<'_>) -> bool {
    // SAFETY: the tensor is live while its context is.
    unsafe { (*t.raw()).type_ == sys::GGML_TYPE_I32 }
}

/// True when `t` holds values written before a run, not computed by it: a leaf (an
/// input or a weight), or a view or reshape of one (a step's inputs are views of one
/// input, `Context::new_inputs`).
///
/// # Safety
/// `t` is a live tensor whose sources are live.
pub(super) unsafe fn holds_written(t: *mut sys::ggml_tensor) -> bool {
    // SAFETY: the caller's contract.
    unsafe {
        let mut source = &*t;
        while matches!(source.op, sys::GGML_OP_VIEW | sys::GGML_OP_RESHAPE)
            && !source.src[0].is_null()
        {
            source = &*source.src[0];
        }
        source.op == sys::GGML_OP_NONE
    }
}

/// `ggml_get_rows(table, indices)`: a table of f32, f16 or q8_0 rows and i32 indices
/// of fitting dims that the graph does not compute (the scheduler checks them as
/// written, or reads them back, and refuses one outside the table before the compute;
/// ggml's CPU kernel aborts on it, a GPU kernel reads past the table).
#[track_caller]
pub(super) fn row_indices(table: &Tensor<'_>, indices: &Tensor<'_>) {
    let (x, r) = (table.ne(), indices.ne());
    // SAFETY: the tensor is live while its context is.
    // An argmax over rows no longer than the table's row count only yields indices
    // inside it, given a finite value in each row (see `Context::argmax`); any other
    // computed index could point past the table.
    // A reshape of such an argmax (its indices as [1, columns], one per batch of the
    // table) holds the same values.
    let (is_i32, computed) = unsafe {
        let t = &*indices.raw();
        let mut source = t;
        while source.op == sys::GGML_OP_RESHAPE && !source.src[0].is_null() {
            source = &*source.src[0];
        }
        let bounded_argmax = source.op == sys::GGML_OP_ARGMAX
            && !source.src[0].is_null()
            && (*source.src[0]).ne[0] <= x[1];
        (
            t.type_ == sys::GGML_TYPE_I32,
            !holds_written(indices.raw()) && !bounded_argmax,
        )
    };
    require(
        is_i32 && x[2] == r[1] && x[3] == r[2] && r[3] == 1,
        "get_rows",
        || format!("rows of {x:?} cannot be picked by indices {r:?} (I32: {is_i32})"),
    );
    require(!computed, "get_rows", || {
        "the indices are computed by the graph; they must be an input, a weight or an argmax over rows no longer than the table".into()
    });
    require_rows_of(
        "get_rows",
        "the table",
        table,
        &[DType::F32, DType::F16, DType::Q8_0],
    );
}

/// `ggml_set_rows(dest, src, indices)`: rows of `src` (f32) written into the rows of
/// `dest` (f32 or f16) the i32 `indices` name, one index per source row, in a 2-D
/// layout (both rows of adjacent values); the indices are inputs, checked like a
/// lookup's before the compute (ggml writes past `dest` on one outside it).
#[track_caller]
pub(super) fn row_writes(dest: &Tensor<'_>, src: &Tensor<'_>, indices: &Tensor<'_>) {
    let (d, s, r) = (dest.ne(), src.ne(), indices.ne());
    // SAFETY: the tensor is live while its context is.
    let computed = unsafe { !holds_written(indices.raw()) };
    require(
        is_i32(indices)
            && d[0] == s[0]
            && d[2] * d[3] == 1
            && s[2] * s[3] == 1
            && r[0] == s[1]
            && r[1] * r[2] * r[3] == 1,
        "set_rows",
        || {
            format!(
                "rows {s:?} cannot be written into {d:?} at indices {r:?} (I32: {})",
                is_i32(indices)
            )
        },
    );
    require(!computed, "set_rows", || {
        "the indices are computed by the graph; they must be an input".into()
    });
    require_rows_of(
        "set_rows",
        "the destination",
        dest,
        &[DType::F32, DType::F16],
    );
    require_rows_of("set_rows", "the source", src, &[DType::F32]);
}

/// The nodes and leaves a graph holds, counted the way ggml's `ggml_visit_parents`
/// adds them, so that an expand past the graph's size is a panic before ggml's assert.
pub(super) struct GraphRoom {
    /// The tensors already in the graph.
    seen: HashSet<*mut sys::ggml_tensor>,
    /// Computed tensors in the graph.
    nodes: usize,
    /// Constants and inputs in the graph.
    leafs: usize,
    /// The most of either the graph holds.
    size: usize,
    /// Each row lookup's (and row write's) indices and its table's row count, taken as the graph is
    /// built: the scheduler later points a lookup on another device at its own copy of
    /// the indices, which holds nothing until the compute runs.
    lookups: Vec<(*mut sys::ggml_tensor, i64)>,
}

impl GraphRoom {
    /// An empty graph of `size` nodes and leaves.
    pub(super) fn new(size: usize) -> Self {
        GraphRoom {
            seen: HashSet::new(),
            nodes: 0,
            leafs: 0,
            size,
            lookups: Vec::new(),
        }
    }

    /// The row lookups of the graph: their indices and their table's row count.
    pub(super) fn lookups(&self) -> &[(*mut sys::ggml_tensor, i64)] {
        &self.lookups
    }

    /// The graph's inputs: its leaves marked as such.
    pub(super) fn inputs(&self) -> Vec<*mut sys::ggml_tensor> {
        self.seen
            .iter()
            .copied()
            // SAFETY: every tensor seen is a live tensor of the graph's context.
            .filter(|&t| unsafe {
                (*t).op == sys::GGML_OP_NONE && (*t).flags & sys::GGML_TENSOR_FLAG_INPUT as i32 != 0
            })
            .collect()
    }

    /// Nodes and leaves together: what a scheduler must have room for.
    pub(super) fn held(&self) -> usize {
        self.nodes + self.leafs
    }

    /// Counts what expanding the graph to `t` adds, panicking when it would not fit.
    #[track_caller]
    pub(super) fn admit(&mut self, t: &Tensor<'_>) {
        let (mut nodes, mut leafs) = (0, 0);
        let mut lookups = Vec::new();
        let mut added = HashSet::new();
        let mut stack = vec![t.raw()];
        while let Some(p) = stack.pop() {
            if self.seen.contains(&p) || !added.insert(p) {
                continue;
            }
            // SAFETY: `t` and its sources are live tensors of the graph's context.
            let t = unsafe { &*p };
            stack.extend(t.src.iter().copied().filter(|s| !s.is_null()));
            // SAFETY: a lookup's table and indices are live tensors of the same context.
            let computed = t.op == sys::GGML_OP_GET_ROWS && unsafe { !holds_written(t.src[1]) };
            if t.op == sys::GGML_OP_GET_ROWS && !computed {
                // Inputs and weights are checked before a run; computed indices are an
                // argmax bounded by the table (checked when the lookup was built).
                // SAFETY: as above.
                lookups.push((t.src[1], unsafe { (*t.src[0]).ne[1] }));
            }
            if t.op == sys::GGML_OP_SET_ROWS {
                // SAFETY: a row write's destination (ggml keeps it as the third source)
                // is a live tensor of the same context.
                lookups.push((t.src[1], unsafe { (*t.src[2]).ne[1] }));
            }
            let param = t.flags & sys::GGML_TENSOR_FLAG_PARAM as i32 != 0;
            if t.op == sys::GGML_OP_NONE && !param {
                leafs += 1;
            } else {
                nodes += 1;
            }
        }
        require(
            self.nodes + nodes <= self.size && self.leafs + leafs <= self.size,
            "graph",
            || {
                format!(
                    "{} nodes and {} leaves do not fit a graph of {}; give it more room",
                    self.nodes + nodes,
                    self.leafs + leafs,
                    self.size
                )
            },
        );
        self.nodes += nodes;
        self.leafs += leafs;
        self.lookups.extend(lookups);
        self.seen.extend(added);
    }
}

#[cfg(test)]
mod tests {
    use crate::ggml::tests::{assert_panics, cpu, Case};
    use crate::ggml::{Buffer, Context, DType, GgmlError, Scheduler, Tensor};

    #[test]
    fn types_and_layouts_ggml_would_abort_on_are_panics_naming_the_op() {
        let ctx = Context::new(96, 0).unwrap();
        let m = ctx.new_tensor(DType::F32, &[4, 3], "m");
        let h = ctx.new_tensor(DType::F16, &[4, 3], "h");
        let q = ctx.new_tensor(DType::Q8_0, &[32, 3], "q");
        let q_in = ctx.new_tensor(DType::F32, &[32, 2], "q_in");
        let i8 = ctx.new_tensor(DType::I8, &[4, 3], "i8");
        let idx = ctx.new_i32_tensor(&[2], "idx");
        let t = ctx.transpose(m);
        // What each rule lets through.
        assert_eq!(ctx.add(h, m).ne(), [4, 3, 1, 1]);
        assert_eq!(ctx.mul_mat(h, h).ne(), [3, 3, 1, 1]);
        assert_eq!(ctx.mul_mat(m, h).ne(), [3, 3, 1, 1]);
        assert_eq!(ctx.mul_mat(q, q_in).ne(), [3, 2, 1, 1]);
        assert_eq!(ctx.tanh(h).ne(), [4, 3, 1, 1]);
        assert_eq!(ctx.get_rows(q, idx).ne(), [32, 2, 1, 1]);
        assert_eq!(ctx.cont(t).ne(), [3, 4, 1, 1]);
        let cases: Vec<Case<'_>> = vec![
            ("ggml sqrt: the input is q8_0", Box::new(|| _ = ctx.sqrt(q))),
            (
                "ggml new_inputs: Q8_0 is a block type",
                Box::new(|| _ = ctx.new_inputs(DType::Q8_0, &[&[32]], "q_inputs")),
            ),
            (
                "ggml sin: the input is not contiguous by rows",
                Box::new(|| _ = ctx.sin(t)),
            ),
            ("ggml exp: the input is i8", Box::new(|| _ = ctx.exp(i8))),
            (
                "ggml add: f32 with f16 is not a pair",
                Box::new(|| _ = ctx.add(m, h)),
            ),
            (
                "ggml mul: the first operand is q8_0",
                Box::new(|| _ = ctx.mul(q, q)),
            ),
            (
                "ggml div: the first operand is not contiguous by rows",
                Box::new(|| _ = ctx.div(t, t)),
            ),
            ("ggml sub: dims", Box::new(|| _ = ctx.sub(m, t))),
            ("ggml cont: the input is q8_0", Box::new(|| _ = ctx.cont(q))),
            (
                "ggml mul_mat: the first operand is i8",
                Box::new(|| _ = ctx.mul_mat(i8, m)),
            ),
            (
                "ggml mul_mat: the second operand is f16",
                Box::new(|| _ = ctx.mul_mat(q, ctx.new_tensor(DType::F16, &[32], "x"))),
            ),
            (
                "ggml mul_mat: the second operand is not contiguous by rows",
                Box::new(|| _ = ctx.mul_mat(ctx.new_tensor(DType::F32, &[3], "x"), t)),
            ),
            (
                "ggml soft_max: the input is f16",
                Box::new(|| _ = ctx.soft_max(h)),
            ),
            (
                "ggml soft_max: the input is not contiguous",
                Box::new(|| _ = ctx.soft_max_scaled(t, 1.0)),
            ),
            (
                "ggml scale: the input is not contiguous",
                Box::new(|| _ = ctx.scale(t, 2.0)),
            ),
            (
                "ggml diag_mask_inf: n_past -1",
                Box::new(|| _ = ctx.diag_mask_inf(m, -1)),
            ),
            (
                "ggml norm: the input is f16",
                Box::new(|| _ = ctx.norm(h, 1e-5)),
            ),
            (
                "ggml norm: eps -1 is negative",
                Box::new(|| _ = ctx.norm(m, -1.0)),
            ),
            (
                "ggml leaky_relu: the input is q8_0",
                Box::new(|| _ = ctx.leaky_relu(q, 0.1)),
            ),
            (
                "ggml pad_zeros: paddings",
                Box::new(|| _ = ctx.pad_zeros(m, [0, -1], [0, 0])),
            ),
            (
                "ggml pad_reflect_1d: paddings 4 and 0",
                Box::new(|| _ = ctx.pad_reflect_1d(m, 4, 0)),
            ),
            (
                "ggml get_rows: the table is i8",
                Box::new(|| _ = ctx.get_rows(i8, idx)),
            ),
            (
                "ggml get_rows: the indices are computed",
                Box::new(|| {
                    let computed = ctx.cont(ctx.new_i32_tensor(&[2], "computed"));
                    _ = ctx.get_rows(m, computed);
                }),
            ),
            (
                "ggml cpy: copies",
                Box::new(|| _ = ctx.cpy(m, ctx.new_i32_tensor(&[12], "ints"))),
            ),
            (
                "ggml concat: the input is q8_0",
                Box::new(|| _ = ctx.concat(q, q, 1)),
            ),
            (
                "ggml flash_attn: q",
                Box::new(|| {
                    _ = ctx.flash_attn(m, ctx.new_tensor(DType::F32, &[4, 5], "k"), m, 1.0)
                }),
            ),
            (
                "ggml flash_attn: q is f16",
                Box::new(|| _ = ctx.flash_attn(h, h, h, 1.0)),
            ),
            (
                "ggml flash_attn: k is f32 and v is f16",
                Box::new(|| _ = ctx.flash_attn(m, m, h, 1.0)),
            ),
            (
                "ggml new_tensor: 5 dims",
                Box::new(|| _ = ctx.new_tensor(DType::F32, &[1; 5], "x")),
            ),
            (
                "ggml new_tensor: negative dims",
                Box::new(|| _ = ctx.new_tensor(DType::F32, &[2, -1], "x")),
            ),
            (
                "ggml new_tensor: dims",
                Box::new(|| _ = ctx.new_tensor(DType::F32, &[i64::MAX, 2], "x")),
            ),
            (
                "ggml new_tensor: a row of 33 values",
                Box::new(|| _ = ctx.new_tensor(DType::Q8_0, &[33], "x")),
            ),
            (
                "ggml new_i32_tensor: negative dims",
                Box::new(|| _ = ctx.new_i32_tensor(&[-2], "x")),
            ),
        ];
        assert_panics(cases);
    }

    #[test]
    fn convolutions_ggml_would_abort_on_are_panics_naming_the_op() {
        let ctx = Context::new(96, 0).unwrap();
        let kernel = ctx.new_tensor(DType::F32, &[3, 2, 4], "kernel");
        let input = ctx.new_tensor(DType::F32, &[10, 2], "input");
        let wrong_channels = ctx.new_tensor(DType::F32, &[10, 3], "wrong_channels");
        let short = ctx.new_tensor(DType::F32, &[2, 2], "short");
        let h = ctx.new_tensor(DType::F16, &[10, 2], "h");
        assert_eq!(ctx.conv_1d_f32(kernel, input, 1, 1).ne(), [4, 10, 1, 1]);
        assert_eq!(
            ctx.conv_1d_f32_dilated(kernel, input, 2, 0, 2).ne(),
            [4, 3, 1, 1]
        );
        assert_eq!(
            ctx.conv_1d_f32_time_major(kernel, input, 1, 0, 1).ne(),
            [8, 4, 1, 1]
        );
        let up = ctx.new_tensor(DType::F32, &[4, 3, 2], "up");
        assert_eq!(ctx.conv_transpose_1d_f32(up, input, 2).ne(), [22, 3, 1, 1]);
        let cases: Vec<Case<'_>> = vec![
            (
                "ggml im2col: stride 0",
                Box::new(|| _ = ctx.conv_1d_f32(kernel, input, 0, 0)),
            ),
            (
                "ggml im2col: stride 1, padding -1",
                Box::new(|| _ = ctx.conv_1d_f32(kernel, input, 1, -1)),
            ),
            (
                "ggml im2col: stride 1, padding 0, dilation 0",
                Box::new(|| _ = ctx.conv_1d_f32_dilated(kernel, input, 1, 0, 0)),
            ),
            (
                "ggml im2col: a kernel [3, 2, 4, 1] does not fit",
                Box::new(|| _ = ctx.conv_1d_f32(kernel, wrong_channels, 1, 0)),
            ),
            (
                "ggml im2col: the input is f16",
                Box::new(|| _ = ctx.conv_1d_f32(kernel, h, 1, 0)),
            ),
            (
                "ggml im2col: an input of 2 samples",
                Box::new(|| _ = ctx.conv_1d_f32(kernel, short, 1, 0)),
            ),
            (
                "ggml conv_1d_f32_time_major: an input of 2 samples",
                Box::new(|| _ = ctx.conv_1d_f32_time_major(kernel, short, 1, 0, 1)),
            ),
            (
                "ggml conv_transpose_1d_f32: a kernel",
                Box::new(|| _ = ctx.conv_transpose_1d_f32(up, input, 0)),
            ),
            (
                "ggml conv_transpose_1d_f32: a kernel",
                Box::new(|| _ = ctx.conv_transpose_1d_f32(up, wrong_channels, 1)),
            ),
        ];
        assert_panics(cases);
    }

    #[test]
    fn a_context_or_graph_past_its_size_is_a_panic_not_an_abort() {
        let ctx = Context::new(2, 0).unwrap();
        let a = ctx.new_tensor(DType::F32, &[4], "a");
        let b = ctx.new_tensor(DType::F32, &[4], "b");
        let cases: Vec<Case<'_>> = vec![(
            "ggml context: room for its tensors is used up",
            Box::new(|| {
                let mut x = ctx.add(a, b);
                for _ in 0..64 {
                    x = ctx.add(x, b);
                }
            }),
        )];
        assert_panics(cases);
        let ctx = Context::new(8, 4).unwrap();
        let a = ctx.new_tensor(DType::F32, &[4], "a");
        let b = ctx.new_tensor(DType::F32, &[4], "b");
        let mut graph = ctx.new_graph(2);
        graph.expand(ctx.add(ctx.add(a, b), b));
        assert_eq!(graph.n_nodes(), 2);
        let cases: Vec<Case<'_>> = vec![
            (
                "ggml graph: 3 nodes and 2 leaves do not fit a graph of 2",
                Box::new(|| {
                    graph.expand(ctx.sqrt(a));
                }),
            ),
            (
                "ggml new_graph: a graph of 100000 nodes",
                Box::new(|| _ = ctx.new_graph(100_000)),
            ),
        ];
        assert_panics(cases);
    }

    #[test]
    fn a_scheduler_refuses_what_ggml_would_abort_on() {
        let backend = cpu();
        let none = Scheduler::new(&[], 8).err().expect("no backend is refused");
        assert!(none.to_string().contains("the CPU last; got 0"), "{none}");
        let ctx = Context::new(8, 8).unwrap();
        let a = ctx.new_tensor(DType::F32, &[4], "a");
        let b = ctx.new_tensor(DType::F32, &[4], "b");
        let mut graph = ctx.new_graph(8);
        graph.expand(ctx.sqrt(ctx.add(ctx.add(a, b), b)));
        let mut small = Scheduler::new(&[&backend], 4).unwrap();
        let err = small.compute(&mut graph, &[]).unwrap_err();
        assert!(
            err.to_string()
                .contains("a graph of 5 nodes and leaves passes the scheduler's room for 4"),
            "{err}"
        );
    }

    #[test]
    fn a_row_index_outside_its_table_fails_the_compute_and_not_the_next() {
        let ctx = Context::new(8, 8).unwrap();
        let table = ctx.new_tensor(DType::F32, &[2, 3], "table");
        let idx = ctx.new_i32_tensor(&[2], "idx");
        idx.mark_input();
        let rows = ctx.get_rows(table, idx);
        rows.mark_output();
        let mut graph = ctx.new_graph(8);
        graph.expand(rows);
        let backend = cpu();
        let _weights = Buffer::alloc_context(&ctx, &backend).unwrap();
        table
            .write_f32(&[0.0, 1.0, 10.0, 11.0, 20.0, 21.0])
            .unwrap();
        let mut sched = Scheduler::new(&[&backend], 8).unwrap();
        for bad in [[0, 3], [-1, 0]] {
            match sched.compute_with(&mut graph, &[], &[(idx, &bad)]) {
                Err(GgmlError::Operand {
                    op: "get_rows",
                    reason,
                }) => {
                    assert!(reason.contains("outside a table of 3 rows"), "{reason}")
                }
                other => panic!("indices {bad:?}: {other:?}"),
            }
        }
        sched
            .compute_with(&mut graph, &[], &[(idx, &[2, 0])])
            .unwrap();
        assert_eq!(rows.read_f32().unwrap(), [20.0, 21.0, 0.0, 1.0]);
    }

    /// Inputs made as views of one ([`Context::new_inputs`]) take their values whether
    /// all of them are written (one copy) or some (one copy each), in a prepared graph
    /// as in a plain compute, and their indices are checked as written.
    #[test]
    fn inputs_as_views_of_one_take_their_values_and_are_checked() {
        let weights = Context::new(2, 0).unwrap();
        let table = weights.new_tensor(DType::F32, &[2, 3], "table");
        let backend = cpu();
        let _buf = Buffer::alloc_context(&weights, &backend).unwrap();
        table
            .write_f32(&[0.0, 1.0, 10.0, 11.0, 20.0, 21.0])
            .unwrap();
        let ctx = Context::new(32, 16).unwrap();
        // The third index is in no lookup: written or not, the graph is the same.
        let ids = ctx.new_inputs(DType::I32, &[&[2], &[1], &[1]], "ids");
        let gains = ctx.new_inputs(DType::F32, &[&[2, 1], &[2]], "gains");
        let (a, b) = (ctx.get_rows(table, ids[0]), ctx.get_rows(table, ids[1]));
        let out = ctx.add(ctx.mul(ctx.concat(a, b, 1), gains[0]), gains[1]);
        out.mark_output();
        let mut graph = ctx.new_graph(16);
        graph.expand(out);
        let mut sched = Scheduler::new(&[&backend], 16).unwrap();
        let floats: [(Tensor<'_>, &[f32]); 2] = [(gains[1], &[0.5, 0.25]), (gains[0], &[2.0, 3.0])];
        let want = [40.5, 63.25, 0.5, 3.25, 20.5, 33.25];
        sched
            .compute_with(&mut graph, &floats, &[(ids[0], &[2, 0]), (ids[1], &[1])])
            .unwrap();
        assert_eq!(out.read_f32().unwrap(), want);
        let mut prepared = sched.prepare(&mut graph).unwrap();
        let ints: [(Tensor<'_>, &[i32]); 3] = [(ids[2], &[7]), (ids[0], &[2, 0]), (ids[1], &[1])];
        prepared.compute(&floats, &ints).unwrap();
        // What the inputs' memory holds now (the compute may have reused it).
        let held = [ids[0].read_i32().unwrap(), ids[1].read_i32().unwrap()];
        for bad in [[0, 3], [-1, 0]] {
            // A refused run writes none of its inputs.
            let ints: [(Tensor<'_>, &[i32]); 3] = [(ids[2], &[8]), (ids[0], &bad), (ids[1], &[1])];
            match prepared.compute(&floats, &ints) {
                Err(GgmlError::Operand {
                    op: "get_rows",
                    reason,
                }) => assert!(reason.contains("outside a table of 3 rows"), "{reason}"),
                other => panic!("indices {bad:?}: {other:?}"),
            }
            assert_eq!(
                [ids[0].read_i32().unwrap(), ids[1].read_i32().unwrap()],
                held
            );
        }
        // A view in no graph has no memory of its own: read alone, or written without the
        // views that tile its input with it, it is an error (ggml would end the process).
        assert!(ids[2].read_i32().is_err());
        match crate::ggml::write_inputs(&[], &[(ids[0], &[1, 2]), (ids[2], &[7])]) {
            Err(GgmlError::Failed(m)) => assert!(m.contains("no memory"), "{m}"),
            other => panic!("a lone view in no graph was written: {other:?}"),
        }
        assert_eq!(ids[0].read_i32().unwrap(), held[0], "half written");
        // A value count that does not fit its input is refused before any is written.
        match crate::ggml::write_inputs(
            &[(gains[1], &[1.0, 1.0])],
            &[(ids[0], &[0, 1]), (ids[1], &[0, 0])],
        ) {
            Err(GgmlError::Failed(m)) => assert!(m.contains("expected 1 I32 values, got 2"), "{m}"),
            other => panic!("a wrong count was written: {other:?}"),
        }
        assert_eq!(ids[0].read_i32().unwrap(), held[0], "half written");
        let ints: [(Tensor<'_>, &[i32]); 3] = [(ids[2], &[7]), (ids[1], &[0]), (ids[0], &[1, 2])];
        prepared.compute(&floats, &ints).unwrap();
        assert_eq!(
            out.read_f32().unwrap(),
            [20.5, 33.25, 40.5, 63.25, 0.5, 3.25]
        );
    }
}
