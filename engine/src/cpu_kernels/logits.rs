//! What a greedy token choice needs from a row of logits: the first largest value's
//! index and the softmax normaliser Σ e^(l - max), in vectorisable passes instead of a
//! libm `expf` per token. Whisper picks one of 51,864 tokens each decoder step this way;
//! the libm loop was a large share of a step on a GPU, where the rest is fast.

use super::simd::exp_nonpositive;
use super::SimdLevel;

/// Lanes of the partial sums: values `i` with the same `i % LANES` add up in one lane,
/// and the lanes are added in one fixed order, so every level gives the same bits.
const LANES: usize = 16;

/// The summary of one logits row (see [`summarize`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogitsSummary {
    /// The index of the first largest value (0 when every value is -inf).
    pub argmax: usize,
    /// The largest value.
    pub max: f32,
    /// Σ e^(l - max) over the row, summed in f64 (-inf values add 0).
    pub sum_exp: f64,
}

impl LogitsSummary {
    /// The log-probability of the value `l` under the row's softmax.
    pub fn logprob(&self, l: f32) -> f32 {
        ((l - self.max) as f64 - self.sum_exp.ln()) as f32
    }
}

/// The largest value (-inf for an empty row; NaNs are passed over).
#[inline(always)]
fn max_plain(x: &[f32]) -> f32 {
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    let mut lanes = [f32::NEG_INFINITY; LANES];
    for c in chunks {
        for k in 0..LANES {
            lanes[k] = if c[k] > lanes[k] { c[k] } else { lanes[k] };
        }
    }
    tail.iter()
        .chain(&lanes)
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

#[inline(always)]
fn summarize_plain(x: &[f32]) -> LogitsSummary {
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    let max = max_plain(x);
    if max == f32::NEG_INFINITY {
        return LogitsSummary {
            argmax: 0,
            max,
            sum_exp: 0.0,
        };
    }
    let argmax = x
        .chunks(LANES)
        .position(|c| c.iter().fold(false, |hit, &v| hit | (v == max)))
        .map_or(0, |i| {
            i * LANES + x[i * LANES..].iter().position(|&v| v == max).unwrap_or(0)
        });
    let mut sums = [0f64; LANES];
    let mut padded = [f32::NEG_INFINITY; LANES];
    padded[..tail.len()].copy_from_slice(tail);
    for c in chunks.chain(std::iter::once(&padded[..])) {
        let mut e = [0f32; LANES];
        for k in 0..LANES {
            e[k] = exp_nonpositive(c[k] - max);
        }
        for k in 0..LANES {
            sums[k] += e[k] as f64;
        }
    }
    let mut w = LANES / 2;
    while w > 0 {
        for i in 0..w {
            sums[i] += sums[i + w];
        }
        w /= 2;
    }
    LogitsSummary {
        argmax,
        max,
        sum_exp: sums[0],
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn summarize_avx2(x: &[f32]) -> LogitsSummary {
    summarize_plain(x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn summarize_avx512(x: &[f32]) -> LogitsSummary {
    summarize_plain(x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn max_avx2(x: &[f32]) -> f32 {
    max_plain(x)
}

/// The largest value of a row (-inf when empty), vectorised like [`summarize`].
pub fn max(x: &[f32]) -> f32 {
    match SimdLevel::allowed() {
        // SAFETY: the CPU has the function's target features (AVX-512 CPUs have AVX2).
        #[cfg(target_arch = "x86_64")]
        Some(_) => unsafe { max_avx2(x) },
        _ => max_plain(x),
    }
}

/// The first largest logit, the largest value and Σ e^(l - max) of a row, vectorised
/// for the widest vectors the kernels may use ([`SimdLevel::allowed`]); the same bits
/// at every level.
pub fn summarize(x: &[f32]) -> LogitsSummary {
    match SimdLevel::allowed() {
        // SAFETY: the CPU has the function's target features.
        #[cfg(target_arch = "x86_64")]
        Some(SimdLevel::Avx512) => unsafe { summarize_avx512(x) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Some(SimdLevel::Avx2) => unsafe { summarize_avx2(x) },
        _ => summarize_plain(x),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    #[test]
    fn summary_matches_f64_and_is_the_same_at_every_level() {
        for n in [0usize, 1, 7, 16, 17, 51_864] {
            let mut x = values(n, 11, 6.0);
            for v in x.iter_mut().skip(5).step_by(97) {
                *v = f32::NEG_INFINITY;
            }
            if n > 20 {
                // A tie: the first one is the argmax.
                let m = x.iter().cloned().fold(f32::NEG_INFINITY, f32::max) + 1.0;
                x[n - 3] = m;
                x[n / 2] = m;
            }
            let got = summarize(&x);
            let (mut best, mut max) = (0, f32::NEG_INFINITY);
            for (i, &v) in x.iter().enumerate() {
                if v > max {
                    (best, max) = (i, v);
                }
            }
            let want: f64 = x.iter().map(|&v| ((v - max) as f64).exp()).sum();
            assert_eq!((got.argmax, got.max), (best, max), "n {n}");
            if n > 0 {
                assert!(
                    ((got.sum_exp - want) / want).abs() < 1e-6,
                    "n {n}: {got:?} vs {want}"
                );
            }
            let levels = float_levels();
            report_missing("logits summary", &levels);
            let plain = summarize_plain(&x);
            #[cfg(target_arch = "x86_64")]
            for level in levels {
                // SAFETY: the CPU has the level's features.
                let at = unsafe {
                    match level {
                        SimdLevel::Avx512 => summarize_avx512(&x),
                        SimdLevel::Avx2 => summarize_avx2(&x),
                    }
                };
                assert_eq!(at.sum_exp.to_bits(), plain.sum_exp.to_bits(), "{level:?}");
                assert_eq!(at.argmax, plain.argmax, "{level:?}");
            }
        }
        let all_masked = summarize(&[f32::NEG_INFINITY; 5]);
        assert_eq!((all_masked.argmax, all_masked.sum_exp), (0, 0.0));
    }
}
