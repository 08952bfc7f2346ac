//! The MSVC toolset, pinned by capture (docs/architecture.md section 4, rule 3).
//!
//! Three pure steps and two thin I/O wrappers:
//! - [`parse_vswhere`] reads `vswhere -all -products * -format json -utf8`;
//! - [`select`] picks the instance that holds `VC\Tools\MSVC\<requested>.*` (the folder
//!   listing is gathered by [`list_toolsets`]);
//! - [`parse_vcvars`] splits the output of
//!   `cmd /d /s /c ""vcvarsall.bat" x64 -vcvars_ver=14.44 && echo <SEP> && set"` into the
//!   banner and the environment, and refuses `[ERROR:` lines (vcvarsall exits 0 on failure);
//! - [`check_toolset`] proves the captured `VCToolsVersion` is the one asked for, and
//!   [`refuse_for_hip`] keeps MSVC 14.50+ (VS 2026) away from HIP builds.
//!
//! [`run_vswhere`] and [`capture_vcvars`] are the only functions that start processes.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// The line `echo` prints between vcvarsall's own output and the `set` dump.
pub const SEPARATOR: &str = "===AUDIOCPP-VCVARS-ENV===";

/// The toolset every Windows build pins unless `--msvc-toolset` says otherwise: the
/// newest one ROCm's HIP clang can compile against, and the one the tracks' CRT comes from.
pub const DEFAULT_TOOLSET: &str = "14.44";

/// The first MSVC toolset refused for HIP builds (VS 2026 ships 14.50 and newer).
pub const HIP_REFUSED_FROM: (u32, u32) = (14, 50);

/// Why [`HIP_REFUSED_FROM`] exists, printed with every refusal.
pub const HIP_REFUSAL_REASON: &str = "ROCm's HIP clang cannot parse the <cmath> of MSVC 14.50 \
     and newer (Visual Studio 2026): every ggml-hip .cu file fails to compile";

/// The Visual Studio installer component that adds the 14.44 toolset side by side.
pub const COMPONENT_14_44: &str = "Microsoft.VisualStudio.Component.VC.14.44.17.14.x86.x64";

/// One Visual Studio instance as vswhere reports it, plus the MSVC toolset folders found
/// in it (`VC\Tools\MSVC\*`, filled by [`list_toolsets`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VsInstance {
    /// vswhere's `instanceId`.
    pub instance_id: String,
    /// Install root, e.g. `C:\Program Files (x86)\Microsoft Visual Studio\2022\BuildTools`.
    pub installation_path: String,
    /// Numeric version, e.g. `17.14.36623.8`.
    pub installation_version: String,
    /// Human name, e.g. `Visual Studio Build Tools 2022`.
    pub display_name: String,
    /// The marketing year (`2022`, `2026`) from the catalog, when present.
    #[serde(default)]
    pub product_line_version: Option<String>,
    /// False while an install or update is half done.
    pub is_complete: bool,
    /// Preview channel.
    pub is_prerelease: bool,
    /// Folder names under `VC\Tools\MSVC` (`14.44.35207`), sorted.
    #[serde(default)]
    pub msvc_toolsets: Vec<String>,
}

impl VsInstance {
    /// `<installation>\VC\Auxiliary\Build\vcvarsall.bat`.
    pub fn vcvarsall(&self) -> String {
        win_join(
            &self.installation_path,
            &["VC", "Auxiliary", "Build", "vcvarsall.bat"],
        )
    }

    /// `<installation>\VC\Tools\MSVC`.
    pub fn msvc_dir(&self) -> String {
        win_join(&self.installation_path, &["VC", "Tools", "MSVC"])
    }
}

/// Joins Windows path parts with `\` (plans for Windows are printed on any host).
pub fn win_join(base: &str, parts: &[&str]) -> String {
    let mut out = base.trim_end_matches(['\\', '/']).to_string();
    for part in parts {
        out.push('\\');
        out.push_str(part);
    }
    out
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawInstance {
    instance_id: String,
    installation_path: String,
    installation_version: String,
    #[serde(default)]
    display_name: String,
    #[serde(default = "yes")]
    is_complete: bool,
    #[serde(default)]
    is_prerelease: bool,
    #[serde(default)]
    catalog: Option<RawCatalog>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawCatalog {
    #[serde(default)]
    product_line_version: Option<String>,
}

fn yes() -> bool {
    true
}

/// Parses vswhere's JSON (an array of instances; unknown keys ignored). The toolset
/// lists stay empty: they come from the file system ([`list_toolsets`]).
pub fn parse_vswhere(json: &str) -> Result<Vec<VsInstance>> {
    let json = json.trim_start_matches('\u{feff}');
    let raw: Vec<RawInstance> =
        serde_json::from_str(json).context("parsing vswhere JSON output")?;
    Ok(raw
        .into_iter()
        .map(|r| VsInstance {
            instance_id: r.instance_id,
            installation_path: r.installation_path,
            installation_version: r.installation_version,
            display_name: r.display_name,
            product_line_version: r.catalog.and_then(|c| c.product_line_version),
            is_complete: r.is_complete,
            is_prerelease: r.is_prerelease,
            msvc_toolsets: Vec::new(),
        })
        .collect())
}

/// A dotted version compared numerically (`14.44.35207`, `17.14.36623.8`).
pub fn version_key(version: &str) -> Vec<u64> {
    version
        .split('.')
        .map(|p| p.trim().parse::<u64>().unwrap_or(0))
        .collect()
}

/// `major.minor` of a dotted version, if both parse.
pub fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut it = version.split('.');
    let major = it.next()?.trim().parse().ok()?;
    let minor = it.next()?.trim().parse().ok()?;
    Some((major, minor))
}

/// True when `full` (`14.44.35207`) is the toolset `requested` (`14.44` or the full
/// `14.44.35207`): equal, or `requested` followed by a dot.
pub fn toolset_matches(requested: &str, full: &str) -> bool {
    full == requested
        || full
            .strip_prefix(requested)
            .is_some_and(|rest| rest.starts_with('.'))
}

/// Refuses a toolset for HIP when it is 14.50 or newer, with the reason and the fix.
pub fn refuse_for_hip(toolset: &str) -> Result<()> {
    if let Some(mm) = major_minor(toolset) {
        if mm >= HIP_REFUSED_FROM {
            bail!(
                "MSVC toolset {toolset} is refused for HIP builds: {HIP_REFUSAL_REASON}; \
                 install the v14.44 toolset (Visual Studio Installer component \
                 {COMPONENT_14_44}) and build with --msvc-toolset 14.44"
            );
        }
    }
    Ok(())
}

/// The instance and toolset chosen for a build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selection {
    /// The instance holding the toolset.
    pub instance: VsInstance,
    /// The full toolset folder name (`14.44.35207`).
    pub toolset: String,
}

impl Selection {
    /// The vcvarsall.bat of the selected instance.
    pub fn vcvarsall(&self) -> String {
        self.instance.vcvarsall()
    }
}

/// Picks the instance with a `VC\Tools\MSVC\<requested>.*` folder: complete before
/// incomplete, releases before previews, then the newest instance; within it the highest
/// matching toolset. The error lists every instance and what it holds.
pub fn select(instances: &[VsInstance], requested: &str) -> Result<Selection> {
    let mut best: Option<(&VsInstance, &String)> = None;
    let rank = |i: &VsInstance| {
        (
            i.is_complete,
            !i.is_prerelease,
            version_key(&i.installation_version),
        )
    };
    for inst in instances {
        let Some(toolset) = inst
            .msvc_toolsets
            .iter()
            .filter(|t| toolset_matches(requested, t))
            .max_by_key(|t| version_key(t))
        else {
            continue;
        };
        let better = match best {
            None => true,
            Some((b, _)) => rank(inst) > rank(b),
        };
        if better {
            best = Some((inst, toolset));
        }
    }
    if let Some((inst, toolset)) = best {
        return Ok(Selection {
            instance: inst.clone(),
            toolset: toolset.clone(),
        });
    }
    let found = if instances.is_empty() {
        "vswhere found no Visual Studio instance".to_string()
    } else {
        instances
            .iter()
            .map(|i| {
                format!(
                    "{} {} at {} has [{}]",
                    i.display_name,
                    i.installation_version,
                    i.installation_path,
                    i.msvc_toolsets.join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    bail!(
        "no Visual Studio instance has the MSVC toolset {requested} (VC\\Tools\\MSVC\\{requested}.*): \
         {found}; install it with the Visual Studio Installer (component {COMPONENT_14_44} \
         for 14.44) or pass --msvc-toolset with one listed"
    )
}

/// The banner and environment printed by a vcvarsall capture.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VcvarsOutput {
    /// Lines vcvarsall printed before the separator (banner, `[vcvarsall.bat] ...`).
    pub banner: Vec<String>,
    /// The environment after vcvarsall, by name as printed (`Path`, `INCLUDE`, ...).
    pub env: BTreeMap<String, String>,
}

impl VcvarsOutput {
    /// A variable by name, ignoring case (Windows environment names are case-insensitive).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The variables a toolset sets or changes, the ones every child process needs:
    /// `PATH`, `INCLUDE`, `LIB`, `LIBPATH`, the `VC*`/`VS*`/`WindowsSdk*` family, the UCRT.
    pub fn toolset_env(&self) -> BTreeMap<String, String> {
        self.env
            .iter()
            .filter(|(k, _)| is_toolset_var(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// Whether an environment variable belongs to the toolset (see [`VcvarsOutput::toolset_env`]).
pub fn is_toolset_var(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "PATH",
        "INCLUDE",
        "EXTERNAL_INCLUDE",
        "LIB",
        "LIBPATH",
        "PLATFORM",
        "DEVENVDIR",
        "COMMANDPROMPTTYPE",
        "UCRTVERSION",
        "UNIVERSALCRTSDKDIR",
        "EXTENSIONSDKDIR",
        "IFCPATH",
        "VISUALSTUDIOVERSION",
    ];
    const PREFIXES: &[&str] = &[
        "VC",
        "VS",
        "WINDOWSSDK",
        "WINDOWSLIBPATH",
        "FRAMEWORK",
        "__VSCMD",
        "__DOTNET",
    ];
    let upper = name.to_ascii_uppercase();
    EXACT.contains(&upper.as_str()) || PREFIXES.iter().any(|p| upper.starts_with(p))
}

/// A vcvarsall capture that cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VcvarsError {
    /// vcvarsall printed `[ERROR:` lines (it exits 0 all the same).
    #[error("vcvarsall reported errors: {}", .0.join(" | "))]
    Reported(Vec<String>),
    /// The separator never came: vcvarsall stopped the `&&` chain.
    #[error("vcvarsall did not complete (no '{SEPARATOR}' line in its output); its output ends with: {0}")]
    NoSeparator(String),
    /// No `VCToolsVersion` in the environment.
    #[error("vcvarsall set no VCToolsVersion: the toolset was not initialised")]
    NoToolsVersion,
    /// `VCToolsVersion` is another toolset than the one asked for.
    #[error("vcvarsall gave VCToolsVersion={got}, not the requested {requested}.*: the pin did not take")]
    WrongToolset {
        /// Asked for.
        requested: String,
        /// Got.
        got: String,
    },
}

/// Splits a capture into banner and environment; any `[ERROR:` line is fatal.
pub fn parse_vcvars(output: &str) -> Result<VcvarsOutput, VcvarsError> {
    let mut out = VcvarsOutput::default();
    let mut errors = Vec::new();
    let mut after = false;
    for line in output.lines() {
        let line = line.trim_end_matches('\r');
        if line.contains("[ERROR:") {
            errors.push(line.trim().to_string());
            continue;
        }
        if !after {
            if line.trim() == SEPARATOR {
                after = true;
            } else if !line.trim().is_empty() {
                out.banner.push(line.to_string());
            }
            continue;
        }
        // `set` prints NAME=value; hidden per-drive variables start with '='.
        if let Some((name, value)) = line.split_once('=') {
            if !name.is_empty() {
                out.env.insert(name.to_string(), value.to_string());
            }
        }
    }
    if !errors.is_empty() {
        return Err(VcvarsError::Reported(errors));
    }
    if !after {
        let tail: Vec<&str> = output.lines().rev().take(3).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(VcvarsError::NoSeparator(tail.join(" / ")));
    }
    Ok(out)
}

/// Proves the captured environment is the requested toolset; returns `VCToolsVersion`.
pub fn check_toolset(env: &VcvarsOutput, requested: &str) -> Result<String, VcvarsError> {
    let got = env
        .get("VCToolsVersion")
        .ok_or(VcvarsError::NoToolsVersion)?;
    let got = got.trim().to_string();
    if !toolset_matches(requested, &got) {
        return Err(VcvarsError::WrongToolset {
            requested: requested.to_string(),
            got,
        });
    }
    Ok(got)
}

/// The recorded facts of one vcvarsall run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VcvarsCapture {
    /// The vcvarsall.bat that ran.
    pub vcvarsall: String,
    /// The toolset passed as `-vcvars_ver`.
    pub requested: String,
    /// The command line given to cmd (for the record).
    pub command_line: String,
    /// cmd's exit code (vcvarsall may exit 0 on failure: the output decides).
    pub exit_code: Option<i32>,
    /// stdout then stderr, as printed.
    pub output: String,
}

/// What vswhere and the file system say about Visual Studio on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MsvcFacts {
    /// The vswhere.exe used.
    pub vswhere: String,
    /// The instances, with their toolset folders.
    pub instances: Vec<VsInstance>,
    /// The capture for the selected instance and requested toolset, when one was selected.
    pub capture: Option<VcvarsCapture>,
}

/// The cmd.exe command line that runs vcvarsall and prints the environment after it.
/// `/s` keeps cmd from mangling the outer quotes; `/d` skips AutoRun scripts.
pub fn vcvars_command_line(vcvarsall: &str, arch: &str, toolset: &str) -> String {
    format!("/d /s /c \"\"{vcvarsall}\" {arch} -vcvars_ver={toolset} && echo {SEPARATOR} && set\"")
}

/// The default vswhere.exe location (the Visual Studio Installer's own copy).
pub fn default_vswhere() -> PathBuf {
    let base = std::env::var_os("ProgramFiles(x86)")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(r"C:\Program Files (x86)"));
    base.join("Microsoft Visual Studio")
        .join("Installer")
        .join("vswhere.exe")
}

/// Runs `vswhere -all -products * -format json -utf8` and parses it.
pub fn run_vswhere(vswhere: &Path) -> Result<Vec<VsInstance>> {
    let out = Command::new(vswhere)
        .args(["-all", "-products", "*", "-format", "json", "-utf8"])
        .output()
        .with_context(|| format!("running {}", vswhere.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}",
            vswhere.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse_vswhere(&String::from_utf8_lossy(&out.stdout))
}

/// Lists `VC\Tools\MSVC\*` folder names of an instance (sorted by version).
pub fn list_toolsets(installation_path: &Path) -> Vec<String> {
    let dir = installation_path.join("VC").join("Tools").join("MSVC");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| major_minor(n).is_some())
        .collect();
    names.sort_by_key(|n| version_key(n));
    names
}

/// Runs vcvarsall through cmd with the separator and `set`, and records what it printed.
/// `cmd` is `cmd.exe` on Windows (or `wine cmd` style wrappers in tests).
pub fn capture_vcvars(
    cmd: &Path,
    vcvarsall: &str,
    arch: &str,
    toolset: &str,
) -> Result<VcvarsCapture> {
    let line = vcvars_command_line(vcvarsall, arch, toolset);
    let mut command = Command::new(cmd);
    add_raw_arg(&mut command, &line);
    let out = command
        .output()
        .with_context(|| format!("running {} {line}", cmd.display()))?;
    let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
    output.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok(VcvarsCapture {
        vcvarsall: vcvarsall.to_string(),
        requested: toolset.to_string(),
        command_line: format!("cmd.exe {line}"),
        exit_code: out.status.code(),
        output,
    })
}

#[cfg(windows)]
fn add_raw_arg(command: &mut Command, line: &str) {
    use std::os::windows::process::CommandExt;
    command.raw_arg(line);
}

#[cfg(not(windows))]
fn add_raw_arg(command: &mut Command, line: &str) {
    // Off Windows the only cmd is Wine's: it rebuilds the command line from separate
    // arguments (quoting those with spaces), so hand it the words, quotes removed.
    let inner = line
        .strip_prefix("/d /s /c \"")
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(line);
    command.args(["/d", "/c"]).args(split_words(inner));
}

/// Splits a command line into words; double quotes group, and are dropped.
pub fn split_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut has = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                has = true;
            }
            ' ' if !quoted => {
                if has {
                    words.push(std::mem::take(&mut cur));
                    has = false;
                }
            }
            _ => {
                cur.push(c);
                has = true;
            }
        }
    }
    if has {
        words.push(cur);
    }
    words
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MSVC {} from {} {} ({})",
            self.toolset,
            self.instance.display_name,
            self.instance.installation_version,
            self.instance.installation_path
        )
    }
}
