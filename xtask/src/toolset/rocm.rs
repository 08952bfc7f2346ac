//! ROCm / HIP SDK discovery (issue 6, part 3).
//!
//! Candidates come from `--rocm-path`, `HIP_PATH`, `ROCM_PATH`, then a scan of
//! `C:\Program Files\AMD\ROCm\*` (Windows) or `/opt/rocm`, `/opt/rocm-*` and Debian's `/usr`
//! (Linux). A candidate is an SDK only when its version can be read from a file inside it
//! (`include/hip/hip_version.h`, `.info/version`, `lib/cmake/hip/hip-config-version.cmake`):
//! the folder name alone proves nothing (`6.4` may hold a 6.2 that was copied over).
//! Tool paths are stored relative to the root with `/`, so a plan for Windows can be
//! printed exactly on any host ([`RocmSdk::tool_path`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use crate::tracks::Os;

/// Where a candidate SDK root came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SdkOrigin {
    /// `--rocm-path`.
    Flag,
    /// The `HIP_PATH` environment variable (set by the Windows HIP SDK installer).
    HipPath,
    /// The `ROCM_PATH` environment variable.
    RocmPath,
    /// Found by scanning the usual install folders.
    Scan,
}

/// An SDK version as read from the SDK.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SdkVersion {
    /// Major (`6`).
    pub major: u32,
    /// Minor (`4`).
    pub minor: u32,
    /// Patch or build number when the file has one (`43484`).
    pub patch: Option<u32>,
}

impl SdkVersion {
    /// `MAJOR.MINOR`, the form tracks use.
    pub fn major_minor(&self) -> String {
        format!("{}.{}", self.major, self.minor)
    }
}

impl std::fmt::Display for SdkVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.patch {
            Some(p) => write!(f, "{}.{}.{}", self.major, self.minor, p),
            None => write!(f, "{}.{}", self.major, self.minor),
        }
    }
}

/// One ROCm / HIP SDK.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RocmSdk {
    /// Root folder as the target OS spells it (`C:\Program Files\AMD\ROCm\6.4`, `/opt/rocm`).
    pub root: String,
    /// Where it was found.
    pub origin: SdkOrigin,
    /// The version read from the SDK.
    pub version: SdkVersion,
    /// The file the version came from, relative to the root (`include/hip/hip_version.h`).
    pub version_source: String,
    /// ROCm's clang (C compiler), relative to the root (`bin/clang.exe`, `lib/llvm/bin/clang`).
    pub clang: Option<String>,
    /// ROCm's clang++ (C++ and HIP compiler), relative to the root.
    pub clangxx: Option<String>,
    /// `amdgpu-arch`, relative to the root.
    pub amdgpu_arch: Option<String>,
    /// Folder holding libclang (for bindgen), relative to the root.
    pub libclang_dir: Option<String>,
}

impl RocmSdk {
    /// An absolute path to a file inside the SDK, spelled for `os`.
    pub fn tool_path(&self, rel: &str, os: Os) -> String {
        join(&self.root, rel, os)
    }

    /// The root with a trailing separator trimmed.
    pub fn root_trimmed(&self) -> &str {
        self.root.trim_end_matches(['\\', '/'])
    }
}

/// Joins a root and a `/`-separated relative path with the separator of `os`.
pub fn join(root: &str, rel: &str, os: Os) -> String {
    let sep = match os {
        Os::Windows => '\\',
        Os::Linux => '/',
    };
    let mut out = root.trim_end_matches(['\\', '/']).to_string();
    for part in rel.split('/').filter(|p| !p.is_empty()) {
        out.push(sep);
        out.push_str(part);
    }
    out
}

/// A runtime file `name` of the SDK at `root`, declared under `source` (`lib`): found
/// there (AMD's `/opt/rocm/lib`, the Windows SDK's `bin`) or in a Debian/Ubuntu
/// multiarch folder below it (`/usr/lib/x86_64-linux-gnu`).
pub fn find_runtime_file(root: &Path, source: &str, name: &str) -> Option<PathBuf> {
    let dir = root.join(source);
    let direct = dir.join(name);
    if direct.exists() {
        return Some(direct);
    }
    children(&dir, "")
        .into_iter()
        .filter(|d| {
            d.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with("-linux-gnu"))
        })
        .map(|d| d.join(name))
        .find(|p| p.exists())
}

/// Reads `HIP_VERSION_MAJOR/MINOR/PATCH` from `hip_version.h`.
pub fn parse_hip_version_h(text: &str) -> Option<SdkVersion> {
    let define = |name: &str| -> Option<u32> {
        text.lines().find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next()? == "#define" && it.next()? == name)
                .then(|| it.next()?.parse().ok())
                .flatten()
        })
    };
    Some(SdkVersion {
        major: define("HIP_VERSION_MAJOR")?,
        minor: define("HIP_VERSION_MINOR")?,
        patch: define("HIP_VERSION_PATCH"),
    })
}

/// Reads `.info/version` (`6.4.1-83`, `7.1.0`).
pub fn parse_info_version(text: &str) -> Option<SdkVersion> {
    let line = text.lines().next()?.trim();
    let core = line.split(['-', '+', ' ']).next()?;
    let mut parts = core.split('.');
    Some(SdkVersion {
        major: parts.next()?.parse().ok()?,
        minor: parts.next()?.parse().ok()?,
        patch: parts.next().and_then(|p| p.parse().ok()),
    })
}

/// Reads `set(PACKAGE_VERSION "6.4.43484")` from `hip-config-version.cmake`.
pub fn parse_cmake_package_version(text: &str) -> Option<SdkVersion> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("set(PACKAGE_VERSION"))?;
    let value = line.split('"').nth(1)?;
    parse_info_version(value)
}

/// Parses one version file.
type VersionParser = fn(&str) -> Option<SdkVersion>;

const VERSION_FILES: &[(&str, VersionParser)] = &[
    ("include/hip/hip_version.h", parse_hip_version_h),
    (".info/version", parse_info_version),
    (
        "lib/cmake/hip/hip-config-version.cmake",
        parse_cmake_package_version,
    ),
];

/// Reads the version from the first version file present; returns it with the file.
pub fn read_version(root: &Path) -> Result<(SdkVersion, String)> {
    for (rel, parse) in VERSION_FILES {
        let path = root.join(rel);
        if let Ok(text) = std::fs::read_to_string(&path) {
            if let Some(v) = parse(&text) {
                return Ok((v, rel.to_string()));
            }
            bail!("{} has no readable version", path.display());
        }
    }
    bail!(
        "no version file in {} (looked for {})",
        root.display(),
        VERSION_FILES
            .iter()
            .map(|(r, _)| *r)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Tool folders, most specific first: an SDK's own LLVM before a generic `bin`
/// (Debian's `/usr/bin/clang` is the system clang, `/usr/lib/llvm-N/bin` the ROCm one).
fn tool_dirs(root: &Path) -> Vec<String> {
    let mut dirs = vec!["llvm/bin".to_string(), "lib/llvm/bin".to_string()];
    let mut versioned: Vec<(u32, String)> = std::fs::read_dir(root.join("lib"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let n: u32 = name.strip_prefix("llvm-")?.parse().ok()?;
            Some((n, format!("lib/{name}/bin")))
        })
        .collect();
    versioned.sort_by_key(|v| std::cmp::Reverse(v.0));
    dirs.extend(versioned.into_iter().map(|(_, d)| d));
    dirs.push("bin".to_string());
    dirs
}

fn find_tool(root: &Path, dirs: &[String], name: &str) -> Option<String> {
    for dir in dirs {
        for file in [format!("{name}.exe"), name.to_string()] {
            if root.join(dir).join(&file).is_file() {
                return Some(format!("{dir}/{file}"));
            }
        }
    }
    None
}

fn find_libclang(root: &Path, tool_dirs: &[String]) -> Option<String> {
    let mut dirs: Vec<String> = vec!["bin".into(), "lib".into()];
    dirs.extend(
        tool_dirs
            .iter()
            .map(|d| d.trim_end_matches("/bin").to_string() + "/lib"),
    );
    dirs.into_iter().find(|d| {
        std::fs::read_dir(root.join(d))
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                let n = e.file_name().to_string_lossy().to_ascii_lowercase();
                n == "libclang.dll"
                    || n.starts_with("libclang.so")
                    || (n.starts_with("libclang-") && n.contains(".so"))
            })
    })
}

/// Inspects one candidate root: version (from a file), clang, clang++, amdgpu-arch, libclang.
pub fn inspect(root: &Path, origin: SdkOrigin) -> Result<RocmSdk> {
    if !root.is_dir() {
        bail!("{} is not a folder", root.display());
    }
    let (version, version_source) = read_version(root)?;
    let dirs = tool_dirs(root);
    Ok(RocmSdk {
        root: root.display().to_string(),
        origin,
        version,
        version_source,
        clang: find_tool(root, &dirs, "clang"),
        clangxx: find_tool(root, &dirs, "clang++"),
        amdgpu_arch: find_tool(root, &dirs, "amdgpu-arch"),
        libclang_dir: find_libclang(root, &dirs),
    })
}

/// The candidate roots to look at, in priority order.
#[derive(Debug, Clone, Default)]
pub struct DiscoverInput {
    /// `--rocm-path`.
    pub flag: Option<PathBuf>,
    /// `HIP_PATH`.
    pub hip_path: Option<PathBuf>,
    /// `ROCM_PATH`.
    pub rocm_path: Option<PathBuf>,
    /// Scanned roots (already expanded: one entry per version folder).
    pub scan: Vec<PathBuf>,
}

impl DiscoverInput {
    /// The input for this machine: `flag`, the environment and the usual folders of `os`.
    pub fn from_env(flag: Option<PathBuf>, os: Os) -> DiscoverInput {
        let env = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        DiscoverInput {
            flag,
            hip_path: env("HIP_PATH"),
            rocm_path: env("ROCM_PATH"),
            scan: default_scan(os),
        }
    }
}

/// `C:\Program Files\AMD\ROCm\*` on Windows; `/opt/rocm`, `/opt/rocm-*` and `/usr` on Linux.
pub fn default_scan(os: Os) -> Vec<PathBuf> {
    match os {
        Os::Windows => {
            let pf = std::env::var_os("ProgramFiles")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(r"C:\Program Files"));
            children(&pf.join("AMD").join("ROCm"), "")
        }
        Os::Linux => {
            let mut v = vec![PathBuf::from("/opt/rocm")];
            v.extend(children(Path::new("/opt"), "rocm-"));
            v.push(PathBuf::from("/usr"));
            v
        }
    }
}

/// Sub-folders of `dir` whose name starts with `prefix`, sorted by name.
pub fn children(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .collect();
    v.sort();
    v
}

/// The outcome of discovery: SDKs found, and candidates that were not SDKs (with why).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Discovery {
    /// SDKs, explicit ones first, then the scan by version, newest first.
    pub sdks: Vec<RocmSdk>,
    /// `(path, reason)` for candidates given explicitly that are not SDKs. Scanned
    /// folders that are not SDKs are skipped silently (`/usr` without HIP headers).
    pub rejected: Vec<(String, String)>,
}

/// Inspects every candidate once (same folder through two routes counts once).
pub fn discover(input: &DiscoverInput) -> Discovery {
    let mut out = Discovery::default();
    let mut seen: Vec<PathBuf> = Vec::new();
    let explicit = [
        (input.flag.as_ref(), SdkOrigin::Flag),
        (input.hip_path.as_ref(), SdkOrigin::HipPath),
        (input.rocm_path.as_ref(), SdkOrigin::RocmPath),
    ];
    let mut scanned = Vec::new();
    for (path, origin) in explicit
        .into_iter()
        .filter_map(|(p, o)| p.map(|p| (p.clone(), o)))
        .chain(input.scan.iter().map(|p| (p.clone(), SdkOrigin::Scan)))
    {
        let key = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        match inspect(&path, origin) {
            Ok(sdk) if origin == SdkOrigin::Scan => scanned.push(sdk),
            Ok(sdk) => out.sdks.push(sdk),
            Err(e) if origin != SdkOrigin::Scan => out
                .rejected
                .push((path.display().to_string(), format!("{e:#}"))),
            Err(_) => {}
        }
    }
    scanned.sort_by(|a, b| {
        (b.version.major, b.version.minor, b.version.patch).cmp(&(
            a.version.major,
            a.version.minor,
            a.version.patch,
        ))
    });
    out.sdks.extend(scanned);
    out
}

/// One run of `amdgpu-arch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuProbe {
    /// The tool that ran.
    pub tool: String,
    /// Its exit code (`None`: killed, or it could not start: see `stderr`).
    pub exit_code: Option<i32>,
    /// One `gfx...` per line per GPU.
    pub stdout: String,
    /// Its complaints.
    pub stderr: String,
}

/// The distinct `gfx*` names in amdgpu-arch output, in first-seen order.
pub fn parse_amdgpu_arch(stdout: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in stdout.lines() {
        let t = line.trim();
        if t.starts_with("gfx") && t != "gfx000" && t.len() > 3 && !out.iter().any(|o| o == t) {
            out.push(t.to_string());
        }
    }
    out
}

/// The GPU targets a probe found, or an error that says what ran and what to do.
pub fn gpus_from_probe(probe: Option<&GpuProbe>) -> Result<Vec<String>> {
    let Some(probe) = probe else {
        bail!(
            "--gpu-targets auto needs amdgpu-arch, and the SDK has none; pass the targets \
             (--gpu-targets gfx1100,gfx1101) or a --track"
        );
    };
    let gpus = parse_amdgpu_arch(&probe.stdout);
    if gpus.is_empty() {
        let why = [probe.stderr.trim(), probe.stdout.trim()]
            .into_iter()
            .find(|s| !s.is_empty())
            .unwrap_or("no output");
        bail!(
            "--gpu-targets auto: {} found no AMD GPU on this machine (exit {}: {why}); pass \
             the targets to build for (--gpu-targets gfx1100,gfx1101) or a --track",
            probe.tool,
            probe
                .exit_code
                .map_or("none".to_string(), |c| c.to_string()),
        );
    }
    Ok(gpus)
}

/// Runs amdgpu-arch; a tool that cannot start is recorded, not raised.
pub fn probe_gpus(tool: &Path) -> GpuProbe {
    match Command::new(tool).output() {
        Ok(out) => GpuProbe {
            tool: tool.display().to_string(),
            exit_code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        },
        Err(e) => GpuProbe {
            tool: tool.display().to_string(),
            exit_code: None,
            stdout: String::new(),
            stderr: format!("could not start: {e}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_files_are_found_in_the_sdk_folder_or_a_multiarch_one_below_it() {
        let tmp = tempfile::tempdir().unwrap();
        let opt = tmp.path().join("opt-rocm");
        std::fs::create_dir_all(opt.join("lib")).unwrap();
        std::fs::write(opt.join("lib/libamdhip64.so.6"), b"x").unwrap();
        assert_eq!(
            find_runtime_file(&opt, "lib", "libamdhip64.so.6"),
            Some(opt.join("lib/libamdhip64.so.6"))
        );
        let usr = tmp.path().join("usr");
        std::fs::create_dir_all(usr.join("lib/x86_64-linux-gnu")).unwrap();
        std::fs::create_dir_all(usr.join("lib/python3")).unwrap();
        std::fs::write(usr.join("lib/python3/librocblas.so.4"), b"x").unwrap();
        std::fs::write(usr.join("lib/x86_64-linux-gnu/librocblas.so.4"), b"x").unwrap();
        assert_eq!(
            find_runtime_file(&usr, "lib", "librocblas.so.4"),
            Some(usr.join("lib/x86_64-linux-gnu/librocblas.so.4"))
        );
        assert_eq!(find_runtime_file(&usr, "lib", "libhipblas.so.2"), None);
    }
}
