//! The f32 1-D convolution over a time-major input, as one op: the chunked im2col and
//! transposed store of the q8_0 convolution ([`super::q8::conv_time_major`]) around an
//! f32 product that reads the kernel in its own layout (each output channel's IC x K
//! values, ONNX's [OC, IC, K]), so nothing is packed at load and the im2col matrix
//! never goes through memory.

use std::cell::RefCell;

use super::q8::{for_each_chunk, ConvSteps, CONV_CHUNK};
use super::{expect_eq, split_range, KernelResult, Matrix, Output, Part, SimdLevel};

/// Lanes each dot product accumulates in (a fixed order, whatever the vector width).
const LANES: usize = 16;
/// Output positions and channels one micro-kernel call computes.
const TILE: usize = 4;

/// `R` x `C` dot products of `rows` with `weights` (all of one length), each summed in
/// [`LANES`] lanes with fused multiply-adds, the lanes then added in order, then the
/// tail: the plain form of the vector kernels ([`Dots`]), which the tests hold them
/// to bit for bit.
#[cfg(test)]
fn dot_tile<const R: usize, const C: usize>(
    rows: [&[f32]; R],
    weights: [&[f32]; C],
) -> [[f32; C]; R] {
    let k = rows[0].len();
    let full = k - k % LANES;
    let mut acc = [[[0f32; LANES]; C]; R];
    for i in (0..full).step_by(LANES) {
        let x: [&[f32; LANES]; R] = rows.map(|r| r[i..i + LANES].try_into().unwrap());
        let w: [&[f32; LANES]; C] = weights.map(|w| w[i..i + LANES].try_into().unwrap());
        for r in 0..R {
            for c in 0..C {
                for l in 0..LANES {
                    acc[r][c][l] = x[r][l].mul_add(w[c][l], acc[r][c][l]);
                }
            }
        }
    }
    let mut out = [[0f32; C]; R];
    for r in 0..R {
        for c in 0..C {
            let mut sum = acc[r][c].iter().sum::<f32>();
            for i in full..k {
                sum = rows[r][i].mul_add(weights[c][i], sum);
            }
            out[r][c] = sum;
        }
    }
    out
}

/// The dot-product kernels one vector width provides: a [`TILE`] x [`TILE`] tile and
/// a single product, each with the lane order of [`dot_tile`].
trait Dots {
    /// # Safety
    /// The CPU has the implementation's features; all slices have one length.
    unsafe fn tile(rows: [&[f32]; TILE], weights: [&[f32]; TILE]) -> [[f32; TILE]; TILE];
    /// # Safety
    /// As [`Dots::tile`].
    unsafe fn one(row: &[f32], weight: &[f32]) -> f32;
}

/// The plain loops ([`dot_tile`]).
#[cfg(test)]
struct PlainDots;

#[cfg(test)]
impl Dots for PlainDots {
    unsafe fn tile(rows: [&[f32]; TILE], weights: [&[f32]; TILE]) -> [[f32; TILE]; TILE] {
        dot_tile(rows, weights)
    }
    unsafe fn one(row: &[f32], weight: &[f32]) -> f32 {
        dot_tile::<1, 1>([row], [weight])[0][0]
    }
}

/// Adds the lanes in order, then the tail `i >= full` with fused multiply-adds: the
/// end of [`dot_tile`].
#[inline(always)]
fn finish(lanes: [f32; LANES], row: &[f32], weight: &[f32], full: usize) -> f32 {
    let mut sum = lanes.iter().sum::<f32>();
    for i in full..row.len() {
        sum = row[i].mul_add(weight[i], sum);
    }
    sum
}

/// [`dot_tile`] with AVX-512: one vector per lane set.
#[cfg(target_arch = "x86_64")]
struct Avx512Dots;

#[cfg(target_arch = "x86_64")]
impl Avx512Dots {
    #[target_feature(enable = "avx512f,fma")]
    unsafe fn dots<const R: usize, const C: usize>(
        rows: [&[f32]; R],
        weights: [&[f32]; C],
    ) -> [[f32; C]; R] {
        use std::arch::x86_64::*;
        let k = rows[0].len();
        let full = k - k % LANES;
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        for i in (0..full).step_by(LANES) {
            // SAFETY: i + 16 <= full <= k, every slice's length (caller's guarantee).
            let w: [__m512; C] =
                std::array::from_fn(|c| unsafe { _mm512_loadu_ps(weights[c].as_ptr().add(i)) });
            for (r, acc_r) in acc.iter_mut().enumerate() {
                // SAFETY: as above.
                let x = unsafe { _mm512_loadu_ps(rows[r].as_ptr().add(i)) };
                for (a, &wc) in acc_r.iter_mut().zip(&w) {
                    *a = _mm512_fmadd_ps(x, wc, *a);
                }
            }
        }
        std::array::from_fn(|r| {
            std::array::from_fn(|c| {
                let mut lanes = [0f32; LANES];
                // SAFETY: 16 floats.
                unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), acc[r][c]) };
                finish(lanes, rows[r], weights[c], full)
            })
        })
    }
}

/// [`Dots`] for a type whose `dots::<R, C>` computes [`dot_tile`]'s products.
macro_rules! dots_from_tiles {
    ($t:ty) => {
        #[cfg(target_arch = "x86_64")]
        impl Dots for $t {
            unsafe fn tile(rows: [&[f32]; TILE], weights: [&[f32]; TILE]) -> [[f32; TILE]; TILE] {
                // SAFETY: the caller's guarantees.
                unsafe { Self::dots(rows, weights) }
            }
            unsafe fn one(row: &[f32], weight: &[f32]) -> f32 {
                // SAFETY: the caller's guarantees.
                unsafe { Self::dots::<1, 1>([row], [weight])[0][0] }
            }
        }
    };
}

dots_from_tiles!(Avx512Dots);

/// [`dot_tile`] with AVX2: two vectors per lane set.
#[cfg(target_arch = "x86_64")]
struct Avx2Dots;

#[cfg(target_arch = "x86_64")]
impl Avx2Dots {
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dots<const R: usize, const C: usize>(
        rows: [&[f32]; R],
        weights: [&[f32]; C],
    ) -> [[f32; C]; R] {
        use std::arch::x86_64::*;
        let k = rows[0].len();
        let full = k - k % LANES;
        let mut acc = [[[_mm256_setzero_ps(); 2]; C]; R];
        for i in (0..full).step_by(LANES) {
            let w: [[__m256; 2]; C] = std::array::from_fn(|c| {
                // SAFETY: i + 16 <= full <= k, every slice's length (caller's guarantee).
                std::array::from_fn(|h| unsafe {
                    _mm256_loadu_ps(weights[c].as_ptr().add(i + 8 * h))
                })
            });
            for (r, acc_r) in acc.iter_mut().enumerate() {
                // SAFETY: as above.
                let x: [__m256; 2] = std::array::from_fn(|h| unsafe {
                    _mm256_loadu_ps(rows[r].as_ptr().add(i + 8 * h))
                });
                for (a, wc) in acc_r.iter_mut().zip(&w) {
                    for h in 0..2 {
                        a[h] = _mm256_fmadd_ps(x[h], wc[h], a[h]);
                    }
                }
            }
        }
        std::array::from_fn(|r| {
            std::array::from_fn(|c| {
                let mut lanes = [0f32; LANES];
                // SAFETY: 2 x 8 floats.
                unsafe {
                    _mm256_storeu_ps(lanes.as_mut_ptr(), acc[r][c][0]);
                    _mm256_storeu_ps(lanes.as_mut_ptr().add(8), acc[r][c][1]);
                }
                finish(lanes, rows[r], weights[c], full)
            })
        })
    }
}

dots_from_tiles!(Avx2Dots);

/// `tile` [rows x n] = `cols` [rows x k] times `kernel` [n x k]^T plus `bias`, tiles of
/// [`TILE`] x [`TILE`] (single products at the edges), with the kernels `D`.
///
/// # Safety
/// The CPU has `D`'s features.
unsafe fn product<D: Dots>(
    cols: &[f32],
    kernel: &[f32],
    k: usize,
    bias: Option<&[f32]>,
    tile: &mut [f32],
) {
    let n = kernel.len() / k;
    let rows = cols.len() / k;
    let row = |r: usize| &cols[r * k..][..k];
    let weight = |c: usize| &kernel[c * k..][..k];
    // Output channels outer: a tile's four kernel rows (up to 13 KB each) are read
    // from memory once per chunk, while the chunk's im2col rows stay in L2.
    for c0 in (0..n).step_by(TILE) {
        for r0 in (0..rows).step_by(TILE) {
            let (tr, tc) = ((rows - r0).min(TILE), (n - c0).min(TILE));
            let mut put = |r: usize, c: usize, v: f32| {
                tile[(r0 + r) * n + c0 + c] = v + bias.map_or(0.0, |b| b[c0 + c]);
            };
            if tr == TILE && tc == TILE {
                // SAFETY: the caller's guarantee; every row and weight has k values.
                let out = unsafe {
                    D::tile(
                        std::array::from_fn(|r| row(r0 + r)),
                        std::array::from_fn(|c| weight(c0 + c)),
                    )
                };
                for (r, o) in out.iter().enumerate() {
                    for (c, &v) in o.iter().enumerate() {
                        put(r, c, v);
                    }
                }
            } else {
                for r in 0..tr {
                    for c in 0..tc {
                        // SAFETY: as above.
                        put(r, c, unsafe { D::one(row(r0 + r), weight(c0 + c)) });
                    }
                }
            }
        }
    }
}

thread_local! {
    /// Each worker thread's input samples, im2col rows and results of one chunk.
    static SCRATCH: RefCell<(Vec<f32>, Vec<f32>, Vec<f32>)> =
        const { RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}

/// A 1-D convolution (PyTorch cross-correlation, one group) of `x` [L, IC] (time
/// fastest, one batch) with `kernel` (OC rows of IC x K values, the [K, IC, OC] ggml
/// kernel as it lies in memory), plus `bias` (one value per output channel) when
/// given; `y` is [OL, OC], time fastest. Positions are split among the parts, a chunk
/// of them at a time: the chunk's im2col rows are built in cache, multiplied, and the
/// results written time-major. Refuses lengths that do not fit, or a CPU without AVX2.
pub fn conv_time_major(
    kernel: &[f32],
    x: Matrix<'_, f32>,
    steps: ConvSteps,
    bias: Option<&[f32]>,
    y: &Output<'_>,
    part: Part,
) -> KernelResult {
    let [len, channels, batches] = x.dims();
    expect_eq("the input's batches", batches, 1)?;
    let k = channels * steps.kernel_width;
    if k == 0 || kernel.is_empty() || !kernel.len().is_multiple_of(k) {
        return Err(format!(
            "a kernel of {} values is not whole rows of {channels} channels x {} taps",
            kernel.len(),
            steps.kernel_width
        ));
    }
    let n = kernel.len() / k;
    if let Some(bias) = bias {
        expect_eq("the bias length", bias.len(), n)?;
    }
    let out_len = steps
        .output_len(len)
        .ok_or_else(|| format!("no output for an input of {len} samples with {steps:?}"))?;
    y.expect_len("the f32 convolution", out_len * n)?;
    let Some(level) = SimdLevel::allowed() else {
        return Err("this CPU lacks the vector instructions the f32 convolution needs".into());
    };
    #[cfg(target_arch = "x86_64")]
    {
        let positions = split_range(out_len, TILE, part.ith, part.nth);
        SCRATCH.with_borrow_mut(|(samples, cols, tile)| {
            cols.resize(CONV_CHUNK * k, 0.0);
            tile.resize(CONV_CHUNK * n, 0.0);
            for_each_chunk(samples, &x, steps, positions, |start, rows, input| {
                for (r, row) in cols.chunks_exact_mut(k).take(rows).enumerate() {
                    input.row(level, steps, r, row);
                }
                let (cols, results) = (&cols[..rows * k], &mut tile[..rows * n]);
                // SAFETY: the CPU has the level's features (SimdLevel::allowed).
                unsafe {
                    match level {
                        SimdLevel::Avx512 => product::<Avx512Dots>(cols, kernel, k, bias, results),
                        SimdLevel::Avx2 => product::<Avx2Dots>(cols, kernel, k, bias, results),
                    }
                }
                // SAFETY: y holds out_len x n floats (checked above) and this part alone
                // writes positions start..start + rows (split_range).
                unsafe { super::q8::store_transposed(level, results, n, y.ptr, out_len, start) };
            });
        });
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (level, part, x, bias, y, steps);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    #[test]
    fn the_f32_convolution_matches_a_plain_one_at_every_level_and_part() {
        let levels = float_levels();
        report_missing("f32 convolution", &levels);
        if SimdLevel::allowed().is_none() {
            fail_under_ci("this CPU cannot run the f32 convolution");
            return;
        }
        // (IC, K, OC, L, stride, pad, dilation): Kokoro's decoder shapes in small, an
        // output count that is not whole tiles, a strided one, a k shorter than a lane.
        for &(ic, kw, oc, len, stride, pad, dilation) in &[
            (35, 3, 16, 70, 1, 1, 1),
            (22, 7, 22, 90, 1, 3, 1),
            (22, 12, 20, 61, 6, 3, 1),
            (5, 1, 3, 9, 1, 0, 1),
            (16, 11, 8, 80, 1, 25, 5),
        ] {
            let steps = ConvSteps {
                kernel_width: kw,
                stride,
                pad,
                dilation,
            };
            let k = ic * kw;
            let kernel = values(oc * k, (k + oc) as u64, 0.5);
            let x = values(len * ic, len as u64, 2.0);
            let bias = values(oc, 5, 1.0);
            let xm = Matrix::rows(&x, len, ic).unwrap();
            let ol = steps.output_len(len).unwrap();
            let mut want = vec![0f64; ol * oc];
            for t in 0..ol {
                for o in 0..oc {
                    let mut s = bias[o] as f64;
                    for c in 0..ic {
                        for j in 0..kw {
                            let at = (t * stride + j * dilation) as isize - pad as isize;
                            if (0..len as isize).contains(&at) {
                                s += kernel[o * k + c * kw + j] as f64
                                    * x[c * len + at as usize] as f64;
                            }
                        }
                    }
                    want[o * ol + t] = s;
                }
            }
            let mut runs = Vec::new();
            for nth in 1..=3 {
                let mut y = vec![f32::NAN; ol * oc];
                let out = Output::new(&mut y);
                for ith in 0..nth {
                    conv_time_major(
                        &kernel,
                        xm,
                        steps,
                        Some(&bias),
                        &out,
                        Part::new(ith, nth).unwrap(),
                    )
                    .unwrap();
                }
                for (i, (g, w)) in y.iter().zip(&want).enumerate() {
                    assert!(
                        (*g as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()),
                        "{ic}x{kw}->{oc} nth {nth} at {i}: {g} vs {w}"
                    );
                }
                runs.push((nth, (), y));
            }
            let first = runs[0].2.clone();
            assert!(runs.iter().all(|r| r.2 == first), "parts change the bits");
            // The plain loop and the AVX2 and AVX-512 ones: the same bits.
            let cols: Vec<f32> = (0..ol)
                .flat_map(|t| {
                    let mut samples = Vec::new();
                    let input =
                        super::super::q8::ChunkInput::gather(&mut samples, &xm, steps, t..t + 1);
                    let mut row = vec![0f32; k];
                    input.row(SimdLevel::Avx2, steps, 0, &mut row);
                    row
                })
                .collect();
            let mut plain = vec![0f32; ol * oc];
            // SAFETY: the plain loops need no CPU feature.
            unsafe { product::<PlainDots>(&cols, &kernel, k, Some(&bias), &mut plain) };
            let mut by_level = vec![((), None, plain)];
            #[cfg(target_arch = "x86_64")]
            for &level in &levels {
                let mut y = vec![0f32; ol * oc];
                // SAFETY: the CPU has the level's features.
                unsafe {
                    match level {
                        SimdLevel::Avx512 => {
                            product::<Avx512Dots>(&cols, &kernel, k, Some(&bias), &mut y)
                        }
                        SimdLevel::Avx2 => {
                            product::<Avx2Dots>(&cols, &kernel, k, Some(&bias), &mut y)
                        }
                    }
                }
                by_level.push(((), Some(level), y));
            }
            assert_same_bits(&by_level, &format!("{ic}x{kw}->{oc}"));
        }
        let steps = ConvSteps {
            kernel_width: 3,
            stride: 1,
            pad: 0,
            dilation: 1,
        };
        let x = values(2 * 4, 6, 1.0);
        let mut y = vec![0f32; 8];
        let out = Output::new(&mut y);
        let short = Matrix::rows(&x, 2, 4).unwrap();
        let err = conv_time_major(&[0.0; 24], short, steps, None, &out, Part::WHOLE).unwrap_err();
        assert!(err.contains("no output"), "{err}");
        let err = conv_time_major(&[0.0; 25], short, steps, None, &out, Part::WHOLE).unwrap_err();
        assert!(err.contains("whole rows"), "{err}");
    }
}
