//! The kernel filter and report on generated ROCm 6.4 / 7.1 Windows and Debian trees:
//! kept/dropped sets compared exactly with what each file serves by construction.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use xtask::kernels::filter::{
    execute, parse_targets, plan, CoverageNote, CoverageNotes, ExecuteOptions, FilterPlan, LinkMode,
};
use xtask::kernels::fixtures::{
    debian_sid, rocm64_windows, rocm6_targets, rocm71_windows, write_tree, Fill, GeneratedFile,
    TreeSpec,
};
use xtask::kernels::layout::{self, LibraryKind};
use xtask::kernels::CoverageReport;

type FileSet = BTreeSet<(LibraryKind, PathBuf)>;

const ROCM7_TARGETS: &[&str] = &[
    "gfx1100", "gfx1101", "gfx1102", "gfx1151", "gfx1200", "gfx1201",
];

fn tree(spec: &TreeSpec) -> (tempfile::TempDir, PathBuf, Vec<GeneratedFile>) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("sdk");
    let files = write_tree(spec, &root, Fill::Sparse).unwrap();
    (tmp, root, files)
}

fn expected(files: &[GeneratedFile], targets: &[&str]) -> (FileSet, FileSet) {
    let mut kept = FileSet::new();
    let mut dropped = FileSet::new();
    for file in files {
        let key = (file.library, file.rel_path.clone());
        if file.kept_for(targets) {
            kept.insert(key);
        } else {
            dropped.insert(key);
        }
    }
    (kept, dropped)
}

fn planned(plan: &FilterPlan) -> (FileSet, FileSet) {
    let mut kept = FileSet::new();
    let mut dropped = FileSet::new();
    for lib in &plan.libraries {
        kept.extend(lib.kept.iter().map(|f| (lib.kind, f.rel_path.clone())));
        dropped.extend(lib.dropped.iter().map(|f| (lib.kind, f.rel_path.clone())));
    }
    (kept, dropped)
}

fn plan_for(root: &Path, targets: &[&str], notes: &CoverageNotes) -> FilterPlan {
    plan(root, &parse_targets(targets).unwrap(), notes).unwrap()
}

fn xtask(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every file under `dir` with its size, relative to it.
fn listing(dir: &Path) -> BTreeSet<(PathBuf, u64)> {
    layout::list_files(dir)
        .unwrap()
        .into_iter()
        .map(|f| (f.rel_path, f.size))
        .collect()
}

#[test]
fn rocm64_keeps_exactly_the_rocm6_targets_files() {
    let (_tmp, root, files) = tree(&rocm64_windows());
    let names = rocm6_targets(&xtask::context::RunContext::default()).unwrap();
    let targets: Vec<&str> = names.iter().map(String::as_str).collect();
    let plan = plan_for(&root, &targets, &CoverageNotes::default());
    let (kept, dropped) = planned(&plan);
    let (want_kept, want_dropped) = expected(&files, &targets);
    assert_eq!(kept, want_kept);
    assert_eq!(dropped, want_dropped);
    // gfx906 and gfx1030 go; every fallback and arch-independent file stays.
    assert!(dropped.iter().all(|(_, p)| {
        let p = p.to_string_lossy();
        p.contains("gfx906") || p.contains("gfx1030")
    }));
    let independent: Vec<_> = files.iter().filter(|f| f.serves.is_empty()).collect();
    assert_eq!(
        independent.len(),
        51,
        "50 *_fallback.dat + TensileManifest.txt"
    );
    for file in independent {
        assert!(
            kept.contains(&(file.library, file.rel_path.clone())),
            "{:?}",
            file.rel_path
        );
    }
    // ROCm 6.4's rocBLAS has no gfx1103 / gfx1150 kernels, as the track says.
    let uncovered: Vec<&str> = plan.uncovered.iter().map(|u| u.target.as_str()).collect();
    assert_eq!(uncovered, ["gfx1103", "gfx1150"]);
    assert_eq!(plan.libraries.len(), 1);
    assert_eq!(
        plan.libraries[0].source_dir,
        Path::new("bin/rocblas/library")
    );
    assert_eq!(plan.dropped_bytes(), 270_000_000);
}

#[test]
fn prefix_targets_keep_only_their_own_files() {
    // A substring filter for gfx110 would keep gfx1100..gfx1103; the plan keeps gfx1100 only.
    let (_tmp, root, files) = tree(&rocm71_windows());
    for targets in [
        &["gfx1100"][..],
        &["gfx1103", "gfx1150"],
        &["gfx1201", "gfx1030"],
    ] {
        let plan = plan_for(&root, targets, &CoverageNotes::default());
        let (kept, dropped) = planned(&plan);
        let (want_kept, want_dropped) = expected(&files, targets);
        assert_eq!(kept, want_kept, "{targets:?}");
        assert_eq!(dropped, want_dropped, "{targets:?}");
    }
}

#[test]
fn rocm71_traps_go_where_they_belong() {
    let (_tmp, root, files) = tree(&rocm71_windows());
    let targets = ["gfx1100", "gfx1150", "gfx1201"];
    let plan = plan_for(&root, &targets, &CoverageNotes::default());
    let (kept, dropped) = planned(&plan);
    assert_eq!((kept.clone(), dropped.clone()), expected(&files, &targets));
    let has = |set: &FileSet, kind, path: &str| set.contains(&(kind, PathBuf::from(path)));
    use LibraryKind::{Hipblaslt, Rocblas};
    assert!(has(
        &kept,
        Rocblas,
        "gfx1150/TensileLibrary_lazy_gfx1150.dat.zlib"
    ));
    assert!(has(
        &kept,
        Rocblas,
        "gfx1150/TensileLibrary_Type_HH_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx11.dat.zlib"
    ));
    assert!(has(
        &dropped,
        Rocblas,
        "gfx942/TensileLibrary_Type_HH_HPA_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx1100.co"
    ));
    assert!(has(
        &dropped,
        Rocblas,
        "gfx942/TensileLibrary_lazy_gfx942.dat.zlib"
    ));
    assert!(has(&kept, Rocblas, "TensileManifest.txt"));
    assert!(has(&kept, Hipblaslt, "extop_gfx1100_gfx1101.co"));
    assert!(has(
        &kept,
        Hipblaslt,
        "TensileLibrary_HH_HH_UA_Type_HH_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx12.dat"
    ));
    for name in [
        "hipblasltExtOpLibrary.dat",
        "hipblasltTransform.hsaco",
        "TensileLiteLibrary_lazy_Mapping.dat",
    ] {
        assert!(has(&kept, Hipblaslt, name), "{name}");
    }
    assert!(has(&dropped, Hipblaslt, "Kernels.so-000-gfx1101.hsaco"));
    // gfx1150's lazy index is a .dat.zlib in its own folder: covered.
    let rocblas = &plan.libraries[0];
    assert_eq!(rocblas.coverage[1].lazy_index.as_deref(), Some("gfx1150"));
    assert!(plan.uncovered.is_empty(), "{:?}", plan.uncovered);
}

#[test]
fn gfx1102_is_uncovered_on_the_71_tree() {
    let (_tmp, root, _files) = tree(&rocm71_windows());
    let plan = plan_for(&root, ROCM7_TARGETS, &CoverageNotes::default());
    assert_eq!(plan.uncovered.len(), 1, "{:?}", plan.uncovered);
    let gap = &plan.uncovered[0];
    assert_eq!(
        (gap.target.as_str(), gap.library),
        ("gfx1102", LibraryKind::Hipblaslt)
    );
    assert!(gap
        .reason
        .contains("hipBLASLt (bin/hipblaslt/library) has no TensileLibrary_lazy_gfx1102.dat"));
    assert!(
        gap.reason
            .contains("gfx1100 gfx1101 gfx1103 gfx1150 gfx1151 gfx1200 gfx1201"),
        "{}",
        gap.reason
    );
    let err = plan.check_coverage().unwrap_err().to_string();
    assert!(err.contains("--allow-uncovered"), "{err}");
    // rocBLAS 7.1 itself has gfx1102.
    assert_eq!(
        plan.libraries[0].coverage[2].lazy_index.as_deref(),
        Some("gfx1102")
    );

    let notes = CoverageNotes {
        notes: vec![CoverageNote {
            library: LibraryKind::Hipblaslt,
            target: "gfx1102".into(),
            reason: "ROCm 7.1 hipBLASLt ships no gfx1102 kernels; use the rocm6 track".into(),
        }],
    };
    let plan = plan_for(&root, ROCM7_TARGETS, &notes);
    let err = plan.check_coverage().unwrap_err().to_string();
    assert!(
        err.contains("gfx1102: ROCm 7.1 hipBLASLt ships no gfx1102 kernels; use the rocm6 track"),
        "{err}"
    );
}

#[test]
fn report_reproduces_the_per_arch_sizes_and_shares() {
    for spec in [rocm64_windows(), rocm71_windows()] {
        let (_tmp, root, files) = tree(&spec);
        let libraries = layout::scan(&root).unwrap();
        let report = CoverageReport::from_libraries(&root, &libraries).unwrap();
        assert_eq!(report.libraries.len(), spec.libraries.len());
        for (lib_spec, lib) in spec.libraries.iter().zip(&report.libraries) {
            assert_eq!(lib.dir, lib_spec.dir);
            let total: u64 = files
                .iter()
                .filter(|f| f.library == lib.kind)
                .map(|f| f.size)
                .sum();
            assert_eq!(lib.bytes, total);
            for (arch, bytes) in lib_spec.arch_bytes() {
                let row = lib
                    .rows
                    .iter()
                    .find(|r| r.arch == arch)
                    .unwrap_or_else(|| panic!("{arch}"));
                let extra: u64 = lib_spec
                    .extra
                    .iter()
                    .filter(|e| e.serves == [arch] && e.rel_path.starts_with(arch))
                    .map(|e| e.size)
                    .sum();
                assert_eq!(row.bytes, bytes + extra, "{} {arch}", spec.name);
                let share = (bytes + extra) as f64 * 100.0 / total as f64;
                assert!((row.share_percent - share).abs() < 1e-9);
                assert!(row.lazy_index, "{arch} has a lazy index");
            }
            let independent = lib.rows.last().unwrap();
            assert_eq!(independent.arch, "arch-independent");
            let want: u64 = files
                .iter()
                .filter(|f| f.library == lib.kind && f.serves.is_empty())
                .map(|f| f.size)
                .sum();
            assert_eq!(independent.bytes, want);
        }
    }
    // The published totals: rocBLAS 6.4 1060 MB of per-arch kernels, hipBLASLt 7.1 407 MB.
    let rocm64 = rocm64_windows();
    let per_arch: u64 = rocm64.libraries[0]
        .arch_bytes()
        .iter()
        .map(|(_, b)| b)
        .sum();
    assert_eq!(per_arch, 1_060_000_000);
    let hipblaslt: u64 = rocm71_windows().libraries[1]
        .files()
        .iter()
        .map(|f| f.size)
        .sum();
    assert_eq!(hipblaslt.div_ceil(1_000_000), 407);
}

#[test]
fn debian_layout_and_xnack_variants() {
    let (_tmp, root, files) = tree(&debian_sid());
    let dirs = layout::find_library_dirs(&root).unwrap();
    assert_eq!(
        dirs,
        vec![
            (
                LibraryKind::Rocblas,
                PathBuf::from("lib/x86_64-linux-gnu/rocblas/4.4.1/library")
            ),
            (
                LibraryKind::Hipblaslt,
                PathBuf::from("lib/x86_64-linux-gnu/hipblaslt/library")
            ),
        ]
    );
    let targets = ["gfx90a", "gfx1100"];
    let plan = plan_for(&root, &targets, &CoverageNotes::default());
    assert_eq!(planned(&plan), expected(&files, &targets));
    let (kept, _) = planned(&plan);
    for suffix in ["xnack+", "xnack-"] {
        let name = format!("Kernels.so-000-gfx90a-{suffix}.hsaco");
        assert!(kept.contains(&(LibraryKind::Rocblas, PathBuf::from(name))));
    }
    assert!(plan.uncovered.is_empty());
    let report = CoverageReport::from_libraries(&root, &layout::scan(&root).unwrap()).unwrap();
    let lazy = &report.libraries[0].lazy_index_arches;
    assert_eq!(
        lazy.join(" "),
        "gfx803 gfx900 gfx906 gfx908 gfx90a gfx1010 gfx1030 gfx1100 gfx1101 gfx1102"
    );
}

#[test]
fn linux_opt_rocm_layout_is_found() {
    let mut spec = rocm71_windows();
    spec.libraries[0].dir = "lib/rocblas/library";
    spec.libraries[1].dir = "lib/hipblaslt/library";
    let (_tmp, root, _) = tree(&spec);
    let dirs: Vec<_> = layout::find_library_dirs(&root)
        .unwrap()
        .into_iter()
        .map(|d| d.1)
        .collect();
    assert_eq!(
        dirs,
        [
            PathBuf::from("lib/rocblas/library"),
            PathBuf::from("lib/hipblaslt/library")
        ]
    );
}

#[test]
fn execute_places_exactly_the_kept_files_and_leaves_the_sdk_alone() {
    let (tmp, root, files) = tree(&rocm71_windows());
    let before = listing(&root);
    let targets = ["gfx1100", "gfx1151"];
    let plan = plan_for(&root, &targets, &CoverageNotes::default());
    for (i, link) in [LinkMode::Auto, LinkMode::Copy].into_iter().enumerate() {
        let dst = tmp.path().join(format!("out{i}/pkg"));
        let summary = execute(&plan, &dst, &ExecuteOptions { force: false, link }).unwrap();
        let placed: FileSet = [LibraryKind::Rocblas, LibraryKind::Hipblaslt]
            .into_iter()
            .flat_map(|kind| {
                listing(&dst.join(kind.package_dir()))
                    .into_iter()
                    .map(move |(p, _)| (kind, p))
            })
            .collect();
        assert_eq!(placed, expected(&files, &targets).0);
        assert_eq!(summary.linked + summary.copied, placed.len());
        assert_eq!(summary.bytes, plan.kept_bytes());
        if link == LinkMode::Copy {
            assert_eq!(summary.linked, 0);
        }
        // Nothing else beside the destination: the staging folder is gone.
        let siblings: Vec<_> = std::fs::read_dir(dst.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(siblings, ["pkg"]);
    }
    assert_eq!(listing(&root), before);
}

#[test]
fn execute_refuses_unsafe_destinations() {
    let (tmp, root, _) = tree(&rocm64_windows());
    let plan = plan_for(&root, &["gfx1100"], &CoverageNotes::default());
    let options = ExecuteOptions::default();
    let before = listing(&root);
    for dst in [
        root.join("out"),
        root.join("bin/new/pkg"),
        root.clone(),
        tmp.path().to_path_buf(),
    ] {
        let err = execute(&plan, &dst, &options).unwrap_err().to_string();
        assert!(
            err.contains("inside the source") || err.contains("holds the source"),
            "{dst:?}: {err}"
        );
    }
    assert_eq!(listing(&root), before);
    assert!(!root.join("bin/new").exists());

    let dst = tmp.path().join("pkg");
    std::fs::create_dir(&dst).unwrap();
    std::fs::write(dst.join("old.txt"), "old").unwrap();
    let err = execute(&plan, &dst, &options).unwrap_err().to_string();
    assert!(err.contains("exists (pass --force"), "{err}");
    assert!(dst.join("old.txt").exists());
    execute(
        &plan,
        &dst,
        &ExecuteOptions {
            force: true,
            ..options
        },
    )
    .unwrap();
    assert!(!dst.join("old.txt").exists());
    assert!(dst
        .join("rocblas/library/TensileLibrary_lazy_gfx1100.dat")
        .exists());
    let names: BTreeSet<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["pkg", "sdk"].into_iter().map(Into::into).collect());
}

#[test]
fn unknown_token_in_a_tree_is_an_error() {
    let (_tmp, root, _) = tree(&rocm64_windows());
    std::fs::write(
        root.join("bin/rocblas/library/TensileLibrary_lazy_gfx1036.dat"),
        "",
    )
    .unwrap();
    let err = format!(
        "{:#}",
        plan(
            &root,
            &parse_targets(&["gfx1100"]).unwrap(),
            &CoverageNotes::default()
        )
        .unwrap_err()
    );
    assert!(
        err.contains("unknown GPU arch token 'gfx1036' in bin/rocblas/library/TensileLibrary_lazy_gfx1036.dat"),
        "{err}"
    );
    let out = xtask(&["kernels", "report", "--rocm-path", root.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("gfx1036"));
}

#[test]
fn cli_report_text_and_json() {
    let (_tmp, root, _) = tree(&rocm64_windows());
    let out = xtask(&["kernels", "report", "--rocm-path", root.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("rocBLAS (bin/rocblas/library)"), "{stdout}");
    assert!(
        stdout.contains("gfx1100")
            && stdout.contains("200.0 MB")
            && stdout.contains("arch-independent")
    );
    let out = xtask(&[
        "kernels",
        "report",
        "--rocm-path",
        root.to_str().unwrap(),
        "--json",
    ]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let lib = &json["libraries"][0];
    assert_eq!(lib["kind"], "rocblas");
    assert_eq!(lib["lazy_index_arches"].as_array().unwrap().len(), 8);
}

#[test]
fn cli_filter_dry_run_uncovered_and_allow() {
    let (tmp, root, _) = tree(&rocm71_windows());
    let dst = tmp.path().join("pkg");
    let (src, dst_s) = (root.to_str().unwrap(), dst.to_str().unwrap());
    let targets = ROCM7_TARGETS.join(",");

    let notes = tmp.path().join("notes.toml");
    std::fs::write(
        &notes,
        "[[note]]\nlibrary = \"hipblaslt\"\ntarget = \"gfx1102\"\n\
         reason = \"ROCm 7.1 hipBLASLt ships no gfx1102 kernels; use the rocm6 track\"\n",
    )
    .unwrap();
    let base = [
        "kernels",
        "filter",
        "--src",
        src,
        "--dst",
        dst_s,
        "--gpu-targets",
        &targets,
    ];
    let with = |extra: &[&str]| xtask(&[&base[..], extra].concat());

    let out = with(&["--coverage-notes", notes.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr)
        .contains("gfx1102: ROCm 7.1 hipBLASLt ships no gfx1102 kernels; use the rocm6 track"));
    assert!(!dst.exists());

    let out = with(&["--allow-uncovered", "--dry-run", "--list"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("drop"));
    assert!(text(&out.stdout).contains("(arch-independent)"));
    assert!(!dst.exists(), "dry run writes nothing");

    let out = with(&["--allow-uncovered"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(dst
        .join("hipblaslt/library/hipblasltExtOpLibrary.dat")
        .exists());
    assert!(!dst
        .join("rocblas/library/TensileLibrary_lazy_gfx1030.dat")
        .exists());

    let out = with(&["--allow-uncovered"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--force"));

    let out = xtask(&[
        "kernels",
        "filter",
        "--src",
        src,
        "--dst",
        dst_s,
        "--gpu-targets",
        "gfx110",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("unknown GPU arch token 'gfx110'"),
        "{}",
        text(&out.stderr)
    );
}
