//! Audio input: decode any common file to mono f32 at the model's sample rate.
//!
//! WAV in PCM (8/16/24/32-bit integer, 32-bit float, any channel count) goes through
//! `hound`; the other WAV encodings telephony and older tools write (64-bit float,
//! mu-law, A-law, IMA and Microsoft ADPCM), FLAC, MP3, AAC (in MP4/M4A or ADTS),
//! Vorbis and Opus (in Ogg or WebM/Matroska) through `symphonia`, Opus by libopus
//! (`audio_opus`); a WAV in any other encoding is refused with its name and the command
//! that converts it ([`WavEncoding`]), and so is a container holding a codec no decoder
//! here reads (ALAC, Speex...). Channels are
//! averaged, then the signal is resampled with `rubato`'s windowed-sinc resampler.
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

/// Decodes bytes of a WAV, FLAC, MP3, AAC (MP4/M4A, ADTS), Vorbis or Opus (Ogg, WebM) file to
/// mono, refusing (before decoding) a stream outside `limits`.
pub fn decode(bytes: &[u8], limits: &AudioLimits) -> std::result::Result<Audio, String> {
    if bytes.len() >= 12 && &bytes[0..4] == b"RIFF" && &bytes[8..12] == b"WAVE" {
        decode_wav(bytes, limits)
    } else {
        decode_symphonia(bytes, limits)
    }
}

/// What converts an audio file to a WAV every decoder here reads.
const CONVERT_HINT: &str =
    "convert it to 16-bit PCM, e.g. `ffmpeg -i IN -c:a pcm_s16le OUT.wav` or `sox IN -e signed-integer -b 16 OUT.wav`";

/// A WAV file's encoding, from its `fmt ` chunk (the sub-format of
/// `WAVE_FORMAT_EXTENSIBLE` taken for its tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WavEncoding {
    /// The format tag (1 PCM, 3 IEEE float, 6 A-law, 7 mu-law, 2 and 0x11 ADPCM...).
    pub tag: u16,
    /// Bits per sample as the header states them.
    pub bits: u16,
}

/// Which decoder reads a WAV encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WavDecoder {
    Hound,
    Symphonia,
}

impl WavEncoding {
    /// The encoding of the WAV file in `bytes` (which start `RIFF....WAVE`), `None` when
    /// no complete `fmt ` chunk is found.
    pub fn of(bytes: &[u8]) -> Option<WavEncoding> {
        let u16_at = |at: usize| Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?));
        let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
        let mut at = 12usize;
        while at.checked_add(8)? <= bytes.len() {
            let size = u32_at(at + 4)? as usize;
            if &bytes[at..at + 4] == b"fmt " {
                let body = at + 8;
                if size < 16 {
                    return None;
                }
                let mut tag = u16_at(body)?;
                let bits = u16_at(body + 14)?;
                if tag == 0xfffe && size >= 40 {
                    tag = u16_at(body + 24)?;
                }
                return Some(WavEncoding { tag, bits });
            }
            // Chunks are padded to an even size.
            at = at
                .checked_add(8)?
                .checked_add(size)?
                .checked_add(size & 1)?;
        }
        None
    }

    /// The encoding's name, as tools print it.
    pub fn name(&self) -> String {
        match (self.tag, self.bits) {
            (1, b) => format!("{b}-bit PCM"),
            (3, b) => format!("{b}-bit float"),
            (2, _) => "Microsoft ADPCM".into(),
            (6, _) => "A-law".into(),
            (7, _) => "mu-law".into(),
            (0x11, _) => "IMA ADPCM".into(),
            (0x31, _) => "GSM 6.10".into(),
            (0x40, _) => "G.721 ADPCM".into(),
            (0x50, _) => "MPEG audio".into(),
            (0x55, _) => "MP3".into(),
            (0x161..=0x163, _) => "Windows Media Audio".into(),
            (0xff, _) | (0x1610, _) => "AAC".into(),
            (0x2000, _) => "AC-3".into(),
            (0xf1ac, _) => "FLAC".into(),
            (tag, _) => format!("an unknown encoding (format tag 0x{tag:04x})"),
        }
    }

    /// The decoder that reads it; `None` when none here does.
    fn decoder(&self) -> Option<WavDecoder> {
        match (self.tag, self.bits) {
            (1, 8 | 16 | 24 | 32) | (3, 32) => Some(WavDecoder::Hound),
            (3, 64) | (6, 8) | (7, 8) | (2, 4) | (0x11, 4) => Some(WavDecoder::Symphonia),
            _ => None,
        }
    }
}

fn decode_wav(bytes: &[u8], limits: &AudioLimits) -> std::result::Result<Audio, String> {
    if let Some(encoding) = WavEncoding::of(bytes) {
        match encoding.decoder() {
            Some(WavDecoder::Hound) => {}
            Some(WavDecoder::Symphonia) => {
                return decode_symphonia(bytes, limits)
                    .map_err(|e| format!("a {} WAV that does not decode ({e})", encoding.name()))
            }
            None => {
                return Err(format!(
                    "a WAV in {}, which is not read here (WAVs are read in 8, 16, 24 and 32-bit PCM, 32 and 64-bit float, mu-law, A-law and IMA or Microsoft ADPCM); {CONVERT_HINT}",
                    encoding.name()
                ))
            }
        }
    }
    let reader = hound::WavReader::new(std::io::Cursor::new(bytes))
        .map_err(|e| format!("a WAV whose header does not read ({e}); {CONVERT_HINT}"))?;
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
    use symphonia::core::codecs::{DecoderOptions, CODEC_TYPE_NULL};
    use symphonia::core::formats::FormatOptions;
    use symphonia::core::io::MediaSourceStream;
    use symphonia::core::meta::MetadataOptions;
    use symphonia::core::probe::Hint;

    let source = MediaSourceStream::new(
        Box::new(std::io::Cursor::new(bytes.to_vec())),
        Default::default(),
    );
    // Gapless: the encoder's delay and padding (an MP3's LAME header) are cut, so the
    // samples start where the recording did (Whisper tiny.en loses a clip's first word
    // to 70 ms of delay).
    let options = FormatOptions {
        enable_gapless: true,
        ..FormatOptions::default()
    };
    let probed = symphonia::default::get_probe()
        .format(&Hint::new(), source, &options, &MetadataOptions::default())
        .map_err(|_| "not a recognised audio format".to_string())?;
    let mut format = probed.format;
    // The first track with a codec: a video's picture track (MP4, WebM) has none here.
    let track = format
        .tracks()
        .iter()
        .find(|t| t.codec_params.codec != CODEC_TYPE_NULL)
        .ok_or_else(|| "no audio track".to_string())?
        .clone();
    let codecs = crate::audio_opus::codecs();
    if codecs.get_codec(track.codec_params.codec).is_none() {
        return Err(format!(
            "audio in {}, which is not read here; {CONVERT_HINT}",
            codec_name(track.codec_params.codec)
        ));
    }
    let mut decoder = codecs
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

/// A codec's name as tools print it, for one no decoder here reads.
fn codec_name(codec: symphonia::core::codecs::CodecType) -> String {
    use symphonia::core::codecs as c;
    let name = match codec {
        c::CODEC_TYPE_SPEEX => "Speex",
        c::CODEC_TYPE_ALAC => "ALAC",
        c::CODEC_TYPE_MP1 => "MPEG-1 Layer I",
        c::CODEC_TYPE_MP2 => "MPEG-1 Layer II",
        c::CODEC_TYPE_EAC3 => "E-AC-3",
        c::CODEC_TYPE_AC4 => "AC-4",
        c::CODEC_TYPE_DCA => "DTS",
        c::CODEC_TYPE_WMA => "Windows Media Audio",
        c::CODEC_TYPE_WAVPACK => "WavPack",
        c::CODEC_TYPE_MONKEYS_AUDIO => "Monkey's Audio",
        c::CODEC_TYPE_TTA => "TTA",
        c::CODEC_TYPE_MUSEPACK => "Musepack",
        c::CODEC_TYPE_ATRAC1
        | c::CODEC_TYPE_ATRAC3
        | c::CODEC_TYPE_ATRAC3PLUS
        | c::CODEC_TYPE_ATRAC9 => "ATRAC",
        other => return format!("an unknown codec ({other})"),
    };
    name.into()
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

    /// A mono WAV file: `fmt ` with `tag`, `bits`, `block_align` and the extra bytes
    /// `fmt_extra` (cbSize included), a `fact` chunk of `frames`, and `data`.
    fn riff(
        tag: u16,
        bits: u16,
        block_align: u16,
        fmt_extra: &[u8],
        frames: u32,
        data: &[u8],
    ) -> Vec<u8> {
        let rate = 8000u32;
        let mut fmt = Vec::new();
        fmt.extend_from_slice(&tag.to_le_bytes());
        fmt.extend_from_slice(&1u16.to_le_bytes());
        fmt.extend_from_slice(&rate.to_le_bytes());
        fmt.extend_from_slice(&(rate * u32::from(block_align)).to_le_bytes());
        fmt.extend_from_slice(&block_align.to_le_bytes());
        fmt.extend_from_slice(&bits.to_le_bytes());
        fmt.extend_from_slice(fmt_extra);
        let mut body = b"WAVE".to_vec();
        for (id, chunk) in [
            (b"fmt ", fmt),
            (b"fact", frames.to_le_bytes().to_vec()),
            (b"data", data.to_vec()),
        ] {
            body.extend_from_slice(id);
            body.extend_from_slice(&(chunk.len() as u32).to_le_bytes());
            body.extend_from_slice(&chunk);
            if chunk.len() % 2 == 1 {
                body.push(0);
            }
        }
        let mut out = b"RIFF".to_vec();
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend(body);
        out
    }

    /// A 400 Hz tone at 8 kHz, amplitude 0.6: the signal the encodings below carry.
    fn tone(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| 0.6 * (i as f32 * 400.0 * std::f32::consts::TAU / 8000.0).sin())
            .collect()
    }

    /// G.711 mu-law of a 16-bit sample (ITU-T G.711, the segment encoder).
    fn mulaw(x: i16) -> u8 {
        let sign = if x < 0 { 0x80 } else { 0 };
        let mag = (i32::from(x).abs().min(32635) + 0x84) as u32;
        let exp = (31 - mag.leading_zeros()).saturating_sub(7).min(7);
        let mant = (mag >> (exp + 3)) & 0x0f;
        !(sign | (exp << 4) as u8 | mant as u8)
    }

    /// G.711 A-law of a 16-bit sample.
    fn alaw(x: i16) -> u8 {
        let sign = if x >= 0 { 0x80 } else { 0 };
        let mag = (i32::from(x).abs().min(32767) >> 3) as u32;
        let byte = if mag < 32 {
            (mag >> 1) as u8
        } else {
            let exp = (31 - mag.leading_zeros()) - 4;
            ((exp << 4) | ((mag >> exp) & 0x0f)) as u8
        };
        (sign | byte) ^ 0x55
    }

    /// IMA ADPCM blocks (mono, `block` bytes each) of 16-bit samples.
    fn ima_adpcm(samples: &[i16], block: usize) -> Vec<u8> {
        const STEPS: [i32; 89] = [
            7, 8, 9, 10, 11, 12, 13, 14, 16, 17, 19, 21, 23, 25, 28, 31, 34, 37, 41, 45, 50, 55,
            60, 66, 73, 80, 88, 97, 107, 118, 130, 143, 157, 173, 190, 209, 230, 253, 279, 307,
            337, 371, 408, 449, 494, 544, 598, 658, 724, 796, 876, 963, 1060, 1166, 1282, 1411,
            1552, 1707, 1878, 2066, 2272, 2499, 2749, 3024, 3327, 3660, 4026, 4428, 4871, 5358,
            5894, 6484, 7132, 7845, 8630, 9493, 10442, 11487, 12635, 13899, 15289, 16818, 18500,
            20350, 22385, 24623, 27086, 29794, 32767,
        ];
        const INDEX: [i32; 8] = [-1, -1, -1, -1, 2, 4, 6, 8];
        let per_block = 1 + (block - 4) * 2;
        let mut out = Vec::new();
        let mut index = 0i32;
        for chunk in samples.chunks(per_block) {
            let mut pred = i32::from(chunk[0]);
            out.extend_from_slice(&(pred as i16).to_le_bytes());
            out.extend_from_slice(&[index as u8, 0]);
            let mut nibbles = Vec::new();
            for &x in &chunk[1..] {
                let step = STEPS[index as usize];
                let mut diff = i32::from(x) - pred;
                let mut nib = 0;
                if diff < 0 {
                    nib = 8;
                    diff = -diff;
                }
                let mut delta = step >> 3;
                for (bit, s) in [(4, step), (2, step >> 1), (1, step >> 2)] {
                    if diff >= s {
                        nib |= bit;
                        diff -= s;
                        delta += s;
                    }
                }
                pred = (if nib & 8 != 0 {
                    pred - delta
                } else {
                    pred + delta
                })
                .clamp(-32768, 32767);
                index = (index + INDEX[nib as usize & 7]).clamp(0, 88);
                nibbles.push(nib as u8);
            }
            nibbles.resize(per_block - 1, 0);
            out.extend(nibbles.chunks(2).map(|p| p[0] | (p[1] << 4)));
        }
        out
    }

    /// The decoded samples are `want` within `tolerance`.
    fn assert_close(got: &[f32], want: &[f32], tolerance: f32, what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: length");
        let worst = got
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst <= tolerance, "{what}: off by {worst}");
    }

    #[test]
    fn telephony_and_64_bit_float_wavs_decode() {
        let limits = AudioLimits::default();
        let x = tone(1600);
        let pcm: Vec<i16> = x.iter().map(|v| (v * 32767.0).round() as i16).collect();
        let law = |f: fn(i16) -> u8| pcm.iter().map(|&v| f(v)).collect::<Vec<u8>>();
        for (tag, data, name) in [(7, law(mulaw), "mu-law"), (6, law(alaw), "A-law")] {
            let bytes = riff(tag, 8, 1, &0u16.to_le_bytes(), 1600, &data);
            assert_eq!(WavEncoding::of(&bytes).unwrap().name(), name);
            let a = decode(&bytes, &limits).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(a.sample_rate, 8000);
            // 8-bit logarithmic: within 1/16 of the value (plus the smallest step).
            assert_close(&a.samples, &x, 0.6 / 16.0 + 0.002, name);
        }
        let f64_data: Vec<u8> = x.iter().flat_map(|v| f64::from(*v).to_le_bytes()).collect();
        let bytes = riff(3, 64, 8, &0u16.to_le_bytes(), 1600, &f64_data);
        assert_eq!(WavEncoding::of(&bytes).unwrap().name(), "64-bit float");
        assert_close(&decode(&bytes, &limits).unwrap().samples, &x, 1e-6, "f64");
        let block = 256;
        let per_block = 1 + (block - 4) * 2;
        let adpcm = ima_adpcm(&pcm[..per_block * 3], block);
        let extra: Vec<u8> = [2u16, per_block as u16]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let bytes = riff(
            0x11,
            4,
            block as u16,
            &extra,
            (per_block * 3) as u32,
            &adpcm,
        );
        assert_eq!(WavEncoding::of(&bytes).unwrap().name(), "IMA ADPCM");
        let a = decode(&bytes, &limits).unwrap();
        let want = &x[..per_block * 3];
        assert_eq!(a.samples.len(), want.len());
        // 4-bit ADPCM starts with its smallest step: the tone is followed at better than
        // 20 dB once the step has grown (a few samples).
        let power = |v: &mut dyn Iterator<Item = f32>| v.map(|e| e * e).sum::<f32>();
        let noise = power(&mut a.samples.iter().zip(want).map(|(g, w)| g - w));
        let signal = power(&mut want.iter().copied());
        assert!(
            10.0 * (signal / noise).log10() > 20.0,
            "IMA ADPCM: {} dB",
            10.0 * (signal / noise).log10()
        );
    }

    #[test]
    fn wavs_in_other_encodings_are_refused_by_name_with_the_remedy() {
        for (tag, bits, name) in [
            (0x31, 0, "GSM 6.10"),
            (0x55, 0, "MP3"),
            (1, 12, "12-bit PCM"),
            (0x1234, 8, "format tag 0x1234"),
        ] {
            let bytes = riff(tag, bits, 1, &0u16.to_le_bytes(), 16, &[0u8; 16]);
            let err = decode(&bytes, &AudioLimits::default()).unwrap_err();
            assert!(err.contains(name), "{err}");
            assert!(err.contains("ffmpeg -i IN -c:a pcm_s16le OUT.wav"), "{err}");
            assert!(err.contains("mu-law, A-law"), "{err}");
        }
        // WAVE_FORMAT_EXTENSIBLE names its encoding in the sub-format.
        let mut ext = 22u16.to_le_bytes().to_vec();
        ext.extend_from_slice(&8u16.to_le_bytes());
        ext.extend_from_slice(&0u32.to_le_bytes());
        ext.extend_from_slice(&7u16.to_le_bytes());
        ext.extend_from_slice(&[0u8; 14]);
        let bytes = riff(0xfffe, 8, 1, &ext, 0, &[]);
        assert_eq!(WavEncoding::of(&bytes).unwrap().tag, 7);
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

    /// A compressed fixture of the ASR phrase clip (4.33 s; test-support/fixtures/formats).
    fn fixture(name: &str) -> Vec<u8> {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../test-support/fixtures/formats")
            .join(name);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    #[test]
    fn compressed_containers_decode_to_the_whole_clip() {
        let limits = AudioLimits::default();
        for (name, rate) in [
            ("phrase.m4a", 16000),
            ("phrase.aac", 16000),
            ("phrase.mp3", 16000),
            ("phrase.ogg", 16000),
            ("phrase_vorbis.webm", 16000),
            ("phrase.opus", 48000),
            ("phrase_opus.webm", 48000),
        ] {
            let audio = decode(&fixture(name), &limits).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(audio.sample_rate, rate, "{name}");
            // Encoder priming and padding add at most a few frames to the 4.33 s clip.
            let seconds = audio.duration_s();
            assert!((4.3..4.5).contains(&seconds), "{name}: {seconds} s");
            let rms = (audio.samples.iter().map(|x| x * x).sum::<f32>()
                / audio.samples.len() as f32)
                .sqrt();
            assert!(rms > 0.01, "{name}: rms {rms}");
        }
        // Opus less its pre-skip: the clip's 69325 samples at 16 kHz, at 48 kHz; exactly
        // from Ogg (its last page states the end), and from WebM with the last frame's
        // padding (symphonia 0.5 reads no DiscardPadding), less than a 20 ms frame.
        let ogg = decode(&fixture("phrase.opus"), &limits).unwrap();
        assert_eq!(ogg.samples.len(), 3 * 69325);
        let webm = decode(&fixture("phrase_opus.webm"), &limits).unwrap();
        assert!((3 * 69325..3 * 69325 + 960).contains(&webm.samples.len()));
        assert_eq!(webm.samples[..ogg.samples.len()], ogg.samples[..]);
    }

    #[test]
    fn a_codec_nothing_here_reads_is_refused_by_name() {
        let limits = AudioLimits::default();
        let err = decode(&fixture("clip_alac.m4a"), &limits).unwrap_err();
        assert!(
            err.contains("audio in ALAC, which is not read here") && err.contains("ffmpeg"),
            "{err}"
        );
        assert!(!err.contains('\n'), "one line: {err}");
    }
}
