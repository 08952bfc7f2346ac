//! Multi-head self-attention without a mask (heads of 64, the encoder's): each query's
//! whole score row stays in cache, so the softmax is exact in one pass, with keys
//! chunked in L1. Written once over [`AttentionSimd`] and compiled for AVX-512 and for
//! AVX2.

#[cfg(target_arch = "x86_64")]
use std::cell::RefCell;

#[cfg(target_arch = "x86_64")]
use super::simd::{product_tile, AttentionSimd, Avx2Attention, Avx512Attention};
use super::{expect_eq, split_range, KernelResult, Matrix, Output, Part, SimdLevel};

/// Head width the attention kernel supports: 64, every Whisper size's.
pub const ATTENTION_HEAD_DIM: usize = 64;
/// Query rows one work unit of the attention kernel covers: its scores (rows of all
/// keys) stay in L2, so the softmax is exact in one pass. A multiple of both levels'
/// tile heights (6 and 2) that divides Whisper's 1500 positions, so no tile is short.
const ATT_BLOCK: usize = 30;

/// True when this CPU runs the encoder attention kernel (AVX-512 F, or AVX2 with
/// FMA: [`SimdLevel::allowed`]).
pub fn attention_kernel_available() -> bool {
    SimdLevel::allowed().is_some()
}

/// Keys one pass covers: their transposed keys (16 KiB) and values stay in L1 while
/// every query tile of the block uses them.
const KEY_CHUNK: usize = 64;

/// Adds probabilities times values of `keys` keys (at most 64) to `R` rows of 64
/// running outputs in `o` (rows 64 apart), `S::COLS` outputs per pass.
///
/// # Safety
/// `S`'s features; `p` `R` rows `tp` apart with `keys` floats; `v` `keys` rows
/// `v_stride` apart with 64 values; `o` `R * 64` floats.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn values_tile<S: AttentionSimd, const R: usize>(
    p: *const f32,
    tp: usize,
    v: *const f32,
    v_stride: usize,
    keys: usize,
    o: *mut f32,
) {
    // SAFETY: caller's guarantee.
    unsafe {
        for c in (0..ATTENTION_HEAD_DIM).step_by(S::COLS) {
            let mut acc = [S::zero(); R];
            for (r, a) in acc.iter_mut().enumerate() {
                *a = S::load(o.add(r * 64 + c));
            }
            for j in 0..keys {
                let vv = S::load(v.add(j * v_stride + c));
                for (r, a) in acc.iter_mut().enumerate() {
                    S::fma(a, *p.add(r * tp + j), &vv);
                }
            }
            for (r, a) in acc.iter().enumerate() {
                S::store(o.add(r * 64 + c), *a, 1.0);
            }
        }
    }
}

/// Attention of query rows `r0..r0 + rows` (at most [`ATT_BLOCK`]) of one head: scores
/// in key chunks, an exact softmax per row, values in key chunks, then the rows
/// normalised into `y`.
///
/// # Safety
/// `S`'s features; `q` and `y` point at row 0 of the head's slices (rows `x_stride`
/// and `y_stride` apart, `t` rows); `kt` the head's keys transposed chunk by chunk
/// (`tp / 64` blocks of 64 rows of 64 keys), `vh` its values (`t` rows of 64); `s`
/// `ATT_BLOCK * tp` floats, `o` `ATT_BLOCK * 64`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn attention_block<S: AttentionSimd>(
    q: *const f32,
    x_stride: usize,
    kt: &[f32],
    vh: &[f32],
    tp: usize,
    t: usize,
    r0: usize,
    rows: usize,
    s: &mut [f32],
    o: &mut [f32],
    y: *mut f32,
    y_stride: usize,
) {
    // SAFETY: every pointer stays inside the buffers the caller describes.
    unsafe {
        for jc in (0..tp).step_by(KEY_CHUNK) {
            for tr in (0..rows).step_by(S::TILE_ROWS) {
                let n = (rows - tr).min(S::TILE_ROWS);
                let qp = q.add((r0 + tr) * x_stride);
                by_tile!(
                    n,
                    product_tile,
                    qp,
                    x_stride,
                    ATTENTION_HEAD_DIM,
                    kt.as_ptr().add(jc * ATTENTION_HEAD_DIM),
                    KEY_CHUNK,
                    s.as_mut_ptr().add(tr * tp + jc),
                    tp,
                    1.0 / (ATTENTION_HEAD_DIM as f32).sqrt()
                );
            }
        }
        let mut inv = [0f32; ATT_BLOCK];
        for (r, i) in inv.iter_mut().enumerate().take(rows) {
            *i = S::softmax_row(s.as_mut_ptr().add(r * tp), t);
        }
        o[..rows * 64].fill(0.0);
        for jc in (0..t).step_by(KEY_CHUNK) {
            let keys = (t - jc).min(KEY_CHUNK);
            for tr in (0..rows).step_by(S::TILE_ROWS) {
                let n = (rows - tr).min(S::TILE_ROWS);
                let pp = s.as_ptr().add(tr * tp + jc);
                let vp = vh.as_ptr().add(jc * ATTENTION_HEAD_DIM);
                by_tile!(
                    n,
                    values_tile,
                    pp,
                    tp,
                    vp,
                    ATTENTION_HEAD_DIM,
                    keys,
                    o.as_mut_ptr().add(tr * 64)
                );
            }
        }
        for r in 0..rows {
            let out = std::slice::from_raw_parts_mut(y.add((r0 + r) * y_stride), 64);
            for (dst, &val) in out.iter_mut().zip(&o[r * 64..(r + 1) * 64]) {
                *dst = val * inv[r];
            }
        }
    }
}

/// A worker thread's copies of one head's keys (transposed) and values, contiguous so
/// that a key chunk's loads stay within a few pages, its score rows and its output rows.
#[cfg(target_arch = "x86_64")]
type AttentionScratch = (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>);

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// Each worker thread's [`AttentionScratch`], reused across calls.
    static ATT_SCRATCH: RefCell<AttentionScratch> =
        const { RefCell::new((Vec::new(), Vec::new(), Vec::new(), Vec::new())) };
}

/// The attention op's tensors: `t` rows `x_stride` floats apart of stacked queries,
/// keys and values (`3 d` floats each, `d = heads * 64`), and the output, `t` rows
/// `y_stride` apart of `d` floats.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct AttentionTensors {
    x: *const f32,
    x_stride: usize,
    y: *mut f32,
    y_stride: usize,
    heads: usize,
    t: usize,
}

/// Attention of query rows `items` (head-major units of [`ATT_BLOCK`] rows).
///
/// # Safety
/// `S`'s features; `a` describes live tensors of those sizes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn attention_items_with<S: AttentionSimd>(
    a: AttentionTensors,
    items: std::ops::Range<usize>,
    (kt, vh, s, o): &mut AttentionScratch,
) {
    const DH: usize = ATTENTION_HEAD_DIM;
    let (t, x) = (a.t, a.x);
    let d = a.heads * DH;
    let tiles = t.div_ceil(ATT_BLOCK);
    let tp = t.div_ceil(64) * 64;
    kt.resize(DH * tp, 0.0);
    vh.resize(DH * t, 0.0);
    s.resize(ATT_BLOCK * tp, 0.0);
    o.resize(ATT_BLOCK * DH, 0.0);
    let mut loaded = None;
    for item in items {
        let (h, tile) = (item / tiles, item % tiles);
        if loaded != Some(h) {
            for j in 0..tp {
                let chunk = &mut kt[(j / KEY_CHUNK) * KEY_CHUNK * DH + j % KEY_CHUNK..];
                for c in 0..DH {
                    chunk[c * KEY_CHUNK] = if j < t {
                        // SAFETY: key row j of head h lies inside x.
                        unsafe { *x.add(j * a.x_stride + d + h * DH + c) }
                    } else {
                        0.0
                    };
                }
            }
            for (j, row) in vh.chunks_exact_mut(DH).enumerate() {
                // SAFETY: value row j of head h lies inside x.
                row.copy_from_slice(unsafe {
                    std::slice::from_raw_parts(x.add(j * a.x_stride + 2 * d + h * DH), DH)
                });
            }
            loaded = Some(h);
        }
        let r0 = tile * ATT_BLOCK;
        let rows = (t - r0).min(ATT_BLOCK);
        // SAFETY: the caller's guarantees cover these rows and this head.
        unsafe {
            let q = x.add(h * DH);
            let yh = a.y.add(h * DH);
            attention_block::<S>(q, a.x_stride, kt, vh, tp, t, r0, rows, s, o, yh, a.y_stride);
        }
    }
}

by_level!(
    /// [`attention_items_with`] at a level.
    fn attention_items_at(
        a: AttentionTensors,
        items: std::ops::Range<usize>,
        scratch: &mut AttentionScratch
    ) => attention_items_with
);

/// Attention of query rows `items` at `level` (see [`attention_items_with`]).
///
/// # Safety
/// The CPU must have `level`; `a` describes live tensors.
#[cfg(target_arch = "x86_64")]
unsafe fn attention_items(level: SimdLevel, a: AttentionTensors, items: std::ops::Range<usize>) {
    // Passed in, so that the generic body holds no closure: a closure there would be
    // compiled without the entry points' target features.
    let mut scratch = ATT_SCRATCH.take();
    // SAFETY: the caller's guarantees.
    unsafe { attention_items_at(level, a, items, &mut scratch) };
    ATT_SCRATCH.set(scratch);
}

/// Multi-head self-attention, scale 1/sqrt(64): `qkv` is `t` rows of the stacked
/// query, key and value (`3 d` values each, `d = heads * 64`, one batch), `y` the `t`
/// rows of `d` outputs (heads side by side): the share `part` names, in (head, block
/// of [`ATT_BLOCK`] rows) units. Refuses lengths that do not fit, or a CPU without the
/// kernel.
pub fn self_attention(
    qkv: Matrix<'_, f32>,
    heads: usize,
    y: &Output<'_>,
    part: Part,
) -> KernelResult {
    if heads == 0 {
        return Err("the attention needs at least one head".into());
    }
    let d = heads * ATTENTION_HEAD_DIM;
    let [cols, t, batches] = qkv.dims();
    expect_eq("the stacked q, k, v row length", cols, 3 * d)?;
    expect_eq("the stacked q, k, v batches", batches, 1)?;
    y.expect_len("the attention", d * t)?;
    let Some(level) = SimdLevel::allowed() else {
        return Err("this CPU lacks the vector instructions the attention needs".into());
    };
    let items = split_range(heads * t.div_ceil(ATT_BLOCK), 1, part.ith, part.nth);
    #[cfg(target_arch = "x86_64")]
    {
        let tensors = AttentionTensors {
            x: qkv.ptr(),
            x_stride: qkv.row_stride,
            y: y.ptr,
            y_stride: d,
            heads,
            t,
        };
        // SAFETY: the CPU has `level`; qkv holds t rows of 3d values `x_stride` apart
        // and y t rows of d (both checked above); this part writes the rows of its
        // (head, block) units, which no other part's overlap (split_range).
        unsafe { attention_items(level, tensors, items) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (level, items, qkv, y);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    #[test]
    fn attention_kernels_match_plain_attention() {
        let levels = float_levels();
        report_missing("attention kernel", &levels);
        #[cfg(target_arch = "x86_64")]
        for (heads, t) in [(1, 1), (2, 7), (3, 64), (2, 150)] {
            let d = heads * ATTENTION_HEAD_DIM;
            let x = values(3 * d * t, (heads * t) as u64, 2.0);
            let mut want = vec![0f64; d * t];
            for h in 0..heads {
                for i in 0..t {
                    let q = |c: usize| x[i * 3 * d + h * 64 + c] as f64;
                    let scores: Vec<f64> = (0..t)
                        .map(|j| {
                            (0..64)
                                .map(|c| q(c) * x[j * 3 * d + d + h * 64 + c] as f64)
                                .sum::<f64>()
                                / 8.0
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                    let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for c in 0..64 {
                        want[i * d + h * 64 + c] = (0..t)
                            .map(|j| e[j] * x[j * 3 * d + 2 * d + h * 64 + c] as f64)
                            .sum::<f64>()
                            / sum;
                    }
                }
            }
            let mut by_level = Vec::new();
            for (level, nth) in levels.iter().flat_map(|&l| [1, 2, 3].map(|n| (l, n))) {
                let mut got = vec![f32::NAN; d * t];
                let units = heads * t.div_ceil(ATT_BLOCK);
                for ith in 0..nth {
                    // SAFETY: the CPU has the level's features; buffers match the shapes.
                    unsafe {
                        let tensors = AttentionTensors {
                            x: x.as_ptr(),
                            x_stride: 3 * d,
                            y: got.as_mut_ptr(),
                            y_stride: d,
                            heads,
                            t,
                        };
                        attention_items(level, tensors, split_range(units, 1, ith, nth))
                    };
                }
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (*g as f64 - w).abs() < 1e-5 * (1.0 + w.abs()),
                        "{level:?} heads {heads} t {t} nth {nth} at {i}: {g} vs {w}"
                    );
                }
                by_level.push((nth, level, got));
            }
            assert_same_bits(&by_level, &format!("{heads} heads, t {t}"));
        }
    }

    #[test]
    fn the_safe_attention_refuses_what_does_not_fit() {
        let (heads, t) = (2, 5);
        let d = heads * ATTENTION_HEAD_DIM;
        let x = values(3 * d * t, 41, 1.0);
        let qkv = Matrix::rows(&x, 3 * d, t).unwrap();
        let mut y = vec![0f32; d * t];
        let out = Output::new(&mut y);
        let err = self_attention(qkv, 3, &out, Part::WHOLE).unwrap_err();
        assert!(err.contains("row length"), "{err}");
        let err = self_attention(qkv, 0, &out, Part::WHOLE).unwrap_err();
        assert!(err.contains("at least one head"), "{err}");
        let mut short = vec![0f32; d * t - 1];
        let err = self_attention(qkv, heads, &Output::new(&mut short), Part::WHOLE).unwrap_err();
        assert!(err.contains("output holds"), "{err}");
        if attention_kernel_available() {
            self_attention(qkv, heads, &out, Part::WHOLE).unwrap();
            assert!(y.iter().all(|v| v.is_finite()));
        } else {
            fail_under_ci("this CPU cannot run the attention kernel");
        }
    }
}
