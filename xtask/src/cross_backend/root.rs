//! The fake Windows ROCm root (`packaging/windows-hip/rocm-root.toml`): private copies of
//! the chroot's HIP headers and device libraries, changed by the recipe's recorded steps
//! (copies, text patches with an expected count, a rewrite of the device bitcode through
//! llvm-dis/llvm-as, links), so clang-22 can compile HIP for a MinGW host. The SDK's own
//! files are only read. Files are written only when their contents change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// `rocm-root.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RootSpec {
    /// The root made (absolute, inside the chroot).
    pub root: String,
    /// The MinGW-only sysroot made.
    pub sysroot: String,
    /// The LLVM major whose tools rewrite the bitcode.
    pub llvm: String,
    /// Files or folders copied into the root.
    pub copy: Vec<CopyStep>,
    /// Text patches on the copies.
    pub patch: Vec<PatchStep>,
    /// The device-library rewrite.
    pub bitcode: BitcodeStep,
    /// Links in the sysroot.
    pub sysroot_link: Vec<LinkStep>,
    /// Links in the root.
    #[serde(default)]
    pub root_link: Vec<LinkStep>,
}

/// A copy from the SDK into the root.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CopyStep {
    /// Absolute source (file or folder).
    pub from: String,
    /// Destination relative to the root.
    pub to: String,
}

/// A text replacement in one copied file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PatchStep {
    /// File relative to the root.
    pub file: String,
    /// Text to find.
    pub find: String,
    /// Replacement.
    pub replace: String,
    /// How many times `find` must occur in the SDK's file (a changed header fails loudly).
    pub count: usize,
    /// Why.
    pub why: String,
}

/// The device libraries, disassembled, changed by one replacement, reassembled.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BitcodeStep {
    /// Absolute folder of `.bc` files.
    pub from: String,
    /// Destination relative to the root.
    pub to: String,
    /// Text to find in every disassembled module that has it.
    pub find: String,
    /// Replacement.
    pub replace: String,
}

/// A symbolic link.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LinkStep {
    /// The link, relative to the folder it is made in.
    pub path: String,
    /// What it points to.
    pub target: String,
}

/// `p` (absolute) under `base` (`/` inside the chroot, the chroot folder from outside).
fn under(base: &Path, p: &str) -> PathBuf {
    base.join(p.trim_start_matches('/'))
}

/// Writes `data` to `path` unless it already holds exactly that; true when it wrote.
pub fn write_if_changed(path: &Path, data: &[u8]) -> Result<bool> {
    if std::fs::read(path).ok().as_deref() == Some(data) {
        return Ok(false);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, data).with_context(|| format!("writing {}", path.display()))?;
    Ok(true)
}

/// Copies a file or a folder tree with [`write_if_changed`].
pub fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    let meta = std::fs::metadata(from).with_context(|| format!("reading {}", from.display()))?;
    if meta.is_file() {
        write_if_changed(to, &std::fs::read(from)?)?;
        return Ok(());
    }
    let mut entries: Vec<_> = std::fs::read_dir(from)
        .with_context(|| format!("reading {}", from.display()))?
        .flatten()
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        copy_tree(&e.path(), &to.join(e.file_name()))?;
    }
    Ok(())
}

/// Applies `patch` to `text` (the SDK's file): the expected count, then the replacement.
pub fn patched(text: &str, patch: &PatchStep) -> Result<String> {
    let n = text.matches(&patch.find).count();
    if n != patch.count {
        bail!(
            "{}: {n} occurrences of {:?}, the recipe expects {} ({}); the SDK's header changed: update packaging/windows-hip/rocm-root.toml",
            patch.file,
            patch.find,
            patch.count,
            patch.why
        );
    }
    Ok(text.replace(&patch.find, &patch.replace))
}

fn link(path: &Path, target: &str) -> Result<()> {
    if std::fs::read_link(path).ok().as_deref() == Some(Path::new(target)) {
        return Ok(());
    }
    if std::fs::symlink_metadata(path).is_ok() {
        std::fs::remove_file(path).with_context(|| format!("replacing {}", path.display()))?;
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::os::unix::fs::symlink(target, path)
        .with_context(|| format!("linking {} -> {target}", path.display()))
}

fn run_filter(program: &str, args: &[&str], input: Option<&[u8]>) -> Result<Vec<u8>> {
    use std::io::Write as _;
    let mut child = Command::new(program)
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {program} (is the winhip chroot complete?)"))?;
    if let Some(data) = input {
        let mut stdin = child.stdin.take().context("stdin")?;
        let data = data.to_vec();
        let writer = std::thread::spawn(move || stdin.write_all(&data));
        let out = child.wait_with_output()?;
        writer
            .join()
            .map_err(|_| anyhow::anyhow!("writing to {program}"))??;
        if !out.status.success() {
            bail!(
                "{program} {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        return Ok(out.stdout);
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

/// Reads a file or a folder tree into `files` (destination path, contents).
fn collect_tree(from: &Path, to: &Path, files: &mut BTreeMap<PathBuf, Vec<u8>>) -> Result<()> {
    let meta = std::fs::metadata(from).with_context(|| format!("reading {}", from.display()))?;
    if meta.is_file() {
        let data = std::fs::read(from).with_context(|| format!("reading {}", from.display()))?;
        files.insert(to.to_path_buf(), data);
        return Ok(());
    }
    for e in std::fs::read_dir(from)
        .with_context(|| format!("reading {}", from.display()))?
        .flatten()
    {
        collect_tree(&e.path(), &to.join(e.file_name()), files)?;
    }
    Ok(())
}

/// The root's header copies with the recipe's patches applied, computed in memory from
/// the SDK's files: each file is then written once, and only when its final contents
/// differ, so an unchanged recipe leaves every timestamp alone (a patched header that
/// was first restored to the SDK's text and then patched again would make ninja
/// recompile all of ggml-hip, about 35 min per GPU target).
pub fn header_files(spec: &RootSpec, base: &Path) -> Result<BTreeMap<PathBuf, Vec<u8>>> {
    let root = under(base, &spec.root);
    let mut files = BTreeMap::new();
    for c in &spec.copy {
        collect_tree(&under(base, &c.from), &root.join(&c.to), &mut files)?;
    }
    for p in &spec.patch {
        let path = root.join(&p.file);
        let data = files.get_mut(&path).with_context(|| {
            format!(
                "{}: the recipe patches {}, which no copy step brings into the root",
                spec.root, p.file
            )
        })?;
        let text = String::from_utf8(std::mem::take(data))
            .with_context(|| format!("{} is not UTF-8 text", path.display()))?;
        *data = patched(&text, p)?.into_bytes();
    }
    Ok(files)
}

/// Writes [`header_files`]; returns how many files it wrote.
pub fn write_headers(spec: &RootSpec, base: &Path) -> Result<usize> {
    let mut written = 0;
    for (path, data) in header_files(spec, base)? {
        written += usize::from(write_if_changed(&path, &data)?);
    }
    Ok(written)
}

/// Makes the root and the sysroot under `base` (`/` when run inside the chroot).
pub fn apply(spec: &RootSpec, base: &Path) -> Result<()> {
    let root = under(base, &spec.root);
    let written = write_headers(spec, base)?;
    eprintln!(
        "winhip: {written} header file(s) of {} written (0: unchanged)",
        spec.root
    );
    let b = &spec.bitcode;
    let from = under(base, &b.from);
    let mut modules: Vec<PathBuf> = std::fs::read_dir(&from)
        .with_context(|| format!("reading the device libraries in {}", from.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "bc"))
        .collect();
    modules.sort();
    if modules.is_empty() {
        bail!("no device libraries (.bc) in {}", from.display());
    }
    let dis = format!("llvm-dis-{}", spec.llvm);
    let asm = format!("llvm-as-{}", spec.llvm);
    for m in &modules {
        let text = run_filter(&dis, &[&m.display().to_string(), "-o", "-"], None)?;
        let text = String::from_utf8(text).context("llvm-dis printed non-UTF-8")?;
        let changed = text.replace(&b.find, &b.replace);
        let out = run_filter(&asm, &["-o", "-"], Some(changed.as_bytes()))?;
        write_if_changed(
            &root.join(&b.to).join(m.file_name().unwrap_or_default()),
            &out,
        )?;
    }
    for l in &spec.root_link {
        link(&root.join(&l.path), &l.target)?;
    }
    let sysroot = under(base, &spec.sysroot);
    for l in &spec.sysroot_link {
        link(&sysroot.join(&l.path), &l.target)?;
    }
    std::fs::create_dir_all(sysroot.join("include"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(find: &str, count: usize) -> PatchStep {
        PatchStep {
            file: "include/x.h".into(),
            find: find.into(),
            replace: "#if __SIZEOF_LONG__ == 8".into(),
            count,
            why: "test".into(),
        }
    }

    #[test]
    fn a_patch_applies_only_when_the_header_has_the_expected_count() {
        let text = "#ifndef _MSC_VER\na\n#ifndef _MSC_VER\n";
        assert_eq!(
            patched(text, &step("#ifndef _MSC_VER", 2)).unwrap(),
            "#if __SIZEOF_LONG__ == 8\na\n#if __SIZEOF_LONG__ == 8\n"
        );
        let e = patched(text, &step("#ifndef _MSC_VER", 1))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("2 occurrences") && e.contains("rocm-root.toml"),
            "{e}"
        );
    }

    #[test]
    fn files_are_rewritten_only_when_their_contents_change() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a/b.h");
        assert!(write_if_changed(&f, b"one").unwrap());
        assert!(!write_if_changed(&f, b"one").unwrap());
        assert!(write_if_changed(&f, b"two").unwrap());
        assert_eq!(std::fs::read(&f).unwrap(), b"two");
    }

    #[test]
    fn a_second_run_writes_no_header_so_the_cached_build_stays_valid() {
        let base = tempfile::tempdir().unwrap();
        let sdk = base.path().join("usr/include/hip");
        std::fs::create_dir_all(sdk.join("amd_detail")).unwrap();
        std::fs::write(sdk.join("hip_runtime.h"), "#pragma once\n").unwrap();
        std::fs::write(
            sdk.join("amd_detail/w.h"),
            "#ifndef _MSC_VER\nx\n#ifndef _MSC_VER\n",
        )
        .unwrap();
        let spec = RootSpec {
            root: "/opt/r".into(),
            sysroot: "/opt/s".into(),
            llvm: "22".into(),
            copy: vec![CopyStep {
                from: "/usr/include/hip".into(),
                to: "include/hip".into(),
            }],
            patch: vec![PatchStep {
                file: "include/hip/amd_detail/w.h".into(),
                ..step("#ifndef _MSC_VER", 2)
            }],
            bitcode: BitcodeStep {
                from: "/unused".into(),
                to: "amdgcn/bitcode".into(),
                find: String::new(),
                replace: String::new(),
            },
            sysroot_link: vec![],
            root_link: vec![],
        };
        assert_eq!(write_headers(&spec, base.path()).unwrap(), 2);
        let patched_file = base.path().join("opt/r/include/hip/amd_detail/w.h");
        assert_eq!(
            std::fs::read_to_string(&patched_file).unwrap(),
            "#if __SIZEOF_LONG__ == 8\nx\n#if __SIZEOF_LONG__ == 8\n"
        );
        let before = std::fs::metadata(&patched_file)
            .unwrap()
            .modified()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(write_headers(&spec, base.path()).unwrap(), 0);
        assert_eq!(
            std::fs::metadata(&patched_file)
                .unwrap()
                .modified()
                .unwrap(),
            before,
            "the patched header was rewritten"
        );
        // A changed SDK header is written again, patched.
        std::fs::write(
            sdk.join("amd_detail/w.h"),
            "#ifndef _MSC_VER\ny\n#ifndef _MSC_VER\n",
        )
        .unwrap();
        assert_eq!(write_headers(&spec, base.path()).unwrap(), 1);
        assert!(std::fs::read_to_string(&patched_file)
            .unwrap()
            .contains("\ny\n"));
    }

    #[test]
    fn the_recipe_holds_the_six_fixes() {
        let path = crate::project::packaging_dir().join("windows-hip/rocm-root.toml");
        let spec: RootSpec =
            crate::tracks::parse_data_file(&std::fs::read_to_string(&path).unwrap(), &path)
                .unwrap();
        assert!(
            spec.copy.iter().any(|c| c.to == "share/hip/version"),
            "fix 4"
        );
        assert!(
            spec.patch
                .iter()
                .any(|p| p.file.ends_with("amd_warp_functions.h")),
            "fix 2"
        );
        assert!(
            spec.patch
                .iter()
                .any(|p| p.replace.contains("void _assert(")),
            "fix 6"
        );
        assert!(spec.bitcode.replace.contains("i32 2"), "fix 5");
        assert_eq!(spec.bitcode.to, "amdgcn/bitcode", "fix 1");
        assert!(
            spec.sysroot_link
                .iter()
                .all(|l| l.target.contains("mingw32")),
            "fix 3"
        );
    }
}
