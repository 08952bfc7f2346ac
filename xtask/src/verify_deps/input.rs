//! The thin layer that reads things: files, package directories and `.zip` files (read in
//! memory, never unpacked), turned into a [`Package`] of parsed binaries.
//!
//! Every file is first sniffed by its first bytes; only PE/ELF/Mach-O files are read
//! further, and of those only the ranges the parser asks for (headers, the sections that
//! hold the import tables, the dynamic string table), so a tree of large kernel files
//! costs one small read per file.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

use super::binary::{self, BinaryInfo, Image, ParseError, Sniff, SNIFF_LEN};

/// First read of a binary: enough for the headers and section table of any real PE/ELF.
const HEAD_LEN: u64 = 64 << 10;
/// Range loads tried before reading the whole file.
const MAX_LOADS: usize = 16;

/// What a file in a package is, for the dependency check.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case", tag = "type", content = "value")]
pub enum Content {
    /// A host binary and its dependency facts.
    Binary(BinaryInfo),
    /// Looks like a binary (by magic) but cannot be parsed: the error.
    Corrupt(String),
    /// An AMDGPU code object (kernel `.co`/`.hsaco`), not a host dependency.
    GpuCode,
    /// A symbolic link to another package file (package-relative path).
    Link(String),
    /// Anything else; skipped.
    Other,
}

/// One file of a package.
#[derive(Debug, Clone, Serialize)]
pub struct PackageFile {
    /// Path inside the package, `/`-separated (the zip's single root folder removed).
    pub path: String,
    /// Where it was read from (for messages and the `debug_nonredist` rule).
    pub origin: String,
    /// What it is.
    pub content: Content,
}

impl PackageFile {
    /// The file name (last path component).
    pub fn name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }

    /// The folder inside the package (`""` for the root).
    pub fn dir(&self) -> &str {
        self.path.rsplit_once('/').map(|(d, _)| d).unwrap_or("")
    }

    /// The parsed binary, if it is one.
    pub fn binary(&self) -> Option<&BinaryInfo> {
        match &self.content {
            Content::Binary(b) => Some(b),
            _ => None,
        }
    }
}

/// Read accounting: the "headers, not whole files" claim, measured.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ReadStats {
    /// Files looked at.
    pub files: u64,
    /// Their total size.
    pub bytes_total: u64,
    /// Bytes actually read (or decompressed, for zips).
    pub bytes_read: u64,
}

/// A set of files checked together: a package directory, a zip, or the loose files
/// named on the command line.
#[derive(Debug, Clone, Serialize)]
pub struct Package {
    /// How the user named it.
    pub name: String,
    /// Its files, sorted by path.
    pub files: Vec<PackageFile>,
    /// What reading them cost.
    pub stats: ReadStats,
}

/// Reads every input: each directory and each zip is one package; loose files together
/// form one more, named by their file names.
pub fn read_inputs(inputs: &[PathBuf]) -> anyhow::Result<Vec<Package>> {
    let mut packages = Vec::new();
    let mut loose = Package {
        name: "files".into(),
        files: Vec::new(),
        stats: ReadStats::default(),
    };
    for input in inputs {
        let meta = std::fs::metadata(input)
            .with_context(|| format!("cannot read input {}", input.display()))?;
        if meta.is_dir() {
            packages.push(read_dir(input)?);
        } else if input
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("zip"))
        {
            packages.push(read_zip(input)?);
        } else {
            let name = input
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let (content, read) = read_file(input)?;
            loose.stats.files += 1;
            loose.stats.bytes_total += meta.len();
            loose.stats.bytes_read += read;
            loose.files.push(PackageFile {
                path: name,
                origin: input.display().to_string(),
                content,
            });
        }
    }
    if !loose.files.is_empty() {
        loose.files.sort_by(|a, b| a.path.cmp(&b.path));
        packages.push(loose);
    }
    Ok(packages)
}

/// Reads a package directory (symbolic links inside it are kept as links).
pub fn read_dir(root: &Path) -> anyhow::Result<Package> {
    let mut pkg = Package {
        name: root.display().to_string(),
        files: Vec::new(),
        stats: ReadStats::default(),
    };
    for entry in walkdir::WalkDir::new(root)
        .follow_links(false)
        .sort_by_file_name()
    {
        let entry = entry.with_context(|| format!("walking {}", root.display()))?;
        let rel = entry
            .path()
            .strip_prefix(root)
            .expect("walkdir yields paths under its root");
        let rel = rel_string(rel);
        let ft = entry.file_type();
        if ft.is_dir() {
            continue;
        }
        let content = if ft.is_symlink() {
            let target = std::fs::read_link(entry.path())
                .with_context(|| format!("reading link {}", entry.path().display()))?;
            let parent = rel.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
            match normalize(parent, &target.to_string_lossy()) {
                Some(t) => Content::Link(t),
                None => Content::Other,
            }
        } else {
            let len = entry.metadata().map(|m| m.len()).unwrap_or(0);
            let (content, read) = read_file(entry.path())?;
            pkg.stats.bytes_total += len;
            pkg.stats.bytes_read += read;
            content
        };
        pkg.stats.files += 1;
        pkg.files.push(PackageFile {
            path: rel,
            origin: entry.path().display().to_string(),
            content,
        });
    }
    Ok(pkg)
}

fn rel_string(rel: &Path) -> String {
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// Resolves `target` (a link target or an RPATH entry with `$ORIGIN` already expanded)
/// against package folder `base`; `None` if it is absolute or leaves the package.
pub fn normalize(base: &str, target: &str) -> Option<String> {
    if target.starts_with('/') || Path::new(target).is_absolute() {
        return None;
    }
    let mut parts: Vec<&str> = base.split('/').filter(|p| !p.is_empty()).collect();
    for part in target.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// Reads one file from disk: its content class and the bytes read.
pub fn read_file(path: &Path) -> anyhow::Result<(Content, u64)> {
    let mut file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let len = file
        .metadata()
        .with_context(|| format!("cannot stat {}", path.display()))?
        .len();
    let mut head = vec![0u8; SNIFF_LEN.min(len as usize)];
    file.read_exact(&mut head)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let kind = binary::sniff(&head);
    let mut read = head.len() as u64;
    let content = match kind {
        Sniff::Other => Content::Other,
        Sniff::GpuCode => Content::GpuCode,
        Sniff::MachO => {
            let bytes = read_range(&mut file, 0, len)
                .with_context(|| format!("cannot read {}", path.display()))?;
            read += len;
            classify(binary::parse(&bytes))
        }
        Sniff::Pe | Sniff::Elf => {
            let (result, n) = parse_file(&mut file, len)
                .with_context(|| format!("cannot read {}", path.display()))?;
            read += n;
            classify(result)
        }
    };
    Ok((content, read))
}

fn classify(result: Result<BinaryInfo, ParseError>) -> Content {
    match result {
        Ok(info) => Content::Binary(info),
        Err(e) => Content::Corrupt(e.to_string()),
    }
}

fn read_range(file: &mut File, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
    file.seek(SeekFrom::Start(offset))?;
    let mut buf = vec![0u8; len as usize];
    file.read_exact(&mut buf)?;
    Ok(buf)
}

/// Parses a PE/ELF file reading only the ranges the parser asks for; falls back to the
/// whole file when the parser keeps asking or fails on a partial image.
fn parse_file(file: &mut File, len: u64) -> std::io::Result<(Result<BinaryInfo, ParseError>, u64)> {
    parse_incremental(len, |offset, n| read_range(file, offset, n))
}

/// The loading loop of [`read_file`], over any reader of `(offset, len)` ranges of a
/// `len`-byte file: the first 64 KiB, then each range the parser asks for, then (after
/// 16 asks or an error on a partial image) the whole file. Returns the parse result and
/// the bytes read. Public for the fuzz target.
pub fn parse_incremental(
    len: u64,
    mut read: impl FnMut(u64, u64) -> std::io::Result<Vec<u8>>,
) -> std::io::Result<(Result<BinaryInfo, ParseError>, u64)> {
    let mut image = Image::sparse(len);
    let head = len.min(HEAD_LEN);
    image.insert(0, read(0, head)?);
    let mut total = head;
    for _ in 0..MAX_LOADS {
        match binary::parse_image(&image) {
            Err(ParseError::NotLoaded(r)) => {
                let r_len = r.end.saturating_sub(r.start);
                image.insert(r.start, read(r.start, r_len)?);
                total += r_len;
            }
            Err(_) if !image.is_full() => break,
            other => return Ok((other, total)),
        }
    }
    let bytes = read(0, len)?;
    Ok((binary::parse(&bytes), total + len))
}

/// Reads a `.zip` in memory: entries are sniffed from their first decompressed bytes and
/// only binaries are decompressed whole. A single top-level folder is removed from paths.
pub fn read_zip(path: &Path) -> anyhow::Result<Package> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .with_context(|| format!("{} is not a readable zip", path.display()))?;
    let mut pkg = Package {
        name: path.display().to_string(),
        files: Vec::new(),
        stats: ReadStats::default(),
    };
    let names: Vec<String> = zip.file_names().map(str::to_string).collect();
    let root = common_root(&names);
    for i in 0..zip.len() {
        let mut entry = zip
            .by_index(i)
            .with_context(|| format!("{}: entry {i}", path.display()))?;
        if entry.is_dir() {
            continue;
        }
        let Some(enclosed) = entry.enclosed_name() else {
            anyhow::bail!(
                "{}: entry '{}' has an unsafe path",
                path.display(),
                entry.name()
            );
        };
        if enclosed
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
        {
            anyhow::bail!(
                "{}: entry '{}' has an unsafe path",
                path.display(),
                entry.name()
            );
        }
        let full = rel_string(&enclosed);
        let rel = match &root {
            Some(r) => full[r.len() + 1..].to_string(),
            None => full.clone(),
        };
        let size = entry.size();
        let ctx = || format!("{}: reading entry {}", path.display(), full);
        let mut head = Vec::with_capacity(SNIFF_LEN);
        (&mut entry)
            .take(SNIFF_LEN as u64)
            .read_to_end(&mut head)
            .with_context(ctx)?;
        let mut read = head.len() as u64;
        let content = match binary::sniff(&head) {
            Sniff::Other => Content::Other,
            Sniff::GpuCode => Content::GpuCode,
            Sniff::Pe | Sniff::Elf | Sniff::MachO => {
                let mut bytes = head;
                entry.read_to_end(&mut bytes).with_context(ctx)?;
                read = bytes.len() as u64;
                classify(binary::parse(&bytes))
            }
        };
        pkg.stats.files += 1;
        pkg.stats.bytes_total += size;
        pkg.stats.bytes_read += read;
        pkg.files.push(PackageFile {
            path: rel,
            origin: format!("{}!{full}", path.display()),
            content,
        });
    }
    pkg.files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(pkg)
}

/// The single top-level folder shared by every entry, if there is one.
fn common_root(names: &[String]) -> Option<String> {
    let mut root: Option<&str> = None;
    for n in names {
        let (first, rest) = n.split_once('/')?;
        if rest.is_empty() && !n.ends_with('/') {
            return None;
        }
        match root {
            None => root = Some(first),
            Some(r) if r == first => {}
            Some(_) => return None,
        }
    }
    root.map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_stays_inside_the_package() {
        assert_eq!(normalize("bin", "../lib").as_deref(), Some("lib"));
        assert_eq!(normalize("", "lib/./x").as_deref(), Some("lib/x"));
        assert_eq!(normalize("", "../x"), None);
        assert_eq!(normalize("bin", "/opt/rocm/lib"), None);
    }

    #[test]
    fn zip_root_is_the_shared_first_folder() {
        let n = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            common_root(&n(&["p/", "p/a.dll", "p/x/y"])).as_deref(),
            Some("p")
        );
        assert_eq!(common_root(&n(&["p/a.dll", "q/b.dll"])), None);
        assert_eq!(common_root(&n(&["a.dll"])), None);
    }
}
