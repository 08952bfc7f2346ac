//! CUDA toolkit discovery: `CUDA_PATH`, `/usr/local/cuda*`,
//! `C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v*`; the version is read from the
//! toolkit's `version.json` (or the older `version.txt`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::toolset::rocm::children;
use crate::tracks::Os;

/// One CUDA toolkit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CudaSdk {
    /// Root folder as the OS spells it.
    pub root: String,
    /// Version read from the toolkit (`12.8.93`).
    pub version: String,
    /// nvcc, relative to the root (`bin/nvcc.exe`).
    pub nvcc: Option<String>,
}

/// Reads `"cuda": { "version": "12.8.93" }` from version.json.
pub fn parse_version_json(text: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    v.get("cuda")?.get("version")?.as_str().map(str::to_string)
}

/// Reads `CUDA Version 11.8.89` from version.txt.
pub fn parse_version_txt(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("CUDA Version "))
        .map(|v| v.trim().to_string())
}

/// Inspects one candidate root.
pub fn inspect(root: &Path) -> Result<CudaSdk> {
    let version = if let Ok(t) = std::fs::read_to_string(root.join("version.json")) {
        parse_version_json(&t).context("version.json has no cuda.version")?
    } else if let Ok(t) = std::fs::read_to_string(root.join("version.txt")) {
        parse_version_txt(&t).context("version.txt has no 'CUDA Version' line")?
    } else {
        bail!("{} has no version.json nor version.txt", root.display());
    };
    let nvcc = ["bin/nvcc.exe", "bin/nvcc"]
        .into_iter()
        .find(|r| root.join(r).is_file())
        .map(str::to_string);
    Ok(CudaSdk {
        root: root.display().to_string(),
        version,
        nvcc,
    })
}

/// `CUDA_PATH` first, then the usual folders of `os`, newest name last-sorted first.
pub fn candidates(os: Os) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::env::var_os("CUDA_PATH")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .into_iter()
        .collect();
    let mut scanned = match os {
        Os::Windows => children(
            Path::new(r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA"),
            "v",
        ),
        Os::Linux => {
            let mut s = vec![PathBuf::from("/usr/local/cuda")];
            s.extend(children(Path::new("/usr/local"), "cuda-"));
            s
        }
    };
    scanned.reverse();
    v.extend(scanned);
    v
}

/// The first candidate that is a toolkit.
pub fn discover(os: Os) -> Option<CudaSdk> {
    candidates(os).iter().find_map(|p| inspect(p).ok())
}
