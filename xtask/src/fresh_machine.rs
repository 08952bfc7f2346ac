//! The set-up step tried on a fresh machine (issue 14, item 0): a new Debian bookworm
//! chroot (debootstrap minbase, plus only the C linker Rust needs), a copy of the host's
//! Rust toolchain without the `x86_64-pc-windows-gnu` std, and in it
//! `cargo xtask dist --track windows-cpu-gnu` as a new user runs it. It passes when the
//! set-up step installed every apt package and the Rust target that build needs and the
//! build got as far as a configured ggml CMake tree; the build is stopped there.
//!
//! Run by `cargo xtask setup fresh-machine`, its own sub-verb rather than a step of every
//! `cargo xtask test`: it took 1203 s here (chroot 292 s, toolchain copy 18 s, set-up and
//! build up to ggml's configure 894 s, at a load average of ~20 on 2 cores), above the
//! ~8 minutes a default test step may take. It needs root (debootstrap, chroot, mount) and
//! fails, never skips, without it. Cargo runs offline in the chroot from the host's
//! registry cache; apt and rustup download as on a new machine.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};

use crate::context::RunContext;
use crate::project::{project_root, target_dir};
use crate::sdk;

/// The suite of packaging/sdk/debian.toml the fresh machine is made from.
const SUITE: &str = "bookworm";
/// The track built there: its build needs apt packages and a Rust target a fresh
/// machine lacks.
const TRACK: &str = "windows-cpu-gnu";
/// Where the toolchain copy lives inside the chroot (its RUSTUP_HOME).
const RUSTUP_HOME: &str = "opt/rustup";
/// The longest the build may take to reach ggml's configured CMake tree.
const LIMIT_S: u64 = 1500;

/// Runs the whole check; prints the time of each part.
pub fn check(ctx: &RunContext) -> Result<()> {
    ensure!(
        sdk::is_root(),
        "the fresh-machine set-up test needs root (debootstrap, chroot and mount); run `cargo xtask test` as root"
    );
    let t0 = Instant::now();
    let target = absolute(&target_dir());
    let root = sdk::chroot_dir(&target, SUITE);
    remove_tree(&root)?;
    remove_tree(&root.with_file_name(format!("debian-{SUITE}.partial")))?;
    sdk::make_chroot(&sdk::DebianArgs {
        suite: SUITE.into(),
        mirror: None,
        dry_run: false,
    })?;
    copy_local_ca_certificates(&root)?;
    let t_chroot = t0.elapsed().as_secs_f64();

    let needs = ctx.needs()?;
    let req = needs.resolve("dist", Some(TRACK), ctx.tracks()?)?;
    let packages: Vec<String> = req
        .needs
        .iter()
        .flat_map(|n| needs.needs[n].apt.iter().cloned())
        .collect();
    let before = installed(&root, &packages)?;
    ensure!(
        before.len() < packages.len(),
        "the fresh {SUITE} chroot already has every package dist needs ({before:?}): it proves nothing"
    );
    let target_triple = req
        .rust_targets
        .first()
        .context("the track builds for no Rust target")?
        .clone();
    let toolchain = copy_toolchain(&root, &target_triple)?;
    let t_copy = t0.elapsed().as_secs_f64() - t_chroot;

    // The chroot's own target dir: what was built by an earlier run must not count.
    let ctarget = target.join(format!("chroot-{SUITE}"));
    remove_tree(&ctarget)?;
    std::fs::create_dir_all(&ctarget)?;
    let log = target.join("fresh-machine-dist.log");
    let script = format!(
        r#"export RUSTUP_HOME=/{RUSTUP_HOME}
cd '{ws}'
setsid cargo xtask dist --track {TRACK} > '{log}' 2>&1 &
pid=$!
end=$(( $(date +%s) + {LIMIT_S} ))
while kill -0 $pid 2>/dev/null; do
  for c in $(find "$CARGO_TARGET_DIR" -path '*/llama-cpp-sys-2-*/out/build/CMakeCache.txt' 2>/dev/null); do
    d=$(dirname "$c")
    if [ -e "$d/Makefile" ] || [ -e "$d/build.ninja" ]; then
      kill -TERM -$pid; sleep 3; kill -KILL -$pid 2>/dev/null
      echo "fresh machine: ggml's CMake tree configured in $d"
      exit 0
    fi
  done
  if [ $(date +%s) -ge $end ]; then kill -KILL -$pid; echo "fresh machine: no configured ggml tree after {LIMIT_S} s"; exit 3; fi
  sleep 2
done
wait $pid
echo "fresh machine: dist exited ($?) before ggml's CMake configure finished"
exit 4
"#,
        ws = project_root().display(),
        log = log.display(),
    );
    let code = sdk::run_in_chroot(SUITE, &["/bin/sh".into(), "-c".into(), script])?;
    let t_run = t0.elapsed().as_secs_f64() - t_chroot - t_copy;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let tail: String = {
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    };
    ensure!(
        code == ExitCode::SUCCESS,
        "`cargo xtask dist --track {TRACK}` on the fresh {SUITE} machine did not reach a configured ggml build; the end of {}:\n{tail}",
        log.display()
    );
    ensure!(
        text.contains("setup: installed what dist lacked"),
        "the set-up step did not report installing what was missing; the end of {}:\n{tail}",
        log.display()
    );
    let after = installed(&root, &packages)?;
    let missing: Vec<&String> = packages.iter().filter(|p| !after.contains(p)).collect();
    ensure!(
        missing.is_empty(),
        "after the set-up step these packages are still not installed in the chroot: {missing:?}"
    );
    let std_dir = toolchain
        .join("lib/rustlib")
        .join(&target_triple)
        .join("lib");
    ensure!(
        std_dir.is_dir(),
        "after the set-up step the {target_triple} std is not in the chroot's toolchain ({})",
        std_dir.display()
    );
    eprintln!(
        "test: fresh {SUITE} machine: set-up installed {} apt packages and the {target_triple} target, then ggml configured; chroot {t_chroot:.0} s, toolchain copy {t_copy:.0} s, set-up and build to ggml's configure {t_run:.0} s (total {:.0} s)",
        packages.len() - before.len(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The packages of `wanted` dpkg lists as installed in the chroot at `root`.
fn installed(root: &Path, wanted: &[String]) -> Result<Vec<String>> {
    let status_file = root.join("var/lib/dpkg/status");
    let status = std::fs::read_to_string(&status_file)
        .with_context(|| format!("reading {}", status_file.display()))?;
    let mut found = Vec::new();
    for stanza in status.split("\n\n") {
        let field = |name: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(name).map(str::trim))
        };
        if let (Some(p), Some("install ok installed")) = (field("Package:"), field("Status:")) {
            if wanted.iter().any(|w| w == p) && !found.iter().any(|f| f == p) {
                found.push(p.to_string());
            }
        }
    }
    Ok(found)
}

/// Copies the host's active toolchain into the chroot's RUSTUP_HOME (without the docs,
/// which nothing here reads) and has rustup remove the std of `without` from the copy, as
/// if it had never been added; returns the copy's folder on the host.
fn copy_toolchain(root: &Path, without: &str) -> Result<PathBuf> {
    let out = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .context("running rustc --print sysroot")?;
    ensure!(out.status.success(), "rustc --print sysroot failed");
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let name = sysroot
        .file_name()
        .and_then(|n| n.to_str())
        .context("the sysroot has no name")?
        .to_string();
    let home = root.join(RUSTUP_HOME);
    let dest = home.join("toolchains").join(&name);
    std::fs::create_dir_all(&dest)?;
    let docs = sysroot.join("share/doc");
    let mut walk = walkdir::WalkDir::new(&sysroot).into_iter();
    while let Some(e) = walk.next() {
        let e = e?;
        if e.path() == docs {
            walk.skip_current_dir();
            continue;
        }
        let to = dest.join(e.path().strip_prefix(&sysroot)?);
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&to)?;
        } else if e.file_type().is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(e.path())?, &to)?;
        } else {
            std::fs::copy(e.path(), &to)
                .with_context(|| format!("copying {}", e.path().display()))?;
        }
    }
    std::fs::write(
        home.join("settings.toml"),
        format!("version = \"12\"\ndefault_toolchain = \"{name}\"\nprofile = \"minimal\"\nauto_self_update = \"disable\"\n"),
    )?;
    let rustup = |args: &[&str]| {
        Command::new("rustup")
            .env("RUSTUP_HOME", &home)
            .env_remove("RUSTUP_TOOLCHAIN")
            .args(args)
            .output()
            .context("running rustup on the toolchain copy")
    };
    let listed = |o: &std::process::Output| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .any(|l| l.trim() == without)
    };
    if listed(&rustup(&[
        "target",
        "list",
        "--installed",
        "--toolchain",
        &name,
    ])?) {
        let o = rustup(&["target", "remove", "--toolchain", &name, without])?;
        ensure!(
            o.status.success(),
            "rustup target remove {without} on the toolchain copy failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let after = rustup(&["target", "list", "--installed", "--toolchain", &name])?;
    ensure!(
        after.status.success()
            && !listed(&after)
            && !dest.join("lib/rustlib").join(without).exists(),
        "the toolchain copy in {} still has the {without} std",
        dest.display()
    );
    Ok(dest)
}

/// The CA certificates this machine's administrator added (/usr/local/share/
/// ca-certificates, where a TLS-inspecting proxy's CA goes) belong to the machine, not to
/// what setup installs: the chroot gets them too, so that when setup installs
/// ca-certificates, rustup's download trusts the same issuers as on the host.
fn copy_local_ca_certificates(root: &Path) -> Result<()> {
    let src = Path::new("/usr/local/share/ca-certificates");
    let Ok(entries) = std::fs::read_dir(src) else {
        return Ok(());
    };
    let dst = root.join(src.strip_prefix("/")?);
    std::fs::create_dir_all(&dst)?;
    for e in entries {
        let e = e?;
        if e.file_type()?.is_file() {
            std::fs::copy(e.path(), dst.join(e.file_name()))
                .with_context(|| format!("copying {}", e.path().display()))?;
        }
    }
    Ok(())
}

/// Removes a folder left by an earlier run, refusing while anything is mounted under it.
fn remove_tree(dir: &Path) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    let busy = sdk::mounts_under(dir);
    if !busy.is_empty() {
        bail!(
            "{} still has mounts from an earlier run ({}); unmount them (`umount -R PATH`) and run again",
            dir.display(),
            busy.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        project_root().join(p)
    }
}
