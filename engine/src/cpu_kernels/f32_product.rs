//! The f32 product on a weight packed transposed at upload ([`pack_f32_transposed`]):
//! 64 output columns at a time, so one panel of the weight stays in L2 while every row
//! tile passes. Written over [`AttentionSimd`] (the attention's product tile).

#[cfg(target_arch = "x86_64")]
use super::simd::{product_tile, AttentionSimd, Avx2Attention, Avx512Attention};
use super::{expect_eq, split_range, KernelResult, Matrix, Output, Part, SimdLevel};

/// Rows `rows` of `y = x W^T` for an f32 weight packed transposed (`wt`: `k` rows of
/// `n` floats, `n` a multiple of 64), 64 output columns at a time so that one panel
/// of the weight stays in L2 while every row tile passes.
///
/// # Safety
/// `S`'s features; `x` holds rows `rows` of `k` floats `x_stride` apart, `y` the same
/// rows of `n` floats `y_stride` apart.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn f32_rows_with<S: AttentionSimd>(p: F32Product, rows: std::ops::Range<usize>) {
    let F32Product {
        x,
        x_stride,
        k,
        wt,
        n,
        y,
        y_stride,
    } = p;
    // SAFETY: the caller's guarantees cover every tile.
    unsafe {
        for col in (0..n).step_by(64) {
            for r in rows.clone().step_by(S::TILE_ROWS) {
                let tile = (rows.end - r).min(S::TILE_ROWS);
                by_tile!(
                    tile,
                    product_tile,
                    x.add(r * x_stride),
                    x_stride,
                    k,
                    wt.add(col),
                    n,
                    y.add(r * y_stride + col),
                    y_stride,
                    1.0
                );
            }
        }
    }
}

/// The f32 product's operands: `m` rows of `k` activations `x_stride` floats apart,
/// the weight packed transposed (`k` rows of `n`), and `m` output rows of `n`.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct F32Product {
    x: *const f32,
    x_stride: usize,
    k: usize,
    wt: *const f32,
    n: usize,
    y: *mut f32,
    y_stride: usize,
}

by_level!(
    /// Rows `rows` of the f32 product ([`f32_rows_with`]) at a level.
    fn f32_rows(p: F32Product, rows: std::ops::Range<usize>) => f32_rows_with
);

/// Output columns of the f32 product must come in these (one run of 64 per tile).
pub const F32_PRODUCT_COLS: usize = 64;

/// An f32 weight (`n` rows of `k`, ggml's `[k, n]`) transposed for [`product`]:
/// `k` rows of `n`. `None` unless `n` is a multiple of [`F32_PRODUCT_COLS`] and the
/// data holds `n * k` values.
pub fn pack_f32_transposed(w: &[f32], k: usize, n: usize) -> Option<Vec<f32>> {
    if k == 0 || n == 0 || !n.is_multiple_of(F32_PRODUCT_COLS) || w.len() != n * k {
        return None;
    }
    let mut wt = vec![0f32; n * k];
    for (row, values) in w.chunks_exact(k).enumerate() {
        for (c, &v) in values.iter().enumerate() {
            wt[c * n + row] = v;
        }
    }
    Some(wt)
}

/// `y` [m rows of n] = `x` (m rows of k, one batch) times the weight `wt` packed by
/// [`pack_f32_transposed`] (k rows of `n`, `n` whole runs of [`F32_PRODUCT_COLS`]):
/// the share `part` names, in runs of 4 rows. Refuses lengths that do not fit, or a
/// CPU without the kernel.
pub fn product(
    wt: &[f32],
    n: usize,
    x: Matrix<'_, f32>,
    y: &Output<'_>,
    part: Part,
) -> KernelResult {
    if n == 0 || !n.is_multiple_of(F32_PRODUCT_COLS) {
        return Err(format!(
            "the weight has {n} outputs, not whole runs of {F32_PRODUCT_COLS}"
        ));
    }
    let [k, m, batches] = x.dims();
    expect_eq("the packed weight's length", wt.len(), n * k)?;
    expect_eq("the activations' batches", batches, 1)?;
    y.expect_len("the f32 product", m * n)?;
    let Some(level) = SimdLevel::allowed() else {
        return Err("this CPU lacks the vector instructions the f32 product needs".into());
    };
    let rows = split_range(m, 4, part.ith, part.nth);
    #[cfg(target_arch = "x86_64")]
    if !rows.is_empty() {
        let p = F32Product {
            x: x.ptr(),
            x_stride: x.row_stride,
            k,
            wt: wt.as_ptr(),
            n,
            y: y.ptr,
            y_stride: n,
        };
        // SAFETY: the CPU has `level`; x holds m rows of k, wt k rows of n, y m rows
        // of n (all checked above); this part writes its rows, which no other part's
        // overlap (split_range).
        unsafe { f32_rows(level, p, rows) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (level, rows, x, y);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    #[test]
    fn f32_products_match_the_plain_product_and_each_other() {
        assert!(pack_f32_transposed(&[0.0; 64 * 3], 3, 64).is_some());
        assert!(
            pack_f32_transposed(&[0.0; 32 * 3], 3, 32).is_none(),
            "n not whole runs"
        );
        assert!(
            pack_f32_transposed(&[0.0; 10], 3, 64).is_none(),
            "short data"
        );
        let levels = float_levels();
        report_missing("f32 product", &levels);
        #[cfg(target_arch = "x86_64")]
        for (n, k, m) in [(64, 3, 1), (128, 240, 7), (192, 97, 13)] {
            let w = values(n * k, (n + k) as u64, 1.0);
            let x = values(m * k, 77, 2.0);
            let wt = pack_f32_transposed(&w, k, n).unwrap();
            let mut by_level = Vec::new();
            for (level, nth) in levels.iter().flat_map(|&l| [1, 2, 3].map(|t| (l, t))) {
                let mut y = vec![f32::NAN; m * n];
                let p = F32Product {
                    x: x.as_ptr(),
                    x_stride: k,
                    k,
                    wt: wt.as_ptr(),
                    n,
                    y: y.as_mut_ptr(),
                    y_stride: n,
                };
                for ith in 0..nth {
                    // SAFETY: the CPU has the level's features; buffers match the shapes.
                    unsafe { f32_rows(level, p, split_range(m, 4, ith, nth)) };
                }
                for r in 0..m {
                    for c in 0..n {
                        let want: f64 = (0..k)
                            .map(|i| w[c * k + i] as f64 * x[r * k + i] as f64)
                            .sum();
                        let got = y[r * n + c] as f64;
                        assert!(
                            (got - want).abs() < 1e-5 * (1.0 + want.abs()),
                            "{level:?} {n}x{k}x{m} nth {nth} at {r},{c}: {got} vs {want}"
                        );
                    }
                }
                by_level.push((nth, level, y));
            }
            assert_same_bits(&by_level, &format!("{n}x{k}x{m}"));
        }
    }

    #[test]
    fn the_safe_f32_product_refuses_what_does_not_fit() {
        let (n, k, m) = (64, 5, 3);
        let wt = pack_f32_transposed(&values(n * k, 51, 1.0), k, n).unwrap();
        let x = values(m * k, 52, 1.0);
        let xm = Matrix::rows(&x, k, m).unwrap();
        let mut y = vec![0f32; m * n];
        let out = Output::new(&mut y);
        let err = product(&wt, 32, xm, &out, Part::WHOLE).unwrap_err();
        assert!(err.contains("not whole runs"), "{err}");
        let err = product(&wt[1..], n, xm, &out, Part::WHOLE).unwrap_err();
        assert!(err.contains("packed weight's length"), "{err}");
        let mut short = vec![0f32; m * n - 1];
        let err = product(&wt, n, xm, &Output::new(&mut short), Part::WHOLE).unwrap_err();
        assert!(err.contains("output holds"), "{err}");
    }
}
