//! The harmonic source of Kokoro's iSTFTNet generator (hn-NSF's sine source, as the ONNX
//! export runs it: no random noise or initial phase) and its forward STFT, both on the
//! host in f64.
//!
//! Why the host: the source's phase is a cumulative sum over the whole utterance that
//! reaches ~10^6 radians, where f32 rounding alone costs tens of dB, and ggml has no
//! atan2 for the STFT's phase. The work is tiny (9 harmonics at 24 kHz, an STFT of 20
//! points): the network around it runs through ggml.

/// What the source needs, from the model's hyper-parameters and weights.
#[derive(Debug, Clone)]
pub struct SourceParams {
    /// Output sample rate in Hz (24000).
    pub sample_rate: f64,
    /// Samples per F0 value (the generator's total upsampling times the iSTFT hop: 300).
    pub upsample: usize,
    /// The merge layer `l_linear`: one weight per harmonic (the fundamental first).
    pub merge_weights: Vec<f64>,
    /// Its bias.
    pub merge_bias: f64,
    /// Amplitude of each sine (0.1).
    pub sine_amp: f64,
    /// F0 at or below which a sample is unvoiced (10 Hz).
    pub voiced_threshold: f64,
}

/// The merged harmonic source for an F0 curve (Hz, one value per `upsample` samples):
/// `tanh(l_linear(sin(phase_h) * amp * voiced))` per sample, `f0.len() * upsample` long.
///
/// As in the export, each harmonic's per-sample phase increment `frac(h * f0 / sr)` is
/// taken once per F0 value (linear downsampling of a piecewise-constant curve), summed,
/// scaled back by `upsample` and linearly interpolated (half-pixel centres, clamped at
/// the ends) to every sample.
pub fn harmonic_source(f0: &[f32], p: &SourceParams) -> Vec<f32> {
    let frames = f0.len();
    let up = p.upsample;
    let harmonics = p.merge_weights.len();
    if frames == 0 || up == 0 {
        return Vec::new();
    }
    // phase[h * frames + i]: radians at frame i, already multiplied by `up`.
    let mut phase = vec![0f64; harmonics * frames];
    let two_pi_up = 2.0 * std::f64::consts::PI * up as f64;
    for h in 0..harmonics {
        let mut sum = 0f64;
        for (i, &f) in f0.iter().enumerate() {
            let rad = f as f64 * (h + 1) as f64 / p.sample_rate;
            sum += rad - rad.floor();
            phase[h * frames + i] = sum * two_pi_up;
        }
    }
    let mut out = Vec::with_capacity(frames * up);
    for t in 0..frames * up {
        let src = ((t as f64 + 0.5) / up as f64 - 0.5).max(0.0);
        let i0 = (src.floor() as usize).min(frames - 1);
        let i1 = (i0 + 1).min(frames - 1);
        let lam = src - i0 as f64;
        let voiced = f0[t / up] as f64 > p.voiced_threshold;
        let mut merged = p.merge_bias;
        if voiced {
            for (h, w) in p.merge_weights.iter().enumerate() {
                let ph = phase[h * frames + i0] * (1.0 - lam) + phase[h * frames + i1] * lam;
                merged += w * ph.sin() * p.sine_amp;
            }
        }
        out.push(merged.tanh() as f32);
    }
    out
}

/// The periodic Hann window of `n` points (PyTorch's `hann_window(n)`).
pub fn hann_periodic(n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| 0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / n as f64).cos())
        .collect()
}

/// The centred STFT (reflection padding of `n_fft / 2`, periodic Hann window) of `x`:
/// returns `(frames, data)` where `data` is [frames, 2 * bins] in ggml order (time
/// fastest): the magnitudes of the `n_fft / 2 + 1` bins, then their phases
/// `atan2(im, re)` in (-pi, pi].
///
/// The DC and Nyquist bins of a real signal have no imaginary part: it is set to +0
/// exactly, so their phase is 0 or +pi as in PyTorch, not a sign of rounding noise.
pub fn source_stft(x: &[f32], n_fft: usize, hop: usize) -> (usize, Vec<f32>) {
    let half = n_fft / 2;
    let bins = half + 1;
    let len = x.len();
    if len <= half || hop == 0 {
        return (0, Vec::new());
    }
    let at = |i: isize| -> f64 {
        // reflection without repeating the edge sample
        let n = len as isize;
        let j = if i < 0 {
            -i
        } else if i >= n {
            2 * (n - 1) - i
        } else {
            i
        };
        x[j as usize] as f64
    };
    let frames = len / hop + 1;
    let window = hann_periodic(n_fft);
    let (cos, sin): (Vec<f64>, Vec<f64>) = (0..bins * n_fft)
        .map(|kn| {
            let (k, n) = (kn / n_fft, kn % n_fft);
            let a = 2.0 * std::f64::consts::PI * ((k * n) % n_fft) as f64 / n_fft as f64;
            (a.cos(), a.sin())
        })
        .unzip();
    let mut data = vec![0f32; frames * 2 * bins];
    let mut frame = vec![0f64; n_fft];
    for t in 0..frames {
        let start = (t * hop) as isize - half as isize;
        for (n, v) in frame.iter_mut().enumerate() {
            *v = at(start + n as isize) * window[n];
        }
        for k in 0..bins {
            let row = &cos[k * n_fft..(k + 1) * n_fft];
            let re: f64 = frame.iter().zip(row).map(|(a, b)| a * b).sum();
            let im: f64 = if k == 0 || 2 * k == n_fft {
                0.0
            } else {
                let row = &sin[k * n_fft..(k + 1) * n_fft];
                -frame.iter().zip(row).map(|(a, b)| a * b).sum::<f64>()
            };
            data[k * frames + t] = (re * re + im * im).sqrt() as f32;
            data[(bins + k) * frames + t] = im.atan2(re) as f32;
        }
    }
    (frames, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> SourceParams {
        SourceParams {
            sample_rate: 24000.0,
            upsample: 300,
            merge_weights: vec![1.0],
            merge_bias: 0.0,
            sine_amp: 0.1,
            voiced_threshold: 10.0,
        }
    }

    #[test]
    fn a_steady_tone_has_its_frequency_and_unvoiced_frames_are_flat() {
        // 4 frames of 200 Hz then 2 unvoiced ones.
        let f0 = [200.0, 200.0, 200.0, 200.0, 0.0, 0.0];
        let s = harmonic_source(&f0, &params());
        assert_eq!(s.len(), 6 * 300);
        // Voiced samples repeat every 24000 / 200 = 120 samples.
        let period = 120;
        for t in 300..700 {
            assert!(
                (s[t] - s[t + period]).abs() < 1e-6,
                "periodic at sample {t}: {} vs {}",
                s[t],
                s[t + period]
            );
        }
        assert!(s[300..900].iter().any(|v| v.abs() > 0.09));
        for &v in &s[1200..] {
            assert_eq!(v, 0.0, "unvoiced samples are tanh(bias) = 0");
        }
    }

    #[test]
    fn stft_of_a_cosine_peaks_in_its_bin_with_its_phase() {
        // A cosine at bin 2 of a 20-point frame (2400 Hz at 24 kHz) with phase 0.5.
        let x: Vec<f32> = (0..400)
            .map(|n| (2.0 * std::f64::consts::PI * 2.0 * n as f64 / 20.0 + 0.5).cos() as f32)
            .collect();
        let (frames, data) = source_stft(&x, 20, 5);
        assert_eq!(frames, 400 / 5 + 1);
        let bins = 11;
        let t = 40; // an interior frame starting at sample 190
        let mags: Vec<f32> = (0..bins).map(|k| data[k * frames + t]).collect();
        let peak = (0..bins)
            .max_by(|&a, &b| mags[a].total_cmp(&mags[b]))
            .unwrap();
        assert_eq!(peak, 2, "magnitudes {mags:?}");
        // Hann-windowed cosine: |X[2]| = N/4 = 5; phase = 0.5 + 2 pi 2 * 190 / 20.
        assert!((mags[2] - 5.0).abs() < 1e-4, "{}", mags[2]);
        let phase = data[(bins + 2) * frames + t] as f64;
        let want = 0.5f64;
        let d = (phase - want).rem_euclid(2.0 * std::f64::consts::PI);
        assert!(
            d.min(2.0 * std::f64::consts::PI - d) < 1e-4,
            "phase {phase}"
        );
        // DC of a negative constant: phase exactly +pi.
        let (frames, data) = source_stft(&[-0.5f32; 100], 20, 5);
        assert_eq!(data[bins * frames], std::f32::consts::PI);
    }
}
