//! Whisper's log-mel front end, as faster-whisper computes it: the audio padded with
//! `hop` zeros, a centred STFT (reflect padding, periodic Hann window of `n_fft`), the
//! power spectrum without its last frame, a Slaney-style mel filterbank, `log10` clamped
//! at 1e-10, values floored at (global max - 8), then `(x + 4) / 4`.

use realfft::RealFftPlanner;

/// Front-end parameters (stored in the GGUF metadata).
///
/// Upstream: `openai/whisper@v20250625` whisper/audio.py L13-L15 (`SAMPLE_RATE`, `N_FFT`,
/// `HOP_LENGTH`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MelParams {
    /// Sample rate in Hz.
    pub sample_rate: u32,
    /// FFT size (and window length).
    pub n_fft: usize,
    /// Hop between frames in samples.
    pub hop: usize,
    /// Mel bins.
    pub n_mels: usize,
}

/// Largest FFT size accepted (Whisper uses 400).
pub const MAX_N_FFT: usize = 1 << 14;
/// Most mel bins accepted (Whisper uses 80 or 128).
pub const MAX_N_MELS: usize = 1024;
/// Sample rates accepted, in Hz (Whisper uses 16 kHz).
pub const SAMPLE_RATES_HZ: std::ops::RangeInclusive<u32> = 1000..=384_000;

impl MelParams {
    /// Checks values that come from a spec or a GGUF before any is divided by or
    /// allocated with: `Err` names the key, its value and the allowed range.
    pub fn validate(&self) -> Result<(), String> {
        let bad = |key: &str, value: String, allowed: String| {
            Err(format!(
                "{key} = {value} is out of range (allowed: {allowed})"
            ))
        };
        if !SAMPLE_RATES_HZ.contains(&self.sample_rate) {
            return bad(
                "sample_rate",
                self.sample_rate.to_string(),
                format!("{}-{} Hz", SAMPLE_RATES_HZ.start(), SAMPLE_RATES_HZ.end()),
            );
        }
        if !(2..=MAX_N_FFT).contains(&self.n_fft) {
            return bad("n_fft", self.n_fft.to_string(), format!("2-{MAX_N_FFT}"));
        }
        if !(1..=self.n_fft).contains(&self.hop) {
            return bad(
                "hop_length",
                self.hop.to_string(),
                format!("1-n_fft ({})", self.n_fft),
            );
        }
        if !(1..=MAX_N_MELS).contains(&self.n_mels) {
            return bad("n_mels", self.n_mels.to_string(), format!("1-{MAX_N_MELS}"));
        }
        Ok(())
    }
}

/// The mel filterbank, `n_mels` rows of `n_fft / 2 + 1` weights (row-major), with the
/// Slaney mel scale and area normalisation (librosa's defaults, which Whisper uses).
///
/// Upstream: `openai/whisper@v20250625` whisper/audio.py L91-L107 (`mel_filters`: librosa's
/// `filters.mel` saved as arrays), computed as `SYSTRAN/faster-whisper@v1.2.1`
/// faster_whisper/feature_extractor.py L24-L65 (`FeatureExtractor.get_mel_filters`).
pub fn filterbank(p: &MelParams) -> Vec<f32> {
    crate::dsp::mel_filterbank(p.sample_rate, p.n_fft, p.n_mels)
}

/// Log-mel features of mono audio: `n_mels` rows of `n_frames` values (row-major) with
/// `n_frames = (samples + hop) / hop`. `filters` is [`filterbank`]'s layout.
///
/// Upstream: `openai/whisper@v20250625` whisper/audio.py L110-L157 (`log_mel_spectrogram`),
/// padded and framed as `SYSTRAN/faster-whisper@v1.2.1` faster_whisper/feature_extractor.py
/// L198-L230 (`FeatureExtractor.__call__`) and L67-L196 (`FeatureExtractor.stft`) do.
pub fn log_mel(samples: &[f32], p: &MelParams, filters: &[f32]) -> (Vec<f32>, usize) {
    log_mel_threads(samples, p, filters, 1)
}

/// Frames one worker computes at least: below this a thread costs more than it saves.
const FRAMES_PER_THREAD: usize = 1000;

/// [`log_mel`] over up to `threads` worker threads, each a run of frames (the same
/// values: every frame is computed alone, and the floor after all of them).
pub fn log_mel_threads(
    samples: &[f32],
    p: &MelParams,
    filters: &[f32],
    threads: usize,
) -> (Vec<f32>, usize) {
    let n_bins = p.n_fft / 2 + 1;
    let mut x = samples.to_vec();
    x.resize(samples.len() + p.hop, 0.0);
    let n_frames = 1 + x.len() / p.hop;
    let frames_kept = n_frames - 1;
    let window: Vec<f32> = (0..p.n_fft)
        .map(|i| {
            (0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / p.n_fft as f64).cos()) as f32
        })
        .collect();
    // Each filter's non-zero range, to skip the zeros.
    let ranges: Vec<(usize, usize)> = (0..p.n_mels)
        .map(|m| {
            let row = &filters[m * n_bins..(m + 1) * n_bins];
            let first = row.iter().position(|&v| v != 0.0).unwrap_or(0);
            let last = row.iter().rposition(|&v| v != 0.0).map_or(0, |l| l + 1);
            (first, last.max(first))
        })
        .collect();
    let frames = Frames {
        x: &x,
        p,
        filters,
        window: &window,
        ranges: &ranges,
    };
    // Frame-major runs ([frame][mel]), then transposed into the mel-major result.
    let workers = threads.clamp(1, (frames_kept / FRAMES_PER_THREAD).max(1));
    let per = frames_kept.div_ceil(workers).max(1);
    let runs: Vec<Vec<f32>> = if workers == 1 {
        vec![frames.run(0..frames_kept)]
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..frames_kept)
                .step_by(per)
                .map(|a| {
                    let frames = &frames;
                    s.spawn(move || frames.run(a..(a + per).min(frames_kept)))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a mel worker does not panic"))
                .collect()
        })
    };
    let mut out = vec![0f32; p.n_mels * frames_kept];
    for (t, frame) in runs.iter().flat_map(|r| r.chunks(p.n_mels)).enumerate() {
        for (m, &v) in frame.iter().enumerate() {
            out[m * frames_kept + t] = v;
        }
    }
    let max = out.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    for v in out.iter_mut() {
        *v = (v.max(max - 8.0) + 4.0) / 4.0;
    }
    (out, frames_kept)
}

/// What every frame of [`log_mel_threads`] reads: the padded audio, the window and
/// the filters with their non-zero ranges.
struct Frames<'a> {
    x: &'a [f32],
    p: &'a MelParams,
    filters: &'a [f32],
    window: &'a [f32],
    ranges: &'a [(usize, usize)],
}

impl Frames<'_> {
    /// The log10 mel energies of frames `frames`, frame-major.
    fn run(&self, frames: std::ops::Range<usize>) -> Vec<f32> {
        let p = self.p;
        let (n_bins, half, len) = (p.n_fft / 2 + 1, p.n_fft / 2, self.x.len());
        // Centre: reflect `half` samples on both sides (no edge repeat).
        let reflect = |i: isize| -> f32 {
            let n = len as isize;
            let mut j = i;
            loop {
                if j < 0 {
                    j = -j;
                } else if j >= n {
                    j = 2 * (n - 1) - j;
                } else {
                    return self.x[j as usize];
                }
                if n == 1 {
                    return self.x[0];
                }
            }
        };
        let mut planner = RealFftPlanner::<f32>::new();
        let fft = planner.plan_fft_forward(p.n_fft);
        let mut input = fft.make_input_vec();
        let mut spectrum = fft.make_output_vec();
        let mut scratch = fft.make_scratch_vec();
        let mut power = vec![0f32; n_bins];
        let mut out = Vec::with_capacity(frames.len() * p.n_mels);
        for t in frames {
            let start = (t * p.hop) as isize - half as isize;
            for (i, v) in input.iter_mut().enumerate() {
                *v = reflect(start + i as isize) * self.window[i];
            }
            fft.process_with_scratch(&mut input, &mut spectrum, &mut scratch)
                .expect("buffers come from the planner");
            for (pw, c) in power.iter_mut().zip(&spectrum) {
                *pw = c.re * c.re + c.im * c.im;
            }
            for (m, &(a, b)) in self.ranges.iter().enumerate() {
                let row = &self.filters[m * n_bins..(m + 1) * n_bins];
                let e: f32 = row[a..b].iter().zip(&power[a..b]).map(|(w, p)| w * p).sum();
                out.push(e.max(1e-10).log10());
            }
        }
        out
    }
}

/// Frames `[start, start + len)` of every mel row, zero-padded (in log-mel space, as
/// faster-whisper does) to `window` frames: the encoder input of one 30 s window.
///
/// Upstream: `SYSTRAN/faster-whisper@v1.2.1` faster_whisper/audio.py L111-L123
/// (`pad_or_trim`), applied per segment at faster_whisper/transcribe.py L1178-L1180.
pub fn window(
    mel: &[f32],
    n_mels: usize,
    n_frames: usize,
    start: usize,
    window: usize,
) -> Vec<f32> {
    let mut out = vec![0f32; n_mels * window];
    let len = n_frames.saturating_sub(start).min(window);
    for m in 0..n_mels {
        out[m * window..m * window + len]
            .copy_from_slice(&mel[m * n_frames + start..m * n_frames + start + len]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_and_absurd_parameters_are_refused() {
        assert!(P.validate().is_ok());
        let cases = [
            (MelParams { hop: 0, ..P }, "hop_length = 0"),
            (MelParams { n_fft: 0, ..P }, "n_fft = 0"),
            (MelParams { n_mels: 0, ..P }, "n_mels = 0"),
            (
                MelParams {
                    sample_rate: 0,
                    ..P
                },
                "sample_rate = 0",
            ),
            (
                MelParams {
                    n_fft: 1 << 40,
                    ..P
                },
                "n_fft = 1099511627776",
            ),
            (MelParams { hop: 401, ..P }, "hop_length = 401"),
        ];
        for (p, want) in cases {
            let err = p.validate().unwrap_err();
            assert!(err.starts_with(want), "{want}: {err}");
        }
    }

    const P: MelParams = MelParams {
        sample_rate: 16000,
        n_fft: 400,
        hop: 160,
        n_mels: 80,
    };

    #[test]
    fn filterbank_is_triangular_and_area_normalised() {
        let w = filterbank(&P);
        assert_eq!(w.len(), 80 * 201);
        assert!(w.iter().all(|&v| v >= 0.0));
        // Every filter has some weight.
        for m in 0..80 {
            assert!(
                w[m * 201..(m + 1) * 201].iter().sum::<f32>() > 0.0,
                "filter {m}"
            );
        }
    }

    #[test]
    fn frame_count_and_range_follow_the_reference() {
        let fb = filterbank(&P);
        let x: Vec<f32> = (0..48000).map(|i| (i as f32 * 0.05).sin() * 0.1).collect();
        let (mel, frames) = log_mel(&x, &P, &fb);
        assert_eq!(frames, 301);
        assert_eq!(mel.len(), 80 * 301);
        let max = mel.iter().cloned().fold(f32::MIN, f32::max);
        let min = mel.iter().cloned().fold(f32::MAX, f32::min);
        assert!(
            max - min <= 2.0 + 1e-6,
            "clamped to 8 decades: {min}..{max}"
        );
        let w = window(&mel, 80, frames, 100, 3000);
        assert_eq!(w.len(), 80 * 3000);
        assert_eq!(w[0], mel[100]);
        assert_eq!(w[200], mel[300]);
        assert_eq!(w[201], 0.0);
    }

    /// Frames split over threads give the bits of one thread, at every split.
    #[test]
    fn threads_give_the_bits_of_one() {
        let fb = filterbank(&P);
        let x: Vec<f32> = (0..16000 * 61)
            .map(|i| ((i as f32 * 0.013).sin() + (i as f32 * 0.0007).cos()) * 0.2)
            .collect();
        let one = log_mel(&x, &P, &fb);
        for threads in [2, 3, 16] {
            assert_eq!(
                log_mel_threads(&x, &P, &fb, threads),
                one,
                "{threads} threads"
            );
        }
    }
}
