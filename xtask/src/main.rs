//! `cargo xtask`: the build-and-packaging toolchain of audiocpp-rs.
//!
//! `main` only parses flags, makes the run's context (the tracks and needs files, read
//! once) and dispatches to one module per verb; each verb returns an exit code so that
//! "violations found" (1) and "bad input" (2) stay distinct.

use std::process::ExitCode;

use xtask::context::RunContext;
use xtask::{bench, dist, flags, kernels, test, verify_deps, verify_package};

fn main() -> ExitCode {
    let cli = flags::parse();
    // The data files every verb reads, read once for the run (on first use).
    let ctx = RunContext::new(cli.command.tracks_file());
    let result = match cli.command {
        flags::Command::Bench(args) => bench::run(args, &ctx),
        flags::Command::Build(args) => xtask::build::run(args, &ctx),
        flags::Command::Doctor(args) => xtask::doctor::run(args, &ctx),
        flags::Command::Dist(args) => dist::run(args, &ctx),
        flags::Command::Test(args) => test::run(args, &ctx),
        flags::Command::VerifyDeps(args) => verify_deps::run(args, &ctx),
        flags::Command::VerifyPackage(args) => verify_package::run(args, &ctx),
        flags::Command::Kernels(args) => kernels::run(args),
        flags::Command::Sdk(args) => xtask::sdk::run(args),
        flags::Command::Setup(args) => xtask::setup::run(args, &ctx),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
