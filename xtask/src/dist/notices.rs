//! `THIRD-PARTY-NOTICES.md` of a package, and the licence check behind it.
//!
//! The MIT, BSD and Apache licences of what we link ask that their notices travel with
//! every copy, and the project promises that no GPL code is linked into what it ships.
//! Both are decided here from facts, not from memory: the crates linked into the track's
//! executables come from `cargo metadata` for the track's target triple (normal
//! dependencies only: build scripts, proc-macro hosts and dev-dependencies are not in the
//! package), each crate's licence expression must be satisfied by the licences
//! `packaging/notices.toml` allows, and the C/C++ code and data that no crate's own licence
//! covers (ggml, tinyBLAS, misaki's lexicons) are listed there, each checked against the
//! file it describes. [`plan`] is pure; [`write`] gathers the facts and writes the file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use cargo_metadata::{DependencyKind, Metadata, Package, PackageId};
use serde::Deserialize;

/// The file name inside a package.
pub const FILE_NAME: &str = "THIRD-PARTY-NOTICES.md";

/// The project's own licence files (the workspace is `MIT OR Apache-2.0`): copied from
/// the repository's root into every package, beside [`FILE_NAME`].
pub const OWN_LICENCES: [&str; 2] = ["LICENSE-MIT", "LICENSE-APACHE"];

/// `packaging/notices.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoticesConfig {
    /// Licences a linked crate may carry, each with why it is acceptable.
    pub allowed: Vec<AllowedLicence>,
    /// Crates whose Cargo.toml names no SPDX licence, with the licence their file holds.
    #[serde(default)]
    pub clarify: Vec<Clarification>,
    /// Code and data inside a crate that the crate's own licence does not cover.
    #[serde(default)]
    pub bundled: Vec<Bundled>,
}

/// One allowed licence.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowedLicence {
    /// SPDX identifier, optionally `ID WITH EXCEPTION`.
    pub id: String,
    /// Why shipping it is fine (what it asks of us, and how the package does it).
    pub reason: String,
}

/// A crate with only `license-file`, and the SPDX licence that file is.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Clarification {
    /// Crate name.
    #[serde(rename = "crate")]
    pub krate: String,
    /// The SPDX expression its licence file holds.
    pub license: String,
    /// The licence file, relative to the crate's folder.
    pub file: String,
    /// SHA-256 of that file: a new version with another text is refused, not misread.
    pub sha256: String,
}

/// Code or data shipped inside a crate under a licence of its own.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bundled {
    /// What it is, in one line.
    pub what: String,
    /// The crate that carries it.
    #[serde(rename = "crate")]
    pub krate: String,
    /// SPDX licence of it.
    pub license: String,
    /// The file (relative to the crate's folder) that must contain `evidence_text`: the
    /// entry's proof that the notice still describes what the crate holds.
    pub evidence: String,
    /// What that file must say.
    pub evidence_text: String,
    /// The copyright line the notice prints.
    pub copyright: String,
    /// A file of the crate that is the whole licence text; without it, the licence's
    /// canonical SPDX text follows the copyright line.
    #[serde(default)]
    pub text_file: Option<String>,
}

/// Reads `packaging/notices.toml`, with errors naming the file and key.
pub fn load_config(path: &Path) -> Result<NoticesConfig> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse_config(&text, path)
}

/// Parses a notices file's text; `path` is what errors name.
pub fn parse_config(text: &str, path: &Path) -> Result<NoticesConfig> {
    let config: NoticesConfig = toml::from_str(text)
        .with_context(|| format!("{}: not a valid notices file", path.display()))?;
    for (i, a) in config.allowed.iter().enumerate() {
        spdx::Licensee::parse(&a.id).map_err(|e| {
            anyhow::anyhow!(
                "{}: allowed[{i}].id '{}' is not an SPDX licence identifier ({e})",
                path.display(),
                a.id
            )
        })?;
    }
    for (i, c) in config.clarify.iter().enumerate() {
        parse_expression(&c.license).with_context(|| {
            format!(
                "{}: clarify[{i}].license of crate '{}'",
                path.display(),
                c.krate
            )
        })?;
    }
    for (i, b) in config.bundled.iter().enumerate() {
        parse_expression(&b.license)
            .with_context(|| format!("{}: bundled[{i}].license ({})", path.display(), b.what))?;
    }
    Ok(config)
}

fn parse_expression(expr: &str) -> Result<spdx::Expression> {
    spdx::Expression::parse_mode(expr, spdx::ParseMode::LAX)
        .map_err(|e| anyhow::anyhow!("'{expr}' is not an SPDX licence expression ({e})"))
}

/// A crate linked into the package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkedCrate {
    /// Name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Its SPDX expression (from Cargo.toml, or from `clarify`).
    pub license: String,
    /// Its folder.
    pub dir: PathBuf,
    /// Its licence files (relative to `dir`), or the one `clarify` names.
    pub license_files: Vec<String>,
    /// Whether any licence in it is file-level copyleft (MPL): the notice then says where
    /// the crate's source form is.
    pub source_offer: bool,
}

/// What the notices file will hold: every linked crate and every bundled entry.
#[derive(Debug)]
pub struct NoticesPlan {
    /// Our own crates (their licence heads the file).
    pub ours: Vec<(String, String)>,
    /// Third-party crates, sorted by name and version.
    pub crates: Vec<LinkedCrate>,
    /// Bundled code and data whose crate is linked.
    pub bundled: Vec<BundledNotice>,
}

/// One bundled entry, its crate's folder resolved.
#[derive(Debug)]
pub struct BundledNotice {
    /// What it is.
    pub what: String,
    /// Licence.
    pub license: String,
    /// Copyright line.
    pub copyright: String,
    /// The file holding the whole licence text, if there is one.
    pub text_file: Option<PathBuf>,
}

/// The packages reachable from the crates that build `executables` through normal
/// dependency edges of `meta` (which `cargo metadata --filter-platform` resolved for the
/// package's target).
pub fn linked_packages<'m>(meta: &'m Metadata, executables: &[String]) -> Result<Vec<&'m Package>> {
    let resolve = meta
        .resolve
        .as_ref()
        .context("cargo metadata gave no dependency resolution")?;
    let by_id: BTreeMap<&PackageId, &Package> = meta.packages.iter().map(|p| (&p.id, p)).collect();
    let nodes: BTreeMap<&PackageId, _> = resolve.nodes.iter().map(|n| (&n.id, n)).collect();
    let mut stack: Vec<&PackageId> = Vec::new();
    for exe in executables {
        let stem = exe.strip_suffix(".exe").unwrap_or(exe);
        let owner = meta
            .workspace_packages()
            .into_iter()
            .find(|p| p.targets.iter().any(|t| t.is_bin() && t.name == stem))
            .with_context(|| format!("no workspace crate builds the executable '{exe}'"))?;
        stack.push(&owner.id);
    }
    let mut seen: BTreeSet<&PackageId> = BTreeSet::new();
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        let node = nodes
            .get(id)
            .with_context(|| format!("{id} is missing from cargo metadata's resolution"))?;
        for dep in &node.deps {
            if dep
                .dep_kinds
                .iter()
                .any(|k| k.kind == DependencyKind::Normal)
            {
                stack.push(&dep.pkg);
            }
        }
    }
    Ok(seen
        .into_iter()
        .filter_map(|id| by_id.get(id).copied())
        .collect())
}

/// Whether a file name is a licence, notice or copyright file.
fn is_license_file(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "LICENSE",
        "LICENCE",
        "COPYING",
        "COPYRIGHT",
        "NOTICE",
        "UNLICENSE",
    ]
    .iter()
    .any(|p| upper.starts_with(p))
}

/// Decides the notices: checks every linked crate's licence against the allowed list and
/// every bundled entry's evidence. `list_dir` and `read` are the only disk access, so tests
/// give fixtures.
pub fn plan(
    packages: &[&Package],
    workspace_members: &BTreeSet<String>,
    config: &NoticesConfig,
    config_path: &Path,
    list_dir: &dyn Fn(&Path) -> Vec<String>,
    read: &dyn Fn(&Path) -> Option<Vec<u8>>,
) -> Result<NoticesPlan> {
    let allowed: Vec<spdx::Licensee> = config
        .allowed
        .iter()
        .map(|a| spdx::Licensee::parse(&a.id).expect("checked by load_config"))
        .collect();
    let allowed_ids = config
        .allowed
        .iter()
        .map(|a| a.id.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let mut ours = Vec::new();
    let mut crates = Vec::new();
    let mut problems = Vec::new();
    for p in packages {
        let dir = p
            .manifest_path
            .parent()
            .map(|d| PathBuf::from(d.as_std_path()))
            .unwrap_or_default();
        if workspace_members.contains(&p.name) {
            ours.push((p.name.clone(), p.license.clone().unwrap_or_default()));
            continue;
        }
        let clarified = config.clarify.iter().find(|c| c.krate == p.name);
        let (license, license_files) = match (&p.license, clarified) {
            (_, Some(c)) => {
                let path = dir.join(&c.file);
                let sha = read(&path).and_then(|b| crate::assets::sha256_reader(&b[..]).ok());
                if sha.as_deref() != Some(c.sha256.as_str()) {
                    problems.push(format!(
                        "crate {} {}: clarify's file '{}' {} (key clarify.sha256 in {}); read the file and update the entry",
                        p.name,
                        p.version,
                        c.file,
                        match sha {
                            Some(s) => format!("has SHA-256 {s}, not {}", c.sha256),
                            None => "is missing".into(),
                        },
                        config_path.display()
                    ));
                }
                (c.license.clone(), vec![c.file.clone()])
            }
            (Some(l), None) => {
                let mut files: Vec<String> = list_dir(&dir)
                    .into_iter()
                    .filter(|n| is_license_file(n))
                    .collect();
                files.sort();
                (l.clone(), files)
            }
            (None, None) => {
                problems.push(format!(
                    "crate {} {} names no SPDX licence in its Cargo.toml{}: add a [[clarify]] entry to {} with the licence its file holds",
                    p.name,
                    p.version,
                    p.license_file
                        .as_ref()
                        .map(|f| format!(" (license-file = {f})"))
                        .unwrap_or_default(),
                    config_path.display()
                ));
                continue;
            }
        };
        match parse_expression(&license) {
            Ok(expr) => {
                if let Err(failed) =
                    expr.evaluate_with_failures(|req| allowed.iter().any(|a| a.satisfies(req)))
                {
                    problems.push(format!(
                        "crate {} {} is licensed '{license}': {} not allowed (key `allowed` of {}; allowed: {allowed_ids})",
                        p.name,
                        p.version,
                        failed
                            .iter()
                            .map(|f| f.req.to_string())
                            .collect::<Vec<_>>()
                            .join(", "),
                        config_path.display()
                    ));
                }
            }
            Err(e) => problems.push(format!("crate {} {}: {e}", p.name, p.version)),
        }
        let source_offer = license.contains("MPL");
        crates.push(LinkedCrate {
            name: p.name.clone(),
            version: p.version.to_string(),
            license,
            dir,
            license_files,
            source_offer,
        });
    }
    let mut bundled = Vec::new();
    for b in &config.bundled {
        let Some(carrier) = packages.iter().find(|p| p.name == b.krate) else {
            continue;
        };
        let dir = carrier
            .manifest_path
            .parent()
            .map(|d| PathBuf::from(d.as_std_path()))
            .unwrap_or_default();
        let evidence =
            read(&dir.join(&b.evidence)).map(|t| String::from_utf8_lossy(&t).into_owned());
        if !evidence
            .as_deref()
            .is_some_and(|t| t.contains(&b.evidence_text))
        {
            problems.push(format!(
                "bundled '{}': {} of crate {} {} does not contain '{}' (key bundled.evidence_text in {}); check what the crate holds now",
                b.what,
                b.evidence,
                carrier.name,
                carrier.version,
                b.evidence_text,
                config_path.display()
            ));
        }
        bundled.push(BundledNotice {
            what: b.what.clone(),
            license: b.license.clone(),
            copyright: b.copyright.clone(),
            text_file: b.text_file.as_ref().map(|f| dir.join(f)),
        });
    }
    if !problems.is_empty() {
        bail!(
            "the licences of what this package links are not cleared:\n  {}",
            problems.join("\n  ")
        );
    }
    crates.sort_by(|a, b| (&a.name, &a.version).cmp(&(&b.name, &b.version)));
    ours.sort();
    Ok(NoticesPlan {
        ours,
        crates,
        bundled,
    })
}

/// The canonical text of every licence an expression names.
fn spdx_texts(expr: &str) -> Vec<(String, &'static str)> {
    let Ok(e) = parse_expression(expr) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for r in e.requirements() {
        if let spdx::LicenseItem::Spdx { id, .. } = r.req.license {
            out.push((id.name.to_string(), id.text()));
        }
        if let Some(ex) = r.req.exception {
            out.push((ex.name.to_string(), ex.text()));
        }
    }
    out
}

/// Renders the notices. Identical licence texts are printed once, with every crate that
/// ships them. `read` gives the licence files' text.
pub fn render(plan: &NoticesPlan, package: &str, read: &dyn Fn(&Path) -> Option<String>) -> String {
    let mut out = format!("# Third-party notices of {package}\n\n");
    out.push_str("This package's executables are audiocpp-rs (crates ");
    out.push_str(
        &plan
            .ours
            .iter()
            .map(|(n, l)| format!("{n}: {l}"))
            .collect::<Vec<_>>()
            .join("; "),
    );
    out.push_str(
        "). They link the code below; its licences ask that these notices go with every \
         copy. Runtime libraries the package carries beside the executables (see \
         manifest.json) come with their vendors' terms and are not covered here.\n\n",
    );

    let mut texts: BTreeMap<String, Vec<String>> = BTreeMap::new();
    out.push_str("## Code and data inside the crates\n\n");
    for b in &plan.bundled {
        out.push_str(&format!("- {} ({}): {}\n", b.what, b.license, b.copyright));
        let text = match b.text_file.as_deref().and_then(read) {
            Some(t) => t,
            None => {
                let mut t = format!("{}\n\n", b.copyright);
                for (_, body) in spdx_texts(&b.license) {
                    t.push_str(body);
                    t.push('\n');
                }
                t
            }
        };
        texts.entry(text).or_default().push(b.what.clone());
    }
    out.push_str("\n## Rust crates\n\n| crate | version | licence |\n| --- | --- | --- |\n");
    for c in &plan.crates {
        out.push_str(&format!("| {} | {} | {} |\n", c.name, c.version, c.license));
        let who = format!("{} {}", c.name, c.version);
        let mut any = false;
        for f in &c.license_files {
            if let Some(t) = read(&c.dir.join(f)) {
                texts.entry(t).or_default().push(format!("{who} ({f})"));
                any = true;
            }
        }
        if !any {
            for (id, body) in spdx_texts(&c.license) {
                texts.entry(body.to_string()).or_default().push(format!(
                    "{who} (ships no licence file; the canonical {id} text)"
                ));
            }
        }
    }
    let offers: Vec<&LinkedCrate> = plan.crates.iter().filter(|c| c.source_offer).collect();
    if !offers.is_empty() {
        out.push_str(
            "\nThe source form of the MPL-2.0 crates is published on crates.io, unchanged:\n\n",
        );
        for c in offers {
            out.push_str(&format!(
                "- https://crates.io/crates/{}/{}\n",
                c.name, c.version
            ));
        }
    }
    out.push_str("\n## Licence texts\n");
    for (i, (text, users)) in texts.iter().enumerate() {
        out.push_str(&format!(
            "\n### Text {}\n\nUsed by: {}\n\n```text\n",
            i + 1,
            users.join(", ")
        ));
        out.push_str(text.trim_end());
        out.push_str("\n```\n");
    }
    out
}

/// Runs `cargo metadata` for `triple` and decides the notices of `executables` under
/// `config` (read from `config_path`, which errors name).
pub fn decide(
    root: &Path,
    triple: &str,
    executables: &[String],
    config: &NoticesConfig,
    config_path: &Path,
) -> Result<NoticesPlan> {
    let meta = cargo_metadata::MetadataCommand::new()
        .manifest_path(root.join("Cargo.toml"))
        .other_options(vec!["--filter-platform".to_string(), triple.to_string()])
        .exec()
        .with_context(|| format!("cargo metadata --filter-platform {triple}"))?;
    let members: BTreeSet<String> = meta
        .workspace_packages()
        .iter()
        .map(|p| p.name.clone())
        .collect();
    let packages = linked_packages(&meta, executables)?;
    let list_dir = |d: &Path| -> Vec<String> {
        std::fs::read_dir(d)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    let read_bytes = |p: &Path| std::fs::read(p).ok();
    plan(
        &packages,
        &members,
        config,
        config_path,
        &list_dir,
        &read_bytes,
    )
}

/// Decides the notices of `executables` for `triple` under `packaging/notices.toml` and
/// writes them to `dest`. Returns the file's contents.
pub fn write(
    root: &Path,
    triple: &str,
    executables: &[String],
    package: &str,
    dest: &Path,
) -> Result<String> {
    let config_path = root.join("packaging/notices.toml");
    let config = load_config(&config_path)?;
    let plan = decide(root, triple, executables, &config, &config_path)?;
    let text = render(&plan, package, &|p: &Path| std::fs::read_to_string(p).ok());
    std::fs::write(dest, &text).with_context(|| format!("writing {}", dest.display()))?;
    Ok(text)
}
