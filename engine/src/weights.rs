//! The one weight store every family loads through: it takes the host tensors a family
//! has prepared (in the type and layout they will compute in), creates their ggml
//! context, allocates one device buffer on the runtime's main backend, uploads each
//! tensor and frees its host copy right after (so loading holds a weight twice only one
//! tensor at a time), and gives the tensors back by name, checking shapes with an error
//! that names the tensor and both shapes.
//!
//! Conversions stay in the families (Silero's f32 widening, [`crate::layers::Layers::store`]
//! packing, Kokoro's layouts); the store only uploads and looks up.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::backend::Runtime;
use crate::error::{EngineError, Result};
use crate::ggml::{Buffer, Context, DType, HostTensor, Tensor};

/// A tensor's host values, in the form the family prepared them (f32 values are
/// uploaded as they are, with no byte copy).
pub enum HostData {
    /// Raw little-endian element bytes of the tensor's type (f16, Q8_0 blocks, ...).
    Bytes(Vec<u8>),
    /// f32 values.
    F32(Vec<f32>),
}

/// One weight as a family hands it to [`WeightStore::upload`]: in the type and layout
/// it will compute in.
pub struct WeightTensor {
    /// Model name, looked up by [`WeightStore::tensor`].
    pub name: String,
    /// Element type on the device.
    pub dtype: DType,
    /// Dims in ggml order.
    pub ne: Vec<i64>,
    /// The values.
    pub data: HostData,
}

impl From<HostTensor> for WeightTensor {
    fn from(t: HostTensor) -> Self {
        WeightTensor {
            name: t.name,
            dtype: t.dtype,
            ne: t.ne,
            data: HostData::Bytes(t.data),
        }
    }
}

/// Tensors on the device, by model name.
pub struct WeightStore {
    ctx: Context,
    _buf: Buffer,
    /// Model name -> the ggml name (`w<index>`: ggml truncates names at 63 bytes, and
    /// some module paths are longer).
    names: HashMap<String, String>,
    /// The file the weights came from, for errors.
    path: PathBuf,
}

impl WeightStore {
    /// Uploads `tensors` (names unique) to `runtime`'s main device; `path` is the file
    /// they came from, named in lookup errors.
    pub fn upload(path: &Path, tensors: Vec<WeightTensor>, runtime: &Runtime) -> Result<Self> {
        let bad = |reason: String| EngineError::Model {
            path: path.to_path_buf(),
            reason,
        };
        let ctx = Context::new(tensors.len() + 4, 0)?;
        let mut names = HashMap::with_capacity(tensors.len());
        for (i, t) in tensors.iter().enumerate() {
            if !(1..=4).contains(&t.ne.len()) || t.ne.iter().any(|&n| n < 1) {
                return Err(bad(format!(
                    "tensor '{}' has dims {:?}; a weight has 1 to 4 positive dims",
                    t.name, t.ne
                )));
            }
            let short = format!("w{i}");
            if names.insert(t.name.clone(), short.clone()).is_some() {
                return Err(bad(format!("tensor '{}' appears twice", t.name)));
            }
            ctx.new_tensor(t.dtype, &t.ne, &short);
        }
        let buf = Buffer::alloc_context(&ctx, runtime.main())?;
        for (i, t) in tensors.into_iter().enumerate() {
            let on_device = ctx
                .tensor_by_name(&format!("w{i}"))
                .expect("created above with this name");
            match &t.data {
                HostData::Bytes(b) => on_device.write_bytes(b),
                HostData::F32(v) if t.dtype == DType::F32 => on_device.write_f32(v),
                HostData::F32(_) => Err(crate::ggml::GgmlError::Failed(format!(
                    "f32 values for a {:?} tensor",
                    t.dtype
                ))),
            }
            .map_err(|e| bad(format!("tensor '{}': {e}", t.name)))?;
            drop(t);
        }
        Ok(WeightStore {
            ctx,
            _buf: buf,
            names,
            path: path.to_path_buf(),
        })
    }

    /// The tensor `name`, if the store holds it.
    pub fn tensor(&self, name: &str) -> Option<Tensor<'_>> {
        self.names
            .get(name)
            .and_then(|short| self.ctx.tensor_by_name(short))
    }

    /// The tensor `name` with dims `ne` (ggml order; trailing ones may be left out), or
    /// an error naming the tensor and both shapes.
    pub fn get(&self, name: &str, ne: &[i64]) -> Result<Tensor<'_>> {
        let t = self
            .tensor(name)
            .ok_or_else(|| self.error(format!("tensor '{name}' is missing")))?;
        let have = t.ne();
        let want: Vec<i64> = (0..4).map(|i| ne.get(i).copied().unwrap_or(1)).collect();
        if ne.len() > 4 || have[..] != want[..] {
            return Err(self.error(format!(
                "tensor '{name}' has dims {:?}, expected {ne:?} (ggml order)",
                trim(&have)
            )));
        }
        Ok(t)
    }

    /// The file the weights came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, reason: String) -> EngineError {
        EngineError::Model {
            path: self.path.clone(),
            reason,
        }
    }
}

/// An f32 weight, ready for [`WeightStore::upload`].
pub fn f32_tensor(name: String, ne: Vec<i64>, data: Vec<f32>) -> WeightTensor {
    WeightTensor {
        name,
        dtype: DType::F32,
        ne,
        data: HostData::F32(data),
    }
}

/// Dims without trailing ones.
fn trim(ne: &[i64]) -> Vec<i64> {
    let mut v = ne.to_vec();
    while v.len() > 1 && v.last() == Some(&1) {
        v.pop();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::RuntimeOptions;

    fn store() -> WeightStore {
        let runtime = Runtime::new(&RuntimeOptions::default()).unwrap();
        let long = "a.module.path.much.longer.than.the.sixty.three.bytes.ggml.keeps.weight";
        let tensors = vec![
            f32_tensor("bias".into(), vec![3], vec![1.0, -2.0, 3.5]),
            f32_tensor(long.into(), vec![2, 2], vec![0.25, 0.5, 0.75, 1.0]),
        ];
        WeightStore::upload(Path::new("model.gguf"), tensors, &runtime).unwrap()
    }

    #[test]
    fn uploads_and_looks_up_by_name() {
        let s = store();
        let bias = s.get("bias", &[3]).unwrap();
        assert_eq!(bias.read_f32().unwrap(), vec![1.0, -2.0, 3.5]);
        let long = "a.module.path.much.longer.than.the.sixty.three.bytes.ggml.keeps.weight";
        let w = s.get(long, &[2, 2, 1]).unwrap();
        assert_eq!(w.read_f32().unwrap(), vec![0.25, 0.5, 0.75, 1.0]);
        assert!(s.tensor("absent").is_none());
    }

    #[test]
    fn refuses_a_wrong_shape_naming_the_tensor_and_both_shapes() {
        let s = store();
        let msg = s.get("bias", &[4]).err().unwrap().to_string();
        assert!(msg.contains("'bias'"), "{msg}");
        assert!(msg.contains("[3]") && msg.contains("[4]"), "{msg}");
        assert!(msg.contains("model.gguf"), "{msg}");
        let msg = s.get("absent", &[1]).err().unwrap().to_string();
        assert!(msg.contains("'absent' is missing"), "{msg}");
    }

    #[test]
    fn refuses_a_duplicate_name_and_wrong_byte_count() {
        let runtime = Runtime::new(&RuntimeOptions::default()).unwrap();
        let twice = vec![
            f32_tensor("x".into(), vec![1], vec![1.0]),
            f32_tensor("x".into(), vec![1], vec![2.0]),
        ];
        let msg = WeightStore::upload(Path::new("m"), twice, &runtime)
            .err()
            .unwrap()
            .to_string();
        assert!(msg.contains("'x' appears twice"), "{msg}");
        let short = vec![f32_tensor("y".into(), vec![2], vec![1.0])];
        let msg = WeightStore::upload(Path::new("m"), short, &runtime)
            .err()
            .unwrap()
            .to_string();
        assert!(msg.contains("'y'"), "{msg}");
    }
}
