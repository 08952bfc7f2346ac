//! `cargo xtask doctor`: the per-track report from fake facts (a Windows HIP box with only
//! ROCm 6.4; a VS 2026-only box), and the real report on this machine checked against
//! what is really installed here.

mod build_common;

use std::path::Path;
use std::process::Command;

use build_common::*;
use xtask::doctor::{report, Status};
use xtask::toolset::rocm::SdkOrigin;
use xtask::toolset::tools::ToolFact;
use xtask::tracks::TracksFile;

fn found(p: &str) -> Option<ToolFact> {
    Some(ToolFact {
        path: Some(p.into()),
        version: None,
    })
}

fn tracks() -> TracksFile {
    TracksFile::load(&TracksFile::default_path()).unwrap()
}

#[test]
fn windows_box_with_rocm_6_4_is_ready_for_rocm6_only() {
    let tmp = tempfile::tempdir().unwrap();
    let mut f = windows_facts(
        "vcvars-vs2022-14.44-ok.txt",
        "14.44",
        vec![windows_sdk(tmp.path(), (6, 4, 50101), SdkOrigin::HipPath)],
    );
    f.tools.cmake = found(r"C:\Program Files\CMake\bin\cmake.exe");
    f.tools.ninja = found(r"C:\tools\ninja.exe");
    f.tools.libclang = found(r"C:\Program Files\AMD\ROCm\6.4\bin");
    let r = report(&f, &tracks(), None);
    let t = |n: &str| r.tracks.iter().find(|t| t.name == n).unwrap();
    assert!(t("rocm6").ready, "{:#?}", t("rocm6"));
    assert!(t("windows-cpu").ready);
    let r7 = t("rocm7");
    assert!(!r7.ready);
    let c = r7.checks.iter().find(|c| c.what == "ROCm 7.1").unwrap();
    assert_eq!(c.status, Status::Missing);
    assert!(c.detail.contains("found only 6.4.50101"), "{}", c.detail);
    assert!(
        c.fix.contains("install the AMD HIP SDK 7.1 for Windows"),
        "{}",
        c.fix
    );
    assert!(t("linux-cpu")
        .elsewhere
        .as_deref()
        .unwrap()
        .contains("builds on Linux"));
    let text = xtask::doctor::render(&r);
    assert!(
        text.contains("track rocm6 (Windows x64, AMD GPUs through HIP (ROCm 6.4)): ready"),
        "{text}"
    );
    assert!(text.contains("VCToolsVersion 14.44.35207"), "{text}");
}

#[test]
fn vs2026_only_box_misses_msvc_14_44_with_the_component_to_add() {
    let tmp = tempfile::tempdir().unwrap();
    let mut f = windows_facts(
        "vcvars-vs2026-14.51.txt",
        "14.44",
        vec![windows_sdk(tmp.path(), (6, 4, 50101), SdkOrigin::HipPath)],
    );
    let m = f.msvc.as_mut().unwrap();
    m.instances
        .retain(|i| i.installation_version.starts_with("18."));
    m.capture = None;
    let r = report(&f, &tracks(), Some("rocm6"));
    assert_eq!(r.tracks.len(), 1);
    let c = r.tracks[0]
        .checks
        .iter()
        .find(|c| c.what == "MSVC 14.44")
        .unwrap();
    assert_eq!(c.status, Status::Missing);
    assert!(
        c.fix
            .contains("Microsoft.VisualStudio.Component.VC.14.44.17.14.x86.x64"),
        "{}",
        c.fix
    );
    assert!(c.detail.contains("[14.51.36231]"), "{}", c.detail);
}

fn on_path(name: &str) -> bool {
    xtask::toolset::tools::which(name).is_some()
}

#[test]
fn doctor_report_is_right_on_this_machine() {
    let tmp = tempfile::tempdir().unwrap();
    let facts = tmp.path().join("facts.json");
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["doctor", "--json", "--save-facts"])
        .arg(&facts)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let status = |what: &str| -> String {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["what"] == what)
            .unwrap_or_else(|| panic!("no check {what}"))["status"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let expect = |present: bool| if present { "ok" } else { "missing" };
    assert_eq!(status("cmake"), expect(on_path("cmake")));
    assert_eq!(status("ninja"), expect(on_path("ninja")));
    assert_eq!(status("objdump"), expect(on_path("objdump")));
    assert_eq!(status("python3"), expect(on_path("python3")));
    assert_eq!(
        status("mingw-w64 (posix)"),
        expect(on_path("x86_64-w64-mingw32-g++-posix"))
    );
    assert_eq!(
        status("wine"),
        expect(Path::new("/usr/lib/wine/wine64").is_file() || on_path("wine64"))
    );
    let rocm_here = ["/opt/rocm", "/usr/include/hip/hip_version.h"]
        .iter()
        .any(|p| Path::new(p).exists())
        || std::env::var_os("HIP_PATH").is_some()
        || std::env::var_os("ROCM_PATH").is_some();
    if !rocm_here {
        assert_eq!(status("ROCm SDK"), "missing");
        assert_eq!(status("AMD GPUs"), "missing");
    }
    // Every Windows track but the MinGW cross-built one is reported as building
    // elsewhere on Linux; the MinGW one is checked here, for mingw and its Rust target.
    for t in v["tracks"].as_array().unwrap() {
        let desc = t["description"].as_str().unwrap();
        let elsewhere = desc.starts_with("Windows") && !desc.contains("MinGW");
        assert_eq!(t["elsewhere"].is_string(), elsewhere, "{t}");
        if desc.contains("MinGW") {
            let checks: Vec<&str> = t["checks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["what"].as_str().unwrap())
                .collect();
            assert!(checks.contains(&"mingw-w64 (posix)"), "{checks:?}");
            assert!(!checks.iter().any(|c| c.starts_with("MSVC")), "{checks:?}");
        }
    }
    // The saved facts load back.
    let f = xtask::build::HostFacts::load(&facts).unwrap();
    assert_eq!(f.os, xtask::tracks::Os::Linux);
    // --track exits 1 when the track cannot be built here, 0 when it can.
    let code = |track: &str| {
        Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(["doctor", "--track", track])
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(code("rocm6"), Some(1));
    let cpu_ready = on_path("cmake") && on_path("ninja");
    if cpu_ready
        && v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["what"] == "libclang" && c["status"] == "ok")
    {
        assert_eq!(code("linux-cpu"), Some(0));
    }
    assert_eq!(code("no-such-track"), Some(2));
}
