//! Every workflow under .github/workflows passes actionlint (the pinned binary), and the
//! lint does fail on a broken workflow.

#[test]
fn every_workflow_passes_actionlint() {
    let files = xtask::actionlint::workflow_files();
    assert!(
        files.iter().any(|f| f.ends_with("release.yml")),
        "release.yml missing from {files:?}"
    );
    if let Err(e) = xtask::actionlint::lint_workflows() {
        panic!("{e:#}");
    }
}

#[test]
fn actionlint_catches_a_broken_workflow() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.yml");
    std::fs::write(
        &bad,
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ matrix.nope }}\n      - uses: actions/checkout@v4\n        with:\n          fetch-depth: [1]\n",
    )
    .unwrap();
    let e = xtask::actionlint::lint_files(&[bad])
        .unwrap_err()
        .to_string();
    assert!(e.contains("actionlint found problems"), "{e}");
    assert!(e.contains("matrix"), "{e}");
}
