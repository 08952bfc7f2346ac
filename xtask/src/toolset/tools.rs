//! Generic tools a build or a cross test needs (cmake, ninja, libclang, objdump, mingw,
//! wine), found on PATH and asked for their version.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

/// A tool as found on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolFact {
    /// Where it is (`None`: not found).
    pub path: Option<String>,
    /// First line of its version output, when it printed one.
    pub version: Option<String>,
}

impl ToolFact {
    /// A tool that was not found.
    pub fn missing() -> ToolFact {
        ToolFact {
            path: None,
            version: None,
        }
    }

    /// Whether it was found.
    pub fn found(&self) -> bool {
        self.path.is_some()
    }
}

/// Runs a command with its output captured: one that cannot start fails naming `hint`
/// (how to install it), one that exits non-zero fails with its output.
pub fn run_captured(cmd: &mut Command, hint: &str) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {shown}: {hint}"))?;
    if !out.status.success() {
        anyhow::bail!(
            "{shown} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Runs a long command with its output on the terminal (printed as `shown` first);
/// a non-zero exit fails naming it.
pub fn run_streamed(cmd: &mut Command, shown: &str) -> anyhow::Result<()> {
    use anyhow::Context as _;
    eprintln!("{shown}");
    let status = cmd.status().with_context(|| format!("starting {shown}"))?;
    if !status.success() {
        anyhow::bail!("{shown} failed ({status})");
    }
    Ok(())
}

/// Finds `name` on PATH (with the Windows executable suffixes on Windows).
pub fn which(name: &str) -> Option<PathBuf> {
    which_also_in(name, &[])
}

/// [`which`], then the folders `extra` (`/usr/sbin` for root's tools when PATH lacks it).
pub fn which_also_in(name: &str, extra: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<PathBuf> = std::env::split_paths(&path)
        .chain(extra.iter().map(PathBuf::from))
        .collect();
    let exts: Vec<String> = if cfg!(windows) {
        vec![".exe".into(), ".cmd".into(), ".bat".into(), String::new()]
    } else {
        vec![String::new()]
    };
    dirs.iter().find_map(|dir| {
        exts.iter()
            .map(|e| dir.join(format!("{name}{e}")))
            .find(|p| p.is_file())
    })
}

/// Runs `tool args` and returns the first non-empty line of its output.
pub fn first_line(tool: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new(tool).args(args).output().ok()?;
    let text = if out.stdout.is_empty() {
        out.stderr
    } else {
        out.stdout
    };
    String::from_utf8_lossy(&text)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

/// A tool on PATH with its version line (`--version` unless `args` says otherwise).
pub fn probe(name: &str, args: &[&str]) -> ToolFact {
    match which(name) {
        Some(p) => ToolFact {
            version: first_line(&p, args),
            path: Some(p.display().to_string()),
        },
        None => ToolFact::missing(),
    }
}

/// A tool at a fixed path (Debian's `/usr/lib/wine/wine64` is not on PATH).
pub fn probe_at(path: &Path, args: &[&str]) -> ToolFact {
    if path.is_file() {
        ToolFact {
            version: first_line(path, args),
            path: Some(path.display().to_string()),
        }
    } else {
        ToolFact::missing()
    }
}

/// The folder holding libclang for bindgen: `LIBCLANG_PATH`, then `llvm-config --libdir`,
/// then the newest `/usr/lib/llvm-*/lib`.
pub fn libclang() -> ToolFact {
    let has_lib = |dir: &Path| {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                let n = e.file_name().to_string_lossy().to_ascii_lowercase();
                n == "libclang.dll" || n.starts_with("libclang.so") || n.starts_with("libclang-")
            })
    };
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("LIBCLANG_PATH").filter(|p| !p.is_empty()) {
        dirs.push(PathBuf::from(p));
    }
    if let Some(cfg) = which("llvm-config") {
        if let Some(dir) = first_line(&cfg, &["--libdir"]) {
            dirs.push(PathBuf::from(dir));
        }
    }
    let mut llvm = crate::toolset::rocm::children(Path::new("/usr/lib"), "llvm-");
    llvm.sort_by_key(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("llvm-"))
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0)
    });
    dirs.extend(llvm.into_iter().rev().map(|p| p.join("lib")));
    match dirs.into_iter().find(|d| has_lib(d)) {
        Some(d) => ToolFact {
            path: Some(d.display().to_string()),
            version: None,
        },
        None => ToolFact::missing(),
    }
}

/// What `rustup <what> list --installed` prints (`what`: `target` or `component`), one
/// name a line; empty when rustup cannot say.
pub fn rustup_installed(rustup: &Path, what: &str) -> Vec<String> {
    Command::new(rustup)
        .args([what, "list", "--installed"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(|l| l.trim().to_string())
                .filter(|l| !l.is_empty())
                .collect()
        })
        .unwrap_or_default()
}
