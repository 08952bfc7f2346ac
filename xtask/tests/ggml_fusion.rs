//! `ggml_fusion/cmake/` with the real CMake and the pinned llama.cpp: the patch adds its
//! two lines to the binding's own `ggml-cuda.cu` and nothing else, refuses a source it was
//! not written for, and `packaging/llama.cpp/hooks.cmake` (what every build here passes in
//! `CMAKE_PROJECT_INCLUDE`) swaps a `ggml-cuda` target's source for the patched copy and
//! adds the kernels, compiled in the original's language. The kernels themselves run only
//! on a GPU: docs/build/CUDA.md has their device run. They are compiled here, though
//! (`nvcc`): by NVIDIA's nvcc from its pinned wheels, as objects of the real `ggml-cuda`
//! target with the patched `ggml-cuda.cu`, and ptxas must report no register spill in
//! them. A kernel that compiles for HIP but not for CUDA fails there.

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

/// ggml_fusion/ compiled by a real nvcc: NVIDIA's CUDA 13.5 compiler from its pinned
/// wheels (xtask/assets.toml `[cuda]`, fetched into the asset dir on first use), driven
/// by the pinned llama.cpp's own CMake with the hooks, as docs/build/CUDA.md's recipe
/// builds `ggml-cuda`. Linux x86-64 only: the wheels are manylinux x86-64 ones.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod nvcc {
    use std::path::{Path, PathBuf};
    use std::process::{Command, Stdio};
    use std::time::Instant;

    use super::{binding_source, root};
    use xtask::assets::{cuda_toolkit_parts, EXTRACTED_STAMP};

    /// The one GPU architecture compiled for: the H100's (sm_90), where docs/build/CUDA.md
    /// measured the kernels. A real one, so that ptxas runs and reports each function's
    /// registers and spills; every further one would add its compile time again.
    const ARCH: &str = "90";

    /// Fails, naming the remedy, unless `tool --version` runs: the test never skips.
    fn require(tool: &str, apt: &str) {
        let runs = Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            runs,
            "{tool} is needed to compile ggml_fusion/ for CUDA: apt-get install -y {apt} \
             (or `cargo xtask setup --for test`)"
        );
    }

    /// Runs `cmd`, its stdout and stderr together; whether it succeeded, and that text.
    fn run(cmd: &mut Command) -> (bool, String) {
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
        let log = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), log)
    }

    /// The asset dir `cargo xtask test` passes (`AUDIOCPP_TEST_ASSETS`), else the one it
    /// fills.
    fn assets_dir() -> PathBuf {
        std::env::var_os("AUDIOCPP_TEST_ASSETS")
            .map(PathBuf::from)
            .unwrap_or_else(xtask::assets::assets_dir)
    }

    /// Lays the CUDA toolkit out at `at` as nvcc and CMake's FindCUDAToolkit expect it
    /// (bin/, include/, lib/, nvvm/ under one root; nvcc finds the rest from the path it
    /// is run by): a symlink per file of the pinned wheels' folders, libcudart.so beside
    /// libcudart.so.13, and in lib/stubs/ empty libraries for the three CMake looks for
    /// and only a link would read: the driver's libcuda (no wheel has it) and cuBLAS's
    /// two (left in their wheel). This test builds objects and links nothing.
    fn toolkit(at: &Path) -> PathBuf {
        let parts = cuda_toolkit_parts(&assets_dir()).unwrap_or_else(|e| {
            panic!("fetching the pinned CUDA compiler (xtask/assets.toml [cuda]): {e:#}")
        });
        for part in &parts {
            // Absolute targets, whatever the asset dir was named by.
            let dir = part.dir.canonicalize().unwrap();
            for entry in walkdir::WalkDir::new(&dir) {
                let entry = entry.unwrap();
                if !entry.file_type().is_file() || entry.file_name() == EXTRACTED_STAMP {
                    continue;
                }
                let rel = entry.path().strip_prefix(&dir).unwrap();
                let link = at.join(&part.at).join(rel);
                std::fs::create_dir_all(link.parent().unwrap()).unwrap();
                std::os::unix::fs::symlink(entry.path(), &link)
                    .unwrap_or_else(|e| panic!("{} (from {}): {e}", link.display(), dir.display()));
            }
        }
        std::os::unix::fs::symlink("libcudart.so.13", at.join("lib/libcudart.so")).unwrap();
        let stubs = at.join("lib/stubs");
        std::fs::create_dir_all(&stubs).unwrap();
        for (name, soname) in [
            ("libcuda.so", "libcuda.so.1"),
            ("libcublas.so", "libcublas.so.13"),
            ("libcublasLt.so", "libcublasLt.so.13"),
        ] {
            let (ok, log) = run(Command::new("gcc")
                .args(["-shared", "-x", "c", "-", "-o"])
                .arg(stubs.join(name))
                .arg(format!("-Wl,-soname,{soname}"))
                .stdin(Stdio::null()));
            assert!(ok, "making the empty {name} failed:\n{log}");
        }
        at.join("bin/nvcc")
    }

    /// The object targets of `ggml-cuda` that ninja knows in `build`: ggml_fusion/'s
    /// sources' (with each source's path), and the patched ggml-cuda.cu's.
    fn objects(build: &Path) -> (Vec<(String, PathBuf)>, String) {
        let (ok, log) = run(Command::new("ninja")
            .arg("-C")
            .arg(build)
            .args(["-t", "targets", "all"]));
        assert!(ok, "ninja -t targets failed:\n{log}");
        let targets: Vec<&str> = log.lines().filter_map(|l| l.split(": ").next()).collect();
        let ours = targets
            .iter()
            .filter_map(|t| {
                let source = t.strip_suffix(".o")?;
                let name = source.rsplit_once("ggml_fusion/")?.1;
                (name.ends_with(".cu") && !name.contains('/'))
                    .then(|| (t.to_string(), root().join("ggml_fusion").join(name)))
            })
            .collect();
        let patched: Vec<&str> = targets
            .iter()
            .copied()
            .filter(|t| t.ends_with("audiocpp_fusion/ggml-cuda/ggml-cuda.cu.o"))
            .collect();
        assert_eq!(
            patched.len(),
            1,
            "the patched ggml-cuda.cu's object: {patched:?}"
        );
        (ours, patched[0].to_string())
    }

    /// What ptxas said (`-v`) of each function it compiled, from ninja's log: the object
    /// (from the status line ninja prints before a finished edge's output), the function,
    /// its spill stores and its spill loads.
    fn spills(log: &str) -> Vec<(String, String, u64, u64)> {
        let status = regex::Regex::new(r"^\[\d+/\d+\] .* (\S+\.o)$").unwrap();
        let function = regex::Regex::new(r"^ptxas info\s*: Function properties for (\S+)").unwrap();
        let spill =
            regex::Regex::new(r"(\d+) bytes spill stores, (\d+) bytes spill loads").unwrap();
        let (mut object, mut name, mut found) = (String::new(), String::new(), Vec::new());
        for line in log.lines() {
            if let Some(c) = status.captures(line) {
                object = c[1].to_string();
            } else if let Some(c) = function.captures(line) {
                name = c[1].to_string();
            } else if let Some(c) = spill.captures(line) {
                let n = |i: usize| c[i].parse::<u64>().unwrap();
                found.push((object.clone(), name.clone(), n(1), n(2)));
            }
        }
        found
    }

    #[test]
    fn spills_are_read_per_object_from_ninjas_log() {
        // As ptxas -v words it (a kernel given 24 registers by -maxrregcount), behind
        // ninja's status lines; the first edge printed nothing.
        let log = "[1/3] Building CUDA object a/fusion.cu.o\n\
                   [2/3] Building CUDA object a/work/ggml_fusion/mat_vec.cu.o\n\
                   ptxas info    : 0 bytes gmem\n\
                   ptxas info    : Compiling entry function '_Z1kPfi' for 'sm_90'\n\
                   ptxas info    : Function properties for _Z1kPfi\n    \
                   1064 bytes stack frame, 1420 bytes spill stores, 1676 bytes spill loads\n\
                   ptxas info    : Used 24 registers, used 0 barriers\n\
                   [3/3] Building CUDA object b/ggml-cuda.cu.o\n\
                   ptxas info    : Function properties for _Z1gv\n    \
                   0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n";
        assert_eq!(
            spills(log),
            [
                (
                    "a/work/ggml_fusion/mat_vec.cu.o".into(),
                    "_Z1kPfi".into(),
                    1420,
                    1676
                ),
                ("b/ggml-cuda.cu.o".into(), "_Z1gv".into(), 0, 0),
            ]
        );
    }

    #[test]
    fn ggml_fusion_and_the_patched_backend_compile_for_cuda_without_spills() {
        for (tool, apt) in [
            ("cmake", "cmake"),
            ("ninja", "ninja-build"),
            ("gcc", "gcc"),
            ("g++", "g++"),
        ] {
            require(tool, apt);
        }
        let started = Instant::now();
        let tmp = tempfile::tempdir().unwrap();
        let nvcc = toolkit(&tmp.path().join("cuda"));
        let fetched = started.elapsed();

        let build = tmp.path().join("build");
        let hooks = root().join("packaging/llama.cpp/hooks.cmake");
        let toolkit_root = nvcc.parent().unwrap().parent().unwrap();
        let (ok, log) = run(Command::new("cmake")
            .arg("-S")
            .arg(binding_source().unwrap())
            .arg("-B")
            .arg(&build)
            .args([
                "-G",
                "Ninja",
                "-DCMAKE_BUILD_TYPE=Release",
                "-DGGML_BACKEND_DL=ON",
                "-DBUILD_SHARED_LIBS=ON",
                "-DGGML_CUDA=ON",
                "-DGGML_CPU=OFF",
                "-DGGML_NATIVE=OFF",
                "-DGGML_CCACHE=OFF",
                "-DLLAMA_CURL=OFF",
                "-DLLAMA_BUILD_TESTS=OFF",
                "-DLLAMA_BUILD_EXAMPLES=OFF",
                "-DLLAMA_BUILD_TOOLS=OFF",
                "-DLLAMA_BUILD_SERVER=OFF",
                "-DLLAMA_BUILD_COMMON=OFF",
                "-DLLAMA_BUILD_APP=OFF",
                "-DCMAKE_CUDA_FLAGS=-Xptxas=-v",
            ])
            .arg(format!("-DCMAKE_CUDA_ARCHITECTURES={ARCH}"))
            .arg(format!("-DCMAKE_PROJECT_INCLUDE={}", hooks.display()))
            .arg(format!("-DCMAKE_CUDA_COMPILER={}", nvcc.display()))
            .arg(format!("-DCUDAToolkit_ROOT={}", toolkit_root.display()))
            // The toolkit is the pinned one, whatever the environment names.
            .env_remove("CUDACXX")
            .env_remove("CUDAFLAGS")
            .env_remove("CUDAHOSTCXX")
            .env_remove("CUDA_PATH"));
        assert!(ok, "configuring llama.cpp for CUDA failed:\n{log}");
        assert!(
            log.contains("The CUDA compiler identification is NVIDIA 13.5"),
            "{log}"
        );
        assert!(
            log.contains("audiocpp fusion: ggml-cuda runs layer norms and matrix-vector products"),
            "{log}"
        );
        let configured = started.elapsed();

        let (ours, patched) = objects(&build);
        let mut sources: Vec<PathBuf> = ours.iter().map(|(_, s)| s.clone()).collect();
        sources.sort();
        let mut on_disk: Vec<PathBuf> = std::fs::read_dir(root().join("ggml_fusion"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "cu"))
            .collect();
        on_disk.sort();
        assert_eq!(
            sources, on_disk,
            "every .cu of ggml_fusion/ is an object of ggml-cuda"
        );

        // One ninja run for all four (in parallel); the status line before each edge's
        // output names its object, however the edges interleave.
        let (ok, log) = run(Command::new("ninja")
            .arg("-C")
            .arg(&build)
            .args(ours.iter().map(|(t, _)| t))
            .arg(&patched)
            .env("NINJA_STATUS", "[%f/%t] "));
        assert!(
            ok,
            "nvcc failed on ggml_fusion/ or the patched ggml-cuda.cu:\n{log}"
        );
        for target in ours.iter().map(|(t, _)| t).chain([&patched]) {
            let object = build.join(target);
            let size = std::fs::metadata(&object).map(|m| m.len()).unwrap_or(0);
            assert!(size > 0, "{} was not built:\n{log}", object.display());
        }
        let built = started.elapsed();

        let reports = spills(&log);
        for (target, source) in &ours {
            let kernels = std::fs::read_to_string(source)
                .unwrap()
                .contains("__global__");
            let reported = reports.iter().any(|(o, ..)| o == target);
            assert_eq!(
                reported,
                kernels,
                "ptxas -v reported {}on {} ({}), which {}:\n{log}",
                if reported { "" } else { "nothing " },
                target,
                source.display(),
                if kernels {
                    "has kernels"
                } else {
                    "has no kernel"
                }
            );
        }
        let spilled: Vec<String> = reports
            .iter()
            .filter(|(o, _, stores, loads)| {
                ours.iter().any(|(t, _)| t == o) && (*stores > 0 || *loads > 0)
            })
            .map(|(o, f, stores, loads)| {
                format!("{f} in {o}: {stores} bytes spill stores, {loads} bytes spill loads")
            })
            .collect();
        assert!(
            spilled.is_empty(),
            "kernels of ggml_fusion/ spill registers on sm_{ARCH}:\n{}",
            spilled.join("\n")
        );
        eprintln!(
            "nvcc: toolkit ready in {:.1} s, configured in {:.1} s, {} objects built in {:.1} s; \
             ptxas reported {} functions of ggml_fusion/, none spilling",
            fetched.as_secs_f64(),
            (configured - fetched).as_secs_f64(),
            ours.len() + 1,
            (built - configured).as_secs_f64(),
            reports
                .iter()
                .filter(|(o, ..)| ours.iter().any(|(t, _)| t == o))
                .count()
        );
    }
}
