//! Toolset discovery on recorded outputs: vswhere JSON, vcvarsall captures (success, the
//! `[ERROR:` case that exits 0, the VS 2026 default toolset), instance selection, ROCm SDK
//! trees (version read from the SDK, not its folder name) and amdgpu-arch output.

mod build_common;

use build_common::*;
use xtask::toolset::cuda;
use xtask::toolset::msvc::{self, VcvarsError};
use xtask::toolset::rocm::{self, DiscoverInput, GpuProbe, SdkOrigin};

#[test]
fn vswhere_json_parses_both_instances() {
    let v = msvc::parse_vswhere(&fixture("vswhere-vs2022-vs2026.json")).unwrap();
    assert_eq!(v.len(), 2);
    assert_eq!(v[0].display_name, "Visual Studio Community 2026");
    assert_eq!(v[0].installation_version, "18.1.11205.157");
    assert_eq!(v[0].product_line_version.as_deref(), Some("2026"));
    assert_eq!(
        v[1].installation_path,
        r"C:\Program Files (x86)\Microsoft Visual Studio\2022\BuildTools"
    );
    assert_eq!(
        v[1].vcvarsall(),
        r"C:\Program Files (x86)\Microsoft Visual Studio\2022\BuildTools\VC\Auxiliary\Build\vcvarsall.bat"
    );
    assert!(v.iter().all(|i| i.is_complete && !i.is_prerelease));
    assert!(msvc::parse_vswhere(&fixture("vswhere-none.json"))
        .unwrap()
        .is_empty());
    // vswhere -utf8 may write a byte-order mark.
    let bom = format!("\u{feff}{}", fixture("vswhere-vs2026-only.json"));
    assert_eq!(msvc::parse_vswhere(&bom).unwrap().len(), 1);
    assert!(msvc::parse_vswhere("not json").is_err());
}

#[test]
fn selection_takes_the_instance_that_holds_14_44_even_when_older() {
    let sel = msvc::select(&vs_instances(), "14.44").unwrap();
    assert_eq!(sel.toolset, "14.44.35207");
    assert_eq!(sel.instance.display_name, "Visual Studio Build Tools 2022");
    // The full version works too; a different patch does not.
    assert!(msvc::select(&vs_instances(), "14.44.35207").is_ok());
    assert!(msvc::select(&vs_instances(), "14.44.3").is_err());
    // 14.4 is not 14.44.
    assert!(!msvc::toolset_matches("14.4", "14.44.35207"));
    assert!(msvc::toolset_matches("14.44", "14.44.35207"));
}

#[test]
fn selection_prefers_the_newest_instance_when_both_hold_the_toolset() {
    let mut v = vs_instances();
    v[0].msvc_toolsets = vec!["14.44.35207".into(), "14.51.36231".into()];
    let sel = msvc::select(&v, "14.44").unwrap();
    assert_eq!(sel.instance.display_name, "Visual Studio Community 2026");
    // ... unless it is half installed.
    v[0].is_complete = false;
    let sel = msvc::select(&v, "14.44").unwrap();
    assert_eq!(sel.instance.display_name, "Visual Studio Build Tools 2022");
}

#[test]
fn selection_error_lists_what_each_instance_holds_and_the_fix() {
    let mut v = vs_instances();
    v.retain(|i| i.installation_version.starts_with("18."));
    let e = msvc::select(&v, "14.44").unwrap_err().to_string();
    assert!(
        e.contains("no Visual Studio instance has the MSVC toolset 14.44"),
        "{e}"
    );
    assert!(
        e.contains("Visual Studio Community 2026 18.1.11205.157"),
        "{e}"
    );
    assert!(e.contains("[14.51.36231]"), "{e}");
    assert!(e.contains(msvc::COMPONENT_14_44), "{e}");
    let e = msvc::select(&[], "14.44").unwrap_err().to_string();
    assert!(e.contains("vswhere found no Visual Studio instance"), "{e}");
}

#[test]
fn toolset_folders_are_listed_from_the_instance() {
    let tmp = tempfile::tempdir().unwrap();
    for d in ["14.44.35207", "14.51.36231", "14.38.33130"] {
        std::fs::create_dir_all(tmp.path().join("VC/Tools/MSVC").join(d)).unwrap();
    }
    std::fs::write(tmp.path().join("VC/Tools/MSVC/readme.txt"), "x").unwrap();
    assert_eq!(
        msvc::list_toolsets(tmp.path()),
        vec!["14.38.33130", "14.44.35207", "14.51.36231"]
    );
    assert!(msvc::list_toolsets(&tmp.path().join("nope")).is_empty());
}

#[test]
fn vcvars_capture_parses_into_banner_and_environment() {
    let out = msvc::parse_vcvars(&fixture("vcvars-vs2022-14.44-ok.txt")).unwrap();
    assert!(out.banner[1].contains("Visual Studio 2022 Developer Command Prompt"));
    assert_eq!(out.get("vctoolsversion"), Some("14.44.35207"));
    assert_eq!(msvc::check_toolset(&out, "14.44").unwrap(), "14.44.35207");
    let env = out.toolset_env();
    for k in [
        "Path",
        "INCLUDE",
        "LIB",
        "LIBPATH",
        "VCToolsInstallDir",
        "WindowsSdkDir",
        "UCRTVersion",
    ] {
        assert!(env.contains_key(k), "{k} missing from the toolset env");
    }
    for k in ["USERNAME", "COMPUTERNAME", "TEMP", "HIP_PATH"] {
        assert!(!env.contains_key(k), "{k} is not a toolset variable");
    }
    assert!(env["Path"].starts_with(r"C:\Program Files (x86)\Microsoft Visual Studio\2022\BuildTools\VC\Tools\MSVC\14.44.35207\bin\HostX64\x64;"));
}

#[test]
fn vcvars_error_lines_are_fatal_even_though_vcvarsall_exits_0() {
    let e = msvc::parse_vcvars(&fixture("vcvars-vs2026-14.44-missing.txt")).unwrap_err();
    let VcvarsError::Reported(lines) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(
        lines[0],
        "[ERROR:vcvars.bat] Toolset directory for version '14.44' was not found."
    );
    assert!(e
        .to_string()
        .starts_with("vcvarsall reported errors: [ERROR:vcvars.bat] Toolset directory"));
}

#[test]
fn vcvars_with_the_wrong_toolset_is_refused() {
    let out = msvc::parse_vcvars(&fixture("vcvars-vs2026-14.51.txt")).unwrap();
    let e = msvc::check_toolset(&out, "14.44").unwrap_err();
    assert_eq!(
        e,
        VcvarsError::WrongToolset {
            requested: "14.44".into(),
            got: "14.51.36231".into()
        }
    );
    // Without VCToolsVersion at all.
    let stripped: String = fixture("vcvars-vs2022-14.44-ok.txt")
        .lines()
        .filter(|l| !l.starts_with("VCToolsVersion="))
        .map(|l| format!("{l}\n"))
        .collect();
    let out = msvc::parse_vcvars(&stripped).unwrap();
    assert_eq!(
        msvc::check_toolset(&out, "14.44").unwrap_err(),
        VcvarsError::NoToolsVersion
    );
}

#[test]
fn vcvars_without_the_separator_means_the_chain_stopped() {
    let text = "'vcvarsall.bat' is not recognized as an internal or external command,\r\noperable program or batch file.\r\n";
    let e = msvc::parse_vcvars(text).unwrap_err();
    assert!(matches!(e, VcvarsError::NoSeparator(_)), "{e:?}");
    assert!(e.to_string().contains("operable program or batch file."));
}

#[test]
fn hip_refuses_msvc_14_50_and_newer_with_the_reason() {
    assert!(msvc::refuse_for_hip("14.44").is_ok());
    assert!(msvc::refuse_for_hip("14.44.35207").is_ok());
    let e = msvc::refuse_for_hip("14.51.36231").unwrap_err().to_string();
    assert!(e.contains("refused for HIP"), "{e}");
    assert!(e.contains("<cmath>"), "{e}");
    assert!(msvc::refuse_for_hip("14.50").is_err());
}

#[test]
fn vcvars_command_line_quotes_the_path_and_prints_the_separator() {
    let line = msvc::vcvars_command_line(r"C:\Program Files\VS\vcvarsall.bat", "x64", "14.44");
    assert_eq!(
        line,
        r#"/d /s /c ""C:\Program Files\VS\vcvarsall.bat" x64 -vcvars_ver=14.44 && echo ===AUDIOCPP-VCVARS-ENV=== && set""#
    );
}

#[test]
fn rocm_version_comes_from_the_sdk_not_the_folder_name() {
    let tmp = tempfile::tempdir().unwrap();
    // A folder named 6.4 holding a 6.2 SDK.
    let root = fake_windows_sdk(tmp.path(), "6.4", 6, 2, 41134);
    let sdk = rocm::inspect(&root, SdkOrigin::Scan).unwrap();
    assert_eq!(sdk.version.major_minor(), "6.2");
    assert_eq!(sdk.version.to_string(), "6.2.41134");
    assert_eq!(sdk.version_source, "include/hip/hip_version.h");
    assert_eq!(sdk.clang.as_deref(), Some("bin/clang.exe"));
    assert_eq!(sdk.clangxx.as_deref(), Some("bin/clang++.exe"));
    assert_eq!(sdk.amdgpu_arch.as_deref(), Some("bin/amdgpu-arch.exe"));
    assert_eq!(sdk.libclang_dir.as_deref(), Some("bin"));
    // A folder without any version file is no SDK.
    std::fs::create_dir_all(tmp.path().join("7.1/bin")).unwrap();
    let e = rocm::inspect(&tmp.path().join("7.1"), SdkOrigin::Flag)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no version file"), "{e}");
}

#[test]
fn rocm_linux_layout_uses_the_sdk_llvm_not_a_generic_bin() {
    let tmp = tempfile::tempdir().unwrap();
    let root = fake_linux_rocm(tmp.path(), "6.4.1");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::write(root.join("bin/clang"), "not this one").unwrap();
    let sdk = rocm::inspect(&root, SdkOrigin::RocmPath).unwrap();
    assert_eq!(sdk.version.to_string(), "6.4.1");
    assert_eq!(sdk.version_source, ".info/version");
    assert_eq!(sdk.clangxx.as_deref(), Some("lib/llvm/bin/clang++"));
    assert_eq!(sdk.clang.as_deref(), Some("lib/llvm/bin/clang"));
    assert_eq!(sdk.libclang_dir.as_deref(), Some("lib/llvm/lib"));
    assert_eq!(
        sdk.tool_path("lib/llvm/bin/clang++", xtask::tracks::Os::Linux),
        format!("{}/lib/llvm/bin/clang++", root.display())
    );
}

#[test]
fn rocm_debian_layout_finds_the_versioned_llvm() {
    let tmp = tempfile::tempdir().unwrap();
    let usr = tmp.path().join("usr");
    std::fs::create_dir_all(usr.join("include/hip")).unwrap();
    std::fs::write(usr.join("include/hip/hip_version.h"), "#define HIP_VERSION_MAJOR 6\n#define HIP_VERSION_MINOR 4\n#define HIP_VERSION_PATCH 43484\n").unwrap();
    for v in ["14", "21"] {
        std::fs::create_dir_all(usr.join(format!("lib/llvm-{v}/bin"))).unwrap();
        std::fs::write(usr.join(format!("lib/llvm-{v}/bin/clang++")), "x").unwrap();
    }
    std::fs::create_dir_all(usr.join("bin")).unwrap();
    std::fs::write(usr.join("bin/clang++"), "system clang").unwrap();
    let sdk = rocm::inspect(&usr, SdkOrigin::Scan).unwrap();
    assert_eq!(sdk.clangxx.as_deref(), Some("lib/llvm-21/bin/clang++"));
    assert_eq!(sdk.version.to_string(), "6.4.43484");
}

#[test]
fn rocm_cmake_package_version_is_the_last_resort() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("sdk");
    std::fs::create_dir_all(root.join("lib/cmake/hip")).unwrap();
    std::fs::write(
        root.join("lib/cmake/hip/hip-config-version.cmake"),
        "set(PACKAGE_VERSION \"7.1.25424\")\n",
    )
    .unwrap();
    let sdk = rocm::inspect(&root, SdkOrigin::Flag).unwrap();
    assert_eq!(sdk.version.to_string(), "7.1.25424");
}

#[test]
fn discovery_orders_flag_env_then_scan_newest_first_and_dedups() {
    let tmp = tempfile::tempdir().unwrap();
    let a = fake_windows_sdk(tmp.path(), "6.4", 6, 4, 50101);
    let b = fake_windows_sdk(tmp.path(), "7.1", 7, 1, 25424);
    let c = fake_windows_sdk(tmp.path(), "6.2", 6, 2, 41134);
    let junk = tmp.path().join("not-an-sdk");
    std::fs::create_dir_all(&junk).unwrap();
    let d = rocm::discover(&DiscoverInput {
        flag: None,
        hip_path: Some(a.clone()),
        rocm_path: Some(junk.clone()),
        scan: vec![c.clone(), a.clone(), b.clone(), tmp.path().join("missing")],
    });
    let got: Vec<String> = d
        .sdks
        .iter()
        .map(|s| format!("{:?} {}", s.origin, s.version))
        .collect();
    assert_eq!(
        got,
        vec!["HipPath 6.4.50101", "Scan 7.1.25424", "Scan 6.2.41134"]
    );
    assert_eq!(d.rejected.len(), 1);
    assert!(d.rejected[0].1.contains("no version file"));
}

#[test]
fn amdgpu_arch_output_and_no_gpu_error() {
    assert_eq!(
        rocm::parse_amdgpu_arch("gfx1100\ngfx1103\ngfx1100\n"),
        vec!["gfx1100", "gfx1103"]
    );
    assert!(rocm::parse_amdgpu_arch("").is_empty());
    let probe = GpuProbe {
        tool: r"C:\Program Files\AMD\ROCm\6.4\bin\amdgpu-arch.exe".into(),
        exit_code: Some(1),
        stdout: String::new(),
        stderr: "No AMD GPU detected in the system\n".into(),
    };
    let e = rocm::gpus_from_probe(Some(&probe)).unwrap_err().to_string();
    assert!(
        e.contains("found no AMD GPU on this machine (exit 1: No AMD GPU detected in the system)"),
        "{e}"
    );
    assert!(e.contains("--gpu-targets gfx1100,gfx1101"), "{e}");
    let e = rocm::gpus_from_probe(None).unwrap_err().to_string();
    assert!(e.contains("needs amdgpu-arch"), "{e}");
}

#[test]
fn cuda_version_files() {
    assert_eq!(
        cuda::parse_version_json(
            r#"{"cuda":{"name":"CUDA SDK","version":"12.8.1"},"cuda_nvcc":{"version":"12.8.93"}}"#
        )
        .as_deref(),
        Some("12.8.1")
    );
    assert_eq!(
        cuda::parse_version_txt("CUDA Version 11.8.89\n").as_deref(),
        Some("11.8.89")
    );
}
