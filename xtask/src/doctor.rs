//! `cargo xtask doctor`: what this machine has and lacks for each track, every missing
//! piece with its fix (issue 6, part 5).
//!
//! The report is computed from [`HostFacts`] and the track table by [`report`] (pure, so
//! it is tested with fake facts); [`run`] probes, prints, and can save the facts for
//! `cargo xtask build --facts FILE --dry-run` on another machine. The text report ends
//! with what `cargo xtask setup --for ci` would install here ([`crate::setup`]).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::build::facts::{DiscoverOptions, HostFacts};
use crate::context::RunContext;
use crate::toolset::msvc;
use crate::toolset::rocm;
use crate::toolset::tools::ToolFact;
use crate::tracks::{Backend, Os, Track, TracksFile};

/// Flags of `cargo xtask doctor`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this track; exit 1 when it cannot be built here.
    #[arg(long, value_name = "NAME")]
    pub track: Option<String>,
    /// Also look at this ROCm / HIP SDK root.
    #[arg(long, value_name = "DIR")]
    pub rocm_path: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write the probed facts to FILE (for `build --facts FILE --dry-run` elsewhere).
    #[arg(long, value_name = "FILE")]
    pub save_facts: Option<PathBuf>,
}

/// State of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Present and usable.
    Ok,
    /// Absent or unusable here.
    Missing,
    /// Not applicable to this machine (a Windows toolset on Linux).
    NotHere,
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What was checked (`cmake`, `ROCm 6.4`, `MSVC 14.44`).
    pub what: String,
    /// Its state.
    pub status: Status,
    /// What was found (path, version) or why it is missing.
    pub detail: String,
    /// How to get it (empty when nothing is to be done).
    pub fix: String,
}

/// A track's readiness on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TrackReport {
    /// Track name.
    pub name: String,
    /// Its description.
    pub description: String,
    /// Ready to build here.
    pub ready: bool,
    /// Why not, when it builds on another OS.
    pub elsewhere: Option<String>,
    /// Its requirements.
    pub checks: Vec<Check>,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// `Linux x86_64-unknown-linux-gnu`.
    pub machine: String,
    /// Tools and toolchains found (or not).
    pub checks: Vec<Check>,
    /// Per track.
    pub tracks: Vec<TrackReport>,
}

fn ok(what: &str, detail: impl Into<String>) -> Check {
    Check {
        what: what.into(),
        status: Status::Ok,
        detail: detail.into(),
        fix: String::new(),
    }
}

fn missing(what: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
    Check {
        what: what.into(),
        status: Status::Missing,
        detail: detail.into(),
        fix: fix.into(),
    }
}

fn tool(what: &str, fact: &Option<ToolFact>, fix: &str) -> Check {
    match fact {
        Some(ToolFact {
            path: Some(p),
            version,
        }) => ok(
            what,
            match version {
                Some(v) => format!("{p} ({v})"),
                None => p.clone(),
            },
        ),
        _ => missing(what, "not found", fix),
    }
}

fn fix_for(os: Os, linux: &str, windows: &str) -> String {
    match os {
        Os::Linux => linux.to_string(),
        Os::Windows => windows.to_string(),
    }
}

/// The checks of the build tools every track needs.
fn build_tools(f: &HostFacts) -> Vec<Check> {
    let t = &f.tools;
    vec![
        tool("cmake", &t.cmake, &fix_for(f.os, "apt-get install -y cmake", "winget install Kitware.CMake")),
        tool("ninja", &t.ninja, &fix_for(f.os, "apt-get install -y ninja-build", "winget install Ninja-build.Ninja")),
        tool(
            "libclang",
            &t.libclang,
            &fix_for(
                f.os,
                "apt-get install -y libclang-dev clang (bindgen needs it), or set LIBCLANG_PATH",
                "set LIBCLANG_PATH to a folder with libclang.dll (the HIP SDK's bin, or an LLVM install)",
            ),
        ),
    ]
}

/// The ROCm check for a version (`6.4`), against the discovered SDKs.
fn rocm_check(f: &HostFacts, version: &str, os: Os) -> Check {
    let what = format!("ROCm {version}");
    match f
        .rocm
        .sdks
        .iter()
        .find(|s| s.version.major_minor() == version)
    {
        Some(s) if s.clangxx.is_some() => ok(
            &what,
            format!(
                "{} at {} (version from {})",
                s.version, s.root, s.version_source
            ),
        ),
        Some(s) => missing(
            &what,
            format!("{} at {} has no clang++", s.version, s.root),
            "reinstall the SDK with its compiler (HIP SDK: the default components)",
        ),
        None => {
            let others: Vec<String> = f
                .rocm
                .sdks
                .iter()
                .map(|s| format!("{} at {}", s.version, s.root))
                .collect();
            let detail = if others.is_empty() {
                "no ROCm / HIP SDK found".to_string()
            } else {
                format!("found only {}", others.join(", "))
            };
            missing(
                &what,
                detail,
                fix_for(
                    os,
                    &format!("install ROCm {version} (/opt/rocm-{version}.x, or Debian's hipcc/librocblas-dev/libhipblas-dev, see docs/build/HIP.md), or pass --rocm-path"),
                    &format!("install the AMD HIP SDK {version} for Windows (C:\\Program Files\\AMD\\ROCm\\{version}), or pass --rocm-path"),
                ),
            )
        }
    }
}

fn msvc_check(f: &HostFacts, toolset: &str) -> Check {
    let what = format!("MSVC {toolset}");
    let Some(m) = &f.msvc else {
        return Check {
            what,
            status: Status::NotHere,
            detail: "Visual Studio exists only on Windows".into(),
            fix: String::new(),
        };
    };
    match msvc::select(&m.instances, toolset) {
        Ok(sel) => match &m.capture {
            Some(c) => match msvc::parse_vcvars(&c.output)
                .map_err(anyhow::Error::from)
                .and_then(|p| msvc::check_toolset(&p, toolset).map_err(anyhow::Error::from))
            {
                Ok(v) => ok(
                    &what,
                    format!("VCToolsVersion {v} from {}", sel.instance.installation_path),
                ),
                Err(e) => missing(
                    &what,
                    format!("{e:#}"),
                    format!(
                        "repair the instance, or add component {}",
                        msvc::COMPONENT_14_44
                    ),
                ),
            },
            None => missing(
                &what,
                format!("{sel}: vcvarsall was not captured"),
                "run doctor again from a normal (non-developer) prompt",
            ),
        },
        Err(e) => missing(
            &what,
            format!("{e:#}"),
            format!(
                "Visual Studio Installer -> Modify -> Individual components -> {}",
                msvc::COMPONENT_14_44
            ),
        ),
    }
}

fn cuda_check(f: &HostFacts, version: Option<&str>) -> Check {
    let what = match version {
        Some(v) => format!("CUDA {v}"),
        None => "CUDA".to_string(),
    };
    match &f.cuda {
        Some(c) if version.is_none_or(|v| c.version.starts_with(v)) => {
            ok(&what, format!("{} at {}", c.version, c.root))
        }
        Some(c) => missing(
            &what,
            format!("found {} at {}", c.version, c.root),
            "install the CUDA toolkit version the track names, or set CUDA_PATH",
        ),
        None => missing(
            &what,
            "no CUDA toolkit found",
            "install the CUDA toolkit (nvcc), or set CUDA_PATH",
        ),
    }
}

fn os_label(os: Os) -> &'static str {
    match os {
        Os::Windows => "Windows",
        Os::Linux => "Linux",
    }
}

fn mingw_check(f: &HostFacts) -> Check {
    tool(
        "mingw-w64 (posix)",
        &f.tools.mingw,
        "apt-get install -y --no-install-recommends gcc-mingw-w64-x86-64 g++-mingw-w64-x86-64 mingw-w64-x86-64-dev",
    )
}

fn rust_target_check(f: &HostFacts, target: &str) -> Check {
    if f.tools.rust_targets.iter().any(|x| x == target) {
        ok(&format!("rust target {target}"), "installed")
    } else {
        missing(
            &format!("rust target {target}"),
            "not installed",
            format!("rustup target add {target}"),
        )
    }
}

fn track_report(name: &str, t: &Track, f: &HostFacts) -> TrackReport {
    let mut checks = build_tools(f);
    // A MinGW track cross-builds on Linux (mingw-w64 and the windows-gnu Rust target);
    // every other Windows track builds on Windows with MSVC.
    let mingw = t
        .crt
        .as_ref()
        .is_some_and(|c| c.kind == crate::tracks::CrtKind::Mingw);
    let build_os = if mingw { Os::Linux } else { t.os };
    if mingw {
        checks.push(mingw_check(f));
        checks.extend(
            t.build
                .target
                .as_deref()
                .map(|target| rust_target_check(f, target)),
        );
    } else if t.os == Os::Windows {
        let toolset = t
            .crt
            .as_ref()
            .map(|c| c.toolset.as_str())
            .unwrap_or(msvc::DEFAULT_TOOLSET);
        checks.push(msvc_check(f, toolset));
    }
    match (t.backend, &t.sdk) {
        (Backend::Hip, Some(sdk)) => checks.push(rocm_check(f, &sdk.version, t.os)),
        (Backend::Cuda, sdk) => {
            checks.push(cuda_check(f, sdk.as_ref().map(|s| s.version.as_str())))
        }
        _ => {}
    }
    let elsewhere = (build_os != f.os).then(|| {
        format!(
            "builds on {}: run `cargo xtask doctor --track {name}` there",
            os_label(build_os)
        )
    });
    let ready = elsewhere.is_none() && checks.iter().all(|c| c.status == Status::Ok);
    TrackReport {
        name: name.to_string(),
        description: t.description.clone(),
        ready,
        elsewhere,
        checks,
    }
}

/// Builds the report from facts and tracks (pure).
pub fn report(f: &HostFacts, tracks: &TracksFile, only: Option<&str>) -> Report {
    let t = &f.tools;
    let mut checks = build_tools(f);
    checks.push(tool(
        "objdump",
        &t.objdump,
        &fix_for(
            f.os,
            "apt-get install -y binutils",
            "use llvm-objdump from the HIP SDK or LLVM",
        ),
    ));
    checks.push(tool(
        "python3",
        &t.python3,
        &fix_for(
            f.os,
            "apt-get install -y python3 python3-pip (fetches actionlint)",
            "winget install Python.Python.3.12",
        ),
    ));
    // ROCm SDKs, GPUs, CUDA, MSVC.
    if f.rocm.sdks.is_empty() {
        checks.push(missing(
            "ROCm SDK",
            "none found (HIP_PATH, ROCM_PATH, C:\\Program Files\\AMD\\ROCm\\*, /opt/rocm*, /usr)",
            "needed only for hip builds: see docs/build/HIP.md",
        ));
    }
    for s in &f.rocm.sdks {
        checks.push(ok(
            &format!("ROCm {}", s.version.major_minor()),
            format!(
                "{} at {} (version from {}; clang++ {}; amdgpu-arch {})",
                s.version,
                s.root,
                s.version_source,
                if s.clangxx.is_some() { "yes" } else { "no" },
                if s.amdgpu_arch.is_some() { "yes" } else { "no" }
            ),
        ));
    }
    for (p, why) in &f.rocm.rejected {
        checks.push(missing(
            "ROCm SDK",
            format!("{p} is not usable: {why}"),
            "point --rocm-path / HIP_PATH / ROCM_PATH at the SDK root",
        ));
    }
    checks.push(match &f.gpus {
        None => missing(
            "AMD GPUs",
            "amdgpu-arch not found",
            "it comes with ROCm / the HIP SDK; without it use --gpu-targets LIST or a --track",
        ),
        Some(p) => match rocm::gpus_from_probe(Some(p)) {
            Ok(g) => ok("AMD GPUs", format!("{} ({})", g.join(", "), p.tool)),
            Err(e) => missing("AMD GPUs", format!("{e:#}"), "fine for packaging (tracks name their targets); for a local build pass --gpu-targets"),
        },
    });
    checks.push(cuda_check(f, None));
    if f.os == Os::Windows {
        checks.push(msvc_check(f, msvc::DEFAULT_TOOLSET));
    }
    // Cross tests (Windows binaries on Linux).
    if f.os == Os::Linux {
        checks.push(mingw_check(f));
        checks.push(tool("wine", &t.wine, "apt-get install -y wine wine64"));
        checks.push(rust_target_check(f, "x86_64-pc-windows-gnu"));
    }
    let tracks = tracks
        .tracks
        .iter()
        .filter(|(n, _)| only.is_none_or(|o| o == n.as_str()))
        .map(|(n, t)| track_report(n, t, f))
        .collect();
    Report {
        machine: format!("{} {}", os_label(f.os), f.host_triple),
        checks,
        tracks,
    }
}

fn mark(s: Status) -> &'static str {
    match s {
        Status::Ok => "ok",
        Status::Missing => "MISSING",
        Status::NotHere => "n/a",
    }
}

/// The report as text.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "doctor: {}\n", r.machine);
    let line = |s: &mut String, c: &Check| {
        let _ = writeln!(s, "  {:<8} {:<28} {}", mark(c.status), c.what, c.detail);
        if !c.fix.is_empty() {
            let _ = writeln!(s, "  {:<8} {:<28} fix: {}", "", "", c.fix);
        }
    };
    let _ = writeln!(s, "this machine:");
    for c in &r.checks {
        line(&mut s, c);
    }
    for t in &r.tracks {
        let state = match (&t.elsewhere, t.ready) {
            (Some(w), _) => format!("not here: {w}"),
            (None, true) => "ready".to_string(),
            (None, false) => "NOT READY".to_string(),
        };
        let _ = writeln!(s, "\ntrack {} ({}): {state}", t.name, t.description);
        if t.elsewhere.is_none() {
            for c in &t.checks {
                line(&mut s, c);
            }
        } else {
            let needs: Vec<&str> = t.checks.iter().map(|c| c.what.as_str()).collect();
            let _ = writeln!(s, "  needs there: {}", needs.join(", "));
        }
    }
    s
}

/// What `cargo xtask setup --for ci` finds and would install here, from the same needs
/// data (packaging/needs.toml) the set-up step of `dist` and `test` reads.
fn setup_section(ctx: &RunContext) -> Result<String> {
    use crate::setup::{plan, probe, render};
    let needs = ctx.needs()?;
    let req = needs.resolve("ci", None, ctx.tracks()?)?;
    Ok(render(&plan(needs, &req, &probe(needs, &req))))
}

/// Runs the verb.
pub fn run(args: Args, ctx: &RunContext) -> Result<ExitCode> {
    let tracks = ctx.tracks()?;
    if let Some(t) = &args.track {
        tracks.track(t)?;
    }
    let facts = HostFacts::discover(&DiscoverOptions {
        rocm_path: args.rocm_path.clone(),
        msvc_toolset: msvc::DEFAULT_TOOLSET.to_string(),
        probe_gpus: true,
        probe_tools: true,
    });
    if let Some(out) = &args.save_facts {
        std::fs::write(out, serde_json::to_string_pretty(&facts)?)
            .with_context(|| format!("writing {}", out.display()))?;
        eprintln!("doctor: facts saved to {}", out.display());
    }
    let r = report(&facts, tracks, args.track.as_deref());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", render(&r));
        print!("\n{}", setup_section(ctx)?);
    }
    let failed = args.track.is_some() && r.tracks.iter().any(|t| !t.ready);
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
