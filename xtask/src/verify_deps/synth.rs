//! Minimal, valid PE and ELF files written from a description: the bench's package
//! tree and the fuzz target's seeds are built from them. The integration tests check
//! them against `x86_64-w64-mingw32-objdump -p` and build real ones with mingw and gcc.

use super::binary::Machine;

/// A PE image to write.
#[derive(Debug, Clone)]
pub struct PeSpec {
    /// CPU: `X86` writes PE32, everything else PE32+.
    pub machine: Machine,
    /// Sets IMAGE_FILE_DLL.
    pub dll: bool,
    /// DLL names for the import directory.
    pub imports: Vec<String>,
    /// DLL names for the delay-load import directory.
    pub delay_imports: Vec<String>,
    /// MajorLinkerVersion, MinorLinkerVersion.
    pub linker_version: (u8, u8),
}

impl PeSpec {
    /// An x64 DLL (or exe when `dll` is false) importing `imports`.
    pub fn new(dll: bool, imports: &[&str]) -> PeSpec {
        PeSpec {
            machine: Machine::X64,
            dll,
            imports: imports.iter().map(|s| s.to_string()).collect(),
            delay_imports: Vec::new(),
            linker_version: (2, 40),
        }
    }
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Writes a PE image with one `.rdata` section holding both import directories.
pub fn pe(spec: &PeSpec) -> Vec<u8> {
    const FILE_ALIGN: usize = 0x200;
    const SECT_RVA: u32 = 0x1000;
    let pe32 = spec.machine == Machine::X86;
    let thunk = if pe32 { 4 } else { 8 };
    let machine: u16 = match spec.machine {
        Machine::X86 => 0x14c,
        Machine::X64 => 0x8664,
        Machine::Arm64 => 0xaa64,
        Machine::Arm => 0x1c4,
        Machine::Other(m) => m as u16,
    };
    // Section content layout.
    let n = spec.imports.len();
    let m = spec.delay_imports.len();
    let imp_dir = 0usize;
    let delay_dir = imp_dir + (n + 1) * 20;
    let mut cur = delay_dir + (m + 1) * 32;
    let hint_name = cur; // one shared hint/name entry: hint 0, "f"
    cur += 4;
    let mut sect = vec![0u8; cur];
    sect[hint_name + 2] = b'f';
    let alloc = |sect: &mut Vec<u8>, bytes: &[u8], align: usize| -> usize {
        while !sect.len().is_multiple_of(align) {
            sect.push(0);
        }
        let at = sect.len();
        sect.extend_from_slice(bytes);
        at
    };
    let rva = |off: usize| SECT_RVA + off as u32;
    let thunk_pair = |sect: &mut Vec<u8>| -> usize {
        let mut t = vec![0u8; thunk * 2];
        t[..4].copy_from_slice(&rva(hint_name).to_le_bytes());
        alloc(sect, &t, 8)
    };
    for (i, name) in spec.imports.iter().enumerate() {
        let ilt = thunk_pair(&mut sect);
        let iat = thunk_pair(&mut sect);
        let mut nb = name.as_bytes().to_vec();
        nb.push(0);
        let name_at = alloc(&mut sect, &nb, 2);
        let d = imp_dir + i * 20;
        put32(&mut sect, d, rva(ilt));
        put32(&mut sect, d + 12, rva(name_at));
        put32(&mut sect, d + 16, rva(iat));
    }
    for (i, name) in spec.delay_imports.iter().enumerate() {
        let int = thunk_pair(&mut sect);
        let iat = thunk_pair(&mut sect);
        let handle = alloc(&mut sect, &[0u8; 8], 8);
        let mut nb = name.as_bytes().to_vec();
        nb.push(0);
        let name_at = alloc(&mut sect, &nb, 2);
        let d = delay_dir + i * 32;
        put32(&mut sect, d, 1); // RVA-based
        put32(&mut sect, d + 4, rva(name_at));
        put32(&mut sect, d + 8, rva(handle));
        put32(&mut sect, d + 12, rva(iat));
        put32(&mut sect, d + 16, rva(int));
    }
    let raw_size = sect.len().div_ceil(FILE_ALIGN) * FILE_ALIGN;
    let opt_size: usize = if pe32 { 96 + 128 } else { 112 + 128 };
    let mut b = vec![0u8; FILE_ALIGN];
    b[0] = b'M';
    b[1] = b'Z';
    put32(&mut b, 0x3c, 0x80);
    b[0x80..0x84].copy_from_slice(b"PE\0\0");
    let coff = 0x84;
    put16(&mut b, coff, machine);
    put16(&mut b, coff + 2, 1);
    put16(&mut b, coff + 16, opt_size as u16);
    let mut ch: u16 = 0x0002 | if pe32 { 0x0100 } else { 0x0020 };
    if spec.dll {
        ch |= 0x2000;
    }
    put16(&mut b, coff + 18, ch);
    let o = coff + 20;
    put16(&mut b, o, if pe32 { 0x10b } else { 0x20b });
    b[o + 2] = spec.linker_version.0;
    b[o + 3] = spec.linker_version.1;
    put32(&mut b, o + 8, raw_size as u32); // SizeOfInitializedData
    let image_base: u64 = if spec.dll {
        0x1_8000_0000
    } else {
        0x1_4000_0000
    };
    let w = if pe32 {
        put32(&mut b, o + 28, image_base as u32);
        o + 32
    } else {
        put64(&mut b, o + 24, image_base);
        o + 32
    };
    put32(&mut b, w, 0x1000); // SectionAlignment
    put32(&mut b, w + 4, FILE_ALIGN as u32);
    put16(&mut b, w + 8, 6); // OS version
    put16(&mut b, w + 16, 6); // subsystem version
    let size_of_image = SECT_RVA + (sect.len() as u32).div_ceil(0x1000) * 0x1000;
    put32(&mut b, w + 24, size_of_image);
    put32(&mut b, w + 28, FILE_ALIGN as u32); // SizeOfHeaders
    put16(&mut b, w + 36, 3); // console
    put16(&mut b, w + 38, 0x8160);
    let (sizes, nrva) = if pe32 {
        (w + 40, w + 40 + 20)
    } else {
        (w + 40, w + 40 + 36)
    };
    let _ = sizes;
    put32(&mut b, nrva, 16);
    let dd = nrva + 4;
    if n > 0 {
        put32(&mut b, dd + 8, rva(imp_dir));
        put32(&mut b, dd + 12, ((n + 1) * 20) as u32);
    }
    if m > 0 {
        put32(&mut b, dd + 13 * 8, rva(delay_dir));
        put32(&mut b, dd + 13 * 8 + 4, ((m + 1) * 32) as u32);
    }
    let s = o + opt_size;
    b[s..s + 6].copy_from_slice(b".rdata");
    put32(&mut b, s + 8, sect.len() as u32);
    put32(&mut b, s + 12, SECT_RVA);
    put32(&mut b, s + 16, raw_size as u32);
    put32(&mut b, s + 20, FILE_ALIGN as u32);
    put32(&mut b, s + 36, 0x4000_0040);
    sect.resize(raw_size, 0);
    b.extend_from_slice(&sect);
    b
}

/// An ELF shared object or executable to write (64-bit little-endian).
#[derive(Debug, Clone, Default)]
pub struct ElfSpec {
    /// e_machine (62 x86-64, 183 aarch64, 224 AMDGPU).
    pub machine: u16,
    /// Adds PT_INTERP (an executable).
    pub executable: bool,
    /// DT_NEEDED entries.
    pub needed: Vec<String>,
    /// DT_SONAME.
    pub soname: Option<String>,
    /// DT_RPATH (joined with `:`).
    pub rpath: Vec<String>,
    /// DT_RUNPATH (joined with `:`).
    pub runpath: Vec<String>,
}

/// Writes an ELF64 LE file with a PT_LOAD covering it, PT_DYNAMIC and optionally PT_INTERP.
pub fn elf(spec: &ElfSpec) -> Vec<u8> {
    let mut strtab = vec![0u8];
    let mut add = |s: &str| {
        let at = strtab.len() as u64;
        strtab.extend_from_slice(s.as_bytes());
        strtab.push(0);
        at
    };
    let mut dyns: Vec<(u64, u64)> = Vec::new();
    for n in &spec.needed {
        dyns.push((1, add(n)));
    }
    if let Some(s) = &spec.soname {
        dyns.push((14, add(s)));
    }
    if !spec.rpath.is_empty() {
        dyns.push((15, add(&spec.rpath.join(":"))));
    }
    if !spec.runpath.is_empty() {
        dyns.push((29, add(&spec.runpath.join(":"))));
    }
    let interp = b"/lib64/ld-linux-x86-64.so.2\0";
    let nph = if spec.executable { 3 } else { 2 };
    let ph_off = 64;
    let interp_off = ph_off + nph * 56;
    let str_off = interp_off + if spec.executable { interp.len() } else { 0 };
    let dyn_off = (str_off + strtab.len()).div_ceil(8) * 8;
    dyns.push((5, str_off as u64)); // DT_STRTAB (vaddr == offset)
    dyns.push((10, strtab.len() as u64)); // DT_STRSZ
    dyns.push((0, 0));
    let total = dyn_off + dyns.len() * 16;
    let mut b = vec![0u8; total];
    b[..4].copy_from_slice(b"\x7fELF");
    b[4] = 2; // 64-bit
    b[5] = 1; // little-endian
    b[6] = 1;
    put16(&mut b, 16, 3); // ET_DYN
    put16(&mut b, 18, spec.machine);
    put32(&mut b, 20, 1);
    put64(&mut b, 32, ph_off as u64);
    put16(&mut b, 52, 64);
    put16(&mut b, 54, 56);
    put16(&mut b, 56, nph as u16);
    put16(&mut b, 58, 64);
    let ph = |i: usize, kind: u32, off: usize, size: usize, b: &mut Vec<u8>| {
        let p = ph_off + i * 56;
        put32(b, p, kind);
        put32(b, p + 4, 4);
        put64(b, p + 8, off as u64);
        put64(b, p + 16, off as u64);
        put64(b, p + 24, off as u64);
        put64(b, p + 32, size as u64);
        put64(b, p + 40, size as u64);
        put64(b, p + 48, 8);
    };
    ph(0, 1, 0, total, &mut b); // PT_LOAD
    ph(1, 2, dyn_off, dyns.len() * 16, &mut b); // PT_DYNAMIC
    if spec.executable {
        ph(2, 3, interp_off, interp.len(), &mut b); // PT_INTERP
        b[interp_off..interp_off + interp.len()].copy_from_slice(interp);
    }
    b[str_off..str_off + strtab.len()].copy_from_slice(&strtab);
    for (i, (tag, val)) in dyns.iter().enumerate() {
        put64(&mut b, dyn_off + i * 16, *tag);
        put64(&mut b, dyn_off + i * 16 + 8, *val);
    }
    b
}
