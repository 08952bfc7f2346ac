//! The engine's CPU kernels ([`crate::cpu_kernels`]) as ggml custom ops: what each op
//! takes, checked twice (by its builder in [`super::Context`], and again by the one
//! callback ggml calls, before a kernel touches memory), the trampoline that turns the
//! checked tensors into the kernels' safe slice views, and that callback, which turns a
//! refused operand or a panic into a failure the compute reports
//! ([`super::Scheduler::compute`]) instead of a wild read or an abort (ggml's custom
//! ops return nothing, and a panic must not unwind into C).

use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

use llama_cpp_sys_2 as sys;

use super::{Context, DType, GgmlError, Tensor};
use crate::cpu_kernels::{
    self as kernels, attention, conv_f32, f16_product, f32_product, gelu, q8, refine, snake,
    transpose, Matrix, Output, Part,
};

/// The engine's custom ops, with the parameter each takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CustomOp {
    /// [`super::Context::mul_mat_q8_packed`].
    Q8Packed,
    /// [`super::Context::conv_1d_q8_packed_time_major`] with these steps.
    Q8Conv {
        /// Kernel width, stride, padding and dilation.
        steps: q8::ConvSteps,
    },
    /// [`super::Context::mul_mat_f32_packed`].
    F32Packed,
    /// [`super::Context::conv_1d_f32_time_major_cpu`] with these steps.
    F32Conv {
        /// Kernel width, stride, padding and dilation.
        steps: q8::ConvSteps,
    },
    /// [`super::Context::gelu_erf_cpu`].
    GeluErf,
    /// [`super::Context::transpose_cpu`].
    Transpose,
    /// [`super::Context::self_attention_cpu`] over `heads` heads.
    SelfAttention {
        /// Heads of [`kernels::ATTENTION_HEAD_DIM`].
        heads: usize,
    },
    /// [`super::Context::mul_mat_f16_cpu`].
    F16Product,
    /// [`super::Context::refine_logits_cpu`] with `head` text rows.
    RefineLogits {
        /// The rows before it are the text tokens, refined; the rest are exact.
        head: usize,
    },
    /// [`super::Context::ada_in_snake_cpu`] with this normalisation epsilon.
    AdaInSnake {
        /// The epsilon's bits (an f32 has no `Eq`).
        eps_bits: u32,
    },
}

/// What a custom op needs to know about one operand (a source or its result).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Operand {
    /// Element type; `None` for one the engine does not compute in.
    pub dtype: Option<DType>,
    /// Dims in ggml order.
    pub ne: [i64; 4],
    /// Strides in bytes.
    pub nb: [usize; 4],
    /// True when the data lies in host memory (only known once the graph is allocated).
    pub host: bool,
}

impl Operand {
    /// The operand `t` describes.
    ///
    /// # Safety
    /// `t` is a live ggml tensor.
    pub(super) unsafe fn of(t: *const sys::ggml_tensor) -> Self {
        // SAFETY: the caller's guarantee; a buffer pointer, when set, is a live buffer.
        unsafe {
            let t = &*t;
            Operand {
                dtype: DType::from_raw(t.type_),
                ne: t.ne,
                nb: t.nb,
                host: !t.data.is_null()
                    && !t.buffer.is_null()
                    && sys::ggml_backend_buffer_is_host(t.buffer),
            }
        }
    }

    /// True when the elements are adjacent in ggml order (strides of dims of length 1
    /// do not matter), as `ggml_is_contiguous` says, for the unblocked types.
    pub(super) fn contiguous(&self) -> bool {
        let Some(dtype) = self.dtype.filter(|t| t.block_len() == 1) else {
            return false;
        };
        let mut next = dtype.size();
        for (&ne, &nb) in self.ne.iter().zip(&self.nb) {
            if ne != 1 {
                if nb != next {
                    return false;
                }
                next *= ne as usize;
            }
        }
        true
    }

    /// True when each row's values are adjacent and every stride is whole elements.
    pub(super) fn row_contiguous(&self) -> bool {
        self.dtype.is_some_and(|t| {
            t.block_len() == 1
                && self.nb[0] == t.size()
                && self.nb.iter().all(|s| s % t.size() == 0)
        })
    }

    fn type_name(&self) -> String {
        self.dtype.map_or_else(
            || "a type the engine does not use".into(),
            |t| format!("{t:?}"),
        )
    }

    /// `Ok` when the operand is `dtype`, contiguous (or at least by rows when
    /// `rows_only`) and of dims `ne`; else why not, naming it `what`.
    fn expect(
        &self,
        what: &str,
        dtype: DType,
        ne: [i64; 4],
        rows_only: bool,
    ) -> Result<(), String> {
        if self.dtype != Some(dtype) {
            return Err(format!("{what}: {}, expected {dtype:?}", self.type_name()));
        }
        if self.ne != ne {
            return Err(format!("{what}: dims {:?}, expected {ne:?}", self.ne));
        }
        let laid_out = if rows_only {
            self.row_contiguous()
        } else {
            self.contiguous()
        };
        if !laid_out {
            let how = if rows_only { " by rows" } else { "" };
            return Err(format!(
                "{what}: not contiguous{how} (strides {:?})",
                self.nb
            ));
        }
        Ok(())
    }
}

/// The product's inner length and outputs (`k`, `n`) of the packed q8_0 weight
/// `srcs[0]`, after checking it and the optional bias `srcs[2]`.
fn packed_q8_dims(srcs: &[Operand]) -> Result<(i64, i64), String> {
    let [cell, blocks, groups, one] = srcs[0].ne;
    if cell != q8::CELL_BYTES as i64 || blocks < 1 || groups < 1 || one != 1 {
        return Err(format!(
            "the weight has dims {:?}, not a packed q8_0 weight's [{}, blocks, groups, 1]",
            srcs[0].ne,
            q8::CELL_BYTES
        ));
    }
    srcs[0].expect("the weight", DType::I8, srcs[0].ne, false)?;
    let n = groups * q8::GROUP_COLS as i64;
    if let Some(bias) = srcs.get(2) {
        bias.expect("the bias", DType::F32, [n, 1, 1, 1], false)?;
    }
    Ok((blocks * 32, n))
}

/// `Ok` when `srcs` has `n` operands (`optional` more allowed).
fn arity(srcs: &[Operand], n: usize, optional: usize) -> Result<(), String> {
    if srcs.len() < n || srcs.len() > n + optional {
        return Err(format!("takes {n} operands, got {}", srcs.len()));
    }
    Ok(())
}

impl CustomOp {
    /// The op's name in errors.
    pub(super) fn name(self) -> &'static str {
        match self {
            CustomOp::Q8Packed => "mul_mat_q8_packed",
            CustomOp::Q8Conv { .. } => "conv_1d_q8_packed_time_major",
            CustomOp::F32Packed => "mul_mat_f32_packed",
            CustomOp::F32Conv { .. } => "conv_1d_f32_time_major_cpu",
            CustomOp::GeluErf => "gelu_erf_cpu",
            CustomOp::Transpose => "transpose_cpu",
            CustomOp::SelfAttention { .. } => "self_attention_cpu",
            CustomOp::F16Product => "mul_mat_f16_cpu",
            CustomOp::AdaInSnake { .. } => "ada_in_snake_cpu",
            CustomOp::RefineLogits { .. } => "refine_logits_cpu",
        }
    }

    /// The result's dims when `srcs` are operands the op's kernel reads within their
    /// memory and this CPU runs the kernel; else why not. Host memory is the
    /// callback's check ([`run_checked`]): at build time nothing is allocated yet.
    pub(super) fn check(self, srcs: &[Operand]) -> Result<[i64; 4], String> {
        let available = match self {
            CustomOp::Q8Packed | CustomOp::Q8Conv { .. } => kernels::q8_kernel_available(),
            CustomOp::F16Product | CustomOp::RefineLogits { .. } => {
                kernels::f16_product_available()
            }
            CustomOp::F32Packed
            | CustomOp::F32Conv { .. }
            | CustomOp::GeluErf
            | CustomOp::Transpose
            | CustomOp::SelfAttention { .. }
            | CustomOp::AdaInSnake { .. } => kernels::attention_kernel_available(),
        };
        if !available {
            return Err("this CPU lacks the vector instructions the kernel needs".into());
        }
        match self {
            CustomOp::Q8Packed => {
                arity(srcs, 2, 1)?;
                let (k, n) = packed_q8_dims(srcs)?;
                let m = srcs[1].ne[1];
                srcs[1].expect("the activations", DType::F32, [k, m, 1, 1], false)?;
                Ok([n, m, 1, 1])
            }
            CustomOp::Q8Conv { steps } => {
                arity(srcs, 2, 1)?;
                let (k, n) = packed_q8_dims(srcs)?;
                let [len, channels, _, _] = srcs[1].ne;
                srcs[1].expect("the input", DType::F32, [len, channels, 1, 1], false)?;
                if channels * steps.kernel_width as i64 != k {
                    return Err(format!(
                        "a kernel row of {k} values is not {} taps over the input's {channels} \
                         channels",
                        steps.kernel_width
                    ));
                }
                if channels % 32 != 0 {
                    return Err(format!(
                        "the input's {channels} channels are not whole q8_0 blocks of 32 (the \
                         tap-major kernel quantizes each position's channels)"
                    ));
                }
                let out_len = steps.output_len(len as usize).ok_or_else(|| {
                    format!("an input of {len} samples gives no output with {steps:?}")
                })?;
                Ok([out_len as i64, n, 1, 1])
            }
            CustomOp::F32Packed => {
                arity(srcs, 2, 0)?;
                let [n, k, _, _] = srcs[0].ne;
                if n < 1 || n % kernels::F32_PRODUCT_COLS as i64 != 0 {
                    return Err(format!(
                        "the weight has {n} outputs, not whole runs of {}",
                        kernels::F32_PRODUCT_COLS
                    ));
                }
                srcs[0].expect("the weight", DType::F32, [n, k, 1, 1], false)?;
                let m = srcs[1].ne[1];
                srcs[1].expect("the activations", DType::F32, [k, m, 1, 1], false)?;
                Ok([n, m, 1, 1])
            }
            CustomOp::AdaInSnake { eps_bits } => {
                let eps = f32::from_bits(eps_bits);
                if eps.is_nan() || eps < 0.0 {
                    return Err(format!("the epsilon {eps} is not a non-negative number"));
                }
                arity(srcs, 4, 0)?;
                let [len, channels, _, _] = srcs[0].ne;
                srcs[0].expect("the input", DType::F32, [len, channels, 1, 1], false)?;
                for (what, s) in ["the gains", "the offsets", "the Snake alphas"]
                    .iter()
                    .zip(&srcs[1..])
                {
                    s.expect(what, DType::F32, [channels, 1, 1, 1], false)?;
                }
                Ok(srcs[0].ne)
            }
            CustomOp::F32Conv { steps } => {
                arity(srcs, 2, 1)?;
                let [len, channels, _, _] = srcs[1].ne;
                srcs[1].expect("the input", DType::F32, [len, channels, 1, 1], false)?;
                let oc = srcs[0].ne[2];
                let kernel = [steps.kernel_width as i64, channels, oc, 1];
                srcs[0].expect("the kernel", DType::F32, kernel, false)?;
                if let Some(bias) = srcs.get(2) {
                    bias.expect("the bias", DType::F32, [oc, 1, 1, 1], false)?;
                }
                let out_len = steps.output_len(len as usize).ok_or_else(|| {
                    format!("an input of {len} samples gives no output with {steps:?}")
                })?;
                Ok([out_len as i64, oc, 1, 1])
            }
            CustomOp::GeluErf => {
                arity(srcs, 1, 0)?;
                srcs[0].expect("the input", DType::F32, srcs[0].ne, false)?;
                Ok(srcs[0].ne)
            }
            CustomOp::Transpose => {
                arity(srcs, 1, 0)?;
                let [cols, rows, _, _] = srcs[0].ne;
                srcs[0].expect("the input", DType::F32, [cols, rows, 1, 1], true)?;
                Ok([rows, cols, 1, 1])
            }
            CustomOp::SelfAttention { heads } => {
                arity(srcs, 1, 0)?;
                if heads == 0 {
                    return Err("needs at least one head".into());
                }
                let d = (heads * kernels::ATTENTION_HEAD_DIM) as i64;
                let t = srcs[0].ne[1];
                srcs[0].expect("the stacked q, k, v", DType::F32, [3 * d, t, 1, 1], false)?;
                Ok([d, t, 1, 1])
            }
            CustomOp::F16Product => {
                arity(srcs, 2, 0)?;
                let [k, n, b, _] = srcs[0].ne;
                if n < 4 {
                    return Err(format!("the weight has {n} rows, fewer than 4"));
                }
                srcs[0].expect("the weight", DType::F16, [k, n, b, 1], true)?;
                let m = srcs[1].ne[1];
                srcs[1].expect("the activations", DType::F32, [k, m, b, 1], true)?;
                Ok([n, m, b, 1])
            }
            CustomOp::RefineLogits { head } => {
                arity(srcs, 5, 1)?;
                let [k, n, _, _] = srcs[1].ne;
                srcs[1].expect("the weight", DType::F16, [k, n, 1, 1], true)?;
                let rows = srcs[0].ne[0];
                srcs[0].expect("the q8_0 logits", DType::F32, [rows, 1, 1, 1], false)?;
                srcs[2].expect("the activations", DType::F32, [k, 1, 1, 1], false)?;
                let bounds = (refine::BOUNDS_PER_BLOCK as i64) * k / 32;
                srcs[3].expect("the bounds", DType::F32, [bounds, 1, 1, 1], false)?;
                srcs[4].expect("the switch", DType::I32, [1, 1, 1, 1], false)?;
                if let Some(ban) = srcs.get(5) {
                    ban.expect("the banned rows", DType::I32, [ban.ne[0], 1, 1, 1], false)?;
                }
                if k % 32 != 0 || rows > head as i64 || head as i64 > n {
                    return Err(format!(
                        "{rows} q8_0 logits and {head} text rows do not fit a weight of {n} \
                         rows of {k} (whole blocks of 32)"
                    ));
                }
                Ok([n, 1, 1, 1])
            }
        }
    }

    /// Runs the kernel on `dst`'s sources, as part `part` of the work: the tensors
    /// become slice views ([`span`], [`matrix`]) and the kernel's safe entry point
    /// checks their lengths once more.
    ///
    /// # Safety
    /// [`CustomOp::check`] accepted `dst`'s sources, they and `dst` lie in host memory
    /// that no one writes during the compute but the op's parts (each with its own
    /// `part`), `dst` overlaps none of them, and `dst` is contiguous f32 of the dims
    /// `check` returned.
    unsafe fn run(self, dst: *mut sys::ggml_tensor, part: Part) -> Result<(), String> {
        // SAFETY: the caller's guarantees: every source is a live host tensor of the
        // type and layout `check` accepted, and the result's floats are this op's to
        // write, shared only with the other parts of this compute.
        unsafe {
            let src = |i: usize| (*dst).src[i].cast_const();
            let out = Output::from_raw_parts(
                (*dst).data.cast::<f32>(),
                sys::ggml_nelements(dst) as usize,
            );
            match self {
                CustomOp::Q8Packed | CustomOp::Q8Conv { .. } => {
                    let [_, blocks, groups, _] = (*src(0)).ne;
                    let (k, n) = (blocks as usize * 32, groups as usize * q8::GROUP_COLS);
                    let w = q8::PackedQ8View::new(span::<u8>(src(0))?, k, n)
                        .ok_or("the weight does not hold a packed q8_0 weight's cells")?;
                    let bias = match src(2) {
                        b if b.is_null() => None,
                        b => Some(span::<f32>(b)?),
                    };
                    let x = matrix::<f32>(src(1))?;
                    match self {
                        CustomOp::Q8Conv { steps } => {
                            q8::conv_time_major(w, x, steps, bias, &out, part)
                        }
                        _ => q8::product(w, x, bias, &out, part),
                    }
                }
                CustomOp::F32Packed => {
                    let n = (*src(0)).ne[0] as usize;
                    f32_product::product(
                        span::<f32>(src(0))?,
                        n,
                        matrix::<f32>(src(1))?,
                        &out,
                        part,
                    )
                }
                CustomOp::GeluErf => gelu::gelu_erf_part(span::<f32>(src(0))?, &out, part),
                CustomOp::Transpose => transpose::transpose(matrix::<f32>(src(0))?, &out, part),
                CustomOp::F32Conv { steps } => {
                    let bias = match src(2) {
                        b if b.is_null() => None,
                        b => Some(span::<f32>(b)?),
                    };
                    conv_f32::conv_time_major(
                        span::<f32>(src(0))?,
                        matrix::<f32>(src(1))?,
                        steps,
                        bias,
                        &out,
                        part,
                    )
                }
                CustomOp::AdaInSnake { eps_bits } => snake::ada_in_snake(
                    matrix::<f32>(src(0))?,
                    f32::from_bits(eps_bits),
                    span::<f32>(src(1))?,
                    span::<f32>(src(2))?,
                    span::<f32>(src(3))?,
                    &out,
                    part,
                ),
                CustomOp::SelfAttention { heads } => {
                    attention::self_attention(matrix::<f32>(src(0))?, heads, &out, part)
                }
                CustomOp::F16Product => {
                    f16_product::product(matrix::<u16>(src(0))?, matrix::<f32>(src(1))?, &out, part)
                }
                CustomOp::RefineLogits { head } => {
                    let ban = match src(5) {
                        b if b.is_null() => &[][..],
                        b => span::<i32>(b)?,
                    };
                    let whole = span::<i32>(src(4))?.first() != Some(&0);
                    refine::refine(
                        span::<f32>(src(0))?,
                        matrix::<u16>(src(1))?,
                        span::<f32>(src(2))?,
                        span::<f32>(src(3))?,
                        head,
                        ban,
                        whole,
                        &out,
                        part,
                    )
                }
            }
        }
    }
}

/// The bytes `t` spans in memory, from its first element to the end of its last (a
/// view's gaps included), as `ggml_nbytes` counts them: `[start, end)`.
///
/// # Safety
/// `t` is a live tensor.
unsafe fn byte_range(t: *const sys::ggml_tensor) -> (usize, usize) {
    // SAFETY: the caller's guarantee; a pure size query.
    unsafe {
        let start = (*t).data as usize;
        (start, start + sys::ggml_nbytes(t))
    }
}

/// The elements `t` spans (see [`byte_range`]) as a slice of `T`; an error when its
/// data is missing or misaligned for `T`, or its bytes are not whole `T`s.
///
/// # Safety
/// `t` is a live tensor in host memory whose elements are `T`s, not written while the
/// slice lives.
unsafe fn span<'a, T>(t: *const sys::ggml_tensor) -> Result<&'a [T], String> {
    // SAFETY: the caller's guarantee.
    let ((start, end), data) = unsafe { (byte_range(t), (*t).data.cast_const().cast::<T>()) };
    let size = std::mem::size_of::<T>();
    if data.is_null() || !start.is_multiple_of(std::mem::align_of::<T>()) {
        return Err("an operand's data is missing or misaligned".into());
    }
    if !(end - start).is_multiple_of(size) {
        return Err("an operand's bytes are not whole elements".into());
    }
    // SAFETY: the caller's guarantee: ggml_nbytes bytes from data are the tensor's.
    Ok(unsafe { std::slice::from_raw_parts(data, (end - start) / size) })
}

/// `t` as a [`Matrix`] of `T`: its first three dims over [`span`], with its row and
/// batch strides; an error unless its rows are contiguous, its strides whole elements
/// and its fourth dim 1.
///
/// # Safety
/// As [`span`].
unsafe fn matrix<'a, T>(t: *const sys::ggml_tensor) -> Result<Matrix<'a, T>, String> {
    let size = std::mem::size_of::<T>();
    // SAFETY: the caller's guarantee.
    let (ne, nb, data) = unsafe { ((*t).ne, (*t).nb, span::<T>(t)?) };
    if nb[0] != size || ne[3] != 1 || nb[1] % size != 0 || nb[2] % size != 0 {
        return Err(format!(
            "an operand of dims {ne:?} and strides {nb:?} is no matrix"
        ));
    }
    let dims = [ne[0] as usize, ne[1] as usize, ne[2] as usize];
    Matrix::new(data, dims, [nb[1] / size, nb[2] / size])
        .ok_or_else(|| format!("an operand of dims {ne:?} and strides {nb:?} leaves its memory"))
}

/// One custom op node's state, owned by its [`super::Context`] (boxed, so its address
/// is stable) and reached by the callback through ggml's userdata pointer.
pub(super) struct OpState {
    op: CustomOp,
    /// The first failure any worker thread met.
    failure: Mutex<Option<String>>,
}

impl OpState {
    /// The state of a new node of `op`.
    pub(super) fn new(op: CustomOp) -> Self {
        OpState {
            op,
            failure: Mutex::new(None),
        }
    }

    fn fail(&self, reason: String) {
        let mut failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        failure.get_or_insert(reason);
    }

    /// The failure of the last compute, if any, clearing it.
    pub(super) fn take_failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

/// The text of a caught panic.
pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Checks `dst`'s operands again (types, dims, layout, host memory), then runs the
/// kernel.
///
/// # Safety
/// `dst` is null or a live tensor of a computing graph.
unsafe fn run_checked(
    op: CustomOp,
    dst: *mut sys::ggml_tensor,
    ith: usize,
    nth: usize,
) -> Result<(), String> {
    if dst.is_null() {
        return Err("ggml passed no result tensor".into());
    }
    // SAFETY: the caller's guarantee; a live tensor's sources are null or live.
    let (srcs, out) = unsafe {
        let srcs: Vec<Operand> = (*dst)
            .src
            .iter()
            .take_while(|s| !s.is_null())
            .map(|&s| Operand::of(s))
            .collect();
        (srcs, Operand::of(dst))
    };
    let ne = op.check(&srcs)?;
    out.expect("the result", DType::F32, ne, false)?;
    if let Some(i) = srcs.iter().chain([&out]).position(|o| !o.host) {
        return Err(format!("operand {i} is not in host memory"));
    }
    // SAFETY: a live tensor's sources are live.
    let (out_bytes, src_bytes): (_, Vec<_>) = unsafe {
        let srcs = (*dst).src.iter().take_while(|s| !s.is_null());
        (byte_range(dst), srcs.map(|&s| byte_range(s)).collect())
    };
    if src_bytes
        .iter()
        .any(|&(start, end)| start < out_bytes.1 && out_bytes.0 < end)
    {
        return Err("the result overlaps an operand".into());
    }
    let part = Part::new(ith, nth).ok_or_else(|| format!("thread {ith} of {nth}"))?;
    fault::maybe_panic(op, ith);
    // SAFETY: every operand checked above: types, dims, layout, host memory, no
    // overlap with the result; ggml runs the node's parts alone.
    unsafe { op.run(dst, part) }
}

/// The callback of every engine custom op (a `ggml_custom_op_t`): runs the checked
/// kernel and records a refused operand or a panic in the node's [`OpState`], which
/// the scheduler turns into the compute's error. Nothing unwinds into ggml.
///
/// # Safety
/// ggml calls it with a node made by [`super::Context`]'s custom op builder, whose
/// userdata is that node's live [`OpState`].
pub(super) unsafe extern "C" fn callback(
    dst: *mut sys::ggml_tensor,
    ith: c_int,
    nth: c_int,
    userdata: *mut c_void,
) {
    if userdata.is_null() {
        return;
    }
    // SAFETY: the caller's guarantee: the context that owns the state outlives its
    // graphs' computes.
    let state = unsafe { &*(userdata as *const OpState) };
    let (ith, nth) = (ith.max(0) as usize, nth.max(1) as usize);
    // SAFETY: the caller's guarantee on `dst`.
    let outcome = catch_unwind(AssertUnwindSafe(|| unsafe {
        run_checked(state.op, dst, ith, nth)
    }));
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(reason)) => state.fail(format!("{}: {reason}", state.op.name())),
        Err(payload) => state.fail(format!(
            "{} panicked: {}",
            state.op.name(),
            panic_text(payload.as_ref())
        )),
    }
}

/// Test-only fault injection (cargo feature `fault-injection`): with
/// `AUDIOCPP_FAULT_INJECT_OP_PANICS=N` in the environment, the first `N` custom ops
/// to run panic in their first worker thread, so tests can watch a request fail
/// mid-graph and the next one succeed.
#[cfg(feature = "fault-injection")]
mod fault {
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::OnceLock;

    /// Panics left to inject.
    fn left() -> &'static AtomicI64 {
        static LEFT: OnceLock<AtomicI64> = OnceLock::new();
        LEFT.get_or_init(|| {
            let n = std::env::var("AUDIOCPP_FAULT_INJECT_OP_PANICS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            AtomicI64::new(n)
        })
    }

    /// Panics when a fault is left to inject and this is the op's first thread.
    pub(super) fn maybe_panic(op: super::CustomOp, ith: usize) {
        if ith == 0
            && left()
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                    (n > 0).then(|| n - 1)
                })
                .is_ok()
        {
            panic!("fault injected into {}", op.name());
        }
    }
}

/// Without the `fault-injection` feature: nothing.
#[cfg(not(feature = "fault-injection"))]
mod fault {
    /// Does nothing.
    #[inline(always)]
    pub(super) fn maybe_panic(_op: super::CustomOp, _ith: usize) {}
}

/// The custom ops' builders: each checks its operands (`CustomOp::check`) and adds a
/// node whose callback checks them again.
impl Context {
    /// [`Context::gelu_erf`] as a CPU-only custom op with a vectorised erf (ggml's
    /// calls libm's `erff` per element). Refuses an input that is not f32.
    pub fn gelu_erf_cpu<'a>(&'a self, a: Tensor<'a>) -> super::Result<Tensor<'a>> {
        let op = CustomOp::GeluErf;
        let a = self.contiguous_f32(op, a, "the input")?;
        self.custom_op(op, &[a])
    }

    /// `a` [cols, rows] (f32, each row's values adjacent) transposed into a new
    /// contiguous [rows, cols], as `cont(transpose(a))` but a block at a time. A
    /// CPU-only custom op. Refuses any other operand with an error.
    pub fn transpose_cpu<'a>(&'a self, a: Tensor<'a>) -> super::Result<Tensor<'a>> {
        self.custom_op(CustomOp::Transpose, &[a])
    }

    /// [`Context::mul_mat`] of a [`crate::cpu_kernels::PackedQ8`] weight (an [`DType::I8`] tensor of
    /// [`crate::cpu_kernels::PackedQ8::tensor_shape`]) and f32 activations `x` [k, m], plus `bias` (`[n]`
    /// f32) when given, in one op: the result is [n, m]. A CPU-only custom op; needs
    /// [`crate::cpu_kernels::q8_kernel_available`]. Refuses any other operand with an error.
    pub fn mul_mat_q8_packed<'a>(
        &'a self,
        packed: Tensor<'a>,
        x: Tensor<'a>,
        bias: Option<Tensor<'a>>,
    ) -> super::Result<Tensor<'a>> {
        let op = CustomOp::Q8Packed;
        let mut args = vec![packed, self.contiguous_f32(op, x, "the activations")?];
        if let Some(b) = bias {
            args.push(self.contiguous_f32(op, b, "the bias")?);
        }
        self.custom_op(op, &args)
    }

    /// Snake after an AdaIN: `v + sin(alpha v)^2 / alpha` where `v` is `n` times
    /// `gamma`, plus `n` and `beta`, and `n` is `x` [T, C] normalised per channel over
    /// time with `eps` (ggml's `norm`); one gain, offset and alpha per channel (each C
    /// contiguous f32 values). A CPU-only custom op ([`crate::cpu_kernels::snake`]: one
    /// pass after the channel's statistics, a vectorised sine). Refuses any other
    /// operand.
    pub fn ada_in_snake_cpu<'a>(
        &'a self,
        x: Tensor<'a>,
        eps: f32,
        gamma: Tensor<'a>,
        beta: Tensor<'a>,
        alpha: Tensor<'a>,
    ) -> super::Result<Tensor<'a>> {
        let op = CustomOp::AdaInSnake {
            eps_bits: eps.to_bits(),
        };
        let x = self.contiguous_f32(op, x, "the input")?;
        let mut args = vec![x];
        for (what, t) in [
            ("the gains", gamma),
            ("the offsets", beta),
            ("the Snake alphas", alpha),
        ] {
            let t = self.contiguous_f32(op, t, what)?;
            args.push(self.reshape(t, &[t.ne().iter().product()]));
        }
        self.custom_op(op, &args)
    }

    /// 1-D convolution (PyTorch cross-correlation) of `input` [L, IC] f32 with an f32
    /// `kernel` [K, IC, OC] (as the converter stores ONNX's [OC, IC, K]), `conv` the
    /// stride, padding and dilation, plus `bias` [OC]: [OL, OC], time fastest. A
    /// CPU-only custom op ([`crate::cpu_kernels::conv_f32`]: the im2col rows built in
    /// cache, the kernel read in place). Refuses any other operand.
    pub fn conv_1d_f32_time_major_cpu<'a>(
        &'a self,
        kernel: Tensor<'a>,
        input: Tensor<'a>,
        conv: [i32; 3],
        bias: Option<Tensor<'a>>,
    ) -> super::Result<Tensor<'a>> {
        let steps =
            q8::ConvSteps::checked(kernel.ne()[0], conv).map_err(|reason| GgmlError::Operand {
                op: "conv_1d_f32_time_major_cpu",
                reason,
            })?;
        let op = CustomOp::F32Conv { steps };
        let mut args = vec![
            self.contiguous_f32(op, kernel, "the kernel")?,
            self.contiguous_f32(op, input, "the input")?,
        ];
        if let Some(b) = bias {
            args.push(self.contiguous_f32(op, b, "the bias")?);
        }
        self.custom_op(op, &args)
    }

    /// The custom op of [`Context::conv_1d_q8_packed_time_major`]: `packed` over `input`
    /// [L, IC] with `steps`, plus `bias`; [OL, OC]. Refuses any other operand.
    pub(super) fn conv_q8_packed<'a>(
        &'a self,
        packed: Tensor<'a>,
        input: Tensor<'a>,
        steps: q8::ConvSteps,
        bias: Option<Tensor<'a>>,
    ) -> super::Result<Tensor<'a>> {
        let op = CustomOp::Q8Conv { steps };
        let mut args = vec![packed, self.contiguous_f32(op, input, "the input")?];
        if let Some(b) = bias {
            args.push(self.contiguous_f32(op, b, "the bias")?);
        }
        self.custom_op(op, &args)
    }

    /// Multi-head self-attention without a mask, scale 1/sqrt(64), as a CPU-only custom
    /// op: `qkv` is [3 d, t] f32 (each row the stacked query, key and value), the
    /// result [d, t] with heads side by side. Needs [`kernels::attention_kernel_available`] and
    /// `d = heads * ATTENTION_HEAD_DIM`. The whole score row of a query stays in cache,
    /// so the softmax is exact, with no running rescale. Refuses any other operand.
    pub fn self_attention_cpu<'a>(
        &'a self,
        qkv: Tensor<'a>,
        heads: usize,
    ) -> super::Result<Tensor<'a>> {
        let op = CustomOp::SelfAttention { heads };
        let qkv = self.contiguous_f32(op, qkv, "the stacked q, k, v")?;
        self.custom_op(op, &[qkv])
    }

    /// `x W^T` for an f32 weight packed by [`crate::cpu_kernels::pack_f32_transposed`] (a contiguous f32
    /// tensor [n, k], `n` whole runs of [`crate::cpu_kernels::F32_PRODUCT_COLS`]) and f32 activations `x`
    /// [k, m]: the result is [n, m]. A CPU-only custom op; needs
    /// [`kernels::attention_kernel_available`] (the same vector code). Refuses any other operand.
    pub fn mul_mat_f32_packed<'a>(
        &'a self,
        packed: Tensor<'a>,
        x: Tensor<'a>,
    ) -> super::Result<Tensor<'a>> {
        let op = CustomOp::F32Packed;
        let x = self.contiguous_f32(op, x, "the activations")?;
        self.custom_op(op, &[packed, x])
    }

    /// [`Context::mul_mat`] of an f16 weight `w` [k, n, b] (rows contiguous, at least 4
    /// rows) and f32 activations `x` [k, m, b], as a CPU-only
    /// custom op with F16C conversion: the result is [n, m, b]. Needs
    /// [`crate::cpu_kernels::f16_product_available`]. For products that are a read of a large weight: the
    /// decoder's logits and its cross-attention over the f16 cache (strided views
    /// of it, one batch per head). Unlike ggml's f16 product, the activations stay
    /// f32 (ggml rounds them to f16). Refuses any other operand.
    pub fn mul_mat_f16_cpu<'a>(
        &'a self,
        w: Tensor<'a>,
        x: Tensor<'a>,
    ) -> super::Result<Tensor<'a>> {
        let op = CustomOp::F16Product;
        let x = if x.operand().row_contiguous() {
            x
        } else {
            self.contiguous_f32(op, x, "the activations")?
        };
        self.custom_op(op, &[w, x])
    }

    /// A decoder step's logits in two stages ([`crate::cpu_kernels::refine`]): from
    /// `q8` (the q8_0 product of the f16 weight `w`'s first rows, at most `head`, with
    /// `x` [k, 1]) and the weight's q8_0 `bounds`, the f16 product of `w` [k, n] and
    /// `x` where a row could hold the largest logit below `head` not in `ban`, and for
    /// every row from `head` on; `q8`'s value elsewhere. Every row is the f16 product's
    /// when `whole` (i32 [1]) is not 0. A CPU-only custom op; refuses any other operand.
    #[allow(clippy::too_many_arguments)]
    pub fn refine_logits_cpu<'a>(
        &'a self,
        q8: Tensor<'a>,
        w: Tensor<'a>,
        x: Tensor<'a>,
        bounds: Tensor<'a>,
        whole: Tensor<'a>,
        ban: Option<Tensor<'a>>,
        head: usize,
    ) -> super::Result<Tensor<'a>> {
        let op = CustomOp::RefineLogits { head };
        let mut args = vec![
            self.contiguous_f32(op, q8, "the q8_0 logits")?,
            w,
            self.contiguous_f32(op, x, "the activations")?,
            bounds,
            whole,
        ];
        args.extend(ban);
        self.custom_op(op, &args)
    }

    /// A CPU-only custom op node: the f32 tensor `op` computes from `args`, on every
    /// worker thread, once [`CustomOp::check`] accepted them (its callback checks
    /// them again when it runs).
    fn custom_op<'a>(&'a self, op: CustomOp, args: &[Tensor<'a>]) -> super::Result<Tensor<'a>> {
        let operands: Vec<Operand> = args.iter().map(Tensor::operand).collect();
        let ne = op.check(&operands).map_err(|reason| GgmlError::Operand {
            op: op.name(),
            reason,
        })?;
        let state = Box::new(OpState::new(op));
        let userdata = (&*state as *const OpState)
            .cast_mut()
            .cast::<std::os::raw::c_void>();
        self.ops.borrow_mut().push(state);
        let mut raws: Vec<*mut sys::ggml_tensor> = args.iter().map(|t| t.raw()).collect();
        // SAFETY: `raws` are tensors of this context; the callback matches
        // ggml_custom_op_t and reads userdata as the boxed OpState this context keeps
        // for as long as it (and so every graph that computes the node) lives.
        Ok(self.wrap(unsafe {
            sys::ggml_custom_4d(
                self.raw.as_ptr(),
                sys::GGML_TYPE_F32,
                ne[0],
                ne[1],
                ne[2],
                ne[3],
                raws.as_mut_ptr(),
                raws.len() as i32,
                Some(callback),
                -1, // GGML_N_TASKS_MAX: every worker thread
                userdata,
            )
        }))
    }

    /// `a` itself when it is contiguous f32, a contiguous copy when it is f32 laid out
    /// otherwise; an error naming `op` and `what` for any other type.
    fn contiguous_f32<'a>(
        &'a self,
        op: CustomOp,
        a: Tensor<'a>,
        what: &str,
    ) -> super::Result<Tensor<'a>> {
        let operand = a.operand();
        if operand.dtype != Some(DType::F32) {
            return Err(GgmlError::Operand {
                op: op.name(),
                reason: format!("{what}: {}, expected F32", operand.type_name()),
            });
        }
        Ok(if operand.contiguous() {
            a
        } else {
            self.cont(a)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ggml::tests::cpu;
    use crate::ggml::{Buffer, Scheduler};

    /// True when this CPU runs the custom ops' kernels; otherwise says so, and fails
    /// under CI (where a test that asserts nothing must not pass).
    fn kernels_here() -> bool {
        use crate::cpu_kernels as k;
        let here = k::q8_kernel_available()
            && k::attention_kernel_available()
            && k::f16_product_available();
        if !here {
            eprintln!("this CPU lacks AVX2/FMA/F16C: the custom op checks were not exercised");
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run on a CPU with AVX2"
            );
        }
        here
    }

    /// Asserts `r` is the refusal of `op` whose reason contains `needle`.
    fn refused(r: crate::ggml::Result<Tensor<'_>>, op: &str, needle: &str) {
        match r {
            Err(GgmlError::Operand { op: o, reason }) => {
                assert_eq!(o, op, "{reason}");
                assert!(reason.contains(needle), "{op}: '{reason}' lacks '{needle}'");
            }
            Err(e) => panic!("{op}: refused for another reason: {e}"),
            Ok(_) => panic!("{op}: accepted an operand it must refuse ({needle})"),
        }
    }

    /// A packed q8_0 weight of `k` x `n` as an I8 tensor, its f32 stand-in, and the
    /// activations and bias that fit it.
    const Q8_K: i64 = 64;
    const Q8_N: i64 = 32;

    fn q8_weight(ctx: &Context, dtype: DType) -> Tensor<'_> {
        let ne = [
            crate::cpu_kernels::q8::CELL_BYTES as i64,
            Q8_K / 32,
            Q8_N / crate::cpu_kernels::q8::GROUP_COLS as i64,
        ];
        ctx.new_tensor(dtype, &ne, "w")
    }

    #[test]
    fn the_q8_product_refuses_each_wrong_operand() {
        if !kernels_here() {
            return;
        }
        let ctx = Context::new(64, 0).unwrap();
        let op = "mul_mat_q8_packed";
        let w = q8_weight(&ctx, DType::I8);
        let x = ctx.new_tensor(DType::F32, &[Q8_K, 3], "x");
        let b = ctx.new_tensor(DType::F32, &[Q8_N], "b");
        let out = ctx.mul_mat_q8_packed(w, x, Some(b)).unwrap();
        assert_eq!(out.ne(), [Q8_N, 3, 1, 1]);
        let x16 = ctx.new_tensor(DType::F16, &[Q8_K, 3], "x16");
        refused(
            ctx.mul_mat_q8_packed(w, x16, None),
            op,
            "the activations: F16",
        );
        let x_short = ctx.new_tensor(DType::F32, &[Q8_K - 32, 3], "xs");
        refused(
            ctx.mul_mat_q8_packed(w, x_short, None),
            op,
            "the activations: dims",
        );
        let x3 = ctx.new_tensor(DType::F32, &[Q8_K, 3, 2], "x3");
        refused(
            ctx.mul_mat_q8_packed(w, x3, None),
            op,
            "the activations: dims",
        );
        let b_short = ctx.new_tensor(DType::F32, &[Q8_N - 1], "bs");
        refused(
            ctx.mul_mat_q8_packed(w, x, Some(b_short)),
            op,
            "the bias: dims",
        );
        let b16 = ctx.new_tensor(DType::F16, &[Q8_N], "b16");
        refused(ctx.mul_mat_q8_packed(w, x, Some(b16)), op, "the bias: F16");
        let w_f32 = q8_weight(&ctx, DType::F32);
        refused(ctx.mul_mat_q8_packed(w_f32, x, None), op, "the weight: F32");
        let w_q8 = ctx.new_tensor(DType::Q8_0, &[Q8_K, Q8_N], "wq");
        refused(
            ctx.mul_mat_q8_packed(w_q8, x, None),
            op,
            "not a packed q8_0 weight",
        );
        let w_t = ctx.transpose(ctx.new_tensor(
            DType::I8,
            &[crate::cpu_kernels::q8::CELL_BYTES as i64, 2],
            "wt",
        ));
        refused(
            ctx.mul_mat_q8_packed(w_t, x, None),
            op,
            "not a packed q8_0 weight",
        );
    }

    #[test]
    fn the_f32_product_refuses_each_wrong_operand() {
        if !kernels_here() {
            return;
        }
        let ctx = Context::new(64, 0).unwrap();
        let op = "mul_mat_f32_packed";
        let w = ctx.new_tensor(DType::F32, &[64, 12], "w");
        let x = ctx.new_tensor(DType::F32, &[12, 5], "x");
        assert_eq!(ctx.mul_mat_f32_packed(w, x).unwrap().ne(), [64, 5, 1, 1]);
        let x16 = ctx.new_tensor(DType::F16, &[12, 5], "x16");
        refused(ctx.mul_mat_f32_packed(w, x16), op, "the activations: F16");
        let x_k = ctx.new_tensor(DType::F32, &[13, 5], "xk");
        refused(ctx.mul_mat_f32_packed(w, x_k), op, "the activations: dims");
        let w_n = ctx.new_tensor(DType::F32, &[48, 12], "wn");
        refused(ctx.mul_mat_f32_packed(w_n, x), op, "not whole runs of 64");
        let w16 = ctx.new_tensor(DType::F16, &[64, 12], "w16");
        refused(ctx.mul_mat_f32_packed(w16, x), op, "the weight: F16");
        let w_view = ctx.view_2d_rows(ctx.new_tensor(DType::F32, &[128, 12], "wide"), 64, 12, 0);
        refused(
            ctx.mul_mat_f32_packed(w_view, x),
            op,
            "the weight: not contiguous",
        );
    }

    #[test]
    fn transpose_takes_f32_rows_of_one_batch() {
        if !kernels_here() {
            return;
        }
        let ctx = Context::new(64, 0).unwrap();
        let op = "transpose_cpu";
        let x = ctx.new_tensor(DType::F32, &[7, 3], "x");
        assert_eq!(ctx.transpose_cpu(x).unwrap().ne(), [3, 7, 1, 1]);
        let rows = ctx.view_2d_rows(ctx.new_tensor(DType::F32, &[16, 3], "wide"), 7, 3, 0);
        assert_eq!(ctx.transpose_cpu(rows).unwrap().ne(), [3, 7, 1, 1]);
        refused(
            ctx.transpose_cpu(ctx.transpose(x)),
            op,
            "not contiguous by rows",
        );
        let x16 = ctx.new_tensor(DType::F16, &[7, 3], "x16");
        refused(ctx.transpose_cpu(x16), op, "the input: F16");
        let batched = ctx.new_tensor(DType::F32, &[7, 3, 2], "batched");
        refused(ctx.transpose_cpu(batched), op, "the input: dims");
    }

    #[test]
    fn gelu_refuses_what_is_not_f32() {
        if !kernels_here() {
            return;
        }
        let ctx = Context::new(64, 0).unwrap();
        let op = "gelu_erf_cpu";
        let x = ctx.new_tensor(DType::F32, &[7, 3], "x");
        assert_eq!(ctx.gelu_erf_cpu(x).unwrap().ne(), [7, 3, 1, 1]);
        let strided = ctx.transpose(x);
        assert_eq!(
            ctx.gelu_erf_cpu(strided).unwrap().ne(),
            [3, 7, 1, 1],
            "copied first"
        );
        let x16 = ctx.new_tensor(DType::F16, &[7, 3], "x16");
        refused(ctx.gelu_erf_cpu(x16), op, "the input: F16");
        let ids = ctx.new_i32_tensor(&[7], "ids");
        refused(ctx.gelu_erf_cpu(ids), op, "the input: I32");
        let bytes = ctx.new_tensor(DType::I8, &[7], "bytes");
        refused(ctx.gelu_erf_cpu(bytes), op, "the input: I8");
    }

    #[test]
    fn attention_refuses_each_wrong_operand() {
        if !kernels_here() {
            return;
        }
        let ctx = Context::new(64, 0).unwrap();
        let op = "self_attention_cpu";
        let qkv = ctx.new_tensor(DType::F32, &[3 * 128, 10], "qkv");
        assert_eq!(
            ctx.self_attention_cpu(qkv, 2).unwrap().ne(),
            [128, 10, 1, 1]
        );
        refused(ctx.self_attention_cpu(qkv, 3), op, ": dims");
        refused(ctx.self_attention_cpu(qkv, 0), op, "at least one head");
        let qkv16 = ctx.new_tensor(DType::F16, &[3 * 128, 10], "qkv16");
        refused(
            ctx.self_attention_cpu(qkv16, 2),
            op,
            "the stacked q, k, v: F16",
        );
        let batched = ctx.new_tensor(DType::F32, &[3 * 128, 10, 2], "b");
        refused(ctx.self_attention_cpu(batched, 2), op, ": dims");
    }

    #[test]
    fn the_f16_product_refuses_each_wrong_operand() {
        if !kernels_here() {
            return;
        }
        let ctx = Context::new(64, 0).unwrap();
        let op = "mul_mat_f16_cpu";
        let w = ctx.new_tensor(DType::F16, &[32, 8, 2], "w");
        let x = ctx.new_tensor(DType::F32, &[32, 3, 2], "x");
        assert_eq!(ctx.mul_mat_f16_cpu(w, x).unwrap().ne(), [8, 3, 2, 1]);
        // The fallback for activations that are not row-contiguous f32 used to pass
        // an f16 tensor through, which the kernel read as f32.
        let x16 = ctx.new_tensor(DType::F16, &[32, 3, 2], "x16");
        refused(ctx.mul_mat_f16_cpu(w, x16), op, "the activations: F16");
        let x_t = ctx.transpose(ctx.new_tensor(DType::F16, &[3, 32, 2], "x16t"));
        refused(ctx.mul_mat_f16_cpu(w, x_t), op, "the activations: F16");
        let x_k = ctx.new_tensor(DType::F32, &[16, 3, 2], "xk");
        refused(ctx.mul_mat_f16_cpu(w, x_k), op, "the activations: dims");
        let x_b = ctx.new_tensor(DType::F32, &[32, 3, 1], "xb");
        refused(ctx.mul_mat_f16_cpu(w, x_b), op, "the activations: dims");
        let w32 = ctx.new_tensor(DType::F32, &[32, 8, 2], "w32");
        refused(ctx.mul_mat_f16_cpu(w32, x), op, "the weight: F32");
        let w3 = ctx.new_tensor(DType::F16, &[32, 3, 2], "w3");
        refused(ctx.mul_mat_f16_cpu(w3, x), op, "fewer than 4");
        let w_t = ctx.transpose(ctx.new_tensor(DType::F16, &[8, 32, 2], "wt"));
        refused(
            ctx.mul_mat_f16_cpu(w_t, x),
            op,
            "the weight: not contiguous by rows",
        );
    }

    #[test]
    fn the_refined_logits_refuse_each_wrong_operand() {
        if !kernels_here() {
            return;
        }
        let ctx = Context::new(64, 0).unwrap();
        let op = "refine_logits_cpu";
        let q8 = ctx.new_tensor(DType::F32, &[32, 1], "q8");
        let w = ctx.new_tensor(DType::F16, &[64, 40], "w");
        let x = ctx.new_tensor(DType::F32, &[64, 1], "x");
        let bounds = ctx.new_tensor(DType::F32, &[4], "bounds");
        let whole = ctx.new_i32_tensor(&[1], "whole");
        let ban = ctx.new_i32_tensor(&[3], "ban");
        let r = ctx.refine_logits_cpu(q8, w, x, bounds, whole, Some(ban), 36);
        assert_eq!(r.unwrap().ne(), [40, 1, 1, 1]);
        refused(
            ctx.refine_logits_cpu(q8, w, x, bounds, whole, None, 30),
            op,
            "do not fit",
        );
        refused(
            ctx.refine_logits_cpu(q8, w, x, bounds, whole, None, 41),
            op,
            "do not fit",
        );
        let w32 = ctx.new_tensor(DType::F32, &[64, 40], "w32");
        refused(
            ctx.refine_logits_cpu(q8, w32, x, bounds, whole, None, 36),
            op,
            "the weight: F32",
        );
        let x2 = ctx.new_tensor(DType::F32, &[64, 2], "x2");
        refused(
            ctx.refine_logits_cpu(q8, w, x2, bounds, whole, None, 36),
            op,
            "the activations: dims",
        );
        let b3 = ctx.new_tensor(DType::F32, &[3], "b3");
        refused(
            ctx.refine_logits_cpu(q8, w, x, b3, whole, None, 36),
            op,
            "the bounds: dims",
        );
        let whole_f = ctx.new_tensor(DType::F32, &[1], "whole_f");
        refused(
            ctx.refine_logits_cpu(q8, w, x, bounds, whole_f, None, 36),
            op,
            "the switch: F32",
        );
        let ban_f = ctx.new_tensor(DType::F32, &[3], "ban_f");
        refused(
            ctx.refine_logits_cpu(q8, w, x, bounds, whole, Some(ban_f), 36),
            op,
            "the banned rows",
        );
        let w_odd = ctx.new_tensor(DType::F16, &[48, 40], "w_odd");
        let x_odd = ctx.new_tensor(DType::F32, &[48, 1], "x_odd");
        let b_odd = ctx.new_tensor(DType::F32, &[3], "b_odd");
        refused(
            ctx.refine_logits_cpu(q8, w_odd, x_odd, b_odd, whole, None, 36),
            op,
            "do not fit",
        );
    }

    #[test]
    fn the_packed_conv_refuses_a_wrong_kernel_or_input() {
        if !kernels_here() {
            return;
        }
        let ctx = Context::new(64, 0).unwrap();
        let op = "conv_1d_f32_packed";
        let w = ctx.new_tensor(DType::F32, &[64, 3 * 4], "w");
        let x = ctx.new_tensor(DType::F32, &[20, 4, 1], "x");
        assert_eq!(
            ctx.conv_1d_f32_packed(w, 3, x, 1, 1).unwrap().ne(),
            [64, 20, 1, 1]
        );
        let x5 = ctx.new_tensor(DType::F32, &[20, 5, 1], "x5");
        refused(
            ctx.conv_1d_f32_packed(w, 3, x5, 1, 1),
            op,
            "expected [L, 4, N]",
        );
        refused(
            ctx.conv_1d_f32_packed(w, 5, x, 1, 1),
            op,
            "not whole kernels",
        );
        let w16 = ctx.new_tensor(DType::F16, &[64, 12], "w16");
        refused(
            ctx.conv_1d_f32_packed(w16, 3, x, 1, 1),
            op,
            "contiguous 2-D f32",
        );
    }

    #[test]
    fn the_fused_snake_agrees_with_ggml_ops_and_refuses_wrong_lengths() {
        if !kernels_here() {
            return;
        }
        let backend = cpu();
        let (t, c) = (301, 6);
        let data = |n: i64, k: f32| -> Vec<f32> {
            (0..n)
                .map(|i| ((i as f32 + k) * 0.37).sin() * (1.0 + k))
                .collect()
        };
        let (xs, gs, bs, al) = (data(t * c, 0.0), data(c, 1.0), data(c, 2.0), data(c, 3.0));
        let mut results = Vec::new();
        for fused in [false, true] {
            let mut sched = Scheduler::new(&[&backend], 64).unwrap();
            let ctx = Context::new(32, 64).unwrap();
            let x = ctx.new_tensor(DType::F32, &[t, c], "x");
            let [g, b, a] = ["g", "b", "a"].map(|n| ctx.new_tensor(DType::F32, &[1, c], n));
            for input in [x, g, b, a] {
                input.mark_input();
            }
            let layers = crate::layers::Layers::with_cpu_kernels(fused);
            let y = layers.ada_in_snake(&ctx, x, 1e-5, g, b, a).unwrap();
            y.mark_output();
            let mut graph = ctx.new_graph(64);
            graph.expand(y);
            sched
                .compute(&mut graph, &[(x, &xs), (g, &gs), (b, &bs), (a, &al)])
                .unwrap();
            results.push(y.read_f32().unwrap());
        }
        // The kernel's sine is within 1.2e-7 of libm's, which ggml calls.
        for (i, (ggml, ours)) in results[0].iter().zip(&results[1]).enumerate() {
            assert!(
                (ggml - ours).abs() <= 1e-6 * (1.0 + ggml.abs()),
                "at {i}: {ggml} vs {ours}"
            );
        }
        assert!(
            results[1].iter().any(|v| v.abs() > 0.5),
            "a result worth comparing"
        );
        let ctx = Context::new(16, 0).unwrap();
        let x = ctx.new_tensor(DType::F32, &[t, c], "x");
        let g = ctx.new_tensor(DType::F32, &[c], "g");
        let short = ctx.new_tensor(DType::F32, &[c - 1], "a");
        refused(
            ctx.ada_in_snake_cpu(x, 1e-5, g, g, short),
            "ada_in_snake_cpu",
            "the Snake alphas: dims [5, 1, 1, 1], expected [6, 1, 1, 1]",
        );
        for eps in [-1e-5, f32::NAN] {
            refused(
                ctx.ada_in_snake_cpu(x, eps, g, g, g),
                "ada_in_snake_cpu",
                "is not a non-negative number",
            );
        }
    }

    #[test]
    fn the_f32_conv_refuses_a_kernel_that_does_not_fit_its_input() {
        if !kernels_here() {
            return;
        }
        let ctx = Context::new(16, 0).unwrap();
        let op = "conv_1d_f32_time_major_cpu";
        let w = ctx.new_tensor(DType::F32, &[3, 8, 5], "w");
        let x = ctx.new_tensor(DType::F32, &[20, 8], "x");
        let b = ctx.new_tensor(DType::F32, &[5], "b");
        let y = ctx
            .conv_1d_f32_time_major_cpu(w, x, [2, 1, 1], Some(b))
            .unwrap();
        assert_eq!(y.ne(), [10, 5, 1, 1]);
        let x7 = ctx.new_tensor(DType::F32, &[20, 7], "x7");
        refused(
            ctx.conv_1d_f32_time_major_cpu(w, x7, [1, 1, 1], None),
            op,
            "the kernel: dims [3, 8, 5, 1], expected [3, 7, 5, 1]",
        );
        let short_bias = ctx.new_tensor(DType::F32, &[4], "b4");
        refused(
            ctx.conv_1d_f32_time_major_cpu(w, x, [1, 1, 1], Some(short_bias)),
            op,
            "the bias",
        );
        let tiny = ctx.new_tensor(DType::F32, &[1, 8], "tiny");
        refused(
            ctx.conv_1d_f32_time_major_cpu(w, tiny, [1, 0, 1], None),
            op,
            "gives no output",
        );
        refused(
            ctx.conv_1d_f32_time_major_cpu(w, x, [1, 1, 0], None),
            op,
            "a step is not positive",
        );
    }

    #[test]
    fn the_fused_q8_conv_refuses_a_kernel_that_does_not_fit_its_input() {
        if !kernels_here() {
            return;
        }
        let ctx = Context::new(16, 0).unwrap();
        let op = "conv_1d_q8_packed_time_major";
        let w = q8_weight(&ctx, DType::I8); // k 64, n 32
        let x = ctx.new_tensor(DType::F32, &[20, 32], "x");
        let y = ctx
            .conv_1d_q8_packed_time_major(w, 2, x, [1, 1, 1], None)
            .unwrap();
        assert_eq!(y.ne(), [21, Q8_N, 1, 1]);
        let x3 = ctx.new_tensor(DType::F32, &[20, 16], "x3");
        refused(
            ctx.conv_1d_q8_packed_time_major(w, 2, x3, [1, 1, 1], None),
            op,
            "not 2 taps over the input's 16 channels",
        );
        refused(
            ctx.conv_1d_q8_packed_time_major(w, 4, x3, [1, 1, 1], None),
            op,
            "16 channels are not whole q8_0 blocks",
        );
        let tiny = ctx.new_tensor(DType::F32, &[1, 32], "tiny");
        refused(
            ctx.conv_1d_q8_packed_time_major(w, 2, tiny, [1, 0, 1], None),
            op,
            "gives no output",
        );
        refused(
            ctx.conv_1d_q8_packed_time_major(w, 2, x, [0, 1, 1], None),
            op,
            "a step is not positive",
        );
    }

    const N: i64 = 64;

    /// Builds a GELU node over `N` host floats (1.0 each), lets `tamper` change the node
    /// or its input after the builder checked them, and returns what the callback's
    /// check and kernel said, with the result when they ran.
    fn gelu_after(
        tamper: impl FnOnce(&mut sys::ggml_tensor, &mut sys::ggml_tensor),
        ith: usize,
        nth: usize,
    ) -> Result<Vec<f32>, String> {
        let ctx = Context::new(4, 0).unwrap();
        let x = ctx.new_tensor(DType::F32, &[N], "x");
        let y = ctx.gelu_erf_cpu(x).unwrap();
        let backend = cpu();
        let _buffer = Buffer::alloc_context(&ctx, &backend).unwrap();
        x.write_f32(&[1.0; N as usize]).unwrap();
        // SAFETY: two distinct live tensors of this context, no other reference to them
        // held while `tamper` changes their fields.
        unsafe { tamper(&mut *y.raw(), &mut *x.raw()) };
        // SAFETY: `y` is a live, allocated node of this context (whatever `tamper` did
        // to its fields, which is what the check must catch).
        unsafe { run_checked(CustomOp::GeluErf, y.raw(), ith, nth) }?;
        Ok(y.read_f32().unwrap())
    }

    fn refused_with(r: Result<Vec<f32>, String>, needle: &str) {
        match r {
            Err(reason) => assert!(reason.contains(needle), "'{reason}' lacks '{needle}'"),
            Ok(_) => panic!("the callback ran the kernel on an operand it must refuse ({needle})"),
        }
    }

    #[test]
    fn the_callback_runs_what_it_accepts() {
        if !kernels_here() {
            return;
        }
        let y = gelu_after(|_, _| {}, 0, 1).unwrap();
        assert_eq!(y.len(), N as usize);
        for v in y {
            assert!((v - 0.841_344_7).abs() < 1e-5, "gelu(1) = {v}");
        }
    }

    #[test]
    fn the_callback_checks_every_operand_again() {
        if !kernels_here() {
            return;
        }
        refused_with(
            gelu_after(|_, x| x.type_ = sys::GGML_TYPE_F16, 0, 1),
            "the input: F16",
        );
        refused_with(
            gelu_after(|_, x| x.type_ = 1000, 0, 1),
            "the input: a type the engine does not use",
        );
        refused_with(
            gelu_after(|y, _| y.type_ = sys::GGML_TYPE_F16, 0, 1),
            "the result: F16",
        );
        refused_with(gelu_after(|_, x| x.ne[0] = 2 * N, 0, 1), "the result: dims");
        refused_with(
            gelu_after(
                |y, x| {
                    x.ne = [N / 2, 2, 1, 1];
                    x.nb[1] *= 2;
                    y.ne = [N / 2, 2, 1, 1];
                },
                0,
                1,
            ),
            "the input: not contiguous",
        );
        refused_with(
            gelu_after(|_, x| x.buffer = std::ptr::null_mut(), 0, 1),
            "operand 0 is not in host memory",
        );
        refused_with(
            gelu_after(|y, x| y.data = x.data, 0, 1),
            "the result overlaps an operand",
        );
        refused_with(gelu_after(|_, _| {}, 1, 1), "thread 1 of 1");
        refused_with(
            gelu_after(|y, _| y.src[0] = std::ptr::null_mut(), 0, 1),
            "takes 1 operands, got 0",
        );
        // SAFETY: a null result is what the check refuses first.
        let null = unsafe { run_checked(CustomOp::GeluErf, std::ptr::null_mut(), 0, 1) };
        assert_eq!(null, Err("ggml passed no result tensor".into()));
    }

    #[test]
    fn a_refusal_in_the_callback_fails_that_compute_and_not_the_next() {
        if !kernels_here() {
            return;
        }
        let backend = cpu();
        let mut sched = Scheduler::new(&[&backend], 16).unwrap();
        let ctx = Context::new(4, 16).unwrap();
        let x = ctx.new_tensor(DType::F32, &[N], "x");
        x.mark_input();
        let y = ctx.gelu_erf_cpu(x).unwrap();
        y.mark_output();
        let mut graph = ctx.new_graph(16);
        graph.expand(y);
        // SAFETY: a live tensor of the graph; the type changes after the builder's check.
        unsafe { (*x.raw()).type_ = sys::GGML_TYPE_F16 };
        let err = sched.compute(&mut graph, &[]).unwrap_err().to_string();
        assert!(err.contains("gelu_erf_cpu: the input: F16"), "{err}");
        // SAFETY: as above, restoring the type the graph was built with.
        unsafe { (*x.raw()).type_ = sys::GGML_TYPE_F32 };
        sched
            .compute(&mut graph, &[(x, &[1.0; N as usize])])
            .unwrap();
        let y = y.read_f32().unwrap();
        assert!((y[0] - 0.841_344_7).abs() < 1e-5, "gelu(1) = {}", y[0]);
    }

    #[test]
    fn the_callback_ignores_a_call_without_its_state() {
        // SAFETY: null userdata is the one case the callback returns on at once.
        unsafe { callback(std::ptr::null_mut(), 0, 1, std::ptr::null_mut()) };
        let state = OpState::new(CustomOp::GeluErf);
        // SAFETY: a live state; a null result is refused before anything is read.
        unsafe {
            callback(
                std::ptr::null_mut(),
                0,
                1,
                (&state as *const OpState).cast_mut().cast(),
            )
        };
        assert_eq!(
            state.take_failure().as_deref(),
            Some("gelu_erf_cpu: ggml passed no result tensor")
        );
        assert_eq!(state.take_failure(), None);
    }
}
