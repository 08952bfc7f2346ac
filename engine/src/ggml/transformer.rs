//! Wrapper ops for decoder transformers of the Llama/Qwen kind (Qwen3-TTS's talker, code
//! predictor and codec transformer): RMS normalisation, SiLU, rotary position embedding
//! in the NeoX layout, a softmax under an additive mask, and clamping. Each is one ggml
//! op, checked against the rule its CPU loop assumes, so every backend runs it.

use llama_cpp_sys_2 as sys;

use super::{checks, Context, DType, Tensor};

/// ggml's `GGML_ROPE_TYPE_NEOX` (a `#define` in ggml.h, which bindgen does not bind).
const ROPE_TYPE_NEOX: i32 = 2;

tensor_ops! {
    /// Element-wise SiLU, `x * sigmoid(x)`.
    fn silu(a) => ggml_silu if unary;
}

impl Context {
    /// Normalises each row (along `ne[0]`) by its root mean square:
    /// `x / sqrt(mean(x^2) + eps)` (no gain; multiply by the weight after).
    pub fn rms_norm<'a>(&'a self, a: Tensor<'a>, eps: f32) -> Tensor<'a> {
        checks::require_rows_of("rms_norm", "the input", &a, &[DType::F32]);
        checks::require(eps >= 0.0, "rms_norm", || format!("eps {eps} is negative"));
        // SAFETY: f32 rows of adjacent values of this context and a non-negative eps
        // (checked above).
        self.wrap(unsafe { sys::ggml_rms_norm(self.raw.as_ptr(), a.raw(), eps) })
    }

    /// Rotary position embedding in the NeoX layout (value `j` turns with `j + n/2`, the
    /// `rotate_half` of Llama and Qwen) over all `ne[0]` values of each row of `a`
    /// [head_dim, heads, tokens]; token `t` is at position `pos[t]` (an i32 input of
    /// `tokens` values) and pair `j` turns by `pos * theta^(-2j / head_dim)`.
    pub fn rope_neox<'a>(&'a self, a: Tensor<'a>, pos: Tensor<'a>, theta: f32) -> Tensor<'a> {
        let [dims, _, tokens, batch] = a.ne();
        checks::require_rows_of("rope_neox", "the input", &a, &[DType::F32]);
        checks::require(
            dims % 2 == 0 && batch == 1 && theta > 0.0 && theta.is_finite(),
            "rope_neox",
            || {
                format!("a row of {dims} values (even), one batch ({batch}) and a positive base ({theta})")
            },
        );
        checks::require(
            checks::is_i32(&pos) && pos.ne() == [tokens, 1, 1, 1] && pos.row_contiguous(),
            "rope_neox",
            || format!("positions {:?} must be {tokens} i32 values", pos.ne()),
        );
        // SAFETY: f32 rows of this context, an even row and i32 positions, one per token
        // (checked above); ggml computes the angles from the position values, which index
        // no memory.
        self.wrap(unsafe {
            sys::ggml_rope_ext(
                self.raw.as_ptr(),
                a.raw(),
                pos.raw(),
                std::ptr::null_mut(),
                dims as i32,
                ROPE_TYPE_NEOX,
                0,
                theta,
                1.0,
                0.0,
                1.0,
                0.0,
                0.0,
            )
        })
    }

    /// Softmax along `ne[0]` of `a * scale + mask`: `a` is [keys, queries, heads,
    /// batches] f32, `mask` [keys, >= queries, 1, 1 or batches] f32 with 0 where a query
    /// sees a key and `-inf` where it does not, the same for every head (and batch, when
    /// it has one).
    pub fn soft_max_masked<'a>(
        &'a self,
        a: Tensor<'a>,
        mask: Tensor<'a>,
        scale: f32,
    ) -> Tensor<'a> {
        checks::require_contiguous_of("soft_max_masked", "the input", &a, &[DType::F32]);
        checks::require_contiguous_of("soft_max_masked", "the mask", &mask, &[DType::F32]);
        let (x, m) = (a.ne(), mask.ne());
        // A mask's axes 2 and 3 repeat over the scores' (one mask per batch, say).
        checks::require(
            m[0] == x[0] && m[1] >= x[1] && x[2] % m[2] == 0 && x[3] % m[3] == 0,
            "soft_max_masked",
            || format!("a mask {m:?} does not cover scores {x:?}"),
        );
        // SAFETY: contiguous f32 tensors of this context, the mask covering every row of
        // the scores (checked above).
        self.wrap(unsafe {
            sys::ggml_soft_max_ext(self.raw.as_ptr(), a.raw(), mask.raw(), scale, 0.0)
        })
    }

    /// Each element limited to `[min, max]`.
    pub fn clamp<'a>(&'a self, a: Tensor<'a>, min: f32, max: f32) -> Tensor<'a> {
        checks::require_rows_of("clamp", "the input", &a, &[DType::F32]);
        checks::require(min <= max, "clamp", || format!("min {min} above max {max}"));
        // SAFETY: f32 rows of this context and an ordered range (checked above).
        self.wrap(unsafe { sys::ggml_clamp(self.raw.as_ptr(), a.raw(), min, max) })
    }
}
