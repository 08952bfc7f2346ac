//! `cargo xtask dist`: build (or take prebuilt) binaries, collect the track's runtime
//! files and filtered kernel libraries, verify the dependency closure, and write a
//! reproducible zip with its checksums, README, manifest and size table.
//!
//! Deciding and doing are apart: the binaries are built by `build`'s planner and executor
//! ([`crate::build::plan()`], [`crate::build::execute`]) from the track's
//! `[tracks.NAME.build]` recipe, and packaged from the build record the executor wrote;
//! [`plan::plan`] is pure; this module gathers facts from the disk and [`package`]
//! performs the plan.

pub mod archive;
pub mod fixtures;
pub mod notices;
pub mod package;
pub mod plan;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use crate::context::RunContext;
use crate::kernels::filter::{self as kfilter, CoverageNotes};
use crate::project::target_dir;
use crate::tracks::{SdkKind, Track};
use plan::{DistFacts, FoundFile};

/// Flags of `cargo xtask dist`, or of its `chroot SUITE` sub-verb (see [`Mode`]): the
/// flags are global, so `dist chroot sid --track T` reads as `dist --track T chroot sid`.
#[derive(Debug, Default, clap::Args)]
pub struct Args {
    /// Where to package instead of here.
    #[command(subcommand)]
    pub verb: Option<Verb>,
    /// Track to package (see packaging/tracks.toml); default: this host's CPU track.
    #[arg(long, global = true)]
    pub track: Option<String>,
    /// Package prebuilt binaries from this folder instead of building; repeat it for a
    /// dynamic-backends build whose libraries and plugins lie in several folders.
    #[arg(long, global = true)]
    pub bin_dir: Vec<PathBuf>,
    /// SDK root for HIP tracks (default: HIP_PATH / ROCM_PATH).
    #[arg(long, global = true)]
    pub rocm_path: Option<PathBuf>,
    /// CUDA toolkit root for CUDA tracks (default: CUDA_PATH).
    #[arg(long, global = true)]
    pub cuda_path: Option<PathBuf>,
    /// Folder with the toolchain runtime files the track declares (MSVC CRT redist folder).
    #[arg(long, global = true)]
    pub crt_dir: Option<PathBuf>,
    /// Where packages go.
    #[arg(long, global = true)]
    pub out_dir: Option<PathBuf>,
    /// Ship targets whose GEMM kernels are missing (recorded in the manifest).
    #[arg(long, global = true)]
    pub allow_uncovered: bool,
    /// Package only these of the track's GPU targets (comma-separated), for binaries
    /// built with `build --gpu-targets`; recorded as the package's targets.
    #[arg(long, value_name = "LIST", global = true)]
    pub gpu_targets: Option<String>,
    /// Old spelling of `dist chroot SUITE`.
    #[arg(long, value_name = "SUITE", hide = true)]
    pub chroot: Option<String>,
    /// Print the plan (the build's commands and environment, then the package's files)
    /// and change nothing.
    #[arg(long, global = true)]
    pub dry_run: bool,
    /// Plan the build against facts recorded on the build machine (`cargo xtask doctor
    /// --save-facts FILE`), e.g. a Windows track on Linux; needs --dry-run. The build then
    /// uses the SDK recorded there; --rocm-path / --cuda-path name the SDK whose files
    /// are listed for the package.
    #[arg(long, value_name = "FILE", requires = "dry_run", global = true)]
    pub facts: Option<PathBuf>,
    /// Tracks file (default: packaging/tracks.toml).
    #[arg(long, global = true)]
    pub tracks_file: Option<PathBuf>,
}

/// The sub-verbs of `cargo xtask dist`.
#[derive(Debug, clap::Subcommand)]
pub enum Verb {
    /// Package inside the Debian chroot of SUITE (`cargo xtask sdk debian --suite SUITE`),
    /// from its ROCm SDK: the same xtask re-runs there with the same flags; the package
    /// lands in <target>/chroot-SUITE/dist.
    Chroot {
        /// The chroot's Debian suite (a suite of packaging/sdk/debian.toml).
        #[arg(value_name = "SUITE")]
        suite: String,
    },
}

/// What `cargo xtask dist` was asked to do, decided from the flags before anything runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Build and package here.
    Package,
    /// `dist chroot SUITE` (old: `--chroot SUITE`): re-run inside that chroot.
    Chroot { suite: String },
}

impl Args {
    /// The mode the sub-verb (or its old flag) names; both at once are an error.
    pub fn mode(&self) -> Result<Mode> {
        match (&self.verb, &self.chroot) {
            (Some(Verb::Chroot { .. }), Some(_)) => {
                bail!("dist was given both `chroot SUITE` and its old spelling `--chroot SUITE`; give one")
            }
            (Some(Verb::Chroot { suite }), None) | (None, Some(suite)) => Ok(Mode::Chroot {
                suite: suite.clone(),
            }),
            (None, None) => Ok(Mode::Package),
        }
    }
}

/// The arguments of this `dist` run (`dist ...`, the process's own) without the chroot it
/// was told to run in: without `--chroot SUITE` and without the sub-verb `chroot SUITE`,
/// which are the first two positional arguments after `dist` (a flag's value is not one).
pub fn args_inside_chroot(args: impl Iterator<Item = String>) -> Vec<String> {
    let cmd = <Args as clap::Args>::augment_args(clap::Command::new("dist"));
    let takes_value = |a: &str| {
        cmd.get_arguments().any(|arg| {
            arg.get_long().is_some_and(|l| a == format!("--{l}")) && arg.get_action().takes_values()
        })
    };
    let mut out = Vec::new();
    let (mut positionals, mut value_next, mut in_verb) = (0, false, false);
    for a in crate::sdk::strip_chroot_flag(args) {
        let positional = !value_next && !a.starts_with('-');
        value_next = !value_next && takes_value(&a);
        if positional {
            positionals += 1;
            // The first positional is `dist`, the second the sub-verb, the third its suite.
            if positionals == 2 && a == "chroot" {
                in_verb = true;
                continue;
            }
            if positionals == 3 && in_verb {
                continue;
            }
        }
        out.push(a);
    }
    out
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
pub fn host_package(ctx: &RunContext) -> Result<PathBuf> {
    run(Args::default(), ctx)?;
    Ok(target_dir()
        .join("dist")
        .join(&ctx.tracks()?.track(host_track())?.package))
}

/// Runs the verb on the run's tracks (`ctx`, made from `--tracks-file` when given).
pub fn run(args: Args, ctx: &RunContext) -> Result<ExitCode> {
    match args.mode()? {
        Mode::Chroot { suite } => {
            let inside = args_inside_chroot(std::env::args().skip(1));
            return crate::sdk::rerun_in_chroot(&suite, inside);
        }
        Mode::Package => {}
    }
    if let Some(file) = &args.tracks_file {
        anyhow::ensure!(
            file == ctx.tracks_path(),
            "dist was given --tracks-file {} but its run context reads {} (a caller must make the RunContext from the same file)",
            file.display(),
            ctx.tracks_path().display()
        );
    }
    let tracks_path = ctx.tracks_path().to_path_buf();
    let tracks = ctx.tracks()?;
    let cross = match &args.track {
        Some(t) => tracks.track(t)?.build.cross.clone(),
        None => None,
    };
    let inside_chroot = std::env::var_os("AUDIOCPP_CHROOT").is_some();
    if args.bin_dir.is_empty() && !args.dry_run && !(cross.is_some() && inside_chroot) {
        crate::setup::ensure(ctx, "dist", args.track.as_deref())?;
    }
    if let (Some(rel), false, true) = (&cross, inside_chroot, args.bin_dir.is_empty()) {
        if !args.dry_run {
            return enter_cross_chroot(rel, &args);
        }
        // The plan lists the runtime files: fetch the pinned runtime (a cache) first.
        fetch_cross_runtime(&crate::cross_backend::CrossInputs::load(rel)?)?;
    }
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
    let build = if args.bin_dir.is_empty() {
        Some(plan_build(&track_name, track, &tracks_path, &args)?)
    } else {
        None
    };
    let mut binaries = BTreeMap::new();
    let mut built_toolset = None;
    if !args.bin_dir.is_empty() {
        for d in &args.bin_dir {
            if !d.is_dir() {
                bail!("--bin-dir {} is not a folder", d.display());
            }
            list_dir(d, &mut binaries)?;
        }
    } else if let Some(build_plan) = &build {
        if args.dry_run {
            for exe in &build_plan.executables {
                add_planned(exe, &mut binaries);
            }
        } else {
            let t = std::time::Instant::now();
            let built = crate::build::execute(build_plan)
                .with_context(|| format!("building track {track_name}"))?;
            eprintln!(
                "dist: step time {:.1} s: the build of {track_name}",
                t.elapsed().as_secs_f64()
            );
            // The record comes back in memory; build-record.json on disk is for people.
            built_toolset = built
                .record
                .plan
                .toolset
                .as_ref()
                .map(|t| t.vc_tools_version.clone());
            list_files(&built.outputs(), &mut binaries)?;
        }
    }
    let facts = gather(&track_name, track, binaries, &args, build.as_ref())?;
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
        if let Some(b) = &build {
            println!("{}", crate::build::render(b));
        }
        print!("{}", plan.to_text());
        return Ok(ExitCode::SUCCESS);
    }
    let package_ctx = package::PackageContext {
        tracks_path: &tracks_path,
        tracks,
        track,
        out_dir: &out_dir,
        kernels: facts.kernels.as_ref(),
        allow_uncovered: args.allow_uncovered,
        built_toolset,
    };
    let result = package::execute(&plan, &package_ctx)?;
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

/// Lists the regular files of `dir` (symlinks followed, dangling ones skipped) as
/// [`list_files`] does.
fn list_dir(dir: &Path, into: &mut BTreeMap<String, FoundFile>) -> Result<()> {
    let mut paths = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        paths.push(e?.path());
    }
    paths.sort();
    list_files(&paths, into)
}

/// Adds the regular files among `paths` (symlinks followed, dangling ones and folders
/// skipped) by file name. ELF shared libraries are listed once, under their SONAME (the
/// name the loader looks for), however many symlinks and versioned names a build left.
pub fn list_files(paths: &[PathBuf], into: &mut BTreeMap<String, FoundFile>) -> Result<()> {
    let mut by_target: BTreeMap<PathBuf, String> = BTreeMap::new();
    for path in paths {
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        let mut name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let real = std::fs::canonicalize(path)?;
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

/// Adds a file a dry run's build would produce (or that lies on the build machine):
/// listed with its planned path and size 0.
fn add_planned(path: &str, into: &mut BTreeMap<String, FoundFile>) {
    let name = path.rsplit(['/', '\\']).next().unwrap_or(path).to_string();
    into.insert(
        name,
        FoundFile {
            path: PathBuf::from(path),
            size: 0,
        },
    );
}

/// The build of a track, decided by `build`'s planner from the track's recipe and this
/// machine's facts (or facts recorded elsewhere, `--facts`).
pub fn plan_build(
    track_name: &str,
    track: &Track,
    tracks_path: &Path,
    args: &Args,
) -> Result<crate::build::BuildPlan> {
    use crate::build::{BuildRequest, DiscoverOptions, HostFacts};
    let mut req = BuildRequest::for_track(track_name, track, tracks_path)?;
    let host = match &args.facts {
        Some(path) => HostFacts::load(path)?,
        None => {
            req.rocm_path = args.rocm_path.clone();
            HostFacts::discover(&DiscoverOptions {
                rocm_path: req.rocm_path.clone(),
                msvc_toolset: req.effective_msvc_toolset(),
                probe_gpus: false,
                probe_tools: false,
            })
        }
    };
    crate::build::plan(&req, &host)
        .with_context(|| format!("planning the build of track {track_name}"))
}

fn elf_soname(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    crate::verify_deps::parse(&bytes).ok()?.soname
}

/// The track's SDK root from its flag or environment, checked to be a folder of the
/// track's SDK version.
fn sdk_root(
    track_name: &str,
    track: &Track,
    args: &Args,
    planned: Option<&str>,
) -> Result<PathBuf> {
    let kind = track.sdk.as_ref().map(|s| s.kind).unwrap_or(SdkKind::Rocm);
    let planned = planned.map(PathBuf::from);
    let (flag, root) = match kind {
        SdkKind::Rocm => (
            "--rocm-path",
            args.rocm_path
                .clone()
                .or_else(|| planned.clone())
                .or_else(|| std::env::var_os("HIP_PATH").map(PathBuf::from))
                .or_else(|| std::env::var_os("ROCM_PATH").map(PathBuf::from)),
        ),
        SdkKind::Cuda => (
            "--cuda-path",
            args.cuda_path
                .clone()
                .or(planned)
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

/// The kernel filter of `track` over the SDK at `root`, as `dist` packages it. Only the
/// libraries the track ships count for coverage: a rocBLAS the SDK also has is no use to
/// binaries that send every product to hipBLASLt, and the other way round. `None` when the
/// track has no kernel folders, or when they come only from a real SDK and `root` has none
/// (the package then records them as absent).
pub fn kernel_plan(track: &Track, root: &Path) -> Result<Option<kfilter::FilterPlan>> {
    let scanned = track
        .kernel_libraries
        .iter()
        .any(|k| !k.sdk_only || root.join(&k.source).is_dir());
    if !scanned {
        return Ok(None);
    }
    let targets = kfilter::parse_targets(&track.gpu_targets)?;
    let mut libraries = crate::kernels::layout::scan(root)?;
    libraries.retain(|l| {
        track
            .kernel_libraries
            .iter()
            .any(|d| d.name == l.kind.dir_name())
    });
    let plan = kfilter::plan_filter(root, &libraries, &targets, &CoverageNotes::default())
        .with_context(|| format!("planning the kernel filter of {}", root.display()))?;
    Ok(Some(plan))
}

/// Collects the facts `plan` decides on: binaries, runtime files, CRT, kernel plan.
/// `build` is the build's plan: its SDK (when it was planned on this machine) and its
/// captured MSVC redistributable folder are where the SDK files and the CRT come from
/// when no flag names them.
fn gather(
    track_name: &str,
    track: &Track,
    binaries: BTreeMap<String, FoundFile>,
    args: &Args,
    build: Option<&crate::build::BuildPlan>,
) -> Result<DistFacts> {
    let mut facts = DistFacts {
        binaries,
        ..Default::default()
    };
    let needs_sdk = !track.runtime.is_empty() || !track.kernel_libraries.is_empty();
    if needs_sdk {
        let planned_root = build
            .filter(|_| args.facts.is_none())
            .and_then(|b| b.sdk.as_ref())
            .map(|s| s.root.as_str());
        let root = sdk_root(track_name, track, args, planned_root)?;
        for r in &track.runtime {
            let Some(p) = resolve_runtime_file(&root, &r.source, &r.name)? else {
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
        facts.kernels = kernel_plan(track, &root)?;
    }
    if let Some(crt) = &track.crt {
        let redist = build.and_then(|b| msvc_redist_dir(crt, b));
        let dirs: Vec<PathBuf> = match (&args.crt_dir, &redist) {
            (Some(dir), _) => vec![dir.clone()],
            (None, Some(dir)) => vec![PathBuf::from(dir)],
            (None, None) => crt.search.iter().map(PathBuf::from).collect(),
        };
        for name in &crt.files {
            if let Some(p) = dirs.iter().map(|d| d.join(name)).find(|p| p.is_file()) {
                let size = std::fs::metadata(&p)?.len();
                facts.crt.insert(name.clone(), FoundFile { path: p, size });
            } else if let (true, None, Some(dir)) = (args.dry_run, &args.crt_dir, &redist) {
                // A plan from another machine's facts: the folder is on the build box.
                let sep = if dir.contains('\\') { "\\" } else { "/" };
                add_planned(
                    &format!("{}{sep}{name}", dir.trim_end_matches(sep)),
                    &mut facts.crt,
                );
            } else if let (true, Some(_), Some(dir)) =
                (args.dry_run, &track.build.cross, crt.search.first())
            {
                // A cross-built track's toolchain runtime lives in its chroot.
                add_planned(
                    &format!("{}/{name}", dir.trim_end_matches('/')),
                    &mut facts.crt,
                );
            }
        }
    }
    Ok(facts)
}

/// A cross-built track (`build.cross`) is built and packaged inside its recipe's chroot:
/// make the chroot (once), fetch the pinned runtime on the host (pip and the network are
/// here), then run this same command in there.
fn enter_cross_chroot(rel: &str, args: &Args) -> Result<ExitCode> {
    let t_all = std::time::Instant::now();
    let step = |t: std::time::Instant, what: &str| {
        eprintln!("dist: step time {:.1} s: {what}", t.elapsed().as_secs_f64());
    };
    let inputs = crate::cross_backend::CrossInputs::load(rel)?;
    let suite = inputs.spec.chroot.clone();
    let t = std::time::Instant::now();
    crate::sdk::make_chroot(&crate::sdk::DebianArgs {
        suite: suite.clone(),
        mirror: None,
        dry_run: false,
    })?;
    step(t, &format!("the {suite} chroot"));
    let t = std::time::Instant::now();
    fetch_cross_runtime(&inputs)?;
    step(t, "the pinned HIP runtime");
    // Cargo runs offline in the chroot: every crate of Cargo.lock (the windows-gnu ones
    // included) must be in the registry cache first.
    eprintln!("dist: cargo fetch --locked (the chroot builds offline)");
    let t = std::time::Instant::now();
    let st = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["fetch", "--locked"])
        .current_dir(crate::project::project_root())
        .status()
        .context("running cargo fetch")?;
    if !st.success() {
        bail!(
            "cargo fetch --locked failed ({st}); the chroot build needs every crate of Cargo.lock"
        );
    }
    step(t, "cargo fetch");
    eprintln!("dist: building in the {suite} chroot");
    let exe = std::env::current_exe().context("finding this xtask's own binary")?;
    let mut argv = vec![exe.display().to_string()];
    argv.extend(cross_argv(args));
    let t = std::time::Instant::now();
    let code = crate::sdk::run_in_chroot(&suite, &argv)?;
    step(t, &format!("build and package inside the {suite} chroot"));
    step(t_all, "all of dist");
    Ok(code)
}

/// The `dist` command line that repeats `args` inside the chroot (the caller may be
/// another verb, such as `test cross-hip`, so the process's own arguments will not do).
pub fn cross_argv(args: &Args) -> Vec<String> {
    let mut v = vec!["dist".to_string()];
    let mut push = |flag: &str, value: Option<String>| {
        if let Some(value) = value {
            v.push(flag.to_string());
            v.push(value);
        }
    };
    push("--track", args.track.clone());
    push(
        "--rocm-path",
        args.rocm_path.as_ref().map(|p| p.display().to_string()),
    );
    push(
        "--crt-dir",
        args.crt_dir.as_ref().map(|p| p.display().to_string()),
    );
    push(
        "--out-dir",
        args.out_dir.as_ref().map(|p| p.display().to_string()),
    );
    push("--gpu-targets", args.gpu_targets.clone());
    push(
        "--tracks-file",
        args.tracks_file.as_ref().map(|p| p.display().to_string()),
    );
    if args.allow_uncovered {
        v.push("--allow-uncovered".into());
    }
    v
}

fn fetch_cross_runtime(inputs: &crate::cross_backend::CrossInputs) -> Result<()> {
    let root = PathBuf::from(crate::cross_backend::runtime_root(
        &target_dir().display().to_string(),
        &inputs.spec.chroot,
    ));
    crate::cross_backend::runtime::fetch(&inputs.spec.runtime, &root)
}

/// The runtime file `name` of a track in the SDK's `source` folder (or its `*-linux-gnu`
/// subfolder). A glob name (`amd_comgr*.dll`, whose name differs between AMD's builds)
/// takes the one file the SDK ships under it; two are an error naming both.
pub fn resolve_runtime_file(root: &Path, source: &str, name: &str) -> Result<Option<PathBuf>> {
    if !name.contains(['*', '?']) {
        return Ok(crate::toolset::rocm::find_runtime_file(root, source, name));
    }
    let glob = crate::tracks::Glob::new(name)?;
    let dir = root.join(source);
    let mut dirs = vec![dir.clone()];
    dirs.extend(
        std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir() && p.to_string_lossy().ends_with("-linux-gnu")),
    );
    for d in dirs {
        let mut hits: Vec<PathBuf> = std::fs::read_dir(&d)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| glob.matches(&e.file_name().to_string_lossy()))
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        hits.sort();
        match hits.len() {
            0 => continue,
            1 => return Ok(hits.pop()),
            _ => {
                bail!(
                "{} holds {} files matching the track's {name}: {}; keep the one the runtime loads",
                d.display(),
                hits.len(),
                hits.iter()
                    .map(|h| h.file_name().unwrap_or_default().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
            }
        }
    }
    Ok(None)
}

/// The folder of the MSVC redistributable the build's captured toolset ships with:
/// `VCToolsRedistDir` (from vcvarsall) joined with the part of the track's `crt.source`
/// below its version folder (`x64/Microsoft.VC143.CRT` of
/// `VC/Redist/MSVC/14.44/x64/Microsoft.VC143.CRT`).
fn msvc_redist_dir(crt: &crate::tracks::Crt, build: &crate::build::BuildPlan) -> Option<String> {
    if crt.kind != crate::tracks::CrtKind::Msvc {
        return None;
    }
    let redist = build.env_value("VCToolsRedistDir")?;
    let parts: Vec<&str> = crt.source.split(['/', '\\']).collect();
    let at = parts.iter().position(|p| p.eq_ignore_ascii_case("MSVC"))?;
    let tail = parts.get(at + 2..)?.join("\\");
    Some(format!("{}\\{tail}", redist.trim_end_matches('\\')))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracks::TracksFile;

    #[test]
    fn the_chroot_run_repeats_the_dist_flags() {
        let args = Args {
            track: Some("windows-hip-rocm7-gnu".into()),
            out_dir: Some("/t/out".into()),
            gpu_targets: Some("gfx1100".into()),
            allow_uncovered: true,
            ..Default::default()
        };
        assert_eq!(
            cross_argv(&args),
            [
                "dist",
                "--track",
                "windows-hip-rocm7-gnu",
                "--out-dir",
                "/t/out",
                "--gpu-targets",
                "gfx1100",
                "--allow-uncovered"
            ]
        );
    }

    /// Debian sid's kernel folders (rocBLAS 6.4.4 and hipBLASLt 7.1.1 at their listed
    /// names and sizes, sparse) under a temporary root, with the hipBLASLt archs `keep`
    /// accepts.
    fn debian_sid_tree(keep: impl Fn(&str) -> bool) -> tempfile::TempDir {
        use crate::kernels::fixtures;
        let dir = tempfile::tempdir().unwrap();
        let mut spec = fixtures::debian_sid();
        for lib in &mut spec.libraries {
            if lib.kind == crate::kernels::layout::LibraryKind::Hipblaslt {
                lib.arches.retain(|a| keep(a.arch));
            }
        }
        fixtures::write_tree(&spec, dir.path(), fixtures::Fill::Sparse).unwrap();
        dir
    }

    #[test]
    fn linux_hip_rocm6_is_covered_on_every_target_through_hipblaslt_alone() {
        let tracks = TracksFile::load(&TracksFile::default_path()).unwrap();
        let t = tracks.track("linux-hip-rocm6").unwrap();
        assert_eq!(t.build.gemm, crate::tracks::GemmRoute::Hipblaslt);
        assert!(t.uncovered_targets.is_empty());
        let sdk = debian_sid_tree(|_| true);
        let k = kernel_plan(t, sdk.path()).unwrap().unwrap();
        assert!(k.uncovered.is_empty(), "{:?}", k.uncovered);
        let kinds: Vec<_> = k.libraries.iter().map(|l| l.kind.dir_name()).collect();
        assert_eq!(
            kinds,
            ["hipblaslt"],
            "rocBLAS's folder must not count or ship"
        );
        let lib = &k.libraries[0];
        for target in ["gfx1103", "gfx1150"] {
            assert!(
                lib.kept.iter().any(|f| f
                    .rel_path
                    .to_string_lossy()
                    .contains(&format!("TensileLibrary_lazy_{target}"))),
                "no hipBLASLt index kept for {target}"
            );
        }
        assert!(lib
            .dropped
            .iter()
            .all(|f| !f.rel_path.to_string_lossy().contains("gfx1103")));
        assert!(lib
            .kept
            .iter()
            .all(|f| !f.rel_path.to_string_lossy().contains("gfx90a")));
        let files = plan::plan(
            "linux-hip-rocm6",
            t,
            &plan::DistFacts {
                binaries: [
                    "audiocpp_cli",
                    "audiocpp_server",
                    "libggml-base.so.0",
                    "libggml-hip.so",
                ]
                .into_iter()
                .map(|n| {
                    (
                        n.to_string(),
                        FoundFile {
                            path: PathBuf::from(format!("/b/{n}")),
                            size: 1,
                        },
                    )
                })
                .collect(),
                runtime: t
                    .runtime
                    .iter()
                    .map(|r| {
                        (
                            r.name.clone(),
                            FoundFile {
                                path: PathBuf::from(format!("/usr/lib/{}", r.name)),
                                size: 1,
                            },
                        )
                    })
                    .collect(),
                kernels: Some(k),
                ..Default::default()
            },
        )
        .unwrap()
        .files;
        assert!(files
            .iter()
            .any(|f| f.dest == "hipblaslt/library/TensileLibrary_lazy_gfx1103.dat"));
        assert!(files.iter().any(|f| f.dest == "libhipblaslt.so.1"));
        assert!(!files
            .iter()
            .any(|f| f.dest.contains("rocblas") || f.dest.starts_with("libhipblas.")));
    }

    #[test]
    fn a_hipblaslt_folder_without_a_target_leaves_it_uncovered_naming_hipblaslt() {
        let tracks = TracksFile::load(&TracksFile::default_path()).unwrap();
        let t = tracks.track("linux-hip-rocm6").unwrap();
        let sdk = debian_sid_tree(|arch| arch != "gfx1150");
        let k = kernel_plan(t, sdk.path()).unwrap().unwrap();
        let uncovered: Vec<(&str, &str)> = k
            .uncovered
            .iter()
            .map(|u| (u.target.as_str(), u.library.dir_name()))
            .collect();
        assert_eq!(uncovered, [("gfx1150", "hipblaslt")]);
    }

    #[test]
    fn gpu_targets_narrow_the_track_and_its_known_gaps() {
        let tracks = TracksFile::load(&TracksFile::default_path()).unwrap();
        let mut t = tracks.track("linux-hip-rocm7").unwrap().clone();
        narrow_targets("linux-hip-rocm7", &mut t, "gfx1100, gfx1150").unwrap();
        assert_eq!(t.gpu_targets, vec!["gfx1100", "gfx1150"]);
        assert_eq!(t.uncovered_targets, vec!["gfx1150"]);
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
