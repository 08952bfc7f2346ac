//! The audiocpp-rs toolchain as a library, so the binary, integration tests, benches and
//! the fuzz targets share one implementation. `main.rs` is only the dispatcher.

pub mod assets;
pub mod bench;
pub mod flags;
pub mod kernels;
pub mod project;
pub mod test;
pub mod tracks;
pub mod verify_deps;
