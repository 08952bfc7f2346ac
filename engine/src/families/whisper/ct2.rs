//! Reader for CTranslate2's `model.bin`: a little-endian header (binary version, spec
//! name, spec revision), then named variables (shape, element type, raw bytes), then
//! aliases (a variable name that reuses another variable's data).
//!
//! Only what Whisper models need is accepted: binary versions 5 and 6, element types
//! float32, float16, int8, int16 and int32 (the integer ones only as scalars or small
//! metadata such as `num_heads`). Anything else is an error naming the variable.

use crate::model_file::ByteReader;

/// Element types a CTranslate2 variable can have (the writer's type ids 0..=5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ct2Type {
    /// IEEE float32 (id 0).
    F32,
    /// int8 (id 1).
    I8,
    /// int16 (id 2).
    I16,
    /// int32 (id 3).
    I32,
    /// IEEE float16 (id 4).
    F16,
    /// bfloat16 (id 5).
    Bf16,
}

impl Ct2Type {
    fn from_id(id: u8) -> Option<Self> {
        Some(match id {
            0 => Ct2Type::F32,
            1 => Ct2Type::I8,
            2 => Ct2Type::I16,
            3 => Ct2Type::I32,
            4 => Ct2Type::F16,
            5 => Ct2Type::Bf16,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Ct2Type::I8 => 1,
            Ct2Type::I16 | Ct2Type::F16 | Ct2Type::Bf16 => 2,
            Ct2Type::F32 | Ct2Type::I32 => 4,
        }
    }
}

/// One variable of a CTranslate2 model.
#[derive(Debug, Clone)]
pub struct Ct2Variable {
    /// Scoped name, e.g. `encoder/layer_0/ffn/linear_0/weight`.
    pub name: String,
    /// Shape, outermost dimension first (row-major, as numpy writes it).
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: Ct2Type,
    /// Raw little-endian element bytes.
    pub data: Vec<u8>,
}

impl Ct2Variable {
    /// The value of a scalar integer variable (int8, int16 or int32).
    pub fn scalar_int(&self) -> Option<i64> {
        if self.shape.iter().product::<usize>() != 1 {
            return None;
        }
        let d = &self.data;
        Some(match self.dtype {
            Ct2Type::I8 => d[0] as i8 as i64,
            Ct2Type::I16 => i16::from_le_bytes([d[0], d[1]]) as i64,
            Ct2Type::I32 => i32::from_le_bytes([d[0], d[1], d[2], d[3]]) as i64,
            _ => return None,
        })
    }
}

/// A parsed `model.bin`.
#[derive(Debug, Clone)]
pub struct Ct2Model {
    /// Binary format version.
    pub version: u32,
    /// Spec name, e.g. `WhisperSpec`.
    pub spec: String,
    /// Spec revision.
    pub revision: u32,
    /// Every stored variable.
    pub variables: Vec<Ct2Variable>,
    /// `(alias, target)`: `alias` has the data of variable `target`.
    pub aliases: Vec<(String, String)>,
}

impl Ct2Model {
    /// A variable by name, following aliases.
    pub fn get(&self, name: &str) -> Option<&Ct2Variable> {
        let target = self
            .aliases
            .iter()
            .find(|(a, _)| a == name)
            .map(|(_, t)| t.as_str())
            .unwrap_or(name);
        self.variables.iter().find(|v| v.name == target)
    }
}

fn u8_(r: &mut ByteReader<'_>) -> Result<u8, String> {
    Ok(r.take(1)?[0])
}

fn u16_(r: &mut ByteReader<'_>) -> Result<u16, String> {
    let b = r.take(2)?;
    Ok(u16::from_le_bytes([b[0], b[1]]))
}

fn u32_(r: &mut ByteReader<'_>) -> Result<u32, String> {
    let b = r.take(4)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// A string: u16 length including the trailing NUL, the bytes, the NUL.
fn string(r: &mut ByteReader<'_>, what: &str) -> Result<String, String> {
    let at = r.pos();
    let n = u16_(r)? as usize;
    if n == 0 {
        return Err(format!("{what} at offset {at} has length 0"));
    }
    let b = r.take(n)?;
    if b[n - 1] != 0 {
        return Err(format!("{what} at offset {at} is not NUL-terminated"));
    }
    String::from_utf8(b[..n - 1].to_vec())
        .map_err(|_| format!("{what} at offset {at} is not UTF-8"))
}

/// Largest variable count and rank accepted (real models have hundreds and rank <= 4).
const MAX_VARIABLES: u32 = 100_000;
const MAX_RANK: u8 = 8;

/// Parses the bytes of a `model.bin`.
pub fn parse(bytes: &[u8]) -> Result<Ct2Model, String> {
    let mut r = ByteReader::new(bytes, 0);
    let version = u32_(&mut r).map_err(|e| format!("header: {e}"))?;
    if !(5..=6).contains(&version) {
        return Err(format!(
            "CTranslate2 binary version {version} is not supported (expected 5 or 6; re-convert with CTranslate2 >= 3)"
        ));
    }
    let spec = string(&mut r, "spec name")?;
    let revision = u32_(&mut r)?;
    let n = u32_(&mut r)?;
    if n == 0 || n > MAX_VARIABLES {
        return Err(format!("header declares {n} variables"));
    }
    let mut variables = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let name = string(&mut r, "variable name")?;
        let ctx = |e: String| format!("variable '{name}': {e}");
        let rank = u8_(&mut r).map_err(ctx)?;
        if rank > MAX_RANK {
            return Err(format!("variable '{name}' has rank {rank}"));
        }
        let mut shape = Vec::with_capacity(rank as usize);
        for _ in 0..rank {
            shape.push(u32_(&mut r).map_err(ctx)? as usize);
        }
        let type_id = u8_(&mut r).map_err(ctx)?;
        let dtype = Ct2Type::from_id(type_id)
            .ok_or_else(|| format!("variable '{name}' has unknown type id {type_id}"))?;
        let nbytes = u32_(&mut r).map_err(ctx)? as usize;
        let count = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| format!("variable '{name}' has an impossible shape {shape:?}"))?;
        if count.checked_mul(dtype.size()) != Some(nbytes) {
            return Err(format!(
                "variable '{name}' declares {nbytes} bytes, but shape {shape:?} of {dtype:?} needs {}",
                count.saturating_mul(dtype.size())
            ));
        }
        let data = r.take(nbytes).map_err(ctx)?.to_vec();
        variables.push(Ct2Variable {
            name,
            shape,
            dtype,
            data,
        });
    }
    let n_alias = u32_(&mut r).map_err(|e| format!("alias table: {e}"))?;
    if n_alias > MAX_VARIABLES {
        return Err(format!("alias table declares {n_alias} entries"));
    }
    let mut aliases = Vec::with_capacity(n_alias as usize);
    for _ in 0..n_alias {
        let alias = string(&mut r, "alias name")?;
        let target = string(&mut r, "alias target")?;
        if !variables.iter().any(|v| v.name == target) {
            return Err(format!(
                "alias '{alias}' points to missing variable '{target}'"
            ));
        }
        aliases.push((alias, target));
    }
    if !r.at_end() {
        return Err(format!(
            "{} unexpected bytes after the alias table",
            bytes.len() - r.pos()
        ));
    }
    Ok(Ct2Model {
        version,
        spec,
        revision,
        variables,
        aliases,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string_bytes(s: &str) -> Vec<u8> {
        let mut b = ((s.len() + 1) as u16).to_le_bytes().to_vec();
        b.extend(s.as_bytes());
        b.push(0);
        b
    }

    fn sample() -> Vec<u8> {
        let mut b = 6u32.to_le_bytes().to_vec();
        b.extend(string_bytes("WhisperSpec"));
        b.extend(3u32.to_le_bytes());
        b.extend(2u32.to_le_bytes());
        b.extend(string_bytes("a/num_heads"));
        b.push(0);
        b.push(2);
        b.extend(2u32.to_le_bytes());
        b.extend(6i16.to_le_bytes());
        b.extend(string_bytes("a/w"));
        b.push(2);
        b.extend(2u32.to_le_bytes());
        b.extend(1u32.to_le_bytes());
        b.push(0);
        b.extend(8u32.to_le_bytes());
        b.extend(1.5f32.to_le_bytes());
        b.extend((-2f32).to_le_bytes());
        b.extend(1u32.to_le_bytes());
        b.extend(string_bytes("b/w"));
        b.extend(string_bytes("a/w"));
        b
    }

    #[test]
    fn parses_variables_scalars_and_aliases() {
        let m = parse(&sample()).unwrap();
        assert_eq!(
            (m.version, m.spec.as_str(), m.revision),
            (6, "WhisperSpec", 3)
        );
        assert_eq!(m.get("a/num_heads").unwrap().scalar_int(), Some(6));
        let w = m.get("b/w").unwrap();
        assert_eq!((w.name.as_str(), w.shape.clone()), ("a/w", vec![2, 1]));
    }

    #[test]
    fn every_truncation_is_an_error() {
        let b = sample();
        for cut in 0..b.len() {
            assert!(parse(&b[..cut]).is_err(), "cut at {cut} parsed");
        }
    }

    #[test]
    fn bad_sizes_versions_and_trailing_bytes_are_errors() {
        let mut b = sample();
        b[0] = 2;
        assert!(parse(&b).unwrap_err().contains("version 2"));
        let mut b = sample();
        b.push(0);
        assert!(parse(&b).unwrap_err().contains("unexpected bytes"));
    }
}
