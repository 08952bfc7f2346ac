//! [`BuildRequest`]: what a caller (the `build` verb, or `dist`) asks to build.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::tracks::CpuVariants;
use serde::{Deserialize, Serialize};

use crate::toolset::msvc;
use crate::tracks::{Backend, Track};

/// Which executables to build (`--bin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Bins {
    /// `audiocpp_cli`.
    Cli,
    /// `audiocpp_server`.
    Server,
    /// Both.
    All,
}

/// How ggml's backends are linked (`--link`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Link {
    /// ggml linked into the executables (developer builds).
    Static,
    /// ggml-base/ggml shared, backends (CPU variants, GPU) as plugins loaded at start
    /// (the binding's `dynamic-backends`; release packages, docs/architecture.md section 3).
    Dynamic,
}

/// GPU targets (`--gpu-targets`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GpuTargets {
    /// The track's list; without a track, this machine's GPUs (HIP) or the default list (CUDA).
    Default,
    /// This machine's GPUs (amdgpu-arch for HIP, `native` for CUDA).
    Auto,
    /// An explicit list.
    List(Vec<String>),
}

impl GpuTargets {
    /// Parses `auto` or a comma-separated list.
    pub fn parse(text: &str) -> Result<GpuTargets> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("auto") {
            return Ok(GpuTargets::Auto);
        }
        let list: Vec<String> = t
            .split([',', ';'])
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        if list.is_empty() {
            bail!("--gpu-targets is empty: give `auto` or a list like gfx1100,gfx1101");
        }
        Ok(GpuTargets::List(list))
    }
}

/// A named track with its data.
#[derive(Debug, Clone)]
pub struct TrackRef {
    /// `rocm6`, `windows-cpu`, ...
    pub name: String,
    /// Its table from packaging/tracks.toml.
    pub track: Track,
    /// Its cross-build recipe (`build.cross`), loaded.
    pub cross: Option<crate::cross_backend::CrossInputs>,
    /// The recipe of its Vulkan backend (`build.vulkan`), loaded.
    pub vulkan: Option<crate::vulkan::VulkanInputs>,
}

/// What to build.
#[derive(Debug, Clone)]
pub struct BuildRequest {
    /// The backend.
    pub backend: Backend,
    /// The track (gives SDK version, GPU targets, OS, CRT toolset).
    pub track: Option<TrackRef>,
    /// `--rocm-path`: the SDK to use (it must also be a discovery input).
    pub rocm_path: Option<PathBuf>,
    /// GPU targets.
    pub gpu_targets: GpuTargets,
    /// `--no-native-cpu`.
    pub no_native_cpu: bool,
    /// Embed the model-spec catalog (`deployment` feature).
    pub deployment: bool,
    /// Backend linking.
    pub link: Link,
    /// Which executables.
    pub bins: Bins,
    /// `--jobs`.
    pub jobs: Option<u32>,
    /// `--target`.
    pub target: Option<String>,
    /// `--msvc-toolset` (default: the track's CRT toolset, else 14.44).
    pub msvc_toolset: Option<String>,
}

impl BuildRequest {
    /// A request with defaults for `backend`: no track, default targets, static, both bins.
    pub fn new(backend: Backend) -> BuildRequest {
        BuildRequest {
            backend,
            track: None,
            rocm_path: None,
            gpu_targets: GpuTargets::Default,
            no_native_cpu: false,
            deployment: false,
            link: Link::Static,
            bins: Bins::All,
            jobs: None,
            target: None,
            msvc_toolset: None,
        }
    }

    /// The request for a track's package build, from its `[tracks.NAME.build]` recipe:
    /// the backend, and dynamic backends for `cpu_variants = "all"`, static for
    /// `"baseline"`. A track without a recipe is an error naming what to add.
    /// `tracks_path` is the file the track came from, named in that error.
    pub fn for_track(name: &str, track: &Track, tracks_path: &Path) -> Result<BuildRequest> {
        let Some(cpu) = track.build.cpu_variants else {
            bail!(
                "{}: tracks.{name}.build.cpu_variants: track {name} has no build recipe; add the table \
                 [tracks.{name}.build] with cpu_variants (allowed: all, baseline), for example \
                 `[tracks.{name}.build]` `cpu_variants = \"all\"` `features = [\"deployment\"]`, \
                 or package binaries built elsewhere with --bin-dir",
                tracks_path.display()
            );
        };
        let mut req = BuildRequest::new(track.backend);
        let cross =
            match &track.build.cross {
                Some(rel) => Some(crate::cross_backend::CrossInputs::load(rel).with_context(
                    || format!("{}: tracks.{name}.build.cross", tracks_path.display()),
                )?),
                None => None,
            };
        let vulkan = match &track.build.vulkan {
            Some(rel) => Some(crate::vulkan::VulkanInputs::load(rel).with_context(|| {
                format!("{}: tracks.{name}.build.vulkan", tracks_path.display())
            })?),
            None => None,
        };
        req.track = Some(TrackRef {
            name: name.to_string(),
            track: track.clone(),
            cross,
            vulkan,
        });
        req.link = match cpu {
            CpuVariants::All => Link::Dynamic,
            CpuVariants::Baseline => Link::Static,
        };
        Ok(req)
    }

    /// The MSVC toolset to pin: `--msvc-toolset`, else the track's CRT toolset, else 14.44.
    pub fn effective_msvc_toolset(&self) -> String {
        self.msvc_toolset
            .clone()
            .or_else(|| {
                self.track
                    .as_ref()
                    .and_then(|t| t.track.crt.as_ref())
                    .map(|c| c.toolset.clone())
            })
            .unwrap_or_else(|| msvc::DEFAULT_TOOLSET.to_string())
    }
}
