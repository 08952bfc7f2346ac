//! `cargo xtask setup [--for VERB] [--dry-run]`: checks what a verb needs on this machine
//! (`packaging/needs.toml`) and installs what is missing where it can: Debian packages
//! with apt as root, Rust targets and components with rustup. `dist` and `test` run it
//! first, so the README's two commands work on a fresh machine (issue 14, item 0).
//! `cargo xtask setup fresh-machine` instead tries that on a new Debian chroot
//! ([`crate::fresh_machine`]).
//!
//! Deciding and doing are apart: [`NeedsFile::resolve`] and [`plan`] are pure (needs,
//! probed [`Facts`], verb in; a [`Plan`] out) and tested with fake facts; [`probe`] is the
//! only look at the machine (through the doctor's probes in [`crate::toolset::tools`]) and
//! [`execute`] only runs a plan's steps, then probes again.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::context::RunContext;
use crate::toolset::tools;
use crate::tracks::{TracksError, TracksFile};

/// The schema version this code reads (`schema = 1` at the top of the file).
pub const SCHEMA_VERSION: u32 = 1;

/// Flags of `cargo xtask setup`: the needs of a verb, or the `fresh-machine` sub-verb
/// instead (see [`Mode`]).
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    /// A check to run instead of setting up this machine.
    #[command(subcommand)]
    pub verb: Option<Verb>,
    /// The verb whose needs to check and install (a `[verbs.NAME]` of packaging/needs.toml:
    /// dist, bench, test, ci).
    #[arg(long = "for", value_name = "VERB", default_value = "test")]
    pub for_verb: String,
    /// Also what building this track needs (its Rust target and that target's tools).
    #[arg(long, value_name = "NAME")]
    pub track: Option<String>,
    /// Print what is present and what would be installed; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Old spelling of `setup fresh-machine`.
    #[arg(long, hide = true, conflicts_with_all = ["dry_run", "track", "for_verb"])]
    pub fresh_machine: bool,
}

/// The sub-verbs of `cargo xtask setup`.
#[derive(Debug, clap::Subcommand)]
pub enum Verb {
    /// Try the set-up step of `dist` on a fresh Debian chroot (needs root; about 20 min;
    /// see xtask/src/fresh_machine.rs). CI does not run it.
    FreshMachine,
}

/// What `cargo xtask setup` was asked to do, decided from the flags before anything runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Check and install the needs of `--for VERB` (and `--track`) here.
    Needs,
    /// `setup fresh-machine` (old: `--fresh-machine`).
    FreshMachine,
}

impl Args {
    /// The mode the sub-verb (or its old flag) names.
    pub fn mode(&self) -> Mode {
        match self.verb {
            Some(Verb::FreshMachine) => Mode::FreshMachine,
            None if self.fresh_machine => Mode::FreshMachine,
            None => Mode::Needs,
        }
    }
}

/// `packaging/needs.toml`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NeedsFile {
    /// Schema version; must equal [`SCHEMA_VERSION`].
    pub schema: u32,
    /// Every need by name (`cmake`, `wine`, ...).
    pub needs: BTreeMap<String, Need>,
    /// The tools a Rust target needs besides its std, by target triple.
    #[serde(default)]
    pub targets: BTreeMap<String, TargetNeeds>,
    /// What each verb needs, by verb name.
    pub verbs: BTreeMap<String, VerbNeeds>,
}

/// One thing a verb needs (`[needs.NAME]`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Need {
    /// Why it is needed (printed next to it).
    pub why: String,
    /// How its presence is detected.
    pub detect: Detect,
    /// The Debian packages that install it (Linux).
    #[serde(default)]
    pub apt: Vec<String>,
    /// What to do where xtask cannot install it.
    pub fix: String,
}

/// How a need is found on the machine.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Detect {
    /// A program on PATH (or in /usr/sbin, /sbin).
    Command(String),
    /// Any of these files exists.
    Path(Vec<String>),
    /// bindgen's libclang folder, found as the doctor finds it.
    Libclang {},
    /// A module python3 can import.
    PythonModule(String),
    /// A rustup component installed in the active toolchain (installed with
    /// `rustup component add`).
    RustupComponent(String),
}

/// `[targets.TRIPLE]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TargetNeeds {
    /// Needs of a build for that target.
    pub needs: Vec<String>,
}

/// `[verbs.NAME]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct VerbNeeds {
    /// Other verbs whose needs this one has too.
    #[serde(default)]
    pub includes: Vec<String>,
    /// Needs by name.
    #[serde(default)]
    pub needs: Vec<String>,
    /// Tracks (packaging/tracks.toml) the verb builds: their Rust target and its needs.
    #[serde(default)]
    pub tracks: Vec<String>,
}

/// What one verb (and track) needs, resolved: need names in file order, Rust targets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Required {
    /// The verb.
    pub verb: String,
    /// Need names, each once.
    pub needs: Vec<String>,
    /// Rust target triples the verb's tracks build for.
    pub rust_targets: Vec<String>,
}

impl NeedsFile {
    /// The default location: `packaging/needs.toml`.
    pub fn default_path() -> PathBuf {
        crate::project::packaging_dir().join("needs.toml")
    }

    /// Reads, parses and validates a needs file.
    pub fn load(path: &Path) -> Result<NeedsFile, TracksError> {
        Self::parse(&crate::tracks::read_data_file(path)?, path)
    }

    /// Parses and validates needs TOML; `path` is only used in error messages.
    pub fn parse(text: &str, path: &Path) -> Result<NeedsFile, TracksError> {
        let file: NeedsFile = crate::tracks::parse_data_file(text, path)?;
        file.validate(path)?;
        Ok(file)
    }

    /// Checks the cross-references serde cannot: every named need, included verb and
    /// target's need exists; includes have no cycle; rustup components have no apt list.
    pub fn validate(&self, path: &Path) -> Result<(), TracksError> {
        let err = |key: String, message: String| TracksError {
            file: path.to_path_buf(),
            key,
            message,
        };
        if self.schema != SCHEMA_VERSION {
            return Err(err(
                "schema".into(),
                format!("is {}, this xtask reads {SCHEMA_VERSION}", self.schema),
            ));
        }
        let check_needs = |key: &str, list: &[String]| -> Result<(), TracksError> {
            for (i, n) in list.iter().enumerate() {
                if !self.needs.contains_key(n) {
                    return Err(err(
                        format!("{key}[{i}]"),
                        format!("unknown need '{n}' (allowed: {})", names(self.needs.keys())),
                    ));
                }
            }
            Ok(())
        };
        for (name, n) in &self.needs {
            if matches!(n.detect, Detect::RustupComponent(_)) && !n.apt.is_empty() {
                return Err(err(
                    format!("needs.{name}.apt"),
                    "a rustup_component need is installed with rustup, not apt".into(),
                ));
            }
        }
        for (t, tn) in &self.targets {
            check_needs(&format!("targets.{t}.needs"), &tn.needs)?;
        }
        for (v, vn) in &self.verbs {
            check_needs(&format!("verbs.{v}.needs"), &vn.needs)?;
            for (i, inc) in vn.includes.iter().enumerate() {
                if !self.verbs.contains_key(inc) {
                    return Err(err(
                        format!("verbs.{v}.includes[{i}]"),
                        format!(
                            "unknown verb '{inc}' (allowed: {})",
                            names(self.verbs.keys())
                        ),
                    ));
                }
            }
        }
        for v in self.verbs.keys() {
            let mut path = vec![v.clone()];
            self.find_cycle(v, &mut path)
                .map_err(|cycle| err(format!("verbs.{v}.includes"), cycle))?;
        }
        Ok(())
    }

    fn find_cycle(&self, verb: &str, path: &mut Vec<String>) -> Result<(), String> {
        for inc in &self.verbs[verb].includes {
            if path.contains(inc) {
                return Err(format!("includes itself: {} -> {inc}", path.join(" -> ")));
            }
            path.push(inc.clone());
            self.find_cycle(inc, path)?;
            path.pop();
        }
        Ok(())
    }

    /// `verb` after the verbs it includes, each once (so shared needs print first).
    fn post_order(&self, verb: &str, out: &mut Vec<String>) {
        for inc in &self.verbs[verb].includes {
            self.post_order(inc, out);
        }
        if !out.iter().any(|v| v == verb) {
            out.push(verb.to_string());
        }
    }

    /// What `verb` needs, plus what building `track` needs; the tracks come from
    /// `tracks` (their `build.target`). Pure.
    pub fn resolve(
        &self,
        verb: &str,
        track: Option<&str>,
        tracks: &TracksFile,
    ) -> Result<Required> {
        if !self.verbs.contains_key(verb) {
            bail!(
                "unknown verb '{verb}' for setup (allowed: {}; see packaging/needs.toml)",
                self.verbs.keys().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        let mut order = Vec::new();
        self.post_order(verb, &mut order);
        let mut needs: Vec<String> = Vec::new();
        let mut track_names: Vec<String> = Vec::new();
        for v in &order {
            let vn = &self.verbs[v];
            needs.extend(vn.needs.iter().cloned());
            track_names.extend(vn.tracks.iter().cloned());
        }
        let mut rust_targets: Vec<String> = Vec::new();
        for t in &track_names {
            let track = tracks
                .track(t)
                .with_context(|| format!("packaging/needs.toml: verbs.{verb}.tracks"))?;
            rust_targets.extend(track.build.target.clone());
        }
        if let Some(t) = track {
            rust_targets.extend(tracks.track(t)?.build.target.clone());
        }
        for target in &rust_targets {
            if let Some(tn) = self.targets.get(target) {
                needs.extend(tn.needs.iter().cloned());
            }
        }
        let mut once = BTreeSet::new();
        needs.retain(|n| once.insert(n.clone()));
        rust_targets.sort();
        rust_targets.dedup();
        Ok(Required {
            verb: verb.to_string(),
            needs,
            rust_targets,
        })
    }
}

fn names<'a>(keys: impl Iterator<Item = &'a String>) -> String {
    keys.cloned().collect::<Vec<_>>().join(", ")
}

/// What [`plan`] decides on: the machine, and which needs were found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Facts {
    /// A Linux host (apt packages apply only there).
    pub linux: bool,
    /// Running as root.
    pub is_root: bool,
    /// Not root, but `sudo -n` works (a CI runner's passwordless sudo).
    #[serde(default)]
    pub sudo: bool,
    /// apt-get is on PATH (a Debian/Ubuntu machine).
    pub apt_get: bool,
    /// rustup is on PATH.
    pub rustup: bool,
    /// The needs found, with what was found (a path, a version).
    pub found: BTreeMap<String, String>,
    /// Installed Rust targets of the active toolchain (the host's is always there).
    pub rust_targets: Vec<String>,
}

/// A need that is there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Present {
    /// Its name (`cmake`, `rust target x86_64-pc-windows-gnu`).
    pub need: String,
    /// What was found.
    pub detail: String,
}

/// A need xtask cannot install here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Manual {
    /// Its name.
    pub need: String,
    /// Why it is needed.
    pub why: String,
    /// What to do.
    pub fix: String,
}

/// A command of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    /// Environment variables set for it.
    pub env: Vec<(String, String)>,
    /// Program.
    pub program: String,
    /// Arguments.
    pub args: Vec<String>,
}

impl Step {
    fn new(program: &str, args: impl IntoIterator<Item = String>) -> Step {
        Step {
            env: Vec::new(),
            program: program.into(),
            args: args.into_iter().collect(),
        }
    }

    /// The command line as a shell takes it.
    pub fn display(&self) -> String {
        self.env
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .chain(std::iter::once(self.program.clone()))
            .chain(self.args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// What `setup` does for one verb.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// The verb.
    pub verb: String,
    /// Needs that are there.
    pub present: Vec<Present>,
    /// Missing needs and the packages or rustup items that install them, in need order.
    pub to_install: Vec<(String, String)>,
    /// The commands that install what is missing, in order.
    pub steps: Vec<Step>,
    /// Needs xtask cannot install here: when not empty, nothing runs and the user is told
    /// [`Plan::user_commands`].
    pub manual: Vec<Manual>,
    /// What the user runs (as root where apt is needed), then `cargo xtask` again.
    pub user_commands: Vec<String>,
}

impl Plan {
    /// Nothing is missing.
    pub fn satisfied(&self) -> bool {
        self.steps.is_empty() && self.manual.is_empty()
    }
}

/// `apt-get update` once, then one install of every missing package; through sudo when
/// not root (`sudo VAR=value cmd` sets the variable for the command).
fn apt_steps(packages: &[String], via_sudo: bool) -> Vec<Step> {
    let frontend = "DEBIAN_FRONTEND=noninteractive".to_string();
    let step = |args: Vec<String>| {
        if via_sudo {
            Step::new(
                "sudo",
                std::iter::once(frontend.clone())
                    .chain(std::iter::once("apt-get".into()))
                    .chain(args),
            )
        } else {
            let mut s = Step::new("apt-get", args);
            s.env
                .push(("DEBIAN_FRONTEND".into(), "noninteractive".into()));
            s
        }
    };
    vec![
        step(vec!["update".into()]),
        step(
            ["install", "-y", "--no-install-recommends"]
                .map(String::from)
                .into_iter()
                .chain(packages.iter().cloned())
                .collect(),
        ),
    ]
}

/// Whether a need is checked on this host: those installed from Debian packages only on
/// Linux (on Windows `cargo xtask doctor` reports the MSVC and SDK toolchains).
fn applies(need: &Need, linux: bool) -> bool {
    linux || need.apt.is_empty()
}

/// Decides what to install for `req` on a machine with `facts`. Pure.
pub fn plan(file: &NeedsFile, req: &Required, facts: &Facts) -> Plan {
    let mut present = Vec::new();
    let mut to_install = Vec::new();
    let mut manual = Vec::new();
    let mut apt: Vec<String> = Vec::new();
    let mut components: Vec<String> = Vec::new();
    for name in &req.needs {
        let need = &file.needs[name];
        if !applies(need, facts.linux) {
            continue;
        }
        if let Some(d) = facts.found.get(name) {
            present.push(Present {
                need: name.clone(),
                detail: d.clone(),
            });
            continue;
        }
        match &need.detect {
            Detect::RustupComponent(c) if facts.rustup => {
                to_install.push((name.clone(), format!("rustup component add {c}")));
                components.push(c.clone());
            }
            Detect::RustupComponent(c) => manual.push(Manual {
                need: name.clone(),
                why: need.why.clone(),
                fix: format!("{} (rustup: `rustup component add {c}`)", need.fix),
            }),
            _ if facts.apt_get && !need.apt.is_empty() => {
                to_install.push((name.clone(), format!("apt: {}", need.apt.join(" "))));
                apt.extend(need.apt.iter().cloned());
            }
            _ => manual.push(Manual {
                need: name.clone(),
                why: need.why.clone(),
                fix: need.fix.clone(),
            }),
        }
    }
    let mut targets = Vec::new();
    for t in &req.rust_targets {
        let need = format!("rust target {t}");
        if facts.rust_targets.iter().any(|x| x == t) {
            present.push(Present {
                need,
                detail: "installed".into(),
            });
        } else if facts.rustup {
            to_install.push((need, format!("rustup target add {t}")));
            targets.push(t.clone());
        } else {
            manual.push(Manual {
                need,
                why: "the std of a target a track builds for".into(),
                fix: format!("install rustup, then `rustup target add {t}` (or a toolchain that has the {t} std)"),
            });
        }
    }
    let mut seen = BTreeSet::new();
    apt.retain(|p| seen.insert(p.clone()));
    let mut steps = Vec::new();
    let via_sudo = !facts.is_root && facts.sudo;
    if !apt.is_empty() {
        steps.extend(apt_steps(&apt, via_sudo));
    }
    if !targets.is_empty() {
        steps.push(Step::new(
            "rustup",
            ["target", "add"]
                .map(String::from)
                .into_iter()
                .chain(targets.iter().cloned()),
        ));
    }
    if !components.is_empty() {
        steps.push(Step::new(
            "rustup",
            ["component", "add"]
                .map(String::from)
                .into_iter()
                .chain(components.iter().cloned()),
        ));
    }
    // Neither root nor sudo: apt cannot run here, so nothing runs and the user gets the
    // commands.
    if !apt.is_empty() && !facts.is_root && !facts.sudo {
        manual.push(Manual {
            need: format!("{} Debian package(s)", apt.len()),
            why: "installing packages needs root".into(),
            fix: "run the commands below as root (or under sudo)".into(),
        });
    }
    let user_commands = if manual.is_empty() {
        Vec::new()
    } else {
        steps.iter().map(Step::display).collect()
    };
    Plan {
        verb: req.verb.clone(),
        present,
        to_install,
        steps,
        manual,
        user_commands,
    }
}

/// The plan as text.
pub fn render(p: &Plan) -> String {
    let mut s = String::new();
    let total = p.present.len() + p.to_install.len() + p.manual.len();
    let _ = writeln!(
        s,
        "setup for {}: {} of {total} needs present",
        p.verb,
        p.present.len()
    );
    for x in &p.present {
        let _ = writeln!(s, "  ok       {:<36} {}", x.need, x.detail);
    }
    for (need, how) in &p.to_install {
        let _ = writeln!(s, "  install  {need:<36} {how}");
    }
    for m in &p.manual {
        let _ = writeln!(s, "  MISSING  {:<36} {}: {}", m.need, m.why, m.fix);
    }
    if !p.steps.is_empty() {
        let _ = writeln!(s, "steps:");
        for st in &p.steps {
            let _ = writeln!(s, "  {}", st.display());
        }
    }
    s
}

/// A program on PATH, or in the sbin folders a non-root PATH lacks (debootstrap).
fn find_command(name: &str) -> Option<PathBuf> {
    tools::which(name).or_else(|| {
        ["/usr/sbin", "/sbin"]
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.is_file())
    })
}

fn detect(d: &Detect, installed_components: &[String]) -> Option<String> {
    match d {
        Detect::Command(c) => find_command(c).map(|p| p.display().to_string()),
        Detect::Path(paths) => paths.iter().find(|p| Path::new(p).is_file()).cloned(),
        Detect::Libclang {} => tools::libclang().path,
        Detect::PythonModule(m) => {
            let python = tools::which("python3")?;
            let ok = Command::new(&python)
                .args(["-c", &format!("import {m}")])
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false);
            ok.then(|| format!("{} imports {m}", python.display()))
        }
        Detect::RustupComponent(c) => installed_components
            .iter()
            .find(|x| x.as_str() == c || x.starts_with(&format!("{c}-")))
            .map(|x| format!("{x} installed")),
    }
}

/// Probes this machine for the needs of `req` (the only I/O of the decision).
pub fn probe(file: &NeedsFile, req: &Required) -> Facts {
    let rustup = tools::which("rustup");
    let is_root = crate::sdk::is_root();
    let linux = cfg!(target_os = "linux");
    let listed = |what: &str| {
        rustup
            .as_deref()
            .map(|r| tools::rustup_installed(r, what))
            .unwrap_or_default()
    };
    let components = if req
        .needs
        .iter()
        .any(|n| matches!(file.needs[n].detect, Detect::RustupComponent(_)))
    {
        listed("component")
    } else {
        Vec::new()
    };
    let mut rust_targets = if req.rust_targets.is_empty() {
        Vec::new()
    } else {
        listed("target")
    };
    rust_targets.push(crate::build::facts::host_triple());
    // Each detection is a file look-up or a short child process: run them side by side.
    let found = std::thread::scope(|scope| {
        let jobs: Vec<_> = req
            .needs
            .iter()
            .filter(|n| applies(&file.needs[*n], linux))
            .map(|n| {
                let d = &file.needs[n].detect;
                let components = &components;
                (n, scope.spawn(move || detect(d, components)))
            })
            .collect();
        jobs.into_iter()
            .filter_map(|(n, j)| j.join().ok().flatten().map(|d| (n.clone(), d)))
            .collect()
    });
    Facts {
        linux,
        is_root,
        sudo: !is_root
            && tools::which("sudo").is_some_and(|s| {
                Command::new(s)
                    .args(["-n", "true"])
                    .output()
                    .is_ok_and(|o| o.status.success())
            }),
        apt_get: tools::which("apt-get").is_some(),
        rustup: rustup.is_some(),
        found,
        rust_targets,
    }
}

/// Runs a plan's steps, printing each.
pub fn execute(plan: &Plan) -> Result<()> {
    for st in &plan.steps {
        eprintln!("setup: {}", st.display());
        let status = Command::new(&st.program)
            .args(&st.args)
            .envs(st.env.iter().map(|(k, v)| (k, v)))
            .status()
            .with_context(|| format!("starting {}", st.program))?;
        if !status.success() {
            bail!("`{}` failed ({status})", st.display());
        }
    }
    Ok(())
}

fn stop_message(p: &Plan) -> String {
    let mut s = format!(
        "{} cannot be set up here: {}",
        p.verb,
        p.manual
            .iter()
            .map(|m| format!("{} ({})", m.need, m.fix))
            .collect::<Vec<_>>()
            .join("; ")
    );
    if !p.user_commands.is_empty() {
        let _ = write!(
            s,
            "; run: {}",
            p.user_commands
                .iter()
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(" then ")
        );
    }
    s.push_str(", then run cargo xtask again");
    s
}

/// Checks and installs what `verb` (and building `track`) needs; the one call `dist` and
/// `test` make first. Quiet when everything is there; an error (exit 2) naming the
/// commands to run when something cannot be installed here.
pub fn ensure(ctx: &RunContext, verb: &str, track: Option<&str>) -> Result<()> {
    let started = Instant::now();
    let file = ctx.needs()?;
    let req = file.resolve(verb, track, ctx.tracks()?)?;
    let p = plan(file, &req, &probe(file, &req));
    if p.satisfied() {
        eprintln!(
            "setup: the {} needs of {verb} are present ({:.2} s)",
            p.present.len(),
            started.elapsed().as_secs_f64()
        );
        return Ok(());
    }
    eprint!("{}", render(&p));
    if !p.manual.is_empty() {
        bail!("{}", stop_message(&p));
    }
    execute(&p)?;
    let again = plan(file, &req, &probe(file, &req));
    if !again.satisfied() {
        let still: Vec<&str> = again
            .to_install
            .iter()
            .map(|(n, _)| n.as_str())
            .chain(again.manual.iter().map(|m| m.need.as_str()))
            .collect();
        bail!(
            "setup ran, but these needs of {verb} are still missing: {} (see packaging/needs.toml for how each is detected)",
            still.join(", ")
        );
    }
    eprintln!(
        "setup: installed what {verb} lacked; all {} needs present ({:.1} s)",
        again.present.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Runs the verb.
pub fn run(args: Args, ctx: &RunContext) -> Result<ExitCode> {
    match args.mode() {
        Mode::FreshMachine => {
            crate::fresh_machine::check(ctx)?;
            return Ok(ExitCode::SUCCESS);
        }
        Mode::Needs => {}
    }
    if args.dry_run {
        let file = ctx.needs()?;
        let req = file.resolve(&args.for_verb, args.track.as_deref(), ctx.tracks()?)?;
        let p = plan(file, &req, &probe(file, &req));
        print!("{}", render(&p));
        if !p.user_commands.is_empty() {
            println!("cannot install here; run: {}", p.user_commands.join(" && "));
        }
        return Ok(ExitCode::SUCCESS);
    }
    ensure(ctx, &args.for_verb, args.track.as_deref())?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs() -> NeedsFile {
        NeedsFile::load(&NeedsFile::default_path()).expect("packaging/needs.toml is valid")
    }

    fn tracks() -> TracksFile {
        TracksFile::load(&TracksFile::default_path()).expect("tracks.toml is valid")
    }

    /// A fresh Debian machine as root: rustup with the host target only, nothing else.
    fn fresh(is_root: bool) -> Facts {
        Facts {
            linux: true,
            is_root,
            apt_get: true,
            rustup: true,
            sudo: false,
            found: BTreeMap::new(),
            rust_targets: vec!["x86_64-unknown-linux-gnu".into()],
        }
    }

    #[test]
    fn not_root_with_passwordless_sudo_installs_through_sudo() {
        let f = needs();
        let req = f.resolve("dist", None, &tracks()).unwrap();
        let mut facts = all_found(&f, &req);
        facts.is_root = false;
        facts.sudo = true;
        facts.found.remove("cmake");
        let p = plan(&f, &req, &facts);
        assert!(p.manual.is_empty(), "{:?}", p.manual);
        let lines: Vec<String> = p.steps.iter().map(Step::display).collect();
        assert_eq!(
            lines,
            [
                "sudo DEBIAN_FRONTEND=noninteractive apt-get update",
                "sudo DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends cmake",
            ]
        );
    }

    fn all_found(file: &NeedsFile, req: &Required) -> Facts {
        let mut f = fresh(true);
        f.found = req
            .needs
            .iter()
            .map(|n| (n.clone(), format!("/usr/bin/{n}")))
            .collect();
        f.rust_targets.extend(req.rust_targets.iter().cloned());
        assert!(req.needs.iter().all(|n| file.needs.contains_key(n)));
        f
    }

    #[test]
    fn test_needs_the_windows_target_its_track_builds_and_everything_dist_needs() {
        let f = needs();
        let test = f.resolve("test", None, &tracks()).unwrap();
        assert_eq!(test.rust_targets, ["x86_64-pc-windows-gnu"]);
        for n in [
            "cmake",
            "libclang",
            "wine",
            "mingw-gxx",
            "python3-venv",
            "pip",
            "7z",
        ] {
            assert!(test.needs.iter().any(|x| x == n), "{n}: {:?}", test.needs);
        }
        // Shared needs come first: dist's list opens the test list.
        let dist = f.resolve("dist", None, &tracks()).unwrap();
        assert_eq!(test.needs[..dist.needs.len()], dist.needs[..]);
        assert!(
            dist.rust_targets.is_empty(),
            "the host track needs no extra target"
        );
        let ci = f.resolve("ci", None, &tracks()).unwrap();
        assert!(ci.needs.iter().any(|n| n == "rustfmt"));
        assert!(!test.needs.iter().any(|n| n == "rustfmt"));
    }

    #[test]
    fn a_fresh_root_machine_gets_one_apt_install_and_the_rust_target() {
        let f = needs();
        let req = f
            .resolve("dist", Some("windows-cpu-gnu"), &tracks())
            .unwrap();
        let p = plan(&f, &req, &fresh(true));
        assert!(p.manual.is_empty(), "{:?}", p.manual);
        let lines: Vec<String> = p.steps.iter().map(Step::display).collect();
        assert_eq!(
            lines,
            [
                "DEBIAN_FRONTEND=noninteractive apt-get update",
                "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
                 gcc libc6-dev g++ make cmake ninja-build clang libclang-dev pkg-config git \
                 binutils ca-certificates curl dpkg gcc-mingw-w64-x86-64 mingw-w64-x86-64-dev \
                 g++-mingw-w64-x86-64 binutils-mingw-w64-x86-64",
                "rustup target add x86_64-pc-windows-gnu",
            ]
        );
        assert!(render(&p).contains(
            "  install  rust target x86_64-pc-windows-gnu    rustup target add x86_64-pc-windows-gnu"
        ));
    }

    #[test]
    fn rustup_components_are_added_with_rustup_and_only_missing_things_are_installed() {
        let f = needs();
        let req = f.resolve("ci", None, &tracks()).unwrap();
        let mut facts = all_found(&f, &req);
        facts.found.remove("rustfmt");
        facts.found.remove("sox");
        let p = plan(&f, &req, &facts);
        let lines: Vec<String> = p.steps.iter().map(Step::display).collect();
        assert_eq!(
            lines,
            [
                "DEBIAN_FRONTEND=noninteractive apt-get update",
                "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends sox",
                "rustup component add rustfmt",
            ]
        );
        assert_eq!(
            p.present.len(),
            req.needs.len() + req.rust_targets.len() - 2
        );
    }

    #[test]
    fn on_windows_only_rustup_needs_are_checked() {
        let f = needs();
        let req = f.resolve("ci", None, &tracks()).unwrap();
        let facts = Facts {
            linux: false,
            rustup: true,
            rust_targets: vec!["x86_64-pc-windows-msvc".into()],
            ..Facts::default()
        };
        let p = plan(&f, &req, &facts);
        let lines: Vec<String> = p.steps.iter().map(Step::display).collect();
        assert_eq!(
            lines,
            [
                "rustup target add x86_64-pc-windows-gnu",
                "rustup component add rustfmt clippy",
            ]
        );
        assert!(p.manual.is_empty() && p.present.is_empty(), "{p:?}");
    }

    #[test]
    fn everything_present_is_a_no_op() {
        let f = needs();
        let req = f.resolve("ci", None, &tracks()).unwrap();
        let p = plan(&f, &req, &all_found(&f, &req));
        assert!(p.satisfied());
        assert!(p.steps.is_empty() && p.user_commands.is_empty());
    }

    #[test]
    fn not_root_runs_nothing_and_names_the_commands_to_run() {
        let f = needs();
        let req = f.resolve("test", None, &tracks()).unwrap();
        let mut facts = all_found(&f, &req);
        facts.is_root = false;
        facts.found.remove("wine");
        facts.rust_targets.retain(|t| t != "x86_64-pc-windows-gnu");
        let p = plan(&f, &req, &facts);
        assert!(!p.satisfied());
        assert_eq!(
            p.user_commands,
            [
                "DEBIAN_FRONTEND=noninteractive apt-get update",
                "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends wine wine64",
                "rustup target add x86_64-pc-windows-gnu",
            ]
        );
        let msg = stop_message(&p);
        assert!(
            msg.contains("needs root") || msg.contains("as root"),
            "{msg}"
        );
        assert!(
            msg.contains("`rustup target add x86_64-pc-windows-gnu`"),
            "{msg}"
        );
    }

    #[test]
    fn without_apt_or_rustup_the_fix_texts_are_given() {
        let f = needs();
        let req = f.resolve("test", None, &tracks()).unwrap();
        let mut facts = all_found(&f, &req);
        facts.apt_get = false;
        facts.rustup = false;
        facts.found.remove("cmake");
        facts.rust_targets.retain(|t| t != "x86_64-pc-windows-gnu");
        let p = plan(&f, &req, &facts);
        assert!(p.steps.is_empty());
        let fixes: Vec<(&str, &str)> = p
            .manual
            .iter()
            .map(|m| (m.need.as_str(), m.fix.as_str()))
            .collect();
        assert_eq!(fixes[0], ("cmake", "install CMake 3.18 or newer on PATH"));
        assert!(
            fixes[1].0 == "rust target x86_64-pc-windows-gnu"
                && fixes[1].1.contains("rustup target add")
        );
    }

    #[test]
    fn unknown_verbs_and_needs_name_the_key_and_the_allowed_values() {
        let e = needs()
            .resolve("dsit", None, &tracks())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown verb 'dsit'") && e.contains("allowed: bench, ci, dist, test"),
            "{e}"
        );

        let path = Path::new("needs.toml");
        let base = "schema = 1\n[needs.cmake]\nwhy = \"w\"\ndetect = { command = \"cmake\" }\napt = [\"cmake\"]\nfix = \"f\"\n";
        let bad_need = format!("{base}[verbs.dist]\nneeds = [\"cmake\", \"cmkae\"]\n");
        let e = NeedsFile::parse(&bad_need, path).unwrap_err().to_string();
        assert_eq!(
            e,
            "needs.toml: verbs.dist.needs[1]: unknown need 'cmkae' (allowed: cmake)"
        );

        let bad_detect = base.replace("command = ", "program = ") + "[verbs.dist]\n";
        let e = NeedsFile::parse(&bad_detect, path).unwrap_err().to_string();
        assert!(
            e.contains("unknown variant `program`") && e.contains("python_module"),
            "{e}"
        );

        let cycle = format!("{base}[verbs.a]\nincludes = [\"b\"]\n[verbs.b]\nincludes = [\"a\"]\n");
        let e = NeedsFile::parse(&cycle, path).unwrap_err().to_string();
        assert!(
            e.contains("verbs.a.includes: includes itself: a -> b -> a"),
            "{e}"
        );

        let apt_rustup = "schema = 1\n[needs.rustfmt]\nwhy = \"w\"\ndetect = { rustup_component = \"rustfmt\" }\napt = [\"rustfmt\"]\nfix = \"f\"\n[verbs.ci]\n";
        let e = NeedsFile::parse(apt_rustup, path).unwrap_err().to_string();
        assert!(
            e.contains("needs.rustfmt.apt: a rustup_component need is installed with rustup"),
            "{e}"
        );

        let bad_track = format!("{base}[verbs.dist]\ntracks = [\"linux-gpu\"]\n");
        let f = NeedsFile::parse(&bad_track, path).unwrap();
        let e = format!("{:#}", f.resolve("dist", None, &tracks()).unwrap_err());
        assert!(
            e.contains("verbs.dist.tracks") && e.contains("unknown track 'linux-gpu'"),
            "{e}"
        );
    }
}
