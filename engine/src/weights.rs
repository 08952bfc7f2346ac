//! The one weight store every family loads through: it takes the host tensors a family
//! prepares (in the type and layout they will compute in) one at a time, uploads them in
//! batches of about [`BATCH_BYTES`] (a ggml context and one device buffer on the
//! runtime's main backend per batch) and frees each batch's host copies right after, so
//! loading holds at most one batch on the host beyond what the family keeps; it gives the
//! tensors back by name, checking shapes with an error that names the tensor and both
//! shapes.
//!
//! Conversions stay in the families (Silero's f32 widening, [`crate::layers::Layers::store`]
//! packing, Kokoro's layouts); the store only uploads and looks up.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::backend::Runtime;
use crate::error::{EngineError, Result};
use crate::ggml::{Buffer, Context, DType, FrozenTensors, HostTensor, Tensor};

/// Host bytes gathered before a batch is uploaded: small against a model (Kokoro's
/// device weights are 365 MB), large enough that a model needs few buffers.
pub const BATCH_BYTES: usize = 16 << 20;

/// A tensor's host values, in the form the family prepared them (f32 values are
/// uploaded as they are, with no byte copy).
pub enum HostData {
    /// Raw little-endian element bytes of the tensor's type (f16, Q8_0 blocks, ...).
    Bytes(Vec<u8>),
    /// f32 values.
    F32(Vec<f32>),
}

impl HostData {
    /// Host bytes held.
    fn len_bytes(&self) -> usize {
        match self {
            HostData::Bytes(b) => b.len(),
            HostData::F32(v) => 4 * v.len(),
        }
    }
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

/// Tensors on the device, by model name. Read-only once uploaded and `Sync`: workers of
/// one model share a store behind an `Arc` (each batch is one [`FrozenTensors`]).
pub struct WeightStore {
    batches: Vec<FrozenTensors>,
    /// Model name -> its batch and ggml name (`w<index>`: ggml truncates names at 63
    /// bytes, and some module paths are longer).
    names: HashMap<String, (usize, String)>,
    /// The file the weights came from, for errors.
    path: PathBuf,
}

impl WeightStore {
    /// Uploads `tensors` (names unique), taking them one at a time, to `runtime`'s main
    /// device; the first error a family's conversion yields stops the load. `path` is
    /// the file they came from, named in errors.
    pub fn upload(
        path: &Path,
        tensors: impl IntoIterator<Item = Result<WeightTensor>>,
        runtime: &Runtime,
    ) -> Result<Self> {
        let mut store = WeightStore {
            batches: Vec::new(),
            names: HashMap::new(),
            path: path.to_path_buf(),
        };
        let mut pending = Vec::new();
        let mut pending_bytes = 0;
        for t in tensors {
            let t = t?;
            if !(1..=4).contains(&t.ne.len()) || t.ne.iter().any(|&n| n < 1) {
                return Err(store.error(format!(
                    "tensor '{}' has dims {:?}; a weight has 1 to 4 positive dims",
                    t.name, t.ne
                )));
            }
            let short = format!("w{}", store.names.len());
            let at = (store.batches.len(), short);
            if store.names.insert(t.name.clone(), at).is_some() {
                return Err(store.error(format!("tensor '{}' appears twice", t.name)));
            }
            pending_bytes += t.data.len_bytes();
            pending.push(t);
            if pending_bytes >= BATCH_BYTES {
                store.upload_batch(std::mem::take(&mut pending), runtime)?;
                pending_bytes = 0;
            }
        }
        if !pending.is_empty() {
            store.upload_batch(pending, runtime)?;
        }
        Ok(store)
    }

    /// Creates `tensors` in a context of their own, allocates its device buffer, writes
    /// them and drops their host copies.
    fn upload_batch(&mut self, tensors: Vec<WeightTensor>, runtime: &Runtime) -> Result<()> {
        let ctx = Context::new(tensors.len() + 4, 0)?;
        for t in &tensors {
            ctx.new_tensor(t.dtype, &t.ne, &self.names[&t.name].1);
        }
        let buf = Buffer::alloc_context(&ctx, runtime.main())?;
        for t in tensors {
            let on_device = ctx
                .tensor_by_name(&self.names[&t.name].1)
                .expect("created above with this name");
            match &t.data {
                HostData::Bytes(b) => on_device.write_bytes(b),
                HostData::F32(v) if t.dtype == DType::F32 => on_device.write_f32(v),
                HostData::F32(_) => Err(crate::ggml::GgmlError::Failed(format!(
                    "f32 values for a {:?} tensor",
                    t.dtype
                ))),
            }
            .map_err(|e| self.error(format!("tensor '{}': {e}", t.name)))?;
        }
        self.batches.push(FrozenTensors::new(ctx, buf));
        Ok(())
    }

    /// The tensor `name`, if the store holds it.
    pub fn tensor(&self, name: &str) -> Option<Tensor<'_>> {
        let (batch, short) = self.names.get(name)?;
        self.batches.get(*batch)?.tensor_by_name(short)
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

    /// Where each batch's device memory starts: stores that share their weights give
    /// the same addresses (see the families' `fork`).
    pub fn base_addresses(&self) -> Vec<usize> {
        self.batches
            .iter()
            .map(FrozenTensors::base_address)
            .collect()
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
        WeightStore::upload(
            Path::new("model.gguf"),
            tensors.into_iter().map(Ok),
            &runtime,
        )
        .unwrap()
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
    fn uploads_in_batches_and_finds_every_tensor() {
        let runtime = Runtime::new(&RuntimeOptions::default()).unwrap();
        let n = BATCH_BYTES / 4 / 2 + 1;
        let tensors = (0..5).map(|i| {
            Ok(f32_tensor(
                format!("t{i}"),
                vec![n as i64],
                vec![i as f32; n],
            ))
        });
        let s = WeightStore::upload(Path::new("m"), tensors, &runtime).unwrap();
        assert_eq!(s.batches.len(), 3, "two tensors pass the batch size");
        for i in 0..5 {
            let v = s
                .get(&format!("t{i}"), &[n as i64])
                .unwrap()
                .read_f32()
                .unwrap();
            assert!(v.len() == n && v.iter().all(|&x| x == i as f32), "t{i}");
        }
    }

    #[test]
    fn stops_at_the_first_conversion_error() {
        let runtime = Runtime::new(&RuntimeOptions::default()).unwrap();
        let tensors = [
            Ok(f32_tensor("a".into(), vec![1], vec![1.0])),
            Err(EngineError::Usage("bad tensor".into())),
        ];
        let msg = WeightStore::upload(Path::new("m"), tensors, &runtime)
            .err()
            .unwrap()
            .to_string();
        assert!(msg.contains("bad tensor"), "{msg}");
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
        let msg = WeightStore::upload(Path::new("m"), twice.into_iter().map(Ok), &runtime)
            .err()
            .unwrap()
            .to_string();
        assert!(msg.contains("'x' appears twice"), "{msg}");
        let short = vec![f32_tensor("y".into(), vec![2], vec![1.0])];
        let msg = WeightStore::upload(Path::new("m"), short.into_iter().map(Ok), &runtime)
            .err()
            .unwrap()
            .to_string();
        assert!(msg.contains("'y'"), "{msg}");
    }
}
