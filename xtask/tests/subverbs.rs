//! The modes of `test`, `setup` and `dist` as sub-verbs (issue 36, item 5): each new
//! spelling and its hidden old flag parse, through the real command line of flags.rs, to
//! the same mode; a mode with a flag only the other mode reads is a usage error (exit 2);
//! the plain verbs that CI runs keep their meaning.

use clap::Parser;
use xtask::flags::{Cli, Command};
use xtask::{dist, setup, test};

fn parse(args: &str) -> Result<Command, clap::Error> {
    Cli::try_parse_from(std::iter::once("cargo-xtask").chain(args.split_whitespace()))
        .map(|c| c.command)
}

fn test_mode(args: &str) -> test::Mode {
    match parse(args).unwrap_or_else(|e| panic!("{args}: {e}")) {
        Command::Test(a) => a.mode(),
        other => panic!("{args} parsed as {other:?}"),
    }
}

fn setup_mode(args: &str) -> setup::Mode {
    match parse(args).unwrap_or_else(|e| panic!("{args}: {e}")) {
        Command::Setup(a) => a.mode(),
        other => panic!("{args} parsed as {other:?}"),
    }
}

fn dist_args(args: &str) -> dist::Args {
    match parse(args).unwrap_or_else(|e| panic!("{args}: {e}")) {
        Command::Dist(a) => a,
        other => panic!("{args} parsed as {other:?}"),
    }
}

/// Asserts that `args` is a usage error: clap's exit code 2, not a parse to run.
fn usage_error(args: &str) {
    match parse(args) {
        Ok(c) => panic!("{args} parsed as {c:?}, expected a usage error"),
        Err(e) => assert_eq!(e.exit_code(), 2, "{args}: {e}"),
    }
}

#[test]
fn test_sub_verbs_and_their_old_flags_parse_to_the_same_mode() {
    let hip = |track: Option<&str>| test::Mode::Hip {
        track: track.map(String::from),
    };
    assert_eq!(test_mode("test hip"), hip(None));
    assert_eq!(test_mode("test --hip"), hip(None));
    assert_eq!(test_mode("test hip --track T"), hip(Some("T")));
    assert_eq!(test_mode("test hip --track=T"), hip(Some("T")));
    assert_eq!(test_mode("test --hip --hip-track T"), hip(Some("T")));
    assert_eq!(test_mode("test --hip-track T --hip"), hip(Some("T")));
    assert_eq!(test_mode("test cross-hip"), test::Mode::CrossHip);
    assert_eq!(test_mode("test --winhip"), test::Mode::CrossHip);
    assert_eq!(test_mode("test vulkan"), test::Mode::Vulkan);
    assert_eq!(test_mode("test --vulkan"), test::Mode::Vulkan);
    assert_eq!(test_mode("test cross-vulkan"), test::Mode::CrossVulkan);
    assert_eq!(test_mode("test --winvulkan"), test::Mode::CrossVulkan);
}

#[test]
fn plain_test_still_runs_the_suite_with_its_flags() {
    assert_eq!(test_mode("test"), test::Mode::Suite);
    let Ok(Command::Test(a)) = parse("test --no-dist --fuzz-seconds 5 -- --nocapture") else {
        panic!("test with suite flags did not parse");
    };
    assert_eq!(a.mode(), test::Mode::Suite);
    assert!(a.no_dist && !a.no_fuzz);
    assert_eq!(a.fuzz_seconds, 5);
    assert_eq!(a.cargo_args, ["--nocapture"]);
}

#[test]
fn a_test_mode_with_a_suite_flag_is_a_usage_error() {
    for args in [
        "test hip --no-fuzz",
        "test --no-fuzz hip",
        "test hip -- --nocapture",
        "test cross-hip --no-dist",
        "test cross-hip --track T",
        "test --hip --no-fuzz",
        "test --hip --fuzz-seconds 5",
        "test --winhip --no-dist",
        "test --winhip -- --nocapture",
        "test --hip --winhip",
        "test --hip-track T",
        "test --hip-track T hip",
        "test hip cross-hip",
        "test vulkan --no-fuzz",
        "test cross-vulkan -- --nocapture",
        "test --vulkan --no-dist",
        "test --vulkan --winvulkan",
        "test --vulkan --hip",
        "test vulkan cross-vulkan",
    ] {
        usage_error(args);
    }
}

#[test]
fn setup_fresh_machine_and_its_old_flag_parse_to_the_same_mode() {
    assert_eq!(setup_mode("setup fresh-machine"), setup::Mode::FreshMachine);
    assert_eq!(
        setup_mode("setup --fresh-machine"),
        setup::Mode::FreshMachine
    );
    assert_eq!(setup_mode("setup"), setup::Mode::Needs);
    let Ok(Command::Setup(a)) = parse("setup --for ci --track T --dry-run") else {
        panic!("setup --for ci did not parse");
    };
    assert_eq!(a.mode(), setup::Mode::Needs);
    assert_eq!((a.for_verb.as_str(), a.track.as_deref()), ("ci", Some("T")));
    assert!(a.dry_run);
    for args in [
        "setup fresh-machine --dry-run",
        "setup fresh-machine --for ci",
        "setup --for ci fresh-machine",
        "setup --track T fresh-machine",
        "setup --fresh-machine --dry-run",
        "setup --fresh-machine --for ci",
    ] {
        usage_error(args);
    }
}

#[test]
fn dist_chroot_and_its_old_flag_parse_to_the_same_mode_and_flags() {
    let chroot = |suite: &str| dist::Mode::Chroot {
        suite: suite.into(),
    };
    let new = dist_args("dist chroot sid --track T --gpu-targets gfx1100 --rocm-path /usr");
    let flags_first = dist_args("dist --track T --gpu-targets gfx1100 chroot sid --rocm-path /usr");
    let old = dist_args("dist --chroot sid --track T --gpu-targets gfx1100 --rocm-path /usr");
    for a in [&new, &flags_first, &old] {
        assert_eq!(a.mode().unwrap(), chroot("sid"));
        assert_eq!(a.track.as_deref(), Some("T"));
        assert_eq!(a.gpu_targets.as_deref(), Some("gfx1100"));
        assert_eq!(a.rocm_path.as_deref(), Some(std::path::Path::new("/usr")));
    }
    assert_eq!(dist_args("dist").mode().unwrap(), dist::Mode::Package);
    let plain = dist_args("dist --track T --dry-run");
    assert_eq!(plain.mode().unwrap(), dist::Mode::Package);
    assert_eq!(plain.track.as_deref(), Some("T"));
    assert!(plain.dry_run);
    // Both spellings at once: an error before anything runs.
    assert!(dist_args("dist --chroot sid chroot sid").mode().is_err());
    usage_error("dist chroot");
    usage_error("dist chroot sid experimental");
    usage_error("dist chroot sid --facts f.json");
}

#[test]
fn the_chroot_run_is_the_same_dist_without_its_chroot() {
    let inside = |args: &str| dist::args_inside_chroot(args.split_whitespace().map(String::from));
    let want = ["dist", "--track", "T", "--rocm-path", "/usr"];
    assert_eq!(inside("dist chroot sid --track T --rocm-path /usr"), want);
    assert_eq!(inside("dist --track T chroot sid --rocm-path /usr"), want);
    assert_eq!(inside("dist --track T --rocm-path /usr chroot sid"), want);
    assert_eq!(inside("dist chroot --track T sid --rocm-path /usr"), want);
    assert_eq!(inside("dist --chroot sid --track T --rocm-path /usr"), want);
    assert_eq!(inside("dist --chroot=sid --track T --rocm-path /usr"), want);
    // A flag's value named `chroot` is not the sub-verb.
    assert_eq!(
        inside("dist --track chroot --dry-run chroot sid"),
        ["dist", "--track", "chroot", "--dry-run"]
    );
    assert_eq!(inside("dist --dry-run"), ["dist", "--dry-run"]);
}
