//! What one run of `cargo xtask` reads once and hands to every verb: the tracks file
//! (`packaging/tracks.toml`, or the file the verb's `--tracks-file` names) and the needs
//! file (`packaging/needs.toml`). Each is read and checked on first use and kept for the
//! rest of the run, so a verb and the verbs it runs (`test` runs `dist`, `dist` runs the
//! set-up check, the benches build the host package) see one copy, read once.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::setup::NeedsFile;
use crate::tracks::{TracksError, TracksFile};

/// The data files of one run, loaded on first use.
#[derive(Debug)]
pub struct RunContext {
    tracks_path: PathBuf,
    tracks: OnceLock<TracksFile>,
    needs_path: PathBuf,
    needs: OnceLock<NeedsFile>,
}

impl Default for RunContext {
    fn default() -> Self {
        RunContext::new(None)
    }
}

impl RunContext {
    /// A run on `tracks_file` (a verb's `--tracks-file`), or on
    /// `packaging/tracks.toml` when `None`; the needs file is always
    /// `packaging/needs.toml`. Nothing is read yet.
    pub fn new(tracks_file: Option<&Path>) -> RunContext {
        RunContext {
            tracks_path: tracks_file
                .map(Path::to_path_buf)
                .unwrap_or_else(TracksFile::default_path),
            tracks: OnceLock::new(),
            needs_path: NeedsFile::default_path(),
            needs: OnceLock::new(),
        }
    }

    /// The tracks file this run reads (allowlists are looked up relative to its folder).
    pub fn tracks_path(&self) -> &Path {
        &self.tracks_path
    }

    /// The tracks, read and checked the first time they are asked for.
    pub fn tracks(&self) -> Result<&TracksFile, TracksError> {
        if let Some(t) = self.tracks.get() {
            return Ok(t);
        }
        let loaded = TracksFile::load(&self.tracks_path)?;
        Ok(self.tracks.get_or_init(|| loaded))
    }

    /// The needs, read and checked the first time they are asked for.
    pub fn needs(&self) -> Result<&NeedsFile, TracksError> {
        if let Some(n) = self.needs.get() {
            return Ok(n);
        }
        let loaded = NeedsFile::load(&self.needs_path)?;
        Ok(self.needs.get_or_init(|| loaded))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_file_is_read_once_and_a_bad_one_is_an_error_naming_it() {
        let ctx = RunContext::default();
        let a = ctx.tracks().unwrap() as *const TracksFile;
        let b = ctx.tracks().unwrap() as *const TracksFile;
        assert_eq!(a, b, "the second call hands back the first copy");
        assert!(ctx.needs().is_ok());
        assert_eq!(ctx.tracks_path(), TracksFile::default_path());
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("tracks.toml");
        std::fs::write(&bad, "schema = \"nonsense\"").unwrap();
        let ctx = RunContext::new(Some(&bad));
        let e = ctx.tracks().unwrap_err().to_string();
        assert!(e.contains(&bad.display().to_string()), "{e}");
    }

    #[test]
    fn a_verbs_tracks_file_is_the_one_the_run_reads() {
        use clap::Parser;
        let cli = crate::flags::Cli::parse_from(["xtask", "dist", "--tracks-file", "/x/t.toml"]);
        let ctx = RunContext::new(cli.command.tracks_file());
        assert_eq!(ctx.tracks_path(), Path::new("/x/t.toml"));
        let cli = crate::flags::Cli::parse_from(["xtask", "setup", "--dry-run"]);
        assert_eq!(cli.command.tracks_file(), None);
    }
}
