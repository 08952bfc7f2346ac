//! [`execute`]: runs a [`BuildPlan`] on this machine, checks that it produced what it
//! promised, and records what was built (`build-record.json` in the plan's target folder:
//! toolset, SDK, environment, commands and outputs), which `dist` then packages.

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::facts::host_os;
use super::plan::{BuildPlan, BINDING};
use crate::tracks::Glob;

/// What `build-record.json` holds: the plan that ran and what it made. `dist` packages
/// exactly [`BuildRecord::outputs`], taken from [`Built`] in memory, not read back.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BuildRecord {
    /// The plan that ran.
    pub plan: BuildPlan,
    /// The OUT_DIR of the binding's build script, as cargo reported it (dynamic builds).
    #[serde(default)]
    pub binding_out_dir: Option<String>,
    /// The files it produced (executables, then libraries).
    pub outputs: Vec<String>,
}

/// A finished build: the record, handed to the caller in memory (`dist` packages its
/// outputs), and where the same record was written for people to read.
#[derive(Debug, Clone)]
pub struct Built {
    /// `build-record.json` in the plan's target folder.
    pub record_path: PathBuf,
    /// Its contents.
    pub record: BuildRecord,
}

impl Built {
    /// The produced files.
    pub fn outputs(&self) -> Vec<PathBuf> {
        self.record.outputs.iter().map(PathBuf::from).collect()
    }
}

/// Runs the plan; records the executables, then (dynamic backends) ggml's shared
/// libraries and backend plugins, in `build-record.json`.
pub fn execute(plan: &BuildPlan) -> Result<Built> {
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
    if !plan.library_globs.is_empty() {
        if let Some(profile) = plan.executables.first().and_then(|e| Path::new(e).parent()) {
            remove_dangling_links(profile)?;
        }
    }
    if let Some(prep) = &plan.cross {
        let t = Instant::now();
        crate::cross_backend::prepare(prep)
            .with_context(|| format!("preparing the cross-build of {}", plan.label))?;
        eprintln!(
            "build: step time {:.1} s: preparing the cross-build",
            t.elapsed().as_secs_f64()
        );
    }
    if let Some(prep) = &plan.vulkan {
        let t = Instant::now();
        crate::vulkan::prepare(prep)
            .with_context(|| format!("preparing the Vulkan backend's build for {}", plan.label))?;
        eprintln!(
            "build: step time {:.1} s: preparing the Vulkan backend's build",
            t.elapsed().as_secs_f64()
        );
    }
    let mut binding_out_dir: Option<String> = None;
    for c in &plan.commands {
        if let Some(done) = c
            .skip_if_exists
            .as_deref()
            .filter(|p| Path::new(p).is_file())
        {
            eprintln!("build: cached ({done}), skipped: {}", c.display());
            continue;
        }
        eprintln!("build: {}", c.display());
        let t = Instant::now();
        let is_cargo = c.program == "cargo";
        let program = if is_cargo {
            std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
        } else {
            c.program.clone()
        };
        let mut child = Command::new(&program)
            .args(&c.args)
            .current_dir(&c.cwd)
            .envs(plan.env.iter().map(|e| (&e.name, &e.value)))
            .stdout(if is_cargo {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .spawn()
            .with_context(|| format!("starting {}", c.display()))?;
        if let Some(out) = child.stdout.take() {
            for line in std::io::BufReader::new(out).lines() {
                if let Some(dir) = binding_out_dir_of(&line?) {
                    binding_out_dir = Some(dir);
                }
            }
        }
        let status = child
            .wait()
            .with_context(|| format!("waiting for {}", c.display()))?;
        if !status.success() {
            bail!("{} failed ({status}) building {}", c.display(), plan.label);
        }
        eprintln!(
            "build: step time {:.1} s: {} {}",
            t.elapsed().as_secs_f64(),
            c.program,
            c.args.first().map(String::as_str).unwrap_or("")
        );
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
    if !plan.binding_globs.is_empty() {
        let out_dir = binding_out_dir.as_deref().with_context(|| {
            format!(
                "cargo reported no OUT_DIR for {BINDING}'s build script while building {}",
                plan.label
            )
        })?;
        for g in &plan.binding_globs {
            libs.extend(expand(&Path::new(out_dir).join(g))?);
        }
    }
    libs.sort();
    libs.dedup();
    if (!plan.library_globs.is_empty() || !plan.binding_globs.is_empty()) && libs.is_empty() {
        bail!(
            "dynamic-backends build of {} produced no ggml libraries ({})",
            plan.label,
            plan.library_globs.join(", ")
        );
    }
    outputs.extend(libs);
    let record = BuildRecord {
        plan: plan.clone(),
        binding_out_dir,
        outputs: outputs.iter().map(|p| p.display().to_string()).collect(),
    };
    let record_path = Path::new(&plan.target_dir).join("build-record.json");
    std::fs::write(&record_path, serde_json::to_string_pretty(&record)?)
        .with_context(|| format!("writing {}", record_path.display()))?;
    Ok(Built {
        record_path,
        record,
    })
}

/// The binding hard-links its shared libraries (symlinks included, which then dangle)
/// into the profile folder and its `deps/` and `examples/`, and on a rebuild panics on
/// the dangling links it left there before (`!exists()` then `hard_link` -> EEXIST);
/// remove them first. Only the plan's own profile folder is touched.
fn remove_dangling_links(profile: &Path) -> Result<()> {
    for dir in [
        profile.to_path_buf(),
        profile.join("deps"),
        profile.join("examples"),
    ] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let is_link = std::fs::symlink_metadata(&p)
                .map(|m| m.file_type().is_symlink())
                .unwrap_or(false);
            if is_link && std::fs::metadata(&p).is_err() {
                std::fs::remove_file(&p)
                    .with_context(|| format!("removing the dangling link {}", p.display()))?;
            }
        }
    }
    Ok(())
}

/// The binding's OUT_DIR from one line of cargo's JSON messages, if the line is the
/// `build-script-executed` message of the binding (package ids name the crate as
/// `...#llama-cpp-sys-2@0.1.161` or `llama-cpp-sys-2 0.1.161 (...)`).
pub fn binding_out_dir_of(line: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v["reason"] != "build-script-executed" {
        return None;
    }
    let id = v["package_id"].as_str()?;
    let named = id.contains(&format!("#{BINDING}@")) || id.starts_with(&format!("{BINDING} "));
    if !named {
        return None;
    }
    v["out_dir"].as_str().map(str::to_string)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_binding_out_dir_comes_from_its_build_script_message_only() {
        let new_id = r#"{"reason":"build-script-executed","package_id":"registry+https://github.com/rust-lang/crates.io-index#llama-cpp-sys-2@0.1.161","linked_libs":[],"linked_paths":[],"cfgs":[],"env":[],"out_dir":"/t/release/build/llama-cpp-sys-2-0123/out"}"#;
        assert_eq!(
            binding_out_dir_of(new_id).as_deref(),
            Some("/t/release/build/llama-cpp-sys-2-0123/out")
        );
        let old_id = r#"{"reason":"build-script-executed","package_id":"llama-cpp-sys-2 0.1.161 (registry+https://github.com/rust-lang/crates.io-index)","out_dir":"C:\\t\\out"}"#;
        assert_eq!(binding_out_dir_of(old_id).as_deref(), Some(r"C:\t\out"));
        // Another crate's build script, another message, and non-JSON lines are ignored.
        let other = r#"{"reason":"build-script-executed","package_id":"registry+https://github.com/rust-lang/crates.io-index#llama-cpp-sys-2-extra@1.0.0","out_dir":"/x"}"#;
        assert_eq!(binding_out_dir_of(other), None);
        let artifact = r#"{"reason":"compiler-artifact","package_id":"registry+https://github.com/rust-lang/crates.io-index#llama-cpp-sys-2@0.1.161","out_dir":"/x"}"#;
        assert_eq!(binding_out_dir_of(artifact), None);
        assert_eq!(binding_out_dir_of("warning: something"), None);
    }
}
