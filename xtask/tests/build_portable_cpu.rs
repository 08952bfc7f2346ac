//! `cargo xtask build --backend cpu --no-native-cpu` really builds portable binaries: the
//! test runs the plan for this machine (cargo makes it a no-op once built) and then
//! disassembles the executables: no instruction may touch an AVX-512 `zmm` register, and
//! ggml's own functions may not touch AVX `ymm` registers either (ggml's defaults with
//! GGML_NATIVE=OFF are AVX2; the plan turns them off). Rust crates that pick AVX code at
//! run time after a CPU check (rustfft, memchr) may keep their `ymm` paths, and so may
//! the engine's CPU kernels (`audiocpp_engine::cpu_kernels`), which are entered only
//! after `is_x86_feature_detected!` says the CPU has AVX-512; those are counted apart.
//! A second test proves the check would see AVX-512 code if there were any.

use std::path::Path;
use std::process::Command;

use xtask::build::{execute, plan, BuildRequest, DiscoverOptions, HostFacts};
use xtask::tracks::Backend;

/// The mangled prefix of the engine's CPU kernel module, whose AVX-512 functions run
/// only after a run-time CPU check.
const DISPATCHED_KERNELS: &str = "_ZN15audiocpp_engine11cpu_kernels";

/// What the disassembly holds.
struct Scan {
    /// Instructions naming a zmm register.
    zmm: usize,
    /// Instructions naming a ymm register inside a ggml function.
    ggml_ymm: usize,
    /// Instructions naming a zmm register in the engine's run-time dispatched kernels.
    dispatched_zmm: usize,
    /// Instructions in all.
    insns: usize,
    /// The first offending line, for the message.
    first: String,
}

/// Scans `objdump -d` output of a binary.
fn scan(binary: &Path) -> Scan {
    let out = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(binary)
        .output()
        .expect("objdump (binutils) is needed for this test: apt-get install -y binutils");
    assert!(
        out.status.success(),
        "objdump failed on {}",
        binary.display()
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut s = Scan {
        zmm: 0,
        ggml_ymm: 0,
        dispatched_zmm: 0,
        insns: 0,
        first: String::new(),
    };
    let (mut in_ggml, mut dispatched) = (false, false);
    for line in text.lines() {
        if line.ends_with(">:") && !line.starts_with(' ') {
            dispatched = line.contains(DISPATCHED_KERNELS);
            in_ggml = line.contains("ggml") && !dispatched;
            continue;
        }
        if !(line.starts_with(' ') && line.contains(":\t")) {
            continue;
        }
        s.insns += 1;
        if dispatched {
            s.dispatched_zmm += usize::from(line.contains("%zmm"));
            continue;
        }
        let bad_zmm = line.contains("%zmm");
        let bad_ymm = in_ggml && line.contains("%ymm");
        if bad_zmm {
            s.zmm += 1;
        }
        if bad_ymm {
            s.ggml_ymm += 1;
        }
        if (bad_zmm || bad_ymm) && s.first.is_empty() {
            s.first = line.trim().to_string();
        }
    }
    s
}

#[test]
fn portable_cpu_build_has_no_avx512() {
    let mut req = BuildRequest::new(Backend::Cpu);
    req.no_native_cpu = true;
    let host = HostFacts::discover(&DiscoverOptions::default());
    let p = plan(&req, &host).unwrap();
    assert_eq!(p.env_value("GGML_NATIVE"), Some("OFF"));
    let built = execute(&p).unwrap_or_else(|e| {
        panic!("building the portable CPU binaries failed (cargo xtask build --backend cpu --no-native-cpu): {e:#}")
    });
    assert!(!built.outputs().is_empty());
    assert!(built.record_path.is_file());
    let mut with_ggml = 0;
    for exe in &p.executables {
        let exe = Path::new(exe);
        assert!(
            exe.is_file(),
            "missing {}: the build did not produce it",
            exe.display()
        );
        let s = scan(exe);
        eprintln!(
            "{}: {} instructions, {} with zmm in the run-time dispatched kernels",
            exe.display(),
            s.insns,
            s.dispatched_zmm
        );
        assert!(
            s.insns > 10_000,
            "{} has only {} instructions: not the real binary?",
            exe.display(),
            s.insns
        );
        assert_eq!(
            s.zmm,
            0,
            "{} uses AVX-512 registers ({} instructions, first: {})",
            exe.display(),
            s.zmm,
            s.first
        );
        assert_eq!(
            s.ggml_ymm,
            0,
            "ggml code in {} uses AVX registers ({} instructions, first: {})",
            exe.display(),
            s.ggml_ymm,
            s.first
        );
        let syms = Command::new("nm").arg(exe).output().expect("nm (binutils)");
        if String::from_utf8_lossy(&syms.stdout).contains("ggml_graph_compute") {
            with_ggml += 1;
        }
    }
    // ggml is linked statically into the CLI at least, so its CPU kernels were checked too.
    assert!(
        with_ggml > 0,
        "no executable contains ggml's CPU backend (ggml_graph_compute)"
    );
}

/// C compiler flags that make 512-bit vector code.
const AVX512: [&str; 3] = ["-O3", "-mavx512f", "-mprefer-vector-width=512"];

/// Compiles the C file `src` to the object `obj` with `flags`.
fn compile(src: &Path, obj: &Path, flags: &[&str]) {
    let status = Command::new("cc")
        .args(flags)
        .arg("-c")
        .arg(src)
        .arg("-o")
        .arg(obj)
        .status()
        .expect("a C compiler");
    assert!(status.success(), "cc {flags:?} {} failed", src.display());
}

#[test]
fn the_zmm_check_sees_avx512_code() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("v.c");
    std::fs::write(
        &src,
        "void ggml_like_add(float *restrict a, const float *restrict b, int n) { for (int i = 0; i < n; i++) a[i] += b[i]; }\n",
    )
    .unwrap();
    let obj = tmp.path().join("v.o");
    compile(&src, &obj, &AVX512);
    let s = scan(&obj);
    assert!(s.zmm > 0, "the detector missed AVX-512 code");
    assert!(s.first.contains("zmm"));
    // Only the engine's dispatched kernel module is exempt, and it is counted apart.
    let kernel = tmp.path().join("k.c");
    std::fs::write(
        &kernel,
        format!("void {DISPATCHED_KERNELS}3addE(float *restrict a, const float *restrict b, int n) {{ for (int i = 0; i < n; i++) a[i] += b[i]; }}\n"),
    )
    .unwrap();
    compile(&kernel, &obj, &AVX512);
    let s = scan(&obj);
    assert_eq!((s.zmm, s.ggml_ymm), (0, 0), "the kernel module is exempt");
    assert!(
        s.dispatched_zmm > 0,
        "and its AVX-512 code is counted apart"
    );
    // AVX2 code in a ggml function is seen too.
    compile(&src, &obj, &["-O3", "-mavx2"]);
    let s = scan(&obj);
    assert_eq!(s.zmm, 0);
    assert!(
        s.ggml_ymm > 0,
        "the detector missed AVX code in a ggml function"
    );
}
