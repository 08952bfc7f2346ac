//! `cargo xtask build`: build the executables for one backend (and track) with a pinned,
//! proven toolchain (issue 6; docs/architecture.md section 4, rules 1 and 3).
//!
//! - [`request`]: what to build ([`BuildRequest`]), from flags or from `dist`;
//! - [`facts`]: what this machine has ([`HostFacts`]; the only probing);
//! - [`plan()`]: pure, `request + facts -> BuildPlan` (env with reasons, files, commands);
//! - [`execute`]: runs a plan and records it.
//!
//! `--dry-run` prints the plan; `--facts FILE` plans against facts recorded on another
//! machine (`cargo xtask doctor --save-facts FILE`), so a Windows HIP plan can be read and
//! tested on Linux.

pub mod exec;
pub mod facts;
pub mod plan;
pub mod request;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

pub use exec::{execute, BuildRecord, Built};
pub use facts::{DiscoverOptions, HostFacts};
pub use plan::{
    plan, render, BuildPlan, EnvVar, PlannedCommand, PlannedFile, SdkRecord, ToolsetRecord,
};
pub use request::{Bins, BuildRequest, GpuTargets, Link, TrackRef};

use crate::context::RunContext;
use crate::tracks::Backend;

/// The backends `build` knows how to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendArg {
    /// CPU only.
    Cpu,
    /// NVIDIA GPUs through CUDA.
    Cuda,
    /// AMD GPUs through HIP/ROCm.
    Hip,
    /// Any GPU with a Vulkan driver (a track's build: --track linux-vulkan).
    Vulkan,
}

impl From<BackendArg> for Backend {
    fn from(b: BackendArg) -> Backend {
        match b {
            BackendArg::Cpu => Backend::Cpu,
            BackendArg::Cuda => Backend::Cuda,
            BackendArg::Hip => Backend::Hip,
            BackendArg::Vulkan => Backend::Vulkan,
        }
    }
}

/// Flags of `cargo xtask build`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The GPU (or CPU) backend to build.
    #[arg(long, value_enum)]
    pub backend: BackendArg,
    /// A packaging track from packaging/tracks.toml (rocm6, rocm7, windows-cpu, ...): its
    /// OS, SDK version, GPU targets and CRT toolset.
    #[arg(long, value_name = "NAME")]
    pub track: Option<String>,
    /// The ROCm / HIP SDK root (default: HIP_PATH, ROCM_PATH, then the usual folders).
    #[arg(long, value_name = "DIR")]
    pub rocm_path: Option<PathBuf>,
    /// `auto` (this machine's GPUs) or a list: gfx1100,gfx1101 (HIP), 86,89-real (CUDA).
    /// Default: the track's list; without a track, auto (HIP) or a portable list (CUDA).
    #[arg(long, value_name = "auto|LIST")]
    pub gpu_targets: Option<String>,
    /// Portable CPU code (no -C target-cpu=native, GGML_NATIVE=OFF). Track and dynamic
    /// builds are always portable.
    #[arg(long)]
    pub no_native_cpu: bool,
    /// Embed the model-spec catalog (cargo feature `deployment`).
    #[arg(long)]
    pub deployment: bool,
    /// ggml backends linked in (`static`) or loaded at start (`dynamic`). Default: the
    /// track's `cpu_variants` (`all`: dynamic), static without a track.
    #[arg(long, value_enum)]
    pub link: Option<Link>,
    /// Which executables.
    #[arg(long = "bin", value_enum, default_value = "all")]
    pub bins: Bins,
    /// Parallel jobs for cargo and ggml's CMake build.
    #[arg(long, short = 'j')]
    pub jobs: Option<u32>,
    /// Rust target triple (default: the track's, else the host).
    #[arg(long, value_name = "TRIPLE")]
    pub target: Option<String>,
    /// MSVC toolset to pin on Windows (default: the track's CRT toolset, else 14.44).
    /// 14.50 and newer are refused for HIP.
    #[arg(long, value_name = "VERSION")]
    pub msvc_toolset: Option<String>,
    /// Build inside the Debian chroot of this suite (`cargo xtask sdk debian --suite
    /// SUITE`), against its ROCm SDK; the outputs land in <target>/chroot-SUITE.
    #[arg(long, value_name = "SUITE")]
    pub chroot: Option<String>,
    /// Print the plan (environment with reasons, files, commands) and stop.
    #[arg(long)]
    pub dry_run: bool,
    /// With --dry-run: print the plan as JSON.
    #[arg(long, requires = "dry_run")]
    pub json: bool,
    /// Plan against facts recorded on another machine (`doctor --save-facts`); needs --dry-run.
    #[arg(long, value_name = "FILE", requires = "dry_run")]
    pub facts: Option<PathBuf>,
}

/// Turns flags into a request (the run's tracks for `--track`).
pub fn request_from_args(args: &Args, ctx: &RunContext) -> Result<BuildRequest> {
    let mut req = match &args.track {
        Some(name) => {
            let track = ctx.tracks()?.track(name)?;
            let mut req = BuildRequest::for_track(name, track, ctx.tracks_path())?;
            req.backend = args.backend.into();
            req
        }
        None => BuildRequest::new(args.backend.into()),
    };
    req.rocm_path = args.rocm_path.clone();
    if let Some(t) = &args.gpu_targets {
        req.gpu_targets = GpuTargets::parse(t)?;
    }
    req.no_native_cpu = args.no_native_cpu;
    req.deployment = args.deployment;
    if let Some(link) = args.link {
        req.link = link;
    }
    req.bins = args.bins;
    if args.jobs == Some(0) {
        bail!("--jobs must be at least 1");
    }
    req.jobs = args.jobs;
    req.target = args.target.clone();
    req.msvc_toolset = args.msvc_toolset.clone();
    Ok(req)
}

/// Runs the verb.
pub fn run(args: Args, ctx: &RunContext) -> Result<ExitCode> {
    if let Some(suite) = &args.chroot {
        return crate::sdk::reexec_in_chroot(suite);
    }
    let req = request_from_args(&args, ctx)?;
    let host = match &args.facts {
        Some(path) => HostFacts::load(path)?,
        None => HostFacts::discover(&DiscoverOptions {
            rocm_path: req.rocm_path.clone(),
            msvc_toolset: req.effective_msvc_toolset(),
            probe_gpus: req.backend == Backend::Hip
                && (req.gpu_targets == GpuTargets::Auto
                    || (req.gpu_targets == GpuTargets::Default && req.track.is_none())),
            probe_tools: false,
        }),
    };
    let label = args
        .track
        .clone()
        .unwrap_or_else(|| format!("{:?}", args.backend).to_lowercase());
    let plan = plan(&req, &host).with_context(|| format!("planning the {label} build"))?;
    if args.dry_run {
        if args.json {
            println!("{}", serde_json::to_string_pretty(&plan)?);
        } else {
            print!("{}", render(&plan));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let built = execute(&plan).with_context(|| format!("building {label}"))?;
    eprintln!(
        "build: {} done (recorded in {}):",
        plan.label,
        built.record_path.display()
    );
    for o in &built.outputs() {
        let size = std::fs::metadata(o).map(|m| m.len()).unwrap_or(0);
        println!("{:>12}  {}", size, o.display());
    }
    Ok(ExitCode::SUCCESS)
}
