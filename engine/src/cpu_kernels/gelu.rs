//! The exact GELU, `x/2 (1 + erf(x / sqrt 2))`, with a vectorisable rational erf
//! instead of a libm call per element (ggml's CPU op calls `erff`).

use super::{split_range, KernelResult, Output, Part, SimdLevel};

/// erf(x) for |x| <= 4 as x P(x^2) / Q(x^2), fitted to erf (engine/tools/fit_erf.py);
/// beyond 4, erf is 1 in f32. Largest error in f32 arithmetic: 3.7e-7.
const ERF_P: [f32; 8] = [
    std::f32::consts::FRAC_2_SQRT_PI,
    0.148_040_92,
    0.045_036_23,
    0.001_842_802_5,
    0.000_137_404_48,
    -3.508_369e-6,
    7.461_862e-8,
    -7.455_283_6e-10,
];
const ERF_Q: [f32; 5] = [
    1.0,
    0.464_530_05,
    0.094_760_2,
    0.010_568_029,
    0.000_607_782_45,
];

/// erf(x) with the rational approximation above: branch-free, so loops over it
/// vectorise.
#[inline(always)]
pub fn erf_approx(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let t = x * x;
    let p = ERF_P.iter().rev().fold(0.0, |acc, &c| acc * t + c);
    let q = ERF_Q.iter().rev().fold(0.0, |acc, &c| acc * t + c);
    (x * p / q).clamp(-1.0, 1.0)
}

/// The exact GELU, `x/2 (1 + erf(x / sqrt 2))`, over a slice.
#[inline(always)]
fn gelu_erf_slice(x: &[f32], y: &mut [f32]) {
    for (yv, &xv) in y.iter_mut().zip(x) {
        *yv = 0.5 * xv * (1.0 + erf_approx(xv * std::f32::consts::FRAC_1_SQRT_2));
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn gelu_erf_avx2(x: &[f32], y: &mut [f32]) {
    gelu_erf_slice(x, y)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn gelu_erf_avx512(x: &[f32], y: &mut [f32]) {
    gelu_erf_slice(x, y)
}

/// The exact GELU over a slice, vectorised for the widest vectors the kernels may use
/// ([`SimdLevel::allowed`]).
pub fn gelu_erf(x: &[f32], y: &mut [f32]) {
    match SimdLevel::allowed() {
        // SAFETY: the CPU has the function's target features.
        #[cfg(target_arch = "x86_64")]
        Some(SimdLevel::Avx512) => unsafe { gelu_erf_avx512(x, y) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Some(SimdLevel::Avx2) => unsafe { gelu_erf_avx2(x, y) },
        _ => gelu_erf_slice(x, y),
    }
}

/// Values one part's share of the GELU comes in (4 KiB runs).
const GELU_RUN: usize = 1024;

/// `y` = GELU(`x`), of the same length: the share `part` names (runs of
/// [`GELU_RUN`] values). Refuses an output of another length.
pub fn gelu_erf_part(x: &[f32], y: &Output<'_>, part: Part) -> KernelResult {
    y.expect_len("the GELU", x.len())?;
    let range = split_range(x.len(), GELU_RUN, part.ith, part.nth);
    // SAFETY: the range lies inside y (as long as x, checked above), and no other
    // part's range overlaps it (split_range).
    let out = unsafe { std::slice::from_raw_parts_mut(y.ptr.add(range.start), range.len()) };
    gelu_erf(&x[range], out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    #[test]
    fn rational_erf_is_within_4e_7_of_libm() {
        let mut worst = 0f64;
        for i in -600_000..=600_000 {
            let x = i as f32 * 1e-5;
            let want = libm_erf(x as f64);
            worst = worst.max((erf_approx(x) as f64 - want).abs());
        }
        assert!(worst < 4e-7, "worst error {worst}");
        let x = values(4096, 5, 8.0);
        let mut y = vec![0f32; x.len()];
        gelu_erf(&x, &mut y);
        let levels = float_levels();
        report_missing("GELU", &levels);
        let mut by_level = vec![((), None, y.clone())];
        #[cfg(target_arch = "x86_64")]
        for level in levels {
            let mut yl = vec![0f32; x.len()];
            // SAFETY: the CPU has the level's features.
            unsafe {
                match level {
                    SimdLevel::Avx512 => gelu_erf_avx512(&x, &mut yl),
                    SimdLevel::Avx2 => gelu_erf_avx2(&x, &mut yl),
                }
            }
            by_level.push(((), Some(level), yl));
        }
        let mut plain = vec![0f32; x.len()];
        gelu_erf_slice(&x, &mut plain);
        by_level.push(((), None, plain));
        assert_same_bits(&by_level, "GELU");
        for (xv, yv) in x.iter().zip(&y) {
            let want = 0.5 * *xv as f64 * (1.0 + libm_erf(*xv as f64 / std::f64::consts::SQRT_2));
            assert!(
                (*yv as f64 - want).abs() < 2e-6,
                "gelu({xv}) = {yv}, want {want}"
            );
        }
    }

    /// erf in f64 by its Taylor series (|x| < 3) and continued fraction (beyond):
    /// accurate to 1e-12 over the tested range, independent of the approximation.
    fn libm_erf(x: f64) -> f64 {
        let a = x.abs();
        let v = if a < 3.0 {
            let (mut term, mut sum, mut n) = (a, a, 0.0);
            while term.abs() > 1e-17 * sum.abs().max(1e-300) {
                n += 1.0;
                term *= -a * a / n;
                sum += term / (2.0 * n + 1.0);
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        } else {
            let mut f = 0.0;
            for n in (1..60).rev() {
                f = n as f64 / 2.0 / (a + f);
            }
            1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / (a + f)
        };
        v.copysign(x)
    }

    #[test]
    fn the_gelu_in_parts_is_the_gelu_and_refuses_another_length() {
        let x = values(5000, 31, 6.0);
        let mut want = vec![0f32; x.len()];
        gelu_erf(&x, &mut want);
        for nth in 1..=3 {
            let mut y = vec![f32::NAN; x.len()];
            let out = Output::new(&mut y);
            for ith in 0..nth {
                gelu_erf_part(&x, &out, Part::new(ith, nth).unwrap()).unwrap();
            }
            assert!(y.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()));
        }
        let mut short = vec![0f32; x.len() - 1];
        let err = gelu_erf_part(&x, &Output::new(&mut short), Part::WHOLE).unwrap_err();
        assert!(err.contains("output holds"), "{err}");
    }
}
