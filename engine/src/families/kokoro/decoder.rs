//! Kokoro's decoder (StyleTTS 2 with iSTFTNet): from the aligned text features `asr`,
//! the predicted F0 and energy (N) curves and the decoder half of the style vector to
//! 24 kHz samples, `frames * 600` of them.
//!
//! The network runs as one ggml graph through the scheduler: F0_conv/N_conv (stride 2
//! back to the frame rate), `encode` and four `decode` AdainResBlk1d blocks (the last
//! doubling time) fed the 1x1 `asr_res` features and the curves again, the generator
//! ([`super::generator`]) and the inverse STFT's overlap-add ([`super::istft`]). Two
//! steps run on the host: the harmonic source and its forward STFT ([`super::source`],
//! f64 phase accumulation and atan2, which ggml lacks), and the iSTFT's edge division
//! and crop.

use crate::error::{EngineError, Result};
use crate::ggml::{profile, Context, DType, GgufValue, Scheduler, Tensor};

use super::adain::{expect_shape, AdainResBlk1d, Conv1d, WeightLookup};
use super::generator::{Generator, GeneratorConfig, Spectrum};
use super::istft::InverseStft;
use super::source::{harmonic_source, source_stft, SourceParams};

/// Upper bound of graph nodes for one utterance (the graph does not grow with length).
pub(super) const GRAPH_NODES: usize = 8192;

/// The most frames one decoder pass takes (100 s of Kokoro's audio, 40 frames a second): the
/// graph holds about 1 MB per frame at its widest (the last stage's kernel-11
/// convolutions), so a longer utterance is refused rather than allocating without bound.
pub const MAX_FRAMES: usize = 4000;

/// The decoder's hyper-parameters beyond what its weight shapes tell.
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L262-L265
/// (`Generator.m_source`: 24 kHz, 8 harmonics above F0, voicing threshold 10) and L123-L124
/// (`SineGen`'s `sine_amp`).
#[derive(Debug, Clone)]
pub struct DecoderConfig {
    /// The generator's strides, dilations and iSTFT hop.
    pub generator: GeneratorConfig,
    /// Output sample rate in Hz.
    pub sample_rate: u32,
    /// Sine amplitude of the harmonic source.
    pub sine_amp: f64,
    /// F0 (Hz) at or below which the source is silent.
    pub voiced_threshold: f64,
}

impl DecoderConfig {
    /// Kokoro-82M v1.0: 24 kHz, hn-NSF with amplitude 0.1 and a 10 Hz voicing threshold.
    pub fn kokoro_v1() -> Self {
        DecoderConfig {
            generator: GeneratorConfig::kokoro_v1(),
            sample_rate: 24000,
            sine_amp: 0.1,
            voiced_threshold: 10.0,
        }
    }

    /// The converter's `kokoro.*` metadata (`upsample_rates`, `resblock_dilations`,
    /// `hop_length`, `sample_rate`) over the v1.0 values; the source's amplitude and
    /// voicing threshold are not in the file (they are hn-NSF constants of the model).
    pub fn from_metadata(metadata: &[(String, GgufValue)]) -> Result<Self> {
        let mut cfg = Self::kokoro_v1();
        let find = |key: &str| {
            metadata
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        let bad = |key: &str, v: &GgufValue| EngineError::BadSpec {
            origin: "kokoro".into(),
            reason: format!("metadata '{key}' is {v:?}, expected positive integers"),
        };
        let list = |key: &str| -> Result<Option<Vec<i32>>> {
            match find(key) {
                None => Ok(None),
                Some(GgufValue::U32Array(v))
                    if !v.is_empty() && v.iter().all(|&x| x > 0 && x < 1 << 16) =>
                {
                    Ok(Some(v.iter().map(|&x| x as i32).collect()))
                }
                Some(v) => Err(bad(key, &v)),
            }
        };
        let scalar = |key: &str| -> Result<Option<u32>> {
            match find(key) {
                None => Ok(None),
                Some(GgufValue::U32(x)) if x > 0 && x < 1 << 20 => Ok(Some(x)),
                Some(v) => Err(bad(key, &v)),
            }
        };
        if let Some(v) = list("kokoro.upsample_rates")? {
            cfg.generator.upsample_rates = v;
        }
        if let Some(v) = list("kokoro.resblock_dilations")? {
            cfg.generator.resblock_dilations = v;
        }
        if let Some(v) = scalar("kokoro.hop_length")? {
            cfg.generator.istft_hop = v as i32;
        }
        if let Some(v) = scalar("kokoro.sample_rate")? {
            cfg.sample_rate = v;
        }
        Ok(cfg)
    }

    /// Output samples per F0 value: the generator's upsampling times the iSTFT hop.
    pub fn samples_per_f0(&self) -> usize {
        let up: i32 = self.generator.upsample_rates.iter().product();
        (up * self.generator.istft_hop) as usize
    }
}

/// What the decoder reads for one utterance (host data).
#[derive(Debug, Clone, Copy)]
pub struct DecoderInput<'i> {
    /// The aligned text features [frames, channels] in ggml order (time fastest:
    /// `asr[c * frames + t]`), i.e. the ONNX `asr` [1, channels, frames] as stored.
    pub asr: &'i [f32],
    /// Frames of `asr` (the F0 and N curves have twice as many values).
    pub frames: usize,
    /// Predicted F0 in Hz, `2 * frames` values.
    pub f0: &'i [f32],
    /// Predicted energy, `2 * frames` values.
    pub n: &'i [f32],
    /// The decoder half of the voice's style row (`style[..128]`).
    pub style: &'i [f32],
}

/// The decoder's result, with the intermediates the numeric checks compare.
#[derive(Debug, Clone)]
pub struct DecoderOutput {
    /// The waveform, `frames * samples_per_frame` samples at the sample rate.
    pub samples: Vec<f32>,
    /// The merged harmonic source, one value per output sample.
    pub source: Vec<f32>,
    /// The generator's magnitude [L, bins] in ggml order (`mag[k * L + t]`).
    pub magnitude: Vec<f32>,
    /// The generator's phase (`sin` of conv_post), same layout.
    pub phase: Vec<f32>,
}

/// The graph inputs of [`Decoder::build`].
#[derive(Clone, Copy)]
pub struct DecoderTensors<'a> {
    /// The aligned text features [frames, C] (time fastest).
    pub asr: Tensor<'a>,
    /// F0 [2 * frames, 1].
    pub f0: Tensor<'a>,
    /// Energy [2 * frames, 1].
    pub n: Tensor<'a>,
    /// The source STFT [2 * frames * prod(rates) + 1, 2 * bins]: magnitudes, then phases.
    pub source: Tensor<'a>,
    /// The decoder style [style_dim].
    pub style: Tensor<'a>,
}

/// Kokoro's decoder: the checked weight names and the hyper-parameters.
///
/// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L384-L405
/// (`Decoder.__init__`).
#[derive(Debug, Clone)]
pub struct Decoder {
    f0_conv: Conv1d,
    n_conv: Conv1d,
    asr_res: Conv1d,
    encode: AdainResBlk1d,
    decode: Vec<AdainResBlk1d>,
    generator: Generator,
    istft: InverseStft,
    merge_weight: String,
    merge_bias: String,
    cfg: DecoderConfig,
    /// Channels of `asr`.
    pub asr_channels: i64,
    /// Length of the style vector it reads.
    pub style_dim: i64,
}

impl Decoder {
    /// Checks and records the decoder's weights under `prefix` (`decoder.decoder`).
    pub fn load(w: &dyn WeightLookup, prefix: &str, cfg: DecoderConfig) -> Result<Self> {
        let f0_conv = Conv1d::load(w, prefix, "F0_conv", true, 2, 1)?;
        let n_conv = Conv1d::load(w, prefix, "N_conv", true, 2, 1)?;
        let asr_res = Conv1d::load(w, &format!("{prefix}.asr_res"), "0", true, 1, 1)?;
        let encode = AdainResBlk1d::load(w, &format!("{prefix}.encode"), false)?;
        let mut decode = Vec::new();
        let mut i = 0;
        while w
            .tensor(&format!("{prefix}.decode.{i}.conv1.weight"))
            .is_ok()
        {
            let upsample = w
                .tensor(&format!("{prefix}.decode.{i}.pool.weight"))
                .is_ok();
            decode.push(AdainResBlk1d::load(
                w,
                &format!("{prefix}.decode.{i}"),
                upsample,
            )?);
            i += 1;
        }
        let asr_channels = asr_res.in_channels;
        let want_encode_in = asr_channels + 2;
        if encode.dim_in != want_encode_in || decode.is_empty() {
            return Err(EngineError::BadSpec {
                origin: "kokoro".into(),
                reason: format!(
                    "'{prefix}': encode reads {} channels (expected {want_encode_in}), {} decode blocks",
                    encode.dim_in,
                    decode.len()
                ),
            });
        }
        let generator = Generator::load(w, &format!("{prefix}.generator"), &cfg.generator)?;
        let istft = InverseStft::load(
            w,
            &format!("{prefix}.generator.stft.istft.stft"),
            cfg.generator.istft_hop as usize,
        )?;
        let source_prefix = format!("{prefix}.generator.m_source.l_linear");
        let merge_weight = format!("{source_prefix}.weight");
        let harmonics = w.tensor(&merge_weight)?.ne()[1];
        let merge_weight = expect_shape(w, &merge_weight, &[1, harmonics])?;
        let merge_bias = expect_shape(w, &format!("{source_prefix}.bias"), &[1])?;
        if generator.source_channels != 2 * (istft.n_fft as i64 / 2 + 1) {
            return Err(EngineError::BadSpec {
                origin: "kokoro".into(),
                reason: format!(
                    "the noise convolutions read {} channels, the iSTFT has n_fft {}",
                    generator.source_channels, istft.n_fft
                ),
            });
        }
        let style_dim = encode_style_dim(w, prefix)?;
        Ok(Decoder {
            f0_conv,
            n_conv,
            asr_res,
            encode,
            decode,
            generator,
            istft,
            merge_weight,
            merge_bias,
            cfg,
            asr_channels,
            style_dim,
        })
    }

    /// Output samples per `asr` frame (600): two F0 values per frame.
    pub fn samples_per_frame(&self) -> usize {
        2 * self.cfg.samples_per_f0()
    }

    /// The harmonic source's parameters, with the merge layer read from the weights.
    ///
    /// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L238
    /// (`SourceModuleHnNSF.l_linear`).
    pub fn source_params(&self, w: &dyn WeightLookup) -> Result<SourceParams> {
        let weights = w.tensor(&self.merge_weight)?.read_f32_converted()?;
        let bias = w.tensor(&self.merge_bias)?.read_f32_converted()?;
        Ok(SourceParams {
            sample_rate: self.cfg.sample_rate as f64,
            upsample: self.cfg.samples_per_f0(),
            merge_weights: weights.iter().map(|&v| v as f64).collect(),
            merge_bias: bias[0] as f64,
            sine_amp: self.cfg.sine_amp,
            voiced_threshold: self.cfg.voiced_threshold,
        })
    }

    /// The decoder network as a graph; returns the generator's spectrum and the raw
    /// iSTFT overlap-add.
    ///
    /// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/istftnet.py L407-L421
    /// (`Decoder.forward`).
    pub fn build<'a>(
        &self,
        ctx: &'a Context,
        w: &'a dyn WeightLookup,
        inputs: &DecoderTensors<'a>,
    ) -> Result<(Spectrum<'a>, Tensor<'a>)> {
        let DecoderTensors {
            asr,
            f0,
            n,
            source,
            style,
        } = *inputs;
        let f0_frames = self.f0_conv.build(ctx, w, f0)?; // [frames, 1]
        let n_frames = self.n_conv.build(ctx, w, n)?;
        let curves = ctx.concat(f0_frames, n_frames, 1);
        let mut x = self
            .encode
            .build(ctx, w, ctx.concat(asr, curves, 1), style)?;
        let asr_res = self.asr_res.build(ctx, w, asr)?;
        let mut feed = true;
        for block in &self.decode {
            if feed {
                x = ctx.concat(ctx.concat(x, asr_res, 1), curves, 1);
            }
            x = block.build(ctx, w, x, style)?;
            if block.upsamples() {
                feed = false;
            }
        }
        profile::mark_stage(x, "decode_blocks");
        let spectrum = self.generator.build(ctx, w, x, source, style)?;
        let raw = self
            .istft
            .build(ctx, w, spectrum.magnitude, spectrum.phase)?;
        Ok((spectrum, raw))
    }

    /// The whole decoder for one utterance: the harmonic source and its STFT on the
    /// host (or `source_stft_override`, [frames, 2 * bins] time fastest, to feed a
    /// reference's), the graph on `sched` (kept by the caller, so its buffers outlive a sentence), then the iSTFT's edge fix and crop.
    ///
    /// Upstream: `hexgrad/kokoro@dfb907a02bba` kokoro/model.py L118 (the decoder call),
    /// with the source steps of kokoro/istftnet.py L300-L305 (`Generator.forward`).
    pub fn synthesize(
        &self,
        sched: &mut Scheduler,
        w: &dyn WeightLookup,
        input: &DecoderInput<'_>,
        source_stft_override: Option<&[f32]>,
    ) -> Result<DecoderOutput> {
        let frames = input.frames;
        let bad = |reason: String| EngineError::Usage(format!("kokoro decoder: {reason}"));
        if frames == 0 {
            return Err(bad("no frames to decode".into()));
        }
        if frames > MAX_FRAMES {
            return Err(bad(format!(
                "{frames} frames ({:.0} s of audio) are more than one pass decodes \
                 ({MAX_FRAMES}); split the text into shorter sentences or raise the speed",
                (frames * self.samples_per_frame()) as f64 / self.cfg.sample_rate as f64
            )));
        }
        if input.asr.len() != frames * self.asr_channels as usize
            || input.f0.len() != 2 * frames
            || input.n.len() != 2 * frames
            || input.style.len() != self.style_dim as usize
        {
            return Err(bad(format!(
                "inputs for {frames} frames have {} asr values (expected {}), {} F0, {} N \
                 (expected {} each) and a style of {} (expected {})",
                input.asr.len(),
                frames * self.asr_channels as usize,
                input.f0.len(),
                input.n.len(),
                2 * frames,
                input.style.len(),
                self.style_dim
            )));
        }
        let params = self.source_params(w)?;
        let source = harmonic_source(input.f0, &params);
        let n_fft = self.istft.n_fft;
        let (stft_frames, stft) = source_stft(&source, n_fft, self.istft.hop);
        let stft: &[f32] = match source_stft_override {
            Some(s) if s.len() == stft.len() => s,
            Some(s) => {
                return Err(bad(format!(
                    "the source STFT given has {} values, expected {}",
                    s.len(),
                    stft.len()
                )))
            }
            None => &stft,
        };
        let channels = self.generator.source_channels;

        let ctx = Context::new(GRAPH_NODES * 4, GRAPH_NODES)?;
        let f = frames as i64;
        let asr_t = ctx.new_tensor(DType::F32, &[f, self.asr_channels], "asr");
        let f0_t = ctx.new_tensor(DType::F32, &[2 * f, 1], "f0");
        let n_t = ctx.new_tensor(DType::F32, &[2 * f, 1], "n");
        let src_t = ctx.new_tensor(DType::F32, &[stft_frames as i64, channels], "source_stft");
        let style_t = ctx.new_tensor(DType::F32, &[self.style_dim], "style");
        for t in [asr_t, f0_t, n_t, src_t, style_t] {
            t.mark_input();
        }
        let tensors = DecoderTensors {
            asr: asr_t,
            f0: f0_t,
            n: n_t,
            source: src_t,
            style: style_t,
        };
        let (spectrum, raw) = self.build(&ctx, w, &tensors)?;
        for t in [spectrum.magnitude, spectrum.phase, raw] {
            t.mark_output();
        }
        let mut graph = ctx.new_graph(GRAPH_NODES);
        graph.expand(raw);
        // The inputs on the device: the pads of F0, N, asr and the source STFT read
        // nothing else and would run on the CPU (docs/build/VULKAN.md).
        sched.compute_on_device(
            &mut graph,
            &[
                (asr_t, input.asr),
                (f0_t, input.f0),
                (n_t, input.n),
                (src_t, stft),
                (style_t, input.style),
            ],
            &[],
        )?;
        let window_sum = self.istft.window_sum(w)?;
        let samples = self.istft.finish(&raw.read_f32()?, &window_sum);
        let expected = frames * self.samples_per_frame();
        if samples.len() != expected {
            return Err(EngineError::BadSpec {
                origin: "kokoro".into(),
                reason: format!(
                    "the decoder made {} samples for {frames} frames, expected {expected} \
                     (check the generator's upsample rates)",
                    samples.len()
                ),
            });
        }
        Ok(DecoderOutput {
            samples,
            source,
            magnitude: spectrum.magnitude.read_f32()?,
            phase: spectrum.phase.read_f32()?,
        })
    }
}

/// The style length the decoder's first AdaIN reads.
fn encode_style_dim(w: &dyn WeightLookup, prefix: &str) -> Result<i64> {
    Ok(w.tensor(&format!("{prefix}.encode.norm1.fc.weight"))?.ne()[1])
}

#[cfg(test)]
mod tests {
    //! The decoder against onnxruntime on the dequantized f32 Kokoro graph (issue 17
    //! item 6, durations forced equal by feeding the reference's own `asr`, `F0_pred`,
    //! `N_pred` and style row): harmonic source SNR >= 40 dB; the generator's magnitude
    //! SNR >= 35 dB, and >= 80 dB when fed the reference's own source STFT (which checks
    //! the network alone: the source differs by rounding, and the phases of its empty
    //! bins are rounding noise; >= 50 dB with f16 weights); the same samples at 1 thread.
    //! The waveform's log-mel is checked once, end to end, by engine/tests/kokoro_reference.rs
    //! (which `cargo xtask test` runs), not again here.

    use std::collections::HashMap;
    use std::io::Read;
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::backend::{Runtime, RuntimeOptions};
    use crate::ggml::{read_gguf_file, Buffer};

    /// The arrays of a NumPy `.npz` (f32 and i64 ones), as f32 with their shapes.
    fn read_npz(path: &Path) -> HashMap<String, (Vec<usize>, Vec<f32>)> {
        let file = std::fs::File::open(path)
            .unwrap_or_else(|e| panic!("cannot open reference {}: {e}", path.display()));
        let mut zip = zip::ZipArchive::new(file).expect("an npz is a zip archive");
        let mut out = HashMap::new();
        for i in 0..zip.len() {
            let mut entry = zip.by_index(i).unwrap();
            let name = entry.name().trim_end_matches(".npy").to_string();
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).unwrap();
            assert_eq!(&bytes[..6], b"\x93NUMPY", "{name}: not an npy array");
            let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
            let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
            let data = &bytes[10 + header_len..];
            assert!(
                header.contains("'fortran_order': False"),
                "{name}: {header}"
            );
            let shape_text = header.split("'shape': (").nth(1).unwrap();
            let shape: Vec<usize> = shape_text[..shape_text.find(')').unwrap()]
                .split(',')
                .filter_map(|s| s.trim().parse().ok())
                .collect();
            let values: Vec<f32> = if header.contains("'<f4'") {
                data.chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect()
            } else if header.contains("'<i8'") {
                data.chunks_exact(8)
                    .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as f32)
                    .collect()
            } else {
                continue;
            };
            out.insert(name, (shape, values));
        }
        out
    }

    /// Every tensor of the GGUF uploaded to the runtime's device, by name.
    fn load_weights(path: &Path, runtime: &Runtime) -> (Context, Buffer) {
        let contents =
            read_gguf_file(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let ctx = Context::new(contents.tensors.len() + 8, 0).unwrap();
        let mut uploads = Vec::new();
        for t in &contents.tensors {
            uploads.push((ctx.new_tensor(t.dtype, &t.ne, &t.name), &t.data));
        }
        let buffer = Buffer::alloc_context(&ctx, runtime.main()).unwrap();
        for (t, data) in uploads {
            t.write_bytes(data).unwrap();
        }
        (ctx, buffer)
    }

    fn snr_db(reference: &[f32], x: &[f32]) -> f64 {
        assert_eq!(reference.len(), x.len(), "lengths differ");
        let (mut s, mut n) = (0f64, 0f64);
        for (&r, &v) in reference.iter().zip(x) {
            s += (r as f64).powi(2);
            n += (r as f64 - v as f64).powi(2);
        }
        10.0 * (s / n.max(1e-30)).log10()
    }

    fn env_path(var: &str) -> PathBuf {
        PathBuf::from(std::env::var(var).unwrap_or_else(|_| {
            panic!(
                "{var} is not set: point AUDIOCPP_KOKORO_GGUF at the f32 GGUF from \
                 `audiocpp_cli --task convert --family kokoro` and AUDIOCPP_KOKORO_REF at \
                 the folder of reference .npz files from xtask/python/tts_reference.py"
            )
        }))
    }

    #[test]
    #[ignore = "needs the converted Kokoro GGUF and onnxruntime reference dumps \
                (AUDIOCPP_KOKORO_GGUF, AUDIOCPP_KOKORO_REF)"]
    fn decoder_matches_onnxruntime_with_durations_forced_equal() {
        let runtime = Runtime::new(&RuntimeOptions::default()).unwrap();
        let (weights, _buffer) = load_weights(&env_path("AUDIOCPP_KOKORO_GGUF"), &runtime);
        let decoder = Decoder::load(&weights, "decoder.decoder", DecoderConfig::kokoro_v1())
            .expect("the decoder's weights load");
        // f16 weights round the network's own output further.
        let f16 = weights
            .tensor("decoder.decoder.encode.conv1.weight")
            .unwrap()
            .dtype()
            == Some(DType::F16);
        let network_db = if f16 { 50.0 } else { 80.0 };
        let dir = env_path("AUDIOCPP_KOKORO_REF");
        let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "npz"))
            .collect();
        cases.sort();
        assert!(
            cases.len() >= 2,
            "at least two reference cases in {}",
            dir.display()
        );
        let mut checked_threads = false;
        for case in cases {
            let r = read_npz(&case);
            let get = |k: &str| &r.get(k).unwrap_or_else(|| panic!("{k} missing")).1;
            let asr_shape = &r["asr"].0;
            let frames = asr_shape[2];
            let style = &get("style")[..decoder.style_dim as usize];
            let input = DecoderInput {
                asr: get("asr"),
                frames,
                f0: get("F0_pred"),
                n: get("N_pred"),
                style,
            };
            let started = std::time::Instant::now();
            let ours = decoder
                .synthesize(
                    &mut runtime.scheduler(GRAPH_NODES).unwrap(),
                    &weights,
                    &input,
                    None,
                )
                .unwrap();
            eprintln!(
                "decoded {:.2} s of audio in {:.2} s on {} threads",
                ours.samples.len() as f64 / 24000.0,
                started.elapsed().as_secs_f64(),
                runtime.threads()
            );
            assert_eq!(ours.samples.len(), frames * 600);
            if !checked_threads {
                // Deterministic at any thread count: one thread gives the same samples.
                let one = Runtime::new(&RuntimeOptions {
                    threads: 1,
                    ..RuntimeOptions::default()
                })
                .unwrap();
                let single = decoder
                    .synthesize(
                        &mut one.scheduler(GRAPH_NODES).unwrap(),
                        &weights,
                        &input,
                        None,
                    )
                    .unwrap();
                assert!(
                    single.samples == ours.samples,
                    "1 and {} threads give different samples",
                    runtime.threads()
                );
                checked_threads = true;
            }
            let source_snr = snr_db(get("har_source"), &ours.source);
            let own_magnitude_snr = snr_db(get("gen_mag"), &ours.magnitude);

            let mut reference_stft = get("har_spec").clone();
            reference_stft.extend_from_slice(get("har_phase"));
            let fed = decoder
                .synthesize(
                    &mut runtime.scheduler(GRAPH_NODES).unwrap(),
                    &weights,
                    &input,
                    Some(&reference_stft),
                )
                .unwrap();
            let magnitude_snr = snr_db(get("gen_mag"), &fed.magnitude);
            let fed_phase_snr = snr_db(get("gen_phase"), &fed.phase);

            let audio = get("audio");
            eprintln!(
                "{}: frames {frames}, source {source_snr:.1} dB, magnitude {own_magnitude_snr:.1} dB \
                 (reference source {magnitude_snr:.1} dB), phase {fed_phase_snr:.1} dB, waveform {:.1} dB (fed {:.1} dB)",
                case.display(),
                snr_db(audio, &ours.samples),
                snr_db(audio, &fed.samples),
            );
            assert!(
                source_snr >= 40.0,
                "harmonic source {source_snr:.1} dB < 40"
            );
            assert!(
                own_magnitude_snr >= 35.0,
                "magnitude {own_magnitude_snr:.1} dB < 35"
            );
            assert!(
                magnitude_snr >= network_db,
                "magnitude from the reference source {magnitude_snr:.1} dB < {network_db}"
            );
        }
    }
}
