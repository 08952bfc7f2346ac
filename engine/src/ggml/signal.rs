//! Wrapper ops for signal-processing model code (Kokoro's iSTFTNet decoder): element-wise
//! maths (sin, exp, division), LeakyReLU with a slope, zero and reflection padding, a
//! dilated f32 convolution and the f32 transposed convolution. Each is one ggml op (or a
//! short ggml composition), so every backend the scheduler drives runs it.

use llama_cpp_sys_2 as sys;

use super::{f16_bytes_to_f32, Context, DType, GgmlError, Result, Tensor};

tensor_ops! {
    /// Element-wise difference `a - b`, broadcasting `b` over `a`.
    fn sub(a, b) => ggml_sub;
    /// Element-wise quotient `a / b`, broadcasting `b` over `a`.
    fn div(a, b) => ggml_div;
    /// Element-wise square.
    fn sqr(a) => ggml_sqr;
    /// Element-wise sine.
    fn sin(a) => ggml_sin;
    /// Element-wise cosine.
    fn cos(a) => ggml_cos;
    /// Element-wise natural exponential.
    fn exp(a) => ggml_exp;
}

impl Context {
    /// `a` itself when it is f32, else a copy converted to f32 (an f16 weight that an
    /// op without f16 support reads, such as a broadcast product's second operand).
    pub fn to_f32<'a>(&'a self, a: Tensor<'a>) -> Tensor<'a> {
        if a.dtype() == Some(DType::F32) {
            return a;
        }
        // SAFETY: tensors belong to this context; ggml converts every float type.
        self.wrap(unsafe { sys::ggml_cast(self.raw.as_ptr(), a.raw(), sys::GGML_TYPE_F32) })
    }

    /// Element-wise LeakyReLU: `x` where positive, `slope * x` elsewhere.
    pub fn leaky_relu<'a>(&'a self, a: Tensor<'a>, slope: f32) -> Tensor<'a> {
        // SAFETY: as above.
        self.wrap(unsafe { sys::ggml_leaky_relu(self.raw.as_ptr(), a.raw(), slope, false) })
    }

    /// Zero padding: `before[i]` zeros before and `after[i]` zeros after the data along
    /// axis `i` (ggml order).
    pub fn pad_zeros<'a>(&'a self, a: Tensor<'a>, before: [i32; 2], after: [i32; 2]) -> Tensor<'a> {
        // SAFETY: as above; ggml checks the paddings are non-negative.
        self.wrap(unsafe {
            sys::ggml_pad_ext(
                self.raw.as_ptr(),
                a.raw(),
                before[0],
                after[0],
                before[1],
                after[1],
                0,
                0,
                0,
                0,
            )
        })
    }

    /// Reflection padding along `ne[0]` (PyTorch's `ReflectionPad1d`, the edge sample not
    /// repeated): `left` samples before, `right` after.
    pub fn pad_reflect_1d<'a>(&'a self, a: Tensor<'a>, left: i32, right: i32) -> Tensor<'a> {
        // SAFETY: as above; ggml checks the paddings are shorter than the row.
        self.wrap(unsafe { sys::ggml_pad_reflect_1d(self.raw.as_ptr(), a.raw(), left, right) })
    }

    /// [`Context::conv_1d_f32`] with a dilation: `kernel` is [K, IC, OC], `input` is
    /// [L, IC, N]; returns [OC, OL, N] (channels fastest), computed in f32.
    pub fn conv_1d_f32_dilated<'a>(
        &'a self,
        kernel: Tensor<'a>,
        input: Tensor<'a>,
        stride: i32,
        pad: i32,
        dilation: i32,
    ) -> Tensor<'a> {
        let ctx = self.raw.as_ptr();
        // SAFETY: tensors of this context; the reshapes keep element counts (im2col's
        // result is contiguous, the kernel is a weight stored contiguous).
        unsafe {
            let cols = sys::ggml_im2col(
                ctx,
                kernel.raw(),
                input.raw(),
                stride,
                0,
                pad,
                0,
                dilation,
                0,
                false,
                sys::GGML_TYPE_F32,
            );
            let (ick, ol, n) = ((*cols).ne[0], (*cols).ne[1], (*cols).ne[2]);
            let oc = (*kernel.raw()).ne[2];
            let k2 = sys::ggml_reshape_2d(ctx, kernel.raw(), ick, oc);
            let c2 = sys::ggml_reshape_2d(ctx, cols, ick, ol * n);
            let out = sys::ggml_mul_mat(ctx, k2, c2);
            self.wrap(sys::ggml_reshape_3d(ctx, out, oc, ol, n))
        }
    }

    /// [`Context::conv_1d_f32_dilated`] for one sequence with the product the other way
    /// round, so the result is [OL, OC] (time fastest) with no transpose: `kernel` is
    /// [K, IC, OC] f32, `input` is [L, IC].
    pub fn conv_1d_f32_time_major<'a>(
        &'a self,
        kernel: Tensor<'a>,
        input: Tensor<'a>,
        stride: i32,
        pad: i32,
        dilation: i32,
    ) -> Tensor<'a> {
        let ctx = self.raw.as_ptr();
        // SAFETY: as in conv_1d_f32_dilated; the pad and the view stay inside tensors
        // this function makes.
        unsafe {
            // ggml's blocked CPU f32 product (tinyBLAS) takes only a first operand whose
            // row count (here the output length) is a multiple of 4; any other falls
            // back to one dot product per output, several times slower (it was half of
            // Kokoro's decoder time). Zeros after the input add the missing outputs,
            // which a view drops.
            let (k, l) = ((*kernel.raw()).ne[0], (*input.raw()).ne[0]);
            let (s, p, d) = (stride as i64, pad as i64, dilation as i64);
            let ol = (l + 2 * p - d * (k - 1) - 1) / s + 1;
            let extra = (PRODUCT_ROWS - ol % PRODUCT_ROWS) % PRODUCT_ROWS;
            let input = if extra == 0 || ol <= 0 {
                input.raw()
            } else {
                sys::ggml_pad(ctx, input.raw(), (extra * s) as i32, 0, 0, 0)
            };
            let cols = sys::ggml_im2col(
                ctx,
                kernel.raw(),
                input,
                stride,
                0,
                pad,
                0,
                dilation,
                0,
                false,
                sys::GGML_TYPE_F32,
            );
            let (ick, ol_padded) = ((*cols).ne[0], (*cols).ne[1] * (*cols).ne[2]);
            let oc = (*kernel.raw()).ne[2];
            let k2 = sys::ggml_reshape_2d(ctx, kernel.raw(), ick, oc);
            let c2 = sys::ggml_reshape_2d(ctx, cols, ick, ol_padded);
            let out = sys::ggml_mul_mat(ctx, c2, k2); // [ol_padded, oc]
            if ol_padded == ol {
                return self.wrap(out);
            }
            let kept = sys::ggml_view_2d(ctx, out, ol, oc, (*out).nb[1], 0);
            self.wrap(sys::ggml_cont(ctx, kept))
        }
    }

    /// Transposed 1-D convolution without padding (PyTorch `ConvTranspose1d`, groups 1,
    /// padding 0, dilation 1), in f32: `kernel` is [K, OC, IC] (PyTorch's [IC, OC, K]),
    /// `input` is [L, IC]; returns [(L - 1) * stride + K, OC] (time fastest). Callers
    /// crop the result for PyTorch's `padding`.
    pub fn conv_transpose_1d_f32<'a>(
        &'a self,
        kernel: Tensor<'a>,
        input: Tensor<'a>,
        stride: i32,
    ) -> Tensor<'a> {
        // SAFETY: as above; ggml asserts the channel counts match.
        self.wrap(unsafe {
            sys::ggml_conv_transpose_1d(self.raw.as_ptr(), kernel.raw(), input.raw(), stride, 0, 1)
        })
    }

    /// A 2-D view [ne0, ne1] of `a` with a row stride of `row_stride` elements, starting
    /// at element `offset_elems` (axis 0 contiguous).
    pub fn view_2d_strided<'a>(
        &'a self,
        a: Tensor<'a>,
        ne: [i64; 2],
        row_stride: usize,
        offset_elems: usize,
    ) -> Tensor<'a> {
        let esize = a.element_size().expect("views of unblocked types");
        let strides = [esize, row_stride.saturating_mul(esize)];
        super::require_view_inside(
            "view_2d_strided",
            &a,
            &ne,
            &strides,
            offset_elems.saturating_mul(esize),
        );
        // SAFETY: the view lies inside the tensor (checked above).
        self.wrap(unsafe {
            sys::ggml_view_2d(
                self.raw.as_ptr(),
                a.raw(),
                ne[0],
                ne[1],
                row_stride.saturating_mul(esize),
                offset_elems.saturating_mul(esize),
            )
        })
    }
}

impl Tensor<'_> {
    /// Copies an allocated f32 or f16 tensor to the host as f32 (a small weight the host
    /// computes with, whichever of the two types the converter stored).
    pub fn read_f32_converted(&self) -> Result<Vec<f32>> {
        match self.dtype() {
            Some(DType::F32) => self.read_f32(),
            Some(DType::F16) => {
                // SAFETY: the tensor is live while its context is.
                let (nbytes, has_buffer) = unsafe {
                    let t = &*self.raw();
                    (
                        sys::ggml_nbytes(self.raw()),
                        !t.buffer.is_null() || !t.view_src.is_null(),
                    )
                };
                if !has_buffer {
                    return Err(GgmlError::Failed("read: tensor has no memory yet".into()));
                }
                let mut bytes = vec![0u8; nbytes];
                // SAFETY: the buffer holds nbytes; the tensor has backend memory.
                unsafe {
                    sys::ggml_backend_tensor_get(self.raw(), bytes.as_mut_ptr().cast(), 0, nbytes)
                };
                Ok(f16_bytes_to_f32(&bytes))
            }
            other => Err(GgmlError::Failed(format!(
                "read: expected an f32 or f16 tensor, got {other:?}"
            ))),
        }
    }
}

/// The row multiple ggml's blocked CPU f32 product needs of its first operand.
const PRODUCT_ROWS: i64 = 4;
