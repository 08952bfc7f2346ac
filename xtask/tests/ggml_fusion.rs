//! `ggml_fusion/cmake/` with the real CMake and the pinned llama.cpp: the patch adds its
//! two lines to the binding's own `ggml-cuda.cu` and nothing else, refuses a source it was
//! not written for, and `packaging/llama.cpp/hooks.cmake` (what every build here passes in
//! `CMAKE_PROJECT_INCLUDE`) swaps a `ggml-cuda` target's source for the patched copy and
//! adds the kernels, compiled in the original's language. The kernels themselves run only
//! on a GPU: docs/build/CUDA.md has their device run.

use std::path::Path;

use std::process::Command;
use xtask::cross_backend::binding_source;
use xtask::project::project_root as root;

fn cmake(args: &[String]) -> (bool, String) {
    let out = Command::new("cmake")
        .args(args)
        .output()
        .expect("cmake is needed for this test: apt-get install -y cmake");
    let log =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), log)
}

/// Runs the patch script alone on `input`; the output's text when it succeeded.
fn patch(input: &Path, out: &Path) -> (bool, String) {
    let script = root().join("ggml_fusion/cmake/patch.cmake");
    let (ok, log) = cmake(&[
        format!("-DIN={}", input.display()),
        format!("-DOUT={}", out.display()),
        "-P".into(),
        script.display().to_string(),
    ]);
    (
        ok,
        if ok {
            std::fs::read_to_string(out).unwrap()
        } else {
            log
        },
    )
}

#[test]
fn the_patch_adds_two_lines_to_ggml_cuda_and_nothing_else() {
    let original = binding_source()
        .unwrap()
        .join("ggml/src/ggml-cuda/ggml-cuda.cu");
    let tmp = tempfile::tempdir().unwrap();
    let (ok, patched) = patch(&original, &tmp.path().join("ggml-cuda.cu"));
    assert!(ok, "{patched}");
    let before = std::fs::read_to_string(&original).unwrap();
    let added: Vec<(usize, &str)> = patched
        .lines()
        .enumerate()
        .filter(|(_, l)| l.ends_with("// audiocpp"))
        .collect();
    assert_eq!(added.len(), 2, "{added:?}");
    let rest: Vec<&str> = patched
        .lines()
        .filter(|l| !l.ends_with("// audiocpp"))
        .collect();
    assert_eq!(rest, before.lines().collect::<Vec<_>>());
    // The declaration just before ggml_cuda_try_fuse, and the call just before the graph
    // evaluation asks ggml_cuda_try_fuse, indented as that line.
    let lines: Vec<&str> = patched.lines().collect();
    let (decl, call) = (added[0].0, added[1].0);
    assert!(lines[decl].starts_with("int audiocpp_run_nodes("));
    assert!(lines[decl + 1].starts_with("static int ggml_cuda_try_fuse("));
    let next = lines[call + 1];
    assert!(next
        .trim_start()
        .starts_with("int nodes_to_skip = ggml_cuda_try_fuse("));
    let indent = &next[..next.len() - next.trim_start().len()];
    assert!(!indent.is_empty());
    assert!(lines[call].starts_with(&format!(
        "{indent}if (const int audiocpp_ran = audiocpp_run_nodes("
    )));
    assert!(lines[call].contains("i += audiocpp_ran - 1; continue;"));
}

#[test]
fn the_patch_refuses_a_source_without_its_place() {
    let tmp = tempfile::tempdir().unwrap();
    let other = tmp.path().join("other.cu");
    // The definition is there, but not the line of the graph evaluation that calls it.
    std::fs::write(
        &other,
        "static int ggml_cuda_try_fuse(ggml_backend_cuda_context * cuda_ctx, ggml_cgraph * cgraph, int i) {\n    return 0;\n}\n",
    )
    .unwrap();
    let out = tmp.path().join("out.cu");
    let (ok, log) = patch(&other, &out);
    assert!(!ok, "patched a source without the expected definition");
    // CMake wraps its messages' lines.
    let words = log.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("update the patch for this llama.cpp"),
        "{log}"
    );
    assert!(!out.exists(), "a half-made {} was left", out.display());
}

/// The compiled sources of `target` and their languages, after configuring `project`
/// with the workspace's hooks.
fn target_sources(project: &Path, target: &str) -> Vec<(String, String)> {
    let build = project.join("build");
    let query = build.join(".cmake/api/v1/query");
    std::fs::create_dir_all(&query).unwrap();
    std::fs::write(query.join("codemodel-v2"), "").unwrap();
    let hooks = root().join("packaging/llama.cpp/hooks.cmake");
    let (ok, log) = cmake(&[
        "-S".into(),
        project.display().to_string(),
        "-B".into(),
        build.display().to_string(),
        format!("-DCMAKE_PROJECT_INCLUDE={}", hooks.display()),
    ]);
    assert!(ok, "configuring failed:\n{log}");
    assert!(
        log.contains("audiocpp fusion: ggml-cuda runs layer norms and matrix-vector products"),
        "{log}"
    );
    let reply = build.join(".cmake/api/v1/reply");
    let file = std::fs::read_dir(&reply)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let n = p.file_name().unwrap().to_string_lossy().to_string();
            n.starts_with(&format!("target-{target}-")) && n.ends_with(".json")
        })
        .unwrap_or_else(|| panic!("no target {target} in {}", reply.display()));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let groups = json["compileGroups"].as_array().unwrap();
    json["sources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| {
            let g = s.get("compileGroupIndex")?.as_u64()? as usize;
            Some((
                s["path"].as_str().unwrap().to_string(),
                groups[g]["language"].as_str().unwrap().to_string(),
            ))
        })
        .collect()
}

#[test]
fn the_hooks_swap_the_backend_source_and_add_the_kernels() {
    // A project named as ggml's, with a `ggml-cuda` target made of the pinned
    // ggml-cuda.cu and one more source, compiled as C++ as ggml-hip's are when hipcc is
    // the compiler (so that no CUDA toolkit is needed to configure it).
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("ggml-cuda");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::copy(
        binding_source()
            .unwrap()
            .join("ggml/src/ggml-cuda/ggml-cuda.cu"),
        src.join("ggml-cuda.cu"),
    )
    .unwrap();
    std::fs::write(src.join("norm.cu"), "").unwrap();
    std::fs::write(
        tmp.path().join("CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.19)\nproject(ggml CXX)\n\
         set(s ${CMAKE_CURRENT_SOURCE_DIR}/ggml-cuda/ggml-cuda.cu ${CMAKE_CURRENT_SOURCE_DIR}/ggml-cuda/norm.cu)\n\
         add_library(ggml-cuda SHARED ${s})\n\
         set_source_files_properties(${s} PROPERTIES LANGUAGE CXX)\n",
    )
    .unwrap();
    let sources = target_sources(tmp.path(), "ggml-cuda");
    let names: Vec<&str> = sources.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(sources.len(), 5, "{names:?}");
    assert!(
        names.iter().any(|p| p.ends_with("ggml-cuda/norm.cu")),
        "{names:?}"
    );
    let patched = names
        .iter()
        .find(|p| p.ends_with("audiocpp_fusion/ggml-cuda/ggml-cuda.cu"))
        .unwrap_or_else(|| panic!("no patched copy among {names:?}"));
    assert!(
        !names
            .iter()
            .any(|p| p.ends_with("/ggml-cuda/ggml-cuda.cu") && p != patched),
        "the original is still compiled: {names:?}"
    );
    for kernel in ["fusion.cu", "layer_norm.cu", "mat_vec.cu"] {
        assert!(
            names
                .iter()
                .any(|p| p.ends_with(&format!("ggml_fusion/{kernel}"))),
            "{kernel} is not among {names:?}"
        );
    }
    for (path, language) in &sources {
        assert_eq!(language, "CXX", "{path} is compiled as {language}");
    }
    let text = std::fs::read_to_string(
        tmp.path()
            .join("build/audiocpp_fusion/ggml-cuda/ggml-cuda.cu"),
    )
    .unwrap();
    assert_eq!(text.matches("audiocpp_run_nodes(").count(), 2);
}
