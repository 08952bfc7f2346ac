//! The cross-build recipe: a GPU backend of ggml built as a Windows DLL on Linux, by
//! xtask's own CMake run in a Debian chroot, for executables cross-built in the same chroot
//! that load it as a dynamic backend. A track names its recipe in `build.cross`; today one
//! recipe exists, the Windows x64 HIP package's (issue 14 item 2): `ggml-hip.dll` from
//! clang-22 for a MinGW host (`packaging/sdk/debian.toml` suite `winhip`), against a
//! private "Windows ROCm root" and import libraries made from AMD's real `amdhip64_7.dll`
//! and from hipBLASLt's export list. Its end-to-end test is [`crate::wine_hip_test`].
//!
//! The recipe is data (`packaging/windows-hip/cross.toml`, named by a track's
//! `build.cross`). Deciding and doing are apart: [`plan`] is pure (recipe and targets in,
//! the preparation steps and CMake commands out) and is called by `build`'s planner, the
//! only place that decides how a track is built; [`prepare`] and the build executor carry
//! the plan out inside the chroot; [`runtime::fetch`] gets the pinned runtime on the host.
//! The chroot's folder keeps its name (`/opt/winhip`): builds already cached there stay valid.

pub mod implib;
pub mod root;
pub mod runtime;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::build::PlannedCommand;
use crate::project::packaging_dir;
use crate::tracks::{parse_data_file, read_data_file};

/// Where everything the cross-build makes lives inside the chroot.
pub const WINHIP_DIR: &str = "/opt/winhip";

/// `packaging/windows-hip/cross.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CrossSpec {
    /// The suite of `packaging/sdk/debian.toml` whose chroot builds it.
    pub chroot: String,
    /// The fake ROCm root recipe, relative to this file's folder.
    pub root: String,
    /// The CMake toolchain file, relative to this file's folder.
    pub toolchain: String,
    /// The folder of Windows-host package configs, relative to this file's folder.
    pub cmake_configs: String,
    /// The pinned Windows HIP runtime.
    pub runtime: runtime::RuntimePin,
    /// Import libraries made at build time.
    pub implib: Vec<implib::ImplibSpec>,
    /// ggml's CMake build.
    pub cmake: CmakeSpec,
}

/// The `[cmake]` table: what of ggml's CMake project is built.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CmakeSpec {
    /// The CMake target (`ggml-hip`).
    pub target: String,
    /// Its file, relative to the build folder (`bin/ggml-hip.dll`).
    pub output: String,
    /// `NAME=VALUE` cache entries the recipe sets (the planner adds its own rules).
    pub defines: Vec<String>,
}

/// A loaded recipe with what it refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrossInputs {
    /// The recipe file.
    pub path: PathBuf,
    /// Its contents.
    pub spec: CrossSpec,
    /// The fake root recipe.
    pub root: root::RootSpec,
    /// The pinned llama.cpp tree of the binding (`<registry>/llama-cpp-sys-2-V/llama.cpp`).
    pub llama_src: PathBuf,
}

impl CrossInputs {
    /// Reads the recipe `rel` (relative to packaging/) and its fake-root recipe, and finds
    /// the binding's llama.cpp source in cargo's registry.
    pub fn load(rel: &str) -> Result<CrossInputs> {
        let path = packaging_dir().join(rel);
        let spec: CrossSpec = parse_data_file(&read_data_file(&path)?, &path)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let root_path = dir.join(&spec.root);
        let root: root::RootSpec = parse_data_file(&read_data_file(&root_path)?, &root_path)?;
        Ok(CrossInputs {
            llama_src: binding_source()?,
            path,
            spec,
            root,
        })
    }

    /// The folder holding the recipe (the toolchain and configs are relative to it).
    pub fn dir(&self) -> PathBuf {
        self.path.parent().unwrap_or(Path::new(".")).to_path_buf()
    }
}

/// The llama.cpp tree of the llama-cpp-sys-2 version Cargo.lock pins, in cargo's registry
/// sources (cargo unpacks it there for any build of the workspace).
pub fn binding_source() -> Result<PathBuf> {
    let lock = crate::project::project_root().join("Cargo.lock");
    let text =
        std::fs::read_to_string(&lock).with_context(|| format!("reading {}", lock.display()))?;
    let version = locked_version(&text, crate::build::plan::BINDING)
        .with_context(|| format!("{} pins no {}", lock.display(), crate::build::plan::BINDING))?;
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .context("neither CARGO_HOME nor HOME is set")?;
    let src = cargo_home.join("registry").join("src");
    let name = format!("{}-{version}", crate::build::plan::BINDING);
    let mut found: Vec<PathBuf> = std::fs::read_dir(&src)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join(&name).join("llama.cpp"))
        .filter(|p| p.join("CMakeLists.txt").is_file())
        .collect();
    found.sort();
    found.into_iter().next().with_context(|| {
        format!(
            "{name} is not unpacked under {}: run `cargo fetch` first",
            src.display()
        )
    })
}

/// The version of `package` in a Cargo.lock.
pub fn locked_version(lock: &str, package: &str) -> Option<String> {
    let mut lines = lock.lines();
    while let Some(l) = lines.next() {
        if l.trim() == format!("name = \"{package}\"") {
            let v = lines.next()?.trim();
            return v
                .strip_prefix("version = \"")
                .and_then(|v| v.strip_suffix('"'))
                .map(str::to_string);
        }
    }
    None
}

/// What the build executor does before the plan's commands (inside the chroot).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrossPrep {
    /// The recipe file (its folder holds the toolchain and configs).
    pub recipe: String,
    /// Host folder with the pinned runtime DLLs (`<target>/winhip/runtime/bin`).
    pub runtime_bin: String,
    /// The CMake build folder.
    pub build_dir: String,
    /// The file the CMake build makes.
    pub output: String,
}

/// The cross part of a build plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrossPlan {
    /// Preparation.
    pub prep: CrossPrep,
    /// CMake configure and build, before cargo.
    pub commands: Vec<PlannedCommand>,
    /// Decisions worth printing.
    pub notes: Vec<String>,
}

/// The runtime root `dist` takes the runtime files from: `winhip/runtime` in the target
/// folder the chroot's builds use (`<target>/chroot-<suite>`, [`crate::sdk::chroot_env`]),
/// the same path whether `target_root` is the host's target folder or already that one.
pub fn runtime_root(target_root: &str, suite: &str) -> String {
    let t = target_root.trim_end_matches('/');
    let chroot_target = format!("chroot-{suite}");
    if t.rsplit('/').next() == Some(chroot_target.as_str()) {
        format!("{t}/winhip/runtime")
    } else {
        format!("{t}/{chroot_target}/winhip/runtime")
    }
}

/// Plans the CMake part. Pure: the recipe, the GPU targets, the workspace and target
/// roots in; the folder names, the cache entries (each rule with its reason in `notes`)
/// and the commands out. The build folder is named by the targets, so a second run with
/// the same targets reuses what the first one compiled (ninja rebuilds only what changed).
pub fn plan(
    inputs: &CrossInputs,
    gpu_targets: &[String],
    workspace: &str,
    target_root: &str,
    jobs: Option<u32>,
) -> Result<CrossPlan> {
    if gpu_targets.is_empty() {
        bail!(
            "{}: the track has no gpu_targets to compile ggml-hip for",
            inputs.path.display()
        );
    }
    let build_dir = format!(
        "{WINHIP_DIR}/build/{}-{}",
        inputs.spec.cmake.target,
        gpu_targets.join("-")
    );
    let rules: [(&str, String, &str); 8] = [
        ("GPU_TARGETS", gpu_targets.join(";"), "the track's GPU targets: hip::device (packaging/windows-hip/cmake/hip) turns them into --offload-arch"),
        ("GGML_HIP_NO_VMM", "ON".into(), "no HIP virtual memory management: it fails on Windows drivers and on many consumer GPUs"),
        ("GGML_HIP_GRAPHS", "OFF".into(), "HIP graphs off (distribution default; immature on consumer drivers)"),
        ("GGML_CUDA_GRAPHS", "OFF".into(), "the shared CUDA/HIP code keeps graphs off"),
        ("GGML_OPENMP", "OFF".into(), "no OpenMP runtime to ship"),
        ("GGML_NATIVE", "OFF".into(), "portable code: nothing from the build machine's CPU"),
        ("CMAKE_PROJECT_INCLUDE", format!("{}/packaging/llama.cpp/hooks.cmake", workspace.trim_end_matches('/')), "what the binding's builds get from .cargo/config.toml: our fused layer norm in ggml-hip (ggml_fusion/README.md) and an empty libllama"),
        ("CMAKE_PROJECT_ggml_INCLUDE", format!("{}/gemm/cmake/ggml_hook.cmake", workspace.trim_end_matches('/')), "the hipBLASLt GEMM route (gemm/README.md): ggml-hip's BLAS products go to our library over hipBLASLt, so ggml-hip imports libhipblaslt.dll, not hipBLAS/rocBLAS"),
    ];
    let mut args: Vec<String> = vec![
        "-S".into(),
        inputs.llama_src.display().to_string(),
        "-B".into(),
        build_dir.clone(),
        "-G".into(),
        "Ninja".into(),
        format!("-DCMAKE_TOOLCHAIN_FILE={WINHIP_DIR}/toolchain.cmake"),
        "-DCMAKE_BUILD_TYPE=Release".into(),
    ];
    args.extend(inputs.spec.cmake.defines.iter().map(|d| format!("-D{d}")));
    let mut notes = vec![format!(
        "ggml-hip.dll is built by xtask's CMake run in the {} chroot ({}), not by the binding: ggml's WIN32 CMake takes the \"CXX is hipcc\" path and the toolchain file gives it clang-22 for x86_64-w64-windows-gnu",
        inputs.spec.chroot,
        inputs.path.display()
    )];
    for (name, value, why) in &rules {
        args.push(format!("-D{name}={value}"));
        notes.push(format!("cmake -D{name}={value}: {why}"));
    }
    let mut build_args = vec![
        "--build".into(),
        build_dir.clone(),
        "--target".into(),
        inputs.spec.cmake.target.clone(),
    ];
    if let Some(j) = jobs {
        build_args.extend(["--parallel".into(), j.to_string()]);
    }
    let commands = vec![
        PlannedCommand {
            program: "cmake".into(),
            args,
            cwd: workspace.to_string(),
            why: "configures ggml (the pinned llama.cpp tree) for a Windows host with HIP".into(),
            skip_if_exists: None,
        },
        PlannedCommand {
            program: "cmake".into(),
            args: build_args,
            cwd: workspace.to_string(),
            why: format!(
                "compiles ggml's HIP backend as {} (about 35 min per GPU target on 2 cores the first time; cached in {build_dir})",
                inputs.spec.cmake.output
            ),
            skip_if_exists: None,
        },
    ];
    Ok(CrossPlan {
        prep: CrossPrep {
            recipe: inputs.path.display().to_string(),
            runtime_bin: format!("{}/bin", runtime_root(target_root, &inputs.spec.chroot)),
            output: format!("{build_dir}/{}", inputs.spec.cmake.output),
            build_dir,
        },
        commands,
        notes,
    })
}

/// Carries out a [`CrossPrep`] inside the chroot: the fake ROCm root, the toolchain file and
/// package configs under [`WINHIP_DIR`], and the import libraries. Every file is written
/// only when its contents change, so ninja sees no new timestamps on a second run.
pub fn prepare(prep: &CrossPrep) -> Result<()> {
    if std::env::var_os("AUDIOCPP_CHROOT").is_none() {
        bail!("the Windows HIP cross-build runs inside its chroot; `cargo xtask dist --track <it>` enters it by itself");
    }
    let recipe = Path::new(&prep.recipe);
    let spec: CrossSpec = parse_data_file(&read_data_file(recipe)?, recipe)?;
    let dir = recipe.parent().unwrap_or(Path::new("."));
    let root_path = dir.join(&spec.root);
    let root_spec: root::RootSpec = parse_data_file(&read_data_file(&root_path)?, &root_path)?;
    eprintln!("winhip: the Windows ROCm root {}", root_spec.root);
    root::apply(&root_spec, Path::new("/"))?;
    let winhip = Path::new(WINHIP_DIR);
    root::write_if_changed(
        &winhip.join("toolchain.cmake"),
        &std::fs::read(dir.join(&spec.toolchain))?,
    )?;
    root::copy_tree(&dir.join(&spec.cmake_configs), &winhip.join("cmake"))?;
    eprintln!("winhip: import libraries in {WINHIP_DIR}/implibs");
    implib::make_all(
        &spec.implib,
        Path::new(&prep.runtime_bin),
        &winhip.join("implibs"),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_locked_version_is_read_from_the_package_entry() {
        let lock = "[[package]]\nname = \"a\"\nversion = \"1.0.0\"\n\n[[package]]\nname = \"llama-cpp-sys-2\"\nversion = \"0.1.161\"\nsource = \"x\"\n";
        assert_eq!(
            locked_version(lock, "llama-cpp-sys-2").as_deref(),
            Some("0.1.161")
        );
        assert_eq!(locked_version(lock, "b"), None);
    }

    #[test]
    fn the_recipe_in_packaging_parses_and_plans_a_cached_build_per_target_list() {
        let path = packaging_dir().join("windows-hip/cross.toml");
        let spec: CrossSpec = parse_data_file(&read_data_file(&path).unwrap(), &path).unwrap();
        let root_path = path.parent().unwrap().join(&spec.root);
        let root: root::RootSpec =
            parse_data_file(&read_data_file(&root_path).unwrap(), &root_path).unwrap();
        let inputs = CrossInputs {
            path,
            spec,
            root,
            llama_src: PathBuf::from("/reg/llama-cpp-sys-2-0.1.161/llama.cpp"),
        };
        let p = plan(&inputs, &["gfx1100".into()], "/ws", "/ws/target", Some(2)).unwrap();
        assert_eq!(p.prep.build_dir, "/opt/winhip/build/ggml-hip-gfx1100");
        assert_eq!(
            p.prep.output,
            "/opt/winhip/build/ggml-hip-gfx1100/bin/ggml-hip.dll"
        );
        assert_eq!(
            p.prep.runtime_bin,
            "/ws/target/chroot-winhip/winhip/runtime/bin"
        );
        assert_eq!(
            runtime_root("/ws/target/chroot-winhip", "winhip"),
            "/ws/target/chroot-winhip/winhip/runtime"
        );
        let configure = &p.commands[0].args;
        for want in [
            "-DGPU_TARGETS=gfx1100",
            "-DGGML_HIP_NO_VMM=ON",
            "-DGGML_HIP_GRAPHS=OFF",
            "-DGGML_OPENMP=OFF",
            "-DCMAKE_PROJECT_ggml_INCLUDE=/ws/gemm/cmake/ggml_hook.cmake",
            "-DCMAKE_PROJECT_INCLUDE=/ws/packaging/llama.cpp/hooks.cmake",
            "-DCMAKE_TOOLCHAIN_FILE=/opt/winhip/toolchain.cmake",
            "-DGGML_BACKEND_DL=ON",
        ] {
            assert!(
                configure.iter().any(|a| a == want),
                "{want} missing from {configure:?}"
            );
        }
        assert_eq!(
            p.commands[1].args,
            [
                "--build",
                "/opt/winhip/build/ggml-hip-gfx1100",
                "--target",
                "ggml-hip",
                "--parallel",
                "2"
            ]
        );
        let two = plan(
            &inputs,
            &["gfx1100".into(), "gfx1101".into()],
            "/ws",
            "/ws/target",
            None,
        )
        .unwrap();
        assert_eq!(
            two.prep.build_dir,
            "/opt/winhip/build/ggml-hip-gfx1100-gfx1101"
        );
        assert!(plan(&inputs, &[], "/ws", "/ws/target", None).is_err());
    }
}
