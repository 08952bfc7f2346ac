//! Tidy checks over the repository, in the manner of rust-analyzer's: conventions that
//! a test checks stay true (docs/architecture.md, "Conventions the tidy test checks").
//!
//! - every Rust module starts with a `//!` doc comment;
//! - `unsafe` code appears only in the ggml wrapper (`engine/src/ggml.rs`,
//!   `engine/src/ggml/`) and the engine's CPU kernels (`engine/src/cpu_kernels/`);
//! - no packaging track name is spelled in code outside tests, except the exemptions
//!   listed here, each with its reason (tracks are data in `packaging/tracks.toml`);
//! - every document a file cites exists;
//! - the README's `cargo xtask` verbs are the toolchain's verbs;
//! - every placeholder of the package README's template is filled in;
//! - the engine's top-level modules import one another in layers, with no circle.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Files under the repository's source folders with one of `exts`, as paths relative
/// to the root (build outputs, fixtures and the fuzz crate's corpora left out).
fn files(exts: &[&str]) -> Vec<PathBuf> {
    let root = root();
    let mut out = Vec::new();
    let tops = [
        "engine",
        "cli",
        "server",
        "g2p",
        "text",
        "test-support",
        "gemm",
        "xtask",
        "fuzz",
        "docs",
        "packaging",
        "model_specs",
        ".github",
        ".ci",
    ];
    for top in tops {
        let dir = root.join(top);
        if !dir.exists() {
            continue;
        }
        for entry in walkdir::WalkDir::new(&dir)
            .into_iter()
            .filter_entry(|e| {
                let n = e.file_name().to_string_lossy();
                !(n == "target" || n == "fixtures" || n == "corpus" || n == "artifacts")
            })
            .flatten()
        {
            let p = entry.path();
            let ext_ok = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .is_some_and(|n| exts.iter().any(|e| n.ends_with(&format!(".{e}"))));
            if entry.file_type().is_file() && ext_ok {
                out.push(p.strip_prefix(&root).unwrap().to_path_buf());
            }
        }
    }
    for top in ["README.md", "Cargo.toml"] {
        if exts.iter().any(|e| top.ends_with(e)) {
            out.push(PathBuf::from(top));
        }
    }
    out.sort();
    out
}

fn read(rel: &Path) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap()
}

/// A file's text before its unit-test module (`#[cfg(test)]` at the start of a line).
fn code_part(text: &str) -> &str {
    match text.find("\n#[cfg(test)]") {
        Some(at) => &text[..at],
        None => text,
    }
}

fn rust_files() -> Vec<PathBuf> {
    files(&["rs"])
        .into_iter()
        .filter(|p| !p.starts_with("engine/tools"))
        .collect()
}

#[test]
fn every_module_has_a_doc_comment() {
    let missing: Vec<String> = rust_files()
        .into_iter()
        .filter(|p| {
            let text = read(p);
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            !first.starts_with("//!")
        })
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "modules without a `//!` doc comment saying why they exist: {missing:#?}"
    );
}

/// True for the files allowed to hold `unsafe` code.
fn may_hold_unsafe(p: &Path) -> bool {
    p == Path::new("engine/src/ggml.rs")
        || p.starts_with("engine/src/ggml/")
        || p.starts_with("engine/src/cpu_kernels/")
}

#[test]
fn unsafe_code_stays_in_the_wrapper_and_the_kernels() {
    let unsafe_code =
        regex::Regex::new(r"\bunsafe\s*(\{|fn\b|impl\b|extern\b|trait\b|\()").unwrap();
    let mut found = Vec::new();
    for p in rust_files().into_iter().filter(|p| !may_hold_unsafe(p)) {
        for (i, line) in read(&p).lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if unsafe_code.is_match(code) {
                found.push(format!("{}:{}: {}", p.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "unsafe code outside engine/src/ggml* and engine/src/cpu_kernels: {found:#?}"
    );
}

/// Places where code names a track on purpose: (file, the line's text, reason).
const TRACK_NAME_EXEMPTIONS: &[(&str, &str, &str)] = &[
    (
        "xtask/src/dist/mod.rs",
        "\"windows-cpu\"",
        "the host's default track: what `cargo xtask dist` without --track packages on Windows (README)",
    ),
    (
        "xtask/src/dist/mod.rs",
        "\"linux-cpu\"",
        "the host's default track on Linux (README)",
    ),
    (
        "xtask/src/bench/dist.rs",
        "\"rocm6\",",
        "the dist benchmark packages one fixed track against the fake SDK fixtures",
    ),
    (
        "xtask/src/kernels/fixtures.rs",
        "tracks.track(\"rocm6\")",
        "the kernel fixtures are the rocm6 track's library listings",
    ),
    (
        "xtask/src/test.rs",
        "let track = \"windows-cpu-gnu\";",
        "the Windows end-to-end test cross-builds the Windows CPU track on Linux",
    ),
    (
        "xtask/src/wine_hip_test.rs",
        "pub const TRACK: &str = \"windows-hip-rocm7-gnu\";",
        "`test cross-hip` builds the one Windows HIP track cross-built on Linux",
    ),
    (
        "xtask/src/fresh_machine.rs",
        "const TRACK: &str = \"windows-cpu-gnu\";",
        "the fresh-machine test builds the track whose needs a new machine lacks most (apt packages and a Rust target)",
    ),
    (
        "xtask/src/vulkan/lavapipe.rs",
        "pub const LINUX_TRACK: &str = \"linux-vulkan\";",
        "`test vulkan` runs the Linux Vulkan track's package on lavapipe",
    ),
    (
        "xtask/src/vulkan/lavapipe.rs",
        "pub const WINDOWS_TRACK: &str = \"windows-vulkan-gnu\";",
        "`test cross-vulkan` runs the Windows Vulkan track's package under Wine on lavapipe",
    ),
    (
        "xtask/src/bench/deps.rs",
        "Some(\"rocm6\")",
        "the dependency-walk benchmark checks against one track's policy",
    ),
];

/// The track names of packaging/tracks.toml.
fn track_names() -> Vec<String> {
    let tracks: toml::Value = toml::from_str(&read(Path::new("packaging/tracks.toml"))).unwrap();
    tracks["tracks"]
        .as_table()
        .expect("packaging/tracks.toml has [tracks.NAME] tables")
        .keys()
        .cloned()
        .collect()
}

#[test]
fn no_track_names_in_code_outside_tests() {
    let names = track_names();
    assert!(names.iter().any(|n| n == "rocm6"), "tracks read: {names:?}");
    let mut used = vec![false; TRACK_NAME_EXEMPTIONS.len()];
    let mut found = Vec::new();
    for p in rust_files() {
        let in_tests = p
            .components()
            .any(|c| c.as_os_str() == "tests" || c.as_os_str() == "benches");
        if in_tests {
            continue;
        }
        let text = read(&p);
        for (i, line) in code_part(&text).lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let Some(name) = names.iter().find(|n| code.contains(&format!("\"{n}\""))) else {
                continue;
            };
            let exempt = TRACK_NAME_EXEMPTIONS
                .iter()
                .position(|(f, text, _)| Path::new(f) == p && code.contains(text));
            match exempt {
                Some(e) => used[e] = true,
                None => found.push(format!(
                    "{}:{}: '{name}' in {}",
                    p.display(),
                    i + 1,
                    line.trim()
                )),
            }
        }
    }
    assert!(
        found.is_empty(),
        "track names in code (make it data in packaging/tracks.toml, or add an exemption with its reason): {found:#?}"
    );
    let stale: Vec<_> = TRACK_NAME_EXEMPTIONS
        .iter()
        .zip(&used)
        .filter(|(_, u)| !**u)
        .map(|(e, _)| e)
        .collect();
    assert!(
        stale.is_empty(),
        "exemptions that match nothing any more: {stale:#?}"
    );
}

/// Documents the repository cites that live elsewhere, each with where it is.
const CITED_ELSEWHERE: &[(&str, &str)] = &[
    (
        xtask::dist::notices::FILE_NAME,
        "written into every package by dist (xtask/src/dist/notices.rs)",
    ),
    (
        "LICENSE.md",
        "language-tokenizer's licence file, in that crate (packaging/notices.toml clarifies it)",
    ),
];

#[test]
fn every_cited_document_exists() {
    let all = files(&["md", "rs", "toml", "yml", "json"]);
    let names: BTreeSet<String> = all
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    // A path under docs/ must exist as written; a bare markdown file name somewhere in
    // the repository.
    let cited =
        regex::Regex::new(r"(?:\bdocs/[A-Za-z0-9_./-]+\.md\b)|(?:\b[A-Z][A-Za-z0-9_-]*\.md\b)")
            .unwrap();
    // The design once lived outside the repository and was cited by rule or section
    // number alone; it is docs/architecture.md now.
    let outside_design = regex::Regex::new(concat!(r"\b", "DESIGN", r" (?:rule|section)")).unwrap();
    let mut missing = Vec::new();
    for p in &all {
        for (i, line) in read(p).lines().enumerate() {
            if outside_design.is_match(line) {
                missing.push(format!(
                    "{}:{}: cites the old design document; cite docs/architecture.md",
                    p.display(),
                    i + 1
                ));
            }
            for m in cited.find_iter(line) {
                let c = m.as_str();
                let exists = if CITED_ELSEWHERE.iter().any(|(n, _)| *n == c) {
                    true
                } else if c.starts_with("docs/") {
                    root().join(c).is_file()
                } else {
                    names.contains(c)
                };
                if !exists {
                    missing.push(format!("{}:{}: {c}", p.display(), i + 1));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "documents cited but not in the repository: {missing:#?}"
    );
}

/// Every `{{name}}` of the package README's template is one `render_readme` fills in, so
/// no placeholder reaches a package (the template's commands and server.json are checked
/// against the CLI and the server by their own tests).
#[test]
fn the_package_readmes_placeholders_are_all_filled_in() {
    let template = read(Path::new("packaging/readme/package.md"));
    let render = read(Path::new("xtask/src/dist/package.rs"));
    let placeholder = regex::Regex::new(r"\{\{([a-z_]+)\}\}").unwrap();
    let used: BTreeSet<&str> = placeholder
        .captures_iter(&template)
        .map(|c| c.get(1).unwrap().as_str())
        .collect();
    assert!(used.contains("cli") && used.contains("server"), "{used:?}");
    let unfilled: Vec<&&str> = used
        .iter()
        .filter(|n| !render.contains(&format!(".replace(\"{{{{{n}}}}}\"")))
        .collect();
    assert!(
        unfilled.is_empty(),
        "placeholders of packaging/readme/package.md that render_readme leaves: {unfilled:?}"
    );
}

#[test]
fn the_readme_lists_the_toolchains_verbs() {
    let readme = read(Path::new("README.md"));
    let verb = regex::Regex::new(r"cargo xtask ([a-z][a-z-]*)").unwrap();
    let in_readme: BTreeSet<String> = verb
        .captures_iter(&readme)
        .map(|c| c[1].to_string())
        .collect();
    let flags = read(Path::new("xtask/src/flags.rs"));
    let body = &flags[flags.find("pub enum Command").expect("the verbs' enum")..];
    let body = &body[..body.find("\n}").unwrap()];
    let variant = regex::Regex::new(r"(?m)^    ([A-Z][A-Za-z]*)\(").unwrap();
    let in_cli: BTreeSet<String> = variant
        .captures_iter(body)
        .map(|c| {
            let mut kebab = String::new();
            for (i, ch) in c[1].chars().enumerate() {
                if ch.is_ascii_uppercase() && i > 0 {
                    kebab.push('-');
                }
                kebab.push(ch.to_ascii_lowercase());
            }
            kebab
        })
        .collect();
    assert!(
        in_cli.contains("dist"),
        "verbs read from flags.rs: {in_cli:?}"
    );
    assert_eq!(
        in_readme, in_cli,
        "the README's `cargo xtask` verbs (left) and the toolchain's (right) differ"
    );
}

/// The engine's top-level modules (`engine/src/<m>.rs` and `engine/src/<m>/`) and, for
/// each, the others its code outside unit tests names as `crate::<other>`, with the first
/// file that does.
fn engine_imports(
) -> std::collections::BTreeMap<String, std::collections::BTreeMap<String, PathBuf>> {
    let mut graph: std::collections::BTreeMap<String, std::collections::BTreeMap<String, PathBuf>> =
        Default::default();
    let src = Path::new("engine/src");
    for rel in rust_files().into_iter().filter(|p| p.starts_with(src)) {
        let inner = rel.strip_prefix(src).unwrap();
        let first = inner
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "lib" {
            continue;
        }
        let text = read(&rel);
        let edges = graph.entry(module.clone()).or_default();
        for line in code_part(&text).lines() {
            let code = line.split("//").next().unwrap_or("");
            for (at, _) in code.match_indices("crate::") {
                let name: String = code[at + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != module {
                    edges.entry(name).or_insert_with(|| rel.clone());
                }
            }
        }
    }
    graph
}

/// A circle in `graph` through `from`, as the modules along it, if there is one.
fn circle_through(
    graph: &std::collections::BTreeMap<String, std::collections::BTreeMap<String, PathBuf>>,
    from: &str,
) -> Option<Vec<String>> {
    let mut stack = vec![vec![from.to_string()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last().unwrap();
        for next in graph.get(last).into_iter().flat_map(|e| e.keys()) {
            if next == from {
                let mut circle = path.clone();
                circle.push(from.to_string());
                return Some(circle);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push(longer);
            }
        }
    }
    None
}

#[test]
fn the_engines_modules_import_no_circle() {
    let graph = engine_imports();
    assert!(
        graph.contains_key("ggml") && graph.contains_key("tasks") && graph.contains_key("families"),
        "the engine's modules were not found: {:?}",
        graph.keys()
    );
    let mut circles = Vec::new();
    for module in graph.keys() {
        if let Some(circle) = circle_through(&graph, module) {
            let steps: Vec<String> = circle
                .windows(2)
                .map(|w| format!("{} -> {} ({})", w[0], w[1], graph[&w[0]][&w[1]].display()))
                .collect();
            circles.push(steps.join(", "));
        }
    }
    assert!(
        circles.is_empty(),
        "the engine's modules import in a circle (a contract belongs below its users; move it down):\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_circle_check_finds_a_circle() {
    let mut graph: std::collections::BTreeMap<String, std::collections::BTreeMap<String, PathBuf>> =
        Default::default();
    let edge = |g: &mut std::collections::BTreeMap<
        String,
        std::collections::BTreeMap<String, PathBuf>,
    >,
                a: &str,
                b: &str| {
        g.entry(a.into())
            .or_default()
            .insert(b.into(), PathBuf::from(format!("{a}.rs")));
    };
    edge(&mut graph, "tasks", "families");
    edge(&mut graph, "families", "vad");
    assert_eq!(circle_through(&graph, "tasks"), None);
    edge(&mut graph, "vad", "tasks");
    assert_eq!(
        circle_through(&graph, "families").unwrap(),
        ["families", "vad", "tasks", "families"]
    );
}
