//! `build` plans, snapshot-tested per backend, track and OS from recorded facts: the two
//! Windows HIP tracks planned on this Linux machine exactly as the Windows box runs them
//! (fake SDK trees, recorded vswhere and vcvarsall outputs), the refusals, and the CLI's
//! `--dry-run --facts` path.

mod build_common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use build_common::*;
use xtask::build::{plan, render, BuildRequest, GpuTargets, Link};
use xtask::toolset::cuda::CudaSdk;
use xtask::toolset::rocm::{self, GpuProbe, SdkOrigin};
use xtask::tracks::Backend;

fn windows_box(tmp: &std::path::Path) -> xtask::build::HostFacts {
    windows_facts(
        "vcvars-vs2022-14.44-ok.txt",
        "14.44",
        vec![
            windows_sdk(tmp, (6, 4, 50101), SdkOrigin::HipPath),
            windows_sdk(tmp, (7, 1, 25424), SdkOrigin::Scan),
        ],
    )
}

#[test]
fn windows_hip_rocm6_plan() {
    let tmp = tempfile::tempdir().unwrap();
    let p = plan(&track_request("rocm6"), &windows_box(tmp.path())).unwrap();
    snapshot("windows-hip-rocm6", &render(&p));
    let t = p.toolset.as_ref().unwrap();
    assert_eq!(t.vc_tools_version, "14.44.35207");
    assert_eq!(t.instance, "Visual Studio Build Tools 2022 17.14.36623.8");
    assert_eq!(p.sdk.as_ref().unwrap().version, "6.4.50101");
    assert_eq!(p.target.as_deref(), Some("x86_64-pc-windows-msvc"));
    assert_eq!(
        p.env_value("CMAKE_CXX_COMPILER"),
        Some(r"C:\Program Files\AMD\ROCm\6.4\bin\clang++.exe")
    );
    assert_eq!(
        p.env_value("CMAKE_HIP_ARCHITECTURES"),
        Some("gfx1100;gfx1101;gfx1102;gfx1103;gfx1150;gfx1151;gfx1200;gfx1201")
    );
    for (k, v) in [
        ("GGML_HIP_NO_VMM", "ON"),
        ("GGML_HIP_GRAPHS", "OFF"),
        ("GGML_CUDA_GRAPHS", "OFF"),
        ("GGML_OPENMP", "OFF"),
        ("GGML_NATIVE", "OFF"),
        ("CMAKE_GENERATOR", "Ninja"),
    ] {
        assert_eq!(p.env_value(k), Some(v), "{k}");
    }
    assert!(p.features.contains(&"audiocpp-cli/hip".to_string()));
    assert!(p
        .features
        .contains(&"audiocpp-server/dynamic-backends".to_string()));
    assert_eq!(p.files.len(), 1);
    assert!(p.files[0]
        .contents
        .contains("set(GPU_TARGETS \"gfx1100;gfx1101;"));
    assert_eq!(
        p.env_value("CMAKE_PROJECT_INCLUDE_BEFORE"),
        Some(p.files[0].path.as_str())
    );
    assert_eq!(
        p.executables[0],
        format!(
            r"{}\x86_64-pc-windows-msvc\release\audiocpp_cli.exe",
            p.target_dir
        )
    );
}

#[test]
fn windows_hip_keeps_msvc_style_flags_away_from_rocm_clang() {
    let tmp = tempfile::tempdir().unwrap();
    let p = plan(&track_request("rocm6"), &windows_box(tmp.path())).unwrap();
    // The binding's `/O2 /DNDEBUG /Ob2` reach CMake only through the CMAKE_<LANG>_FLAGS the
    // cmake crate writes when they are undefined: all three are defined, GNU-style only.
    for k in ["CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS", "CMAKE_ASM_FLAGS"] {
        let v = p.env_value(k).unwrap_or_else(|| panic!("{k} not set"));
        assert!(
            !v.is_empty(),
            "{k} must be non-empty (an empty Windows variable is unset)"
        );
        assert!(v.split_whitespace().all(|f| f.starts_with('-')), "{k}={v}");
    }
    // Ninja, or the cmake crate also writes CMAKE_<LANG>_FLAGS_RELEASE for MSVC targets.
    assert_eq!(p.env_value("CMAKE_GENERATOR"), Some("Ninja"));
    assert_eq!(
        p.env_value("CMAKE_ASM_COMPILER"),
        p.env_value("CMAKE_C_COMPILER")
    );
    assert_eq!(
        p.env_value("CMAKE_MSVC_RUNTIME_LIBRARY"),
        Some("MultiThreadedDLL")
    );
    // The captured toolset reaches every child.
    assert!(p
        .env_value("PATH")
        .unwrap()
        .contains(r"MSVC\14.44.35207\bin\HostX64\x64"));
    assert_eq!(p.env_value("VCToolsVersion"), Some("14.44.35207"));
}

#[test]
fn windows_hip_rocm7_plan() {
    let tmp = tempfile::tempdir().unwrap();
    let p = plan(&track_request("rocm7"), &windows_box(tmp.path())).unwrap();
    snapshot("windows-hip-rocm7", &render(&p));
    assert_eq!(p.sdk.as_ref().unwrap().version, "7.1.25424");
    assert!(!p.gpu_targets.contains(&"gfx1102".to_string()));
    assert_eq!(
        p.env_value("ROCM_PATH"),
        Some(r"C:\Program Files\AMD\ROCm\7.1")
    );
}

#[test]
fn windows_cpu_plan() {
    let tmp = tempfile::tempdir().unwrap();
    let p = plan(&track_request("windows-cpu"), &windows_box(tmp.path())).unwrap();
    snapshot("windows-cpu", &render(&p));
    assert!(p.sdk.is_none());
    assert!(
        p.env_value("CMAKE_C_COMPILER").is_none(),
        "cl.exe stays the compiler for the CPU track"
    );
    assert_eq!(p.toolset.as_ref().unwrap().vc_tools_version, "14.44.35207");
}

#[test]
fn linux_cpu_track_plan() {
    let p = plan(&track_request("linux-cpu"), &linux_facts(vec![], None)).unwrap();
    snapshot("linux-cpu", &render(&p));
    assert!(p.toolset.is_none());
    assert_eq!(p.library_globs.len(), 1);
    assert_eq!(
        p.binding_globs,
        vec!["lib/libggml*.so*", "bin/libggml*.so*", "backends/*.so*"]
    );
}

/// The environment `dist` passed to `cargo build` before it used the planner (main
/// 4378ba6: `[tracks.NAME.build.env]` of packaging/tracks.toml, on top of the caller's).
fn env_before(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn env_of(p: &xtask::build::BuildPlan) -> BTreeMap<String, String> {
    p.env
        .iter()
        .map(|e| (e.name.clone(), e.value.clone()))
        .collect()
}

/// Features as `dist` passed them before (`audiocpp-cli/F`, `audiocpp-server/F`).
fn features_before(features: &[&str]) -> BTreeSet<String> {
    features
        .iter()
        .flat_map(|f| [format!("audiocpp-cli/{f}"), format!("audiocpp-server/{f}")])
        .collect()
}

#[test]
fn the_planned_linux_cpu_build_is_the_one_dist_ran_before() {
    let p = plan(&track_request("linux-cpu"), &linux_facts(vec![], None)).unwrap();
    // Before: `cargo build --release -p audiocpp-cli -p audiocpp-server` for the host
    // (x86_64-unknown-linux-gnu), features deployment + dynamic-backends.
    assert_eq!(
        p.features.iter().cloned().collect::<BTreeSet<_>>(),
        features_before(&["deployment", "dynamic-backends"])
    );
    assert_eq!(p.target.as_deref(), Some("x86_64-unknown-linux-gnu"));
    assert_eq!(p.packages, vec!["audiocpp-cli", "audiocpp-server"]);
    let args = &p.commands[0].args;
    assert_eq!(&args[..2], &["build", "--release"], "release profile");
    let mut env = env_of(&p);
    let before = env_before(&[
        ("GGML_OPENMP", "OFF"),
        ("CMAKE_INSTALL_RPATH", "$ORIGIN"),
        ("CMAKE_BUILD_RPATH", "$ORIGIN"),
    ]);
    for (k, v) in &before {
        assert_eq!(env.remove(k).as_deref(), Some(v.as_str()), "{k}");
    }
    // The only additions are the values the build got anyway: the binding defines
    // GGML_NATIVE=OFF itself without target-cpu=native, and no rustflags are configured
    // (.cargo/config.toml has only the xtask alias).
    assert_eq!(
        env,
        env_before(&[("GGML_NATIVE", "OFF"), ("CARGO_ENCODED_RUSTFLAGS", "")])
    );
    let config = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cargo/config.toml"),
    )
    .unwrap();
    assert!(!config.contains("rustflags"), "{config}");
}

#[test]
fn the_planned_mingw_build_is_the_one_dist_ran_before() {
    let p = plan(
        &track_request("windows-cpu-gnu"),
        &linux_facts(vec![], None),
    )
    .unwrap();
    assert_eq!(
        p.features.iter().cloned().collect::<BTreeSet<_>>(),
        features_before(&["deployment"])
    );
    assert_eq!(p.link, Link::Static);
    assert_eq!(p.target.as_deref(), Some("x86_64-pc-windows-gnu"));
    assert_eq!(&p.commands[0].args[..2], &["build", "--release"]);
    assert!(p.toolset.is_none(), "no MSVC for a MinGW build");
    let mut env = env_of(&p);
    let mut before = env_before(&[
        ("CC_x86_64_pc_windows_gnu", "x86_64-w64-mingw32-gcc-posix"),
        ("CXX_x86_64_pc_windows_gnu", "x86_64-w64-mingw32-g++-posix"),
        ("CFLAGS_x86_64_pc_windows_gnu", "-D_WIN32_WINNT=0x0601"),
        ("CXXFLAGS_x86_64_pc_windows_gnu", "-D_WIN32_WINNT=0x0601"),
        ("GGML_OPENMP", "OFF"),
        ("GGML_NATIVE", "OFF"),
    ]);
    for opt in [
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
    ] {
        before.insert(opt.into(), "OFF".into());
    }
    for (k, v) in &before {
        assert_eq!(env.remove(k).as_deref(), Some(v.as_str()), "{k}");
    }
    // New since: libopus (the Opus input decoder) is built with the stack protector
    // under MinGW; ld stamps the PE files with a fixed time, not the link's.
    assert_eq!(
        env,
        env_before(&[
            (
                "CARGO_ENCODED_RUSTFLAGS",
                "-Clink-args=-l:libssp.a -lmsvcrt -ladvapi32"
            ),
            ("SOURCE_DATE_EPOCH", xtask::build::plan::MINGW_LINK_TIME),
        ])
    );
}

#[test]
fn windows_cuda_plan_takes_the_track_architectures_with_graphs_off() {
    let tmp = tempfile::tempdir().unwrap();
    let mut f = windows_box(tmp.path());
    f.cuda = Some(CudaSdk {
        root: r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v12.8".into(),
        version: "12.8.1".into(),
        nvcc: Some(r"bin\nvcc.exe".into()),
    });
    let p = plan(&track_request("windows-cuda"), &f).unwrap();
    assert_eq!(
        p.env_value("CMAKE_CUDA_ARCHITECTURES"),
        Some("50-virtual;61-virtual;70-virtual;75-real;80-real;86-real;89-real;120-real")
    );
    assert_eq!(p.env_value("GGML_CUDA_GRAPHS"), Some("OFF"));
    assert_eq!(
        p.env
            .iter()
            .filter(|e| e.name == "GGML_CUDA_GRAPHS")
            .count(),
        1,
        "one home for the graphs setting"
    );
    assert_eq!(p.toolset.as_ref().unwrap().vc_tools_version, "14.44.35207");
    assert!(p.features.contains(&"audiocpp-cli/cuda".to_string()));
}

#[test]
fn a_track_cannot_override_a_planner_rule() {
    let mut req = track_request("linux-cpu");
    let t = req.track.as_mut().unwrap();
    t.track
        .build
        .env
        .insert("GGML_CUDA_GRAPHS".into(), "ON".into());
    let e = format!("{:#}", plan(&req, &linux_facts(vec![], None)).unwrap_err());
    assert!(
        e.contains("packaging/tracks.toml: tracks.linux-cpu.build.env.GGML_CUDA_GRAPHS: set by the build planner"),
        "{e}"
    );
    // A variable of its own is passed, with where it came from.
    let mut req = track_request("linux-cpu");
    let t = req.track.as_mut().unwrap();
    t.track
        .build
        .env
        .insert("AUDIOCPP_EXTRA".into(), "1".into());
    let p = plan(&req, &linux_facts(vec![], None)).unwrap();
    assert_eq!(p.env_value("AUDIOCPP_EXTRA"), Some("1"));
}

#[test]
fn a_track_without_a_build_recipe_names_the_file_the_key_and_an_example() {
    let mut t = track("rocm7");
    t.track.build = Default::default();
    let e = BuildRequest::for_track("rocm7", &t.track, std::path::Path::new("x/tracks.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(
            "x/tracks.toml: tracks.rocm7.build.cpu_variants: track rocm7 has no build recipe"
        ),
        "{e}"
    );
    assert!(
        e.contains("(allowed: all, baseline)") && e.contains("`cpu_variants = \"all\"`"),
        "{e}"
    );
}

#[test]
fn linux_cpu_dev_plans_native_and_portable() {
    let f = linux_facts(vec![], None);
    let native = plan(&BuildRequest::new(Backend::Cpu), &f).unwrap();
    snapshot("linux-cpu-dev-native", &render(&native));
    assert_eq!(native.env_value("GGML_NATIVE"), Some("ON"));
    assert_eq!(
        native.env_value("CARGO_ENCODED_RUSTFLAGS"),
        Some("-Ctarget-cpu=native")
    );
    let mut req = BuildRequest::new(Backend::Cpu);
    req.no_native_cpu = true;
    let portable = plan(&req, &f).unwrap();
    snapshot("linux-cpu-dev-portable", &render(&portable));
    assert_eq!(portable.env_value("GGML_NATIVE"), Some("OFF"));
    assert_eq!(portable.env_value("CARGO_ENCODED_RUSTFLAGS"), Some(""));
    assert_ne!(
        native.target_dir, portable.target_dir,
        "native and portable must not share a CMake cache"
    );
    assert!(portable.target.is_none());
}

#[test]
fn linux_hip_dev_plan_with_gpus_from_amdgpu_arch() {
    let tmp = tempfile::tempdir().unwrap();
    let root = fake_linux_rocm(tmp.path(), "6.4.1");
    let mut sdk = rocm::inspect(&root, SdkOrigin::Scan).unwrap();
    sdk.root = "/opt/rocm-6.4.1".into();
    let probe = GpuProbe {
        tool: "/opt/rocm-6.4.1/lib/llvm/bin/amdgpu-arch".into(),
        exit_code: Some(0),
        stdout: "gfx1103\ngfx1100\n".into(),
        stderr: String::new(),
    };
    let p = plan(
        &BuildRequest::new(Backend::Hip),
        &linux_facts(vec![sdk.clone()], Some(probe)),
    )
    .unwrap();
    snapshot("linux-hip-dev", &render(&p));
    assert_eq!(p.gpu_targets, vec!["gfx1103", "gfx1100"]);
    assert_eq!(
        p.env_value("CMAKE_HIP_COMPILER"),
        Some("/opt/rocm-6.4.1/lib/llvm/bin/clang++")
    );
    assert!(p.env_value("CMAKE_C_FLAGS").is_none());
    // No GPU and auto: a clear error.
    let none = GpuProbe {
        tool: "/opt/rocm-6.4.1/lib/llvm/bin/amdgpu-arch".into(),
        exit_code: Some(1),
        stdout: String::new(),
        stderr: String::new(),
    };
    let mut req = BuildRequest::new(Backend::Hip);
    req.gpu_targets = GpuTargets::Auto;
    let e = format!(
        "{:#}",
        plan(&req, &linux_facts(vec![sdk.clone()], Some(none))).unwrap_err()
    );
    assert!(
        e.contains("found no AMD GPU on this machine (exit 1: no output)"),
        "{e}"
    );
    // An explicit list needs no GPU; a bad name is refused.
    req.gpu_targets = GpuTargets::parse("gfx1100,gfx1151").unwrap();
    assert_eq!(
        plan(&req, &linux_facts(vec![sdk.clone()], None))
            .unwrap()
            .gpu_targets,
        vec!["gfx1100", "gfx1151"]
    );
    req.gpu_targets = GpuTargets::parse("gfx11,sm_86").unwrap();
    assert!(format!(
        "{:#}",
        plan(&req, &linux_facts(vec![sdk], None)).unwrap_err()
    )
    .contains("--gpu-targets: 'gfx11' is a family or generic token"));
}

#[test]
fn linux_debian_rocm_leaves_rocm_path_unset() {
    let tmp = tempfile::tempdir().unwrap();
    let root = fake_linux_rocm(tmp.path(), "6.4.3");
    let mut sdk = rocm::inspect(&root, SdkOrigin::Scan).unwrap();
    sdk.root = "/usr".into();
    let mut req = BuildRequest::new(Backend::Hip);
    req.gpu_targets = GpuTargets::parse("gfx1100").unwrap();
    let p = plan(&req, &linux_facts(vec![sdk], None)).unwrap();
    assert!(p.env_value("ROCM_PATH").is_none());
    assert!(p.notes.iter().any(|n| n.contains("ROCM_PATH stays unset")));
}

#[test]
fn linux_cuda_plan() {
    let mut f = linux_facts(vec![], None);
    f.cuda = Some(CudaSdk {
        root: "/usr/local/cuda-12.8".into(),
        version: "12.8.1".into(),
        nvcc: Some("bin/nvcc".into()),
    });
    let mut req = BuildRequest::new(Backend::Cuda);
    req.link = Link::Dynamic;
    let p = plan(&req, &f).unwrap();
    snapshot("linux-cuda-dynamic", &render(&p));
    assert_eq!(
        p.env_value("CMAKE_CUDA_ARCHITECTURES"),
        Some("75-virtual;80-virtual;86-real;89-real;90-virtual")
    );
    assert!(p.env_value("GGML_CUDA_NO_VMM").is_none());
    req.gpu_targets = GpuTargets::Auto;
    assert_eq!(
        plan(&req, &f)
            .unwrap()
            .env_value("CMAKE_CUDA_ARCHITECTURES"),
        Some("native")
    );
    // No toolkit: the error says where it looked.
    let e = format!("{:#}", plan(&req, &linux_facts(vec![], None)).unwrap_err());
    assert!(e.contains("no CUDA toolkit found"), "{e}");
}

#[test]
fn one_target_dir_per_configuration() {
    let tmp = tempfile::tempdir().unwrap();
    let f = windows_box(tmp.path());
    let r6 = plan(&track_request("rocm6"), &f).unwrap();
    let r7 = plan(&track_request("rocm7"), &f).unwrap();
    let mut narrow = track_request("rocm6");
    narrow.gpu_targets = GpuTargets::parse("gfx1100").unwrap();
    let r6n = plan(&narrow, &f).unwrap();
    let again = plan(&track_request("rocm6"), &f).unwrap();
    assert_ne!(r6.target_dir, r7.target_dir);
    assert_ne!(r6.target_dir, r6n.target_dir);
    assert_eq!(r6.target_dir, again.target_dir);
    assert!(r6
        .target_dir
        .starts_with(r"C:\src\audiocpp-rs\target\build\hip-"));
    // The deployment feature does not touch ggml: same folder, ggml is reused.
    let mut dep = track_request("rocm6");
    dep.deployment = true;
    assert_eq!(plan(&dep, &f).unwrap().target_dir, r6.target_dir);
}

#[test]
fn msvc_14_51_is_refused_for_hip_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let mut req = track_request("rocm6");
    req.msvc_toolset = Some("14.51".into());
    let e = format!("{:#}", plan(&req, &windows_box(tmp.path())).unwrap_err());
    assert!(e.contains("MSVC toolset 14.51 is refused for HIP builds: ROCm's HIP clang cannot parse the <cmath>"), "{e}");
}

#[test]
fn vs2026_only_box_cannot_build_hip() {
    let tmp = tempfile::tempdir().unwrap();
    let mut f = windows_box(tmp.path());
    f.msvc
        .as_mut()
        .unwrap()
        .instances
        .retain(|i| i.installation_version.starts_with("18."));
    f.msvc.as_mut().unwrap().capture = None;
    let e = format!("{:#}", plan(&track_request("rocm6"), &f).unwrap_err());
    assert!(
        e.contains("no Visual Studio instance has the MSVC toolset 14.44"),
        "{e}"
    );
    assert!(
        e.contains("Microsoft.VisualStudio.Component.VC.14.44.17.14.x86.x64"),
        "{e}"
    );
}

#[test]
fn vcvars_errors_and_wrong_toolset_are_fatal() {
    let tmp = tempfile::tempdir().unwrap();
    let sdks = vec![windows_sdk(tmp.path(), (6, 4, 50101), SdkOrigin::HipPath)];
    let f = windows_facts("vcvars-vs2026-14.44-missing.txt", "14.44", sdks.clone());
    let e = format!("{:#}", plan(&track_request("rocm6"), &f).unwrap_err());
    assert!(e.contains("vcvarsall reported errors: [ERROR:vcvars.bat] Toolset directory for version '14.44' was not found."), "{e}");
    let f = windows_facts("vcvars-vs2026-14.51.txt", "14.44", sdks.clone());
    let e = format!("{:#}", plan(&track_request("rocm6"), &f).unwrap_err());
    assert!(
        e.contains("vcvarsall gave VCToolsVersion=14.51.36231, not the requested 14.44.*"),
        "{e}"
    );
    // Same on the CPU track: the pin is for every Windows build.
    let e = format!("{:#}", plan(&track_request("windows-cpu"), &f).unwrap_err());
    assert!(e.contains("not the requested 14.44.*"), "{e}");
}

#[test]
fn cpu_track_refuses_a_toolset_newer_than_its_crt() {
    let tmp = tempfile::tempdir().unwrap();
    let mut req = track_request("windows-cpu");
    req.msvc_toolset = Some("14.51".into());
    let e = format!("{:#}", plan(&req, &windows_box(tmp.path())).unwrap_err());
    assert!(
        e.contains("bundles the CRT of MSVC 14.44, older than the requested toolset 14.51"),
        "{e}"
    );
}

#[test]
fn track_needs_its_sdk_version_read_from_the_sdk() {
    let tmp = tempfile::tempdir().unwrap();
    // The folder says 6.4, the SDK inside is 6.2.
    let root = fake_windows_sdk(tmp.path(), "6.4", 6, 2, 41134);
    let mut sdk = rocm::inspect(&root, SdkOrigin::HipPath).unwrap();
    sdk.root = r"C:\Program Files\AMD\ROCm\6.4".into();
    let f = windows_facts("vcvars-vs2022-14.44-ok.txt", "14.44", vec![sdk]);
    let e = format!("{:#}", plan(&track_request("rocm6"), &f).unwrap_err());
    assert!(e.contains("track rocm6 needs ROCm 6.4 and none was found (found: ROCm 6.2.41134 at C:\\Program Files\\AMD\\ROCm\\6.4"), "{e}");
}

#[test]
fn track_and_backend_must_agree_and_windows_needs_windows_facts() {
    let mut req = track_request("rocm6");
    req.backend = Backend::Cuda;
    let e = format!("{:#}", plan(&req, &linux_facts(vec![], None)).unwrap_err());
    assert!(
        e.contains("track rocm6 builds the hip backend, not cuda"),
        "{e}"
    );
    let e = format!(
        "{:#}",
        plan(&track_request("rocm6"), &linux_facts(vec![], None)).unwrap_err()
    );
    assert!(e.contains("doctor --save-facts"), "{e}");
    let mut req = BuildRequest::new(Backend::Cpu);
    req.gpu_targets = GpuTargets::Auto;
    assert!(plan(&req, &linux_facts(vec![], None)).is_err());
}

#[test]
fn cli_dry_run_on_linux_prints_the_windows_plan_from_recorded_facts() {
    let tmp = tempfile::tempdir().unwrap();
    let facts = tmp.path().join("facts.json");
    std::fs::write(
        &facts,
        serde_json::to_string_pretty(&windows_box(tmp.path())).unwrap(),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args([
            "build",
            "--backend",
            "hip",
            "--track",
            "rocm6",
            "--dry-run",
            "--facts",
        ])
        .arg(&facts)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    snapshot("windows-hip-rocm6", &String::from_utf8_lossy(&out.stdout));
    // JSON form, for dist and the manifest.
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args([
            "build",
            "--backend",
            "hip",
            "--track",
            "rocm6",
            "--dry-run",
            "--json",
            "--facts",
        ])
        .arg(&facts)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["toolset"]["vc_tools_version"], "14.44.35207");
    assert_eq!(v["sdk"]["version"], "6.4.50101");
    // A usage error exits 2 with one line.
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args([
            "build",
            "--backend",
            "hip",
            "--track",
            "rocm6",
            "--msvc-toolset",
            "14.51",
            "--dry-run",
            "--facts",
        ])
        .arg(&facts)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refused for HIP builds"));
    // --facts without --dry-run is a usage error (never execute another machine's plan).
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["build", "--backend", "cpu", "--facts"])
        .arg(&facts)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn linux_hip_track_plans_from_debian_rocm_as_test_hip_builds_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = fake_linux_rocm(tmp.path(), "6.4.3");
    let mut sdk = rocm::inspect(&root, SdkOrigin::Flag).unwrap();
    sdk.root = "/usr".into();
    // `test hip` runs `dist --track linux-hip-rocm6 --gpu-targets gfx1100 --rocm-path
    // /usr` in the sid chroot: the recipe's request with the track narrowed.
    let mut req = track_request("linux-hip-rocm6");
    req.rocm_path = Some("/usr".into());
    req.track.as_mut().unwrap().track.gpu_targets = vec!["gfx1100".into()];
    let p = plan(&req, &linux_facts(vec![sdk], None)).unwrap();
    assert_eq!(p.link, Link::Dynamic);
    assert_eq!(p.env_value("CMAKE_HIP_ARCHITECTURES"), Some("gfx1100"));
    assert_eq!(p.env_value("GGML_HIP_NO_VMM"), Some("ON"));
    assert_eq!(p.env_value("GGML_HIP_GRAPHS"), Some("OFF"));
    assert_eq!(p.env_value("CMAKE_BUILD_RPATH"), Some("$ORIGIN"));
    assert!(p.env_value("ROCM_PATH").is_none());
    for f in ["hip", "dynamic-backends", "deployment"] {
        assert!(p.features.contains(&format!("audiocpp-cli/{f}")), "{f}");
    }
}
