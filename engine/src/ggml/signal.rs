//! Wrapper ops for signal-processing model code (Kokoro's iSTFTNet decoder): element-wise
//! maths (sin, exp, division), LeakyReLU with a slope, zero and reflection padding, a
//! dilated f32 convolution and the f32 transposed convolution. Each is one ggml op (or a
//! short ggml composition), so every backend the scheduler drives runs it.

use llama_cpp_sys_2 as sys;

use super::{checks, f16_bytes_to_f32, Context, DType, GgmlError, Result, Tensor};

tensor_ops! {
    /// Element-wise difference `a - b`, broadcasting `b` over `a`.
    fn sub(a, b) => ggml_sub if binary;
    /// Element-wise quotient `a / b`, broadcasting `b` over `a`.
    fn div(a, b) => ggml_div if binary;
    /// Element-wise square.
    fn sqr(a) => ggml_sqr if unary;
    /// Element-wise sine.
    fn sin(a) => ggml_sin if unary;
    /// Element-wise cosine.
    fn cos(a) => ggml_cos if unary;
    /// Element-wise natural exponential.
    fn exp(a) => ggml_exp if unary;
}

impl Context {
    /// `a` itself when it is f32, else a copy converted to f32 (an f16 weight that an
    /// op without f16 support reads, such as a broadcast product's second operand).
    pub fn to_f32<'a>(&'a self, a: Tensor<'a>) -> Tensor<'a> {
        if a.dtype() == Some(DType::F32) {
            return a;
        }
        checks::unary("to_f32", &a);
        // SAFETY: an f16 tensor of this context (checked above), which ggml converts.
        self.wrap(unsafe { sys::ggml_cast(self.raw.as_ptr(), a.raw(), sys::GGML_TYPE_F32) })
    }

    /// Element-wise LeakyReLU: `x` where positive, `slope * x` elsewhere.
    pub fn leaky_relu<'a>(&'a self, a: Tensor<'a>, slope: f32) -> Tensor<'a> {
        checks::unary("leaky_relu", &a);
        // SAFETY: f32 or f16 rows of this context (checked above).
        self.wrap(unsafe { sys::ggml_leaky_relu(self.raw.as_ptr(), a.raw(), slope, false) })
    }

    /// Zero padding: `before[i]` zeros before and `after[i]` zeros after the data along
    /// axis `i` (ggml order).
    pub fn pad_zeros<'a>(&'a self, a: Tensor<'a>, before: [i32; 2], after: [i32; 2]) -> Tensor<'a> {
        checks::require_rows_of("pad_zeros", "the input", &a, &[DType::F32]);
        checks::require(
            before.iter().chain(&after).all(|&p| p >= 0),
            "pad_zeros",
            || format!("paddings {before:?} and {after:?} must not be negative"),
        );
        let [n0, n1, n2, n3] = a.ne();
        // SAFETY: a pure layout query on a live tensor.
        let contiguous = unsafe { sys::ggml_is_contiguous(a.raw()) };
        let rows_only = before[0] == 0 && after[0] == 0 && n2 == 1 && n3 == 1 && n1 > 1;
        if rows_only && contiguous && (before[1] > 0 || after[1] > 0) {
            // CUDA launches a pad with ne[1] as its grid's y size (at most 65535): a
            // contiguous matrix padded along ne[1] is the same as its flat row padded by
            // whole rows, which every backend takes at any length.
            let flat = self.reshape(a, &[n0 * n1]);
            let wide = |p: i32| i32::try_from(i64::from(p) * n0).ok();
            if let (Some(lp), Some(rp)) = (wide(before[1]), wide(after[1])) {
                // SAFETY: a contiguous f32 row of this context, paddings of at least 0.
                let padded = self.wrap(unsafe {
                    sys::ggml_pad_ext(self.raw.as_ptr(), flat.raw(), lp, rp, 0, 0, 0, 0, 0, 0)
                });
                return self.reshape(
                    padded,
                    &[n0, n1 + i64::from(before[1]) + i64::from(after[1])],
                );
            }
        }
        // SAFETY: f32 rows of this context and paddings of at least 0 (checked above).
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
        checks::require_contiguous_of("pad_reflect_1d", "the input", &a, &[DType::F32]);
        let row = a.ne()[0];
        checks::require(
            (0..row).contains(&(left as i64)) && (0..row).contains(&(right as i64)),
            "pad_reflect_1d",
            || {
                format!("paddings {left} and {right} must be at least 0 and shorter than the row of {row}")
            },
        );
        // SAFETY: a contiguous f32 tensor of this context, paddings inside its row
        // (checked above).
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
        let cols = self.im2col_1d(kernel, input, [stride, pad, dilation]); // [IC*K, OL, N]
        let [ick, ol, n, _] = cols.ne();
        let oc = kernel.ne()[2];
        let k2 = self.reshape(kernel, &[ick, oc]);
        let c2 = self.reshape(cols, &[ick, ol * n]);
        let out = self.mul_mat(k2, c2); // [OC, OL*N]
        self.reshape(out, &[oc, ol, n])
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
        // ggml's blocked CPU f32 product (tinyBLAS) takes only a first operand whose
        // row count (here the output length) is a multiple of 4; any other falls back
        // to one dot product per output, several times slower (it was half of Kokoro's
        // decoder time). Zeros after the input add the missing outputs, which a view
        // drops.
        let ol = checks::conv_1d(
            "conv_1d_f32_time_major",
            kernel.ne(),
            &input,
            stride,
            pad,
            dilation,
        );
        let extra = (PRODUCT_ROWS - ol % PRODUCT_ROWS) % PRODUCT_ROWS;
        let input = if extra == 0 {
            input
        } else {
            self.pad_zeros(input, [0, 0], [(extra * stride as i64) as i32, 0])
        };
        let cols = self.im2col_1d(kernel, input, [stride, pad, dilation]);
        let [ick, ol_padded, n, _] = cols.ne();
        let oc = kernel.ne()[2];
        let k2 = self.reshape(kernel, &[ick, oc]);
        let c2 = self.reshape(cols, &[ick, ol_padded * n]);
        let out = self.mul_mat(c2, k2); // [ol_padded, oc]
        if ol_padded == ol {
            return out;
        }
        self.cont(self.view_2d_rows(out, ol, oc, 0))
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
        let (kn, xn) = (kernel.ne(), input.ne());
        checks::require(
            stride >= 1 && kn[2] == xn[1] && kn[3] == 1 && xn[2] * xn[3] == 1,
            "conv_transpose_1d_f32",
            || format!("a kernel {kn:?} does not fit an input {xn:?} at stride {stride}"),
        );
        checks::require_rows_of(
            "conv_transpose_1d_f32",
            "the kernel",
            &kernel,
            &[DType::F32, DType::F16],
        );
        checks::require_rows_of("conv_transpose_1d_f32", "the input", &input, &[DType::F32]);
        // SAFETY: f32 tensors of this context whose channels match, at a stride of at
        // least 1 (checked above).
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
        checks::require_view_inside(
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
                let nbytes = unsafe { sys::ggml_nbytes(self.raw()) };
                if !self.has_memory() {
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

#[cfg(test)]
mod tests {
    use crate::ggml::tests::cpu;
    use crate::ggml::{Context, DType, Scheduler};

    /// `pad_zeros` of a 3 x 4 matrix (ne = [3, 4], values 1..=12) by `before`/`after`,
    /// computed on the CPU; `strided` pads the first two columns of each row instead (a
    /// view whose rows are contiguous, the matrix not).
    fn padded(before: [i32; 2], after: [i32; 2], strided: bool) -> (Vec<f32>, [i64; 4]) {
        let backend = cpu();
        let mut sched = Scheduler::new(&[&backend], 16).unwrap();
        let ctx = Context::new(16, 16).unwrap();
        let x = ctx.new_tensor(DType::F32, &[3, 4], "x");
        x.mark_input();
        let input = if strided {
            ctx.view_2d_strided(x, [2, 4], 3, 0)
        } else {
            x
        };
        let y = ctx.cont(ctx.pad_zeros(input, before, after));
        y.mark_output();
        let mut graph = ctx.new_graph(16);
        graph.expand(y);
        let xs: Vec<f32> = (1..=12).map(|v| v as f32).collect();
        sched.compute(&mut graph, &[(x, &xs)]).unwrap();
        (y.read_f32().unwrap(), y.ne())
    }

    #[test]
    fn padding_whole_rows_of_a_contiguous_matrix_adds_zero_rows() {
        // The flat path (whole rows before and after a contiguous matrix).
        let (values, ne) = padded([0, 1], [0, 2], false);
        assert_eq!(ne, [3, 7, 1, 1]);
        let mut expected = vec![0.0; 3];
        expected.extend((1..=12).map(|v| v as f32));
        expected.extend([0.0; 6]);
        assert_eq!(values, expected);
        // ggml's own pad, on a view that is not contiguous, adds the same zero rows.
        let (values, ne) = padded([0, 1], [0, 1], true);
        assert_eq!(ne, [2, 6, 1, 1]);
        let mut expected = vec![0.0; 2];
        expected.extend((0..4).flat_map(|r| [(r * 3 + 1) as f32, (r * 3 + 2) as f32]));
        expected.extend([0.0; 2]);
        assert_eq!(values, expected);
        // Padding along ne[0] keeps ggml's path: each row gets its zeros.
        let (values, ne) = padded([1, 0], [0, 0], false);
        assert_eq!(ne, [4, 4, 1, 1]);
        let expected: Vec<f32> = (0..4)
            .flat_map(|r| {
                [
                    0.0,
                    (r * 3 + 1) as f32,
                    (r * 3 + 2) as f32,
                    (r * 3 + 3) as f32,
                ]
            })
            .collect();
        assert_eq!(values, expected);
    }
}
