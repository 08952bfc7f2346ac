//! A GGUF header and tensor-table validator in safe Rust, run on a model's bytes before
//! ggml's parser sees them.
//!
//! ggml reports most malformed files, but some values reach its `GGML_ASSERT`s and
//! allocators (a tensor claiming more data than the file holds makes it allocate the
//! claimed size), and an assert aborts the process: a server would die on one bad
//! upload of a model path. This walk checks every count, string and array length
//! against the bytes that remain, every tensor's shape, type and size, and that each
//! tensor's offset and size lie inside the file, so ggml only ever parses a file whose
//! tables are consistent. It allocates nothing in proportion to what a header claims.

use std::collections::HashSet;

/// GGUF versions this engine reads (the layout of 2 and 3 is the same).
const VERSIONS: [u32; 2] = [2, 3];
/// ggml's limit on dimensions per tensor (`GGML_MAX_DIMS`).
const MAX_DIMS: u32 = 4;
/// ggml's limit on a tensor name, terminator included (`GGML_MAX_NAME`).
const MAX_NAME: usize = 64;
/// Most tensors a model may list (Whisper large has about 1,300).
const MAX_TENSORS: u64 = 1 << 16;
/// Most metadata entries a model may list.
const MAX_KV: u64 = 1 << 16;
/// Default alignment of the data section (`GGUF_DEFAULT_ALIGNMENT`).
const DEFAULT_ALIGNMENT: u64 = 32;
/// The metadata key that changes the alignment.
const ALIGNMENT_KEY: &str = "general.alignment";

/// GGUF metadata value types, as numbered by the format.
mod kv_type {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

/// Bytes of one fixed-size metadata value, `None` for strings and arrays.
fn fixed_size(t: u32) -> Option<u64> {
    use kv_type::*;
    match t {
        U8 | I8 | BOOL => Some(1),
        U16 | I16 => Some(2),
        U32 | I32 | F32 => Some(4),
        U64 | I64 | F64 => Some(8),
        _ => None,
    }
}

/// `(elements per block, bytes per block)` of the ggml tensor types a file may hold
/// here; the others (removed or exotic layouts) are refused by name.
fn block_layout(ggml_type: u32) -> Option<(u64, u64)> {
    Some(match ggml_type {
        0 => (1, 4),     // F32
        1 => (1, 2),     // F16
        2 => (32, 18),   // Q4_0
        3 => (32, 20),   // Q4_1
        6 => (32, 22),   // Q5_0
        7 => (32, 24),   // Q5_1
        8 => (32, 34),   // Q8_0
        9 => (32, 36),   // Q8_1
        10 => (256, 84), // Q2_K
        11 => (256, 110),
        12 => (256, 144),
        13 => (256, 176),
        14 => (256, 210),
        15 => (256, 292), // Q8_K
        24 => (1, 1),     // I8
        25 => (1, 2),     // I16
        26 => (1, 4),     // I32
        27 => (1, 8),     // I64
        28 => (1, 8),     // F64
        30 => (1, 2),     // BF16
        _ => return None,
    })
}

/// A bounds-checked little-endian cursor.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8], String> {
        if n > self.remaining() {
            return Err(format!(
                "{} needs {n} bytes at offset {} but only {} remain (truncated file?)",
                what(),
                self.pos,
                self.remaining()
            ));
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.bytes[start..self.pos])
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, String> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, String> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// A length-prefixed string, its length checked against the bytes left.
    fn string(&mut self, what: &dyn Fn() -> String) -> Result<&'a [u8], String> {
        let len = self.u64(what)?;
        if len > self.remaining() {
            return Err(format!(
                "{} claims a {len}-byte string but only {} bytes remain",
                what(),
                self.remaining()
            ));
        }
        self.take(len, what)
    }
}

/// One tensor's table entry after its checks.
struct TensorEntry {
    name: String,
    offset: u64,
    bytes: u64,
}

/// Checks a GGUF file's header, metadata and tensor table against its own bytes.
/// `Err` carries the specific reason, naming the entry at fault.
pub fn check(bytes: &[u8]) -> Result<(), String> {
    check_prefix(bytes, bytes.len() as u64)
}

/// First read of [`check_file`]: enough for the header and tensor table of most models.
const FIRST_READ: u64 = 1 << 20;
/// Most of a file [`check_file`] reads for the header and tables (a model's metadata is
/// a few MiB): a huge file with broken tables is not read whole into memory.
const MAX_TABLES_READ: u64 = 256 << 20;

/// Checks a GGUF file on disk like [`check`], reading only the start of it that holds the
/// header and the tensor table (the tensor data is checked against the file's length), so
/// a model is never held whole in memory for the check.
pub fn check_file(path: &std::path::Path) -> Result<(), String> {
    use std::io::Read;
    let io = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
    let file_len = std::fs::metadata(path).map_err(io)?.len();
    let most = file_len.min(MAX_TABLES_READ);
    let mut want = FIRST_READ.min(most);
    loop {
        let mut prefix = Vec::new();
        std::fs::File::open(path)
            .map_err(io)?
            .take(want)
            .read_to_end(&mut prefix)
            .map_err(io)?;
        match check_prefix(&prefix, file_len) {
            // The tables may go on past what was read: read four times as much, up to
            // the whole file (or MAX_TABLES_READ), before a failure counts.
            Err(_) if want < most => want = want.saturating_mul(4).min(most),
            Err(e) => return Err(e),
            // Its tensors lie inside the file, so the file's length bounds what loading
            // it allocates.
            Ok(()) => return fits_in_memory(file_len, available_memory()),
        }
    }
}

/// Refuses a model whose tensor data (at most `bytes`) is larger than the memory the
/// machine has available, before any of it is allocated: an allocation that large would
/// fail inside ggml or get the process killed. `available` is `None` where the machine
/// does not say (then nothing is refused here).
pub fn fits_in_memory(bytes: u64, available: Option<u64>) -> Result<(), String> {
    match available {
        Some(avail) if bytes > avail => Err(format!(
            "its {} MiB of tensor data do not fit in the {} MiB of memory available (MemAvailable); free memory, or use a smaller or quantized model (convert it with parameter 'quantize' q8_0)",
            bytes >> 20,
            avail >> 20
        )),
        _ => Ok(()),
    }
}

/// Memory available for new allocations without swapping, from Linux's
/// `/proc/meminfo` (`MemAvailable`); `None` elsewhere.
fn available_memory() -> Option<u64> {
    parse_mem_available(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// The `MemAvailable:` line of a `/proc/meminfo` text, in bytes.
fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// [`check`] on the first bytes of a file of `file_len` bytes: the header and tables
/// must lie in `bytes`, the tensor data is checked against `file_len`.
fn check_prefix(bytes: &[u8], file_len: u64) -> Result<(), String> {
    let mut c = Cursor { bytes, pos: 0 };
    let magic = c.take(4, &|| "the magic".into())?;
    if magic != b"GGUF" {
        return Err("not a GGUF file (the first bytes are not 'GGUF')".into());
    }
    let version = c.u32(&|| "the version".into())?;
    if version & 0xFFFF == 0 && version != 0 {
        return Err(format!(
            "GGUF version {version:#x} looks big-endian; only little-endian files are read"
        ));
    }
    if !VERSIONS.contains(&version) {
        return Err(format!(
            "GGUF version {version} is not supported (this engine reads versions 2 and 3; re-convert the model)"
        ));
    }
    let n_tensors = c.u64(&|| "the tensor count".into())?;
    let n_kv = c.u64(&|| "the metadata count".into())?;
    // Every tensor entry takes at least 8 (name) + 4 (dims) + 4 (type) + 8 (offset) bytes,
    // every metadata entry at least 8 (key) + 4 (type) + 1 (value).
    for (what, n, max, min_bytes) in [
        ("tensors", n_tensors, MAX_TENSORS, 24),
        ("metadata entries", n_kv, MAX_KV, 13),
    ] {
        if n > max {
            return Err(format!(
                "the header claims {n} {what}; at most {max} are allowed"
            ));
        }
        if n.saturating_mul(min_bytes) > c.remaining() {
            return Err(format!(
                "the header claims {n} {what} but only {} bytes follow (truncated or corrupt file)",
                c.remaining()
            ));
        }
    }
    let mut alignment = DEFAULT_ALIGNMENT;
    let mut keys = HashSet::new();
    for i in 0..n_kv {
        let key = c.string(&|| format!("metadata key {i}"))?;
        let key = String::from_utf8_lossy(key).into_owned();
        if key.is_empty() {
            return Err(format!("metadata key {i} is empty"));
        }
        let what = || format!("metadata '{key}'");
        let t = c.u32(&what)?;
        if key == ALIGNMENT_KEY {
            if t != kv_type::U32 {
                return Err(format!("'{ALIGNMENT_KEY}' has type {t}; it must be a u32"));
            }
            let a = c.u32(&what)?;
            if a == 0 || !a.is_power_of_two() {
                return Err(format!(
                    "'{ALIGNMENT_KEY}' is {a}; it must be a power of two"
                ));
            }
            alignment = u64::from(a);
        } else {
            skip_value(&mut c, t, &what)?;
        }
        if !keys.insert(key.clone()) {
            return Err(format!("metadata key '{key}' appears twice"));
        }
    }
    let mut tensors = Vec::with_capacity(n_tensors as usize);
    let mut names = HashSet::new();
    for i in 0..n_tensors {
        let name = c.string(&|| format!("tensor {i}'s name"))?;
        let name = String::from_utf8_lossy(name).into_owned();
        if name.len() >= MAX_NAME {
            return Err(format!(
                "tensor {i}'s name is {} bytes long; ggml allows at most {}",
                name.len(),
                MAX_NAME - 1
            ));
        }
        if !names.insert(name.clone()) {
            return Err(format!("tensor '{name}' appears twice"));
        }
        tensors.push(tensor_entry(&mut c, name)?);
    }
    if n_tensors == 0 {
        return Ok(());
    }
    let table_end = c.pos as u64;
    let data_start = table_end.div_ceil(alignment) * alignment;
    let data_len = file_len.checked_sub(data_start).ok_or_else(|| {
        format!("the file ends inside the padding before its tensor data (offset {data_start})")
    })?;
    let mut expected = 0u64;
    for t in &tensors {
        if t.offset != expected {
            return Err(format!(
                "tensor '{}' is at data offset {}, where {expected} was expected (tensors must follow each other, aligned to {alignment})",
                t.name, t.offset
            ));
        }
        let end = t.offset.checked_add(t.bytes).filter(|&e| e <= data_len);
        let Some(end) = end else {
            return Err(format!(
                "tensor '{}' claims {} bytes at data offset {}, past the end of the file ({data_len} bytes of tensor data)",
                t.name, t.bytes, t.offset
            ));
        };
        expected = end.div_ceil(alignment) * alignment;
    }
    if expected > data_len {
        let last = tensors.last().map(|t| t.name.as_str()).unwrap_or_default();
        return Err(format!(
            "the file ends inside the padding after tensor '{last}' ({expected} bytes of tensor data expected, {data_len} present)"
        ));
    }
    Ok(())
}

/// Skips one metadata value of type `t`, checking its lengths.
fn skip_value(c: &mut Cursor<'_>, t: u32, what: &dyn Fn() -> String) -> Result<(), String> {
    if let Some(n) = fixed_size(t) {
        c.take(n, what)?;
        return Ok(());
    }
    match t {
        kv_type::STRING => {
            c.string(what)?;
        }
        kv_type::ARRAY => {
            let elem = c.u32(what)?;
            let n = c.u64(what)?;
            if let Some(size) = fixed_size(elem) {
                let total = n.checked_mul(size).filter(|&b| b <= c.remaining());
                let total = total.ok_or_else(|| {
                    format!(
                        "{} claims {n} array elements of {size} bytes but only {} bytes remain",
                        what(),
                        c.remaining()
                    )
                })?;
                c.take(total, what)?;
            } else if elem == kv_type::STRING {
                if n.saturating_mul(8) > c.remaining() {
                    return Err(format!(
                        "{} claims {n} strings but only {} bytes remain",
                        what(),
                        c.remaining()
                    ));
                }
                for _ in 0..n {
                    c.string(what)?;
                }
            } else {
                return Err(format!(
                    "{} is an array of type {elem}, which GGUF does not allow",
                    what()
                ));
            }
        }
        other => {
            return Err(format!("{} has unknown value type {other}", what()));
        }
    }
    Ok(())
}

/// Reads one tensor's dims, type and offset, checking the shape and its byte size.
fn tensor_entry(c: &mut Cursor<'_>, name: String) -> Result<TensorEntry, String> {
    let what = || format!("tensor '{name}'");
    let n_dims = c.u32(&what)?;
    if n_dims > MAX_DIMS {
        return Err(format!(
            "tensor '{name}' has {n_dims} dimensions; ggml allows at most {MAX_DIMS}"
        ));
    }
    let mut ne = [1u64; MAX_DIMS as usize];
    for d in ne.iter_mut().take(n_dims as usize) {
        let v = c.u64(&what)? as i64;
        if v < 0 {
            return Err(format!("tensor '{name}' has a negative dimension {v}"));
        }
        *d = v as u64;
    }
    let ggml_type = c.u32(&what)?;
    let (block, block_bytes) = block_layout(ggml_type).ok_or_else(|| {
        format!("tensor '{name}' has ggml type {ggml_type}, which this engine does not read")
    })?;
    if ne[0] % block != 0 {
        return Err(format!(
            "tensor '{name}' has rows of {} elements, not a multiple of its type's block of {block}",
            ne[0]
        ));
    }
    let too_big = || format!("tensor '{name}' has shape {ne:?}, whose size overflows 64 bits");
    let elements = ne
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(too_big)?;
    let bytes = (elements / block)
        .checked_mul(block_bytes)
        .ok_or_else(too_big)?;
    let offset = c.u64(&what)?;
    Ok(TensorEntry {
        name,
        offset,
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GGUF v3 file with the given metadata bytes and tensors (name, dims, type, data).
    fn gguf(kv: &[(&str, u32, Vec<u8>)], tensors: &[(&str, Vec<u64>, u32, usize)]) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend((tensors.len() as u64).to_le_bytes());
        b.extend((kv.len() as u64).to_le_bytes());
        for (k, t, v) in kv {
            b.extend((k.len() as u64).to_le_bytes());
            b.extend(k.as_bytes());
            b.extend(t.to_le_bytes());
            b.extend(v);
        }
        let mut offset = 0u64;
        for (name, dims, t, data) in tensors {
            b.extend((name.len() as u64).to_le_bytes());
            b.extend(name.as_bytes());
            b.extend((dims.len() as u32).to_le_bytes());
            for d in dims {
                b.extend(d.to_le_bytes());
            }
            b.extend(t.to_le_bytes());
            b.extend(offset.to_le_bytes());
            offset += (*data as u64).div_ceil(32) * 32;
        }
        while !b.len().is_multiple_of(32) {
            b.push(0);
        }
        for (_, _, _, data) in tensors {
            b.extend(vec![0u8; data.div_ceil(32) * 32]);
        }
        b
    }

    fn string_value(s: &str) -> Vec<u8> {
        let mut v = (s.len() as u64).to_le_bytes().to_vec();
        v.extend(s.as_bytes());
        v
    }

    #[test]
    fn a_consistent_file_passes() {
        let b = gguf(
            &[("audiocpp.family", kv_type::STRING, string_value("whisper"))],
            &[("a", vec![4, 2], 0, 32), ("b", vec![64], 8, 68)],
        );
        check(&b).unwrap();
    }

    #[test]
    fn a_tensor_past_the_end_is_refused_before_ggml_allocates_it() {
        // The last tensor claims 2^27 f32 elements (512 MiB) in a file of a few hundred bytes.
        let mut b = gguf(&[], &[("a", vec![8], 0, 32), ("big", vec![8], 0, 32)]);
        let at = b
            .windows(3)
            .position(|w| w == b"big")
            .expect("name present")
            + 3
            + 4;
        b[at..at + 8].copy_from_slice(&(1u64 << 27).to_le_bytes());
        let err = check(&b).unwrap_err();
        assert!(err.contains("tensor 'big' claims 536870912 bytes"), "{err}");
    }

    #[test]
    fn lying_counts_and_lengths_are_refused() {
        let mut b = gguf(&[], &[("a", vec![8], 0, 32)]);
        b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(check(&b)
            .unwrap_err()
            .contains("claims 18446744073709551615 tensors"));
        let huge_string = {
            let mut v = (1u64 << 40).to_le_bytes().to_vec();
            v.extend(b"x");
            v
        };
        let b = gguf(&[("k", kv_type::STRING, huge_string)], &[]);
        assert!(check(&b).unwrap_err().contains("1099511627776-byte string"));
        let mut arr = kv_type::U32.to_le_bytes().to_vec();
        arr.extend((1u64 << 62).to_le_bytes());
        let b = gguf(&[("k", kv_type::ARRAY, arr)], &[]);
        assert!(check(&b).unwrap_err().contains("array elements"));
    }

    #[test]
    fn shapes_types_and_offsets_are_checked() {
        let cases: [(Vec<u64>, u32, &str); 4] = [
            (vec![1, 2, 3, 4, 5], 0, "5 dimensions"),
            (vec![33], 8, "not a multiple of its type's block of 32"),
            (vec![4], 99, "ggml type 99"),
            (vec![1 << 32, 1 << 32, 1 << 8], 0, "overflows 64 bits"),
        ];
        for (dims, t, want) in cases {
            let err = check(&gguf(&[], &[("t", dims, t, 32)])).unwrap_err();
            assert!(err.contains(want), "{want}: {err}");
        }
        let mut b = gguf(&[], &[("a", vec![8], 0, 32), ("b", vec![8], 0, 32)]);
        let at = b.windows(1).rposition(|w| w == b"b").unwrap() + 1 + 4 + 8 + 4;
        b[at..at + 8].copy_from_slice(&7u64.to_le_bytes());
        assert!(check(&b).unwrap_err().contains("where 32 was expected"));
    }

    #[test]
    fn bad_alignment_and_truncation_are_refused() {
        let b = gguf(
            &[(ALIGNMENT_KEY, kv_type::U32, 3u32.to_le_bytes().to_vec())],
            &[("a", vec![8], 0, 32)],
        );
        assert!(check(&b).unwrap_err().contains("power of two"));
        let b = gguf(&[], &[("a", vec![8], 0, 32)]);
        for cut in [0, 3, 7, 20, 30, b.len() - 40, b.len() - 1] {
            assert!(check(&b[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn a_file_is_checked_from_its_start_even_when_the_tables_outgrow_the_first_read() {
        // 3 MiB of metadata: the header and tables end past the first 1 MiB read.
        let big = "x".repeat(3 << 20);
        let b = gguf(
            &[("audiocpp.blob", kv_type::STRING, string_value(&big))],
            &[("a", vec![8], 0, 32)],
        );
        assert!(b.len() as u64 > FIRST_READ * 2);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        std::fs::write(&path, &b).unwrap();
        check_file(&path).unwrap();
        // The same file cut inside its tensor data fails on disk as in memory.
        std::fs::write(&path, &b[..b.len() - 1]).unwrap();
        let err = check_file(&path).unwrap_err();
        assert_eq!(err, check(&b[..b.len() - 1]).unwrap_err());
        assert!(err.contains("past the end of the file"), "{err}");
    }

    #[test]
    fn a_model_larger_than_the_available_memory_is_refused_before_loading() {
        let meminfo = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(parse_mem_available(meminfo), Some(2048 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 5 kB\n"), None);
        assert!(fits_in_memory(2048 * 1024, Some(2048 * 1024)).is_ok());
        assert!(fits_in_memory(u64::MAX, None).is_ok());
        let err = fits_in_memory(3 << 20, Some(2 << 20)).unwrap_err();
        assert!(
            err.contains("3 MiB of tensor data do not fit in the 2 MiB")
                && err.contains("MemAvailable")
                && err.contains("parameter 'quantize' q8_0"),
            "{err}"
        );
        // On this machine the real reading exists and a small model fits.
        if cfg!(target_os = "linux") {
            assert!(available_memory().is_some_and(|b| b > 1 << 20));
        }
    }
}
