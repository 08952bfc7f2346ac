//! The real cmd.exe path of the MSVC pin, run under Wine: a fake Visual Studio tree (in a
//! folder with spaces, like `Program Files`) whose vcvarsall.bat sets VCToolsVersion for
//! 14.44 and prints an `[ERROR:` line (exiting 0, as the real one does) for any other
//! version. `capture_vcvars` runs it through `cmd /d /c ... && echo <SEP> && set`, and the
//! capture goes through the same parse and checks a Windows build uses.
//!
//! Needs Wine (`apt-get install -y wine wine64`); without it the test says so and passes.

use std::path::Path;

use xtask::toolset::msvc;

const FAKE_VCVARSALL: &str = "@echo off\r\n\
echo **********************************************************************\r\n\
echo ** Visual Studio 2022 Developer Command Prompt v17.14.19 (fake)\r\n\
echo **********************************************************************\r\n\
if not \"%3\"==\"14.44\" goto missing\r\n\
set VCToolsVersion=14.44.35207\r\n\
set \"INCLUDE=C:\\fake vs\\VC\\Tools\\MSVC\\14.44.35207\\include\"\r\n\
set \"LIB=C:\\fake vs\\VC\\Tools\\MSVC\\14.44.35207\\lib\\x64\"\r\n\
echo [vcvarsall.bat] Environment initialized for: '%1'\r\n\
goto :eof\r\n\
:missing\r\n\
echo [ERROR:vcvars.bat] Toolset directory for version '%3' was not found.\r\n\
echo [vcvarsall.bat] Environment initialized for: '%1'\r\n";

#[test]
fn vcvarsall_through_wine_cmd_is_captured_parsed_and_checked() {
    let wine = Path::new("/usr/lib/wine/wine64");
    if !wine.is_file() {
        eprintln!("skipped: Wine is not installed (apt-get install -y wine wine64)");
        return;
    }
    let prefix = xtask::project::target_dir().join("wine-prefix-build-tests");
    std::fs::create_dir_all(&prefix).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let build = tmp
        .path()
        .join("Microsoft Visual Studio/2022/BuildTools/VC/Auxiliary/Build");
    std::fs::create_dir_all(&build).unwrap();
    std::fs::write(build.join("vcvarsall.bat"), FAKE_VCVARSALL).unwrap();
    let wrapper = tmp.path().join("wcmd");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexport WINEPREFIX='{}' WINEDEBUG=-all\nexec '{}' cmd \"$@\"\n",
            prefix.display(),
            wine.display()
        ),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // Wine maps the Unix root to drive Z:.
    let vcvarsall = format!("Z:{}", build.join("vcvarsall.bat").display()).replace('/', "\\");

    let cap = msvc::capture_vcvars(&wrapper, &vcvarsall, "x64", "14.44").unwrap();
    let out = msvc::parse_vcvars(&cap.output)
        .unwrap_or_else(|e| panic!("{e}\n--- output ---\n{}", cap.output));
    assert!(
        out.banner
            .iter()
            .any(|l| l.contains("Environment initialized for: 'x64'")),
        "{:?}",
        out.banner
    );
    assert_eq!(msvc::check_toolset(&out, "14.44").unwrap(), "14.44.35207");
    assert_eq!(
        out.get("INCLUDE"),
        Some(r"C:\fake vs\VC\Tools\MSVC\14.44.35207\include")
    );

    let cap = msvc::capture_vcvars(&wrapper, &vcvarsall, "x64", "14.43").unwrap();
    assert_eq!(
        cap.exit_code,
        Some(0),
        "the fake, like the real one, exits 0 on failure"
    );
    let e = msvc::parse_vcvars(&cap.output).unwrap_err().to_string();
    assert!(
        e.contains("[ERROR:vcvars.bat] Toolset directory for version '14.43' was not found."),
        "{e}"
    );
}
