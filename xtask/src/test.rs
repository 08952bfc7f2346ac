//! `cargo xtask test`: fetch the pinned test assets, then run every test of the workspace
//! (in release mode, sharing the ggml build with `dist` and `bench`), then a bounded fuzz
//! run of the PE/ELF parser. Its sub-verbs run one end-to-end package test instead of
//! all that: `test hip [--track T]` (a Linux HIP package built in its Debian chroot),
//! `test cross-hip` (the Windows HIP package cross-built here, run under Wine), `test
//! vulkan` and `test cross-vulkan` (the Vulkan packages on Mesa's lavapipe, natively and
//! under Wine).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result};

use crate::assets;
use crate::context::RunContext;
use crate::project::project_root;

/// Flags of `cargo xtask test`: the suite's flags, or a sub-verb that runs one
/// end-to-end package test instead of the suite (see [`Mode`]).
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    /// A package test to run instead of the suite.
    #[command(subcommand)]
    pub verb: Option<Verb>,
    /// Skip building, unpacking and running the host package.
    #[arg(long)]
    pub no_dist: bool,
    /// Skip the bounded fuzz run of the binary parser.
    #[arg(long)]
    pub no_fuzz: bool,
    /// Seconds for the fuzz run.
    #[arg(long, default_value_t = 30)]
    pub fuzz_seconds: u32,
    /// Old spelling of `test hip`.
    #[arg(long, hide = true, conflicts_with_all = SUITE_ONLY)]
    pub hip: bool,
    /// Old spelling of `test hip --track`.
    #[arg(long, hide = true, requires = "hip", value_name = "TRACK")]
    pub hip_track: Option<String>,
    /// Old spelling of `test cross-hip`.
    #[arg(long, hide = true, conflicts_with = "hip", conflicts_with_all = SUITE_ONLY)]
    pub winhip: bool,
    /// Old spelling of `test vulkan`.
    #[arg(long, hide = true, conflicts_with_all = ["hip", "winhip"], conflicts_with_all = SUITE_ONLY)]
    pub vulkan: bool,
    /// Old spelling of `test cross-vulkan`.
    #[arg(long, hide = true, conflicts_with_all = ["hip", "winhip", "vulkan"], conflicts_with_all = SUITE_ONLY)]
    pub winvulkan: bool,
    /// Extra arguments passed to `cargo test` (after `--`).
    #[arg(last = true)]
    pub cargo_args: Vec<String>,
}

/// The flags that only the suite reads: an error with a package test (exit 2).
const SUITE_ONLY: [&str; 4] = ["no_dist", "no_fuzz", "fuzz_seconds", "cargo_args"];

/// The sub-verbs of `cargo xtask test`, each run instead of the suite.
#[derive(Debug, clap::Subcommand)]
pub enum Verb {
    /// Build a Linux HIP package for real in the Debian chroot its track names (made when
    /// missing; needs root), package and verify it, and run it there. Builds gfx1100 only
    /// (all targets take hours on 2 cores); CI does not run it.
    Hip(HipArgs),
    /// Cross-build the Windows HIP package (windows-hip-rocm7-gnu: ggml-hip.dll for
    /// gfx1100 in the winhip chroot, made when missing; needs root), verify it, and run it
    /// under Wine against AMD's real HIP runtime. The ggml-hip build is cached in the
    /// chroot; CI does not run it.
    CrossHip,
    /// Package linux-vulkan (libggml-vulkan.so from the cache outside the clone, built on
    /// a miss) and run it on Mesa's lavapipe: the hidden-device listing, then VAD, ASR and
    /// TTS on `--backend vulkan` against the CPU backend. Left out of the default suite for
    /// time: a cold ggml-vulkan build and the lavapipe runs come near or above what CI's 2
    /// cores can spare (docs/build/VULKAN.md has the numbers).
    Vulkan,
    /// Package windows-vulkan-gnu (MinGW-w64, dynamic backends, ggml-vulkan.dll from the
    /// cache outside the clone) and run it under Wine with an Xvfb display on Mesa's
    /// lavapipe, as `test vulkan` does natively. Left out of the default suite for time.
    CrossVulkan,
}

/// Flags of `cargo xtask test hip`.
#[derive(Debug, clap::Args)]
pub struct HipArgs {
    /// The track to build: linux-hip-rocm6 (Debian sid's ROCm 6.4) or linux-hip-rocm7
    /// (Debian experimental's ROCm 7.2); any track with a `chroot` in its build table.
    /// Default: the first such track by name in packaging/tracks.toml.
    #[arg(long, value_name = "TRACK")]
    pub track: Option<String>,
}

/// What `cargo xtask test` was asked to do, decided from the flags before anything runs.
/// A new package test is one more variant here and one more arm in [`run`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// The whole suite (plain `cargo xtask test`).
    Suite,
    /// `test hip [--track T]` (old: `--hip [--hip-track T]`); `None`: the default track.
    Hip { track: Option<String> },
    /// `test cross-hip` (old: `--winhip`).
    CrossHip,
    /// `test vulkan` (old: `--vulkan`).
    Vulkan,
    /// `test cross-vulkan` (old: `--winvulkan`).
    CrossVulkan,
}

impl Args {
    /// The mode the sub-verb (or its old flag) names.
    pub fn mode(&self) -> Mode {
        match &self.verb {
            Some(Verb::Hip(h)) => Mode::Hip {
                track: h.track.clone(),
            },
            Some(Verb::CrossHip) => Mode::CrossHip,
            Some(Verb::Vulkan) => Mode::Vulkan,
            Some(Verb::CrossVulkan) => Mode::CrossVulkan,
            None if self.hip => Mode::Hip {
                track: self.hip_track.clone(),
            },
            None if self.winhip => Mode::CrossHip,
            None if self.vulkan => Mode::Vulkan,
            None if self.winvulkan => Mode::CrossVulkan,
            None => Mode::Suite,
        }
    }
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
pub fn run(args: Args, ctx: &RunContext) -> Result<ExitCode> {
    crate::setup::ensure(ctx, "test", None)?;
    let assets = assets::ensure().context("preparing test assets")?;
    eprintln!("test: assets ready in {}", assets.dir.display());
    match args.mode() {
        Mode::Suite => {}
        Mode::Hip { track } => {
            let (tracks, tracks_path) = (ctx.tracks()?, ctx.tracks_path());
            let track = match track {
                Some(t) => t,
                None => default_hip_test_track(tracks, tracks_path)?.to_owned(),
            };
            hip_end_to_end(ctx, &assets, &track)
                .with_context(|| format!("{track} built, packaged and run in its Debian chroot"))?;
            eprintln!("test: HIP package test passed");
            return Ok(ExitCode::SUCCESS);
        }
        Mode::CrossHip => return crate::wine_hip_test::run_verb(ctx, &assets),
        Mode::Vulkan => {
            crate::vulkan::lavapipe::linux_end_to_end(ctx, &assets)
                .context("linux-vulkan end to end on Mesa's lavapipe")?;
            eprintln!("test: Linux Vulkan package test passed");
            return Ok(ExitCode::SUCCESS);
        }
        Mode::CrossVulkan => {
            crate::vulkan::lavapipe::windows_end_to_end(ctx, &assets)
                .context("windows-vulkan-gnu under Wine on lavapipe")?;
            eprintln!("test: Windows Vulkan package test passed");
            return Ok(ExitCode::SUCCESS);
        }
    }
    let tmp = fresh_test_tmp()?;
    let status = cargo()
        .current_dir(project_root())
        .args(["test", "--workspace", "--release", "--no-fail-fast"])
        .args(&args.cargo_args)
        .env("AUDIOCPP_TEST_ASSETS", &assets.dir)
        .env("AUDIOCPP_TEST_PYTHON", &assets.python)
        .env("TMPDIR", tmp.path())
        .status()
        .context("running cargo test")?;
    if !status.success() {
        eprintln!("test: cargo test failed");
        return Ok(ExitCode::from(1));
    }
    let left = left_behind(tmp.path())?;
    if let Some(problem) = too_much_left(&left, LEFT_BEHIND_LIMIT) {
        anyhow::bail!(
            "the tests' temporary folder {}: {problem}",
            tmp.path().display()
        );
    }
    crate::hostile::run_suite(&assets.dir).context("hostile-input suite (CLI and server)")?;
    crate::actionlint::lint_workflows().context("linting the GitHub workflows with actionlint")?;
    eprintln!("test: actionlint passed on every workflow");
    crate::kernels::debian::check_pinned()
        .context("real rocBLAS/hipBLASLt kernel folders from Debian")?;
    if !args.no_dist {
        dist_end_to_end(ctx, &assets).context("dist end to end: package, unpack, run")?;
        windows_end_to_end(ctx, &assets).context("Windows package end to end under Wine")?;
    }
    if !args.no_fuzz {
        ensure_cargo_fuzz()?;
        crate::verify_deps::fuzz::run(args.fuzz_seconds)
            .context("bounded fuzz run of the PE/ELF parser")?;
    }
    eprintln!("test: all passed");
    Ok(ExitCode::SUCCESS)
}

/// A fresh folder in the system's temporary folder, the `TMPDIR` of the cargo tests:
/// what they leave there is weighed by [`too_much_left`] and removed with it. Outside
/// the clone, so that no test's working folder finds the repository's `model_specs`.
fn fresh_test_tmp() -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix("audiocpp-tests-")
        .tempdir()
        .context("creating the tests' temporary folder")
}

/// Bytes the tests may leave in their temporary folder: the toolchain's and Wine's
/// empty files and sockets, not a model kept past its test.
const LEFT_BEHIND_LIMIT: u64 = 1 << 20;

/// Each entry of `dir` with the bytes of the files under it, sorted by name.
fn left_behind(dir: &Path) -> Result<Vec<(String, u64)>> {
    let mut left = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let bytes = walkdir::WalkDir::new(entry.path())
            .into_iter()
            .filter_map(|e| e.ok()?.metadata().ok())
            .filter(|m| m.is_file())
            .map(|m| m.len())
            .sum();
        left.push((entry.file_name().to_string_lossy().into_owned(), bytes));
    }
    left.sort();
    Ok(left)
}

/// What is wrong when the `left` entries weigh more than `limit` bytes: the largest
/// ones named, and the remedy.
fn too_much_left(left: &[(String, u64)], limit: u64) -> Option<String> {
    let total: u64 = left.iter().map(|(_, b)| b).sum();
    if total <= limit {
        return None;
    }
    let mut largest: Vec<&(String, u64)> = left.iter().collect();
    largest.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let named: Vec<String> = largest
        .iter()
        .take(8)
        .map(|(name, bytes)| format!("{name} ({bytes} bytes)"))
        .collect();
    Some(format!(
        "the tests left {total} bytes in {} entries, more than {limit}: {}. A temporary \
         folder kept past its test fills the disk run after run; keep what tests reuse \
         in CARGO_TARGET_TMPDIR",
        left.len(),
        named.join(", ")
    ))
}

/// Runs `dist` for `track` into `out` and `verify-package` on the zip; returns the zip.
pub(crate) fn dist_track(ctx: &RunContext, track: &str, out: &Path) -> Result<PathBuf> {
    let code = crate::dist::run(
        crate::dist::Args {
            track: Some(track.to_string()),
            bin_dir: Vec::new(),
            rocm_path: None,
            cuda_path: None,
            crt_dir: None,
            out_dir: Some(out.to_path_buf()),
            allow_uncovered: false,
            gpu_targets: None,
            chroot: None,
            verb: None,
            dry_run: false,
            facts: None,
            tracks_file: None,
        },
        ctx,
    )?;
    anyhow::ensure!(code == ExitCode::SUCCESS, "dist --track {track} failed");
    verified_zip(ctx, track, out)
}

/// The zip `dist --track track --out-dir out` wrote, after `verify-package` passed on it.
fn verified_zip(ctx: &RunContext, track: &str, out: &Path) -> Result<PathBuf> {
    let zip = out.join(format!("{}.zip", ctx.tracks()?.track(track)?.package));
    let problems = crate::verify_package::verify(ctx, &zip, None)?;
    anyhow::ensure!(
        problems.is_empty(),
        "verify-package {}: {problems:?}",
        zip.display()
    );
    Ok(zip)
}

/// The GPU target `test hip` builds (one: the full list takes hours on 2 cores).
const HIP_TEST_TARGET: &str = "gfx1100";

/// The track `test hip` builds without `--track`: the first, by name, whose build
/// table has a `chroot`.
fn default_hip_test_track<'a>(
    tracks: &'a crate::tracks::TracksFile,
    tracks_path: &Path,
) -> Result<&'a str> {
    tracks
        .tracks
        .iter()
        .find(|(_, t)| t.build.chroot.is_some())
        .map(|(name, _)| name.as_str())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{}: no tracks.<name>.build has a key 'chroot', so `test hip` has nothing to build",
                tracks_path.display()
            )
        })
}

/// The Debian chroot `test hip` builds `track` in: its `build.chroot`, else an error
/// naming the file, the key and the tracks that have one.
fn hip_test_chroot<'a>(
    tracks: &'a crate::tracks::TracksFile,
    tracks_path: &Path,
    track: &str,
) -> Result<&'a str> {
    let suite = tracks.track(track)?.build.chroot.as_deref().ok_or_else(|| {
        let allowed: Vec<&str> = tracks
            .tracks
            .iter()
            .filter(|(_, t)| t.build.chroot.is_some())
            .map(|(name, _)| name.as_str())
            .collect();
        anyhow::anyhow!(
            "{}: tracks.{track}.build has no key 'chroot', so `test hip` cannot build it; `test hip --track` takes one of: {}",
            tracks_path.display(),
            allowed.join(", ")
        )
    })?;
    Ok(suite)
}

/// `test hip`: the Debian chroot of `track` (made when missing), `dist` of the track
/// for one target in it (the HIP build through `build`'s planner), `verify-package`, then
/// the unpacked package run inside the chroot (its binaries need that glibc): it must say
/// that no HIP device was found and still run VAD on the CPU.
fn hip_end_to_end(ctx: &RunContext, assets: &assets::Assets, track: &str) -> Result<()> {
    let suite = hip_test_chroot(ctx.tracks()?, ctx.tracks_path(), track)?;
    let t0 = std::time::Instant::now();
    crate::sdk::make_chroot(&crate::sdk::DebianArgs {
        suite: suite.into(),
        mirror: None,
        dry_run: false,
    })?;
    let t_chroot = t0.elapsed().as_secs_f64();
    let exe = std::env::current_exe()?.display().to_string();
    let in_chroot = |args: &[&str]| -> Result<()> {
        let mut argv = vec![exe.clone()];
        argv.extend(args.iter().map(|a| a.to_string()));
        let code = crate::sdk::run_in_chroot(suite, &argv)?;
        anyhow::ensure!(
            code == ExitCode::SUCCESS,
            "{args:?} failed in the {suite} chroot"
        );
        Ok(())
    };
    // `dist` builds through `build`'s planner and executor (the track's recipe, narrowed
    // to the test target) and packages what the build record lists.
    let chroot_target = crate::project::target_dir().join(format!("chroot-{suite}"));
    let out = chroot_target.join("dist-test");
    let out_arg = out.display().to_string();
    in_chroot(&[
        "dist",
        "--track",
        track,
        "--gpu-targets",
        HIP_TEST_TARGET,
        "--rocm-path",
        "/usr",
        "--out-dir",
        &out_arg,
    ])?;
    let t_build = t0.elapsed().as_secs_f64() - t_chroot;
    let zip = verified_zip(ctx, track, &out)?;
    let root = unzip(&zip, &out.join("unpacked"))?;
    let cli = root.join("audiocpp_cli").display().to_string();
    let log = out.join("run.log");
    let run = |args: &[&str]| -> Result<(bool, String)> {
        let mut argv = vec![
            "/bin/sh".to_string(),
            "-c".to_string(),
            format!("\"$@\" > {} 2>&1", log.display()),
            "sh".to_string(),
            cli.clone(),
        ];
        argv.extend(args.iter().map(|a| a.to_string()));
        let ok = crate::sdk::run_in_chroot(suite, &argv)? == ExitCode::SUCCESS;
        Ok((ok, std::fs::read_to_string(&log).unwrap_or_default()))
    };
    let (ok, devices) = run(&["--list-devices"])?;
    anyhow::ensure!(
        ok && devices.contains("device.cpu.0="),
        "--list-devices in the chroot: {devices}"
    );
    let vad = vad_args(assets);
    let mut hip_args: Vec<&str> = vad.iter().map(String::as_str).collect();
    hip_args.extend(["--backend", "hip"]);
    let (ok, hip) = run(&hip_args)?;
    anyhow::ensure!(
        !ok && hip.to_lowercase().contains("no hip device was found"),
        "--backend hip with no GPU must fail, saying no HIP device was found; got: {hip}"
    );
    let mut cpu_args: Vec<&str> = vad.iter().map(String::as_str).collect();
    cpu_args.extend(["--backend", "cpu"]);
    let (ok, cpu) = run(&cpu_args)?;
    anyhow::ensure!(
        ok && cpu.contains("segments=3") && cpu.contains("spec_source=embedded"),
        "--backend cpu VAD in the chroot: {cpu}"
    );
    eprintln!(
        "test: {track} ({HIP_TEST_TARGET}) chroot {t_chroot:.0} s, build and dist {t_build:.0} s, run {:.0} s; `--backend hip` said: {}",
        t0.elapsed().as_secs_f64() - t_chroot - t_build,
        hip.lines().last().unwrap_or("")
    );
    Ok(())
}

pub(crate) fn unzip(zip: &Path, into: &Path) -> Result<PathBuf> {
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

/// The phrase the espeak-ng clip `phrase_en_us.wav` says, which Whisper tiny.en must
/// transcribe exactly.
pub(crate) const PHRASE: &str = "Speech recognition in Rust is working today.";

/// Runs a packaged CLI with arguments and extra environment variables; its stdout.
type RunPackaged<'a> = dyn Fn(&[&str], &[(&str, &str)]) -> Result<String> + 'a;

/// Converts Whisper tiny.en (the CTranslate2 model of the assets) to a q8_0 GGUF at `out`
/// with a packaged CLI, `run` (which runs it with the given arguments and returns stdout,
/// failing on a non-zero exit); returns the GGUF's path as the CLI sees it (a Windows
/// CLI under Wine reads Unix paths too). Used by every packaged-CLI test, native and Wine.
pub(crate) fn convert_tiny_en(
    run: &dyn Fn(&[&str]) -> Result<String>,
    assets: &assets::Assets,
    out: &Path,
) -> Result<String> {
    let ct2 = assets.dir.join("whisper-tiny.en-ct2");
    let gguf = out.to_string_lossy().into_owned();
    run(&[
        "--task",
        "convert",
        "--family",
        "whisper",
        "--model",
        &ct2.to_string_lossy(),
        "--out",
        &gguf,
        "--quantize",
        "q8_0",
    ])?;
    Ok(gguf)
}

/// The CLI arguments that transcribe the phrase clip with the GGUF `gguf` (greedy).
pub(crate) fn phrase_asr_args(assets: &assets::Assets, gguf: &str) -> Vec<String> {
    let clip = assets.dir.join("clips-asr/phrase_en_us.wav");
    [
        "--task",
        "asr",
        "--family",
        "whisper",
        "--model",
        gguf,
        "--audio",
        &clip.to_string_lossy(),
        "--temperatures",
        "0",
    ]
    .map(str::to_string)
    .to_vec()
}

/// Whether a CLI's ASR stdout holds the phrase, exactly, as its `text=` line.
pub(crate) fn says_the_phrase(stdout: &str) -> bool {
    stdout.lines().any(|l| l == format!("text={PHRASE}"))
}

/// Converts Whisper tiny.en with a packaged CLI, `run_env` (which runs it with the given
/// arguments and environment and returns stdout), then transcribes the phrase clip with
/// it at each level of CPU kernels: the package's converter, the Whisper spec compiled
/// into it and its CPU kernels, as a user would run them. Returns the GGUF's path.
fn package_transcribes_the_phrase(
    run_env: &RunPackaged,
    assets: &assets::Assets,
    out: &Path,
) -> Result<String> {
    let gguf = convert_tiny_en(&|args| run_env(args, &[]), assets, out)?;
    let args = phrase_asr_args(assets, &gguf);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // The widest kernels this CPU has, then the AVX2 ones (what CPUs without AVX-512
    // run), then ggml's ops: the same phrase from each.
    for kernels in ["native", "avx2", "ggml"] {
        let env: &[(&str, &str)] = match kernels {
            "native" => &[],
            _ => &[("AUDIOCPP_CPU_KERNELS", kernels)],
        };
        let asr = run_env(&args, env)?;
        anyhow::ensure!(
            says_the_phrase(&asr),
            "the packaged CLI ({kernels} CPU kernels) did not transcribe the phrase exactly: {asr}"
        );
    }
    // Opus (what browsers record) goes through the libopus linked into the package: the
    // MinGW link once lacked libssp's stack-protector symbols.
    for name in ["phrase.opus", "phrase_opus.webm"] {
        let clip = crate::project::project_root()
            .join("test-support/fixtures/formats")
            .join(name);
        let mut args = args.clone();
        let at = args
            .iter()
            .position(|a| *a == "--audio")
            .expect("phrase args name --audio")
            + 1;
        let clip = clip.to_string_lossy();
        args[at] = &clip;
        let asr = run_env(&args, &[])?;
        let heard = asr
            .lines()
            .find_map(|l| l.strip_prefix("text="))
            .unwrap_or("");
        let said = words(PHRASE);
        let got = words(heard);
        let kept = said.iter().filter(|w| got.contains(w)).count();
        // At 24 kbit/s tiny.en may mishear a word ("rusted"): most words, not all.
        anyhow::ensure!(
            kept * 10 >= said.len() * 7,
            "the packaged CLI heard {name} as {heard:?}: {asr}"
        );
    }
    Ok(gguf)
}

/// The voice the packaged CLI speaks the phrase with (the bench's voice).
pub(crate) const PHRASE_VOICE: &str = "af_heart";

/// The words of a transcript, for comparing what Whisper heard with what was said:
/// lower case, punctuation dropped (Whisper chooses both itself).
pub(crate) fn words(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| {
            w.chars()
                .filter(|c| c.is_alphanumeric())
                .flat_map(char::to_lowercase)
                .collect::<String>()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// What users unzip the package for, above all: speech. With a packaged CLI, `run`,
/// converts the pinned Kokoro sources (the int8 ONNX, every voice, the vocabulary and
/// lexicons; the Kokoro spec compiled into the package) to a q8_0 GGUF in `out`, speaks
/// the phrase as text with [`PHRASE_VOICE`] into a WAV, and transcribes that WAV with the
/// package's own Whisper GGUF `whisper`: the phrase's words must come back, in order.
fn package_speaks_the_phrase(
    run: &dyn Fn(&[&str]) -> Result<String>,
    assets: &assets::Assets,
    out: &Path,
    whisper: &str,
) -> Result<()> {
    let src = assets.dir.join(assets::KOKORO_DIR);
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let gguf = path(&out.join("kokoro-q8_0.gguf"));
    run(&[
        "--task",
        "convert",
        "--family",
        "kokoro",
        "--model",
        &path(&src.join("kokoro.onnx")),
        "--voices",
        &path(&src.join("voices")),
        "--vocab",
        &path(&assets.dir.join(assets::KOKORO_VOCAB)),
        "--lexicons",
        &path(&assets.dir.join(assets::MISAKI_DIR)),
        "--out",
        &gguf,
        "--quantize",
        "q8_0",
    ])?;
    let wav = path(&out.join("phrase-kokoro.wav"));
    let _ = std::fs::remove_file(&wav);
    let tts = run(&[
        "--task",
        "tts",
        "--family",
        "kokoro",
        "--model",
        &gguf,
        "--text",
        PHRASE,
        "--voice",
        PHRASE_VOICE,
        "--out",
        &wav,
    ])?;
    let asr = run(&[
        "--task",
        "asr",
        "--family",
        "whisper",
        "--model",
        whisper,
        "--audio",
        &wav,
        "--temperatures",
        "0",
    ])?;
    let heard = asr
        .lines()
        .find_map(|l| l.strip_prefix("text="))
        .unwrap_or_default();
    anyhow::ensure!(
        words(heard) == words(PHRASE),
        "the packaged CLI spoke the phrase with Kokoro ({PHRASE_VOICE}), and its Whisper heard {heard:?} instead of {PHRASE:?}; tts said: {tts}"
    );
    Ok(())
}

/// The README's main command for real: `dist` for this host into a scratch folder,
/// `verify-package` on the zip, then unzip it elsewhere and run the CLI from an empty
/// working directory (`--version`, `--list-devices`, a VAD run whose spec must come from
/// the compiled-in catalog, a Whisper conversion and transcription, a Kokoro conversion
/// and the phrase spoken and heard back).
fn dist_end_to_end(ctx: &RunContext, assets: &assets::Assets) -> Result<()> {
    let out = crate::project::target_dir().join("dist-test");
    let zip = dist_track(ctx, crate::dist::host_track(), &out)?;
    let root = unzip(&zip, &out.join("unpacked"))?;
    let cli = root.join(format!("audiocpp_cli{}", std::env::consts::EXE_SUFFIX));
    let cwd = out.join("empty-cwd");
    std::fs::create_dir_all(&cwd)?;
    let run_env = |args: &[&str], env: &[(&str, &str)]| -> Result<String> {
        let o = Command::new(&cli)
            .args(args)
            .current_dir(&cwd)
            .env_remove("LD_LIBRARY_PATH")
            .envs(env.iter().copied())
            .output()?;
        anyhow::ensure!(
            o.status.success(),
            "{} {args:?} failed: {}",
            cli.display(),
            String::from_utf8_lossy(&o.stderr)
        );
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let run = |args: &[&str]| run_env(args, &[]);
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
    let whisper = package_transcribes_the_phrase(&run_env, assets, &out.join("tiny.en-q8_0.gguf"))?;
    package_speaks_the_phrase(&run, assets, &out, &whisper)?;
    if cfg!(target_os = "linux") {
        an_unloadable_backend_is_named(&cli, &cwd, &root, &out, assets)?;
    }
    eprintln!(
        "test: {} unpacked and ran from an empty directory (VAD, Whisper convert and ASR, Kokoro convert and TTS heard by Whisper)",
        zip.display()
    );
    Ok(())
}

/// A GPU backend library that sits in the package but cannot load (what a user who has
/// not copied in the SDK's hipBLASLt, or whose folder lost a file, has): a stand-in
/// `libggml-hip.so` importing a library that is not there, built with `cc` into the
/// unpacked package `root`. `--backend hip` must exit 2 naming the file and the missing
/// import (not "not included in this build"), `--list-devices` must name it as
/// unloadable with that reason, and the CPU must still run; the stand-in
/// is removed afterwards.
fn an_unloadable_backend_is_named(
    cli: &Path,
    cwd: &Path,
    root: &Path,
    out: &Path,
    assets: &assets::Assets,
) -> Result<()> {
    let scratch = out.join("unloadable-backend");
    std::fs::create_dir_all(&scratch)?;
    let c_file = |name: &str, text: &str| -> Result<PathBuf> {
        let path = scratch.join(name);
        std::fs::write(&path, text)?;
        Ok(path)
    };
    let missing_src = c_file(
        "missing.c",
        "int audiocpp_test_missing(void) { return 1; }\n",
    )?;
    let stand_in_src = c_file(
        "stand_in.c",
        "int audiocpp_test_missing(void);\nint ggml_backend_score(void) { return audiocpp_test_missing(); }\n",
    )?;
    let cc = |args: &[&std::ffi::OsStr]| -> Result<()> {
        let o = Command::new("cc")
            .args(args)
            .output()
            .context("running cc")?;
        anyhow::ensure!(
            o.status.success(),
            "cc {args:?} failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        Ok(())
    };
    let missing_lib = scratch.join("libaudiocpp_test_missing.so");
    cc(&[
        "-shared".as_ref(),
        "-fPIC".as_ref(),
        "-o".as_ref(),
        missing_lib.as_os_str(),
        missing_src.as_os_str(),
    ])?;
    let stand_in = root.join("libggml-hip.so");
    let lib_dir = format!("-L{}", scratch.display());
    cc(&[
        "-shared".as_ref(),
        "-fPIC".as_ref(),
        "-o".as_ref(),
        stand_in.as_os_str(),
        stand_in_src.as_os_str(),
        "-Wl,--no-as-needed".as_ref(),
        lib_dir.as_ref(),
        "-laudiocpp_test_missing".as_ref(),
    ])?;
    std::fs::remove_file(&missing_lib)?;
    let result = (|| -> Result<()> {
        let vad = vad_args(assets);
        let run = |backend: &str| -> Result<std::process::Output> {
            Ok(Command::new(cli)
                .args(&vad)
                .args(["--backend", backend])
                .current_dir(cwd)
                .env_remove("LD_LIBRARY_PATH")
                .output()?)
        };
        let hip = run("hip")?;
        let err = String::from_utf8_lossy(&hip.stderr);
        anyhow::ensure!(
            hip.status.code() == Some(2)
                && err.contains("HIP backend library libggml-hip.so is next to the executable but could not be loaded")
                && err.contains("libaudiocpp_test_missing.so")
                && err.contains("--backend"),
            "--backend hip with an unloadable libggml-hip.so must exit 2 naming the file and its missing import, got {:?}: {err}",
            hip.status.code()
        );
        let listed = Command::new(cli)
            .args(["--list-devices", "--json"])
            .current_dir(cwd)
            .env_remove("LD_LIBRARY_PATH")
            .output()?;
        let json: serde_json::Value =
            serde_json::from_slice(&listed.stdout).with_context(|| {
                format!(
                    "--list-devices --json next to an unloadable libggml-hip.so: {}",
                    String::from_utf8_lossy(&listed.stderr)
                )
            })?;
        let unloadable = &json["unloadable_backends"];
        anyhow::ensure!(
            listed.status.success()
                && unloadable.as_array().map(Vec::len) == Some(1)
                && unloadable[0]["backend"] == "hip"
                && unloadable[0]["file"] == "libggml-hip.so"
                && unloadable[0]["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("libaudiocpp_test_missing.so"))
                && unloadable[0]["advice"]
                    .as_str()
                    .is_some_and(|a| a.contains("set --backend to cpu")),
            "--list-devices must exit 0 and name libggml-hip.so as unloadable with its missing import, got {:?}: {unloadable}",
            listed.status.code()
        );
        let cpu = run("cpu")?;
        anyhow::ensure!(
            cpu.status.success() && String::from_utf8_lossy(&cpu.stdout).contains("segments=3"),
            "--backend cpu must still run next to an unloadable libggml-hip.so: {}",
            String::from_utf8_lossy(&cpu.stderr)
        );
        Ok(())
    })();
    std::fs::remove_file(&stand_in)?;
    result
}

/// The Windows package cross-built with MinGW, verified, unzipped and run under Wine
/// from an empty working directory (VAD, Whisper converted and transcribed with the
/// engine's CPU kernels, Kokoro converted and the phrase spoken and heard back), after
/// `verify-package` passed on it (which reads back that the MinGW runtime has no debug
/// sections and the executables no symbol table); then one runtime DLL is removed and both
/// `verify-package` and Wine (exit code 53) must notice.
fn windows_end_to_end(ctx: &RunContext, assets: &assets::Assets) -> Result<()> {
    let track = "windows-cpu-gnu";
    let out = crate::project::target_dir().join("dist-test");
    let zip = dist_track(ctx, track, &out)?;
    let root = unzip(&zip, &out.join("unpacked-windows"))?;
    // The link's clock left out: the same sources give the same executables.
    for exe in ["audiocpp_cli.exe", "audiocpp_server.exe"] {
        let header = crate::pe_header::PeHeader::read(&std::fs::read(root.join(exe))?, exe)?
            .with_context(|| format!("{exe} is not a PE file"))?;
        anyhow::ensure!(
            header.time_date_stamp.to_string() == crate::build::plan::MINGW_LINK_TIME,
            "{exe} is stamped {}, not the fixed link time {} that the build plan gives \
             MinGW's ld through SOURCE_DATE_EPOCH",
            header.time_date_stamp,
            crate::build::plan::MINGW_LINK_TIME
        );
    }
    let wine = crate::wine::Wine::prepare()?;
    let cwd = out.join("empty-cwd-windows");
    let cli = root.join("audiocpp_cli.exe");
    let result = (|| -> Result<()> {
        let run_env = |args: &[&str], env: &[(&str, &str)]| -> Result<String> {
            let o = wine.run_env(&cli, args, &cwd, env)?;
            anyhow::ensure!(
                o.status.success(),
                "wine {} {args:?} exited {:?}: {}",
                cli.display(),
                o.status.code(),
                String::from_utf8_lossy(&o.stderr)
            );
            Ok(String::from_utf8_lossy(&o.stdout).into_owned())
        };
        let run = |args: &[&str]| run_env(args, &[]);
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
        let whisper =
            package_transcribes_the_phrase(&run_env, assets, &out.join("tiny.en-q8_0-wine.gguf"))?;
        package_speaks_the_phrase(&run, assets, &out.join("wine-kokoro"), &whisper)?;

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
        let problems = crate::verify_package::verify(ctx, &broken, Some(track))?;
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
        "test: {} ran under Wine (VAD, Whisper convert and ASR, Kokoro convert and TTS heard by Whisper); a removed runtime DLL was caught by verify-package and Wine",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_model_in_the_tests_temporary_folder_is_named_and_small_leftovers_pass() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cc0Nhlpk"), b"").unwrap();
        let kept = dir.path().join(".tmpAbc123");
        std::fs::create_dir(&kept).unwrap();
        std::fs::write(kept.join("whisper-base.gguf"), vec![0u8; 3000]).unwrap();
        let left = left_behind(dir.path()).unwrap();
        assert_eq!(
            left,
            [
                (".tmpAbc123".to_string(), 3000),
                ("cc0Nhlpk".to_string(), 0)
            ]
        );
        assert_eq!(too_much_left(&left, 3000), None);
        let problem = too_much_left(&left, 2999).unwrap();
        assert!(
            problem.starts_with("the tests left 3000 bytes in 2 entries, more than 2999: .tmpAbc123 (3000 bytes), cc0Nhlpk (0 bytes)."),
            "{problem}"
        );
        assert!(problem.contains("CARGO_TARGET_TMPDIR"), "{problem}");
    }

    #[test]
    fn each_linux_hip_track_builds_in_a_debian_suite_that_exists() {
        let path = crate::tracks::TracksFile::default_path();
        let tracks = crate::tracks::TracksFile::load(&path).unwrap();
        let spec = crate::sdk::DebianSpec::load(&crate::sdk::DebianSpec::default_path()).unwrap();
        assert_eq!(
            hip_test_chroot(&tracks, &path, "linux-hip-rocm6").unwrap(),
            "sid"
        );
        assert_eq!(
            hip_test_chroot(&tracks, &path, "linux-hip-rocm7").unwrap(),
            "experimental"
        );
        assert_eq!(
            default_hip_test_track(&tracks, &path).unwrap(),
            "linux-hip-rocm6"
        );
        for (name, track) in &tracks.tracks {
            if let Some(suite) = &track.build.chroot {
                assert!(
                    spec.suites.contains_key(suite),
                    "tracks.{name}.build.chroot '{suite}' is no suite of packaging/sdk/debian.toml"
                );
            }
        }
    }

    #[test]
    fn a_track_without_a_chroot_is_refused_naming_the_key_and_the_choices() {
        let path = crate::tracks::TracksFile::default_path();
        let tracks = crate::tracks::TracksFile::load(&path).unwrap();
        let e = hip_test_chroot(&tracks, &path, "linux-cpu")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("tracks.linux-cpu.build has no key 'chroot'"),
            "{e}"
        );
        assert!(e.contains("tracks.toml"), "{e}");
        assert!(
            e.ends_with("one of: linux-hip-rocm6, linux-hip-rocm7"),
            "{e}"
        );
    }
}
