//! The result of a check: findings that fail the package, warnings that do not, and the
//! resolved import tree, printable as text (like lddtree / Dependencies) or JSON.

use std::collections::BTreeSet;
use std::fmt::{self, Write as _};

use serde::Serialize;

use super::binary::{DepKind, Format, Kind, Machine};
use super::input::ReadStats;

/// Which rule a finding breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// A file with a PE/ELF magic that cannot be parsed (truncated, corrupt).
    Corrupt,
    /// A forbidden file is imported or bundled (OpenMP runtimes, debug CRTs).
    Forbidden,
    /// A file came from a forbidden folder (`debug_nonredist`).
    ForbiddenDir,
    /// An import is neither bundled (on the search path) nor a system library.
    Missing,
    /// A bundled binary is not in the track's declared set.
    Undeclared,
    /// A file the track declares is not in the package.
    DeclaredAbsent,
    /// A declared, imported-kind file that nothing imports.
    Unreachable,
    /// A runtime-loaded file whose loader is absent or unreachable.
    LoaderUnreachable,
    /// Two majors of one runtime (amdhip64_6 with amdhip64_7), or a major other than the track's SDK.
    MixedRuntimeMajors,
    /// A binary for another CPU than its importer or the track (x86 DLL in an x64 package).
    WrongMachine,
    /// A bundled MSVC CRT older than the linker that built a binary importing it.
    StaleCrt,
}

/// One violation: the chain from a root to the culprit and a line saying what and how to fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The rule broken.
    pub rule: Rule,
    /// Root first, culprit last; empty when the finding is about the package as a whole.
    pub chain: Vec<String>,
    /// What is wrong and the fix, e.g. `forbidden (LLVM OpenMP runtime; build with GGML_OPENMP=OFF)`.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.chain.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.chain.join(" -> "), self.message)
        }
    }
}

/// How a dependency was resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Found in the package on the loader's search path.
    Bundled,
    /// Provided by the OS (allowlist).
    System,
    /// An API set (`api-ms-win-*`, `ext-ms-*`): resolved by the OS, never followed.
    ApiSet,
    /// Neither bundled nor system.
    Missing,
    /// On the forbidden list.
    Forbidden,
    /// Declared by the track as coming only from a real SDK (`sdk_only`) and not in this
    /// package: the package says so in its manifest (verify-package checks that).
    SdkOnly,
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Class::Bundled => "bundled",
            Class::System => "system",
            Class::ApiSet => "api set",
            Class::Missing => "MISSING",
            Class::Forbidden => "FORBIDDEN",
            Class::SdkOnly => "absent, from a real SDK only",
        })
    }
}

/// One resolved dependency of a binary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Edge {
    /// The name as the importer writes it.
    pub name: String,
    /// Import, delay import or needed.
    pub kind: DepKind,
    /// How it resolved.
    pub class: Class,
    /// The package path it resolved to, for bundled dependencies.
    pub target: Option<String>,
}

/// Why a binary is in the walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// An executable: a root.
    Executable,
    /// Matches a plugin pattern (ggml backend): a root.
    Plugin,
    /// Declared runtime-loaded by the track (amd_comgr): a root.
    RuntimeLoaded,
    /// Reached through imports only.
    Library,
    /// Not reached from any root; walked on its own (no track given).
    Unreferenced,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Executable => "executable",
            Role::Plugin => "plugin",
            Role::RuntimeLoaded => "runtime-loaded",
            Role::Library => "library",
            Role::Unreferenced => "unreferenced",
        })
    }
}

/// One binary of the package and its resolved dependencies.
#[derive(Debug, Clone, Serialize)]
pub struct Node {
    /// Package path.
    pub path: String,
    /// File format.
    pub format: Format,
    /// CPU.
    pub machine: Machine,
    /// Executable or library.
    pub kind: Kind,
    /// Why it is walked.
    pub role: Role,
    /// Whether any root reaches it (roots reach themselves).
    pub reached: bool,
    /// Its dependencies, in table order.
    pub edges: Vec<Edge>,
}

/// The result of checking one package.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The package as named by the user.
    pub package: String,
    /// The track checked against.
    pub track: Option<String>,
    /// Roots of the walk, in order (package paths).
    pub roots: Vec<String>,
    /// Every binary.
    pub binaries: Vec<Node>,
    /// Violations: any makes the check fail.
    pub findings: Vec<Finding>,
    /// Advice that does not fail the check.
    pub warnings: Vec<String>,
    /// GPU code objects skipped.
    pub gpu_code_files: usize,
    /// Other (non-binary) files skipped.
    pub other_files: usize,
    /// Read accounting.
    pub stats: ReadStats,
}

impl Report {
    /// Whether the package passes (no findings).
    pub fn passed(&self) -> bool {
        self.findings.is_empty()
    }

    /// Findings of one rule (for tests and summaries).
    pub fn of_rule(&self, rule: Rule) -> Vec<&Finding> {
        self.findings.iter().filter(|f| f.rule == rule).collect()
    }

    /// The readable report: header, import tree from every root, findings, verdict.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let track = self
            .track
            .as_ref()
            .map(|t| format!(" (track {t})"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{}{track}: {} binaries, {} GPU code objects, {} other files",
            self.package,
            self.binaries.len(),
            self.gpu_code_files,
            self.other_files
        );
        let mut printed = BTreeSet::new();
        for root in &self.roots {
            let Some(node) = self.node(root) else {
                continue;
            };
            let _ = writeln!(
                out,
                "{}  [{:?} {} {}]",
                node.path, node.format, node.machine, node.role
            );
            printed.insert(node.path.clone());
            self.render_children(node, "", &mut printed, &mut out);
        }
        if !self.warnings.is_empty() {
            let _ = writeln!(out, "\nwarnings ({}):", self.warnings.len());
            for w in &self.warnings {
                let _ = writeln!(out, "  warning: {w}");
            }
        }
        if self.findings.is_empty() {
            let _ = writeln!(out, "\nresult: ok, no violations");
        } else {
            let _ = writeln!(out, "\nviolations ({}):", self.findings.len());
            for f in &self.findings {
                let _ = writeln!(out, "  error: {f}");
            }
            let _ = writeln!(out, "\nresult: FAILED, {} violations", self.findings.len());
        }
        out
    }

    fn node(&self, path: &str) -> Option<&Node> {
        self.binaries.iter().find(|n| n.path == path)
    }

    fn render_children(
        &self,
        node: &Node,
        prefix: &str,
        printed: &mut BTreeSet<String>,
        out: &mut String,
    ) {
        let api_sets = node
            .edges
            .iter()
            .filter(|e| e.class == Class::ApiSet)
            .count();
        let shown: Vec<&Edge> = node
            .edges
            .iter()
            .filter(|e| e.class != Class::ApiSet)
            .collect();
        let total = shown.len() + usize::from(api_sets > 0);
        for (i, edge) in shown.iter().enumerate() {
            let last = i + 1 == total;
            let (branch, next) = if last {
                ("└── ", "    ")
            } else {
                ("├── ", "│   ")
            };
            let delay = if edge.kind == DepKind::DelayImport {
                " [delay]"
            } else {
                ""
            };
            let target = match &edge.target {
                Some(t) if t != &edge.name => format!(" => {t}"),
                _ => String::new(),
            };
            let child = edge.target.as_deref().and_then(|t| self.node(t));
            let seen = child.is_some_and(|c| printed.contains(&c.path));
            let more = if seen && child.is_some_and(|c| !c.edges.is_empty()) {
                " (see above)"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "{prefix}{branch}{}{target}  {}{delay}{more}",
                edge.name, edge.class
            );
            if let (Some(c), false) = (child, seen) {
                printed.insert(c.path.clone());
                self.render_children(c, &format!("{prefix}{next}"), printed, out);
            }
        }
        if api_sets > 0 {
            let _ = writeln!(out, "{prefix}└── ({api_sets} API sets, not followed)");
        }
    }
}
