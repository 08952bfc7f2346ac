//! With dynamic ggml backends on Linux, the executable finds libggml*.so and the backend
//! plugins next to itself: give it an `$ORIGIN` run path so an unpacked package runs
//! from any working directory without LD_LIBRARY_PATH. A MinGW link stamps the
//! executable with SOURCE_DATE_EPOCH (the build plan fixes it), so a change of it relinks.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let dynamic = std::env::var_os("CARGO_FEATURE_DYNAMIC_BACKENDS").is_some();
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "windows" && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu") {
        println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    }
    if dynamic && os == "linux" {
        println!("cargo:rustc-link-arg-bins=-Wl,-rpath,$ORIGIN");
    }
}
