//! MinGW import libraries of the cross-build, made at build time in the chroot: from a real
//! DLL's export table (`gendef`), or, where no Windows DLL is obtainable here (hipBLASLt),
//! from the exported C names of the Linux library under the Windows DLL name. Then
//! `x86_64-w64-mingw32-dlltool` writes `lib<name>.dll.a`.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::root::write_if_changed;

/// One `[[implib]]` of cross.toml.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ImplibSpec {
    /// The DLL name the import library refers to (`amdhip64_7.dll`).
    pub dll: String,
    /// A runtime DLL (in the runtime root's bin/) whose exports it lists.
    #[serde(default)]
    pub from_dll: Option<String>,
    /// A Linux library (inside the chroot) whose exported C names it lists.
    #[serde(default)]
    pub from_elf: Option<String>,
    /// With `from_elf`: only names with this prefix (the library's C API).
    #[serde(default)]
    pub prefix: Option<String>,
}

/// `libamdhip64_7.dll.a` for `amdhip64_7.dll`, `libhipblaslt.dll.a` for `libhipblaslt.dll`.
pub fn implib_name(dll: &str) -> String {
    let stem = dll.strip_suffix(".dll").unwrap_or(dll);
    let stem = stem.strip_prefix("lib").unwrap_or(stem);
    format!("lib{stem}.dll.a")
}

/// A module-definition file from `nm -D --defined-only` output: the code symbols with
/// `prefix`, sorted, under `LIBRARY dll`.
pub fn def_from_nm(nm: &str, dll: &str, prefix: &str) -> Result<String> {
    let mut names: Vec<&str> = nm
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (_, kind, name) = (it.next()?, it.next()?, it.next()?);
            (kind == "T" && name.starts_with(prefix)).then_some(name)
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    if names.is_empty() {
        bail!("no exported {prefix}* functions to make the import library of {dll} from");
    }
    Ok(format!("LIBRARY {dll}\nEXPORTS\n{}\n", names.join("\n")))
}

fn output(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Makes every import library in `out` (a `.def` beside each); dlltool runs only when the
/// definition changed, so an unchanged library keeps its timestamp.
pub fn make_all(specs: &[ImplibSpec], runtime_bin: &Path, out: &Path) -> Result<()> {
    for s in specs {
        let def = match (&s.from_dll, &s.from_elf) {
            (Some(dll), None) => {
                let path = runtime_bin.join(dll);
                if !path.is_file() {
                    bail!("{} is missing: the runtime was not fetched (`cargo xtask dist` does it on the host)", path.display());
                }
                output(Command::new("gendef").arg("-").arg(&path), &format!("gendef - {}", path.display()))?
            }
            (None, Some(elf)) => {
                let nm = output(
                    Command::new("nm").args(["-D", "--defined-only", elf]),
                    &format!("nm -D {elf}"),
                )?;
                def_from_nm(&nm, &s.dll, s.prefix.as_deref().unwrap_or(""))?
            }
            _ => bail!("packaging/windows-hip/cross.toml: implib {} needs exactly one of from_dll, from_elf", s.dll),
        };
        let lib = out.join(implib_name(&s.dll));
        let def_path = lib.with_extension("def");
        let changed = write_if_changed(&def_path, def.as_bytes())?;
        if changed || !lib.is_file() {
            output(
                Command::new("x86_64-w64-mingw32-dlltool")
                    .arg("-d")
                    .arg(&def_path)
                    .args(["-D", &s.dll, "-l"])
                    .arg(&lib),
                &format!("dlltool for {}", s.dll),
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn import_library_names_follow_mingw() {
        assert_eq!(implib_name("amdhip64_7.dll"), "libamdhip64_7.dll.a");
        assert_eq!(implib_name("libhipblaslt.dll"), "libhipblaslt.dll.a");
    }

    #[test]
    fn a_definition_lists_the_prefixed_code_symbols_once() {
        let nm = "0000000000012340 T hipblasLtMatmul\n0000000000012300 T hipblasLtCreate\n0000000000012300 T hipblasLtCreate\n0000000000000010 T _ZN9hipblaslt3ext4Gemm\n0000000000000020 D hipblasLtData\n";
        assert_eq!(
            def_from_nm(nm, "libhipblaslt.dll", "hipblasLt").unwrap(),
            "LIBRARY libhipblaslt.dll\nEXPORTS\nhipblasLtCreate\nhipblasLtMatmul\n"
        );
        assert!(def_from_nm("", "x.dll", "x").is_err());
    }
}
