//! The doing half of `dist`: stage the planned files atomically under the output folder,
//! write README.md, verify the dependency closure (a violation means no zip), write
//! manifest.json, the reproducible zip, `<zip>.sha256`, SHA256SUMS and the size table.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use super::archive::{self, ZipEntry};
use super::notices;
use super::plan::{DistPlan, Role};
use crate::assets::sha256_file;
use crate::kernels::filter::FilterPlan;
use crate::pe_header::PeHeader;
use crate::project::project_root;
use crate::tracks::{Os, Track, TracksFile};
use crate::verify_deps::{self, Policy};

/// What `execute` needs besides the plan.
pub struct PackageContext<'a> {
    /// The tracks file (for the dependency policy).
    pub tracks_path: &'a Path,
    /// Its contents.
    pub tracks: &'a TracksFile,
    /// The track being packaged.
    pub track: &'a Track,
    /// Output folder (`target/dist`).
    pub out_dir: &'a Path,
    /// The kernel filter decision, if any.
    pub kernels: Option<&'a FilterPlan>,
    /// `--allow-uncovered` was given.
    pub allow_uncovered: bool,
    /// The MSVC toolset the build captured (`14.44.35207`), when `dist` built the
    /// binaries itself: recorded in the manifest instead of the track's pin.
    pub built_toolset: Option<String>,
}

/// One file in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestFile {
    /// Path inside the package root.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256, lower-case hex.
    pub sha256: String,
    /// What it is.
    pub role: String,
}

/// One GEMM kernel folder of a package, as the manifest records it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GemmKernels {
    /// The library (`hipblaslt`, `rocblas`).
    pub library: String,
    /// The folder, relative to the package root (`hipblaslt/library`).
    pub folder: String,
    /// The targets with a lazy index in it.
    pub covered: Vec<String>,
}

/// `manifest.json`: what was built, from what, and every file with its hash.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    /// Schema version of this file.
    pub schema: u32,
    /// Package name (and root folder).
    pub package: String,
    /// Track name.
    pub track: String,
    /// audiocpp version.
    pub version: String,
    /// Git commit of the sources.
    pub git_commit: String,
    /// Timestamp used for every zip entry.
    pub source_date_epoch: i64,
    /// SDK kind and version, for GPU tracks.
    pub sdk: Option<String>,
    /// C/C++ toolset the track pins.
    pub toolset: Option<String>,
    /// GPU targets.
    pub gpu_targets: Vec<String>,
    /// Targets without GEMM kernels that were shipped anyway, with why.
    pub uncovered: Vec<String>,
    /// `--allow-uncovered` was given.
    pub allow_uncovered: bool,
    /// The GEMM kernel folders in the package and the targets each has kernels for: the
    /// engine's start-up guard refuses a GPU they do not cover instead of letting the
    /// GEMM library end the process at the first product.
    #[serde(default)]
    pub gemm_kernels: Vec<GemmKernels>,
    /// The guard's advice for an uncovered GPU (tracks.toml `uncovered_advice`).
    #[serde(default)]
    pub uncovered_advice: Option<String>,
    /// What the track declares as coming only from a real SDK and this package lacks
    /// (runtime file names, kernel folders ending in `/`); verify-package checks it.
    #[serde(default)]
    pub absent_sdk_only: Vec<String>,
    /// Every file but the manifest itself.
    pub files: Vec<ManifestFile>,
    /// The verified dependency report (tree and findings).
    pub dependencies: serde_json::Value,
}

/// What `execute` made.
pub struct PackageResult {
    /// The unpacked package folder.
    pub dir: PathBuf,
    /// The zip.
    pub zip: PathBuf,
    /// The printed size table.
    pub size_table: String,
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .current_dir(project_root())
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// SOURCE_DATE_EPOCH, else the commit time, else 1980-01-01.
pub fn source_date_epoch() -> i64 {
    std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .or_else(|| git(&["log", "-1", "--format=%ct"]).and_then(|v| v.parse().ok()))
        .unwrap_or(315_532_800)
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

fn is_executable_entry(role: Role, os: Os) -> bool {
    os == Os::Linux
        && matches!(
            role,
            Role::Executable | Role::GgmlLibrary | Role::Runtime | Role::RuntimeLoaded | Role::Crt
        )
}

/// Renders README.md from `packaging/readme/package.md`.
pub fn render_readme(track: &Track, plan: &DistPlan, commit: &str) -> Result<String> {
    let template_path = project_root().join("packaging/readme/package.md");
    let template = std::fs::read_to_string(&template_path)
        .with_context(|| format!("reading {}", template_path.display()))?;
    let (cli, server) = match track.os {
        Os::Windows => ("audiocpp_cli.exe", "audiocpp_server.exe"),
        Os::Linux => ("./audiocpp_cli", "./audiocpp_server"),
    };
    let backend = serde_json::to_value(track.backend)?
        .as_str()
        .unwrap_or("cpu")
        .to_string();
    let backend_note = if track.backend == crate::tracks::Backend::Cpu {
        "This package runs on the CPU; the best CPU code for the machine is picked at start."
            .to_string()
    } else if track.gpu_targets.is_empty() {
        // Vulkan: no kernels compiled per GPU; the driver compiles the shaders.
        format!(
            "`--backend {backend}` runs on the GPU through its driver; the driver compiles the shaders for the GPU it has. \
             If no Vulkan driver answers (or none is installed), `--backend cpu` still works."
        )
    } else {
        let alias = if track.backend == crate::tracks::Backend::Hip {
            " (`--backend rocm` is the same)"
        } else {
            ""
        };
        format!(
            "`--backend {backend}` runs on the GPU{alias}; GPU targets: {}. \
             If the GPU runtime cannot start (old driver, unsupported GPU), `--backend cpu` still works.",
            track.gpu_targets.join(", ")
        )
    };
    let mut lines: Vec<String> = track
        .readme_notes
        .iter()
        .map(|n| format!("- {n}"))
        .collect();
    if !plan.absent_sdk_only.is_empty() {
        lines.push(format!(
            "- Not in this package, because they come only from a real ROCm SDK (a package built with `--rocm-path` carries them): {}.",
            plan.absent_sdk_only.join(", ")
        ));
    }
    let notes = if lines.is_empty() {
        "- None.".to_string()
    } else {
        lines.join("\n")
    };
    let rows = plan
        .bytes_by_role()
        .iter()
        .filter(|(r, _)| **r != Role::Document)
        .map(|(r, (n, b))| format!("| {} | {n} | {} |", r.label(), mb(*b)))
        .collect::<Vec<_>>()
        .join("\n");
    Ok(template
        .replace("{{package}}", &plan.package)
        .replace("{{description}}", &track.description)
        .replace("{{version}}", env!("CARGO_PKG_VERSION"))
        .replace("{{commit}}", commit)
        .replace("{{cli}}", cli)
        .replace("{{server}}", server)
        .replace("{{backend}}", &backend)
        .replace("{{backend_note}}", &backend_note)
        .replace("{{notes}}", &notes)
        .replace("{{size_rows}}", &rows))
}

fn place(src: &Path, dst: &Path) -> Result<()> {
    if let Some(p) = dst.parent() {
        std::fs::create_dir_all(p)?;
    }
    if std::fs::hard_link(src, dst).is_err() {
        std::fs::copy(src, dst)
            .with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
    }
    Ok(())
}

/// Copies `src` (never a hard link: the SDK's file must stay as it is) and gives the copy
/// the RUNPATH `runpath` with patchelf.
fn set_runpath_on_copy(src: &Path, dst: &Path, runpath: &str) -> Result<()> {
    if let Some(p) = dst.parent() {
        std::fs::create_dir_all(p)?;
    }
    std::fs::copy(src, dst)
        .with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
    let status = Command::new("patchelf")
        .arg("--set-rpath")
        .arg(runpath)
        .arg(dst)
        .status()
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot run patchelf ({e}) to set the RUNPATH {runpath} of {}; install it with `apt-get install patchelf`",
                dst.display()
            )
        })?;
    if !status.success() {
        bail!(
            "patchelf --set-rpath {runpath} {} failed ({status})",
            dst.display()
        );
    }
    Ok(())
}

/// A strip run that `tracks.toml` asks for when a file is staged.
#[derive(Debug, Clone, Copy)]
struct Strip<'a> {
    /// The tool (`x86_64-w64-mingw32-strip`).
    tool: &'a str,
    /// What it removes (`--strip-debug`, `--strip-all`).
    flag: &'static str,
    /// The tracks.toml key that names the tool, for the error.
    key: &'static str,
    /// What is taken out, for the error.
    what: &'static str,
}

impl Strip<'_> {
    /// The Debian package that provides the tool.
    fn apt_package(&self) -> &'static str {
        if self.tool.starts_with("x86_64-w64-mingw32-") {
            "binutils-mingw-w64-x86-64"
        } else {
            "binutils"
        }
    }
}

/// Copies `src` to `dst` with `strip.tool --preserve-dates strip.flag` (the source stays
/// as it is); on failure nothing is left at `dst`.
///
/// The copy is the same bytes whenever it is made (docs/architecture.md section 4, rule
/// 8). Binutils writes a PE image's header anew, and of what it writes only two fields
/// depend on more than the input: without `--preserve-dates` it stamps TimeDateStamp
/// with SOURCE_DATE_EPOCH or else the time of the run, and the CheckSum it computes over
/// the image changes with that. `--preserve-dates` has it keep the input's time stamp
/// (and the file times, which the zip does not record), so a stripped `.exe` or DLL
/// says the link time of the file it came from, as the DLL's export table (which strip
/// leaves alone) still does, and an unchanged input gives an unchanged copy whatever the
/// commit or the clock. The checksum then follows from the bytes. Both are checked on
/// the copy ([`pe_header_kept`]); an ELF file has no time stamp.
fn strip_on_copy(src: &Path, dst: &Path, strip: Strip<'_>) -> Result<()> {
    if let Some(p) = dst.parent() {
        std::fs::create_dir_all(p)?;
    }
    let tool = strip.tool;
    let output = Command::new(tool)
        .arg("--preserve-dates")
        .arg(strip.flag)
        .arg("-o")
        .arg(dst)
        .arg(src)
        .output()
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot run {tool} ({e}) to stage {} without its {} ({} in packaging/tracks.toml); install it with `apt-get install {}`",
                src.display(),
                strip.what,
                strip.key,
                strip.apt_package()
            )
        })?;
    if !output.status.success() {
        let _ = std::fs::remove_file(dst);
        bail!(
            "{tool} --preserve-dates {} -o {} {} failed ({}): {}",
            strip.flag,
            dst.display(),
            src.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    pe_header_kept(src, dst, strip).inspect_err(|_| {
        let _ = std::fs::remove_file(dst);
    })
}

/// Checks that `dst`, which `strip` made from `src`, has a PE header that follows from its
/// input: the input's time stamp, and a checksum that is none (0) or the image's own.
/// Nothing to check when `src` is not a PE image.
fn pe_header_kept(src: &Path, dst: &Path, strip: Strip<'_>) -> Result<()> {
    let read = |path: &Path| -> Result<Option<PeHeader>> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        PeHeader::read(&bytes, &path.display().to_string())
    };
    let Some(input) = read(src)? else {
        return Ok(());
    };
    let Some(copy) = read(dst)? else {
        bail!(
            "{} made {} from the PE image {}, but it is not one",
            strip.tool,
            dst.display(),
            src.display()
        );
    };
    let remedy = format!(
        "a package made twice must be the same bytes; {} in packaging/tracks.toml names the tool: use GNU binutils' (`apt-get install {}`)",
        strip.key,
        strip.apt_package()
    );
    if copy.time_date_stamp != input.time_date_stamp {
        bail!(
            "{} --preserve-dates wrote the PE time stamp {} into {}, not its input's {} ({}): {remedy}",
            strip.tool,
            copy.time_date_stamp,
            dst.display(),
            input.time_date_stamp,
            src.display()
        );
    }
    if !copy.check_sum_is_consistent() {
        bail!(
            "{} wrote the PE checksum {:#x} into {}, neither 0 nor the image's own {:#x}: {remedy}",
            strip.tool,
            copy.check_sum,
            dst.display(),
            copy.computed_check_sum
        );
    }
    Ok(())
}

/// `plan` with each file's size as staged under `stage` (a stripped file is smaller than
/// its source), for the README's and the printed size tables.
fn with_staged_sizes(plan: &DistPlan, stage: &Path) -> Result<DistPlan> {
    let mut staged = plan.clone();
    for f in &mut staged.files {
        let path = stage.join(&f.dest);
        f.size = std::fs::metadata(&path)
            .with_context(|| format!("reading the staged {}", path.display()))?
            .len();
    }
    Ok(staged)
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = if std::env::var_os("CI").is_some() {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(len)
    };
    pb.set_style(
        ProgressStyle::with_template("{msg:>10} [{bar:40}] {bytes}/{total_bytes} ({eta})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

/// Performs the plan. Nothing is written outside `out_dir`; on failure the staging
/// folder is removed and a previous package of the same name is left as it was.
pub fn execute(plan: &DistPlan, ctx: &PackageContext<'_>) -> Result<PackageResult> {
    std::fs::create_dir_all(ctx.out_dir)
        .with_context(|| format!("creating {}", ctx.out_dir.display()))?;
    let staging_root = ctx.out_dir.join(format!(".staging-{}", plan.package));
    let _ = std::fs::remove_dir_all(&staging_root);
    let result = stage_verify_zip(plan, ctx, &staging_root);
    let _ = std::fs::remove_dir_all(&staging_root);
    result
}

fn stage_verify_zip(
    plan: &DistPlan,
    ctx: &PackageContext<'_>,
    staging_root: &Path,
) -> Result<PackageResult> {
    let stage = staging_root.join(&plan.package);
    let t = Instant::now();
    let total: u64 = plan.files.iter().map(|f| f.size).sum();
    let pb = bar(total, "copy");
    let strip_crt = ctx
        .track
        .crt
        .as_ref()
        .and_then(|c| c.strip_debug.as_deref())
        .map(|tool| Strip {
            tool,
            flag: "--strip-debug",
            key: "crt.strip_debug",
            what: "debug sections",
        });
    let strip_executables = ctx.track.strip_executables.as_deref().map(|tool| Strip {
        tool,
        flag: "--strip-all",
        key: "strip_executables",
        what: "symbol table",
    });
    for f in &plan.files {
        let dst = stage.join(&f.dest);
        let strip = match f.role {
            Role::Crt => strip_crt,
            Role::Executable => strip_executables,
            _ => None,
        };
        match (&ctx.track.runtime_runpath, f.role, strip) {
            (Some(runpath), Role::Runtime | Role::RuntimeLoaded, _) => {
                set_runpath_on_copy(&f.src, &dst, runpath)?
            }
            (_, _, Some(strip)) => strip_on_copy(&f.src, &dst, strip)?,
            _ => place(&f.src, &dst)?,
        }
        pb.inc(f.size);
    }
    pb.finish_and_clear();
    let plan = &with_staged_sizes(plan, &stage)?;

    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let readme = render_readme(ctx.track, plan, &commit)?;
    std::fs::write(stage.join("README.md"), &readme)?;
    let triple = ctx
        .track
        .build
        .target
        .clone()
        .unwrap_or_else(|| crate::build::plan::default_triple(ctx.track.os, ctx.track.arch));
    let notices = notices::write(
        &crate::project::project_root(),
        &triple,
        &ctx.track.executables,
        &plan.package,
        &stage.join(notices::FILE_NAME),
    )
    .context("writing the third-party notices")?;
    for name in notices::OWN_LICENCES {
        let src = crate::project::project_root().join(name);
        std::fs::copy(&src, stage.join(name))
            .with_context(|| format!("copying the project's licence {}", src.display()))?;
    }

    let policy = Policy::new(ctx.tracks, ctx.tracks_path, Some(&plan.track))
        .with_context(|| format!("loading the dependency policy for {}", plan.track))?;
    eprintln!(
        "dist: step time {:.1} s: staging the files",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let reports = verify_deps::verify(std::slice::from_ref(&stage), &policy)?;
    let report = reports.first().context("verify-deps gave no report")?;
    eprintln!(
        "dist: step time {:.1} s: the dependency check",
        t.elapsed().as_secs_f64()
    );
    if !report.passed() {
        eprint!("{}", report.render_text());
        bail!(
            "the staged package of track {} fails the dependency check; nothing was zipped",
            plan.track
        );
    }

    let mut files: Vec<ManifestFile> = Vec::new();
    for f in &plan.files {
        files.push(ManifestFile {
            path: f.dest.clone(),
            size: std::fs::metadata(stage.join(&f.dest))?.len(),
            sha256: sha256_file(&stage.join(&f.dest))?,
            role: serde_json::to_value(f.role)?
                .as_str()
                .unwrap_or_default()
                .to_string(),
        });
    }
    files.push(ManifestFile {
        path: "README.md".into(),
        size: readme.len() as u64,
        sha256: sha256_file(&stage.join("README.md"))?,
        role: "document".into(),
    });
    files.push(ManifestFile {
        path: notices::FILE_NAME.into(),
        size: notices.len() as u64,
        sha256: sha256_file(&stage.join(notices::FILE_NAME))?,
        role: "document".into(),
    });
    for name in notices::OWN_LICENCES {
        files.push(ManifestFile {
            path: name.into(),
            size: std::fs::metadata(stage.join(name))?.len(),
            sha256: sha256_file(&stage.join(name))?,
            role: "document".into(),
        });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let epoch = source_date_epoch();
    let manifest = Manifest {
        schema: 1,
        package: plan.package.clone(),
        track: plan.track.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        git_commit: commit,
        source_date_epoch: epoch,
        sdk: ctx
            .track
            .sdk
            .as_ref()
            .map(|s| format!("{:?} {}", s.kind, s.version).to_lowercase()),
        toolset: match &ctx.built_toolset {
            Some(v) => Some(format!("Msvc {v}")),
            None => ctx
                .track
                .crt
                .as_ref()
                .map(|c| format!("{:?} {}", c.kind, c.toolset)),
        },
        gpu_targets: ctx.track.gpu_targets.clone(),
        uncovered: ctx
            .kernels
            .map(|k| {
                k.uncovered
                    .iter()
                    .map(|u| format!("{} ({}): {}", u.target, u.library, u.reason))
                    .collect()
            })
            .unwrap_or_default(),
        allow_uncovered: ctx.allow_uncovered,
        gemm_kernels: gemm_kernels(ctx),
        uncovered_advice: ctx.track.uncovered_advice.clone(),
        absent_sdk_only: plan.absent_sdk_only.clone(),
        files,
        dependencies: {
            // The walk names the package by the folder it read, which is the staging folder
            // under --out: the manifest names it by the package's own name, so the bytes of
            // the zip do not depend on where it was made.
            let mut report = report.clone();
            report.package = plan.package.clone();
            serde_json::to_value(&report)?
        },
    };
    std::fs::write(
        stage.join("manifest.json"),
        serde_json::to_string_pretty(&manifest)? + "\n",
    )?;

    let mut entries: Vec<ZipEntry> = plan
        .files
        .iter()
        .map(|f| ZipEntry {
            name: format!("{}/{}", plan.package, f.dest),
            src: stage.join(&f.dest),
            executable: is_executable_entry(f.role, ctx.track.os),
        })
        .collect();
    let documents = ["README.md", notices::FILE_NAME, "manifest.json"];
    for doc in documents.into_iter().chain(notices::OWN_LICENCES) {
        entries.push(ZipEntry {
            name: format!("{}/{doc}", plan.package),
            src: stage.join(doc),
            executable: false,
        });
    }
    let zip_path = ctx.out_dir.join(format!("{}.zip", plan.package));
    let staged_bytes: u64 = entries
        .iter()
        .map(|e| std::fs::metadata(&e.src).map(|m| m.len()).unwrap_or(0))
        .sum();
    let t = Instant::now();
    let pb = bar(staged_bytes, "zip");
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    archive::write_zip(
        &entries,
        &zip_path,
        archive::zip_time(epoch),
        threads,
        &|n| pb.inc(n),
    )?;
    pb.finish_and_clear();
    let zip_sha = sha256_file(&zip_path)?;
    let zip_name = format!("{}.zip", plan.package);
    std::fs::write(
        ctx.out_dir.join(format!("{zip_name}.sha256")),
        format!("{zip_sha}  {zip_name}\n"),
    )?;
    write_sha256sums(ctx.out_dir)?;
    eprintln!(
        "dist: step time {:.1} s: the zip and its checksums",
        t.elapsed().as_secs_f64()
    );

    let final_dir = ctx.out_dir.join(&plan.package);
    let _ = std::fs::remove_dir_all(&final_dir);
    std::fs::rename(&stage, &final_dir)
        .with_context(|| format!("moving the package to {}", final_dir.display()))?;

    let zip_size = std::fs::metadata(&zip_path)?.len();
    let mut table = format!(
        "\n{} ({})\n{:<40} {:>6} {:>12}\n",
        zip_path.display(),
        plan.track,
        "part",
        "files",
        "size"
    );
    let mut by_role = plan.bytes_by_role();
    let doc_bytes = readme.len() as u64
        + notices.len() as u64
        + std::fs::metadata(final_dir.join("manifest.json"))?.len();
    by_role.insert(Role::Document, (3, doc_bytes));
    let (mut n_all, mut b_all) = (0, 0);
    for (role, (n, b)) in &by_role {
        table.push_str(&format!("{:<40} {:>6} {:>12}\n", role.label(), n, mb(*b)));
        n_all += n;
        b_all += b;
    }
    table.push_str(&format!("{:<40} {:>6} {:>12}\n", "total", n_all, mb(b_all)));
    table.push_str(&format!("{:<40} {:>6} {:>12}\n", "zip", "", mb(zip_size)));
    if plan.kernels_dropped.0 > 0 {
        table.push_str(&format!(
            "{:<40} {:>6} {:>12}\n",
            "kernel files left out (other GPUs)",
            plan.kernels_dropped.0,
            mb(plan.kernels_dropped.1)
        ));
    }
    table.push_str(&format!("sha256 {zip_sha}\n"));
    Ok(PackageResult {
        dir: final_dir,
        zip: zip_path,
        size_table: table,
    })
}

/// Rewrites SHA256SUMS from every `*.zip.sha256` in the output folder.
fn write_sha256sums(out_dir: &Path) -> Result<()> {
    let mut lines = BTreeMap::new();
    for e in std::fs::read_dir(out_dir)? {
        let p = e?.path();
        let name = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".zip.sha256") {
            lines.insert(name, std::fs::read_to_string(&p)?);
        }
    }
    let text: String = lines.into_values().collect();
    std::fs::write(out_dir.join("SHA256SUMS"), text)?;
    Ok(())
}

/// The manifest's record of the kernel folders: each shipped library's package folder and
/// the targets its lazy indexes cover (from the filter plan, i.e. the SDK's real files).
fn gemm_kernels(ctx: &PackageContext) -> Vec<GemmKernels> {
    let Some(plan) = ctx.kernels else {
        return Vec::new();
    };
    plan.libraries
        .iter()
        .filter_map(|lib| {
            let declared = ctx
                .track
                .kernel_libraries
                .iter()
                .find(|d| d.name == lib.kind.dir_name())?;
            Some(GemmKernels {
                library: declared.name.clone(),
                folder: declared.dest.trim_end_matches('/').to_string(),
                covered: lib
                    .coverage
                    .iter()
                    .filter(|c| c.lazy_index.is_some())
                    .map(|c| c.target.clone())
                    .collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::debugger_only::test_programs::tiny_program;

    /// The CRT's strip run, as `stage_verify_zip` makes it for the MinGW tracks.
    const STRIP_CRT: Strip<'static> = Strip {
        tool: "x86_64-w64-mingw32-strip",
        flag: "--strip-debug",
        key: "crt.strip_debug",
        what: "debug sections",
    };

    #[test]
    fn a_missing_strip_tool_names_the_key_and_the_package_and_stages_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("libstdc++-6.dll");
        std::fs::write(&src, b"MZ").unwrap();
        let dst = dir.path().join("stage/libstdc++-6.dll");
        let e = strip_on_copy(
            &src,
            &dst,
            Strip {
                tool: "x86_64-w64-mingw32-audiocpp-no-such-strip",
                ..STRIP_CRT
            },
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("debug sections (crt.strip_debug in packaging/tracks.toml)"),
            "{e}"
        );
        assert!(
            e.contains("apt-get install binutils-mingw-w64-x86-64"),
            "{e}"
        );
        assert!(!dst.exists());
        let e = strip_on_copy(
            &src,
            &dst,
            Strip {
                tool: "audiocpp-no-such-strip",
                flag: "--strip-all",
                key: "strip_executables",
                what: "symbol table",
            },
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("symbol table (strip_executables in packaging/tracks.toml)"),
            "{e}"
        );
        assert!(e.ends_with("`apt-get install binutils`"), "{e}");
        assert!(!dst.exists());
    }

    #[test]
    fn a_file_strip_refuses_is_not_left_half_written() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("not-a-pe.dll");
        std::fs::write(&src, b"not a PE file").unwrap();
        let dst = dir.path().join("stage/not-a-pe.dll");
        let e = strip_on_copy(&src, &dst, STRIP_CRT)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--strip-debug"), "{e}");
        assert!(!dst.exists());
    }

    /// The executables' strip run on the MinGW tracks.
    const STRIP_ALL_MINGW: Strip<'static> = Strip {
        tool: "x86_64-w64-mingw32-strip",
        flag: "--strip-all",
        key: "strip_executables",
        what: "symbol table",
    };

    /// A link time far from any test run's (2020-09-13).
    const LINKED: u32 = 1_600_000_000;

    /// A MinGW program in `dir` whose header says it was linked at [`LINKED`].
    fn linked_program(dir: &Path) -> PathBuf {
        let exe = tiny_program("x86_64-w64-mingw32-gcc", dir, "tiny.exe");
        let mut bytes = std::fs::read(&exe).unwrap();
        let pe = u32::from_le_bytes(bytes[0x3c..0x40].try_into().unwrap()) as usize;
        bytes[pe + 8..pe + 12].copy_from_slice(&LINKED.to_le_bytes());
        std::fs::write(&exe, bytes).unwrap();
        exe
    }

    fn header(path: &Path) -> PeHeader {
        PeHeader::read(&std::fs::read(path).unwrap(), "test image")
            .unwrap()
            .unwrap()
    }

    /// `x86_64-w64-mingw32-strip --strip-all` of `src` into `dst` as binutils does it
    /// when told nothing more, with `env` set.
    fn plain_strip(src: &Path, dst: &Path, extra: &[&str], env: Option<&str>) {
        let mut c = Command::new(STRIP_ALL_MINGW.tool);
        c.args(extra).args(["--strip-all", "-o"]).arg(dst).arg(src);
        match env {
            Some(epoch) => c.env("SOURCE_DATE_EPOCH", epoch),
            None => c.env_remove("SOURCE_DATE_EPOCH"),
        };
        assert!(c.status().unwrap().success());
    }

    #[test]
    fn a_stripped_pe_keeps_its_inputs_time_stamp_and_carries_its_own_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let exe = linked_program(dir.path());
        let kept = dir.path().join("stage/kept.exe");
        strip_on_copy(&exe, &kept, STRIP_ALL_MINGW).unwrap();
        let h = header(&kept);
        assert_eq!(h.time_date_stamp, LINKED);
        assert_ne!(h.check_sum, 0, "strip writes a checksum");
        assert_eq!(h.check_sum, h.computed_check_sum, "of the image it wrote");

        // What binutils does on its own: the time of the run, else SOURCE_DATE_EPOCH;
        // with --preserve-dates the input's time stamp whatever SOURCE_DATE_EPOCH says.
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let now = dir.path().join("now.exe");
        plain_strip(&exe, &now, &[], None);
        assert!(u64::from(header(&now).time_date_stamp) >= before);
        let epoch = dir.path().join("epoch.exe");
        plain_strip(&exe, &epoch, &[], Some("1700000000"));
        assert_eq!(header(&epoch).time_date_stamp, 1_700_000_000);
        let preserved = dir.path().join("preserved.exe");
        plain_strip(&exe, &preserved, &["--preserve-dates"], Some("1700000000"));
        assert_eq!(
            std::fs::read(&preserved).unwrap(),
            std::fs::read(&kept).unwrap()
        );

        // A copy stamped otherwise, or with a checksum its bytes do not give, is refused.
        let e = pe_header_kept(&exe, &now, STRIP_ALL_MINGW)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("not its input's {LINKED}")), "{e}");
        assert!(
            e.contains("strip_executables in packaging/tracks.toml"),
            "{e}"
        );
        let mut bytes = std::fs::read(&kept).unwrap();
        let pe = u32::from_le_bytes(bytes[0x3c..0x40].try_into().unwrap()) as usize;
        bytes[pe + 88] ^= 1;
        let wrong = dir.path().join("wrong.exe");
        std::fs::write(&wrong, bytes).unwrap();
        let e = pe_header_kept(&exe, &wrong, STRIP_ALL_MINGW)
            .unwrap_err()
            .to_string();
        assert!(e.contains("neither 0 nor the image's own"), "{e}");
    }

    #[test]
    fn an_elf_file_is_stripped_with_nothing_to_keep() {
        let dir = tempfile::tempdir().unwrap();
        let prog = tiny_program("cc", dir.path(), "tiny");
        let dst = dir.path().join("stage/tiny");
        let strip = Strip {
            tool: "strip",
            ..STRIP_ALL_MINGW
        };
        strip_on_copy(&prog, &dst, strip).unwrap();
        assert!(std::fs::read(&dst).unwrap().starts_with(b"\x7fELF"));
    }
}
