//! The rules a package is checked against, compiled from `packaging/tracks.toml`, the
//! system allowlists next to it and (optionally) one track.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Context;
use regex::Regex;

use super::binary::{Format, Machine};
use crate::tracks::{Arch, Glob, Load, Os, SdkKind, Track, TracksFile};

/// A compiled forbidden-file rule.
#[derive(Debug, Clone)]
pub struct Forbidden {
    /// File-name glob.
    pub glob: Glob,
    /// What the file is.
    pub reason: String,
    /// How to get rid of it.
    pub fix: String,
}

/// A compiled one-major-per-package rule.
#[derive(Debug, Clone)]
pub struct RuntimeMajor {
    /// Runtime display name (`ROCm`).
    pub runtime: String,
    /// Regex on the lower-case file name; capture 1 is the major.
    pub re: Regex,
}

/// A runtime file the track bundles.
#[derive(Debug, Clone)]
pub struct DeclaredFile {
    /// File name.
    pub name: String,
    /// How it is loaded.
    pub load: Load,
    /// For runtime-loaded files, the loader's file name.
    pub loaded_by: Option<String>,
    /// May be absent.
    pub optional: bool,
    /// Comes only from a real SDK: an import of it that the package lacks is recorded,
    /// not a failure (tracks.toml `sdk_only`).
    pub sdk_only: bool,
    /// `runtime` or `crt`, for messages.
    pub origin: &'static str,
}

/// What one track expects of a package.
#[derive(Debug, Clone)]
pub struct TrackRules {
    /// The track name.
    pub name: String,
    /// Binary format every binary must have.
    pub format: Format,
    /// Machine every binary must have.
    pub machine: Machine,
    /// Executable file names.
    pub executables: Vec<String>,
    /// Product library globs.
    pub libraries: Vec<Glob>,
    /// Runtime files and CRT files.
    pub declared: Vec<DeclaredFile>,
    /// The SDK's runtime and major (`("ROCm", 6)`), checked against runtime majors.
    pub sdk_major: Option<(String, u32)>,
    /// MSVC toolset the CRT must be at least (`(14, 44)`).
    pub crt_toolset: Option<(u16, u16)>,
}

/// Everything the graph check needs to decide; built once, pure afterwards.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Windows system DLLs, lower-case.
    pub windows_system: BTreeSet<String>,
    /// Linux system SONAMEs (exact), including the track's `system_extra`.
    pub linux_system: BTreeSet<String>,
    /// Import names never followed nor reported (API sets).
    pub never_follow: Vec<Glob>,
    /// Forbidden files.
    pub forbidden: Vec<Forbidden>,
    /// Forbidden source folder names, lower-case.
    pub forbidden_dirs: Vec<String>,
    /// Remedy for a file from a forbidden folder.
    pub forbidden_dirs_fix: String,
    /// One-major runtimes.
    pub runtime_majors: Vec<RuntimeMajor>,
    /// Plugin globs: runtime-loaded roots of the walk.
    pub plugins: Vec<Glob>,
    /// MSVC CRT file names, lower-case (the track's, or every track's without one).
    pub crt_names: BTreeSet<String>,
    /// The track, when `--track` is given.
    pub track: Option<TrackRules>,
}

/// Reads an allowlist file: one name a line, `#` comments.
pub fn parse_list(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
}

impl Policy {
    /// Compiles the policy of `tracks` (read from `tracks_path`; the allowlists are found
    /// relative to its folder) for `track`, or the track-independent rules when `None`
    /// (plugins are then the union of every track's plugin globs).
    pub fn new(
        tracks: &TracksFile,
        tracks_path: &Path,
        track: Option<&str>,
    ) -> anyhow::Result<Policy> {
        let dir = tracks_path.parent().unwrap_or(Path::new("."));
        let read = |rel: &str| {
            let p = dir.join(rel);
            std::fs::read_to_string(&p)
                .with_context(|| format!("cannot read allowlist {}", p.display()))
        };
        let p = &tracks.policy;
        let mut windows_system: BTreeSet<String> = parse_list(&read(&p.windows_system)?)
            .map(|s| s.to_ascii_lowercase())
            .collect();
        let mut linux_system: BTreeSet<String> = parse_list(&read(&p.linux_system)?)
            .map(str::to_string)
            .collect();
        let globs = |v: &[String]| {
            v.iter()
                .map(|g| Glob::new(g))
                .collect::<anyhow::Result<Vec<_>>>()
        };
        let forbidden = p
            .forbidden
            .iter()
            .map(|r| {
                Ok(Forbidden {
                    glob: Glob::new(&r.pattern)?,
                    reason: r.reason.clone(),
                    fix: r.fix.clone(),
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let runtime_majors = p
            .runtime_majors
            .iter()
            .map(|r| {
                Ok(RuntimeMajor {
                    runtime: r.runtime.to_string(),
                    re: Regex::new(&r.pattern)?,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        // Only MSVC's CRT carries the toolset version the stale-CRT rule compares with a
        // binary's linker version; MinGW's runtime DLLs do not (and lld, which links the
        // cross-built ggml-hip.dll, writes MSVC's 14.0 as its linker version).
        let crt_of = |t: &Track| -> Vec<String> {
            t.crt
                .iter()
                .filter(|c| c.kind == crate::tracks::CrtKind::Msvc)
                .flat_map(|c| c.files.iter().map(|f| f.to_ascii_lowercase()))
                .collect()
        };
        let mut crt_names = BTreeSet::new();
        let (plugins, track) = match track {
            None => {
                let mut all = BTreeSet::new();
                for t in tracks.tracks.values() {
                    all.extend(t.plugins.iter().cloned());
                    crt_names.extend(crt_of(t));
                }
                (globs(&all.into_iter().collect::<Vec<_>>())?, None)
            }
            Some(name) => {
                let t = tracks.track(name)?;
                match t.os {
                    Os::Linux => linux_system.extend(t.system_extra.iter().cloned()),
                    Os::Windows => {
                        windows_system.extend(t.system_extra.iter().map(|n| n.to_ascii_lowercase()))
                    }
                }
                crt_names.extend(crt_of(t));
                (globs(&t.plugins)?, Some(track_rules(name, t)?))
            }
        };
        Ok(Policy {
            windows_system,
            linux_system,
            never_follow: globs(&p.never_follow)?,
            forbidden,
            forbidden_dirs: p
                .forbidden_dirs
                .iter()
                .map(|d| d.to_ascii_lowercase())
                .collect(),
            forbidden_dirs_fix: p.forbidden_dirs_fix.clone(),
            runtime_majors,
            plugins,
            crt_names,
            track,
        })
    }

    /// The forbidden rule a file name matches, if any.
    pub fn forbidden(&self, name: &str) -> Option<&Forbidden> {
        self.forbidden.iter().find(|f| f.glob.matches(name))
    }

    /// Whether an import name is never followed (API sets).
    pub fn never_follow(&self, name: &str) -> bool {
        self.never_follow.iter().any(|g| g.matches(name))
    }

    /// Whether a dependency of a binary of `format` is provided by the OS.
    pub fn is_system(&self, format: Format, name: &str) -> bool {
        match format {
            Format::Pe => self.windows_system.contains(&name.to_ascii_lowercase()),
            Format::Elf => self.linux_system.contains(name),
            // macOS: everything under /usr/lib and /System is the OS.
            Format::MachO => name.starts_with("/usr/lib/") || name.starts_with("/System/"),
        }
    }

    /// Whether a file name is a plugin (a runtime-loaded root).
    pub fn is_plugin(&self, name: &str) -> bool {
        self.plugins.iter().any(|g| g.matches(name))
    }
}

fn parse_version(v: &str) -> Option<(u16, u16)> {
    let (a, b) = v.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

fn track_rules(name: &str, t: &Track) -> anyhow::Result<TrackRules> {
    let format = match t.os {
        crate::tracks::Os::Windows => Format::Pe,
        crate::tracks::Os::Linux => Format::Elf,
    };
    let machine = match t.arch {
        Arch::X64 => Machine::X64,
        Arch::Arm64 => Machine::Arm64,
    };
    let mut declared: Vec<DeclaredFile> = t
        .runtime
        .iter()
        .map(|r| DeclaredFile {
            name: r.name.clone(),
            load: r.load,
            loaded_by: r.loaded_by.clone(),
            optional: r.optional,
            sdk_only: r.sdk_only,
            origin: "runtime",
        })
        .collect();
    if let Some(crt) = &t.crt {
        declared.extend(crt.files.iter().map(|f| DeclaredFile {
            name: f.clone(),
            load: Load::Imported,
            loaded_by: None,
            optional: false,
            sdk_only: false,
            origin: "crt",
        }));
    }
    Ok(TrackRules {
        name: name.to_string(),
        format,
        machine,
        executables: t.executables.clone(),
        libraries: t
            .libraries
            .iter()
            .map(|g| Glob::new(g))
            .collect::<anyhow::Result<_>>()?,
        declared,
        sdk_major: t.sdk.as_ref().map(|s| {
            let runtime = match s.kind {
                SdkKind::Rocm => "ROCm",
                SdkKind::Cuda => "CUDA",
            };
            (runtime.to_string(), s.major())
        }),
        crt_toolset: t
            .crt
            .as_ref()
            .filter(|c| c.kind == crate::tracks::CrtKind::Msvc)
            .and_then(|c| parse_version(&c.toolset)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_msvc_runtimes_are_checked_against_the_linker_version() {
        let path = TracksFile::default_path();
        let tracks = TracksFile::load(&path).unwrap();
        let msvc = Policy::new(&tracks, &path, Some("rocm6")).unwrap();
        assert!(
            msvc.crt_names.contains("msvcp140.dll"),
            "{:?}",
            msvc.crt_names
        );
        let mingw = Policy::new(&tracks, &path, Some("windows-hip-rocm7-gnu")).unwrap();
        assert!(mingw.crt_names.is_empty(), "{:?}", mingw.crt_names);
        let all = Policy::new(&tracks, &path, None).unwrap();
        assert!(!all.crt_names.contains("libwinpthread-1.dll"));
    }
}
