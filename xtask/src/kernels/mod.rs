//! `cargo xtask kernels`: arch-exact report on, and filtering of, rocBLAS/hipBLASLt kernel
//! libraries (`docs/architecture.md` section 4, rules 6, 7 and 9).
//!
//! - [`classify`]: path -> arch tokens or arch-independent (pure).
//! - [`layout`]: where the library folders are in an SDK, and listing them.
//! - [`report`]: per-arch size tables and lazy-index coverage ([`report::CoverageReport`]).
//! - [`filter`]: [`filter::plan_filter`] (pure) and [`filter::execute`] (stage, rename).
//! - [`fixtures`]: realistic trees from real listings, for tests and `cargo xtask bench kernels` ([`crate::bench::kernels`]).

pub mod debian;
pub mod filter;
pub mod fixtures;
pub mod layout;
pub mod report;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

/// The kernel classifier lives with the GPU target type it shares with tracks and build.
pub use crate::gpu_target as classify;
pub use crate::gpu_target::{classify, ArchClass, ArchToken};
pub use filter::{CoverageNotes, FilterPlan, KernelFile};
pub use report::CoverageReport;

/// Flags of `cargo xtask kernels`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub command: KernelsCommand,
}

/// The subcommands of `cargo xtask kernels`.
#[derive(Debug, Subcommand)]
pub enum KernelsCommand {
    /// Per-arch file count, size and share of each kernel library folder, and which arches
    /// have a TensileLibrary_lazy_<gfx>.dat (GEMM coverage).
    Report(ReportArgs),
    /// Copy the kernel libraries keeping only the targets' and arch-independent files.
    Filter(FilterArgs),
    /// Download the pinned Debian rocBLAS/hipBLASLt packages (packaging/sdk/debian.toml),
    /// extract them and check their real folders against the recorded listings (part of
    /// `cargo xtask test`).
    CheckDebian,
}

/// Flags of `kernels report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// SDK root: Windows `C:\Program Files\AMD\ROCm\6.4`, `/opt/rocm`, Debian `/usr`, or a
    /// package root holding `rocblas/library`.
    #[arg(long, value_name = "DIR")]
    pub rocm_path: PathBuf,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Flags of `kernels filter`.
#[derive(Debug, clap::Args)]
pub struct FilterArgs {
    /// SDK (or package) root holding the library folders; never written to.
    #[arg(long, value_name = "DIR")]
    pub src: PathBuf,
    /// Destination folder, created atomically (`<dst>/rocblas/library`, `<dst>/hipblaslt/library`).
    #[arg(long, value_name = "DIR")]
    pub dst: PathBuf,
    /// GPU processors to keep, comma-separated (`gfx1100,gfx1101`, `gfx90a:xnack+`).
    #[arg(long, value_name = "LIST", value_delimiter = ',', required = true)]
    pub gpu_targets: Vec<String>,
    /// Print the plan, write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Ship targets that a library has no lazy index for (prints the gaps as warnings).
    #[arg(long)]
    pub allow_uncovered: bool,
    /// Replace an existing destination.
    #[arg(long)]
    pub force: bool,
    /// Always copy instead of hard-linking.
    #[arg(long)]
    pub copy: bool,
    /// TOML file of known coverage gaps and their reasons (`[[note]]` library/target/reason).
    #[arg(long, value_name = "FILE")]
    pub coverage_notes: Option<PathBuf>,
    /// List every file with its decision and reason.
    #[arg(long)]
    pub list: bool,
    /// Print the plan as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `cargo xtask kernels ...`: 0 on success, 1 when a target is uncovered, Err (exit 2)
/// for bad input (unknown tokens, missing folders, unsafe destinations).
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        KernelsCommand::Report(args) => {
            report::run(&args.rocm_path, args.json)?;
            Ok(ExitCode::SUCCESS)
        }
        KernelsCommand::Filter(args) => run_filter(&args),
        KernelsCommand::CheckDebian => {
            debian::check_pinned()?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn run_filter(args: &FilterArgs) -> anyhow::Result<ExitCode> {
    let targets = filter::parse_targets(&args.gpu_targets)?;
    let notes = match &args.coverage_notes {
        Some(path) => CoverageNotes::load(path)?,
        None => CoverageNotes::default(),
    };
    let plan = filter::plan(&args.src, &targets, &notes)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        print!("{}", plan.to_text(args.list));
    }
    if let Err(gaps) = plan.check_coverage() {
        if !args.allow_uncovered {
            eprintln!("error: {gaps}");
            return Ok(ExitCode::from(1));
        }
        for gap in &gaps.0 {
            eprintln!(
                "warning: {} uncovered in {}: {}",
                gap.target, gap.library, gap.reason
            );
        }
    }
    if args.dry_run {
        eprintln!("dry run: nothing written");
        return Ok(ExitCode::SUCCESS);
    }
    let options = filter::ExecuteOptions {
        force: args.force,
        link: if args.copy {
            filter::LinkMode::Copy
        } else {
            filter::LinkMode::Auto
        },
    };
    let summary = filter::execute(&plan, &args.dst, &options)?;
    eprintln!(
        "wrote {} ({} files linked, {} copied, {})",
        args.dst.display(),
        summary.linked,
        summary.copied,
        report::human_mb(summary.bytes)
    );
    Ok(ExitCode::SUCCESS)
}
