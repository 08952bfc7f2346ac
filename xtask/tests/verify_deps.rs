//! `cargo xtask verify-deps` on real binaries built at test time: PE files from mingw-w64
//! (x86-64 and i686), ELF files from gcc, checked through the real xtask binary and
//! cross-checked against `x86_64-w64-mingw32-objdump -p`.
//!
//! A missing compiler fails the test with the package to install; nothing is skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

use xtask::verify_deps::{self, binary::Machine, synth};

fn tool(name: &str, apt: &str) -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!("{name} is required by this test and is not installed: apt-get install -y {apt}")
    })
}

fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

const MINGW64: (&str, &str) = ("x86_64-w64-mingw32-gcc", "gcc-mingw-w64-x86-64");
const MINGW32: (&str, &str) = ("i686-w64-mingw32-gcc", "gcc-mingw-w64-i686");
const DLLTOOL: (&str, &str) = ("x86_64-w64-mingw32-dlltool", "binutils-mingw-w64-x86-64");
const OBJDUMP: (&str, &str) = ("x86_64-w64-mingw32-objdump", "binutils-mingw-w64-x86-64");
const WINDRES: (&str, &str) = ("x86_64-w64-mingw32-windres", "binutils-mingw-w64-x86-64");
const GCC: (&str, &str) = ("gcc", "gcc");

/// Builds Windows DLLs and executables with mingw in one folder.
struct Mingw {
    dir: PathBuf,
}

impl Mingw {
    fn new(dir: &Path) -> Mingw {
        std::fs::create_dir_all(dir).unwrap();
        Mingw {
            dir: dir.to_path_buf(),
        }
    }

    /// A DLL exporting `sym_<stem>` that calls one function from each of `deps` (files in
    /// this folder, or import libraries `lib<x>.a` made by [`Mingw::import_lib`]).
    fn dll(&self, name: &str, deps: &[&str], extra: &[&str]) -> PathBuf {
        self.build(name, deps, extra, true, MINGW64.0)
    }

    fn exe(&self, name: &str, deps: &[&str]) -> PathBuf {
        self.build(name, deps, &[], false, MINGW64.0)
    }

    fn build(&self, name: &str, deps: &[&str], extra: &[&str], dll: bool, cc: &str) -> PathBuf {
        let cc_tool = if cc == MINGW32.0 { MINGW32 } else { MINGW64 };
        let gcc = tool(cc_tool.0, cc_tool.1);
        let stem = sym(name);
        let mut src = String::new();
        for d in deps {
            src.push_str(&format!("int sym_{}(void);\n", sym(d)));
        }
        let calls: String = deps
            .iter()
            .map(|d| format!(" + sym_{}()", sym(d)))
            .collect();
        if dll {
            src.push_str(&format!(
                "__declspec(dllexport) int sym_{stem}(void) {{ return 1{calls}; }}\n"
            ));
        } else {
            src.push_str(&format!("int main(void) {{ return 0{calls}; }}\n"));
        }
        let c = self.dir.join(format!("{stem}.c"));
        std::fs::write(&c, src).unwrap();
        let out = self.dir.join(name);
        let mut cmd = Command::new(gcc);
        if dll {
            cmd.arg("-shared");
        }
        cmd.arg("-o").arg(&out).arg(&c);
        for d in deps {
            let lib = self.dir.join(format!("lib{}.a", sym(d)));
            if lib.exists() {
                cmd.arg(lib);
            } else {
                cmd.arg(self.dir.join(d));
            }
        }
        cmd.args(extra);
        run(&mut cmd);
        out
    }

    /// An import library for `dll_name` exporting `sym_<stem of import_name>`, so that the
    /// import table says exactly `dll_name` (any case) without the DLL existing.
    fn import_lib(&self, dll_name: &str) {
        let stem = sym(dll_name);
        let def = self.dir.join(format!("{stem}.def"));
        std::fs::write(
            &def,
            format!("LIBRARY \"{dll_name}\"\nEXPORTS\nsym_{stem}\n"),
        )
        .unwrap();
        run(Command::new(tool(DLLTOOL.0, DLLTOOL.1))
            .arg("--input-def")
            .arg(&def)
            .arg("--dllname")
            .arg(dll_name)
            .arg("--output-lib")
            .arg(self.dir.join(format!("lib{stem}.a"))));
    }
}

fn sym(name: &str) -> String {
    name.to_ascii_lowercase()
        .trim_end_matches(".dll")
        .trim_end_matches(".exe")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Runs the real `cargo xtask verify-deps` binary.
fn xtask(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("verify-deps")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The package from the issue: cli.exe -> ggml-cpu.dll -> ggml-base.dll, plus a plugin;
/// `omp` plants libomp140.x86_64.dll as an import of ggml-cpu.dll (two levels deep).
fn package(dir: &Path, omp: bool) -> PathBuf {
    let m = Mingw::new(dir);
    m.dll("ggml-base.dll", &[], &[]);
    if omp {
        m.dll("libomp140.x86_64.dll", &[], &[]);
        m.dll(
            "ggml-cpu.dll",
            &["ggml-base.dll", "libomp140.x86_64.dll"],
            &[],
        );
    } else {
        m.dll("ggml-cpu.dll", &["ggml-base.dll"], &[]);
    }
    m.dll("ggml.dll", &["ggml-base.dll"], &[]);
    m.exe("audiocpp_cli.exe", &["ggml-cpu.dll", "ggml.dll"]);
    let pkg = dir.join("pkg");
    std::fs::create_dir_all(&pkg).unwrap();
    let mut names = vec![
        "ggml-base.dll",
        "ggml-cpu.dll",
        "ggml.dll",
        "audiocpp_cli.exe",
    ];
    if omp {
        names.push("libomp140.x86_64.dll");
    }
    for n in names {
        std::fs::copy(dir.join(n), pkg.join(n)).unwrap();
    }
    pkg
}

#[test]
fn clean_package_passes_and_prints_the_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let pkg = package(tmp.path(), false);
    let (code, out, err) = xtask(&[s(&pkg)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("audiocpp_cli.exe  [Pe x64 executable]"),
        "{out}"
    );
    assert!(out.contains("├── ggml-cpu.dll  bundled"), "{out}");
    assert!(out.contains("ggml-base.dll  bundled"), "{out}");
    assert!(out.contains("KERNEL32.dll  system"), "{out}");
    assert!(out.contains("result: ok"), "{out}");
}

#[test]
fn planted_openmp_two_levels_deep_fails_with_the_chain() {
    let tmp = tempfile::tempdir().unwrap();
    let pkg = package(tmp.path(), true);
    let (code, out, err) = xtask(&[s(&pkg)]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("audiocpp_cli.exe -> ggml-cpu.dll -> libomp140.x86_64.dll: forbidden (LLVM OpenMP runtime; build with GGML_OPENMP=OFF)"),
        "{out}"
    );
    // The same package zipped (one root folder, read in memory) fails the same way.
    let zip_path = tmp.path().join("audiocpp-windows-cpu.zip");
    write_zip(&pkg, &zip_path, "audiocpp-windows-cpu");
    let (code, out, _) = xtask(&["--json", s(&zip_path)]);
    assert_eq!(code, 1);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    let findings = json[0]["findings"].as_array().unwrap();
    assert!(findings.iter().any(|f| f["rule"] == "forbidden"
        && f["chain"]
            == serde_json::json!(["audiocpp_cli.exe", "ggml-cpu.dll", "libomp140.x86_64.dll"])));
}

fn write_zip(dir: &Path, zip_path: &Path, root: &str) {
    let file = std::fs::File::create(zip_path).unwrap();
    let mut zip = zip::ZipWriter::new(file);
    let opts = zip::write::SimpleFileOptions::default();
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        zip.start_file(
            format!("{root}/{}", p.file_name().unwrap().to_str().unwrap()),
            opts,
        )
        .unwrap();
        std::io::Write::write_all(&mut zip, &std::fs::read(&p).unwrap()).unwrap();
    }
    zip.finish().unwrap();
}

#[test]
fn clean_zip_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let pkg = package(tmp.path(), false);
    let zip_path = tmp.path().join("p.zip");
    write_zip(&pkg, &zip_path, "audiocpp-windows-cpu");
    let (code, out, err) = xtask(&[s(&zip_path)]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn upper_case_import_names_resolve_case_insensitively() {
    let tmp = tempfile::tempdir().unwrap();
    let m = Mingw::new(tmp.path());
    m.dll("ggml-base.dll", &[], &[]);
    m.import_lib("GGML-BASE.DLL");
    m.exe("audiocpp_cli.exe", &["GGML-BASE.DLL"]);
    let info =
        verify_deps::parse(&std::fs::read(tmp.path().join("audiocpp_cli.exe")).unwrap()).unwrap();
    assert!(
        info.imports.iter().any(|i| i == "GGML-BASE.DLL"),
        "{:?}",
        info.imports
    );
    let pkg = tmp.path().join("pkg");
    std::fs::create_dir(&pkg).unwrap();
    for n in ["ggml-base.dll", "audiocpp_cli.exe"] {
        std::fs::copy(tmp.path().join(n), pkg.join(n)).unwrap();
    }
    let (code, out, _) = xtask(&[s(&pkg)]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("GGML-BASE.DLL => ggml-base.dll  bundled"),
        "{out}"
    );
}

#[test]
fn three_level_chain_with_a_missing_dll_names_the_whole_chain() {
    let tmp = tempfile::tempdir().unwrap();
    let m = Mingw::new(tmp.path());
    m.dll("c.dll", &[], &[]);
    m.dll("b.dll", &["c.dll"], &[]);
    m.dll("a.dll", &["b.dll"], &[]);
    m.exe("app.exe", &["a.dll"]);
    let pkg = tmp.path().join("pkg");
    std::fs::create_dir(&pkg).unwrap();
    for n in ["app.exe", "a.dll", "b.dll"] {
        std::fs::copy(tmp.path().join(n), pkg.join(n)).unwrap();
    }
    let (code, out, _) = xtask(&[s(&pkg)]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "app.exe -> a.dll -> b.dll -> c.dll: missing (not bundled and not a system library"
        ),
        "{out}"
    );
    // Present but in the wrong folder: the hint says where it is.
    std::fs::create_dir(pkg.join("sub")).unwrap();
    std::fs::copy(tmp.path().join("c.dll"), pkg.join("sub/c.dll")).unwrap();
    let (code, out, _) = xtask(&[s(&pkg)]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("it is in the package at sub/c.dll but not next to app.exe"),
        "{out}"
    );
}

#[test]
fn forbidden_vcomp_and_debug_crt_imports_fail() {
    let tmp = tempfile::tempdir().unwrap();
    let m = Mingw::new(tmp.path());
    m.import_lib("VCOMP140.DLL");
    m.import_lib("MSVCP140D.dll");
    m.import_lib("ucrtbased.dll");
    m.dll("ggml-cpu.dll", &["VCOMP140.DLL"], &[]);
    m.dll("ggml-base.dll", &["MSVCP140D.dll", "ucrtbased.dll"], &[]);
    m.exe("audiocpp_cli.exe", &["ggml-cpu.dll", "ggml-base.dll"]);
    let pkg = tmp.path().join("pkg");
    std::fs::create_dir(&pkg).unwrap();
    for n in ["ggml-cpu.dll", "ggml-base.dll", "audiocpp_cli.exe"] {
        std::fs::copy(tmp.path().join(n), pkg.join(n)).unwrap();
    }
    let (code, out, _) = xtask(&[s(&pkg)]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("audiocpp_cli.exe -> ggml-cpu.dll -> VCOMP140.DLL: forbidden (MSVC OpenMP runtime; build with GGML_OPENMP=OFF)"), "{out}");
    assert!(
        out.contains("ggml-base.dll -> MSVCP140D.dll: forbidden (debug C++ runtime"),
        "{out}"
    );
    assert!(
        out.contains("ggml-base.dll -> ucrtbased.dll: forbidden (debug Universal CRT"),
        "{out}"
    );
}

#[test]
fn files_from_debug_nonredist_are_forbidden() {
    let tmp = tempfile::tempdir().unwrap();
    let m = Mingw::new(tmp.path());
    let dll = m.dll("vcruntime140.dll", &[], &[]);
    let redist = tmp.path().join("VC/Redist/MSVC/14.44/debug_nonredist/x64");
    std::fs::create_dir_all(&redist).unwrap();
    std::fs::copy(&dll, redist.join("vcruntime140.dll")).unwrap();
    let (code, out, _) = xtask(&[s(&redist.join("vcruntime140.dll"))]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("vcruntime140.dll: comes from a forbidden folder"),
        "{out}"
    );
}

#[test]
fn mixed_rocm_majors_fail() {
    let tmp = tempfile::tempdir().unwrap();
    let m = Mingw::new(tmp.path());
    m.dll("amdhip64_6.dll", &[], &[]);
    m.dll("amdhip64_7.dll", &[], &[]);
    m.dll("rocblas.dll", &["amdhip64_6.dll"], &[]);
    m.dll("ggml-hip.dll", &["amdhip64_7.dll", "rocblas.dll"], &[]);
    m.exe("audiocpp_cli.exe", &["ggml-hip.dll"]);
    let pkg = tmp.path().join("pkg");
    std::fs::create_dir(&pkg).unwrap();
    for n in [
        "amdhip64_6.dll",
        "amdhip64_7.dll",
        "rocblas.dll",
        "ggml-hip.dll",
        "audiocpp_cli.exe",
    ] {
        std::fs::copy(tmp.path().join(n), pkg.join(n)).unwrap();
    }
    let (code, out, _) = xtask(&[s(&pkg)]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("two ROCm majors in one package: 6 (audiocpp_cli.exe -> ggml-hip.dll -> rocblas.dll -> amdhip64_6.dll), 7 (audiocpp_cli.exe -> ggml-hip.dll -> amdhip64_7.dll)"), "{out}");
}

#[test]
fn x86_dll_in_an_x64_package_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let m = Mingw::new(tmp.path());
    // The exe links against an import library; the DLL shipped is an i686 build.
    m.import_lib("ggml-base.dll");
    m.exe("audiocpp_cli.exe", &["ggml-base.dll"]);
    let pkg = tmp.path().join("pkg");
    std::fs::create_dir(&pkg).unwrap();
    let x86 = Mingw::new(&tmp.path().join("x86"));
    x86.build("ggml-base.dll", &[], &[], true, MINGW32.0);
    std::fs::copy(
        tmp.path().join("x86/ggml-base.dll"),
        pkg.join("ggml-base.dll"),
    )
    .unwrap();
    std::fs::copy(
        tmp.path().join("audiocpp_cli.exe"),
        pkg.join("audiocpp_cli.exe"),
    )
    .unwrap();
    let info = verify_deps::parse(&std::fs::read(pkg.join("ggml-base.dll")).unwrap()).unwrap();
    assert_eq!(info.machine, Machine::X86);
    let (code, out, _) = xtask(&[s(&pkg)]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("audiocpp_cli.exe -> ggml-base.dll: wrong machine type (ggml-base.dll is x86, audiocpp_cli.exe is x64; bundle the x64 build)"), "{out}");
}

/// Sets the PE optional header's linker version (MSVC 14.44 writes 14, 44).
fn set_linker_version(path: &Path, major: u8, minor: u8) {
    let mut b = std::fs::read(path).unwrap();
    let pe = u32::from_le_bytes(b[0x3c..0x40].try_into().unwrap()) as usize;
    b[pe + 24 + 2] = major;
    b[pe + 24 + 3] = minor;
    std::fs::write(path, b).unwrap();
}

#[test]
fn bundled_crt_older_than_the_linker_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let m = Mingw::new(tmp.path());
    let rc = tmp.path().join("v.rc");
    std::fs::write(
        &rc,
        "1 VERSIONINFO\nFILEVERSION 14,29,30133,0\nPRODUCTVERSION 14,29,30133,0\nBEGIN\nEND\n",
    )
    .unwrap();
    let res = tmp.path().join("v.o");
    run(Command::new(tool(WINDRES.0, WINDRES.1))
        .arg(&rc)
        .arg("-o")
        .arg(&res));
    m.dll("msvcp140.dll", &[], &[s(&res)]);
    let info =
        verify_deps::parse(&std::fs::read(tmp.path().join("msvcp140.dll")).unwrap()).unwrap();
    assert_eq!(info.file_version, Some([14, 29, 30133, 0]));
    m.dll("ggml-base.dll", &["msvcp140.dll"], &[]);
    m.exe("audiocpp_cli.exe", &["ggml-base.dll"]);
    set_linker_version(&tmp.path().join("ggml-base.dll"), 14, 44);
    let pkg = tmp.path().join("pkg");
    std::fs::create_dir(&pkg).unwrap();
    for n in ["msvcp140.dll", "ggml-base.dll", "audiocpp_cli.exe"] {
        std::fs::copy(tmp.path().join(n), pkg.join(n)).unwrap();
    }
    let (code, out, _) = xtask(&[s(&pkg)]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("audiocpp_cli.exe -> ggml-base.dll -> msvcp140.dll: bundled CRT msvcp140.dll is 14.29.30133, older than the linker 14.44 of ggml-base.dll"), "{out}");
    // A CRT as new as the linker passes.
    set_linker_version(&pkg.join("ggml-base.dll"), 14, 29);
    let (code, out, _) = xtask(&[s(&pkg)]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn truncated_and_garbage_files_are_reported_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let pkg = package(tmp.path(), false);
    let good = std::fs::read(pkg.join("ggml-base.dll")).unwrap();
    std::fs::write(pkg.join("cut-headers.dll"), &good[..300]).unwrap();
    std::fs::write(pkg.join("cut-half.dll"), &good[..good.len() / 2]).unwrap();
    let mut garbage = b"MZ".to_vec();
    garbage.extend((0..4000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8));
    std::fs::write(pkg.join("garbage.dll"), &garbage).unwrap();
    std::fs::write(
        pkg.join("garbage.so"),
        b"\x7fELF\x02\x01\x01\0garbage garbage garbage garbage",
    )
    .unwrap();
    std::fs::write(pkg.join("notes.txt"), b"not a binary").unwrap();
    std::fs::write(pkg.join("empty.dat"), b"").unwrap();
    let (code, out, err) = xtask(&[s(&pkg)]);
    assert_eq!(code, 1, "{out}{err}");
    for name in [
        "cut-headers.dll",
        "cut-half.dll",
        "garbage.dll",
        "garbage.so",
    ] {
        assert!(
            out.contains(&format!("error: {name}: corrupt or truncated binary")),
            "{name}: {out}"
        );
    }
    assert!(
        !out.contains("notes.txt") && !out.contains("empty.dat"),
        "{out}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn usage_and_io_errors_exit_2() {
    let (code, _, err) = xtask(&["/nonexistent/package"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("cannot read input /nonexistent/package"),
        "{err}"
    );
    let tmp = tempfile::tempdir().unwrap();
    let (code, _, err) = xtask(&["--track", "rocm8", s(tmp.path())]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown track 'rocm8' (allowed: "), "{err}");
    let (code, _, _) = xtask(&[]);
    assert_eq!(code, 2);
}

/// DLL names objdump lists under "The Import Tables", and the (RVA, size) of its
/// "Delay Import Directory" data directory entry. objdump 2.40 prints no delay import
/// names, so delay imports are cross-checked by the directory size (32 bytes a
/// descriptor plus a zero terminator).
fn objdump_imports(path: &Path) -> (Vec<String>, (u32, u32)) {
    let out = Command::new(tool(OBJDUMP.0, OBJDUMP.1))
        .arg("-p")
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "objdump -p {}", path.display());
    let text = String::from_utf8_lossy(&out.stdout);
    let mut imports = Vec::new();
    let mut delay = (0, 0);
    for line in text.lines() {
        if let Some(name) = line.trim().strip_prefix("DLL Name: ") {
            imports.push(name.to_string());
        } else if line.starts_with("Entry d ") && line.ends_with("Delay Import Directory") {
            let f: Vec<&str> = line.split_whitespace().collect();
            delay = (
                u32::from_str_radix(f[2], 16).unwrap(),
                u32::from_str_radix(f[3], 16).unwrap(),
            );
        }
    }
    (imports, delay)
}

#[test]
fn parser_agrees_with_objdump_on_mingw_and_written_pe_files() {
    let tmp = tempfile::tempdir().unwrap();
    let pkg = package(tmp.path(), true);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&pkg)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let gcc_dir = "/usr/lib/gcc/x86_64-w64-mingw32";
    for entry in std::fs::read_dir(gcc_dir).unwrap().flatten() {
        for dll in ["libgomp-1.dll", "libstdc++-6.dll", "libgcc_s_seh-1.dll"] {
            let p = entry.path().join(dll);
            if p.exists() {
                files.push(p);
            }
        }
    }
    let mut spec = synth::PeSpec::new(true, &["KERNEL32.dll", "MSVCP140.dll"]);
    spec.delay_imports = vec!["amd_comgr_2.dll".into(), "VERSION.dll".into()];
    let written = tmp.path().join("amdhip64_6.dll");
    std::fs::write(&written, synth::pe(&spec)).unwrap();
    files.push(written.clone());
    let mut x86 = synth::PeSpec::new(true, &["KERNEL32.dll"]);
    x86.machine = Machine::X86;
    x86.delay_imports = vec!["USER32.dll".into()];
    let written86 = tmp.path().join("x86.dll");
    std::fs::write(&written86, synth::pe(&x86)).unwrap();
    files.push(written86);
    assert!(files.len() >= 7, "{files:?}");
    for f in &files {
        let info = verify_deps::parse(&std::fs::read(f).unwrap()).unwrap();
        let (imports, (rva, size)) = objdump_imports(f);
        assert_eq!(info.imports, imports, "{}", f.display());
        let descriptors = if rva == 0 { 0 } else { size as usize / 32 - 1 };
        assert_eq!(info.delay_imports.len(), descriptors, "{}", f.display());
    }
    let info = verify_deps::parse(&std::fs::read(&written).unwrap()).unwrap();
    assert_eq!(info.delay_imports, ["amd_comgr_2.dll", "VERSION.dll"]);
    assert_eq!(
        objdump_imports(&written).0,
        ["KERNEL32.dll", "MSVCP140.dll"]
    );
}

#[test]
fn elf_origin_rpath_resolves_and_missing_soname_fails() {
    let gcc = tool(GCC.0, GCC.1);
    let tmp = tempfile::tempdir().unwrap();
    let pkg = tmp.path().join("pkg");
    std::fs::create_dir_all(pkg.join("lib")).unwrap();
    let c = tmp.path().join("foo.c");
    std::fs::write(&c, "int foo(void) { return 1; }\n").unwrap();
    run(Command::new(&gcc)
        .args(["-shared", "-fPIC", "-Wl,-soname,libggml-base.so.0", "-o"])
        .arg(pkg.join("lib/libggml-base.so.0"))
        .arg(&c));
    let m = tmp.path().join("main.c");
    std::fs::write(&m, "int foo(void);\nint main(void) { return foo(); }\n").unwrap();
    run(Command::new(&gcc)
        .arg("-o")
        .arg(pkg.join("audiocpp_cli"))
        .arg(&m)
        .arg(pkg.join("lib/libggml-base.so.0"))
        .arg("-Wl,-rpath,$ORIGIN/lib"));
    let info = verify_deps::parse(&std::fs::read(pkg.join("audiocpp_cli")).unwrap()).unwrap();
    assert!(
        info.needed.contains(&"libggml-base.so.0".to_string()),
        "{info:?}"
    );
    assert!(
        info.runpath
            .iter()
            .chain(&info.rpath)
            .any(|p| p == "$ORIGIN/lib"),
        "{info:?}"
    );
    let lib =
        verify_deps::parse(&std::fs::read(pkg.join("lib/libggml-base.so.0")).unwrap()).unwrap();
    assert_eq!(lib.soname.as_deref(), Some("libggml-base.so.0"));
    let (code, out, _) = xtask(&[s(&pkg)]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("libggml-base.so.0 => lib/libggml-base.so.0  bundled"),
        "{out}"
    );
    assert!(out.contains("libc.so.6  system"), "{out}");
    // The same exe without an $ORIGIN rpath: present in the package but unreachable.
    run(Command::new(&gcc)
        .arg("-o")
        .arg(pkg.join("audiocpp_cli"))
        .arg(&m)
        .arg(pkg.join("lib/libggml-base.so.0")));
    let (code, out, _) = xtask(&[s(&pkg)]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("audiocpp_cli -> libggml-base.so.0: missing (it is in the package at lib/libggml-base.so.0 but no RPATH/RUNPATH of audiocpp_cli reaches it"), "{out}");
    // The soname is gone altogether.
    std::fs::remove_file(pkg.join("lib/libggml-base.so.0")).unwrap();
    let (code, out, _) = xtask(&[s(&pkg)]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "audiocpp_cli -> libggml-base.so.0: missing (not bundled and not a system library"
        ),
        "{out}"
    );
}
