//! The two fields of a PE image's header that change when binutils writes the image
//! again (`strip`, `objcopy`): the COFF header's TimeDateStamp and the optional header's
//! CheckSum. `dist` stages some files through `x86_64-w64-mingw32-strip` and keeps both a
//! function of the input (`dist::package`, `strip_on_copy`), so a package made twice is
//! the same bytes; this module reads them and computes the checksum they must carry.

use anyhow::{Context, Result};

/// Offset of CheckSum from the PE signature: the signature (4 bytes), the COFF header
/// (20) and 64 bytes into the optional header, the same for PE32 and PE32+.
const CHECKSUM_FROM_SIGNATURE: usize = 4 + 20 + 64;

/// The rewritten fields of one PE image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeHeader {
    /// TimeDateStamp: seconds since 1970 (the link time, unless a tool wrote another).
    pub time_date_stamp: u32,
    /// CheckSum as written (0: none).
    pub check_sum: u32,
    /// The checksum of the image's bytes (Windows' `CheckSumMappedFile`, binutils'
    /// `coff_compute_checksum` plus the length): what a written CheckSum must equal.
    pub computed_check_sum: u32,
}

impl PeHeader {
    /// Reads the image `bytes`: `None` when they are not a PE image (no `MZ`: an ELF
    /// file); `name` is only for the error about a damaged one.
    pub fn read(bytes: &[u8], name: &str) -> Result<Option<PeHeader>> {
        if !bytes.starts_with(b"MZ") {
            return Ok(None);
        }
        let header = goblin::pe::header::Header::parse(bytes)
            .with_context(|| format!("parsing the PE header of {name}"))?;
        let optional = header.optional_header.with_context(|| {
            format!("{name} is a PE object file, not an image: it has no optional header")
        })?;
        Ok(Some(PeHeader {
            time_date_stamp: header.coff_header.time_date_stamp,
            check_sum: optional.windows_fields.check_sum,
            computed_check_sum: checksum(
                bytes,
                header.dos_header.pe_pointer as usize + CHECKSUM_FROM_SIGNATURE,
            ),
        }))
    }

    /// CheckSum is none (0) or the image's own, so it follows from the other bytes.
    pub fn check_sum_is_consistent(&self) -> bool {
        self.check_sum == 0 || self.check_sum == self.computed_check_sum
    }
}

/// The PE checksum of `bytes`, whose CheckSum field starts at `field_at`: the bytes as
/// 16-bit little-endian words (the field counted as zero, an odd last byte as a word of
/// its own) added with the carry folded back, plus the length in bytes.
fn checksum(bytes: &[u8], field_at: usize) -> u32 {
    let field = field_at..field_at + 4;
    let byte = |i: usize| match bytes.get(i) {
        Some(b) if !field.contains(&i) => u32::from(*b),
        _ => 0,
    };
    let mut sum: u32 = 0;
    for i in (0..bytes.len()).step_by(2) {
        sum += byte(i) | byte(i + 1) << 8;
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ((sum & 0xffff) + (sum >> 16)).wrapping_add(bytes.len() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::debugger_only::test_programs::tiny_program;

    #[test]
    fn the_checksum_is_the_one_the_mingw_linker_writes() {
        let dir = tempfile::tempdir().unwrap();
        let exe = tiny_program("x86_64-w64-mingw32-gcc", dir.path(), "tiny.exe");
        let bytes = std::fs::read(&exe).unwrap();
        let h = PeHeader::read(&bytes, "tiny.exe").unwrap().unwrap();
        assert_ne!(h.check_sum, 0, "ld writes a checksum into a MinGW image");
        assert_eq!(h.check_sum, h.computed_check_sum);
        assert!(h.check_sum_is_consistent());
        // Two zero bytes more count only in the length; a changed byte changes the sum.
        let mut longer = bytes.clone();
        longer.extend([0, 0]);
        let l = PeHeader::read(&longer, "longer").unwrap().unwrap();
        assert_eq!(l.computed_check_sum, h.computed_check_sum + 2);
        assert!(!l.check_sum_is_consistent());
        let mut no_sum = bytes;
        let at = no_sum.len() - 2;
        no_sum[at] ^= 0xff;
        let field = u32::from_le_bytes(no_sum[0x3c..0x40].try_into().unwrap()) as usize
            + CHECKSUM_FROM_SIGNATURE;
        no_sum[field..field + 4].fill(0);
        let n = PeHeader::read(&no_sum, "no_sum").unwrap().unwrap();
        assert_eq!(n.check_sum, 0);
        assert!(n.check_sum_is_consistent(), "0 says there is no checksum");
        assert_ne!(n.computed_check_sum, h.computed_check_sum);
    }

    #[test]
    fn an_elf_file_has_no_pe_header_and_a_damaged_pe_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let elf = std::fs::read(tiny_program("cc", dir.path(), "tiny")).unwrap();
        assert_eq!(PeHeader::read(&elf, "tiny").unwrap(), None);
        let e = PeHeader::read(b"MZ but no more", "broken.dll").unwrap_err();
        assert!(format!("{e:#}").contains("broken.dll"), "{e:#}");
    }
}
