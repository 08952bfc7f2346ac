//! Every bad input gets one clear line, exit code 2, no panic and no partial output.

mod common;
use common::*;

#[test]
fn missing_model_file() {
    let run = cli(&vad_args("/nonexistent/model.bin", "/nonexistent/a.wav"));
    assert_user_error(&run, "--model '/nonexistent/model.bin' does not exist");
}

#[test]
fn missing_audio_file() {
    let run = cli(&vad_args(s(&silero_bin()), "/nonexistent/a.wav"));
    assert_user_error(&run, "--audio '/nonexistent/a.wav' does not exist");
}

#[test]
fn unknown_family() {
    let run = cli(&[
        "--task",
        "vad",
        "--family",
        "whisperx",
        "--model",
        s(&silero_bin()),
        "--audio",
        "x.wav",
    ]);
    assert_user_error(
        &run,
        "unknown model family 'whisperx' (known: silero_vad, whisper)",
    );
}

#[test]
fn truncated_model() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(silero_bin()).unwrap();
    for cut in [3usize, 50, 106 + 30, 500_000] {
        let p = dir.path().join(format!("cut{cut}.bin"));
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let run = cli(&[
            &vad_args(s(&p), s(&clip("silence.wav")))[..],
            &["--model-spec-override", s(&specs())],
        ]
        .concat());
        assert_user_error(&run, "invalid model file");
    }
}

#[test]
fn corrupt_model_and_corrupt_gguf() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.bin");
    std::fs::write(&garbage, vec![0x5au8; 4096]).unwrap();
    let run = cli(&[
        &vad_args(s(&garbage), s(&clip("silence.wav")))[..],
        &["--model-spec-override", s(&specs())],
    ]
    .concat());
    assert_user_error(&run, "unknown format");
    let gguf = dir.path().join("bad.gguf");
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend([0xffu8; 64]);
    std::fs::write(&gguf, b).unwrap();
    let run = cli(&[
        &vad_args(s(&gguf), s(&clip("silence.wav")))[..],
        &["--model-spec-override", s(&specs())],
    ]
    .concat());
    assert_user_error(&run, "invalid model file");
}

#[test]
fn not_audio_and_no_partial_chunks_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.wav");
    std::fs::write(&text, "these are notes, not audio").unwrap();
    let chunks = dir.path().join("chunks.json");
    let run = cli(&[
        &vad_args(s(&silero_bin()), s(&text))[..],
        &[
            "--model-spec-override",
            s(&specs()),
            "--vad-chunks-out",
            s(&chunks),
        ],
    ]
    .concat());
    assert_user_error(&run, "cannot decode audio");
    assert!(!chunks.exists(), "no output file on failure");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "nothing else written"
    );
}

#[test]
fn unknown_flag_and_missing_task() {
    let run = cli(&["--frobnicate"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("unexpected argument '--frobnicate'"),
        "{}",
        run.stderr
    );
    let run = cli(&["--family", "silero_vad"]);
    assert_user_error(&run, "--task is required");
    let run = cli(&[
        "--task",
        "dance",
        "--family",
        "silero_vad",
        "--model",
        s(&silero_bin()),
    ]);
    assert_user_error(&run, "unknown task 'dance'");
}

#[test]
fn backend_not_in_this_build() {
    for spelling in ["hip", "rocm"] {
        let run = cli(&[
            &vad_args(s(&silero_bin()), s(&clip("silence.wav")))[..],
            &["--backend", spelling, "--model-spec-override", s(&specs())],
        ]
        .concat());
        assert_user_error(
            &run,
            "HIP backend requested but it is not included in this build (available: cpu)",
        );
    }
    let run = cli(&[
        &vad_args(s(&silero_bin()), s(&clip("silence.wav")))[..],
        &["--backend", "cuda", "--model-spec-override", s(&specs())],
    ]
    .concat());
    assert_user_error(
        &run,
        "CUDA backend requested but it is not included in this build (available: cpu)",
    );
    let run = cli(&[
        &vad_args(s(&silero_bin()), s(&clip("silence.wav")))[..],
        &["--backend", "tpu"],
    ]
    .concat());
    assert_user_error(&run, "unknown backend 'tpu'");
    let run = cli(&[
        &vad_args(s(&silero_bin()), s(&clip("silence.wav")))[..],
        &["--device", "7", "--model-spec-override", s(&specs())],
    ]
    .concat());
    assert_user_error(&run, "--device 7 does not exist");
}

#[test]
fn spec_not_found_names_every_remedy() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.bin");
    std::fs::copy(silero_bin(), &model).unwrap();
    let run = cli_in(dir.path(), &vad_args(s(&model), s(&clip("silence.wav"))));
    assert_user_error(&run, "model spec not found for family 'silero_vad'");
    for remedy in [
        "--model-spec-override",
        "GGUF",
        "deployment",
        "model_specs/silero_vad.json",
    ] {
        assert!(run.stderr.contains(remedy), "{remedy}: {}", run.stderr);
    }
}

#[test]
fn failed_convert_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.bin");
    std::fs::write(&bad, b"lmgg\x0a\0\0\0silero-16k\x06\0\0\0").unwrap();
    let out = dir.path().join("out.gguf");
    let run = cli(&[
        "--task",
        "convert",
        "--family",
        "silero_vad",
        "--model",
        s(&bad),
        "--out",
        s(&out),
        "--model-spec-override",
        s(&specs()),
    ]);
    assert_user_error(&run, "truncated");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "only the input remains"
    );
}

#[test]
fn list_devices_names_the_cpu_kernels_and_the_switch_changes_them() {
    let kernels = |env: &[(&str, &str)]| {
        let dir = tempfile::tempdir().unwrap();
        let run = cli_in_env(dir.path(), env, &["--list-devices", "--json"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        v["cpu_kernels"].as_str().unwrap().to_string()
    };
    #[cfg(target_arch = "x86_64")]
    let (avx2, avx512, vnni) = (
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"),
        std::arch::is_x86_feature_detected!("avx512f"),
        std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni"),
    );
    #[cfg(not(target_arch = "x86_64"))]
    let (avx2, avx512, vnni) = (false, false, false);
    let want = match (avx512, avx2, vnni) {
        (true, _, true) => "float:avx512,q8_0:avx512",
        (true, _, false) => "float:avx512,q8_0:avx2",
        (false, true, _) => "float:avx2,q8_0:avx2",
        _ => "ggml",
    };
    assert_eq!(kernels(&[]), want);
    assert_eq!(kernels(&[("AUDIOCPP_CPU_KERNELS", "ggml")]), "ggml");
    let capped = if avx2 { "float:avx2,q8_0:avx2" } else { "ggml" };
    assert_eq!(kernels(&[("AUDIOCPP_CPU_KERNELS", "avx2")]), capped);
    if !avx2 {
        eprintln!("SKIPPED LOUDLY: this CPU has no AVX2; only the ggml fallback was checked");
    }
    let dir = tempfile::tempdir().unwrap();
    let text = cli_in_env(dir.path(), &[], &["--list-devices"]);
    assert!(
        text.stdout.contains(&format!("cpu_kernels={want}\n")),
        "{}",
        text.stdout
    );
}

#[test]
fn info_commands() {
    let run = cli(&["--version"]);
    assert_eq!(run.code, 0);
    assert!(run.stdout.contains(env!("CARGO_PKG_VERSION")));
    let run = cli(&["--list-devices", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["compiled_backends"], serde_json::json!(["cpu"]));
    let cpu = &v["devices"][0];
    assert_eq!(cpu["backend"], "cpu");
    assert!(cpu["memory_total"].as_u64().unwrap() > 0);
    let run = cli(&["--list-loaders"]);
    assert!(
        run.stdout.contains("loader=silero_vad tasks=vad,convert"),
        "{}",
        run.stdout
    );
    let run = cli(&["--list-loaders", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v[0]["family"], "silero_vad");
}

#[test]
fn a_closed_stdout_ends_the_run_quietly() {
    // `audiocpp_cli ... | head`: the reader is gone before the results are printed (the
    // read end is closed right after the start; the run loads a model first).
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_audiocpp_cli"))
        .args(vad_args(s(&silero_bin()), s(&clip("speech_gaps.wav"))))
        .args(["--model-spec-override", s(&specs()), "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}
