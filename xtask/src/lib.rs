//! The audiocpp-rs toolchain as a library, so the binary, integration tests, benches and
//! the fuzz targets share one implementation. `main.rs` is only the dispatcher.

pub mod actionlint;
pub mod assets;
pub mod bench;
pub mod build;
pub mod context;
pub mod cross_backend;
pub mod debugger_only;
pub mod dist;
pub mod doctor;
pub mod flags;
pub mod fresh_machine;
pub mod gpu_target;
pub mod hostile;
pub mod kernels;
pub mod pe_header;
pub mod project;
pub mod sdk;
pub mod setup;
pub mod test;
pub mod toolset;
pub mod tracks;
pub mod verify_deps;
pub mod verify_package;
pub mod vulkan;
pub mod wine;
pub mod wine_hip_test;
