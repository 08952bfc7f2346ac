//! `dist`'s third-party notices and licence policy, on this workspace's real dependency
//! graph (cargo metadata) and the real packaging/notices.toml: what every package gets,
//! and that each way the policy can be broken stops it with the file and key named.

use std::path::{Path, PathBuf};

use xtask::dist::notices::{self, NoticesConfig};

fn root() -> PathBuf {
    xtask::project::project_root()
}

fn config_text() -> String {
    std::fs::read_to_string(root().join("packaging/notices.toml")).unwrap()
}

fn config(text: &str) -> NoticesConfig {
    notices::parse_config(text, Path::new("packaging/notices.toml")).unwrap()
}

fn exes() -> Vec<String> {
    vec!["audiocpp_cli".into(), "audiocpp_server".into()]
}

/// The plan for `triple` from the notices file `text`.
fn decide(triple: &str, text: &str) -> anyhow::Result<notices::NoticesPlan> {
    notices::decide(
        &root(),
        triple,
        &exes(),
        &config(text),
        Path::new("packaging/notices.toml"),
    )
}

/// Why the Linux plan from the notices file `text` was refused (it must be).
fn refusal(text: &str) -> String {
    match decide("x86_64-unknown-linux-gnu", text) {
        Ok(_) => panic!("the notices plan was not refused"),
        Err(e) => format!("{e:#}"),
    }
}

fn render(triple: &str) -> (notices::NoticesPlan, String) {
    let plan = decide(triple, &config_text()).unwrap_or_else(|e| panic!("{triple}: {e:#}"));
    let text = notices::render(&plan, "audiocpp-test", &|p: &Path| {
        std::fs::read_to_string(p).ok()
    });
    (plan, text)
}

#[test]
fn every_linked_crate_and_bundled_part_has_its_notice() {
    for triple in [
        "x86_64-unknown-linux-gnu",
        "x86_64-pc-windows-gnu",
        "x86_64-pc-windows-msvc",
    ] {
        let (plan, text) = render(triple);
        assert!(
            plan.crates.len() > 50,
            "{triple}: only {} crates",
            plan.crates.len()
        );
        for c in &plan.crates {
            assert!(
                text.contains(&format!("| {} | {} |", c.name, c.version)),
                "{triple}: {} {} is not listed",
                c.name,
                c.version
            );
        }
        for must in [
            "axum",
            "tokio",
            "misaki-rs",
            "symphonia-core",
            "llama-cpp-sys-2",
        ] {
            assert!(
                plan.crates.iter().any(|c| c.name == must),
                "{triple}: {must} not found"
            );
        }
        // Our own crates head the file instead of being listed as third-party.
        assert!(!plan.crates.iter().any(|c| c.name.starts_with("audiocpp")));
        assert!(!plan.crates.iter().any(|c| c.name == "xtask"));
        // Dev-dependencies and build-only crates are not linked into the executables.
        assert!(
            !plan.crates.iter().any(|c| c.name == "tempfile"),
            "{triple}: tempfile is a dev-dependency"
        );
        assert!(
            !plan.crates.iter().any(|c| c.name == "cmake"),
            "{triple}: cmake is a build-dependency"
        );
        // ggml's own licence file, tinyBLAS, YaRN and misaki's lexicons.
        assert!(text.contains("Copyright (c) 2023-2026 The ggml authors"));
        assert!(text.contains("Copyright 2024 Mozilla Foundation"));
        assert!(text.contains("Jeffrey Quesnelle and Bowen Peng"));
        assert!(text.contains("misaki, by hexgrad"));
        assert!(text.contains("Apache License") && text.contains("Version 2.0, January 2004"));
        assert!(
            text.contains("DO WHAT THE FUCK YOU WANT TO PUBLIC LICENSE"),
            "language-tokenizer's clarified text"
        );
        // MPL-2.0 crates get their source offer.
        assert!(
            text.contains("https://crates.io/crates/symphonia-core/"),
            "{triple}"
        );
        // Identical texts are printed once: far fewer texts than crates.
        let texts = text.matches("\n### Text ").count();
        assert!(
            texts < plan.crates.len(),
            "{texts} texts for {} crates",
            plan.crates.len()
        );
    }
}

#[test]
fn windows_only_crates_follow_the_target() {
    let (linux, _) = render("x86_64-unknown-linux-gnu");
    let (windows, _) = render("x86_64-pc-windows-gnu");
    let has = |p: &notices::NoticesPlan, n: &str| p.crates.iter().any(|c| c.name == n);
    assert!(has(&windows, "windows-sys") && !has(&linux, "windows-sys"));
}

#[test]
fn a_licence_outside_the_allowed_list_stops_dist_naming_crate_key_and_allowed() {
    let text = config_text().replace(
        "[[allowed]]\nid = \"MPL-2.0\"",
        "[[allowed]]\nid = \"CC0-1.0\"",
    );
    let msg = refusal(&text);
    assert!(msg.contains("crate symphonia-core"), "{msg}");
    assert!(msg.contains("MPL-2.0 not allowed"), "{msg}");
    assert!(
        msg.contains("key `allowed` of packaging/notices.toml"),
        "{msg}"
    );
    assert!(msg.contains("allowed: MIT, Apache-2.0"), "{msg}");
}

#[test]
fn a_gpl_crate_would_be_refused() {
    // No GPL licence is allowed, so a GPL-only expression fails the same evaluation every
    // crate goes through; a dual licence with a permissive side passes.
    let cfg = config(&config_text());
    let allowed: Vec<spdx::Licensee> = cfg
        .allowed
        .iter()
        .map(|a| spdx::Licensee::parse(&a.id).unwrap())
        .collect();
    let ok = |e: &str| {
        spdx::Expression::parse_mode(e, spdx::ParseMode::LAX)
            .unwrap()
            .evaluate(|r| allowed.iter().any(|a| a.satisfies(r)))
    };
    assert!(!ok("GPL-3.0-or-later"));
    assert!(!ok("LGPL-2.1-only"));
    assert!(!ok("MIT AND GPL-2.0-only"));
    assert!(ok("GPL-3.0-only OR MIT"));
}

#[test]
fn a_clarified_file_that_changed_is_refused() {
    let text = config_text().replace(
        "971408c19bfdfcf3934b2be00951157b1c95690b8d86a731d0001f4e75a54619",
        &"0".repeat(64),
    );
    let msg = refusal(&text);
    assert!(
        msg.contains("crate language-tokenizer") && msg.contains("clarify.sha256"),
        "{msg}"
    );
}

#[test]
fn an_unclarified_crate_without_spdx_licence_is_refused() {
    let text = config_text().replace(
        "crate = \"language-tokenizer\"",
        "crate = \"no-such-crate\"",
    );
    let msg = refusal(&text);
    assert!(
        msg.contains("crate language-tokenizer")
            && msg.contains("license-file = LICENSE.md")
            && msg.contains("[[clarify]]"),
        "{msg}"
    );
}

#[test]
fn bundled_evidence_that_no_longer_holds_is_refused() {
    let text = config_text().replace(
        "evidence_text = \"Copyright 2024 Mozilla Foundation\"",
        "evidence_text = \"Copyright 1999 Nobody\"",
    );
    let msg = refusal(&text);
    assert!(
        msg.contains("tinyBLAS") && msg.contains("bundled.evidence_text"),
        "{msg}"
    );
}

#[test]
fn a_bad_notices_file_names_its_key() {
    let text = config_text().replacen("id = \"MIT\"", "id = \"Not A Licence\"", 1);
    let msg = format!(
        "{:#}",
        notices::parse_config(&text, Path::new("packaging/notices.toml")).unwrap_err()
    );
    assert!(
        msg.contains("packaging/notices.toml: allowed[0].id 'Not A Licence'"),
        "{msg}"
    );
}

#[test]
fn misaki_rs_embeds_the_lexicons_of_the_pinned_misaki_wheel() {
    // The notice for misaki's lexicons rests on misaki-rs's data/ being misaki 0.9.4's:
    // compared byte for byte with the files of the pinned wheel (`cargo xtask test`
    // fetches it).
    let assets = std::env::var_os("AUDIOCPP_TEST_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/test-assets"));
    let meta = cargo_metadata::MetadataCommand::new()
        .manifest_path(root().join("Cargo.toml"))
        .exec()
        .unwrap();
    let misaki_rs = meta
        .packages
        .iter()
        .find(|p| p.name == "misaki-rs")
        .unwrap();
    let data = misaki_rs.manifest_path.parent().unwrap().join("data");
    for name in ["us_gold", "us_silver", "gb_gold", "gb_silver"] {
        let ours = assets.join(format!("misaki/{name}.json"));
        let wheel = std::fs::read(&ours).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run `cargo xtask test`, which fetches the pinned misaki 0.9.4 wheel",
                ours.display()
            )
        });
        let embedded = std::fs::read(data.join(format!("{name}.json"))).unwrap();
        assert!(
            wheel == embedded,
            "misaki-rs's {name}.json differs from misaki 0.9.4's"
        );
    }
}
