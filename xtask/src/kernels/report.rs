//! `cargo xtask kernels report`: per-arch file counts and sizes of each kernel library
//! folder, the arch-independent share, and which arches have a lazy index (GEMM coverage).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::classify::{
    arch_order, classify, lazy_index_arch, ArchClass, ArchToken, ClassifyError, TokenKind,
    INDEPENDENT_LABEL,
};
use super::layout::{slash_path, LibraryFiles, LibraryKind};

/// Size and coverage of every kernel library folder under one root.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CoverageReport {
    /// The root that was scanned.
    pub root: PathBuf,
    /// One entry per library folder found.
    pub libraries: Vec<LibraryReport>,
}

/// Size and coverage of one library folder.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LibraryReport {
    /// Which library.
    pub kind: LibraryKind,
    /// The folder relative to the root.
    pub dir: String,
    /// Files in the folder.
    pub files: usize,
    /// Bytes in the folder.
    pub bytes: u64,
    /// One row per arch label (features folded: `gfx90a` holds `gfx90a-xnack±`), sorted
    /// by arch, then multi-arch and family rows, then the arch-independent row last.
    pub rows: Vec<ArchRow>,
    /// Arches with a `TensileLibrary_lazy_<gfx>.dat[.zlib]` (the ones GEMM can start on).
    pub lazy_index_arches: Vec<String>,
}

/// One row of the per-arch table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArchRow {
    /// `gfx1100`, `gfx11` (family file), `gfx1100+gfx1101`, or `arch-independent`.
    pub arch: String,
    /// Files in this row.
    pub files: usize,
    /// Bytes in this row.
    pub bytes: u64,
    /// Share of the folder's bytes, in percent.
    pub share_percent: f64,
    /// Whether this arch has a lazy index in this folder.
    pub lazy_index: bool,
}

/// Classifies every file of one library folder; all unknown tokens are reported at once.
pub fn classify_library(lib: &LibraryFiles) -> Result<Vec<ArchClass>, Vec<ClassifyError>> {
    let mut classes = Vec::with_capacity(lib.files.len());
    let mut errors = Vec::new();
    for file in &lib.files {
        match classify(&file.rel_path) {
            Ok(class) => classes.push(class),
            Err(mut err) => {
                err.path = slash_path(&lib.dir.join(&file.rel_path));
                errors.push(err);
            }
        }
    }
    if errors.is_empty() {
        Ok(classes)
    } else {
        Err(errors)
    }
}

/// The arch tokens that have a lazy index in a classified library folder.
pub fn lazy_index_tokens(lib: &LibraryFiles, classes: &[ArchClass]) -> Vec<ArchToken> {
    let mut tokens: Vec<ArchToken> = Vec::new();
    for (file, class) in lib.files.iter().zip(classes) {
        let is_lazy = file
            .rel_path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(lazy_index_arch)
            .is_some();
        if is_lazy {
            for owner in class.owners() {
                if !tokens.contains(owner) {
                    tokens.push(owner.clone());
                }
            }
        }
    }
    tokens.sort_by(|a, b| arch_order(a.base(), b.base()).then_with(|| a.cmp(b)));
    tokens
}

/// One error listing every unknown token (up to 20 lines), for callers that need one.
pub fn classify_errors(errors: Vec<ClassifyError>) -> anyhow::Error {
    let mut text = String::new();
    for err in errors.iter().take(20) {
        let _ = writeln!(text, "  {err}");
    }
    if errors.len() > 20 {
        let _ = writeln!(text, "  ... and {} more", errors.len() - 20);
    }
    anyhow::anyhow!(
        "{} kernel file(s) carry an unknown or malformed GPU arch token:\n{}",
        errors.len(),
        text.trim_end()
    )
}

impl CoverageReport {
    /// Builds the report from already listed library folders (pure).
    pub fn from_libraries(root: &Path, libraries: &[LibraryFiles]) -> anyhow::Result<Self> {
        let mut reports = Vec::new();
        let mut all_errors = Vec::new();
        for lib in libraries {
            match classify_library(lib) {
                Ok(classes) => reports.push(library_report(lib, &classes)),
                Err(errors) => all_errors.extend(errors),
            }
        }
        if !all_errors.is_empty() {
            return Err(classify_errors(all_errors));
        }
        Ok(CoverageReport {
            root: root.to_path_buf(),
            libraries: reports,
        })
    }

    /// Renders the tables people read (sizes in MB of 10^6 bytes, like the guide).
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "Kernel libraries under {}", self.root.display());
        for lib in &self.libraries {
            let _ = writeln!(
                out,
                "\n{} ({}): {} files, {}",
                lib.kind,
                lib.dir,
                lib.files,
                human_mb(lib.bytes)
            );
            let _ = writeln!(
                out,
                "  {:<20} {:>6} {:>12} {:>7}  lazy index",
                "arch", "files", "size", "share"
            );
            for row in &lib.rows {
                let processor =
                    ArchToken::parse(&row.arch).is_ok_and(|t| t.kind() == TokenKind::Processor);
                let lazy = if !processor {
                    "-"
                } else if row.lazy_index {
                    "yes"
                } else {
                    "NO"
                };
                let _ = writeln!(
                    out,
                    "  {:<20} {:>6} {:>12} {:>6.1}%  {}",
                    row.arch,
                    row.files,
                    human_mb(row.bytes),
                    row.share_percent,
                    lazy
                );
            }
            let _ = writeln!(
                out,
                "  GEMM coverage (lazy index): {}",
                lib.lazy_index_arches.join(" ")
            );
        }
        out
    }
}

fn library_report(lib: &LibraryFiles, classes: &[ArchClass]) -> LibraryReport {
    let bytes: u64 = lib.files.iter().map(|f| f.size).sum();
    let lazy = lazy_index_tokens(lib, classes);
    let lazy_bases: Vec<&str> = lazy.iter().map(ArchToken::base).collect();
    let mut groups: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    for (file, class) in lib.files.iter().zip(classes) {
        let entry = groups.entry(class.label()).or_default();
        entry.0 += 1;
        entry.1 += file.size;
    }
    let mut rows: Vec<ArchRow> = groups
        .into_iter()
        .map(|(arch, (files, row_bytes))| ArchRow {
            lazy_index: lazy_bases.contains(&arch.as_str()),
            share_percent: if bytes == 0 {
                0.0
            } else {
                row_bytes as f64 * 100.0 / bytes as f64
            },
            arch,
            files,
            bytes: row_bytes,
        })
        .collect();
    rows.sort_by(|a, b| row_order(&a.arch, &b.arch));
    let mut lazy_names: Vec<String> = lazy.iter().map(ToString::to_string).collect();
    lazy_names.dedup();
    LibraryReport {
        kind: lib.kind,
        dir: slash_path(&lib.dir),
        files: lib.files.len(),
        bytes,
        rows,
        lazy_index_arches: lazy_names,
    }
}

/// Table order of row labels: processors by arch, then family, generic and multi-arch
/// rows, then the arch-independent row.
pub fn row_order(a: &str, b: &str) -> std::cmp::Ordering {
    let rank = |label: &str| {
        if label == INDEPENDENT_LABEL {
            2
        } else if ArchToken::parse(label).is_ok_and(|t| t.kind() == TokenKind::Processor) {
            0
        } else {
            1
        }
    };
    rank(a).cmp(&rank(b)).then_with(|| arch_order(a, b))
}

/// `12.3 MB` (10^6 bytes), the unit of the published tables.
pub fn human_mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

/// Runs `kernels report`: scans `rocm_path` and prints the tables or JSON.
pub fn run(rocm_path: &Path, json: bool) -> anyhow::Result<()> {
    let libraries = super::layout::scan(rocm_path)?;
    let report = CoverageReport::from_libraries(rocm_path, &libraries)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.to_text());
    }
    Ok(())
}
