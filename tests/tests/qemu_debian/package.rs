//! The Debian package of `make deb` (scripts/build-deb, dist/debian/) under dpkg and the real
//! systemd of the Debian root: the guest has no isold of its own, only the two packages, the
//! release binaries packaged as 0.1.0-1 and as 0.1.0-2 by `make deb-package`.
//!
//! - install: no kernel value changes (a full snapshot equals the one before) and isold.service
//!   is enabled but has not run (no /etc/isold/isold.toml: ConditionPathExists);
//! - with a configuration naming CPUs 2-3 (`on_stop = "restore"`, where a stop would undo) and
//!   the service running, `dpkg -i` of 0.1.0-2: `timer_migration`, sampled every 50 ms, never
//!   reads its original 1; the service runs the new binary (another pid), and the policy holds;
//! - `dpkg -r` (with `on_stop = "keep"`, where only `isold restore` undoes): every value as
//!   before the install, the configuration kept;
//! - `dpkg -P`: the configuration and isold's state directories gone, no file left that was
//!   not there before the install, and every file of /etc as it was.
//!
//! On the host, lintian on the package: no error.
//!
//! The steps run under busybox sh, whose own `dpkg` applet would shadow Debian's: dpkg is
//! called by its path. Built only with `--features qemu` (see docs/TESTING.md).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use taskisol_tests::qemu::{
    bin_dir, release_binary, run, workspace_root, Expect, Kernel, KernelRole, Scenario, StepOutput,
};

use super::at_least;

/// Packages the release binaries as taskisol `version` into `dir` with `make deb-package`
/// (what `make deb` runs after building) and returns the package's path. The binaries are
/// refused, as the guest's are, when older than their sources.
fn make_deb(dir: &Path, version: &str) -> PathBuf {
    for b in ["isold", "chisol"] {
        release_binary(b).unwrap_or_else(|e| panic!("{e}"));
    }
    let out = Command::new("make")
        .current_dir(workspace_root())
        .args(["-s", "--no-print-directory", "deb-package"])
        .arg(format!("DEB_VERSION={version}"))
        .arg(format!("DEB_DIR={}", dir.display()))
        .arg(format!("RELEASE_DIR={}", bin_dir().display()))
        .output()
        .expect("make (package make) must be installed: scripts/setup-qemu");
    assert!(
        out.status.success(),
        "make deb-package DEB_VERSION={version}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(path.is_file(), "{} is not a file", path.display());
    path
}

/// The package as `make deb` lints it, on the host: Debian's lintian finds no error (its
/// warnings are printed), and it holds the binaries, man pages, unit, OCI hook, example
/// configuration and alert rules where Debian 12 looks for them.
#[test]
fn deb_package_is_lintian_clean_and_complete() {
    let dir = tempfile::tempdir().unwrap();
    let deb = make_deb(dir.path(), "0.1.0-1");
    let started = std::time::Instant::now();
    let out = Command::new("lintian")
        .args(["--fail-on", "error"])
        .arg(&deb)
        .output()
        .expect("lintian must be installed: scripts/setup-qemu (or make deb-lint) installs it");
    let report = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "lintian ({:.1} s):\n{report}",
        started.elapsed().as_secs_f64()
    );
    let errors: Vec<&str> = report.lines().filter(|l| l.starts_with("E: ")).collect();
    assert!(errors.is_empty(), "lintian errors: {errors:#?}");
    assert!(
        out.status.success(),
        "lintian exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );

    let list = Command::new("dpkg-deb")
        .arg("--contents")
        .arg(&deb)
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    let paths: Vec<&str> = list
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .collect();
    for want in [
        "./usr/bin/isold",
        "./usr/bin/chisol",
        "./usr/share/man/man8/isold.8.gz",
        "./usr/share/man/man5/isold.toml.5.gz",
        "./usr/share/man/man1/chisol.1.gz",
        "./lib/systemd/system/isold.service",
        "./usr/share/containers/oci/hooks.d/isold.json",
        "./usr/share/doc/taskisol/examples/isold.toml",
        "./usr/share/taskisol/prometheus/isold-alerts.yml",
        // The unit's sandbox can make an existing directory writable, not create one.
        "./etc/systemd/system.conf.d/",
        // libtaskisol for C programs, as cargo-c lays it out, and its example.
        "./usr/include/taskisol/taskisol.h",
        "./usr/lib/x86_64-linux-gnu/libtaskisol.so.0.1.0",
        "./usr/lib/x86_64-linux-gnu/libtaskisol.so.0",
        "./usr/lib/x86_64-linux-gnu/libtaskisol.so",
        "./usr/lib/x86_64-linux-gnu/libtaskisol.a",
        "./usr/lib/x86_64-linux-gnu/pkgconfig/taskisol.pc",
        "./usr/bin/isol-meter",
        // Completions, where Debian's bash-completion, zsh and fish look for them.
        "./usr/share/bash-completion/completions/isold",
        "./usr/share/zsh/vendor-completions/_isold",
        "./usr/share/fish/vendor_completions.d/isold.fish",
        "./usr/share/bash-completion/completions/chisol",
        "./usr/share/zsh/vendor-completions/_chisol",
        "./usr/share/fish/vendor_completions.d/chisol.fish",
    ] {
        assert!(
            paths.contains(&want),
            "{want} is not in the package: {paths:#?}"
        );
    }
    // A C program builds against the packaged library with pkg-config alone, and runs (on
    // this stock host every call says the interface is missing).
    let root = dir.path().join("root");
    let x = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(&root)
        .status()
        .unwrap();
    assert!(x.success());
    let src = dir.path().join("t.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <taskisol.h>\nint main(void) { printf(\"available=%d\\n\", taskisol_available()); return 0; }\n",
    )
    .unwrap();
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "taskisol"])
        .env(
            "PKG_CONFIG_PATH",
            root.join("usr/lib/x86_64-linux-gnu/pkgconfig"),
        )
        .env("PKG_CONFIG_SYSROOT_DIR", &root)
        .output()
        .expect("pkg-config must be installed");
    assert!(flags.status.success(), "{flags:?}");
    let flags = String::from_utf8_lossy(&flags.stdout).into_owned();
    let exe = dir.path().join("t");
    let cc = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .args(flags.split_whitespace())
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "cc {flags}: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let run = Command::new(&exe)
        .env("LD_LIBRARY_PATH", root.join("usr/lib/x86_64-linux-gnu"))
        .output()
        .unwrap();
    let expected = if Path::new("/proc/self/task_isolation").exists() {
        "available=1\n"
    } else {
        "available=0\n"
    };
    assert_eq!(String::from_utf8_lossy(&run.stdout), expected);

    // No file in /etc: the configuration is the administrator's, never a conffile.
    let etc_files: Vec<&&str> = paths
        .iter()
        .filter(|p| p.starts_with("./etc/") && !p.ends_with('/'))
        .collect();
    assert!(etc_files.is_empty(), "{etc_files:?}");
}

/// Every file of the root but the kernel's, the runtime's, dpkg's (its database and the daily
/// backups of it, made at midnight) and the logs' (which a package's life changes by
/// design), one path a line.
const FILES: &str = "find / -xdev \\( -path /proc -o -path /sys -o -path /dev -o -path /run -o -path /tmp \
    -o -path /var/log -o -path /var/lib/dpkg -o -path /var/backups -o -path /var/cache -o -path /var/lib/systemd/timers \
    -o -path /scenario -o -path /guest -o -path /root -o -path /var/lib/taskisol \\) -prune -o -print | LC_ALL=C sort";

/// The 50 ms sampler of timer_migration (original 1, 0 under the policy): a shell loop with
/// builtins but the sleep, so that a sample costs no fork for the read.
const SAMPLER: &str = "(while [ ! -e /tmp/sampler.stop ]; do read v </proc/sys/kernel/timer_migration; echo \"$v\"; /usr/bin/busybox usleep 50000; done) >/tmp/samples &\n\
     sampler=$!\n";

/// Another isold, as a DaemonSet's would run beside the package (the package's binary copied
/// to /tmp/ds/isold before the removal, keeping its name: `isold status` knows a daemon by it), isolating CPU 3 and restoring at its stop, with
/// its state where the package's is: `$ds` its pid, `ds_running=0` once it runs.
const START_DS: &str = "printf 'isolated_cpus = \"3\"\\non_stop = \"restore\"\\n' >/tmp/ds.toml\n\
     env -u INVOCATION_ID /tmp/ds/isold --config /tmp/ds.toml run >/tmp/ds.log 2>&1 &\n\
     ds=$!\n\
     wait_for 30 /tmp/ds/isold status >/dev/null; echo ds_running=$?\n";

#[test]
fn rt612_deb_install_upgrade_remove_purge() {
    deb_install_upgrade_remove_purge(KernelRole::Rt612);
}

#[test]
fn rt7_deb_install_upgrade_remove_purge() {
    deb_install_upgrade_remove_purge(KernelRole::Rt7);
}

fn deb_install_upgrade_remove_purge(role: KernelRole) {
    let dir = tempfile::tempdir().unwrap();
    let v1 = make_deb(dir.path(), "0.1.0-1");
    let v2 = make_deb(dir.path(), "0.1.0-2");

    let mut s = Scenario::debian(&format!("{}_deb_package", role.as_str()), "");
    s.role = role;
    // Only the packages bring isold and chisol.
    s.binaries.clear();
    s.file("/root/taskisol_1.deb", 0o644, &std::fs::read(&v1).unwrap());
    s.file("/root/taskisol_2.deb", 0o644, &std::fs::read(&v2).unwrap());
    s.step_with_timeout(
        "before",
        &format!(
            "echo isold=$(command -v isold || echo none)\n\
             isold_snapshot /tmp/snap.before; echo snapshot_lines=$(wc -l </tmp/snap.before)\n\
             echo timer_migration=$(cat /proc/sys/kernel/timer_migration)\n\
             {FILES} >/tmp/files.before; echo files=$(wc -l </tmp/files.before)\n\
             etc_snapshot /tmp/etc.before"
        ),
        Duration::from_secs(120),
        vec![
            Expect::field("isold", "none"),
            at_least("snapshot_lines", 100.0),
            Expect::field("timer_migration", "1"),
            at_least("files", 1000.0),
        ],
    );
    s.step_with_timeout(
        "install_changes_nothing",
        "/usr/bin/dpkg -i /root/taskisol_1.deb >/tmp/dpkg.out 2>&1; echo dpkg_rc=$?\ncat /tmp/dpkg.out\n\
         echo isold=$(command -v isold)\necho chisol=$(command -v chisol)\n\
         echo enabled=$(systemctl is-enabled isold)\necho active=$(systemctl is-active isold)\n\
         echo condition=$(systemctl show -p ConditionResult --value isold)\n\
         echo started_at=$(systemctl show -p ExecMainStartTimestampMonotonic --value isold)\n\
         echo unit=$(systemctl show -p FragmentPath --value isold)\n\
         echo exec=$(systemctl show -p ExecStart --value isold | grep -o 'argv\\[\\]=[^;]*' | sed 's/argv\\[\\]=//; s/ *$//')\n\
         [ -d /etc/systemd/system.conf.d ] && echo confd=dir\n\
         echo runtime=$(ls -d /run/isold /var/lib/isold 2>/dev/null | wc -l)\n\
         echo man=$(man -w isold 2>/dev/null || ls /usr/share/man/man8/isold.8.gz)\n\
         isold_snapshot /tmp/snap.installed\nsnapshot_diff /tmp/snap.before /tmp/snap.installed",
        Duration::from_secs(180),
        vec![
            Expect::field("dpkg_rc", "0"),
            Expect::field("isold", "/usr/bin/isold"),
            Expect::field("chisol", "/usr/bin/chisol"),
            // Enabled as Debian enables a service: it starts at boot once the file exists.
            Expect::field("enabled", "enabled"),
            Expect::field("active", "inactive"),
            Expect::field("condition", "no"),
            Expect::field("started_at", "0"),
            Expect::field("unit", "/lib/systemd/system/isold.service"),
            Expect::field("exec", "/usr/bin/isold --config /etc/isold/isold.toml run"),
            Expect::field("confd", "dir"),
            Expect::field("runtime", "0"),
            Expect::field("man", "/usr/share/man/man8/isold.8.gz"),
            Expect::field("differences", "0"),
        ],
    );
    if role == KernelRole::Rt612 {
        readme_own_host(&mut s);
    }
    s.step_with_timeout(
        "configured_and_started",
        "printf 'isolated_cpus = \"2-3\"\\non_stop = \"restore\"\\n' >/etc/isold/isold.toml\n\
         systemctl start isold; echo start_rc=$?\n\
         echo active=$(systemctl is-active isold)\n\
         echo timer_migration=$(cat /proc/sys/kernel/timer_migration)\n\
         echo irq4=$(cat /proc/irq/4/smp_affinity_list)",
        Duration::from_secs(120),
        vec![
            Expect::field("start_rc", "0"),
            Expect::field("active", "active"),
            Expect::field("timer_migration", "0"),
            Expect::field("irq4", "0-1"),
        ],
    );
    s.step_with_timeout(
        "upgrade_keeps_the_policy_in_force",
        &format!(
            "old=$(systemctl show -p MainPID --value isold)\n\
             {SAMPLER}sleep 1\n\
             /usr/bin/dpkg -i /root/taskisol_2.deb >/tmp/dpkg.out 2>&1; echo dpkg_rc=$?\ncat /tmp/dpkg.out\n\
             sleep 1; touch /tmp/sampler.stop; wait $sampler\n\
             echo samples=$(wc -l </tmp/samples)\n\
             echo original_read=$(grep -c '^1$' /tmp/samples)\n\
             echo other_read=$(grep -v -c '^0$' /tmp/samples)\n\
             new=$(systemctl show -p MainPID --value isold)\n\
             echo restarted=$([ \"$new\" != \"$old\" ] && [ \"$new\" != 0 ] && echo yes || echo no)\n\
             echo active=$(systemctl is-active isold)\n\
             echo version=$(dpkg-query -W -f '${{Version}}' taskisol)\n\
             isold verify >/tmp/verify.out 2>&1; echo verify_rc=$?\nhead -n 5 /tmp/verify.out"
        ),
        Duration::from_secs(180),
        vec![
            Expect::field("dpkg_rc", "0"),
            at_least("samples", 40.0),
            Expect::field("original_read", "0"),
            Expect::field("other_read", "0"),
            Expect::field("restarted", "yes"),
            Expect::field("active", "active"),
            Expect::field("version", "0.1.0-2"),
            Expect::field("verify_rc", "0"),
        ],
    );
    // A configuration the new isold refuses: the upgrade installs, says so, and the running
    // isold keeps running with the policy in force.
    s.step_with_timeout(
        "upgrade_with_a_bad_configuration_keeps_the_running_isold",
        "old=$(systemctl show -p MainPID --value isold)\n\
         cp /etc/isold/isold.toml /tmp/good.toml\n\
         printf 'isolated_cpus = \"2-3\"\\nbogus = 1\\n' >/etc/isold/isold.toml\n\
         /usr/bin/dpkg -i /root/taskisol_2.deb >/tmp/dpkg.out 2>&1; echo dpkg_rc=$?\ncat /tmp/dpkg.out\n\
         echo said=$(grep -c 'the running isold keeps running' /tmp/dpkg.out)\n\
         echo named=$(grep -c \"unknown key 'bogus'\" /tmp/dpkg.out)\n\
         new=$(systemctl show -p MainPID --value isold)\n\
         echo same_pid=$([ \"$new\" = \"$old\" ] && echo yes || echo no)\n\
         echo active=$(systemctl is-active isold)\n\
         echo timer_migration=$(cat /proc/sys/kernel/timer_migration)\n\
         cp /tmp/good.toml /etc/isold/isold.toml",
        Duration::from_secs(180),
        vec![
            Expect::field("dpkg_rc", "0"),
            Expect::field("said", "1"),
            Expect::field("named", "1"),
            Expect::field("same_pid", "yes"),
            Expect::field("active", "active"),
            Expect::field("timer_migration", "0"),
        ],
    );
    // Another isold (as a DaemonSet's would) holds the node while the package is removed:
    // the prerm's restore is refused, the removal fails, and the aborted removal starts
    // nothing (the service stays stopped).
    s.step_with_timeout(
        "an_aborted_removal_starts_nothing",
        &format!(
            "mkdir -p /tmp/ds && cp /usr/bin/isold /tmp/ds/isold\n\
             systemctl stop isold\n\
             {START_DS}\
             /usr/bin/dpkg -r taskisol >/tmp/dpkg.out 2>&1; echo dpkg_rc=$?\ncat /tmp/dpkg.out\n\
             echo status=$(dpkg-query -W -f '${{db:Status-Status}}' taskisol)\n\
             echo active=$(systemctl is-active isold)\n\
             echo said=$(grep -c 'isold.service stays stopped' /tmp/dpkg.out)\n\
             kill $ds; wait $ds; echo ds_rc=$?\n\
             systemctl start isold; echo start_rc=$?"
        ),
        Duration::from_secs(180),
        vec![
            Expect::field("ds_running", "0"),
            Expect::that(
                "the removal fails",
                |o: &taskisol_tests::qemu::StepOutput| match o.field("dpkg_rc") {
                    Some("0") | None => Err(format!("{:?}", o.field("dpkg_rc"))),
                    Some(_) => Ok(()),
                },
            ),
            Expect::field("status", "installed"),
            Expect::field("active", "inactive"),
            Expect::field("said", "1"),
            Expect::field("ds_rc", "0"),
            Expect::field("start_rc", "0"),
        ],
    );
    s.step_with_timeout(
        "remove_restores_every_value_and_keeps_the_configuration",
        // The default on_stop = "keep": the service's stop leaves every value, and only the
        // prerm's `isold restore` can give them back.
        "printf 'isolated_cpus = \"2-3\"\\non_stop = \"keep\"\\n' >/etc/isold/isold.toml\n\
         systemctl reload isold\n\
         wait_for 30 sh -c \"isold status | grep -q 'reloads: 1'\" || echo reloaded=no\n\
         systemctl stop isold\n\
         sed -i '/^  \\]/,$d' /run/isold/state.json\n\
         isold restore --json >/dev/null 2>&1; echo unreadable_rc=$?\n\
         /usr/bin/dpkg -r taskisol >/tmp/dpkg.out 2>&1; echo dpkg_rc=$?\ncat /tmp/dpkg.out\n\
         echo salvaged=$(grep -c 'original(s) salvaged from it and restored below, 0 lost' /tmp/dpkg.out)\n\
         echo aside=$(ls /run/isold/state.json.corrupt)\n\
         hash -r\n\
         echo binary=$(command -v isold || echo none)\n\
         echo status=$(dpkg-query -W -f '${db:Status-Status}' taskisol)\n\
         echo active=$(systemctl is-active isold)\n\
         echo config=$(cat /etc/isold/isold.toml | head -n 1)\n\
         echo timer_migration=$(cat /proc/sys/kernel/timer_migration)\n\
         isold_snapshot /tmp/snap.removed\nsnapshot_diff /tmp/snap.before /tmp/snap.removed",
        Duration::from_secs(180),
        vec![
            Expect::output_lacks("reloaded=no"),
            // A state file that is not one: exit 6, as for every command (isold(8)).
            Expect::field("unreadable_rc", "6"),
            Expect::field("dpkg_rc", "0"),
            Expect::field("salvaged", "1"),
            Expect::field("aside", "/run/isold/state.json.corrupt"),
            Expect::field("binary", "none"),
            Expect::field("status", "config-files"),
            Expect::field("active", "inactive"),
            Expect::field("config", "isolated_cpus = \"2-3\""),
            Expect::field("timer_migration", "1"),
            Expect::field("differences", "0"),
        ],
    );
    s.step_with_timeout(
        "purge_leaves_nothing",
        &format!(
            "{START_DS}\
             /usr/bin/dpkg -P taskisol >/tmp/dpkg.out 2>&1; echo dpkg_rc=$?\ncat /tmp/dpkg.out\n\
             echo held_left=$(ls -d /run/isold 2>/dev/null | wc -l)\n\
             echo etc_left=$(ls -d /etc/isold 2>/dev/null | wc -l)\n\
             echo said=$(grep -c 'another isold runs and holds /run/isold' /tmp/dpkg.out)\n\
             kill $ds; wait $ds; echo ds_rc=$?\n\
             rm -rf /run/isold /var/lib/isold\n\
             echo known=$(dpkg-query -W taskisol >/dev/null 2>&1 && echo yes || echo no)\n\
             echo left=$(ls -d /etc/isold /var/lib/isold /run/isold 2>/dev/null | wc -l)\n\
             {FILES} >/tmp/files.after\n\
             LC_ALL=C comm -13 /tmp/files.before /tmp/files.after | sed 's/^/added since the install /'\n\
             LC_ALL=C comm -23 /tmp/files.before /tmp/files.after | sed 's/^/missing since the install /'\n\
             echo new=$(LC_ALL=C comm -13 /tmp/files.before /tmp/files.after | wc -l)\n\
             echo gone=$(LC_ALL=C comm -23 /tmp/files.before /tmp/files.after | wc -l)\n\
             etc_snapshot /tmp/etc.after; diff /tmp/etc.before /tmp/etc.after\n\
             echo etc_changes=$(diff -u /tmp/etc.before /tmp/etc.after | grep -v -e '^--- ' -e '^+++ ' | grep -c '^[-+]')\n\
             isold_snapshot /tmp/snap.purged\nsnapshot_diff /tmp/snap.before /tmp/snap.purged"
        ),
        Duration::from_secs(180),
        vec![
            Expect::field("ds_running", "0"),
            Expect::field("dpkg_rc", "0"),
            Expect::field("held_left", "1"),
            Expect::field("etc_left", "0"),
            Expect::field("said", "1"),
            Expect::field("ds_rc", "0"),
            Expect::field("known", "no"),
            Expect::field("left", "0"),
            Expect::field("new", "0"),
            Expect::field("gone", "0"),
            // Every file of /etc as it was: irqbalance's defaults and the kvm options isold
            // wrote were put back by the removal.
            Expect::field("etc_changes", "0"),
            Expect::field("differences", "0"),
        ],
    );
    let o = run(&s).unwrap_or_else(|e| panic!("{e}"));
    if let Some(out) = o.outputs.get("upgrade_keeps_the_policy_in_force") {
        eprintln!(
            "upgrade: {} samples of timer_migration, {} reading the original",
            out.field("samples").unwrap_or("?"),
            out.field("original_read").unwrap_or("?")
        );
    }
    o.assert_ok();
}

/// The README's "On your own host", in order: each block of commands with the lines it says
/// they print (`text` blocks; `...` in a line: whatever the machine has there), as written.
/// The package's build (`make deb`) is the host's; the guest has the package installed.
fn readme_blocks() -> Vec<(Vec<String>, Vec<String>)> {
    let text = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let section = text
        .split("\n## On your own host\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README has an \"On your own host\" section");
    let mut blocks: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    let mut fence: Option<&str> = None;
    for l in section.lines() {
        match (fence, l) {
            (None, "```sh") => {
                fence = Some("sh");
                blocks.push((Vec::new(), Vec::new()));
            }
            (None, "```text") => fence = Some("text"),
            (Some(_), "```") => fence = None,
            (Some("sh"), cmd) if !cmd.trim().is_empty() && !cmd.starts_with("make ") => {
                blocks.last_mut().unwrap().0.push(cmd.to_string())
            }
            (Some("text"), shown) => blocks
                .last_mut()
                .expect("a text block follows commands")
                .1
                .push(shown.to_string()),
            _ => {}
        }
    }
    blocks.retain(|(cmds, _)| !cmds.is_empty());
    blocks
}

/// A line as the README shows it and as the guest printed it, its numbers aside (pids,
/// counts and ages differ from machine to machine).
fn without_numbers(l: &str) -> String {
    let mut out = String::new();
    for c in l.trim_end().chars() {
        if c.is_ascii_digit() {
            if !out.ends_with('#') {
                out.push('#');
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Walks the README's "On your own host" on the freshly installed package: every command as
/// written, in order (the guest's shell is root's), each printing what the README shows
/// (numbers aside, `...` for the rest of a line, in order); `isold verify` exits 0 after `isold apply`, and after `isold
/// restore` every kernel value and every file of /etc is as before the walk.
fn readme_own_host(s: &mut Scenario) {
    let blocks = readme_blocks();
    assert!(
        blocks
            .iter()
            .flat_map(|(c, _)| c)
            .any(|c| c == "isold restore"),
        "{blocks:?}"
    );
    let mut script = String::from("etc_snapshot /tmp/etc.readme\n");
    for (i, (cmds, _)) in blocks.iter().enumerate() {
        for (j, cmd) in cmds.iter().enumerate() {
            script.push_str(&format!(
                "{{ {cmd}\n}} >/tmp/readme.out 2>&1; echo readme_rc_{i}_{j}=$?\nsed 's/^/readme {i}: /' /tmp/readme.out\n"
            ));
        }
    }
    script.push_str(
        "isold_snapshot /tmp/snap.readme\nsnapshot_diff /tmp/snap.before /tmp/snap.readme\n\
         etc_snapshot /tmp/etc.readme_after; diff /tmp/etc.readme /tmp/etc.readme_after\n\
         echo etc_changes=$(diff -u /tmp/etc.readme /tmp/etc.readme_after | grep -v -e '^--- ' -e '^+++ ' | grep -c '^[-+]')\n",
    );
    let verify = blocks
        .iter()
        .enumerate()
        .flat_map(|(i, (c, _))| c.iter().enumerate().map(move |(j, c)| (i, j, c)))
        .find(|(_, _, c)| c.as_str() == "isold verify")
        .map(|(i, j, _)| format!("readme_rc_{i}_{j}"))
        .expect("the README runs isold verify");
    let shown: Vec<(usize, Vec<String>)> = blocks
        .iter()
        .enumerate()
        .map(|(i, (_, lines))| (i, lines.clone()))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    s.step_with_timeout(
        "readme_own_host",
        &script,
        Duration::from_secs(300),
        vec![
            Expect::field(&verify, "0"),
            Expect::that(
                "each command prints what the README shows",
                move |o: &StepOutput| {
                    for (i, lines) in &shown {
                        let prefix = format!("readme {i}: ");
                        let printed: Vec<String> = o
                            .stdout
                            .lines()
                            .filter_map(|l| l.strip_prefix(&prefix))
                            .map(without_numbers)
                            .collect();
                        let mut at = 0;
                        for want in lines {
                            // "..." in a line stands for whatever the machine has there.
                            let w = without_numbers(want);
                            let (head, tail) = w.split_once("...").unwrap_or((&w, ""));
                            let whole = !w.contains("...");
                            let fits = |p: &String| {
                                if whole {
                                    *p == w
                                } else {
                                    p.starts_with(head)
                                        && p.ends_with(tail)
                                        && p.len() >= head.len() + tail.len()
                                }
                            };
                            match printed[at..].iter().position(fits) {
                                Some(k) => at += k + 1,
                                None => {
                                    return Err(format!(
                                        "block {i}: {want:?} not printed (in order); printed:\n{}",
                                        printed.join("\n")
                                    ))
                                }
                            }
                        }
                    }
                    Ok(())
                },
            ),
            Expect::field("differences", "0"),
            Expect::field("etc_changes", "0"),
        ],
    );
}

/// The project's kernel as a Debian package (`scripts/build-kernel deb --config
/// kernel/config/guest.config`, unpacked by scripts/setup-qemu): the suite's Debian root boots
/// that kernel under systemd, `dpkg -i` installs its package there (the image the guest runs,
/// byte for byte, and a module tree `modprobe` loads from), the interface answers, and
/// `dpkg -r` removes every file the package brought.
#[test]
fn isol61_kernel_package_installs_boots_and_removes() {
    let kernel = Kernel::locate(KernelRole::Isol61Deb).unwrap_or_else(|e| panic!("{e}"));
    let pkg_dir = kernel
        .moddir
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .unwrap()
        .to_path_buf();
    let deb = PathBuf::from(
        std::fs::read_to_string(pkg_dir.join(".deb"))
            .unwrap_or_else(|e| panic!("{}/.deb: {e} (scripts/setup-qemu)", pkg_dir.display()))
            .trim(),
    );
    let name = Command::new("dpkg-deb")
        .args(["-f"])
        .arg(&deb)
        .arg("Package")
        .output()
        .unwrap();
    let name = String::from_utf8_lossy(&name.stdout).trim().to_string();
    let release = kernel.release.clone();
    assert_eq!(name, format!("linux-image-{release}"));
    let image_sha = {
        let out = Command::new("sha256sum")
            .arg(&kernel.vmlinuz)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };

    let mut s = Scenario::debian("isol61deb_kernel_package", "");
    s.role = KernelRole::Isol61Deb;
    s.binaries = vec!["chisol".into()];
    s.file(
        "/root/linux-image-isol.deb",
        0o644,
        &std::fs::read(&deb).unwrap(),
    );
    s.step_with_timeout(
        "booted_under_systemd_on_the_packaged_kernel",
        "echo release=$(uname -r)\n\
         echo pid1=$(cat /proc/1/comm)\n\
         echo system=$(systemctl is-system-running --wait)\n\
         systemctl --failed --no-legend --plain | sed 's/^/failed unit: /'\n\
         [ -e /proc/self/task_isolation ] && echo interface=yes || echo interface=no\n\
         echo info=$(chisol -i)\n\
         [ -e /lib/modules/$(uname -r) ] && echo modules_before=present || echo modules_before=absent",
        Duration::from_secs(120),
        vec![
            Expect::field("release", &release),
            Expect::field("pid1", "systemd"),
            Expect::that("systemd is up (running or degraded)", |o: &StepOutput| {
                match o.field("system") {
                    Some("running" | "degraded") => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }),
            Expect::field("interface", "yes"),
            Expect::field("info", "quiesce: vmstat_sync"),
            Expect::field("modules_before", "absent"),
        ],
    );
    s.step_with_timeout(
        "dpkg_installs_the_kernel_package",
        &format!(
            "/usr/bin/dpkg -i /root/linux-image-isol.deb >/tmp/dpkg.log 2>&1; echo rc=$?\n\
             echo status=$(/usr/bin/dpkg-query -W -f '${{Status}}' {name})\n\
             echo image_sha=$(sha256sum /boot/vmlinuz-{release} | cut -d' ' -f1)\n\
             /usr/bin/dpkg -L {name} >/tmp/pkg.files\n\
             echo modules_files=$(grep -c '\\.ko$' /tmp/pkg.files)\n\
             m=; for c in binfmt_misc veth tun virtio_net; do grep -q \"/$c\\.ko$\" /tmp/pkg.files && m=$c && break; done\n\
             echo module=$m\n\
             /usr/sbin/modprobe $m; echo modprobe_rc=$?\n\
             grep -q \"^$m \" /proc/modules && echo loaded=yes || echo loaded=no\n\
             /usr/sbin/modprobe -r $m; echo unload_rc=$?\n\
             tail -5 /tmp/dpkg.log"
        ),
        Duration::from_secs(180),
        vec![
            Expect::field("rc", "0"),
            Expect::field("status", "install ok installed"),
            // The image the guest booted is the one the package installed.
            Expect::field("image_sha", &image_sha),
            at_least("modules_files", 1.0),
            Expect::field("modprobe_rc", "0"),
            Expect::field("loaded", "yes"),
            Expect::field("unload_rc", "0"),
        ],
    );
    s.step_with_timeout(
        "dpkg_removes_every_file_it_brought",
        &format!(
            "/usr/bin/dpkg -r {name} >/tmp/dpkg-r.log 2>&1; echo rc=$?\n\
             echo status=$(/usr/bin/dpkg-query -W -f '${{Status}}' {name} 2>/dev/null)\n\
             left=0; while read -r f; do [ -f \"$f\" ] && left=$((left+1)) && echo \"left: $f\"; done </tmp/pkg.files\n\
             echo files_left=$left\n\
             [ -e /boot/vmlinuz-{release} ] && echo image=present || echo image=absent\n\
             tail -5 /tmp/dpkg-r.log"
        ),
        Duration::from_secs(120),
        vec![
            Expect::field("rc", "0"),
            Expect::that("not installed", |o: &StepOutput| match o.field("status") {
                Some(s) if !s.contains("install ok installed") => Ok(()),
                other => Err(format!("{other:?}")),
            }),
            Expect::field("files_left", "0"),
            Expect::field("image", "absent"),
        ],
    );
    let out = run(&s).unwrap_or_else(|e| panic!("{e}"));
    out.assert_ok();
}
