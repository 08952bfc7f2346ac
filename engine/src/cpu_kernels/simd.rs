//! The vector layer the float kernels (attention, the f32 product) are written over:
//! [`AttentionSimd`], one vector of f32 lanes per instruction set, the macros that
//! compile a generic loop once per [`super::SimdLevel`], the shared product tile, and
//! the softmax row with its branch-free exp. Every set keeps one order of float
//! operations, so a result does not depend on the CPU.

/// e^x for x <= 0 (softmax arguments), branch-free so loops vectorise: 2^n times a
/// degree-6 polynomial on the reduced argument; relative error below 3e-7 (2 ulp). -inf
/// and arguments below -87 give 0. The plain form of `exp_nonpositive_avx512`, in plain
/// operations (no fused multiply-add), so every level compiles it to the same bits; the
/// logits row summary (`logits.rs`) runs it.
#[inline(always)]
pub(super) fn exp_nonpositive(x: f32) -> f32 {
    // Adding 1.5 * 2^23 rounds to an integer (ties to even) in the low mantissa bits.
    const SHIFT: f32 = 12_582_912.0;
    let c = x.max(-87.0);
    let t = c * std::f32::consts::LOG2_E + SHIFT;
    let n = t - SHIFT;
    // x - n ln 2 in two steps, so the reduced argument keeps full precision.
    let r = (c - n * EXP_LN2_HI) - n * EXP_LN2_LO;
    let p = EXP_POLY.iter().rev().fold(0.0, |acc, &c| acc * r + c);
    // n + 127 in the exponent field: the low bits of t hold n (offset by 2^22).
    let two_n = f32::from_bits(t.to_bits().wrapping_sub(SHIFT.to_bits()).wrapping_add(127) << 23);
    if x < -87.0 {
        0.0
    } else {
        p * two_n
    }
}

/// ln 2 split so that `n * EXP_LN2_HI` is exact for the exponents softmax meets.
const EXP_LN2_HI: f32 = 0.693_145_75;
const EXP_LN2_LO: f32 = 1.428_606_8e-6;
/// Taylor coefficients of e^r, |r| <= ln(2)/2.
const EXP_POLY: [f32; 7] = [
    1.0,
    1.0,
    0.5,
    0.166_666_67,
    0.041_666_668,
    0.008_333_334,
    0.001_388_889,
];

/// once per instruction set: one vector of f32 lanes, from which a run of four held in
/// registers is built, and one softmax row. The loops are generic over it and are
/// compiled inside one `target_feature` entry point per set (`by_level!`).
#[cfg(target_arch = "x86_64")]
pub(super) trait AttentionSimd {
    /// f32 lanes of one vector.
    const LANES: usize;
    /// Columns one pass keeps in registers: a run of four vectors.
    const COLS: usize = 4 * Self::LANES;
    /// Query rows one micro-kernel call handles: `TILE_ROWS` runs fill the accumulator
    /// registers.
    const TILE_ROWS: usize;
    /// One vector.
    type V: Copy;
    /// # Safety
    /// The set's features; `LANES` readable floats at `p`.
    unsafe fn load1(p: *const f32) -> Self::V;
    /// # Safety
    /// The set's features; `LANES` writable floats at `p`.
    unsafe fn store1(p: *mut f32, v: Self::V);
    /// # Safety
    /// The set's features.
    unsafe fn splat(a: f32) -> Self::V;
    /// `a * b + c`, fused.
    ///
    /// # Safety
    /// The set's features.
    unsafe fn mul_add(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// # Safety
    /// The set's features.
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    /// Replaces the first `t` scores with `exp(score - max)` and returns 1 / their sum.
    ///
    /// # Safety
    /// The set's features; `s` has `t` rounded up to 64 floats.
    unsafe fn softmax_row(s: *mut f32, t: usize) -> f32;

    /// A run of `COLS` floats at `p`, written without closures: a closure would not
    /// inherit the caller's target features, and the intrinsics would stay calls.
    ///
    /// # Safety
    /// The set's features; `COLS` readable floats at `p`.
    #[inline(always)]
    unsafe fn load(p: *const f32) -> [Self::V; 4] {
        // SAFETY: caller's guarantee.
        let mut run = unsafe { Self::zero() };
        for (u, v) in run.iter_mut().enumerate() {
            // SAFETY: the caller's guarantee covers the run's four vectors.
            *v = unsafe { Self::load1(p.add(Self::LANES * u)) };
        }
        run
    }

    /// Stores a run times `scale`.
    ///
    /// # Safety
    /// The set's features; `COLS` writable floats at `p`.
    #[inline(always)]
    unsafe fn store(p: *mut f32, run: [Self::V; 4], scale: f32) {
        // SAFETY: caller's guarantee.
        unsafe {
            let scale = Self::splat(scale);
            for (u, v) in run.iter().enumerate() {
                Self::store1(p.add(Self::LANES * u), Self::mul(*v, scale));
            }
        }
    }

    /// # Safety
    /// The set's features.
    #[inline(always)]
    unsafe fn zero() -> [Self::V; 4] {
        // SAFETY: caller's guarantee.
        [unsafe { Self::splat(0.0) }; 4]
    }

    /// `acc += a * b` over a run.
    ///
    /// # Safety
    /// The set's features.
    #[inline(always)]
    unsafe fn fma(acc: &mut [Self::V; 4], a: f32, b: &[Self::V; 4]) {
        // SAFETY: caller's guarantee.
        unsafe {
            let a = Self::splat(a);
            for (acc_u, b_u) in acc.iter_mut().zip(b) {
                *acc_u = Self::mul_add(a, *b_u, *acc_u);
            }
        }
    }
}

/// An [`AttentionSimd`] instruction set from its intrinsics: one vector type and its
/// load, store, broadcast, fused multiply-add and multiply, and the softmax row.
macro_rules! attention_simd {
    ($(#[$doc:meta])* $name:ident, lanes $lanes:expr, rows $rows:expr, $v:ty,
     $load:ident, $store:ident, $set1:ident, $fmadd:ident, $mul:ident, $softmax:ident) => {
        $(#[$doc])*
        #[cfg(target_arch = "x86_64")]
        pub(super) struct $name;

        #[cfg(target_arch = "x86_64")]
        impl AttentionSimd for $name {
            const LANES: usize = $lanes;
            const TILE_ROWS: usize = $rows;
            type V = $v;

            #[inline(always)]
            unsafe fn load1(p: *const f32) -> Self::V {
                // SAFETY: caller's guarantee.
                unsafe { std::arch::x86_64::$load(p) }
            }

            #[inline(always)]
            unsafe fn store1(p: *mut f32, v: Self::V) {
                // SAFETY: caller's guarantee.
                unsafe { std::arch::x86_64::$store(p, v) }
            }

            #[inline(always)]
            unsafe fn splat(a: f32) -> Self::V {
                // SAFETY: caller's guarantee.
                unsafe { std::arch::x86_64::$set1(a) }
            }

            #[inline(always)]
            unsafe fn mul_add(a: Self::V, b: Self::V, c: Self::V) -> Self::V {
                // SAFETY: caller's guarantee.
                unsafe { std::arch::x86_64::$fmadd(a, b, c) }
            }

            #[inline(always)]
            unsafe fn mul(a: Self::V, b: Self::V) -> Self::V {
                // SAFETY: caller's guarantee.
                unsafe { std::arch::x86_64::$mul(a, b) }
            }

            #[inline(always)]
            unsafe fn softmax_row(s: *mut f32, t: usize) -> f32 {
                // SAFETY: caller's guarantee.
                unsafe { $softmax(s, t) }
            }
        }
    };
}

attention_simd!(
    /// AVX-512 F: runs of 64 columns, tiles of 6 rows (24 of the 32 registers hold
    /// accumulators, so each run of keys loaded serves six rows).
    Avx512Attention, lanes 16, rows 6, std::arch::x86_64::__m512,
    _mm512_loadu_ps, _mm512_storeu_ps, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_mul_ps,
    softmax_row_avx512
);

attention_simd!(
    /// AVX2 with FMA: runs of 32 columns, tiles of 2 rows, so that the accumulators and
    /// one run of keys fit the 16 registers.
    Avx2Attention, lanes 8, rows 2, std::arch::x86_64::__m256,
    _mm256_loadu_ps, _mm256_storeu_ps, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_mul_ps,
    softmax_row_avx2
);

/// Defines `$name(level, args)`: the generic `$generic::<S>(args)` compiled once per
/// [`SimdLevel`] inside a `target_feature` function (with the [`AttentionSimd`] set of
/// that level), and the call of the one `level` names.
macro_rules! by_level {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) => $generic:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The CPU must have `level`; the arguments as the generic function requires.
        #[cfg(target_arch = "x86_64")]
        unsafe fn $name(level: SimdLevel, $($arg: $ty),*) {
            #[target_feature(enable = "avx512f")]
            unsafe fn avx512($($arg: $ty),*) {
                // SAFETY: the caller's guarantees, and this function's features.
                unsafe { $generic::<Avx512Attention>($($arg),*) }
            }
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2($($arg: $ty),*) {
                // SAFETY: as above.
                unsafe { $generic::<Avx2Attention>($($arg),*) }
            }
            // SAFETY: the caller's guarantees.
            unsafe {
                match level {
                    SimdLevel::Avx512 => avx512($($arg),*),
                    SimdLevel::Avx2 => avx2($($arg),*),
                }
            }
        }
    };
}

/// Calls tile function `$f::<S, R>` for `$rows` rows (at most 6) with the arguments.
macro_rules! by_tile {
    ($rows:expr, $f:ident, $($arg:expr),*) => {
        match $rows {
            6 => $f::<S, 6>($($arg),*),
            5 => $f::<S, 5>($($arg),*),
            4 => $f::<S, 4>($($arg),*),
            3 => $f::<S, 3>($($arg),*),
            2 => $f::<S, 2>($($arg),*),
            _ => $f::<S, 1>($($arg),*),
        }
    };
}

/// `R` rows of `a` times `b` over `k`, for 64 output columns: `out[r][j] = scale *
/// sum over c of a[r][c] * b[c][j]`, `S::COLS` columns per pass, summed in c order
/// (so every instruction set gives the same bits). The attention's scores (queries
/// times transposed keys, k = 64) and the f32 product (`f32_product`) are made of it.
///
/// # Safety
/// `S`'s features; `a` `R` rows `a_stride` apart with `k` values; `b` `k` rows
/// `b_stride` apart with 64 floats from it; `out` `R` rows `out_stride` apart with 64
/// floats from it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn product_tile<S: AttentionSimd, const R: usize>(
    a: *const f32,
    a_stride: usize,
    k: usize,
    b: *const f32,
    b_stride: usize,
    out: *mut f32,
    out_stride: usize,
    scale: f32,
) {
    // SAFETY: caller's guarantee.
    unsafe {
        for j in (0..64).step_by(S::COLS) {
            let mut acc = [S::zero(); R];
            for c in 0..k {
                let bv = S::load(b.add(c * b_stride + j));
                for (r, acc_r) in acc.iter_mut().enumerate() {
                    S::fma(acc_r, *a.add(r * a_stride + c), &bv);
                }
            }
            for (r, acc_r) in acc.iter().enumerate() {
                S::store(out.add(r * out_stride + j), *acc_r, scale);
            }
        }
    }
}

/// Replaces the first `t` scores with `exp(score - max)` and returns 1 / their sum.
///
/// # Safety
/// AVX-512 F; `s` has at least `t.div_ceil(16) * 16` floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn softmax_row_avx512(s: *mut f32, t: usize) -> f32 {
    use std::arch::x86_64::*;
    let chunks = t.div_ceil(16);
    let mask = |i: usize| -> __mmask16 {
        let n = (t - i * 16).min(16);
        ((1u32 << n) - 1) as __mmask16
    };
    let neg_inf = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut mx = neg_inf;
    for i in 0..chunks {
        // SAFETY: caller's guarantee; masked lanes are not read.
        mx = _mm512_max_ps(mx, unsafe {
            _mm512_mask_loadu_ps(neg_inf, mask(i), s.add(i * 16))
        });
    }
    let m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    let mut sum = _mm512_setzero_ps();
    for i in 0..chunks {
        // SAFETY: as above.
        let x = unsafe { _mm512_mask_loadu_ps(neg_inf, mask(i), s.add(i * 16)) };
        let e = exp_nonpositive_avx512(_mm512_sub_ps(x, m));
        sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(mask(i), e));
        // SAFETY: as above.
        unsafe { _mm512_mask_storeu_ps(s.add(i * 16), mask(i), e) };
    }
    let mut lanes = [0f32; 16];
    // SAFETY: 16 floats.
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), sum) };
    1.0 / sum_lanes(lanes)
}

/// [`exp_nonpositive`] on 16 lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn exp_nonpositive_avx512(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let x = _mm512_max_ps(x, _mm512_set1_ps(-87.0));
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_HI), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_LO), r);
    let mut p = _mm512_set1_ps(EXP_POLY[EXP_POLY.len() - 1]);
    for &c in EXP_POLY.iter().rev().skip(1) {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    _mm512_scalef_ps(p, n)
}

/// The softmax row with AVX2, in the AVX-512 version's order: 16-value chunks, two
/// 8-lane accumulators standing for its one 16-lane accumulator, and the same final
/// sum, so that both give the same bits. Lanes past `t` are read as -inf and their
/// exponentials zeroed (the row's padding may be overwritten).
///
/// # Safety
/// AVX2 and FMA; `s` has at least `t.div_ceil(16) * 16` floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_row_avx2(s: *mut f32, t: usize) -> f32 {
    use std::arch::x86_64::*;
    let eights = 2 * t.div_ceil(16);
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let mask = |i: usize| {
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(
            _mm256_set1_epi32(t as i32 - (i * 8) as i32),
            lanes,
        ))
    };
    let neg_inf = _mm256_set1_ps(f32::NEG_INFINITY);
    // SAFETY: caller's guarantee.
    let load =
        |i: usize| _mm256_blendv_ps(neg_inf, unsafe { _mm256_loadu_ps(s.add(i * 8)) }, mask(i));
    let mut mx = neg_inf;
    for i in 0..eights {
        mx = _mm256_max_ps(mx, load(i));
    }
    let m = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps::<1>(mx));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm256_set1_ps(_mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m))));
    let mut sum = [_mm256_setzero_ps(); 2];
    for i in 0..eights {
        let e = _mm256_and_ps(exp_nonpositive_avx2(_mm256_sub_ps(load(i), m)), mask(i));
        sum[i % 2] = _mm256_add_ps(sum[i % 2], e);
        // SAFETY: caller's guarantee.
        unsafe { _mm256_storeu_ps(s.add(i * 8), e) };
    }
    let mut lanes = [0f32; 16];
    // SAFETY: 16 floats.
    unsafe {
        _mm256_storeu_ps(lanes.as_mut_ptr(), sum[0]);
        _mm256_storeu_ps(lanes.as_mut_ptr().add(8), sum[1]);
    }
    1.0 / sum_lanes(lanes)
}

/// The 16 lane sums of a softmax row added in one fixed order (halving), so that every
/// instruction set's kernel gives the same bits.
#[inline(always)]
pub(super) fn sum_lanes(mut v: [f32; 16]) -> f32 {
    let mut w = 8;
    while w > 0 {
        for i in 0..w {
            v[i] += v[i + w];
        }
        w /= 2;
    }
    v[0]
}

/// [`exp_nonpositive`] on 8 lanes; 2^n is built in the exponent bits (n >= -126).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn exp_nonpositive_avx2(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let x = _mm256_max_ps(x, _mm256_set1_ps(-87.0));
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_HI), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_LO), r);
    let mut p = _mm256_set1_ps(EXP_POLY[EXP_POLY.len() - 1]);
    for &c in EXP_POLY.iter().rev().skip(1) {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let two_n = _mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    ));
    _mm256_mul_ps(p, _mm256_castsi256_ps(two_n))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::SimdLevel;
    use super::*;

    #[test]
    fn exp_is_within_3e_7_relative_for_softmax_arguments() {
        let mut worst = 0f64;
        for i in 0..=870_000 {
            let x = -(i as f32) * 1e-4;
            let want = (x as f64).exp();
            worst = worst.max((exp_nonpositive(x) as f64 - want).abs() / want);
        }
        assert!(worst < 3e-7, "worst relative error {worst}");
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpositive(-90.0), 0.0);
        assert_eq!(exp_nonpositive(0.0), 1.0);
        let levels = float_levels();
        report_missing("exp", &levels);
        #[cfg(target_arch = "x86_64")]
        for level in levels {
            use std::arch::x86_64::*;
            let mut worst = 0f64;
            for i in (0..=870_000).step_by(16) {
                let x: [f32; 16] = std::array::from_fn(|l| -((i + l).min(870_000) as f32) * 1e-4);
                let mut e = [0f32; 16];
                // SAFETY: the CPU has the level's features; 16 floats each side.
                unsafe {
                    match level {
                        SimdLevel::Avx512 => _mm512_storeu_ps(
                            e.as_mut_ptr(),
                            exp_nonpositive_avx512(_mm512_loadu_ps(x.as_ptr())),
                        ),
                        SimdLevel::Avx2 => {
                            for h in 0..2 {
                                _mm256_storeu_ps(
                                    e.as_mut_ptr().add(8 * h),
                                    exp_nonpositive_avx2(_mm256_loadu_ps(x.as_ptr().add(8 * h))),
                                )
                            }
                        }
                    }
                }
                for (xv, ev) in x.iter().zip(e) {
                    let want = (*xv as f64).exp();
                    worst = worst.max((ev as f64 - want).abs() / want);
                }
            }
            assert!(worst < 3e-7, "{level:?}: worst relative error {worst}");
        }
    }
}
