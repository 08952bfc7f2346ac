//! Paths every verb anchors on: the workspace root, the target dir and the asset cache.

use std::path::{Path, PathBuf};

/// The workspace root (the folder holding the top-level Cargo.toml).
pub fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// The cargo target dir (honours CARGO_TARGET_DIR).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => project_root().join("target"),
    }
}

/// `packaging/`: tracks, allowlists and templates (data, not code).
pub fn packaging_dir() -> PathBuf {
    project_root().join("packaging")
}
