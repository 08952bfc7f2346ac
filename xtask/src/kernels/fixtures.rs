//! Realistic kernel-library trees for tests and the benchmark, generated from the real
//! name/size listings of Debian's rocBLAS and hipBLASLt packages
//! (`xtask/tests/fixtures/rocm-library-listings/`).
//!
//! A tree spec names, per library folder, which arches to lay out, which listed arch to
//! borrow the names from (Debian builds fewer arches than the Windows SDK: `gfx1151` is
//! laid out from the `gfx1102` names), the per-arch size to scale to, and hand-written
//! trap files (per-arch folders, `.dat.zlib`, family and multi-arch tokens). Every
//! generated file records which processors it serves, decided by construction rather
//! than by the classifier, so tests can compare the filter's kept/dropped sets exactly.
//!
//! Per-arch sizes of the Windows trees are chosen to match the totals (rocBLAS
//! 1060 MB in ROCm 6.4, hipBLASLt 407 MB in 7.1); they live in the two spec functions.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::layout::LibraryKind;

/// rocBLAS 6.4.4 (Debian sid) `library` listing: `name<TAB>size_bytes`.
pub const ROCBLAS_644_LISTING: &str =
    include_str!("../../tests/fixtures/rocm-library-listings/rocblas-library-sid-6.4.4-4.tsv");
/// rocBLAS 7.2.4 (Debian experimental) `library` listing.
pub const ROCBLAS_724_LISTING: &str = include_str!(
    "../../tests/fixtures/rocm-library-listings/rocblas-library-experimental-7.2.4-1~exp1.tsv"
);
/// hipBLASLt 7.1.1 (Debian sid) `library` listing.
pub const HIPBLASLT_711_LISTING: &str = include_str!(
    "../../tests/fixtures/rocm-library-listings/hipblaslt-library-sid-7.1.1+dfsg-4.tsv"
);
/// hipBLASLt 7.2.4 (Debian experimental) `library` listing.
pub const HIPBLASLT_724_LISTING: &str = include_str!(
    "../../tests/fixtures/rocm-library-listings/hipblaslt-library-experimental-7.2.4+dfsg-1~exp1.tsv"
);

/// The rocm6 track's GPU targets, read from the run's tracks (packaging/tracks.toml) so
/// the tests and the benchmark filter for exactly what the release does.
pub fn rocm6_targets(ctx: &crate::context::RunContext) -> anyhow::Result<Vec<String>> {
    let tracks = ctx.tracks()?;
    Ok(tracks.track("rocm6")?.gpu_targets.clone())
}

/// A whole tree: library folders under one root.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeSpec {
    /// A short name (`rocm-6.4-windows`).
    pub name: &'static str,
    /// The library folders.
    pub libraries: Vec<LibrarySpec>,
}

/// One library folder of a tree.
#[derive(Debug, Clone, PartialEq)]
pub struct LibrarySpec {
    /// Which library.
    pub kind: LibraryKind,
    /// The folder relative to the tree root (`bin/rocblas/library`).
    pub dir: &'static str,
    /// The listing the names come from (`name<TAB>size` lines after a header).
    pub listing: &'static str,
    /// Arches to lay out.
    pub arches: Vec<ArchSpec>,
    /// Extra hand-written files (traps, files the Debian listing lacks).
    pub extra: Vec<ExtraFile>,
}

/// One arch of a library folder.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchSpec {
    /// The arch to lay out (`gfx1151`).
    pub arch: &'static str,
    /// The listed arch whose names are borrowed and renamed (`gfx1102`).
    pub names_from: &'static str,
    /// Total bytes of this arch's files; `None` keeps the listed sizes.
    pub bytes: Option<u64>,
    /// Put the files in `library/<arch>/` and compress `.dat` to `.dat.zlib` (newer trees).
    pub subfolder: bool,
}

/// A hand-written file.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtraFile {
    /// Path relative to the library folder.
    pub rel_path: &'static str,
    /// Size in bytes.
    pub size: u64,
    /// Processors this file serves (empty: arch-independent).
    pub serves: &'static [&'static str],
}

/// How file contents are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Sparse files of the right length (fast; fine for sizes and classification).
    Sparse,
    /// Real zero-filled blocks (for copy-speed measurements).
    Zeros,
    /// Deterministic code-like bytes that deflate like real kernel files (see
    /// [`code_bytes`]), for compression measurements.
    Code,
}

/// Writes `size` bytes, 1 MiB at a time, each chunk filled by `fill` (zeros when it
/// leaves the buffer alone).
fn write_generated(
    out: &mut std::fs::File,
    size: u64,
    mut fill: impl FnMut(&mut [u8]),
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        let chunk = left.min(buf.len() as u64) as usize;
        fill(&mut buf[..chunk]);
        out.write_all(&buf[..chunk])?;
        left -= chunk as u64;
    }
    Ok(())
}

/// Fills `buf` with [`Fill::Code`] bytes, continuing the generator `state`: words from a
/// small instruction vocabulary and random immediates, and one time in eight a repeat of
/// 16-255 earlier bytes (real Tensile code objects are many near-identical kernels).
/// Deflate at level 6 shrinks it about 7.5x, as it does Debian's rocBLAS 6.4.4 gfx1100
/// files (305 MB -> 42 MB with `gzip -6`).
pub fn code_bytes(state: &mut u64, buf: &mut [u8]) {
    const VOCAB: usize = 256;
    let mut vocab = [0u32; VOCAB];
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for v in vocab.iter_mut() {
        seed = xorshift(seed);
        *v = (seed >> 16) as u32;
    }
    let mut i = 0;
    while i < buf.len() {
        *state = xorshift(*state);
        let r = *state;
        if i >= 4096 && r % 16 < 2 {
            let len = (16 + (r >> 8) as usize % 240).min(buf.len() - i);
            let distance = 16 + (r >> 20) as usize % (i.min(32_000) - 16);
            for k in 0..len {
                buf[i + k] = buf[i + k - distance];
            }
            i += len;
        } else {
            let word = if r % 8 < 6 {
                vocab[(r >> 8) as usize % VOCAB]
            } else {
                (r >> 32) as u32
            };
            let n = 4.min(buf.len() - i);
            buf[i..i + n].copy_from_slice(&word.to_le_bytes()[..n]);
            i += n;
        }
    }
}

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

/// One generated file and what it serves by construction.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct GeneratedFile {
    /// Which library folder.
    pub library: LibraryKind,
    /// Path relative to the library folder.
    pub rel_path: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// Processors it serves (empty: arch-independent).
    pub serves: Vec<String>,
}

impl GeneratedFile {
    /// Whether a correct filter for `targets` (plain processor names) keeps this file.
    pub fn kept_for(&self, targets: &[&str]) -> bool {
        self.serves.is_empty() || self.serves.iter().any(|s| targets.contains(&s.as_str()))
    }
}

/// `(name, size)` pairs of a listing.
pub fn listing_entries(listing: &str) -> Vec<(&str, u64)> {
    listing
        .lines()
        .skip(1)
        .filter_map(|line| {
            let (name, size) = line.split_once('\t')?;
            Some((name, size.trim().parse().ok()?))
        })
        .collect()
}

/// The arch a listed name belongs to, read the naive way (first `gfx` run), which is
/// right for Debian's flat listings and independent of the classifier under test.
pub fn listed_arch(name: &str) -> Option<&str> {
    let start = name.find("gfx")?;
    let len = name[start + 3..]
        .bytes()
        .take_while(u8::is_ascii_alphanumeric)
        .count();
    Some(&name[start..start + 3 + len])
}

/// Every arch of a listing at its listed sizes, flat (the Debian layout).
pub fn all_listed_arches(listing: &'static str) -> Vec<ArchSpec> {
    let mut arches: Vec<&'static str> = listing_entries(listing)
        .into_iter()
        .filter_map(|(n, _)| listed_arch(n))
        .collect();
    arches.sort_unstable();
    arches.dedup();
    arches
        .into_iter()
        .map(|arch| ArchSpec {
            arch,
            names_from: arch,
            bytes: None,
            subfolder: false,
        })
        .collect()
}

impl TreeSpec {
    /// The same tree with every sized arch scaled by `factor` (for the benchmark).
    pub fn scaled(mut self, factor: f64) -> Self {
        for lib in &mut self.libraries {
            for arch in &mut lib.arches {
                arch.bytes = arch.bytes.map(|b| (b as f64 * factor).round() as u64);
            }
        }
        self
    }

    /// Every file of the tree (pure; sorted by library then path).
    pub fn files(&self) -> Vec<GeneratedFile> {
        let mut out = Vec::new();
        for lib in &self.libraries {
            out.extend(lib.files());
        }
        out.sort();
        out
    }
}

impl LibrarySpec {
    /// The per-arch totals this spec asks for, as `(arch, bytes)`; `None` sizes are summed
    /// from the listing.
    pub fn arch_bytes(&self) -> Vec<(&'static str, u64)> {
        let files = self.files();
        self.arches
            .iter()
            .map(|a| {
                let total = files
                    .iter()
                    .filter(|f| f.serves == [a.arch.to_string()] && !self.is_extra(&f.rel_path))
                    .map(|f| f.size)
                    .sum();
                (a.arch, total)
            })
            .collect()
    }

    fn is_extra(&self, rel: &Path) -> bool {
        self.extra.iter().any(|e| Path::new(e.rel_path) == rel)
    }

    /// Every file of this library folder (pure).
    pub fn files(&self) -> Vec<GeneratedFile> {
        let entries = listing_entries(self.listing);
        let mut out: Vec<GeneratedFile> = entries
            .iter()
            .filter(|(name, _)| listed_arch(name).is_none())
            .map(|(name, size)| GeneratedFile {
                library: self.kind,
                rel_path: PathBuf::from(name),
                size: *size,
                serves: Vec::new(),
            })
            .collect();
        for arch in &self.arches {
            let source: Vec<(&str, u64)> = entries
                .iter()
                .filter(|(name, _)| listed_arch(name) == Some(arch.names_from))
                .copied()
                .collect();
            let listed_total: u64 = source.iter().map(|(_, s)| s).sum();
            let sizes = scale_sizes(&source, listed_total, arch.bytes);
            for ((name, _), size) in source.iter().zip(sizes) {
                let mut renamed = name.replace(arch.names_from, arch.arch);
                let rel_path = if arch.subfolder {
                    if renamed.ends_with(".dat") {
                        renamed.push_str(".zlib");
                    }
                    Path::new(arch.arch).join(renamed)
                } else {
                    PathBuf::from(renamed)
                };
                out.push(GeneratedFile {
                    library: self.kind,
                    rel_path,
                    size,
                    serves: vec![arch.arch.to_string()],
                });
            }
        }
        for extra in &self.extra {
            out.push(GeneratedFile {
                library: self.kind,
                rel_path: PathBuf::from(extra.rel_path),
                size: extra.size,
                serves: extra.serves.iter().map(ToString::to_string).collect(),
            });
        }
        out.sort();
        out
    }
}

/// Scales listed sizes so they sum exactly to `target` (the largest file takes the
/// rounding remainder); `None` keeps them.
fn scale_sizes(source: &[(&str, u64)], listed_total: u64, target: Option<u64>) -> Vec<u64> {
    let Some(target) = target else {
        return source.iter().map(|(_, s)| *s).collect();
    };
    if listed_total == 0 || source.is_empty() {
        return vec![0; source.len()];
    }
    let mut sizes: Vec<u64> = source
        .iter()
        .map(|(_, s)| (*s as u128 * target as u128 / listed_total as u128) as u64)
        .collect();
    let sum: u64 = sizes.iter().sum();
    let largest = (0..sizes.len()).max_by_key(|i| sizes[*i]).unwrap_or(0);
    sizes[largest] += target - sum;
    sizes
}

/// Writes `spec` under `root` (which must not exist or be empty) and returns its files.
pub fn write_tree(spec: &TreeSpec, root: &Path, fill: Fill) -> anyhow::Result<Vec<GeneratedFile>> {
    let files = spec.files();
    for lib in &spec.libraries {
        let dir = root.join(lib.dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for file in files.iter().filter(|f| f.library == lib.kind) {
            let path = dir.join(&file.rel_path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("creating {}", parent.display()))?;
            }
            let mut out = std::fs::File::create(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            match fill {
                Fill::Sparse => out.set_len(file.size),
                Fill::Zeros => write_generated(&mut out, file.size, |_| {}),
                Fill::Code => {
                    let mut state = file.size | 1;
                    write_generated(&mut out, file.size, |buf| code_bytes(&mut state, buf))
                }
            }
            .with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(files)
}

const MB: u64 = 1_000_000;

fn sized(arch: &'static str, names_from: &'static str, megabytes: u64) -> ArchSpec {
    ArchSpec {
        arch,
        names_from,
        bytes: Some(megabytes * MB),
        subfolder: false,
    }
}

/// The ROCm 6.4 Windows HIP SDK tree: `bin/rocblas/library`, flat, 1060 MB of per-arch
/// kernels plus the arch-independent `*_fallback.dat` files and `TensileManifest.txt`.
pub fn rocm64_windows() -> TreeSpec {
    TreeSpec {
        name: "rocm-6.4-windows",
        libraries: vec![LibrarySpec {
            kind: LibraryKind::Rocblas,
            dir: "bin/rocblas/library",
            listing: ROCBLAS_644_LISTING,
            arches: vec![
                sized("gfx906", "gfx906", 120),
                sized("gfx1030", "gfx1030", 150),
                sized("gfx1100", "gfx1100", 200),
                sized("gfx1101", "gfx1101", 140),
                sized("gfx1102", "gfx1102", 140),
                sized("gfx1151", "gfx1102", 120),
                sized("gfx1200", "gfx1100", 95),
                sized("gfx1201", "gfx1101", 95),
            ],
            extra: vec![ExtraFile {
                rel_path: "TensileManifest.txt",
                size: 48_213,
                serves: &[],
            }],
        }],
    }
}

/// The ROCm 6.4 Windows HIP SDK tree with its hipBLASLt folder as well
/// (`bin/hipblaslt/library`, 147 MB for the eight RDNA3/3.5/4 targets at the distribution
/// guide's per-arch sizes; names from Debian's hipBLASLt 7.1.1 listing, whose gfx90a
/// files stand for the data-centre arches the package leaves out, at a size of our own),
/// as the real SDK has both. The hipBLASLt GEMM route (`gemm/`) ships only this one.
pub fn rocm64_windows_with_hipblaslt() -> TreeSpec {
    let mut tree = rocm64_windows();
    tree.name = "rocm-6.4-windows-hipblaslt";
    tree.libraries.push(LibrarySpec {
        kind: LibraryKind::Hipblaslt,
        dir: "bin/hipblaslt/library",
        listing: HIPBLASLT_711_LISTING,
        arches: vec![
            sized("gfx1100", "gfx1100", 16),
            sized("gfx1101", "gfx1101", 17),
            sized("gfx1102", "gfx1102", 16),
            sized("gfx1103", "gfx1103", 16),
            sized("gfx1150", "gfx1150", 16),
            sized("gfx1151", "gfx1151", 16),
            sized("gfx1200", "gfx1200", 23),
            sized("gfx1201", "gfx1201", 27),
            sized("gfx90a", "gfx90a", 30),
        ],
        extra: Vec::new(),
    });
    tree
}

/// The ROCm 7.1 Windows HIP SDK tree: `bin/rocblas/library` (gfx1150 in a per-arch folder
/// with `.dat.zlib`, plus traps) and `bin/hipblaslt/library` (407 MB, no gfx1102).
pub fn rocm71_windows() -> TreeSpec {
    let mut gfx1150 = sized("gfx1150", "gfx1151", 20);
    gfx1150.subfolder = true;
    TreeSpec {
        name: "rocm-7.1-windows",
        libraries: vec![
            LibrarySpec {
                kind: LibraryKind::Rocblas,
                dir: "bin/rocblas/library",
                listing: ROCBLAS_724_LISTING,
                arches: vec![
                    sized("gfx1030", "gfx1030", 28),
                    sized("gfx1100", "gfx1100", 35),
                    sized("gfx1101", "gfx1101", 24),
                    sized("gfx1102", "gfx1102", 20),
                    sized("gfx1103", "gfx1102", 20),
                    gfx1150,
                    sized("gfx1151", "gfx1151", 20),
                    sized("gfx1200", "gfx1200", 13),
                    sized("gfx1201", "gfx1201", 13),
                ],
                extra: vec![
                    ExtraFile { rel_path: "TensileManifest.txt", size: 61_377, serves: &[] },
                    // A family token inside a per-arch folder: the folder decides.
                    ExtraFile {
                        rel_path: "gfx1150/TensileLibrary_Type_HH_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx11.dat.zlib",
                        size: 7_311,
                        serves: &["gfx1150"],
                    },
                    // A per-arch folder for an arch no target asks for, whose files name a
                    // family token and even a targeted arch: all of it goes.
                    ExtraFile {
                        rel_path: "gfx942/TensileLibrary_lazy_gfx942.dat.zlib",
                        size: 21_004,
                        serves: &["gfx942"],
                    },
                    ExtraFile {
                        rel_path: "gfx942/TensileLibrary_Type_HH_HPA_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx9.dat.zlib",
                        size: 9_850,
                        serves: &["gfx942"],
                    },
                    ExtraFile {
                        rel_path: "gfx942/TensileLibrary_Type_HH_HPA_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx1100.co",
                        size: 33_120,
                        serves: &["gfx942"],
                    },
                ],
            },
            LibrarySpec {
                kind: LibraryKind::Hipblaslt,
                dir: "bin/hipblaslt/library",
                listing: HIPBLASLT_711_LISTING,
                arches: vec![
                    sized("gfx1100", "gfx1100", 25),
                    sized("gfx1101", "gfx1101", 25),
                    sized("gfx1103", "gfx1103", 25),
                    sized("gfx1150", "gfx1150", 25),
                    sized("gfx1151", "gfx1151", 25),
                    sized("gfx1200", "gfx1200", 160),
                    sized("gfx1201", "gfx1201", 121),
                ],
                extra: vec![
                    // Several tokens in one name: kept when any is targeted.
                    ExtraFile {
                        rel_path: "extop_gfx1100_gfx1101.co",
                        size: 41_560,
                        serves: &["gfx1100", "gfx1101"],
                    },
                    // A flat family-token file serves every member of the family.
                    ExtraFile {
                        rel_path: "TensileLibrary_HH_HH_UA_Type_HH_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx12.dat",
                        size: 12_288,
                        serves: &["gfx1200", "gfx1201"],
                    },
                ],
            },
        ],
    }
}

/// Debian sid's layout at the listed sizes (3.1 GB rocBLAS 6.4.4 with `gfx90a-xnack±`,
/// hipBLASLt 7.1.1): `lib/x86_64-linux-gnu/rocblas/4.4.1/library` and
/// `lib/x86_64-linux-gnu/hipblaslt/library`. Use with [`Fill::Sparse`].
pub fn debian_sid() -> TreeSpec {
    TreeSpec {
        name: "debian-sid",
        libraries: vec![
            LibrarySpec {
                kind: LibraryKind::Rocblas,
                dir: "lib/x86_64-linux-gnu/rocblas/4.4.1/library",
                listing: ROCBLAS_644_LISTING,
                arches: all_listed_arches(ROCBLAS_644_LISTING),
                extra: Vec::new(),
            },
            LibrarySpec {
                kind: LibraryKind::Hipblaslt,
                dir: "lib/x86_64-linux-gnu/hipblaslt/library",
                listing: HIPBLASLT_711_LISTING,
                arches: all_listed_arches(HIPBLASLT_711_LISTING),
                extra: Vec::new(),
            },
        ],
    }
}

/// The benchmark tree: ROCm 6.4 rocBLAS (1060 MB) plus ROCm 7.1 hipBLASLt scaled to
/// 240 MB, about 1.3 GB in `bin/`.
pub fn bench_tree() -> TreeSpec {
    let rocblas = rocm64_windows().libraries.remove(0);
    let hipblaslt = TreeSpec {
        name: "",
        libraries: vec![rocm71_windows().libraries.remove(1)],
    }
    .scaled(240.0 / 406.0)
    .libraries
    .remove(0);
    TreeSpec {
        name: "bench-1.3GB",
        libraries: vec![rocblas, hipblaslt],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_bytes_are_deterministic_and_deflate_like_real_kernels() {
        let mut a = vec![0u8; 1 << 20];
        let mut b = vec![0u8; 1 << 20];
        let (mut sa, mut sb) = (7u64, 7u64);
        code_bytes(&mut sa, &mut a);
        code_bytes(&mut sb, &mut b);
        assert_eq!(a, b);
        let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(6));
        z.write_all(&a).unwrap();
        let ratio = a.len() as f64 / z.finish().unwrap().len() as f64;
        assert!(
            (5.0..10.0).contains(&ratio),
            "deflate ratio {ratio:.2}, real rocBLAS ~7.2"
        );
    }
}
