//! The inverse STFT that turns the generator's magnitude and phase into samples, as the
//! Kokoro export computes it: `mag * (cos, sin)(phase)` overlap-added by a transposed
//! convolution with the stored inverse Fourier basis (in the ggml graph), scaled by
//! `n_fft / hop`, then on the host the export's window-sum division (it divides only
//! the first `n_fft` samples, where the stored `window_sum` is defined) and the centre
//! crop of `n_fft / 2` samples at each end.

use crate::error::Result;
use crate::ggml::{Context, Tensor};

use super::adain::{dims_of, expect_shape, WeightLookup};

/// The inverse STFT's weights: the basis [2 * bins, 1, n_fft] and the window sum.
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L96-L100
/// (`TorchSTFT.inverse`), as a transposed convolution in kokoro/custom_stft.py L142-L189
/// (`CustomSTFT.inverse`); the export's `inverse_basis` and `window_sum` buffers are not in
/// that repository.
#[derive(Debug, Clone)]
pub struct InverseStft {
    basis: String,
    window_sum: String,
    /// FFT size (20).
    pub n_fft: usize,
    /// Hop in samples (5).
    pub hop: usize,
}

impl InverseStft {
    /// Loads `{prefix}.inverse_basis` and `{prefix}.window_sum`.
    pub fn load(w: &dyn WeightLookup, prefix: &str, hop: usize) -> Result<Self> {
        let basis = format!("{prefix}.inverse_basis");
        let [n_fft, _, _, _] = dims_of(w, &basis)?;
        let basis = expect_shape(w, &basis, &[n_fft, 1, 2 * (n_fft / 2 + 1)])?;
        let window_sum = expect_shape(w, &format!("{prefix}.window_sum"), &[n_fft])?;
        Ok(InverseStft {
            basis,
            window_sum,
            n_fft: n_fft as usize,
            hop,
        })
    }

    /// The overlap-add of frames `mag` and `phase` [L, bins] (time fastest): returns
    /// [(L - 1) * hop + n_fft] samples, before [`InverseStft::finish`].
    ///
    /// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/custom_stft.py L148-L175
    /// (`CustomSTFT.inverse`).
    pub fn build<'a>(
        &self,
        ctx: &'a Context,
        w: &'a dyn WeightLookup,
        mag: Tensor<'a>,
        phase: Tensor<'a>,
    ) -> Result<Tensor<'a>> {
        let re = ctx.mul(mag, ctx.cos(phase));
        let im = ctx.mul(mag, ctx.sin(phase));
        let spec = ctx.concat(re, im, 1); // [L, 2 * bins]
        let basis = ctx.to_f32(w.tensor(&self.basis)?);
        let y = super::generator::conv_transpose_by_product(ctx, basis, spec, self.hop as i32);
        Ok(ctx.scale(y, self.n_fft as f32 / self.hop as f32))
    }

    /// The stored window sum, read back from the weights.
    pub fn window_sum(&self, w: &dyn WeightLookup) -> Result<Vec<f32>> {
        Ok(w.tensor(&self.window_sum)?.read_f32_converted()?)
    }

    /// The export's window-sum division of the first samples and the centre crop:
    /// `raw` from [`InverseStft::build`] gives `raw.len() - n_fft` samples.
    ///
    /// Upstream: the centre crop of `hexgrad/kokoro@dfb907a02bba` kokoro/custom_stft.py
    /// L177-L182.
    pub fn finish(&self, raw: &[f32], window_sum: &[f32]) -> Vec<f32> {
        let mut y = raw.to_vec();
        for (v, &s) in y.iter_mut().zip(window_sum) {
            if s > f32::MIN_POSITIVE {
                *v /= s;
            }
        }
        let half = self.n_fft / 2;
        if y.len() <= 2 * half {
            return Vec::new();
        }
        y[half..y.len() - half].to_vec()
    }
}
