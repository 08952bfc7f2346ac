//! `cargo xtask dist`: build (or take prebuilt) binaries, collect the track's runtime
//! files and filtered kernel libraries, verify the dependency closure, and write a
//! reproducible zip with its checksums, README, manifest and size table.
//!
//! Deciding and doing are apart: [`plan::plan`] is pure; this module gathers facts from
//! the disk and [`package`] performs the plan.

pub mod archive;
pub mod bench;
pub mod fixtures;
pub mod package;
pub mod plan;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use crate::kernels::filter::{self as kfilter, CoverageNotes};
use crate::project::{project_root, target_dir};
use crate::tracks::{Os, SdkKind, Track, TracksFile};
use plan::{DistFacts, FoundFile};

/// Flags of `cargo xtask dist`.
#[derive(Debug, Default, clap::Args)]
pub struct Args {
    /// Track to package (see packaging/tracks.toml); default: this host's CPU track.
    #[arg(long)]
    pub track: Option<String>,
    /// Package prebuilt binaries from this folder instead of building; repeat it for a
    /// dynamic-backends build whose libraries and plugins lie in several folders.
    #[arg(long)]
    pub bin_dir: Vec<PathBuf>,
    /// SDK root for HIP tracks (default: HIP_PATH / ROCM_PATH).
    #[arg(long)]
    pub rocm_path: Option<PathBuf>,
    /// CUDA toolkit root for CUDA tracks (default: CUDA_PATH).
    #[arg(long)]
    pub cuda_path: Option<PathBuf>,
    /// Folder with the toolchain runtime files the track declares (MSVC CRT redist folder).
    #[arg(long)]
    pub crt_dir: Option<PathBuf>,
    /// Where packages go.
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
    /// Ship targets whose GEMM kernels are missing (recorded in the manifest).
    #[arg(long)]
    pub allow_uncovered: bool,
    /// Package only these of the track's GPU targets (comma-separated), for binaries
    /// built with `build --gpu-targets`; recorded as the package's targets.
    #[arg(long, value_name = "LIST")]
    pub gpu_targets: Option<String>,
    /// Package inside the Debian chroot of this suite (`cargo xtask sdk debian --suite
    /// SUITE`), from its ROCm SDK; the package lands in <target>/chroot-SUITE/dist.
    #[arg(long, value_name = "SUITE")]
    pub chroot: Option<String>,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Tracks file (default: packaging/tracks.toml).
    #[arg(long)]
    pub tracks_file: Option<PathBuf>,
}

/// This host's default track.
pub fn host_track() -> &'static str {
    if cfg!(windows) {
        "windows-cpu"
    } else {
        "linux-cpu"
    }
}

/// Builds and stages this host's package (`cargo xtask dist` with no flags) and returns
/// its folder: benches run the binaries users get, with the CPU variants picked at start.
pub fn host_package() -> Result<PathBuf> {
    run(Args::default())?;
    let tracks = TracksFile::load(&TracksFile::default_path())?;
    Ok(target_dir()
        .join("dist")
        .join(&tracks.track(host_track())?.package))
}

/// Runs the verb.
pub fn run(args: Args) -> Result<ExitCode> {
    if let Some(suite) = &args.chroot {
        return crate::sdk::reexec_in_chroot(suite);
    }
    if args.bin_dir.is_empty() && !args.dry_run {
        crate::setup::ensure("dist", args.track.as_deref())?;
    }
    let tracks_path = args
        .tracks_file
        .clone()
        .unwrap_or_else(TracksFile::default_path);
    let tracks = TracksFile::load(&tracks_path)?;
    let track_name = args
        .track
        .clone()
        .unwrap_or_else(|| host_track().to_string());
    let mut narrowed = tracks.track(&track_name)?.clone();
    if let Some(list) = &args.gpu_targets {
        narrow_targets(&track_name, &mut narrowed, list)?;
    }
    let track = &narrowed;
    let out_dir = args
        .out_dir
        .clone()
        .unwrap_or_else(|| target_dir().join("dist"));
    let bin_dirs = if !args.bin_dir.is_empty() {
        for d in &args.bin_dir {
            if !d.is_dir() {
                bail!("--bin-dir {} is not a folder", d.display());
            }
        }
        args.bin_dir.clone()
    } else if args.dry_run {
        Vec::new()
    } else {
        build_binaries(&track_name, track)?
    };
    let facts = gather(&track_name, track, &bin_dirs, &args)?;
    let plan = plan::plan(&track_name, track, &facts)?;
    if let Some(k) = &facts.kernels {
        if !k.uncovered.is_empty() && !args.allow_uncovered {
            let expected: Vec<&str> = track.uncovered_targets.iter().map(String::as_str).collect();
            let unexpected: Vec<_> = k
                .uncovered
                .iter()
                .filter(|u| !expected.contains(&u.target.as_str()))
                .cloned()
                .collect();
            if !unexpected.is_empty() {
                return Err(kfilter::UncoveredError(unexpected).into());
            }
        }
    }
    if args.dry_run {
        print!("{}", plan.to_text());
        return Ok(ExitCode::SUCCESS);
    }
    let ctx = package::PackageContext {
        tracks_path: &tracks_path,
        tracks: &tracks,
        track,
        out_dir: &out_dir,
        kernels: facts.kernels.as_ref(),
        allow_uncovered: args.allow_uncovered,
    };
    let result = package::execute(&plan, &ctx)?;
    print!("{}", result.size_table);
    Ok(ExitCode::SUCCESS)
}

/// Keeps only `list` of the track's GPU targets (and of its known-uncovered ones); a
/// target the track does not have is an error naming the ones it has.
pub fn narrow_targets(track_name: &str, track: &mut Track, list: &str) -> Result<()> {
    let wanted: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect();
    if wanted.is_empty() {
        bail!("--gpu-targets is empty: give a list like gfx1100,gfx1101");
    }
    for w in &wanted {
        if !track.gpu_targets.contains(w) {
            bail!(
                "--gpu-targets {w}: track {track_name} has no such target (it has {})",
                track.gpu_targets.join(", ")
            );
        }
    }
    track.gpu_targets.retain(|t| wanted.contains(t));
    track.uncovered_targets.retain(|t| wanted.contains(t));
    Ok(())
}

/// Lists the regular files of `dir` (symlinks followed, dangling ones skipped). ELF
/// shared libraries are listed once, under their SONAME (the name the loader looks for),
/// however many symlinks and versioned names a build left for them.
fn list_dir(dir: &Path, into: &mut BTreeMap<String, FoundFile>) -> Result<()> {
    let mut by_target: BTreeMap<PathBuf, String> = BTreeMap::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        let Ok(meta) = std::fs::metadata(e.path()) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        let mut name = e.file_name().to_string_lossy().into_owned();
        let real = std::fs::canonicalize(e.path())?;
        if name.contains(".so") {
            if let Some(soname) = elf_soname(&real) {
                name = soname;
            }
            if let Some(prev) = by_target.get(&real) {
                if *prev == name {
                    continue;
                }
            }
            by_target.insert(real.clone(), name.clone());
        }
        into.insert(
            name,
            FoundFile {
                path: real,
                size: meta.len(),
            },
        );
    }
    Ok(())
}

fn elf_soname(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    crate::verify_deps::parse(&bytes).ok()?.soname
}

/// The track's SDK root from its flag or environment, checked to be a folder of the
/// track's SDK version.
fn sdk_root(track_name: &str, track: &Track, args: &Args) -> Result<PathBuf> {
    let kind = track.sdk.as_ref().map(|s| s.kind).unwrap_or(SdkKind::Rocm);
    let (flag, root) = match kind {
        SdkKind::Rocm => (
            "--rocm-path",
            args.rocm_path
                .clone()
                .or_else(|| std::env::var_os("HIP_PATH").map(PathBuf::from))
                .or_else(|| std::env::var_os("ROCM_PATH").map(PathBuf::from)),
        ),
        SdkKind::Cuda => (
            "--cuda-path",
            args.cuda_path
                .clone()
                .or_else(|| std::env::var_os("CUDA_PATH").map(PathBuf::from)),
        ),
    };
    let root = root.with_context(|| match kind {
        SdkKind::Rocm => format!(
            "track {track_name} needs the ROCm SDK: pass --rocm-path or set HIP_PATH / ROCM_PATH"
        ),
        SdkKind::Cuda => {
            format!("track {track_name} needs the CUDA toolkit: pass --cuda-path or set CUDA_PATH")
        }
    })?;
    if !root.is_dir() {
        bail!("{flag} {} is not a folder", root.display());
    }
    if let Some(sdk) = &track.sdk {
        let (found, from) = match kind {
            SdkKind::Rocm => {
                let (v, from) = crate::toolset::rocm::read_version(&root)
                    .with_context(|| format!("reading the SDK version of {}", root.display()))?;
                (v.major_minor(), from.to_string())
            }
            SdkKind::Cuda => {
                let cuda = crate::toolset::cuda::inspect(&root)
                    .with_context(|| format!("reading the CUDA version of {}", root.display()))?;
                let mm: Vec<&str> = cuda.version.split('.').take(2).collect();
                (mm.join("."), "version.json".to_string())
            }
        };
        if found != sdk.version {
            bail!(
                "the SDK at {} is version {found} (from {from}); track {track_name} needs {}: pass that SDK with {flag}",
                root.display(),
                sdk.version
            );
        }
    }
    Ok(root)
}

/// Collects the facts `plan` decides on: binaries, runtime files, CRT, kernel plan.
fn gather(track_name: &str, track: &Track, bin_dirs: &[PathBuf], args: &Args) -> Result<DistFacts> {
    let mut facts = DistFacts::default();
    for d in bin_dirs {
        list_dir(d, &mut facts.binaries)?;
    }
    let needs_sdk = !track.runtime.is_empty() || !track.kernel_libraries.is_empty();
    if needs_sdk {
        let root = sdk_root(track_name, track, args)?;
        for r in &track.runtime {
            let Some(p) = crate::toolset::rocm::find_runtime_file(&root, &r.source, &r.name) else {
                continue;
            };
            if let Ok(m) = std::fs::metadata(&p) {
                facts.runtime.insert(
                    r.name.clone(),
                    FoundFile {
                        path: p,
                        size: m.len(),
                    },
                );
            }
        }
        if !track.kernel_libraries.is_empty() {
            let targets = kfilter::parse_targets(&track.gpu_targets)?;
            // Only the libraries the track ships count for coverage: a hipBLASLt the SDK
            // also has is no use to binaries that never load it.
            let mut libraries = crate::kernels::layout::scan(&root)?;
            libraries.retain(|l| {
                track
                    .kernel_libraries
                    .iter()
                    .any(|d| d.name == l.kind.dir_name())
            });
            let plan = kfilter::plan_filter(&root, &libraries, &targets, &CoverageNotes::default())
                .with_context(|| format!("planning the kernel filter of {}", root.display()))?;
            facts.kernels = Some(plan);
        }
    }
    if let Some(crt) = &track.crt {
        let dirs: Vec<PathBuf> = match &args.crt_dir {
            Some(dir) => vec![dir.clone()],
            None => crt.search.iter().map(PathBuf::from).collect(),
        };
        for name in &crt.files {
            if let Some(p) = dirs.iter().map(|d| d.join(name)).find(|p| p.is_file()) {
                let size = std::fs::metadata(&p)?.len();
                facts.crt.insert(name.clone(), FoundFile { path: p, size });
            }
        }
    }
    Ok(facts)
}

/// Builds the engine's executables for a track into `target/build/<track>` (its own
/// target dir, so CMake caches of different tracks never mix) with the track's build
/// spec (target triple, features, environment: data in tracks.toml), and returns the
/// folders holding the executables, the ggml libraries and the backend plugins.
fn build_binaries(track_name: &str, track: &Track) -> Result<Vec<PathBuf>> {
    let host_os = if cfg!(windows) {
        Os::Windows
    } else {
        Os::Linux
    };
    if track.os != host_os && track.build.target.is_none() {
        bail!(
            "track {track_name} is for {:?} and has no cross target; build on a matching host and pass --bin-dir",
            track.os
        );
    }
    let tdir = target_dir().join("build").join(track_name);
    let features: Vec<String> = track
        .build
        .features
        .iter()
        .flat_map(|f| [format!("audiocpp-cli/{f}"), format!("audiocpp-server/{f}")])
        .collect();
    eprintln!(
        "dist: building {track_name} into {} (features {})",
        tdir.display(),
        features.join(",")
    );
    let release = match &track.build.target {
        Some(t) => tdir.join(t).join("release"),
        None => tdir.join("release"),
    };
    remove_dangling_links(&release)?;
    let mut cmd = crate::test::cargo();
    cmd.current_dir(project_root())
        .env("CARGO_TARGET_DIR", &tdir)
        .envs(&track.build.env)
        .args([
            "build",
            "--release",
            "-p",
            "audiocpp-cli",
            "-p",
            "audiocpp-server",
        ]);
    if !features.is_empty() {
        cmd.arg("--features").arg(features.join(","));
    }
    if let Some(t) = &track.build.target {
        cmd.args(["--target", t]);
    }
    let status = cmd.status().context("running cargo build")?;
    if !status.success() {
        bail!("cargo build for track {track_name} failed");
    }
    let mut dirs = vec![release.clone()];
    if let Some(out) = newest_binding_out(&release.join("build"))? {
        dirs.push(out.join("lib"));
        dirs.push(out.join("backends"));
    }
    Ok(dirs)
}

/// The binding hard-links its shared libraries (symlinks included, which then dangle)
/// into the profile folder and its `deps/` and `examples/`, and on a rebuild panics on
/// the dangling links it left there before (`!exists()` then `hard_link` -> EEXIST);
/// remove them first. Only this track's own target folder is touched.
fn remove_dangling_links(release: &Path) -> Result<()> {
    for dir in [
        release.to_path_buf(),
        release.join("deps"),
        release.join("examples"),
    ] {
        remove_dangling_links_in(&dir)?;
    }
    Ok(())
}

fn remove_dangling_links_in(dir: &Path) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for e in entries.flatten() {
        let p = e.path();
        let is_link = std::fs::symlink_metadata(&p)
            .map(|m| m.file_type().is_symlink())
            .unwrap_or(false);
        if is_link && std::fs::metadata(&p).is_err() {
            std::fs::remove_file(&p)
                .with_context(|| format!("removing the dangling link {}", p.display()))?;
        }
    }
    Ok(())
}

/// The binding's `out` folder of the most recent dynamic-backends build (its `lib/`
/// holds the ggml shared libraries, `backends/` the backend plugins).
fn newest_binding_out(build: &Path) -> Result<Option<PathBuf>> {
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    if !build.is_dir() {
        return Ok(None);
    }
    for e in std::fs::read_dir(build)? {
        let e = e?;
        if !e
            .file_name()
            .to_string_lossy()
            .starts_with("llama-cpp-sys-2-")
        {
            continue;
        }
        let out = e.path().join("out");
        let backends = out.join("backends");
        if let Ok(m) = std::fs::metadata(&backends) {
            let has_files = std::fs::read_dir(&backends)
                .map(|mut r| r.next().is_some())
                .unwrap_or(false);
            let t = m.modified()?;
            if has_files && best.as_ref().is_none_or(|(bt, _)| t > *bt) {
                best = Some((t, out));
            }
        }
    }
    Ok(best.map(|(_, d)| d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_targets_narrow_the_track_and_its_known_gaps() {
        let tracks = TracksFile::load(&TracksFile::default_path()).unwrap();
        let mut t = tracks.track("linux-hip-rocm6").unwrap().clone();
        narrow_targets("linux-hip-rocm6", &mut t, "gfx1100, gfx1151").unwrap();
        assert_eq!(t.gpu_targets, vec!["gfx1100", "gfx1151"]);
        assert_eq!(t.uncovered_targets, vec!["gfx1151"]);
        let mut t = tracks.track("linux-hip-rocm6").unwrap().clone();
        let err = narrow_targets("linux-hip-rocm6", &mut t, "gfx942").unwrap_err();
        assert!(
            err.to_string()
                .contains("has no such target (it has gfx1100"),
            "{err}"
        );
        assert!(narrow_targets("linux-hip-rocm6", &mut t, " , ").is_err());
    }
}
