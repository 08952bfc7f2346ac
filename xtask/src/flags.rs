//! Every verb and its flags, declared in one place (clap derive).
//!
//! Verb-specific argument structs live next to the verb's code (`verify_deps::Args`,
//! `kernels::Args`, ...) and are gathered here into one `Command` enum.

use clap::{Parser, Subcommand};

/// The `cargo xtask` command line.
#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    about = "Build, test and package audiocpp-rs",
    version
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The verbs of the toolchain, one module each.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build the executables for one backend/track with a pinned, recorded toolchain.
    Build(crate::build::Args),
    /// Report what is installed and what is missing for each track, with fixes.
    Doctor(crate::doctor::Args),
    /// Build (or take prebuilt) binaries and make a verified, reproducible package.
    Dist(crate::dist::Args),
    /// Measure speed and memory against peers in the same run.
    Bench(crate::bench::Args),
    /// Fetch the pinned test assets and run every test.
    Test(crate::test::Args),
    /// Check the dependency closure of binaries, a staged package or a zip.
    VerifyDeps(crate::verify_deps::Args),
    /// Re-check a package zip against its manifest, layout and dependency rules.
    VerifyPackage(crate::verify_package::Args),
    /// Report on and filter rocBLAS/hipBLASLt kernel libraries by GPU architecture.
    Kernels(crate::kernels::Args),
    /// Make a Debian chroot with a real ROCm SDK, and run commands in it.
    Sdk(crate::sdk::Args),
    /// Check what a verb needs on this machine (packaging/needs.toml) and install what is
    /// missing (apt as root, rustup); `dist` and `test` run it first.
    Setup(crate::setup::Args),
}

impl Command {
    /// The tracks file the verb names with `--tracks-file` (dist, verify-deps,
    /// verify-package), which the run's context reads instead of packaging/tracks.toml.
    pub fn tracks_file(&self) -> Option<&std::path::Path> {
        match self {
            Command::Dist(a) => a.tracks_file.as_deref(),
            Command::VerifyDeps(a) => a.tracks_file.as_deref(),
            Command::VerifyPackage(a) => a.tracks_file.as_deref(),
            _ => None,
        }
    }
}

/// Parses the process arguments; clap exits with code 2 on usage errors.
pub fn parse() -> Cli {
    Cli::parse()
}
