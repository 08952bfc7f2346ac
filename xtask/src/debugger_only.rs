//! What a packaged binary carries that only a debugger or profiler reads: its DWARF
//! sections and its symbol table. `packaging/tracks.toml` has `dist` stage some files
//! without them (`crt.strip_debug`: the MinGW runtime, 23.7 MB of `libstdc++-6.dll`;
//! `strip_executables`: about 4.5 MB per MinGW-built `.exe`), and `verify-package` reads
//! them back from the zip to check that it did.

use anyhow::{bail, Context, Result};

/// The debugger-only parts of one ELF or PE file.
#[derive(Debug, PartialEq, Eq)]
pub struct DebuggerOnly {
    /// Names of the `.debug*` sections.
    pub debug_sections: Vec<String>,
    /// Entries in the symbol table: ELF `.symtab` (not the dynamic symbols a loader
    /// needs), PE's COFF symbol table (not the export table).
    pub symbols: usize,
}

impl DebuggerOnly {
    /// Reads the ELF or PE image `bytes`; `name` is only for the error.
    pub fn parse(bytes: &[u8], name: &str) -> Result<DebuggerOnly> {
        let object = goblin::Object::parse(bytes)
            .with_context(|| format!("parsing {name} as an ELF or PE file"))?;
        let (sections, symbols): (Vec<String>, usize) = match object {
            goblin::Object::PE(pe) => (
                pe.sections
                    .iter()
                    .filter_map(|s| {
                        s.real_name
                            .clone()
                            .or_else(|| s.name().ok().map(str::to_string))
                    })
                    .collect(),
                pe.header.coff_header.number_of_symbol_table as usize,
            ),
            goblin::Object::Elf(elf) => (
                elf.section_headers
                    .iter()
                    .filter_map(|h| elf.shdr_strtab.get_at(h.sh_name).map(str::to_string))
                    .collect(),
                elf.syms.len(),
            ),
            _ => bail!("{name} is neither an ELF nor a PE file"),
        };
        Ok(DebuggerOnly {
            debug_sections: sections
                .into_iter()
                .filter(|n| n.starts_with(".debug"))
                .collect(),
            symbols,
        })
    }

    /// Reads the ELF or PE file at `path`.
    pub fn of(path: &std::path::Path) -> Result<DebuggerOnly> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        DebuggerOnly::parse(&bytes, &path.display().to_string())
    }
}

/// Real binaries for the tests that read them: a tiny C program built with DWARF, and
/// binutils' `strip`.
#[cfg(test)]
pub(crate) mod test_programs {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// Compiles a tiny C program with `compiler` and DWARF into `dir`.
    pub(crate) fn tiny_program(compiler: &str, dir: &Path, name: &str) -> PathBuf {
        let src = dir.join("tiny.c");
        std::fs::write(
            &src,
            "int answer(void) { return 42; }\nint main(void) { return answer() - 42; }\n",
        )
        .unwrap();
        let out = dir.join(name);
        let status = Command::new(compiler)
            .arg("-g")
            .arg("-o")
            .arg(&out)
            .arg(&src)
            .status()
            .unwrap_or_else(|e| {
                panic!("{compiler} is part of the test set-up (.ci/run installs it): {e}")
            });
        assert!(status.success(), "{compiler} failed");
        out
    }

    /// Runs `tool flag exe` (`x86_64-w64-mingw32-strip --strip-all tiny.exe`).
    pub(crate) fn strip(tool: &str, flag: &str, exe: &Path) {
        let status = Command::new(tool)
            .arg(flag)
            .arg(exe)
            .status()
            .unwrap_or_else(|e| panic!("{tool} is part of the test set-up: {e}"));
        assert!(status.success(), "{tool} {flag} failed");
    }
}

#[cfg(test)]
mod tests {
    use super::test_programs::{strip, tiny_program};
    use super::*;

    #[test]
    fn debug_sections_and_symbols_are_found_in_elf_and_pe_and_gone_after_strip() {
        for (compiler, tool, name) in [
            ("cc", "strip", "tiny"),
            (
                "x86_64-w64-mingw32-gcc",
                "x86_64-w64-mingw32-strip",
                "tiny.exe",
            ),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let exe = tiny_program(compiler, dir.path(), name);
            let full = DebuggerOnly::of(&exe).unwrap();
            assert!(
                full.debug_sections.iter().any(|s| s == ".debug_info"),
                "{compiler}: {full:?}"
            );
            assert!(full.symbols > 0, "{compiler}: {full:?}");
            strip(tool, "--strip-debug", &exe);
            let no_debug = DebuggerOnly::of(&exe).unwrap();
            assert!(
                no_debug.debug_sections.is_empty(),
                "{compiler}: {no_debug:?}"
            );
            assert!(
                no_debug.symbols > 0,
                "{compiler}: --strip-debug keeps the symbol table: {no_debug:?}"
            );
            strip(tool, "--strip-all", &exe);
            assert_eq!(
                DebuggerOnly::of(&exe).unwrap(),
                DebuggerOnly {
                    debug_sections: vec![],
                    symbols: 0
                },
                "{compiler}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "not a binary").unwrap();
        let e = DebuggerOnly::of(&text).unwrap_err();
        assert!(format!("{e:#}").contains("notes.txt"), "{e:#}");
    }
}
