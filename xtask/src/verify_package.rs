//! `cargo xtask verify-package X.zip`: re-checks a released zip on its own: one root
//! folder, README present, every file's size and SHA-256 against manifest.json (nothing
//! missing, nothing extra), kernel folders next to the executables, the `.sha256` file
//! beside the zip, the files the track has `dist` strip (no debug sections or symbol
//! table left), and the dependency closure (verify-deps on the zip, in memory).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::context::RunContext;
use crate::debugger_only::DebuggerOnly;
use crate::dist::package::Manifest;
use crate::tracks::Track;
use crate::verify_deps::{self, Policy};

/// Flags of `cargo xtask verify-package`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The package zip.
    pub zip: PathBuf,
    /// Track to check against (default: the one in manifest.json).
    #[arg(long)]
    pub track: Option<String>,
    /// Tracks file (default: packaging/tracks.toml).
    #[arg(long)]
    pub tracks_file: Option<PathBuf>,
}

/// Runs the verb: exit 0 when the package is intact, 1 with the list of problems.
/// `ctx` reads `--tracks-file` when given.
pub fn run(args: Args, ctx: &RunContext) -> Result<ExitCode> {
    let problems = verify(ctx, &args.zip, args.track.as_deref())?;
    if problems.is_empty() {
        println!("{}: OK", args.zip.display());
        Ok(ExitCode::SUCCESS)
    } else {
        for p in &problems {
            println!("  error: {p}");
        }
        println!(
            "{}: FAILED, {} problem(s)",
            args.zip.display(),
            problems.len()
        );
        Ok(ExitCode::from(1))
    }
}

/// Checks a package zip against the run's tracks (`ctx`); returns the problems found
/// (empty when intact). I/O and format errors that stop the check are `Err`.
pub fn verify(ctx: &RunContext, zip_path: &Path, track: Option<&str>) -> Result<Vec<String>> {
    let file =
        std::fs::File::open(zip_path).with_context(|| format!("opening {}", zip_path.display()))?;
    let mut zip = zip::ZipArchive::new(file)
        .with_context(|| format!("{} is not a zip", zip_path.display()))?;
    let mut problems = Vec::new();
    let mut entries: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let mut roots = std::collections::BTreeSet::new();
    for i in 0..zip.len() {
        let mut f = zip.by_index(i)?;
        if f.is_dir() {
            continue;
        }
        let name = f.name().to_string();
        let root = name.split('/').next().unwrap_or_default().to_string();
        roots.insert(root);
        let size = f.size();
        let sha = crate::assets::sha256_reader(&mut f)?;
        entries.insert(name, (size, sha));
    }
    if roots.len() != 1 {
        problems.push(format!(
            "expected one root folder, found {}: {:?}",
            roots.len(),
            roots
        ));
    }
    let root = roots.into_iter().next().unwrap_or_default();
    let manifest_name = format!("{root}/manifest.json");
    let manifest: Manifest = {
        let mut text = String::new();
        zip.by_name(&manifest_name)
            .with_context(|| format!("{manifest_name} is missing"))?
            .read_to_string(&mut text)?;
        serde_json::from_str(&text).with_context(|| format!("parsing {manifest_name}"))?
    };
    let readme_text: Option<String> =
        zip.by_name(&format!("{root}/README.md")).ok().map(|mut f| {
            let mut text = String::new();
            let _ = f.read_to_string(&mut text);
            text
        });
    if manifest.package != root {
        problems.push(format!(
            "manifest names package {} but the root folder is {root}",
            manifest.package
        ));
    }
    if !entries.contains_key(&format!("{root}/README.md")) {
        problems.push("README.md is missing".into());
    }
    let notices = crate::dist::notices::FILE_NAME;
    if !entries.contains_key(&format!("{root}/{notices}")) {
        problems.push(format!(
            "{notices} is missing (the licences of what the executables link ask for it)"
        ));
    }
    for licence in crate::dist::notices::OWN_LICENCES {
        if !entries.contains_key(&format!("{root}/{licence}")) {
            problems.push(format!(
                "{licence} is missing (the project's own licence travels with every copy)"
            ));
        }
    }
    let mut listed = std::collections::BTreeSet::new();
    for f in &manifest.files {
        let name = format!("{root}/{}", f.path);
        listed.insert(name.clone());
        match entries.get(&name) {
            None => problems.push(format!("{}: listed in manifest.json but missing from the zip", f.path)),
            Some((size, sha)) if *size != f.size || *sha != f.sha256 => {
                problems.push(format!("{}: size/SHA-256 differ from manifest.json (zip {size} bytes {sha}, manifest {} bytes {})", f.path, f.size, f.sha256))
            }
            Some(_) => {}
        }
    }
    for name in entries.keys() {
        if *name != manifest_name && !listed.contains(name) {
            problems.push(format!(
                "{}: in the zip but not in manifest.json",
                name.trim_start_matches(&format!("{root}/"))
            ));
        }
    }
    let tracks_path = ctx.tracks_path();
    let tracks = ctx.tracks()?;
    let track_name = track.unwrap_or(&manifest.track).to_string();
    let t = tracks.track(&track_name)?;
    for exe in &t.executables {
        if !entries.contains_key(&format!("{root}/{exe}")) {
            problems.push(format!("{exe} is not at the package root"));
        }
    }
    // What the track declares as coming only from a real SDK is either in the package, or
    // recorded as absent in manifest.json (and named in the README): exactly that list.
    let mut absent: Vec<String> = Vec::new();
    for r in t.runtime.iter().filter(|r| r.sdk_only) {
        if !entries.contains_key(&format!("{root}/{}", r.name)) {
            absent.push(r.name.clone());
        }
    }
    for k in t.kernel_libraries.iter().filter(|k| k.sdk_only) {
        let prefix = format!("{}/", k.dest.trim_end_matches('/'));
        if !entries
            .keys()
            .any(|n| n.starts_with(&format!("{root}/{prefix}")))
        {
            absent.push(prefix);
        }
    }
    if absent != manifest.absent_sdk_only {
        problems.push(format!(
            "manifest.json records {:?} as absent (from a real SDK only), but the track's sdk_only files missing from the zip are {absent:?}",
            manifest.absent_sdk_only
        ));
    }
    if !absent.is_empty() {
        let readme = readme_text.as_deref().unwrap_or("");
        for a in &absent {
            if !readme.contains(a.as_str()) {
                problems.push(format!(
                    "README.md does not say that {a} is not in the package"
                ));
            }
        }
    }
    for k in &t.kernel_libraries {
        let prefix = format!("{root}/{}/", k.dest.trim_end_matches('/'));
        if !k.optional && !k.sdk_only && !entries.keys().any(|n| n.starts_with(&prefix)) {
            problems.push(format!(
                "{} is missing: {} must sit next to the executables",
                k.dest, k.name
            ));
        }
    }
    for (name, strip) in declared_stripped(t) {
        let Ok(f) = zip.by_name(&format!("{root}/{name}")) else {
            continue;
        };
        match read_at_most(f, MAX_STRIPPED_FILE)? {
            Some(bytes) => problems.extend(still_carries(name, &bytes, &track_name, strip)),
            None => problems.push(format!(
                "{name} is larger than {} MiB, more than any binary dist stages, so it was not read",
                MAX_STRIPPED_FILE >> 20
            )),
        }
    }
    let sha_file = zip_path.with_file_name(format!(
        "{}.sha256",
        zip_path.file_name().unwrap_or_default().to_string_lossy()
    ));
    if sha_file.is_file() {
        let want = std::fs::read_to_string(&sha_file)?;
        let got = crate::assets::sha256_file(zip_path)?;
        if want.split_whitespace().next() != Some(got.as_str()) {
            problems.push(format!(
                "{} does not match the zip (zip is {got})",
                sha_file.display()
            ));
        }
    }
    let policy = Policy::new(tracks, tracks_path, Some(&track_name))?;
    for report in verify_deps::verify(&[zip_path.to_path_buf()], &policy)? {
        for f in &report.findings {
            problems.push(format!("dependency check: {f}"));
        }
    }
    Ok(problems)
}

/// The most of one stripped file that is read into memory (the largest staged today,
/// `audiocpp_server.exe`, is 39 MB): the zip's declared sizes are not trusted.
const MAX_STRIPPED_FILE: u64 = 1 << 30;

/// All of `reader`, or `None` when it holds more than `limit` bytes.
fn read_at_most(reader: impl Read, limit: u64) -> Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    reader.take(limit + 1).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= limit).then_some(bytes))
}

/// What a track's `tracks.toml` entry says `dist` took out of a file as it staged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stripped {
    /// `crt.strip_debug`: the DWARF sections.
    Debug,
    /// `strip_executables`: the symbol table and the DWARF sections.
    All,
}

impl Stripped {
    /// The key, below `tracks.<name>`, that declares it.
    fn key(self) -> &'static str {
        match self {
            Stripped::Debug => "crt.strip_debug",
            Stripped::All => "strip_executables",
        }
    }
}

/// The files at the package root that track `t` has `dist` stage stripped.
fn declared_stripped(t: &Track) -> Vec<(&str, Stripped)> {
    let mut files = Vec::new();
    if t.strip_executables.is_some() {
        files.extend(t.executables.iter().map(|e| (e.as_str(), Stripped::All)));
    }
    if let Some(crt) = t.crt.as_ref().filter(|c| c.strip_debug.is_some()) {
        files.extend(crt.files.iter().map(|f| (f.as_str(), Stripped::Debug)));
    }
    files
}

/// The problem with the packaged file `name` (its image `bytes`) when it still carries
/// what `strip` says was taken out of it, or cannot be read as a binary.
fn still_carries(name: &str, bytes: &[u8], track: &str, strip: Stripped) -> Option<String> {
    let found = match DebuggerOnly::parse(bytes, name) {
        Ok(found) => found,
        Err(e) => return Some(format!("{e:#}")),
    };
    let mut kept = Vec::new();
    if !found.debug_sections.is_empty() {
        kept.push(format!("debug sections {:?}", found.debug_sections));
    }
    if strip == Stripped::All && found.symbols > 0 {
        kept.push(format!("a symbol table of {} entries", found.symbols));
    }
    (!kept.is_empty()).then(|| {
        format!(
            "{name} carries {}, but tracks.{track}.{} in packaging/tracks.toml says dist stages it without them: make the package again with `cargo xtask dist --track {track}`",
            kept.join(" and "),
            strip.key()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::debugger_only::test_programs::{strip, tiny_program};
    use crate::tracks::TracksFile;

    #[test]
    fn a_file_is_read_only_up_to_the_limit() {
        assert_eq!(
            read_at_most(&b"abcd"[..], 4).unwrap(),
            Some(b"abcd".to_vec())
        );
        assert_eq!(read_at_most(&b"abcde"[..], 4).unwrap(), None);
        assert_eq!(read_at_most(std::io::repeat(0), 1 << 20).unwrap(), None);
    }

    #[test]
    fn the_files_a_track_strips_are_its_executables_and_its_mingw_runtime() {
        let tracks = TracksFile::load(&TracksFile::default_path()).unwrap();
        assert_eq!(
            declared_stripped(tracks.track("windows-cpu-gnu").unwrap()),
            [
                ("audiocpp_cli.exe", Stripped::All),
                ("audiocpp_server.exe", Stripped::All),
                ("libstdc++-6.dll", Stripped::Debug),
                ("libgcc_s_seh-1.dll", Stripped::Debug),
                ("libwinpthread-1.dll", Stripped::Debug),
            ]
        );
        assert_eq!(
            declared_stripped(tracks.track("linux-cpu").unwrap()),
            [
                ("audiocpp_cli", Stripped::All),
                ("audiocpp_server", Stripped::All)
            ]
        );
        assert!(declared_stripped(tracks.track("rocm7").unwrap()).is_empty());
    }

    /// `x86_64-w64-mingw32-gcc -g` output, then stripped with `flag` (none: as built).
    fn mingw_program(dir: &std::path::Path, flag: Option<&str>) -> Vec<u8> {
        let exe = tiny_program("x86_64-w64-mingw32-gcc", dir, "tiny.exe");
        if let Some(flag) = flag {
            strip("x86_64-w64-mingw32-strip", flag, &exe);
        }
        std::fs::read(&exe).unwrap()
    }

    #[test]
    fn a_file_that_kept_what_its_track_strips_is_a_problem_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let as_built = mingw_program(dir.path(), None);
        let p = still_carries(
            "audiocpp_cli.exe",
            &as_built,
            "windows-cpu-gnu",
            Stripped::All,
        )
        .unwrap();
        assert!(p.contains("debug sections [\".debug"), "{p}");
        assert!(p.contains("and a symbol table of "), "{p}");
        assert!(
            p.contains("tracks.windows-cpu-gnu.strip_executables in packaging/tracks.toml"),
            "{p}"
        );
        assert!(
            p.ends_with("`cargo xtask dist --track windows-cpu-gnu`"),
            "{p}"
        );

        let no_debug = mingw_program(dir.path(), Some("--strip-debug"));
        assert_eq!(
            still_carries(
                "libstdc++-6.dll",
                &no_debug,
                "windows-cpu-gnu",
                Stripped::Debug
            ),
            None
        );
        let p = still_carries(
            "audiocpp_cli.exe",
            &no_debug,
            "windows-cpu-gnu",
            Stripped::All,
        )
        .unwrap();
        assert!(!p.contains("debug sections"), "{p}");
        assert!(p.contains("carries a symbol table of "), "{p}");

        let all = mingw_program(dir.path(), Some("--strip-all"));
        assert_eq!(
            still_carries("audiocpp_cli.exe", &all, "windows-cpu-gnu", Stripped::All),
            None
        );
        let p = still_carries("audiocpp_cli.exe", b"MZ not really", "t", Stripped::All).unwrap();
        assert!(p.contains("audiocpp_cli.exe"), "{p}");
    }
}
