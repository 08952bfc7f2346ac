//! Audio input: decode any common file to mono f32 at the model's sample rate.
//!
//! WAV (8/16/24/32-bit integer or float, any channel count) goes through `hound`;
//! FLAC and MP3 through `symphonia`. Channels are averaged, then the signal is
//! resampled with `rubato`'s windowed-sinc resampler.
//!
//! Every decode runs under [`AudioLimits`], checked from the header before any sample
//! is decoded or resampled: a small file whose header claims 1 Hz would otherwise be
//! resampled to hours of audio (gigabytes of memory).

use std::path::Path;

use crate::error::{EngineError, Result};

/// Decoded audio: mono samples in [-1, 1] and their rate.
#[derive(Debug, Clone)]
pub struct Audio {
    /// Mono samples.
    pub samples: Vec<f32>,
    /// Samples per second.
    pub sample_rate: u32,
}

impl Audio {
    /// Duration in seconds.
    pub fn duration_s(&self) -> f64 {
        self.samples.len() as f64 / self.sample_rate as f64
    }
}

/// Bounds on the audio a decode may produce. The defaults are far beyond real
/// recordings (six-hour files, telephone-quality rates and up) and exist so a lying
/// header cannot make a small file expand into gigabytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AudioLimits {
    /// Longest audio accepted, in seconds (`--max-audio-s`, server.json `max_audio_s`).
    pub max_duration_s: f64,
    /// Lowest sample rate accepted, in Hz (`--min-sample-rate-hz`, server.json
    /// `min_sample_rate_hz`): resampling from a rate this low up to 16 kHz multiplies
    /// the samples by at most 16000 / this.
    pub min_sample_rate_hz: u32,
}

/// Default of [`AudioLimits::max_duration_s`]: 6 hours (1.4 GB of samples at 16 kHz).
pub const DEFAULT_MAX_AUDIO_S: f64 = 6.0 * 3600.0;
/// Default of [`AudioLimits::min_sample_rate_hz`]: 4 kHz, below every real
/// recording format (telephony is 8 kHz).
pub const DEFAULT_MIN_SAMPLE_RATE_HZ: u32 = 4000;
/// Highest sample rate accepted, in Hz: above the 768 kHz of the fastest audio
/// converters, so only a corrupt header reaches it.
pub const MAX_SAMPLE_RATE_HZ: u32 = 1_536_000;

impl Default for AudioLimits {
    fn default() -> Self {
        AudioLimits {
            max_duration_s: DEFAULT_MAX_AUDIO_S,
            min_sample_rate_hz: DEFAULT_MIN_SAMPLE_RATE_HZ,
        }
    }
}

impl AudioLimits {
    /// Checks the limits themselves (a flag or config value): both must be positive.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if !(self.max_duration_s.is_finite() && self.max_duration_s > 0.0) {
            return Err(format!(
                "parameter 'max_audio_s' {} must be a positive number of seconds",
                self.max_duration_s
            ));
        }
        if self.min_sample_rate_hz == 0 || self.min_sample_rate_hz > MAX_SAMPLE_RATE_HZ {
            return Err(format!(
                "parameter 'min_sample_rate_hz' {} must be between 1 and {MAX_SAMPLE_RATE_HZ}",
                self.min_sample_rate_hz
            ));
        }
        Ok(())
    }

    /// Checks a stream's rate, and its length in frames when the header states one.
    pub fn check(&self, sample_rate: u32, frames: Option<u64>) -> std::result::Result<(), String> {
        if sample_rate < self.min_sample_rate_hz {
            return Err(format!(
                "sample rate {sample_rate} Hz is below the limit of {} Hz (min_sample_rate_hz); \
                 if the file is real, lower parameter 'min_sample_rate_hz'",
                self.min_sample_rate_hz
            ));
        }
        if sample_rate > MAX_SAMPLE_RATE_HZ {
            return Err(format!(
                "sample rate {sample_rate} Hz is above {MAX_SAMPLE_RATE_HZ} Hz; the header is corrupt"
            ));
        }
        if let Some(frames) = frames {
            let seconds = frames as f64 / sample_rate as f64;
            if seconds > self.max_duration_s {
                return Err(format!(
                    "the audio is {seconds:.0} s long, over the limit of {:.0} s (max_audio_s); \
                     raise parameter 'max_audio_s' or split the file",
                    self.max_duration_s
                ));
            }
        }
        Ok(())
    }
}

fn audio_err(path: &Path, reason: impl std::fmt::Display) -> EngineError {
    EngineError::Audio {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// Reads and decodes an audio file under the default [`AudioLimits`], then converts
/// it to mono at `target_rate`.
pub fn load(path: &Path, target_rate: u32) -> Result<Audio> {
    load_limited(path, target_rate, &AudioLimits::default())
}

/// [`load`] under the given limits.
pub fn load_limited(path: &Path, target_rate: u32, limits: &AudioLimits) -> Result<Audio> {
    let bytes = std::fs::read(path).map_err(|source| EngineError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    from_bytes(&bytes, target_rate, limits).map_err(|reason| audio_err(path, reason))
}

/// Decodes an in-memory audio file (an upload) to mono at `target_rate`.
pub fn from_bytes(
    bytes: &[u8],
    target_rate: u32,
    limits: &AudioLimits,
) -> std::result::Result<Audio, String> {
    let audio = decode(bytes, limits)?;
    if audio.samples.is_empty() {
        return Err("the file holds no samples".into());
    }
    let mut audio = resample(audio, target_rate)?;
    flush_denormals(&mut audio.samples);
    Ok(audio)
}

/// Below this magnitude (-200 dBFS, far under 24-bit resolution) a sample is set to 0.
const FLUSH_BELOW: f32 = 1e-10;

/// Zeroes vanishingly small samples. Resampler tails leave subnormal floats in silent
/// stretches, and arithmetic on subnormals is 10-100x slower on x86 CPUs; nothing
/// audible is lost.
pub fn flush_denormals(samples: &mut [f32]) {
    for s in samples.iter_mut() {
        if s.abs() < FLUSH_BELOW {
            *s = 0.0;
        }
    }
}

/// Decodes bytes of a WAV, FLAC or MP3 file to mono, refusing (before decoding) a
/// stream outside `limits`.
pub fn decode(bytes: &[u8], limits: &AudioLimits) -> std::result::Result<Audio, String> {
    if bytes.len() >= 12 && &bytes[0..4] == b"RIFF" && &bytes[8..12] == b"WAVE" {
        decode_wav(bytes, limits)
    } else {
        decode_symphonia(bytes, limits)
    }
}

fn decode_wav(bytes: &[u8], limits: &AudioLimits) -> std::result::Result<Audio, String> {
    let reader = hound::WavReader::new(std::io::Cursor::new(bytes)).map_err(|e| e.to_string())?;
    let spec = reader.spec();
    let channels = spec.channels.max(1) as usize;
    // The header's frame count, capped by what the file can hold (a header may lie).
    let frame_bytes = channels as u64 * u64::from(spec.bits_per_sample).div_ceil(8).max(1);
    let frames = u64::from(reader.duration()).min(bytes.len() as u64 / frame_bytes);
    limits.check(spec.sample_rate, Some(frames))?;
    let interleaved: Vec<f32> = match spec.sample_format {
        hound::SampleFormat::Float => reader
            .into_samples::<f32>()
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| e.to_string())?,
        hound::SampleFormat::Int => {
            let scale = 1.0 / (1u64 << (spec.bits_per_sample - 1)) as f32;
            reader
                .into_samples::<i32>()
                .map(|s| s.map(|v| v as f32 * scale))
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| e.to_string())?
        }
    };
    Ok(Audio {
        samples: downmix(&interleaved, channels),
        sample_rate: spec.sample_rate,
    })
}

fn decode_symphonia(bytes: &[u8], limits: &AudioLimits) -> std::result::Result<Audio, String> {
    use symphonia::core::audio::SampleBuffer;
    use symphonia::core::codecs::DecoderOptions;
    use symphonia::core::formats::FormatOptions;
    use symphonia::core::io::MediaSourceStream;
    use symphonia::core::meta::MetadataOptions;
    use symphonia::core::probe::Hint;

    let source = MediaSourceStream::new(
        Box::new(std::io::Cursor::new(bytes.to_vec())),
        Default::default(),
    );
    let probed = symphonia::default::get_probe()
        .format(
            &Hint::new(),
            source,
            &FormatOptions::default(),
            &MetadataOptions::default(),
        )
        .map_err(|_| "not a recognised audio format".to_string())?;
    let mut format = probed.format;
    let track = format
        .default_track()
        .ok_or_else(|| "no audio track".to_string())?
        .clone();
    let mut decoder = symphonia::default::get_codecs()
        .make(&track.codec_params, &DecoderOptions::default())
        .map_err(|e| e.to_string())?;
    let mut sample_rate = track.codec_params.sample_rate.unwrap_or(0);
    if sample_rate != 0 {
        limits.check(sample_rate, track.codec_params.n_frames)?;
    }
    let mut samples = Vec::new();
    while let Ok(packet) = format.next_packet() {
        if packet.track_id() != track.id {
            continue;
        }
        let decoded = match decoder.decode(&packet) {
            Ok(d) => d,
            Err(symphonia::core::errors::Error::DecodeError(_)) => continue,
            Err(e) => return Err(e.to_string()),
        };
        let spec = *decoded.spec();
        if spec.rate != sample_rate || samples.is_empty() {
            limits.check(spec.rate, None)?;
        }
        sample_rate = spec.rate;
        // Streams without a stated length are bounded as they decode.
        limits.check(
            sample_rate,
            Some(samples.len() as u64 + decoded.frames() as u64),
        )?;
        let mut buf = SampleBuffer::<f32>::new(decoded.capacity() as u64, spec);
        buf.copy_interleaved_ref(decoded);
        samples.extend(downmix(buf.samples(), spec.channels.count().max(1)));
    }
    if sample_rate == 0 {
        return Err("unknown sample rate".into());
    }
    Ok(Audio {
        samples,
        sample_rate,
    })
}

/// Averages interleaved channels into one.
pub fn downmix(interleaved: &[f32], channels: usize) -> Vec<f32> {
    if channels <= 1 {
        return interleaved.to_vec();
    }
    interleaved
        .chunks_exact(channels)
        .map(|frame| frame.iter().sum::<f32>() / channels as f32)
        .collect()
}

/// Input frames per chunk the resampler is asked for (it rounds to its FFT's size).
const RESAMPLE_CHUNK: usize = 1024;

/// Resamples mono audio to `target_rate` (no-op when the rate already matches), with
/// the resampler's delay removed so output sample `i` is input time `i / target_rate`.
/// rubato's synchronous FFT resampler: a fixed rational ratio and an integer delay
/// (its sinc resampler's delay is fractional, half a sample at 16 to 24 kHz).
pub fn resample(audio: Audio, target_rate: u32) -> std::result::Result<Audio, String> {
    use rubato::Resampler;
    if audio.sample_rate == target_rate {
        return Ok(audio);
    }
    if audio.sample_rate == 0 || target_rate == 0 {
        return Err("sample rate is 0".into());
    }
    let (rate_in, rate_out) = (audio.sample_rate as usize, target_rate as usize);
    let mut r = rubato::FftFixedIn::<f32>::new(rate_in, rate_out, RESAMPLE_CHUNK, 2, 1)
        .map_err(|e| e.to_string())?;
    let delay = r.output_delay();
    let expected = (audio.samples.len() as f64 * rate_out as f64 / rate_in as f64).round() as usize;
    let mut out: Vec<f32> = Vec::with_capacity(expected + delay + 2 * rate_out);
    let mut at = 0;
    while out.len() < delay + expected {
        let n = r.input_frames_next();
        let mut chunk = vec![0f32; n];
        if at < audio.samples.len() {
            let take = n.min(audio.samples.len() - at);
            chunk[..take].copy_from_slice(&audio.samples[at..at + take]);
            at += take;
        }
        out.extend(
            r.process(&[chunk], None)
                .map_err(|e| e.to_string())?
                .remove(0),
        );
    }
    let samples: Vec<f32> = out.into_iter().skip(delay).take(expected).collect();
    Ok(Audio {
        samples,
        sample_rate: target_rate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wav_bytes(
        spec: hound::WavSpec,
        write: impl FnOnce(&mut hound::WavWriter<&mut std::io::Cursor<Vec<u8>>>),
    ) -> Vec<u8> {
        let mut cur = std::io::Cursor::new(Vec::new());
        {
            let mut w = hound::WavWriter::new(&mut cur, spec).unwrap();
            write(&mut w);
            w.finalize().unwrap();
        }
        cur.into_inner()
    }

    #[test]
    fn stereo_24bit_is_downmixed_and_scaled() {
        let spec = hound::WavSpec {
            channels: 2,
            sample_rate: 16000,
            bits_per_sample: 24,
            sample_format: hound::SampleFormat::Int,
        };
        let bytes = wav_bytes(spec, |w| {
            for _ in 0..100 {
                w.write_sample(4_194_304i32).unwrap(); // 0.5
                w.write_sample(0i32).unwrap();
            }
        });
        let a = decode(&bytes, &AudioLimits::default()).unwrap();
        assert_eq!(a.samples.len(), 100);
        assert!((a.samples[0] - 0.25).abs() < 1e-6, "{}", a.samples[0]);
    }

    #[test]
    fn float_wav_is_read_as_is() {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 8000,
            bits_per_sample: 32,
            sample_format: hound::SampleFormat::Float,
        };
        let bytes = wav_bytes(spec, |w| {
            for i in 0..10 {
                w.write_sample(i as f32 / 10.0).unwrap();
            }
        });
        let a = decode(&bytes, &AudioLimits::default()).unwrap();
        assert_eq!(a.sample_rate, 8000);
        assert_eq!(a.samples[3], 0.3);
    }

    #[test]
    fn resampling_keeps_length_and_frequency() {
        // 1 s of 440 Hz at 44.1 kHz -> 16 kHz: same duration, same zero-crossing count.
        let sr = 44100;
        let x: Vec<f32> = (0..sr)
            .map(|i| (2.0 * std::f32::consts::PI * 440.0 * i as f32 / sr as f32).sin())
            .collect();
        let y = resample(
            Audio {
                samples: x,
                sample_rate: sr,
            },
            16000,
        )
        .unwrap();
        assert_eq!(y.samples.len(), 16000);
        let crossings = y
            .samples
            .windows(2)
            .filter(|w| w[0] < 0.0 && w[1] >= 0.0)
            .count();
        assert!((438..=441).contains(&crossings), "{crossings}");
        // No shift beyond a sample: the output starts where the input does (sin 0 = 0, rising).
        assert!(
            y.samples[0].abs() < 0.15 && y.samples[2] > y.samples[0],
            "{:?}",
            &y.samples[..4]
        );
        let peak = y.samples[1000..15000]
            .iter()
            .fold(0f32, |m, v| m.max(v.abs()));
        assert!((peak - 1.0).abs() < 0.02, "{peak}");
    }

    #[test]
    fn subnormals_are_flushed() {
        let mut x = vec![1e-39f32, -1e-12, 0.5, -3e-5];
        flush_denormals(&mut x);
        assert_eq!(x, vec![0.0, 0.0, 0.5, -3e-5]);
    }

    fn mono16(rate: u32, samples: usize) -> Vec<u8> {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: rate,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        wav_bytes(spec, |w| {
            for i in 0..samples {
                w.write_sample((i % 100) as i16).unwrap();
            }
        })
    }

    #[test]
    fn a_rate_below_the_floor_is_refused_before_resampling() {
        // 1 Hz: 42,000 samples would become 11.7 hours (2.7 GB) at 16 kHz.
        let bytes = mono16(1, 42_000);
        let err = from_bytes(&bytes, 16000, &AudioLimits::default()).unwrap_err();
        assert!(
            err.contains("sample rate 1 Hz is below the limit of 4000 Hz"),
            "{err}"
        );
        assert!(err.contains("parameter 'min_sample_rate_hz'"), "{err}");
        let lowered = AudioLimits {
            min_sample_rate_hz: 1,
            max_duration_s: 10.0,
        };
        let err = from_bytes(&bytes, 16000, &lowered).unwrap_err();
        assert!(
            err.contains("over the limit of 10 s (max_audio_s)"),
            "{err}"
        );
        assert!(err.contains("parameter 'max_audio_s'"), "{err}");
    }

    #[test]
    fn the_duration_limit_reads_the_header_and_the_file_size() {
        let limits = AudioLimits {
            max_duration_s: 1.0,
            ..AudioLimits::default()
        };
        assert!(from_bytes(&mono16(8000, 7_999), 16000, &limits).is_ok());
        let err = from_bytes(&mono16(8000, 16_000), 16000, &limits).unwrap_err();
        assert!(err.contains("the audio is 2 s long"), "{err}");
        // A header claiming far more data than the file holds is judged by the file.
        let mut lying = mono16(8000, 4000);
        let n = lying.len();
        lying[40..44].copy_from_slice(&u32::MAX.to_le_bytes());
        let err = from_bytes(&lying, 16000, &limits).unwrap_err();
        assert!(!err.contains("long, over the limit"), "{err} ({n} bytes)");
    }

    #[test]
    fn limits_themselves_are_checked() {
        let zero = AudioLimits {
            max_duration_s: 0.0,
            ..AudioLimits::default()
        };
        assert!(zero.validate().is_err());
        let no_floor = AudioLimits {
            min_sample_rate_hz: 0,
            ..AudioLimits::default()
        };
        assert!(no_floor.validate().is_err());
        assert!(AudioLimits::default().validate().is_ok());
    }

    #[test]
    fn garbage_is_rejected() {
        let limits = AudioLimits::default();
        assert!(decode(b"this is not audio at all, just text", &limits).is_err());
        assert!(decode(b"RIFF\0\0\0\0WAVEfmt ", &limits).is_err());
    }
}
