//! What one binary says about its dependencies: the pure `bytes -> BinaryInfo` step.
//!
//! [`parse`] takes a whole file; [`parse_image`] takes an [`Image`], a file of which only
//! some ranges are in memory. A parser that needs bytes outside them answers
//! [`ParseError::NotLoaded`] with the range it wants, so the reader (`input.rs`) can load
//! just the headers and import tables of a large DLL instead of all of it.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use serde::Serialize;

use super::{elf, pe};

/// File format of a binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// Windows Portable Executable.
    Pe,
    /// ELF (Linux).
    Elf,
    /// Mach-O (macOS).
    MachO,
}

/// CPU architecture a binary is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Machine {
    /// 32-bit x86.
    X86,
    /// x86-64.
    X64,
    /// AArch64.
    Arm64,
    /// 32-bit ARM.
    Arm,
    /// Anything else, with the raw machine number of the format.
    Other(u32),
}

impl fmt::Display for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Machine::X86 => f.write_str("x86"),
            Machine::X64 => f.write_str("x64"),
            Machine::Arm64 => f.write_str("arm64"),
            Machine::Arm => f.write_str("arm"),
            Machine::Other(n) => write!(f, "machine {n:#x}"),
        }
    }
}

/// Executable or library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A program (PE without IMAGE_FILE_DLL, ELF with PT_INTERP, Mach-O MH_EXECUTE).
    Executable,
    /// A shared library / DLL.
    Library,
}

/// How a dependency is referenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DepKind {
    /// PE import directory (data directory 1).
    Import,
    /// PE delay-load import directory (data directory 13).
    DelayImport,
    /// ELF DT_NEEDED / Mach-O LC_LOAD_DYLIB.
    Needed,
}

/// The dependency facts of one binary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BinaryInfo {
    /// File format.
    pub format: Format,
    /// CPU architecture.
    pub machine: Machine,
    /// Executable or library.
    pub kind: Kind,
    /// PE: DLL names from the import directory, in table order, as written.
    pub imports: Vec<String>,
    /// PE: DLL names from the delay-load import directory.
    pub delay_imports: Vec<String>,
    /// ELF DT_NEEDED / Mach-O load commands, in order.
    pub needed: Vec<String>,
    /// ELF DT_SONAME / Mach-O LC_ID_DYLIB.
    pub soname: Option<String>,
    /// ELF DT_RPATH entries (split on `:`) / Mach-O LC_RPATH.
    pub rpath: Vec<String>,
    /// ELF DT_RUNPATH entries (split on `:`).
    pub runpath: Vec<String>,
    /// PE optional header MajorLinkerVersion.MinorLinkerVersion (MSVC link.exe 14.44 is (14, 44)).
    pub linker_version: Option<(u8, u8)>,
    /// PE VS_FIXEDFILEINFO file version (the four parts), when there is a version resource.
    pub file_version: Option<[u16; 4]>,
}

impl BinaryInfo {
    /// An empty record of the given format, machine and kind.
    pub fn new(format: Format, machine: Machine, kind: Kind) -> BinaryInfo {
        BinaryInfo {
            format,
            machine,
            kind,
            imports: Vec::new(),
            delay_imports: Vec::new(),
            needed: Vec::new(),
            soname: None,
            rpath: Vec::new(),
            runpath: Vec::new(),
            linker_version: None,
            file_version: None,
        }
    }

    /// Every dependency with how it is referenced: imports, delay imports, then needed.
    pub fn dependencies(&self) -> impl Iterator<Item = (&str, DepKind)> {
        self.imports
            .iter()
            .map(|n| (n.as_str(), DepKind::Import))
            .chain(
                self.delay_imports
                    .iter()
                    .map(|n| (n.as_str(), DepKind::DelayImport)),
            )
            .chain(self.needed.iter().map(|n| (n.as_str(), DepKind::Needed)))
    }
}

/// Why a file that looks like a binary could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// The parser needs this byte range, which the [`Image`] does not hold.
    NotLoaded(Range<u64>),
    /// Truncated or inconsistent structures.
    Malformed(String),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::NotLoaded(r) => {
                write!(f, "bytes {:#x}..{:#x} not loaded", r.start, r.end)
            }
            ParseError::Malformed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ParseError {}

impl From<goblin::error::Error> for ParseError {
    fn from(e: goblin::error::Error) -> Self {
        ParseError::Malformed(e.to_string())
    }
}

/// What the first bytes of a file say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniff {
    /// `MZ`: a PE (or DOS) image.
    Pe,
    /// `\x7fELF` for a CPU: a host binary.
    Elf,
    /// `\x7fELF` with e_machine EM_AMDGPU (224): a GPU code object (`.co`, `.hsaco`),
    /// not a host dependency.
    GpuCode,
    /// A Mach-O or universal binary magic.
    MachO,
    /// Anything else (text, kernel `.dat` files, compressed bundles): skipped.
    Other,
}

/// How many leading bytes [`sniff`] looks at (enough for the ELF e_machine field).
pub const SNIFF_LEN: usize = 20;

/// Classifies a file by its first [`SNIFF_LEN`] bytes.
pub fn sniff(head: &[u8]) -> Sniff {
    if head.starts_with(b"MZ") {
        Sniff::Pe
    } else if head.starts_with(b"\x7fELF") {
        let machine = match (head.get(5), head.get(18..20)) {
            (Some(1), Some(m)) => u16::from_le_bytes([m[0], m[1]]),
            (Some(2), Some(m)) => u16::from_be_bytes([m[0], m[1]]),
            _ => 0,
        };
        if machine == goblin::elf::header::EM_AMDGPU {
            Sniff::GpuCode
        } else {
            Sniff::Elf
        }
    } else if head.len() >= 4 {
        let m = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        let le = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        use goblin::mach::{fat::FAT_MAGIC, header};
        if [header::MH_MAGIC, header::MH_MAGIC_64].contains(&le) || m == FAT_MAGIC {
            Sniff::MachO
        } else {
            Sniff::Other
        }
    } else {
        Sniff::Other
    }
}

/// A file of `len` bytes of which some ranges are in memory.
#[derive(Debug, Clone)]
pub struct Image<'a> {
    len: u64,
    chunks: Vec<(u64, Cow<'a, [u8]>)>,
}

impl<'a> Image<'a> {
    /// The whole file in memory.
    pub fn full(bytes: &'a [u8]) -> Image<'a> {
        Image {
            len: bytes.len() as u64,
            chunks: vec![(0, Cow::Borrowed(bytes))],
        }
    }

    /// A file of `len` bytes with nothing loaded yet.
    pub fn sparse(len: u64) -> Image<'a> {
        Image {
            len,
            chunks: Vec::new(),
        }
    }

    /// Adds the bytes that start at file offset `offset`.
    pub fn insert(&mut self, offset: u64, bytes: Vec<u8>) {
        self.chunks.push((offset, Cow::Owned(bytes)));
    }

    /// The file length.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes held in memory (for the "headers, not whole files" accounting).
    pub fn loaded_bytes(&self) -> u64 {
        self.chunks.iter().map(|(_, c)| c.len() as u64).sum()
    }

    /// Whether the whole file is in memory.
    pub fn is_full(&self) -> bool {
        self.chunks
            .iter()
            .any(|(o, c)| *o == 0 && c.len() as u64 >= self.len)
    }

    /// `len` bytes at `offset`; `Malformed` past the end of the file, `NotLoaded` when
    /// inside the file but not in memory.
    pub fn get(&self, offset: u64, len: usize) -> Result<&[u8], ParseError> {
        let end = offset
            .checked_add(len as u64)
            .filter(|&e| e <= self.len)
            .ok_or_else(|| {
                ParseError::Malformed(format!(
                    "truncated: needs bytes {offset:#x}..+{len:#x} of a {:#x}-byte file",
                    self.len
                ))
            })?;
        for (start, chunk) in &self.chunks {
            if offset >= *start && end <= start + chunk.len() as u64 {
                let s = (offset - start) as usize;
                return Ok(&chunk[s..s + len]);
            }
        }
        Err(ParseError::NotLoaded(offset..end))
    }

    /// The longest loaded run starting at `offset`, at most `max` bytes (for reading
    /// NUL-terminated strings whose length is unknown).
    pub fn get_up_to(&self, offset: u64, max: usize) -> Result<&[u8], ParseError> {
        if offset >= self.len {
            return Err(ParseError::Malformed(format!(
                "truncated: offset {offset:#x} is past the end of a {:#x}-byte file",
                self.len
            )));
        }
        for (start, chunk) in &self.chunks {
            let end = start + chunk.len() as u64;
            if offset >= *start && offset < end {
                let s = (offset - start) as usize;
                let n = max.min(chunk.len() - s);
                return Ok(&chunk[s..s + n]);
            }
        }
        let end = (offset + max as u64).min(self.len);
        Err(ParseError::NotLoaded(offset..end))
    }

    /// The chunk that starts at offset 0, if any (headers are parsed from it).
    pub fn head(&self) -> &[u8] {
        self.chunks
            .iter()
            .find(|(o, _)| *o == 0)
            .map(|(_, c)| &c[..])
            .unwrap_or(&[])
    }

    /// A NUL-terminated name of at most `max` bytes at `offset`, as printable ASCII/UTF-8.
    pub fn c_string(&self, offset: u64, max: usize) -> Result<String, ParseError> {
        let bytes = self.get_up_to(offset, max)?;
        let Some(n) = bytes.iter().position(|&b| b == 0) else {
            if (bytes.len() as u64) < (self.len - offset) && bytes.len() < max {
                return Err(ParseError::NotLoaded(
                    offset..(offset + max as u64).min(self.len),
                ));
            }
            return Err(ParseError::Malformed(format!(
                "unterminated name at offset {offset:#x}"
            )));
        };
        let s = std::str::from_utf8(&bytes[..n]).map_err(|_| {
            ParseError::Malformed(format!("name at offset {offset:#x} is not UTF-8"))
        })?;
        if s.is_empty() || s.chars().any(|c| c.is_control()) {
            return Err(ParseError::Malformed(format!(
                "empty or unprintable name at offset {offset:#x}"
            )));
        }
        Ok(s.to_string())
    }
}

/// Parses a whole file already in memory.
pub fn parse(bytes: &[u8]) -> Result<BinaryInfo, ParseError> {
    parse_image(&Image::full(bytes))
}

/// Parses an image; `NotLoaded` asks the caller to load a range and try again.
pub fn parse_image(image: &Image<'_>) -> Result<BinaryInfo, ParseError> {
    let head = image.get_up_to(0, SNIFF_LEN)?;
    match sniff(head) {
        Sniff::Pe => pe::parse(image),
        Sniff::Elf => elf::parse(image),
        Sniff::MachO => parse_macho(image),
        Sniff::GpuCode => Err(ParseError::Malformed(
            "an AMDGPU code object, not a host binary".into(),
        )),
        Sniff::Other => Err(ParseError::Malformed("not a PE, ELF or Mach-O file".into())),
    }
}

fn parse_macho(image: &Image<'_>) -> Result<BinaryInfo, ParseError> {
    use goblin::mach::{cputype, header, Mach, SingleArch};
    let bytes = image.get(0, image.len() as usize)?;
    let macho = match Mach::parse(bytes)? {
        Mach::Binary(m) => m,
        Mach::Fat(fat) => match fat.get(0)? {
            SingleArch::MachO(m) => m,
            SingleArch::Archive(_) => {
                return Err(ParseError::Malformed("universal static archive".into()))
            }
        },
    };
    let machine = match macho.header.cputype() {
        cputype::CPU_TYPE_X86_64 => Machine::X64,
        cputype::CPU_TYPE_ARM64 => Machine::Arm64,
        cputype::CPU_TYPE_X86 => Machine::X86,
        other => Machine::Other(other),
    };
    let kind = if macho.header.filetype == header::MH_EXECUTE {
        Kind::Executable
    } else {
        Kind::Library
    };
    let mut info = BinaryInfo::new(Format::MachO, machine, kind);
    // goblin lists the binary itself first as "self".
    info.needed = macho
        .libs
        .iter()
        .filter(|l| **l != "self")
        .map(|l| l.to_string())
        .collect();
    info.soname = macho.name.map(str::to_string);
    info.rpath = macho.rpaths.iter().map(|r| r.to_string()).collect();
    Ok(info)
}
