//! `cargo xtask`: the build-and-packaging toolchain of audiocpp-rs.
//!
//! `main` only parses flags and dispatches to one module per verb; each verb returns
//! an exit code so that "violations found" (1) and "bad input" (2) stay distinct.

use std::process::ExitCode;

use xtask::{bench, dist, flags, kernels, test, verify_deps, verify_package};

fn main() -> ExitCode {
    let cli = flags::parse();
    let result = match cli.command {
        flags::Command::Bench(args) => bench::run(args),
        flags::Command::Build(args) => xtask::build::run(args),
        flags::Command::Doctor(args) => xtask::doctor::run(args),
        flags::Command::Dist(args) => dist::run(args),
        flags::Command::Test(args) => test::run(args),
        flags::Command::VerifyDeps(args) => verify_deps::run(args),
        flags::Command::VerifyPackage(args) => verify_package::run(args),
        flags::Command::Kernels(args) => kernels::run(args),
        flags::Command::Sdk(args) => xtask::sdk::run(args),
        flags::Command::Setup(args) => xtask::setup::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
