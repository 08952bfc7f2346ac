//! Model files: GGUF (native) and the legacy ggml `.bin` containers real models ship in.
//!
//! Reading is format detection plus parsing into [`ModelFile`]: metadata and host
//! tensors. Family code checks the tensors against its spec and uploads them. The
//! legacy containers are the families' ([`LegacyFormat`]): a reader is given the lookup
//! from a file's magic to its family's reader (the registry's), so this module knows no
//! family.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{EngineError, Result};
use crate::ggml::{self, GgufValue, HostTensor};

/// GGUF key naming the family a file belongs to.
pub const GGUF_FAMILY_KEY: &str = "audiocpp.family";

/// The container a model came in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelFormat {
    /// GGUF.
    Gguf,
    /// whisper.cpp's legacy ggml container, with its model-type string and version.
    GgmlLegacy {
        /// e.g. `silero-16k`.
        model_type: String,
        /// major.minor.patch.
        version: String,
    },
}

impl std::fmt::Display for ModelFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelFormat::Gguf => write!(f, "gguf"),
            ModelFormat::GgmlLegacy {
                model_type,
                version,
            } => write!(f, "ggml:{model_type}:v{version}"),
        }
    }
}

/// A parsed model file.
#[derive(Debug, Clone)]
pub struct ModelFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// Container format.
    pub format: ModelFormat,
    /// Family named by the file, if it names one.
    pub family: Option<String>,
    /// Metadata (GGUF key/values; legacy headers are mapped to keys).
    pub metadata: Vec<(String, GgufValue)>,
    /// Tensors with host data.
    pub tensors: Vec<HostTensor>,
}

/// A metadata value's Rust type, read from a [`GgufValue`] of its kind: the typed
/// getters [`ModelFile::meta`] and [`ModelFile::require`] take it.
pub trait MetaValue<'a>: Sized {
    /// The GGUF type, for errors.
    const TYPE: &'static str;
    /// The value, when `v` is of this type.
    fn from_value(v: &'a GgufValue) -> Option<Self>;
}

/// Implements [`MetaValue`] for a type read from one [`GgufValue`] variant.
macro_rules! meta_value {
    ($t:ty, $name:literal, $variant:ident, $v:ident => $e:expr) => {
        impl<'a> MetaValue<'a> for $t {
            const TYPE: &'static str = $name;
            fn from_value(v: &'a GgufValue) -> Option<Self> {
                match v {
                    GgufValue::$variant($v) => Some($e),
                    _ => None,
                }
            }
        }
    };
}
meta_value!(u32, "u32", U32, x => *x);
meta_value!(f32, "f32", F32, x => *x);
meta_value!(&'a str, "string", Str, x => x.as_str());
meta_value!(&'a [u32], "u32 array", U32Array, x => x.as_slice());
meta_value!(&'a [String], "string array", StrArray, x => x.as_slice());

impl ModelFile {
    /// The metadata value under `key` as a `T`, if the file has one of that type.
    pub fn meta<'a, T: MetaValue<'a>>(&'a self, key: &str) -> Option<T> {
        self.metadata
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| T::from_value(v))
    }

    /// [`ModelFile::meta`], or the error naming the key, its type and the remedy (convert
    /// the model again).
    pub fn require<'a, T: MetaValue<'a>>(&'a self, key: &str) -> Result<T> {
        self.meta(key)
            .ok_or_else(|| self.invalid(format!("metadata '{key}' ({}) is missing", T::TYPE)))
    }

    /// A string metadata value.
    pub fn meta_str(&self, key: &str) -> Option<&str> {
        self.meta(key)
    }

    /// The tensor `name`, or the error naming it and the remedy.
    pub fn require_tensor(&self, name: &str) -> Result<&HostTensor> {
        self.tensor(name)
            .ok_or_else(|| self.invalid(format!("tensor '{name}' is missing")))
    }

    /// Checks that the file has tensor `name` with dims `ne` (ggml order, trailing ones
    /// ignored): how a family states a weight's shape once, at load, before it lays the
    /// weight out for the device.
    pub fn expect_dims(&self, name: &str, ne: &[i64]) -> Result<()> {
        let t = self.require_tensor(name)?;
        let squeeze = |v: &[i64]| {
            let mut end = v.len();
            while end > 1 && v[end - 1] == 1 {
                end -= 1;
            }
            v[..end].to_vec()
        };
        if squeeze(&t.ne) != squeeze(ne) {
            return Err(self.invalid(format!(
                "tensor '{name}' has dims {:?}, the model's hyper-parameters need {ne:?}",
                t.ne
            )));
        }
        Ok(())
    }

    /// The error for a file that lacks what its family needs: `reason`, and the remedy
    /// of converting the model again with its family.
    pub fn invalid(&self, reason: String) -> EngineError {
        let family = self.family.as_deref().unwrap_or("its family");
        EngineError::Model {
            path: self.path.clone(),
            reason: format!(
                "{reason}; convert the model again (task 'convert', family '{family}')"
            ),
        }
    }

    /// A tensor by name.
    pub fn tensor(&self, name: &str) -> Option<&HostTensor> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Total bytes of tensor data.
    pub fn data_bytes(&self) -> usize {
        self.tensors.iter().map(|t| t.data.len()).sum()
    }
}

/// A released model format that families convert from (task 'convert') but never load:
/// given one to run, the engine says to convert it first instead of "unknown format".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SourceFormat {
    /// A CTranslate2 model (`model.bin` starting with its version and a `...Spec` name,
    /// in a folder with `config.json` and the tokenizer).
    CTranslate2,
    /// An ONNX model (`.onnx`, a protobuf `ModelProto`).
    Onnx,
    /// A Hugging Face model: a folder with `config.json` and `*.safetensors`, or a
    /// `.safetensors` file.
    HuggingFace,
}

impl SourceFormat {
    /// What the user gave, in words.
    pub fn name(self) -> &'static str {
        match self {
            SourceFormat::CTranslate2 => "a CTranslate2 model",
            SourceFormat::Onnx => "an ONNX model",
            SourceFormat::HuggingFace => "a Hugging Face (safetensors) model",
        }
    }

    /// The source format `path` (a file or a folder) is in, from its contents and
    /// names; `None` for anything else (a GGUF among them).
    pub fn of(path: &Path) -> Option<SourceFormat> {
        if path.is_dir() {
            let has = |name: &str| path.join(name).is_file();
            if has("model.bin") {
                return SourceFormat::of(&path.join("model.bin"));
            }
            let files: Vec<PathBuf> = std::fs::read_dir(path)
                .ok()?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect();
            let with_ext = |ext: &str| {
                files
                    .iter()
                    .any(|f| f.extension().is_some_and(|e| e.eq_ignore_ascii_case(ext)))
            };
            return if with_ext("safetensors") {
                Some(SourceFormat::HuggingFace)
            } else if with_ext("onnx") {
                Some(SourceFormat::Onnx)
            } else {
                None
            };
        }
        let mut head = [0u8; 64];
        let n = {
            use std::io::Read;
            let mut f = std::fs::File::open(path).ok()?;
            let mut n = 0;
            while n < head.len() {
                match f.read(&mut head[n..]) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => n += k,
                }
            }
            n
        };
        let head = &head[..n];
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        // CTranslate2: u32 binary version, then (version >= 2) the spec's name as a
        // u16 length and a NUL-terminated string ending in `Spec`.
        let ct2 = head.len() >= 8 && {
            let version = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
            let len = u16::from_le_bytes([head[4], head[5]]) as usize;
            (2..=64).contains(&version)
                && (5..=48).contains(&len)
                && head
                    .get(6..6 + len)
                    .is_some_and(|name| name.ends_with(b"Spec\0"))
        };
        // safetensors: u64 header length, then the JSON header.
        let safetensors =
            head.len() > 9 && head[8] == b'{' && head[..8].iter().rev().take(3).all(|b| *b == 0);
        // ONNX: ModelProto's field 1 (ir_version, a varint), then a length-delimited field.
        let onnx = head.len() > 3 && head[0] == 0x08 && head[1] < 0x80 && head[2] & 7 == 2;
        if ct2 {
            Some(SourceFormat::CTranslate2)
        } else if ext == "safetensors" || safetensors {
            Some(SourceFormat::HuggingFace)
        } else if ext == "onnx" || onnx {
            Some(SourceFormat::Onnx)
        } else {
            None
        }
    }
}

/// A legacy (pre-GGUF) container a family reads: its first four bytes and its reader.
pub struct LegacyFormat {
    /// The container's magic.
    pub magic: [u8; 4],
    /// Parses the whole file (the magic included), or says why not.
    pub read: fn(&[u8]) -> std::result::Result<LegacyContents, String>,
}

/// Finds the legacy container a file's first bytes name, and the family that reads it
/// (the registry's `families::legacy_format`).
pub type LegacyLookup = fn(&[u8]) -> Option<(&'static str, &'static LegacyFormat)>;

/// Reads a model file of any supported format, legacy containers through `legacy`. A
/// GGUF's tensors are read from the file one by one ([`ggml::read_gguf_file`]): the file
/// is never held whole in memory.
pub fn read(path: &Path, legacy: LegacyLookup) -> Result<ModelFile> {
    let io = |source| EngineError::Io {
        path: path.to_path_buf(),
        source,
    };
    if path.is_dir() {
        return Err(EngineError::Model {
            path: path.to_path_buf(),
            reason: "is a folder, not a model file; give the .gguf (or ggml .bin) file itself"
                .into(),
        });
    }
    let mut magic = [0u8; 4];
    let is_gguf = {
        use std::io::Read;
        let mut f = std::fs::File::open(path).map_err(io)?;
        f.read_exact(&mut magic).is_ok() && &magic == b"GGUF"
    };
    if is_gguf {
        crate::gguf_check::check_file(path).map_err(|reason| EngineError::Model {
            path: path.to_path_buf(),
            reason,
        })?;
        return gguf_model(path, ggml::read_gguf_file(path));
    }
    let bytes = std::fs::read(path).map_err(io)?;
    parse(path, &bytes, legacy)
}

/// True when `path` is a file starting with GGUF's magic (a folder, or a file too short
/// for it, is not).
pub fn is_gguf(path: &Path) -> Result<bool> {
    use std::io::Read;
    if path.is_dir() {
        return Ok(false);
    }
    let mut magic = [0u8; 4];
    let mut f = std::fs::File::open(path).map_err(|source| EngineError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(f.read_exact(&mut magic).is_ok() && &magic == b"GGUF")
}

/// A GGUF file's metadata, read without its tensors (checked first, as [`read`] checks
/// a file before ggml parses it).
pub fn read_gguf_metadata(path: &Path) -> Result<Vec<(String, GgufValue)>> {
    let bad = |reason: String| EngineError::Model {
        path: path.to_path_buf(),
        reason,
    };
    crate::gguf_check::check_file(path).map_err(bad)?;
    ggml::read_gguf_metadata_file(path).map_err(|e| bad(e.to_string()))
}

/// The model of parsed GGUF contents (or the error naming the file).
fn gguf_model(
    path: &Path,
    contents: std::result::Result<ggml::GgufContents, ggml::GgmlError>,
) -> Result<ModelFile> {
    let contents = contents.map_err(|e| EngineError::Model {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let family = contents.metadata.iter().find_map(|(k, v)| match v {
        GgufValue::Str(s) if k == GGUF_FAMILY_KEY => Some(s.clone()),
        _ => None,
    });
    Ok(ModelFile {
        path: path.to_path_buf(),
        format: ModelFormat::Gguf,
        family,
        metadata: contents.metadata,
        tensors: contents.tensors,
    })
}

/// Parses model bytes, legacy containers through `legacy`; `path` is only used in errors
/// and the result.
pub fn parse(path: &Path, bytes: &[u8], legacy: LegacyLookup) -> Result<ModelFile> {
    let bad = |reason: String| EngineError::Model {
        path: path.to_path_buf(),
        reason,
    };
    if bytes.len() < 8 {
        return Err(bad(format!(
            "only {} bytes; not a GGUF or ggml model",
            bytes.len()
        )));
    }
    match &bytes[0..4] {
        b"GGUF" => {
            crate::gguf_check::check(bytes).map_err(bad)?;
            gguf_model(path, ggml::read_gguf(bytes))
        }
        magic => match legacy(magic) {
            Some((family, legacy)) => (legacy.read)(bytes)
                .map(|m| ModelFile {
                    path: path.to_path_buf(),
                    format: m.format,
                    family: Some(family.into()),
                    metadata: m.metadata,
                    tensors: m.tensors,
                })
                .map_err(bad),
            None => Err(bad(
                "unknown format (expected GGUF or a ggml .bin; first bytes are not a known magic)"
                    .into(),
            )),
        },
    }
}

/// What a family's legacy reader ([`LegacyFormat`]) found in a file.
pub struct LegacyContents {
    /// Format with model type and version.
    pub format: ModelFormat,
    /// Header fields as metadata.
    pub metadata: Vec<(String, GgufValue)>,
    /// Tensor records.
    pub tensors: Vec<HostTensor>,
}

/// Little-endian reader over a byte slice that reports truncation instead of panicking.
pub(crate) struct ByteReader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> ByteReader<'a> {
    /// Starts at `pos`.
    pub(crate) fn new(bytes: &'a [u8], pos: usize) -> Self {
        ByteReader { bytes, pos }
    }

    /// Current offset.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// True at end of input.
    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                format!(
                    "truncated: needs {n} bytes at offset {} but the file has {}",
                    self.pos,
                    self.bytes.len()
                )
            })?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// A little-endian i32.
    pub(crate) fn i32(&mut self) -> std::result::Result<i32, String> {
        let b = self.take(4)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}
