//! Conversion of a Qwen3-TTS release folder, as users download it from Hugging Face, to
//! the engine's GGUF: the talker and code predictor from `model.safetensors` (or its
//! shards), the codec decoder from `speech_tokenizer/model.safetensors`, under their
//! upstream names with two prefixes shortened ([`gguf_name`]: GGUF names hold 63 bytes);
//! the hyper-parameters,
//! speakers, languages and generation defaults from the three `config.json` files as
//! `qwen3_tts.*` metadata; the text tokenizer as `tokenizer.json` text.
//!
//! Weights: BF16 matrices become f16 by default (a tensor with a value past f16's range
//! stays f32), `quantize = f32` keeps every value exactly, `q8_0` stores the talker's and
//! code predictor's linear layers as ggml Q8_0; vectors (norms, biases) and the codec stay
//! f32. A missing or corrupt input is an error naming the file; the GGUF is written only
//! after everything has been read.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::error::{EngineError, Result};
use crate::families::{Conversion, ConvertOptions};
use crate::ggml::{self, DType, GgufValue, HostTensor};

use super::hparams::key;
use super::{tokenizer, FAMILY};

/// How the matrices are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightType {
    /// Every value as f32.
    F32,
    /// Matrices as f16 (the default).
    F16,
    /// The talker's and code predictor's linear layers as Q8_0, the other matrices f16.
    Q8_0,
}

impl std::str::FromStr for WeightType {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f32" => Ok(WeightType::F32),
            "f16" => Ok(WeightType::F16),
            "q8_0" => Ok(WeightType::Q8_0),
            other => Err(EngineError::Usage(format!(
                "unknown parameter 'quantize' '{other}' (expected f16, the default, f32 or q8_0)"
            ))),
        }
    }
}

/// The registry's converter: the release folder (`model`, or a file in it), `quantize`
/// naming a [`WeightType`]; no further sources.
pub(super) fn convert(
    model: &Path,
    spec_override: Option<&Path>,
    opts: &ConvertOptions,
) -> Result<Conversion> {
    opts.only_sources(FAMILY.info.family, &[])?;
    let weights = match &opts.quantize {
        Some(q) => q.parse()?,
        None => WeightType::F16,
    };
    let dir = if model.is_dir() {
        model.to_path_buf()
    } else {
        model.parent().map(Path::to_path_buf).unwrap_or_default()
    };
    if !dir.join("config.json").is_file() {
        return Err(EngineError::Usage(format!(
            "parameter 'model' '{}' is not a Qwen3-TTS folder: it has no config.json (give the folder of the Hugging Face download, e.g. Qwen3-TTS-12Hz-1.7B-CustomVoice/)",
            model.display()
        )));
    }
    let spec = FAMILY.source_spec(&dir.join("config.json"), spec_override)?;
    let config = read_json(&dir.join("config.json"))?;
    let generation = match dir.join("generation_config.json") {
        p if p.is_file() => read_json(&p)?,
        _ => serde_json::Value::Null,
    };
    let codec_dir = dir.join("speech_tokenizer");
    let codec_config = read_json(&codec_dir.join("config.json"))?;
    let mut metadata = hyper_parameters(&config, &generation, &codec_config)
        .map_err(|reason| model_error(&dir.join("config.json"), reason))?;
    let vocab = read_text(&dir.join("vocab.json"))?;
    let merges = read_text(&dir.join("merges.txt"))?;
    let tok_config = read_json(&dir.join("tokenizer_config.json"))?;
    let tok_json = tokenizer::build(&vocab, &merges, &tok_config)
        .map_err(|reason| model_error(&dir.join("tokenizer_config.json"), reason))?;
    metadata.push((
        "tokenizer.huggingface.json".into(),
        GgufValue::Str(tok_json),
    ));

    // A Base model clones voices: its speaker encoder and the codec's encoder come along.
    let clones = config["tts_model_type"].as_str() == Some("base");
    if clones {
        metadata.extend(
            clone_parameters(&config["speaker_encoder_config"], &codec_config)
                .map_err(|reason| model_error(&codec_dir.join("config.json"), reason))?,
        );
    }
    let valid_quantizers = codec_config["encoder_valid_num_quantizers"]
        .as_u64()
        .unwrap_or(16) as usize;
    let mut tensors = Vec::new();
    for (name, source) in Safetensors::open_model(&dir)?.into_tensors()? {
        let short = gguf_name(&name);
        let t = source.read(&name)?;
        if name.starts_with("speaker_encoder.") {
            // Small (12 M values), read by f32 convolutions.
            tensors.push(HostTensor {
                name: short,
                ..to_f32(t)
            });
            continue;
        }
        tensors.push(store(
            HostTensor {
                name: short.clone(),
                ..t
            },
            &short,
            weights,
        )?);
    }
    for (name, source) in Safetensors::open(&codec_dir.join("model.safetensors"))?.into_tensors()? {
        let keep = name.starts_with("decoder.")
            || (clones
                && name.starts_with("encoder.")
                && encoder_tensor_used(&name, valid_quantizers));
        if keep {
            let t = source.read(&name)?;
            tensors.push(HostTensor {
                name: gguf_name(&format!("speech_tokenizer.{name}")),
                ..to_f32(t)
            });
        }
    }
    Ok(Conversion {
        spec,
        source_format: format!(
            "huggingface:{}",
            config["tts_model_type"].as_str().unwrap_or("qwen3_tts")
        ),
        metadata,
        tensors,
    })
}

/// The GGUF name of a release tensor: the code predictor's `talker.code_predictor.model.`
/// and `talker.code_predictor.` become `predictor.`, the codec's
/// `speech_tokenizer.decoder.` becomes `codec.`, its encoder's parts `mimi.seanet.`,
/// `mimi.transformer.`, `mimi.downsample.`, `mimi.rvq_semantic.` and `mimi.rvq_acoustic.`;
/// the rest of the name stays.
pub fn gguf_name(name: &str) -> String {
    for (long, short) in [
        ("talker.code_predictor.model.", "predictor."),
        ("talker.code_predictor.", "predictor."),
        ("speech_tokenizer.decoder.", "codec."),
        ("speech_tokenizer.encoder.encoder.", "mimi.seanet."),
        (
            "speech_tokenizer.encoder.encoder_transformer.",
            "mimi.transformer.",
        ),
        ("speech_tokenizer.encoder.downsample.", "mimi.downsample."),
        (
            "speech_tokenizer.encoder.quantizer.semantic_residual_vector_quantizer.",
            "mimi.rvq_semantic.",
        ),
        (
            "speech_tokenizer.encoder.quantizer.acoustic_residual_vector_quantizer.",
            "mimi.rvq_acoustic.",
        ),
    ] {
        if let Some(rest) = name.strip_prefix(long) {
            return format!("{short}{rest}");
        }
    }
    name.to_string()
}

fn model_error(path: &Path, reason: String) -> EngineError {
    EngineError::Model {
        path: path.to_path_buf(),
        reason,
    }
}

fn read_text(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|source| EngineError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    String::from_utf8(bytes).map_err(|_| model_error(path, "not UTF-8 text".into()))
}

fn read_json(path: &Path) -> Result<serde_json::Value> {
    serde_json::from_str(&read_text(path)?)
        .map_err(|e| model_error(path, format!("not valid JSON: {e}")))
}

/// The `qwen3_tts.*` metadata of the three configs: decoder shapes, codec shapes,
/// control ids, speakers, languages and generation defaults.
fn hyper_parameters(
    config: &serde_json::Value,
    generation: &serde_json::Value,
    codec: &serde_json::Value,
) -> std::result::Result<Vec<(String, GgufValue)>, String> {
    let mut out = Vec::new();
    let talker = &config["talker_config"];
    let predictor = &talker["code_predictor_config"];
    let decoder = &codec["decoder_config"];
    let uint = |v: &serde_json::Value, what: &str| -> std::result::Result<u32, String> {
        v.as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .ok_or_else(|| format!("'{what}' is missing or not a whole number"))
    };
    let float = |v: &serde_json::Value, what: &str| -> std::result::Result<f32, String> {
        v.as_f64()
            .map(|x| x as f32)
            .ok_or_else(|| format!("'{what}' is missing or not a number"))
    };
    for (prefix, c, path) in [
        ("talker", talker, "talker_config"),
        (
            "predictor",
            predictor,
            "talker_config.code_predictor_config",
        ),
        ("codec", decoder, "speech_tokenizer decoder_config"),
    ] {
        let hidden = uint(&c["hidden_size"], &format!("{path}.hidden_size"))?;
        let heads = uint(
            &c["num_attention_heads"],
            &format!("{path}.num_attention_heads"),
        )?;
        let head_dim = match &c["head_dim"] {
            serde_json::Value::Null if heads > 0 => hidden / heads,
            v => uint(v, &format!("{path}.head_dim"))?,
        };
        let kv = match &c["num_key_value_heads"] {
            serde_json::Value::Null => heads,
            v => uint(v, &format!("{path}.num_key_value_heads"))?,
        };
        for (k, v) in [
            ("hidden_size", hidden),
            (
                "num_hidden_layers",
                uint(
                    &c["num_hidden_layers"],
                    &format!("{path}.num_hidden_layers"),
                )?,
            ),
            ("num_attention_heads", heads),
            ("num_key_value_heads", kv),
            ("head_dim", head_dim),
            (
                "intermediate_size",
                uint(
                    &c["intermediate_size"],
                    &format!("{path}.intermediate_size"),
                )?,
            ),
        ] {
            out.push((key(&format!("{prefix}.{k}")), GgufValue::U32(v)));
        }
        for (k, v) in [
            (
                "rms_norm_eps",
                float(&c["rms_norm_eps"], &format!("{path}.rms_norm_eps"))?,
            ),
            (
                "rope_theta",
                float(&c["rope_theta"], &format!("{path}.rope_theta"))?,
            ),
        ] {
            out.push((key(&format!("{prefix}.{k}")), GgufValue::F32(v)));
        }
        if c["sliding_window"].is_number() && prefix != "codec" {
            return Err(format!(
                "{path}.sliding_window is set: a sliding-window talker is not supported"
            ));
        }
    }
    let u32s = |pairs: &[(&str, &serde_json::Value, &str)]| -> std::result::Result<Vec<(String, GgufValue)>, String> {
        pairs
            .iter()
            .map(|(k, v, what)| Ok((key(k), GgufValue::U32(uint(v, what)?))))
            .collect()
    };
    out.extend(u32s(&[
        (
            "talker.vocab_size",
            &talker["vocab_size"],
            "talker_config.vocab_size",
        ),
        (
            "talker.text_vocab_size",
            &talker["text_vocab_size"],
            "talker_config.text_vocab_size",
        ),
        (
            "talker.text_hidden_size",
            &talker["text_hidden_size"],
            "talker_config.text_hidden_size",
        ),
        (
            "talker.num_code_groups",
            &talker["num_code_groups"],
            "talker_config.num_code_groups",
        ),
        (
            "predictor.vocab_size",
            &predictor["vocab_size"],
            "code_predictor_config.vocab_size",
        ),
        (
            "codec_pad_id",
            &talker["codec_pad_id"],
            "talker_config.codec_pad_id",
        ),
        (
            "codec_bos_id",
            &talker["codec_bos_id"],
            "talker_config.codec_bos_id",
        ),
        (
            "codec_eos_id",
            &talker["codec_eos_token_id"],
            "talker_config.codec_eos_token_id",
        ),
        (
            "codec_think_id",
            &talker["codec_think_id"],
            "talker_config.codec_think_id",
        ),
        (
            "codec_nothink_id",
            &talker["codec_nothink_id"],
            "talker_config.codec_nothink_id",
        ),
        (
            "codec_think_bos_id",
            &talker["codec_think_bos_id"],
            "talker_config.codec_think_bos_id",
        ),
        (
            "codec_think_eos_id",
            &talker["codec_think_eos_id"],
            "talker_config.codec_think_eos_id",
        ),
        (
            "tts_bos_id",
            &config["tts_bos_token_id"],
            "tts_bos_token_id",
        ),
        (
            "tts_eos_id",
            &config["tts_eos_token_id"],
            "tts_eos_token_id",
        ),
        (
            "tts_pad_id",
            &config["tts_pad_token_id"],
            "tts_pad_token_id",
        ),
        (
            "codec.codebook_size",
            &decoder["codebook_size"],
            "decoder_config.codebook_size",
        ),
        (
            "codec.num_quantizers",
            &decoder["num_quantizers"],
            "decoder_config.num_quantizers",
        ),
        (
            "codec.codebook_dim",
            &decoder["codebook_dim"],
            "decoder_config.codebook_dim",
        ),
        (
            "codec.latent_dim",
            &decoder["latent_dim"],
            "decoder_config.latent_dim",
        ),
        (
            "codec.decoder_dim",
            &decoder["decoder_dim"],
            "decoder_config.decoder_dim",
        ),
        (
            "codec.sliding_window",
            &decoder["sliding_window"],
            "decoder_config.sliding_window",
        ),
        (
            "codec.sample_rate",
            &codec["output_sample_rate"],
            "output_sample_rate",
        ),
    ])?);
    for k in ["upsample_rates", "upsampling_ratios"] {
        let list = decoder[k]
            .as_array()
            .ok_or_else(|| format!("decoder_config.{k} is missing"))?
            .iter()
            .map(|v| uint(v, &format!("decoder_config.{k}")))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        out.push((key(&format!("codec.{k}")), GgufValue::U32Array(list)));
    }
    // Speakers sorted by name, so that the default (the first) does not depend on JSON order.
    let spk_ids: BTreeMap<String, u32> = table(&talker["spk_id"], "talker_config.spk_id")?;
    let dialects = talker["spk_is_dialect"].as_object();
    let dialect_of = |name: &str| -> String {
        dialects
            .and_then(|d| d.get(name))
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_string()
    };
    out.push((
        key("speaker_names"),
        GgufValue::StrArray(spk_ids.keys().cloned().collect()),
    ));
    out.push((
        key("speaker_ids"),
        GgufValue::U32Array(spk_ids.values().copied().collect()),
    ));
    out.push((
        key("speaker_dialects"),
        GgufValue::StrArray(spk_ids.keys().map(|n| dialect_of(n)).collect()),
    ));
    let langs: BTreeMap<String, u32> = table(
        &talker["codec_language_id"],
        "talker_config.codec_language_id",
    )?;
    out.push((
        key("language_names"),
        GgufValue::StrArray(langs.keys().cloned().collect()),
    ));
    out.push((
        key("language_ids"),
        GgufValue::U32Array(langs.values().copied().collect()),
    ));
    for (k, v, default) in [
        ("model_size", &config["tts_model_size"], "1b7"),
        ("model_type", &config["tts_model_type"], "custom_voice"),
    ] {
        out.push((
            key(k),
            GgufValue::Str(v.as_str().unwrap_or(default).to_string()),
        ));
    }
    // Generation defaults: generation_config.json, else the official code's
    // (qwen_tts inference/qwen3_tts_model.py, `_merge_generate_kwargs`).
    let g = |k: &str| &generation[k];
    let flag = |k: &str, d: bool| g(k).as_bool().unwrap_or(d) as u32;
    let num = |k: &str, d: f64| g(k).as_f64().unwrap_or(d) as f32;
    let whole = |k: &str, d: u64| g(k).as_u64().unwrap_or(d).min(u32::MAX as u64) as u32;
    for (k, v) in [
        (
            "sampling.do_sample",
            GgufValue::U32(flag("do_sample", true)),
        ),
        (
            "sampling.temperature",
            GgufValue::F32(num("temperature", 0.9)),
        ),
        ("sampling.top_k", GgufValue::U32(whole("top_k", 50))),
        ("sampling.top_p", GgufValue::F32(num("top_p", 1.0))),
        (
            "sampling.repetition_penalty",
            GgufValue::F32(num("repetition_penalty", 1.05)),
        ),
        (
            "sampling.subtalker_do_sample",
            GgufValue::U32(flag("subtalker_dosample", true)),
        ),
        (
            "sampling.subtalker_temperature",
            GgufValue::F32(num("subtalker_temperature", 0.9)),
        ),
        (
            "sampling.subtalker_top_k",
            GgufValue::U32(whole("subtalker_top_k", 50)),
        ),
        (
            "sampling.subtalker_top_p",
            GgufValue::F32(num("subtalker_top_p", 1.0)),
        ),
        (
            "sampling.max_new_tokens",
            GgufValue::U32(whole("max_new_tokens", 2048)),
        ),
    ] {
        out.push((key(k), v));
    }
    Ok(out)
}

/// Whether the codec encoder's tensor `name` (release name, `encoder.` first) is read by
/// encoding: not the quantizers' output projections, nor the acoustic quantizers past
/// the `valid` codebooks kept (Qwen keeps the first 16 of Mimi's 32).
fn encoder_tensor_used(name: &str, valid: usize) -> bool {
    if name.contains("output_proj") || name.ends_with(".initialized") {
        return false;
    }
    let acoustic = "encoder.quantizer.acoustic_residual_vector_quantizer.layers.";
    match name
        .strip_prefix(acoustic)
        .and_then(|r| r.split('.').next())
        .and_then(|l| l.parse::<usize>().ok())
    {
        Some(layer) => layer + 1 < valid,
        None => true,
    }
}

/// The `qwen3_tts.speaker.*` and `qwen3_tts.mimi.*` metadata of a Base model: the speaker
/// encoder's shapes (the release gives `enc_dim` and the rate; the others take the
/// official class defaults, configuration_qwen3_tts.py L47-L67) and the codec encoder's
/// (transformers' MimiConfig defaults where the config is silent).
fn clone_parameters(
    speaker: &serde_json::Value,
    codec: &serde_json::Value,
) -> std::result::Result<Vec<(String, GgufValue)>, String> {
    let mut out = Vec::new();
    let num = |v: &serde_json::Value, k: &str, d: u64| -> std::result::Result<u32, String> {
        match &v[k] {
            serde_json::Value::Null => Ok(d as u32),
            x => x
                .as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .ok_or_else(|| format!("'{k}' is not a whole number")),
        }
    };
    let list =
        |v: &serde_json::Value, k: &str, d: &[u32]| -> std::result::Result<Vec<u32>, String> {
            match &v[k] {
                serde_json::Value::Null => Ok(d.to_vec()),
                x => x
                    .as_array()
                    .ok_or_else(|| format!("'{k}' is not a list"))?
                    .iter()
                    .map(|y| {
                        y.as_u64()
                            .and_then(|y| u32::try_from(y).ok())
                            .ok_or_else(|| format!("'{k}' holds a non-number"))
                    })
                    .collect(),
            }
        };
    for (k, d) in [
        ("mel_dim", 128),
        ("enc_dim", 1024),
        ("enc_attention_channels", 128),
        ("enc_res2net_scale", 8),
        ("enc_se_channels", 128),
        ("sample_rate", 24000),
    ] {
        out.push((
            key(&format!("speaker.{k}")),
            GgufValue::U32(num(speaker, k, d)?),
        ));
    }
    for (k, d) in [
        ("enc_channels", &[512u32, 512, 512, 512, 1536][..]),
        ("enc_kernel_sizes", &[5, 3, 3, 3, 1]),
        ("enc_dilations", &[1, 2, 3, 4, 1]),
    ] {
        out.push((
            key(&format!("speaker.{k}")),
            GgufValue::U32Array(list(speaker, k, d)?),
        ));
    }
    let e = &codec["encoder_config"];
    let hidden = num(e, "hidden_size", 512)?;
    let heads = num(e, "num_attention_heads", 8)?;
    for (k, d) in [
        ("num_filters", 64),
        ("kernel_size", 7),
        ("last_kernel_size", 3),
        ("residual_kernel_size", 3),
        ("compress", 2),
        ("dilation_growth_rate", 2),
        ("num_residual_layers", 1),
        ("hidden_size", 512),
        ("intermediate_size", 2048),
        ("num_hidden_layers", 8),
        ("num_attention_heads", 8),
        ("codebook_size", 2048),
        ("vector_quantization_hidden_dimension", 256),
        ("num_semantic_quantizers", 1),
    ] {
        out.push((key(&format!("mimi.{k}")), GgufValue::U32(num(e, k, d)?)));
    }
    let kv = num(e, "num_key_value_heads", heads as u64)?;
    out.push((key("mimi.num_key_value_heads"), GgufValue::U32(kv)));
    let head_dim = num(e, "head_dim", (hidden / heads.max(1)) as u64)?;
    out.push((key("mimi.head_dim"), GgufValue::U32(head_dim)));
    for (k, d) in [("rope_theta", 10000.0), ("norm_eps", 1e-5)] {
        let v = e[k].as_f64().unwrap_or(d) as f32;
        out.push((key(&format!("mimi.{k}")), GgufValue::F32(v)));
    }
    let ratios = list(e, "upsampling_ratios", &[8, 6, 5, 4])?;
    let rate = num(e, "sampling_rate", 24000)? as f64;
    let frame_rate = e["frame_rate"]
        .as_f64()
        .or(e["_frame_rate"].as_f64())
        .unwrap_or(12.5);
    // Mimi's downsample takes the SEANet's rate (ceil(rate / prod(ratios))) to the frame
    // rate, with a kernel twice its stride (transformers MimiModel.__init__).
    let seanet_rate = (rate / ratios.iter().product::<u32>().max(1) as f64).ceil();
    let stride = seanet_rate / frame_rate;
    if !(stride >= 1.0 && stride.fract() == 0.0) {
        return Err(format!(
            "encoder_config: a SEANet rate of {seanet_rate} Hz does not divide into frames of {frame_rate} Hz"
        ));
    }
    out.push((key("mimi.upsampling_ratios"), GgufValue::U32Array(ratios)));
    out.push((key("mimi.downsample_stride"), GgufValue::U32(stride as u32)));
    let valid = num(codec, "encoder_valid_num_quantizers", 16)?;
    out.push((key("mimi.valid_quantizers"), GgufValue::U32(valid)));
    out.push((key("mimi.sample_rate"), GgufValue::U32(rate as u32)));
    Ok(out)
}

/// A JSON object of names to ids, names lowercased.
fn table(v: &serde_json::Value, what: &str) -> std::result::Result<BTreeMap<String, u32>, String> {
    v.as_object()
        .ok_or_else(|| format!("'{what}' is missing"))?
        .iter()
        .map(|(k, id)| {
            let id = id
                .as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .ok_or_else(|| format!("'{what}.{k}' is not an id"))?;
            Ok((k.to_lowercase(), id))
        })
        .collect()
}

/// True for the weights `quantize = q8_0` stores as Q8_0: the linear layers of the
/// talker and the code predictor (not the embeddings, which are read by row).
pub(super) fn is_linear(name: &str) -> bool {
    (name.starts_with("talker.") || name.starts_with("predictor."))
        && name.ends_with(".weight")
        && (name.contains("_proj.") || name.contains("lm_head.") || name.contains("codec_head."))
        && !name.contains("small_to_mtp")
}

/// `t` in the type `want` asks for (see the module doc).
fn store(t: HostTensor, name: &str, want: WeightType) -> Result<HostTensor> {
    if t.ne.len() < 2 || want == WeightType::F32 {
        return Ok(to_f32(t));
    }
    let values = t.to_f32();
    let row = t.ne[0] as usize;
    if want == WeightType::Q8_0 && is_linear(name) && row.is_multiple_of(DType::Q8_0.block_len()) {
        let data = ggml::quantize_rows(DType::Q8_0, &values, row)?;
        return Ok(HostTensor {
            dtype: DType::Q8_0,
            data,
            ..t
        });
    }
    if values
        .iter()
        .any(|v| v.is_finite() && v.abs() > f32::from(half::f16::MAX))
    {
        return Ok(HostTensor {
            dtype: DType::F32,
            data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ..t
        });
    }
    Ok(HostTensor {
        dtype: DType::F16,
        data: values
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect(),
        ..t
    })
}

/// `t` as f32.
fn to_f32(t: HostTensor) -> HostTensor {
    if t.dtype == DType::F32 {
        return t;
    }
    let values = t.to_f32();
    HostTensor {
        dtype: DType::F32,
        data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ..t
    }
}

/// A safetensors file's tensor index (read from its JSON header), its tensors read one
/// at a time with a seek: the whole file (3.8 GB for the 1.7B model) is never in memory.
/// The `safetensors` crate parses from a byte slice of the whole file, which would need
/// the file read whole or mapped (unsafe code outside the ggml wrapper).
struct Safetensors {
    path: PathBuf,
    /// Where the data starts (after the 8-byte length and the header).
    data_start: u64,
    /// The file's length.
    len: u64,
    /// Name -> (dtype, shape, [begin, end) in the data).
    entries: BTreeMap<String, (String, Vec<u64>, [u64; 2])>,
}

/// The most header a safetensors file may declare (the format's own limit is 100 MB).
const MAX_HEADER_BYTES: u64 = 100 << 20;

impl Safetensors {
    /// Reads the header of `path`.
    fn open(path: &Path) -> Result<Self> {
        let io = |source| EngineError::Io {
            path: path.to_path_buf(),
            source,
        };
        let bad = |reason: String| model_error(path, format!("not a safetensors file: {reason}"));
        let mut f = std::fs::File::open(path).map_err(io)?;
        let len = f.metadata().map_err(io)?.len();
        let mut n = [0u8; 8];
        f.read_exact(&mut n)
            .map_err(|_| bad("shorter than its 8-byte header length".into()))?;
        let n = u64::from_le_bytes(n);
        if n > MAX_HEADER_BYTES || n + 8 > len {
            return Err(bad(format!("a header of {n} bytes in a file of {len}")));
        }
        let mut header = vec![0u8; n as usize];
        f.read_exact(&mut header).map_err(io)?;
        let header: serde_json::Value =
            serde_json::from_slice(&header).map_err(|e| bad(format!("header: {e}")))?;
        let obj = header
            .as_object()
            .ok_or_else(|| bad("the header is not an object".into()))?;
        let mut entries = BTreeMap::new();
        for (name, e) in obj.iter().filter(|(k, _)| *k != "__metadata__") {
            let dtype = e["dtype"].as_str().unwrap_or_default().to_string();
            let shape: Option<Vec<u64>> = e["shape"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x.as_u64()).collect());
            let offsets: Option<Vec<u64>> = e["data_offsets"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x.as_u64()).collect());
            let (Some(shape), Some([b, end])) = (
                shape,
                offsets
                    .as_deref()
                    .and_then(|o| <[u64; 2]>::try_from(o).ok()),
            ) else {
                return Err(bad(format!("tensor '{name}' has no shape or data offsets")));
            };
            let elem = match dtype.as_str() {
                "F32" => 4,
                "F16" | "BF16" => 2,
                other => {
                    return Err(bad(format!(
                        "tensor '{name}' is {other}; F32, F16 and BF16 are read"
                    )))
                }
            };
            let count = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
            let fits = count.and_then(|c| c.checked_mul(elem)) == Some(end.wrapping_sub(b))
                && b <= end
                && 8 + n + end <= len;
            if !fits {
                return Err(bad(format!(
                    "tensor '{name}' ({dtype} {shape:?}) does not fit its offsets {b}..{end} in a file of {len} bytes"
                )));
            }
            entries.insert(name.clone(), (dtype, shape, [b, end]));
        }
        Ok(Safetensors {
            path: path.to_path_buf(),
            data_start: 8 + n,
            len,
            entries,
        })
    }

    /// The model's weights: `model.safetensors`, or the shards its
    /// `model.safetensors.index.json` names.
    fn open_model(dir: &Path) -> Result<Vec<Safetensors>> {
        let index = dir.join("model.safetensors.index.json");
        if !index.is_file() {
            return Ok(vec![Safetensors::open(&dir.join("model.safetensors"))?]);
        }
        let json = read_json(&index)?;
        let map = json["weight_map"]
            .as_object()
            .ok_or_else(|| model_error(&index, "no weight_map".into()))?;
        let mut shards: Vec<&str> = map.values().filter_map(|v| v.as_str()).collect();
        shards.sort_unstable();
        shards.dedup();
        let files = shards
            .iter()
            .map(|s| {
                if s.contains('/') || s.contains('\\') || s.contains("..") {
                    return Err(model_error(
                        &index,
                        format!("shard name {s:?} is not a file name"),
                    ));
                }
                Safetensors::open(&dir.join(s))
            })
            .collect::<Result<Vec<_>>>()?;
        for (name, shard) in map {
            let found = files.iter().any(|f| {
                f.path.file_name().and_then(|n| n.to_str()) == shard.as_str()
                    && f.entries.contains_key(name)
            });
            if !found {
                return Err(model_error(
                    &index,
                    format!("tensor '{name}' is not in its shard {shard}"),
                ));
            }
        }
        Ok(files)
    }

    /// Each tensor's name and the file that holds it.
    fn into_tensors(self) -> Result<Vec<(String, std::rc::Rc<Safetensors>)>> {
        let file = std::rc::Rc::new(self);
        Ok(file
            .entries
            .keys()
            .map(|n| (n.clone(), std::rc::Rc::clone(&file)))
            .collect())
    }

    /// Reads tensor `name` (dims reversed into ggml's order).
    fn read(&self, name: &str) -> Result<HostTensor> {
        let (dtype, shape, [b, end]) = &self.entries[name];
        let io = |source| EngineError::Io {
            path: self.path.clone(),
            source,
        };
        let mut f = std::fs::File::open(&self.path).map_err(io)?;
        if f.metadata().map_err(io)?.len() != self.len {
            return Err(model_error(
                &self.path,
                "the file changed while it was read".into(),
            ));
        }
        f.seek(SeekFrom::Start(self.data_start + b)).map_err(io)?;
        let mut data = vec![0u8; (end - b) as usize];
        f.read_exact(&mut data).map_err(io)?;
        let ne: Vec<i64> = if shape.is_empty() {
            vec![1]
        } else {
            shape.iter().rev().map(|&d| d as i64).collect()
        };
        let (dtype, data) = match dtype.as_str() {
            "F32" => (DType::F32, data),
            "F16" => (DType::F16, data),
            _ => (
                DType::F32,
                data.chunks_exact(2)
                    .flat_map(|b| {
                        f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16)
                            .to_le_bytes()
                    })
                    .collect(),
            ),
        };
        Ok(HostTensor {
            name: name.to_string(),
            dtype,
            ne,
            data,
        })
    }
}

/// Every tensor of `files` with the file that holds it.
trait IntoTensors {
    fn into_tensors(self) -> Result<Vec<(String, std::rc::Rc<Safetensors>)>>;
}

impl IntoTensors for Vec<Safetensors> {
    fn into_tensors(self) -> Result<Vec<(String, std::rc::Rc<Safetensors>)>> {
        let mut out = Vec::new();
        for f in self {
            out.extend(f.into_tensors()?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_decoders_linear_layers_take_q8_0() {
        assert!(is_linear("talker.model.layers.0.self_attn.q_proj.weight"));
        assert!(is_linear("predictor.lm_head.3.weight"));
        assert!(is_linear("predictor.layers.0.mlp.up_proj.weight"));
        assert!(is_linear("talker.codec_head.weight"));
        assert!(!is_linear("talker.model.codec_embedding.weight"));
        assert!(!is_linear("talker.model.layers.0.self_attn.q_norm.weight"));
        assert!(!is_linear("predictor.small_to_mtp_projection.weight"));
    }

    #[test]
    fn long_prefixes_shrink_and_every_name_fits_gguf() {
        assert_eq!(
            gguf_name("talker.code_predictor.model.layers.4.post_attention_layernorm.weight"),
            "predictor.layers.4.post_attention_layernorm.weight"
        );
        assert_eq!(
            gguf_name("talker.code_predictor.lm_head.14.weight"),
            "predictor.lm_head.14.weight"
        );
        assert_eq!(
            gguf_name(
                "speech_tokenizer.decoder.quantizer.rvq_rest.vq.layers.14._codebook.cluster_usage"
            ),
            "codec.quantizer.rvq_rest.vq.layers.14._codebook.cluster_usage"
        );
        assert_eq!(
            gguf_name("talker.model.norm.weight"),
            "talker.model.norm.weight"
        );
    }

    #[test]
    fn a_truncated_or_lying_safetensors_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        let header = br#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header);
        bytes.extend_from_slice(&[0u8; 12]);
        std::fs::write(&path, &bytes).unwrap();
        let err = Safetensors::open(&path).err().unwrap().to_string();
        assert!(
            err.contains("model.safetensors") && err.contains("does not fit"),
            "{err}"
        );
        bytes.extend_from_slice(&[0u8; 4]);
        std::fs::write(&path, &bytes).unwrap();
        let t = Safetensors::open(&path).unwrap().read("a").unwrap();
        assert_eq!((t.ne, t.dtype), (vec![4], DType::F32));
        std::fs::write(&path, u64::MAX.to_le_bytes()).unwrap();
        let err = Safetensors::open(&path).err().unwrap().to_string();
        assert!(err.contains("header of"), "{err}");
    }

    #[test]
    fn bf16_widens_exactly_and_f16_overflow_stays_f32() {
        let t = HostTensor {
            name: "talker.x.weight".into(),
            dtype: DType::F32,
            ne: vec![2, 1],
            data: [1.5f32, 1.0e6]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        };
        let s = store(t.clone(), "talker.x.weight", WeightType::F16).unwrap();
        assert_eq!(s.dtype, DType::F32, "1e6 is past f16's range");
        let small = HostTensor {
            data: [1.5f32, -2.0]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
            ..t
        };
        let s = store(small, "talker.x.weight", WeightType::F16).unwrap();
        assert_eq!((s.dtype, s.to_f32()), (DType::F16, vec![1.5, -2.0]));
    }
}
