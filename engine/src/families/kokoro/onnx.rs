//! ONNX models read into what the Kokoro converter walks: the graph's nodes (op, name,
//! inputs, outputs, integer attributes) and its initializers as typed host arrays.
//!
//! The protobuf is decoded by the `onnx-protobuf` crate (generated from ONNX's own
//! `onnx.proto`); this module only checks what it got: every initializer's data must
//! match its shape and type, and weights kept outside the file (ONNX external data) are
//! refused, since the converter reads one file.

use std::collections::HashMap;

use onnx_protobuf::{Message, ModelProto, TensorProto};

/// ONNX `TensorProto.DataType` values this reader keeps.
mod data_type {
    pub const FLOAT: i32 = 1;
    pub const UINT8: i32 = 2;
    pub const INT8: i32 = 3;
    pub const INT32: i32 = 6;
    pub const INT64: i32 = 7;
}

/// An initializer's values.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorData {
    /// float32.
    F32(Vec<f32>),
    /// uint8 (ConvInteger weights and zero points).
    U8(Vec<u8>),
    /// int8 (MatMulInteger and DynamicQuantizeLSTM weights).
    I8(Vec<i8>),
    /// int32.
    I32(Vec<i32>),
    /// int64 (shapes, axes).
    I64(Vec<i64>),
    /// Any other element type, by its ONNX type id: kept so the name resolves, never read.
    Other(i32),
}

impl TensorData {
    /// The values as f32, for the numeric types.
    pub fn to_f32(&self) -> Option<Vec<f32>> {
        Some(match self {
            TensorData::F32(v) => v.clone(),
            TensorData::U8(v) => v.iter().map(|&x| x as f32).collect(),
            TensorData::I8(v) => v.iter().map(|&x| x as f32).collect(),
            TensorData::I32(v) => v.iter().map(|&x| x as f32).collect(),
            TensorData::I64(_) | TensorData::Other(_) => return None,
        })
    }

    /// True for the 8-bit integer types quantized weights use.
    pub fn is_int8(&self) -> bool {
        matches!(self, TensorData::U8(_) | TensorData::I8(_))
    }
}

/// A graph initializer (a constant tensor).
#[derive(Debug, Clone)]
pub struct Initializer {
    /// Its name in the graph.
    pub name: String,
    /// Shape, outermost first (ONNX order).
    pub dims: Vec<usize>,
    /// Values, row-major.
    pub data: TensorData,
}

impl Initializer {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.dims.iter().product()
    }

    /// True when it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A graph node.
#[derive(Debug, Clone)]
pub struct Node {
    /// Node name (the exporter's scope path, e.g. `/encoder/bert/.../MatMul`).
    pub name: String,
    /// Operator, e.g. `ConvInteger`.
    pub op_type: String,
    /// Input value names (`""` for an omitted optional input).
    pub inputs: Vec<String>,
    /// Output value names.
    pub outputs: Vec<String>,
    /// Integer and integer-list attributes (`strides`, `group`, ...).
    pub int_attributes: Vec<(String, Vec<i64>)>,
}

impl Node {
    /// An integer-list attribute.
    pub fn ints(&self, name: &str) -> Option<&[i64]> {
        self.int_attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }
}

/// A parsed ONNX graph with its value-to-node indexes.
#[derive(Debug, Clone)]
pub struct Graph {
    /// Nodes in file order (topological, as ONNX requires).
    pub nodes: Vec<Node>,
    /// Initializers in file order.
    pub initializers: Vec<Initializer>,
    by_name: HashMap<String, usize>,
    producer: HashMap<String, usize>,
    consumers: HashMap<String, Vec<(usize, usize)>>,
}

impl Graph {
    /// An initializer by name.
    pub fn initializer(&self, name: &str) -> Option<&Initializer> {
        self.by_name.get(name).map(|&i| &self.initializers[i])
    }

    /// The node producing a value.
    pub fn producer(&self, value: &str) -> Option<&Node> {
        self.producer.get(value).map(|&i| &self.nodes[i])
    }

    /// The nodes reading a value, with the input slot each reads it in, in file order.
    pub fn consumers(&self, value: &str) -> Vec<(&Node, usize)> {
        self.consumers
            .get(value)
            .map(|v| v.iter().map(|&(n, slot)| (&self.nodes[n], slot)).collect())
            .unwrap_or_default()
    }
}

/// Largest rank accepted for an initializer.
const MAX_RANK: usize = 8;

/// Parses the bytes of an `.onnx` file.
pub fn parse(bytes: &[u8]) -> Result<Graph, String> {
    let model = ModelProto::parse_from_bytes(bytes)
        .map_err(|e| format!("not a readable ONNX protobuf ({e}); is the file truncated?"))?;
    let graph = model
        .graph
        .into_option()
        .ok_or("the ONNX model has no graph")?;
    if graph.node.is_empty() {
        return Err("the ONNX graph has no nodes (truncated or not a model)".into());
    }
    let mut initializers = Vec::with_capacity(graph.initializer.len());
    for t in &graph.initializer {
        initializers.push(initializer(t)?);
    }
    let nodes: Vec<Node> = graph
        .node
        .iter()
        .map(|n| Node {
            name: n.name.clone(),
            op_type: n.op_type.clone(),
            inputs: n.input.clone(),
            outputs: n.output.clone(),
            int_attributes: n
                .attribute
                .iter()
                .filter_map(|a| {
                    if !a.ints.is_empty() {
                        Some((a.name.clone(), a.ints.clone()))
                    } else if a.type_.value() == 2 {
                        Some((a.name.clone(), vec![a.i]))
                    } else {
                        None
                    }
                })
                .collect(),
        })
        .collect();
    let mut by_name = HashMap::new();
    for (i, t) in initializers.iter().enumerate() {
        if by_name.insert(t.name.clone(), i).is_some() {
            return Err(format!("initializer '{}' is defined twice", t.name));
        }
    }
    let mut producer = HashMap::new();
    let mut consumers: HashMap<String, Vec<(usize, usize)>> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        for out in &n.outputs {
            producer.insert(out.clone(), i);
        }
        for (slot, inp) in n.inputs.iter().enumerate() {
            if !inp.is_empty() {
                consumers.entry(inp.clone()).or_default().push((i, slot));
            }
        }
    }
    Ok(Graph {
        nodes,
        initializers,
        by_name,
        producer,
        consumers,
    })
}

fn initializer(t: &TensorProto) -> Result<Initializer, String> {
    let name = t.name.clone();
    if t.data_location.value() != 0 || !t.external_data.is_empty() {
        return Err(format!(
            "initializer '{name}' keeps its data outside the file (ONNX external data); \
             save the model as one file"
        ));
    }
    if t.dims.len() > MAX_RANK || t.dims.iter().any(|&d| d < 0) {
        return Err(format!("initializer '{name}' has shape {:?}", t.dims));
    }
    let dims: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
    let count = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| format!("initializer '{name}' has an impossible shape {dims:?}"))?;
    let raw = &t.raw_data;
    let sized = |elem: usize, have: usize| -> Result<(), String> {
        let want = count.saturating_mul(elem);
        if have == want {
            Ok(())
        } else {
            Err(format!(
                "initializer '{name}' has {have} bytes of data, but its shape {dims:?} needs {want}"
            ))
        }
    };
    let data = match t.data_type {
        data_type::FLOAT if !raw.is_empty() => {
            sized(4, raw.len())?;
            TensorData::F32(
                raw.chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            )
        }
        data_type::FLOAT => {
            sized(4, t.float_data.len() * 4)?;
            TensorData::F32(t.float_data.clone())
        }
        data_type::UINT8 if !raw.is_empty() => {
            sized(1, raw.len())?;
            TensorData::U8(raw.clone())
        }
        data_type::UINT8 => {
            sized(1, t.int32_data.len())?;
            TensorData::U8(t.int32_data.iter().map(|&v| v as u8).collect())
        }
        data_type::INT8 if !raw.is_empty() => {
            sized(1, raw.len())?;
            TensorData::I8(raw.iter().map(|&b| b as i8).collect())
        }
        data_type::INT8 => {
            sized(1, t.int32_data.len())?;
            TensorData::I8(t.int32_data.iter().map(|&v| v as i8).collect())
        }
        data_type::INT32 if !raw.is_empty() => {
            sized(4, raw.len())?;
            TensorData::I32(
                raw.chunks_exact(4)
                    .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            )
        }
        data_type::INT32 => {
            sized(4, t.int32_data.len() * 4)?;
            TensorData::I32(t.int32_data.clone())
        }
        data_type::INT64 if !raw.is_empty() => {
            sized(8, raw.len())?;
            TensorData::I64(
                raw.chunks_exact(8)
                    .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
                    .collect(),
            )
        }
        data_type::INT64 => {
            sized(8, t.int64_data.len() * 8)?;
            TensorData::I64(t.int64_data.clone())
        }
        other => TensorData::Other(other),
    };
    Ok(Initializer { name, dims, data })
}

#[cfg(test)]
mod tests {
    use super::*;
    use onnx_protobuf::{AttributeProto, GraphProto, NodeProto};

    /// A one-node model: Y = MatMul(X, W) with a 2x3 f32 initializer W.
    pub(crate) fn tiny_model() -> Vec<u8> {
        let mut w = TensorProto::new();
        w.name = "W".into();
        w.dims = vec![2, 3];
        w.data_type = data_type::FLOAT;
        w.raw_data = [1f32, 2., 3., 4., 5., 6.]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut node = NodeProto::new();
        node.name = "/layer/MatMul".into();
        node.op_type = "MatMul".into();
        node.input = vec!["X".into(), "W".into()];
        node.output = vec!["Y".into()];
        let mut attr = AttributeProto::new();
        attr.name = "pads".into();
        attr.ints = vec![1, 1];
        node.attribute.push(attr);
        let mut graph = GraphProto::new();
        graph.node.push(node);
        graph.initializer.push(w);
        let mut model = ModelProto::new();
        model.graph = Some(graph).into();
        model.write_to_bytes().unwrap()
    }

    #[test]
    fn reads_nodes_initializers_and_indexes() {
        let g = parse(&tiny_model()).unwrap();
        let w = g.initializer("W").unwrap();
        assert_eq!(w.dims, vec![2, 3]);
        assert_eq!(w.data, TensorData::F32(vec![1., 2., 3., 4., 5., 6.]));
        let (node, slot) = g.consumers("W")[0];
        assert_eq!((node.op_type.as_str(), slot), ("MatMul", 1));
        assert_eq!(g.producer("Y").unwrap().name, "/layer/MatMul");
        assert_eq!(node.ints("pads"), Some(&[1i64, 1][..]));
    }

    #[test]
    fn truncated_files_are_errors() {
        let bytes = tiny_model();
        for cut in [1, 5, bytes.len() / 2, bytes.len() - 1] {
            assert!(parse(&bytes[..cut]).is_err(), "cut at {cut} parsed");
        }
        assert!(parse(b"").unwrap_err().contains("no graph"));
    }

    #[test]
    fn data_that_does_not_fit_the_shape_is_an_error() {
        let mut model = ModelProto::parse_from_bytes(&tiny_model()).unwrap();
        model.graph.as_mut().unwrap().initializer[0].dims = vec![2, 4];
        let err = parse(&model.write_to_bytes().unwrap()).unwrap_err();
        assert!(err.contains("'W' has 24 bytes"), "{err}");
    }
}
