//! Real kernel folders from Debian's packages, for `cargo xtask test`: the pinned
//! `.deb`s of `packaging/sdk/debian.toml` (`[[kernel_debs]]`, by version and SHA-256) are
//! downloaded into the cache, their `library/` folders laid out from `dpkg-deb`'s
//! tarball as sparse placeholders (names and sizes only), and checked against the
//! recorded listings (`xtask/tests/fixtures/rocm-library-listings/`):
//! same names and sizes, the same per-arch report, the filter's kept/dropped split for
//! the pin's targets, and the coverage verdict per target.
//!
//! The comparisons are pure functions ([`listing_library`], [`listing_differences`],
//! [`coverage_verdicts`]); [`check`] is the thin layer that fetches and extracts.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};

use super::filter::{self, CoverageNotes, FilterPlan};
use super::layout::{self, LibraryFiles, LibraryKind, SourceFile};
use super::report::CoverageReport;
use crate::assets::sha256_file;
use crate::project::project_root;

/// One pinned Debian package holding a kernel `library/` folder.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KernelDeb {
    /// Binary package (`librocblas4`).
    pub package: String,
    /// Exact version (`6.4.4-4`).
    pub version: String,
    /// Path below the mirror (`pool/main/r/rocblas/librocblas4_6.4.4-4_amd64.deb`).
    pub pool_path: String,
    /// SHA-256 of the `.deb` (from the suite's Packages index).
    pub sha256: String,
    /// Which library its folder holds.
    pub library: LibraryKind,
    /// The recorded listing it must match, in `xtask/tests/fixtures/rocm-library-listings/`.
    pub listing: String,
    /// Targets to filter for and judge coverage of.
    pub targets: Vec<String>,
    /// The targets this library has no lazy index for (the expected verdict).
    pub uncovered: Vec<String>,
}

/// The `[[kernel_debs]]` of packaging/sdk/debian.toml; the rest of that file is the
/// `sdk` verb's ([`crate::sdk::DebianSpec`]), which keeps these entries opaque.
#[derive(Debug, Deserialize)]
struct KernelPins {
    #[serde(default)]
    kernel_debs: Vec<KernelDeb>,
}

/// The pinned kernel packages of `path` (packaging/sdk/debian.toml).
pub fn pinned(path: &Path) -> Result<Vec<KernelDeb>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let pins: KernelPins = toml::from_str(&text)
        .with_context(|| format!("parsing the kernel_debs of {}", path.display()))?;
    Ok(pins.kernel_debs)
}

/// The pinned Debian kernel packages, downloaded and extracted into the cache once and
/// checked against the recorded listings (`cargo xtask kernels check-debian`, and part
/// of `cargo xtask test`).
pub fn check_pinned() -> Result<()> {
    let started = Instant::now();
    let path = crate::sdk::DebianSpec::default_path();
    let debs = pinned(&path)?;
    let mirror = crate::sdk::host_mirror().context(
        "no Debian mirror in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list",
    )?;
    let cache = crate::project::target_dir().join("cache/debian-kernels");
    ensure!(
        !debs.is_empty(),
        "{} pins no kernel packages ([[kernel_debs]])",
        path.display()
    );
    for deb in &debs {
        let c = check(deb, &mirror, &cache)
            .with_context(|| format!("checking {} {}", deb.package, deb.version))?;
        eprintln!("kernels: {}", c.line());
    }
    eprintln!(
        "kernels: real kernel folders match their listings ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

impl KernelDeb {
    /// The `.deb` file name.
    pub fn file_name(&self) -> &str {
        self.pool_path.rsplit('/').next().unwrap_or(&self.pool_path)
    }
}

/// The library folder a listing describes (pure): `name<TAB>size` lines under a header.
pub fn listing_library(kind: LibraryKind, dir: &Path, listing: &str) -> Result<LibraryFiles> {
    let mut files = Vec::new();
    for (i, line) in listing.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let (name, size) = line
            .split_once('\t')
            .with_context(|| format!("listing line {}: expected NAME<TAB>SIZE", i + 1))?;
        let size = size
            .trim()
            .parse()
            .with_context(|| format!("listing line {}: size '{size}'", i + 1))?;
        files.push(SourceFile {
            rel_path: PathBuf::from(name),
            size,
        });
    }
    files.sort();
    Ok(LibraryFiles {
        kind,
        dir: dir.to_path_buf(),
        files,
    })
}

/// How a real folder differs from its listing (pure; empty when they are the same).
pub fn listing_differences(real: &LibraryFiles, listed: &LibraryFiles) -> Vec<String> {
    let mut out = Vec::new();
    let find = |set: &LibraryFiles, p: &Path| set.files.iter().find(|f| f.rel_path == p).cloned();
    for f in &listed.files {
        match find(real, &f.rel_path) {
            None => out.push(format!(
                "{}: listed, not in the package",
                f.rel_path.display()
            )),
            Some(r) if r.size != f.size => out.push(format!(
                "{}: {} bytes in the package, {} listed",
                f.rel_path.display(),
                r.size,
                f.size
            )),
            Some(_) => {}
        }
    }
    for f in &real.files {
        if find(listed, &f.rel_path).is_none() {
            out.push(format!(
                "{}: in the package, not listed",
                f.rel_path.display()
            ));
        }
    }
    out
}

/// The targets of `plan` with no lazy index (pure), in target order.
pub fn coverage_verdicts(plan: &FilterPlan) -> Vec<String> {
    let mut v: Vec<String> = plan.uncovered.iter().map(|u| u.target.clone()).collect();
    v.dedup();
    v
}

/// What [`check`] measured for one package.
#[derive(Debug, Clone, Serialize)]
pub struct DebCheck {
    /// `librocblas4 6.4.4-4`.
    pub package: String,
    /// `.deb` size.
    pub deb_bytes: u64,
    /// Seconds spent downloading (0 when cached).
    pub download_s: f64,
    /// Seconds spent extracting (0 when cached).
    pub extract_s: f64,
    /// Files and bytes of the library folder.
    pub files: usize,
    /// Bytes of the library folder.
    pub bytes: u64,
    /// Kept for the targets: files, bytes.
    pub kept: (usize, u64),
    /// Dropped: files, bytes.
    pub dropped: (usize, u64),
    /// Targets without a lazy index.
    pub uncovered: Vec<String>,
}

impl DebCheck {
    /// One line for the test log.
    pub fn line(&self) -> String {
        format!(
            "{}: deb {:.1} MB (download {:.1} s, extract {:.1} s); library {} files {:.1} MB; kept {} files {:.1} MB, dropped {} files {:.1} MB; no GEMM kernels for: {}",
            self.package,
            self.deb_bytes as f64 / 1e6,
            self.download_s,
            self.extract_s,
            self.files,
            self.bytes as f64 / 1e6,
            self.kept.0,
            self.kept.1 as f64 / 1e6,
            self.dropped.0,
            self.dropped.1 as f64 / 1e6,
            if self.uncovered.is_empty() {
                "none".to_string()
            } else {
                self.uncovered.join(", ")
            }
        )
    }
}

/// Downloads `url` to `dest` through a `.part` file and keeps it only when its SHA-256 is
/// `sha256`; `pin_file` (the data file holding the pin) is named in the error.
pub(crate) fn download(url: &str, dest: &Path, sha256: &str, pin_file: &str) -> Result<()> {
    let part = dest.with_extension("deb.part");
    let status = Command::new("curl")
        .args(["-fsSL", "--retry", "3", "-o"])
        .arg(&part)
        .arg(url)
        .status()
        .context(
            "cannot run curl to download the pinned .deb; install it with `apt-get install curl`",
        )?;
    if !status.success() {
        let _ = std::fs::remove_file(&part);
        bail!("downloading {url} failed ({status})");
    }
    let got = sha256_file(&part)?;
    if got != sha256 {
        let _ = std::fs::remove_file(&part);
        bail!("{url}: SHA-256 is {got}, the pin says {sha256}; the mirror serves another file (update the pin in {pin_file} only after checking why)");
    }
    std::fs::rename(&part, dest).with_context(|| format!("renaming {}", part.display()))
}

/// Writes the regular files below a `library/` folder of a package's data tarball into
/// `dest` as sparse placeholders, and returns how many it wrote.
///
/// The checks read only names and sizes, and the package's SHA-256 already vouches for
/// the bodies; writing them would take 3.5 GB of disk (rocBLAS 6.4 alone is 2.9 GB),
/// more than a CI machine may have free. Everything outside `library/` (the 1 GB shared
/// library) is skipped, and entries that would land outside `dest` are refused.
pub fn extract_library_placeholders(tarball: impl std::io::Read, dest: &Path) -> Result<usize> {
    let mut archive = tar::Archive::new(tarball);
    let mut placed = 0;
    for entry in archive.entries().context("reading the package's tarball")? {
        let entry = entry.context("reading a tarball entry")?;
        let path = entry.path().context("a tarball entry's path")?.into_owned();
        let parts: Vec<&std::ffi::OsStr> = path
            .components()
            .filter(|c| !matches!(c, std::path::Component::CurDir))
            .map(|c| match c {
                std::path::Component::Normal(p) => Ok(p),
                _ => Err(anyhow::anyhow!(
                    "tarball entry {} leaves the extraction folder",
                    path.display()
                )),
            })
            .collect::<Result<_>>()?;
        let below_library = parts
            .iter()
            .position(|p| *p == "library")
            .is_some_and(|i| i + 1 < parts.len());
        if !below_library || !entry.header().entry_type().is_file() {
            continue;
        }
        let file: PathBuf = dest.join(parts.iter().collect::<PathBuf>());
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let size = entry.header().size().context("a tarball entry's size")?;
        std::fs::File::create(&file)
            .and_then(|f| f.set_len(size))
            .with_context(|| format!("writing {}", file.display()))?;
        placed += 1;
    }
    // Read the tarball's padding too, so that its writer is not cut off mid-stream.
    std::io::copy(&mut archive.into_inner(), &mut std::io::sink())
        .context("reading the end of the package's tarball")?;
    Ok(placed)
}

/// The `.deb` size recorded in an extraction marker (pure), when the marker is for the
/// package with `sha256`.
fn extracted_size(marker: &str, sha256: &str) -> Option<u64> {
    let (sha, bytes) = marker.trim().split_once(' ')?;
    (sha == sha256).then(|| bytes.parse().ok()).flatten()
}

/// Fetches (once), extracts (once) and checks one pinned package against its listing.
pub fn check(deb: &KernelDeb, mirror: &str, cache: &Path) -> Result<DebCheck> {
    let what = format!("{} {}", deb.package, deb.version);
    std::fs::create_dir_all(cache).with_context(|| format!("creating {}", cache.display()))?;
    let root = cache.join(format!("{}_{}", deb.package, deb.version));
    let marker = root.join(".extracted");
    let (mut download_s, mut extract_s) = (0.0, 0.0);
    // The marker holds the package's SHA-256 and size: once the placeholders are laid
    // out, the `.deb` itself is deleted (420 MB for both pins).
    let deb_bytes = match std::fs::read_to_string(&marker)
        .ok()
        .and_then(|m| extracted_size(&m, &deb.sha256))
    {
        Some(bytes) => bytes,
        None => {
            let deb_path = cache.join(deb.file_name());
            if !(deb_path.is_file() && sha256_file(&deb_path)? == deb.sha256) {
                let url = format!("{}/{}", mirror.trim_end_matches('/'), deb.pool_path);
                eprintln!("kernels: downloading {url}");
                let t = Instant::now();
                download(&url, &deb_path, &deb.sha256, "packaging/sdk/debian.toml")?;
                download_s = t.elapsed().as_secs_f64();
            }
            let t = Instant::now();
            let partial = cache.join(format!("{}_{}.partial", deb.package, deb.version));
            let _ = std::fs::remove_dir_all(&partial);
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(&partial)?;
            let mut dpkg = Command::new("dpkg-deb")
                .arg("--fsys-tarfile")
                .arg(&deb_path)
                .stdout(Stdio::piped())
                .spawn()
                .context("cannot run dpkg-deb; install it with `apt-get install dpkg`")?;
            let placed = extract_library_placeholders(
                dpkg.stdout.take().context("dpkg-deb's output")?,
                &partial,
            );
            let dpkg = dpkg.wait()?;
            let placed = placed.with_context(|| format!("reading {}", deb_path.display()))?;
            ensure!(
                dpkg.success(),
                "extracting {} failed (dpkg-deb {dpkg})",
                deb_path.display()
            );
            ensure!(
                placed > 0 && partial.join("usr").is_dir(),
                "{} holds no usr/**/library/ files",
                deb_path.display()
            );
            let bytes = std::fs::metadata(&deb_path)?.len();
            std::fs::write(
                partial.join(".extracted"),
                format!("{} {bytes}\n", deb.sha256),
            )?;
            std::fs::rename(&partial, &root)
                .with_context(|| format!("renaming {}", partial.display()))?;
            std::fs::remove_file(&deb_path)
                .with_context(|| format!("removing {}", deb_path.display()))?;
            extract_s = t.elapsed().as_secs_f64();
            bytes
        }
    };
    let usr = root.join("usr");
    let mut libs = layout::scan(&usr).with_context(|| format!("scanning {what}"))?;
    libs.retain(|l| l.kind == deb.library);
    ensure!(
        libs.len() == 1,
        "{what}: expected one {} folder, found {}",
        deb.library,
        libs.len()
    );
    let real = libs.remove(0);
    let listing_path = project_root()
        .join("xtask/tests/fixtures/rocm-library-listings")
        .join(&deb.listing);
    let listing = std::fs::read_to_string(&listing_path)
        .with_context(|| format!("reading {}", listing_path.display()))?;
    let listed = listing_library(deb.library, &real.dir, &listing)?;
    let diffs = listing_differences(&real, &listed);
    if !diffs.is_empty() {
        bail!(
            "{what}: the real folder {} differs from {} in {} file(s):\n  {}",
            real.dir.display(),
            deb.listing,
            diffs.len(),
            diffs
                .iter()
                .take(20)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n  ")
        );
    }
    let real_report = CoverageReport::from_libraries(&usr, std::slice::from_ref(&real))?;
    let listed_report = CoverageReport::from_libraries(&usr, std::slice::from_ref(&listed))?;
    ensure!(
        real_report.libraries == listed_report.libraries,
        "{what}: the per-arch report of the real folder differs from the listing's"
    );
    let targets = filter::parse_targets(&deb.targets)?;
    let plan = filter::plan_filter(
        &usr,
        std::slice::from_ref(&real),
        &targets,
        &CoverageNotes::default(),
    )?;
    let uncovered = coverage_verdicts(&plan);
    ensure!(
        uncovered == deb.uncovered,
        "{what}: targets without GEMM kernels are {uncovered:?}, the pin expects {:?}",
        deb.uncovered
    );
    let lib = &plan.libraries[0];
    let sum = |v: &[super::KernelFile]| (v.len(), v.iter().map(|f| f.size).sum::<u64>());
    ensure!(
        lib.kept.len() + lib.dropped.len() == real.files.len(),
        "{what}: the filter lost files"
    );
    Ok(DebCheck {
        package: what,
        deb_bytes,
        download_s,
        extract_s,
        files: real.files.len(),
        bytes: real.files.iter().map(|f| f.size).sum(),
        kept: sum(&lib.kept),
        dropped: sum(&lib.dropped),
        uncovered,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tarball shaped like a kernel package's data: `(path, size)` regular files.
    fn tarball(files: &[(&str, usize)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, size) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(*size as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            // Written by hand so that the escaping path below reaches the reader as is.
            h.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
            h.set_cksum();
            b.append(&h, &vec![7u8; *size][..]).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn placeholders_keep_names_and_sizes_of_library_files_only_and_take_no_blocks() {
        use std::os::unix::fs::MetadataExt;
        let big = 8 << 20;
        let t = tarball(&[
            ("./usr/lib/x86_64-linux-gnu/librocblas.so.4.4", 4096),
            (
                "./usr/lib/x86_64-linux-gnu/rocblas/4.4.1/library/Kernels.so-000-gfx1100.hsaco",
                big,
            ),
            (
                "./usr/lib/x86_64-linux-gnu/rocblas/4.4.1/library/TensileLibrary_lazy_gfx1100.dat",
                5,
            ),
            ("./usr/share/doc/librocblas4/library", 3),
        ]);
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(extract_library_placeholders(&t[..], dir.path()).unwrap(), 2);
        let lib = dir
            .path()
            .join("usr/lib/x86_64-linux-gnu/rocblas/4.4.1/library");
        let hsaco = std::fs::metadata(lib.join("Kernels.so-000-gfx1100.hsaco")).unwrap();
        assert_eq!(hsaco.len(), big as u64);
        assert!(
            hsaco.blocks() * 512 < big as u64 / 8,
            "the placeholder holds {} bytes of disk",
            hsaco.blocks() * 512
        );
        assert_eq!(
            std::fs::metadata(lib.join("TensileLibrary_lazy_gfx1100.dat"))
                .unwrap()
                .len(),
            5
        );
        assert!(!dir
            .path()
            .join("usr/lib/x86_64-linux-gnu/librocblas.so.4.4")
            .exists());
        assert!(!dir.path().join("usr/share").exists());
    }

    #[test]
    fn placeholders_refuse_entries_that_leave_the_folder() {
        let t = tarball(&[("./usr/../../library/x.hsaco", 1)]);
        let dir = tempfile::tempdir().unwrap();
        let err = extract_library_placeholders(&t[..], dir.path()).unwrap_err();
        assert!(
            format!("{err:#}").contains("leaves the extraction folder"),
            "{err:#}"
        );
    }

    #[test]
    fn the_marker_gives_the_size_only_for_its_own_package() {
        assert_eq!(extracted_size("abc 268000\n", "abc"), Some(268000));
        assert_eq!(extracted_size("abc 268000", "abd"), None);
        assert_eq!(extracted_size("abc", "abc"), None);
        assert_eq!(extracted_size("abc x", "abc"), None);
    }

    const LISTING: &str = "name\tsize_bytes\nKernels.so-000-gfx1100.hsaco\t10\nTensileLibrary_lazy_gfx1100.dat\t5\nTensileLibrary_Type_HH_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback.dat\t7\n";

    fn lib(files: &[(&str, u64)]) -> LibraryFiles {
        let mut files: Vec<SourceFile> = files
            .iter()
            .map(|(n, s)| SourceFile {
                rel_path: n.into(),
                size: *s,
            })
            .collect();
        files.sort();
        LibraryFiles {
            kind: LibraryKind::Rocblas,
            dir: "lib/rocblas/library".into(),
            files,
        }
    }

    #[test]
    fn a_listing_reads_into_sorted_files() {
        let l = listing_library(LibraryKind::Rocblas, Path::new("d"), LISTING).unwrap();
        assert_eq!(l.files.len(), 3);
        assert_eq!(
            l.files[0].rel_path,
            Path::new("Kernels.so-000-gfx1100.hsaco")
        );
        assert!(listing_library(LibraryKind::Rocblas, Path::new("d"), "h\nno-tab\n").is_err());
        assert!(listing_library(LibraryKind::Rocblas, Path::new("d"), "h\na\tx\n").is_err());
    }

    #[test]
    fn differences_name_missing_extra_and_resized_files() {
        let listed = lib(&[("a", 1), ("b", 2), ("c", 3)]);
        assert!(listing_differences(&listed, &listed).is_empty());
        let real = lib(&[("a", 1), ("b", 9), ("d", 4)]);
        let d = listing_differences(&real, &listed);
        assert_eq!(
            d,
            vec![
                "b: 9 bytes in the package, 2 listed",
                "c: listed, not in the package",
                "d: in the package, not listed"
            ]
        );
    }

    #[test]
    fn the_pins_name_listings_that_exist_and_targets_they_judge() {
        let debs = pinned(&crate::sdk::DebianSpec::default_path()).unwrap();
        assert!(debs.len() >= 2);
        for d in &debs {
            let p = project_root()
                .join("xtask/tests/fixtures/rocm-library-listings")
                .join(&d.listing);
            assert!(p.is_file(), "{}", p.display());
            assert_eq!(d.sha256.len(), 64);
            assert!(d.uncovered.iter().all(|u| d.targets.contains(u)));
            assert!(d.file_name().starts_with(&d.package));
        }
    }

    #[test]
    fn verdicts_from_the_listing_match_the_pins() {
        // The same verdict the real-folder check reaches, from the recorded listing alone.
        let debs = pinned(&crate::sdk::DebianSpec::default_path()).unwrap();
        for d in &debs {
            let text = std::fs::read_to_string(
                project_root()
                    .join("xtask/tests/fixtures/rocm-library-listings")
                    .join(&d.listing),
            )
            .unwrap();
            let l = listing_library(d.library, Path::new("lib/x/library"), &text).unwrap();
            let targets = filter::parse_targets(&d.targets).unwrap();
            let plan =
                filter::plan_filter(Path::new("/"), &[l], &targets, &CoverageNotes::default())
                    .unwrap();
            assert_eq!(coverage_verdicts(&plan), d.uncovered, "{}", d.package);
        }
    }
}
