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
        "unknown model family 'whisperx' (known: silero_vad, whisper, kokoro, qwen3_tts)",
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

/// A mono 16-bit WAV header claiming `rate` Hz over `samples` samples.
fn wav_at(path: &std::path::Path, rate: u32, samples: usize) {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for i in 0..samples {
        w.write_sample((i % 200) as i16).unwrap();
    }
    w.finalize().unwrap();
}

#[test]
fn audio_limits_are_checked_from_the_header() {
    let dir = tempfile::tempdir().unwrap();
    // 84 KB claiming 1 Hz: 11.7 hours once resampled to 16 kHz (the CLI passed 6 GB).
    let one_hz = dir.path().join("1hz.wav");
    wav_at(&one_hz, 1, 42_000);
    let specs = specs();
    let spec = ["--model-spec-override", s(&specs)];
    let run = vad_run(s(&silero_bin()), s(&one_hz), &spec);
    assert_user_error(&run, "sample rate 1 Hz is below the limit of 4000 Hz");
    assert!(
        run.stderr.contains("--min-sample-rate-hz"),
        "{}",
        run.stderr
    );
    let run = vad_run(
        s(&silero_bin()),
        s(&one_hz),
        &[
            &spec[..],
            &["--min-sample-rate-hz", "1", "--max-audio-s", "60"],
        ]
        .concat(),
    );
    assert_user_error(&run, "over the limit of 60 s (max_audio_s)");
    assert!(run.stderr.contains("--max-audio-s"), "{}", run.stderr);
    let run = vad_run(
        s(&silero_bin()),
        s(&clip("silence.wav")),
        &[&spec[..], &["--max-audio-s", "0"]].concat(),
    );
    assert_user_error(&run, "must be a positive number of seconds");
}

#[test]
fn threads_beyond_the_machine_are_clamped_with_a_warning() {
    for threads in ["100000", "99999999999"] {
        let run = vad_run(
            s(&silero_bin()),
            s(&clip("silence.wav")),
            &["--model-spec-override", s(&specs()), "--threads", threads],
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(
            run.stderr
                .contains(&format!("warning: --threads {threads} is more than the")),
            "{}",
            run.stderr
        );
    }
}

#[test]
fn a_gguf_tensor_past_the_end_of_the_file_is_an_error_not_an_abort() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = silero_gguf(dir.path());
    let dims_at = last_tensor_dim_offset(&bytes);
    bytes[dims_at..dims_at + 8].copy_from_slice(&(1u64 << 27).to_le_bytes());
    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, &bytes).unwrap();
    let run = vad_run(s(&bad), s(&clip("silence.wav")), &[]);
    assert_user_error(&run, "past the end of the file");
    assert_eq!(
        run.stderr.lines().count(),
        1,
        "one line, no ggml log: {}",
        run.stderr
    );
}

#[test]
fn a_gguf_larger_than_the_available_memory_is_refused_before_loading() {
    let dir = tempfile::tempdir().unwrap();
    // The last tensor claims 2^20 times its first dimension (138 GB), and the file (sparse:
    // no disk is used) is long enough to hold it: its tables are consistent, but its
    // data cannot be loaded on this machine.
    let mut bytes = silero_gguf(dir.path());
    let dims_at = last_tensor_dim_offset(&bytes);
    let ne0 = u64::from_le_bytes(bytes[dims_at..dims_at + 8].try_into().unwrap());
    bytes[dims_at..dims_at + 8].copy_from_slice(&(ne0 << 20).to_le_bytes());
    let huge = dir.path().join("huge.gguf");
    std::fs::write(&huge, &bytes).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&huge)
        .unwrap()
        .set_len(1 << 40)
        .unwrap();
    let run = vad_run(s(&huge), s(&clip("silence.wav")), &[]);
    assert_user_error(&run, "of memory available (MemAvailable)");
    assert_eq!(run.stderr.lines().count(), 1, "one line: {}", run.stderr);
}

#[test]
fn json_errors_are_json() {
    let run = cli(&["--task", "vad", "--family", "silero_vad", "--json"]);
    assert_eq!(run.code, 2);
    let v: serde_json::Value = serde_json::from_str(run.stderr.trim()).unwrap();
    assert_eq!(v["error"]["exit_code"], 2);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--model is required"));
}

#[cfg(target_os = "linux")]
#[test]
fn outputs_go_in_place_to_devices_through_symlinks_and_report_write_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (model, audio, specs) = (silero_bin(), clip("speech_gaps.wav"), specs());
    let base = [
        &vad_args(s(&model), s(&audio))[..],
        &["--model-spec-override", s(&specs)],
    ]
    .concat();
    // /dev/full: the write error is an error, exit 2, not a silent success; the
    // segments still reach standard output, and the error says so.
    let run = cli(&[&base[..], &["--vad-chunks-out", "/dev/full"]].concat());
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("--vad-chunks-out: cannot write '/dev/full'")
            && run.stderr.contains("the segments are on standard output"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.contains("segment.0="), "{}", run.stdout);
    // /dev/null stays a device.
    let run = cli(&[&base[..], &["--vad-chunks-out", "/dev/null"]].concat());
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!std::fs::metadata("/dev/null").unwrap().is_file());
    // A symlink stays a symlink; its target gets the content.
    let real = dir.path().join("real.json");
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let run = cli(&[&base[..], &["--vad-chunks-out", s(&link)]].concat());
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&real).unwrap()).unwrap();
    assert!(!v["segments"].as_array().unwrap().is_empty());
    // A FIFO is written in place (a reader gets the whole file).
    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    let run = cli(&[&base[..], &["--vad-chunks-out", s(&fifo)]].concat());
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(reader.join().unwrap().contains("\"segments\""));
    // Standard output itself full: exit 2 with the reason.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_audiocpp_cli"))
        .args(&base)
        .stdout(std::fs::File::create("/dev/full").unwrap())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write to standard output"));
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        3,
        "no partial files"
    );
}

#[test]
fn a_convert_that_cannot_write_exits_2() {
    let run = cli(&[
        "--task",
        "convert",
        "--family",
        "silero_vad",
        "--model",
        s(&silero_bin()),
        "--out",
        "/nonexistent-dir/out.gguf",
        "--model-spec-override",
        s(&specs()),
    ]);
    assert_user_error(&run, "cannot write '/nonexistent-dir/out.gguf'");
}

/// Offset of the last tensor's first dimension in a GGUF's tensor table.
/// Silero VAD converted to a GGUF in `dir` by the CLI: the file's bytes, for mutating.
fn silero_gguf(dir: &std::path::Path) -> Vec<u8> {
    let gguf = dir.join("silero.gguf");
    let run = cli(&[
        "--task",
        "convert",
        "--family",
        "silero_vad",
        "--model",
        s(&silero_bin()),
        "--out",
        s(&gguf),
        "--model-spec-override",
        s(&specs()),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    std::fs::read(&gguf).unwrap()
}

fn last_tensor_dim_offset(b: &[u8]) -> usize {
    fn u64_at(b: &[u8], p: usize) -> usize {
        u64::from_le_bytes(b[p..p + 8].try_into().unwrap()) as usize
    }
    fn u32_at(b: &[u8], p: usize) -> usize {
        u32::from_le_bytes(b[p..p + 4].try_into().unwrap()) as usize
    }
    fn skip(b: &[u8], p: usize, t: usize) -> usize {
        match t {
            0 | 1 | 7 => p + 1,
            2 | 3 => p + 2,
            4..=6 => p + 4,
            10..=12 => p + 8,
            8 => p + 8 + u64_at(b, p),
            9 => (0..u64_at(b, p + 4)).fold(p + 12, |q, _| skip(b, q, u32_at(b, p))),
            _ => panic!("GGUF value type {t}"),
        }
    }
    let (n_tensors, n_kv) = (u64_at(b, 8), u64_at(b, 16));
    let mut p = 24;
    for _ in 0..n_kv {
        p += 8 + u64_at(b, p);
        p = skip(b, p + 4, u32_at(b, p));
    }
    let mut last = 0;
    for _ in 0..n_tensors {
        p += 8 + u64_at(b, p);
        last = p + 4;
        p += 4 + 8 * u32_at(b, p) + 12;
    }
    last
}

#[test]
fn engine_parameter_errors_name_the_cli_flag() {
    let specs = specs();
    let spec = ["--model-spec-override", s(&specs)];
    let silence = clip("silence.wav");
    let run = vad_run(
        s(&silero_bin()),
        s(&silence),
        &[&spec[..], &["--vad-threshold", "2"]].concat(),
    );
    assert_user_error(&run, "--vad-threshold 2 is outside 0..1");
    let run = vad_run(
        s(&silero_bin()),
        s(&silence),
        &[&spec[..], &["--vad-max-speech-s=-1"]].concat(),
    );
    assert_user_error(&run, "--vad-max-speech-s -1 must be positive");
    let run = vad_run(
        s(&silero_bin()),
        s(&silence),
        &["--model-spec-override", "/nonexistent/specs"],
    );
    assert_user_error(
        &run,
        "--model-spec-override '/nonexistent/specs' does not exist",
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("vad.gguf");
    let run = cli(&[
        "--task",
        "convert",
        "--family",
        "silero_vad",
        "--model",
        s(&silero_bin()),
        "--model-spec-override",
        s(&specs),
        "--quantize",
        "q8_0",
        "--out",
        s(&out),
    ]);
    assert_user_error(
        &run,
        "--quantize 'q8_0' is not offered for family 'silero_vad'",
    );
    assert!(!out.exists(), "nothing written");
    assert!(!run.stderr.contains("parameter '"), "{}", run.stderr);
}
