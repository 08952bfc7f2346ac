//! [`plan`]: a pure function from a [`BuildRequest`] and [`HostFacts`] to a [`BuildPlan`]
//! (docs/architecture.md section 4, rule 1). Every environment variable carries the reason it is
//! there; `--dry-run` prints them and the tests snapshot them.
//!
//! How the environment reaches ggml: llama-cpp-sys-2 forwards every `GGML_*` and
//! `CMAKE_*` variable to CMake as a cache entry (its own options win), the cmake crate
//! reads `CMAKE_GENERATOR` and `CMAKE_PREFIX_PATH`, and cargo reads
//! `CARGO_ENCODED_RUSTFLAGS`. `GPU_TARGETS` is not forwarded: on Windows, where ggml-hip
//! compiles its `.cu` files as C++ through `hip::device` (whose `--offload-arch` list comes
//! from `GPU_TARGETS`), the plan writes a small CMake file that sets it and names it in
//! `CMAKE_PROJECT_INCLUDE_BEFORE`.

use std::fmt::Write as _;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::facts::HostFacts;
use super::request::{Bins, BuildRequest, GpuTargets, Link};
use crate::toolset::msvc;
use crate::toolset::rocm::{self, RocmSdk, SdkOrigin};
use crate::tracks::{Backend, GemmRoute, Os};

/// CUDA architectures when neither a track nor `--gpu-targets` names them: PTX for
/// Turing and Ampere (JIT-compiled by any newer driver, Blackwell included), SASS for the
/// common consumer parts (Ampere 8.6, Ada 8.9) and PTX for Hopper.
pub const DEFAULT_CUDA_ARCHITECTURES: &[&str] = &[
    "75-virtual",
    "80-virtual",
    "86-real",
    "89-real",
    "90-virtual",
];

/// ggml's x86 instruction-set options, all turned off in a portable static build.
pub const X86_ISA_OPTIONS: &[&str] = &[
    "GGML_SSE42",
    "GGML_AVX",
    "GGML_AVX2",
    "GGML_BMI2",
    "GGML_FMA",
    "GGML_F16C",
    "GGML_AVX_VNNI",
    "GGML_AVX512",
    "GGML_AVX512_VBMI",
    "GGML_AVX512_VNNI",
    "GGML_AVX512_BF16",
    "GGML_AMX_TILE",
    "GGML_AMX_INT8",
    "GGML_AMX_BF16",
];

/// The flags the plan puts in `CMAKE_C_FLAGS` for GNU-style ROCm clang on Windows.
pub const HIP_WINDOWS_C_FLAGS: &str = "-Wno-ignored-attributes";
/// The flags the plan puts in `CMAKE_CXX_FLAGS` for GNU-style ROCm clang on Windows.
pub const HIP_WINDOWS_CXX_FLAGS: &str = "-Wno-ignored-attributes -Wno-nested-anon-types";
/// The flags the plan puts in `CMAKE_ASM_FLAGS` for GNU-style ROCm clang on Windows.
pub const HIP_WINDOWS_ASM_FLAGS: &str = "-Wno-unused-command-line-argument";

/// Why the three flag variables above are set at all.
pub const WHY_FLAGS: &str = "defined so the cmake crate does not write CMAKE_<LANG>_FLAGS itself: \
     for an MSVC target it fills them with cc's cl.exe flags (-nologo -MD -Brepro) and \
     llama-cpp-sys-2's `/O2 /DNDEBUG /Ob2` (added on MSVC release profiles), which \
     GNU-style ROCm clang takes for input files; optimisation still comes from \
     CMAKE_<LANG>_FLAGS_RELEASE (-O3 -DNDEBUG)";

/// One environment variable of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvVar {
    /// Name.
    pub name: String,
    /// Value.
    pub value: String,
    /// Why it is set.
    pub why: String,
}

/// A file the plan writes before the commands run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedFile {
    /// Absolute path (on the build machine).
    pub path: String,
    /// Contents.
    pub contents: String,
    /// Why.
    pub why: String,
}

/// A command the plan runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedCommand {
    /// Program (`cargo`).
    pub program: String,
    /// Arguments.
    pub args: Vec<String>,
    /// Working folder.
    pub cwd: String,
    /// Why.
    pub why: String,
    /// The command is skipped when this file exists: a build step whose result is cached
    /// outside the clone (the Vulkan backend, [`crate::vulkan`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_if_exists: Option<String>,
}

impl PlannedCommand {
    /// The command line as a shell would show it (arguments with spaces quoted).
    pub fn display(&self) -> String {
        std::iter::once(self.program.as_str())
            .chain(self.args.iter().map(String::as_str))
            .map(|a| {
                if a.contains(' ') {
                    format!("\"{a}\"")
                } else {
                    a.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The MSVC toolset a plan builds with (recorded in the package manifest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolsetRecord {
    /// The toolset asked for (`14.44`).
    pub requested: String,
    /// `VCToolsVersion` as captured (`14.44.35207`).
    pub vc_tools_version: String,
    /// Visual Studio instance name and version.
    pub instance: String,
    /// Its install folder.
    pub installation_path: String,
    /// The vcvarsall.bat that was run.
    pub vcvarsall: String,
}

/// The GPU SDK a plan builds against (recorded in the package manifest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SdkRecord {
    /// `rocm` or `cuda`.
    pub kind: String,
    /// Version read from the SDK.
    pub version: String,
    /// Root folder.
    pub root: String,
    /// Where the version was read (ROCm) or `version.json` (CUDA).
    pub version_source: String,
}

/// Everything one build does, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildPlan {
    /// `hip-rocm6`, `cpu`, ...: the track name, or the backend.
    pub label: String,
    /// The backend.
    pub backend: Backend,
    /// The track, when one was given.
    pub track: Option<String>,
    /// The OS the build runs on (and the binaries are for).
    pub os: Os,
    /// `--target` passed to cargo, if any.
    pub target: Option<String>,
    /// The cargo target folder of this configuration.
    pub target_dir: String,
    /// Packages built.
    pub packages: Vec<String>,
    /// Cargo features, `package/feature`.
    pub features: Vec<String>,
    /// Static or dynamic ggml backends.
    pub link: Link,
    /// Whether ggml is built for the build machine's own CPU.
    pub native_cpu: bool,
    /// GPU targets (HIP `gfx*`, CUDA architectures).
    pub gpu_targets: Vec<String>,
    /// The MSVC toolset (Windows MSVC targets).
    pub toolset: Option<ToolsetRecord>,
    /// The GPU SDK.
    pub sdk: Option<SdkRecord>,
    /// Environment for every command, in order.
    pub env: Vec<EnvVar>,
    /// Files written first.
    pub files: Vec<PlannedFile>,
    /// Commands, in order.
    pub commands: Vec<PlannedCommand>,
    /// Executables the build must produce.
    pub executables: Vec<String>,
    /// Where ggml's shared libraries land in the profile folder (dynamic builds): paths
    /// with file-name globs, searched after the build.
    pub library_globs: Vec<String>,
    /// Globs relative to the OUT_DIR of llama-cpp-sys-2's build script, which cargo
    /// reports while it builds (`lib/libggml*.so*`, `backends/*.so*`).
    #[serde(default)]
    pub binding_globs: Vec<String>,
    /// Remarks worth reading (decisions taken, risks handled).
    pub notes: Vec<String>,
    /// The cross-build preparation the executor does before the commands (tracks with
    /// `build.cross`: the Windows HIP cross-build, [`crate::cross_backend`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross: Option<crate::cross_backend::CrossPrep>,
    /// What the executor lays out for the Vulkan backend's build before the commands
    /// (tracks with `build.vulkan`, [`crate::vulkan`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vulkan: Option<crate::vulkan::VulkanPrep>,
}

impl BuildPlan {
    /// The value of an environment variable of the plan.
    pub fn env_value(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|e| e.name.eq_ignore_ascii_case(name))
            .map(|e| e.value.as_str())
    }
}

fn join(root: &str, rel: &str, os: Os) -> String {
    rocm::join(root, rel, os)
}

struct Env(Vec<EnvVar>);

impl Env {
    fn set(&mut self, name: &str, value: impl Into<String>, why: &str) {
        self.0.push(EnvVar {
            name: name.to_string(),
            value: value.into(),
            why: why.to_string(),
        });
    }
}

/// The crate that builds ggml; its build script's OUT_DIR holds ggml's libraries.
pub const BINDING: &str = "llama-cpp-sys-2";

/// Environment variables the planner's rules own: a track may not set them itself.
pub const PLANNER_VARS: &[&str] = &[
    "CMAKE_GENERATOR",
    "GGML_OPENMP",
    "GGML_NATIVE",
    "GGML_HIP_NO_VMM",
    "GGML_HIP_GRAPHS",
    "GGML_CUDA_GRAPHS",
    "CMAKE_HIP_ARCHITECTURES",
    "CMAKE_CUDA_ARCHITECTURES",
    "CMAKE_BUILD_RPATH",
    "CMAKE_INSTALL_RPATH",
    "CARGO_ENCODED_RUSTFLAGS",
    "HIP_PATH",
    "ROCM_PATH",
    "CUDA_PATH",
];

/// Adds a track's own `build.env` after the planner's rules; a variable a rule owns (or
/// that a rule set for this plan) is refused, naming the file, the key and the remedy.
fn add_track_env(
    track: &str,
    extra: &std::collections::BTreeMap<String, String>,
    env: &mut Env,
) -> Result<()> {
    for (name, value) in extra {
        let owned = PLANNER_VARS.contains(&name.as_str())
            || X86_ISA_OPTIONS.contains(&name.as_str())
            || env.0.iter().any(|e| e.name.eq_ignore_ascii_case(name));
        if owned {
            bail!(
                "packaging/tracks.toml: tracks.{track}.build.env.{name}: set by the build planner's rules (xtask/src/build/plan.rs, with their reasons); remove it from the track"
            );
        }
        env.set(
            name,
            value,
            &format!("track {track}'s own setting (packaging/tracks.toml)"),
        );
    }
    Ok(())
}

/// The target triple a track's binaries are built for.
pub fn default_triple(os: Os, arch: crate::tracks::Arch) -> String {
    let cpu = match arch {
        crate::tracks::Arch::X64 => "x86_64",
        crate::tracks::Arch::Arm64 => "aarch64",
    };
    match os {
        Os::Windows => format!("{cpu}-pc-windows-msvc"),
        Os::Linux => format!("{cpu}-unknown-linux-gnu"),
    }
}

/// Plans a build. Pure: reads only its arguments. The steps below each own one part of
/// the plan (the target, the MSVC toolset, the MinGW compilers, the backend's SDK, the CPU
/// code, the cargo command, the outputs); they run in this order, which is also the order
/// of the environment the plan prints and fingerprints.
pub fn plan(req: &BuildRequest, host: &HostFacts) -> Result<BuildPlan> {
    check_backend(req)?;
    let triple = target_triple(req);
    let effective_triple = triple.clone().unwrap_or_else(|| host.host_triple.clone());
    let target_os = if effective_triple.contains("windows") {
        Os::Windows
    } else {
        Os::Linux
    };
    let msvc_target = effective_triple.ends_with("-windows-msvc");
    if msvc_target && host.os != Os::Windows {
        bail!(
            "{effective_triple} builds on Windows with MSVC and these facts are from a {} machine; \
             run this on the Windows build box, or print its plan here from facts recorded there \
             (`cargo xtask doctor --save-facts facts.json` on Windows, then `--facts facts.json --dry-run`)",
            os_name(host.os)
        );
    }
    let os = host.os;
    let mut env = Env(Vec::new());
    let mut notes: Vec<String> = Vec::new();

    // Static builds for the host with no track get ggml for this very CPU unless told
    // otherwise; anything meant to be shipped stays portable.
    let dynamic = req.link == Link::Dynamic;
    let native_cpu = !req.no_native_cpu && !dynamic && req.track.is_none() && req.target.is_none();

    // MSVC toolset (rule 3).
    let toolset = if msvc_target {
        Some(msvc_step(req, host, &mut env)?)
    } else {
        None
    };

    let label = match &req.track {
        Some(t) => t.name.clone(),
        None => backend_name(req.backend).to_string(),
    };

    if msvc_target {
        env.set(
            "CMAKE_GENERATOR",
            "Ninja",
            "Ninja for MSVC targets: the cmake crate would otherwise pick the Visual Studio generator, which cannot drive ROCm clang and sets per-config flags behind our back",
        );
    }
    if let Some(arch) = effective_triple.strip_suffix("-pc-windows-gnu") {
        mingw_step(&effective_triple, arch, &mut env);
    }

    let cross = req.track.as_ref().and_then(|t| t.cross.as_ref());
    if effective_triple.ends_with("-windows-gnu") && dynamic && cross.is_none() {
        env.set(
            "CMAKE_PROJECT_ggml_INCLUDE",
            format!(
                "{}/packaging/windows-gnu/no-amx.cmake",
                host.workspace.replace('\\', "/")
            ),
            "dynamic backends with the build host's MinGW-w64 (Debian 12's binutils 2.40, which cannot assemble AMX tile loads for a PE target): ggml's sapphirerapids CPU variant is built without its AMX kernels",
        );
    }
    let step = match req.backend {
        Backend::Hip => match cross {
            Some(inputs) => cross_hip_step(req, host, inputs)?,
            None => hip_step(req, host, &mut env)?,
        },
        Backend::Cuda => cuda_step(req, host, &mut env)?,
        Backend::Cpu => {
            if !matches!(req.gpu_targets, GpuTargets::Default) {
                bail!("--gpu-targets applies to the hip and cuda backends, not cpu");
            }
            BackendStep::default()
        }
        Backend::Vulkan => vulkan_step(req, host, &effective_triple, dynamic)?,
    };
    notes.extend(step.notes);

    env.set(
        "GGML_OPENMP",
        "OFF",
        "no OpenMP runtime to ship (libomp140/vcomp140/libgomp are forbidden in packages)",
    );
    cpu_code_step(
        native_cpu,
        dynamic,
        target_os,
        &effective_triple,
        &mut env,
        &mut notes,
    );
    if let Some(j) = req.jobs {
        env.set(
            "CMAKE_BUILD_PARALLEL_LEVEL",
            j.to_string(),
            "--jobs for ggml's CMake build too",
        );
    }

    // Features and packages.
    let packages = packages(req.bins);
    let features = features(req, &packages, cross.is_some(), dynamic, &mut env)?;

    // A target folder per configuration: the binding never reconfigures an existing CMake
    // cache, so two configurations must never share one. It is named by what cargo builds,
    // not by the track: the Vulkan backend is a plugin built apart (above), so a vulkan
    // track's executables are its CPU track's, built once in one folder.
    let cargo_backend = match req.backend {
        Backend::Vulkan => Backend::Cpu,
        b => b,
    };
    let folder = backend_name(cargo_backend);
    let fingerprint = fingerprint(
        folder,
        &effective_triple,
        &env.0,
        dynamic,
        &toolset,
        &step.sdk,
    );
    let target_dir = join(
        &host.target_root,
        &format!("build/{folder}-{fingerprint}"),
        os,
    );

    let mut files = Vec::new();
    if let Some(contents) = step.files_pending {
        let path = join(&target_dir, "audiocpp-gpu-targets.cmake", os);
        env.set(
            "CMAKE_PROJECT_INCLUDE_BEFORE",
            &path,
            "sets GPU_TARGETS before ggml's project(): on Windows hip::device takes its --offload-arch list from it",
        );
        files.push(PlannedFile {
            path,
            contents,
            why: "the GPU targets for hip::device (the binding forwards only CMAKE_* and GGML_* variables)".into(),
        });
    }

    let mut commands = step.cross_commands;
    commands.push(PlannedCommand {
        program: "cargo".into(),
        args: cargo_args(
            &packages,
            &features,
            &target_dir,
            triple.as_deref(),
            req.jobs,
        ),
        cwd: host.workspace.clone(),
        why: "builds ggml (CMake, through llama-cpp-sys-2) and the executables".into(),
        skip_if_exists: None,
    });

    let profile_dir = match &triple {
        Some(t) => join(&target_dir, &format!("{t}/release"), os),
        None => join(&target_dir, "release", os),
    };
    let exe = if target_os == Os::Windows { ".exe" } else { "" };
    let executables: Vec<String> = packages
        .iter()
        .map(|p| join(&profile_dir, &format!("{}{exe}", p.replace('-', "_")), os))
        .collect();
    let (mut library_globs, binding_globs) = if dynamic {
        library_globs(target_os, &profile_dir, os)
    } else {
        (Vec::new(), Vec::new())
    };

    library_globs.extend(step.library_globs_extra);
    Ok(BuildPlan {
        label,
        backend: req.backend,
        track: req.track.as_ref().map(|t| t.name.clone()),
        os,
        target: triple,
        target_dir,
        packages,
        features,
        link: req.link,
        native_cpu,
        gpu_targets: step.gpu_targets,
        toolset,
        sdk: step.sdk,
        env: env.0,
        files,
        commands,
        executables,
        library_globs,
        binding_globs,
        notes,
        cross: step.cross_prep,
        vulkan: step.vulkan_prep,
    })
}

/// Refuses a request whose backend its track does not build, and the backend with no
/// build recipe (Vulkan).
fn check_backend(req: &BuildRequest) -> Result<()> {
    if let Some(t) = &req.track {
        if t.track.backend != req.backend {
            bail!(
                "track {} builds the {} backend, not {}; use --backend {}",
                t.name,
                backend_name(t.track.backend),
                backend_name(req.backend),
                backend_name(t.track.backend)
            );
        }
    }
    if req.backend == Backend::Vulkan
        && req.track.as_ref().and_then(|t| t.vulkan.as_ref()).is_none()
    {
        bail!(
            "the vulkan backend is built for a track whose build names its recipe (`build.vulkan` in packaging/tracks.toml): pass --track linux-vulkan or --track windows-vulkan-gnu"
        );
    }
    Ok(())
}

/// The `--target` triple: `--target`, else the track's (its `build.target` or the
/// default for its OS and arch); `None` builds for the host.
fn target_triple(req: &BuildRequest) -> Option<String> {
    match (&req.target, &req.track) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(t)) => Some(
            t.track
                .build
                .target
                .clone()
                .unwrap_or_else(|| default_triple(t.track.os, t.track.arch)),
        ),
        (None, None) => None,
    }
}

/// The MSVC toolset of an MSVC target (rule 3): picks it, checks it against the track's
/// CRT and the HIP limit, and puts the environment vcvarsall printed into `env`.
fn msvc_step(req: &BuildRequest, host: &HostFacts, env: &mut Env) -> Result<ToolsetRecord> {
    let requested = req.effective_msvc_toolset();
    if req.backend == Backend::Hip {
        msvc::refuse_for_hip(&requested)?;
    }
    if let Some(crt) = req.track.as_ref().and_then(|t| t.track.crt.as_ref()) {
        if let (Some(want), Some(have)) = (
            msvc::major_minor(&requested),
            msvc::major_minor(&crt.toolset),
        ) {
            if want > have {
                bail!(
                    "track {} bundles the CRT of MSVC {}, older than the requested toolset {requested}: \
                     binaries linked by a newer toolset need its newer CRT; build with --msvc-toolset {}",
                    req.track.as_ref().map(|t| t.name.as_str()).unwrap_or(""),
                    crt.toolset,
                    crt.toolset
                );
            }
        }
    }
    let facts = host
        .msvc
        .as_ref()
        .context("no Visual Studio facts: vswhere was not run on this machine")?;
    let sel = msvc::select(&facts.instances, &requested)
        .with_context(|| format!("selecting the MSVC toolset (vswhere: {})", facts.vswhere))?;
    let cap = facts.capture.as_ref().with_context(|| {
        format!("{sel} was selected but vcvarsall was never captured for it; run discovery again")
    })?;
    if !cap.vcvarsall.eq_ignore_ascii_case(&sel.vcvarsall()) || cap.requested != requested {
        bail!(
            "the recorded vcvarsall capture ({} -vcvars_ver={}) is not the selected one ({} -vcvars_ver={requested}); \
             record the facts again",
            cap.vcvarsall,
            cap.requested,
            sel.vcvarsall()
        );
    }
    let what = format!("\"{}\" x64 -vcvars_ver={requested}", cap.vcvarsall);
    let parsed = msvc::parse_vcvars(&cap.output).with_context(|| format!("running {what}"))?;
    let version =
        msvc::check_toolset(&parsed, &requested).with_context(|| format!("running {what}"))?;
    if req.backend == Backend::Hip {
        msvc::refuse_for_hip(&version)?;
    }
    let why = format!("MSVC {version} environment captured from {what} (passed to every child: cargo, cmake, clang, link)");
    for (k, v) in parsed.toolset_env() {
        env.set(&k, v, &why);
    }
    Ok(ToolsetRecord {
        requested: requested.clone(),
        vc_tools_version: version,
        instance: format!(
            "{} {}",
            sel.instance.display_name, sel.instance.installation_version
        ),
        installation_path: sel.instance.installation_path.clone(),
        vcvarsall: cap.vcvarsall.clone(),
    })
}

/// The MinGW-w64 compilers and API level of a `*-pc-windows-gnu` target (`arch` is its
/// CPU part), as the per-target variables the cmake and cc crates read.
fn mingw_step(effective_triple: &str, arch: &str, env: &mut Env) {
    // The cmake and cc crates read these per-target variables; the names carry the
    // triple with `_` for `-`.
    let key = effective_triple.replace('-', "_");
    let why_cc = "MinGW-w64's posix-thread compilers: the default win32 thread model has no std::mutex, which ggml needs";
    env.set(
        &format!("CC_{key}"),
        format!("{arch}-w64-mingw32-gcc-posix"),
        why_cc,
    );
    env.set(
        &format!("CXX_{key}"),
        format!("{arch}-w64-mingw32-g++-posix"),
        why_cc,
    );
    let why_winnt = "Windows 7 API level: Debian 12's MinGW headers lack THREAD_POWER_THROTTLING_STATE, which ggml uses when _WIN32_WINNT >= 0x0602";
    env.set(&format!("CFLAGS_{key}"), "-D_WIN32_WINNT=0x0601", why_winnt);
    env.set(
        &format!("CXXFLAGS_{key}"),
        "-D_WIN32_WINNT=0x0601",
        why_winnt,
    );
    env.set(
        "SOURCE_DATE_EPOCH",
        MINGW_LINK_TIME,
        "MinGW's ld stamps each .exe and DLL with the time of the link unless SOURCE_DATE_EPOCH is set: a fixed stamp gives the same bytes from every build of the same sources (docs/architecture.md section 4, rule 8)",
    );
}

/// The TimeDateStamp MinGW's ld writes into the PE files it links (1980-01-01, the
/// earliest time a zip entry can carry).
pub const MINGW_LINK_TIME: &str = "315532800";

/// What a backend's step adds to the plan besides environment variables.
#[derive(Default)]
struct BackendStep {
    gpu_targets: Vec<String>,
    sdk: Option<SdkRecord>,
    /// Contents of the GPU-targets CMake file (Windows HIP), written in the target folder.
    files_pending: Option<String>,
    library_globs_extra: Vec<String>,
    cross_prep: Option<crate::cross_backend::CrossPrep>,
    vulkan_prep: Option<crate::vulkan::VulkanPrep>,
    /// Commands that run before the cargo build (the cross-build of the GPU backend).
    cross_commands: Vec<PlannedCommand>,
    notes: Vec<String>,
}

/// The Vulkan backend, a plugin built apart from the executables by its recipe (the
/// track's `vulkan` inputs) into a cache outside the clone: the executables are the CPU
/// build, which loads it at start.
fn vulkan_step(
    req: &BuildRequest,
    host: &HostFacts,
    effective_triple: &str,
    dynamic: bool,
) -> Result<BackendStep> {
    let inputs = req
        .track
        .as_ref()
        .and_then(|t| t.vulkan.as_ref())
        .expect("checked by check_backend");
    if !dynamic {
        bail!("the Vulkan backend is a plugin loaded at start: build it with --link dynamic (the track's cpu_variants = \"all\")");
    }
    if host.cache_root.is_empty() {
        bail!("these host facts name no cache folder (`cache_root`), where the Vulkan backend's build is kept: record them again with `cargo xtask doctor --save-facts`");
    }
    let v = crate::vulkan::plan(
        inputs,
        effective_triple,
        &host.cache_root,
        &host.workspace,
        req.jobs,
    )?;
    let mut notes = v.notes;
    notes.push("the executables are the CPU build (no `vulkan` cargo feature): they load the Vulkan backend at start like any backend, so one build serves the CPU track and this one".into());
    Ok(BackendStep {
        library_globs_extra: vec![v.prep.output.clone()],
        vulkan_prep: Some(v.prep),
        cross_commands: v.commands,
        notes,
        ..BackendStep::default()
    })
}

/// HIP built apart from the executables by a cross recipe (the track's `cross` inputs):
/// the executables are CPU builds that load the GPU backend at start.
fn cross_hip_step(
    req: &BuildRequest,
    host: &HostFacts,
    inputs: &crate::cross_backend::CrossInputs,
) -> Result<BackendStep> {
    let gpu_targets = hip_targets(req, host)?;
    let c = crate::cross_backend::plan(
        inputs,
        &gpu_targets,
        &host.workspace,
        &host.target_root,
        req.jobs,
    )?;
    let runtime = crate::cross_backend::runtime_root(&host.target_root, &inputs.spec.chroot);
    let mut notes = c.notes;
    notes.push("the executables are built for the CPU with dynamic backends (no `hip` feature): they load ggml-hip.dll at start like any backend".into());
    Ok(BackendStep {
        gpu_targets,
        sdk: Some(SdkRecord {
            kind: "rocm".into(),
            version: inputs.spec.runtime.hip_version.clone(),
            root: runtime,
            version_source: format!(
                "{}=={} (sha256 {})",
                inputs.spec.runtime.name, inputs.spec.runtime.version, inputs.spec.runtime.sha256
            ),
        }),
        files_pending: None,
        library_globs_extra: vec![c.prep.output.clone()],
        cross_prep: Some(c.prep),
        cross_commands: c.commands,
        notes,
        ..BackendStep::default()
    })
}

/// HIP through a ROCm SDK on the build machine: its compilers, GPU targets and the HIP
/// options of ggml.
fn hip_step(req: &BuildRequest, host: &HostFacts, env: &mut Env) -> Result<BackendStep> {
    let mut step = BackendStep::default();
    let os = host.os;
    let sdk = select_rocm(req, host)?;
    let v = &sdk.version;
    step.gpu_targets = hip_targets(req, host)?;
    let root = sdk.root_trimmed().to_string();
    let sdk_why = format!(
        "ROCm {v} ({}, version read from {}): ggml-hip finds hip/hipblas/rocblas through ROCM_PATH, and the binding links from ROCM_PATH/HIP_PATH",
        origin_name(sdk.origin),
        sdk.version_source
    );
    if root == "/usr" {
        step.notes.push("ROCm is the distribution's (/usr): ROCM_PATH stays unset, since clang then cannot find its device libraries".into());
    } else {
        env.set("HIP_PATH", &root, &sdk_why);
        env.set("ROCM_PATH", &root, &sdk_why);
    }
    let clangxx = sdk
        .clangxx
        .as_ref()
        .map(|r| sdk.tool_path(r, os))
        .with_context(|| format!("ROCm SDK at {root} has no clang++ (looked in llvm/bin, lib/llvm/bin, lib/llvm-*/bin, bin)"))?;
    if os == Os::Windows {
        let clang = sdk
            .clang
            .as_ref()
            .map(|r| sdk.tool_path(r, os))
            .with_context(|| format!("ROCm SDK at {root} has no clang.exe"))?;
        env.set("CMAKE_PREFIX_PATH", &root, "find_package(hip/hipblas/rocblas) looks here (ggml-hip reads ROCM_PATH only when that folder exists)");
        let why_cc = "ROCm clang compiles all of ggml (C, C++, and the HIP .cu files, which ggml-hip builds as C++ on Windows since CMake has no HIP language there)";
        env.set("CMAKE_C_COMPILER", &clang, why_cc);
        env.set("CMAKE_CXX_COMPILER", &clangxx, why_cc);
        env.set(
            "CMAKE_ASM_COMPILER",
            &clang,
            "ggml declares ASM; without this the cmake crate names cl.exe as the assembler",
        );
        env.set("CMAKE_C_FLAGS", HIP_WINDOWS_C_FLAGS, WHY_FLAGS);
        env.set("CMAKE_CXX_FLAGS", HIP_WINDOWS_CXX_FLAGS, WHY_FLAGS);
        env.set("CMAKE_ASM_FLAGS", HIP_WINDOWS_ASM_FLAGS, WHY_FLAGS);
        env.set(
            "CMAKE_POLICY_DEFAULT_CMP0091",
            "NEW",
            "let CMAKE_MSVC_RUNTIME_LIBRARY pick the CRT",
        );
        env.set(
            "CMAKE_MSVC_RUNTIME_LIBRARY",
            "MultiThreadedDLL",
            "release CRT as a DLL (/MD), as Rust links it; never the debug CRT",
        );
        step.notes.push("MSVC-style flags: llama-cpp-sys-2 adds `/O2 /DNDEBUG /Ob2` through the cmake crate on MSVC release profiles; they only reach CMake through the CMAKE_<LANG>_FLAGS the cmake crate writes when those are undefined, so defining them (above) keeps them away from GNU-style ROCm clang++".into());
    } else {
        env.set(
            "CMAKE_HIP_COMPILER",
            &clangxx,
            "ROCm clang++ compiles the HIP .cu files (CMake's HIP language); C and C++ stay with the host compiler",
        );
    }
    if let Some(dir) = &sdk.libclang_dir {
        env.set(
            "LIBCLANG_PATH",
            sdk.tool_path(dir, os),
            "bindgen (in llama-cpp-sys-2's build script) loads libclang from the SDK's LLVM",
        );
    }
    env.set(
        "CMAKE_HIP_ARCHITECTURES",
        step.gpu_targets.join(";"),
        "GPU targets of the HIP kernels (ggml-hip copies it; GPU_TARGETS itself is not forwarded by the binding)",
    );
    if os == Os::Windows {
        step.files_pending = Some(format!(
            "# Written by `cargo xtask build`: the GPU targets of hip::device (--offload-arch).\nset(GPU_TARGETS \"{t}\" CACHE STRING \"GPU targets\" FORCE)\nset(AMDGPU_TARGETS \"{t}\" CACHE STRING \"GPU targets\" FORCE)\n",
            t = step.gpu_targets.join(";")
        ));
    }
    if req.track.as_ref().map(|t| t.track.build.gemm) == Some(GemmRoute::Hipblaslt) {
        env.set(
            "CMAKE_PROJECT_ggml_INCLUDE",
            format!("{}/gemm/cmake/ggml_hook.cmake", host.workspace.replace('\\', "/")),
            "the track's GEMM route (build.gemm = \"hipblaslt\"): ggml-hip's BLAS products go to our library over hipBLASLt (gemm/README.md), since rocBLAS ends the process on GPUs it has no kernels for (gfx1103, gfx1150)",
        );
    }
    env.set(
        "GGML_HIP_NO_VMM",
        "ON",
        "no HIP virtual memory management: it fails on Windows drivers and on many consumer GPUs",
    );
    env.set(
        "GGML_HIP_GRAPHS",
        "OFF",
        "HIP graphs off (distribution default; immature on consumer drivers)",
    );
    env.set(
        "GGML_CUDA_GRAPHS",
        "OFF",
        "the shared CUDA/HIP code keeps graphs off",
    );
    step.sdk = Some(SdkRecord {
        kind: "rocm".into(),
        version: v.to_string(),
        root,
        version_source: sdk.version_source.clone(),
    });
    step.notes.push("GGML_HIP=ON comes from the cargo feature `hip` (the binding's `rocm`), not from the environment".into());
    Ok(step)
}

/// CUDA through the toolkit on the build machine: nvcc, architectures, graphs off.
fn cuda_step(req: &BuildRequest, host: &HostFacts, env: &mut Env) -> Result<BackendStep> {
    let mut step = BackendStep::default();
    let os = host.os;
    let cuda = host
        .cuda
        .as_ref()
        .context("no CUDA toolkit found (CUDA_PATH, /usr/local/cuda*, C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v*); install one or set CUDA_PATH")?;
    step.gpu_targets = cuda_targets(req)?;
    env.set(
        "CUDA_PATH",
        &cuda.root,
        "the CUDA toolkit CMake's FindCUDAToolkit uses",
    );
    if let Some(nvcc) = &cuda.nvcc {
        env.set(
            "CMAKE_CUDA_COMPILER",
            join(&cuda.root, nvcc, os),
            "nvcc of that toolkit, not whichever is first on PATH",
        );
    }
    env.set(
        "CMAKE_CUDA_ARCHITECTURES",
        step.gpu_targets.join(";"),
        "CUDA architectures of the kernels",
    );
    env.set(
        "GGML_CUDA_GRAPHS",
        "OFF",
        "CUDA graphs off (distribution default)",
    );
    step.notes.push("CUDA keeps ggml's default VMM (NVIDIA drivers support it; there is no HIP-style failure to avoid)".into());
    step.notes
        .push("GGML_CUDA=ON comes from the cargo feature `cuda`".into());
    step.sdk = Some(SdkRecord {
        kind: "cuda".into(),
        version: cuda.version.clone(),
        root: cuda.root.clone(),
        version_source: "version.json".into(),
    });
    Ok(step)
}

/// The CPU code of ggml and Rust: this machine's CPU for a native build, else portable
/// (every variant for dynamic backends, the x86-64 baseline for a static one).
fn cpu_code_step(
    native_cpu: bool,
    dynamic: bool,
    target_os: Os,
    effective_triple: &str,
    env: &mut Env,
    notes: &mut Vec<String>,
) {
    if native_cpu {
        env.set(
            "GGML_NATIVE",
            "ON",
            "developer build for this machine's CPU",
        );
        env.set("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-cpu=native", "Rust code for this CPU too; the binding turns GGML_NATIVE on only with target-cpu=native");
    } else {
        env.set(
            "GGML_NATIVE",
            "OFF",
            "portable CPU code: nothing from the build machine's CPU",
        );
        if effective_triple.ends_with("-pc-windows-gnu") {
            env.set(
                "CARGO_ENCODED_RUSTFLAGS",
                "-Clink-args=-l:libssp.a -lmsvcrt -ladvapi32",
                "no target-cpu: x86-64 baseline for Rust and ggml; MinGW's libssp linked statically last (with the msvcrt and advapi32 calls it makes), since libopus's CMake build turns on the stack protector there and needs __stack_chk_fail from it",
            );
        } else {
            env.set(
                "CARGO_ENCODED_RUSTFLAGS",
                "",
                "no target-cpu: x86-64 baseline for Rust and ggml (the binding maps target features to GGML_AVX*); also overrides any rustflags in cargo config",
            );
        }
        if dynamic {
            notes.push("dynamic backends: ggml builds every CPU variant (GGML_CPU_ALL_VARIANTS) and picks the best at start".into());
            if target_os == Os::Linux {
                let why = "ggml's shared libraries and backend plugins find each other and the bundled GPU runtime next to themselves in an unpacked package";
                env.set("CMAKE_BUILD_RPATH", "$ORIGIN", why);
                env.set("CMAKE_INSTALL_RPATH", "$ORIGIN", why);
            }
        } else if effective_triple.starts_with("x86_64") {
            // With GGML_NATIVE=OFF on a non-cross build, ggml turns SSE4.2, AVX, AVX2, BMI2,
            // FMA and F16C *on* by default (INS_ENB): that is Haswell, not portable. The
            // binding only ever turns these on (from target features), so OFF here holds.
            let why = "ggml's defaults with GGML_NATIVE=OFF are Haswell-level (AVX2/FMA/F16C); a portable static build turns them off: x86-64 baseline (SSE2)";
            for opt in X86_ISA_OPTIONS {
                env.set(opt, "OFF", why);
            }
        }
    }
}

/// The cargo packages `--bins` names.
fn packages(bins: Bins) -> Vec<String> {
    match bins {
        Bins::Cli => vec!["audiocpp-cli".into()],
        Bins::Server => vec!["audiocpp-server".into()],
        Bins::All => vec!["audiocpp-cli".into(), "audiocpp-server".into()],
    }
}

/// The cargo features (`package/feature`) of the build: the backend's (none for a cross
/// HIP build), dynamic backends, deployment, then the track's; the track's own `build.env`
/// goes into `env` here, after every rule.
fn features(
    req: &BuildRequest,
    packages: &[String],
    cross: bool,
    dynamic: bool,
    env: &mut Env,
) -> Result<Vec<String>> {
    let mut feats: Vec<&str> = Vec::new();
    match req.backend {
        Backend::Hip if cross => {}
        Backend::Hip => feats.push("hip"),
        Backend::Cuda => feats.push("cuda"),
        _ => {}
    }
    if dynamic {
        feats.push("dynamic-backends");
    }
    if req.deployment {
        feats.push("deployment");
    }
    if let Some(t) = &req.track {
        for f in &t.track.build.features {
            if !feats.contains(&f.as_str()) {
                feats.push(f);
            }
        }
        add_track_env(&t.name, &t.track.build.env, env)?;
    }
    Ok(packages
        .iter()
        .flat_map(|p| feats.iter().map(move |f| format!("{p}/{f}")))
        .collect())
}

/// The arguments of the `cargo build` that makes the executables.
fn cargo_args(
    packages: &[String],
    features: &[String],
    target_dir: &str,
    triple: Option<&str>,
    jobs: Option<u32>,
) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "build".into(),
        "--release".into(),
        "--locked".into(),
        // JSON on stdout (diagnostics still rendered on stderr): the executor reads the
        // binding's OUT_DIR from it instead of searching the target folder.
        "--message-format=json-render-diagnostics".into(),
    ];
    for p in packages {
        args.push("-p".into());
        args.push(p.clone());
    }
    if !features.is_empty() {
        args.push("--features".into());
        args.push(features.join(","));
    }
    args.push("--target-dir".into());
    args.push(target_dir.to_string());
    if let Some(t) = triple {
        args.push("--target".into());
        args.push(t.to_string());
    }
    if let Some(j) = jobs {
        args.push("--jobs".into());
        args.push(j.to_string());
    }
    args
}

/// Where the binding leaves ggml's libraries in a dynamic build: links (or copies) in the
/// profile folder, and, relative to its OUT_DIR (the one cargo reports for this build,
/// `build-script-executed`), the libraries in `lib/` (`bin/` for DLLs) and the backends in
/// `backends/`.
fn library_globs(target_os: Os, profile_dir: &str, os: Os) -> (Vec<String>, Vec<String>) {
    let (lib, plugin) = match target_os {
        Os::Windows => ("ggml*.dll", "*.dll"),
        Os::Linux => ("libggml*.so*", "*.so*"),
    };
    (
        vec![join(profile_dir, lib, os)],
        vec![
            format!("lib/{lib}"),
            format!("bin/{lib}"),
            format!("backends/{plugin}"),
        ],
    )
}

fn fingerprint(
    cargo_backend: &str,
    triple: &str,
    env: &[EnvVar],
    dynamic: bool,
    toolset: &Option<ToolsetRecord>,
    sdk: &Option<SdkRecord>,
) -> String {
    // Settings only, never paths: the same configuration maps to the same folder on every
    // machine, and a dry run elsewhere names the folder the build box uses.
    let mut h = Sha256::new();
    let mut line = |s: &str| {
        h.update(s.as_bytes());
        h.update(b"\n");
    };
    line(cargo_backend);
    line(triple);
    line(if dynamic { "dynamic" } else { "static" });
    if let Some(t) = toolset {
        line(&t.vc_tools_version);
    }
    if let Some(s) = sdk {
        line(&format!("{}-{}", s.kind, s.version));
    }
    for e in env {
        let path_like = e.name.ends_with("_COMPILER")
            || e.name.ends_with("_PATH")
            || e.name == "CMAKE_PROJECT_INCLUDE_BEFORE"
            || e.name == "CMAKE_BUILD_PARALLEL_LEVEL";
        if (e.name.starts_with("GGML_")
            || e.name.starts_with("CMAKE_")
            || e.name == "CARGO_ENCODED_RUSTFLAGS")
            && !path_like
        {
            line(&format!("{}={}", e.name, e.value));
        }
    }
    let digest = h.finalize();
    digest[..4].iter().map(|b| format!("{b:02x}")).collect()
}

fn select_rocm(req: &BuildRequest, host: &HostFacts) -> Result<RocmSdk> {
    let want = req
        .track
        .as_ref()
        .and_then(|t| t.track.sdk.as_ref())
        .map(|s| s.version.clone());
    let found = || {
        if host.rocm.sdks.is_empty() {
            "none".to_string()
        } else {
            host.rocm
                .sdks
                .iter()
                .map(|s| {
                    format!(
                        "ROCm {} at {} ({})",
                        s.version,
                        s.root,
                        origin_name(s.origin)
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        }
    };
    let pool: Vec<&RocmSdk> = if req.rocm_path.is_some() {
        let flagged: Vec<&RocmSdk> = host
            .rocm
            .sdks
            .iter()
            .filter(|s| s.origin == SdkOrigin::Flag)
            .collect();
        if flagged.is_empty() {
            let why = host
                .rocm
                .rejected
                .first()
                .map(|(p, w)| format!("{p}: {w}"))
                .unwrap_or_else(|| "it was not inspected".into());
            bail!("--rocm-path is not a ROCm SDK ({why})");
        }
        flagged
    } else {
        host.rocm.sdks.iter().collect()
    };
    let pick = match &want {
        Some(v) => pool.into_iter().find(|s| &s.version.major_minor() == v),
        None => pool.into_iter().next(),
    };
    match (pick, want) {
        (Some(s), _) => Ok(s.clone()),
        (None, Some(v)) => bail!(
            "track {} needs ROCm {v} and none was found (found: {}); install the AMD HIP SDK {v} \
             (Windows) or ROCm {v} (Linux), or point --rocm-path at it",
            req.track.as_ref().map(|t| t.name.as_str()).unwrap_or(""),
            found()
        ),
        (None, None) => bail!(
            "no ROCm SDK found (HIP_PATH, ROCM_PATH, C:\\Program Files\\AMD\\ROCm\\*, /opt/rocm*, /usr); \
             install the AMD HIP SDK or ROCm, or pass --rocm-path"
        ),
    }
}

fn hip_targets(req: &BuildRequest, host: &HostFacts) -> Result<Vec<String>> {
    let list = match &req.gpu_targets {
        GpuTargets::Default => match &req.track {
            Some(t) if !t.track.gpu_targets.is_empty() => t.track.gpu_targets.clone(),
            _ => rocm::gpus_from_probe(host.gpus.as_ref()).context(
                "no --gpu-targets and no --track, so the targets come from this machine's GPUs",
            )?,
        },
        GpuTargets::Auto => rocm::gpus_from_probe(host.gpus.as_ref())?,
        GpuTargets::List(v) => v.clone(),
    };
    for t in &list {
        crate::gpu_target::check_gfx_target(t).map_err(|e| {
            anyhow::anyhow!("--gpu-targets: {e} (gfx1100, gfx1151, gfx90a:xnack-, ...)")
        })?;
    }
    Ok(list)
}

fn cuda_targets(req: &BuildRequest) -> Result<Vec<String>> {
    let list = match &req.gpu_targets {
        GpuTargets::Default => match &req.track {
            Some(t) if !t.track.gpu_targets.is_empty() => t.track.gpu_targets.clone(),
            _ => DEFAULT_CUDA_ARCHITECTURES
                .iter()
                .map(|s| s.to_string())
                .collect(),
        },
        GpuTargets::Auto => vec!["native".to_string()],
        GpuTargets::List(v) => v.clone(),
    };
    for t in &list {
        if t != "native" {
            crate::gpu_target::check_cuda_arch(t)
                .map_err(|e| anyhow::anyhow!("--gpu-targets: {e}, or native"))?;
        }
    }
    Ok(list)
}

/// The backend as typed on the command line.
pub fn backend_name(b: Backend) -> &'static str {
    match b {
        Backend::Cpu => "cpu",
        Backend::Hip => "hip",
        Backend::Cuda => "cuda",
        Backend::Vulkan => "vulkan",
    }
}

fn os_name(os: Os) -> &'static str {
    match os {
        Os::Windows => "Windows",
        Os::Linux => "Linux",
    }
}

fn origin_name(o: SdkOrigin) -> &'static str {
    match o {
        SdkOrigin::Flag => "from --rocm-path",
        SdkOrigin::HipPath => "from HIP_PATH",
        SdkOrigin::RocmPath => "from ROCM_PATH",
        SdkOrigin::Scan => "found by scanning",
    }
}

/// The plan as `--dry-run` prints it: header, environment with reasons, files, commands,
/// expected outputs and notes.
pub fn render(plan: &BuildPlan) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "build plan: {} ({} backend, {} build on {})",
        plan.label,
        backend_name(plan.backend),
        match plan.link {
            Link::Dynamic => "dynamic-backends",
            Link::Static => "static",
        },
        os_name(plan.os)
    );
    if let Some(t) = &plan.target {
        let _ = writeln!(s, "  target:      {t}");
    }
    let _ = writeln!(s, "  target dir:  {}", plan.target_dir);
    let _ = writeln!(s, "  packages:    {}", plan.packages.join(", "));
    let _ = writeln!(
        s,
        "  features:    {}",
        if plan.features.is_empty() {
            "(none)".to_string()
        } else {
            plan.features.join(", ")
        }
    );
    let _ = writeln!(
        s,
        "  cpu:         {}",
        if plan.native_cpu {
            "native (this machine's CPU)"
        } else {
            "portable (no native ISA)"
        }
    );
    if !plan.gpu_targets.is_empty() {
        let _ = writeln!(s, "  gpu targets: {}", plan.gpu_targets.join(", "));
    }
    if let Some(t) = &plan.toolset {
        let _ = writeln!(
            s,
            "  toolset:     MSVC {} from {} ({})",
            t.vc_tools_version, t.instance, t.installation_path
        );
    }
    if let Some(sdk) = &plan.sdk {
        let _ = writeln!(
            s,
            "  sdk:         {} {} at {} (version from {})",
            sdk.kind, sdk.version, sdk.root, sdk.version_source
        );
    }
    let _ = writeln!(s, "\nenvironment:");
    let mut last_why = "";
    for e in &plan.env {
        if e.why != last_why {
            let _ = writeln!(s, "  # {}", e.why);
            last_why = &e.why;
        }
        let _ = writeln!(s, "  {}={}", e.name, e.value);
    }
    if !plan.files.is_empty() {
        let _ = writeln!(s, "\nfiles:");
        for f in &plan.files {
            let _ = writeln!(s, "  # {}\n  write {}", f.why, f.path);
            for l in f.contents.lines() {
                let _ = writeln!(s, "    | {l}");
            }
        }
    }
    if let Some(v) = &plan.vulkan {
        let _ = writeln!(s, "\nvulkan backend (cache {}):", v.dir);
        let _ = writeln!(
            s,
            "  # the pinned packages of {} extracted into {}",
            v.recipe, v.sysroot
        );
        let _ = writeln!(
            s,
            "  write {} (the pinned glslc on its own libraries)",
            v.glslc
        );
        for (path, _) in &v.files {
            let _ = writeln!(s, "  write {path}");
        }
        if let Some((dll, lib)) = &v.implib {
            let _ = writeln!(s, "  make {lib} (import library of {dll})");
        }
    }
    let _ = writeln!(s, "\ncommands:");
    for c in &plan.commands {
        let _ = writeln!(s, "  # {}", c.why);
        if let Some(done) = &c.skip_if_exists {
            let _ = writeln!(s, "  # (skipped when {done} exists: a cache hit)");
        }
        let _ = writeln!(s, "  (in {}) {}", c.cwd, c.display());
    }
    let _ = writeln!(s, "\noutputs:");
    for e in &plan.executables {
        let _ = writeln!(s, "  {e}");
    }
    for g in &plan.library_globs {
        let _ = writeln!(s, "  {g}");
    }
    for g in &plan.binding_globs {
        let _ = writeln!(s, "  <{BINDING} OUT_DIR>/{g}");
    }
    if !plan.notes.is_empty() {
        let _ = writeln!(s, "\nnotes:");
        for n in &plan.notes {
            let _ = writeln!(s, "  - {n}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(env: &Env) -> Vec<&str> {
        env.0.iter().map(|e| e.name.as_str()).collect()
    }

    #[test]
    fn the_cpu_step_is_native_or_portable() {
        let mut env = Env(Vec::new());
        let mut notes = Vec::new();
        cpu_code_step(
            true,
            false,
            Os::Linux,
            "x86_64-unknown-linux-gnu",
            &mut env,
            &mut notes,
        );
        assert_eq!(names(&env), ["GGML_NATIVE", "CARGO_ENCODED_RUSTFLAGS"]);
        assert_eq!(env.0[1].value, "-Ctarget-cpu=native");

        let mut env = Env(Vec::new());
        cpu_code_step(
            false,
            false,
            Os::Linux,
            "x86_64-unknown-linux-gnu",
            &mut env,
            &mut notes,
        );
        assert_eq!(
            env.0.len(),
            2 + X86_ISA_OPTIONS.len(),
            "every x86 ISA option off"
        );
        assert!(notes.is_empty());

        let mut env = Env(Vec::new());
        cpu_code_step(
            true,
            true,
            Os::Linux,
            "x86_64-unknown-linux-gnu",
            &mut env,
            &mut notes,
        );
        assert_eq!(env.0[0].value, "ON", "native_cpu decides, not dynamic");
        let mut env = Env(Vec::new());
        cpu_code_step(
            false,
            true,
            Os::Linux,
            "x86_64-unknown-linux-gnu",
            &mut env,
            &mut notes,
        );
        assert!(names(&env).contains(&"CMAKE_BUILD_RPATH"));
        assert_eq!(notes.len(), 1, "the CPU variants note");
    }

    #[test]
    fn the_mingw_step_names_the_posix_compilers_per_target() {
        let mut env = Env(Vec::new());
        mingw_step("x86_64-pc-windows-gnu", "x86_64", &mut env);
        assert_eq!(env.0[0].name, "CC_x86_64_pc_windows_gnu");
        assert_eq!(env.0[0].value, "x86_64-w64-mingw32-gcc-posix");
        assert_eq!(env.0.len(), 5);
        assert_eq!(env.0[4].name, "SOURCE_DATE_EPOCH");
    }

    #[test]
    fn the_cargo_command_lists_packages_features_and_target() {
        let packages = packages(Bins::All);
        let args = cargo_args(
            &packages,
            &["audiocpp-cli/hip".into()],
            "/t",
            Some("x86_64-pc-windows-gnu"),
            Some(3),
        );
        assert_eq!(
            args[4..].join(" "),
            "-p audiocpp-cli -p audiocpp-server --features audiocpp-cli/hip --target-dir /t --target x86_64-pc-windows-gnu --jobs 3"
        );
        assert!(cargo_args(&packages, &[], "/t", None, None)
            .iter()
            .all(|a| a != "--features" && a != "--target"));
    }
}
