//! The harmonic source of Kokoro's iSTFTNet generator (hn-NSF's sine source, as the ONNX
//! export runs it: no random noise or initial phase), in f64, and its forward STFT, on
//! the host.
//!
//! Why the host: the source's phase is a cumulative sum over the whole utterance that
//! reaches ~10^6 radians, where f32 rounding alone costs tens of dB, and ggml has no
//! atan2 for the STFT's phase. The work is small (9 harmonics at 24 kHz, an STFT of 20
//! points), but on a GPU it is a real share of a sentence's time, so both steps split
//! their samples (frames) over threads: every value is computed by exactly the same
//! arithmetic whichever thread computes it, so the result does not depend on the
//! thread count.

/// Most threads the host steps use.
const MAX_HOST_THREADS: usize = 16;
/// Fewest output values a thread is given (below that, threads cost more than they save).
const MIN_VALUES_PER_THREAD: usize = 16_384;

/// Threads for `values` outputs: the machine's cores, at most [`MAX_HOST_THREADS`], at
/// least [`MIN_VALUES_PER_THREAD`] values each.
fn host_threads(values: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores
        .min(MAX_HOST_THREADS)
        .min(values / MIN_VALUES_PER_THREAD)
        .max(1)
}

/// Fills `out` by `fill(first_index, chunk)` over `threads` contiguous chunks of
/// whole `unit`-element groups, on scoped threads (the caller's thread takes the first).
fn fill_parallel<T: Send>(
    out: &mut [T],
    unit: usize,
    threads: usize,
    fill: &(impl Fn(usize, &mut [T]) + Sync),
) {
    let groups = out.len() / unit.max(1);
    let per = groups.div_ceil(threads.max(1)).max(1) * unit.max(1);
    if threads <= 1 || out.len() <= per {
        fill(0, out);
        return;
    }
    std::thread::scope(|scope| {
        let mut chunks = out.chunks_mut(per).enumerate();
        let first = chunks.next();
        for (i, chunk) in chunks {
            scope.spawn(move || fill(i * per, chunk));
        }
        if let Some((_, chunk)) = first {
            fill(0, chunk);
        }
    });
}

/// What the source needs, from the model's hyper-parameters and weights.
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L262-L265
/// (`Generator.m_source`) and L229-L239 (`SourceModuleHnNSF.__init__`).
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
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L142-L158
/// (`SineGen._f02sine`, no pulses), L185-L209 (`SineGen.forward`) and L241-L254
/// (`SourceModuleHnNSF.forward`), without their random terms.
pub fn harmonic_source(f0: &[f32], p: &SourceParams) -> Vec<f32> {
    harmonic_source_threads(f0, p, host_threads(f0.len() * p.upsample))
}

/// [`harmonic_source`] on `threads` threads.
fn harmonic_source_threads(f0: &[f32], p: &SourceParams, threads: usize) -> Vec<f32> {
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
    let sample = |t: usize| -> f32 {
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
        merged.tanh() as f32
    };
    let mut out = vec![0f32; frames * up];
    fill_parallel(&mut out, 1, threads, &|first, chunk: &mut [f32]| {
        for (i, v) in chunk.iter_mut().enumerate() {
            *v = sample(first + i);
        }
    });
    out
}

/// The periodic Hann window of `n` points (PyTorch's `hann_window(n)`).
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L87 (`TorchSTFT`'s window).
pub fn hann_periodic(n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| 0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / n as f64).cos())
        .collect()
}

/// A complex number in f32 with the textbook product, `(ac - bd, ad + bc)`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct C32 {
    re: f32,
    im: f32,
}

impl C32 {
    fn mul(self, o: C32) -> C32 {
        C32 {
            re: self.re * o.re - self.im * o.im,
            im: self.re * o.im + self.im * o.re,
        }
    }

    fn add(self, o: C32) -> C32 {
        C32 {
            re: self.re + o.re,
            im: self.im + o.im,
        }
    }

    /// `cos(angle) + i sin(angle)`, each rounded once to f32.
    fn unit(angle: f32) -> C32 {
        C32 {
            re: (angle as f64).cos() as f32,
            im: (angle as f64).sin() as f32,
        }
    }
}

/// `i` with its lowest `bits` bits reversed.
fn bit_reverse(i: usize, bits: u32) -> usize {
    if bits == 0 {
        0
    } else {
        i.reverse_bits() >> (usize::BITS - bits)
    }
}

/// An f32 DFT of `n` points for any `n` by Bluestein's chirp-z method over power-of-two
/// radix-2 FFTs, arranged as onnxruntime's CPU STFT arranges it (twiddles stored in
/// bit-reversed order, the inverse FFT done forward and read back reversed).
///
/// Why this algorithm and f32: the bins the source leaves empty (every bin above the
/// fundamental's in unvoiced stretches, the Nyquist bin everywhere) hold rounding noise
/// whose phase the generator reads like any other. The reference the model is checked
/// against computes that noise this way; the same arithmetic gives the same noise there
/// (and a log-mel distance to it about half of what an exact f64 DFT gives).
struct ChirpZ {
    n: usize,
    m: usize,
    bits: u32,
    twiddles: Vec<C32>,
    chirp: Vec<C32>,
    kernel_fft: Vec<C32>,
}

impl ChirpZ {
    fn new(n: usize) -> Self {
        let m = (2 * n - 1).next_power_of_two();
        let bits = m.trailing_zeros();
        let pi = std::f32::consts::PI;
        let step = -(2.0 * pi) / m as f32;
        let mut twiddles = vec![C32::default(); m];
        for i in 0..m {
            twiddles[bit_reverse(i, bits)] = C32::unit(i as f32 * step);
        }
        let mut chirp = vec![C32::default(); m];
        let mut kernel = vec![C32::default(); m];
        for k in 0..n {
            let angle = -pi * k as f32 * k as f32 / n as f32;
            chirp[k] = C32::unit(angle);
            kernel[k] = C32 {
                re: chirp[k].re,
                im: -chirp[k].im,
            };
        }
        for k in m - n + 1..m {
            kernel[k] = kernel[m - k];
        }
        let mut z = ChirpZ {
            n,
            m,
            bits,
            twiddles,
            chirp,
            kernel_fft: Vec::new(),
        };
        z.kernel_fft = z.fft(&kernel);
        z
    }

    /// The radix-2 FFT of `m` points.
    fn fft(&self, x: &[C32]) -> Vec<C32> {
        let mut y = vec![C32::default(); self.m];
        self.fft_into(x, &mut y);
        y
    }

    /// [`ChirpZ::fft`] into `y` (`m` points).
    fn fft_into(&self, x: &[C32], y: &mut [C32]) {
        let m = self.m;
        for (i, v) in y.iter_mut().enumerate() {
            *v = x[bit_reverse(i, self.bits)];
        }
        let mut size = 2;
        let mut stage_bits = 0;
        while size <= m {
            let mid = size / 2;
            stage_bits += 1;
            for k in 0..mid {
                let first = self.twiddles[bit_reverse(k, stage_bits)];
                let second = self.twiddles[bit_reverse(mid + k, stage_bits)];
                for j in (0..m).step_by(size) {
                    let (e, o) = (y[k + j], y[k + j + mid]);
                    y[k + j] = e.add(first.mul(o));
                    y[k + j + mid] = e.add(second.mul(o));
                }
            }
            size *= 2;
        }
    }

    /// Bins `0..bins` of the DFT of `frame` (n real values) times `window`; `scratch`
    /// is [`ChirpZ::scratch`] (its first buffer's values past `n` stay zero).
    fn transform(
        &self,
        frame: &[f32],
        window: &[f32],
        bins: usize,
        out: &mut [C32],
        scratch: &mut [Vec<C32>; 3],
    ) {
        let [a, spec, back] = scratch;
        for k in 0..self.n {
            let x = C32 {
                re: frame[k] * window[k],
                im: 0.0 * window[k],
            };
            a[k] = x.mul(self.chirp[k]);
        }
        self.fft_into(a, spec);
        for (s, kf) in spec.iter_mut().zip(&self.kernel_fft) {
            *s = s.mul(*kf);
        }
        self.fft_into(spec, back);
        let scale = 1.0 / self.m as f32;
        for (k, o) in out.iter_mut().enumerate().take(bins) {
            let c = back[if k == 0 { 0 } else { self.m - k }];
            let c = C32 {
                re: c.re * scale,
                im: c.im * scale,
            };
            *o = c.mul(self.chirp[k]);
        }
    }

    /// Zeroed work buffers for [`ChirpZ::transform`].
    fn scratch(&self) -> [Vec<C32>; 3] {
        [(); 3].map(|_| vec![C32::default(); self.m])
    }
}

/// The phase of `re + i im` as the Kokoro export computes it: `atan(im / re)`, moved by
/// pi towards the sign of `im` where `re < 0` (0 for a zero bin).
fn export_phase(re: f32, im: f32) -> f32 {
    if re == 0.0 && im == 0.0 {
        return 0.0;
    }
    let a = ((im / re) as f64).atan() as f32;
    let pi = std::f32::consts::PI;
    if re < 0.0 {
        if im > 0.0 {
            a + pi
        } else {
            a - pi
        }
    } else {
        a
    }
}

/// The centred STFT (reflection padding of `n_fft / 2`, periodic Hann window) of `x`,
/// in f32 through [`ChirpZ`]: returns `(frames, data)` where `data` is
/// [frames, 2 * bins] in ggml order (time fastest): the magnitudes of the
/// `n_fft / 2 + 1` bins, then their phases in [-pi, pi].
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L89-L94
/// (`TorchSTFT.transform`), used at L304-L305 (`Generator.forward`).
pub fn source_stft(x: &[f32], n_fft: usize, hop: usize) -> (usize, Vec<f32>) {
    let values = x.len() / hop.max(1) * (n_fft / 2 + 1);
    source_stft_threads(x, n_fft, hop, host_threads(values))
}

/// [`source_stft`] on `threads` threads.
fn source_stft_threads(x: &[f32], n_fft: usize, hop: usize, threads: usize) -> (usize, Vec<f32>) {
    let half = n_fft / 2;
    let bins = half + 1;
    let len = x.len();
    if len <= half || hop == 0 || n_fft < 2 {
        return (0, Vec::new());
    }
    let at = |i: isize| -> f32 {
        // reflection without repeating the edge sample
        let n = len as isize;
        let j = if i < 0 {
            -i
        } else if i >= n {
            2 * (n - 1) - i
        } else {
            i
        };
        x[j as usize]
    };
    let frames = len / hop + 1;
    let window: Vec<f32> = hann_periodic(n_fft).iter().map(|&w| w as f32).collect();
    let dft = ChirpZ::new(n_fft);
    // Frame-major (each frame's magnitudes, then its phases), filled in parallel, then
    // laid out time fastest.
    let mut by_frame = vec![0f32; frames * 2 * bins];
    fill_parallel(
        &mut by_frame,
        2 * bins,
        threads,
        &|first, chunk: &mut [f32]| {
            let mut frame = vec![0f32; n_fft];
            let mut spec = vec![C32::default(); bins];
            let mut scratch = dft.scratch();
            for (i, values) in chunk.chunks_exact_mut(2 * bins).enumerate() {
                let t = first / (2 * bins) + i;
                let start = (t * hop) as isize - half as isize;
                for (n, v) in frame.iter_mut().enumerate() {
                    *v = at(start + n as isize);
                }
                dft.transform(&frame, &window, bins, &mut spec, &mut scratch);
                for (k, c) in spec.iter().enumerate() {
                    values[k] = (c.re * c.re + c.im * c.im).sqrt();
                    values[bins + k] = export_phase(c.re, c.im);
                }
            }
        },
    );
    let mut data = vec![0f32; frames * 2 * bins];
    for (t, values) in by_frame.chunks_exact(2 * bins).enumerate() {
        for (k, &v) in values.iter().enumerate() {
            data[k * frames + t] = v;
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
    fn threads_do_not_change_a_bit_of_the_source_or_its_stft() {
        let f0: Vec<f32> = (0..157)
            .map(|i| {
                if i % 40 < 30 {
                    120.0 + i as f32 * 1.7
                } else {
                    0.0
                }
            })
            .collect();
        let mut p = params();
        p.merge_weights = vec![0.9, -0.4, 0.3, 0.2, -0.1, 0.05, 0.02, -0.03, 0.01];
        let one = harmonic_source_threads(&f0, &p, 1);
        for threads in [2, 3, 7] {
            let many = harmonic_source_threads(&f0, &p, threads);
            assert!(one
                .iter()
                .zip(&many)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
            assert_eq!(one.len(), many.len());
        }
        let (frames, stft) = source_stft_threads(&one, 20, 5, 1);
        assert_eq!(frames, one.len() / 5 + 1);
        for threads in [2, 5, 16] {
            let (f, many) = source_stft_threads(&one, 20, 5, threads);
            assert_eq!(f, frames);
            assert!(stft
                .iter()
                .zip(&many)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
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
        // DC of a negative constant: phase pi.
        let (frames, data) = source_stft(&[-0.5f32; 100], 20, 5);
        assert!((data[bins * frames].abs() - std::f32::consts::PI).abs() < 1e-5);
    }
}
