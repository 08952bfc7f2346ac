//! Generated Windows GPU SDKs for `dist`'s tests and benchmark: PE DLLs with the real
//! ROCm 6.4 / 7.1 or CUDA 12 names and import chains (written by verify-deps' PE
//! writer), a kernel tree from the kernels fixtures, a fake MSVC CRT folder and stand-in
//! executables that import what our real Windows binaries import.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::kernels::fixtures::{self, Fill, TreeSpec};
use crate::verify_deps::synth::{self, PeSpec};

/// The three folders `dist --rocm-path|--cuda-path --crt-dir --bin-dir` takes.
#[derive(Debug, Clone)]
pub struct FakeWindowsSdk {
    /// The SDK root (`.info/version`, `bin/`).
    pub sdk: PathBuf,
    /// The CRT redist folder.
    pub crt: PathBuf,
    /// The stand-in binaries.
    pub bin: PathBuf,
}

/// What an MSVC-built binary imports from the C/C++ runtime and the OS.
pub const CRT_IMPORTS: &[&str] = &[
    "MSVCP140.dll",
    "VCRUNTIME140.dll",
    "VCRUNTIME140_1.dll",
    "KERNEL32.dll",
];

/// Writes an x64 PE (a DLL when `dll`) importing `imports`, creating its folder.
pub fn write_pe(path: &Path, dll: bool, imports: &[&str]) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, synth::pe(&PeSpec::new(dll, imports)))
        .with_context(|| format!("writing {}", path.display()))
}

/// Lays out a HIP SDK of ROCm `major` (6 or 7) with `kernels` in it, its CRT and stand-in
/// binaries under `dir`.
pub fn windows_hip(
    dir: &Path,
    major: u32,
    kernels: &TreeSpec,
    fill: Fill,
) -> Result<FakeWindowsSdk> {
    let sdk = dir.join(format!("sdk{major}"));
    let (hip, comgr, hipblas, hipblaslt, version) = if major == 6 {
        (
            "amdhip64_6.dll",
            "amd_comgr_2.dll",
            "hipblas.dll",
            "hipblaslt.dll",
            "6.4.1-83",
        )
    } else {
        (
            "amdhip64_7.dll",
            "amd_comgr_3.dll",
            "libhipblas.dll",
            "libhipblaslt.dll",
            "7.1.0",
        )
    };
    std::fs::create_dir_all(sdk.join(".info"))?;
    std::fs::write(sdk.join(".info/version"), version)?;
    let bin = sdk.join("bin");
    write_pe(
        &bin.join(hip),
        true,
        &[CRT_IMPORTS, &["ADVAPI32.dll"]].concat(),
    )?;
    write_pe(&bin.join(comgr), true, CRT_IMPORTS)?;
    let atomic_wait: &[&str] = if major == 7 {
        &["MSVCP140_ATOMIC_WAIT.dll"]
    } else {
        &[]
    };
    write_pe(
        &bin.join("rocblas.dll"),
        true,
        &[CRT_IMPORTS, &[hip], atomic_wait].concat(),
    )?;
    // The ROCm 7 DLLs import MSVCP140_ATOMIC_WAIT (docs/architecture.md, section 8); which of them do is
    // not known here, so both GEMM libraries do in this fixture.
    write_pe(
        &bin.join(hipblaslt),
        true,
        &[CRT_IMPORTS, &[hip], atomic_wait].concat(),
    )?;
    write_pe(
        &bin.join(hipblas),
        true,
        &[CRT_IMPORTS, &["rocblas.dll", hipblaslt, hip]].concat(),
    )?;
    write_pe(&bin.join("hipInfo.exe"), false, &[hip])?;
    fixtures::write_tree(kernels, &sdk, fill)?;

    let (crt, out) = crt_and_binaries(dir, &format!("bin{major}"))?;
    // ggml's HIP backend built with the hipBLASLt GEMM route (`gemm/`): it imports
    // hipBLASLt and HIP, neither hipBLAS nor rocBLAS.
    write_pe(
        &out.join("ggml-hip.dll"),
        true,
        &[CRT_IMPORTS, &["ggml-base.dll", hip, hipblaslt]].concat(),
    )?;
    Ok(FakeWindowsSdk { sdk, crt, bin: out })
}

/// Lays out a CUDA 12.8 toolkit (`version.json`, the runtime and cuBLAS DLLs), its CRT and
/// stand-in binaries with a `ggml-cuda.dll` under `dir`.
pub fn windows_cuda(dir: &Path) -> Result<FakeWindowsSdk> {
    let sdk = dir.join("cuda12");
    std::fs::create_dir_all(&sdk)?;
    std::fs::write(
        sdk.join("version.json"),
        r#"{ "cuda": { "name": "CUDA SDK", "version": "12.8.1" } }"#,
    )?;
    let bin = sdk.join("bin");
    write_pe(&bin.join("cudart64_12.dll"), true, &["KERNEL32.dll"])?;
    write_pe(
        &bin.join("cublasLt64_12.dll"),
        true,
        &["KERNEL32.dll", "ADVAPI32.dll"],
    )?;
    write_pe(
        &bin.join("cublas64_12.dll"),
        true,
        &["KERNEL32.dll", "cublasLt64_12.dll"],
    )?;
    write_pe(&bin.join("nvrtc64_120_0.dll"), true, &["KERNEL32.dll"])?;
    let (crt, out) = crt_and_binaries(dir, "bin-cuda")?;
    write_pe(
        &out.join("ggml-cuda.dll"),
        true,
        &[
            CRT_IMPORTS,
            &[
                "ggml-base.dll",
                "cudart64_12.dll",
                "cublas64_12.dll",
                "nvcuda.dll",
            ],
        ]
        .concat(),
    )?;
    Ok(FakeWindowsSdk { sdk, crt, bin: out })
}

/// The CRT redist folder and the backend-independent stand-in binaries (`bin_name`
/// under `dir`): executables, ggml libraries and one CPU plugin.
fn crt_and_binaries(dir: &Path, bin_name: &str) -> Result<(PathBuf, PathBuf)> {
    let crt = dir.join("crt");
    for f in [
        "msvcp140.dll",
        "vcruntime140.dll",
        "vcruntime140_1.dll",
        "msvcp140_atomic_wait.dll",
    ] {
        write_pe(
            &crt.join(f),
            true,
            &["KERNEL32.dll", "api-ms-win-crt-runtime-l1-1-0.dll"],
        )?;
    }
    let out = dir.join(bin_name);
    let base = ["ggml-base.dll", "ggml.dll"];
    write_pe(
        &out.join("audiocpp_cli.exe"),
        false,
        &[CRT_IMPORTS, &base].concat(),
    )?;
    write_pe(
        &out.join("audiocpp_server.exe"),
        false,
        &[CRT_IMPORTS, &base, &["WS2_32.dll"]].concat(),
    )?;
    write_pe(&out.join("ggml-base.dll"), true, CRT_IMPORTS)?;
    write_pe(
        &out.join("ggml.dll"),
        true,
        &[CRT_IMPORTS, &["ggml-base.dll"]].concat(),
    )?;
    write_pe(
        &out.join("ggml-cpu-haswell.dll"),
        true,
        &[CRT_IMPORTS, &["ggml-base.dll"]].concat(),
    )?;
    Ok((crt, out))
}
