//! `packaging/llama.cpp/no-libllama.cmake` really empties libllama: the test configures
//! the llama.cpp sources of the pinned llama-cpp-sys-2 (from cargo's registry) with the
//! file the workspace's `.cargo/config.toml` names in `CMAKE_PROJECT_INCLUDE` (so every
//! cargo build here gets it; it includes no-libllama.cmake), as the binding forwards it,
//! and reads the `llama` target's sources back through CMake's file API.

use std::path::{Path, PathBuf};

use std::process::Command;
use xtask::cross_backend::binding_source;
use xtask::project::project_root as root;

/// The `[env]` value cargo passes for `CMAKE_PROJECT_INCLUDE`, as a path.
fn configured_include() -> PathBuf {
    let text = std::fs::read_to_string(root().join(".cargo/config.toml")).unwrap();
    let config: toml::Value = toml::from_str(&text).unwrap();
    let entry = &config["env"]["CMAKE_PROJECT_INCLUDE"];
    assert_eq!(
        entry.get("relative").and_then(|r| r.as_bool()),
        Some(true),
        "the include is named relative to the workspace: {entry}"
    );
    root().join(entry["value"].as_str().unwrap())
}

/// The compiled sources of the `llama` target after configuring llama.cpp with `include`.
fn llama_sources(include: &Path) -> Vec<String> {
    let tmp = tempfile::tempdir().unwrap();
    let build = tmp.path().join("build");
    let query = build.join(".cmake/api/v1/query");
    std::fs::create_dir_all(&query).unwrap();
    std::fs::write(query.join("codemodel-v2"), "").unwrap();
    let out = Command::new("cmake")
        .arg("-S")
        .arg(binding_source().unwrap())
        .arg("-B")
        .arg(&build)
        .args([
            "-DCMAKE_BUILD_TYPE=Release",
            "-DLLAMA_BUILD_TESTS=OFF",
            "-DLLAMA_BUILD_EXAMPLES=OFF",
            "-DLLAMA_BUILD_SERVER=OFF",
            "-DLLAMA_BUILD_TOOLS=OFF",
            "-DLLAMA_BUILD_APP=OFF",
            "-DLLAMA_BUILD_COMMON=OFF",
            "-DLLAMA_CURL=OFF",
            "-DGGML_OPENMP=OFF",
        ])
        .arg(format!("-DCMAKE_PROJECT_INCLUDE={}", include.display()))
        .output()
        .expect("cmake is needed for this test: apt-get install -y cmake");
    let log =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "configuring llama.cpp failed:\n{log}");
    let reply = build.join(".cmake/api/v1/reply");
    let target = std::fs::read_dir(&reply)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with("target-llama-") && n.ends_with(".json")
        })
        .unwrap_or_else(|| {
            panic!(
                "CMake's file API names no target `llama` in {}",
                reply.display()
            )
        });
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&target).unwrap()).unwrap();
    json["sources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s.get("compileGroupIndex").is_some())
        .map(|s| s["path"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn libllama_is_built_from_one_empty_file() {
    let include = configured_include();
    assert!(include.is_file(), "{} is missing", include.display());
    let sources = llama_sources(&include);
    assert_eq!(sources.len(), 1, "libllama compiles {sources:?}");
    assert!(
        sources[0].ends_with("audiocpp-empty-libllama.cpp"),
        "libllama compiles {sources:?}"
    );
}

#[test]
fn without_the_include_libllama_compiles_llama_cpp() {
    // The same reading sees llama.cpp's own sources when nothing empties the target.
    let tmp = tempfile::tempdir().unwrap();
    let nothing = tmp.path().join("nothing.cmake");
    std::fs::write(&nothing, "").unwrap();
    let sources = llama_sources(&nothing);
    assert!(
        sources.iter().any(|s| s.ends_with("llama-model.cpp")),
        "libllama compiles {} files, not llama-model.cpp",
        sources.len()
    );
}
