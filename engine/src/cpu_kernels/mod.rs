//! The engine's own CPU kernels, where ggml's CPU ops leave much of the machine unused.
//! One file per kernel family:
//!
//! - [`q8`]: q8_0 weight times f32 activation products on weights packed at upload
//!   ([`PackedQ8`]), with AVX-512 VNNI (`vpdpbusd`) or AVX2 (`vpmaddubsw`); the numerics
//!   are ggml's (activations quantized to q8_0 blocks, exact integer block products).
//! - [`f32_product`]: f32 products on weights packed transposed at upload (the conv
//!   stem's im2col product).
//! - [`conv_f32`]: f32 1-D convolutions over time-major inputs, im2col in cache.
//! - [`f16_product`]: f16 weight times f32 activation products that are a read of a
//!   large weight (the logits, the decoder's cross-attention over its f16 cache).
//! - [`attention`]: multi-head self-attention (heads of 64) whose score rows stay in
//!   cache, so the softmax is exact in one pass.
//! - [`gelu`]: the exact (erf) GELU with a vectorisable rational erf.
//! - [`refine`]: a decoder step's logits from a q8_0 product, the rows that could be
//!   the largest computed again in f16 (a bound on the q8_0 error names them).
//! - [`logits`]: the argmax and softmax normaliser of a logits row (a token choice).
//! - [`snake`]: the AdaIN affine part and Snake of iSTFTNet's residual blocks in one
//!   pass.
//! - `simd`: the vector layer the float kernels are written over, once per
//!   instruction set.
//!
//! Each kernel runs at the widest [`SimdLevel`] the CPU has, checked at run time, so
//! portable builds carry them. Each has one safe entry point over slices ([`Matrix`]
//! views in, an [`Output`] out, a [`Part`] of the work): it checks every length and
//! stride once, then the vector code runs unchecked inside the memory it validated.
//! The ggml wrapper runs them as custom ops (`ggml/custom_op.rs`), and `layers.rs`
//! decides when they run (docs/architecture.md section 3).
#![allow(unsafe_code)]

use std::marker::PhantomData;

#[macro_use]
mod simd;
pub mod attention;
pub mod conv_f32;
pub mod f16_product;
pub mod f32_product;
pub mod gelu;
pub mod logits;
pub mod q8;
pub mod refine;
pub mod snake;
pub mod transpose;

pub use attention::{attention_kernel_available, ATTENTION_HEAD_DIM};
pub use f16_product::f16_product_available;
pub use f32_product::{pack_f32_transposed, F32_PRODUCT_COLS};
pub use q8::PackedQ8;

/// Why a kernel refused its arguments: a length, stride or shape that does not fit, or
/// a CPU without the kernel's instructions.
pub type KernelResult = Result<(), String>;

/// Which share of one kernel call this call computes: part `ith` of `nth` (ggml's
/// worker threads each compute one; a single-threaded caller passes [`Part::WHOLE`]).
/// The kernel splits its work so that the parts write disjoint outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    ith: usize,
    nth: usize,
}

impl Part {
    /// All of the work in one call.
    pub const WHOLE: Part = Part { ith: 0, nth: 1 };

    /// Part `ith` of `nth`; `None` unless `ith < nth`.
    pub fn new(ith: usize, nth: usize) -> Option<Self> {
        (ith < nth).then_some(Part { ith, nth })
    }
}

/// A read-only view of up to three dims of `T` over a slice: `cols` adjacent values
/// per row, rows `row_stride` apart, batches of rows `batch_stride` apart (views of a
/// cache per head interleave, so batches may overlap in the slice, never in values).
#[derive(Debug, Clone, Copy)]
pub struct Matrix<'a, T> {
    data: &'a [T],
    cols: usize,
    rows: usize,
    batches: usize,
    row_stride: usize,
    batch_stride: usize,
}

impl<'a, T> Matrix<'a, T> {
    /// `rows` rows of `cols` values, `row_stride` apart, in `batches` batches
    /// `batch_stride` apart; `None` when the last value lies past the slice or rows
    /// overlap (`row_stride < cols` with more than one row).
    pub fn new(
        data: &'a [T],
        [cols, rows, batches]: [usize; 3],
        [row_stride, batch_stride]: [usize; 2],
    ) -> Option<Self> {
        if rows > 1 && row_stride < cols {
            return None;
        }
        let fits = cols == 0
            || rows == 0
            || batches == 0
            || (batches - 1)
                .checked_mul(batch_stride)
                .and_then(|b| (rows - 1).checked_mul(row_stride)?.checked_add(b))
                .and_then(|last_row| last_row.checked_add(cols))
                .is_some_and(|end| end <= data.len());
        fits.then_some(Matrix {
            data,
            cols,
            rows,
            batches,
            row_stride,
            batch_stride,
        })
    }

    /// `rows` contiguous rows of `cols` values (one batch).
    pub fn rows(data: &'a [T], cols: usize, rows: usize) -> Option<Self> {
        Self::new(data, [cols, rows, 1], [cols, rows * cols])
    }

    /// The dims: values per row, rows per batch, batches.
    pub fn dims(&self) -> [usize; 3] {
        [self.cols, self.rows, self.batches]
    }

    fn ptr(&self) -> *const T {
        self.data.as_ptr()
    }
}

/// The f32 output of one kernel call, which every [`Part`] of the call writes its own
/// share of. Made from a `&mut [f32]` (then one thread owns it), or by the ggml wrapper
/// over a custom op's result, one per worker thread ([`Output::from_raw_parts`]). Not
/// `Send` or `Sync`: safe code cannot hand one to two threads.
pub struct Output<'a> {
    ptr: *mut f32,
    len: usize,
    _out: PhantomData<&'a mut [f32]>,
}

impl<'a> Output<'a> {
    /// The output over `y`.
    pub fn new(y: &'a mut [f32]) -> Self {
        Output {
            ptr: y.as_mut_ptr(),
            len: y.len(),
            _out: PhantomData,
        }
    }

    /// The output over `len` floats at `ptr`.
    ///
    /// # Safety
    /// `ptr` is valid for reads and writes of `len` f32 for `'a` and aligned, and
    /// nothing else accesses them while it lives, except other `Output`s over the same
    /// memory in other threads, each passed to the same kernel with the same operands
    /// and a different [`Part`] of the same count (as ggml's worker threads are).
    pub unsafe fn from_raw_parts(ptr: *mut f32, len: usize) -> Self {
        Output {
            ptr,
            len,
            _out: PhantomData,
        }
    }

    /// Floats it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `Err` naming `what` unless it holds exactly `len` floats.
    fn expect_len(&self, what: &str, len: usize) -> KernelResult {
        if self.len != len {
            return Err(format!(
                "{what}: the output holds {} floats, expected {len}",
                self.len
            ));
        }
        Ok(())
    }
}

/// `Err` naming `what` unless `a == b`.
fn expect_eq(what: &str, a: usize, b: usize) -> KernelResult {
    if a != b {
        return Err(format!("{what}: {a}, expected {b}"));
    }
    Ok(())
}

/// The vector instruction sets the kernels are written for, in order of width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SimdLevel {
    /// AVX2 and FMA, 256-bit vectors (x86-64 CPUs since 2013-2015).
    Avx2,
    /// AVX-512, 512-bit vectors (the q8_0 product also needs BW and VNNI).
    Avx512,
}

impl SimdLevel {
    /// The level as `AUDIOCPP_CPU_KERNELS` and `--list-devices` spell it.
    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512 => "avx512",
        }
    }

    /// The widest level this CPU has for float work (AVX-512 F, or AVX2 with FMA).
    fn detected() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            // The AVX-512 level runs AVX2 code too (the q8_0 product without VNNI).
            let avx2 = std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma");
            if avx2 && std::arch::is_x86_feature_detected!("avx512f") {
                return Some(SimdLevel::Avx512);
            }
            if avx2 {
                return Some(SimdLevel::Avx2);
            }
        }
        None
    }

    /// The level the kernels may use: [`SimdLevel::detected`], capped at AVX2 when
    /// `AUDIOCPP_CPU_KERNELS=avx2` (to measure and test what AVX2-only CPUs run on a
    /// machine with AVX-512). Read once per process.
    pub fn allowed() -> Option<Self> {
        static ALLOWED: std::sync::OnceLock<Option<SimdLevel>> = std::sync::OnceLock::new();
        *ALLOWED.get_or_init(|| {
            let cap = match kernels_setting() {
                KernelsSetting::Cap(level) => level,
                KernelsSetting::Ggml => SimdLevel::Avx512,
            };
            Self::detected().map(|level| level.min(cap))
        })
    }
}

/// What `AUDIOCPP_CPU_KERNELS` asks for: `ggml` (ggml's ops everywhere), `avx2` (the
/// kernels capped at AVX2), anything else or unset (the widest level).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KernelsSetting {
    Ggml,
    Cap(SimdLevel),
}

/// [`KernelsSetting`] from the environment, read once per process.
fn kernels_setting() -> KernelsSetting {
    static SETTING: std::sync::OnceLock<KernelsSetting> = std::sync::OnceLock::new();
    *SETTING.get_or_init(|| match std::env::var("AUDIOCPP_CPU_KERNELS").as_deref() {
        Ok("ggml") => KernelsSetting::Ggml,
        Ok("avx2") => KernelsSetting::Cap(SimdLevel::Avx2),
        _ => KernelsSetting::Cap(SimdLevel::Avx512),
    })
}

/// True when `AUDIOCPP_CPU_KERNELS=ggml` asks for ggml's own CPU ops everywhere, to
/// compare the two.
pub fn kernels_switched_off() -> bool {
    kernels_setting() == KernelsSetting::Ggml
}

/// The level the packed q8_0 product runs at on this CPU: AVX-512 with BW and VNNI
/// (`vpdpbusd`), else AVX2 with F16C (`vpmaddubsw`; F16C converts the packed cells'
/// scales), else none (ggml's own product).
pub fn q8_kernel_level() -> Option<SimdLevel> {
    match SimdLevel::allowed()? {
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx512
            if std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vnni") =>
        {
            Some(SimdLevel::Avx512)
        }
        #[cfg(target_arch = "x86_64")]
        _ if !std::arch::is_x86_feature_detected!("f16c") => None,
        _ => Some(SimdLevel::Avx2),
    }
}

/// True when this CPU runs the packed q8_0 kernel ([`q8_kernel_level`]).
pub fn q8_kernel_available() -> bool {
    q8_kernel_level().is_some()
}

/// An IEEE half float's value.
#[inline(always)]
fn f16_to_f32(h: u16) -> f32 {
    half::f16::from_bits(h).to_f32()
}

/// The IEEE half float nearest `f` (ties to even, as ggml rounds).
#[inline(always)]
fn f32_to_f16(f: f32) -> u16 {
    half::f16::from_f32(f).to_bits()
}

/// Splits `0..len` into `nth` near-equal ranges whose starts are multiples of `unit`;
/// returns thread `ith`'s.
pub fn split_range(len: usize, unit: usize, ith: usize, nth: usize) -> std::ops::Range<usize> {
    let units = len.div_ceil(unit);
    let per = units.div_ceil(nth.max(1));
    let start = (ith * per * unit).min(len);
    let end = ((ith + 1) * per * unit).min(len);
    start..end
}

/// What the kernel tests share: test data, the levels this CPU runs, and the loud
/// reports of what could not run here.
#[cfg(test)]
mod test_support {
    use super::SimdLevel;

    /// Deterministic pseudo-random values in [-scale, scale).
    pub(super) fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }

    /// The levels this CPU can run for float work (attention, GELU), each tested.
    pub(super) fn float_levels() -> Vec<SimdLevel> {
        let top = SimdLevel::detected();
        [SimdLevel::Avx2, SimdLevel::Avx512]
            .into_iter()
            .filter(|l| top.is_some_and(|t| *l <= t))
            .collect()
    }

    /// The levels this CPU can run the q8_0 product at.
    pub(super) fn q8_levels() -> Vec<SimdLevel> {
        #[cfg(target_arch = "x86_64")]
        let vnni = std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni");
        #[cfg(not(target_arch = "x86_64"))]
        let vnni = false;
        float_levels()
            .into_iter()
            .filter(|l| *l == SimdLevel::Avx2 || vnni)
            .collect()
    }

    /// Asserts that runs of the same case at different levels gave the same bits (the
    /// kernels keep one order of float operations across instruction sets, so a
    /// transcript does not depend on the CPU).
    pub(super) fn assert_same_bits<C: PartialEq + std::fmt::Debug, L: std::fmt::Debug>(
        runs: &[(C, L, Vec<f32>)],
        what: &str,
    ) {
        for (case, level, got) in runs {
            for (case2, level2, got2) in runs {
                if case == case2 {
                    let same = got
                        .iter()
                        .zip(got2)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{level:?} and {level2:?} differ on {what} {case:?}");
                }
            }
        }
    }

    /// Says loudly which levels a test could not run on this CPU; with none at all the
    /// test would assert nothing, which fails under CI (`CI` set).
    pub(super) fn report_missing(what: &str, levels: &[SimdLevel]) {
        for l in [SimdLevel::Avx2, SimdLevel::Avx512] {
            if !levels.contains(&l) {
                eprintln!("SKIPPED LOUDLY: this CPU cannot run the {l:?} {what}");
            }
        }
        if levels.is_empty() {
            fail_under_ci(&format!("no level of the {what} runs on this CPU"));
        }
    }

    /// Reports a test that could not check anything here, and fails it when `CI` is
    /// set: CI machines must run what they claim to test.
    pub(super) fn fail_under_ci(why: &str) {
        eprintln!("NOTHING TESTED: {why}");
        assert!(
            std::env::var_os("CI").is_none(),
            "{why}, and CI is set: run CI on a CPU with AVX2, FMA and F16C"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_ranges_cover_everything_once_in_units() {
        for len in [0, 1, 5, 16, 1500] {
            for nth in 1..=5 {
                let ranges: Vec<_> = (0..nth).map(|i| split_range(len, 4, i, nth)).collect();
                let mut next = 0;
                for r in &ranges {
                    if r.is_empty() {
                        continue;
                    }
                    assert_eq!(r.start, next);
                    assert!(r.start % 4 == 0);
                    next = r.end;
                }
                assert_eq!(next, len, "len {len} nth {nth}");
            }
        }
    }

    #[test]
    fn views_that_leave_their_slice_or_overlap_are_refused() {
        let data = [0f32; 12];
        assert!(Matrix::new(&data, [3, 4, 1], [3, 12]).is_some());
        assert!(
            Matrix::new(&data, [3, 2, 2], [6, 3]).is_some(),
            "interleaved batches"
        );
        assert!(
            Matrix::new(&data, [3, 4, 1], [4, 16]).is_none(),
            "past the end"
        );
        assert!(
            Matrix::new(&data, [3, 2, 3], [3, 5]).is_none(),
            "a batch past the end"
        );
        assert!(
            Matrix::new(&data, [4, 3, 1], [3, 12]).is_none(),
            "overlapping rows"
        );
        assert!(Matrix::new(&data, [0, 9, 9], [0, 0]).is_some(), "empty");
        assert!(
            Matrix::new(&data, [1, 2, 2], [usize::MAX, 1]).is_none(),
            "overflow"
        );
        assert!(Matrix::rows(&data, 4, 3).is_some() && Matrix::rows(&data, 5, 3).is_none());
        assert_eq!(Part::new(2, 3), Some(Part { ith: 2, nth: 3 }));
        assert_eq!(Part::new(3, 3), None);
    }
}
