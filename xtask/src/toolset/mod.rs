//! Discovery of the toolchains a build needs: the MSVC toolset ([`msvc`]), ROCm/HIP SDKs
//! ([`rocm`]), the CUDA toolkit ([`cuda`]) and the generic tools ([`tools`]: cmake, ninja,
//! libclang, mingw, wine). Each module keeps parsing pure and I/O thin, so the parsing is
//! tested on recorded outputs on any host.

pub mod cuda;
pub mod msvc;
pub mod rocm;
pub mod tools;
