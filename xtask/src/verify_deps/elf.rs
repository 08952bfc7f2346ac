//! ELF: machine, DT_NEEDED, DT_SONAME, DT_RPATH and DT_RUNPATH.
//!
//! goblin parses the file header and program headers; the dynamic section and its string
//! table are then read through the program headers alone (as the dynamic loader does), so
//! section headers, symbols and code never need to be in memory.

use goblin::container::{Container, Ctx, Endian};
use goblin::elf::program_header::{ProgramHeader, PT_DYNAMIC, PT_INTERP, PT_LOAD};
use goblin::elf::{dynamic, header};

use super::binary::{BinaryInfo, Format, Image, Kind, Machine, ParseError};

/// Dynamic entries read at most.
const MAX_DYNAMIC: usize = 1 << 16;

/// Parses an ELF image.
pub fn parse(image: &Image<'_>) -> Result<BinaryInfo, ParseError> {
    let ident = image.get(0, header::SIZEOF_IDENT)?;
    let is64 = match ident[header::EI_CLASS] {
        header::ELFCLASS64 => true,
        header::ELFCLASS32 => false,
        c => return Err(ParseError::Malformed(format!("bad ELF class {c}"))),
    };
    let hsize = if is64 {
        header::header64::SIZEOF_EHDR
    } else {
        header::header32::SIZEOF_EHDR
    };
    let h = goblin::elf::Elf::parse_header(image.get(0, hsize)?)?;
    let ctx = Ctx::new(
        if is64 {
            Container::Big
        } else {
            Container::Little
        },
        if h.e_ident[header::EI_DATA] == header::ELFDATA2MSB {
            Endian::Big
        } else {
            Endian::Little
        },
    );
    let phsize = ProgramHeader::size(ctx);
    if h.e_phnum > 0 && h.e_phentsize as usize != phsize {
        return Err(ParseError::Malformed(format!(
            "program header entry size {} (expected {phsize})",
            h.e_phentsize
        )));
    }
    let ph_bytes = image.get(h.e_phoff, h.e_phnum as usize * phsize)?;
    let phdrs = ProgramHeader::parse(ph_bytes, 0, h.e_phnum as usize, ctx)?;
    let end = phdrs
        .iter()
        .map(|p| p.p_offset.saturating_add(p.p_filesz))
        .chain(std::iter::once(
            h.e_shoff
                .saturating_add(h.e_shnum as u64 * h.e_shentsize as u64),
        ))
        .max()
        .unwrap_or(0);
    if end > image.len() {
        return Err(ParseError::Malformed(format!(
            "truncated: segments or section headers end at {end:#x}, the file has {:#x} bytes",
            image.len()
        )));
    }
    let machine = match h.e_machine {
        header::EM_X86_64 => Machine::X64,
        header::EM_386 => Machine::X86,
        header::EM_AARCH64 => Machine::Arm64,
        header::EM_ARM => Machine::Arm,
        other => Machine::Other(other as u32),
    };
    let kind = if h.e_type == header::ET_EXEC || phdrs.iter().any(|p| p.p_type == PT_INTERP) {
        Kind::Executable
    } else {
        Kind::Library
    };
    let mut info = BinaryInfo::new(Format::Elf, machine, kind);
    let Some(dynp) = phdrs.iter().find(|p| p.p_type == PT_DYNAMIC) else {
        return Ok(info); // static: no dependencies
    };
    let word = if is64 { 8 } else { 4 };
    let count = (dynp.p_filesz as usize / (2 * word)).min(MAX_DYNAMIC);
    let dyn_bytes = image.get(dynp.p_offset, count * 2 * word)?;
    let read = |b: &[u8]| -> u64 {
        match (is64, ctx.le) {
            (true, Endian::Little) => u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
            (true, Endian::Big) => u64::from_be_bytes(b[..8].try_into().expect("8 bytes")),
            (false, Endian::Little) => {
                u32::from_le_bytes(b[..4].try_into().expect("4 bytes")) as u64
            }
            (false, Endian::Big) => u32::from_be_bytes(b[..4].try_into().expect("4 bytes")) as u64,
        }
    };
    let mut entries = Vec::new();
    let (mut strtab, mut strsz) = (None, None);
    for e in dyn_bytes.chunks_exact(2 * word) {
        let (tag, val) = (read(&e[..word]), read(&e[word..]));
        match tag {
            dynamic::DT_NULL => break,
            dynamic::DT_STRTAB => strtab = Some(val),
            dynamic::DT_STRSZ => strsz = Some(val),
            dynamic::DT_NEEDED | dynamic::DT_SONAME | dynamic::DT_RPATH | dynamic::DT_RUNPATH => {
                entries.push((tag, val))
            }
            _ => {}
        }
    }
    if entries.is_empty() {
        return Ok(info);
    }
    let (Some(strtab), Some(strsz)) = (strtab, strsz) else {
        return Err(ParseError::Malformed(
            "dynamic section without DT_STRTAB/DT_STRSZ".into(),
        ));
    };
    let stroff = vaddr_to_offset(&phdrs, strtab).ok_or_else(|| {
        ParseError::Malformed(format!("DT_STRTAB {strtab:#x} is in no loadable segment"))
    })?;
    let strsz =
        usize::try_from(strsz).map_err(|_| ParseError::Malformed("DT_STRSZ too large".into()))?;
    let strings = image.get(stroff, strsz)?;
    let string = |at: u64| -> Result<String, ParseError> {
        let rest = usize::try_from(at)
            .ok()
            .and_then(|at| strings.get(at..))
            .ok_or_else(|| ParseError::Malformed(format!("string {at:#x} past DT_STRSZ")))?;
        let n = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| ParseError::Malformed(format!("unterminated string {at:#x}")))?;
        std::str::from_utf8(&rest[..n])
            .map(str::to_string)
            .map_err(|_| ParseError::Malformed(format!("string {at:#x} is not UTF-8")))
    };
    for (tag, val) in entries {
        let s = string(val)?;
        match tag {
            dynamic::DT_NEEDED => info.needed.push(s),
            dynamic::DT_SONAME => info.soname = Some(s),
            dynamic::DT_RPATH => info.rpath.extend(split_path(&s)),
            _ => info.runpath.extend(split_path(&s)),
        }
    }
    Ok(info)
}

fn split_path(s: &str) -> impl Iterator<Item = String> + '_ {
    s.split(':').filter(|p| !p.is_empty()).map(str::to_string)
}

fn vaddr_to_offset(phdrs: &[ProgramHeader], vaddr: u64) -> Option<u64> {
    phdrs
        .iter()
        .filter(|p| p.p_type == PT_LOAD)
        .find(|p| vaddr >= p.p_vaddr && vaddr - p.p_vaddr < p.p_filesz)
        .map(|p| vaddr - p.p_vaddr + p.p_offset)
}
