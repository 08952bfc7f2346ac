//! The Vulkan packages end to end on Mesa's lavapipe (Vulkan 1.3 on the CPU), for `cargo
//! xtask test vulkan` (`linux-vulkan` natively) and `test cross-vulkan` (`windows-vulkan-gnu`
//! under Wine with an Xvfb display: winevulkan reaches the host's Vulkan loader only
//! through an X display).
//!
//! Each run packages the track (`dist`, then `verify-package`), unzips it and runs its CLI
//! from an empty folder: `--list-devices` must name lavapipe as a hidden CPU-type device and
//! how to show it; with `GGML_VK_VISIBLE_DEVICES=0` it must list it as `device.vulkan.0`,
//! and VAD, ASR and TTS on `--backend vulkan` must match the CPU backend within the bounds
//! below; with no usable Vulkan driver, `--backend best` must run on the CPU after exactly
//! one `warning:` line. lavapipe is slow (Whisper tiny.en in minutes the first time, while
//! Mesa compiles ggml's shaders), so the inputs are the smallest the package tests use:
//! the 3-segment VAD clip, the phrase clip and one sentence of speech.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};

use crate::assets::{self, Assets};
use crate::context::RunContext;
use crate::test::{phrase_asr_args, says_the_phrase, PHRASE};

/// The largest difference allowed between a speech probability of Silero VAD on lavapipe
/// and on the CPU backend, per 32 ms window (ggml-vulkan computes in f32, in another
/// order). The segments must be identical.
pub const VAD_MAX_PROBABILITY_DIFF: f32 = 0.02;

/// The most the length of Kokoro's speech on lavapipe may differ from the CPU backend's,
/// as a fraction: durations are rounded sums of sigmoids, and a value near .5 may round
/// the other way on another backend, one 25 ms frame per token at most.
pub const TTS_MAX_LENGTH_DIFF: f64 = 0.05;

/// Where the CLI runs: natively, or under Wine with a display.
pub enum Host<'a> {
    /// This Linux machine.
    Native,
    /// Wine, with `DISPLAY` of an Xvfb server.
    Wine {
        /// The prefix.
        wine: &'a crate::wine::Wine,
        /// `:N` of the Xvfb server.
        display: &'a str,
    },
}

/// One CLI run's result.
pub struct Ran {
    /// Exit code (None: killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Ran {
    fn of(o: Output) -> Ran {
        Ran {
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    fn ok(self, what: &str) -> Result<String> {
        ensure!(
            self.code == Some(0),
            "{what} exited {:?}: {}{}",
            self.code,
            self.stderr,
            self.stdout
        );
        Ok(self.stdout)
    }
}

/// Timings of one package's run, for the report line.
#[derive(Debug, Default)]
pub struct Times {
    /// Seconds of each step, in order.
    pub steps: Vec<(String, f64)>,
}

impl Times {
    fn line(&self) -> String {
        self.steps
            .iter()
            .map(|(s, t)| format!("{s} {t:.0} s"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// An Xvfb server on a free display, stopped on drop.
pub struct Xvfb {
    child: Child,
    /// `:N`.
    pub display: String,
}

impl Xvfb {
    /// Starts Xvfb on the first free display from :90 and waits for its socket.
    pub fn start() -> Result<Xvfb> {
        let n = (90..190)
            .find(|n| {
                !Path::new(&format!("/tmp/.X11-unix/X{n}")).exists()
                    && !Path::new(&format!("/tmp/.X{n}-lock")).exists()
            })
            .context("no free X display between :90 and :189")?;
        let display = format!(":{n}");
        let child = Command::new("Xvfb")
            .args([
                display.as_str(),
                "-nolisten",
                "tcp",
                "-screen",
                "0",
                "640x480x24",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("starting Xvfb (apt-get install xvfb, or `cargo xtask setup --for test`)")?;
        let mut x = Xvfb { child, display };
        let socket = PathBuf::from(format!("/tmp/.X11-unix/X{n}"));
        let t = Instant::now();
        while !socket.exists() {
            if let Some(st) = x.child.try_wait()? {
                bail!("Xvfb {} exited at start ({st})", x.display);
            }
            if t.elapsed().as_secs() > 30 {
                bail!("Xvfb {} made no socket in 30 s", x.display);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Ok(x)
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the package's CLI `cli` on `host` from `cwd` with `args` and `env`.
fn run(host: &Host, cli: &Path, cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<Ran> {
    std::fs::create_dir_all(cwd)?;
    let out = match host {
        Host::Native => Command::new(cli)
            .args(args)
            .current_dir(cwd)
            .env_remove("LD_LIBRARY_PATH")
            .envs(env.iter().copied())
            .output()
            .with_context(|| format!("running {}", cli.display()))?,
        Host::Wine { wine, display } => {
            let mut all: Vec<(&str, &str)> = vec![("DISPLAY", display)];
            all.extend(env.iter().copied());
            wine.run_env(cli, args, cwd, &all)?
        }
    };
    Ok(Ran::of(out))
}

/// `GGML_VK_VISIBLE_DEVICES=0`: lavapipe, which ggml hides as a CPU-type device, shown.
const SHOW_LAVAPIPE: (&str, &str) = ("GGML_VK_VISIBLE_DEVICES", "0");

/// The speech probabilities of a `--task vad --json` run.
fn probabilities(json: &str) -> Result<(Vec<f32>, serde_json::Value)> {
    let v: serde_json::Value = serde_json::from_str(json).context("VAD --json output")?;
    let p = v["probabilities"]
        .as_array()
        .context("no probabilities in the VAD output")?
        .iter()
        .map(|x| x.as_f64().unwrap_or(f64::NAN) as f32)
        .collect();
    Ok((p, v["segments"].clone()))
}

/// The largest absolute difference of two equally long series (None when the lengths differ).
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> Option<f32> {
    (a.len() == b.len()).then(|| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max)
    })
}

/// The value of `key=` in a CLI's `key=value` output.
fn value<'a>(stdout: &'a str, key: &str) -> Option<&'a str> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}

/// Packages `track`, unzips it and runs the whole check on `host`. Returns the zip.
pub fn package_on_lavapipe(
    ctx: &RunContext,
    assets: &Assets,
    track: &str,
    host: &Host,
) -> Result<PathBuf> {
    let t0 = Instant::now();
    let mut times = Times::default();
    let out = crate::project::target_dir().join("dist-test");
    let zip = crate::test::dist_track(ctx, track, &out)?;
    times
        .steps
        .push(("dist".into(), t0.elapsed().as_secs_f64()));
    let root = crate::test::unzip(&zip, &out.join(format!("unpacked-{track}")))?;
    let tracks = ctx.tracks()?;
    let exe = tracks
        .track(track)?
        .executables
        .iter()
        .find(|e| e.starts_with("audiocpp_cli"))
        .with_context(|| format!("track {track} ships no audiocpp_cli"))?;
    let cli = root.join(exe);
    let cwd = out.join(format!("empty-cwd-{track}"));
    let scratch = out.join(format!("lavapipe-{track}"));
    std::fs::create_dir_all(&scratch)?;
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let step = |times: &mut Times, what: &str, t: Instant| {
        times
            .steps
            .push((what.to_string(), t.elapsed().as_secs_f64()));
    };

    // Devices: lavapipe is hidden (CPU type), with the reason and the way to show it.
    let t = Instant::now();
    let listed = run(host, &cli, &cwd, &["--list-devices"], &[])?.ok("--list-devices")?;
    let hidden = listed
        .lines()
        .find(|l| l.starts_with("unloadable.vulkan="))
        .with_context(|| format!("--list-devices must say why lavapipe is not listed: {listed}"))?;
    ensure!(
        hidden.contains("CPU type")
            && hidden.contains("llvmpipe")
            && hidden.contains("GGML_VK_VISIBLE_DEVICES=0"),
        "--list-devices must name the hidden CPU-type device and how to show it: {hidden}"
    );
    let shown = run(host, &cli, &cwd, &["--list-devices"], &[SHOW_LAVAPIPE])?
        .ok("--list-devices with GGML_VK_VISIBLE_DEVICES=0")?;
    ensure!(
        shown
            .lines()
            .any(|l| l.starts_with("device.vulkan.0=") && l.contains("llvmpipe")),
        "with GGML_VK_VISIBLE_DEVICES=0, --list-devices must list lavapipe as device.vulkan.0: {shown}"
    );
    let model = path(&assets.dir.join("ggml-silero-v6.2.0.bin"));
    let clip = path(&assets.dir.join("clips/speech_gaps.wav"));
    let refused = run(
        host,
        &cli,
        &cwd,
        &vad_args(&model, &clip, "vulkan", false),
        &[],
    )?;
    ensure!(
        refused.code == Some(2) && refused.stderr.contains("GGML_VK_VISIBLE_DEVICES=0"),
        "--backend vulkan with lavapipe hidden must exit 2 saying how to show it, got {:?}: {}",
        refused.code,
        refused.stderr
    );
    step(&mut times, "devices", t);

    // VAD: identical segments, probabilities within the bound.
    let t = Instant::now();
    let vad = |backend: &str, env: &[(&str, &str)]| -> Result<String> {
        run(
            host,
            &cli,
            &cwd,
            &vad_args(&model, &clip, backend, true),
            env,
        )?
        .ok(&format!("VAD on {backend}"))
    };
    let (p_cpu, seg_cpu) = probabilities(&vad("cpu", &[])?)?;
    let vk_json = vad("vulkan", &[SHOW_LAVAPIPE])?;
    let (p_vk, seg_vk) = probabilities(&vk_json)?;
    ensure!(
        vk_json.contains("Vulkan0") || vk_json.contains("llvmpipe"),
        "VAD --backend vulkan did not run on lavapipe: {vk_json}"
    );
    let dp = max_abs_diff(&p_cpu, &p_vk).with_context(|| {
        format!(
            "VAD on Vulkan gave {} probabilities, on the CPU {}",
            p_vk.len(),
            p_cpu.len()
        )
    })?;
    ensure!(
        seg_cpu == seg_vk && seg_vk.as_array().map(Vec::len) == Some(3),
        "VAD segments on Vulkan {seg_vk} differ from the CPU's {seg_cpu}"
    );
    ensure!(
        dp <= VAD_MAX_PROBABILITY_DIFF,
        "VAD probabilities on Vulkan differ from the CPU's by up to {dp} (bound {VAD_MAX_PROBABILITY_DIFF})"
    );
    step(&mut times, "VAD", t);

    // ASR: tiny.en q8_0 converted by the package, the phrase exactly on both backends.
    let t = Instant::now();
    let gguf = crate::test::convert_tiny_en(
        &|args| run(host, &cli, &cwd, args, &[])?.ok("converting Whisper"),
        assets,
        &scratch.join("tiny.en-q8_0.gguf"),
    )?;
    let asr_args = phrase_asr_args(assets, &gguf);
    let mut on_vk: Vec<&str> = asr_args.iter().map(String::as_str).collect();
    on_vk.extend(["--backend", "vulkan"]);
    let asr_vk = run(host, &cli, &cwd, &on_vk, &[SHOW_LAVAPIPE])?.ok("ASR on Vulkan")?;
    ensure!(
        says_the_phrase(&asr_vk),
        "Whisper tiny.en on lavapipe did not transcribe {PHRASE:?} exactly: {asr_vk}"
    );
    step(&mut times, "ASR", t);

    // TTS: one sentence with Kokoro f16 on Vulkan and on the CPU; Whisper (on the CPU)
    // must hear the sentence in the Vulkan speech, and its length must match the CPU's.
    let t = Instant::now();
    let src = assets.dir.join(assets::KOKORO_DIR);
    let kokoro = path(&scratch.join("kokoro-f16.gguf"));
    run(
        host,
        &cli,
        &cwd,
        &[
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
            &kokoro,
            "--quantize",
            "f16",
        ],
        &[],
    )?
    .ok("converting Kokoro")?;
    let speak = |backend: &str, env: &[(&str, &str)]| -> Result<(String, f64)> {
        let wav = path(&scratch.join(format!("phrase-{backend}.wav")));
        let _ = std::fs::remove_file(&wav);
        let o = run(
            host,
            &cli,
            &cwd,
            &[
                "--task",
                "tts",
                "--family",
                "kokoro",
                "--model",
                &kokoro,
                "--text",
                PHRASE,
                "--voice",
                crate::test::PHRASE_VOICE,
                "--out",
                &wav,
                "--backend",
                backend,
            ],
            env,
        )?
        .ok(&format!("TTS on {backend}"))?;
        let secs = value(&o, "audio_seconds")
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("no audio_seconds in the TTS output: {o}"))?;
        Ok((wav, secs))
    };
    let (_, secs_cpu) = speak("cpu", &[])?;
    let (wav_vk, secs_vk) = speak("vulkan", &[SHOW_LAVAPIPE])?;
    let heard = run(
        host,
        &cli,
        &cwd,
        &[
            "--task",
            "asr",
            "--family",
            "whisper",
            "--model",
            &gguf,
            "--audio",
            &wav_vk,
            "--temperatures",
            "0",
        ],
        &[],
    )?
    .ok("ASR of the Vulkan speech")?;
    let text = value(&heard, "text").unwrap_or_default();
    ensure!(
        crate::test::words(text) == crate::test::words(PHRASE),
        "Kokoro on lavapipe said {PHRASE:?}, and Whisper heard {text:?}"
    );
    let rel = (secs_vk - secs_cpu).abs() / secs_cpu.max(1e-9);
    ensure!(
        rel <= TTS_MAX_LENGTH_DIFF,
        "Kokoro's speech is {secs_vk:.3} s on Vulkan and {secs_cpu:.3} s on the CPU ({:.1} % apart, bound {:.0} %)",
        rel * 100.0,
        TTS_MAX_LENGTH_DIFF * 100.0
    );
    step(&mut times, "TTS", t);

    // A Vulkan backend that cannot start: best runs on the CPU after one warning.
    let t = Instant::now();
    let no_driver: Vec<(&str, &str)> = match host {
        // No ICD: the loader finds no driver and vkCreateInstance fails.
        Host::Native => vec![
            ("VK_ICD_FILENAMES", "/nonexistent/no-icd.json"),
            SHOW_LAVAPIPE,
        ],
        // No display: winevulkan cannot create an instance.
        Host::Wine { .. } => vec![("DISPLAY", ""), SHOW_LAVAPIPE],
    };
    let best = run(
        host,
        &cli,
        &cwd,
        &vad_args(&model, &clip, "best", false),
        &no_driver,
    )?;
    let warnings: Vec<&str> = best
        .stderr
        .lines()
        .filter(|l| l.starts_with("warning:"))
        .collect();
    ensure!(
        best.code == Some(0)
            && value(&best.stdout, "segments") == Some("3")
            && warnings.len() == 1
            && warnings[0].contains("Vulkan")
            && warnings[0].contains("runs on the CPU instead"),
        "--backend best with no Vulkan driver must run VAD on the CPU after one warning line, got {:?}: {}{}",
        best.code,
        best.stderr,
        best.stdout
    );
    step(&mut times, "best without a driver", t);
    eprintln!(
        "test: {} on lavapipe ({}): VAD segments identical, max |dp| {dp:.2e}; ASR exact; TTS heard back, {secs_vk:.2} s vs {secs_cpu:.2} s on the CPU; {}",
        zip.display(),
        match host {
            Host::Native => "native",
            Host::Wine { .. } => "Wine + Xvfb",
        },
        times.line()
    );
    Ok(zip)
}

/// The Linux Vulkan track, run natively.
pub const LINUX_TRACK: &str = "linux-vulkan";
/// The Windows Vulkan track, run under Wine.
pub const WINDOWS_TRACK: &str = "windows-vulkan-gnu";

/// [`LINUX_TRACK`] natively on lavapipe.
pub fn linux_end_to_end(ctx: &RunContext, assets: &Assets) -> Result<()> {
    package_on_lavapipe(ctx, assets, LINUX_TRACK, &Host::Native).map(|_| ())
}

/// [`WINDOWS_TRACK`] under Wine, with an Xvfb display, on lavapipe.
pub fn windows_end_to_end(ctx: &RunContext, assets: &Assets) -> Result<()> {
    let wine = crate::wine::Wine::prepare()?;
    let x = Xvfb::start()?;
    let result = package_on_lavapipe(
        ctx,
        assets,
        WINDOWS_TRACK,
        &Host::Wine {
            wine: &wine,
            display: &x.display,
        },
    );
    wine.shutdown();
    drop(x);
    result.map(|_| ())
}

/// The CLI's arguments for Silero VAD of `clip` with `model` on `backend`, the report
/// as JSON or as lines.
fn vad_args<'a>(model: &'a str, clip: &'a str, backend: &'a str, json: bool) -> Vec<&'a str> {
    let mut args = vec![
        "--task",
        "vad",
        "--family",
        "silero_vad",
        "--model",
        model,
        "--audio",
        clip,
        "--backend",
        backend,
    ];
    if json {
        args.push("--json");
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_are_taken_over_equal_lengths_only() {
        assert_eq!(max_abs_diff(&[0.1, 0.5], &[0.1, 0.45]), Some(0.5 - 0.45));
        assert_eq!(max_abs_diff(&[0.1], &[0.1, 0.2]), None);
        assert_eq!(value("a=1\nb=two\n", "b"), Some("two"));
        assert_eq!(value("ab=1\n", "a"), None);
    }
}
