//! Reproducible zips: one root folder, entries sorted by name, fixed timestamps and
//! permissions, compressed in parallel (each worker writes its own part archive, then the
//! parts are stitched in sorted order without recompressing).

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{Context, Result};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, DateTime, ZipArchive, ZipWriter};

/// One file to archive.
#[derive(Debug, Clone)]
pub struct ZipEntry {
    /// Name inside the zip (with the root folder), `/`-separated.
    pub name: String,
    /// Where its bytes are.
    pub src: PathBuf,
    /// Gets mode 0755 instead of 0644.
    pub executable: bool,
}

/// Converts seconds since the Unix epoch to a zip (DOS) timestamp; clamps to 1980.
pub fn zip_time(epoch: i64) -> DateTime {
    let days = epoch.div_euclid(86_400);
    let secs = epoch.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let year = (yoe + era * 400 + i64::from(month <= 2)) as u16;
    if year < 1980 {
        return DateTime::default();
    }
    DateTime::from_date_and_time(
        year,
        month,
        day,
        (secs / 3600) as u8,
        (secs % 3600 / 60) as u8,
        (secs % 60) as u8,
    )
    .unwrap_or_default()
}

fn options(mtime: DateTime, executable: bool, level: i64, size: u64) -> SimpleFileOptions {
    SimpleFileOptions::default()
        .compression_method(CompressionMethod::Deflated)
        .compression_level(Some(level))
        .last_modified_time(mtime)
        .unix_permissions(if executable { 0o755 } else { 0o644 })
        .large_file(size >= u32::MAX as u64)
}

/// Writes `entries` to `out` (via a temporary file, renamed at the end) using `threads`
/// workers; `on_entry` is called with each entry's size as it is compressed.
pub fn write_zip(
    entries: &[ZipEntry],
    out: &Path,
    mtime: DateTime,
    threads: usize,
    on_entry: &(dyn Fn(u64) + Sync),
) -> Result<()> {
    let mut sorted: Vec<&ZipEntry> = entries.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let work_dir = out.with_extension("parts");
    let _ = std::fs::remove_dir_all(&work_dir);
    std::fs::create_dir_all(&work_dir)
        .with_context(|| format!("creating {}", work_dir.display()))?;
    let next = AtomicUsize::new(0);
    let threads = threads.clamp(1, 16).min(sorted.len().max(1));
    let errors = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (sorted, next, errors, work_dir) = (&sorted, &next, &errors, &work_dir);
            scope.spawn(move || {
                let run = || -> Result<()> {
                    let part = work_dir.join(format!("part-{t}.zip"));
                    let mut zw = ZipWriter::new(BufWriter::new(File::create(&part)?));
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(e) = sorted.get(i) else { break };
                        let mut f = File::open(&e.src)
                            .with_context(|| format!("opening {}", e.src.display()))?;
                        let size = f.metadata()?.len();
                        zw.start_file(e.name.as_str(), options(mtime, e.executable, 6, size))?;
                        std::io::copy(&mut f, &mut zw)
                            .with_context(|| format!("compressing {}", e.src.display()))?;
                        on_entry(size);
                    }
                    zw.finish()?;
                    Ok(())
                };
                if let Err(e) = run() {
                    errors.lock().expect("no poisoning").push(e);
                }
            });
        }
    });
    if let Some(e) = errors.into_inner().expect("no poisoning").pop() {
        let _ = std::fs::remove_dir_all(&work_dir);
        return Err(e);
    }
    let tmp = out.with_extension("zip.partial");
    let result = (|| -> Result<()> {
        let mut parts: Vec<ZipArchive<File>> = (0..threads)
            .map(|t| {
                Ok(ZipArchive::new(File::open(
                    work_dir.join(format!("part-{t}.zip")),
                )?)?)
            })
            .collect::<Result<_>>()?;
        let mut zw = ZipWriter::new(BufWriter::new(File::create(&tmp)?));
        for e in &sorted {
            let part = parts
                .iter_mut()
                .position(|p| p.index_for_name(&e.name).is_some())
                .with_context(|| format!("{} missing from the part archives", e.name))?;
            let file = parts[part].by_name(&e.name)?;
            zw.raw_copy_file_touch(file, mtime, Some(if e.executable { 0o755 } else { 0o644 }))?;
        }
        zw.finish()?;
        std::fs::rename(&tmp, out)?;
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&work_dir);
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.with_context(|| format!("writing {}", out.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_to_dos_time() {
        let t = zip_time(1_700_000_000); // 2023-11-14 22:13:20 UTC
        assert_eq!(
            (
                t.year(),
                t.month(),
                t.day(),
                t.hour(),
                t.minute(),
                t.second()
            ),
            (2023, 11, 14, 22, 13, 20)
        );
        assert_eq!(zip_time(0), DateTime::default());
    }

    #[test]
    fn same_input_same_bytes_and_sorted_entries() {
        let dir = tempfile::tempdir().unwrap();
        let mut entries = Vec::new();
        for i in (0..40).rev() {
            let p = dir.path().join(format!("f{i}.txt"));
            std::fs::write(&p, format!("file {i} ").repeat(i * 100 + 1)).unwrap();
            entries.push(ZipEntry {
                name: format!("pkg/f{i:02}.txt"),
                src: p,
                executable: i == 3,
            });
        }
        let a = dir.path().join("a.zip");
        let b = dir.path().join("b.zip");
        write_zip(&entries, &a, zip_time(1_700_000_000), 4, &|_| {}).unwrap();
        write_zip(&entries, &b, zip_time(1_700_000_000), 1, &|_| {}).unwrap();
        assert_eq!(
            std::fs::read(&a).unwrap(),
            std::fs::read(&b).unwrap(),
            "thread count must not change the bytes"
        );
        let mut z = ZipArchive::new(File::open(&a).unwrap()).unwrap();
        let names: Vec<String> = (0..z.len())
            .map(|i| z.by_index(i).unwrap().name().to_string())
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        let f = z.by_name("pkg/f03.txt").unwrap();
        assert_eq!(f.unix_mode(), Some(0o100755));
        assert!(!dir.path().join("a.parts").exists());
    }
}
