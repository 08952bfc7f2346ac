//! The start-up guard for a GPU's matrix-product kernels (issue 15).
//!
//! AMD's GEMM libraries end the process (`rocblas_abort`) at the first product on a chip
//! whose kernels their folder lacks; ggml never sees an error. A package records in its
//! `manifest.json` which GEMM kernel folders it ships and which targets each covers
//! (`cargo xtask dist` computes that from the SDK's files). Before the first product the
//! engine checks the HIP device's architecture against that record and against the
//! folders beside the executables, and refuses an uncovered device with one line naming
//! the architecture, the package and what to do (the advice is manifest data).
//!
//! Deciding is pure ([`refusal`]); reading the manifest and asking HIP for the device's
//! architecture are the thin layer around it ([`check_hip_device`]).

use std::path::Path;

use serde::Deserialize;

/// What a package's `manifest.json` says about its GEMM kernels.
#[derive(Debug, Clone, Deserialize)]
pub struct PackageKernels {
    /// The package name.
    pub package: String,
    /// The GEMM kernel folders and the targets each covers.
    #[serde(default)]
    pub gemm_kernels: Vec<KernelFolder>,
    /// What to tell the owner of an uncovered GPU.
    #[serde(default)]
    pub uncovered_advice: Option<String>,
    /// Files and folders the track takes only from a real SDK and this package was built
    /// without (`libhipblaslt.dll`, `hipblaslt/library/`): the reason a GPU backend in it
    /// cannot load until the user copies them in.
    #[serde(default)]
    pub absent_sdk_only: Vec<String>,
}

/// One GEMM kernel folder of a package.
#[derive(Debug, Clone, Deserialize)]
pub struct KernelFolder {
    /// The library (`hipblaslt`).
    pub library: String,
    /// The folder, relative to the package root.
    pub folder: String,
    /// The targets with a lazy index in it.
    pub covered: Vec<String>,
}

/// Reads `manifest.json` in `dir`. `Ok(None)` when there is none, or it records no GEMM
/// kernels (a development build, a CPU or CUDA package): then there is nothing to check.
pub fn read_package_kernels(dir: &Path) -> Result<Option<PackageKernels>, String> {
    Ok(read_manifest(dir)?.filter(|pkg| !pkg.gemm_kernels.is_empty()))
}

/// Reads `manifest.json` in `dir`; `Ok(None)` when there is none (a development build).
pub fn read_manifest(dir: &Path) -> Result<Option<PackageKernels>, String> {
    let path = dir.join("manifest.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let pkg: PackageKernels = serde_json::from_str(&text).map_err(|e| {
        format!(
            "{} is not a package manifest ({e}); restore it from the package zip",
            path.display()
        )
    })?;
    Ok(Some(pkg))
}

/// The base architecture of a HIP `gcnArchName` (`gfx1103:sramecc-:xnack-` -> `gfx1103`).
pub fn base_arch(gcn_arch_name: &str) -> &str {
    gcn_arch_name
        .split(':')
        .next()
        .unwrap_or(gcn_arch_name)
        .trim()
}

/// True when `folder` has a lazy index for `arch`, flat or in a per-arch subfolder, plain
/// or zlib-compressed (the layouts the SDKs use).
fn lazy_index_present(folder: &Path, arch: &str) -> bool {
    let name = format!("TensileLibrary_lazy_{arch}.dat");
    let zlib = format!("{name}.zlib");
    [
        folder.join(&name),
        folder.join(&zlib),
        folder.join(arch).join(&name),
        folder.join(arch).join(&zlib),
    ]
    .iter()
    .any(|p| p.is_file())
}

/// Decides whether the device may run: `None` when every GEMM kernel folder of the
/// package covers `arch` (the manifest lists it and the folder beside the executables
/// has its lazy index), else the one line that refuses it. `arch` is the device's
/// `gcnArchName`, or `None` when HIP could not say.
pub fn refusal(
    device: &str,
    arch: Option<&str>,
    pkg: &PackageKernels,
    package_dir: &Path,
) -> Option<String> {
    let advice = pkg
        .uncovered_advice
        .as_deref()
        .unwrap_or("set parameter 'backend' to cpu");
    let Some(arch) = arch.map(base_arch).filter(|a| a.starts_with("gfx")) else {
        return Some(format!(
            "{device}: HIP did not report the GPU architecture, so package {} cannot tell \
             whether its matrix-product kernels cover it; {advice}",
            pkg.package
        ));
    };
    for f in &pkg.gemm_kernels {
        let why = if !f.covered.iter().any(|c| c == arch) {
            format!(
                "its manifest lists {} for {}",
                f.covered.join(" "),
                f.folder
            )
        } else if !lazy_index_present(&package_dir.join(&f.folder), arch) {
            format!(
                "{} next to the executables has no TensileLibrary_lazy_{arch}.dat",
                f.folder
            )
        } else {
            continue;
        };
        return Some(format!(
            "{device} is {arch}, and package {} has no {} matrix-product kernels for it \
             ({why}); {advice}",
            pkg.package, f.library
        ));
    }
    None
}

/// The guard for HIP device `ordinal` (its index among HIP devices) described as
/// `device`: reads the manifest beside the running executable, asks HIP for the device's
/// architecture, and returns the refusal line if the package does not cover it.
pub fn check_hip_device(device: &str, ordinal: usize) -> Option<String> {
    let dir = std::env::current_exe().ok()?.parent()?.to_path_buf();
    let pkg = match read_package_kernels(&dir) {
        Ok(Some(pkg)) => pkg,
        Ok(None) => return None,
        Err(line) => return Some(line),
    };
    let arch = crate::ggml::hip_arch::device_arch(ordinal);
    refusal(device, arch.as_deref(), &pkg, &dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A package folder: a manifest recording `covered` for hipblaslt/library, and lazy
    /// indexes on disk for `on_disk`.
    fn package(covered: &[&str], on_disk: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let manifest = serde_json::json!({
            "schema": 1,
            "package": "audiocpp-windows-hip-rocm6",
            "track": "rocm6",
            "gemm_kernels": [{ "library": "hipblaslt", "folder": "hipblaslt/library", "covered": covered }],
            "uncovered_advice": "use the ROCm 6 package, or set parameter 'backend' to cpu",
            "files": []
        });
        std::fs::write(dir.path().join("manifest.json"), manifest.to_string()).unwrap();
        let lib = dir.path().join("hipblaslt/library");
        std::fs::create_dir_all(&lib).unwrap();
        for arch in on_disk {
            std::fs::write(lib.join(format!("TensileLibrary_lazy_{arch}.dat")), b"x").unwrap();
        }
        dir
    }

    fn decide(dir: &Path, arch: Option<&str>) -> Option<String> {
        let pkg = read_package_kernels(dir).unwrap().unwrap();
        refusal("ROCm0 (AMD Radeon 780M)", arch, &pkg, dir)
    }

    #[test]
    fn a_covered_arch_passes_with_its_feature_suffix() {
        let dir = package(&["gfx1100", "gfx1103"], &["gfx1100", "gfx1103"]);
        assert_eq!(decide(dir.path(), Some("gfx1103:sramecc-:xnack-")), None);
        assert_eq!(decide(dir.path(), Some("gfx1100")), None);
    }

    #[test]
    fn an_arch_the_manifest_lacks_is_refused_with_the_advice() {
        let dir = package(&["gfx1100", "gfx1103"], &["gfx1100", "gfx1103"]);
        let line = decide(dir.path(), Some("gfx1102")).unwrap();
        assert_eq!(
            line,
            "ROCm0 (AMD Radeon 780M) is gfx1102, and package audiocpp-windows-hip-rocm6 has no \
             hipblaslt matrix-product kernels for it (its manifest lists gfx1100 gfx1103 for \
             hipblaslt/library); use the ROCm 6 package, or set parameter 'backend' to cpu"
        );
        assert!(!line.contains('\n'));
    }

    #[test]
    fn a_folder_that_lost_its_kernels_is_refused() {
        let dir = package(&["gfx1100", "gfx1103"], &["gfx1100"]);
        let line = decide(dir.path(), Some("gfx1103")).unwrap();
        assert!(
            line.contains(
                "hipblaslt/library next to the executables has no TensileLibrary_lazy_gfx1103.dat"
            ),
            "{line}"
        );
    }

    #[test]
    fn per_arch_subfolders_and_zlib_indexes_count() {
        let dir = package(&["gfx1150"], &[]);
        let sub = dir.path().join("hipblaslt/library/gfx1150");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join("TensileLibrary_lazy_gfx1150.dat.zlib"), b"x").unwrap();
        assert_eq!(decide(dir.path(), Some("gfx1150")), None);
    }

    #[test]
    fn an_unknown_arch_is_refused() {
        let dir = package(&["gfx1100"], &["gfx1100"]);
        for arch in [None, Some(""), Some("garbage")] {
            let line = decide(dir.path(), arch).unwrap();
            assert!(
                line.contains("HIP did not report the GPU architecture"),
                "{line}"
            );
        }
    }

    #[test]
    fn no_manifest_or_no_gemm_record_means_no_guard() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_package_kernels(dir.path()).unwrap().is_none());
        std::fs::write(
            dir.path().join("manifest.json"),
            r#"{"package": "audiocpp-linux-cpu", "files": []}"#,
        )
        .unwrap();
        assert!(read_package_kernels(dir.path()).unwrap().is_none());
        std::fs::write(dir.path().join("manifest.json"), "not json").unwrap();
        let err = read_package_kernels(dir.path()).unwrap_err();
        assert!(err.contains("is not a package manifest"), "{err}");
    }
}
