//! Convolutions over quantized kernels: Kokoro's decoder keeps its large convolution
//! kernels as Q8_0 so that int8 dot products (activations quantized to q8 per block of
//! 32, as ggml does for every q8_0 product) replace the f32 ones. Each is an im2col and
//! one product: a plain `ggml_mul_mat`, which every backend the scheduler drives runs,
//! or on the CPU backend the engine's VNNI kernel over a [`crate::cpu_kernels::PackedQ8`] kernel
//! (ggml's own q8_0 CPU product was slower than its f32 one here), fused with the
//! im2col and the transpose on the CPU.

use llama_cpp_sys_2 as sys;

use super::{checks, Context, DType, GgmlError, Result, Tensor};

impl Context {
    /// 1-D convolution (PyTorch cross-correlation, one sequence) with a block-quantized
    /// kernel in tap-major order: `kernel` is [K * IC, OC] (row `oc` holds tap `k` of
    /// input channel `c` at `k * IC + c`, so each block of 32 is 32 channels of one tap)
    /// of a type such as [`DType::Q8_0`], `kernel_width` is K and `input` is [L, IC]
    /// f32. ggml's im2col rows ([IC][K]) are reordered to match before the product.
    /// Returns [OL, OC] (time fastest) in f32. Refuses a kernel whose row is not whole
    /// kernels of width K over the input's channels.
    pub fn conv_1d_quantized_time_major<'a>(
        &'a self,
        kernel: Tensor<'a>,
        kernel_width: i64,
        input: Tensor<'a>,
        stride: i32,
        pad: i32,
        dilation: i32,
    ) -> Result<Tensor<'a>> {
        let [ick, oc, one_a, one_b] = kernel.ne();
        let [_, ic, one_c, one_d] = input.ne();
        let refuse = |reason: String| GgmlError::Operand {
            op: "conv_1d_quantized_time_major",
            reason,
        };
        if one_a * one_b != 1 || one_c * one_d != 1 {
            return Err(refuse(format!(
                "kernel {:?} and input {:?} must be 2-D",
                kernel.ne(),
                input.ne()
            )));
        }
        if kernel_width < 1 || ick != kernel_width * ic {
            return Err(refuse(format!(
                "a kernel row of {ick} values is not {kernel_width} taps over the input's \
                 {ic} channels"
            )));
        }
        if input.dtype() != Some(DType::F32) {
            return Err(refuse(format!(
                "the input is {:?}, expected F32",
                input.dtype()
            )));
        }
        let cols = self.im2col_for(kernel_width, input, stride, pad, dilation)?; // [IC * K, OL]
        let ol = cols.ne()[1];
        let by_tap = self.permute(self.reshape(cols, &[kernel_width, ic, ol]), [1, 0, 2, 3]);
        let cols = self.reshape(self.cont(by_tap), &[ick, ol]); // [K * IC, OL]
        let y = self.mul_mat(kernel, cols); // [OC, OL]
        debug_assert_eq!(y.ne()[..2], [oc, cols.ne()[1]]);
        Ok(self.cont(self.transpose(y)))
    }

    /// [`Context::conv_1d_quantized_time_major`] with the kernel a [`crate::cpu_kernels::PackedQ8`]
    /// ([`DType::I8`], packed from the tap-major [K * IC, OC] q8_0 kernel) and the bias
    /// (`[OC]` f32) added inside the product: the engine's CPU kernel, so CPU only (needs
    /// [`crate::cpu_kernels::q8_kernel_available`]; IC whole blocks of 32). One custom op
    /// ([`crate::cpu_kernels::q8::conv_time_major`]) quantizes each input position once,
    /// builds each output's row from those bytes in cache and writes the result
    /// time-major, with the bits of the reordered im2col, the product and a transpose.
    /// Refuses operands the kernel does not take.
    pub fn conv_1d_q8_packed_time_major<'a>(
        &'a self,
        packed: Tensor<'a>,
        kernel_width: i64,
        input: Tensor<'a>,
        conv: [i32; 3],
        bias: Option<Tensor<'a>>,
    ) -> Result<Tensor<'a>> {
        let steps =
            crate::cpu_kernels::q8::ConvSteps::checked(kernel_width, conv).map_err(|reason| {
                GgmlError::Operand {
                    op: "conv_1d_q8_packed_time_major",
                    reason,
                }
            })?;
        self.conv_q8_packed(packed, input, steps, bias)
    }

    /// im2col of `input` [L, IC] f32 for a kernel of width `kernel_width`: [IC * K, OL].
    fn im2col_for<'a>(
        &'a self,
        kernel_width: i64,
        input: Tensor<'a>,
        stride: i32,
        pad: i32,
        dilation: i32,
    ) -> Result<Tensor<'a>> {
        let [l, ic, _, _] = input.ne();
        let reach = (dilation as i64).saturating_mul(kernel_width - 1);
        if kernel_width < 1 || stride < 1 || dilation < 1 || pad < 0 || l + 2 * pad as i64 <= reach
        {
            return Err(GgmlError::Operand {
                op: "im2col",
                reason: format!(
                    "an input of {l} samples (padding {pad}) is shorter than the kernel's \
                     reach, or a step is not positive (width {kernel_width}, stride \
                     {stride}, dilation {dilation})"
                ),
            });
        }
        // im2col reads only the shape of its kernel operand ([K, IC]): an unwritten
        // graph tensor of that shape stands in for the quantized kernel.
        let shape = self.new_tensor(DType::F32, &[kernel_width, ic], "conv_kernel_shape");
        let cols = self.im2col_1d(shape, input, [stride, pad, dilation]);
        let [ick, ol, _, _] = cols.ne();
        Ok(self.reshape(cols, &[ick, ol]))
    }

    /// ggml's im2col of a 1-D convolution, the one raw call every 1-D convolution of
    /// the wrapper makes: `kernel` [K, IC, ..] (only its shape is read), `input`
    /// [L, IC, N] f32, `conv` the stride, padding and dilation; returns [IC * K, OL, N]
    /// f32, contiguous.
    pub(super) fn im2col_1d<'a>(
        &'a self,
        kernel: Tensor<'a>,
        input: Tensor<'a>,
        conv: [i32; 3],
    ) -> Tensor<'a> {
        let [stride, pad, dilation] = conv;
        checks::conv_1d("im2col", kernel.ne(), &input, stride, pad, dilation);
        // SAFETY: tensors of this context; the steps, channels, input type and output
        // length fit what im2col asserts and divides by (checked above).
        self.wrap(unsafe {
            sys::ggml_im2col(
                self.raw.as_ptr(),
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
            )
        })
    }
}
