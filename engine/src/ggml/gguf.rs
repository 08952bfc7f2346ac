//! GGUF files: reading one's metadata and tensors (from bytes, or from a file tensor
//! by tensor, never whole in memory) and writing one, through ggml's `gguf_*` API.

use std::ffi::CString;
use std::path::Path;

use llama_cpp_sys_2 as sys;

use super::device::cstr;
use super::{f16_bytes_to_f32, init, log, DType, GgmlError, Result};

/// A metadata value in a GGUF file (the kinds the engine reads and writes).
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    /// UTF-8 string.
    Str(String),
    /// Unsigned 32-bit integer.
    U32(u32),
    /// 32-bit float.
    F32(f32),
    /// Array of UTF-8 strings (e.g. a tokenizer vocabulary).
    StrArray(Vec<String>),
    /// Array of unsigned 32-bit integers.
    U32Array(Vec<u32>),
}

/// A named tensor with host data, as read from or written to a model file.
#[derive(Debug, Clone)]
pub struct HostTensor {
    /// Tensor name.
    pub name: String,
    /// Element type of `data`.
    pub dtype: DType,
    /// Dims in ggml order (`ne[0]` fastest).
    pub ne: Vec<i64>,
    /// Raw little-endian element bytes.
    pub data: Vec<u8>,
}

impl HostTensor {
    /// The values as f32, dequantizing block types with ggml's own routine. A data
    /// buffer that ends inside a block yields the values of its whole blocks only.
    pub fn to_f32(&self) -> Vec<f32> {
        match self.dtype {
            DType::F32 => self
                .data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            DType::F16 => f16_bytes_to_f32(&self.data),
            DType::I8 => self.data.iter().map(|&b| b as i8 as f32).collect(),
            DType::I32 => self
                .data
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32)
                .collect(),
            DType::Q8_0 => {
                let blocks = self.data.len() / self.dtype.size();
                let n = blocks * self.dtype.block_len();
                let mut out = vec![0f32; n];
                // SAFETY: ggml's type traits are static; Q8_0 has a to_float routine that
                // reads `blocks` whole blocks (within `data`) and writes n floats.
                unsafe {
                    let traits = sys::ggml_get_type_traits(self.dtype.raw());
                    if let Some(to_float) = (*traits).to_float {
                        to_float(self.data.as_ptr().cast(), out.as_mut_ptr(), n as i64);
                    }
                }
                out
            }
        }
    }
}

/// Metadata and tensors of a GGUF file.
#[derive(Debug, Clone, Default)]
pub struct GgufContents {
    /// Key/value metadata of supported kinds (others are skipped).
    pub metadata: Vec<(String, GgufValue)>,
    /// Every tensor with its data.
    pub tensors: Vec<HostTensor>,
}

/// Reads a whole GGUF file from memory (metadata and tensor data).
pub fn read_gguf(bytes: &[u8]) -> Result<GgufContents> {
    init();
    let mut data_ctx: *mut sys::ggml_context = std::ptr::null_mut();
    let params = sys::gguf_init_params {
        no_alloc: false,
        ctx: &mut data_ctx,
    };
    // SAFETY: bytes is valid for its length; ggml copies what it needs into data_ctx.
    let gguf = unsafe { sys::gguf_init_from_buffer(bytes.as_ptr().cast(), bytes.len(), params) };
    // SAFETY: gguf and data_ctx come from gguf_init_from_buffer; a tensor of data_ctx
    // holds ggml_nbytes of data.
    unsafe {
        read_contents(gguf, data_ctx, |t, _offset, nbytes| {
            if (*t).data.is_null() {
                return Err("has no data".into());
            }
            Ok(std::slice::from_raw_parts((*t).data as *const u8, nbytes).to_vec())
        })
    }
}

/// Reads a GGUF file's metadata, then each tensor's data from the file straight into
/// its own buffer: the file is never held whole in memory, nor copied by ggml. A
/// tensor that would end past the end of the file is refused before any allocation.
pub fn read_gguf_file(path: &Path) -> Result<GgufContents> {
    use std::io::{Read, Seek, SeekFrom};
    init();
    let io = |e: std::io::Error| GgmlError::BadGguf(format!("{}: {e}", path.display()));
    let mut file = std::fs::File::open(path).map_err(io)?;
    let file_len = file.metadata().map_err(io)?.len();
    let c = CString::new(path.to_string_lossy().as_bytes())
        .map_err(|_| GgmlError::BadGguf(format!("{}: a path with a NUL byte", path.display())))?;
    let mut meta_ctx: *mut sys::ggml_context = std::ptr::null_mut();
    let params = sys::gguf_init_params {
        no_alloc: true,
        ctx: &mut meta_ctx,
    };
    // SAFETY: c is a valid NUL-terminated path; no_alloc makes ggml read the header,
    // metadata and tensor table only.
    let gguf = unsafe { sys::gguf_init_from_file(c.as_ptr(), params) };
    // SAFETY: gguf and meta_ctx come from gguf_init_from_file; the closure reads only
    // the offsets ggml reports and the file.
    unsafe {
        let data_offset = if gguf.is_null() {
            0
        } else {
            sys::gguf_get_data_offset(gguf) as u64
        };
        read_contents(gguf, meta_ctx, |_t, offset, nbytes| {
            let start = data_offset + offset as u64;
            if start
                .checked_add(nbytes as u64)
                .is_none_or(|end| end > file_len)
            {
                return Err(format!(
                    "has {nbytes} bytes at offset {start}, past the end of the {file_len}-byte file"
                ));
            }
            let mut data = vec![0u8; nbytes];
            file.seek(SeekFrom::Start(start))
                .and_then(|_| file.read_exact(&mut data))
                .map_err(|e| e.to_string())?;
            Ok(data)
        })
    }
}

/// The key/value metadata of a parsed GGUF, of the kinds [`GgufValue`] holds (others
/// are skipped).
///
/// # Safety
/// `gguf` is a live context from `gguf_init_*`.
unsafe fn read_metadata(gguf: *mut sys::gguf_context) -> Vec<(String, GgufValue)> {
    let mut metadata = Vec::new();
    // SAFETY: the caller's guarantee; indices are below gguf_get_n_kv, and each value is
    // read with the getter of the type ggml reports.
    unsafe {
        for i in 0..sys::gguf_get_n_kv(gguf) {
            let key = cstr(sys::gguf_get_key(gguf, i));
            let value = match sys::gguf_get_kv_type(gguf, i) {
                sys::GGUF_TYPE_STRING => Some(GgufValue::Str(cstr(sys::gguf_get_val_str(gguf, i)))),
                sys::GGUF_TYPE_UINT32 => Some(GgufValue::U32(sys::gguf_get_val_u32(gguf, i))),
                sys::GGUF_TYPE_FLOAT32 => Some(GgufValue::F32(sys::gguf_get_val_f32(gguf, i))),
                sys::GGUF_TYPE_ARRAY => {
                    let n = sys::gguf_get_arr_n(gguf, i);
                    match sys::gguf_get_arr_type(gguf, i) {
                        sys::GGUF_TYPE_STRING => Some(GgufValue::StrArray(
                            (0..n)
                                .map(|j| cstr(sys::gguf_get_arr_str(gguf, i, j)))
                                .collect(),
                        )),
                        sys::GGUF_TYPE_UINT32 => {
                            let p = sys::gguf_get_arr_data(gguf, i) as *const u32;
                            Some(GgufValue::U32Array(if n == 0 || p.is_null() {
                                Vec::new()
                            } else {
                                std::slice::from_raw_parts(p, n).to_vec()
                            }))
                        }
                        _ => None,
                    }
                }
                _ => None,
            };
            if let Some(v) = value {
                metadata.push((key, v));
            }
        }
    }
    metadata
}

/// Reads a GGUF file's metadata only (no tensor table in memory, no tensor data): what
/// the file says of itself, such as its family. The caller checks the file first
/// ([`crate::gguf_check::check_file`]).
pub fn read_gguf_metadata_file(path: &Path) -> Result<Vec<(String, GgufValue)>> {
    init();
    let c = CString::new(path.to_string_lossy().as_bytes())
        .map_err(|_| GgmlError::BadGguf(format!("{}: a path with a NUL byte", path.display())))?;
    let params = sys::gguf_init_params {
        no_alloc: true,
        ctx: std::ptr::null_mut(),
    };
    // SAFETY: c is a valid NUL-terminated path; with no context asked for, ggml reads
    // the header, metadata and tensor table into the gguf context only.
    let gguf = unsafe { sys::gguf_init_from_file(c.as_ptr(), params) };
    if gguf.is_null() {
        return Err(GgmlError::BadGguf(log::take_last_error().unwrap_or_else(
            || "header, metadata or tensor table is malformed or truncated".into(),
        )));
    }
    // SAFETY: gguf is live until freed right after.
    unsafe {
        let metadata = read_metadata(gguf);
        sys::gguf_free(gguf);
        Ok(metadata)
    }
}

/// The metadata and tensors of a parsed GGUF, each tensor's data from `data(tensor,
/// offset in the data section, bytes)`; frees `gguf` and `ctx`.
///
/// # Safety
/// `gguf` is null or a live context from `gguf_init_*`, `ctx` null or its tensor
/// context; `data` may read `tensor` as ggml describes it.
unsafe fn read_contents(
    gguf: *mut sys::gguf_context,
    ctx: *mut sys::ggml_context,
    mut data: impl FnMut(*mut sys::ggml_tensor, usize, usize) -> std::result::Result<Vec<u8>, String>,
) -> Result<GgufContents> {
    if gguf.is_null() {
        if !ctx.is_null() {
            // SAFETY: the caller's guarantee.
            unsafe { sys::ggml_free(ctx) };
        }
        return Err(GgmlError::BadGguf(log::take_last_error().unwrap_or_else(
            || "header, metadata or tensor table is malformed or truncated".into(),
        )));
    }
    let mut out = GgufContents::default();
    // SAFETY: gguf and ctx are valid until freed below.
    let result = unsafe {
        out.metadata = read_metadata(gguf);
        let mut res = Ok(());
        for i in 0..sys::gguf_get_n_tensors(gguf) {
            let name = cstr(sys::gguf_get_tensor_name(gguf, i));
            // Packed I8 weights and I32 inputs exist only in memory; a file never
            // holds them.
            let stored = DType::from_raw(sys::gguf_get_tensor_type(gguf, i));
            let Some(dtype) = stored.filter(|&t| !matches!(t, DType::I8 | DType::I32)) else {
                res = Err(GgmlError::BadGguf(format!(
                    "tensor '{name}' has an unsupported type"
                )));
                break;
            };
            let c = CString::new(name.clone()).unwrap_or_default();
            let t = if ctx.is_null() {
                std::ptr::null_mut()
            } else {
                sys::ggml_get_tensor(ctx, c.as_ptr())
            };
            if t.is_null() {
                res = Err(GgmlError::BadGguf(format!("tensor '{name}' has no data")));
                break;
            }
            let n_dims = sys::ggml_n_dims(t) as usize;
            let ne_all = (*t).ne;
            let ne: Vec<i64> = ne_all[..n_dims].to_vec();
            let nbytes = sys::ggml_nbytes(t);
            match data(t, sys::gguf_get_tensor_offset(gguf, i), nbytes) {
                Ok(bytes) => out.tensors.push(HostTensor {
                    name,
                    dtype,
                    ne,
                    data: bytes,
                }),
                Err(reason) => {
                    res = Err(GgmlError::BadGguf(format!("tensor '{name}' {reason}")));
                    break;
                }
            }
        }
        sys::gguf_free(gguf);
        if !ctx.is_null() {
            sys::ggml_free(ctx);
        }
        res
    };
    result.map(|()| out)
}

/// Bytes a tensor name holds in ggml and GGUF, its terminating zero included
/// (`GGML_MAX_NAME`); a longer name is cut, and two cut alike abort the writer.
const MAX_NAME_BYTES: usize = 64;

/// What ggml's GGUF writer asserts (and aborts on) or silently cuts, checked first: every
/// tensor name fits and is unique, every key is unique, every tensor's dims are positive
/// and its data is exactly the bytes its type and dims need.
fn check_writable(metadata: &[(String, GgufValue)], tensors: &[HostTensor]) -> Result<()> {
    let mut keys = std::collections::HashSet::new();
    for (k, _) in metadata {
        if !keys.insert(k.as_str()) || k.contains('\0') {
            return Err(GgmlError::Failed(format!(
                "GGUF key '{k}' appears twice or holds a zero byte"
            )));
        }
    }
    let mut names = std::collections::HashSet::new();
    for t in tensors {
        if t.name.len() >= MAX_NAME_BYTES || t.name.contains('\0') || !names.insert(t.name.as_str())
        {
            return Err(GgmlError::Failed(format!(
                "tensor name '{}' is longer than {} bytes, holds a zero byte or appears twice",
                t.name,
                MAX_NAME_BYTES - 1
            )));
        }
        let ne: &[i64] = if t.ne.is_empty() { &[1] } else { &t.ne };
        let count = ne.iter().try_fold(1usize, |n, &d| {
            usize::try_from(d)
                .ok()
                .filter(|&d| d > 0)
                .and_then(|d| n.checked_mul(d))
        });
        let whole_blocks = (ne[0] as usize).is_multiple_of(t.dtype.block_len());
        let want = count
            .filter(|_| ne.len() <= 4 && whole_blocks)
            .map(|n| t.dtype.nbytes(n));
        if want != Some(t.data.len()) {
            return Err(GgmlError::Failed(format!(
                "tensor '{}' of dims {:?} ({:?}) holds {} bytes, not what its dims need",
                t.name,
                t.ne,
                t.dtype,
                t.data.len()
            )));
        }
    }
    Ok(())
}

/// Writes metadata and tensors to a GGUF file at `path` (the caller makes it atomic).
/// ggml lays out the header, metadata and tensor table ([`gguf_layout`]); the bytes go
/// to the file from here, tensor data straight from each [`HostTensor`], so a write
/// error is the OS's own (a full disk is `No space left on device`, not ggml's "could
/// not write") and no second copy of the weights is made.
pub fn write_gguf(
    path: &Path,
    metadata: &[(String, GgufValue)],
    tensors: &[HostTensor],
) -> Result<()> {
    use std::io::Write;
    let (head, alignment) = gguf_layout(metadata, tensors)?;
    let write = || -> std::io::Result<()> {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
        out.write_all(&head)?;
        let zeros = vec![0u8; alignment];
        for t in tensors {
            out.write_all(&t.data)?;
            let pad = t.data.len().next_multiple_of(alignment) - t.data.len();
            out.write_all(&zeros[..pad])?;
        }
        out.into_inner().map_err(|e| e.into_error())?.sync_all()
    };
    write().map_err(GgmlError::Write)
}

/// The bytes of a GGUF file before its tensor data (header, metadata, tensor table and
/// the padding to the data section), as ggml's writer makes them, and the alignment each
/// tensor's data is padded to.
fn gguf_layout(
    metadata: &[(String, GgufValue)],
    tensors: &[HostTensor],
) -> Result<(Vec<u8>, usize)> {
    check_writable(metadata, tensors)?;
    init();
    // SAFETY: the context only describes tensors (no_alloc), sized for them plus one;
    // every pointer below is checked or comes from these two contexts, which are freed
    // before returning.
    unsafe {
        let params = sys::ggml_init_params {
            mem_size: (tensors.len() + 1) * sys::ggml_tensor_overhead(),
            mem_buffer: std::ptr::null_mut(),
            no_alloc: true,
        };
        let ctx = sys::ggml_init(params);
        if ctx.is_null() {
            return Err(GgmlError::Failed("ggml_init failed".into()));
        }
        let gguf = sys::gguf_init_empty();
        if gguf.is_null() {
            sys::ggml_free(ctx);
            return Err(GgmlError::Failed("gguf_init_empty failed".into()));
        }
        for (key, value) in metadata {
            let k = CString::new(key.as_str()).unwrap_or_default();
            match value {
                GgufValue::Str(s) => {
                    let v = CString::new(s.as_str()).unwrap_or_default();
                    sys::gguf_set_val_str(gguf, k.as_ptr(), v.as_ptr());
                }
                GgufValue::U32(v) => sys::gguf_set_val_u32(gguf, k.as_ptr(), *v),
                GgufValue::F32(v) => sys::gguf_set_val_f32(gguf, k.as_ptr(), *v),
                GgufValue::StrArray(items) => {
                    let owned: Vec<CString> = items
                        .iter()
                        .map(|x| CString::new(x.as_str()).unwrap_or_default())
                        .collect();
                    let mut ptrs: Vec<*const std::os::raw::c_char> =
                        owned.iter().map(|c| c.as_ptr()).collect();
                    sys::gguf_set_arr_str(gguf, k.as_ptr(), ptrs.as_mut_ptr(), ptrs.len());
                }
                GgufValue::U32Array(items) => sys::gguf_set_arr_data(
                    gguf,
                    k.as_ptr(),
                    sys::GGUF_TYPE_UINT32,
                    items.as_ptr().cast(),
                    items.len(),
                ),
            }
        }
        let mut sizes_agree = true;
        for t in tensors {
            let ne: Vec<i64> = if t.ne.is_empty() {
                vec![1]
            } else {
                t.ne.clone()
            };
            let gt = sys::ggml_new_tensor(ctx, t.dtype.raw(), ne.len() as i32, ne.as_ptr());
            let name = CString::new(t.name.as_str()).unwrap_or_default();
            sys::ggml_set_name(gt, name.as_ptr());
            sizes_agree &= sys::ggml_nbytes(gt) == t.data.len();
            sys::gguf_add_tensor(gguf, gt);
        }
        let alignment = sys::gguf_get_alignment(gguf);
        let mut head = vec![0u8; sys::gguf_get_meta_size(gguf)];
        sys::gguf_get_meta_data(gguf, head.as_mut_ptr().cast());
        sys::gguf_free(gguf);
        sys::ggml_free(ctx);
        if !sizes_agree || alignment == 0 {
            return Err(GgmlError::Failed(
                "a tensor's data does not match its dims, or the alignment is 0".into(),
            ));
        }
        Ok((head, alignment))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(name: &str, dtype: DType, data: Vec<u8>) -> HostTensor {
        HostTensor {
            name: name.into(),
            dtype,
            ne: vec![data.len() as i64 / dtype.size() as i64],
            data,
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_full_disk_is_reported_as_the_os_says_it() {
        let tensors = [tensor("a", DType::F32, vec![0; 1 << 16])];
        let err = write_gguf(Path::new("/dev/full"), &[], &tensors).unwrap_err();
        let GgmlError::Write(e) = &err else {
            panic!("not a write error: {err}");
        };
        assert_eq!(e.kind(), std::io::ErrorKind::StorageFull, "{err}");
        assert!(err.to_string().contains("No space left on device"), "{err}");
    }

    #[test]
    fn written_files_match_what_ggml_writes_itself() {
        let dir = tempfile::tempdir().unwrap();
        let tensors = [
            tensor("odd", DType::F32, 2.5f32.to_le_bytes().repeat(3)),
            tensor("even", DType::F16, vec![0x3c; 64]),
            tensor("last", DType::F32, 1f32.to_le_bytes().repeat(5)),
        ];
        let meta = [
            ("k".to_string(), GgufValue::U32(7)),
            ("s".to_string(), GgufValue::Str("x".into())),
        ];
        let ours = dir.path().join("ours.gguf");
        write_gguf(&ours, &meta, &tensors).unwrap();
        // ggml's own writer on the same contents.
        let (head, _) = gguf_layout(&meta, &tensors).unwrap();
        let theirs = dir.path().join("theirs.gguf");
        // SAFETY: a context holding the tensors' data, freed at the end; the gguf
        // context is built as gguf_layout builds it.
        unsafe {
            let ctx = sys::ggml_init(sys::ggml_init_params {
                mem_size: 1 << 20,
                mem_buffer: std::ptr::null_mut(),
                no_alloc: false,
            });
            let gguf = sys::gguf_init_empty();
            let k = CString::new("k").unwrap();
            sys::gguf_set_val_u32(gguf, k.as_ptr(), 7);
            let (s, x) = (CString::new("s").unwrap(), CString::new("x").unwrap());
            sys::gguf_set_val_str(gguf, s.as_ptr(), x.as_ptr());
            for t in &tensors {
                let gt = sys::ggml_new_tensor(ctx, t.dtype.raw(), 1, t.ne.as_ptr());
                let name = CString::new(t.name.as_str()).unwrap();
                sys::ggml_set_name(gt, name.as_ptr());
                std::ptr::copy_nonoverlapping(t.data.as_ptr(), (*gt).data.cast(), t.data.len());
                sys::gguf_add_tensor(gguf, gt);
            }
            let p = CString::new(theirs.to_str().unwrap()).unwrap();
            assert!(sys::gguf_write_to_file(gguf, p.as_ptr(), false));
            sys::gguf_free(gguf);
            sys::ggml_free(ctx);
        }
        let (a, b) = (
            std::fs::read(&ours).unwrap(),
            std::fs::read(&theirs).unwrap(),
        );
        assert!(a.starts_with(&head));
        assert_eq!(a, b);
        assert_eq!(read_gguf_file(&ours).unwrap().tensors.len(), 3);
    }

    #[test]
    fn a_gguf_file_reads_like_its_bytes_and_a_truncated_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        let tensors = [
            tensor("a", DType::F32, 1.5f32.to_le_bytes().repeat(40)),
            tensor("b", DType::F16, vec![0x3c; 64]),
        ];
        let meta = [("k".to_string(), GgufValue::U32(7))];
        write_gguf(&path, &meta, &tensors).unwrap();
        let from_file = read_gguf_file(&path).unwrap();
        let from_bytes = read_gguf(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(from_file.metadata, from_bytes.metadata);
        assert_eq!(from_file.tensors.len(), 2);
        for (f, b) in from_file.tensors.iter().zip(&from_bytes.tensors) {
            assert_eq!(
                (&f.name, f.dtype, &f.ne, &f.data),
                (&b.name, b.dtype, &b.ne, &b.data)
            );
        }
        let len = std::fs::metadata(&path).unwrap().len();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(len - 10).unwrap();
        let Err(err) = read_gguf_file(&path) else {
            panic!("a truncated GGUF was read");
        };
        assert!(
            err.to_string().contains("tensor 'b'") && err.to_string().contains("past the end"),
            "{err}"
        );
    }

    #[test]
    fn a_gguf_holding_packed_i8_weights_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let plain = tensor("w", DType::F32, 1f32.to_le_bytes().repeat(4));
        let ok = dir.path().join("ok.gguf");
        write_gguf(&ok, &[], std::slice::from_ref(&plain)).unwrap();
        let read = read_gguf(&std::fs::read(&ok).unwrap()).unwrap();
        assert_eq!(read.tensors.len(), 1);

        let bad = dir.path().join("bad.gguf");
        write_gguf(
            &bad,
            &[],
            &[plain, tensor("packed", DType::I8, vec![7; 64])],
        )
        .unwrap();
        let Err(err) = read_gguf(&std::fs::read(&bad).unwrap()) else {
            panic!("a GGUF with an I8 tensor was read");
        };
        assert!(
            err.to_string().contains("'packed' has an unsupported type"),
            "{err}"
        );
    }
}
