//! Packaging tracks: the typed schema of `packaging/tracks.toml` (docs/architecture.md section 4,
//! rules 2, 4 and 5).
//!
//! A track is everything that differs between two packages (OS, SDK version, package
//! name, GPU targets, the runtime files to bundle and how they are loaded, kernel library
//! folders, the C runtime, plugin patterns, README notes), held as data so that `dist`
//! and `verify-deps` have no per-track `if`. [`TracksFile::load`] parses the file with
//! unknown keys refused and then [`TracksFile::validate`]s it; every error names the file,
//! the key and, where there is a fixed set, the allowed values.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use regex::Regex;
use serde::{Deserialize, Serialize};

/// The schema version this code reads (`schema = 1` at the top of the file).
pub const SCHEMA_VERSION: u32 = 1;

/// The whole of `packaging/tracks.toml`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TracksFile {
    /// Schema version; must equal [`SCHEMA_VERSION`].
    pub schema: u32,
    /// Rules shared by every track (system allowlists, forbidden files, runtime majors).
    pub policy: Policy,
    /// The tracks by name (`rocm6`, `rocm7`, `windows-cpu`, ...), the value of `--track`.
    pub tracks: BTreeMap<String, Track>,
}

/// Dependency rules shared by every track (`[policy]`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Allowlist of Windows system DLLs, a path relative to `packaging/`.
    pub windows_system: String,
    /// Allowlist of Linux system libraries (manylinux base set), relative to `packaging/`.
    pub linux_system: String,
    /// Globs of import names that are never followed nor reported (`api-ms-win-*`).
    pub never_follow: Vec<String>,
    /// Folder names that no bundled file may come from (`debug_nonredist`).
    #[serde(default)]
    pub forbidden_dirs: Vec<String>,
    /// The remedy printed for a file from one of [`Policy::forbidden_dirs`].
    #[serde(default)]
    pub forbidden_dirs_fix: String,
    /// Files that must never be imported nor bundled.
    #[serde(default)]
    pub forbidden: Vec<ForbiddenRule>,
    /// Runtimes of which one package may carry only one major version.
    #[serde(default)]
    pub runtime_majors: Vec<RuntimeMajorRule>,
}

/// A file name that must never appear in a dependency closure (`[[policy.forbidden]]`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ForbiddenRule {
    /// Case-insensitive glob on the file name (`*`, `?`, `[...]`), e.g. `libomp140*.dll`.
    pub pattern: String,
    /// What the file is, printed after `forbidden (`.
    pub reason: String,
    /// How to get rid of it, printed after the reason.
    pub fix: String,
}

/// A runtime whose major version is part of its file name (`[[policy.runtime_majors]]`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeMajorRule {
    /// The runtime; a name outside [`Runtime`] is an error, so a misspelt rule cannot
    /// end up checking nothing.
    pub runtime: Runtime,
    /// Regex on the lower-case file name with exactly one capture group: the major.
    pub pattern: String,
}

/// A GPU runtime of which one package carries one major version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
pub enum Runtime {
    /// AMD ROCm / HIP (`amdhip64_6.dll`, `libamdhip64.so.7`).
    #[serde(rename = "ROCm")]
    Rocm,
    /// NVIDIA CUDA (`cudart64_12.dll`, `libcudart.so.12`).
    #[serde(rename = "CUDA")]
    Cuda,
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Runtime::Rocm => "ROCm",
            Runtime::Cuda => "CUDA",
        })
    }
}

/// Operating system of a track.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Os {
    /// Windows: PE files, case-insensitive names, DLLs resolved next to the executable.
    Windows,
    /// Linux: ELF files, SONAMEs, RPATH/RUNPATH with `$ORIGIN`.
    Linux,
}

/// CPU architecture of a track's binaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    /// x86-64 (PE machine 0x8664, ELF EM_X86_64).
    X64,
    /// AArch64 (PE machine 0xAA64, ELF EM_AARCH64).
    Arm64,
}

/// The GPU backend a track ships (besides the CPU backends every track has).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// CPU only.
    Cpu,
    /// AMD GPUs through HIP/ROCm.
    Hip,
    /// NVIDIA GPUs through CUDA.
    Cuda,
    /// Vulkan.
    Vulkan,
}

/// The SDK a GPU track is built against.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Sdk {
    /// Which SDK.
    pub kind: SdkKind,
    /// `MAJOR.MINOR`, e.g. `6.4`; on Windows the HIP SDK folder `C:\Program Files\AMD\ROCm\6.4`.
    pub version: String,
}

impl Sdk {
    /// The major version (`6` for `6.4`); the schema validates that it parses.
    pub fn major(&self) -> u32 {
        self.version
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0)
    }
}

/// Kind of GPU SDK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SdkKind {
    /// AMD ROCm / HIP SDK.
    Rocm,
    /// NVIDIA CUDA toolkit.
    Cuda,
}

/// How a bundled runtime file gets loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Load {
    /// Named in an import table / DT_NEEDED of something in the package: it must be
    /// reachable from an executable or a plugin.
    Imported,
    /// Opened at run time with LoadLibrary/dlopen by [`RuntimeFile::loaded_by`]
    /// (`amd_comgr_*` by `amdhip64_*`): no import names it, so the checks walk it as a root.
    RuntimeLoaded,
}

/// A runtime file copied from the SDK into the package root (or `lib/` on Linux).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeFile {
    /// File name as shipped (`amdhip64_6.dll`, `libamdhip64.so.6`). A runtime-loaded file
    /// may be a glob (`amd_comgr*.dll`): its name differs between AMD's builds, so `dist`
    /// takes the one file the SDK (or runtime source) ships under it.
    pub name: String,
    /// Folder holding it, relative to the SDK root (`bin`, `lib`).
    pub source: String,
    /// Imported, or loaded at run time.
    pub load: Load,
    /// For [`Load::RuntimeLoaded`]: the runtime file that loads it (required then,
    /// refused otherwise).
    #[serde(default)]
    pub loaded_by: Option<String>,
    /// May be absent from the package (the SDK build may not have it); when present it
    /// follows the same rules as a required file.
    #[serde(default)]
    pub optional: bool,
    /// Comes only from a real SDK (`--rocm-path`): a package built from a runtime source
    /// without it (the Windows HIP cross-build) records it as absent in its manifest and
    /// README, and `verify-package` checks exactly that.
    #[serde(default)]
    pub sdk_only: bool,
}

/// A GPU kernel library folder (rocBLAS / hipBLASLt `library/`), filtered by GPU target.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KernelLibrary {
    /// Short name (`rocblas`, `hipblaslt`), used in size tables and the manifest.
    pub name: String,
    /// Folder relative to the SDK root (`bin/rocblas/library`).
    pub source: String,
    /// Folder relative to the package root (`rocblas/library`).
    pub dest: String,
    /// The runtime file that reads these kernels; must be one of the track's runtime files.
    pub used_by: String,
    /// Shipped only when [`KernelLibrary::used_by`] is shipped.
    #[serde(default)]
    pub optional: bool,
    /// Comes only from a real SDK, as [`RuntimeFile::sdk_only`].
    #[serde(default)]
    pub sdk_only: bool,
}

/// The C/C++ runtime DLLs bundled with a Windows track.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Crt {
    /// Which toolchain's runtime this is.
    #[serde(default)]
    pub kind: CrtKind,
    /// Toolset `MAJOR.MINOR` the binaries are built with (MSVC: `docs/architecture.md`
    /// section 4, rule 3; a bundled CRT older than the binaries' linker is an error;
    /// MinGW: the GCC version).
    pub toolset: String,
    /// Where the DLLs come from: for MSVC the folder relative to the Visual Studio
    /// install root; for MinGW a description.
    pub source: String,
    /// Absolute folders searched for `files` when `dist` gets no `--crt-dir` (the
    /// cross toolchain's runtime folders on a Linux build host).
    #[serde(default)]
    pub search: Vec<String>,
    /// The DLL names to bundle; each must be imported by something in the package.
    pub files: Vec<String>,
    /// The tool that removes the DWARF debug sections of these DLLs as they are staged
    /// (`x86_64-w64-mingw32-strip`, run as `--preserve-dates --strip-debug`: the header
    /// keeps the DLL's own time stamp, `dist::package`): MinGW-w64's runtime as Debian
    /// ships it carries them (libstdc++-6.dll: 23.7 MB, 4.3 MB without), and no user of
    /// the package debugs it; code, exports and imports stay as they are.
    /// Absent: the DLLs are copied as they are (the Visual C++ redistributable).
    #[serde(default)]
    pub strip_debug: Option<String>,
}

/// The toolchain a bundled C/C++ runtime belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CrtKind {
    /// The Visual C++ redistributable (MSVCP140, VCRUNTIME140...).
    #[default]
    Msvc,
    /// MinGW-w64's GCC runtime (libstdc++, libgcc_s, winpthread).
    Mingw,
}

/// Which CPU code a build ships (`cpu_variants` of `[tracks.NAME.build]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuVariants {
    /// Every CPU variant ggml builds (x64, sse42, haswell, ... zen4), each a backend
    /// library loaded at start, the best one for the CPU picked (dynamic backends).
    All,
    /// One static CPU backend linked into the executables, x86-64 baseline (SSE2): for
    /// toolchains that cannot assemble every variant (Debian 12's MinGW and the AMX one).
    Baseline,
}

/// Where the products ggml's GPU backend sends to BLAS go (`gemm` of `[tracks.NAME.build]`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GemmRoute {
    /// ggml's own route: cuBLAS, or hipBLAS over rocBLAS on HIP (rocBLAS ends the process
    /// on a GPU it has no kernels for).
    #[default]
    Upstream,
    /// Our library over hipBLASLt (gemm/README.md), wired into ggml-hip by CMake: every
    /// BLAS product goes to hipBLASLt, which has kernels for every target we ship.
    Hipblaslt,
}

/// What differs per track in how its binaries are built (`[tracks.NAME.build]`): the
/// input of `build`'s planner (xtask/src/build/plan.rs), which adds the environment rules
/// every build shares (OpenMP off, graphs off, HIP without VMM, the MSVC capture...).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BuildSpec {
    /// Rust target triple (default: the track's OS and arch with the platform toolchain,
    /// `x86_64-pc-windows-msvc`, `x86_64-unknown-linux-gnu`).
    #[serde(default)]
    pub target: Option<String>,
    /// Which CPU code ships; a track without it has no build recipe.
    #[serde(default)]
    pub cpu_variants: Option<CpuVariants>,
    /// Cargo features of audiocpp-cli/audiocpp-server besides those the planner derives
    /// from the backend and `cpu_variants` (`hip`, `cuda`, `dynamic-backends`).
    #[serde(default)]
    pub features: Vec<String>,
    /// Extra environment for this track only; a variable the planner sets is refused.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The GEMM route of the GPU backend (`upstream` unless the track says `hipblaslt`).
    #[serde(default)]
    pub gemm: GemmRoute,
    /// The cross-build recipe (a file under packaging/, e.g.
    /// `windows-hip/cross.toml`): ggml's GPU backend is built by xtask's own CMake run in
    /// that recipe's Debian chroot ([`crate::cross_backend`]), the executables there too.
    #[serde(default)]
    pub cross: Option<String>,
    /// The Debian chroot (a suite of packaging/sdk/debian.toml) whose ROCm this track is
    /// built against, for the Linux HIP tracks: `cargo xtask test hip` builds it there.
    #[serde(default)]
    pub chroot: Option<String>,
    /// The recipe of ggml's Vulkan backend (a file under packaging/, e.g.
    /// `vulkan/ggml-vulkan.toml`): built by xtask's own CMake run as a plugin beside the
    /// executables, from pinned Vulkan headers and glslc, and cached outside the clone
    /// ([`crate::vulkan`]). Required by, and only allowed for, `backend = "vulkan"`.
    #[serde(default)]
    pub vulkan: Option<String>,
}

/// One package: everything `dist` builds and `verify-deps` checks for it.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Track {
    /// One line for listings and the manifest.
    pub description: String,
    /// Target OS.
    pub os: Os,
    /// Target CPU architecture.
    pub arch: Arch,
    /// GPU backend.
    pub backend: Backend,
    /// Package (and zip root folder) name, e.g. `audiocpp-windows-hip-rocm6`.
    pub package: String,
    /// GPU SDK; required for GPU backends, refused for `cpu`.
    #[serde(default)]
    pub sdk: Option<Sdk>,
    /// GPU architectures compiled for and kept in kernel libraries (`gfx1100`, ...).
    #[serde(default)]
    pub gpu_targets: Vec<String>,
    /// Targets known to have no GEMM kernels in this SDK's libraries, shipped anyway
    /// (a subset of `gpu_targets`; `dist` records them in the manifest).
    #[serde(default)]
    pub uncovered_targets: Vec<String>,
    /// Executable file names at the package root; every one is a root of the closure walk.
    pub executables: Vec<String>,
    /// Globs of product libraries the executables import (`ggml-base.dll`, `ggml.dll`).
    #[serde(default)]
    pub libraries: Vec<String>,
    /// Globs of plugins loaded at run time (ggml dynamic backends `ggml-*.dll`,
    /// `libggml-*.so*`); each match is a root of the closure walk.
    #[serde(default)]
    pub plugins: Vec<String>,
    /// Runtime files copied from the SDK.
    #[serde(default)]
    pub runtime: Vec<RuntimeFile>,
    /// RUNPATH written into the bundled copies of the ELF runtime files (`$ORIGIN`):
    /// a distribution's libraries have none and RUNPATH is not inherited, so without it
    /// `librocblas.so.4` could not find `libroctx64.so.4` next to itself.
    #[serde(default)]
    pub runtime_runpath: Option<String>,
    /// The tool that takes the symbol table (and any debug sections) out of the
    /// executables as they are staged (`strip`, `x86_64-w64-mingw32-strip`; run as
    /// `--preserve-dates --strip-all`, so a PE header keeps the link time): a GNU-linked
    /// Rust executable carries about 4.5 MB of symbols that only a debugger or profiler
    /// reads. The build keeps them (the portable-CPU test finds the engine's dispatched
    /// kernels by name). Absent: copied as they are (MSVC links put symbols into a
    /// separate PDB).
    #[serde(default)]
    pub strip_executables: Option<String>,
    /// Kernel library folders copied from the SDK, filtered to `gpu_targets`.
    #[serde(default)]
    pub kernel_libraries: Vec<KernelLibrary>,
    /// Bundled C runtime (Windows only).
    #[serde(default)]
    pub crt: Option<Crt>,
    /// Extra system libraries this track may import without bundling (Linux: the
    /// amdgpu driver stack; Windows: the NVIDIA driver's nvcuda.dll); added to the
    /// policy's allowlist for this track.
    #[serde(default)]
    pub system_extra: Vec<String>,
    /// Lines `dist` writes into the package README.
    #[serde(default)]
    pub readme_notes: Vec<String>,
    /// What the engine's start-up guard tells the owner of a GPU that the package's GEMM
    /// kernel folders do not cover (written into the manifest; GPU tracks only).
    #[serde(default)]
    pub uncovered_advice: Option<String>,
    /// How `build` (and `dist`, when no `--bin-dir` is given) builds the binaries.
    #[serde(default)]
    pub build: BuildSpec,
}

impl Track {
    /// Every file name this track declares as bundled besides product binaries:
    /// runtime files then CRT files.
    pub fn declared_runtime_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.runtime.iter().map(|r| r.name.as_str()).collect();
        if let Some(crt) = &self.crt {
            names.extend(crt.files.iter().map(String::as_str));
        }
        names
    }
}

/// A problem in `tracks.toml`: the file, the key path (`tracks.rocm6.runtime[1].loaded_by`)
/// and what is wrong, including the allowed values where there is a fixed set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracksError {
    /// The file that holds the problem.
    pub file: PathBuf,
    /// Dotted key path, empty for whole-file problems.
    pub key: String,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl fmt::Display for TracksError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(f, "{}: {}: {}", self.file.display(), self.key, self.message)
        }
    }
}

impl std::error::Error for TracksError {}

/// Reads a data file of `packaging/`, the error naming the file.
pub fn read_data_file(path: &Path) -> Result<String, TracksError> {
    std::fs::read_to_string(path).map_err(|e| TracksError {
        file: path.to_path_buf(),
        key: String::new(),
        message: format!("cannot read: {e}"),
    })
}

/// Parses a data file's TOML into its typed schema (serde's error, which names the key
/// and the allowed values, on one line); `path` is only used in error messages.
pub fn parse_data_file<T: serde::de::DeserializeOwned>(
    text: &str,
    path: &Path,
) -> Result<T, TracksError> {
    toml::from_str(text).map_err(|e| TracksError {
        file: path.to_path_buf(),
        key: String::new(),
        message: e.to_string().trim_end().replace('\n', " | "),
    })
}

impl TracksFile {
    /// The default location: `packaging/tracks.toml`.
    pub fn default_path() -> PathBuf {
        crate::project::packaging_dir().join("tracks.toml")
    }

    /// Reads, parses and validates a tracks file.
    pub fn load(path: &Path) -> Result<TracksFile, TracksError> {
        Self::parse(&read_data_file(path)?, path)
    }

    /// Parses and validates tracks TOML; `path` is only used in error messages.
    pub fn parse(text: &str, path: &Path) -> Result<TracksFile, TracksError> {
        let file: TracksFile = parse_data_file(text, path)?;
        file.validate(path)?;
        Ok(file)
    }

    /// Looks a track up by name; the error lists the track names there are.
    pub fn track(&self, name: &str) -> anyhow::Result<&Track> {
        self.tracks.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.tracks.keys().map(String::as_str).collect();
            anyhow::anyhow!(
                "unknown track '{name}' (allowed: {}; see packaging/tracks.toml)",
                known.join(", ")
            )
        })
    }

    /// Checks everything serde cannot: cross-references, name shapes and patterns.
    pub fn validate(&self, path: &Path) -> Result<(), TracksError> {
        let err = |key: String, message: String| TracksError {
            file: path.to_path_buf(),
            key,
            message,
        };
        if self.schema != SCHEMA_VERSION {
            return Err(err(
                "schema".into(),
                format!("is {}, this xtask reads {SCHEMA_VERSION}", self.schema),
            ));
        }
        for (i, rule) in self.policy.forbidden.iter().enumerate() {
            Glob::new(&rule.pattern)
                .map_err(|e| err(format!("policy.forbidden[{i}].pattern"), e.to_string()))?;
        }
        for (i, g) in self.policy.never_follow.iter().enumerate() {
            Glob::new(g).map_err(|e| err(format!("policy.never_follow[{i}]"), e.to_string()))?;
        }
        for (i, rule) in self.policy.runtime_majors.iter().enumerate() {
            let key = format!("policy.runtime_majors[{i}].pattern");
            let re = Regex::new(&rule.pattern).map_err(|e| err(key.clone(), e.to_string()))?;
            if re.captures_len() != 2 {
                return Err(err(
                    key,
                    "needs exactly one capture group (the major version)".into(),
                ));
            }
        }
        let name_re = Regex::new("^[a-z0-9][a-z0-9-]*$").expect("static regex");
        let version_re = Regex::new(r"^\d+\.\d+$").expect("static regex");
        let mut packages = BTreeSet::new();
        for (name, t) in &self.tracks {
            let k = |field: &str| format!("tracks.{name}.{field}");
            if !name_re.is_match(name) {
                return Err(err(
                    format!("tracks.{name}"),
                    "track names are lower-case letters, digits and '-'".into(),
                ));
            }
            if !packages.insert(t.package.as_str()) {
                return Err(err(
                    k("package"),
                    format!("'{}' is already used by another track", t.package),
                ));
            }
            match (t.backend, &t.sdk) {
                (Backend::Cpu, Some(_)) => {
                    return Err(err(k("sdk"), "a cpu track has no sdk".into()));
                }
                (Backend::Hip, Some(sdk)) if sdk.kind != SdkKind::Rocm => {
                    return Err(err(
                        k("sdk.kind"),
                        "backend hip needs kind = \"rocm\" (allowed: rocm, cuda)".into(),
                    ));
                }
                (Backend::Cuda, Some(sdk)) if sdk.kind != SdkKind::Cuda => {
                    return Err(err(
                        k("sdk.kind"),
                        "backend cuda needs kind = \"cuda\" (allowed: rocm, cuda)".into(),
                    ));
                }
                (Backend::Hip | Backend::Cuda, None) => {
                    return Err(err(k("sdk"), "a GPU track needs an sdk table".into()));
                }
                _ => {}
            }
            if let Some(sdk) = &t.sdk {
                if !version_re.is_match(&sdk.version) {
                    return Err(err(
                        k("sdk.version"),
                        format!("'{}' is not MAJOR.MINOR (e.g. \"6.4\")", sdk.version),
                    ));
                }
            }
            if let Some(advice) = t.uncovered_advice.as_deref().filter(|a| a.contains("--")) {
                return Err(err(
                    k("uncovered_advice"),
                    format!(
                        "'{advice}' names a CLI flag, which server users do not have; write \
                         the engine's parameter (\"set parameter 'backend' to cpu\"), which \
                         the CLI and the server each spell in their own terms"
                    ),
                ));
            }
            if t.backend == Backend::Cpu && !t.gpu_targets.is_empty() {
                return Err(err(
                    k("gpu_targets"),
                    "a cpu track has no GPU targets".into(),
                ));
            }
            if t.backend == Backend::Hip && t.gpu_targets.is_empty() {
                return Err(err(
                    k("gpu_targets"),
                    "a hip track needs GPU targets".into(),
                ));
            }
            if t.backend == Backend::Cuda && t.gpu_targets.is_empty() {
                return Err(err(
                    k("gpu_targets"),
                    "a cuda track needs its CUDA architectures (e.g. [\"86-real\", \"90-virtual\"])".into(),
                ));
            }
            let mut seen = BTreeSet::new();
            for (i, g) in t.gpu_targets.iter().enumerate() {
                let checked = match t.backend {
                    Backend::Cuda => crate::gpu_target::check_cuda_arch(g),
                    _ => crate::gpu_target::check_gfx_target(g).map(|_| ()),
                };
                checked.map_err(|m| err(format!("tracks.{name}.gpu_targets[{i}]"), m))?;
                if !seen.insert(g) {
                    return Err(err(
                        format!("tracks.{name}.gpu_targets[{i}]"),
                        format!("'{g}' is listed twice"),
                    ));
                }
            }
            for (i, g) in t.uncovered_targets.iter().enumerate() {
                if !seen.contains(g) {
                    return Err(err(
                        format!("tracks.{name}.uncovered_targets[{i}]"),
                        format!("'{g}' is not in gpu_targets"),
                    ));
                }
            }
            if t.executables.is_empty() {
                return Err(err(k("executables"), "a track needs an executable".into()));
            }
            for (field, globs) in [("libraries", &t.libraries), ("plugins", &t.plugins)] {
                for (i, g) in globs.iter().enumerate() {
                    Glob::new(g)
                        .map_err(|e| err(format!("tracks.{name}.{field}[{i}]"), e.to_string()))?;
                }
            }
            let fold = |s: &str| match t.os {
                Os::Windows => s.to_ascii_lowercase(),
                Os::Linux => s.to_string(),
            };
            let mut runtime_names = BTreeSet::new();
            for (i, r) in t.runtime.iter().enumerate() {
                let rk = format!("tracks.{name}.runtime[{i}]");
                check_file_name(t.os, &r.name).map_err(|m| err(format!("{rk}.name"), m))?;
                if r.name.contains(['*', '?']) && r.load != Load::RuntimeLoaded {
                    return Err(err(
                        format!("{rk}.name"),
                        format!("'{}' is a glob: only a runtime-loaded file (whose name no import fixes) may be one", r.name),
                    ));
                }
                if !runtime_names.insert(fold(&r.name)) {
                    return Err(err(
                        format!("{rk}.name"),
                        format!("'{}' is listed twice", r.name),
                    ));
                }
            }
            for (i, r) in t.runtime.iter().enumerate() {
                let rk = format!("tracks.{name}.runtime[{i}]");
                match (r.load, &r.loaded_by) {
                    (Load::RuntimeLoaded, None) => {
                        return Err(err(
                            format!("{rk}.loaded_by"),
                            "load = \"runtime_loaded\" needs loaded_by (the runtime file that loads it)"
                                .into(),
                        ));
                    }
                    (Load::Imported, Some(_)) => {
                        return Err(err(
                            format!("{rk}.loaded_by"),
                            "only allowed with load = \"runtime_loaded\" (allowed loads: imported, runtime_loaded)"
                                .into(),
                        ));
                    }
                    (Load::RuntimeLoaded, Some(by)) => {
                        if !runtime_names.contains(&fold(by)) || fold(by) == fold(&r.name) {
                            return Err(err(
                                format!("{rk}.loaded_by"),
                                format!(
                                    "'{by}' is not another runtime file of this track (allowed: {})",
                                    t.runtime
                                        .iter()
                                        .filter(|o| o.name != r.name)
                                        .map(|o| o.name.as_str())
                                        .collect::<Vec<_>>()
                                        .join(", ")
                                ),
                            ));
                        }
                    }
                    (Load::Imported, None) => {}
                }
            }
            for (i, kl) in t.kernel_libraries.iter().enumerate() {
                if !runtime_names.contains(&fold(&kl.used_by)) {
                    return Err(err(
                        format!("tracks.{name}.kernel_libraries[{i}].used_by"),
                        format!("'{}' is not a runtime file of this track", kl.used_by),
                    ));
                }
            }
            if let Some(crt) = &t.crt {
                if t.os != Os::Windows {
                    return Err(err(k("crt"), "only Windows tracks bundle a CRT".into()));
                }
                if !version_re.is_match(&crt.toolset) {
                    return Err(err(
                        k("crt.toolset"),
                        format!("'{}' is not MAJOR.MINOR (e.g. \"14.44\")", crt.toolset),
                    ));
                }
                for (i, f) in crt.files.iter().enumerate() {
                    let ck = format!("tracks.{name}.crt.files[{i}]");
                    check_file_name(t.os, f).map_err(|m| err(ck.clone(), m))?;
                    if !runtime_names.insert(fold(f)) {
                        return Err(err(ck, format!("'{f}' is listed twice")));
                    }
                }
            }
            validate_build(name, t).map_err(|(key, m)| err(key, m))?;
        }
        Ok(())
    }
}

/// Features the build planner derives itself: from the backend and `cpu_variants`.
pub const PLANNED_FEATURES: &[(&str, &str)] = &[
    ("hip", "backend = \"hip\""),
    ("cuda", "backend = \"cuda\""),
    ("dynamic-backends", "cpu_variants = \"all\""),
];

fn validate_build(name: &str, t: &Track) -> Result<(), (String, String)> {
    let b = &t.build;
    for (i, f) in b.features.iter().enumerate() {
        if let Some((_, from)) = PLANNED_FEATURES.iter().find(|(p, _)| p == f) {
            return Err((
                format!("tracks.{name}.build.features[{i}]"),
                format!("'{f}' is decided by the build planner from {from}: remove it"),
            ));
        }
    }
    if let Some(triple) = &b.target {
        let os_ok = match t.os {
            Os::Windows => triple.contains("-windows-"),
            Os::Linux => triple.contains("-linux-"),
        };
        let cpu = match t.arch {
            Arch::X64 => "x86_64-",
            Arch::Arm64 => "aarch64-",
        };
        if !os_ok || !triple.starts_with(cpu) {
            return Err((
                format!("tracks.{name}.build.target"),
                format!(
                    "'{triple}' is not a {:?} {:?} Rust target (e.g. x86_64-pc-windows-msvc, x86_64-pc-windows-gnu, x86_64-unknown-linux-gnu)",
                    t.os, t.arch
                ),
            ));
        }
    }
    if b.cpu_variants == Some(CpuVariants::Baseline) && t.arch != Arch::X64 {
        return Err((
            format!("tracks.{name}.build.cpu_variants"),
            "\"baseline\" is the x86-64 SSE2 baseline; an arm64 track takes \"all\"".into(),
        ));
    }
    match (t.backend, &b.vulkan, b.cpu_variants) {
        (Backend::Vulkan, None, Some(_)) => {
            return Err((
                format!("tracks.{name}.build.vulkan"),
                "a vulkan track's build names the recipe of ggml's Vulkan backend (e.g. \"vulkan/ggml-vulkan.toml\")".into(),
            ));
        }
        (Backend::Vulkan, Some(_), Some(CpuVariants::Baseline)) => {
            return Err((
                format!("tracks.{name}.build.cpu_variants"),
                "the Vulkan backend is a plugin loaded at start, so a vulkan track takes \"all\" (dynamic backends)".into(),
            ));
        }
        (Backend::Cpu | Backend::Hip | Backend::Cuda, Some(_), _) => {
            return Err((
                format!("tracks.{name}.build.vulkan"),
                format!(
                    "only a vulkan track builds ggml's Vulkan backend (this one is {:?})",
                    t.backend
                ),
            ));
        }
        _ => {}
    }
    if b.gemm == GemmRoute::Hipblaslt && t.backend != Backend::Hip {
        return Err((
            format!("tracks.{name}.build.gemm"),
            format!(
                "\"hipblaslt\" routes ggml-hip's products; a {:?} track takes \"upstream\" (or no key)",
                t.backend
            ),
        ));
    }
    Ok(())
}

fn check_file_name(os: Os, name: &str) -> Result<(), String> {
    if name.contains(['/', '\\']) || name.is_empty() {
        return Err(format!("'{name}' must be a bare file name"));
    }
    match os {
        Os::Windows if !name.to_ascii_lowercase().ends_with(".dll") => {
            Err(format!("'{name}' is not a .dll name"))
        }
        Os::Linux if !name.contains(".so") => Err(format!("'{name}' is not a .so name")),
        _ => Ok(()),
    }
}

/// A case-insensitive file-name glob: `*` any run, `?` one character, `[...]` a class.
#[derive(Debug, Clone)]
pub struct Glob {
    source: String,
    re: Regex,
}

impl Glob {
    /// Compiles a glob; an unclosed `[` is an error.
    pub fn new(pattern: &str) -> anyhow::Result<Glob> {
        let mut re = String::from("(?i)^");
        let mut chars = pattern.chars();
        while let Some(c) = chars.next() {
            match c {
                '*' => re.push_str(".*"),
                '?' => re.push('.'),
                '[' => {
                    re.push('[');
                    let mut closed = false;
                    for c in chars.by_ref() {
                        if c == ']' {
                            closed = true;
                            break;
                        }
                        if c == '\\' || c == '[' {
                            re.push('\\');
                        }
                        re.push(c);
                    }
                    anyhow::ensure!(closed, "glob '{pattern}' has an unclosed '['");
                    re.push(']');
                }
                c => re.push_str(&regex::escape(&c.to_string())),
            }
        }
        re.push('$');
        Ok(Glob {
            source: pattern.to_string(),
            re: Regex::new(&re)?,
        })
    }

    /// Whether a file name matches (case-insensitively).
    pub fn matches(&self, name: &str) -> bool {
        self.re.is_match(name)
    }

    /// The glob as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<TracksFile, TracksError> {
        TracksFile::parse(text, Path::new("tracks.toml"))
    }

    #[test]
    fn repo_tracks_file_is_valid() {
        let file = TracksFile::load(&TracksFile::default_path()).unwrap();
        let rocm6 = file.track("rocm6").unwrap();
        assert_eq!(rocm6.package, "audiocpp-windows-hip-rocm6");
        assert_eq!(rocm6.gpu_targets.len(), 8);
        let rocm7 = file.track("rocm7").unwrap();
        assert_eq!(rocm7.gpu_targets.len(), 7);
        assert!(!rocm7.gpu_targets.iter().any(|g| g == "gfx1102"));
        assert!(rocm7
            .readme_notes
            .iter()
            .any(|n| n == "RX 7600 series users: use the ROCm 6 package."));
        for name in [
            "windows-cpu",
            "linux-cpu",
            "linux-hip-rocm6",
            "linux-hip-rocm7",
        ] {
            file.track(name).unwrap();
        }
        let err = file.track("rocm8").unwrap_err().to_string();
        assert!(err.contains("allowed: ") && err.contains("rocm6"), "{err}");
    }

    const MINIMAL: &str = r#"
schema = 1
[policy]
windows_system = "w.txt"
linux_system = "l.txt"
never_follow = []
[tracks.t]
description = "d"
os = "windows"
arch = "x64"
backend = "cpu"
package = "p"
executables = ["a.exe"]
"#;

    #[test]
    fn unknown_key_names_the_key_and_allowed_ones() {
        let e = parse(&MINIMAL.replace("package = \"p\"", "package = \"p\"\npackages = 1"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("tracks.toml: "), "{e}");
        assert!(
            e.contains("unknown field `packages`") && e.contains("`package`"),
            "{e}"
        );
    }

    #[test]
    fn bad_enum_value_lists_allowed_values() {
        let e = parse(&MINIMAL.replace("os = \"windows\"", "os = \"macos\""))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("macos") && e.contains("windows") && e.contains("linux"),
            "{e}"
        );
    }

    #[test]
    fn runtime_loaded_needs_a_loader_from_the_track() {
        let text = MINIMAL.replace("backend = \"cpu\"", "backend = \"cpu\"\nruntime = [ { name = \"a.dll\", source = \"bin\", load = \"imported\" }, { name = \"b.dll\", source = \"bin\", load = \"runtime_loaded\", loaded_by = \"c.dll\" } ]");
        let e = parse(&text).unwrap_err();
        assert_eq!(e.key, "tracks.t.runtime[1].loaded_by");
        assert!(e.message.contains("allowed: a.dll"), "{e}");
        let text = text.replace(", loaded_by = \"c.dll\"", "");
        assert_eq!(
            parse(&text).unwrap_err().key,
            "tracks.t.runtime[1].loaded_by"
        );
    }

    #[test]
    fn build_recipe_refuses_planner_features_foreign_targets_and_bad_cuda_names() {
        let with_build = |build: &str| format!("{MINIMAL}[tracks.t.build]\n{build}\n");
        let e = parse(&with_build(
            "cpu_variants = \"all\"\nfeatures = [\"deployment\", \"dynamic-backends\"]",
        ))
        .unwrap_err();
        assert_eq!(e.key, "tracks.t.build.features[1]");
        assert!(e.message.contains("cpu_variants = \"all\""), "{e}");
        let e = parse(&with_build("target = \"x86_64-unknown-linux-gnu\"")).unwrap_err();
        assert_eq!(e.key, "tracks.t.build.target");
        assert!(e.message.contains("x86_64-pc-windows-gnu"), "{e}");
        let e = parse(&with_build("cpu_variants = \"some\"")).unwrap_err();
        assert!(
            e.message.contains("some")
                && e.message.contains("all")
                && e.message.contains("baseline"),
            "{e}"
        );
        assert!(parse(&with_build(
            "target = \"x86_64-pc-windows-gnu\"\ncpu_variants = \"baseline\""
        ))
        .is_ok());
        let e = parse(&with_build("cpu_variants = \"all\"\ngemm = \"hipblaslt\"")).unwrap_err();
        assert_eq!(e.key, "tracks.t.build.gemm");
        assert!(e.message.contains("upstream"), "{e}");
        let e = parse(&with_build("cpu_variants = \"all\"\ngemm = \"rocblas\"")).unwrap_err();
        assert!(
            e.message.contains("rocblas")
                && e.message.contains("upstream")
                && e.message.contains("hipblaslt"),
            "{e}"
        );
        let cuda = MINIMAL.replace(
            "backend = \"cpu\"",
            "backend = \"cuda\"\nsdk = { kind = \"cuda\", version = \"12.8\" }\ngpu_targets = [\"86-real\", \"sm_90\"]",
        );
        let e = parse(&cuda).unwrap_err();
        assert_eq!(e.key, "tracks.t.gpu_targets[1]");
        assert!(e.message.contains("not a CUDA architecture"), "{e}");
        assert!(parse(&cuda.replace(", \"sm_90\"", "")).is_ok());
    }

    #[test]
    fn uncovered_advice_naming_a_cli_flag_is_refused() {
        let with = |advice: &str| {
            MINIMAL.replace(
                "executables = [\"a.exe\"]",
                &format!("executables = [\"a.exe\"]\nuncovered_advice = \"{advice}\""),
            )
        };
        let e = parse(&with("no kernels: run with --backend cpu")).unwrap_err();
        assert_eq!(e.key, "tracks.t.uncovered_advice");
        assert!(e.message.contains("set parameter 'backend' to cpu"), "{e}");
        assert!(parse(&with("no kernels: set parameter 'backend' to cpu")).is_ok());
    }

    #[test]
    fn a_misspelt_runtime_major_rule_is_refused_with_the_allowed_names() {
        let rule =
            "[[policy.runtime_majors]]\nruntime = \"Rocm\"\npattern = '^amdhip64_(\\d+)\\.dll$'\n";
        let text = MINIMAL.replace("never_follow = []\n", &format!("never_follow = []\n{rule}"));
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.starts_with("tracks.toml: "), "{e}");
        assert!(
            e.contains("runtime = \"Rocm\"") && e.contains("`ROCm`") && e.contains("`CUDA`"),
            "{e}"
        );
        let ok = parse(&text.replace("\"Rocm\"", "\"ROCm\"")).unwrap();
        assert_eq!(ok.policy.runtime_majors[0].runtime, Runtime::Rocm);
    }

    #[test]
    fn glob_is_case_insensitive_and_anchored() {
        let g = Glob::new("libomp140*.dll").unwrap();
        assert!(g.matches("LIBOMP140.X86_64.DLL"));
        assert!(!g.matches("xlibomp140.dll"));
        let g = Glob::new("msvcp1[0-9][0-9]*d.dll").unwrap();
        assert!(g.matches("msvcp140d.dll") && !g.matches("msvcp140.dll"));
        assert!(Glob::new("a[b").is_err());
    }
}
