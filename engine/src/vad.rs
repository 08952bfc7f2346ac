//! The voice-activity task: its contract with a family ([`SpeechDetector`]), what a run
//! produces ([`VadOutput`]) and the family-neutral part, turning per-window speech
//! probabilities into speech segments.
//!
//! The segmentation is Silero's `get_speech_timestamps` (hysteresis with a lower
//! "negative" threshold, minimum speech and silence durations, a maximum segment length
//! split at the longest pause, then padding), stated here in our own code.

use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use crate::error::{EngineError, Result};
use crate::loaded::Loaded;

/// A voice-activity family's model as [`VadModel`] runs it: a family implements it and
/// registers its loader ([`crate::families::Family::vad`]).
pub trait SpeechDetector: Send {
    /// The sample rate it takes.
    fn sample_rate(&self) -> u32;
    /// Samples per probability.
    fn window(&self) -> usize;
    /// The device it runs on.
    fn device(&self) -> String;
    /// The segmentation defaults of its spec.
    fn default_params(&self) -> VadParams;
    /// One speech probability per window of mono audio at [`SpeechDetector::sample_rate`],
    /// with fresh state.
    fn probabilities(&mut self, samples: &[f32]) -> Result<Vec<f32>>;
}

/// What a VAD run produced.
#[derive(Debug, Clone, Serialize)]
pub struct VadOutput {
    /// Family that ran.
    pub family: String,
    /// Device that ran it.
    pub device: String,
    /// Spec source (`embedded`, `gguf-metadata`, `disk:...`).
    pub spec_source: String,
    /// Audio duration in seconds (after resampling).
    pub audio_seconds: f64,
    /// Model sample rate.
    pub sample_rate: u32,
    /// Samples per probability.
    pub window_samples: usize,
    /// One probability per window.
    pub probabilities: Vec<f32>,
    /// Speech segments in samples.
    pub segments: Vec<Segment>,
    /// Inference wall time in milliseconds (model load excluded).
    pub inference_ms: f64,
}

/// A loaded VAD model, reusable across requests (loaded by `VadModel::load`, in
/// [`crate::tasks`]).
pub type VadModel = Loaded<dyn SpeechDetector>;

impl VadModel {
    /// The spec's default segmentation parameters.
    pub fn default_params(&self) -> VadParams {
        self.model.default_params()
    }

    /// The model's sample rate.
    pub fn sample_rate(&self) -> u32 {
        self.model.sample_rate()
    }

    /// Segmentation parameters for cutting audio before ASR
    /// ([`crate::asr::AsrModel::run_samples_with_vad`]): the spec's defaults with 400 ms
    /// of padding (faster-whisper's), so that chunk edges keep soft word onsets and endings.
    pub fn asr_chunking_params(&self) -> VadParams {
        VadParams {
            speech_pad_ms: 400,
            ..self.model.default_params()
        }
    }

    /// Runs on mono samples at the model's rate.
    pub fn run_samples(&mut self, samples: &[f32], params: &VadParams) -> Result<VadOutput> {
        params.validate().map_err(EngineError::Usage)?;
        let t0 = Instant::now();
        let sample_rate = self.model.sample_rate();
        let probabilities = self.model.probabilities(samples)?;
        let window = self.model.window();
        let segments = speech_segments(&probabilities, window, samples.len(), sample_rate, params);
        Ok(VadOutput {
            family: self.family.to_string(),
            device: self.model.device(),
            spec_source: self.spec_source.to_string(),
            audio_seconds: samples.len() as f64 / sample_rate as f64,
            sample_rate,
            window_samples: window,
            probabilities,
            segments,
            inference_ms: t0.elapsed().as_secs_f64() * 1000.0,
        })
    }

    /// Decodes an audio file and runs on it.
    pub fn run_file(&mut self, audio: &Path, params: &VadParams) -> Result<VadOutput> {
        let a = crate::audio::load(audio, self.sample_rate())?;
        self.run_samples(&a.samples, params)
    }
}

/// Segmentation parameters (Silero's names and defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct VadParams {
    /// Probability at or above which a window is speech.
    pub threshold: f32,
    /// Probability below which speech may end (default `threshold - 0.15`, at least 0.01).
    pub neg_threshold: Option<f32>,
    /// Shorter speech runs are dropped.
    pub min_speech_duration_ms: u32,
    /// Silence shorter than this does not end a segment.
    pub min_silence_duration_ms: u32,
    /// Padding added on both sides of each segment.
    pub speech_pad_ms: u32,
    /// Longer segments are split (None: no limit).
    pub max_speech_duration_s: Option<f32>,
}

impl Default for VadParams {
    fn default() -> Self {
        VadParams {
            threshold: 0.5,
            neg_threshold: None,
            min_speech_duration_ms: 250,
            min_silence_duration_ms: 100,
            speech_pad_ms: 30,
            max_speech_duration_s: None,
        }
    }
}

impl VadParams {
    /// Checks ranges; the error names the parameter and its allowed range.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if !(0.0..=1.0).contains(&self.threshold) {
            return Err(format!(
                "parameter 'threshold' {} is outside 0..1",
                self.threshold
            ));
        }
        if let Some(n) = self.neg_threshold {
            if !(0.0..=self.threshold).contains(&n) {
                return Err(format!(
                    "negative threshold {n} must be between 0 and the threshold"
                ));
            }
        }
        if let Some(m) = self.max_speech_duration_s {
            if m <= 0.0 || m.is_nan() {
                return Err(format!(
                    "parameter 'max_speech_duration_s' {m} must be positive"
                ));
            }
        }
        Ok(())
    }
}

/// One speech segment, in samples of the model's rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Segment {
    /// First sample.
    pub start: usize,
    /// One past the last sample.
    pub end: usize,
}

/// Computes speech segments from window probabilities.
///
/// `window` is the hop between probabilities in samples, `n_samples` the audio length,
/// `rate` its sample rate.
pub fn speech_segments(
    probs: &[f32],
    window: usize,
    n_samples: usize,
    rate: u32,
    p: &VadParams,
) -> Vec<Segment> {
    let ms = |v: f64| (rate as f64 * v / 1000.0) as usize;
    let min_speech = ms(p.min_speech_duration_ms as f64);
    let pad = ms(p.speech_pad_ms as f64);
    let min_silence = ms(p.min_silence_duration_ms as f64);
    let min_silence_at_max = ms(98.0);
    let max_speech = match p.max_speech_duration_s {
        Some(s) => (rate as f64 * s as f64) as i64 - window as i64 - 2 * pad as i64,
        None => i64::MAX,
    };
    let neg = p.neg_threshold.unwrap_or((p.threshold - 0.15).max(0.01));

    let mut segs: Vec<Segment> = Vec::new();
    let mut triggered = false;
    let (mut start, mut temp_end, mut prev_end, mut next_start) = (0usize, 0usize, 0usize, 0usize);
    let mut possible_ends: Vec<(usize, usize)> = Vec::new();

    for (i, &prob) in probs.iter().enumerate() {
        let cur = window * i;
        if prob >= p.threshold && temp_end != 0 {
            let silence = cur - temp_end;
            if silence > min_silence_at_max {
                possible_ends.push((temp_end, silence));
            }
            temp_end = 0;
            if next_start < prev_end {
                next_start = cur;
            }
        }
        if prob >= p.threshold && !triggered {
            triggered = true;
            start = cur;
            continue;
        }
        if triggered && (cur - start) as i64 > max_speech {
            if let Some(&(end, dur)) = possible_ends.iter().max_by_key(|(_, d)| *d) {
                segs.push(Segment { start, end });
                next_start = end + dur;
                if next_start < end + cur {
                    start = next_start;
                } else {
                    triggered = false;
                }
                prev_end = 0;
                next_start = 0;
                temp_end = 0;
                possible_ends.clear();
            } else if prev_end != 0 {
                segs.push(Segment {
                    start,
                    end: prev_end,
                });
                if next_start < prev_end {
                    triggered = false;
                } else {
                    start = next_start;
                }
                prev_end = 0;
                next_start = 0;
                temp_end = 0;
                possible_ends.clear();
            } else {
                segs.push(Segment { start, end: cur });
                prev_end = 0;
                next_start = 0;
                temp_end = 0;
                triggered = false;
                possible_ends.clear();
                continue;
            }
        }
        if prob < neg && triggered {
            if temp_end == 0 {
                temp_end = cur;
            }
            if cur - temp_end < min_silence {
                continue;
            }
            if temp_end - start > min_speech {
                segs.push(Segment {
                    start,
                    end: temp_end,
                });
            }
            prev_end = 0;
            next_start = 0;
            temp_end = 0;
            triggered = false;
            possible_ends.clear();
        }
    }
    if triggered && n_samples > start && n_samples - start > min_speech {
        segs.push(Segment {
            start,
            end: n_samples,
        });
    }

    let n = segs.len();
    for i in 0..n {
        if i == 0 {
            segs[i].start = segs[i].start.saturating_sub(pad);
        }
        if i + 1 < n {
            let gap = segs[i + 1].start.saturating_sub(segs[i].end);
            if gap < 2 * pad {
                segs[i].end += gap / 2;
                segs[i + 1].start = segs[i + 1].start.saturating_sub(gap / 2);
            } else {
                segs[i].end = (segs[i].end + pad).min(n_samples);
                segs[i + 1].start = segs[i + 1].start.saturating_sub(pad);
            }
        } else {
            segs[i].end = (segs[i].end + pad).min(n_samples);
        }
    }
    segs
}

/// Groups speech segments (sorted, not overlapping) into chunks of at most `max_len`
/// samples for a model with a fixed input window (Whisper's 30 s): consecutive segments
/// share a chunk while it spans at most `max_len`, pauses inside it included; a segment
/// longer than `max_len` is cut into pieces of `max_len`. Chunks cover every speech
/// sample, are ordered and never overlap; what lies between chunks is not speech.
pub fn chunks_for_window(segments: &[Segment], max_len: usize) -> Vec<Segment> {
    let max_len = max_len.max(1);
    let mut chunks = Vec::new();
    let mut current: Option<Segment> = None;
    for s in segments {
        let mut start = s.start;
        while start < s.end {
            let end = s.end.min(start + max_len);
            current = match current {
                Some(c) if end - c.start <= max_len => Some(Segment {
                    start: c.start,
                    end,
                }),
                Some(c) => {
                    chunks.push(c);
                    Some(Segment { start, end })
                }
                None => Some(Segment { start, end }),
            };
            start = end;
        }
    }
    chunks.extend(current);
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(start: usize, end: usize) -> Segment {
        Segment { start, end }
    }

    #[test]
    fn chunks_join_close_segments_and_split_at_the_window() {
        assert_eq!(chunks_for_window(&[], 100), vec![]);
        assert_eq!(chunks_for_window(&[seg(5, 20)], 100), vec![seg(5, 20)]);
        // Two segments within one window share a chunk, the pause included.
        assert_eq!(
            chunks_for_window(&[seg(0, 30), seg(60, 100)], 100),
            vec![seg(0, 100)]
        );
        // One sample more and they do not.
        assert_eq!(
            chunks_for_window(&[seg(0, 30), seg(60, 101)], 100),
            vec![seg(0, 30), seg(60, 101)]
        );
        // A long segment is cut into whole windows; the rest joins the next segment.
        assert_eq!(
            chunks_for_window(&[seg(10, 260), seg(270, 300)], 100),
            vec![seg(10, 110), seg(110, 210), seg(210, 300)]
        );
        // Far-apart segments stay apart: the silence between them is skipped.
        assert_eq!(
            chunks_for_window(&[seg(0, 10), seg(500, 510), seg(520, 530)], 100),
            vec![seg(0, 10), seg(500, 530)]
        );
    }

    #[test]
    fn chunks_cover_all_speech_in_order_within_the_window() {
        // Deterministic pseudo-random segment lists (a small LCG), many window sizes.
        let mut state = 12345u64;
        let mut next = |m: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % m
        };
        for _ in 0..500 {
            let max_len = 1 + next(200) as usize;
            let mut segs = Vec::new();
            let mut at = next(50) as usize;
            for _ in 0..next(12) {
                let len = 1 + next(400) as usize;
                segs.push(seg(at, at + len));
                at += len + next(300) as usize;
            }
            let chunks = chunks_for_window(&segs, max_len);
            for c in &chunks {
                assert!(
                    c.start < c.end && c.end - c.start <= max_len,
                    "{c:?} > {max_len}"
                );
            }
            for w in chunks.windows(2) {
                assert!(w[0].end <= w[1].start, "{chunks:?}");
            }
            for s in &segs {
                let covered: usize = chunks
                    .iter()
                    .map(|c| c.end.min(s.end).saturating_sub(c.start.max(s.start)))
                    .sum();
                assert_eq!(covered, s.end - s.start, "{s:?} in {chunks:?}");
            }
            // Every chunk starts and ends on speech.
            for c in &chunks {
                assert!(segs.iter().any(|s| s.start <= c.start && c.start < s.end));
                assert!(segs.iter().any(|s| s.start < c.end && c.end <= s.end));
            }
        }
    }

    fn run(probs: &[f32], p: &VadParams) -> Vec<(usize, usize)> {
        let n = probs.len() * 512;
        speech_segments(probs, 512, n, 16000, p)
            .into_iter()
            .map(|s| (s.start, s.end))
            .collect()
    }

    #[test]
    fn silence_gives_nothing_and_speech_gives_padded_segment() {
        let p = VadParams::default();
        assert!(run(&[0.0; 50], &p).is_empty());
        let mut probs = vec![0.0f32; 60];
        probs[10..40].iter_mut().for_each(|v| *v = 0.9);
        // speech 5120..20480, padded by 480 on both sides
        assert_eq!(run(&probs, &p), vec![(5120 - 480, 20480 + 480)]);
    }

    #[test]
    fn short_bursts_are_dropped_and_short_pauses_bridged() {
        let p = VadParams::default();
        let mut probs = vec![0.0f32; 80];
        probs[5..10].iter_mut().for_each(|v| *v = 0.9); // 2560 samples < 4000: dropped
        assert!(run(&probs, &p).is_empty());
        let mut probs = vec![0.0f32; 80];
        probs[10..30].iter_mut().for_each(|v| *v = 0.9);
        probs[32..50].iter_mut().for_each(|v| *v = 0.9); // 2-window pause (1024 < 1600) is bridged
        assert_eq!(run(&probs, &p).len(), 1);
        probs[30..36].iter_mut().for_each(|v| *v = 0.0); // 6-window pause (3072 > 1600) splits
        assert_eq!(run(&probs, &p).len(), 2);
    }

    #[test]
    fn hysteresis_keeps_speech_between_thresholds() {
        let p = VadParams::default();
        let mut probs = vec![0.0f32; 80];
        probs[10..60].iter_mut().for_each(|v| *v = 0.4); // below 0.5 but above 0.35
        probs[10] = 0.9;
        assert_eq!(run(&probs, &p), vec![(5120 - 480, 60 * 512 + 480)]);
    }

    #[test]
    fn max_duration_splits_at_the_longest_pause() {
        let p = VadParams {
            max_speech_duration_s: Some(2.0),
            ..Default::default()
        };
        let mut probs = vec![0.9f32; 120];
        probs[30..34].iter_mut().for_each(|v| *v = 0.0); // 4-window pause, under min silence
        let segs = run(&probs, &p);
        assert!(segs.len() >= 2, "{segs:?}");
        assert!(segs.iter().all(|&(s, e)| e > s));
    }

    #[test]
    fn speech_until_the_end_is_closed_at_the_end() {
        let p = VadParams::default();
        let mut probs = vec![0.0f32; 40];
        probs[20..].iter_mut().for_each(|v| *v = 0.95);
        assert_eq!(run(&probs, &p), vec![(20 * 512 - 480, 40 * 512)]);
    }

    #[test]
    fn validation_rejects_out_of_range() {
        assert!(VadParams {
            threshold: 1.5,
            ..Default::default()
        }
        .validate()
        .is_err());
        assert!(VadParams {
            max_speech_duration_s: Some(0.0),
            ..Default::default()
        }
        .validate()
        .is_err());
        assert!(VadParams::default().validate().is_ok());
    }
}
