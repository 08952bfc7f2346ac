//! The style-conditioned Snake of iSTFTNet's residual blocks (Kokoro's generator) in
//! one pass: an AdaIN's affine part `v = n * gamma + n + beta` over the instance-normed
//! `n`, then Snake `v + sin(alpha v)^2 / alpha`. As ggml ops these are eight passes over
//! the activations, each a read and a write of memory; here every value is computed
//! with the same float operations in the same order, libm's `sinf` included, so the
//! result has ggml's bits.

use super::{expect_eq, split_range, KernelResult, Matrix, Output, Part};

/// `y` [T, C] = Snake(AdaIN affine(`normed`)) with one `gamma`, `beta` and `alpha` per
/// channel (a row of `normed`, time fastest): the share `part` names (whole channels).
/// Refuses lengths that do not fit.
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
    for c in split_range(channels, 1, part.ith, part.nth) {
        let x = &normed.data[c * normed.row_stride..][..len];
        let (g, b, a) = (gamma[c], beta[c], alpha[c]);
        // SAFETY: channel c's row lies inside y (len x channels floats, checked above);
        // no other part writes it (split_range).
        let out = unsafe { std::slice::from_raw_parts_mut(y.ptr.add(c * len), len) };
        for (o, &n) in out.iter_mut().zip(x) {
            // ggml's order: mul, add, add; then mul, sin, sqr, div, add.
            let v = n * g + n + b;
            let s = (v * a).sin();
            *o = v + s * s / a;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::values;
    use super::*;

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
        let want: Vec<f32> = (0..len * channels)
            .map(|i| {
                let c = i / len;
                let v = x[i] * g[c] + x[i] + b[c];
                v + (a[c] * v).sin().powi(2) / a[c]
            })
            .collect();
        for nth in 1..=3 {
            let mut y = vec![f32::NAN; len * channels];
            let out = Output::new(&mut y);
            for ith in 0..nth {
                ada_in_snake(xm, &g, &b, &a, &out, Part::new(ith, nth).unwrap()).unwrap();
            }
            for (i, (got, want)) in y.iter().zip(&want).enumerate() {
                assert!(
                    (got - want).abs() <= 1e-6 * (1.0 + want.abs()),
                    "nth {nth} at {i}: {got} vs {want}"
                );
            }
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
