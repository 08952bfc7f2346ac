//! `cargo xtask test --winhip`: the Windows HIP package cross-built here (one command,
//! `dist --track windows-hip-rocm7-gnu`, which enters its chroot), `verify-package` on the
//! zip, then the unpacked package under Wine from an empty folder, against AMD's real HIP
//! runtime with no GPU: `--list-devices` lists the CPU and says that the HIP backend found
//! no device; `--backend hip` exits 2 with that reason; `--backend cpu` transcribes the
//! phrase exactly; without the GEMM DLL the HIP backend is reported as not loadable and the
//! CPU still runs. The package has no hipBLASLt (it comes only from a Windows SDK), so a
//! clearly marked test-only stand-in `libhipblaslt.dll` (every entry fails) goes into the
//! unpacked test folder only, never into a package.

use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{ensure, Context, Result};

use crate::assets::Assets;

/// The track this test builds.
pub const TRACK: &str = "windows-hip-rocm7-gnu";

/// The exported names of the stand-in: those of the import library the build made.
fn stand_in_source(def: &str) -> String {
    let mut c = String::from(
        "/* TEST-ONLY stand-in for libhipblaslt.dll, written by `cargo xtask test --winhip` into\n   the unpacked test folder only; never part of a package. Every entry fails with\n   HIPBLAS_STATUS_NOT_INITIALIZED (1). */\n__declspec(dllexport) int audiocpp_test_only_stand_in(void) { return 1; }\n",
    );
    for name in def
        .lines()
        .skip_while(|l| l.trim() != "EXPORTS")
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.is_empty())
    {
        c.push_str(&format!(
            "__declspec(dllexport) int {name}(void) {{ return 1; }}\n"
        ));
    }
    c
}

/// Builds the stand-in from the chroot's hipBLASLt definition file into `dest`.
fn build_stand_in(def_path: &Path, dest: &Path) -> Result<()> {
    let def = std::fs::read_to_string(def_path)
        .with_context(|| format!("reading {} (made by the build)", def_path.display()))?;
    let src = dest.with_extension("c");
    std::fs::write(&src, stand_in_source(&def))?;
    let st = Command::new("x86_64-w64-mingw32-gcc")
        .args(["-shared", "-O2", "-o"])
        .arg(dest)
        .arg(&src)
        .status()
        .context("x86_64-w64-mingw32-gcc is needed: apt-get install gcc-mingw-w64-x86-64")?;
    ensure!(
        st.success(),
        "building the test-only hipBLASLt stand-in failed"
    );
    std::fs::remove_file(&src)?;
    Ok(())
}

/// Runs the test; `assets` are the pinned test assets.
pub fn run(assets: &Assets) -> Result<()> {
    let t0 = Instant::now();
    let out = crate::project::target_dir().join("dist-test-winhip");
    let zip = crate::test::dist_track(TRACK, &out)?;
    let t_dist = t0.elapsed().as_secs_f64();
    let root = crate::test::unzip(&zip, &out.join("unpacked"))?;
    for name in std::fs::read_dir(&root)?.flatten().map(|e| e.file_name()) {
        let n = name.to_string_lossy().to_lowercase();
        ensure!(
            !n.contains("hipblas"),
            "the package itself carries {n}: hipBLASLt comes only from a Windows SDK"
        );
    }
    let chroot = crate::sdk::chroot_dir(&crate::project::target_dir(), "winhip");
    let def = chroot.join("opt/winhip/implibs/libhipblaslt.dll.def");
    let stand_in = root.join("libhipblaslt.dll");
    build_stand_in(&def, &stand_in)?;
    let wine = crate::wine::Wine::prepare()?;
    let cwd = out.join("empty-cwd");
    let cli = root.join("audiocpp_cli.exe");
    let result = (|| -> Result<String> {
        let run = |args: &[&str]| -> Result<(Option<i32>, String, String)> {
            let o = wine.run(&cli, args, &cwd)?;
            Ok((
                o.status.code(),
                String::from_utf8_lossy(&o.stdout).into_owned(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            ))
        };
        let (code, devices, err) = run(&["--list-devices"])?;
        ensure!(
            code == Some(0) && devices.contains("device.cpu.0="),
            "--list-devices under Wine exited {code:?}: {devices}{err}"
        );
        let no_device: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("no ROCm-capable device"))
            .collect();
        ensure!(no_device.len() == 1, "--list-devices must say in one line that the HIP backend found no device; stderr: {err}");
        let ct2 = assets.dir.join("whisper-tiny.en-ct2").display().to_string();
        let gguf = out.join("tiny.en-q8_0.gguf").display().to_string();
        let (code, _, err) = run(&[
            "--task",
            "convert",
            "--family",
            "whisper",
            "--model",
            &ct2,
            "--out",
            &gguf,
            "--quantize",
            "q8_0",
        ])?;
        ensure!(code == Some(0), "convert under Wine exited {code:?}: {err}");
        let clip = assets
            .dir
            .join("clips-asr/phrase_en_us.wav")
            .display()
            .to_string();
        let asr = |backend: &str| {
            run(&[
                "--task",
                "asr",
                "--family",
                "whisper",
                "--model",
                &gguf,
                "--audio",
                &clip,
                "--temperatures",
                "0",
                "--backend",
                backend,
            ])
        };
        let (code, _, hip_err) = asr("hip")?;
        ensure!(
            code == Some(2),
            "--backend hip with no GPU must exit 2, got {code:?}: {hip_err}"
        );
        ensure!(
            hip_err.to_lowercase().contains("no hip device was found"),
            "--backend hip must say that no HIP device was found: {hip_err}"
        );
        let (code, text, err) = asr("cpu")?;
        ensure!(
            code == Some(0)
                && text
                    .lines()
                    .any(|l| l == format!("text={}", crate::test::PHRASE)),
            "--backend cpu ASR under Wine exited {code:?}: {text}{err}"
        );

        std::fs::remove_file(&stand_in)?;
        let (code, devices, err) = run(&["--list-devices"])?;
        ensure!(
            code == Some(0) && devices.contains("device.cpu.0="),
            "without libhipblaslt.dll the CPU must still be listed: {devices}{err}"
        );
        ensure!(
            err.contains("warning: a ggml backend failed to load"),
            "without libhipblaslt.dll the HIP backend must be reported as not loadable: {err}"
        );
        let (code, text, err) = asr("cpu")?;
        ensure!(
            code == Some(0)
                && text
                    .lines()
                    .any(|l| l == format!("text={}", crate::test::PHRASE)),
            "without libhipblaslt.dll --backend cpu must still transcribe: {text}{err}"
        );
        Ok(format!(
            "{}; {}",
            no_device[0].trim(),
            hip_err.lines().last().unwrap_or("").trim()
        ))
    })();
    wine.shutdown();
    let said = result?;
    eprintln!(
        "test: {TRACK} built and packaged in {t_dist:.0} s, ran under Wine in {:.0} s; it said: {said}",
        t0.elapsed().as_secs_f64() - t_dist
    );
    Ok(())
}

/// `test --winhip` as a verb step.
pub fn run_verb(assets: &Assets) -> Result<ExitCode> {
    run(assets).context("the Windows HIP package cross-built, packaged and run under Wine")?;
    eprintln!("test: Windows HIP package test passed");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stand_in_exports_every_name_of_the_definition_and_says_what_it_is() {
        let c = stand_in_source(
            "LIBRARY libhipblaslt.dll\nEXPORTS\nhipblasLtCreate\nhipblasLtMatmul\n",
        );
        assert!(c.starts_with("/* TEST-ONLY stand-in"));
        assert!(c.contains("int hipblasLtCreate(void) { return 1; }"));
        assert!(c.contains("int hipblasLtMatmul(void) { return 1; }"));
        assert!(!c.contains("int LIBRARY"));
    }
}
