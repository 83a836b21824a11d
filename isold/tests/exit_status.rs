//! The exit codes of isold(8)'s EXIT STATUS tables, command by command, are what the commands
//! return: each documented code is produced here, and no other.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::CommandFactory;

mod common;
use common::copy_dir;

/// A copy of the captured 6.12-rt tree with a configuration next to it.
struct Tree {
    dir: tempfile::TempDir,
    root: PathBuf,
    config: PathBuf,
}

fn tree(config: &str) -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/debian-6.12-rt-isold"),
        &root,
    );
    let config_path = dir.path().join("isold.toml");
    std::fs::write(&config_path, config).unwrap();
    Tree {
        dir,
        root,
        config: config_path,
    }
}

impl Tree {
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_isold"));
        c.arg("--root")
            .arg(&self.root)
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .env_remove("INVOCATION_ID");
        c
    }

    /// `isold ARGS` below the tree with `stdin`: (exit code, what it said).
    fn isold_in(&self, args: &[&str], stdin: &str) -> (i32, String) {
        let mut c = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        let out = c.wait_with_output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code().unwrap_or(-1), said)
    }

    fn isold(&self, args: &[&str]) -> (i32, String) {
        self.isold_in(args, "")
    }

    fn path(&self, p: &str) -> PathBuf {
        self.root.join(p.trim_start_matches('/'))
    }

    fn write(&self, p: &str, v: &str) {
        let p = self.path(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, v).unwrap();
    }
}

/// `isold run` below the tree, killed if the test fails before it is stopped.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(t: &Tree) -> Daemon {
    let d = Daemon(
        t.command(&["run", "--interval", "0.1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    while t.isold(&["status"]).0 != 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "isold run started");
        std::thread::sleep(Duration::from_millis(20));
    }
    d
}

/// isold(8)'s EXIT STATUS: each command's codes, from its `.SS` table.
fn documented() -> BTreeMap<String, BTreeSet<i32>> {
    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../man/isold.8")).unwrap();
    let section = page
        .split("\n.SH EXIT STATUS\n")
        .nth(1)
        .and_then(|s| s.split("\n.SH ").next())
        .expect("EXIT STATUS");
    let mut out = BTreeMap::new();
    for table in section.split("\n.SS ").skip(1) {
        let mut lines = table.lines();
        let cmd = lines.next().unwrap().to_string();
        let mut codes = BTreeSet::new();
        let mut prev = "";
        for l in lines {
            if prev == ".TP" {
                let code = l.strip_prefix(".B ").and_then(|c| c.parse().ok());
                codes.insert(code.unwrap_or_else(|| panic!("{cmd}: {l:?} is not .B CODE")));
            }
            prev = l;
        }
        assert!(out.insert(cmd.clone(), codes).is_none(), "{cmd} twice");
    }
    out
}

const CONFIG: &str = "isolated_cpus = \"2-3\"\n";
const INVALID: &str = "isolated_cpus = \"2-3\"\nisolated = 1\n";

/// Each command's codes as it returns them, each from a case a user meets.
///
/// Long because it is one table of cases, command by command.
#[test]
fn every_documented_exit_code_is_what_the_command_returns() {
    let mut seen: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    let mut expect = |cmd: &str, code: i32, case: &str, (rc, said): (i32, String)| {
        assert_eq!(rc, code, "isold {cmd}, {case}: {said}");
        seen.entry(cmd.to_string()).or_default().insert(code);
    };
    let t = tree(CONFIG);
    let bad = tree(INVALID);
    let cli: BTreeSet<String> = isold::cli::Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .filter(|n| n != "help")
        .collect();
    for cmd in &cli {
        // A malformed command line, for every command alike.
        expect(
            cmd,
            2,
            "an unknown option",
            t.isold(&[cmd, "--no-such-option"]),
        );
    }
    for cmd in ["apply", "verify", "plan", "check", "run"] {
        expect(cmd, 6, "an invalid configuration", bad.isold(&[cmd]));
    }
    // A configuration that reads but does not resolve on this machine: no housekeeping CPU.
    let every = tree("isolated_cpus = \"0-3\"\n");
    for cmd in ["apply", "check"] {
        expect(cmd, 6, "every CPU isolated", every.isold(&[cmd]));
    }
    expect("audit", 6, "every CPU isolated", every.isold(&["audit"]));
    // audit, noise and bootargs read the configuration for their CPUs.
    expect(
        "audit",
        6,
        "an invalid configuration",
        bad.isold(&["audit"]),
    );
    expect(
        "noise",
        6,
        "an invalid configuration",
        bad.isold(&["noise", "--duration", "1"]),
    );
    expect(
        "bootargs",
        6,
        "an invalid configuration",
        bad.isold(&["bootargs"]),
    );

    // The apply cycle.
    expect("verify", 1, "before apply", t.isold(&["verify"]));
    expect("plan", 0, "before apply", t.isold(&["plan"]));
    expect("check", 0, "a valid configuration", t.isold(&["check"]));
    expect("apply", 0, "the fake root", t.isold(&["apply"]));
    expect("verify", 0, "after apply", t.isold(&["verify"]));
    expect("restore", 0, "after apply", t.isold(&["restore"]));
    expect("apply", 1, "no root privileges", unprivileged(&["apply"]));
    expect(
        "restore",
        1,
        "no root privileges",
        unprivileged(&["restore"]),
    );

    // A target that cannot be read: the file of a sysctl is a directory.
    let broken = tree(CONFIG);
    std::fs::remove_file(broken.path("/proc/sys/vm/stat_interval")).unwrap();
    std::fs::create_dir(broken.path("/proc/sys/vm/stat_interval")).unwrap();
    expect("plan", 1, "a target unreadable", broken.isold(&["plan"]));
    expect(
        "verify",
        1,
        "a target unreadable",
        broken.isold(&["verify"]),
    );
    // The kernel's online CPUs cannot be read.
    let no_cpus = tree(CONFIG);
    std::fs::remove_file(no_cpus.path("/sys/devices/system/cpu/online")).unwrap();
    expect("check", 1, "no online CPUs file", no_cpus.isold(&["check"]));
    expect("audit", 1, "no online CPUs file", no_cpus.isold(&["audit"]));

    // A state file that is not one.
    let corrupt = tree(CONFIG);
    corrupt.write("/run/isold/state.json", "{\"version\": ");
    for cmd in ["apply", "verify", "plan", "restore"] {
        expect(cmd, 6, "a corrupt state file", corrupt.isold(&[cmd]));
    }
    expect(
        "audit",
        6,
        "a corrupt state file",
        corrupt.isold(&["audit", "--duration", "0"]),
    );

    expect(
        "audit",
        0,
        "no window",
        t.isold(&["audit", "--duration", "0"]),
    );
    expect(
        "audit",
        1,
        "an offline CPU",
        t.isold(&["audit", "--cpus", "9", "--duration", "0"]),
    );
    expect(
        "audit",
        2,
        "a malformed list",
        t.isold(&["audit", "--cpus", "x"]),
    );
    expect(
        "audit",
        2,
        "a window too long",
        t.isold(&["audit", "--duration", "4000"]),
    );

    // bootargs: the fake root's kernel lacks arguments; give it every one.
    expect("bootargs", 1, "arguments missing", t.isold(&["bootargs"]));
    let (_, json) = t.isold(&["bootargs", "--json"]);
    let args: serde_json::Value = serde_json::from_str(&json).unwrap();
    let mut line = std::fs::read_to_string(t.path("/proc/cmdline")).unwrap();
    for a in args["args"].as_array().unwrap() {
        line = format!("{} {}", line.trim_end(), a["arg"].as_str().unwrap());
    }
    t.write("/proc/cmdline", &format!("{line}\n"));
    expect(
        "bootargs",
        0,
        "every argument there",
        t.isold(&["bootargs"]),
    );
    expect(
        "bootargs",
        2,
        "a malformed list",
        t.isold(&["bootargs", "--cpus", "x"]),
    );

    // noise without a daemon, and a recording where there is no tracefs.
    expect("noise", 3, "no daemon", t.isold(&["noise"]));
    expect(
        "noise",
        1,
        "no tracefs",
        t.isold(&["noise", "--duration", "1"]),
    );
    expect(
        "noise",
        2,
        "a window out of range",
        t.isold(&["noise", "--duration", "0"]),
    );
    expect(
        "noise",
        2,
        "a malformed --since",
        t.isold(&["noise", "--since", "soon"]),
    );
    t.write("/run/isold/noise.json", "not json");
    expect("noise", 4, "a ledger that is not one", t.isold(&["noise"]));
    std::fs::remove_file(t.path("/run/isold/noise.json")).unwrap();

    // status, claims and hook without a daemon.
    expect("status", 3, "no daemon", t.isold(&["status"]));
    expect("claims", 3, "no daemon", t.isold(&["claims"]));
    let bundle = t.dir.path().join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    std::fs::write(bundle.join("config.json"), r#"{"ociVersion":"1.0.2"}"#).unwrap();
    let oci = format!(
        r#"{{"ociVersion":"1.0.2","id":"c1","status":"creating","pid":1,"bundle":"{}"}}"#,
        bundle.display()
    );
    expect(
        "hook",
        0,
        "a container that asks nothing",
        t.isold_in(&["hook"], &oci),
    );
    expect(
        "hook",
        1,
        "a state that is not JSON",
        t.isold_in(&["hook"], "{"),
    );

    // With the daemon.
    let d = start(&t);
    expect("status", 0, "isold run runs", t.isold(&["status"]));
    expect("claims", 0, "isold run runs", t.isold(&["claims"]));
    expect("run", 1, "a second run", t.isold(&["run"]));
    expect("restore", 1, "isold run runs", t.isold(&["restore"]));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let ledger = serde_json::json!({
        "pid": d.0.id(), "state": "recording CPUs 2-3", "cpus": "2-3",
        "started_unix": now, "updated_unix": now, "lost_pages": 0,
        "since_start": [], "spans": [],
    });
    t.write("/run/isold/noise.json", &ledger.to_string());
    expect("noise", 0, "the daemon's ledger", t.isold(&["noise"]));
    let mut d = d;
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(d.0.id() as i32, libc::SIGTERM) }, 0);
    let rc = d.0.wait().unwrap().code().unwrap_or(-1);
    expect("run", 0, "SIGTERM", (rc, String::new()));

    // A status file that is not one; a socket that answers nothing.
    t.write("/run/isold/status.json", "{");
    expect(
        "status",
        4,
        "a status file that is not one",
        t.isold(&["status"]),
    );
    let sock = t.path("/run/isold/isold.sock");
    let _ = std::fs::remove_file(&sock);
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let mute = std::thread::spawn(move || drop(listener.accept()));
    expect(
        "claims",
        4,
        "a daemon that does not answer",
        t.isold(&["claims"]),
    );
    mute.join().unwrap();

    expect("items", 0, "the list", t.isold(&["items"]));
    expect("completions", 0, "bash", t.isold(&["completions", "bash"]));
    expect(
        "completions",
        2,
        "a shell without a script",
        t.isold(&["completions", "tcsh"]),
    );
    expect("check", 6, "no configuration file", {
        std::fs::remove_file(&t.config).unwrap();
        t.isold(&["check"])
    });

    assert_eq!(
        seen.keys().cloned().collect::<BTreeSet<_>>(),
        cli,
        "every command is in the table"
    );
    assert_eq!(seen, documented(), "isold(8)'s EXIT STATUS vs the commands");
}

/// isold on the running system as an unprivileged user: (exit code, what it said).
fn unprivileged(args: &[&str]) -> (i32, String) {
    let (rc, _, err) = common::isold_unprivileged(args);
    (rc, err)
}
