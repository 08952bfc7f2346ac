//! The style-conditioned Snake of iSTFTNet's residual blocks (Kokoro's generator) in
//! one pass: an AdaIN's affine part `v = n * gamma + n + beta` over the instance-normed
//! `n`, then Snake `v + sin(alpha v)^2 / alpha`. As ggml ops these are eight passes over
//! the activations, each a read and a write of memory, and ggml's sine is a libm call
//! per value; here one vectorised loop computes the same operations in the same order
//! with a branch-free sine ([`sin_approx`], within 1.2e-7 of the true sine), falling
//! back to libm for a channel whose arguments leave the range it reduces exactly.

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

/// One channel: `out = snake(x * g + x + b)` with [`sin_approx`]; returns false when
/// some |alpha v| left the sine's range (or was NaN).
#[inline(always)]
fn channel(x: &[f32], out: &mut [f32], g: f32, b: f32, a: f32) -> bool {
    // A count, not a float maximum: an integer sum vectorises.
    let mut outside = 0u32;
    for (o, &n) in out.iter_mut().zip(x) {
        // ggml's order: mul, add, add; then mul, sin, sqr, div, add.
        let v = n * g + n + b;
        let m = v * a;
        outside += u32::from(m.abs() > SIN_LIMIT || m.is_nan());
        let s = sin_approx(m);
        *o = v + s * s / a;
    }
    outside == 0
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn channel_avx2(x: &[f32], out: &mut [f32], g: f32, b: f32, a: f32) -> bool {
    channel(x, out, g, b, a)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn channel_avx512(x: &[f32], out: &mut [f32], g: f32, b: f32, a: f32) -> bool {
    channel(x, out, g, b, a)
}

/// `y` [T, C] = Snake(AdaIN affine(`normed`)) with one `gamma`, `beta` and `alpha` per
/// channel (a row of `normed`, time fastest): the share `part` names (whole channels).
/// A channel with an argument beyond [`SIN_LIMIT`] (or NaN) is computed again with
/// libm's sine. Refuses lengths that do not fit.
pub fn ada_in_snake(
    normed: Matrix<'_, f32>,
    gamma: &[f32],
    beta: &[f32],
    alpha: &[f32],
    y: &Output<'_>,
    part: Part,
) -> KernelResult {
    let [len, channels, batches] = normed.dims();
    expect_eq("the input's batches", batches, 1)?;
    expect_eq("the gains", gamma.len(), channels)?;
    expect_eq("the offsets", beta.len(), channels)?;
    expect_eq("the Snake alphas", alpha.len(), channels)?;
    y.expect_len("the Snake", len * channels)?;
    let level = SimdLevel::allowed();
    for c in split_range(channels, 1, part.ith, part.nth) {
        let x = &normed.data[c * normed.row_stride..][..len];
        let (g, b, a) = (gamma[c], beta[c], alpha[c]);
        // SAFETY: channel c's row lies inside y (len x channels floats, checked above);
        // no other part writes it (split_range).
        let out = unsafe { std::slice::from_raw_parts_mut(y.ptr.add(c * len), len) };
        let in_range = match level {
            // SAFETY: the CPU has the function's target features.
            #[cfg(target_arch = "x86_64")]
            Some(SimdLevel::Avx512) => unsafe { channel_avx512(x, out, g, b, a) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Some(SimdLevel::Avx2) => unsafe { channel_avx2(x, out, g, b, a) },
            _ => channel(x, out, g, b, a),
        };
        if !in_range {
            for (o, &n) in out.iter_mut().zip(x) {
                let v = n * g + n + b;
                let s = (v * a).sin();
                *o = v + s * s / a;
            }
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

    #[test]
    fn every_level_gives_the_same_bits_and_far_arguments_take_libm() {
        let (len, channels) = (1000, 4);
        let x = values(len * channels, 3, 2.0);
        let (g, b) = (values(channels, 4, 1.0), values(channels, 5, 1.0));
        // Channel 3's alpha takes its arguments past the limit.
        let a = [0.7, -1.3, 2.1, 9.0e3];
        let xm = Matrix::rows(&x, len, channels).unwrap();
        let mut y = vec![f32::NAN; len * channels];
        ada_in_snake(xm, &g, &b, &a, &Output::new(&mut y), Part::WHOLE).unwrap();
        for (i, got) in y.iter().enumerate() {
            let c = i / len;
            let v = x[i] * g[c] + x[i] + b[c];
            let want = v as f64 + ((a[c] * v) as f64).sin().powi(2) / a[c] as f64;
            assert!(
                (*got as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()),
                "channel {c} at {i}: {got} vs {want}"
            );
        }
        let levels = float_levels();
        report_missing("Snake", &levels);
        let mut by_level = Vec::new();
        for level in levels.iter().map(|&l| Some(l)).chain([None]) {
            let mut out = vec![0f32; len];
            let x0 = &x[..len];
            let in_range = match level {
                // SAFETY: the CPU has the level's features.
                #[cfg(target_arch = "x86_64")]
                Some(SimdLevel::Avx512) => unsafe {
                    channel_avx512(x0, &mut out, g[0], b[0], a[0])
                },
                // SAFETY: as above.
                #[cfg(target_arch = "x86_64")]
                Some(SimdLevel::Avx2) => unsafe { channel_avx2(x0, &mut out, g[0], b[0], a[0]) },
                _ => channel(x0, &mut out, g[0], b[0], a[0]),
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
        ada_in_snake(xm, &g, &b, &a, &Output::new(&mut whole), Part::WHOLE).unwrap();
        for nth in 2..=3 {
            let mut y = vec![f32::NAN; len * channels];
            let out = Output::new(&mut y);
            for ith in 0..nth {
                ada_in_snake(xm, &g, &b, &a, &out, Part::new(ith, nth).unwrap()).unwrap();
            }
            assert_eq!(y, whole, "nth {nth}");
        }
        let mut y = vec![0f32; len * channels];
        let out = Output::new(&mut y);
        let err = ada_in_snake(xm, &g[1..], &b, &a, &out, Part::WHOLE).unwrap_err();
        assert!(err.contains("gains"), "{err}");
        let mut short = vec![0f32; len];
        let err = ada_in_snake(xm, &g, &b, &a, &Output::new(&mut short), Part::WHOLE).unwrap_err();
        assert!(err.contains("output holds"), "{err}");
    }
}
