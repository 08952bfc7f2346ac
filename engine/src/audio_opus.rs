//! Opus for symphonia: a `Decoder` over libopus (the `opus` crate), registered beside
//! symphonia's own codecs, so the Ogg and WebM/Matroska readers symphonia already has
//! deliver Opus packets to it. Mono and stereo streams (channel mapping family 0, what
//! every recorder writes) are decoded at Opus's 48 kHz, less the pre-skip the header
//! states (the encoder's delay, which symphonia 0.5's Ogg and Matroska readers leave
//! in).

use std::sync::{Mutex, OnceLock};

use symphonia::core::audio::{AsAudioBufferRef, AudioBuffer, AudioBufferRef, Signal, SignalSpec};
use symphonia::core::codecs::{
    CodecDescriptor, CodecParameters, CodecRegistry, Decoder, DecoderOptions, FinalizeResult,
    CODEC_TYPE_OPUS,
};
use symphonia::core::errors::{decode_error, unsupported_error, Result};
use symphonia::core::formats::Packet;

/// Opus's decoding rate.
const RATE: u32 = 48_000;
/// The longest Opus packet: 120 ms at 48 kHz.
const MAX_FRAMES: usize = 5760;

/// symphonia's codecs with Opus added.
pub fn codecs() -> &'static CodecRegistry {
    static CODECS: OnceLock<CodecRegistry> = OnceLock::new();
    CODECS.get_or_init(|| {
        let mut registry = CodecRegistry::new();
        symphonia::default::register_enabled_codecs(&mut registry);
        registry.register_all::<OpusDecoder>();
        registry
    })
}

/// One Opus stream's decoder.
struct OpusDecoder {
    params: CodecParameters,
    /// libopus's decoder is `Send` but not `Sync`; symphonia asks for both.
    opus: Mutex<opus::Decoder>,
    channels: usize,
    /// Samples of the pre-skip still to drop.
    skip: usize,
    interleaved: Vec<f32>,
    buf: AudioBuffer<f32>,
}

/// The channel count and pre-skip an `OpusHead` (RFC 7845, section 5.1) states.
fn head(extra: &[u8]) -> Option<(usize, usize)> {
    (extra.len() >= 19 && &extra[..8] == b"OpusHead").then(|| {
        let pre_skip = u16::from_le_bytes([extra[10], extra[11]]);
        (usize::from(extra[9]), usize::from(pre_skip))
    })
}

impl Decoder for OpusDecoder {
    fn try_new(params: &CodecParameters, _: &DecoderOptions) -> Result<Self> {
        let (channels, skip) = params
            .extra_data
            .as_deref()
            .and_then(head)
            .or_else(|| params.channels.map(|c| (c.count(), 0)))
            .unwrap_or((0, 0));
        let (layout, spec_channels) = match channels {
            1 => (
                opus::Channels::Mono,
                symphonia::core::audio::Channels::FRONT_LEFT,
            ),
            2 => (
                opus::Channels::Stereo,
                symphonia::core::audio::Channels::FRONT_LEFT
                    | symphonia::core::audio::Channels::FRONT_RIGHT,
            ),
            _ => return unsupported_error("opus: only mono and stereo streams are read"),
        };
        let opus = opus::Decoder::new(RATE, layout)
            .or_else(|_| unsupported_error("opus: libopus refused the stream"))?;
        Ok(OpusDecoder {
            params: params.clone(),
            opus: Mutex::new(opus),
            channels,
            skip,
            interleaved: vec![0.0; MAX_FRAMES * channels],
            buf: AudioBuffer::new(MAX_FRAMES as u64, SignalSpec::new(RATE, spec_channels)),
        })
    }

    fn supported_codecs() -> &'static [CodecDescriptor] {
        &[CodecDescriptor {
            codec: CODEC_TYPE_OPUS,
            short_name: "opus",
            long_name: "Opus (libopus)",
            inst_func: |params, options| Ok(Box::new(OpusDecoder::try_new(params, options)?)),
        }]
    }

    fn reset(&mut self) {
        if let Ok(mut opus) = self.opus.lock() {
            let _ = opus.reset_state();
        }
    }

    fn codec_params(&self) -> &CodecParameters {
        &self.params
    }

    fn decode(&mut self, packet: &Packet) -> Result<AudioBufferRef<'_>> {
        let frames = {
            let Ok(mut opus) = self.opus.lock() else {
                return decode_error("opus: the decoder failed before");
            };
            match opus.decode_float(&packet.data, &mut self.interleaved, false) {
                Ok(n) => n,
                Err(_) => return decode_error("opus: a packet that does not decode"),
            }
        };
        self.buf.clear();
        self.buf.render_reserved(Some(frames));
        for ch in 0..self.channels {
            let plane = self.buf.chan_mut(ch);
            for (i, s) in plane.iter_mut().enumerate() {
                *s = self.interleaved[i * self.channels + ch];
            }
        }
        let skip = self.skip.min(frames);
        self.skip -= skip;
        self.buf.trim(
            skip + packet.trim_start() as usize,
            packet.trim_end() as usize,
        );
        Ok(self.buf.as_audio_buffer_ref())
    }

    fn finalize(&mut self) -> FinalizeResult {
        FinalizeResult::default()
    }

    fn last_decoded(&self) -> AudioBufferRef<'_> {
        self.buf.as_audio_buffer_ref()
    }
}
