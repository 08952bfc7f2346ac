//! Output files: the one writer every command's results go through (converted models,
//! transcripts, segment and chunk files, synthesized audio).
//!
//! What a path names decides how it is written ([`plan`]): `-` is standard output; a
//! device, FIFO or other non-regular file is written in place (renaming over
//! `/dev/null` would replace the device with a regular file); a regular file, new or
//! existing, is written beside itself as a hidden `.NAME.<pid>-<n>.partial` of this
//! writer's own (made with `O_EXCL`, so two writers of one path, in one process or two,
//! never share it) and renamed over it: readers never see half a file, and of two
//! writers racing to one path the last rename wins, whole. A symlink is followed first
//! and its target is what gets replaced. Every write error (a full disk, `/dev/full`) is an error, and
//! [`remove_partials`] lets a front end's signal handler delete what an interrupted
//! write left.
//!
//! Synthesized audio is written as 16-bit PCM WAV ([`wav_bytes`]); [`wav_header`] also
//! makes the header of a WAV streamed before its length is known, as OpenAI's speech
//! endpoint streams them.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::{EngineError, Result};

/// How an output path is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// `-`: standard output.
    Stdout,
    /// A device, FIFO or socket: opened for writing as it is.
    InPlace(PathBuf),
    /// A regular file (or none yet): written to a partial file of its own beside it
    /// ([`reserve_partial`]), then renamed to `target`.
    Replace {
        /// The file replaced: the path itself, or the end of its symlink chain.
        target: PathBuf,
    },
}

/// Most symlinks followed before a path is refused as a loop.
const MAX_SYMLINKS: usize = 40;

/// Extensions of audio formats the engine does not write, with the format's name: an
/// output named so would get a WAV (or text) under a name that promises something else.
const OTHER_AUDIO_FORMATS: &[(&str, &str)] = &[
    ("mp3", "MP3"),
    ("ogg", "Ogg"),
    ("oga", "Ogg"),
    ("opus", "Opus"),
    ("flac", "FLAC"),
    ("m4a", "AAC (M4A)"),
    ("aac", "AAC"),
    ("wma", "WMA"),
    ("webm", "WebM"),
];

/// Refuses an output whose extension names an audio format the engine does not write
/// (`x.mp3`), naming what it writes.
fn check_extension(path: &Path) -> Result<()> {
    let Some(ext) = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
    else {
        return Ok(());
    };
    match OTHER_AUDIO_FORMATS.iter().find(|(e, _)| *e == ext) {
        Some((_, name)) => Err(EngineError::Usage(format!(
            "output '{}' asks for {name}, which is not written here: audio is written as 16-bit PCM WAV only (name the output .wav, or - for standard output), and convert it afterwards if need be (`ffmpeg -i out.wav out.{ext}`)",
            path.display()
        ))),
        None => Ok(()),
    }
}

/// Decides how `path` is written, looking only at what is there now; a path whose
/// extension names an audio format the engine does not write (`.mp3`, `.ogg`, `.opus`,
/// `.flac`, `.m4a`, `.aac`...) is refused before anything is made.
pub fn plan(path: &Path) -> Result<Plan> {
    if path.as_os_str() == "-" {
        return Ok(Plan::Stdout);
    }
    check_extension(path)?;
    let target = follow_symlinks(path)?;
    match std::fs::metadata(&target) {
        Ok(m) if m.is_dir() => Err(EngineError::Usage(format!(
            "output '{}' is a directory; give a file path",
            path.display()
        ))),
        Ok(m) if !m.is_file() => Ok(Plan::InPlace(target)),
        _ => {
            if target.file_name().is_none() {
                return Err(EngineError::Usage(format!(
                    "output '{}' is not a file path",
                    path.display()
                )));
            }
            Ok(Plan::Replace { target })
        }
    }
}

/// Checks, before any work, that `path` can be written as [`plan`] decides: for a
/// regular file, that its folder exists and takes a new file (a partial file is made
/// there and removed at once), so a missing, misnamed or read-only folder is refused
/// before a model loads rather than after the work it would throw away. Standard
/// output, devices and FIFOs are not probed (opening a FIFO waits for its reader).
pub fn check_writable(path: &Path) -> Result<Plan> {
    let plan = plan(path)?;
    if let Plan::Replace { target } = &plan {
        let folder = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let refuse = |why: &str| {
            Err(EngineError::Usage(format!(
                "cannot write '{}': {why} '{}' (create the folder first, or give a path in an existing folder)",
                path.display(),
                folder.display()
            )))
        };
        match std::fs::metadata(folder) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return refuse("this is not a folder:"),
            Err(_) => return refuse("there is no folder"),
        }
        let (guard, probe) = reserve_partial(target).map_err(|e| match e {
            EngineError::Write { source, .. } => EngineError::Write {
                path: path.to_path_buf(),
                source,
            },
            e => e,
        })?;
        // Closed before the guard removes it (Windows removes no open file at once).
        drop(probe);
        drop(guard);
    }
    Ok(plan)
}

/// Partial files this process has reserved, counted so that each name is new.
static PARTIAL_SERIAL: AtomicU64 = AtomicU64::new(0);

/// Makes a new, empty partial file beside `target`, `.NAME.<pid>-<n>.partial`, created
/// exclusively (a name already there, left by a process of the same id that died or
/// made in another PID namespace, is skipped and kept), and registers it for
/// [`remove_partials`]. The file belongs to this one write: a second writer of the same
/// target, here or in another process, gets another.
fn reserve_partial(target: &Path) -> Result<(PartialGuard, std::fs::File)> {
    let name = target
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    loop {
        let n = PARTIAL_SERIAL.fetch_add(1, Ordering::Relaxed);
        let partial = target.with_file_name(format!(".{name}.{}-{n}.partial", std::process::id()));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&partial)
        {
            Ok(f) => return Ok((PartialGuard::new(partial), f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(source) => {
                return Err(EngineError::Write {
                    path: target.to_path_buf(),
                    source,
                })
            }
        }
    }
}

/// The end of `path`'s symlink chain (the path itself when it is no symlink); a
/// dangling link gives the file it would create.
fn follow_symlinks(path: &Path) -> Result<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..MAX_SYMLINKS {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let link = std::fs::read_link(&p).map_err(|source| EngineError::Write {
                    path: p.clone(),
                    source,
                })?;
                p = match p.parent() {
                    Some(dir) if link.is_relative() => dir.join(link),
                    _ => link,
                };
            }
            _ => return Ok(p),
        }
    }
    Err(EngineError::Usage(format!(
        "output '{}': more than {MAX_SYMLINKS} symlinks (a loop?)",
        path.display()
    )))
}

/// Partial files being written now, for [`remove_partials`].
static PARTIALS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Deletes every partial file being written at this moment. Front ends call it from
/// their SIGINT/SIGTERM handler before exiting, so an interrupted write leaves nothing.
pub fn remove_partials() {
    remove_partials_where(|_| true);
}

/// [`remove_partials`] for the partial files `chosen` picks (a test picks its own, so
/// that tests writing beside it in other threads keep theirs).
fn remove_partials_where(chosen: impl Fn(&Path) -> bool) {
    let partials = PARTIALS.lock().unwrap_or_else(|e| e.into_inner());
    for p in partials.iter().filter(|p| chosen(p)) {
        let _ = std::fs::remove_file(p);
    }
}

/// A registered partial file: removed (and unregistered) when dropped unless kept.
struct PartialGuard {
    path: PathBuf,
    keep: bool,
}

impl PartialGuard {
    fn new(path: PathBuf) -> Self {
        PARTIALS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(path.clone());
        PartialGuard { path, keep: false }
    }
}

impl Drop for PartialGuard {
    fn drop(&mut self) {
        let mut partials = PARTIALS.lock().unwrap_or_else(|e| e.into_inner());
        partials.retain(|p| p != &self.path);
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> EngineError + '_ {
    move |source| EngineError::Write {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `bytes` to `path` as [`plan`] decides.
pub fn write_bytes(path: &Path, bytes: &[u8]) -> Result<()> {
    write_with(path, |w| w.write_all(bytes))
}

/// Writes to `path` through `fill`, which gets a writer for the content, as [`plan`]
/// decides; errors from `fill`, the flush, the sync and the rename are all reported.
pub fn write_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    match plan(path)? {
        Plan::Stdout => {
            let mut out = std::io::stdout().lock();
            fill(&mut out)
                .and_then(|()| out.flush())
                .map_err(write_err(Path::new("-")))
        }
        Plan::InPlace(target) => {
            let mut f = OpenOptions::new()
                .write(true)
                .open(&target)
                .map_err(write_err(&target))?;
            fill(&mut f)
                .and_then(|()| f.flush())
                .map_err(write_err(&target))
        }
        Plan::Replace { target } => {
            let (mut guard, mut f) = reserve_partial(&target)?;
            fill(&mut f)
                .and_then(|()| f.sync_all())
                .map_err(write_err(&target))?;
            drop(f);
            keep_permissions(&target, &guard.path);
            std::fs::rename(&guard.path, &target).map_err(write_err(&target))?;
            guard.keep = true;
            Ok(())
        }
    }
}

/// Writes to `path` through `produce`, which writes the whole content to the file path
/// it is given (ggml writes GGUF files by name). For a non-regular target the content
/// is made in the temp folder and copied in. Returns the content's size in bytes.
pub fn write_via_path(path: &Path, produce: impl FnOnce(&Path) -> Result<()>) -> Result<u64> {
    match plan(path)? {
        Plan::Replace { target } => {
            let (mut guard, f) = reserve_partial(&target)?;
            drop(f);
            produce(&guard.path)?;
            let size = synced_size(&guard.path).map_err(write_err(&target))?;
            keep_permissions(&target, &guard.path);
            std::fs::rename(&guard.path, &target).map_err(write_err(&target))?;
            guard.keep = true;
            Ok(size)
        }
        Plan::Stdout | Plan::InPlace(_) => {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let (guard, f) =
                reserve_partial(&std::env::temp_dir().join(format!("audiocpp-{name}")))?;
            drop(f);
            produce(&guard.path)?;
            let size = synced_size(&guard.path).map_err(write_err(&guard.path))?;
            let mut src = std::fs::File::open(&guard.path).map_err(write_err(&guard.path))?;
            write_with(path, |w| std::io::copy(&mut src, w).map(|_| ()))?;
            Ok(size)
        }
    }
}

/// Flushes a finished file to disk (where a full disk shows up for data written by
/// C code that did not check) and returns its size.
fn synced_size(path: &Path) -> std::io::Result<u64> {
    let f = OpenOptions::new().write(true).open(path)?;
    f.sync_all()?;
    Ok(f.metadata()?.len())
}

/// Gives a replacement the mode of the file it replaces (a script, a shared file).
fn keep_permissions(target: &Path, partial: &Path) {
    if let Ok(m) = std::fs::metadata(target) {
        let _ = std::fs::set_permissions(partial, m.permissions());
    }
}

/// Bytes of a canonical WAV header (RIFF, `fmt ` of PCM, `data`).
pub const WAV_HEADER_BYTES: usize = 44;

/// The size both WAV length fields hold when the length is unknown (a streamed WAV),
/// as OpenAI's speech endpoint writes them.
pub const WAV_UNKNOWN_LENGTH: u32 = u32::MAX;

/// A mono 16-bit PCM WAV header for `data_bytes` of samples, or with
/// [`WAV_UNKNOWN_LENGTH`] in both length fields when `None` (streaming) or when the
/// data is too long for the 32-bit fields.
pub fn wav_header(sample_rate: u32, data_bytes: Option<usize>) -> [u8; WAV_HEADER_BYTES] {
    let (riff, data) = match data_bytes.and_then(|n| u32::try_from(n).ok()) {
        Some(n) if n <= u32::MAX - 36 => (n + 36, n),
        _ => (WAV_UNKNOWN_LENGTH, WAV_UNKNOWN_LENGTH),
    };
    let mut h = [0u8; WAV_HEADER_BYTES];
    h[0..4].copy_from_slice(b"RIFF");
    h[4..8].copy_from_slice(&riff.to_le_bytes());
    h[8..16].copy_from_slice(b"WAVEfmt ");
    h[16..20].copy_from_slice(&16u32.to_le_bytes());
    h[20..22].copy_from_slice(&1u16.to_le_bytes()); // PCM
    h[22..24].copy_from_slice(&1u16.to_le_bytes()); // mono
    h[24..28].copy_from_slice(&sample_rate.to_le_bytes());
    h[28..32].copy_from_slice(&sample_rate.saturating_mul(2).to_le_bytes());
    h[32..34].copy_from_slice(&2u16.to_le_bytes()); // block align
    h[34..36].copy_from_slice(&16u16.to_le_bytes()); // bits per sample
    h[36..40].copy_from_slice(b"data");
    h[40..44].copy_from_slice(&data.to_le_bytes());
    h
}

/// Samples in -1..1 as 16-bit little-endian PCM: clamped, rounded, NaN as silence.
pub fn pcm16_le(samples: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(samples.len() * 2);
    for &x in samples {
        let x = if x.is_nan() { 0.0 } else { x.clamp(-1.0, 1.0) };
        out.extend_from_slice(&((x * 32767.0).round() as i16).to_le_bytes());
    }
    out
}

/// A whole mono 16-bit PCM WAV file; audio too long for WAV's 32-bit sizes (over
/// 2^31 samples) is refused.
pub fn wav_bytes(samples: &[f32], sample_rate: u32) -> Result<Vec<u8>> {
    let data = samples.len().saturating_mul(2);
    if u32::try_from(data).map_or(true, |n| n > u32::MAX - 36) {
        return Err(EngineError::Usage(format!(
            "{} samples are too long for a WAV file (at most {} at 16 bits)",
            samples.len(),
            (u32::MAX - 36) / 2
        )));
    }
    let mut out = Vec::with_capacity(WAV_HEADER_BYTES + data);
    out.extend_from_slice(&wav_header(sample_rate, Some(data)));
    out.extend_from_slice(&pcm16_le(samples));
    Ok(out)
}

/// Writes mono samples to `path` as a 16-bit PCM WAV, through [`write_bytes`] (whose
/// [`plan`] refuses a path named for another format: `--out x.mp3` gets no WAV).
pub fn write_wav(path: &Path, samples: &[f32], sample_rate: u32) -> Result<()> {
    write_bytes(path, &wav_bytes(samples, sample_rate)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_follow_what_the_path_is() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(plan(Path::new("-")).unwrap(), Plan::Stdout);
        assert_eq!(
            plan(Path::new("/dev/null")).unwrap(),
            Plan::InPlace("/dev/null".into())
        );
        let new = dir.path().join("out.txt");
        assert_eq!(plan(&new).unwrap(), Plan::Replace { target: new });
        assert!(plan(dir.path()).is_err(), "a directory is refused");
    }

    #[test]
    fn check_writable_refuses_what_a_write_would_fail_on_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("out.txt");
        assert_eq!(
            check_writable(&ok).unwrap(),
            Plan::Replace { target: ok.clone() }
        );
        let missing = dir.path().join("no/such/out.txt");
        let err = check_writable(&missing).unwrap_err().to_string();
        assert!(
            err.contains(&format!("cannot write '{}'", missing.display()))
                && err.contains("there is no folder")
                && err.contains("create the folder first"),
            "{err}"
        );
        let file = dir.path().join("file.txt");
        std::fs::write(&file, "x").unwrap();
        let err = check_writable(&file.join("out.txt"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not a folder"), "{err}");
        let err = check_writable(dir.path()).unwrap_err().to_string();
        assert!(err.contains("is a directory"), "{err}");
        assert_eq!(check_writable(Path::new("-")).unwrap(), Plan::Stdout);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "only file.txt: the probe left nothing");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn check_writable_refuses_a_read_only_folder() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let mut ro = dir.path().join("ro");
        std::fs::create_dir(&ro).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        if std::fs::write(ro.join("root"), "x").is_ok() {
            // Root writes in a 0o555 folder; sysfs takes no new file from anyone.
            ro = std::path::PathBuf::from("/sys/kernel");
        }
        let err = check_writable(&ro.join("out.wav")).unwrap_err().to_string();
        assert!(
            err.contains("cannot write") && err.contains("a folder you can write to"),
            "{err}"
        );
    }

    #[test]
    fn outputs_named_for_other_audio_formats_are_refused_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["x.mp3", "x.OGG", "x.opus", "x.flac", "x.m4a", "x.aac"] {
            let path = dir.path().join(name);
            let err = plan(&path).unwrap_err().to_string();
            assert!(
                err.contains("audio is written as 16-bit PCM WAV only"),
                "{err}"
            );
            assert!(
                err.contains(&format!("output '{}'", path.display())),
                "{err}"
            );
            assert!(write_wav(&path, &[0.0; 8], 16_000).is_err());
        }
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "nothing written"
        );
        for name in ["x.wav", "x.WAV", "x", "x.txt", "x.gguf", "mp3"] {
            write_wav(&dir.path().join(name), &[0.0; 8], 16_000).unwrap();
        }
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_are_followed_and_their_target_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.txt");
        std::fs::write(&real, "old").unwrap();
        let link = dir.path().join("link.txt");
        std::os::unix::fs::symlink("real.txt", &link).unwrap();
        write_bytes(&link, b"new").unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "new");
        // A dangling link creates its target.
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink("made.txt", &dangling).unwrap();
        write_bytes(&dangling, b"x").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("made.txt")).unwrap(),
            "x"
        );
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 4, "no partial file left");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn devices_are_written_in_place_and_write_errors_reported() {
        write_bytes(Path::new("/dev/null"), b"discarded").unwrap();
        assert!(!std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_file());
        let err = write_bytes(Path::new("/dev/full"), &[0u8; 1 << 16]).unwrap_err();
        assert!(
            err.to_string().contains("cannot write '/dev/full'")
                && err
                    .to_string()
                    .contains("no space left on device: free space on that disk"),
            "{err}"
        );
        assert!(err.is_user_error());
        let err = write_via_path(Path::new("/dev/full"), |p| {
            std::fs::write(p, [1u8; 1 << 16]).map_err(write_err(p))
        })
        .unwrap_err();
        assert!(err.to_string().contains("/dev/full"), "{err}");
    }

    #[test]
    fn a_failed_write_leaves_no_partial_and_no_target() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.gguf");
        let err = write_via_path(&out, |p| {
            std::fs::write(p, b"half").unwrap();
            Err(EngineError::Usage("stopped".into()))
        });
        assert!(err.is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let size =
            write_via_path(&out, |p| std::fs::write(p, b"whole").map_err(write_err(p))).unwrap();
        assert_eq!(size, 5);
        assert_eq!(std::fs::read(&out).unwrap(), b"whole");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn two_writers_of_one_path_never_share_a_partial_file() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("model.gguf");
        // Both are halfway through their content at once: each must have a file of its
        // own, and the file left is one of them whole.
        let halfway = std::sync::Barrier::new(2);
        let write = |byte: u8, len: usize| {
            write_via_path(&out, |p| {
                std::fs::write(p, vec![byte; len / 2]).map_err(write_err(p))?;
                halfway.wait();
                let mut f = OpenOptions::new()
                    .append(true)
                    .open(p)
                    .map_err(write_err(p))?;
                f.write_all(&vec![byte; len - len / 2])
                    .map_err(write_err(p))
            })
        };
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| write(b'a', 3000));
            let b = s.spawn(|| write(b'b', 1000));
            (a.join().unwrap(), b.join().unwrap())
        });
        assert_eq!((a.unwrap(), b.unwrap()), (3000, 1000));
        let left = std::fs::read(&out).unwrap();
        assert!(
            left == vec![b'a'; 3000] || left == vec![b'b'; 1000],
            "a mix of both writers: {} bytes",
            left.len()
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        // write_with as well.
        let w = |byte: u8| {
            write_with(&out, |w| {
                w.write_all(&[byte; 500])?;
                halfway.wait();
                w.write_all(&[byte; 500])
            })
        };
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| w(b'x'));
            let b = s.spawn(|| w(b'y'));
            (a.join().unwrap(), b.join().unwrap())
        });
        a.unwrap();
        b.unwrap();
        let left = std::fs::read(&out).unwrap();
        assert!(left == [b'x'; 1000] || left == [b'y'; 1000]);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn wav_files_read_back_through_hound() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("tone.wav");
        let samples: Vec<f32> = (0..2400).map(|i| (i as f32 * 0.05).sin() * 0.8).collect();
        let mut with_edges = samples.clone();
        with_edges.extend([2.0, -2.0, f32::NAN]);
        write_wav(&out, &with_edges, 24_000).unwrap();
        let mut r = hound::WavReader::open(&out).unwrap();
        let spec = r.spec();
        assert_eq!(
            (spec.sample_rate, spec.channels, spec.bits_per_sample),
            (24_000, 1, 16)
        );
        let back: Vec<i16> = r.samples::<i16>().map(|s| s.unwrap()).collect();
        assert_eq!(back.len(), 2403);
        for (a, b) in samples.iter().zip(&back) {
            assert!((a - *b as f32 / 32767.0).abs() <= 0.5 / 32767.0 + 1e-6);
        }
        assert_eq!(&back[2400..], [32767, -32767, 0], "clamped, NaN silent");
        let streamed = wav_header(24_000, None);
        assert_eq!(&streamed[4..8], &[0xff; 4]);
        assert_eq!(&streamed[40..44], &[0xff; 4]);
        assert_eq!(&streamed[..4], b"RIFF");
    }

    #[test]
    fn remove_partials_deletes_what_is_being_written() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("x.json");
        write_with(&out, |w| {
            w.write_all(b"partial content")?;
            remove_partials_where(|p| p.starts_with(dir.path()));
            Ok(())
        })
        .unwrap_err();
        assert!(!out.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
