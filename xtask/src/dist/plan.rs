//! The pure half of `dist`: from a track and the facts found on disk, decide every file
//! of the package (source, destination, role, size). Nothing here touches the disk, so
//! every track's plan is testable with invented facts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use serde::Serialize;

use crate::kernels::filter::FilterPlan;
use crate::kernels::layout::LibraryKind;
use crate::tracks::{Glob, Load, Track};

/// What a packaged file is, for the size table and the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// `audiocpp_cli`, `audiocpp_server`.
    Executable,
    /// ggml core libraries and backend plugins.
    GgmlLibrary,
    /// SDK runtime imported by the binaries.
    Runtime,
    /// SDK runtime opened at run time (`amd_comgr_*`).
    RuntimeLoaded,
    /// Toolchain runtime (MSVC CRT, MinGW runtime).
    Crt,
    /// rocBLAS kernel library.
    RocblasKernels,
    /// hipBLASLt kernel library.
    HipblasltKernels,
    /// README and manifest.
    Document,
}

impl Role {
    /// The size table's row label.
    pub fn label(self) -> &'static str {
        match self {
            Role::Executable => "executables",
            Role::GgmlLibrary => "ggml libraries and backends",
            Role::Runtime => "runtime libraries",
            Role::RuntimeLoaded => "runtime libraries (loaded at run time)",
            Role::Crt => "C/C++ runtime",
            Role::RocblasKernels => "rocBLAS library",
            Role::HipblasltKernels => "hipBLASLt library",
            Role::Document => "README and manifest",
        }
    }
}

/// A file found on disk: where it is and how big.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FoundFile {
    /// Absolute source path.
    pub path: PathBuf,
    /// Size in bytes.
    pub size: u64,
}

/// Everything `plan` needs to know about the disk, gathered by the I/O layer.
#[derive(Debug, Clone, Default)]
pub struct DistFacts {
    /// Files in the binaries folder(s), by file name.
    pub binaries: BTreeMap<String, FoundFile>,
    /// Runtime files the track declares, by name, where they were found.
    pub runtime: BTreeMap<String, FoundFile>,
    /// Toolchain runtime files, by name.
    pub crt: BTreeMap<String, FoundFile>,
    /// The kernel filter decision, for tracks with kernel libraries.
    pub kernels: Option<FilterPlan>,
}

/// One file of the package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedFile {
    /// Source path.
    pub src: PathBuf,
    /// Path inside the package root, with `/` separators.
    pub dest: String,
    /// What it is.
    pub role: Role,
    /// Size in bytes.
    pub size: u64,
}

/// The whole package, decided.
#[derive(Debug, Clone, Serialize)]
pub struct DistPlan {
    /// Track name.
    pub track: String,
    /// Package (and root folder) name.
    pub package: String,
    /// Files to copy, sorted by destination.
    pub files: Vec<PlannedFile>,
    /// Kernel files left out (count and bytes), when kernels are filtered.
    pub kernels_dropped: (usize, u64),
    /// What the track declares as coming only from a real SDK (`sdk_only`) and the
    /// runtime source had not: runtime file names and kernel folders (package paths).
    /// The manifest and README record them; verify-package checks exactly this list.
    pub absent_sdk_only: Vec<String>,
}

impl DistPlan {
    /// Bytes per role, in role order.
    pub fn bytes_by_role(&self) -> BTreeMap<Role, (usize, u64)> {
        let mut m = BTreeMap::new();
        for f in &self.files {
            let e = m.entry(f.role).or_insert((0, 0));
            e.0 += 1;
            e.1 += f.size;
        }
        m
    }

    /// Human-readable listing for `--dry-run`.
    pub fn to_text(&self) -> String {
        let mut out = format!("package {} (track {})\n", self.package, self.track);
        for f in &self.files {
            out.push_str(&format!(
                "  {:<52} {:>12}  {:<18} <- {}\n",
                f.dest,
                f.size,
                format!("{:?}", f.role),
                f.src.display()
            ));
        }
        if self.kernels_dropped.0 > 0 {
            out.push_str(&format!(
                "  (kernel files left out: {} files, {:.1} MB)\n",
                self.kernels_dropped.0,
                self.kernels_dropped.1 as f64 / 1e6
            ));
        }
        for a in &self.absent_sdk_only {
            out.push_str(&format!("  (absent, comes only from a real SDK: {a})\n"));
        }
        out
    }
}

/// Decides every file of the package for `track` from `facts`.
pub fn plan(track_name: &str, track: &Track, facts: &DistFacts) -> Result<DistPlan> {
    let mut files = Vec::new();
    let mut missing = Vec::new();
    for exe in &track.executables {
        match facts.binaries.get(exe) {
            Some(f) => files.push(PlannedFile {
                src: f.path.clone(),
                dest: exe.clone(),
                role: Role::Executable,
                size: f.size,
            }),
            None => missing.push(format!("executable {exe}")),
        }
    }
    let lib_globs: Vec<Glob> = track
        .libraries
        .iter()
        .chain(&track.plugins)
        .map(|p| Glob::new(p))
        .collect::<Result<_>>()?;
    let mut libs = 0;
    for (name, f) in &facts.binaries {
        if track.executables.contains(name) {
            continue;
        }
        if lib_globs.iter().any(|g| g.matches(name)) && !is_excluded_library(name) {
            files.push(PlannedFile {
                src: f.path.clone(),
                dest: name.clone(),
                role: Role::GgmlLibrary,
                size: f.size,
            });
            libs += 1;
        }
    }
    if libs == 0
        && !track.libraries.is_empty()
        && facts
            .binaries
            .keys()
            .any(|n| lib_globs.iter().any(|g| g.matches(n)))
    {
        missing.push("ggml libraries".into());
    }
    // Runtime files go next to the executables on every OS. On Windows the DLL search
    // starts there; on Linux ggml's libraries and the bundled runtime libraries reach each
    // other through an `$ORIGIN` run path, which is not inherited, so one folder is the
    // layout in which every library's own run path works.
    let mut absent_sdk_only = Vec::new();
    for r in &track.runtime {
        match facts.runtime.get(&r.name) {
            Some(f) => files.push(PlannedFile {
                src: f.path.clone(),
                // A glob name (`amd_comgr*.dll`) ships as the file the SDK has.
                dest: f
                    .path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .filter(|_| r.name.contains(['*', '?']))
                    .unwrap_or_else(|| r.name.clone()),
                role: if r.load == Load::RuntimeLoaded {
                    Role::RuntimeLoaded
                } else {
                    Role::Runtime
                },
                size: f.size,
            }),
            None if r.optional => {}
            None if r.sdk_only => absent_sdk_only.push(r.name.clone()),
            None => missing.push(format!(
                "runtime file {} (from the SDK's {}/)",
                r.name, r.source
            )),
        }
    }
    if let Some(crt) = &track.crt {
        for name in &crt.files {
            match facts.crt.get(name) {
                Some(f) => files.push(PlannedFile {
                    src: f.path.clone(),
                    dest: name.clone(),
                    role: Role::Crt,
                    size: f.size,
                }),
                None => missing.push(format!("C runtime file {name} (from {})", crt.source)),
            }
        }
    }
    for (name, f) in &facts.crt {
        if track.crt.as_ref().is_some_and(|c| c.files.contains(name)) {
            continue;
        }
        files.push(PlannedFile {
            src: f.path.clone(),
            dest: name.clone(),
            role: Role::Crt,
            size: f.size,
        });
    }
    let mut kernels_dropped = (0usize, 0u64);
    if !track.kernel_libraries.is_empty() {
        let libraries = match &facts.kernels {
            Some(k) => k.libraries.as_slice(),
            None if track.kernel_libraries.iter().all(|k| k.sdk_only) => &[],
            None => {
                missing.push(
                    "the kernel libraries (no SDK to take them from: pass --rocm-path)".into(),
                );
                &[]
            }
        };
        for lib in libraries {
            let Some(declared) = track
                .kernel_libraries
                .iter()
                .find(|d| d.name == lib.kind.dir_name())
            else {
                continue;
            };
            // The declared source below its first folder (`rocblas/4.4.1/library` of
            // `lib/rocblas/4.4.1/library`) is where the library looks for its kernels
            // (Debian's rocBLAS has its version compiled in); the SDK's folder must end so.
            let tail: PathBuf = Path::new(&declared.source).components().skip(1).collect();
            if !lib.source_dir.ends_with(&tail) {
                missing.push(format!(
                    "kernel library {} at {} (the SDK has {}; update the track's source and dest)",
                    declared.name,
                    tail.display(),
                    lib.source_dir.display()
                ));
                continue;
            }
            let role = match lib.kind {
                LibraryKind::Rocblas => Role::RocblasKernels,
                LibraryKind::Hipblaslt => Role::HipblasltKernels,
            };
            for kf in &lib.kept {
                let src_root = &facts
                    .kernels
                    .as_ref()
                    .expect("libraries come from the plan")
                    .src_root;
                files.push(PlannedFile {
                    src: src_root.join(&lib.source_dir).join(&kf.rel_path),
                    dest: format!(
                        "{}/{}",
                        declared.dest.trim_end_matches('/'),
                        kf.rel_path.to_string_lossy().replace('\\', "/")
                    ),
                    role,
                    size: kf.size,
                });
            }
            kernels_dropped.0 += lib.dropped.len();
            kernels_dropped.1 += lib.dropped.iter().map(|f| f.size).sum::<u64>();
        }
        for declared in track
            .kernel_libraries
            .iter()
            .filter(|_| facts.kernels.is_some())
        {
            let present = files.iter().any(|f| {
                f.dest
                    .starts_with(&format!("{}/", declared.dest.trim_end_matches('/')))
            });
            if !present && !declared.optional && !declared.sdk_only {
                missing.push(format!(
                    "kernel library {} (SDK folder {})",
                    declared.name, declared.source
                ));
            }
        }
    }
    for declared in track.kernel_libraries.iter().filter(|k| k.sdk_only) {
        let prefix = format!("{}/", declared.dest.trim_end_matches('/'));
        if !files.iter().any(|f| f.dest.starts_with(&prefix)) {
            absent_sdk_only.push(prefix);
        }
    }
    if !missing.is_empty() {
        bail!(
            "track {track_name} cannot be packaged; missing: {}",
            missing.join(", ")
        );
    }
    files.sort_by(|a, b| a.dest.cmp(&b.dest));
    if let Some(w) = files.windows(2).find(|w| w[0].dest == w[1].dest) {
        bail!("two files would land at {} in the package", w[0].dest);
    }
    Ok(DistPlan {
        track: track_name.to_string(),
        package: track.package.clone(),
        files,
        kernels_dropped,
        absent_sdk_only,
    })
}

/// Libraries a build leaves next to the binaries that a package must not carry: the
/// llama library of the binding (we use only ggml) and test-only shims.
fn is_excluded_library(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.starts_with("libllama") || n.starts_with("llama.") || n.starts_with("bcryptprimitives")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracks::TracksFile;

    fn found(name: &str, size: u64) -> (String, FoundFile) {
        (
            name.to_string(),
            FoundFile {
                path: PathBuf::from(format!("/src/{name}")),
                size,
            },
        )
    }

    fn tracks() -> TracksFile {
        TracksFile::load(&TracksFile::default_path()).unwrap()
    }

    #[test]
    fn the_cross_built_hip_package_records_what_only_a_real_sdk_has() {
        let t = tracks();
        let track = t.track("windows-hip-rocm7-gnu").unwrap();
        let mut facts = DistFacts {
            binaries: [
                found("audiocpp_cli.exe", 10),
                found("audiocpp_server.exe", 11),
                found("ggml-base.dll", 5),
                found("ggml.dll", 4),
                found("ggml-cpu-haswell.dll", 3),
                found("ggml-hip.dll", 80),
            ]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        // The runtime as the wheel ships it: the glob takes amd_comgr0701.dll by its name.
        facts.runtime.extend([found("amdhip64_7.dll", 18)]);
        facts
            .runtime
            .insert("amd_comgr*.dll".into(), found("amd_comgr0701.dll", 115).1);
        for n in [
            "libstdc++-6.dll",
            "libgcc_s_seh-1.dll",
            "libwinpthread-1.dll",
        ] {
            facts.crt.extend([found(n, 1)]);
        }
        let p = plan("windows-hip-rocm7-gnu", track, &facts).unwrap();
        let dests: Vec<&str> = p.files.iter().map(|f| f.dest.as_str()).collect();
        assert!(
            dests.contains(&"amd_comgr0701.dll") && dests.contains(&"ggml-hip.dll"),
            "{dests:?}"
        );
        assert!(!dests.iter().any(|d| d.contains("hipblaslt")), "{dests:?}");
        assert_eq!(
            p.absent_sdk_only,
            vec!["libhipblaslt.dll", "hipblaslt/library/"]
        );
        // A track file that is not SDK-only is still required.
        let mut strict = track.clone();
        strict.runtime.iter_mut().for_each(|r| r.sdk_only = false);
        let e = plan("windows-hip-rocm7-gnu", &strict, &facts)
            .unwrap_err()
            .to_string();
        assert!(e.contains("runtime file libhipblaslt.dll"), "{e}");
    }

    #[test]
    fn linux_cpu_takes_executables_and_ggml_libraries_only() {
        let t = tracks();
        let track = t.track("linux-cpu").unwrap();
        let facts = DistFacts {
            binaries: [
                found("audiocpp_cli", 10),
                found("audiocpp_server", 11),
                found("libggml-base.so", 5),
                found("libggml.so", 4),
                found("libggml-cpu-haswell.so", 3),
                found("libllama.so", 99),
                found("xtask", 1),
            ]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        let p = plan("linux-cpu", track, &facts).unwrap();
        let dests: Vec<&str> = p.files.iter().map(|f| f.dest.as_str()).collect();
        assert_eq!(
            dests,
            vec![
                "audiocpp_cli",
                "audiocpp_server",
                "libggml-base.so",
                "libggml-cpu-haswell.so",
                "libggml.so"
            ]
        );
        assert_eq!(p.bytes_by_role()[&Role::GgmlLibrary], (3, 12));
    }

    /// Facts of a Debian HIP build whose hipBLASLt kernel folder (named as in hipBLASLt
    /// 7.2.4's real listing) is at `dir` below the SDK root.
    fn debian_hipblaslt_facts(track: &Track, dir: &str) -> DistFacts {
        use crate::kernels::{debian, filter as kfilter, layout::LibraryKind};
        let listing = crate::kernels::fixtures::HIPBLASLT_724_LISTING;
        let lib = debian::listing_library(LibraryKind::Hipblaslt, Path::new(dir), listing).unwrap();
        let targets = kfilter::parse_targets(&["gfx1100"]).unwrap();
        let kernels = kfilter::plan_filter(
            Path::new("/usr"),
            &[lib],
            &targets,
            &kfilter::CoverageNotes::default(),
        )
        .unwrap();
        DistFacts {
            binaries: [
                found("audiocpp_cli", 10),
                found("audiocpp_server", 11),
                found("libggml-base.so.0", 5),
                found("libggml-hip.so", 7),
            ]
            .into_iter()
            .collect(),
            runtime: track.runtime.iter().map(|r| found(&r.name, 1)).collect(),
            kernels: Some(kernels),
            ..Default::default()
        }
    }

    #[test]
    fn linux_hip_runtime_sits_next_to_the_executables_and_kernels_keep_their_debian_path() {
        let t = tracks();
        let track = t.track("linux-hip-rocm7").unwrap();
        let facts = debian_hipblaslt_facts(track, "lib/x86_64-linux-gnu/hipblaslt/library");
        let p = plan("linux-hip-rocm7", track, &facts).unwrap();
        let dest = |name: &str| p.files.iter().any(|f| f.dest == name);
        for r in &track.runtime {
            assert!(dest(&r.name), "{} not at the package root", r.name);
        }
        assert!(dest("hipblaslt/library/TensileLibrary_lazy_gfx1100.dat"));
        assert!(!dest("hipblaslt/library/TensileLibrary_lazy_gfx90a.dat"));
        assert!(!p.files.iter().any(|f| f.dest.starts_with("lib/")));
    }

    #[test]
    fn a_kernel_folder_where_the_library_does_not_look_is_refused_with_the_fix() {
        let t = tracks();
        let track = t.track("linux-hip-rocm7").unwrap();
        let facts = debian_hipblaslt_facts(track, "lib/x86_64-linux-gnu/hipblaslt/7.2/library");
        let err = plan("linux-hip-rocm7", track, &facts)
            .unwrap_err()
            .to_string();
        assert!(err.contains("hipblaslt/7.2/library"), "{err}");
        assert!(err.contains("lib/hipblaslt/library"), "{err}");
        assert!(err.contains("update the track's source and dest"), "{err}");
    }

    #[test]
    fn missing_executable_and_runtime_are_named() {
        let t = tracks();
        let track = t.track("rocm6").unwrap();
        let facts = DistFacts {
            binaries: [found("audiocpp_cli.exe", 1)].into_iter().collect(),
            ..Default::default()
        };
        let err = plan("rocm6", track, &facts).unwrap_err().to_string();
        assert!(err.contains("executable audiocpp_server.exe"), "{err}");
        assert!(err.contains("runtime file amdhip64_6.dll"), "{err}");
        assert!(err.contains("msvcp140.dll"), "{err}");
    }
}
