//! Paths shared by the server's integration tests.

use std::path::{Path, PathBuf};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The pinned test assets (`cargo xtask test` fetches them); fails loudly when
/// `required` (a path inside them) is missing.
pub fn assets(required: &str) -> PathBuf {
    let dir = std::env::var_os("AUDIOCPP_TEST_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/test-assets"));
    assert!(
        dir.join(required).is_file(),
        "test assets missing in {}: run `cargo xtask test`",
        dir.display()
    );
    dir
}
