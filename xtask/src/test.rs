//! `cargo xtask test`: fetch the pinned test assets, then run every test of the workspace
//! (in release mode, sharing the ggml build with `dist` and `bench`), then a bounded fuzz
//! run of the PE/ELF parser.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result};

use crate::assets;
use crate::project::project_root;

/// Flags of `cargo xtask test`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Skip building, unpacking and running the host package.
    #[arg(long)]
    pub no_dist: bool,
    /// Skip the bounded fuzz run of the binary parser.
    #[arg(long)]
    pub no_fuzz: bool,
    /// Seconds for the fuzz run.
    #[arg(long, default_value_t = 30)]
    pub fuzz_seconds: u32,
    /// Extra arguments passed to `cargo test` (after `--`).
    #[arg(last = true)]
    pub cargo_args: Vec<String>,
}

/// cargo-fuzz, pinned; installed into ~/.cargo/bin when missing.
const CARGO_FUZZ_VERSION: &str = "0.13.2";

fn ensure_cargo_fuzz() -> Result<()> {
    let have = cargo()
        .args(["fuzz", "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if have {
        return Ok(());
    }
    eprintln!("test: installing cargo-fuzz {CARGO_FUZZ_VERSION}");
    let status = cargo()
        .args([
            "install",
            "--locked",
            "cargo-fuzz",
            "--version",
            CARGO_FUZZ_VERSION,
        ])
        .status()
        .context("running cargo install cargo-fuzz")?;
    anyhow::ensure!(status.success(), "cargo install cargo-fuzz failed");
    Ok(())
}

/// The cargo that runs xtask (so toolchain overrides carry over).
pub fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// Runs the verb.
pub fn run(args: Args) -> Result<ExitCode> {
    let assets = assets::ensure().context("preparing test assets")?;
    eprintln!("test: assets ready in {}", assets.dir.display());
    let status = cargo()
        .current_dir(project_root())
        .args(["test", "--workspace", "--release", "--no-fail-fast"])
        .args(&args.cargo_args)
        .env("AUDIOCPP_TEST_ASSETS", &assets.dir)
        .env("AUDIOCPP_TEST_PYTHON", &assets.python)
        .status()
        .context("running cargo test")?;
    if !status.success() {
        eprintln!("test: cargo test failed");
        return Ok(ExitCode::from(1));
    }
    crate::actionlint::lint_workflows().context("linting the GitHub workflows with actionlint")?;
    eprintln!("test: actionlint passed on every workflow");
    if !args.no_dist {
        dist_end_to_end(&assets).context("dist end to end: package, unpack, run")?;
        windows_end_to_end(&assets).context("Windows package end to end under Wine")?;
    }
    if !args.no_fuzz {
        ensure_cargo_fuzz()?;
        crate::verify_deps::fuzz::run(args.fuzz_seconds)
            .context("bounded fuzz run of the PE/ELF parser")?;
    }
    eprintln!("test: all passed");
    Ok(ExitCode::SUCCESS)
}

/// Runs `dist` for `track` into `out` and `verify-package` on the zip; returns the zip.
fn dist_track(track: &str, out: &Path) -> Result<PathBuf> {
    let code = crate::dist::run(crate::dist::Args {
        track: Some(track.to_string()),
        bin_dir: None,
        rocm_path: None,
        cuda_path: None,
        crt_dir: None,
        out_dir: Some(out.to_path_buf()),
        allow_uncovered: false,
        dry_run: false,
        tracks_file: None,
    })?;
    anyhow::ensure!(code == ExitCode::SUCCESS, "dist --track {track} failed");
    let tracks = crate::tracks::TracksFile::load(&crate::tracks::TracksFile::default_path())?;
    let zip = out.join(format!("{}.zip", tracks.track(track)?.package));
    let problems = crate::verify_package::verify(&zip, None, None)?;
    anyhow::ensure!(
        problems.is_empty(),
        "verify-package {}: {problems:?}",
        zip.display()
    );
    Ok(zip)
}

fn unzip(zip: &Path, into: &Path) -> Result<PathBuf> {
    let _ = std::fs::remove_dir_all(into);
    zip::ZipArchive::new(std::fs::File::open(zip)?)?.extract(into)?;
    Ok(into.join(zip.file_stem().unwrap_or_default()))
}

fn vad_args(assets: &assets::Assets) -> [String; 8] {
    [
        "--task".into(),
        "vad".into(),
        "--family".into(),
        "silero_vad".into(),
        "--model".into(),
        assets
            .dir
            .join("ggml-silero-v6.2.0.bin")
            .to_string_lossy()
            .into_owned(),
        "--audio".into(),
        assets
            .dir
            .join("clips/speech_gaps.wav")
            .to_string_lossy()
            .into_owned(),
    ]
}

/// The README's main command for real: `dist` for this host into a scratch folder,
/// `verify-package` on the zip, then unzip it elsewhere and run the CLI from an empty
/// working directory (`--version`, `--list-devices`, a VAD run whose spec must come from
/// the compiled-in catalog).
fn dist_end_to_end(assets: &assets::Assets) -> Result<()> {
    let out = crate::project::target_dir().join("dist-test");
    let zip = dist_track(crate::dist::host_track(), &out)?;
    let root = unzip(&zip, &out.join("unpacked"))?;
    let cli = root.join(format!("audiocpp_cli{}", std::env::consts::EXE_SUFFIX));
    let cwd = out.join("empty-cwd");
    std::fs::create_dir_all(&cwd)?;
    let run = |args: &[&str]| -> Result<String> {
        let o = Command::new(&cli)
            .args(args)
            .current_dir(&cwd)
            .env_remove("LD_LIBRARY_PATH")
            .output()?;
        anyhow::ensure!(
            o.status.success(),
            "{} {args:?} failed: {}",
            cli.display(),
            String::from_utf8_lossy(&o.stderr)
        );
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    };
    run(&["--version"])?;
    let devices = run(&["--list-devices"])?;
    anyhow::ensure!(
        devices.contains("device.cpu.0="),
        "no CPU device: {devices}"
    );
    let args = vad_args(assets);
    let vad = run(&args.iter().map(String::as_str).collect::<Vec<_>>())?;
    anyhow::ensure!(
        vad.contains("spec_source=embedded") && vad.contains("segments=3"),
        "unexpected VAD output: {vad}"
    );
    eprintln!(
        "test: {} unpacked and ran from an empty directory",
        zip.display()
    );
    Ok(())
}

/// The Windows package cross-built with MinGW, verified, unzipped and run under Wine
/// from an empty working directory; then one runtime DLL is removed and both
/// `verify-package` and Wine (exit code 53) must notice.
fn windows_end_to_end(assets: &assets::Assets) -> Result<()> {
    let track = "windows-cpu-gnu";
    let out = crate::project::target_dir().join("dist-test");
    let zip = dist_track(track, &out)?;
    let root = unzip(&zip, &out.join("unpacked-windows"))?;
    let wine = crate::wine::Wine::prepare()?;
    let cwd = out.join("empty-cwd-windows");
    let cli = root.join("audiocpp_cli.exe");
    let result = (|| -> Result<()> {
        let run = |args: &[&str]| -> Result<String> {
            let o = wine.run(&cli, args, &cwd)?;
            anyhow::ensure!(
                o.status.success(),
                "wine {} {args:?} exited {:?}: {}",
                cli.display(),
                o.status.code(),
                String::from_utf8_lossy(&o.stderr)
            );
            Ok(String::from_utf8_lossy(&o.stdout).into_owned())
        };
        let version = run(&["--version"])?;
        anyhow::ensure!(version.contains(env!("CARGO_PKG_VERSION")), "{version}");
        let devices = run(&["--list-devices"])?;
        anyhow::ensure!(
            devices.contains("device.cpu.0="),
            "no CPU device under Wine: {devices}"
        );
        let args = vad_args(assets);
        let vad = run(&args.iter().map(String::as_str).collect::<Vec<_>>())?;
        anyhow::ensure!(
            vad.contains("spec_source=embedded") && vad.contains("segments=3"),
            "unexpected VAD output under Wine: {vad}"
        );

        let victim = "libstdc++-6.dll";
        std::fs::remove_file(root.join(victim))?;
        let o = wine.run(&cli, &["--version"], &cwd)?;
        anyhow::ensure!(
            o.status.code() == Some(crate::wine::MISSING_DLL_EXIT),
            "without {victim} Wine should fail with exit {}, got {:?}",
            crate::wine::MISSING_DLL_EXIT,
            o.status.code()
        );
        let broken = out.join("broken-windows.zip");
        rezip_without(&zip, &broken, victim)?;
        let problems = crate::verify_package::verify(&broken, Some(track), None)?;
        anyhow::ensure!(
            problems
                .iter()
                .any(|p| p.contains(victim) && p.contains("missing")),
            "verify-package must report the missing {victim}: {problems:?}"
        );
        Ok(())
    })();
    wine.shutdown();
    result?;
    eprintln!(
        "test: {} ran under Wine; a removed runtime DLL was caught by verify-package and Wine",
        zip.display()
    );
    Ok(())
}

fn rezip_without(src: &Path, dst: &Path, file_name: &str) -> Result<()> {
    let mut z = zip::ZipArchive::new(std::fs::File::open(src)?)?;
    let mut w = zip::ZipWriter::new(std::fs::File::create(dst)?);
    for i in 0..z.len() {
        let e = z.by_index(i)?;
        if !e.name().ends_with(&format!("/{file_name}")) {
            w.raw_copy_file(e)?;
        }
    }
    w.finish()?;
    Ok(())
}
