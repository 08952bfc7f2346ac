//! The pure decision: package files + policy -> resolved import graph -> [`Report`].
//!
//! Resolution follows the loaders: a PE import is looked up next to the root executable
//! (or plugin) and next to the importer, case-insensitively; an ELF DT_NEEDED through the
//! importer's DT_RPATH (and the root's, unless the importer has DT_RUNPATH) then its
//! DT_RUNPATH, with `$ORIGIN` expanded inside the package. What is not found there is a
//! system library (allowlist) or missing. Forbidden names are reported wherever they appear.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::binary::{BinaryInfo, Format, Kind};
use super::input::{normalize, Content, Package, PackageFile};
use super::policy::Policy;
use super::report::{Class, Edge, Finding, Node, Report, Role, Rule};
use crate::tracks::{Glob, Load};

/// Package files indexed for lookups, and the resolved edges once walked.
#[derive(Debug)]
pub struct ImportGraph<'p> {
    files: &'p [PackageFile],
    policy: &'p Policy,
    /// `dir/name` (exact) -> file index, links followed.
    exact: HashMap<String, usize>,
    /// `dir/name` lower-cased -> file index, links followed.
    folded: HashMap<String, usize>,
    /// lower-cased file name -> every package path with that name.
    by_name: HashMap<String, Vec<String>>,
    role: Vec<Option<Role>>,
    chain_of: Vec<Option<Vec<String>>>,
    edges: Vec<Vec<Edge>>,
    roots: Vec<String>,
    findings: Vec<Finding>,
    warnings: Vec<String>,
    machine_reported: BTreeSet<usize>,
    forbidden_reported: BTreeSet<String>,
    /// runtime -> major -> first witness (a chain or a path).
    majors: BTreeMap<String, BTreeMap<u32, String>>,
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// Checks a package against a policy.
pub fn check(package: &Package, policy: &Policy) -> Report {
    let mut graph = ImportGraph::build(&package.files, policy);
    graph.walk();
    graph.check_files();
    graph.check_track();
    graph.check_majors();
    graph.check_crt();
    graph.into_report(package)
}

impl<'p> ImportGraph<'p> {
    /// Indexes the files (following symbolic links inside the package).
    pub fn build(files: &'p [PackageFile], policy: &'p Policy) -> ImportGraph<'p> {
        let mut direct: HashMap<&str, usize> = HashMap::new();
        for (i, f) in files.iter().enumerate() {
            direct.insert(f.path.as_str(), i);
        }
        let resolve = |mut i: usize| -> Option<usize> {
            for _ in 0..16 {
                match &files[i].content {
                    Content::Link(t) => i = *direct.get(t.as_str())?,
                    _ => return Some(i),
                }
            }
            None
        };
        let mut exact = HashMap::new();
        let mut folded = HashMap::new();
        let mut by_name: HashMap<String, Vec<String>> = HashMap::new();
        for (i, f) in files.iter().enumerate() {
            let Some(t) = resolve(i) else { continue };
            exact.insert(f.path.clone(), t);
            folded.entry(f.path.to_ascii_lowercase()).or_insert(t);
            by_name
                .entry(f.name().to_ascii_lowercase())
                .or_default()
                .push(f.path.clone());
        }
        let n = files.len();
        ImportGraph {
            files,
            policy,
            exact,
            folded,
            by_name,
            role: vec![None; n],
            chain_of: vec![None; n],
            edges: vec![Vec::new(); n],
            roots: Vec::new(),
            findings: Vec::new(),
            warnings: Vec::new(),
            machine_reported: BTreeSet::new(),
            forbidden_reported: BTreeSet::new(),
            majors: BTreeMap::new(),
        }
    }

    fn info(&self, i: usize) -> Option<&'p BinaryInfo> {
        self.files[i].binary()
    }

    fn lookup(&self, path: &str, fold: bool) -> Option<usize> {
        if fold {
            self.folded.get(&path.to_ascii_lowercase()).copied()
        } else {
            self.exact.get(path).copied()
        }
    }

    fn fail(&mut self, rule: Rule, chain: Vec<String>, message: String) {
        self.findings.push(Finding {
            rule,
            chain,
            message,
        });
    }

    /// Walks from every root: executables, then plugins, then the track's runtime-loaded
    /// files; without a track, unreached libraries are walked last as their own roots.
    pub fn walk(&mut self) {
        let files = self.files;
        let mut roots: Vec<(usize, Role)> = Vec::new();
        for (i, f) in files.iter().enumerate() {
            if f.binary().is_some_and(|b| b.kind == Kind::Executable) {
                roots.push((i, Role::Executable));
            }
        }
        for (i, f) in files.iter().enumerate() {
            if f.binary().is_some_and(|b| b.kind == Kind::Library)
                && self.policy.is_plugin(f.name())
            {
                roots.push((i, Role::Plugin));
            }
        }
        if let Some(track) = &self.policy.track {
            for d in track
                .declared
                .iter()
                .filter(|d| d.load == Load::RuntimeLoaded)
            {
                // The name may be a glob (`amd_comgr*.dll`: AMD's builds name it
                // differently), matched as the declaration check below matches it.
                let glob = Glob::new(&d.name).ok();
                for (i, f) in files.iter().enumerate() {
                    if f.binary().is_some() && glob.as_ref().is_some_and(|g| g.matches(f.name())) {
                        roots.push((i, Role::RuntimeLoaded));
                    }
                }
            }
        }
        for (i, role) in roots {
            self.walk_root(i, role);
        }
        if self.policy.track.is_none() {
            for (i, f) in files.iter().enumerate() {
                if f.binary().is_some() && self.role[i].is_none() {
                    self.warnings.push(format!(
                        "{}: not imported by any executable or plugin (walked on its own)",
                        f.path
                    ));
                    self.walk_root(i, Role::Unreferenced);
                }
            }
        }
    }

    fn walk_root(&mut self, i: usize, role: Role) {
        if self.role[i].is_some() {
            // Reached from an earlier root; keep its first role unless this one is a root kind.
            if self.role[i] == Some(Role::Library) {
                self.role[i] = Some(role);
            }
            return;
        }
        self.role[i] = Some(role);
        self.roots.push(self.files[i].path.clone());
        let mut chain = vec![self.files[i].path.clone()];
        self.visit(i, i, &mut chain);
    }

    fn visit(&mut self, i: usize, root: usize, chain: &mut Vec<String>) {
        if self.chain_of[i].is_some() {
            return;
        }
        self.chain_of[i] = Some(chain.clone());
        let Some(info) = self.info(i) else { return };
        let mut edges = Vec::new();
        for (name, kind) in info.dependencies() {
            chain.push(name.to_string());
            self.note_major(name, chain.join(" -> "));
            let (class, target) = self.classify(i, root, info, name, chain);
            edges.push(Edge {
                name: name.to_string(),
                kind,
                class,
                target: target.map(|t| self.files[t].path.clone()),
            });
            if let Some(t) = target {
                if self.role[t].is_none() {
                    self.role[t] = Some(Role::Library);
                }
                self.visit(t, root, chain);
            }
            chain.pop();
        }
        self.edges[i] = edges;
    }

    fn classify(
        &mut self,
        i: usize,
        root: usize,
        info: &BinaryInfo,
        name: &str,
        chain: &[String],
    ) -> (Class, Option<usize>) {
        if info.format == Format::Pe && self.policy.never_follow(name) {
            return (Class::ApiSet, None);
        }
        if let Some(rule) = self.policy.forbidden(name) {
            let message = format!("forbidden ({}; {})", rule.reason, rule.fix);
            self.forbidden_reported.insert(name.to_ascii_lowercase());
            self.fail(Rule::Forbidden, chain.to_vec(), message);
            return (Class::Forbidden, None);
        }
        match self.resolve(i, root, info, name) {
            Ok(t) => {
                if let Some(dep) = self.info(t) {
                    if dep.machine != info.machine && self.machine_reported.insert(t) {
                        let message = format!(
                            "wrong machine type ({} is {}, {} is {}; bundle the {} build)",
                            self.files[t].name(),
                            dep.machine,
                            self.files[i].name(),
                            info.machine,
                            info.machine
                        );
                        self.fail(Rule::WrongMachine, chain.to_vec(), message);
                    }
                }
                (Class::Bundled, Some(t))
            }
            Err(hint) => {
                let sdk_only = self.policy.track.as_ref().is_some_and(|t| {
                    t.declared
                        .iter()
                        .any(|d| d.sdk_only && d.name.eq_ignore_ascii_case(name))
                });
                if self.policy.is_system(info.format, name) {
                    (Class::System, None)
                } else if sdk_only {
                    (Class::SdkOnly, None)
                } else {
                    self.fail(Rule::Missing, chain.to_vec(), format!("missing ({hint})"));
                    (Class::Missing, None)
                }
            }
        }
    }

    /// Finds a dependency in the package on the loader's search path; the error is a hint.
    fn resolve(
        &self,
        i: usize,
        root: usize,
        info: &BinaryInfo,
        name: &str,
    ) -> Result<usize, String> {
        let importer = &self.files[i];
        let root_file = &self.files[root];
        let candidates: Vec<String> = match info.format {
            Format::Pe => {
                let mut dirs = vec![root_file.dir(), importer.dir()];
                dirs.dedup();
                dirs.into_iter().map(|d| join(d, name)).collect()
            }
            Format::Elf => {
                if name.contains('/') {
                    normalize(importer.dir(), name).into_iter().collect()
                } else {
                    self.elf_search_dirs(i, root)
                        .into_iter()
                        .map(|d| join(&d, name))
                        .collect()
                }
            }
            Format::MachO => self.macho_candidates(i, root, name),
        };
        let fold = info.format == Format::Pe;
        for c in &candidates {
            if let Some(t) = self.lookup(c, fold) {
                if self.info(t).is_some() || matches!(self.files[t].content, Content::Corrupt(_)) {
                    return Ok(t);
                }
            }
        }
        let base = name.rsplit('/').next().unwrap_or(name).to_ascii_lowercase();
        let elsewhere = self.by_name.get(&base).cloned().unwrap_or_default();
        let allowlist = match info.format {
            Format::Pe => "packaging/system-dlls/windows.txt",
            Format::Elf => "packaging/system-libs/linux.txt",
            Format::MachO => "the macOS system",
        };
        Err(if !elsewhere.is_empty() {
            match info.format {
                Format::Elf => format!(
                    "it is in the package at {} but no RPATH/RUNPATH of {} reaches it (searched: {}); link with -Wl,-rpath,'$ORIGIN/<dir>'",
                    elsewhere.join(", "),
                    importer.name(),
                    if candidates.is_empty() { "nothing".to_string() } else { candidates.join(", ") }
                ),
                _ => format!(
                    "it is in the package at {} but not next to {}; the loader searches {}",
                    elsewhere.join(", "),
                    root_file.name(),
                    candidates.join(", ")
                ),
            }
        } else {
            format!("not bundled and not a system library; bundle it or, if the OS ships it, add it to {allowlist}")
        })
    }

    /// ELF search folders inside the package, in loader order.
    fn elf_search_dirs(&self, i: usize, root: usize) -> Vec<String> {
        let mut dirs = Vec::new();
        let add = |owner: usize, paths: &[String], dirs: &mut Vec<String>| {
            let origin = self.files[owner].dir();
            for p in paths {
                let expanded = p.replace("${ORIGIN}", "$ORIGIN");
                if let Some(rest) = expanded.strip_prefix("$ORIGIN") {
                    if let Some(d) = normalize(origin, rest.trim_start_matches('/')) {
                        dirs.push(d);
                    }
                }
            }
        };
        let Some(me) = self.info(i) else { return dirs };
        if me.runpath.is_empty() {
            add(i, &me.rpath, &mut dirs);
            if let Some(r) = self.info(root).filter(|_| root != i) {
                if r.runpath.is_empty() {
                    add(root, &r.rpath, &mut dirs);
                }
            }
        }
        add(i, &me.runpath, &mut dirs);
        dirs
    }

    fn macho_candidates(&self, i: usize, root: usize, name: &str) -> Vec<String> {
        let here = self.files[i].dir();
        let exe = self.files[root].dir();
        if let Some(rest) = name.strip_prefix("@loader_path/") {
            return normalize(here, rest).into_iter().collect();
        }
        if let Some(rest) = name.strip_prefix("@executable_path/") {
            return normalize(exe, rest).into_iter().collect();
        }
        if let Some(rest) = name.strip_prefix("@rpath/") {
            let mut out = Vec::new();
            for (owner, dir) in [(i, here), (root, exe)] {
                for r in self.info(owner).map(|b| b.rpath.as_slice()).unwrap_or(&[]) {
                    let base = if let Some(x) = r.strip_prefix("@loader_path") {
                        normalize(dir, x.trim_start_matches('/'))
                    } else if let Some(x) = r.strip_prefix("@executable_path") {
                        normalize(exe, x.trim_start_matches('/'))
                    } else {
                        None
                    };
                    out.extend(base.and_then(|b| normalize(&b, rest)));
                }
            }
            return out;
        }
        Vec::new()
    }

    fn note_major(&mut self, name: &str, witness: String) {
        let lower = name.to_ascii_lowercase();
        for rule in &self.policy.runtime_majors {
            if let Some(m) = rule
                .re
                .captures(&lower)
                .and_then(|c| c[1].parse::<u32>().ok())
            {
                self.majors
                    .entry(rule.runtime.clone())
                    .or_default()
                    .entry(m)
                    .or_insert(witness.clone());
            }
        }
    }

    /// Per-file rules: corrupt files, forbidden folders, forbidden bundled files.
    pub fn check_files(&mut self) {
        let files = self.files;
        for (i, f) in files.iter().enumerate() {
            if let Content::Corrupt(e) = &f.content {
                self.fail(
                    Rule::Corrupt,
                    vec![f.path.clone()],
                    format!("corrupt or truncated binary ({e}); rebuild or re-copy it"),
                );
            }
            let from_forbidden = f
                .origin
                .split(['/', '\\', '!'])
                .any(|c| self.policy.forbidden_dirs.contains(&c.to_ascii_lowercase()));
            if from_forbidden {
                let message = format!(
                    "comes from a forbidden folder ({}); {}",
                    f.origin, self.policy.forbidden_dirs_fix
                );
                self.fail(Rule::ForbiddenDir, vec![f.path.clone()], message);
            }
            if matches!(f.content, Content::Binary(_) | Content::Corrupt(_)) {
                self.note_major(f.name(), f.path.clone());
                if !self
                    .forbidden_reported
                    .contains(&f.name().to_ascii_lowercase())
                {
                    if let Some(rule) = self.policy.forbidden(f.name()) {
                        let message = format!("forbidden, bundled ({}; {})", rule.reason, rule.fix);
                        self.fail(Rule::Forbidden, vec![f.path.clone()], message);
                    }
                }
            }
            if let (Some(track), Some(b)) = (&self.policy.track, f.binary()) {
                if (b.machine != track.machine || b.format != track.format)
                    && self.machine_reported.insert(i)
                {
                    let chain = self.chain_of[i]
                        .clone()
                        .unwrap_or_else(|| vec![f.path.clone()]);
                    let message = format!(
                        "wrong machine type ({:?} {}, track {} is {:?} {})",
                        b.format, b.machine, track.name, track.format, track.machine
                    );
                    self.fail(Rule::WrongMachine, chain, message);
                }
            }
        }
    }

    /// Track rules: the bundled set equals the declared set; declared files are reachable
    /// or runtime-loaded by a reachable loader.
    pub fn check_track(&mut self) {
        let Some(track) = self.policy.track.clone() else {
            return;
        };
        let files = self.files;
        // Declared names may be globs (`amd_comgr*.dll`: the name differs between AMD's
        // builds); a file matches a name case-insensitively.
        let declared: Vec<Glob> = track
            .declared
            .iter()
            .map(|d| d.name.as_str())
            .chain(track.executables.iter().map(String::as_str))
            .filter_map(|n| Glob::new(n).ok())
            .collect();
        let find = |name: &str| -> Vec<usize> {
            let glob = Glob::new(name).ok();
            (0..files.len())
                .filter(|&i| {
                    files[i].binary().is_some()
                        && glob.as_ref().is_some_and(|g| g.matches(files[i].name()))
                })
                .collect()
        };
        for f in files {
            if !matches!(f.content, Content::Binary(_) | Content::Corrupt(_)) {
                continue;
            }
            let name = f.name();
            let known = declared.iter().any(|g| g.matches(name))
                || track.libraries.iter().any(|g| g.matches(name))
                || self.policy.is_plugin(name);
            if !known {
                self.fail(
                    Rule::Undeclared,
                    vec![f.path.clone()],
                    format!(
                        "not in the declared set of track {}; remove it from the package or declare it in packaging/tracks.toml",
                        track.name
                    ),
                );
            }
        }
        for exe in &track.executables {
            if find(exe).is_empty() {
                self.fail(
                    Rule::DeclaredAbsent,
                    vec![exe.clone()],
                    format!(
                        "executable declared by track {} is not in the package",
                        track.name
                    ),
                );
            }
        }
        for d in &track.declared {
            let present = find(&d.name);
            if present.is_empty() {
                if !d.optional && !d.sdk_only {
                    self.fail(
                        Rule::DeclaredAbsent,
                        vec![d.name.clone()],
                        format!(
                            "declared by track {} ({}) but not in the package; copy it from the SDK or remove it from packaging/tracks.toml",
                            track.name, d.origin
                        ),
                    );
                }
                continue;
            }
            match d.load {
                Load::Imported => {
                    for &i in &present {
                        if self.chain_of[i].is_none() || self.role[i] == Some(Role::RuntimeLoaded) {
                            self.fail(
                                Rule::Unreachable,
                                vec![files[i].path.clone()],
                                format!(
                                    "declared by track {} as imported, but no executable or plugin imports it; remove it, or declare it load = \"runtime_loaded\" with loaded_by",
                                    track.name
                                ),
                            );
                        }
                    }
                }
                Load::RuntimeLoaded => {
                    let loader = d.loaded_by.as_deref().unwrap_or_default();
                    let reached = find(loader).into_iter().any(|l| {
                        self.chain_of[l].is_some() && self.role[l] != Some(Role::RuntimeLoaded)
                    });
                    if !reached {
                        self.fail(
                            Rule::LoaderUnreachable,
                            vec![d.name.clone()],
                            format!(
                                "runtime-loaded by {loader}, which is not in the package or not reachable from an executable or plugin"
                            ),
                        );
                    }
                }
            }
        }
    }

    /// One major per runtime, and the track's SDK major.
    pub fn check_majors(&mut self) {
        let sdk = self
            .policy
            .track
            .as_ref()
            .and_then(|t| t.sdk_major.clone().map(|s| (t.name.clone(), s)));
        for (runtime, majors) in self.majors.clone() {
            if majors.len() > 1 {
                let list: Vec<String> = majors.iter().map(|(m, w)| format!("{m} ({w})")).collect();
                self.fail(
                    Rule::MixedRuntimeMajors,
                    Vec::new(),
                    format!(
                        "two {runtime} majors in one package: {}; build every GPU library against one SDK",
                        list.join(", ")
                    ),
                );
            }
            if let Some((track, (sdk_runtime, sdk_major))) = &sdk {
                if sdk_runtime.eq_ignore_ascii_case(&runtime) {
                    for (m, w) in majors.iter().filter(|(m, _)| *m != sdk_major) {
                        self.fail(
                            Rule::MixedRuntimeMajors,
                            Vec::new(),
                            format!("{w}: {runtime} {m} in track {track}, which is {runtime} {sdk_major}; use the track of that SDK"),
                        );
                    }
                }
            }
        }
    }

    /// A bundled MSVC CRT must not be older than the linker of a binary importing it.
    pub fn check_crt(&mut self) {
        let files = self.files;
        for (i, f) in files.iter().enumerate() {
            let Some(info) = f.binary() else { continue };
            let Some((14, minor)) = info.linker_version else {
                continue;
            };
            for edge in self.edges[i].clone() {
                let Some(t) = edge
                    .target
                    .as_deref()
                    .and_then(|p| self.exact.get(p).copied())
                else {
                    continue;
                };
                if !self
                    .policy
                    .crt_names
                    .contains(&files[t].name().to_ascii_lowercase())
                {
                    continue;
                }
                let Some(v) = self.info(t).and_then(|b| b.file_version) else {
                    continue;
                };
                if (v[0], v[1]) < (14, minor as u16) {
                    let mut chain = self.chain_of[i]
                        .clone()
                        .unwrap_or_else(|| vec![f.path.clone()]);
                    chain.push(edge.name.clone());
                    self.fail(
                        Rule::StaleCrt,
                        chain,
                        format!(
                            "bundled CRT {} is {}.{}.{}, older than the linker 14.{minor} of {}; bundle the CRT from VC\\Redist\\MSVC\\14.{minor}.* or newer",
                            files[t].name(),
                            v[0],
                            v[1],
                            v[2],
                            f.name()
                        ),
                    );
                }
            }
        }
    }

    fn into_report(mut self, package: &Package) -> Report {
        let mut binaries = Vec::new();
        let mut gpu = 0;
        let mut other = 0;
        for (i, f) in self.files.iter().enumerate() {
            match &f.content {
                Content::Binary(b) => binaries.push(Node {
                    path: f.path.clone(),
                    format: b.format,
                    machine: b.machine,
                    kind: b.kind,
                    role: self.role[i].unwrap_or(Role::Library),
                    reached: self.chain_of[i].is_some(),
                    edges: std::mem::take(&mut self.edges[i]),
                }),
                Content::GpuCode => gpu += 1,
                Content::Other | Content::Link(_) | Content::Corrupt(_) => other += 1,
            }
        }
        for b in &binaries {
            if b.format != Format::Elf {
                continue;
            }
            let info = self
                .files
                .iter()
                .find(|f| f.path == b.path)
                .and_then(|f| f.binary());
            for p in info
                .iter()
                .flat_map(|i| i.rpath.iter().chain(i.runpath.iter()))
            {
                if !p.starts_with("$ORIGIN") && !p.starts_with("${ORIGIN}") {
                    self.warnings.push(format!(
                        "{}: RPATH/RUNPATH entry '{p}' points outside the package (a path of the build machine); use $ORIGIN",
                        b.path
                    ));
                }
            }
        }
        self.findings
            .sort_by(|a, b| a.rule.cmp(&b.rule).then(a.chain.cmp(&b.chain)));
        Report {
            package: package.name.clone(),
            track: self.policy.track.as_ref().map(|t| t.name.clone()),
            roots: self.roots,
            binaries,
            findings: self.findings,
            warnings: self.warnings,
            gpu_code_files: gpu,
            other_files: other,
            stats: package.stats,
        }
    }
}
