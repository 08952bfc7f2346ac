//! The logits of a decoder step in two stages. A q8_0 product over the text rows reads
//! about 60% of the f16 weight's bytes; a bound on its error then names every row
//! that could hold the largest logit not banned, and the f16 product computes those
//! rows again, with the rows after the text (which the host reads one by one). Those
//! rows equal the f16 product bit for bit; each other row keeps its q8_0 value, which
//! lies below that largest logit. So the argmax, the largest logit and every row the
//! host reads are exactly the f16 product's; a softmax over the row differs from it
//! only in the terms of rows far below the top.

use super::q8::{quantize_row_u8, QK};
use super::{
    expect_eq, f16_product, f16_to_f32, f32_to_f16, split_range, KernelResult, Matrix, Output, Part,
};

/// Values of the bound per q8_0 block of the weight's rows, as [`quantize_q8`] lays
/// them out: the largest error of a q8_0 value against the weight's, then the largest
/// sum of |q8_0 values| of one row's block.
pub const BOUNDS_PER_BLOCK: usize = 2;

/// Added to and taken from a float below 2^22 in size, rounds it to the nearest
/// integer, ties to even (the default rounding of the sum), in plain vectorisable
/// arithmetic.
const ROUND_EVEN: f32 = 12_582_912.0;

/// The largest of a block's values, halving the block each pass: comparisons on
/// fixed arrays, which vectorise (a fold over `f32::max`, whose NaN rule orders it,
/// does not).
fn block_max(mut v: [f32; QK]) -> f32 {
    let mut half = QK / 2;
    while half > 0 {
        for i in 0..half {
            if v[i + half] > v[i] {
                v[i] = v[i + half];
            }
        }
        half /= 2;
    }
    v[0]
}

/// Quantizes the rows of `k` values `w` to ggml's q8_0 blocks (an f16 scale `max|w| /
/// 127`, values rounded to nearest even), and raises `bounds` (`2 * k / 32` floats,
/// `[errors.., sums..]` per block position) to the largest |w - q8_0 value| and the
/// largest sum of |q8_0 values| of these rows. The bound is measured on the values
/// made, so any rounding rule would do; `None` when the lengths do not fit.
pub fn quantize_q8(w: &[f32], k: usize, bounds: &mut [f32]) -> Option<Vec<u8>> {
    if k == 0 || !k.is_multiple_of(QK) || !w.len().is_multiple_of(k) {
        return None;
    }
    let nb = k / QK;
    if bounds.len() != BOUNDS_PER_BLOCK * nb {
        return None;
    }
    let mut out = Vec::with_capacity(w.len() / QK * (2 + QK));
    for (i, block) in w.chunks_exact(QK).enumerate() {
        let b = i % nb;
        let block: &[f32; QK] = block.try_into().expect("chunks of QK");
        let amax = block_max(std::array::from_fn(|j| block[j].abs()));
        let d = f16_to_f32(f32_to_f16(amax / 127.0));
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
        let mut q = [0f32; QK];
        for (q, &v) in q.iter_mut().zip(block) {
            *q = ((v * id + ROUND_EVEN) - ROUND_EVEN).clamp(-127.0, 127.0);
        }
        out.extend(q.iter().map(|&q| q as i8 as u8));
        let err = block_max(std::array::from_fn(|j| (block[j] - d * q[j]).abs()));
        let sum: f32 = q.iter().map(|&q| (d * q).abs()).sum();
        // A weight that is not finite leaves the error unbounded (every row is then
        // recomputed).
        let finite = block.iter().all(|v| v.is_finite());
        bounds[b] = bounds[b].max(if finite { err } else { f32::INFINITY });
        bounds[nb + b] = bounds[nb + b].max(sum);
    }
    Some(out)
}

/// The largest |f16 product - q8_0 product| of any row against the activations `x`,
/// given the weight's bounds ([`quantize_q8`]): the weight's rounding times |x|, the q8_0 values
/// times the activations' rounding (they are quantized as the q8_0 product does),
/// plus a margin for both products' f32 rounding. Infinite or NaN when `x` is.
fn error_bound(x: &[f32], bounds: &[f32]) -> f32 {
    let nb = x.len() / QK;
    let mut q = vec![0u8; x.len()];
    let mut d = vec![0f32; nb];
    quantize_row_u8(x, &mut q, &mut d);
    let (mut bound, mut magnitude) = (0f32, 0f32);
    for b in 0..nb {
        let (err_w, sum_w) = (bounds[b], bounds[nb + b]);
        let xs = &x[b * QK..][..QK];
        let (mut l1, mut max, mut err_x) = (0f32, 0f32, 0f32);
        for (&xv, &qv) in xs.iter().zip(&q[b * QK..][..QK]) {
            l1 += xv.abs();
            max = max.max(xv.abs());
            err_x = err_x.max((xv - d[b] * (i32::from(qv) - 128) as f32).abs());
        }
        bound += err_w * l1 + sum_w * err_x;
        magnitude += (sum_w + QK as f32 * err_w) * (max + err_x);
    }
    // Each product sums at most k + nb rounded terms of at most `magnitude` in all.
    let rounding = (x.len() + nb + 4) as f32 * f32::EPSILON * magnitude;
    (bound + rounding) * (1.0 + 1e-3)
}

/// The logits `y` (`n` values, the rows of the f16 weight `w` times `x`) from the
/// q8_0 product `yq` of its first `yq.len()` rows: the share `part` names, in units of
/// four rows. Rows `head..` (and the text rows `yq` lacks) are the f16 product's; of
/// the rows before `head`, those within twice the error bound of the largest `yq` not
/// in `ban` too, the others `yq`'s value. `exact` computes every row in f16 (the whole
/// row read by sampling).
#[allow(clippy::too_many_arguments)]
pub fn refine(
    yq: &[f32],
    w: Matrix<'_, u16>,
    x: &[f32],
    bounds: &[f32],
    head: usize,
    ban: &[i32],
    exact: bool,
    y: &Output<'_>,
    part: Part,
) -> KernelResult {
    let [k, n, _] = w.dims();
    expect_eq("the activations' length", x.len(), k)?;
    expect_eq(
        "the bounds' length",
        bounds.len(),
        BOUNDS_PER_BLOCK * k / QK,
    )?;
    if !k.is_multiple_of(QK) || yq.len() > head || head > n {
        return Err(format!(
            "{} q8_0 rows and a head of {head} do not fit a weight of {n} rows of {k}",
            yq.len()
        ));
    }
    y.expect_len("the refined logits", n)?;
    let threshold = if exact {
        f32::NEG_INFINITY
    } else {
        let mut banned: Vec<usize> = ban
            .iter()
            .filter_map(|&t| usize::try_from(t).ok())
            .collect();
        banned.sort_unstable();
        banned.push(yq.len());
        let mut top = f32::NEG_INFINITY;
        let mut start = 0;
        for &end in &banned {
            let end = end.min(yq.len());
            if end > start {
                top = yq[start..end]
                    .iter()
                    .fold(top, |m, &v| if v > m { v } else { m });
            }
            start = start.max(end + 1);
        }
        top - 2.0 * error_bound(x, bounds)
    };
    let rows = split_range(n, 4, part.ith, part.nth);
    if rows.is_empty() {
        return Ok(());
    }
    // SAFETY: every part's rows are its own (split_range); the caller's Output
    // contract gives this part those floats while it runs.
    let out = unsafe { std::slice::from_raw_parts_mut(y.ptr.add(rows.start), rows.len()) };
    // A NaN q8_0 value, or a threshold that is not a number, sends the row to the f16
    // product.
    let keep = |r: usize| r < yq.len() && yq[r] < threshold;
    for r in rows.clone().filter(|&r| keep(r)) {
        out[r - rows.start] = yq[r];
    }
    f16_product::product_rows(w, x, rows, |r| !keep(r), out)
}

#[cfg(test)]
mod tests {
    use super::super::q8;
    use super::super::test_support::*;
    use super::*;

    fn f16_logits(w: &[u16], x: &[f32], n: usize) -> Vec<f32> {
        let mut y = vec![0f32; n];
        let m = Matrix::rows(w, x.len(), n).unwrap();
        f16_product::product(
            m,
            Matrix::rows(x, x.len(), 1).unwrap(),
            &Output::new(&mut y),
            Part::WHOLE,
        )
        .unwrap();
        y
    }

    /// Over random weights with a few rows near the top: every row the refined logits
    /// recompute equals the f16 product's, every other lies strictly below the largest
    /// unbanned text logit, so the argmax over the unbanned rows is the same; in every
    /// split into parts.
    #[test]
    fn refined_logits_keep_the_f16_products_top() {
        if !f16_product::f16_product_available() || !crate::cpu_kernels::q8_kernel_available() {
            fail_under_ci("this CPU lacks the f16 or q8_0 kernels");
            return;
        }
        let (k, n, head) = (128usize, 300usize, 256usize);
        for seed in 0..20u64 {
            let mut wf = values(k * n, seed, 0.1);
            // near-ties: rows that copy another with a small change
            for r in [7, 90, 200] {
                let (a, b) = wf.split_at_mut(r * k);
                b[..k].copy_from_slice(&a[3 * k..4 * k]);
                b[(seed as usize) % k] += 1e-3;
            }
            let w: Vec<u16> = wf.iter().map(|&v| f32_to_f16(v)).collect();
            let wf: Vec<f32> = w.iter().map(|&h| f16_to_f32(h)).collect();
            let mut bounds = vec![0f32; BOUNDS_PER_BLOCK * k / QK];
            let q8 = quantize_q8(&wf[..k * head], k, &mut bounds).unwrap();
            let packed = q8::PackedQ8::pack(&q8, k, head).unwrap();
            let x = values(k, seed + 100, 2.0);
            let mut yq = vec![0f32; head];
            q8::product(
                packed.view(),
                Matrix::rows(&x, k, 1).unwrap(),
                None,
                &Output::new(&mut yq),
                Part::WHOLE,
            )
            .unwrap();
            let exact = f16_logits(&w, &x, n);
            let ban: Vec<i32> = vec![3, (seed * 13 % 256) as i32, 255];
            for nth in [1, 3] {
                for whole in [false, true] {
                    let mut y = vec![f32::NAN; n];
                    let out = Output::new(&mut y);
                    for ith in 0..nth {
                        let wm = Matrix::rows(&w, k, n).unwrap();
                        refine(
                            &yq,
                            wm,
                            &x,
                            &bounds,
                            head,
                            &ban,
                            whole,
                            &out,
                            Part::new(ith, nth).unwrap(),
                        )
                        .unwrap();
                    }
                    let allowed = |r: usize| !ban.contains(&(r as i32));
                    let top = (0..head)
                        .filter(|&r| allowed(r))
                        .map(|r| exact[r])
                        .fold(f32::MIN, f32::max);
                    let mut recomputed = 0;
                    for r in 0..n {
                        if y[r].to_bits() == exact[r].to_bits() {
                            recomputed += 1;
                        } else {
                            assert!(!whole && r < head, "row {r} not exact");
                            assert!(y[r] < top, "row {r}: {} not below the top {top}", y[r]);
                        }
                    }
                    assert!(
                        recomputed < n || whole,
                        "every row recomputed (seed {seed})"
                    );
                }
            }
        }
    }

    #[test]
    fn the_bounds_cover_the_q8_values_and_bad_lengths_are_refused() {
        let (k, n) = (64usize, 32usize);
        let w: Vec<f32> = values(k * n, 5, 0.5);
        let mut bounds = vec![0f32; 4];
        // two halves: the bounds are the larger of each's
        let mut q8 = quantize_q8(&w[..k * 16], k, &mut bounds).unwrap();
        q8.extend(quantize_q8(&w[k * 16..], k, &mut bounds).unwrap());
        for (i, block) in q8.chunks_exact(34).enumerate() {
            let (row, b) = (i / 2, i % 2);
            let d = f16_to_f32(u16::from_le_bytes([block[0], block[1]]));
            let mut sum = 0f32;
            for (j, &q) in block[2..].iter().enumerate() {
                let v = d * f32::from(q as i8);
                assert!(
                    (w[row * k + b * QK + j] - v).abs() <= bounds[b],
                    "row {row}"
                );
                sum += v.abs();
            }
            assert!(sum <= bounds[2 + b]);
            assert!(
                (w[row * k + b * QK..][..QK]
                    .iter()
                    .map(|v| v.abs())
                    .sum::<f32>()
                    - sum)
                    .abs()
                    < 0.1
            );
        }
        assert!(quantize_q8(&w[1..], k, &mut bounds).is_none());
        assert!(quantize_q8(&w, 48, &mut bounds).is_none());
        assert!(quantize_q8(&w, k, &mut [0.0; 3]).is_none());
        let x = values(k, 9, 3.0);
        assert!(error_bound(&x, &bounds) > 0.0);
        let mut nan = x.clone();
        nan[3] = f32::NAN;
        let bound = error_bound(&nan, &bounds);
        assert!(bound.is_nan() || bound == f32::INFINITY, "{bound}");
        let wh: Vec<u16> = w.iter().map(|&v| f32_to_f16(v)).collect();
        let mut y = vec![0f32; n];
        let wm = Matrix::rows(&wh, k, n).unwrap();
        let err = refine(
            &[0.0; 16],
            wm,
            &x,
            &bounds,
            40,
            &[],
            false,
            &Output::new(&mut y),
            Part::WHOLE,
        );
        assert!(err.is_err(), "a head past the rows");
    }
}
