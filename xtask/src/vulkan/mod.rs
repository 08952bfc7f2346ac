//! ggml's Vulkan backend as a plugin beside the executables (issue 39): `libggml-vulkan.so`
//! for Linux and a MinGW-built `ggml-vulkan.dll` for Windows, compiled by xtask's own CMake
//! run on the binding's pinned llama.cpp tree against pinned Vulkan headers, loader and
//! glslc (`packaging/vulkan/ggml-vulkan.toml`), and cached outside the clone.
//!
//! Why apart from the binding: its `vulkan` feature would link the Vulkan loader into the
//! executables and rebuild all of ggml with it; as a plugin the executables are the CPU
//! track's own (one build serves `linux-cpu` and `linux-vulkan`), and a machine without a
//! Vulkan driver still starts and runs on the CPU (docs/architecture.md section 3).
//!
//! Deciding and doing are apart: [`plan`] is pure (recipe, target, cache root in; the cache
//! folder, the CMake commands and what [`prepare`] must lay out first); [`prepare`] fetches
//! and extracts the pinned packages, writes the glslc launcher and the toolchain files, and
//! makes the Windows import library. The cache key covers every input that decides the
//! library: the recipe file, the binding's version, the target and the generated toolchain
//! files; a second build with the same key finds the library and runs no CMake at all.

pub mod lavapipe;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::build::PlannedCommand;
use crate::cross_backend::root::write_if_changed;
use crate::project::packaging_dir;
use crate::tracks::{parse_data_file, read_data_file};

/// `packaging/vulkan/ggml-vulkan.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct VulkanSpec {
    /// The pinned Debian packages extracted into the cache.
    pub deb: Vec<DebPin>,
    /// Where the build's inputs are in the extracted tree.
    pub layout: Layout,
    /// The Windows import library of the loader.
    pub windows: WindowsSpec,
    /// ggml's CMake build.
    pub cmake: CmakeSpec,
}

/// One `[[deb]]`: a package by version, path below the mirror and SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DebPin {
    /// Binary package name.
    pub package: String,
    /// Exact version.
    pub version: String,
    /// Path below the mirror (`pool/main/s/shaderc/glslc_2026.4-1_amd64.deb`).
    pub pool_path: String,
    /// SHA-256 of the `.deb` (from the suite's Packages index).
    pub sha256: String,
}

impl DebPin {
    /// The `.deb` file name.
    pub fn file_name(&self) -> &str {
        self.pool_path.rsplit('/').next().unwrap_or(&self.pool_path)
    }
}

/// The `[layout]` table: paths relative to the extracted tree.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Layout {
    /// The folder with `vulkan/`, `vk_video/` and `spirv/` (and nothing else).
    pub include: String,
    /// The Vulkan loader the Linux build links against.
    pub loader: String,
    /// SPIRV-Headers' CMake package folder.
    pub spirv_headers_config: String,
    /// glslc.
    pub glslc: String,
    /// The dynamic loader glslc is started with.
    pub dynamic_loader: String,
    /// The libraries glslc runs on.
    pub library_path: String,
}

/// The `[windows]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WindowsSpec {
    /// The loader DLL the import library names (`vulkan-1.dll`).
    pub dll: String,
    /// The exported functions listed in it: the loader's names with this prefix.
    pub export_prefix: String,
}

/// The `[cmake]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CmakeSpec {
    /// The CMake target (`ggml-vulkan`).
    pub target: String,
    /// `NAME=VALUE` cache entries of the recipe (the planner adds its own rules).
    pub defines: Vec<String>,
}

/// A loaded recipe with what it refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VulkanInputs {
    /// The recipe file.
    pub path: PathBuf,
    /// Its text (part of the cache key).
    pub text: String,
    /// Its contents.
    pub spec: VulkanSpec,
    /// The pinned llama.cpp tree of the binding.
    pub llama_src: PathBuf,
    /// The binding's version from Cargo.lock (part of the cache key).
    pub binding_version: String,
}

impl VulkanInputs {
    /// Reads the recipe `rel` (relative to packaging/) and finds the binding's llama.cpp
    /// source in cargo's registry.
    pub fn load(rel: &str) -> Result<VulkanInputs> {
        let path = packaging_dir().join(rel);
        let text = read_data_file(&path)?;
        let spec: VulkanSpec = parse_data_file(&text, &path)?;
        let lock = crate::project::project_root().join("Cargo.lock");
        let lock_text = std::fs::read_to_string(&lock)
            .with_context(|| format!("reading {}", lock.display()))?;
        let binding_version =
            crate::cross_backend::locked_version(&lock_text, crate::build::plan::BINDING)
                .with_context(|| {
                    format!("{} pins no {}", lock.display(), crate::build::plan::BINDING)
                })?;
        Ok(VulkanInputs {
            llama_src: crate::cross_backend::binding_source()?,
            binding_version,
            path,
            text,
            spec,
        })
    }
}

/// The cache root: `$XDG_CACHE_HOME/audiocpp-rs`, else `~/.cache/audiocpp-rs` (outside any
/// clone, so a fresh clone of the same sources finds what an earlier one built).
pub fn cache_root() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("audiocpp-rs")
}

/// What [`prepare`] lays out before the commands run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VulkanPrep {
    /// The recipe file.
    pub recipe: String,
    /// The cache folder of this configuration (`<cache>/ggml-vulkan/<triple>-<key>`).
    pub dir: String,
    /// Where the pinned packages are downloaded (shared by every configuration).
    pub debs_dir: String,
    /// The extracted tree (`<dir>/sysroot`).
    pub sysroot: String,
    /// The glslc launcher written into `dir`.
    pub glslc: String,
    /// Files written into `dir` (toolchain files), with their contents.
    pub files: Vec<(String, String)>,
    /// The import library to make (Windows): the DLL, then the library's path.
    pub implib: Option<(String, String)>,
    /// The finished library; when it exists the commands are skipped (a cache hit).
    pub output: String,
}

/// The Vulkan part of a build plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VulkanPlan {
    /// Preparation.
    pub prep: VulkanPrep,
    /// CMake configure and build, then the copy into the cache's `out/`.
    pub commands: Vec<PlannedCommand>,
    /// Decisions worth printing.
    pub notes: Vec<String>,
}

/// Stands for the cache folder in what the key hashes (the folder's name holds the key).
const DIR_TOKEN: &str = "@CACHE_DIR@";

/// The cache key of a configuration: the recipe's text, the binding's version, the target,
/// the planner's CMake cache entries (`rules`, with the cache folder as [`DIR_TOKEN`]) and
/// every generated file (toolchain files), hashed; 16 hex digits.
pub fn cache_key(
    inputs: &VulkanInputs,
    triple: &str,
    rules: &[String],
    files: &[(String, String)],
) -> String {
    let mut h = Sha256::new();
    for part in [
        "ggml-vulkan recipe 1",
        inputs.text.as_str(),
        inputs.binding_version.as_str(),
        triple,
    ]
    .into_iter()
    .chain(rules.iter().map(String::as_str))
    {
        h.update(part.as_bytes());
        h.update(b"\n");
    }
    for (name, contents) in files {
        // The file's name within the folder, not its absolute path: the key is the same on
        // every machine.
        let base = name.rsplit('/').next().unwrap_or(name);
        h.update(base.as_bytes());
        h.update(b"\n");
        h.update(contents.as_bytes());
        h.update(b"\n");
    }
    let digest = h.finalize();
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The MinGW-w64 toolchain file of the Windows build (posix threads, as the Rust build's
/// compilers; Windows 7 API level, as the Rust build's flags).
pub fn mingw_toolchain(arch: &str) -> String {
    format!(
        "# Written by `cargo xtask build` (xtask/src/vulkan/mod.rs): MinGW-w64 with posix threads.\n\
         set(CMAKE_SYSTEM_NAME Windows)\n\
         set(CMAKE_SYSTEM_PROCESSOR {arch})\n\
         set(CMAKE_C_COMPILER {arch}-w64-mingw32-gcc-posix)\n\
         set(CMAKE_CXX_COMPILER {arch}-w64-mingw32-g++-posix)\n\
         set(CMAKE_RC_COMPILER {arch}-w64-mingw32-windres)\n\
         set(CMAKE_C_FLAGS_INIT \"-D_WIN32_WINNT=0x0601\")\n\
         set(CMAKE_CXX_FLAGS_INIT \"-D_WIN32_WINNT=0x0601\")\n\
         set(CMAKE_FIND_ROOT_PATH /usr/{arch}-w64-mingw32)\n\
         set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)\n\
         set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)\n\
         set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)\n\
         set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)\n"
    )
}

/// The host toolchain file of `vulkan-shaders-gen`, the build-time tool that runs glslc:
/// a cross-build must still compile it for the build machine.
pub const HOST_TOOLCHAIN: &str = "# Written by `cargo xtask build` (xtask/src/vulkan/mod.rs): vulkan-shaders-gen runs on the build machine.\n\
set(CMAKE_C_COMPILER gcc)\n\
set(CMAKE_CXX_COMPILER g++)\n\
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)\n\
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY NEVER)\n\
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE NEVER)\n";

/// The glslc launcher: sid's glslc on sid's own dynamic loader and libraries, from the
/// extracted tree (the build host's glibc is older than glslc needs).
pub fn glslc_launcher(sysroot: &str, layout: &Layout) -> String {
    format!(
        "#!/bin/sh\n# Written by `cargo xtask build` (xtask/src/vulkan/mod.rs): the pinned glslc on its own libraries.\nexec \"{s}/{ld}\" --library-path \"{s}/{lib}\" \"{s}/{glslc}\" \"$@\"\n",
        s = sysroot,
        ld = layout.dynamic_loader,
        lib = layout.library_path,
        glslc = layout.glslc
    )
}

/// Plans the Vulkan backend's build for `triple` (pure). Linux targets build with the host
/// compilers and link the pinned loader; `*-windows-gnu` targets cross-build with MinGW-w64
/// and link an import library of `vulkan-1.dll`.
pub fn plan(
    inputs: &VulkanInputs,
    triple: &str,
    cache_root: &str,
    workspace: &str,
    jobs: Option<u32>,
) -> Result<VulkanPlan> {
    let windows = triple.ends_with("-windows-gnu");
    if !windows && !triple.contains("-linux-") {
        bail!(
            "{}: ggml's Vulkan backend is built for Linux targets and, cross, for *-windows-gnu; {triple} is neither",
            inputs.path.display()
        );
    }
    let arch = triple.split('-').next().unwrap_or("x86_64");
    let root = cache_root.trim_end_matches('/');
    let mut files: Vec<(String, String)> = Vec::new();
    if windows {
        files.push(("mingw.cmake".into(), mingw_toolchain(arch)));
        files.push(("host.cmake".into(), HOST_TOOLCHAIN.to_string()));
    }
    let d = DIR_TOKEN;
    let sysroot = format!("{d}/sysroot");
    let layout = &inputs.spec.layout;
    let glslc = format!("{d}/glslc");
    let lib_name = if windows {
        "ggml-vulkan.dll"
    } else {
        "libggml-vulkan.so"
    };
    let implib = windows.then(|| {
        let dll = inputs.spec.windows.dll.clone();
        let lib = format!(
            "{d}/{}",
            crate::cross_backend::implib::implib_name(&inputs.spec.windows.dll)
        );
        (dll, lib)
    });
    let loader = match &implib {
        Some((_, lib)) => lib.clone(),
        None => format!("{sysroot}/{}", layout.loader),
    };

    let mut rules: Vec<(&str, String, &str)> = vec![
        ("GGML_NATIVE", "OFF".into(), "portable code: nothing from the build machine's CPU"),
        ("GGML_OPENMP", "OFF".into(), "no OpenMP runtime to ship"),
        ("Vulkan_INCLUDE_DIR", format!("{sysroot}/{}", layout.include), "the pinned Vulkan headers (1.4: VK_EXT_layer_settings and the cooperative-matrix structures ggml-vulkan.cpp uses)"),
        ("Vulkan_LIBRARY", loader, if windows { "an import library of vulkan-1.dll made from the pinned loader's exports; the DLL itself comes with the user's GPU driver" } else { "the pinned loader, linked against and never shipped: the user's GPU driver brings libvulkan.so.1" }),
        ("Vulkan_GLSLC_EXECUTABLE", glslc.clone(), "the pinned glslc (2026.4), which has every shader extension ggml tests for"),
        ("SPIRV-Headers_DIR", format!("{sysroot}/{}", layout.spirv_headers_config), "the pinned SPIR-V headers"),
    ];
    if windows {
        rules.push((
            "CMAKE_TOOLCHAIN_FILE",
            format!("{d}/mingw.cmake"),
            "MinGW-w64 with posix threads, as the executables are built",
        ));
        rules.push((
            "GGML_VULKAN_SHADERS_GEN_TOOLCHAIN",
            format!("{d}/host.cmake"),
            "vulkan-shaders-gen, which runs glslc at build time, is compiled for the build machine",
        ));
    } else {
        rules.push(("CMAKE_BUILD_WITH_INSTALL_RPATH", "ON".into(), "the library is shipped as built, so it gets the install run path, not one naming the build and cache folders"));
        rules.push(("CMAKE_INSTALL_RPATH", "$ORIGIN".into(), "the plugin finds ggml-base next to itself in the unpacked package, as the CPU variants do"));
    }
    let hashed: Vec<String> = rules
        .iter()
        .map(|(name, value, _)| format!("-D{name}={value}"))
        .collect();
    let key = cache_key(inputs, triple, &hashed, &files);
    let dir = format!("{root}/ggml-vulkan/{triple}-{key}");
    let at = |s: &str| s.replace(DIR_TOKEN, &dir);
    let files: Vec<(String, String)> = files
        .into_iter()
        .map(|(n, c)| (format!("{dir}/{n}"), c))
        .collect();
    let (sysroot, glslc) = (at(&sysroot), at(&glslc));
    let implib = implib.map(|(dll, lib)| (dll, at(&lib)));
    let build_dir = format!("{dir}/build");
    let built = format!("{build_dir}/bin/{lib_name}");
    let output = format!("{dir}/out/{lib_name}");
    let mut args: Vec<String> = vec![
        "-S".into(),
        inputs.llama_src.display().to_string(),
        "-B".into(),
        build_dir.clone(),
        "-G".into(),
        "Ninja".into(),
        "-DCMAKE_BUILD_TYPE=Release".into(),
    ];
    args.extend(inputs.spec.cmake.defines.iter().map(|d| format!("-D{d}")));
    let mut notes = vec![format!(
        "{} is built by xtask's own CMake run ({}) and cached in {dir}: the key hashes the recipe, {} {}, the target, the CMake rules below and the toolchain files; a later build with the same key runs no CMake",
        lib_name,
        inputs.path.display(),
        crate::build::plan::BINDING,
        inputs.binding_version
    )];
    for (name, value, why) in &rules {
        let value = at(value);
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
    let partial = format!("{output}.partial");
    let cached = Some(output.clone());
    let command = |args: Vec<String>, why: String| PlannedCommand {
        program: "cmake".into(),
        args,
        cwd: workspace.to_string(),
        why,
        skip_if_exists: cached.clone(),
    };
    let commands = vec![
        command(
            args,
            format!(
                "configures ggml (the pinned llama.cpp tree) with its Vulkan backend for {triple}"
            ),
        ),
        command(
            build_args,
            format!("compiles the shaders with glslc and ggml's Vulkan backend as {lib_name} (cold: 10 min or more on 2 cores)"),
        ),
        command(
            vec!["-E".into(), "copy".into(), built, partial.clone()],
            "copies the library into the cache's out/ folder".into(),
        ),
        command(
            vec!["-E".into(), "rename".into(), partial, output.clone()],
            "marks the cache entry finished (the library appears only whole)".into(),
        ),
    ];
    Ok(VulkanPlan {
        prep: VulkanPrep {
            recipe: inputs.path.display().to_string(),
            debs_dir: format!("{root}/debian-debs"),
            sysroot,
            glslc,
            files,
            implib,
            output,
            dir,
        },
        commands,
        notes,
    })
}

/// Lays out a [`VulkanPrep`]: the pinned packages downloaded (once, checked by SHA-256)
/// and extracted into the sysroot, the glslc launcher, the toolchain files and (Windows)
/// the import library. Every file is written only when its contents change. Nothing is
/// done on a cache hit (the library exists).
pub fn prepare(prep: &VulkanPrep) -> Result<()> {
    if Path::new(&prep.output).is_file() {
        eprintln!("vulkan: cached {}", prep.output);
        return Ok(());
    }
    let recipe = Path::new(&prep.recipe);
    let spec: VulkanSpec = parse_data_file(&read_data_file(recipe)?, recipe)?;
    let mirror = crate::sdk::host_mirror().context(
        "no Debian mirror in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list: the Vulkan build's pinned packages come from it",
    )?;
    let debs = Path::new(&prep.debs_dir);
    std::fs::create_dir_all(debs).with_context(|| format!("creating {}", debs.display()))?;
    let sysroot = Path::new(&prep.sysroot);
    let stamp = sysroot.join(".audiocpp-debs");
    let want_stamp: String = spec
        .deb
        .iter()
        .map(|d| format!("{} {}\n", d.file_name(), d.sha256))
        .collect();
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(want_stamp.as_str()) {
        let _ = std::fs::remove_dir_all(sysroot);
        std::fs::create_dir_all(sysroot)
            .with_context(|| format!("creating {}", sysroot.display()))?;
        for d in &spec.deb {
            let file = debs.join(d.file_name());
            let intact = file.is_file() && crate::assets::sha256_file(&file)? == d.sha256;
            if !intact {
                let url = format!("{}/{}", mirror.trim_end_matches('/'), d.pool_path);
                eprintln!("vulkan: downloading {} {}", d.package, d.version);
                crate::kernels::debian::download(&url, &file, &d.sha256, &prep.recipe)?;
            }
            let st = Command::new("dpkg-deb")
                .arg("-x")
                .arg(&file)
                .arg(sysroot)
                .status()
                .context("running dpkg-deb -x (Debian's dpkg)")?;
            if !st.success() {
                bail!("dpkg-deb -x {} failed ({st})", file.display());
            }
        }
        std::fs::write(&stamp, &want_stamp)?;
        eprintln!(
            "vulkan: {} pinned packages extracted into {}",
            spec.deb.len(),
            sysroot.display()
        );
    }
    let launcher = glslc_launcher(&prep.sysroot, &spec.layout);
    write_if_changed(Path::new(&prep.glslc), launcher.as_bytes())?;
    set_executable(Path::new(&prep.glslc))?;
    for (path, contents) in &prep.files {
        write_if_changed(Path::new(path), contents.as_bytes())?;
    }
    if let Some((dll, lib)) = &prep.implib {
        let loader = sysroot.join(&spec.layout.loader);
        let out = Command::new("nm")
            .args(["-D", "--defined-only"])
            .arg(&loader)
            .output()
            .with_context(|| format!("running nm -D {}", loader.display()))?;
        if !out.status.success() {
            bail!(
                "nm -D {} failed: {}",
                loader.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let def = crate::cross_backend::implib::def_from_nm(
            &String::from_utf8_lossy(&out.stdout),
            dll,
            &spec.windows.export_prefix,
        )?;
        let lib = Path::new(lib);
        let def_path = lib.with_extension("def");
        let changed = write_if_changed(&def_path, def.as_bytes())?;
        if changed || !lib.is_file() {
            let st = Command::new("x86_64-w64-mingw32-dlltool")
                .arg("-d")
                .arg(&def_path)
                .args(["-D", dll, "-l"])
                .arg(lib)
                .status()
                .context("running x86_64-w64-mingw32-dlltool")?;
            if !st.success() {
                bail!("dlltool for {dll} failed ({st})");
            }
        }
    }
    Ok(())
}

#[cfg(unix)]
fn set_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("making {} executable", path.display()))
}

#[cfg(not(unix))]
fn set_executable(_path: &Path) -> Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> VulkanInputs {
        let path = packaging_dir().join("vulkan/ggml-vulkan.toml");
        let text = read_data_file(&path).unwrap();
        let spec: VulkanSpec = parse_data_file(&text, &path).unwrap();
        VulkanInputs {
            path,
            text,
            spec,
            llama_src: PathBuf::from("/reg/llama-cpp-sys-2-0.1.161/llama.cpp"),
            binding_version: "0.1.161".into(),
        }
    }

    #[test]
    fn the_recipe_pins_every_package_by_version_and_hash() {
        let i = inputs();
        assert!(i.spec.deb.len() >= 5);
        for d in &i.spec.deb {
            assert_eq!(d.sha256.len(), 64, "{}", d.package);
            assert!(
                d.file_name().starts_with(&format!(
                    "{}_{}",
                    d.package,
                    d.version.replace(':', "%3a")
                )),
                "{} {} is not {}",
                d.package,
                d.version,
                d.pool_path
            );
        }
        for p in ["glslc", "libvulkan-dev", "spirv-headers", "libc6"] {
            assert!(
                i.spec.deb.iter().any(|d| d.package == p),
                "{p} is not pinned"
            );
        }
    }

    #[test]
    fn linux_and_windows_builds_are_cached_apart_and_skipped_when_done() {
        let i = inputs();
        let linux = plan(&i, "x86_64-unknown-linux-gnu", "/c", "/ws", Some(2)).unwrap();
        let win = plan(&i, "x86_64-pc-windows-gnu", "/c", "/ws", None).unwrap();
        assert!(linux
            .prep
            .dir
            .starts_with("/c/ggml-vulkan/x86_64-unknown-linux-gnu-"));
        assert_ne!(linux.prep.dir, win.prep.dir);
        assert!(linux.prep.output.ends_with("/out/libggml-vulkan.so"));
        assert!(win.prep.output.ends_with("/out/ggml-vulkan.dll"));
        // Same inputs, same key: the folder is the cache.
        let again = plan(&i, "x86_64-unknown-linux-gnu", "/c", "/elsewhere", None).unwrap();
        assert_eq!(again.prep.dir, linux.prep.dir);
        // Another recipe text, another key.
        let mut changed = i.clone();
        changed.text.push_str("\n# a comment\n");
        let other = plan(&changed, "x86_64-unknown-linux-gnu", "/c", "/ws", None).unwrap();
        assert_ne!(other.prep.dir, linux.prep.dir);
        let mut newer = i.clone();
        newer.binding_version = "0.1.162".into();
        assert_ne!(
            plan(&newer, "x86_64-unknown-linux-gnu", "/c", "/ws", None)
                .unwrap()
                .prep
                .dir,
            linux.prep.dir
        );
        for c in linux.commands.iter().chain(&win.commands) {
            assert!(c.skip_if_exists.is_some(), "{}", c.display());
        }
        let configure = &linux.commands[0].args;
        for want in [
            "-DGGML_VULKAN=ON",
            "-DGGML_BACKEND_DL=ON",
            "-DGGML_NATIVE=OFF",
            "-DLLAMA_BUILD_APP=OFF",
            "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
            "-DCMAKE_INSTALL_RPATH=$ORIGIN",
        ] {
            assert!(configure.iter().any(|a| a == want), "{want}: {configure:?}");
        }
        assert!(configure
            .iter()
            .any(|a| a.starts_with("-DVulkan_LIBRARY=") && a.ends_with("libvulkan.so.1")));
        let wconf = &win.commands[0].args;
        assert!(wconf
            .iter()
            .any(|a| a.starts_with("-DCMAKE_TOOLCHAIN_FILE=") && a.ends_with("/mingw.cmake")));
        assert!(wconf
            .iter()
            .any(|a| a.starts_with("-DVulkan_LIBRARY=") && a.ends_with("/libvulkan-1.dll.a")));
        assert!(!wconf.iter().any(|a| a.contains("RPATH")));
        assert_eq!(
            win.prep.implib.as_ref().map(|(d, _)| d.as_str()),
            Some("vulkan-1.dll")
        );
        assert_eq!(win.prep.files.len(), 2);
        assert_eq!(
            linux.commands[1].args,
            [
                "--build".to_string(),
                format!("{}/build", linux.prep.dir),
                "--target".into(),
                "ggml-vulkan".into(),
                "--parallel".into(),
                "2".into()
            ]
        );
        assert!(plan(&i, "x86_64-pc-windows-msvc", "/c", "/ws", None).is_err());
    }

    #[test]
    fn glslc_runs_on_the_pinned_loader_and_libraries() {
        let i = inputs();
        let l = glslc_launcher("/c/s", &i.spec.layout);
        assert!(l.starts_with("#!/bin/sh\n"));
        assert!(l.contains(
            "exec \"/c/s/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2\" --library-path \"/c/s/usr/lib/x86_64-linux-gnu\" \"/c/s/usr/bin/glslc\" \"$@\""
        ));
    }
}
