//! [`HostFacts`]: everything [`super::plan`] needs to know about the build machine,
//! gathered once by [`HostFacts::discover`] (the only I/O) and serialisable, so a plan for
//! a Windows box can be printed anywhere from facts recorded there
//! (`cargo xtask doctor --save-facts FILE`, then `cargo xtask build --facts FILE --dry-run`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::project::{project_root, target_dir};
use crate::toolset::cuda::{self, CudaSdk};
use crate::toolset::msvc::{self, MsvcFacts};
use crate::toolset::rocm::{self, DiscoverInput, Discovery, GpuProbe};
use crate::toolset::tools::{self, ToolFact};
use crate::tracks::Os;

/// What to probe for ([`HostFacts::discover`]).
#[derive(Debug, Clone)]
pub struct DiscoverOptions {
    /// `--rocm-path`, looked at before HIP_PATH, ROCM_PATH and the scan.
    pub rocm_path: Option<PathBuf>,
    /// The MSVC toolset to capture with vcvarsall (Windows).
    pub msvc_toolset: String,
    /// Run amdgpu-arch (only worth it for `--gpu-targets auto` and `doctor`).
    pub probe_gpus: bool,
    /// Ask the generic tools for their versions (doctor).
    pub probe_tools: bool,
}

impl Default for DiscoverOptions {
    fn default() -> Self {
        DiscoverOptions {
            rocm_path: None,
            msvc_toolset: msvc::DEFAULT_TOOLSET.to_string(),
            probe_gpus: false,
            probe_tools: false,
        }
    }
}

/// The generic tools ([`crate::toolset::tools`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tools {
    /// cmake (the binding drives ggml's CMake build).
    pub cmake: Option<ToolFact>,
    /// ninja (the generator of plans for MSVC targets).
    pub ninja: Option<ToolFact>,
    /// libclang folder (bindgen).
    pub libclang: Option<ToolFact>,
    /// objdump (the AVX-512 check of portable builds).
    pub objdump: Option<ToolFact>,
    /// The MinGW posix C++ compiler (Windows cross tests).
    pub mingw: Option<ToolFact>,
    /// Wine (running Windows binaries in tests).
    pub wine: Option<ToolFact>,
    /// python3 (fetches actionlint).
    pub python3: Option<ToolFact>,
    /// rustup (cross targets).
    pub rustup: Option<ToolFact>,
    /// Installed rustup targets.
    #[serde(default)]
    pub rust_targets: Vec<String>,
}

/// The facts of one build machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostFacts {
    /// The machine's OS.
    pub os: Os,
    /// Its Rust host triple.
    pub host_triple: String,
    /// The workspace root there.
    pub workspace: String,
    /// The cargo target folder there (CARGO_TARGET_DIR honoured).
    pub target_root: String,
    /// Visual Studio instances and the vcvarsall capture (Windows only).
    pub msvc: Option<MsvcFacts>,
    /// ROCm / HIP SDKs found.
    pub rocm: Discovery,
    /// The amdgpu-arch run, when asked for.
    pub gpus: Option<GpuProbe>,
    /// The CUDA toolkit, when one is installed.
    pub cuda: Option<CudaSdk>,
    /// Generic tools (filled by doctor).
    #[serde(default)]
    pub tools: Tools,
    /// The cache outside the clone (`~/.cache/audiocpp-rs`), where builds that take long
    /// and depend only on pinned inputs keep their results (the Vulkan backend).
    #[serde(default)]
    pub cache_root: String,
}

/// The Rust host triple xtask itself runs on.
pub fn host_triple() -> String {
    let arch = std::env::consts::ARCH;
    match std::env::consts::OS {
        "windows" => format!("{arch}-pc-windows-msvc"),
        "macos" => format!("{arch}-apple-darwin"),
        _ => format!("{arch}-unknown-linux-gnu"),
    }
}

/// The OS xtask runs on, in track terms.
pub fn host_os() -> Os {
    if cfg!(windows) {
        Os::Windows
    } else {
        Os::Linux
    }
}

impl HostFacts {
    /// Probes this machine. Nothing here fails for a missing tool: absence is a fact, and
    /// the plan (or doctor) says what it means.
    pub fn discover(opts: &DiscoverOptions) -> HostFacts {
        let os = host_os();
        let rocm = rocm::discover(&DiscoverInput::from_env(opts.rocm_path.clone(), os));
        let gpus = if opts.probe_gpus {
            rocm.sdks
                .iter()
                .find_map(|s| s.amdgpu_arch.as_ref().map(|t| s.tool_path(t, os)))
                .or_else(|| tools::which("amdgpu-arch").map(|p| p.display().to_string()))
                .map(|tool| rocm::probe_gpus(Path::new(&tool)))
        } else {
            None
        };
        let msvc = (os == Os::Windows).then(|| discover_msvc(&opts.msvc_toolset));
        HostFacts {
            os,
            host_triple: host_triple(),
            workspace: project_root().display().to_string(),
            target_root: target_dir().display().to_string(),
            msvc,
            rocm,
            gpus,
            cuda: cuda::discover(os),
            tools: if opts.probe_tools {
                discover_tools()
            } else {
                Tools::default()
            },
            cache_root: crate::vulkan::cache_root().display().to_string(),
        }
    }

    /// Reads facts saved by `doctor --save-facts`.
    pub fn load(path: &Path) -> Result<HostFacts> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading host facts {}", path.display()))?;
        serde_json::from_str(&text)
            .with_context(|| format!("parsing host facts {}", path.display()))
    }
}

/// vswhere, the toolset folders of every instance, and one vcvarsall capture for the
/// instance [`msvc::select`] picks.
pub fn discover_msvc(toolset: &str) -> MsvcFacts {
    let vswhere = msvc::default_vswhere();
    let mut instances = msvc::run_vswhere(&vswhere).unwrap_or_default();
    for inst in &mut instances {
        inst.msvc_toolsets = msvc::list_toolsets(Path::new(&inst.installation_path));
    }
    let capture = msvc::select(&instances, toolset).ok().and_then(|sel| {
        let cmd = std::env::var_os("ComSpec")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("cmd.exe"));
        msvc::capture_vcvars(&cmd, &sel.vcvarsall(), "x64", toolset).ok()
    });
    MsvcFacts {
        vswhere: vswhere.display().to_string(),
        instances,
        capture,
    }
}

/// The generic tools, with versions.
pub fn discover_tools() -> Tools {
    let rustup = tools::probe("rustup", &["--version"]);
    let rust_targets = rustup
        .path
        .as_ref()
        .map(|p| tools::rustup_installed(Path::new(p), "target"))
        .unwrap_or_default();
    let wine = {
        let at = tools::probe_at(Path::new("/usr/lib/wine/wine64"), &["--version"]);
        if at.found() {
            at
        } else {
            tools::probe("wine64", &["--version"])
        }
    };
    Tools {
        cmake: Some(tools::probe("cmake", &["--version"])),
        ninja: Some(tools::probe("ninja", &["--version"])),
        libclang: Some(tools::libclang()),
        objdump: Some(tools::probe("objdump", &["--version"])),
        mingw: Some(tools::probe("x86_64-w64-mingw32-g++-posix", &["--version"])),
        wine: Some(wine),
        python3: Some(tools::probe("python3", &["--version"])),
        rustup: Some(rustup),
        rust_targets,
    }
}
