//! Running Windows packages on this Linux host under Wine, for `cargo xtask test`: a
//! private prefix under the target dir, the test-only ProcessPrng stand-in that Rust
//! executables need on Wine 8, and runs from an empty working directory (Wine also
//! loads DLLs from the working directory, which would hide a missing one).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{bail, Context, Result};

use crate::project::{project_root, target_dir};

/// A prepared Wine prefix.
pub struct Wine {
    prefix: PathBuf,
    wine: PathBuf,
}

/// Exit code Windows (and Wine) give a process whose DLL could not be found.
pub const MISSING_DLL_EXIT: i32 = 53;

fn find_wine() -> Result<PathBuf> {
    for p in ["/usr/lib/wine/wine64", "/usr/bin/wine64", "/usr/bin/wine"] {
        if Path::new(p).is_file() {
            return Ok(PathBuf::from(p));
        }
    }
    bail!("Wine is not installed: apt-get install wine wine64 (or run `cargo xtask setup --for test`)")
}

impl Wine {
    /// Creates (once) the prefix `target/wine-prefix` with the ProcessPrng stand-in.
    pub fn prepare() -> Result<Wine> {
        let wine = find_wine()?;
        let prefix = target_dir().join("wine-prefix");
        let system32 = prefix.join("drive_c/windows/system32");
        if !system32.join("kernel32.dll").exists() {
            eprintln!("wine: creating the prefix {}", prefix.display());
            std::fs::create_dir_all(&prefix)?;
            let boot = wine.with_file_name("wineboot");
            let boot = if boot.is_file() {
                boot
            } else {
                PathBuf::from("wineboot")
            };
            let st = Command::new(boot)
                .arg("-i")
                .env("WINEPREFIX", &prefix)
                .env("WINEDEBUG", "-all")
                .env("WINEDLLOVERRIDES", "mscoree,mshtml=")
                .status()
                .context("running wineboot")?;
            if !st.success() || !system32.is_dir() {
                bail!("wineboot -i failed for {}", prefix.display());
            }
        }
        let stub = system32.join("bcryptprimitives.dll");
        if !stub.is_file() {
            let src = project_root().join("xtask/wine");
            let st = Command::new("x86_64-w64-mingw32-gcc")
                .args(["-shared", "-O2", "-o"])
                .arg(&stub)
                .arg(src.join("processprng.c"))
                .arg(src.join("processprng.def"))
                .arg("-lbcrypt")
                .status()
                .context(
                    "x86_64-w64-mingw32-gcc is needed: apt-get install gcc-mingw-w64-x86-64",
                )?;
            if !st.success() {
                bail!("building the ProcessPrng stand-in failed");
            }
        }
        Ok(Wine { prefix, wine })
    }

    /// Runs `exe` with `args` from the empty folder `cwd`.
    pub fn run(&self, exe: &Path, args: &[&str], cwd: &Path) -> Result<Output> {
        self.run_env(exe, args, cwd, &[])
    }

    /// [`Wine::run`] with `env` set too (Windows programs see Unix environment
    /// variables under Wine).
    pub fn run_env(
        &self,
        exe: &Path,
        args: &[&str],
        cwd: &Path,
        env: &[(&str, &str)],
    ) -> Result<Output> {
        std::fs::create_dir_all(cwd)?;
        Command::new(&self.wine)
            .arg(exe)
            .args(args)
            .current_dir(cwd)
            .envs(env.iter().copied())
            .env("WINEPREFIX", &self.prefix)
            .env("WINEDEBUG", "-all")
            .output()
            .with_context(|| format!("running {} under Wine", exe.display()))
    }

    /// Stops the prefix's wineserver.
    pub fn shutdown(&self) {
        let _ = Command::new(self.wine.with_file_name("wineserver"))
            .arg("-k")
            .env("WINEPREFIX", &self.prefix)
            .status();
    }
}
