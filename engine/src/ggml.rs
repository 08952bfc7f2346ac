//! The ggml wrapper: with the CPU kernels ([`crate::cpu_kernels`]), the only code of the
//! workspace that contains `unsafe`.
//!
//! Everything above it works with owned, safe types: [`Context`] (tensor and graph
//! metadata), [`Tensor`] (a handle tied to its context's lifetime), [`Graph`],
//! [`Backend`] and [`Buffer`] (device memory, freed on drop), [`Scheduler`] (runs a graph
//! on a backend with CPU fallback) and GGUF read/write through [`read_gguf`] and
//! [`write_gguf`]. The raw binding is `llama-cpp-sys-2`, used only for its `ggml_*`,
//! `ggml_backend_*` and `gguf_*` functions.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::{CStr, CString};
use std::marker::PhantomData;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Once;

use llama_cpp_sys_2 as sys;

/// Defines [`Context`] methods that each wrap one ggml op of the context and one or
/// more tensors (element-wise maths, layout copies): ggml checks that the shapes and
/// types fit the op (broadcasting a second operand over the first).
macro_rules! tensor_ops {
    ($($(#[$doc:meta])* fn $name:ident($($arg:ident),+) => $ffi:ident;)+) => {
        impl Context {
            $(
                $(#[$doc])*
                pub fn $name<'a>(&'a self, $($arg: Tensor<'a>),+) -> Tensor<'a> {
                    // SAFETY: the tensors belong to this live context; ggml checks
                    // that their shapes and types fit the op.
                    self.wrap(unsafe { sys::$ffi(self.raw.as_ptr(), $($arg.raw()),+) })
                }
            )+
        }
    };
}

mod conv;
mod custom_op;
pub mod hip_arch;
pub mod log;
pub mod profile;
mod signal;

use custom_op::{CustomOp, OpState, Operand};

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
}

type Result<T> = std::result::Result<T, GgmlError>;

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
}

impl DType {
    fn raw(self) -> sys::ggml_type {
        match self {
            DType::F32 => sys::GGML_TYPE_F32,
            DType::F16 => sys::GGML_TYPE_F16,
            DType::Q8_0 => sys::GGML_TYPE_Q8_0,
            DType::I8 => sys::GGML_TYPE_I8,
        }
    }

    fn from_raw(raw: sys::ggml_type) -> Option<Self> {
        match raw {
            sys::GGML_TYPE_F32 => Some(DType::F32),
            sys::GGML_TYPE_F16 => Some(DType::F16),
            sys::GGML_TYPE_Q8_0 => Some(DType::Q8_0),
            sys::GGML_TYPE_I8 => Some(DType::I8),
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
            DType::F32 | DType::F16 | DType::I8 => 1,
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
                break;
            }
        }
    });
}

/// What kind of hardware a device is, as ggml's registry reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceType {
    /// The host CPU.
    Cpu,
    /// A discrete GPU.
    Gpu,
    /// An integrated GPU.
    IGpu,
    /// An accelerator (BLAS, NPU...).
    Accel,
    /// A composite device.
    Meta,
}

/// One device from ggml's registry.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// Index in ggml's device list.
    pub index: usize,
    /// Device name, e.g. `CPU`, `CUDA0`, `ROCm0`.
    pub name: String,
    /// Human description, e.g. the GPU model.
    pub description: String,
    /// Name of the backend registry that owns it: `CPU`, `CUDA`, `ROCm`, `Vulkan`, `Metal`...
    pub registry: String,
    /// Hardware type.
    pub device_type: DeviceType,
    /// Free memory in bytes.
    pub memory_free: u64,
    /// Total memory in bytes.
    pub memory_total: u64,
}

fn cstr(ptr: *const std::os::raw::c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: ggml returns NUL-terminated strings that live as long as the registry.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}

/// The names of ggml's backend registries (after loading dynamic backends): a GPU
/// backend library that loaded but found no device still has its registry (`ROCm`).
pub fn registry_names() -> Vec<String> {
    init();
    // SAFETY: registry queries on valid indices; the names are owned by ggml.
    unsafe {
        (0..sys::ggml_backend_reg_count())
            .map(|i| cstr(sys::ggml_backend_reg_name(sys::ggml_backend_reg_get(i))))
            .collect()
    }
}

/// Lists every device ggml knows in this build (after loading dynamic backends).
pub fn devices() -> Vec<DeviceInfo> {
    init();
    // SAFETY: registry queries on valid indices; pointers are owned by ggml.
    unsafe {
        (0..sys::ggml_backend_dev_count())
            .map(|index| {
                let dev = sys::ggml_backend_dev_get(index);
                let reg = sys::ggml_backend_dev_backend_reg(dev);
                let (mut free, mut total) = (0usize, 0usize);
                sys::ggml_backend_dev_memory(dev, &mut free, &mut total);
                let device_type = match sys::ggml_backend_dev_type(dev) {
                    sys::GGML_BACKEND_DEVICE_TYPE_CPU => DeviceType::Cpu,
                    sys::GGML_BACKEND_DEVICE_TYPE_GPU => DeviceType::Gpu,
                    sys::GGML_BACKEND_DEVICE_TYPE_IGPU => DeviceType::IGpu,
                    sys::GGML_BACKEND_DEVICE_TYPE_ACCEL => DeviceType::Accel,
                    _ => DeviceType::Meta,
                };
                DeviceInfo {
                    index,
                    name: cstr(sys::ggml_backend_dev_name(dev)),
                    description: cstr(sys::ggml_backend_dev_description(dev)),
                    registry: if reg.is_null() {
                        String::new()
                    } else {
                        cstr(sys::ggml_backend_reg_name(reg))
                    },
                    device_type,
                    memory_free: free as u64,
                    memory_total: total as u64,
                }
            })
            .collect()
    }
}

/// An initialised backend (a stream on one device). Freed on drop.
pub struct Backend {
    raw: NonNull<sys::ggml_backend>,
    device: DeviceInfo,
}

impl Backend {
    /// Starts the backend of a device from [`devices`].
    pub fn new(device: &DeviceInfo) -> Result<Self> {
        init();
        // SAFETY: the index came from the registry; a null return is handled.
        let raw = unsafe {
            let dev = sys::ggml_backend_dev_get(device.index);
            sys::ggml_backend_dev_init(dev, std::ptr::null())
        };
        let raw = NonNull::new(raw)
            .ok_or_else(|| GgmlError::Failed(format!("could not start device {}", device.name)))?;
        Ok(Backend {
            raw,
            device: device.clone(),
        })
    }

    /// The device this backend runs on.
    pub fn device(&self) -> &DeviceInfo {
        &self.device
    }

    /// Sets the worker thread count, for backends that have one (the CPU backend).
    pub fn set_threads(&self, n: usize) {
        // SAFETY: the proc address, when present, has the documented signature
        // ggml_backend_set_n_threads_t; the backend pointer is live.
        unsafe {
            let dev = sys::ggml_backend_get_device(self.raw.as_ptr());
            if dev.is_null() {
                return;
            }
            let reg = sys::ggml_backend_dev_backend_reg(dev);
            if reg.is_null() {
                return;
            }
            let name = c"ggml_backend_set_n_threads";
            let f = sys::ggml_backend_reg_get_proc_address(reg, name.as_ptr());
            if !f.is_null() {
                let f: unsafe extern "C" fn(sys::ggml_backend_t, std::os::raw::c_int) =
                    std::mem::transmute(f);
                f(self.raw.as_ptr(), n.max(1) as std::os::raw::c_int);
            }
        }
    }
}

// SAFETY: ggml backends, contexts, buffers and schedulers are not tied to the thread that
// made them; these types are not Sync, so one thread at a time uses each of them.
unsafe impl Send for Backend {}
// SAFETY: as above.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Send for Buffer {}
// SAFETY: as above.
unsafe impl Send for Scheduler {}

impl Drop for Backend {
    fn drop(&mut self) {
        // SAFETY: we own the backend.
        unsafe { sys::ggml_backend_free(self.raw.as_ptr()) }
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
            max_tensors * sys::ggml_tensor_overhead()
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

    fn wrap(&self, t: *mut sys::ggml_tensor) -> Tensor<'_> {
        Tensor {
            raw: NonNull::new(t).expect("ggml op returned null (context out of memory)"),
            _ctx: PhantomData,
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
        assert!(!ne.is_empty() && ne.len() <= 4, "1 to 4 dims");
        // SAFETY: ne has ne.len() elements; the context is live.
        let t = unsafe {
            sys::ggml_new_tensor(self.raw.as_ptr(), dtype.raw(), ne.len() as i32, ne.as_ptr())
        };
        let t = self.wrap(t);
        t.set_name(name);
        t
    }

    /// Matrix product: `a` is [k, m], `b` is [k, n], the result is [m, n].
    pub fn mul_mat<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>) -> Tensor<'a> {
        // SAFETY: tensors belong to this context.
        self.wrap(unsafe { sys::ggml_mul_mat(self.raw.as_ptr(), a.raw(), b.raw()) })
    }

    /// Softmax along `ne[0]` of `a * scale` (one fused op, without a separate scale).
    pub fn soft_max_scaled<'a>(&'a self, a: Tensor<'a>, scale: f32) -> Tensor<'a> {
        // SAFETY: tensors belong to this context; a null mask means none.
        self.wrap(unsafe {
            sys::ggml_soft_max_ext(self.raw.as_ptr(), a.raw(), std::ptr::null_mut(), scale, 0.0)
        })
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
        // SAFETY: tensors belong to this context; a null mask means none.
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
        // SAFETY: as above.
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
        // SAFETY: as above; ggml asserts the element count.
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
        // SAFETY: ggml checks the view stays inside the tensor.
        self.wrap(unsafe {
            sys::ggml_view_1d(self.raw.as_ptr(), a.raw(), len, offset_elems * esize)
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
        // SAFETY: as above.
        self.wrap(unsafe {
            sys::ggml_view_2d(
                self.raw.as_ptr(),
                a.raw(),
                ne0,
                ne1,
                (*a.raw()).nb[1],
                offset_elems * esize,
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
        let ctx = self.raw.as_ptr();
        // SAFETY: as above.
        unsafe {
            let cols = sys::ggml_im2col(
                ctx,
                kernel.raw(),
                input.raw(),
                stride,
                0,
                pad,
                0,
                1,
                0,
                false,
                sys::GGML_TYPE_F32,
            );
            // cols: [IC*K, OL, N]
            let (ick, ol, n) = ((*cols).ne[0], (*cols).ne[1], (*cols).ne[2]);
            let oc = (*kernel.raw()).ne[2];
            let k2 = sys::ggml_reshape_2d(ctx, kernel.raw(), ick, oc);
            let c2 = sys::ggml_reshape_2d(ctx, cols, ick, ol * n);
            let out = sys::ggml_mul_mat(ctx, k2, c2); // [OC, OL*N]
            self.wrap(sys::ggml_reshape_3d(ctx, out, oc, ol, n))
        }
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
        let ctx = self.raw.as_ptr();
        // SAFETY: tensors of this context; the reshape keeps the element count of the
        // contiguous packed weight (checked above), and im2col reads only its shape,
        // whose channels match the input's.
        let (cols, ol, n) = unsafe {
            let shape =
                sys::ggml_reshape_3d(ctx, packed.raw(), kernel_width, ick / kernel_width, oc);
            let cols = sys::ggml_im2col(
                ctx,
                shape,
                input.raw(),
                stride,
                0,
                pad,
                0,
                1,
                0,
                false,
                sys::GGML_TYPE_F32,
            );
            (cols, (*cols).ne[1], (*cols).ne[2])
        };
        let c2 = self.reshape(self.wrap(cols), &[ick, ol * n]);
        let out = self.mul_mat_f32_packed(packed, c2)?;
        Ok(self.reshape(out, &[oc, ol, n]))
    }

    /// A new 32-bit integer tensor (token ids, row indices), dims in ggml order.
    pub fn new_i32_tensor(&self, ne: &[i64], name: &str) -> Tensor<'_> {
        assert!(!ne.is_empty() && ne.len() <= 4, "1 to 4 dims");
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
        // SAFETY: tensors belong to this context.
        self.wrap(unsafe { sys::ggml_norm(self.raw.as_ptr(), a.raw(), eps) })
    }

    /// Element-wise GELU with the exact error function (not the tanh approximation).
    pub fn gelu_erf<'a>(&'a self, a: Tensor<'a>) -> Tensor<'a> {
        // SAFETY: as above.
        self.wrap(unsafe { sys::ggml_gelu_erf(self.raw.as_ptr(), a.raw()) })
    }

    /// [`Context::gelu_erf`] as a CPU-only custom op with a vectorised erf (ggml's
    /// calls libm's `erff` per element). Refuses an input that is not f32.
    pub fn gelu_erf_cpu<'a>(&'a self, a: Tensor<'a>) -> Result<Tensor<'a>> {
        let op = CustomOp::GeluErf;
        let a = self.contiguous_f32(op, a, "the input")?;
        self.custom_op(op, &[a])
    }

    /// [`Context::mul_mat`] of a [`crate::cpu_kernels::PackedQ8`] weight (an [`DType::I8`] tensor of
    /// [`crate::cpu_kernels::PackedQ8::tensor_shape`]) and f32 activations `x` [k, m], plus `bias` ([n]
    /// f32) when given, in one op: the result is [n, m]. A CPU-only custom op; needs
    /// [`crate::cpu_kernels::q8_kernel_available`]. Refuses any other operand with an error.
    pub fn mul_mat_q8_packed<'a>(
        &'a self,
        packed: Tensor<'a>,
        x: Tensor<'a>,
        bias: Option<Tensor<'a>>,
    ) -> Result<Tensor<'a>> {
        let op = CustomOp::Q8Packed;
        let mut args = vec![packed, self.contiguous_f32(op, x, "the activations")?];
        if let Some(b) = bias {
            args.push(self.contiguous_f32(op, b, "the bias")?);
        }
        self.custom_op(op, &args)
    }

    /// Multi-head self-attention without a mask, scale 1/sqrt(64), as a CPU-only custom
    /// op: `qkv` is [3 d, t] f32 (each row the stacked query, key and value), the
    /// result [d, t] with heads side by side. Needs [`attention_kernel_available`] and
    /// `d = heads * ATTENTION_HEAD_DIM`. The whole score row of a query stays in cache,
    /// so the softmax is exact, with no running rescale. Refuses any other operand.
    pub fn self_attention_cpu<'a>(&'a self, qkv: Tensor<'a>, heads: usize) -> Result<Tensor<'a>> {
        let op = CustomOp::SelfAttention { heads };
        let qkv = self.contiguous_f32(op, qkv, "the stacked q, k, v")?;
        self.custom_op(op, &[qkv])
    }

    /// `x W^T` for an f32 weight packed by [`crate::cpu_kernels::pack_f32_transposed`] (a contiguous f32
    /// tensor [n, k], `n` whole runs of [`crate::cpu_kernels::F32_PRODUCT_COLS`]) and f32 activations `x`
    /// [k, m]: the result is [n, m]. A CPU-only custom op; needs
    /// [`attention_kernel_available`] (the same vector code). Refuses any other operand.
    pub fn mul_mat_f32_packed<'a>(
        &'a self,
        packed: Tensor<'a>,
        x: Tensor<'a>,
    ) -> Result<Tensor<'a>> {
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
    pub fn mul_mat_f16_cpu<'a>(&'a self, w: Tensor<'a>, x: Tensor<'a>) -> Result<Tensor<'a>> {
        let op = CustomOp::F16Product;
        let x = if x.operand().row_contiguous() {
            x
        } else {
            self.contiguous_f32(op, x, "the activations")?
        };
        self.custom_op(op, &[w, x])
    }

    /// A CPU-only custom op node: the f32 tensor `op` computes from `args`, on every
    /// worker thread, once [`CustomOp::check`] accepted them (its callback checks
    /// them again when it runs).
    fn custom_op<'a>(&'a self, op: CustomOp, args: &[Tensor<'a>]) -> Result<Tensor<'a>> {
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
                Some(custom_op::callback),
                -1, // GGML_N_TASKS_MAX: every worker thread
                userdata,
            )
        }))
    }

    /// `a` itself when it is contiguous f32, a contiguous copy when it is f32 laid out
    /// otherwise; an error naming `op` and `what` for any other type.
    fn contiguous_f32<'a>(&'a self, op: CustomOp, a: Tensor<'a>, what: &str) -> Result<Tensor<'a>> {
        let operand = a.operand();
        if operand.dtype != Some(DType::F32) {
            return Err(GgmlError::Operand {
                op: op.name(),
                reason: format!(
                    "{what}: {}, expected F32",
                    operand
                        .dtype
                        .map_or("a type the engine does not use".into(), |t| format!(
                            "{t:?}"
                        ))
                ),
            });
        }
        Ok(if operand.contiguous() {
            a
        } else {
            self.cont(a)
        })
    }

    /// Multiplies every element by `s`.
    pub fn scale<'a>(&'a self, a: Tensor<'a>, s: f32) -> Tensor<'a> {
        // SAFETY: as above.
        self.wrap(unsafe { sys::ggml_scale(self.raw.as_ptr(), a.raw(), s) })
    }

    /// Softmax along `ne[0]`.
    pub fn soft_max<'a>(&'a self, a: Tensor<'a>) -> Tensor<'a> {
        // SAFETY: as above.
        self.wrap(unsafe { sys::ggml_soft_max(self.raw.as_ptr(), a.raw()) })
    }

    /// Causal mask: sets element (i, j) to -inf where `i > n_past + j` (`i` along `ne[0]`).
    pub fn diag_mask_inf<'a>(&'a self, a: Tensor<'a>, n_past: i32) -> Tensor<'a> {
        // SAFETY: as above.
        self.wrap(unsafe { sys::ggml_diag_mask_inf(self.raw.as_ptr(), a.raw(), n_past) })
    }

    /// Rows of `a` picked by the i32 indices in `rows` (an embedding lookup).
    pub fn get_rows<'a>(&'a self, a: Tensor<'a>, rows: Tensor<'a>) -> Tensor<'a> {
        // SAFETY: as above; ggml checks `rows` is I32.
        self.wrap(unsafe { sys::ggml_get_rows(self.raw.as_ptr(), a.raw(), rows.raw()) })
    }

    /// Copies `a` into `b` (which may be a view of a persistent tensor); the result is
    /// `b` with the copy as its producer, to be expanded into a graph.
    pub fn cpy<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>) -> Tensor<'a> {
        // SAFETY: as above; ggml checks the element counts match.
        self.wrap(unsafe { sys::ggml_cpy(self.raw.as_ptr(), a.raw(), b.raw()) })
    }

    /// Concatenates `a` and `b` along axis `dim`.
    pub fn concat<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>, dim: i32) -> Tensor<'a> {
        // SAFETY: as above; ggml checks the other dims match.
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
        // SAFETY: ggml checks the view stays inside the tensor.
        self.wrap(unsafe {
            sys::ggml_view_3d(
                self.raw.as_ptr(),
                a.raw(),
                ne[0],
                ne[1],
                ne[2],
                s1 * esize,
                s2 * esize,
                offset_elems * esize,
            )
        })
    }

    /// A computation graph with room for `max_nodes` nodes.
    pub fn new_graph(&self, max_nodes: usize) -> Graph<'_> {
        // SAFETY: the context was sized for this graph in `new`.
        let raw = unsafe { sys::ggml_new_graph_custom(self.raw.as_ptr(), max_nodes, false) };
        Graph {
            raw: NonNull::new(raw).expect("context too small for the graph"),
            ctx: self,
        }
    }
}

tensor_ops! {
    /// Element-wise sum, broadcasting `b` over `a`.
    fn add(a, b) => ggml_add;
    /// Element-wise product, broadcasting `b` over `a`.
    fn mul(a, b) => ggml_mul;
    /// Element-wise square root.
    fn sqrt(a) => ggml_sqrt;
    /// Element-wise logistic sigmoid.
    fn sigmoid(a) => ggml_sigmoid;
    /// Element-wise hyperbolic tangent.
    fn tanh(a) => ggml_tanh;
    /// Element-wise max(x, 0).
    fn relu(a) => ggml_relu;
    /// A contiguous copy (materialises a permuted or strided view).
    fn cont(a) => ggml_cont;
    /// Swaps the first two axes (a view).
    fn transpose(a) => ggml_transpose;
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

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.ne().iter().product::<i64>() as usize
    }

    /// True for a tensor with no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element type; `None` for a type the engine does not compute in (the i32 token
    /// ids of [`Context::new_i32_tensor`], or anything else ggml made).
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

    fn check_allocated(&self, n: usize, what: &str) -> Result<()> {
        // SAFETY: as above.
        let has_buffer =
            unsafe { !(*self.raw()).buffer.is_null() || !(*self.raw()).view_src.is_null() };
        if !has_buffer {
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
        let (nbytes, has_buffer) = unsafe {
            let t = &*self.raw();
            (
                sys::ggml_nbytes(self.raw()),
                !t.buffer.is_null() || !t.view_src.is_null(),
            )
        };
        if !has_buffer || nbytes != data.len() {
            return Err(GgmlError::Failed(format!(
                "write: expected an allocated tensor of {nbytes} bytes, got {}",
                data.len()
            )));
        }
        // SAFETY: size and memory checked above.
        unsafe { sys::ggml_backend_tensor_set(self.raw(), data.as_ptr().cast(), 0, nbytes) };
        Ok(())
    }

    /// Copies host data into the (allocated) i32 tensor.
    pub fn write_i32(&self, data: &[i32]) -> Result<()> {
        // SAFETY: the tensor is live while its context is.
        let (is_i32, has_buffer) = unsafe {
            let t = &*self.raw();
            (
                t.type_ == sys::GGML_TYPE_I32,
                !t.buffer.is_null() || !t.view_src.is_null(),
            )
        };
        if !has_buffer || !is_i32 || data.len() != self.len() {
            return Err(GgmlError::Failed(format!(
                "write: expected an allocated i32 tensor of {} values, got {}",
                self.len(),
                data.len()
            )));
        }
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

    /// Copies the (allocated) f32 tensor to the host.
    pub fn read_f32(&self) -> Result<Vec<f32>> {
        let mut out = vec![0f32; self.len()];
        self.check_allocated(out.len(), "read")?;
        // SAFETY: sizes checked above.
        unsafe {
            sys::ggml_backend_tensor_get(
                self.raw(),
                out.as_mut_ptr().cast(),
                0,
                std::mem::size_of_val(out.as_slice()),
            )
        };
        Ok(out)
    }
}

/// A forward computation graph, valid while its [`Context`] lives.
pub struct Graph<'ctx> {
    raw: NonNull<sys::ggml_cgraph>,
    /// Its context, asked after a compute whether a custom op failed.
    ctx: &'ctx Context,
}

impl Graph<'_> {
    /// Adds `t` and everything it depends on to the graph.
    pub fn expand(&mut self, t: Tensor<'_>) {
        // SAFETY: graph and tensor share a live context.
        unsafe { sys::ggml_build_forward_expand(self.raw.as_ptr(), t.raw()) }
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
                backend.device.name
            ))
        })?;
        Ok(Buffer { raw })
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        // SAFETY: live buffer.
        unsafe { sys::ggml_backend_buffer_get_size(self.raw.as_ptr()) }
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
}

impl Scheduler {
    /// A scheduler over `backends` (CPU last) for graphs of up to `graph_size` nodes.
    pub fn new(backends: &[&Backend], graph_size: usize) -> Result<Self> {
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
        Ok(Scheduler { raw })
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
        let sched = self.raw.as_ptr();
        let started = std::time::Instant::now();
        // SAFETY: scheduler and graph are live; inputs are tensors of the graph.
        unsafe {
            sys::ggml_backend_sched_reset(sched);
            if !sys::ggml_backend_sched_alloc_graph(sched, graph.raw.as_ptr()) {
                return Err(GgmlError::Failed(
                    "could not allocate the compute graph".into(),
                ));
            }
        }
        let allocated = std::time::Instant::now();
        for (t, data) in inputs {
            t.write_f32(data)?;
        }
        for (t, data) in int_inputs {
            t.write_i32(data)?;
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

impl Drop for Scheduler {
    fn drop(&mut self) {
        // SAFETY: we own the scheduler.
        unsafe { sys::ggml_backend_sched_free(self.raw.as_ptr()) }
    }
}

/// A metadata value in a GGUF file (the kinds the engine reads and writes).
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    /// UTF-8 string.
    Str(String),
    /// Unsigned 32-bit integer.
    U32(u32),
    /// 32-bit float.
    F32(f32),
    /// Array of UTF-8 strings (e.g. a tokenizer vocabulary).
    StrArray(Vec<String>),
    /// Array of unsigned 32-bit integers.
    U32Array(Vec<u32>),
}

/// A named tensor with host data, as read from or written to a model file.
#[derive(Debug, Clone)]
pub struct HostTensor {
    /// Tensor name.
    pub name: String,
    /// Element type of `data`.
    pub dtype: DType,
    /// Dims in ggml order (`ne[0]` fastest).
    pub ne: Vec<i64>,
    /// Raw little-endian element bytes.
    pub data: Vec<u8>,
}

impl HostTensor {
    /// The values as f32, dequantizing block types with ggml's own routine. A data
    /// buffer that ends inside a block yields the values of its whole blocks only.
    pub fn to_f32(&self) -> Vec<f32> {
        match self.dtype {
            DType::F32 => self
                .data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            DType::F16 => f16_bytes_to_f32(&self.data),
            DType::I8 => self.data.iter().map(|&b| b as i8 as f32).collect(),
            DType::Q8_0 => {
                let blocks = self.data.len() / self.dtype.size();
                let n = blocks * self.dtype.block_len();
                let mut out = vec![0f32; n];
                // SAFETY: ggml's type traits are static; Q8_0 has a to_float routine that
                // reads `blocks` whole blocks (within `data`) and writes n floats.
                unsafe {
                    let traits = sys::ggml_get_type_traits(self.dtype.raw());
                    if let Some(to_float) = (*traits).to_float {
                        to_float(self.data.as_ptr().cast(), out.as_mut_ptr(), n as i64);
                    }
                }
                out
            }
        }
    }
}

/// Metadata and tensors of a GGUF file.
#[derive(Debug, Clone, Default)]
pub struct GgufContents {
    /// Key/value metadata of supported kinds (others are skipped).
    pub metadata: Vec<(String, GgufValue)>,
    /// Every tensor with its data.
    pub tensors: Vec<HostTensor>,
}

/// Reads a whole GGUF file from memory (metadata and tensor data).
pub fn read_gguf(bytes: &[u8]) -> Result<GgufContents> {
    init();
    let mut data_ctx: *mut sys::ggml_context = std::ptr::null_mut();
    let params = sys::gguf_init_params {
        no_alloc: false,
        ctx: &mut data_ctx,
    };
    // SAFETY: bytes is valid for its length; ggml copies what it needs into data_ctx.
    let gguf = unsafe { sys::gguf_init_from_buffer(bytes.as_ptr().cast(), bytes.len(), params) };
    // SAFETY: gguf and data_ctx come from gguf_init_from_buffer; a tensor of data_ctx
    // holds ggml_nbytes of data.
    unsafe {
        read_contents(gguf, data_ctx, |t, _offset, nbytes| {
            if (*t).data.is_null() {
                return Err("has no data".into());
            }
            Ok(std::slice::from_raw_parts((*t).data as *const u8, nbytes).to_vec())
        })
    }
}

/// Reads a GGUF file's metadata, then each tensor's data from the file straight into
/// its own buffer: the file is never held whole in memory, nor copied by ggml. A
/// tensor that would end past the end of the file is refused before any allocation.
pub fn read_gguf_file(path: &Path) -> Result<GgufContents> {
    use std::io::{Read, Seek, SeekFrom};
    init();
    let io = |e: std::io::Error| GgmlError::BadGguf(format!("{}: {e}", path.display()));
    let mut file = std::fs::File::open(path).map_err(io)?;
    let file_len = file.metadata().map_err(io)?.len();
    let c = CString::new(path.to_string_lossy().as_bytes())
        .map_err(|_| GgmlError::BadGguf(format!("{}: a path with a NUL byte", path.display())))?;
    let mut meta_ctx: *mut sys::ggml_context = std::ptr::null_mut();
    let params = sys::gguf_init_params {
        no_alloc: true,
        ctx: &mut meta_ctx,
    };
    // SAFETY: c is a valid NUL-terminated path; no_alloc makes ggml read the header,
    // metadata and tensor table only.
    let gguf = unsafe { sys::gguf_init_from_file(c.as_ptr(), params) };
    // SAFETY: gguf and meta_ctx come from gguf_init_from_file; the closure reads only
    // the offsets ggml reports and the file.
    unsafe {
        let data_offset = if gguf.is_null() {
            0
        } else {
            sys::gguf_get_data_offset(gguf) as u64
        };
        read_contents(gguf, meta_ctx, |_t, offset, nbytes| {
            let start = data_offset + offset as u64;
            if start
                .checked_add(nbytes as u64)
                .is_none_or(|end| end > file_len)
            {
                return Err(format!(
                    "has {nbytes} bytes at offset {start}, past the end of the {file_len}-byte file"
                ));
            }
            let mut data = vec![0u8; nbytes];
            file.seek(SeekFrom::Start(start))
                .and_then(|_| file.read_exact(&mut data))
                .map_err(|e| e.to_string())?;
            Ok(data)
        })
    }
}

/// The metadata and tensors of a parsed GGUF, each tensor's data from `data(tensor,
/// offset in the data section, bytes)`; frees `gguf` and `ctx`.
///
/// # Safety
/// `gguf` is null or a live context from `gguf_init_*`, `ctx` null or its tensor
/// context; `data` may read `tensor` as ggml describes it.
unsafe fn read_contents(
    gguf: *mut sys::gguf_context,
    ctx: *mut sys::ggml_context,
    mut data: impl FnMut(*mut sys::ggml_tensor, usize, usize) -> std::result::Result<Vec<u8>, String>,
) -> Result<GgufContents> {
    if gguf.is_null() {
        if !ctx.is_null() {
            // SAFETY: the caller's guarantee.
            unsafe { sys::ggml_free(ctx) };
        }
        return Err(GgmlError::BadGguf(log::take_last_error().unwrap_or_else(
            || "header, metadata or tensor table is malformed or truncated".into(),
        )));
    }
    let mut out = GgufContents::default();
    // SAFETY: gguf and ctx are valid until freed below.
    let result = unsafe {
        for i in 0..sys::gguf_get_n_kv(gguf) {
            let key = cstr(sys::gguf_get_key(gguf, i));
            let value = match sys::gguf_get_kv_type(gguf, i) {
                sys::GGUF_TYPE_STRING => Some(GgufValue::Str(cstr(sys::gguf_get_val_str(gguf, i)))),
                sys::GGUF_TYPE_UINT32 => Some(GgufValue::U32(sys::gguf_get_val_u32(gguf, i))),
                sys::GGUF_TYPE_FLOAT32 => Some(GgufValue::F32(sys::gguf_get_val_f32(gguf, i))),
                sys::GGUF_TYPE_ARRAY => {
                    let n = sys::gguf_get_arr_n(gguf, i);
                    match sys::gguf_get_arr_type(gguf, i) {
                        sys::GGUF_TYPE_STRING => Some(GgufValue::StrArray(
                            (0..n)
                                .map(|j| cstr(sys::gguf_get_arr_str(gguf, i, j)))
                                .collect(),
                        )),
                        sys::GGUF_TYPE_UINT32 => {
                            let p = sys::gguf_get_arr_data(gguf, i) as *const u32;
                            Some(GgufValue::U32Array(if n == 0 || p.is_null() {
                                Vec::new()
                            } else {
                                std::slice::from_raw_parts(p, n).to_vec()
                            }))
                        }
                        _ => None,
                    }
                }
                _ => None,
            };
            if let Some(v) = value {
                out.metadata.push((key, v));
            }
        }
        let mut res = Ok(());
        for i in 0..sys::gguf_get_n_tensors(gguf) {
            let name = cstr(sys::gguf_get_tensor_name(gguf, i));
            // Packed I8 weights exist only in memory; a file never holds them.
            let stored = DType::from_raw(sys::gguf_get_tensor_type(gguf, i));
            let Some(dtype) = stored.filter(|&t| t != DType::I8) else {
                res = Err(GgmlError::BadGguf(format!(
                    "tensor '{name}' has an unsupported type"
                )));
                break;
            };
            let c = CString::new(name.clone()).unwrap_or_default();
            let t = if ctx.is_null() {
                std::ptr::null_mut()
            } else {
                sys::ggml_get_tensor(ctx, c.as_ptr())
            };
            if t.is_null() {
                res = Err(GgmlError::BadGguf(format!("tensor '{name}' has no data")));
                break;
            }
            let n_dims = sys::ggml_n_dims(t) as usize;
            let ne_all = (*t).ne;
            let ne: Vec<i64> = ne_all[..n_dims].to_vec();
            let nbytes = sys::ggml_nbytes(t);
            match data(t, sys::gguf_get_tensor_offset(gguf, i), nbytes) {
                Ok(bytes) => out.tensors.push(HostTensor {
                    name,
                    dtype,
                    ne,
                    data: bytes,
                }),
                Err(reason) => {
                    res = Err(GgmlError::BadGguf(format!("tensor '{name}' {reason}")));
                    break;
                }
            }
        }
        sys::gguf_free(gguf);
        if !ctx.is_null() {
            sys::ggml_free(ctx);
        }
        res
    };
    result.map(|()| out)
}

/// Writes metadata and tensors to a GGUF file at `path` (the caller makes it atomic).
pub fn write_gguf(
    path: &Path,
    metadata: &[(String, GgufValue)],
    tensors: &[HostTensor],
) -> Result<()> {
    init();
    let total: usize = tensors.iter().map(|t| t.data.len() + 64).sum();
    // SAFETY: sizes are computed from the tensors; every pointer below is checked.
    unsafe {
        let params = sys::ggml_init_params {
            mem_size: total + (tensors.len() + 1) * sys::ggml_tensor_overhead(),
            mem_buffer: std::ptr::null_mut(),
            no_alloc: false,
        };
        let ctx = sys::ggml_init(params);
        if ctx.is_null() {
            return Err(GgmlError::Failed("ggml_init failed".into()));
        }
        let gguf = sys::gguf_init_empty();
        for (key, value) in metadata {
            let k = CString::new(key.as_str()).unwrap_or_default();
            match value {
                GgufValue::Str(s) => {
                    let v = CString::new(s.as_str()).unwrap_or_default();
                    sys::gguf_set_val_str(gguf, k.as_ptr(), v.as_ptr());
                }
                GgufValue::U32(v) => sys::gguf_set_val_u32(gguf, k.as_ptr(), *v),
                GgufValue::F32(v) => sys::gguf_set_val_f32(gguf, k.as_ptr(), *v),
                GgufValue::StrArray(items) => {
                    let owned: Vec<CString> = items
                        .iter()
                        .map(|x| CString::new(x.as_str()).unwrap_or_default())
                        .collect();
                    let mut ptrs: Vec<*const std::os::raw::c_char> =
                        owned.iter().map(|c| c.as_ptr()).collect();
                    sys::gguf_set_arr_str(gguf, k.as_ptr(), ptrs.as_mut_ptr(), ptrs.len());
                }
                GgufValue::U32Array(items) => sys::gguf_set_arr_data(
                    gguf,
                    k.as_ptr(),
                    sys::GGUF_TYPE_UINT32,
                    items.as_ptr().cast(),
                    items.len(),
                ),
            }
        }
        for t in tensors {
            let ne: Vec<i64> = if t.ne.is_empty() {
                vec![1]
            } else {
                t.ne.clone()
            };
            let gt = sys::ggml_new_tensor(ctx, t.dtype.raw(), ne.len() as i32, ne.as_ptr());
            let name = CString::new(t.name.as_str()).unwrap_or_default();
            sys::ggml_set_name(gt, name.as_ptr());
            let nbytes = sys::ggml_nbytes(gt);
            assert_eq!(nbytes, t.data.len(), "tensor {} data size", t.name);
            std::ptr::copy_nonoverlapping(t.data.as_ptr(), (*gt).data as *mut u8, nbytes);
            sys::gguf_add_tensor(gguf, gt);
        }
        let p = CString::new(path.to_string_lossy().as_bytes()).unwrap_or_default();
        let ok = sys::gguf_write_to_file(gguf, p.as_ptr(), false);
        sys::gguf_free(gguf);
        sys::ggml_free(ctx);
        if ok {
            Ok(())
        } else {
            Err(GgmlError::Failed(format!(
                "could not write {}",
                path.display()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// True when this CPU runs the custom ops' kernels; otherwise says so, and fails
    /// under CI (where a test that asserts nothing must not pass).
    pub(super) fn kernels_here() -> bool {
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
    fn refused(r: Result<Tensor<'_>>, op: &str, needle: &str) {
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
        assert_eq!(ids.dtype(), None, "i32 is no compute type");
        refused(ctx.gelu_erf_cpu(ids), op, "a type the engine does not use");
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

    fn tensor(name: &str, dtype: DType, data: Vec<u8>) -> HostTensor {
        HostTensor {
            name: name.into(),
            dtype,
            ne: vec![data.len() as i64 / dtype.size() as i64],
            data,
        }
    }

    #[test]
    fn a_gguf_file_reads_like_its_bytes_and_a_truncated_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        let tensors = [
            tensor("a", DType::F32, 1.5f32.to_le_bytes().repeat(40)),
            tensor("b", DType::F16, vec![0x3c; 64]),
        ];
        let meta = [("k".to_string(), GgufValue::U32(7))];
        write_gguf(&path, &meta, &tensors).unwrap();
        let from_file = read_gguf_file(&path).unwrap();
        let from_bytes = read_gguf(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(from_file.metadata, from_bytes.metadata);
        assert_eq!(from_file.tensors.len(), 2);
        for (f, b) in from_file.tensors.iter().zip(&from_bytes.tensors) {
            assert_eq!(
                (&f.name, f.dtype, &f.ne, &f.data),
                (&b.name, b.dtype, &b.ne, &b.data)
            );
        }
        let len = std::fs::metadata(&path).unwrap().len();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(len - 10).unwrap();
        let Err(err) = read_gguf_file(&path) else {
            panic!("a truncated GGUF was read");
        };
        assert!(
            err.to_string().contains("tensor 'b'") && err.to_string().contains("past the end"),
            "{err}"
        );
    }

    #[test]
    fn a_gguf_holding_packed_i8_weights_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let plain = tensor("w", DType::F32, 1f32.to_le_bytes().repeat(4));
        let ok = dir.path().join("ok.gguf");
        write_gguf(&ok, &[], std::slice::from_ref(&plain)).unwrap();
        let read = read_gguf(&std::fs::read(&ok).unwrap()).unwrap();
        assert_eq!(read.tensors.len(), 1);

        let bad = dir.path().join("bad.gguf");
        write_gguf(
            &bad,
            &[],
            &[plain, tensor("packed", DType::I8, vec![7; 64])],
        )
        .unwrap();
        let Err(err) = read_gguf(&std::fs::read(&bad).unwrap()) else {
            panic!("a GGUF with an I8 tensor was read");
        };
        assert!(
            err.to_string().contains("'packed' has an unsupported type"),
            "{err}"
        );
    }
}
