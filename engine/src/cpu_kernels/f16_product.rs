//! The f16 weight times f32 activation product, for products that are a read of a
//! large weight: the decoder's logits and its cross-attention over the f16 cache
//! (strided views of it, one batch per head). F16C converts the weight; unlike ggml's
//! f16 product, the activations stay f32 (ggml rounds them to f16).

#[cfg(target_arch = "x86_64")]
use super::simd::sum_lanes;
use super::{expect_eq, f16_to_f32, split_range, KernelResult, Matrix, Output, Part, SimdLevel};

/// Values one step of the f16 product covers: one 512-bit vector, two 256-bit ones.
const F16_STEP: usize = 16;

/// How many values ahead of each row's step the AVX-512 kernel asks the cache for.
const PREFETCH_AHEAD: usize = 512;

/// The part of a row past its whole 16-value steps, added after the lane sums in one
/// plain loop, so every level adds it the same way.
///
/// # Safety
/// `k` readable values at `w` and `x`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn f16_dot_tail(w: *const u16, x: *const f32, k: usize) -> f32 {
    let mut sum = 0f32;
    for c in k - k % F16_STEP..k {
        // SAFETY: caller's guarantee.
        sum += unsafe { f16_to_f32(*w.add(c)) * *x.add(c) };
    }
    sum
}

/// Four rows of f16 weights (`w`, rows `stride` values apart) times one row of `k` f32
/// activations, with AVX-512 F: per-lane sums in `k` order, then [`sum_lanes`], then
/// the tail ([`f16_dot_tail`]).
///
/// # Safety
/// AVX-512 F; 4 rows of `k` f16 at `w`, `stride` apart; `k` floats at `x`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn f16_dot4_avx512(w: *const u16, stride: usize, k: usize, x: *const f32) -> [f32; 4] {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_setzero_ps(); 4];
    for c in (0..k - k % F16_STEP).step_by(F16_STEP) {
        // SAFETY: caller's guarantee.
        let xv = unsafe { _mm512_loadu_ps(x.add(c)) };
        for i in 0..4 {
            // A hint only: the address may lie past the rows (wrapping_add forms it
            // without a claim that it is inside them), and a prefetch never faults.
            _mm_prefetch::<_MM_HINT_T0>(w.wrapping_add(i * stride + c + PREFETCH_AHEAD).cast());
        }
        for (i, a) in acc.iter_mut().enumerate() {
            // SAFETY: row i's 16 values at c lie inside the caller's rows.
            let wv = unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(w.add(i * stride + c).cast())) };
            *a = _mm512_fmadd_ps(wv, xv, *a);
        }
    }
    let mut dots = [0f32; 4];
    for (i, (d, a)) in dots.iter_mut().zip(acc).enumerate() {
        let mut lanes = [0f32; 16];
        // SAFETY: 16 floats; the row as the caller describes it.
        unsafe {
            _mm512_storeu_ps(lanes.as_mut_ptr(), a);
            *d = sum_lanes(lanes) + f16_dot_tail(w.add(i * stride), x, k);
        }
    }
    dots
}

/// [`f16_dot4_avx512`] with AVX2, F16C and FMA: two 8-lane accumulators per row stand
/// for the 16-lane one, so both give the same bits.
///
/// # Safety
/// AVX2, F16C, FMA; as [`f16_dot4_avx512`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_dot4_avx2(w: *const u16, stride: usize, k: usize, x: *const f32) -> [f32; 4] {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); 2]; 4];
    for c in (0..k - k % F16_STEP).step_by(F16_STEP) {
        // SAFETY: caller's guarantee.
        let xv = unsafe { [_mm256_loadu_ps(x.add(c)), _mm256_loadu_ps(x.add(c + 8))] };
        for (i, a) in acc.iter_mut().enumerate() {
            for h in 0..2 {
                // SAFETY: row i's 8 values at c + 8h lie inside the caller's rows.
                let wv = unsafe {
                    _mm256_cvtph_ps(_mm_loadu_si128(w.add(i * stride + c + 8 * h).cast()))
                };
                a[h] = _mm256_fmadd_ps(wv, xv[h], a[h]);
            }
        }
    }
    let mut dots = [0f32; 4];
    for (i, (d, a)) in dots.iter_mut().zip(acc).enumerate() {
        let mut lanes = [0f32; 16];
        // SAFETY: 16 floats; the row as the caller describes it.
        unsafe {
            _mm256_storeu_ps(lanes.as_mut_ptr(), a[0]);
            _mm256_storeu_ps(lanes.as_mut_ptr().add(8), a[1]);
            *d = sum_lanes(lanes) + f16_dot_tail(w.add(i * stride), x, k);
        }
    }
    dots
}

/// The f16 product's operands, per batch `b`: `n` weight rows of `k` f16 (rows
/// `w_row` values apart, batches `w_batch`), `m` activation rows of `k` f32 (`x_row`,
/// `x_batch` floats apart) and `m` output rows of `n` f32 (`y_row`, `y_batch`).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct F16Product {
    w: *const u16,
    w_row: usize,
    w_batch: usize,
    k: usize,
    n: usize,
    x: *const f32,
    x_row: usize,
    x_batch: usize,
    m: usize,
    y: *mut f32,
    y_row: usize,
    y_batch: usize,
}

/// Weight rows `rows` (starting at a multiple of 4) of batch `b` of the f16 product at
/// `level`, for every activation row while the 4 weight rows are in cache. A trailing
/// group of fewer than 4 rows re-reads the rows before it (`n >= 4`), so every call
/// covers 4 whole rows.
///
/// # Safety
/// The CPU must have `level`'s features (and F16C); `p` describes live buffers and
/// `n >= 4`.
#[cfg(target_arch = "x86_64")]
unsafe fn f16_rows(level: SimdLevel, p: F16Product, b: usize, rows: std::ops::Range<usize>) {
    let mut v = rows.start;
    while v < rows.end {
        let first = v.min(p.n - 4);
        for row in 0..p.m {
            // SAFETY: the caller's guarantees; rows first..first + 4 exist.
            unsafe {
                let wp = p.w.add(b * p.w_batch + first * p.w_row);
                let xp = p.x.add(b * p.x_batch + row * p.x_row);
                let dots = match level {
                    SimdLevel::Avx512 => f16_dot4_avx512(wp, p.w_row, p.k, xp),
                    SimdLevel::Avx2 => f16_dot4_avx2(wp, p.w_row, p.k, xp),
                };
                let yp = p.y.add(b * p.y_batch + row * p.y_row);
                for (i, d) in dots.iter().enumerate() {
                    if first + i >= v && first + i < rows.end {
                        *yp.add(first + i) = *d;
                    }
                }
            }
        }
        v += 4;
    }
}

/// The level the f16 product runs at: AVX2 level CPUs need F16C too (every AVX2 CPU
/// has it).
fn f16_product_level() -> Option<SimdLevel> {
    let level = SimdLevel::allowed()?;
    #[cfg(target_arch = "x86_64")]
    if level == SimdLevel::Avx2 && !std::arch::is_x86_feature_detected!("f16c") {
        return None;
    }
    Some(level)
}

/// True when this CPU runs the f16 product ([`product`]).
pub fn f16_product_available() -> bool {
    f16_product_level().is_some()
}

/// `y` [b batches of m rows of n] = `x` (b batches of m rows of k) times the f16
/// weight `w` (b batches of n rows of k, `n >= 4`), per batch: the share `part` names,
/// in (batch, four weight rows) units, since the product is a read of the weight.
/// Refuses dims that do not match, or a CPU without the kernel.
pub fn product(w: Matrix<'_, u16>, x: Matrix<'_, f32>, y: &Output<'_>, part: Part) -> KernelResult {
    let [k, n, batches] = w.dims();
    let [kx, m, bx] = x.dims();
    expect_eq("the activations' row length", kx, k)?;
    expect_eq("the activations' batches", bx, batches)?;
    if n < 4 {
        return Err(format!("the weight has {n} rows, fewer than 4"));
    }
    y.expect_len("the f16 product", batches * m * n)?;
    let Some(level) = f16_product_level() else {
        return Err("this CPU lacks the vector instructions the f16 product needs".into());
    };
    let groups = n.div_ceil(4);
    let units = split_range(groups * batches, 1, part.ith, part.nth);
    #[cfg(target_arch = "x86_64")]
    {
        let p = F16Product {
            w: w.ptr(),
            w_row: w.row_stride,
            w_batch: w.batch_stride,
            k,
            n,
            x: x.ptr(),
            x_row: x.row_stride,
            x_batch: x.batch_stride,
            m,
            y: y.ptr,
            y_row: n,
            y_batch: m * n,
        };
        for unit in units {
            let (b, g) = (unit / groups, unit % groups);
            // SAFETY: the CPU has `level`; w and x hold every row their strides reach
            // (Matrix::new), y b * m rows of n (checked above), n >= 4; this part writes
            // the columns of its units, which no other part's overlap (split_range).
            unsafe { f16_rows(level, p, b, 4 * g..(4 * g + 4).min(n)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (level, units, w, x, y);
    Ok(())
}

/// The rows `pick` chooses in `rows` of the one-batch f16 weight `w` times the row `x`,
/// each equal bit for bit to what [`product`] gives it (a row's dot does not depend on
/// the rows beside it): `y[r - rows.start]` for each picked `r`, the others left as they
/// are. Runs of four picked rows go together, a lone row alone. For the logits' second
/// stage (`refine`), which recomputes a few scattered rows.
pub fn product_rows(
    w: Matrix<'_, u16>,
    x: &[f32],
    rows: std::ops::Range<usize>,
    pick: impl Fn(usize) -> bool,
    y: &mut [f32],
) -> KernelResult {
    let [k, n, batches] = w.dims();
    expect_eq("the weight's batches", batches, 1)?;
    expect_eq("the activations' row length", x.len(), k)?;
    expect_eq("the output's rows", y.len(), rows.len())?;
    if rows.end > n {
        return Err(format!("rows up to {} of a weight of {n} rows", rows.end));
    }
    let Some(level) = f16_product_level() else {
        return Err("this CPU lacks the vector instructions the f16 product needs".into());
    };
    #[cfg(target_arch = "x86_64")]
    {
        let mut r = rows.start;
        while r < rows.end {
            let four = r + 4 <= rows.end && (r..r + 4).all(&pick);
            if !four && !pick(r) {
                r += 1;
                continue;
            }
            // SAFETY: the CPU has `level` (and F16C); rows r..r + 4 (four) or row r
            // (read four times, stride 0) lie in the weight (rows.end <= n, Matrix::new);
            // x holds k floats (checked above).
            let dots = unsafe {
                let wp = w.ptr().add(r * w.row_stride);
                let stride = if four { w.row_stride } else { 0 };
                match level {
                    SimdLevel::Avx512 => f16_dot4_avx512(wp, stride, k, x.as_ptr()),
                    SimdLevel::Avx2 => f16_dot4_avx2(wp, stride, k, x.as_ptr()),
                }
            };
            let count = if four { 4 } else { 1 };
            y[r - rows.start..][..count].copy_from_slice(&dots[..count]);
            r += count;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (level, k, pick, y);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::f32_to_f16;
    use super::super::test_support::*;
    use super::*;

    #[test]
    fn f16_products_match_the_plain_product_and_each_other() {
        let levels = float_levels();
        report_missing("f16 product", &levels);
        #[cfg(target_arch = "x86_64")]
        if !std::arch::is_x86_feature_detected!("f16c") {
            fail_under_ci("this CPU has no F16C; the f16 product cannot run");
            return;
        }
        // (n, k, m, batches, weight row stride): whole steps and tails, strided rows
        // as in the decoder's per-head views of its caches, several batches.
        #[cfg(target_arch = "x86_64")]
        for (n, k, m, batches, w_row) in [
            (4, 16, 1, 1, 16),
            (11, 64, 2, 1, 64),
            (1001, 384, 1, 1, 384),
            (150, 64, 1, 6, 384),
            (64, 150, 3, 2, 160),
            (5, 7, 1, 1, 7),
        ] {
            let w_batch = if batches > 1 && w_row > k {
                k
            } else {
                n * w_row
            };
            let w_len = (batches - 1) * w_batch + (n - 1) * w_row + k;
            let w: Vec<u16> = values(w_len, n as u64, 1.0)
                .iter()
                .map(|&v| f32_to_f16(v))
                .collect();
            let x = values(batches * m * k, 5, 2.0);
            let wv = |b: usize, r: usize, c: usize| f16_to_f32(w[b * w_batch + r * w_row + c]);
            let mut by_level = Vec::new();
            for (level, nth) in levels.iter().flat_map(|&l| [1, 2, 3].map(|t| (l, t))) {
                let mut y = vec![f32::NAN; batches * m * n];
                let p = F16Product {
                    w: w.as_ptr(),
                    w_row,
                    w_batch,
                    k,
                    n,
                    x: x.as_ptr(),
                    x_row: k,
                    x_batch: m * k,
                    m,
                    y: y.as_mut_ptr(),
                    y_row: n,
                    y_batch: m * n,
                };
                let groups = n.div_ceil(4);
                for ith in 0..nth {
                    for unit in split_range(groups * batches, 1, ith, nth) {
                        let (b, g) = (unit / groups, unit % groups);
                        // SAFETY: the CPU has the level's features and F16C; the
                        // buffers hold every row the strides reach.
                        unsafe { f16_rows(level, p, b, 4 * g..(4 * g + 4).min(n)) };
                    }
                }
                for b in 0..batches {
                    for r in 0..m {
                        for c in 0..n {
                            let want: f64 = (0..k)
                                .map(|i| wv(b, c, i) as f64 * x[(b * m + r) * k + i] as f64)
                                .sum();
                            let got = y[(b * m + r) * n + c] as f64;
                            assert!(
                                (got - want).abs() < 1e-5 * (1.0 + want.abs()),
                                "{level:?} {n}x{k}x{m}x{batches} nth {nth} at {b},{r},{c}: {got} vs {want}"
                            );
                        }
                    }
                }
                by_level.push((nth, level, y));
            }
            assert_same_bits(&by_level, &format!("{n}x{k}x{m}x{batches}"));
        }
    }

    #[test]
    fn the_safe_f16_product_refuses_what_does_not_fit() {
        let (n, k, m) = (6, 16, 2);
        let w: Vec<u16> = values(n * k, 61, 1.0)
            .iter()
            .map(|&v| f32_to_f16(v))
            .collect();
        let x = values(m * k, 62, 1.0);
        let (wm, xm) = (
            Matrix::rows(&w, k, n).unwrap(),
            Matrix::rows(&x, k, m).unwrap(),
        );
        let mut y = vec![0f32; m * n];
        let out = Output::new(&mut y);
        let err = product(wm, Matrix::rows(&x, k - 1, m).unwrap(), &out, Part::WHOLE).unwrap_err();
        assert!(err.contains("row length"), "{err}");
        let err = product(Matrix::rows(&w, k, 3).unwrap(), xm, &out, Part::WHOLE).unwrap_err();
        assert!(err.contains("fewer than 4"), "{err}");
        let x2 = Matrix::new(&x, [k, 1, 2], [k, k]).unwrap();
        let err = product(wm, x2, &out, Part::WHOLE).unwrap_err();
        assert!(err.contains("batches"), "{err}");
        if f16_product_available() {
            product(wm, xm, &out, Part::WHOLE).unwrap();
            let want: f32 = (0..k).map(|i| f16_to_f32(w[k + i]) * x[k + i]).sum();
            assert!((y[n + 1] - want).abs() < 1e-4, "{} vs {want}", y[n + 1]);
        } else {
            fail_under_ci("this CPU cannot run the f16 product");
        }
    }

    /// Picked rows equal the whole product's bit for bit, unpicked ones are left as
    /// they were, and rows past the weight, a wrong activation length or output
    /// length are refused.
    #[test]
    fn picked_rows_equal_the_whole_product_and_bad_ranges_are_refused() {
        if !f16_product_available() {
            fail_under_ci("this CPU cannot run the f16 product");
            return;
        }
        let (k, n) = (40usize, 13usize);
        let w: Vec<u16> = values(k * n, 3, 0.5)
            .iter()
            .map(|&v| f32_to_f16(v))
            .collect();
        let x = values(k, 4, 1.0);
        let m = Matrix::rows(&w, k, n).unwrap();
        let mut whole = vec![0f32; n];
        product(
            m,
            Matrix::rows(&x, k, 1).unwrap(),
            &Output::new(&mut whole),
            Part::WHOLE,
        )
        .unwrap();
        let mut y = vec![f32::NAN; n - 2];
        product_rows(m, &x, 2..n, |r| r % 3 != 0, &mut y).unwrap();
        for r in 2..n {
            if r % 3 != 0 {
                assert_eq!(y[r - 2].to_bits(), whole[r].to_bits(), "row {r}");
            } else {
                assert!(y[r - 2].is_nan(), "row {r} was not picked");
            }
        }
        assert!(product_rows(m, &x, 10..n + 1, |_| true, &mut [0.0; 4]).is_err());
        assert!(product_rows(m, &x[1..], 0..4, |_| true, &mut [0.0; 4]).is_err());
        assert!(product_rows(m, &x, 0..4, |_| true, &mut [0.0; 3]).is_err());
    }
}
