//! PE: machine, linker version, version resource, and the DLL names of the import
//! directory (data directory 1) and the delay-load import directory (data directory 13).
//!
//! goblin parses the headers and the section table; the two import directories are walked
//! here, reading only DLL names (not every imported function), so that only the sections
//! holding them need to be in memory. goblin does not parse delay imports at all.

use goblin::pe::header::Header;
use goblin::pe::options::ParseOptions;
use goblin::pe::section_table::SectionTable;

use super::binary::{BinaryInfo, Format, Image, Kind, Machine, ParseError};

/// Import descriptors read at most per directory (real DLLs have a few dozen).
const MAX_DESCRIPTORS: usize = 4096;
/// Longest DLL name accepted.
const MAX_NAME: usize = 512;
/// Largest resource section scanned for a version resource.
const MAX_RESOURCE_SCAN: usize = 4 << 20;
/// IMAGE_FILE_DLL.
const IMAGE_FILE_DLL: u16 = 0x2000;

/// Bytes needed for the DOS header, PE header, optional header and section table,
/// from the bytes of the first chunk (or `NotLoaded` with the range to load).
fn header_len(image: &Image<'_>) -> Result<u64, ParseError> {
    let dos = image.get(0, 0x40)?;
    let e_lfanew = u32::from_le_bytes([dos[0x3c], dos[0x3d], dos[0x3e], dos[0x3f]]) as u64;
    let coff = image.get(e_lfanew, 24)?;
    if &coff[..4] != b"PE\0\0" {
        return Err(ParseError::Malformed(
            "MZ file without a PE signature".into(),
        ));
    }
    let nsections = u16::from_le_bytes([coff[6], coff[7]]) as u64;
    let opt = u16::from_le_bytes([coff[20], coff[21]]) as u64;
    Ok(e_lfanew + 24 + opt + nsections * 40)
}

/// Parses a PE image.
pub fn parse(image: &Image<'_>) -> Result<BinaryInfo, ParseError> {
    let need = header_len(image)?;
    if need > image.len() {
        return Err(ParseError::Malformed(format!(
            "truncated: headers need {need:#x} bytes, the file has {:#x}",
            image.len()
        )));
    }
    let head = image.head();
    if (head.len() as u64) < need {
        return Err(ParseError::NotLoaded(0..need));
    }
    let head = &head[..need as usize];
    let header = Header::parse(head)?;
    let coff = header.coff_header;
    let table_at =
        header.dos_header.pe_pointer as usize + 24 + coff.size_of_optional_header as usize;
    let sections = section_table(&head[table_at..], coff.number_of_sections as usize)?;
    let end = sections
        .iter()
        .map(|s| s.pointer_to_raw_data as u64 + s.size_of_raw_data as u64)
        .max()
        .unwrap_or(0);
    if end > image.len() {
        return Err(ParseError::Malformed(format!(
            "truncated: sections end at {end:#x}, the file has {:#x} bytes",
            image.len()
        )));
    }
    let machine = match coff.machine {
        goblin::pe::header::COFF_MACHINE_X86 => Machine::X86,
        goblin::pe::header::COFF_MACHINE_X86_64 => Machine::X64,
        goblin::pe::header::COFF_MACHINE_ARM64 => Machine::Arm64,
        goblin::pe::header::COFF_MACHINE_ARMNT => Machine::Arm,
        other => Machine::Other(other as u32),
    };
    let kind = if coff.characteristics & IMAGE_FILE_DLL != 0 {
        Kind::Library
    } else {
        Kind::Executable
    };
    let mut info = BinaryInfo::new(Format::Pe, machine, kind);
    let Some(opt) = header.optional_header else {
        return Err(ParseError::Malformed(
            "PE image without an optional header".into(),
        ));
    };
    info.linker_version = Some((
        opt.standard_fields.major_linker_version,
        opt.standard_fields.minor_linker_version,
    ));
    let view = View {
        image,
        sections: &sections,
        file_alignment: opt.windows_fields.file_alignment,
    };
    let dirs = &opt.data_directories;
    if let Some(dir) = dirs.get_import_table() {
        info.imports = view.import_names(dir.virtual_address, 20, 12, |_| Ok(None))?;
    }
    if let Some(dir) = dirs.get_delay_import_descriptor() {
        let image_base = opt.windows_fields.image_base;
        info.delay_imports = view.import_names(dir.virtual_address, 32, 4, |desc| {
            // Attributes bit 0 clear: a Visual C++ 6 table holding VAs instead of RVAs.
            let attributes = u32::from_le_bytes([desc[0], desc[1], desc[2], desc[3]]);
            Ok(if attributes & 1 == 0 {
                Some(image_base)
            } else {
                None
            })
        })?;
    }
    if let Some(dir) = dirs.get_resource_table() {
        info.file_version = view.file_version(dir.virtual_address)?;
    }
    Ok(info)
}

/// Parses the section table. Long names (`/4`, an offset into the COFF string table that
/// mingw writes for debug sections) are blanked first: names are not needed, and the
/// string table sits at the end of the file, outside the loaded headers.
fn section_table(bytes: &[u8], count: usize) -> Result<Vec<SectionTable>, ParseError> {
    let mut table = bytes
        .get(..count * 40)
        .ok_or_else(|| ParseError::Malformed("truncated section table".into()))?
        .to_vec();
    for entry in table.chunks_exact_mut(40) {
        if entry[0] == b'/' {
            entry[..8].fill(0);
        }
    }
    let mut offset = 0;
    (0..count)
        .map(|_| SectionTable::parse(&table, &mut offset, 0).map_err(ParseError::from))
        .collect()
}

struct View<'i, 'a> {
    image: &'i Image<'a>,
    sections: &'i [SectionTable],
    file_alignment: u32,
}

impl View<'_, '_> {
    fn offset(&self, rva: u32) -> Result<(u64, Option<&SectionTable>), ParseError> {
        let off = goblin::pe::utils::find_offset(
            rva as usize,
            self.sections,
            self.file_alignment,
            &ParseOptions::default(),
        )
        .ok_or_else(|| {
            ParseError::Malformed(format!("RVA {rva:#x} is in no section of the file"))
        })?;
        let section = self.sections.iter().find(|s| {
            let start = s.virtual_address;
            let size = s.virtual_size.max(s.size_of_raw_data);
            rva >= start && (rva as u64) < start as u64 + size as u64
        });
        Ok((off as u64, section))
    }

    /// Widens a `NotLoaded` to the whole raw data of the section, so one load serves
    /// every later read from it.
    fn widen(&self, e: ParseError, section: Option<&SectionTable>) -> ParseError {
        match (e, section) {
            (ParseError::NotLoaded(r), Some(s)) => {
                let start = s.pointer_to_raw_data as u64;
                let end = (start + s.size_of_raw_data as u64).min(self.image.len());
                if start <= r.start && r.end <= end {
                    ParseError::NotLoaded(start..end)
                } else {
                    ParseError::NotLoaded(r)
                }
            }
            (e, _) => e,
        }
    }

    fn read(&self, rva: u32, len: usize) -> Result<&[u8], ParseError> {
        let (off, section) = self.offset(rva)?;
        self.image.get(off, len).map_err(|e| self.widen(e, section))
    }

    fn name(&self, rva: u32) -> Result<String, ParseError> {
        let (off, section) = self.offset(rva)?;
        self.image
            .c_string(off, MAX_NAME)
            .map_err(|e| self.widen(e, section))
    }

    /// Walks a zero-terminated descriptor array of `size`-byte entries whose DLL name RVA
    /// is at `name_at`; `base_of` returns an image base to subtract when the entry holds VAs.
    fn import_names(
        &self,
        rva: u32,
        size: usize,
        name_at: usize,
        base_of: impl Fn(&[u8]) -> Result<Option<u64>, ParseError>,
    ) -> Result<Vec<String>, ParseError> {
        let mut names = Vec::new();
        for i in 0..MAX_DESCRIPTORS {
            let desc = self.read(rva.wrapping_add((i * size) as u32), size)?;
            if desc.iter().all(|&b| b == 0) {
                return Ok(names);
            }
            let raw = u32::from_le_bytes([
                desc[name_at],
                desc[name_at + 1],
                desc[name_at + 2],
                desc[name_at + 3],
            ]);
            if raw == 0 {
                // A descriptor without a name ends the table for the Windows loader too.
                return Ok(names);
            }
            let name_rva = match base_of(desc)? {
                Some(base) => u32::try_from((raw as u64).wrapping_sub(base)).map_err(|_| {
                    ParseError::Malformed(format!(
                        "delay import name VA {raw:#x} below the image base"
                    ))
                })?,
                None => raw,
            };
            names.push(self.name(name_rva)?);
        }
        Err(ParseError::Malformed(format!(
            "import directory at RVA {rva:#x} has no terminator within {MAX_DESCRIPTORS} entries"
        )))
    }

    /// The VS_FIXEDFILEINFO file version from the resource section, if any.
    fn file_version(&self, rva: u32) -> Result<Option<[u16; 4]>, ParseError> {
        let Ok((_, Some(section))) = self.offset(rva) else {
            return Ok(None);
        };
        let start = section.pointer_to_raw_data as u64;
        let len = (section.size_of_raw_data as usize)
            .min(MAX_RESOURCE_SCAN)
            .min(self.image.len().saturating_sub(start) as usize);
        let bytes = self
            .image
            .get(start, len)
            .map_err(|e| self.widen(e, Some(section)))?;
        const SIGNATURE: [u8; 4] = 0xFEEF_04BDu32.to_le_bytes();
        let found = bytes
            .chunks_exact(4)
            .position(|w| w == SIGNATURE)
            .map(|i| i * 4);
        Ok(found.and_then(|at| {
            let f = bytes.get(at..at + 16)?;
            let ms = u32::from_le_bytes([f[8], f[9], f[10], f[11]]);
            let ls = u32::from_le_bytes([f[12], f[13], f[14], f[15]]);
            Some([(ms >> 16) as u16, ms as u16, (ls >> 16) as u16, ls as u16])
        }))
    }
}
