//! `cargo xtask test`: fetch the pinned test assets, then run every test of the workspace
//! (in release mode, sharing the ggml build with `dist` and `bench`), then a bounded fuzz
//! run of the PE/ELF parser.

use std::process::{Command, ExitCode};

use anyhow::{Context, Result};

use crate::assets;
use crate::project::project_root;

/// Flags of `cargo xtask test`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Skip the bounded fuzz run of the binary parser.
    #[arg(long)]
    pub no_fuzz: bool,
    /// Seconds for the fuzz run.
    #[arg(long, default_value_t = 30)]
    pub fuzz_seconds: u32,
    /// Extra arguments passed to `cargo test` (after `--`).
    #[arg(last = true)]
    pub cargo_args: Vec<String>,
}

/// cargo-fuzz, pinned; installed into ~/.cargo/bin when missing.
const CARGO_FUZZ_VERSION: &str = "0.13.2";

fn ensure_cargo_fuzz() -> Result<()> {
    let have = cargo()
        .args(["fuzz", "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if have {
        return Ok(());
    }
    eprintln!("test: installing cargo-fuzz {CARGO_FUZZ_VERSION}");
    let status = cargo()
        .args([
            "install",
            "--locked",
            "cargo-fuzz",
            "--version",
            CARGO_FUZZ_VERSION,
        ])
        .status()
        .context("running cargo install cargo-fuzz")?;
    anyhow::ensure!(status.success(), "cargo install cargo-fuzz failed");
    Ok(())
}

/// The cargo that runs xtask (so toolchain overrides carry over).
pub fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// Runs the verb.
pub fn run(args: Args) -> Result<ExitCode> {
    let assets = assets::ensure().context("preparing test assets")?;
    eprintln!("test: assets ready in {}", assets.dir.display());
    let status = cargo()
        .current_dir(project_root())
        .args(["test", "--workspace", "--release"])
        .args(&args.cargo_args)
        .env("AUDIOCPP_TEST_ASSETS", &assets.dir)
        .env("AUDIOCPP_TEST_PYTHON", &assets.python)
        .status()
        .context("running cargo test")?;
    if !status.success() {
        eprintln!("test: cargo test failed");
        return Ok(ExitCode::from(1));
    }
    if !args.no_fuzz {
        ensure_cargo_fuzz()?;
        crate::verify_deps::fuzz::run(args.fuzz_seconds)
            .context("bounded fuzz run of the PE/ELF parser")?;
    }
    eprintln!("test: all passed");
    Ok(ExitCode::SUCCESS)
}
