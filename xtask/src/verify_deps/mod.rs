//! `cargo xtask verify-deps`: PE and ELF dependency closure checks (docs/architecture.md section 4,
//! rules 4 and 5).
//!
//! Deciding is separate from doing:
//! - [`binary`] ([`pe`], [`elf`]): bytes -> [`BinaryInfo`] (pure);
//! - [`policy`]: `packaging/tracks.toml` + allowlists (+ a track) -> [`Policy`];
//! - [`graph`]: package files + policy -> resolved import graph -> [`Report`] (pure);
//! - [`input`]: the thin layer that reads files, folders and zips (headers only where it can);
//! - [`report`]: text tree and JSON.
//!
//! Exit codes: 0 clean, 1 violations, 2 (an `Err`) usage or I/O errors.

pub mod binary;
pub mod elf;
pub mod fuzz;
pub mod graph;
pub mod input;
pub mod pe;
pub mod policy;
pub mod report;
pub mod synth;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

pub use binary::{parse, BinaryInfo, ParseError};
pub use graph::{check, ImportGraph};
pub use input::{read_inputs, Package};
pub use policy::Policy;
pub use report::{Finding, Report, Rule};

use crate::context::RunContext;

/// Flags of `cargo xtask verify-deps`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Binaries, staged package folders or package `.zip` files to check. Each folder and
    /// each zip is one package; loose files are checked together as one more.
    #[arg(required = true, value_name = "PATH")]
    pub inputs: Vec<PathBuf>,
    /// Also check against this track of packaging/tracks.toml (declared set, SDK major,
    /// machine, runtime-loaded companions).
    #[arg(long, value_name = "NAME")]
    pub track: Option<String>,
    /// Print the reports as JSON (an array, one object per package) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Read the tracks from this file instead of packaging/tracks.toml (allowlists are
    /// looked up relative to its folder).
    #[arg(long, value_name = "PATH")]
    pub tracks_file: Option<PathBuf>,
}

/// Runs the verb: 0 when every package is clean, 1 when any has violations. `ctx`
/// reads `--tracks-file` when given.
pub fn run(args: Args, ctx: &RunContext) -> anyhow::Result<ExitCode> {
    let tracks_path = ctx.tracks_path();
    let policy =
        Policy::new(ctx.tracks()?, tracks_path, args.track.as_deref()).with_context(|| {
            format!(
                "loading the dependency policy from {}",
                tracks_path.display()
            )
        })?;
    let reports = verify(&args.inputs, &policy)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        for r in &reports {
            print!("{}", r.render_text());
        }
    }
    Ok(if reports.iter().all(Report::passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Reads every input and checks it: one report per package.
pub fn verify(inputs: &[PathBuf], policy: &Policy) -> anyhow::Result<Vec<Report>> {
    let packages = read_inputs(inputs)?;
    Ok(packages.iter().map(|p| check(p, policy)).collect())
}
