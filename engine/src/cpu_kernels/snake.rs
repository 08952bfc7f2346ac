//! The style-conditioned Snake of iSTFTNet's residual blocks (Kokoro's generator) in
//! one pass over each channel: an AdaIN (instance normalisation `n`, then `v = n *
//! gamma + n + beta`), then Snake `v + sin(alpha v)^2 / alpha`. As ggml ops these are
//! a norm and eight element-wise passes over the activations, each a read and a write
//! of memory, and ggml's sine is a libm call per value; here the channel's statistics
//! and one vectorised loop compute the same operations in the same order with a
//! branch-free sine ([`sin_approx`], within 1.2e-7 of the true sine), falling back to
//! libm for a channel whose arguments leave the range it reduces exactly.

use super::{expect_eq, split_range, KernelResult, Matrix, Output, Part, SimdLevel};

/// pi/2 in three parts: the first two have few enough mantissa bits that `q * part` is
/// exact for |q| < 2^12, so `x - q pi/2` keeps full precision for |x| <= [`SIN_LIMIT`].
const PIO2_HI: f32 = 1.570_312_5;
const PIO2_MID: f32 = 4.837_513e-4;
const PIO2_LO: f32 = 7.549_79e-8;
/// The largest |x| [`sin_approx`] reduces exactly.
pub const SIN_LIMIT: f32 = 4096.0;
/// sin(r) = r + r z (S0 + z (S1 + z S2)), z = r^2, |r| <= pi/4 (Cephes' sinf).
const SIN_POLY: [f32; 3] = [-1.666_665_5e-1, 8.332_161e-3, -1.951_529_6e-4];
/// cos(r) = 1 - z/2 + z^2 (C0 + z (C1 + z C2)), |r| <= pi/4 (Cephes' sinf).
const COS_POLY: [f32; 3] = [4.166_664_6e-2, -1.388_731_6e-3, 2.443_315_7e-5];

/// sin(x) for |x| <= [`SIN_LIMIT`]: the nearest multiple q of pi/2 taken off in three
/// exact steps, then the sine or cosine polynomial of the remainder by q's quadrant.
/// Branch-free (selects, no calls), so loops over it vectorise; plain multiplies and
/// adds, so every instruction set gives the same bits.
#[inline(always)]
pub fn sin_approx(x: f32) -> f32 {
    let q = (x * std::f32::consts::FRAC_2_PI).round_ties_even();
    let r = ((x - q * PIO2_HI) - q * PIO2_MID) - q * PIO2_LO;
    let z = r * r;
    let s = r + r * z * (SIN_POLY[0] + z * (SIN_POLY[1] + z * SIN_POLY[2]));
    let c = 1.0 - 0.5 * z + z * z * (COS_POLY[0] + z * (COS_POLY[1] + z * COS_POLY[2]));
    // q's low bits as an integer, without a float-to-int conversion (Rust's `as`
    // saturates, which does not vectorise): adding 1.5 x 2^23 leaves q mod 2^22 in the
    // low mantissa bits, exactly for |q| < 2^22 (any |x| the sine is used for).
    let quadrant = (q + 12_582_912.0).to_bits();
    let v = if quadrant & 1 == 0 { s } else { c };
    if quadrant & 2 == 0 {
        v
    } else {
        -v
    }
}

/// What one channel's pass needs besides its values: the normalisation's epsilon and
/// the channel's gain, offset and Snake alpha.
#[derive(Debug, Clone, Copy)]
struct ChannelParams {
    eps: f32,
    gain: f32,
    offset: f32,
    alpha: f32,
}

/// The channel's mean and `1 / sqrt(variance + eps)`, as ggml's `norm` computes them
/// (the variance about the mean, divided by the count), summed in 16 f32 lanes so the
/// loops vectorise, the lanes then added in f64.
#[inline(always)]
fn instance_stats(x: &[f32], eps: f32) -> (f32, f32) {
    let count = x.len() as f64;
    let mean = (lanes_sum(x, |v| v) / count) as f32;
    let variance = (lanes_sum(x, |v| (v - mean) * (v - mean)) / count) as f32;
    (mean, 1.0 / (variance + eps).sqrt())
}

/// The sum of `f` over `x`, in 16 f32 lanes (a loop that vectorises), then in f64.
#[inline(always)]
fn lanes_sum(x: &[f32], f: impl Fn(f32) -> f32) -> f64 {
    const LANES: usize = 16;
    let mut acc = [0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest: f64 = chunks.remainder().iter().map(|&v| f(v) as f64).sum();
    for chunk in chunks {
        for (a, &v) in acc.iter_mut().zip(chunk) {
            *a += f(v);
        }
    }
    acc.iter().map(|&v| v as f64).sum::<f64>() + rest
}

/// One channel: `out = snake(n * g + n + b)` over the instance-normed `n`, with the sine
/// `sin`; returns false when some |alpha v| left [`sin_approx`]'s range (or was NaN).
#[inline(always)]
fn channel_with(x: &[f32], out: &mut [f32], p: ChannelParams, sin: impl Fn(f32) -> f32) -> bool {
    let (mean, scale) = instance_stats(x, p.eps);
    let ChannelParams {
        gain: g,
        offset: b,
        alpha: a,
        ..
    } = p;
    // A count, not a float maximum: an integer sum vectorises.
    let mut outside = 0u32;
    for (o, &xv) in out.iter_mut().zip(x) {
        // ggml's order: norm; mul, add, add; then mul, sin, sqr, div, add.
        let n = (xv - mean) * scale;
        let v = n * g + n + b;
        let m = v * a;
        outside += u32::from(m.abs() > SIN_LIMIT || m.is_nan());
        let s = sin(m);
        *o = v + s * s / a;
    }
    outside == 0
}

/// [`channel_with`] and [`sin_approx`].
#[inline(always)]
fn channel(x: &[f32], out: &mut [f32], p: ChannelParams) -> bool {
    channel_with(x, out, p, sin_approx)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn channel_avx2(x: &[f32], out: &mut [f32], p: ChannelParams) -> bool {
    channel(x, out, p)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn channel_avx512(x: &[f32], out: &mut [f32], p: ChannelParams) -> bool {
    channel(x, out, p)
}

/// `y` [T, C] = Snake(AdaIN(`x`)): each channel (a row of `x`, time fastest)
/// normalised over time (mean 0, variance 1 with `eps`), then its `gamma`, `beta` and
/// Snake `alpha`; the share `part` names (whole channels). A channel with an argument
/// beyond [`SIN_LIMIT`] (or NaN) is computed again with libm's sine. Refuses lengths
/// that do not fit.
pub fn ada_in_snake(
    x: Matrix<'_, f32>,
    eps: f32,
    gamma: &[f32],
    beta: &[f32],
    alpha: &[f32],
    y: &Output<'_>,
    part: Part,
) -> KernelResult {
    let [len, channels, batches] = x.dims();
    expect_eq("the input's batches", batches, 1)?;
    expect_eq("the gains", gamma.len(), channels)?;
    expect_eq("the offsets", beta.len(), channels)?;
    expect_eq("the Snake alphas", alpha.len(), channels)?;
    y.expect_len("the Snake", len * channels)?;
    let level = SimdLevel::allowed();
    for c in split_range(channels, 1, part.ith, part.nth) {
        let row = &x.data[c * x.row_stride..][..len];
        let p = ChannelParams {
            eps,
            gain: gamma[c],
            offset: beta[c],
            alpha: alpha[c],
        };
        // SAFETY: channel c's row lies inside y (len x channels floats, checked above);
        // no other part writes it (split_range).
        let out = unsafe { std::slice::from_raw_parts_mut(y.ptr.add(c * len), len) };
        let in_range = match level {
            // SAFETY: the CPU has the function's target features.
            #[cfg(target_arch = "x86_64")]
            Some(SimdLevel::Avx512) => unsafe { channel_avx512(row, out, p) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Some(SimdLevel::Avx2) => unsafe { channel_avx2(row, out, p) },
            _ => channel(row, out, p),
        };
        if !in_range {
            channel_with(row, out, p, f32::sin);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    #[test]
    fn the_sine_is_within_1_2e_7_of_the_true_sine_up_to_its_limit() {
        let mut worst = 0f64;
        let steps = 2_000_000;
        for i in -steps..=steps {
            let x = i as f32 * (SIN_LIMIT / steps as f32);
            let err = (sin_approx(x) as f64 - (x as f64).sin()).abs();
            worst = worst.max(err);
        }
        for x in values(100_000, 7, 3.0) {
            worst = worst.max((sin_approx(x) as f64 - (x as f64).sin()).abs());
        }
        assert!(worst < 1.2e-7, "worst error {worst}");
        assert_eq!(sin_approx(0.0), 0.0);
        assert!(sin_approx(f32::NAN).is_nan());
    }

    /// Snake(AdaIN(x)) of channel `c` in f64, with the true sine.
    fn reference(x: &[f32], g: f32, b: f32, a: f32) -> Vec<f64> {
        let n = x.len() as f64;
        let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
        let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
        let scale = 1.0 / (var + EPS as f64).sqrt();
        x.iter()
            .map(|&v| {
                let normed = (v as f64 - mean) * scale;
                let v = normed * (1.0 + g as f64) + b as f64;
                v + (a as f64 * v).sin().powi(2) / a as f64
            })
            .collect()
    }

    const EPS: f32 = 1e-5;

    #[test]
    fn every_level_gives_the_same_bits_and_far_arguments_take_libm() {
        let (len, channels) = (1000, 4);
        // Channels of different means and spreads.
        let x: Vec<f32> = values(len * channels, 3, 2.0)
            .iter()
            .enumerate()
            .map(|(i, v)| v * (1 + i / len) as f32 + (i / len) as f32 * 3.0)
            .collect();
        let (g, b) = (values(channels, 4, 1.0), values(channels, 5, 1.0));
        // Channel 3's alpha takes its arguments past the limit.
        let a = [0.7, -1.3, 2.1, 9.0e3];
        let xm = Matrix::rows(&x, len, channels).unwrap();
        let mut y = vec![f32::NAN; len * channels];
        ada_in_snake(xm, EPS, &g, &b, &a, &Output::new(&mut y), Part::WHOLE).unwrap();
        for c in 0..channels {
            let want = reference(&x[c * len..][..len], g[c], b[c], a[c]);
            for (i, (got, want)) in y[c * len..][..len].iter().zip(&want).enumerate() {
                assert!(
                    (*got as f64 - want).abs() <= 2e-5 * (1.0 + want.abs()),
                    "channel {c} at {i}: {got} vs {want}"
                );
            }
        }
        let levels = float_levels();
        report_missing("Snake", &levels);
        let p = ChannelParams {
            eps: EPS,
            gain: g[0],
            offset: b[0],
            alpha: a[0],
        };
        let mut by_level = Vec::new();
        for level in levels.iter().map(|&l| Some(l)).chain([None]) {
            let mut out = vec![0f32; len];
            let x0 = &x[..len];
            let in_range = match level {
                // SAFETY: the CPU has the level's features.
                #[cfg(target_arch = "x86_64")]
                Some(SimdLevel::Avx512) => unsafe { channel_avx512(x0, &mut out, p) },
                // SAFETY: as above.
                #[cfg(target_arch = "x86_64")]
                Some(SimdLevel::Avx2) => unsafe { channel_avx2(x0, &mut out, p) },
                _ => channel(x0, &mut out, p),
            };
            assert!(in_range);
            assert_eq!(out[..], y[..len], "{level:?} against the kernel");
            by_level.push(((), level, out));
        }
        assert_same_bits(&by_level, "Snake");
    }

    #[test]
    fn every_part_writes_its_channels_and_wrong_lengths_are_refused() {
        let (len, channels) = (37, 5);
        let x = values(len * channels, 3, 2.0);
        let (g, b, a) = (
            values(channels, 4, 1.0),
            values(channels, 5, 1.0),
            values(channels, 6, 1.0),
        );
        let xm = Matrix::rows(&x, len, channels).unwrap();
        let mut whole = vec![f32::NAN; len * channels];
        ada_in_snake(xm, EPS, &g, &b, &a, &Output::new(&mut whole), Part::WHOLE).unwrap();
        for nth in 2..=3 {
            let mut y = vec![f32::NAN; len * channels];
            let out = Output::new(&mut y);
            for ith in 0..nth {
                ada_in_snake(xm, EPS, &g, &b, &a, &out, Part::new(ith, nth).unwrap()).unwrap();
            }
            assert_eq!(y, whole, "nth {nth}");
        }
        let mut y = vec![0f32; len * channels];
        let out = Output::new(&mut y);
        let err = ada_in_snake(xm, EPS, &g[1..], &b, &a, &out, Part::WHOLE).unwrap_err();
        assert!(err.contains("gains"), "{err}");
        let mut short = vec![0f32; len];
        let err =
            ada_in_snake(xm, EPS, &g, &b, &a, &Output::new(&mut short), Part::WHOLE).unwrap_err();
        assert!(err.contains("output holds"), "{err}");
    }
}
