//! [`execute`]: runs a [`BuildPlan`] on this machine, checks that it produced what it
//! promised, and records what was built (`build-record.json` in the plan's target folder:
//! toolset, SDK, environment, commands and outputs).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::facts::host_os;
use super::plan::BuildPlan;
use crate::tracks::Glob;

/// What `build-record.json` holds.
#[derive(Debug, Serialize)]
pub struct BuildRecord<'a> {
    /// The plan that ran.
    pub plan: &'a BuildPlan,
    /// The files it produced (executables, then libraries).
    pub outputs: Vec<String>,
}

/// Runs the plan; returns the executables, then (dynamic backends) ggml's shared
/// libraries and backend plugins.
pub fn execute(plan: &BuildPlan) -> Result<Vec<PathBuf>> {
    if plan.os != host_os() {
        bail!(
            "this plan is for a {:?} build machine and this one is {:?}: print it with --dry-run, run it there",
            plan.os,
            host_os()
        );
    }
    for f in &plan.files {
        let path = Path::new(&f.path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(path, &f.contents).with_context(|| format!("writing {}", path.display()))?;
    }
    for c in &plan.commands {
        eprintln!("build: {}", c.display());
        let program = if c.program == "cargo" {
            std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
        } else {
            c.program.clone()
        };
        let status = Command::new(&program)
            .args(&c.args)
            .current_dir(&c.cwd)
            .envs(plan.env.iter().map(|e| (&e.name, &e.value)))
            .status()
            .with_context(|| format!("starting {}", c.display()))?;
        if !status.success() {
            bail!("{} failed ({status}) building {}", c.display(), plan.label);
        }
    }
    let mut outputs: Vec<PathBuf> = Vec::new();
    let missing: Vec<&String> = plan
        .executables
        .iter()
        .filter(|e| !Path::new(e).is_file())
        .collect();
    if !missing.is_empty() {
        bail!(
            "the build of {} succeeded but did not produce {}",
            plan.label,
            missing
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    outputs.extend(plan.executables.iter().map(PathBuf::from));
    let mut libs = Vec::new();
    for g in &plan.library_globs {
        libs.extend(expand(Path::new(g))?);
    }
    libs.sort();
    libs.dedup();
    if !plan.library_globs.is_empty() && libs.is_empty() {
        bail!(
            "dynamic-backends build of {} produced no ggml libraries ({})",
            plan.label,
            plan.library_globs.join(", ")
        );
    }
    outputs.extend(libs);
    let record = BuildRecord {
        plan,
        outputs: outputs.iter().map(|p| p.display().to_string()).collect(),
    };
    let record_path = Path::new(&plan.target_dir).join("build-record.json");
    std::fs::write(&record_path, serde_json::to_string_pretty(&record)?)
        .with_context(|| format!("writing {}", record_path.display()))?;
    Ok(outputs)
}

/// Expands `*`/`?` in any component of a path (file names matched case-insensitively).
pub fn expand(pattern: &Path) -> Result<Vec<PathBuf>> {
    let mut current: Vec<PathBuf> = vec![PathBuf::new()];
    for comp in pattern.components() {
        let text = comp.as_os_str().to_string_lossy();
        let mut next = Vec::new();
        if text.contains(['*', '?']) {
            let glob = Glob::new(&text)?;
            for base in &current {
                let mut hits: Vec<PathBuf> = std::fs::read_dir(base)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter(|e| glob.matches(&e.file_name().to_string_lossy()))
                    .map(|e| e.path())
                    .collect();
                hits.sort();
                next.extend(hits);
            }
        } else {
            next = current.iter().map(|b| b.join(comp.as_os_str())).collect();
        }
        current = next;
    }
    Ok(current.into_iter().filter(|p| p.is_file()).collect())
}
