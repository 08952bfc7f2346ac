//! The ggml wrapper: with the CPU kernels ([`crate::cpu_kernels`]), the only code of the
//! workspace that contains `unsafe`.
//!
//! Everything above it works with owned, safe types: [`Context`] (tensor and graph
//! metadata), [`Tensor`] (a handle tied to its context's lifetime), [`Graph`],
//! [`Backend`] and [`Buffer`] (device memory, freed on drop), [`Scheduler`] (runs a graph
//! on a backend with CPU fallback) and GGUF read/write through [`read_gguf`] and
//! [`write_gguf`]. The raw binding is `llama-cpp-sys-2`, used only for its `ggml_*`,
//! `ggml_backend_*` and `gguf_*` functions.
//!
//! This file holds the context, tensor, graph, buffer and scheduler; its submodules the
//! rest: `checks` (what each op demands of its operands, checked before every call into
//! C), `device` (ggml's device registry and backends), `gguf` (model files),
//! `custom_op` (the engine's CPU kernels as custom ops, their builders and their
//! checks), `conv` and `signal` (composite ops), [`hip_arch`], [`log`] and [`profile`].
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::CString;
use std::marker::PhantomData;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Once;

use llama_cpp_sys_2 as sys;

/// Defines [`Context`] methods that each wrap one ggml op of the context and one or
/// more tensors (element-wise maths, layout copies), each after the rule of
/// [`checks`] it names (`if rule`), which panics on operands ggml would abort on.
macro_rules! tensor_ops {
    ($($(#[$doc:meta])* fn $name:ident($($arg:ident),+) => $ffi:ident if $rule:ident;)+) => {
        impl Context {
            $(
                $(#[$doc])*
                pub fn $name<'a>(&'a self, $($arg: Tensor<'a>),+) -> Tensor<'a> {
                    $crate::ggml::checks::$rule(stringify!($name), $(&$arg),+);
                    // SAFETY: the tensors belong to this live context; the rule above
                    // checked that their shapes, types and layouts fit the op.
                    self.wrap(unsafe { sys::$ffi(self.raw.as_ptr(), $($arg.raw()),+) })
                }
            )+
        }
    };
}

mod checks;
mod conv;
mod custom_op;
pub(crate) use custom_op::panic_text;
mod device;
mod gguf;
pub mod hip_arch;
pub mod log;
pub mod profile;
mod signal;
mod transformer;

use checks::{require, require_view_inside, GraphRoom};
use custom_op::{OpState, Operand};
pub use device::{
    backend_library_error, devices, registry_names, vulkan_physical_devices, Backend, CpuThreads,
    DeviceInfo, DeviceType, PoolParams, VulkanPhysicalDevice, THREADPOOL_POLL,
};
pub use gguf::{
    read_gguf, read_gguf_file, read_gguf_metadata_file, write_gguf, GgufContents, GgufValue,
    HostTensor,
};

/// Whether this CPU runs the custom ops' float kernels, asked here by callers of the
/// wrapper (the server's fault tests) that build custom ops.
pub use crate::cpu_kernels::attention_kernel_available;

/// A failure inside ggml, reported with what was being done.
#[derive(Debug, thiserror::Error)]
pub enum GgmlError {
    /// ggml returned a null pointer or a failure status.
    #[error("ggml: {0}")]
    Failed(String),
    /// A GGUF file could not be parsed.
    #[error("not a valid GGUF file: {0}")]
    BadGguf(String),
    /// A custom op was given an operand its kernel cannot read (type, dims, layout).
    #[error("{op}: {reason}")]
    Operand {
        /// The op.
        op: &'static str,
        /// What is wrong with which operand.
        reason: String,
    },
    /// A custom op refused its operands or panicked while the graph computed.
    #[error("graph compute failed: {0}")]
    OpFailed(String),
    /// Writing a file failed (the OS's error: a full disk, no permission).
    #[error("{0}")]
    Write(std::io::Error),
}

type Result<T> = std::result::Result<T, GgmlError>;

/// Tensors of room every context keeps beyond what it was made for, so that the op
/// that eats into it can be refused before the next one writes past the context.
const RESERVED_TENSORS: usize = 8;

/// The most backends one ggml scheduler drives (`GGML_SCHED_MAX_BACKENDS`).
const MAX_SCHEDULED_BACKENDS: usize = 16;

/// Element types the engine stores tensors in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// ggml's 8-bit block quantization: blocks of 32 values, one f16 scale each
    /// (34 bytes per block). Only matrix-multiplication weights use it.
    Q8_0,
    /// Raw bytes: q8_0 weights re-laid out for the CPU kernel
    /// ([`crate::cpu_kernels::PackedQ8`]).
    I8,
    /// 32-bit integers: graph inputs of ids and switches, never a weight.
    I32,
}

impl DType {
    fn raw(self) -> sys::ggml_type {
        match self {
            DType::F32 => sys::GGML_TYPE_F32,
            DType::F16 => sys::GGML_TYPE_F16,
            DType::Q8_0 => sys::GGML_TYPE_Q8_0,
            DType::I8 => sys::GGML_TYPE_I8,
            DType::I32 => sys::GGML_TYPE_I32,
        }
    }

    fn from_raw(raw: sys::ggml_type) -> Option<Self> {
        match raw {
            sys::GGML_TYPE_F32 => Some(DType::F32),
            sys::GGML_TYPE_F16 => Some(DType::F16),
            sys::GGML_TYPE_Q8_0 => Some(DType::Q8_0),
            sys::GGML_TYPE_I8 => Some(DType::I8),
            sys::GGML_TYPE_I32 => Some(DType::I32),
            _ => None,
        }
    }

    /// Bytes per element of the unquantized types; for a block type, the bytes of one
    /// block (use [`DType::nbytes`] for sizes of block types).
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 => 2,
            DType::Q8_0 => 34,
            DType::I8 => 1,
            DType::I32 => 4,
        }
    }

    /// Bytes that `n` elements take (a multiple of the block length for block types).
    pub fn nbytes(self, n: usize) -> usize {
        // SAFETY: a pure size computation on a valid type.
        unsafe { sys::ggml_row_size(self.raw(), n as i64) }
    }

    /// Elements per block: 1 for plain floats, 32 for Q8_0. A quantized row must hold a
    /// whole number of blocks.
    pub fn block_len(self) -> usize {
        match self {
            DType::F32 | DType::F16 | DType::I8 | DType::I32 => 1,
            DType::Q8_0 => 32,
        }
    }

    /// The ggml type number, as stored in legacy ggml files.
    pub fn ggml_id(self) -> u32 {
        self.raw()
    }

    /// The type for a ggml type number of a legacy (pre-GGUF) file: only the plain
    /// float types, since those files' loaders size tensors per element.
    pub fn from_ggml_id(id: u32) -> Option<Self> {
        Self::from_raw(id).filter(|t| matches!(t, DType::F32 | DType::F16))
    }
}

/// Converts little-endian IEEE half floats to f32 with ggml's own converter.
pub fn f16_bytes_to_f32(bytes: &[u8]) -> Vec<f32> {
    let n = bytes.len() / 2;
    let halves: Vec<u16> = bytes
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect();
    let mut out = vec![0f32; n];
    // SAFETY: both buffers hold exactly n elements; ggml_fp16_t is a u16.
    unsafe { sys::ggml_fp16_to_fp32_row(halves.as_ptr(), out.as_mut_ptr(), n as i64) };
    out
}

/// Quantizes rows of `row_len` f32 values to `dtype` with ggml's own quantizer (the
/// one ggml's loaders and kernels expect). Errors when the type is not a block type or
/// the rows do not split into whole blocks.
pub fn quantize_rows(dtype: DType, data: &[f32], row_len: usize) -> Result<Vec<u8>> {
    let block = dtype.block_len();
    if block == 1
        || row_len == 0
        || !row_len.is_multiple_of(block)
        || !data.len().is_multiple_of(row_len)
    {
        return Err(GgmlError::Failed(format!(
            "cannot quantize {} values in rows of {row_len} to {dtype:?} (blocks of {block})",
            data.len()
        )));
    }
    let rows = data.len() / row_len;
    let mut out = vec![0u8; dtype.nbytes(row_len) * rows];
    // SAFETY: `out` has room for `rows` quantized rows of `row_len` (ggml_row_size);
    // `data` holds rows * row_len floats; Q8_0 needs no importance matrix.
    let written = unsafe {
        sys::ggml_quantize_chunk(
            dtype.raw(),
            data.as_ptr(),
            out.as_mut_ptr().cast(),
            0,
            rows as i64,
            row_len as i64,
            std::ptr::null(),
        )
    };
    if written != out.len() {
        return Err(GgmlError::Failed(format!(
            "quantizer wrote {written} bytes, expected {}",
            out.len()
        )));
    }
    Ok(out)
}

static INIT: Once = Once::new();

/// glibc's `mmap` threshold the engine sets (1 MiB): see [`return_freed_weights_to_the_os`].
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD_BYTES: i32 = 1 << 20;

/// Makes glibc serve every allocation of [`MMAP_THRESHOLD_BYTES`] or more with `mmap`,
/// so that freeing it returns the memory to the system. By default glibc raises that
/// threshold each time such a block is freed (up to 32 MiB), after which the host copies
/// of the weights, freed batch by batch as they are uploaded, stay in the heap and
/// loading Whisper base peaks about 37 MiB higher (measured with `--task info`). A
/// `MALLOC_MMAP_THRESHOLD_` in the environment is the user's choice and wins.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn return_freed_weights_to_the_os() {
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
        // SAFETY: mallopt only changes the allocator's tuning; any value is valid.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) };
    }
}

/// Quietens ggml's logging, makes glibc return freed weight copies to the system (on
/// Linux with glibc) and, in builds with dynamic backends, loads the
/// backend libraries that sit next to the executable (then the build's own backend
/// folder). Idempotent; every public entry point calls it.
pub fn init() {
    INIT.call_once(|| {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        return_freed_weights_to_the_os();
        // SAFETY: the callback is a plain function valid for the whole program.
        unsafe { sys::ggml_log_set(Some(log::callback), std::ptr::null_mut()) };
        if cfg!(feature = "dynamic-backends") {
            let mut dirs = Vec::new();
            if let Some(dir) = std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(Path::to_path_buf))
            {
                dirs.push(dir);
            }
            if let Some(dir) = sys::BACKENDS_DIR {
                dirs.push(dir.into());
            }
            for dir in dirs {
                let has_backend = std::fs::read_dir(&dir)
                    .map(|rd| {
                        rd.flatten().any(|e| {
                            let n = e.file_name().to_string_lossy().to_lowercase();
                            n.contains("ggml-cpu")
                        })
                    })
                    .unwrap_or(false);
                if !has_backend {
                    continue;
                }
                if let Ok(c) = CString::new(dir.to_string_lossy().as_bytes()) {
                    // SAFETY: c is a valid NUL-terminated path.
                    unsafe { sys::ggml_backend_load_all_from_path(c.as_ptr()) };
                }
                log::report_backend_load_errors();
                let _ = device::BACKEND_DIR.set(dir);
                break;
            }
        }
    });
}

// SAFETY: ggml contexts, buffers and schedulers are not tied to the thread that made
// them; these types are not Sync, so one thread at a time uses each of them.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Send for Buffer {}
// SAFETY: as above.
unsafe impl Send for Scheduler {}
// SAFETY: after `FrozenTensors::new` nothing writes the tensors' metadata or data, and
// the one method reads ggml's tensor list: graphs on many threads may read them at once.
unsafe impl Sync for FrozenTensors {}

/// A context of tensors and the buffer holding their values, written once and then only
/// read (model weights): it is `Sync`, so that model workers on several threads build
/// graphs over the same tensors instead of each holding a copy.
pub struct FrozenTensors {
    ctx: Context,
    _buf: Buffer,
}

impl FrozenTensors {
    /// Freezes `ctx`, whose tensors `buf` holds (already written, no graph in it).
    pub fn new(ctx: Context, buf: Buffer) -> Self {
        FrozenTensors { ctx, _buf: buf }
    }

    /// The tensor named `name`.
    pub fn tensor_by_name(&self, name: &str) -> Option<Tensor<'_>> {
        self.ctx.tensor_by_name(name)
    }

    /// The address where the buffer's memory starts: equal for everything that shares it.
    pub fn base_address(&self) -> usize {
        // SAFETY: live buffer.
        unsafe { sys::ggml_backend_buffer_get_base(self._buf.raw.as_ptr()) as usize }
    }
}

/// A ggml context holding tensor and graph metadata only (no data: `no_alloc`).
pub struct Context {
    raw: NonNull<sys::ggml_context>,
    /// The state of each custom op node, which its callback reaches through ggml's
    /// userdata pointer (boxed: the addresses stay put as the list grows).
    #[allow(clippy::vec_box)]
    ops: RefCell<Vec<Box<OpState>>>,
}

impl Context {
    /// A context with room for `max_tensors` tensors and one graph of `graph_nodes` nodes.
    pub fn new(max_tensors: usize, graph_nodes: usize) -> Result<Self> {
        init();
        // SAFETY: pure size queries.
        let mem_size = unsafe {
            (max_tensors + RESERVED_TENSORS) * sys::ggml_tensor_overhead()
                + sys::ggml_graph_overhead_custom(graph_nodes.max(1), false)
        } + 1024;
        let params = sys::ggml_init_params {
            mem_size,
            mem_buffer: std::ptr::null_mut(),
            no_alloc: true,
        };
        // SAFETY: params are valid; null is handled.
        let raw = NonNull::new(unsafe { sys::ggml_init(params) })
            .ok_or_else(|| GgmlError::Failed("ggml_init failed".into()))?;
        Ok(Context {
            raw,
            ops: RefCell::new(Vec::new()),
        })
    }

    /// The first failure a custom op of this context met in the last compute, clearing
    /// them all.
    fn take_op_failure(&self) -> Option<String> {
        let mut first = None;
        for op in self.ops.borrow().iter() {
            let failure = op.take_failure();
            first = first.or(failure);
        }
        first
    }

    /// The handle of a tensor an op of this context just made. Panics once the op has
    /// eaten into the context's reserve: ggml, out of room, returns a null object and
    /// writes through it, so the next op must not start without room for its tensors.
    fn wrap(&self, t: *mut sys::ggml_tensor) -> Tensor<'_> {
        let raw = NonNull::new(t).expect("ggml context: an op returned no tensor");
        // SAFETY: pure queries on the live context.
        let reserve = unsafe { RESERVED_TENSORS * sys::ggml_tensor_overhead() };
        require(self.free_bytes() >= reserve, "context", || {
            "room for its tensors is used up; make the context larger".into()
        });
        Tensor {
            raw,
            _ctx: PhantomData,
        }
    }

    /// Bytes of the context's memory not yet taken by tensors or graphs.
    fn free_bytes(&self) -> usize {
        // SAFETY: pure queries on the live context.
        unsafe {
            sys::ggml_get_mem_size(self.raw.as_ptr())
                .saturating_sub(sys::ggml_used_mem(self.raw.as_ptr()))
        }
    }

    /// A tensor of this context by name.
    pub fn tensor_by_name(&self, name: &str) -> Option<Tensor<'_>> {
        let c = CString::new(name).ok()?;
        // SAFETY: the context is live; null means not found.
        let t = unsafe { sys::ggml_get_tensor(self.raw.as_ptr(), c.as_ptr()) };
        NonNull::new(t).map(|raw| Tensor {
            raw,
            _ctx: PhantomData,
        })
    }

    /// A new tensor with dims in ggml order (`ne[0]` varies fastest).
    pub fn new_tensor(&self, dtype: DType, ne: &[i64], name: &str) -> Tensor<'_> {
        checks::new_dims("new_tensor", dtype.block_len() as i64, ne);
        // SAFETY: ne has ne.len() elements; the context is live.
        let t = unsafe {
            sys::ggml_new_tensor(self.raw.as_ptr(), dtype.raw(), ne.len() as i32, ne.as_ptr())
        };
        let t = self.wrap(t);
        t.set_name(name);
        t
    }

    /// Graph inputs of one type, one per shape in `shapes`, as consecutive views of
    /// one input tensor: a run that writes every view copies that tensor once (one
    /// transfer to a device instead of one per input; [`Scheduler::compute_with`]).
    pub fn new_inputs(&self, dtype: DType, shapes: &[&[i64]], name: &str) -> Vec<Tensor<'_>> {
        for ne in shapes {
            checks::new_dims("new_inputs", dtype.block_len() as i64, ne);
        }
        require(dtype.block_len() == 1, "new_inputs", || {
            format!("{dtype:?} is a block type; inputs are of single values")
        });
        let lens: Vec<i64> = shapes.iter().map(|ne| ne.iter().product()).collect();
        let whole = self.new_tensor(dtype, &[lens.iter().sum::<i64>().max(1)], name);
        whole.mark_input();
        let mut at = 0usize;
        shapes
            .iter()
            .zip(&lens)
            .enumerate()
            .map(|(i, (ne, &len))| {
                let part = self.reshape(self.view_1d(whole, len, at), ne);
                part.set_name(&format!("{name}.{i}"));
                at += len as usize;
                part
            })
            .collect()
    }

    /// The inputs `shapes` declared, made as [`Self::new_inputs`] makes them.
    pub fn make_inputs(&self, dtype: DType, shapes: &InputShapes, name: &str) -> Inputs<'_> {
        let list: Vec<&[i64]> = shapes.0.iter().map(Vec::as_slice).collect();
        Inputs(self.new_inputs(dtype, &list, name))
    }

    /// Matrix product: `a` is [k, m], `b` is [k, n], the result is [m, n].
    pub fn mul_mat<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>) -> Tensor<'a> {
        checks::product(&a, &b);
        // SAFETY: tensors belong to this context; their shapes, types and layouts fit
        // (checked above).
        self.wrap(unsafe { sys::ggml_mul_mat(self.raw.as_ptr(), a.raw(), b.raw()) })
    }

    /// Softmax along `ne[0]` of `a * scale` (one fused op, without a separate scale).
    pub fn soft_max_scaled<'a>(&'a self, a: Tensor<'a>, scale: f32) -> Tensor<'a> {
        checks::require_contiguous_of("soft_max", "the input", &a, &[DType::F32]);
        // SAFETY: tensors belong to this context; a null mask means none.
        self.wrap(unsafe {
            sys::ggml_soft_max_ext(self.raw.as_ptr(), a.raw(), std::ptr::null_mut(), scale, 0.0)
        })
    }

    /// The index of the largest value of each row of the f32 matrix `a`: i32 [rows].
    /// Which of several equal largest values is the backend's choice (ggml's CPU takes
    /// the last), and ggml-cuda gives -1 for a row with no value above -f32::MAX (all
    /// -inf or NaN): a row looked up by its argmax ([`Self::get_rows`]) needs a finite
    /// value in it.
    pub fn argmax<'a>(&'a self, a: Tensor<'a>) -> Tensor<'a> {
        checks::require_contiguous_of("argmax", "the input", &a, &[DType::F32]);
        let [n0, _, n2, n3] = a.ne();
        require(
            n2 == 1 && n3 == 1 && n0 <= i64::from(i32::MAX),
            "argmax",
            || {
                format!(
                    "the input {:?} must be a matrix with rows of i32 length",
                    a.ne()
                )
            },
        );
        // SAFETY: a contiguous f32 matrix of this context (checked above).
        self.wrap(unsafe { sys::ggml_argmax(self.raw.as_ptr(), a.raw()) })
    }

    /// Fused scaled dot-product attention without a mask: `q` is [head_dim, q_len, heads],
    /// `k` and `v` are [head_dim, kv_len, heads] (the same type, f32 or f16); the result
    /// is [head_dim, heads, q_len]. Long queries run tiled, never materialising the
    /// q_len x kv_len scores.
    pub fn flash_attn<'a>(
        &'a self,
        q: Tensor<'a>,
        k: Tensor<'a>,
        v: Tensor<'a>,
        scale: f32,
    ) -> Tensor<'a> {
        checks::attention(&q, &k, &v);
        // SAFETY: tensors belong to this context (their dims, types and layouts checked
        // above); a null mask means none.
        self.wrap(unsafe {
            sys::ggml_flash_attn_ext(
                self.raw.as_ptr(),
                q.raw(),
                k.raw(),
                v.raw(),
                std::ptr::null_mut(),
                scale,
                0.0,
                0.0,
            )
        })
    }

    /// Reorders axes: axis `i` of `a` becomes axis `axes[i]` of the result.
    pub fn permute<'a>(&'a self, a: Tensor<'a>, axes: [i32; 4]) -> Tensor<'a> {
        let mut sorted = axes;
        sorted.sort_unstable();
        require(sorted == [0, 1, 2, 3], "permute", || {
            format!("axes {axes:?} are not an order of 0, 1, 2, 3")
        });
        // SAFETY: as above; the axes are a permutation.
        self.wrap(unsafe {
            sys::ggml_permute(
                self.raw.as_ptr(),
                a.raw(),
                axes[0],
                axes[1],
                axes[2],
                axes[3],
            )
        })
    }

    /// Same data, new shape (element count must match; `a` must be contiguous).
    pub fn reshape<'a>(&'a self, a: Tensor<'a>, ne: &[i64]) -> Tensor<'a> {
        let ctx = self.raw.as_ptr();
        let count = ne
            .iter()
            .try_fold(1i64, |n, &d| (d >= 0).then(|| n.checked_mul(d)).flatten());
        require(count == Some(a.len() as i64), "reshape", || {
            format!("{} elements cannot take dims {ne:?}", a.len())
        });
        // SAFETY: a pure layout query on a live tensor.
        let contiguous = unsafe { sys::ggml_is_contiguous(a.raw()) };
        require(contiguous, "reshape", || {
            "the tensor is not contiguous".into()
        });
        // SAFETY: as above; the element count matches and the tensor is contiguous.
        self.wrap(unsafe {
            match ne {
                [a0] => sys::ggml_reshape_1d(ctx, a.raw(), *a0),
                [a0, a1] => sys::ggml_reshape_2d(ctx, a.raw(), *a0, *a1),
                [a0, a1, a2] => sys::ggml_reshape_3d(ctx, a.raw(), *a0, *a1, *a2),
                [a0, a1, a2, a3] => sys::ggml_reshape_4d(ctx, a.raw(), *a0, *a1, *a2, *a3),
                _ => panic!("reshape takes 1 to 4 dims"),
            }
        })
    }

    /// A 1-D view of `len` elements starting at element `offset` of a contiguous tensor.
    pub fn view_1d<'a>(&'a self, a: Tensor<'a>, len: i64, offset_elems: usize) -> Tensor<'a> {
        let esize = a.element_size().expect("views of unblocked types");
        require_view_inside(
            "view_1d",
            &a,
            &[len],
            &[esize],
            offset_elems.saturating_mul(esize),
        );
        // SAFETY: the view lies inside the tensor (checked above).
        self.wrap(unsafe {
            sys::ggml_view_1d(
                self.raw.as_ptr(),
                a.raw(),
                len,
                offset_elems.saturating_mul(esize),
            )
        })
    }

    /// A 2-D view [ne0, ne1] with the parent's row stride, starting at element `offset`
    /// of the first row.
    pub fn view_2d_rows<'a>(
        &'a self,
        a: Tensor<'a>,
        ne0: i64,
        ne1: i64,
        offset_elems: usize,
    ) -> Tensor<'a> {
        let esize = a.element_size().expect("views of unblocked types");
        // SAFETY: the tensor is live while its context is.
        let row = unsafe { (*a.raw()).nb[1] };
        require_view_inside(
            "view_2d_rows",
            &a,
            &[ne0, ne1],
            &[esize, row],
            offset_elems.saturating_mul(esize),
        );
        // SAFETY: the view lies inside the tensor (checked above).
        self.wrap(unsafe {
            sys::ggml_view_2d(
                self.raw.as_ptr(),
                a.raw(),
                ne0,
                ne1,
                row,
                offset_elems.saturating_mul(esize),
            )
        })
    }

    /// 1-D convolution (PyTorch cross-correlation) computed in f32: `kernel` is
    /// [K, IC, OC], `input` is [L, IC, N]; returns [OC, OL, N] (channels fastest).
    pub fn conv_1d_f32<'a>(
        &'a self,
        kernel: Tensor<'a>,
        input: Tensor<'a>,
        stride: i32,
        pad: i32,
    ) -> Tensor<'a> {
        self.conv_1d_f32_dilated(kernel, input, stride, pad, 1)
    }

    /// [`Context::conv_1d_f32`] with the kernel packed for the engine's f32 product:
    /// `packed` is [OC, IC*K] from [`crate::cpu_kernels::pack_f32_transposed`] of the [K, IC, OC] kernel
    /// (read as [IC*K, OC]). The im2col step takes its shape from a [K, IC, OC] reshape
    /// of `packed` (it reads the shape only). Needs [`attention_kernel_available`].
    /// Refuses a weight that is not contiguous f32 [OC, IC*K] or an input without IC
    /// channels.
    pub fn conv_1d_f32_packed<'a>(
        &'a self,
        packed: Tensor<'a>,
        kernel_width: i64,
        input: Tensor<'a>,
        stride: i32,
        pad: i32,
    ) -> Result<Tensor<'a>> {
        let refuse = |reason: String| GgmlError::Operand {
            op: "conv_1d_f32_packed",
            reason,
        };
        let w = packed.operand();
        let [oc, ick, _, _] = w.ne;
        if w.dtype != Some(DType::F32) || !w.contiguous() || w.ne[2] * w.ne[3] != 1 {
            return Err(refuse(format!(
                "the kernel must be contiguous 2-D f32, is {:?} of dims {:?}",
                w.dtype, w.ne
            )));
        }
        if kernel_width < 1 || ick % kernel_width != 0 {
            return Err(refuse(format!(
                "{ick} kernel columns are not whole kernels of width {kernel_width}"
            )));
        }
        let [_, ic, _, one] = input.ne();
        if ic != ick / kernel_width || one != 1 {
            return Err(refuse(format!(
                "the input has dims {:?}, expected [L, {}, N]",
                input.ne(),
                ick / kernel_width
            )));
        }
        // im2col reads only the shape of its kernel operand: a [K, IC, OC] reshape of
        // the contiguous packed weight (checked above) has it.
        let shape = self.reshape(packed, &[kernel_width, ick / kernel_width, oc]);
        let cols = self.im2col_1d(shape, input, [stride, pad, 1]);
        let [_, ol, n, _] = cols.ne();
        let c2 = self.reshape(cols, &[ick, ol * n]);
        let out = self.mul_mat_f32_packed(packed, c2)?;
        Ok(self.reshape(out, &[oc, ol, n]))
    }

    /// A new 32-bit integer tensor (token ids, row indices), dims in ggml order.
    pub fn new_i32_tensor(&self, ne: &[i64], name: &str) -> Tensor<'_> {
        checks::new_dims("new_i32_tensor", 1, ne);
        // SAFETY: ne has ne.len() elements; the context is live.
        let t = unsafe {
            sys::ggml_new_tensor(
                self.raw.as_ptr(),
                sys::GGML_TYPE_I32,
                ne.len() as i32,
                ne.as_ptr(),
            )
        };
        let t = self.wrap(t);
        t.set_name(name);
        t
    }

    /// Normalises each row (along `ne[0]`) to zero mean and unit variance.
    pub fn norm<'a>(&'a self, a: Tensor<'a>, eps: f32) -> Tensor<'a> {
        checks::require_rows_of("norm", "the input", &a, &[DType::F32]);
        require(eps >= 0.0, "norm", || format!("eps {eps} is negative"));
        // SAFETY: tensors belong to this context; an f32 input of adjacent row values
        // and a non-negative eps (checked above).
        self.wrap(unsafe { sys::ggml_norm(self.raw.as_ptr(), a.raw(), eps) })
    }

    /// Multiplies every element by `s`.
    pub fn scale<'a>(&'a self, a: Tensor<'a>, s: f32) -> Tensor<'a> {
        checks::require_contiguous_of("scale", "the input", &a, &[DType::F32]);
        // SAFETY: a contiguous f32 tensor of this context (checked above).
        self.wrap(unsafe { sys::ggml_scale(self.raw.as_ptr(), a.raw(), s) })
    }

    /// Softmax along `ne[0]`.
    pub fn soft_max<'a>(&'a self, a: Tensor<'a>) -> Tensor<'a> {
        checks::require_contiguous_of("soft_max", "the input", &a, &[DType::F32]);
        // SAFETY: as above.
        self.wrap(unsafe { sys::ggml_soft_max(self.raw.as_ptr(), a.raw()) })
    }

    /// Causal mask: sets element (i, j) to -inf where `i > n_past + j` (`i` along `ne[0]`).
    pub fn diag_mask_inf<'a>(&'a self, a: Tensor<'a>, n_past: i32) -> Tensor<'a> {
        checks::require_contiguous_of("diag_mask_inf", "the input", &a, &[DType::F32]);
        require(n_past >= 0, "diag_mask_inf", || {
            format!("n_past {n_past} is negative")
        });
        // SAFETY: as above; n_past is not negative.
        self.wrap(unsafe { sys::ggml_diag_mask_inf(self.raw.as_ptr(), a.raw(), n_past) })
    }

    /// Rows of `a` picked by the i32 indices in `rows` (an embedding lookup).
    pub fn get_rows<'a>(&'a self, a: Tensor<'a>, rows: Tensor<'a>) -> Tensor<'a> {
        checks::row_indices(&a, &rows);
        // SAFETY: as above; the indices are I32 inputs of fitting dims, whose values the
        // scheduler checks before the graph runs.
        self.wrap(unsafe { sys::ggml_get_rows(self.raw.as_ptr(), a.raw(), rows.raw()) })
    }

    /// Writes the rows of `src` (f32) into the rows of `dest` (f32 or f16, typically a
    /// persistent cache) named by the i32 input `indices`, one per source row; the
    /// result is `dest` with the write as its producer, to be expanded into a graph.
    /// Where a copy into a view bakes the place into the graph, the indices are an
    /// input, so one graph serves every position. Out-of-range indices fail the
    /// compute before it runs, as a lookup's do.
    pub fn set_rows<'a>(
        &'a self,
        dest: Tensor<'a>,
        src: Tensor<'a>,
        indices: Tensor<'a>,
    ) -> Tensor<'a> {
        checks::row_writes(&dest, &src, &indices);
        // SAFETY: tensors belong to this context; types, dims and layouts fit (checked
        // above); the index values are checked before every compute.
        self.wrap(unsafe {
            sys::ggml_set_rows(self.raw.as_ptr(), dest.raw(), src.raw(), indices.raw())
        })
    }

    /// Copies `a` into `b` (which may be a view of a persistent tensor); the result is
    /// `b` with the copy as its producer, to be expanded into a graph.
    pub fn cpy<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>) -> Tensor<'a> {
        require(a.len() == b.len(), "cpy", || {
            format!("{} elements do not fit {}", a.len(), b.len())
        });
        let float = |t: &Tensor<'_>| matches!(t.dtype(), Some(DType::F32 | DType::F16));
        require(float(&a) && float(&b), "cpy", || {
            format!(
                "copies {:?} into {:?}; it copies F32 and F16 only",
                a.dtype(),
                b.dtype()
            )
        });
        // SAFETY: as above; the element counts match.
        self.wrap(unsafe { sys::ggml_cpy(self.raw.as_ptr(), a.raw(), b.raw()) })
    }

    /// Concatenates `a` and `b` along axis `dim`.
    pub fn concat<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>, dim: i32) -> Tensor<'a> {
        let (x, y) = (a.ne(), b.ne());
        require(
            (0..4).contains(&dim)
                && a.dtype() == b.dtype()
                && (0..4).all(|d| d == dim as usize || x[d] == y[d]),
            "concat",
            || format!("{x:?} and {y:?} do not join along axis {dim}"),
        );
        checks::unblocked("concat", &a);
        // SAFETY: as above; the types and the other dims match.
        self.wrap(unsafe { sys::ggml_concat(self.raw.as_ptr(), a.raw(), b.raw(), dim) })
    }

    /// A 3-D view [ne0, ne1, ne2] of `a` with strides (in elements) `s1`, `s2` for axes 1
    /// and 2, starting at element `offset_elems`. Axis 0 is contiguous.
    pub fn view_3d<'a>(
        &'a self,
        a: Tensor<'a>,
        ne: [i64; 3],
        s1: usize,
        s2: usize,
        offset_elems: usize,
    ) -> Tensor<'a> {
        let esize = a.element_size().expect("views of unblocked types");
        let strides = [esize, s1.saturating_mul(esize), s2.saturating_mul(esize)];
        require_view_inside(
            "view_3d",
            &a,
            &ne,
            &strides,
            offset_elems.saturating_mul(esize),
        );
        // SAFETY: the view lies inside the tensor (checked above).
        self.wrap(unsafe {
            sys::ggml_view_3d(
                self.raw.as_ptr(),
                a.raw(),
                ne[0],
                ne[1],
                ne[2],
                s1.saturating_mul(esize),
                s2.saturating_mul(esize),
                offset_elems.saturating_mul(esize),
            )
        })
    }

    /// A 4-D view [ne0, ne1, ne2, ne3] of `a` with strides (in elements) `s1`, `s2`,
    /// `s3` for axes 1 to 3, starting at element `offset_elems`. Axis 0 is contiguous.
    pub fn view_4d<'a>(
        &'a self,
        a: Tensor<'a>,
        ne: [i64; 4],
        [s1, s2, s3]: [usize; 3],
        offset_elems: usize,
    ) -> Tensor<'a> {
        let esize = a.element_size().expect("views of unblocked types");
        let bytes = |s: usize| s.saturating_mul(esize);
        let strides = [esize, bytes(s1), bytes(s2), bytes(s3)];
        require_view_inside("view_4d", &a, &ne, &strides, bytes(offset_elems));
        // SAFETY: the view lies inside the tensor (checked above).
        self.wrap(unsafe {
            sys::ggml_view_4d(
                self.raw.as_ptr(),
                a.raw(),
                ne[0],
                ne[1],
                ne[2],
                ne[3],
                bytes(s1),
                bytes(s2),
                bytes(s3),
                bytes(offset_elems),
            )
        })
    }

    /// A computation graph with room for `max_nodes` nodes.
    pub fn new_graph(&self, max_nodes: usize) -> Graph<'_> {
        // SAFETY: a pure size query.
        let needed = unsafe {
            sys::ggml_graph_overhead_custom(max_nodes, false)
                + RESERVED_TENSORS * sys::ggml_tensor_overhead()
        };
        let free = self.free_bytes();
        require(free >= needed, "new_graph", || {
            format!("a graph of {max_nodes} nodes needs {needed} bytes, the context has {free}")
        });
        // SAFETY: the context has room for the graph (checked above).
        let raw = unsafe { sys::ggml_new_graph_custom(self.raw.as_ptr(), max_nodes, false) };
        Graph {
            raw: NonNull::new(raw).expect("ggml new_graph: no graph made"),
            ctx: self,
            room: RefCell::new(GraphRoom::new(max_nodes)),
        }
    }
}

tensor_ops! {
    /// Element-wise square root.
    fn sqrt(a) => ggml_sqrt if unary;
    /// Element-wise logistic sigmoid.
    fn sigmoid(a) => ggml_sigmoid if unary;
    /// Element-wise hyperbolic tangent.
    fn tanh(a) => ggml_tanh if unary;
    /// Element-wise max(x, 0).
    fn relu(a) => ggml_relu if unary;
    /// Element-wise ELU with alpha 1: x above 0, exp(x) - 1 below.
    fn elu(a) => ggml_elu if unary;
    /// Element-wise GELU with the exact error function (not the tanh approximation).
    fn gelu_erf(a) => ggml_gelu_erf if unary;
    /// Element-wise sum, broadcasting `b` over `a`.
    fn add(a, b) => ggml_add if binary;
    /// Element-wise product, broadcasting `b` over `a`.
    fn mul(a, b) => ggml_mul if binary;
    /// A contiguous copy (materialises a permuted or strided view).
    fn cont(a) => ggml_cont if unblocked;
    /// Swaps the first two axes (a view).
    fn transpose(a) => ggml_transpose if any_layout;
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: we own the context.
        unsafe { sys::ggml_free(self.raw.as_ptr()) }
    }
}

/// A tensor handle, valid while its [`Context`] lives.
#[derive(Clone, Copy)]
pub struct Tensor<'ctx> {
    raw: NonNull<sys::ggml_tensor>,
    _ctx: PhantomData<&'ctx Context>,
}

impl<'ctx> Tensor<'ctx> {
    fn raw(&self) -> *mut sys::ggml_tensor {
        self.raw.as_ptr()
    }

    /// True when the values of each row are adjacent (rows themselves may be strided).
    pub fn row_contiguous(&self) -> bool {
        // SAFETY: the tensor is live while its context is; a pure size query.
        unsafe { (*self.raw()).nb[0] == sys::ggml_type_size((*self.raw()).type_) }
    }

    /// What a custom op checks about this tensor.
    fn operand(&self) -> Operand {
        // SAFETY: the tensor is live while its context is.
        unsafe { Operand::of(self.raw()) }
    }

    /// Bytes of one element of an unblocked type (a view's offsets and strides count
    /// in them); `None` for block types, whose views the engine never takes.
    fn element_size(&self) -> Option<usize> {
        // SAFETY: pure queries on the live tensor's type.
        unsafe {
            let t = (*self.raw()).type_;
            (sys::ggml_blck_size(t) == 1).then(|| sys::ggml_type_size(t))
        }
    }

    /// Dims in ggml order.
    pub fn ne(&self) -> [i64; 4] {
        // SAFETY: the tensor is live while its context is.
        unsafe { (*self.raw()).ne }
    }

    /// Bytes from its first element to the end of its last, gaps of a strided view
    /// included (`ggml_nbytes`).
    fn nbytes(&self) -> usize {
        // SAFETY: a pure size query on the live tensor.
        unsafe { sys::ggml_nbytes(self.raw()) }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.ne().iter().product::<i64>() as usize
    }

    /// True for a tensor with no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element type; `None` for a type the engine does not use (anything else ggml
    /// made).
    pub fn dtype(&self) -> Option<DType> {
        // SAFETY: as above.
        DType::from_raw(unsafe { (*self.raw()).type_ })
    }

    /// Names the tensor (shown in ggml's debug output).
    pub fn set_name(&self, name: &str) {
        let c = CString::new(name.replace('\0', "")).expect("no NUL");
        // SAFETY: ggml copies the name into the tensor.
        unsafe { sys::ggml_set_name(self.raw(), c.as_ptr()) };
    }

    /// Marks the tensor as a graph input (allocated before its consumers run).
    pub fn mark_input(&self) {
        // SAFETY: as above.
        unsafe { sys::ggml_set_input(self.raw()) }
    }

    /// Marks the tensor as a graph output (its memory is not reused).
    pub fn mark_output(&self) {
        // SAFETY: as above.
        unsafe { sys::ggml_set_output(self.raw()) }
    }

    /// Whether ggml can copy into or out of the tensor ([`has_memory`]).
    pub(crate) fn has_memory(&self) -> bool {
        has_memory(self.raw())
    }

    fn check_allocated(&self, n: usize, what: &str) -> Result<()> {
        if !self.has_memory() {
            return Err(GgmlError::Failed(format!(
                "{what}: tensor has no memory yet"
            )));
        }
        if self.dtype() != Some(DType::F32) || n != self.len() {
            return Err(GgmlError::Failed(format!(
                "{what}: expected {} f32 values, got {n}",
                self.len()
            )));
        }
        Ok(())
    }

    /// Copies host data into the (allocated) f32 tensor.
    pub fn write_f32(&self, data: &[f32]) -> Result<()> {
        self.check_allocated(data.len(), "write")?;
        // SAFETY: sizes checked above; the tensor has backend memory.
        unsafe {
            sys::ggml_backend_tensor_set(
                self.raw(),
                data.as_ptr().cast(),
                0,
                std::mem::size_of_val(data),
            )
        };
        Ok(())
    }

    /// Copies raw element bytes (any type, e.g. f16 or Q8_0 blocks) into the
    /// (allocated) tensor; the length must equal the tensor's size in bytes.
    pub fn write_bytes(&self, data: &[u8]) -> Result<()> {
        // SAFETY: the tensor is live while its context is.
        let nbytes = unsafe { sys::ggml_nbytes(self.raw()) };
        if !self.has_memory() || nbytes != data.len() {
            return Err(GgmlError::Failed(format!(
                "write: expected an allocated tensor of {nbytes} bytes, got {}",
                data.len()
            )));
        }
        // SAFETY: size and memory checked above.
        unsafe { sys::ggml_backend_tensor_set(self.raw(), data.as_ptr().cast(), 0, nbytes) };
        Ok(())
    }

    fn check_i32(&self, n: usize, what: &str) -> Result<()> {
        // SAFETY: the tensor is live while its context is.
        let is_i32 = unsafe { (*self.raw()).type_ == sys::GGML_TYPE_I32 };
        if !self.has_memory() || !is_i32 || n != self.len() {
            return Err(GgmlError::Failed(format!(
                "{what}: expected an allocated i32 tensor of {} values, got {n}",
                self.len(),
            )));
        }
        Ok(())
    }

    /// The input tensor this is a contiguous view of, and the view's first byte in it
    /// ([`Context::new_inputs`]).
    fn input_view(&self) -> Option<(*mut sys::ggml_tensor, usize)> {
        // SAFETY: the tensor and its view source are live tensors of one context.
        unsafe {
            let t = &*self.raw();
            let whole = t.view_src;
            let input = !whole.is_null()
                && (*whole).flags & sys::GGML_TENSOR_FLAG_INPUT as i32 != 0
                && sys::ggml_is_contiguous(self.raw());
            input.then_some((whole, t.view_offs))
        }
    }

    /// Copies host data into the (allocated) i32 tensor.
    pub fn write_i32(&self, data: &[i32]) -> Result<()> {
        self.check_i32(data.len(), "write")?;
        // SAFETY: type, size and memory checked above.
        unsafe {
            sys::ggml_backend_tensor_set(
                self.raw(),
                data.as_ptr().cast(),
                0,
                std::mem::size_of_val(data),
            )
        };
        Ok(())
    }

    /// Copies the (allocated) i32 tensor to the host.
    pub fn read_i32(&self) -> Result<Vec<i32>> {
        // SAFETY: the tensor is live while its context is.
        let is_i32 = unsafe { (*self.raw()).type_ == sys::GGML_TYPE_I32 };
        // SAFETY: as above.
        let contiguous = unsafe { sys::ggml_is_contiguous(self.raw()) };
        if !self.has_memory() || !is_i32 || !contiguous {
            return Err(GgmlError::Failed(
                "read: expected an allocated contiguous i32 tensor".into(),
            ));
        }
        let mut out = vec![0i32; self.len()];
        // SAFETY: type and memory checked above; `out` holds the tensor's elements.
        unsafe { self.get_into(&mut out) };
        Ok(out)
    }

    /// Copies the (allocated) f32 tensor to the host.
    pub fn read_f32(&self) -> Result<Vec<f32>> {
        let mut out = vec![0f32; self.len()];
        self.check_allocated(out.len(), "read")?;
        // SAFETY: sizes checked above.
        unsafe { self.get_into(&mut out) };
        Ok(out)
    }

    /// Copies the tensor's bytes into `out`.
    ///
    /// # Safety
    /// The tensor has backend memory and holds exactly `out.len()` elements of `T`'s
    /// type, contiguously.
    unsafe fn get_into<T: Copy>(&self, out: &mut [T]) {
        // SAFETY: the caller's contract; `out` is `size_of_val(out)` writable bytes.
        unsafe {
            sys::ggml_backend_tensor_get(
                self.raw(),
                out.as_mut_ptr().cast(),
                0,
                std::mem::size_of_val(out),
            )
        }
    }
}

/// Fails when a row index lies outside a table of `table_rows` rows.
fn check_rows(values: &[i32], table_rows: i64) -> Result<()> {
    match values.iter().find(|&&v| v < 0 || v as i64 >= table_rows) {
        Some(bad) => Err(GgmlError::Operand {
            op: "get_rows",
            reason: format!("row index {bad} is outside a table of {table_rows} rows"),
        }),
        None => Ok(()),
    }
}

/// Whether ggml can copy into or out of `t`: the tensor (or, for a view, its source) has
/// a backend buffer, and the tensor its address there. A view gets the address only when
/// a graph holding it is allocated; ggml's copies abort the process on a tensor without.
fn has_memory(t: *mut sys::ggml_tensor) -> bool {
    // SAFETY: `t` is a live tensor (every caller holds one of a live context), and so is
    // its view source when it has one.
    unsafe {
        let t = &*t;
        let buffer = if t.view_src.is_null() {
            t.buffer
        } else {
            (*t.view_src).buffer
        };
        !buffer.is_null() && !t.data.is_null()
    }
}

/// Writes a run's inputs. Views of one input tensor ([`Context::new_inputs`]) that
/// together cover it are joined on the host and written as that tensor, in one copy;
/// every other input is written on its own. Every input is checked (type, length, and
/// memory where its bytes go) before the first is written.
fn write_inputs(
    inputs: &[(Tensor<'_>, &[f32])],
    int_inputs: &[(Tensor<'_>, &[i32])],
) -> Result<()> {
    let mut writes: Vec<(Tensor<'_>, Vec<u8>)> = Vec::new();
    let typed = inputs
        .iter()
        .map(|(t, d)| (*t, DType::F32, d.len(), ne_bytes(d, f32::to_ne_bytes)))
        .chain(
            int_inputs
                .iter()
                .map(|(t, d)| (*t, DType::I32, d.len(), ne_bytes(d, i32::to_ne_bytes))),
        );
    for (t, dtype, n, bytes) in typed {
        if t.dtype() != Some(dtype) || n != t.len() {
            return Err(GgmlError::Failed(format!(
                "write: expected {} {dtype:?} values, got {n}",
                t.len()
            )));
        }
        writes.push((t, bytes));
    }
    // Each input tensor written through views: its views' (byte offset, write).
    let mut wholes: Vec<(*mut sys::ggml_tensor, Vec<(usize, usize)>)> = Vec::new();
    let mut alone = Vec::new();
    for (i, (t, _)) in writes.iter().enumerate() {
        match t.input_view() {
            Some((whole, offset)) => match wholes.iter_mut().find(|(w, _)| *w == whole) {
                Some((_, views)) => views.push((offset, i)),
                None => wholes.push((whole, vec![(offset, i)])),
            },
            None => alone.push(i),
        }
    }
    let mut joined: Vec<(*mut sys::ggml_tensor, Vec<u8>)> = Vec::new();
    for (whole, mut views) in wholes {
        views.sort_unstable();
        // SAFETY: a pure size query on a live tensor (the views' source).
        let size = unsafe { sys::ggml_nbytes(whole) };
        let covered = views.iter().try_fold(0usize, |end, &(offset, i)| {
            (offset == end).then(|| end + writes[i].1.len())
        });
        if covered != Some(size) {
            alone.extend(views.iter().map(|&(_, i)| i));
            continue;
        }
        let bytes = views
            .iter()
            .flat_map(|&(_, i)| writes[i].1.iter().copied())
            .collect();
        joined.push((whole, bytes));
    }
    let targets = joined
        .iter()
        .map(|(whole, _)| *whole)
        .chain(alone.iter().map(|&i| writes[i].0.raw()));
    for t in targets {
        if !has_memory(t) {
            return Err(GgmlError::Failed(
                "write: an input has no memory yet (it is in no allocated graph)".into(),
            ));
        }
    }
    for (whole, bytes) in &joined {
        // SAFETY: `whole` has memory (checked above) and holds exactly these bytes (its
        // views tile it).
        unsafe { sys::ggml_backend_tensor_set(*whole, bytes.as_ptr().cast(), 0, bytes.len()) };
    }
    for i in alone {
        let (t, bytes) = &writes[i];
        // SAFETY: the tensor has memory and holds these bytes (checked above).
        unsafe { sys::ggml_backend_tensor_set(t.raw(), bytes.as_ptr().cast(), 0, bytes.len()) };
    }
    Ok(())
}

/// Values as the bytes ggml stores them in (the host's order).
fn ne_bytes<const N: usize, T: Copy>(d: &[T], bytes: fn(T) -> [u8; N]) -> Vec<u8> {
    d.iter().flat_map(|&v| bytes(v)).collect()
}

/// The shapes of a graph's inputs of one type, each declared where the code needs it and
/// then all made at once ([`Context::make_inputs`]): a declaration's handle names its
/// input, so the order in which the code takes them cannot drift from the shapes'.
#[derive(Debug, Default)]
pub struct InputShapes(Vec<Vec<i64>>);

/// One declared input of an [`InputShapes`] (valid with the [`Inputs`] made from it).
#[derive(Debug, Clone, Copy)]
pub struct InputId(usize);

impl InputShapes {
    /// Declares an input of shape `ne`.
    pub fn add(&mut self, ne: &[i64]) -> InputId {
        self.0.push(ne.to_vec());
        InputId(self.0.len() - 1)
    }
}

/// The inputs made from an [`InputShapes`].
pub struct Inputs<'a>(Vec<Tensor<'a>>);

impl<'a> Inputs<'a> {
    /// The input `id` declared.
    pub fn get(&self, id: InputId) -> Tensor<'a> {
        self.0[id.0]
    }
}

/// A forward computation graph, valid while its [`Context`] lives.
pub struct Graph<'ctx> {
    raw: NonNull<sys::ggml_cgraph>,
    /// Its context, asked after a compute whether a custom op failed.
    ctx: &'ctx Context,
    /// What the graph holds, checked against its size before each expand.
    room: RefCell<GraphRoom>,
}

impl Graph<'_> {
    /// Adds `t` and everything it depends on to the graph (a panic when that would not
    /// fit the graph's size).
    pub fn expand(&mut self, t: Tensor<'_>) {
        self.room.get_mut().admit(&t);
        // SAFETY: graph and tensor share a live context; the graph has room for what
        // the expand adds (checked above).
        unsafe { sys::ggml_build_forward_expand(self.raw.as_ptr(), t.raw()) }
    }

    /// Fails when a row lookup (`get_rows`) of the graph holds an index outside its
    /// table: ggml's CPU kernel aborts on such an index and a GPU kernel reads past the
    /// table. Indices among `written` (this run's inputs) are checked as given, before
    /// they are written (on a device, reading them back would be a copy and a wait
    /// each); others are read from their tensors, written by an earlier run.
    fn check_row_indices(&self, written: &[(Tensor<'_>, &[i32])]) -> Result<()> {
        for &(indices, table_rows) in self.room.borrow().lookups() {
            if let Some((_, values)) = written.iter().find(|(t, _)| t.raw() == indices) {
                check_rows(values, table_rows)?;
                continue;
            }
            // SAFETY: the indices are a live I32 tensor of the graph's context, written
            // by the caller (checked when the lookup was built to be an input or weight).
            let count = unsafe { sys::ggml_nelements(indices) as usize };
            if !has_memory(indices) {
                return Err(GgmlError::Failed(
                    "get_rows: the indices have no memory; write them as an input".into(),
                ));
            }
            let mut values = vec![0i32; count];
            // SAFETY: `values` holds the tensor's bytes; it has backend memory.
            unsafe {
                sys::ggml_backend_tensor_get(
                    indices,
                    values.as_mut_ptr().cast(),
                    0,
                    std::mem::size_of_val(values.as_slice()),
                )
            };
            check_rows(&values, table_rows)?;
        }
        Ok(())
    }

    /// Number of nodes so far.
    pub fn n_nodes(&self) -> usize {
        // SAFETY: as above.
        unsafe { sys::ggml_graph_n_nodes(self.raw.as_ptr()) as usize }
    }
}

/// Backend memory holding every tensor of a context (model weights). Freed on drop.
pub struct Buffer {
    raw: NonNull<sys::ggml_backend_buffer>,
}

impl Buffer {
    /// Allocates all tensors of `ctx` on `backend`'s device.
    pub fn alloc_context(ctx: &Context, backend: &Backend) -> Result<Self> {
        // SAFETY: context and backend are live.
        let raw =
            unsafe { sys::ggml_backend_alloc_ctx_tensors(ctx.raw.as_ptr(), backend.raw.as_ptr()) };
        let raw = NonNull::new(raw).ok_or_else(|| {
            GgmlError::Failed(format!(
                "could not allocate weights on {}",
                backend.device().name
            ))
        })?;
        Ok(Buffer { raw })
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        // SAFETY: live buffer.
        unsafe { sys::ggml_backend_buffer_get_size(self.raw.as_ptr()) }
    }
    /// Sets every byte of the buffer to `value` (0: zeros, so that no tensor in it
    /// holds stale or uninitialised values such as NaN).
    pub fn clear(&self, value: u8) {
        // SAFETY: live buffer; every backend implements clear.
        unsafe { sys::ggml_backend_buffer_clear(self.raw.as_ptr(), value) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: we own the buffer.
        unsafe { sys::ggml_backend_buffer_free(self.raw.as_ptr()) }
    }
}

/// Runs graphs over one or more backends (the last one must be the CPU), placing each
/// op where its inputs live and falling back to the CPU for unsupported ops.
pub struct Scheduler {
    raw: NonNull<sys::ggml_backend_sched>,
    /// The nodes and leaves together that one graph may hold (ggml asserts it).
    graph_size: usize,
    /// The worker threads of its CPU backends, fitted before each graph.
    cpu_threads: Vec<std::sync::Arc<CpuThreads>>,
}

impl Scheduler {
    /// A scheduler over `backends` (CPU last) for graphs of up to `graph_size` nodes.
    pub fn new(backends: &[&Backend], graph_size: usize) -> Result<Self> {
        let cpu_last = backends
            .last()
            .is_some_and(|b| b.device().device_type == DeviceType::Cpu);
        if !cpu_last || backends.len() > MAX_SCHEDULED_BACKENDS {
            return Err(GgmlError::Failed(format!(
                "a scheduler runs 1 to {MAX_SCHEDULED_BACKENDS} backends, the CPU last; got {}",
                backends.len()
            )));
        }
        let mut raws: Vec<sys::ggml_backend_t> = backends.iter().map(|b| b.raw.as_ptr()).collect();
        // SAFETY: raws outlives the call; null bufts means each backend's default.
        let raw = unsafe {
            sys::ggml_backend_sched_new(
                raws.as_mut_ptr(),
                std::ptr::null_mut(),
                raws.len() as i32,
                graph_size,
                false,
                true,
            )
        };
        let raw = NonNull::new(raw)
            .ok_or_else(|| GgmlError::Failed("could not create the scheduler".into()))?;
        let cpu_threads = backends
            .iter()
            .filter_map(|b| b.cpu_threads().cloned())
            .collect();
        Ok(Scheduler {
            raw,
            graph_size,
            cpu_threads,
        })
    }

    /// Allocates the graph's intermediate tensors, writes the inputs, then computes.
    /// Outputs stay readable until the next call.
    pub fn compute(
        &mut self,
        graph: &mut Graph<'_>,
        inputs: &[(Tensor<'_>, &[f32])],
    ) -> Result<()> {
        self.compute_with(graph, inputs, &[])
    }

    /// [`Scheduler::compute`] with i32 inputs (token ids) as well as f32 ones.
    pub fn compute_with(
        &mut self,
        graph: &mut Graph<'_>,
        inputs: &[(Tensor<'_>, &[f32])],
        int_inputs: &[(Tensor<'_>, &[i32])],
    ) -> Result<()> {
        self.compute_placed(graph, inputs, int_inputs, false)
    }

    /// [`Scheduler::compute_with`] with the inputs placed in the memory of the
    /// scheduler's first backend (the device, when there is one besides the CPU) and
    /// written there. Left to ggml, every graph input goes to the CPU, and with it an
    /// op whose sources are all inputs (a pad or a row gather with no weight among its
    /// sources): that op runs on the CPU in a split of its own, and its result is
    /// copied to the device. Placed on the device, the op runs there too. On the CPU
    /// alone nothing changes.
    pub fn compute_on_device(
        &mut self,
        graph: &mut Graph<'_>,
        inputs: &[(Tensor<'_>, &[f32])],
        int_inputs: &[(Tensor<'_>, &[i32])],
    ) -> Result<()> {
        self.compute_placed(graph, inputs, int_inputs, true)
    }

    /// Allocates (the inputs on the first backend when `on_device`), writes the
    /// inputs, computes.
    fn compute_placed(
        &mut self,
        graph: &mut Graph<'_>,
        inputs: &[(Tensor<'_>, &[f32])],
        int_inputs: &[(Tensor<'_>, &[i32])],
        on_device: bool,
    ) -> Result<()> {
        let started = std::time::Instant::now();
        let placed: Vec<_> = if on_device {
            inputs
                .iter()
                .map(|(t, _)| t.raw())
                .chain(int_inputs.iter().map(|(t, _)| t.raw()))
                .collect()
        } else {
            Vec::new()
        };
        self.allocate(graph, &placed)?;
        self.run(graph, started, inputs, int_inputs)
    }

    /// Allocates `graph` once for many computes with new inputs each time (a decoder
    /// step): the scheduler keeps its split and its memory, so that nothing is rebuilt
    /// between runs and a GPU backend can replay the same work (ggml-cuda's CUDA
    /// graphs). The graph's nodes never change; what changes from run to run must be
    /// an input (token ids, positions, row indices, masks).
    ///
    /// The graph's inputs are placed on the first backend (as by
    /// [`Scheduler::compute_on_device`]): each run writes them there, and the scheduler
    /// copies none of them (a copy and a wait for each input, every step, on a GPU).
    pub fn prepare<'s, 'g, 'ctx>(
        &'s mut self,
        graph: &'g mut Graph<'ctx>,
    ) -> Result<Prepared<'s, 'g, 'ctx>> {
        let inputs = graph.room.borrow().inputs();
        self.allocate(graph, &inputs)?;
        Ok(Prepared { sched: self, graph })
    }

    /// Resets the scheduler and allocates `graph`'s intermediate tensors, those of
    /// `on_device` (tensors of the graph) on the first backend.
    fn allocate(
        &mut self,
        graph: &mut Graph<'_>,
        on_device: &[*mut sys::ggml_tensor],
    ) -> Result<()> {
        let held = graph.room.borrow().held();
        if held > self.graph_size {
            return Err(GgmlError::Failed(format!(
                "a graph of {held} nodes and leaves passes the scheduler's room for {}",
                self.graph_size
            )));
        }
        let sched = self.raw.as_ptr();
        // SAFETY: scheduler and graph are live; `on_device` are tensors of the graph's
        // context, which outlives this call.
        unsafe {
            sys::ggml_backend_sched_reset(sched);
            // The CPU alone: the inputs are on it already.
            if sys::ggml_backend_sched_get_n_backends(sched) > 1 {
                let device = sys::ggml_backend_sched_get_backend(sched, 0);
                for &t in on_device {
                    sys::ggml_backend_sched_set_tensor_backend(sched, t, device);
                }
            }
            if !sys::ggml_backend_sched_alloc_graph(sched, graph.raw.as_ptr()) {
                return Err(GgmlError::Failed(
                    "could not allocate the compute graph".into(),
                ));
            }
        }
        Ok(())
    }

    /// Writes the inputs of a graph this scheduler allocated last, then computes it.
    fn run(
        &mut self,
        graph: &mut Graph<'_>,
        started: std::time::Instant,
        inputs: &[(Tensor<'_>, &[f32])],
        int_inputs: &[(Tensor<'_>, &[i32])],
    ) -> Result<()> {
        let sched = self.raw.as_ptr();
        let allocated = std::time::Instant::now();
        // Indices first: a refused run leaves nothing of its inputs behind.
        graph.check_row_indices(int_inputs)?;
        write_inputs(inputs, int_inputs)?;
        for threads in &self.cpu_threads {
            threads.fit();
        }
        let status = if profile::recording() {
            let alloc_s = (allocated - started).as_secs_f64();
            self.compute_recorded(
                graph.raw.as_ptr(),
                alloc_s,
                allocated.elapsed().as_secs_f64(),
            )
        } else {
            // SAFETY: as above.
            unsafe { sys::ggml_backend_sched_graph_compute(sched, graph.raw.as_ptr()) }
        };
        if let Some(failure) = graph.ctx.take_op_failure() {
            return Err(GgmlError::OpFailed(failure));
        }
        if status != sys::GGML_STATUS_SUCCESS {
            return Err(GgmlError::Failed(format!(
                "graph compute failed (status {status})"
            )));
        }
        Ok(())
    }
}

/// A graph allocated by its scheduler for repeated computes
/// ([`Scheduler::prepare`]): it holds the scheduler, so no other graph can take its
/// memory in between.
pub struct Prepared<'s, 'g, 'ctx> {
    sched: &'s mut Scheduler,
    graph: &'g mut Graph<'ctx>,
}

impl Prepared<'_, '_, '_> {
    /// Writes the inputs and computes the graph again, without rebuilding or
    /// reallocating anything. Outputs stay readable until the next call.
    pub fn compute(
        &mut self,
        inputs: &[(Tensor<'_>, &[f32])],
        int_inputs: &[(Tensor<'_>, &[i32])],
    ) -> Result<()> {
        self.sched
            .run(self.graph, std::time::Instant::now(), inputs, int_inputs)
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        // SAFETY: we own the scheduler.
        unsafe { sys::ggml_backend_sched_free(self.raw.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a case must panic with, and the call that must.
    pub(super) type Case<'a> = (&'static str, Box<dyn FnOnce() + 'a>);

    /// Asserts each case panics with a message starting with its needle.
    pub(super) fn assert_panics(cases: Vec<Case<'_>>) {
        for (needle, f) in cases {
            let msg = panic_of(f);
            assert!(
                msg.starts_with(needle),
                "'{msg}' does not start with '{needle}'"
            );
        }
    }

    /// ggml's CPU backend, which the tests compute on.
    pub(super) fn cpu() -> Backend {
        let cpu = devices()
            .into_iter()
            .find(|d| d.device_type == DeviceType::Cpu)
            .expect("ggml lists a CPU device");
        Backend::new(&cpu).unwrap()
    }

    /// The panic message of `f`, which must panic (a Rust panic, not ggml's abort, which
    /// would end this test binary).
    pub(super) fn panic_of(f: impl FnOnce()) -> String {
        let payload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
            .expect_err("the wrapper accepted a shape ggml would refuse");
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    }

    #[test]
    fn shapes_ggml_would_abort_on_are_panics_naming_the_op() {
        let ctx = Context::new(64, 0).unwrap();
        let m = ctx.new_tensor(DType::F32, &[4, 3], "m");
        let v = ctx.new_tensor(DType::F32, &[4], "v");
        let w = ctx.new_tensor(DType::F32, &[5], "w");
        let idx = ctx.new_i32_tensor(&[2], "idx");
        assert_eq!(ctx.mul_mat(m, m).ne(), [3, 3, 1, 1]);
        assert_eq!(ctx.add(m, v).ne(), [4, 3, 1, 1]);
        assert_eq!(ctx.reshape(m, &[2, 6]).ne(), [2, 6, 1, 1]);
        assert_eq!(ctx.get_rows(m, idx).ne(), [4, 2, 1, 1]);
        assert_eq!(ctx.concat(m, m, 1).ne(), [4, 6, 1, 1]);
        let cases: Vec<Case<'_>> = vec![
            (
                "ggml mul_mat: dims",
                Box::new(|| {
                    let _ = ctx.mul_mat(m, w);
                }),
            ),
            (
                "ggml mul_mat: the first operand is transposed",
                Box::new(|| {
                    let x = ctx.new_tensor(DType::F32, &[3], "x");
                    let _ = ctx.mul_mat(ctx.transpose(m), x);
                }),
            ),
            (
                "ggml add: dims [5, 1, 1, 1] do not broadcast",
                Box::new(|| {
                    let _ = ctx.add(m, w);
                }),
            ),
            (
                "ggml mul: dims",
                Box::new(|| {
                    let _ = ctx.mul(v, m);
                }),
            ),
            (
                "ggml reshape: 12 elements cannot take dims [5, 2]",
                Box::new(|| {
                    let _ = ctx.reshape(m, &[5, 2]);
                }),
            ),
            (
                "ggml reshape: 12 elements",
                Box::new(|| {
                    let _ = ctx.reshape(m, &[-3, -4]);
                }),
            ),
            (
                "ggml reshape: the tensor is not contiguous",
                Box::new(|| {
                    let _ = ctx.reshape(ctx.transpose(m), &[12]);
                }),
            ),
            (
                "ggml permute: axes [0, 0, 2, 3]",
                Box::new(|| {
                    let _ = ctx.permute(m, [0, 0, 2, 3]);
                }),
            ),
            (
                "ggml get_rows: rows of",
                Box::new(|| {
                    let _ = ctx.get_rows(m, v);
                }),
            ),
            (
                "ggml cpy: 5 elements do not fit 4",
                Box::new(|| {
                    let _ = ctx.cpy(w, v);
                }),
            ),
            (
                "ggml concat:",
                Box::new(|| {
                    let _ = ctx.concat(m, w, 0);
                }),
            ),
            (
                "ggml concat:",
                Box::new(|| {
                    let _ = ctx.concat(m, m, 4);
                }),
            ),
        ];
        assert_panics(cases);
    }

    #[test]
    fn a_view_past_its_source_is_refused_even_when_strided() {
        let ctx = Context::new(64, 0).unwrap();
        let m = ctx.new_tensor(DType::F32, &[4, 3], "m");
        assert_eq!(ctx.view_1d(m, 4, 8).ne(), [4, 1, 1, 1]);
        assert_eq!(ctx.view_2d_rows(m, 2, 3, 2).ne(), [2, 3, 1, 1]);
        assert_eq!(ctx.view_3d(m, [2, 2, 3], 1, 4, 0).ne(), [2, 2, 3, 1]);
        assert_eq!(ctx.view_2d_strided(m, [1, 12], 1, 0).ne(), [1, 12, 1, 1]);
        assert_eq!(
            ctx.view_1d(m, 0, 12).ne(),
            [0, 1, 1, 1],
            "an empty view at the end"
        );
        let cases: Vec<Case<'_>> = vec![
            (
                "ggml view_1d:",
                Box::new(|| {
                    let _ = ctx.view_1d(m, 4, 9);
                }),
            ),
            (
                "ggml view_2d_rows:",
                Box::new(|| {
                    let _ = ctx.view_2d_rows(m, 2, 3, 3);
                }),
            ),
            // Each of these has fewer elements than its source, which is all ggml checks.
            (
                "ggml view_2d_strided:",
                Box::new(|| {
                    let _ = ctx.view_2d_strided(m, [1, 4], 4, 0);
                }),
            ),
            (
                "ggml view_3d:",
                Box::new(|| {
                    let _ = ctx.view_3d(m, [2, 2, 2], 4, 8, 0);
                }),
            ),
            (
                "ggml view_3d:",
                Box::new(|| {
                    let _ = ctx.view_3d(m, [1, 1, 2], 1, usize::MAX / 2, 0);
                }),
            ),
            (
                "ggml view_1d: negative dims",
                Box::new(|| {
                    let _ = ctx.view_1d(m, -1, 0);
                }),
            ),
        ];
        assert_panics(cases);
    }
}
