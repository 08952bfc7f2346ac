//! Cross builds for `x86_64-pc-windows-gnu` (MinGW-w64): the binding links only its
//! llama archive, but MinGW's CMake names ggml's archives `ggml.a`, `ggml-cpu.a`,
//! `ggml-base.a` (no `lib` prefix), which rustc's `-l` cannot find. Link them by their
//! verbatim file names from the binding's install folder, plus the C++ runtime.

fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    let dynamic = std::env::var_os("CARGO_FEATURE_DYNAMIC_BACKENDS").is_some();
    if !target.ends_with("windows-gnu") || dynamic {
        return;
    }
    let Ok(cmake_dir) = std::env::var("DEP_LLAMA_GGML_CMAKE_DIR") else {
        println!("cargo:warning=DEP_LLAMA_GGML_CMAKE_DIR is not set; ggml archives may not link");
        return;
    };
    // The cmake dir is `<out>/lib/cmake` (or `<out>/lib/cmake/ggml`): the archives sit in
    // the nearest ancestor that holds `ggml-base.a`.
    let Some(lib_dir) = std::path::Path::new(&cmake_dir)
        .ancestors()
        .find(|d| d.join("ggml-base.a").is_file())
    else {
        println!("cargo:warning=no ggml-base.a above {cmake_dir}; ggml archives may not link");
        return;
    };
    println!("cargo:rustc-link-search=native={}", lib_dir.display());
    for archive in ["ggml.a", "ggml-cpu.a", "ggml-base.a"] {
        if lib_dir.join(archive).is_file() {
            println!("cargo:rustc-link-lib=static:+verbatim={archive}");
        }
    }
    println!("cargo:rustc-link-lib=dylib=stdc++");
    println!("cargo:rustc-link-lib=dylib=advapi32");
}
