//! isold run's metrics read by a real Prometheus: Debian's prometheus package (unpacked by
//! scripts/setup-qemu into $TASKISOL_CACHE/prometheus, never installed) scrapes the daemon's
//! loopback listener, and its HTTP API answers the kernel's count back; promtool checks the
//! shipped alert rules. The daemon runs on the tree captured from 6.12-rt (`--root`).

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn prometheus_bin(name: &str) -> PathBuf {
    let cache = std::env::var_os("TASKISOL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cache"));
    let p = cache.join("prometheus/usr/bin").join(name);
    assert!(
        p.exists(),
        "{} is missing: run scripts/setup-qemu (as root, with the same TASKISOL_CACHE if set: it unpacks Debian's prometheus package there)",
        p.display()
    );
    p
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Killed when the test ends, whatever happened.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The body of `GET path` on 127.0.0.1:`port`, or None while nothing answers.
fn get(port: u16, path: &str) -> Option<String> {
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(c, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut out = String::new();
    c.read_to_string(&mut out).ok()?;
    Some(out.split_once("\r\n\r\n")?.1.to_string())
}

/// The value of an instant query, as Prometheus's HTTP API gives it.
fn query(port: u16, promql_escaped: &str) -> Option<String> {
    let body = get(port, &format!("/api/v1/query?query={promql_escaped}"))?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    Some(v["data"]["result"][0]["value"][1].as_str()?.to_string())
}

#[test]
fn promtool_accepts_the_example_alert_rules() {
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dist/prometheus/isold-alerts.yml");
    let out = Command::new(prometheus_bin("promtool"))
        .args(["check", "rules"])
        .arg(&rules)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("SUCCESS: 7 rules found"), "{text}");
}

#[test]
fn a_real_prometheus_scrapes_the_daemon_and_answers_the_kernels_count() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    common::copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/debian-6.12-rt-isold"),
        &root,
    );
    let (isold_port, prom_port) = (free_port(), free_port());
    let config = dir.path().join("isold.toml");
    std::fs::write(
        &config,
        format!("isolated_cpus = \"2-3\"\n[metrics]\nlisten = \"127.0.0.1:{isold_port}\"\ninterval = 1\n"),
    )
    .unwrap();
    let _isold = Killed(
        Command::new(env!("CARGO_BIN_EXE_isold"))
            .arg("--root")
            .arg(&root)
            .arg("--config")
            .arg(&config)
            .args(["run", "--interval", "0.5"])
            .env_remove("INVOCATION_ID")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let prom_config = dir.path().join("prometheus.yml");
    std::fs::write(
        &prom_config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: isold\n    static_configs:\n      - targets: ['127.0.0.1:{isold_port}']\n"
        ),
    )
    .unwrap();
    let _prom = Killed(
        Command::new(prometheus_bin("prometheus"))
            .arg(format!("--config.file={}", prom_config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // CPU 2's local timer interrupts in the captured /proc/interrupts: 790.
    let loc = "isold_cpu_interrupts_total%7Bcpu%3D%222%22%2Csource%3D%22LOC%22%7D";
    let t0 = Instant::now();
    let mut last = None;
    while t0.elapsed() < Duration::from_secs(90) {
        last = query(prom_port, loc);
        if last.as_deref() == Some("790") {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(
        last.as_deref(),
        Some("790"),
        "Prometheus's answer for CPU 2's LOC"
    );
    assert_eq!(
        query(prom_port, "up%7Bjob%3D%22isold%22%7D").as_deref(),
        Some("1")
    );
    assert_eq!(query(prom_port, "isold_policy_holds").as_deref(), Some("1"));
}
