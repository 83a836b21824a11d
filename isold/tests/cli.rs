//! isold's command line: the refusals a user meets before anything is read or written.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

mod common;
use common::{copy_dir, isold_unprivileged};

/// A bare `isold` lists the commands as --help does (one definition), as an error: exit 2.
#[test]
fn no_command_prints_the_help_and_exits_2() {
    let (rc, out, err) = isold_unprivileged(&[]);
    assert_eq!(rc, 2);
    assert_eq!(out, "");
    let (rc, help, _) = isold_unprivileged(&["--help"]);
    assert_eq!(rc, 0);
    assert_eq!(err, help);
    for cmd in [
        "apply",
        "verify",
        "plan",
        "restore",
        "check",
        "audit",
        "noise",
        "bootargs",
        "run",
        "status",
        "hook",
        "claims",
        "items",
        "completions",
    ] {
        assert!(err.contains(&format!("\n  {cmd} ")), "{cmd} in\n{err}");
    }
    let (rc, _, err) = isold_unprivileged(&["frobnicate"]);
    assert_eq!(rc, 2);
    assert!(
        err.starts_with("isold: unrecognized subcommand 'frobnicate'\n"),
        "{err}"
    );
}

/// On the running system apply and restore write kernel files and other tasks' affinity: a
/// user without root gets one line, before any file is read.
#[test]
fn apply_and_restore_on_the_host_need_root() {
    for cmd in ["apply", "restore"] {
        let (rc, out, err) = isold_unprivileged(&[cmd]);
        assert_eq!(rc, 1, "{cmd}: {out}{err}");
        assert_eq!(
            err,
            format!("isold: {cmd} needs root privileges: it writes /proc/sys, /sys, /proc/irq and other tasks' CPU affinity\n")
        );
    }
}

/// Reading needs no privilege, and neither does a fake root (`--root`).
#[test]
fn check_of_a_captured_tree_needs_no_root() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    std::fs::set_permissions(r, std::fs::Permissions::from_mode(0o755)).unwrap();
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/debian-6.12-rt-isold"),
        r,
    );
    std::fs::create_dir_all(r.join("etc/isold")).unwrap();
    std::fs::write(r.join("etc/isold/isold.toml"), "isolated_cpus = \"2-3\"\n").unwrap();
    let (rc, out, err) = isold_unprivileged(&["--root", r.to_str().unwrap(), "check"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        out.contains("isolated CPUs 2-3, housekeeping CPUs 0-1"),
        "{out}"
    );
}

/// `bootargs --write-grub` writes /etc/default/grub.d: on the running system it needs root and
/// says so before writing; below a tree the user may write, it does not.
#[test]
fn write_grub_needs_root_on_the_host_only() {
    let (rc, out, err) = isold_unprivileged(&["bootargs", "--cpus", "1", "--write-grub"]);
    assert_eq!((rc, out.as_str()), (1, ""), "{err}");
    assert_eq!(
        err,
        "isold: bootargs --write-grub needs root privileges: it writes /etc/default/grub.d/isold.cfg\n"
    );
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/debian-6.12-rt-isold"),
        r,
    );
    std::fs::create_dir_all(r.join("etc")).unwrap();
    for d in [r.to_path_buf(), r.join("etc")] {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let (rc, out, err) = isold_unprivileged(&[
        "--root",
        r.to_str().unwrap(),
        "bootargs",
        "--cpus",
        "2-3",
        "--write-grub",
    ]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(r.join("etc/default/grub.d/isold.cfg").exists());
}

/// `isold status` tells "cannot tell" from "not running": a status file it may not read
/// (isold.service's directory is root's only) is exit 4 with the reason, never "not running".
#[test]
fn status_tells_permission_denied_from_not_running() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    std::fs::set_permissions(r, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = r.join("run/isold");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(r.join("run"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = r.to_str().unwrap();
    let (rc, out, _) = isold_unprivileged(&["--root", root, "status"]);
    assert_eq!(rc, 3, "{out}");
    assert!(out.starts_with("isold run is not running (no "), "{out}");
    std::fs::write(dir.join("status.json"), "{\"pid\": 1}").unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o000)).unwrap();
    let (rc, out, err) = isold_unprivileged(&["--root", root, "status"]);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!((rc, out.as_str()), (4, ""), "{err}");
    assert_eq!(
        err,
        format!(
            "isold: cannot read {}: Permission denied (run isold status as root)\n",
            dir.join("status.json").display()
        )
    );
    let (rc, out, _) = isold_unprivileged(&["--root", root, "status", "--json"]);
    assert_eq!(rc, 4);
    assert!(out.contains("\"running\":null"), "{out}");
    // Not a status file: cannot be told either.
    std::fs::write(dir.join("status.json"), "{").unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (rc, _, err) = isold_unprivileged(&["--root", root, "status"]);
    assert_eq!(rc, 4, "{err}");
    assert!(err.contains("not an isold status file"), "{err}");
}

/// `isold items`: every item in the order of apply, with its value in each preset, without a
/// configuration or privileges; `--man-page` refuses a template without the mark.
#[test]
fn items_lists_every_item_and_its_preset_values() {
    let (rc, out, err) = isold_unprivileged(&["--config", "/nonexistent.toml", "items"]);
    assert_eq!((rc, err.as_str()), (0, ""));
    let names: Vec<&str> = out
        .lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_once(':').map(|(n, _)| n))
        .collect();
    let all: Vec<&str> = libtaskisol::policy::items::ALL
        .iter()
        .map(|i| i.name)
        .collect();
    assert_eq!(names, all);
    assert!(
        out.contains("ksm: KSM run: 0 stop, 1 run, 2 stop and unmerge\n  realtime-virtual-host 2, realtime-virtual-guest off, realtime off, cpu-partitioning 2\n"),
        "{out}"
    );
    assert!(out.contains("\n  realtime-virtual-host 12 rows,"), "{out}");
    assert!(out.contains("cgroup_partition: a cgroup v2 isolated partition of the isolated CPUs\n  realtime-virtual-host off,"), "{out}");
    let (rc, _, err) = isold_unprivileged(&["items", "--man-page", "/etc/hostname"]);
    assert_eq!(rc, 1);
    assert!(
        err.contains("/etc/hostname: no line .\\\" @ITEMS@"),
        "{err}"
    );
}

/// `isold items --json`: every item in apply's order, its value in each preset as the text
/// prints it.
#[test]
fn items_as_json_list_every_item_with_each_presets_value() {
    let (rc, out, _) = isold_unprivileged(&["items", "--json"]);
    assert_eq!(rc, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    let all: Vec<&str> = libtaskisol::policy::items::ALL
        .iter()
        .map(|i| i.name)
        .collect();
    assert_eq!(names, all);
    let (_, text, _) = isold_unprivileged(&["items"]);
    for item in v.as_array().unwrap() {
        let shown: Vec<String> = item["presets"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(p, val)| format!("{p} {}", val.as_str().unwrap()))
            .collect();
        assert_eq!(shown.len(), 4, "{item}");
        for s in shown {
            assert!(text.contains(&s), "{s} in the text:\n{text}");
        }
    }
    assert_eq!(v[0]["presets"]["realtime-virtual-host"], "12 rows");
}
