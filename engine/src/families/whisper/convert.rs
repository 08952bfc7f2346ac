//! Conversion of a CTranslate2 Whisper model (what faster-whisper runs) to the engine's
//! GGUF: CTranslate2's variables under their names with `/` as `.`, the tokenizer
//! vocabulary, the mel filterbank and the hyper-parameters as metadata; the linear
//! layers optionally stored as Q8_0 ([`WeightType`]).

use std::path::{Path, PathBuf};

use crate::error::{EngineError, Result};
use crate::families::{Conversion, ConvertOptions};
use crate::ggml::{self, DType, GgufValue, HostTensor};
use crate::spec::ModelSpec;

use super::mel::{self, MelParams};
use super::model::{self, HParams};
use super::tokenizer::{self, Tokenizer};
use super::{
    ct2, describe_dimensions, ALIGNMENT_HEADS_KEY, FAMILY, HPARAM_KEYS, MEL_FILTERS, TOKENS_KEY,
};

/// The registry's converter: a CTranslate2 model (its `model.bin` or folder) through
/// [`convert_ct2`], `quantize` naming a [`WeightType`]; no further sources.
pub(super) fn convert(
    model: &Path,
    spec_override: Option<&Path>,
    opts: &ConvertOptions,
) -> Result<Conversion> {
    opts.only_sources(FAMILY.info.family, &[])?;
    let weights = match &opts.quantize {
        Some(q) => q.parse()?,
        None => WeightType::Keep,
    };
    let spec = FAMILY.source_spec(model, spec_override)?;
    let c = convert_ct2(model, &spec, weights)?;
    Ok(Conversion {
        spec,
        source_format: c.source_format,
        metadata: c.metadata,
        tensors: c.tensors,
    })
}

/// What a conversion produces: GGUF metadata (without the audiocpp keys) and tensors.
pub struct Converted {
    /// Container description for `audiocpp.source_format`.
    pub source_format: String,
    /// Hyper-parameters, vocabulary, suppression lists.
    pub metadata: Vec<(String, GgufValue)>,
    /// Weights and the mel filterbank.
    pub tensors: Vec<HostTensor>,
}

fn ct2_paths(path: &Path) -> (PathBuf, PathBuf) {
    if path.is_dir() {
        (path.join("model.bin"), path.to_path_buf())
    } else {
        (
            path.to_path_buf(),
            path.parent().map(Path::to_path_buf).unwrap_or_default(),
        )
    }
}

fn count_layers(m: &ct2::Ct2Model, prefix: &str) -> usize {
    (0..)
        .take_while(|i| {
            let p = format!("{prefix}/layer_{i}/");
            m.variables.iter().any(|v| v.name.starts_with(&p))
        })
        .count()
}

/// How the converter stores the linear layers' weights; every other tensor (the token
/// embedding included) keeps its CTranslate2 type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightType {
    /// As in the CTranslate2 file (f16 or f32).
    #[default]
    Keep,
    /// ggml Q8_0 (8-bit blocks of 32 with an f16 scale) for the linear layers.
    Q8_0,
}

impl std::str::FromStr for WeightType {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "keep" | "f16" => Ok(WeightType::Keep),
            "q8_0" => Ok(WeightType::Q8_0),
            other => Err(EngineError::Usage(format!(
                "unknown parameter 'quantize' '{other}' (expected q8_0, or f16 to keep the model's type)"
            ))),
        }
    }
}

/// True for the linear layers' weights, the ones Q8_0 applies to. The token embedding
/// (also the output projection) stays in the model's type: quantizing it turned the
/// first word of the espeak clip `phrase_en_us` from "Speech" into "The" (as
/// faster-whisper's int8 does), keeping it f16 gives the exact phrase.
fn is_linear_weight(name: &str) -> bool {
    model::is_matmul_weight(name) && name != "decoder.embeddings.weight"
}

/// The type a converted tensor is stored in: a pure decision from its name, its dims and
/// the requested weight type. Quantized rows must be whole blocks; tensors that are not
/// keep `source`.
pub fn stored_type(name: &str, ne: &[i64], source: DType, want: WeightType) -> DType {
    let q = DType::Q8_0;
    let whole_blocks = ne
        .first()
        .is_some_and(|&n| (n as usize).is_multiple_of(q.block_len()));
    match want {
        WeightType::Q8_0 if is_linear_weight(name) && whole_blocks => q,
        _ => source,
    }
}

fn store(t: HostTensor, want: WeightType) -> Result<HostTensor> {
    let dtype = stored_type(&t.name, &t.ne, t.dtype, want);
    if dtype == t.dtype {
        return Ok(t);
    }
    let values = t.to_f32();
    let data = ggml::quantize_rows(dtype, &values, t.ne[0] as usize)?;
    Ok(HostTensor { dtype, data, ..t })
}

/// Reads a CTranslate2 Whisper model (`model.bin` or its folder, with `tokenizer.json`
/// and optionally `config.json` beside it) into GGUF tensors and metadata, storing the
/// matrix weights as `weights` asks.
pub fn convert_ct2(path: &Path, spec: &ModelSpec, weights: WeightType) -> Result<Converted> {
    let (bin, dir) = ct2_paths(path);
    let bad = |reason: String| EngineError::Model {
        path: bin.clone(),
        reason,
    };
    let read = |p: &Path| {
        std::fs::read(p).map_err(|source| EngineError::Io {
            path: p.to_path_buf(),
            source,
        })
    };
    let bytes = read(&bin)?;
    let m = ct2::parse(&bytes).map_err(|e| bad(format!("not a CTranslate2 model.bin: {e}")))?;
    drop(bytes);
    if m.spec != "WhisperSpec" {
        return Err(bad(format!(
            "CTranslate2 model of spec '{}', expected WhisperSpec",
            m.spec
        )));
    }
    let var = |name: &str| {
        m.get(name)
            .ok_or_else(|| bad(format!("variable '{name}' is missing")))
    };
    let dims = |name: &str, rank: usize| -> Result<Vec<usize>> {
        let v = var(name)?;
        if v.shape.len() != rank {
            return Err(bad(format!("variable '{name}' has shape {:?}", v.shape)));
        }
        Ok(v.shape.clone())
    };
    let heads = |name: &str| -> Result<usize> {
        var(name)?
            .scalar_int()
            .filter(|&h| h > 0)
            .map(|h| h as usize)
            .ok_or_else(|| bad(format!("'{name}' is not a positive integer")))
    };
    if let Some(act) = m.get("decoder/activation").and_then(|v| v.scalar_int()) {
        if act != 3 {
            return Err(bad(format!(
                "decoder activation {act} is not GELU (3); not a Whisper model"
            )));
        }
    }
    let conv1 = dims("encoder/conv1/weight", 3)?;
    let enc_pos = dims("encoder/position_encodings/encodings", 2)?;
    let dec_pos = dims("decoder/position_encodings/encodings", 2)?;
    let emb = dims("decoder/embeddings/weight", 2)?;
    let hp = HParams {
        n_mels: conv1[1],
        n_audio_ctx: enc_pos[0],
        n_audio_state: conv1[0],
        n_audio_head: heads("encoder/num_heads")?,
        n_audio_layer: count_layers(&m, "encoder"),
        n_text_ctx: dec_pos[0],
        n_text_state: emb[1],
        n_text_head: heads("decoder/num_heads")?,
        n_text_layer: count_layers(&m, "decoder"),
        n_vocab: emb[0],
    };
    if hp.n_audio_layer == 0
        || hp.n_text_layer == 0
        || !hp.n_audio_state.is_multiple_of(hp.n_audio_head)
        || !hp.n_text_state.is_multiple_of(hp.n_text_head)
    {
        return Err(bad(describe_dimensions(&hp)));
    }
    let mut tensors = Vec::new();
    for (name, ne) in hp.tensor_shapes() {
        let v = var(&name.replace('.', "/"))?;
        let want: Vec<usize> = ne.iter().rev().map(|&d| d as usize).collect();
        if v.shape != want {
            return Err(bad(format!(
                "variable '{}' has shape {:?}, expected {want:?}",
                v.name, v.shape
            )));
        }
        let dtype = match v.dtype {
            ct2::Ct2Type::F16 => DType::F16,
            ct2::Ct2Type::F32 => DType::F32,
            other => {
                return Err(bad(format!(
                    "variable '{}' is {other:?}; quantized CTranslate2 models are not supported (convert it with ct2-transformers-converter's --quantization float16 or float32)",
                    v.name
                )))
            }
        };
        let t = HostTensor {
            name,
            dtype,
            ne,
            data: v.data.clone(),
        };
        tensors.push(store(t, weights)?);
    }
    let mp = mel_params(spec, hp.n_mels)?;
    let filters = mel::filterbank(&mp);
    tensors.push(HostTensor {
        name: MEL_FILTERS.into(),
        dtype: DType::F32,
        ne: vec![(mp.n_fft / 2 + 1) as i64, mp.n_mels as i64],
        data: filters.iter().flat_map(|v| v.to_le_bytes()).collect(),
    });

    let tok_path = dir.join("tokenizer.json");
    let tok_json = String::from_utf8(read(&tok_path)?).map_err(|_| EngineError::Model {
        path: tok_path.clone(),
        reason: "not UTF-8".into(),
    })?;
    let vocab = tokenizer::vocab_from_tokenizer_json(&tok_json, hp.n_vocab).map_err(|reason| {
        EngineError::Model {
            path: tok_path.clone(),
            reason,
        }
    })?;
    Tokenizer::new(vocab.clone()).map_err(|reason| EngineError::Model {
        path: tok_path.clone(),
        reason,
    })?;
    let cfg_path = dir.join("config.json");
    let config: serde_json::Value = if cfg_path.is_file() {
        serde_json::from_slice(&read(&cfg_path)?).map_err(|e| EngineError::Model {
            path: cfg_path.clone(),
            reason: e.to_string(),
        })?
    } else {
        serde_json::Value::Null
    };
    let ids = |key: &str| -> Vec<u32> {
        config[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_u64())
                    .map(|v| v as u32)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut metadata: Vec<(String, GgufValue)> = HPARAM_KEYS
        .iter()
        .zip(hp.values())
        .map(|(k, v)| (format!("whisper.{k}"), GgufValue::U32(v as u32)))
        .collect();
    metadata.push(("whisper.n_fft".into(), GgufValue::U32(mp.n_fft as u32)));
    metadata.push(("whisper.hop_length".into(), GgufValue::U32(mp.hop as u32)));
    metadata.push((
        "whisper.suppress_ids".into(),
        GgufValue::U32Array(ids("suppress_ids")),
    ));
    metadata.push((
        "whisper.suppress_ids_begin".into(),
        GgufValue::U32Array(ids("suppress_ids_begin")),
    ));
    // CTranslate2's converter records OpenAI's alignment heads as [layer, head] pairs.
    let heads: Vec<u32> = config["alignment_heads"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|pair| pair.as_array())
        .filter(|pair| pair.len() == 2)
        .flat_map(|pair| pair.iter().filter_map(|v| v.as_u64()).map(|v| v as u32))
        .collect();
    if !heads.is_empty() {
        metadata.push((ALIGNMENT_HEADS_KEY.into(), GgufValue::U32Array(heads)));
    }
    metadata.push((TOKENS_KEY.into(), GgufValue::StrArray(vocab)));
    Ok(Converted {
        source_format: format!("ctranslate2:{}:v{}", m.spec, m.version),
        metadata,
        tensors,
    })
}

fn mel_params(spec: &ModelSpec, n_mels: usize) -> Result<MelParams> {
    let size = |key: &str| -> Result<usize> {
        let v = spec.hparam_i64(key)?;
        usize::try_from(v).map_err(|_| EngineError::BadSpec {
            origin: spec.family.clone(),
            reason: format!("hparams.{key} = {v} is negative"),
        })
    };
    let p = MelParams {
        sample_rate: spec.sample_rate,
        n_fft: size("n_fft")?,
        hop: size("hop_length")?,
        n_mels,
    };
    p.validate().map_err(|reason| EngineError::BadSpec {
        origin: spec.family.clone(),
        reason,
    })?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_linear_weights_with_whole_blocks_are_quantized() {
        let q = WeightType::Q8_0;
        let f16 = DType::F16;
        let lin = "decoder.layer_0.ffn.linear_1.weight";
        assert_eq!(stored_type(lin, &[1536, 384], f16, q), DType::Q8_0);
        assert_eq!(stored_type(lin, &[1536, 384], f16, WeightType::Keep), f16);
        // Rows that do not split into blocks of 32 stay as they are.
        assert_eq!(stored_type(lin, &[40, 384], f16, q), f16);
        for other in [
            "decoder.embeddings.weight",
            "decoder.layer_0.ffn.linear_1.bias",
            "encoder.conv1.weight",
            "encoder.layer_0.ffn.layer_norm.gamma",
            "decoder.position_encodings.encodings",
        ] {
            assert_eq!(stored_type(other, &[384, 384], f16, q), f16, "{other}");
        }
        assert!("q8_0".parse::<WeightType>().is_ok());
        let err = "q4".parse::<WeightType>().unwrap_err().to_string();
        assert!(err.contains("q8_0"), "{err}");
    }

    /// Q8_0 stores round(x / d) with d = max|x| / 127 per block of 32 and d as f16: each
    /// value comes back within d / 2 (plus the f16 rounding of d, < 0.1 % of max|x|).
    #[test]
    fn q8_0_round_trip_is_within_half_a_step() {
        let row = 96;
        let data: Vec<f32> = (0..row * 3)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013 * (1.0 + (i / 32) as f32))
            .collect();
        let bytes = ggml::quantize_rows(DType::Q8_0, &data, row).unwrap();
        assert_eq!(bytes.len(), 3 * 3 * 34);
        let t = HostTensor {
            name: "w".into(),
            dtype: DType::Q8_0,
            ne: vec![row as i64, 3],
            data: bytes,
        };
        let back = t.to_f32();
        assert_eq!(back.len(), data.len());
        for (block, (x, y)) in data.chunks(32).zip(back.chunks(32)).enumerate() {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            let tol = amax / 127.0 / 2.0 + amax * 1e-3;
            for (a, b) in x.iter().zip(y) {
                assert!(
                    (a - b).abs() <= tol,
                    "block {block}: {a} -> {b} (tol {tol})"
                );
            }
        }
        assert!(ggml::quantize_rows(DType::Q8_0, &data, 40).is_err());
        assert!(ggml::quantize_rows(DType::F16, &data, row).is_err());
    }
}
