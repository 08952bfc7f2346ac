//! Qwen3-TTS's hyper-parameters, read once from the GGUF's metadata (`qwen3_tts.*`, which
//! the converter copies from the release's `config.json`, `generation_config.json` and
//! `speech_tokenizer/config.json`): the talker's and the code predictor's decoder
//! shapes, the codec decoder's, the control ids of the prompt, the preset speakers and
//! languages, and the generation defaults. Every size is checked where a wrong value
//! would break a shape, so the blocks can trust them.

use crate::error::Result;
use crate::model_file::ModelFile;

/// The GGUF key of a hyper-parameter.
pub fn key(name: &str) -> String {
    format!("qwen3_tts.{name}")
}

/// One decoder stack (the talker's or the code predictor's, or the codec's transformer).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decoder {
    /// Width of the residual stream.
    pub hidden: usize,
    /// Layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention: `heads` is a multiple).
    pub kv_heads: usize,
    /// Width of one head (`heads * head_dim` need not be `hidden`).
    pub head_dim: usize,
    /// Width of the SwiGLU MLP.
    pub intermediate: usize,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// RoPE base.
    pub rope_theta: f32,
}

impl Decoder {
    /// Reads the stack stored under `qwen3_tts.<prefix>.*`.
    fn read(file: &ModelFile, prefix: &str) -> Result<Self> {
        let u = |name: &str| -> Result<usize> {
            Ok(file.require::<u32>(&key(&format!("{prefix}.{name}")))? as usize)
        };
        let f = |name: &str| file.require::<f32>(&key(&format!("{prefix}.{name}")));
        let d = Decoder {
            hidden: u("hidden_size")?,
            layers: u("num_hidden_layers")?,
            heads: u("num_attention_heads")?,
            kv_heads: u("num_key_value_heads")?,
            head_dim: u("head_dim")?,
            intermediate: u("intermediate_size")?,
            rms_eps: f("rms_norm_eps")?,
            rope_theta: f("rope_theta")?,
        };
        let ok = d.hidden > 0
            && d.layers > 0
            && d.heads > 0
            && d.kv_heads > 0
            && d.heads.is_multiple_of(d.kv_heads)
            && d.head_dim > 0
            && d.head_dim.is_multiple_of(2)
            && d.intermediate > 0
            && d.rms_eps >= 0.0
            && d.rope_theta > 0.0;
        if !ok {
            return Err(file.invalid(format!(
                "the {prefix} hyper-parameters {d:?} do not make a decoder (heads a multiple of key/value heads, an even head width, positive sizes)"
            )));
        }
        Ok(d)
    }
}

/// The codec decoder ("speech tokenizer" 12 Hz, version 2).
#[derive(Debug, Clone, PartialEq)]
pub struct Codec {
    /// Codes per codebook.
    pub codebook_size: usize,
    /// Codebooks per frame (the first semantic, the rest acoustic).
    pub quantizers: usize,
    /// Width of a codebook vector (`codebook_dim / 2`) and of the dequantized frame
    /// (`codebook_dim`).
    pub codebook_dim: usize,
    /// Width after the first convolution.
    pub latent_dim: usize,
    /// Width entering the upsampling decoder blocks.
    pub decoder_dim: usize,
    /// The transformer between them.
    pub transformer: Decoder,
    /// How far back a frame attends in that transformer.
    pub sliding_window: usize,
    /// Upsampling of the ConvNeXt stage (each a transposed convolution).
    pub upsampling_ratios: Vec<usize>,
    /// Upsampling of the decoder blocks.
    pub upsample_rates: Vec<usize>,
    /// Output sample rate.
    pub sample_rate: u32,
}

impl Codec {
    /// Samples per frame: the product of every upsampling factor.
    pub fn samples_per_frame(&self) -> usize {
        self.upsampling_ratios
            .iter()
            .chain(&self.upsample_rates)
            .product()
    }

    /// Channels entering decoder block `i` (block `i` halves them).
    pub fn block_channels(&self, i: usize) -> usize {
        self.decoder_dim >> i
    }
}

/// The codec control ids of the talker's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodecIds {
    /// Padding under text positions.
    pub pad: u32,
    /// Start of the codes.
    pub bos: u32,
    /// End of speech (the talker's stop token).
    pub eos: u32,
    /// "think" tag before a language id.
    pub think: u32,
    /// "nothink" tag when no language is given.
    pub nothink: u32,
    /// Opens the tag run.
    pub think_bos: u32,
    /// Closes the tag run.
    pub think_eos: u32,
}

/// The text ids the prompt embeds without a codec part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextIds {
    /// Start of the spoken text.
    pub tts_bos: u32,
    /// End of the spoken text.
    pub tts_eos: u32,
    /// Text padding under codec positions.
    pub tts_pad: u32,
}

/// A preset speaker of a CustomVoice model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Speaker {
    /// Its name as the release spells it (lowercase).
    pub name: String,
    /// Its row of the talker's codec embedding.
    pub id: u32,
    /// The dialect language it speaks Chinese in, if any.
    pub dialect: Option<String>,
}

/// Generation defaults (`generation_config.json`, else the official code's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// Sample group-0 codes (else greedy).
    pub do_sample: bool,
    /// Temperature of group 0.
    pub temperature: f32,
    /// Top-k of group 0 (0: off).
    pub top_k: usize,
    /// Top-p of group 0 (1: off).
    pub top_p: f32,
    /// Repetition penalty on earlier group-0 codes.
    pub repetition_penalty: f32,
    /// Sample the code predictor's codes (else greedy).
    pub sub_do_sample: bool,
    /// Its temperature.
    pub sub_temperature: f32,
    /// Its top-k.
    pub sub_top_k: usize,
    /// Its top-p.
    pub sub_top_p: f32,
    /// The most frames a request makes.
    pub max_new_tokens: usize,
}

/// The speaker encoder (ECAPA-TDNN) of a Base model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpeakerEncoder {
    /// Mel bands of its input.
    pub mel_dim: usize,
    /// Channels of the first block, the three SE-Res2Net blocks and the aggregation.
    pub channels: Vec<usize>,
    /// Kernel widths of the same five.
    pub kernels: Vec<usize>,
    /// Dilations of the same five.
    pub dilations: Vec<usize>,
    /// Channels of the attentive pooling's attention.
    pub attention_channels: usize,
    /// Chunks of a Res2Net block.
    pub res2net_scale: usize,
    /// Squeeze channels of the SE blocks.
    pub se_channels: usize,
    /// Width of the x-vector (the talker's width).
    pub dim: usize,
    /// The rate its mel reads.
    pub sample_rate: u32,
}

/// The codec's encoder (Mimi's SEANet, transformer and split RVQ) of a Base model.
#[derive(Debug, Clone, PartialEq)]
pub struct MimiEncoder {
    /// Channels of the first convolution; each stage doubles them.
    pub filters: usize,
    /// Width of the first convolution.
    pub kernel: usize,
    /// Width of the last convolution.
    pub last_kernel: usize,
    /// Width of the residual blocks' first convolution.
    pub residual_kernel: usize,
    /// Channel reduction inside a residual block.
    pub compress: usize,
    /// Residual blocks per stage.
    pub residual_layers: usize,
    /// Dilation growth between a stage's residual blocks.
    pub dilation_growth: usize,
    /// The decoder's upsampling ratios; the encoder strides by them in reverse.
    pub ratios: Vec<usize>,
    /// The transformer.
    pub transformer: Decoder,
    /// The downsampling convolution's stride (its kernel is twice that).
    pub downsample_stride: usize,
    /// Codes per codebook.
    pub codebook_size: usize,
    /// Width of a codebook vector.
    pub codebook_dim: usize,
    /// Semantic quantizers (the first codebooks).
    pub semantic: usize,
    /// Codebooks kept (the talker's code groups).
    pub valid: usize,
    /// The rate its input has.
    pub sample_rate: u32,
}

impl MimiEncoder {
    /// Samples per 12 Hz frame.
    pub fn samples_per_frame(&self) -> usize {
        self.ratios.iter().product::<usize>() * self.downsample_stride
    }
}

/// Everything the family reads from the file's metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct HParams {
    /// The talker.
    pub talker: Decoder,
    /// Codes of the talker's vocabulary (group 0, control ids and speakers).
    pub talker_vocab: usize,
    /// Rows of the text embedding.
    pub text_vocab: usize,
    /// Width of the text embedding.
    pub text_hidden: usize,
    /// Codebooks per frame.
    pub code_groups: usize,
    /// The code predictor.
    pub predictor: Decoder,
    /// Codes per codebook the code predictor chooses from.
    pub predictor_vocab: usize,
    /// The codec.
    pub codec: Codec,
    /// Codec control ids.
    pub codec_ids: CodecIds,
    /// Text control ids.
    pub text_ids: TextIds,
    /// Preset speakers (CustomVoice).
    pub speakers: Vec<Speaker>,
    /// Languages and their codec ids (dialects included).
    pub languages: Vec<(String, u32)>,
    /// `0b6` or `1b7`: a 0.6B model ignores instructions, as the official code does.
    pub model_size: String,
    /// `custom_voice`, `base` or `voice_design`.
    pub model_type: String,
    /// Generation defaults.
    pub sampling: Sampling,
    /// The speaker encoder and codec encoder of a Base model (voice cloning).
    pub clone: Option<(SpeakerEncoder, MimiEncoder)>,
}

impl HParams {
    /// Reads and checks every hyper-parameter of `file`.
    pub fn read(file: &ModelFile) -> Result<Self> {
        let u = |name: &str| -> Result<usize> { Ok(file.require::<u32>(&key(name))? as usize) };
        let id = |name: &str| file.require::<u32>(&key(name));
        let f = |name: &str| file.require::<f32>(&key(name));
        let list = |name: &str| -> Result<Vec<usize>> {
            Ok(file
                .require::<&[u32]>(&key(name))?
                .iter()
                .map(|&x| x as usize)
                .collect())
        };
        let talker = Decoder::read(file, "talker")?;
        let predictor = Decoder::read(file, "predictor")?;
        let transformer = Decoder::read(file, "codec")?;
        let codec = Codec {
            codebook_size: u("codec.codebook_size")?,
            quantizers: u("codec.num_quantizers")?,
            codebook_dim: u("codec.codebook_dim")?,
            latent_dim: u("codec.latent_dim")?,
            decoder_dim: u("codec.decoder_dim")?,
            transformer,
            sliding_window: u("codec.sliding_window")?,
            upsampling_ratios: list("codec.upsampling_ratios")?,
            upsample_rates: list("codec.upsample_rates")?,
            sample_rate: id("codec.sample_rate")?,
        };
        let names = file.require::<&[String]>(&key("speaker_names"))?;
        let ids = file.require::<&[u32]>(&key("speaker_ids"))?;
        let dialects = file.require::<&[String]>(&key("speaker_dialects"))?;
        let lang_names = file.require::<&[String]>(&key("language_names"))?;
        let lang_ids = file.require::<&[u32]>(&key("language_ids"))?;
        if names.len() != ids.len()
            || names.len() != dialects.len()
            || lang_names.len() != lang_ids.len()
        {
            return Err(file
                .invalid("the speaker or language tables have lists of different lengths".into()));
        }
        let speakers = names
            .iter()
            .zip(ids)
            .zip(dialects)
            .map(|((n, &id), d)| Speaker {
                name: n.clone(),
                id,
                dialect: (!d.is_empty()).then(|| d.clone()),
            })
            .collect();
        let languages = lang_names
            .iter()
            .cloned()
            .zip(lang_ids.iter().copied())
            .collect();
        let hp = HParams {
            talker,
            talker_vocab: u("talker.vocab_size")?,
            text_vocab: u("talker.text_vocab_size")?,
            text_hidden: u("talker.text_hidden_size")?,
            code_groups: u("talker.num_code_groups")?,
            predictor,
            predictor_vocab: u("predictor.vocab_size")?,
            codec,
            codec_ids: CodecIds {
                pad: id("codec_pad_id")?,
                bos: id("codec_bos_id")?,
                eos: id("codec_eos_id")?,
                think: id("codec_think_id")?,
                nothink: id("codec_nothink_id")?,
                think_bos: id("codec_think_bos_id")?,
                think_eos: id("codec_think_eos_id")?,
            },
            text_ids: TextIds {
                tts_bos: id("tts_bos_id")?,
                tts_eos: id("tts_eos_id")?,
                tts_pad: id("tts_pad_id")?,
            },
            speakers,
            languages,
            model_size: file.require::<&str>(&key("model_size"))?.to_string(),
            model_type: file.require::<&str>(&key("model_type"))?.to_string(),
            sampling: Sampling {
                do_sample: u("sampling.do_sample")? != 0,
                temperature: f("sampling.temperature")?,
                top_k: u("sampling.top_k")?,
                top_p: f("sampling.top_p")?,
                repetition_penalty: f("sampling.repetition_penalty")?,
                sub_do_sample: u("sampling.subtalker_do_sample")? != 0,
                sub_temperature: f("sampling.subtalker_temperature")?,
                sub_top_k: u("sampling.subtalker_top_k")?,
                sub_top_p: f("sampling.subtalker_top_p")?,
                max_new_tokens: u("sampling.max_new_tokens")?,
            },
            clone: None,
        };
        let mut hp = hp;
        if hp.model_type == "base" {
            hp.clone = Some((read_speaker(file)?, read_mimi(file)?));
        }
        hp.check().map_err(|reason| file.invalid(reason))?;
        Ok(hp)
    }

    /// The relations between the sizes that the blocks rely on.
    fn check(&self) -> std::result::Result<(), String> {
        let c = &self.codec;
        let in_vocab = |id: u32| (id as usize) < self.talker_vocab;
        let ids = self.codec_ids;
        let control = [
            ids.pad,
            ids.bos,
            ids.eos,
            ids.think,
            ids.nothink,
            ids.think_bos,
            ids.think_eos,
        ];
        let text = [
            self.text_ids.tts_bos,
            self.text_ids.tts_eos,
            self.text_ids.tts_pad,
        ];
        let checks = [
            (self.code_groups >= 2, "num_code_groups is at least 2"),
            (
                c.quantizers == self.code_groups,
                "the codec has one codebook per code group",
            ),
            (
                self.predictor_vocab == c.codebook_size
                    && self.predictor_vocab <= self.talker_vocab,
                "the code predictor's codes are the codec's, within the talker's vocabulary",
            ),
            (
                control.iter().all(|&i| in_vocab(i)),
                "the codec control ids are in the talker's vocabulary",
            ),
            (
                self.speakers.iter().all(|s| in_vocab(s.id)),
                "the speaker ids are in the talker's vocabulary",
            ),
            (
                self.languages.iter().all(|&(_, i)| in_vocab(i)),
                "the language ids are in the talker's vocabulary",
            ),
            (
                text.iter().all(|&i| (i as usize) < self.text_vocab),
                "the tts_* ids are in the text vocabulary",
            ),
            (
                c.codebook_dim >= 2 && c.codebook_dim.is_multiple_of(2),
                "codebook_dim is even",
            ),
            (
                c.decoder_dim >> c.upsample_rates.len() > 0
                    && c.decoder_dim.is_multiple_of(1 << c.upsample_rates.len()),
                "decoder_dim halves once per decoder block",
            ),
            (
                c.upsample_rates
                    .iter()
                    .chain(&c.upsampling_ratios)
                    .all(|&r| r > 0),
                "the upsampling factors are positive",
            ),
            (
                c.sliding_window > 0 && c.sample_rate > 0,
                "the codec window and rate are positive",
            ),
            (
                self.text_hidden > 0 && self.text_vocab > 0,
                "the text embedding has a size",
            ),
        ];
        let clone_ok = self.clone.as_ref().is_none_or(|(s, m)| {
            s.dim == self.talker.hidden
                && s.channels.len() == 5
                && s.kernels.len() == 5
                && s.dilations.len() == 5
                && s.channels[1..4].iter().sum::<usize>() == s.channels[4]
                && s.channels[1..4]
                    .iter()
                    .all(|c| c.is_multiple_of(s.res2net_scale.max(1)))
                && m.valid == self.code_groups
                && m.codebook_size <= c.codebook_size
                && m.semantic == 1
                && m.sample_rate == c.sample_rate
                && s.sample_rate == c.sample_rate
        });
        let mut checks = checks.to_vec();
        checks.push((
            clone_ok,
            "the speaker encoder's x-vector is the talker's width and the codec encoder makes the decoder's code groups at its rate",
        ));
        match checks.iter().find(|(ok, _)| !ok) {
            Some((_, what)) => Err(format!(
                "inconsistent hyper-parameters: expected that {what}"
            )),
            None => Ok(()),
        }
    }

    /// The speaker of that name (case-insensitive, as the official code looks it up).
    pub fn speaker(&self, name: &str) -> Option<&Speaker> {
        let lower = name.to_lowercase();
        self.speakers.iter().find(|s| s.name == lower)
    }

    /// The language's codec id: `None` for `auto`; an error lists the languages.
    pub fn language_id(&self, language: &str) -> std::result::Result<Option<u32>, String> {
        let lower = language.to_lowercase();
        if lower == "auto" {
            return Ok(None);
        }
        self.languages
            .iter()
            .find(|(n, _)| *n == lower && !n.contains("dialect"))
            .map(|&(_, id)| Some(id))
            .ok_or_else(|| {
                format!(
                    "parameter 'language' '{language}' is not a language of this model (languages: {})",
                    self.language_names().join(", ")
                )
            })
    }

    /// `auto` and the languages a request may name (dialects are reached through their
    /// speakers only, as in the official code).
    pub fn language_names(&self) -> Vec<String> {
        std::iter::once("auto".to_string())
            .chain(
                self.languages
                    .iter()
                    .filter(|(n, _)| !n.contains("dialect"))
                    .map(|(n, _)| n.clone()),
            )
            .collect()
    }

    /// Whether the model reads instructions (a 0.6B model does not: the official code
    /// drops them when `tts_model_size` is a part of `0b6`).
    pub fn takes_instructions(&self) -> bool {
        !"0b6".contains(self.model_size.as_str())
    }
}

/// The speaker encoder's hyper-parameters (`qwen3_tts.speaker.*`).
fn read_speaker(file: &ModelFile) -> Result<SpeakerEncoder> {
    let u = |name: &str| -> Result<usize> {
        Ok(file.require::<u32>(&key(&format!("speaker.{name}")))? as usize)
    };
    let list = |name: &str| -> Result<Vec<usize>> {
        Ok(file
            .require::<&[u32]>(&key(&format!("speaker.{name}")))?
            .iter()
            .map(|&x| x as usize)
            .collect())
    };
    Ok(SpeakerEncoder {
        mel_dim: u("mel_dim")?,
        channels: list("enc_channels")?,
        kernels: list("enc_kernel_sizes")?,
        dilations: list("enc_dilations")?,
        attention_channels: u("enc_attention_channels")?,
        res2net_scale: u("enc_res2net_scale")?,
        se_channels: u("enc_se_channels")?,
        dim: u("enc_dim")?,
        sample_rate: u("sample_rate")? as u32,
    })
}

/// The codec encoder's hyper-parameters (`qwen3_tts.mimi.*`).
fn read_mimi(file: &ModelFile) -> Result<MimiEncoder> {
    let u = |name: &str| -> Result<usize> {
        Ok(file.require::<u32>(&key(&format!("mimi.{name}")))? as usize)
    };
    let f = |name: &str| file.require::<f32>(&key(&format!("mimi.{name}")));
    let transformer = Decoder {
        hidden: u("hidden_size")?,
        layers: u("num_hidden_layers")?,
        heads: u("num_attention_heads")?,
        kv_heads: u("num_key_value_heads")?,
        head_dim: u("head_dim")?,
        intermediate: u("intermediate_size")?,
        rms_eps: f("norm_eps")?,
        rope_theta: f("rope_theta")?,
    };
    let m = MimiEncoder {
        filters: u("num_filters")?,
        kernel: u("kernel_size")?,
        last_kernel: u("last_kernel_size")?,
        residual_kernel: u("residual_kernel_size")?,
        compress: u("compress")?,
        residual_layers: u("num_residual_layers")?,
        dilation_growth: u("dilation_growth_rate")?,
        ratios: file
            .require::<&[u32]>(&key("mimi.upsampling_ratios"))?
            .iter()
            .map(|&x| x as usize)
            .collect(),
        transformer,
        downsample_stride: u("downsample_stride")?,
        codebook_size: u("codebook_size")?,
        codebook_dim: u("vector_quantization_hidden_dimension")?,
        semantic: u("num_semantic_quantizers")?,
        valid: u("valid_quantizers")?,
        sample_rate: u("sample_rate")? as u32,
    };
    let t = &m.transformer;
    let ok = m.filters > 0
        && m.compress > 0
        && !m.ratios.is_empty()
        && m.ratios.iter().all(|&r| r > 0)
        && t.heads > 0
        && t.kv_heads > 0
        && t.heads.is_multiple_of(t.kv_heads)
        && t.head_dim.is_multiple_of(2)
        && m.downsample_stride > 0
        && m.codebook_dim > 0;
    if !ok {
        return Err(file.invalid(format!(
            "the codec encoder's hyper-parameters {m:?} do not make an encoder"
        )));
    }
    Ok(m)
}
