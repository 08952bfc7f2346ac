//! `dist` for the Windows HIP tracks, end to end on generated SDK trees: PE DLLs with the
//! real ROCm 6.4 / 7.1 names and import chains (written by verify-deps' PE writer), kernel
//! folders from the kernels fixtures, a fake MSVC CRT and stand-in executables. The
//! packages must verify, carry exactly the track's DLLs and filtered kernels, say the
//! track's README notes, and come out byte-identical twice.

mod build_common;

use std::path::Path;
use std::process::Command;

use xtask::toolset::rocm::SdkOrigin;

use xtask::dist::fixtures::{self as dist_fixtures, write_pe, FakeWindowsSdk, CRT_IMPORTS as CRT};
use xtask::kernels::fixtures::{self, Fill};

/// A fake HIP SDK of ROCm `major` with the real kernel names, sizes scaled down 1000x
/// (the zip step reads every byte).
fn fake(dir: &Path, major: u32) -> FakeWindowsSdk {
    let tree = if major == 6 {
        fixtures::rocm64_windows_with_hipblaslt()
    } else {
        fixtures::rocm71_windows()
    }
    .scaled(0.001);
    dist_fixtures::windows_hip(dir, major, &tree, Fill::Sparse).unwrap()
}

fn xtask(args: &[&str], out_dir: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .arg("--out-dir")
        .arg(out_dir)
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .env("CI", "1")
        .output()
        .unwrap()
}

fn dist(track: &str, f: &FakeWindowsSdk, out: &Path, extra: &[&str]) -> std::process::Output {
    let args = [
        &[
            "dist",
            "--track",
            track,
            if track.contains("cuda") {
                "--cuda-path"
            } else {
                "--rocm-path"
            },
            f.sdk.to_str().unwrap(),
            "--crt-dir",
            f.crt.to_str().unwrap(),
            "--bin-dir",
            f.bin.to_str().unwrap(),
        ][..],
        extra,
    ]
    .concat();
    xtask(&args, out)
}

fn zip_names(zip: &Path) -> Vec<String> {
    let mut z = zip::ZipArchive::new(std::fs::File::open(zip).unwrap()).unwrap();
    (0..z.len())
        .map(|i| z.by_index(i).unwrap().name().to_string())
        .collect()
}

fn read_manifest_from_zip(zip: &Path) -> serde_json::Value {
    let mut z = zip::ZipArchive::new(std::fs::File::open(zip).unwrap()).unwrap();
    let name = (0..z.len())
        .map(|i| z.by_index(i).unwrap().name().to_string())
        .find(|n| n.ends_with("/manifest.json"))
        .expect("manifest.json in the zip");
    let mut text = String::new();
    std::io::Read::read_to_string(&mut z.by_name(&name).unwrap(), &mut text).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn verify_package(zip: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("verify-package")
        .arg(zip)
        .output()
        .unwrap()
}

#[test]
fn rocm6_package_is_verified_filtered_and_reproducible() {
    let dir = tempfile::tempdir().unwrap();
    let f = fake(dir.path(), 6);
    let out = dir.path().join("dist");
    let o = dist("rocm6", &f, &out, &[]);
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    for row in [
        "executables",
        "runtime libraries",
        "hipBLASLt library",
        "C/C++ runtime",
        "total",
        "zip",
    ] {
        assert!(stdout.contains(row), "size table lacks {row}: {stdout}");
    }
    let zip = out.join("audiocpp-windows-hip-rocm6.zip");
    let names = zip_names(&zip);
    let root = "audiocpp-windows-hip-rocm6/";
    for must in [
        "audiocpp_cli.exe",
        "amdhip64_6.dll",
        "amd_comgr_2.dll",
        "hipblaslt.dll",
        "msvcp140.dll",
        "ggml-hip.dll",
        "README.md",
        "THIRD-PARTY-NOTICES.md",
        "LICENSE-MIT",
        "LICENSE-APACHE",
        "manifest.json",
    ] {
        assert!(names.contains(&format!("{root}{must}")), "{must} missing");
    }
    assert!(
        !names
            .iter()
            .any(|n| n.contains("hipInfo") || n.contains("amdhip64_7")),
        "only the track's files"
    );
    // The hipBLASLt route: nothing imports hipBLAS or rocBLAS, so neither they nor
    // rocBLAS's kernel folder ship.
    assert!(
        !names.iter().any(|n| n.ends_with("/hipblas.dll")
            || n.ends_with("/rocblas.dll")
            || n.contains("/rocblas/")),
        "no hipBLAS/rocBLAS: {names:?}"
    );
    assert!(names.iter().all(|n| n.starts_with(root)), "one root folder");
    let kernels: Vec<&String> = names
        .iter()
        .filter(|n| n.contains("/hipblaslt/library/"))
        .collect();
    for target in ["gfx1100", "gfx1102", "gfx1103", "gfx1150", "gfx1201"] {
        assert!(
            kernels
                .iter()
                .any(|n| n.ends_with(&format!("TensileLibrary_lazy_{target}.dat"))),
            "hipBLASLt kernels for {target}"
        );
    }
    let manifest = read_manifest_from_zip(&zip);
    assert_eq!(
        manifest["uncovered"].as_array().unwrap().len(),
        0,
        "every target covered through hipBLASLt: {}",
        manifest["uncovered"]
    );
    // What the engine's start-up guard reads: the folder and the targets it covers.
    let gemm = manifest["gemm_kernels"].as_array().unwrap();
    assert_eq!(gemm.len(), 1, "{gemm:?}");
    assert_eq!(gemm[0]["library"], "hipblaslt");
    assert_eq!(gemm[0]["folder"], "hipblaslt/library");
    let covered: Vec<&str> = gemm[0]["covered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        covered,
        ["gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1200", "gfx1201"]
    );
    assert!(manifest["uncovered_advice"]
        .as_str()
        .unwrap()
        .contains("set parameter 'backend' to cpu"));
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "entries sorted");

    let vp = verify_package(&zip);
    assert!(
        vp.status.success(),
        "{}",
        String::from_utf8_lossy(&vp.stdout)
    );
    let first = std::fs::read(&zip).unwrap();
    let sums = std::fs::read_to_string(out.join("SHA256SUMS")).unwrap();
    assert!(sums.contains("audiocpp-windows-hip-rocm6.zip"));
    let o = dist("rocm6", &f, &out, &[]);
    assert!(o.status.success());
    assert_eq!(
        first,
        std::fs::read(&zip).unwrap(),
        "two runs give byte-identical zips"
    );
    // Nor does the output folder leave a trace in the zip (the manifest once named the
    // staging folder under --out).
    let elsewhere = dir.path().join("another").join("dist");
    let o = dist("rocm6", &f, &elsewhere, &[]);
    assert!(o.status.success());
    assert_eq!(
        first,
        std::fs::read(elsewhere.join("audiocpp-windows-hip-rocm6.zip")).unwrap(),
        "a run into another folder gives a byte-identical zip"
    );
}

#[test]
fn rocm7_package_has_its_own_names_and_the_rx7600_note() {
    let dir = tempfile::tempdir().unwrap();
    let f = fake(dir.path(), 7);
    let out = dir.path().join("dist");
    let o = dist("rocm7", &f, &out, &[]);
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let pkg = out.join("audiocpp-windows-hip-rocm7");
    for must in ["amdhip64_7.dll", "amd_comgr_3.dll", "libhipblaslt.dll"] {
        assert!(pkg.join(must).is_file(), "{must} missing");
    }
    for gone in ["libhipblas.dll", "rocblas.dll", "rocblas"] {
        assert!(!pkg.join(gone).exists(), "{gone} is not shipped");
    }
    for target in ["gfx1103", "gfx1150"] {
        assert!(
            pkg.join(format!(
                "hipblaslt/library/TensileLibrary_lazy_{target}.dat"
            ))
            .is_file(),
            "{target} covered through hipBLASLt"
        );
    }
    assert!(
        pkg.join("hipblaslt/library").is_dir(),
        "hipBLASLt kernels next to the executables"
    );
    let readme = std::fs::read_to_string(pkg.join("README.md")).unwrap();
    assert!(
        readme.contains("RX 7600 series users: use the ROCm 6 package."),
        "{readme}"
    );
    assert!(readme.contains("--backend hip"));
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(pkg.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["track"], "rocm7");
    assert_eq!(manifest["uncovered"].as_array().unwrap().len(), 0);
    assert!(manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["sha256"].as_str().unwrap().len() == 64));
}

#[test]
fn wrong_sdk_version_and_missing_dll_are_refused_and_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let f7 = fake(dir.path(), 7);
    let out = dir.path().join("dist");
    let o = dist("rocm6", &f7, &out, &[]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("is version 7.1") && err.contains("needs 6.4"),
        "{err}"
    );
    assert!(!out.join("audiocpp-windows-hip-rocm6.zip").exists());

    let f6 = fake(dir.path(), 6);
    std::fs::remove_file(f6.sdk.join("bin/hipblaslt.dll")).unwrap();
    let o = dist("rocm6", &f6, &out, &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("runtime file hipblaslt.dll"));
    assert!(!out.join("audiocpp-windows-hip-rocm6.zip").exists());
}

#[test]
fn a_backend_still_importing_rocblas_is_refused() {
    // ggml-hip built the upstream way (hipBLAS over rocBLAS) does not fit the tracks: the
    // package would need rocBLAS, which aborts on gfx1103/gfx1150. verify-deps says so.
    let dir = tempfile::tempdir().unwrap();
    let f = fake(dir.path(), 6);
    write_pe(
        &f.bin.join("ggml-hip.dll"),
        true,
        &[
            CRT,
            &[
                "ggml-base.dll",
                "amdhip64_6.dll",
                "hipblas.dll",
                "rocblas.dll",
            ],
        ]
        .concat(),
    )
    .unwrap();
    let out = dir.path().join("dist");
    let o = dist("rocm6", &f, &out, &[]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("hipblas.dll"), "{err}");
    assert!(!out.join("audiocpp-windows-hip-rocm6.zip").exists());
}

#[test]
fn hipblaslt_without_a_target_leaves_it_uncovered() {
    // Coverage is read from the SDK folder given, never assumed: a hipBLASLt folder
    // without gfx1103 kernels makes gfx1103 uncovered, and dist refuses the package.
    let dir = tempfile::tempdir().unwrap();
    let f = fake(dir.path(), 6);
    let lib = f.sdk.join("bin/hipblaslt/library");
    for entry in std::fs::read_dir(&lib).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().contains("gfx1103") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let out = dir.path().join("dist");
    let o = dist("rocm6", &f, &out, &[]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("gfx1103") && err.contains("hipblaslt"),
        "{err}"
    );
    assert!(!out.join("audiocpp-windows-hip-rocm6.zip").exists());
}

#[test]
fn planted_openmp_import_fails_the_package_with_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let f = fake(dir.path(), 6);
    write_pe(
        &f.bin.join("ggml-cpu-haswell.dll"),
        true,
        &[CRT, &["ggml-base.dll", "libomp140.x86_64.dll"]].concat(),
    )
    .unwrap();
    let out = dir.path().join("dist");
    let o = dist("rocm6", &f, &out, &[]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("ggml-cpu-haswell.dll -> libomp140.x86_64.dll: forbidden"),
        "{err}"
    );
    assert!(
        !out.join("audiocpp-windows-hip-rocm6.zip").exists(),
        "a violation means no zip"
    );
    assert!(std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .all(|e| !e.file_name().to_string_lossy().starts_with(".staging")));
}

#[test]
fn tampered_zip_fails_verify_package() {
    let dir = tempfile::tempdir().unwrap();
    let f = fake(dir.path(), 6);
    let out = dir.path().join("dist");
    assert!(dist("rocm6", &f, &out, &[]).status.success());
    let zip = out.join("audiocpp-windows-hip-rocm6.zip");
    // Rewrite the zip without one DLL and without our MIT licence: the manifest, the
    // sha256 file, the dependency walk and the licence check must all notice.
    let mut src = zip::ZipArchive::new(std::fs::File::open(&zip).unwrap()).unwrap();
    let bad = dir.path().join("bad.zip");
    let mut w = zip::ZipWriter::new(std::fs::File::create(&bad).unwrap());
    for i in 0..src.len() {
        let e = src.by_index(i).unwrap();
        if e.name().ends_with("/hipblaslt.dll") || e.name().ends_with("/LICENSE-MIT") {
            continue;
        }
        w.raw_copy_file(e).unwrap();
    }
    w.finish().unwrap();
    let vp = verify_package(&bad);
    assert_eq!(vp.status.code(), Some(1));
    let text = String::from_utf8_lossy(&vp.stdout);
    assert!(
        text.contains("hipblaslt.dll: listed in manifest.json but missing"),
        "{text}"
    );
    assert!(text.contains("dependency check"), "{text}");
    assert!(text.contains("LICENSE-MIT is missing"), "{text}");
}

#[test]
fn dry_run_prints_the_plan_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let f = fake(dir.path(), 6);
    let out = dir.path().join("dist");
    let o = dist("rocm6", &f, &out, &["--dry-run"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    for line in [
        "package audiocpp-windows-hip-rocm6 (track rocm6)",
        "amdhip64_6.dll",
        "RuntimeLoaded",
        "hipblaslt/library/",
        "kernel files left out",
    ] {
        assert!(text.contains(line), "{line} missing in:\n{text}");
    }
    assert!(
        !text.contains("gfx906"),
        "dropped kernels are not listed as files"
    );
    assert!(!out.exists(), "a dry run writes nothing");
}

#[test]
fn windows_cuda_package_carries_the_runtime_and_cublas_but_not_the_driver() {
    let dir = tempfile::tempdir().unwrap();
    let f = dist_fixtures::windows_cuda(dir.path()).unwrap();
    let out = dir.path().join("dist");
    let o = dist("windows-cuda", &f, &out, &[]);
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let zip = out.join("audiocpp-windows-cuda12.zip");
    let names = zip_names(&zip);
    let root = "audiocpp-windows-cuda12/";
    for must in [
        "audiocpp_cli.exe",
        "ggml-cuda.dll",
        "cudart64_12.dll",
        "cublas64_12.dll",
        "cublasLt64_12.dll",
        "vcruntime140.dll",
    ] {
        assert!(
            names.contains(&format!("{root}{must}")),
            "{must} missing: {names:?}"
        );
    }
    assert!(
        !names
            .iter()
            .any(|n| n.to_ascii_lowercase().contains("nvcuda") || n.contains("nvrtc")),
        "the driver and unused toolkit DLLs stay out: {names:?}"
    );
    let vp = verify_package(&zip);
    assert!(
        vp.status.success(),
        "{}",
        String::from_utf8_lossy(&vp.stdout)
    );
    let readme = std::fs::read_to_string(out.join("audiocpp-windows-cuda12/README.md")).unwrap();
    assert!(readme.contains("--backend cuda"), "{readme}");
    assert!(
        readme.contains("GPU targets: 50-virtual") && !readme.contains("--backend rocm"),
        "{readme}"
    );
    assert!(readme.contains("NVIDIA driver for CUDA 12.8"), "{readme}");

    // A CUDA 13 toolkit is refused for the CUDA 12 track, naming the flag.
    std::fs::write(
        f.sdk.join("version.json"),
        r#"{ "cuda": { "name": "CUDA SDK", "version": "13.0.88" } }"#,
    )
    .unwrap();
    let out13 = dir.path().join("dist13");
    let o = dist("windows-cuda", &f, &out13, &[]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("is version 13.0")
            && err.contains("needs 12.8")
            && err.contains("--cuda-path"),
        "{err}"
    );
    assert!(!out13.join("audiocpp-windows-cuda12.zip").exists());
}

/// Facts recorded on the Windows build box (VS 2022 Build Tools with MSVC 14.44 next to
/// VS 2026, the recorded vcvarsall output, HIP SDKs 6.4 and 7.1), written where
/// `--facts` reads them.
fn windows_box_facts(dir: &Path) -> std::path::PathBuf {
    let facts = build_common::windows_facts(
        "vcvars-vs2022-14.44-ok.txt",
        "14.44",
        vec![
            build_common::windows_sdk(dir, (6, 4, 50101), SdkOrigin::HipPath),
            build_common::windows_sdk(dir, (7, 1, 25424), SdkOrigin::Scan),
        ],
    );
    let path = dir.join("facts.json");
    std::fs::write(&path, serde_json::to_string_pretty(&facts).unwrap()).unwrap();
    path
}

#[test]
fn rocm7_dry_run_on_linux_prints_the_hip_build_with_msvc_14_44_then_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let f = fake(dir.path(), 7);
    let facts = windows_box_facts(dir.path());
    let out = dir.path().join("dist");
    let o = xtask(
        &[
            "dist",
            "--track",
            "rocm7",
            "--dry-run",
            "--rocm-path",
            f.sdk.to_str().unwrap(),
            "--facts",
            facts.to_str().unwrap(),
        ],
        &out,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let (build, files) = text
        .split_once("\npackage audiocpp-windows-hip-rocm7 (track rocm7)\n")
        .unwrap_or_else(|| panic!("no package section in:\n{text}"));
    // The build section is `build`'s own plan of the track, the snapshot `build` tests.
    build_common::snapshot("windows-hip-rocm7", build);
    for line in [
        "build plan: rocm7 (hip backend, dynamic-backends build on Windows)",
        "toolset:     MSVC 14.44.35207 from Visual Studio Build Tools 2022",
        "VCToolsVersion=14.44.35207",
        "CMAKE_CXX_COMPILER=C:\\Program Files\\AMD\\ROCm\\7.1\\bin\\clang++.exe",
        "CMAKE_HIP_ARCHITECTURES=gfx1100;gfx1101;gfx1103;gfx1150;gfx1151;gfx1200;gfx1201",
        "GGML_HIP_NO_VMM=ON",
        "GGML_CUDA_GRAPHS=OFF",
        "GGML_OPENMP=OFF",
        "--target x86_64-pc-windows-msvc",
    ] {
        assert!(build.contains(line), "{line} missing in:\n{build}");
    }
    // Then the package: the SDK's runtime and kernels, the CRT from the captured
    // toolset's redistributable folder on the build box, the executables to be built.
    for line in [
        "amdhip64_7.dll",
        "libhipblaslt.dll",
        "hipblaslt/library/",
        "audiocpp_cli.exe",
        r"VC\Redist\MSVC\14.44.35207\x64\Microsoft.VC143.CRT\msvcp140_atomic_wait.dll",
    ] {
        assert!(files.contains(line), "{line} missing in:\n{files}");
    }
    assert!(!out.exists(), "a dry run writes nothing");
}

#[test]
fn a_track_without_a_build_recipe_is_refused_naming_the_file_key_and_example() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/tracks.toml"),
    )
    .unwrap();
    let recipe = "[tracks.rocm7.build]\ncpu_variants = \"all\"\nfeatures = [\"deployment\"]\ngemm = \"hipblaslt\"\n";
    assert!(text.contains(recipe));
    let tracks = dir.path().join("tracks.toml");
    std::fs::write(&tracks, text.replace(recipe, "")).unwrap();
    let out = dir.path().join("dist");
    let o = xtask(
        &[
            "dist",
            "--track",
            "rocm7",
            "--dry-run",
            "--tracks-file",
            tracks.to_str().unwrap(),
        ],
        &out,
    );
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "{}: tracks.rocm7.build.cpu_variants: track rocm7 has no build recipe",
            tracks.display()
        )) && err.contains("cpu_variants = \"all\""),
        "{err}"
    );
}

#[test]
fn mingw_dry_run_prints_the_cross_build_then_the_gcc_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("dist");
    let o = xtask(&["dist", "--track", "windows-cpu-gnu", "--dry-run"], &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    for line in [
        "build plan: windows-cpu-gnu (cpu backend, static build on Linux)",
        "CXX_x86_64_pc_windows_gnu=x86_64-w64-mingw32-g++-posix",
        "GGML_AVX2=OFF",
        "--target x86_64-pc-windows-gnu",
        "package audiocpp-windows-cpu-gnu (track windows-cpu-gnu)",
        "libstdc++-6.dll",
    ] {
        assert!(text.contains(line), "{line} missing in:\n{text}");
    }
}

#[test]
fn rocm6_dry_run_build_section_is_the_build_plan_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let f = fake(dir.path(), 6);
    let facts = windows_box_facts(dir.path());
    let o = xtask(
        &[
            "dist",
            "--track",
            "rocm6",
            "--dry-run",
            "--rocm-path",
            f.sdk.to_str().unwrap(),
            "--facts",
            facts.to_str().unwrap(),
        ],
        &dir.path().join("dist"),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let (build, files) = text
        .split_once("\npackage audiocpp-windows-hip-rocm6 (track rocm6)\n")
        .unwrap_or_else(|| panic!("no package section in:\n{text}"));
    build_common::snapshot("windows-hip-rocm6", build);
    assert!(files.contains("amdhip64_6.dll") && files.contains("vcruntime140_1.dll"));
}
