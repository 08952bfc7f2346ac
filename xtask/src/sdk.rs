//! `cargo xtask sdk`: a real ROCm SDK on a machine that has none, from Debian's packages
//! (issue 7). `sdk debian --suite sid|experimental` makes a debootstrap chroot under the
//! target dir with hipcc and the -dev packages listed in `packaging/sdk/debian.toml`;
//! `build --chroot` and `dist chroot` (and `sdk run`) run inside it with `/proc` and the
//! host's Rust toolchain, workspace and target dir mounted at their own paths.
//!
//! Deciding and doing are apart: [`plan_create`] and [`plan_run`] are pure (facts in,
//! commands and mounts out) and unit-tested; [`execute_create`] and [`execute_run`] only
//! carry a plan out, unmounting whatever they mounted, also on failure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::project::{packaging_dir, project_root, target_dir};

/// The stamp file written last into a finished chroot: what it was made from.
pub const STAMP: &str = ".audiocpp-sdk.json";

/// The apt setting the chroot needs: the mirror is a frozen snapshot whose Release
/// files have expired.
pub const APT_CONF: &str = "Acquire::Check-Valid-Until \"false\";\n";

/// Flags of `cargo xtask sdk`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: SdkCommand,
}

/// The `sdk` sub-verbs.
#[derive(Debug, clap::Subcommand)]
pub enum SdkCommand {
    /// Make (once) a Debian chroot with the ROCm SDK under <target>/sdk/debian-<suite>.
    Debian(DebianArgs),
    /// Run a command inside a chroot made by `sdk debian` (/proc, the Rust toolchain,
    /// the workspace and the target dir mounted).
    Run(RunArgs),
}

/// Flags of `cargo xtask sdk debian`.
#[derive(Debug, clap::Args)]
pub struct DebianArgs {
    /// A suite from packaging/sdk/debian.toml (sid: ROCm 6.4, experimental: ROCm 7.2).
    #[arg(long)]
    pub suite: String,
    /// Debian mirror (default: the first non-security URI of
    /// /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list).
    #[arg(long)]
    pub mirror: Option<String>,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Flags of `cargo xtask sdk run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The suite whose chroot to use.
    #[arg(long)]
    pub suite: String,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// One suite of `packaging/sdk/debian.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteSpec {
    /// The suite debootstrap installs (`sid`).
    pub bootstrap: String,
    /// A further suite added to apt's sources (`experimental`).
    #[serde(default)]
    pub extra_source: Option<String>,
    /// `apt-get install -t RELEASE`: where the SDK packages come from.
    #[serde(default)]
    pub default_release: Option<String>,
    /// Packages this suite installs instead of the shared `packages` (a chroot that is
    /// not an SDK, such as the fresh machine of [`crate::fresh_machine`]).
    #[serde(default)]
    pub packages: Option<Vec<String>>,
}

impl SuiteSpec {
    /// The packages this suite's chroot installs.
    pub fn packages<'a>(&'a self, spec: &'a DebianSpec) -> &'a [String] {
        self.packages.as_deref().unwrap_or(&spec.packages)
    }
}

/// `packaging/sdk/debian.toml`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DebianSpec {
    /// Packages every chroot installs.
    pub packages: Vec<String>,
    /// Suites by name.
    pub suites: BTreeMap<String, SuiteSpec>,
    /// Pinned packages whose real kernel folders `cargo xtask test` checks: their schema
    /// is `kernels::debian::pinned`'s, so this module does not depend on `kernels`.
    #[serde(default)]
    pub kernel_debs: Vec<toml::Table>,
}

impl DebianSpec {
    /// The spec's default location.
    pub fn default_path() -> PathBuf {
        packaging_dir().join("sdk").join("debian.toml")
    }

    /// Reads and checks the spec.
    pub fn load(path: &Path) -> Result<DebianSpec> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let spec: DebianSpec =
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        if spec.packages.is_empty() {
            bail!("{}: `packages` is empty", path.display());
        }
        Ok(spec)
    }

    /// The suite named `name`, or an error listing the suites there are.
    pub fn suite(&self, name: &str) -> Result<&SuiteSpec> {
        self.suites.get(name).with_context(|| {
            format!(
                "unknown suite '{name}' (packaging/sdk/debian.toml has: {})",
                self.suites.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })
    }
}

/// Where the chroot of `suite` lives: `<target>/sdk/debian-<suite>`.
pub fn chroot_dir(target: &Path, suite: &str) -> PathBuf {
    target.join("sdk").join(format!("debian-{suite}"))
}

/// What is on disk at the chroot's place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootState {
    /// Nothing there.
    Missing,
    /// A finished chroot; its stamp's contents.
    Stamped(String),
    /// A folder without a stamp (not made by this verb, or damaged).
    Unstamped,
}

/// Everything [`plan_create`] decides on.
#[derive(Debug, Clone)]
pub struct CreateFacts {
    /// Running as root (debootstrap, chroot and mount need it).
    pub is_root: bool,
    /// debootstrap's path.
    pub debootstrap: Option<PathBuf>,
    /// The mirror (flag, else from apt's sources).
    pub mirror: Option<String>,
    /// The target dir.
    pub target: PathBuf,
    /// The chroot's state.
    pub root_state: RootState,
    /// A staging folder left by an interrupted run.
    pub partial_exists: bool,
}

/// A command of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cmd {
    /// Program.
    pub program: String,
    /// Arguments.
    pub args: Vec<String>,
    /// Why it runs.
    pub why: String,
}

impl Cmd {
    fn new(program: &str, args: &[&str], why: &str) -> Cmd {
        Cmd {
            program: program.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            why: why.into(),
        }
    }

    /// The command line as a shell shows it.
    pub fn display(&self) -> String {
        std::iter::once(self.program.as_str())
            .chain(self.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// What `sdk debian` does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum CreatePlan {
    /// The stamp is there and says the same: nothing to do.
    UpToDate {
        /// The chroot.
        root: PathBuf,
    },
    /// Build the chroot in `partial`, then rename it to `root`.
    Create {
        /// The final folder.
        root: PathBuf,
        /// The staging folder (removed first when an earlier run left it).
        partial: PathBuf,
        /// Remove a stale `partial` first.
        remove_stale_partial: bool,
        /// debootstrap, on the host.
        bootstrap: Cmd,
        /// Files written into `partial` (path relative to it, contents).
        files: Vec<(String, String)>,
        /// Commands run inside `partial` (through chroot) with /proc mounted.
        in_chroot: Vec<Cmd>,
        /// The stamp's contents.
        stamp: String,
    },
}

/// The stamp's contents: what the chroot was made from (changing the package list or the
/// mirror makes the verb refuse the old chroot, naming the remedy).
pub fn stamp_text(suite: &str, spec: &SuiteSpec, packages: &[String], mirror: &str) -> String {
    let v = serde_json::json!({
        "suite": suite,
        "bootstrap": spec.bootstrap,
        "extra_source": spec.extra_source,
        "default_release": spec.default_release,
        "mirror": mirror,
        "packages": packages,
    });
    serde_json::to_string_pretty(&v).expect("a JSON value serialises") + "\n"
}

/// Plans `sdk debian --suite NAME`. Pure.
pub fn plan_create(suite: &str, spec: &DebianSpec, facts: &CreateFacts) -> Result<CreatePlan> {
    let s = spec.suite(suite)?;
    let root = chroot_dir(&facts.target, suite);
    let Some(mirror) = facts.mirror.as_deref() else {
        bail!(
            "no Debian mirror: none in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list; pass --mirror URL"
        );
    };
    let stamp = stamp_text(suite, s, s.packages(spec), mirror);
    match &facts.root_state {
        RootState::Stamped(have) if *have == stamp => return Ok(CreatePlan::UpToDate { root }),
        RootState::Stamped(_) => bail!(
            "{} was made from other settings (see its {STAMP}); remove it (`rm -rf {}`, after checking nothing is mounted under it) and run again",
            root.display(),
            root.display()
        ),
        RootState::Unstamped => bail!(
            "{} exists but has no {STAMP}: it was not finished by this verb; remove it (`rm -rf {}`, after checking nothing is mounted under it) and run again",
            root.display(),
            root.display()
        ),
        RootState::Missing => {}
    }
    if !facts.is_root {
        bail!("`cargo xtask sdk debian` needs root (debootstrap, chroot and mount do); run it as root or under sudo");
    }
    let Some(debootstrap) = &facts.debootstrap else {
        bail!("debootstrap is not installed; install it with `apt-get install debootstrap`");
    };
    let partial = root.with_file_name(format!("debian-{suite}.partial"));
    let partial_s = partial.display().to_string();
    let bootstrap = Cmd::new(
        &debootstrap.display().to_string(),
        &["--variant=minbase", &s.bootstrap, &partial_s, mirror],
        "a minimal Debian base to install the ROCm packages into",
    );
    let mut files = vec![(
        "etc/apt/apt.conf.d/99audiocpp".to_string(),
        APT_CONF.to_string(),
    )];
    if let Some(extra) = &s.extra_source {
        files.push((
            format!("etc/apt/sources.list.d/{extra}.list"),
            format!("deb {mirror} {extra} main\n"),
        ));
    }
    let mut install: Vec<&str> = vec!["apt-get", "install", "-y"];
    if let Some(rel) = &s.default_release {
        install.extend(["-t", rel]);
    }
    install.extend(s.packages(spec).iter().map(String::as_str));
    let in_chroot = vec![
        Cmd::new("apt-get", &["update"], "read the suite's package lists"),
        Cmd::new(
            install[0],
            &install[1..],
            "hipcc, the ROCm -dev packages and the build tools (packaging/sdk/debian.toml)",
        ),
    ];
    Ok(CreatePlan::Create {
        root,
        partial,
        remove_stale_partial: facts.partial_exists,
        bootstrap,
        files,
        in_chroot,
        stamp,
    })
}

/// A mount of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Mount {
    /// procfs at `<root>/proc` (hipcc reads /proc/self/exe).
    Proc,
    /// A host folder at the same path inside the chroot.
    Bind(PathBuf),
}

/// Everything [`plan_run`] decides on.
#[derive(Debug, Clone)]
pub struct RunFacts {
    /// Running as root.
    pub is_root: bool,
    /// The target dir.
    pub target: PathBuf,
    /// The workspace root.
    pub workspace: PathBuf,
    /// The chroot's state.
    pub root_state: RootState,
    /// RUSTUP_HOME (default ~/.rustup).
    pub rustup_home: PathBuf,
    /// CARGO_HOME (default ~/.cargo).
    pub cargo_home: PathBuf,
    /// HOME.
    pub home: PathBuf,
    /// The working folder for the command.
    pub cwd: PathBuf,
}

/// What `sdk run` (and `build --chroot`, `dist chroot`) does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunPlan {
    /// The chroot.
    pub root: PathBuf,
    /// Mounts, in mounting order (unmounted in reverse).
    pub mounts: Vec<Mount>,
    /// The command line run on the host (`chroot ROOT env -i -C CWD K=V ... CMD`).
    pub command: Cmd,
}

/// The environment inside the chroot: a clean one, the host's Rust toolchain on PATH,
/// cargo offline (the host's registry cache is mounted; the chroot has no CA setup), and
/// a target dir of its own, since what is built there links sid's glibc and does not
/// run on the host.
pub fn chroot_env(suite: &str, facts: &RunFacts) -> Vec<(String, String)> {
    let cargo_bin = facts.cargo_home.join("bin");
    vec![
        ("HOME".into(), facts.home.display().to_string()),
        (
            "PATH".into(),
            format!(
                "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                cargo_bin.display()
            ),
        ),
        (
            "RUSTUP_HOME".into(),
            facts.rustup_home.display().to_string(),
        ),
        ("CARGO_HOME".into(), facts.cargo_home.display().to_string()),
        ("CARGO_NET_OFFLINE".into(), "true".into()),
        (
            "CARGO_TARGET_DIR".into(),
            facts
                .target
                .join(format!("chroot-{suite}"))
                .display()
                .to_string(),
        ),
        ("AUDIOCPP_CHROOT".into(), suite.into()),
    ]
}

/// Plans running `argv` inside the chroot of `suite`. Pure.
pub fn plan_run(suite: &str, argv: &[String], facts: &RunFacts) -> Result<RunPlan> {
    let root = chroot_dir(&facts.target, suite);
    match &facts.root_state {
        RootState::Stamped(_) => {}
        RootState::Missing => bail!(
            "there is no {suite} chroot at {}; make it with `cargo xtask sdk debian --suite {suite}`",
            root.display()
        ),
        RootState::Unstamped => bail!(
            "{} has no {STAMP}: it is unfinished; remove it and run `cargo xtask sdk debian --suite {suite}`",
            root.display()
        ),
    }
    if !facts.is_root {
        bail!("running in the {suite} chroot needs root (chroot and mount do); run as root or under sudo");
    }
    if argv.is_empty() {
        bail!("no command to run in the {suite} chroot");
    }
    let mut binds: Vec<PathBuf> = Vec::new();
    for p in [
        &facts.rustup_home,
        &facts.cargo_home,
        &facts.workspace,
        &facts.target,
    ] {
        if !binds.iter().any(|b| p.starts_with(b)) {
            binds.retain(|b| !b.starts_with(p));
            binds.push(p.clone());
        }
    }
    let mut mounts = vec![Mount::Proc];
    mounts.extend(binds.into_iter().map(Mount::Bind));
    let mut args: Vec<String> = vec![
        root.display().to_string(),
        "/usr/bin/env".into(),
        "-i".into(),
        "-C".into(),
        facts.cwd.display().to_string(),
    ];
    args.extend(
        chroot_env(suite, facts)
            .into_iter()
            .map(|(k, v)| format!("{k}={v}")),
    );
    args.extend(argv.iter().cloned());
    Ok(RunPlan {
        root,
        mounts,
        command: Cmd {
            program: "chroot".into(),
            args,
            why: format!("run in the Debian {suite} chroot"),
        },
    })
}

/// The host path a mount lands on.
pub fn mount_point(root: &Path, m: &Mount) -> PathBuf {
    match m {
        Mount::Proc => root.join("proc"),
        Mount::Bind(p) => root.join(p.strip_prefix("/").unwrap_or(p)),
    }
}

/// The first non-security mirror URI of apt's deb822 or one-line sources.
pub fn parse_mirror(deb822: Option<&str>, one_line: Option<&str>) -> Option<String> {
    if let Some(text) = deb822 {
        for stanza in text.split("\n\n") {
            let field = |name: &str| {
                stanza.lines().find_map(|l| {
                    l.strip_prefix(name)
                        .and_then(|r| r.strip_prefix(':'))
                        .map(str::trim)
                })
            };
            let suites = field("Suites").unwrap_or("");
            if suites.contains("security") {
                continue;
            }
            if let Some(uri) = field("URIs").and_then(|u| u.split_whitespace().next()) {
                return Some(uri.to_string());
            }
        }
    }
    one_line?.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        if it.next()? != "deb" {
            return None;
        }
        let mut uri = it.next()?;
        if uri.starts_with('[') {
            if !uri.ends_with(']') {
                it.find(|w| w.ends_with(']'))?;
            }
            uri = it.next()?;
        }
        let suite = it.next()?;
        (!suite.contains("security")).then(|| uri.to_string())
    })
}

/// This machine's Debian mirror, from apt's sources.
pub fn host_mirror() -> Option<String> {
    parse_mirror(
        std::fs::read_to_string("/etc/apt/sources.list.d/debian.sources")
            .ok()
            .as_deref(),
        std::fs::read_to_string("/etc/apt/sources.list")
            .ok()
            .as_deref(),
    )
}

/// Whether this process runs with effective uid 0 (from /proc/self/status).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

fn which(name: &str) -> Option<PathBuf> {
    crate::toolset::tools::which_also_in(name, &["/usr/sbin", "/sbin"])
}

/// The state of the chroot at `root`.
pub fn root_state(root: &Path) -> RootState {
    if !root.exists() {
        return RootState::Missing;
    }
    match std::fs::read_to_string(root.join(STAMP)) {
        Ok(s) => RootState::Stamped(s),
        Err(_) => RootState::Unstamped,
    }
}

/// Mount points at or under `dir` (from /proc/self/mountinfo).
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(PathBuf::from))
        .filter(|p| p.starts_with(dir))
        .collect()
}

/// Mounts in order; unmounts in reverse when dropped, so a failing command (or a panic)
/// never leaves /proc or a bind mount behind.
struct Mounted {
    points: Vec<PathBuf>,
}

impl Mounted {
    fn mount(root: &Path, mounts: &[Mount]) -> Result<Mounted> {
        let mut done = Mounted { points: Vec::new() };
        for m in mounts {
            let point = mount_point(root, m);
            if !mounts_under(&point).is_empty() {
                bail!(
                    "{} is already mounted (an earlier run was killed?); unmount it with `umount -R {}` and run again",
                    point.display(),
                    point.display()
                );
            }
            std::fs::create_dir_all(&point)
                .with_context(|| format!("creating the mount point {}", point.display()))?;
            let mut cmd = Command::new("mount");
            match m {
                Mount::Proc => cmd.args(["-t", "proc", "proc"]).arg(&point),
                Mount::Bind(src) => cmd.arg("--bind").arg(src).arg(&point),
            };
            let status = cmd
                .status()
                .with_context(|| format!("running mount for {}", point.display()))?;
            if !status.success() {
                bail!("mounting {} failed ({status})", point.display());
            }
            done.points.push(point);
        }
        Ok(done)
    }

    fn unmount(&mut self) -> Result<()> {
        let mut failed = Vec::new();
        while let Some(p) = self.points.pop() {
            let ok = Command::new("umount")
                .arg(&p)
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if !ok {
                failed.push(p.display().to_string());
            }
        }
        if !failed.is_empty() {
            bail!(
                "could not unmount {} (a process still uses it?); unmount by hand with `umount -l PATH`",
                failed.join(", ")
            );
        }
        Ok(())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Err(e) = self.unmount() {
            eprintln!("sdk: {e:#}");
        }
    }
}

fn run_cmd(c: &Cmd) -> Result<()> {
    crate::toolset::tools::run_streamed(
        Command::new(&c.program).args(&c.args),
        &format!("sdk: {}", c.display()),
    )
}

/// Carries out a [`CreatePlan`]: debootstrap into the staging folder, apt inside it with
/// /proc mounted (unmounted after, also on failure), stamp, rename.
pub fn execute_create(plan: &CreatePlan) -> Result<()> {
    let CreatePlan::Create {
        root,
        partial,
        remove_stale_partial,
        bootstrap,
        files,
        in_chroot,
        stamp,
    } = plan
    else {
        return Ok(());
    };
    if *remove_stale_partial {
        let busy = mounts_under(partial);
        if !busy.is_empty() {
            bail!(
                "{} is left from an interrupted run and still has mounts ({}); unmount them (`umount -R PATH`) and run again",
                partial.display(),
                busy.iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        std::fs::remove_dir_all(partial)
            .with_context(|| format!("removing the stale {}", partial.display()))?;
    }
    if let Some(parent) = partial.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    run_cmd(bootstrap).context("bootstrapping the Debian base")?;
    for (rel, contents) in files {
        let p = partial.join(rel);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        std::fs::write(&p, contents).with_context(|| format!("writing {}", p.display()))?;
    }
    {
        let mut mounted = Mounted::mount(partial, &[Mount::Proc])?;
        for c in in_chroot {
            let mut args = vec![
                partial.display().to_string(),
                "/usr/bin/env".into(),
                "DEBIAN_FRONTEND=noninteractive".into(),
                c.program.clone(),
            ];
            args.extend(c.args.iter().cloned());
            run_cmd(&Cmd {
                program: "chroot".into(),
                args,
                why: c.why.clone(),
            })
            .context("installing the ROCm SDK in the chroot")?;
        }
        mounted.unmount()?;
    }
    std::fs::write(partial.join(STAMP), stamp)
        .with_context(|| format!("writing the stamp in {}", partial.display()))?;
    std::fs::rename(partial, root)
        .with_context(|| format!("renaming {} to {}", partial.display(), root.display()))?;
    Ok(())
}

/// Carries out a [`RunPlan`]; returns the command's exit status.
pub fn execute_run(plan: &RunPlan) -> Result<std::process::ExitStatus> {
    let mut mounted = Mounted::mount(&plan.root, &plan.mounts)?;
    eprintln!("sdk: {}", plan.command.display());
    let status = Command::new(&plan.command.program)
        .args(&plan.command.args)
        .status()
        .with_context(|| format!("starting {}", plan.command.program));
    mounted.unmount()?;
    status
}

/// The facts of a run on this machine.
pub fn run_facts(suite: &str) -> RunFacts {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"));
    let env_or = |k: &str, d: PathBuf| std::env::var_os(k).map(PathBuf::from).unwrap_or(d);
    let target = absolute(&target_dir());
    RunFacts {
        is_root: is_root(),
        root_state: root_state(&chroot_dir(&target, suite)),
        target,
        workspace: project_root(),
        rustup_home: env_or("RUSTUP_HOME", home.join(".rustup")),
        cargo_home: env_or("CARGO_HOME", home.join(".cargo")),
        cwd: std::env::current_dir().unwrap_or_else(|_| project_root()),
        home,
    }
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

/// Runs `argv` in the chroot of `suite` on this machine (plan, then execute).
pub fn run_in_chroot(suite: &str, argv: &[String]) -> Result<ExitCode> {
    let plan = plan_run(suite, argv, &run_facts(suite))?;
    let status = execute_run(&plan)?;
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        None => ExitCode::from(1),
    })
}

/// Re-runs this very xtask (its current arguments minus `--chroot SUITE`) inside the
/// chroot. The host's xtask binary runs there unchanged (sid's glibc is newer), so the
/// plan is made where the SDK is.
pub fn reexec_in_chroot(suite: &str) -> Result<ExitCode> {
    rerun_in_chroot(suite, strip_chroot_flag(std::env::args().skip(1)))
}

/// Runs this very xtask with `args` (a verb and its flags) inside the chroot.
pub fn rerun_in_chroot(suite: &str, args: Vec<String>) -> Result<ExitCode> {
    let exe = std::env::current_exe().context("finding this xtask's own binary")?;
    let mut argv = vec![exe.display().to_string()];
    argv.extend(args);
    run_in_chroot(suite, &argv)
}

/// The arguments without `--chroot SUITE` / `--chroot=SUITE`.
pub fn strip_chroot_flag(args: impl Iterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip_next = false;
    for a in args {
        if skip_next {
            skip_next = false;
        } else if a == "--chroot" {
            skip_next = true;
        } else if !a.starts_with("--chroot=") {
            out.push(a);
        }
    }
    out
}

/// Runs the verb.
pub fn run(args: Args) -> Result<ExitCode> {
    match args.command {
        SdkCommand::Debian(a) => make_chroot(&a),
        SdkCommand::Run(a) => run_in_chroot(&a.suite, &a.command),
    }
}

/// `sdk debian`: plans and (unless `--dry-run`) makes the chroot.
pub fn make_chroot(a: &DebianArgs) -> Result<ExitCode> {
    let spec = DebianSpec::load(&DebianSpec::default_path())?;
    let target = absolute(&target_dir());
    let root = chroot_dir(&target, &a.suite);
    let facts = CreateFacts {
        is_root: is_root(),
        debootstrap: which("debootstrap"),
        mirror: a.mirror.clone().or_else(host_mirror),
        root_state: root_state(&root),
        partial_exists: root
            .with_file_name(format!("debian-{}.partial", a.suite))
            .exists(),
        target,
    };
    let plan = plan_create(&a.suite, &spec, &facts)
        .with_context(|| format!("planning the Debian {} chroot", a.suite))?;
    if a.dry_run {
        println!("{}", serde_json::to_string_pretty(&plan)?);
        return Ok(ExitCode::SUCCESS);
    }
    let started = std::time::Instant::now();
    execute_create(&plan).with_context(|| format!("making the Debian {} chroot", a.suite))?;
    match &plan {
        CreatePlan::UpToDate { root } => println!("sdk: {} is up to date", root.display()),
        CreatePlan::Create { root, .. } => println!(
            "sdk: made {} in {:.0} s",
            root.display(),
            started.elapsed().as_secs_f64()
        ),
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> DebianSpec {
        DebianSpec::load(&DebianSpec::default_path()).unwrap()
    }

    fn facts() -> CreateFacts {
        CreateFacts {
            is_root: true,
            debootstrap: Some("/usr/sbin/debootstrap".into()),
            mirror: Some("http://deb.debian.org/debian".into()),
            target: "/t".into(),
            root_state: RootState::Missing,
            partial_exists: false,
        }
    }

    #[test]
    fn sid_plan_bootstraps_then_installs_the_spec_packages() {
        let plan = plan_create("sid", &spec(), &facts()).unwrap();
        let CreatePlan::Create {
            root,
            partial,
            bootstrap,
            files,
            in_chroot,
            stamp,
            remove_stale_partial,
        } = plan
        else {
            panic!("expected a create plan")
        };
        assert_eq!(root, Path::new("/t/sdk/debian-sid"));
        assert_eq!(partial, Path::new("/t/sdk/debian-sid.partial"));
        assert!(!remove_stale_partial);
        assert_eq!(
            bootstrap.display(),
            "/usr/sbin/debootstrap --variant=minbase sid /t/sdk/debian-sid.partial http://deb.debian.org/debian"
        );
        assert_eq!(
            files,
            vec![(
                "etc/apt/apt.conf.d/99audiocpp".to_string(),
                APT_CONF.to_string()
            )]
        );
        assert_eq!(in_chroot[0].display(), "apt-get update");
        let install = in_chroot[1].display();
        assert!(
            install.starts_with("apt-get install -y hipcc "),
            "{install}"
        );
        for p in [
            "libamdhip64-dev",
            "librocblas-dev",
            "libhipblas-dev",
            "libhipblaslt-dev",
            "rocm-cmake",
            "libclang-dev",
            "ninja-build",
        ] {
            assert!(
                install.split(' ').any(|w| w == p),
                "{p} missing from {install}"
            );
        }
        assert!(stamp.contains("\"suite\": \"sid\""));
    }

    #[test]
    fn experimental_adds_the_source_and_installs_from_it() {
        let CreatePlan::Create {
            files,
            in_chroot,
            bootstrap,
            ..
        } = plan_create("experimental", &spec(), &facts()).unwrap()
        else {
            panic!("expected a create plan")
        };
        assert!(bootstrap.args.contains(&"sid".to_string()));
        assert!(files.contains(&(
            "etc/apt/sources.list.d/experimental.list".to_string(),
            "deb http://deb.debian.org/debian experimental main\n".to_string()
        )));
        assert!(in_chroot[1]
            .display()
            .starts_with("apt-get install -y -t experimental hipcc"));
    }

    #[test]
    fn a_matching_stamp_means_nothing_to_do() {
        let s = spec();
        let stamp = stamp_text(
            "sid",
            s.suite("sid").unwrap(),
            &s.packages,
            "http://deb.debian.org/debian",
        );
        let mut f = facts();
        f.root_state = RootState::Stamped(stamp);
        // Even without root or debootstrap: nothing would run.
        f.is_root = false;
        f.debootstrap = None;
        assert_eq!(
            plan_create("sid", &s, &f).unwrap(),
            CreatePlan::UpToDate {
                root: "/t/sdk/debian-sid".into()
            }
        );
    }

    #[test]
    fn bad_inputs_name_the_remedy() {
        let s = spec();
        let err =
            |f: &CreateFacts, suite: &str| format!("{:#}", plan_create(suite, &s, f).unwrap_err());
        let mut f = facts();
        f.is_root = false;
        assert!(err(&f, "sid").contains("needs root"));
        let mut f = facts();
        f.debootstrap = None;
        assert!(err(&f, "sid").contains("apt-get install debootstrap"));
        let mut f = facts();
        f.mirror = None;
        assert!(err(&f, "sid").contains("--mirror"));
        assert!(err(&facts(), "buster").contains("sid"));
        let mut f = facts();
        f.root_state = RootState::Unstamped;
        assert!(err(&f, "sid").contains("rm -rf /t/sdk/debian-sid"));
        let mut f = facts();
        f.root_state = RootState::Stamped("{}".into());
        assert!(err(&f, "sid").contains("other settings"));
    }

    #[test]
    fn a_stale_partial_is_removed_first() {
        let mut f = facts();
        f.partial_exists = true;
        let CreatePlan::Create {
            remove_stale_partial,
            ..
        } = plan_create("sid", &spec(), &f).unwrap()
        else {
            panic!()
        };
        assert!(remove_stale_partial);
    }

    fn run_facts_fixture() -> RunFacts {
        RunFacts {
            is_root: true,
            target: "/w/target".into(),
            workspace: "/w/repo".into(),
            root_state: RootState::Stamped("{}".into()),
            rustup_home: "/root/.rustup".into(),
            cargo_home: "/root/.cargo".into(),
            home: "/root".into(),
            cwd: "/w/repo".into(),
        }
    }

    #[test]
    fn run_plan_mounts_proc_toolchain_workspace_and_target() {
        let argv = vec!["cargo".to_string(), "build".to_string()];
        let plan = plan_run("sid", &argv, &run_facts_fixture()).unwrap();
        assert_eq!(
            plan.mounts,
            vec![
                Mount::Proc,
                Mount::Bind("/root/.rustup".into()),
                Mount::Bind("/root/.cargo".into()),
                Mount::Bind("/w/repo".into()),
                Mount::Bind("/w/target".into()),
            ]
        );
        let line = plan.command.display();
        assert!(line.starts_with("chroot /w/target/sdk/debian-sid /usr/bin/env -i -C /w/repo HOME=/root PATH=/root/.cargo/bin:"), "{line}");
        assert!(
            line.contains(" CARGO_TARGET_DIR=/w/target/chroot-sid "),
            "{line}"
        );
        assert!(line.contains(" CARGO_NET_OFFLINE=true "), "{line}");
        assert!(line.ends_with(" cargo build"), "{line}");
        assert!(
            !line.contains("ROCM_PATH"),
            "ROCM_PATH=/usr breaks clang's device libraries: {line}"
        );
        assert_eq!(
            mount_point(&plan.root, &plan.mounts[3]),
            Path::new("/w/target/sdk/debian-sid/w/repo")
        );
    }

    #[test]
    fn a_target_dir_inside_the_workspace_is_not_mounted_twice() {
        let mut f = run_facts_fixture();
        f.target = "/w/repo/target".into();
        let plan = plan_run("sid", &["true".to_string()], &f).unwrap();
        assert_eq!(plan.mounts.len(), 4);
        assert_eq!(plan.mounts[3], Mount::Bind("/w/repo".into()));
    }

    #[test]
    fn run_refuses_a_missing_or_unfinished_chroot_and_non_root() {
        let argv = vec!["true".to_string()];
        let mut f = run_facts_fixture();
        f.root_state = RootState::Missing;
        assert!(format!("{:#}", plan_run("sid", &argv, &f).unwrap_err())
            .contains("cargo xtask sdk debian --suite sid"));
        f.root_state = RootState::Unstamped;
        assert!(format!("{:#}", plan_run("sid", &argv, &f).unwrap_err()).contains("unfinished"));
        let mut f = run_facts_fixture();
        f.is_root = false;
        assert!(format!("{:#}", plan_run("sid", &argv, &f).unwrap_err()).contains("needs root"));
        assert!(plan_run("sid", &[], &run_facts_fixture()).is_err());
    }

    #[test]
    fn mirror_comes_from_the_first_non_security_source() {
        let deb822 = "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n\nTypes: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n";
        assert_eq!(
            parse_mirror(Some(deb822), None).as_deref(),
            Some("http://deb.debian.org/debian")
        );
        let sec_first = "URIs: http://s/debian-security\nSuites: bookworm-security\n\nURIs: http://m/debian\nSuites: bookworm\n";
        assert_eq!(
            parse_mirror(Some(sec_first), None).as_deref(),
            Some("http://m/debian")
        );
        let one = "# c\ndeb http://security.debian.org bookworm-security main\ndeb [arch=amd64] http://m2/debian bookworm main\n";
        assert_eq!(
            parse_mirror(None, Some(one)).as_deref(),
            Some("http://m2/debian")
        );
        let opts = "deb [arch=amd64 signed-by=/k.gpg] http://m3/debian sid main\n";
        assert_eq!(
            parse_mirror(None, Some(opts)).as_deref(),
            Some("http://m3/debian")
        );
        assert_eq!(parse_mirror(None, None), None);
    }

    #[test]
    fn the_chroot_flag_is_stripped_in_both_spellings() {
        let args = [
            "build",
            "--chroot",
            "sid",
            "--backend",
            "hip",
            "--chroot=sid",
        ]
        .map(String::from);
        assert_eq!(
            strip_chroot_flag(args.into_iter()),
            vec!["build", "--backend", "hip"]
        );
    }
}
