//! `cargo xtask kernels filter`: keep the target arches' kernel files and every
//! arch-independent file, drop the rest; decide first ([`plan_filter`], pure), then act
//! ([`execute`]: stage beside the destination, link or copy, rename at the end).
//!
//! Coverage: every GEMM library the source ships (rocBLAS and, where present, hipBLASLt)
//! must have a lazy index for every target. On ROCm 7 hipBLAS routes GEMMs through
//! hipBLASLt, so a library that lacks the arch fails at start even when the other one has
//! it; a target missing from any shipped library is therefore uncovered.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::classify::{ArchClass, ArchToken};
use super::layout::{slash_path, LibraryFiles, LibraryKind};
use super::report::{classify_errors, classify_library, human_mb, lazy_index_tokens};

/// Why a file is kept or dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", content = "arch", rename_all = "snake_case")]
pub enum Reason {
    /// No arch token: always kept.
    ArchIndependent,
    /// Kept: serves this target (via folder, processor, family or generic token).
    Target(String),
    /// Dropped: serves only these arches (label as in the report).
    NotTargeted(String),
}

/// One file of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelFile {
    /// Path relative to the library folder.
    pub rel_path: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// Arch label (`gfx1100`, `gfx11`, `arch-independent`).
    pub arch: String,
    /// Why it is kept or dropped.
    pub reason: Reason,
}

/// Which lazy index (if any) serves one target in one library.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetCoverage {
    /// The target as requested.
    pub target: String,
    /// The lazy-index arch serving it (`gfx90a` for `gfx90a-xnack+`), if any.
    pub lazy_index: Option<String>,
}

/// The decision for one library folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LibraryPlan {
    /// Which library.
    pub kind: LibraryKind,
    /// Source folder relative to the source root.
    pub source_dir: PathBuf,
    /// Destination folder relative to the destination root (`rocblas/library`).
    pub dest_dir: PathBuf,
    /// Files to ship, sorted by path.
    pub kept: Vec<KernelFile>,
    /// Files left out, sorted by path.
    pub dropped: Vec<KernelFile>,
    /// Coverage of each target, in target order.
    pub coverage: Vec<TargetCoverage>,
    /// Arches with a lazy index in the source folder.
    pub available: Vec<String>,
}

/// A target with no lazy index in a library the package ships, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Uncovered {
    /// The target.
    pub target: String,
    /// The library lacking it.
    pub library: LibraryKind,
    /// The reason shown to people (from [`CoverageNotes`] when one matches).
    pub reason: String,
}

/// The full decision: every file kept or dropped with its reason, and coverage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FilterPlan {
    /// The source root (an SDK root or a package root).
    pub src_root: PathBuf,
    /// The requested targets.
    pub targets: Vec<String>,
    /// One plan per library folder, rocBLAS first.
    pub libraries: Vec<LibraryPlan>,
    /// Targets some shipped GEMM library cannot serve; empty when all are covered.
    pub uncovered: Vec<Uncovered>,
}

/// Caller-supplied reasons for known coverage gaps, e.g. from the track data:
/// `gfx1102` in hipBLASLt: "ROCm 7.1 hipBLASLt ships no gfx1102 kernels; use the rocm6 track".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoverageNotes {
    /// The notes (TOML: `[[note]]` tables with `library`, `target`, `reason`).
    #[serde(default, rename = "note")]
    pub notes: Vec<CoverageNote>,
}

/// One known coverage gap and its reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoverageNote {
    /// The library lacking the target.
    pub library: LibraryKind,
    /// The target (`gfx1102`).
    pub target: String,
    /// What to tell people.
    pub reason: String,
}

impl CoverageNotes {
    /// Reads notes from a TOML file.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading coverage notes {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parsing coverage notes {}", path.display()))
    }

    fn reason(&self, library: LibraryKind, target: &ArchToken) -> Option<&str> {
        self.notes
            .iter()
            .find(|note| {
                note.library == library
                    && ArchToken::parse(&note.target).is_ok_and(|t| t.base() == target.base())
            })
            .map(|note| note.reason.as_str())
    }
}

/// Parses a `--gpu-targets` list; empty, unknown, family or duplicate entries are errors.
pub fn parse_targets<S: AsRef<str>>(targets: &[S]) -> anyhow::Result<Vec<ArchToken>> {
    let mut parsed: Vec<ArchToken> = Vec::new();
    for text in targets {
        let text = text.as_ref().trim();
        if text.is_empty() {
            continue;
        }
        let token = ArchToken::parse_target(text)
            .with_context(|| format!("--gpu-targets entry '{text}'"))?;
        if !parsed.contains(&token) {
            parsed.push(token);
        }
    }
    if parsed.is_empty() {
        anyhow::bail!("--gpu-targets is empty (expected e.g. gfx1100,gfx1101)");
    }
    Ok(parsed)
}

/// Decides what to keep for `targets` from listed library folders (pure).
///
/// Fails on unknown tokens (all listed) and when two folders of one library exist.
pub fn plan_filter(
    src_root: &Path,
    libraries: &[LibraryFiles],
    targets: &[ArchToken],
    notes: &CoverageNotes,
) -> anyhow::Result<FilterPlan> {
    for kind in LibraryKind::ALL {
        let dirs: Vec<String> = libraries
            .iter()
            .filter(|l| l.kind == kind)
            .map(|l| slash_path(&l.dir))
            .collect();
        if dirs.len() > 1 {
            anyhow::bail!(
                "{} has several {kind} library folders ({}); point --src at one SDK",
                src_root.display(),
                dirs.join(", ")
            );
        }
    }
    let mut plans = Vec::new();
    let mut errors = Vec::new();
    let mut uncovered = Vec::new();
    for lib in libraries {
        let classes = match classify_library(lib) {
            Ok(classes) => classes,
            Err(errs) => {
                errors.extend(errs);
                continue;
            }
        };
        let plan = plan_library(lib, &classes, targets);
        for (coverage, target) in plan.coverage.iter().zip(targets) {
            if coverage.lazy_index.is_none() {
                let reason = notes
                    .reason(lib.kind, target)
                    .map(str::to_string)
                    .unwrap_or_else(|| {
                        format!(
                        "{kind} ({dir}) has no TensileLibrary_lazy_{base}.dat; it covers {have}, \
                         so GEMM on {target} would fail at start",
                        kind = lib.kind,
                        dir = slash_path(&lib.dir),
                        base = target.base(),
                        have = if plan.available.is_empty() {
                            "no arch".to_string()
                        } else {
                            plan.available.join(" ")
                        },
                    )
                    });
                uncovered.push(Uncovered {
                    target: target.to_string(),
                    library: lib.kind,
                    reason,
                });
            }
        }
        plans.push(plan);
    }
    if !errors.is_empty() {
        return Err(classify_errors(errors));
    }
    Ok(FilterPlan {
        src_root: src_root.to_path_buf(),
        targets: targets.iter().map(ToString::to_string).collect(),
        libraries: plans,
        uncovered,
    })
}

fn plan_library(lib: &LibraryFiles, classes: &[ArchClass], targets: &[ArchToken]) -> LibraryPlan {
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for (file, class) in lib.files.iter().zip(classes) {
        let arch = class.label();
        let (reason, keep) = match class {
            ArchClass::Independent => (Reason::ArchIndependent, true),
            specific => match specific.matching_target(targets) {
                Some(target) => (Reason::Target(target.to_string()), true),
                None => (Reason::NotTargeted(arch.clone()), false),
            },
        };
        let planned = KernelFile {
            rel_path: file.rel_path.clone(),
            size: file.size,
            arch,
            reason,
        };
        if keep {
            kept.push(planned);
        } else {
            dropped.push(planned);
        }
    }
    let lazy = lazy_index_tokens(lib, classes);
    let coverage = targets
        .iter()
        .map(|target| TargetCoverage {
            target: target.to_string(),
            lazy_index: lazy
                .iter()
                .find(|token| token.serves(target))
                .map(ToString::to_string),
        })
        .collect();
    let mut available: Vec<String> = lazy.iter().map(ToString::to_string).collect();
    available.dedup();
    LibraryPlan {
        kind: lib.kind,
        source_dir: lib.dir.clone(),
        dest_dir: lib.kind.package_dir(),
        kept,
        dropped,
        coverage,
        available,
    }
}

/// Scans `src_root` and plans the filter for `targets` (reads the disk, writes nothing).
pub fn plan(
    src_root: &Path,
    targets: &[ArchToken],
    notes: &CoverageNotes,
) -> anyhow::Result<FilterPlan> {
    let libraries = super::layout::scan(src_root)?;
    plan_filter(src_root, &libraries, targets, notes)
        .with_context(|| format!("planning the kernel filter of {}", src_root.display()))
}

/// Coverage gaps as one error (what the CLI and `dist` fail with).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", uncovered_message(.0))]
pub struct UncoveredError(pub Vec<Uncovered>);

fn uncovered_message(uncovered: &[Uncovered]) -> String {
    let mut text = format!(
        "{} GPU target(s) lack GEMM kernels in a library this package ships:",
        uncovered
            .iter()
            .map(|u| &u.target)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    );
    for gap in uncovered {
        let _ = write!(text, "\n  {}: {}", gap.target, gap.reason);
    }
    text.push_str("\n(pass --allow-uncovered to ship anyway)");
    text
}

impl FilterPlan {
    /// Ok when every target is covered by every shipped library, else the gaps.
    pub fn check_coverage(&self) -> Result<(), UncoveredError> {
        if self.uncovered.is_empty() {
            Ok(())
        } else {
            Err(UncoveredError(self.uncovered.clone()))
        }
    }

    /// Bytes kept, over all libraries.
    pub fn kept_bytes(&self) -> u64 {
        self.libraries
            .iter()
            .flat_map(|l| &l.kept)
            .map(|f| f.size)
            .sum()
    }

    /// Bytes dropped, over all libraries.
    pub fn dropped_bytes(&self) -> u64 {
        self.libraries
            .iter()
            .flat_map(|l| &l.dropped)
            .map(|f| f.size)
            .sum()
    }

    /// A summary per library and arch; with `list_files`, every file and its reason.
    pub fn to_text(&self, list_files: bool) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Kernel filter of {} for {}",
            self.src_root.display(),
            self.targets.join(",")
        );
        for lib in &self.libraries {
            let _ = writeln!(
                out,
                "\n{} {} -> {}",
                lib.kind,
                slash_path(&lib.source_dir),
                slash_path(&lib.dest_dir)
            );
            for (label, files) in [("kept", &lib.kept), ("dropped", &lib.dropped)] {
                let mut rows: Vec<(String, usize, u64)> = Vec::new();
                for file in files {
                    match rows.iter_mut().find(|r| r.0 == file.arch) {
                        Some(row) => {
                            row.1 += 1;
                            row.2 += file.size;
                        }
                        None => rows.push((file.arch.clone(), 1, file.size)),
                    }
                }
                rows.sort_by(|a, b| super::report::row_order(&a.0, &b.0));
                let total: u64 = files.iter().map(|f| f.size).sum();
                let _ = writeln!(out, "  {label}: {} files, {}", files.len(), human_mb(total));
                for (arch, count, bytes) in rows {
                    let _ = writeln!(out, "    {arch:<20} {count:>6} {:>12}", human_mb(bytes));
                }
            }
            for cov in &lib.coverage {
                let _ = writeln!(
                    out,
                    "  coverage {:<16} {}",
                    cov.target,
                    cov.lazy_index
                        .as_deref()
                        .map_or("NONE".to_string(), |a| format!("lazy index {a}"))
                );
            }
            if list_files {
                for (label, files) in [("keep", &lib.kept), ("drop", &lib.dropped)] {
                    for file in files {
                        let why = match &file.reason {
                            Reason::ArchIndependent => "arch-independent".to_string(),
                            Reason::Target(t) => format!("target {t}"),
                            Reason::NotTargeted(a) => format!("only {a}"),
                        };
                        let _ = writeln!(
                            out,
                            "  {label} {:>12} {} ({why})",
                            file.size,
                            slash_path(&file.rel_path)
                        );
                    }
                }
            }
        }
        let _ = writeln!(
            out,
            "\ntotal: kept {}, dropped {}",
            human_mb(self.kept_bytes()),
            human_mb(self.dropped_bytes())
        );
        out
    }
}

/// How files reach the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LinkMode {
    /// Hard link where the filesystem allows (same volume), else copy. On Linux the copy
    /// uses `copy_file_range`, which reflinks on btrfs/XFS. A hard link shares the SDK's
    /// inode: later steps must replace package files, never edit them in place.
    #[default]
    Auto,
    /// Always copy (independent inodes).
    Copy,
}

/// How to execute a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExecuteOptions {
    /// Replace an existing destination.
    pub force: bool,
    /// Links or copies.
    pub link: LinkMode,
}

/// What [`execute`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct ExecuteSummary {
    /// Files hard-linked.
    pub linked: usize,
    /// Files copied.
    pub copied: usize,
    /// Bytes placed.
    pub bytes: u64,
}

/// Performs `plan` into `dst` (created; `<dst>/rocblas/library/...`): stages in a
/// sibling folder of `dst`, then renames. Refuses a `dst` inside the source or holding
/// it, and an existing `dst` unless `force`. Never writes under the source root.
pub fn execute(
    plan: &FilterPlan,
    dst: &Path,
    options: &ExecuteOptions,
) -> anyhow::Result<ExecuteSummary> {
    let src_root = plan
        .src_root
        .canonicalize()
        .with_context(|| format!("resolving source {}", plan.src_root.display()))?;
    let name = dst
        .file_name()
        .with_context(|| format!("destination {} has no folder name", dst.display()))?
        .to_os_string();
    let parent = match dst.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dst_abs = resolve_new_path(&parent)?.join(&name);
    if dst_abs.starts_with(&src_root) {
        anyhow::bail!(
            "destination {} is inside the source {}",
            dst.display(),
            src_root.display()
        );
    }
    if src_root.starts_with(&dst_abs) {
        anyhow::bail!(
            "destination {} holds the source {}",
            dst.display(),
            src_root.display()
        );
    }
    let parent = dst_abs.parent().map(Path::to_path_buf).unwrap_or_default();
    std::fs::create_dir_all(&parent)
        .with_context(|| format!("creating the destination's parent {}", parent.display()))?;
    let exists = dst_abs.symlink_metadata().is_ok();
    if exists && !options.force {
        anyhow::bail!(
            "destination {} exists (pass --force to replace it)",
            dst.display()
        );
    }
    let pid = std::process::id();
    let stage = parent.join(format!(".{}.staging-{pid}", name.to_string_lossy()));
    if stage.symlink_metadata().is_ok() {
        remove_any(&stage)?;
    }
    let result = populate(plan, &src_root, &stage, options.link);
    let summary = match result {
        Ok(summary) => summary,
        Err(err) => {
            let _ = std::fs::remove_dir_all(&stage);
            return Err(err);
        }
    };
    if exists {
        let old = parent.join(format!(".{}.old-{pid}", name.to_string_lossy()));
        std::fs::rename(&dst_abs, &old)
            .with_context(|| format!("moving the old {} aside", dst_abs.display()))?;
        if let Err(err) = std::fs::rename(&stage, &dst_abs) {
            let _ = std::fs::rename(&old, &dst_abs);
            let _ = std::fs::remove_dir_all(&stage);
            return Err(err)
                .with_context(|| format!("renaming {} to {}", stage.display(), dst_abs.display()));
        }
        remove_any(&old)?;
    } else if let Err(err) = std::fs::rename(&stage, &dst_abs) {
        let _ = std::fs::remove_dir_all(&stage);
        return Err(err)
            .with_context(|| format!("renaming {} to {}", stage.display(), dst_abs.display()));
    }
    Ok(summary)
}

/// The absolute, symlink-free form of `path`, which may not exist yet: its nearest
/// existing ancestor is canonicalized and the rest appended (`..` there is refused).
fn resolve_new_path(path: &Path) -> anyhow::Result<PathBuf> {
    let mut existing = path;
    let mut rest = Vec::new();
    while existing.symlink_metadata().is_err() {
        let Some(name) = existing.file_name() else {
            anyhow::bail!("cannot resolve {} (it ends in '..')", path.display());
        };
        rest.push(name.to_os_string());
        existing = match existing.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
    }
    let mut resolved = existing
        .canonicalize()
        .with_context(|| format!("resolving {}", existing.display()))?;
    for name in rest.into_iter().rev() {
        resolved.push(name);
    }
    Ok(resolved)
}

fn remove_any(path: &Path) -> anyhow::Result<()> {
    let meta = path
        .symlink_metadata()
        .with_context(|| format!("reading {}", path.display()))?;
    if meta.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    }
    .with_context(|| format!("removing {}", path.display()))
}

fn populate(
    plan: &FilterPlan,
    src_root: &Path,
    stage: &Path,
    mode: LinkMode,
) -> anyhow::Result<ExecuteSummary> {
    std::fs::create_dir(stage)
        .with_context(|| format!("creating staging folder {}", stage.display()))?;
    let mut summary = ExecuteSummary::default();
    for lib in &plan.libraries {
        for file in &lib.kept {
            let from = src_root.join(&lib.source_dir).join(&file.rel_path);
            let from = from
                .canonicalize()
                .with_context(|| format!("resolving {}", from.display()))?;
            let to = stage.join(&lib.dest_dir).join(&file.rel_path);
            if let Some(dir) = to.parent() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            let linked = mode == LinkMode::Auto && std::fs::hard_link(&from, &to).is_ok();
            if linked {
                summary.linked += 1;
            } else {
                std::fs::copy(&from, &to)
                    .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
                summary.copied += 1;
            }
            summary.bytes += file.size;
        }
    }
    Ok(summary)
}
