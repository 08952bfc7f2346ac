//! Signal processing the families share: the Slaney mel filterbank (librosa's default,
//! which Whisper and Qwen3-TTS's speaker encoder use), the periodic Hann window, and
//! reflection padding as PyTorch's `reflect` mode pads.

/// The mel filterbank of `n_mels` triangles over the `n_fft / 2 + 1` bins of an `n_fft`
/// transform at `sample_rate`, from 0 Hz to Nyquist, row-major [n_mels, bins]: the
/// Slaney mel scale and area normalisation (librosa's `filters.mel` defaults).
///
/// Upstream: librosa 0.11 filters.py L128-L250 (`mel`, weights L222-L245), as
/// `SYSTRAN/faster-whisper@v1.2.1` faster_whisper/feature_extractor.py L24-L65 computes it.
pub fn mel_filterbank(sample_rate: u32, n_fft: usize, n_mels: usize) -> Vec<f32> {
    let n_bins = n_fft / 2 + 1;
    let sr = sample_rate as f64;
    let fft_freqs: Vec<f64> = (0..n_bins).map(|i| i as f64 * sr / n_fft as f64).collect();
    // Slaney scale: linear below 1 kHz (200/3 Hz per mel), logarithmic above.
    let f_sp = 200.0 / 3.0;
    let min_log_hz = 1000.0;
    let min_log_mel = min_log_hz / f_sp;
    let logstep = 6.4f64.ln() / 27.0;
    let hz_to_mel = |f: f64| {
        if f >= min_log_hz {
            min_log_mel + (f / min_log_hz).ln() / logstep
        } else {
            f / f_sp
        }
    };
    let mel_to_hz = |m: f64| {
        if m >= min_log_mel {
            min_log_hz * (logstep * (m - min_log_mel)).exp()
        } else {
            f_sp * m
        }
    };
    let max_mel = hz_to_mel(sr / 2.0);
    let freqs: Vec<f64> = (0..n_mels + 2)
        .map(|i| mel_to_hz(max_mel * i as f64 / (n_mels + 1) as f64))
        .collect();
    let mut w = vec![0f32; n_mels * n_bins];
    for m in 0..n_mels {
        let (lo, mid, hi) = (freqs[m], freqs[m + 1], freqs[m + 2]);
        let enorm = 2.0 / (hi - lo);
        for (b, &f) in fft_freqs.iter().enumerate() {
            let lower = (f - lo) / (mid - lo);
            let upper = (hi - f) / (hi - mid);
            w[m * n_bins + b] = (lower.min(upper).max(0.0) * enorm) as f32;
        }
    }
    w
}

/// A periodic Hann window of `n` samples (`torch.hann_window(n)`): `0.5 - 0.5 cos(2 pi i / n)`.
pub fn hann_periodic(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / n as f64).cos()) as f32)
        .collect()
}

/// `x` with `pad` samples reflected on both sides, the edge sample not repeated
/// (PyTorch's `reflect`); `None` unless `pad` is below the length.
pub fn reflect_pad(x: &[f32], pad: usize) -> Option<Vec<f32>> {
    if pad >= x.len() {
        return None;
    }
    let mut out = Vec::with_capacity(x.len() + 2 * pad);
    out.extend((1..=pad).rev().map(|i| x[i]));
    out.extend_from_slice(x);
    out.extend((1..=pad).map(|i| x[x.len() - 1 - i]));
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflection_skips_the_edge_sample() {
        assert_eq!(
            reflect_pad(&[1.0, 2.0, 3.0, 4.0], 2).unwrap(),
            [3.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 2.0]
        );
        assert_eq!(reflect_pad(&[1.0, 2.0], 2), None);
        let w = hann_periodic(4);
        assert!(
            (w[0] - 0.0).abs() < 1e-7 && (w[2] - 1.0).abs() < 1e-7 && (w[1] - 0.5).abs() < 1e-7
        );
    }
}
