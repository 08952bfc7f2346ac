//! Where kernel library folders live in an SDK or package, and reading their file lists.
//!
//! Layouts: Windows HIP SDK `bin/rocblas/library`, `bin/hipblaslt/library`; AMD's Linux
//! `/opt/rocm/lib/rocblas/library`, `lib/hipblaslt/library`; Debian
//! `/usr/lib/<triplet>/rocblas/<version>/library`, `/usr/lib/<triplet>/hipblaslt/library`;
//! and our own package layout `rocblas/library`, `hipblaslt/library`
//! (`docs/architecture.md` section 5).

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// A GEMM kernel library that ships a `library/` folder of per-arch kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LibraryKind {
    /// rocBLAS (`rocblas/library`).
    #[serde(alias = "rocBLAS")]
    Rocblas,
    /// hipBLASLt (`hipblaslt/library`).
    #[serde(alias = "hipBLASLt")]
    Hipblaslt,
}

impl LibraryKind {
    /// Both kinds, in table order.
    pub const ALL: [LibraryKind; 2] = [LibraryKind::Rocblas, LibraryKind::Hipblaslt];

    /// The folder name (`rocblas`, `hipblaslt`).
    pub fn dir_name(self) -> &'static str {
        match self {
            LibraryKind::Rocblas => "rocblas",
            LibraryKind::Hipblaslt => "hipblaslt",
        }
    }

    /// Where this library's kernels go in a package (`rocblas/library`).
    pub fn package_dir(self) -> PathBuf {
        Path::new(self.dir_name()).join("library")
    }
}

impl fmt::Display for LibraryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LibraryKind::Rocblas => "rocBLAS",
            LibraryKind::Hipblaslt => "hipBLASLt",
        })
    }
}

/// One file of a library folder: path relative to the `library` folder, and size.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct SourceFile {
    /// Path relative to the library folder (`gfx942/TensileLibrary_lazy_gfx942.dat.zlib`).
    pub rel_path: PathBuf,
    /// Size in bytes.
    pub size: u64,
}

/// The files of one library folder found under a root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LibraryFiles {
    /// Which library.
    pub kind: LibraryKind,
    /// The library folder relative to the root (`bin/rocblas/library`).
    pub dir: PathBuf,
    /// Its files, sorted by path.
    pub files: Vec<SourceFile>,
}

/// Library folders under `root`, in a fixed order, as paths relative to `root`.
pub fn find_library_dirs(root: &Path) -> anyhow::Result<Vec<(LibraryKind, PathBuf)>> {
    let mut found = Vec::new();
    for kind in LibraryKind::ALL {
        for prefix in ["bin", "lib", ""] {
            let rel = Path::new(prefix).join(kind.dir_name()).join("library");
            if root.join(&rel).is_dir() {
                found.push((kind, rel));
            }
        }
    }
    // Debian: lib/<triplet>/rocblas/<version>/library and lib/<triplet>/hipblaslt/library.
    let lib = root.join("lib");
    if lib.is_dir() {
        for triplet in sorted_subdirs(&lib)? {
            if !triplet.ends_with("-linux-gnu") {
                continue;
            }
            let base = Path::new("lib").join(&triplet);
            for kind in LibraryKind::ALL {
                let direct = base.join(kind.dir_name()).join("library");
                if root.join(&direct).is_dir() {
                    found.push((kind, direct));
                }
                let versions = root.join(&base).join(kind.dir_name());
                if versions.is_dir() {
                    for version in sorted_subdirs(&versions)? {
                        let rel = base.join(kind.dir_name()).join(version).join("library");
                        if root.join(&rel).is_dir() {
                            found.push((kind, rel));
                        }
                    }
                }
            }
        }
    }
    found.sort();
    Ok(found)
}

fn sorted_subdirs(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        if entry.path().is_dir() {
            if let Some(name) = entry.file_name().to_str() {
                names.push(name.to_string());
            }
        }
    }
    names.sort();
    Ok(names)
}

/// Finds and lists every library folder under `root`; fails when there is none.
pub fn scan(root: &Path) -> anyhow::Result<Vec<LibraryFiles>> {
    if !root.is_dir() {
        anyhow::bail!(
            "{} is not a folder (expected a ROCm/HIP SDK root)",
            root.display()
        );
    }
    let dirs = find_library_dirs(root)?;
    if dirs.is_empty() {
        anyhow::bail!(
            "no rocBLAS or hipBLASLt library folder under {} (looked for bin/, lib/, \
             lib/<triplet>/rocblas/<version>/ and ./ followed by rocblas/library or \
             hipblaslt/library)",
            root.display()
        );
    }
    dirs.into_iter()
        .map(|(kind, dir)| {
            let files = list_files(&root.join(&dir))?;
            Ok(LibraryFiles { kind, dir, files })
        })
        .collect()
}

/// Every regular file (or link to one) under `dir`, relative to it, sorted.
pub fn list_files(dir: &Path) -> anyhow::Result<Vec<SourceFile>> {
    let mut files = Vec::new();
    for entry in walkdir::WalkDir::new(dir)
        .follow_links(true)
        .sort_by_file_name()
    {
        let entry = entry.with_context(|| format!("walking {}", dir.display()))?;
        if !entry.file_type().is_file() {
            continue;
        }
        let size = entry
            .metadata()
            .with_context(|| format!("reading size of {}", entry.path().display()))?
            .len();
        let rel_path = entry
            .path()
            .strip_prefix(dir)
            .with_context(|| format!("{} is outside {}", entry.path().display(), dir.display()))?
            .to_path_buf();
        files.push(SourceFile { rel_path, size });
    }
    files.sort();
    Ok(files)
}

/// A path with `/` separators, for stable output on every OS.
pub fn slash_path(path: &Path) -> String {
    path.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}
