//! Isolation that follows containers, under podman on a real kernel: the Debian root of
//! `scripts/setup-debroot libvirt` (podman 4.3, crun, storage driver vfs) booted with Debian's
//! 6.12-rt from a copy of the root in a tmpfs (`Scenario::debian_containers`; crun cannot
//! `pivot_root` on the initramfs's rootfs). The image is busybox-static's root tree
//! (`podman import`, no registry). isold.service runs with `isolated_cpus = "2"`, and
//! dist/oci/isold.json is installed as podman reads it, so `isold hook` runs at the prestart
//! and poststop of every container with one of the annotations.
//!
//! - `podman run -d --cpuset-cpus 3 --annotation isold.io/isolate=true --annotation
//!   cpu-c-states.crio.io=disable`: while it runs, `isold audit --cpus 3` finds no movable IRQ
//!   and no task but the container's that may run on CPU 3, and CPU 3's PM QoS is `n/a`; after
//!   `podman stop`, every value isold may touch reads as before the container (isold_snapshot);
//! - 20 `podman run --rm` start/stop cycles with the annotation: all run on CPU 3, nothing left;
//! - kill -9 of the container's conmon, then of its process: no poststop hook runs, and the
//!   daemon finds the container gone and gives CPU 3 back;
//! - a container without the annotation changes nothing while it runs;
//! - a claim survives `systemctl restart isold` and is released by the container's stop after.
//!
//! podman runs poststop hooks itself, in its cleanup of a stopped container (once: conmon's
//! `podman container cleanup` or `podman rm`, whichever comes first), also after a kill -9 of
//! the container's process; crun runs prestart with the container's pid.
//!
//! Built only with `--features qemu` (see docs/TESTING.md).

use std::time::Duration;

use serde_json::Value;
use taskisol_tests::qemu::{run, Expect, Scenario, StepOutput, BUSYBOX_IMAGE_TAR};

use super::{at_least, at_most, num, PRE, UNIT};

const IMAGE: &str = "localhost/busybox:taskisol";
const HOOKS_D: &[u8] = include_bytes!("../../../dist/oci/isold.json");

/// Shell functions of the steps (the containerd scenario's too). `audit NAME`: `isold audit
/// --cpus 3` (no window) as JSON on one line `NAME=...`. `pm3`: CPU 3's PM QoS. `claims`: the
/// claims, one line. `no_claims`: waits for the daemon to have no claim (10 s at most).
pub(super) const FUNCS: &str = r#"
audit() { echo "$1=$(isold audit --cpus 3 --duration 0 --json | tr -d '\n')"; }
pm3() { cat /sys/devices/system/cpu/cpu3/power/pm_qos_resume_latency_us; }
claims() { isold claims | tr '\n' ' '; }
no_claims() {
    n=0
    while [ "$(isold claims)" != "no container claims CPUs" ] && [ $n -lt 50 ]; do
        /usr/bin/busybox usleep 200000; n=$((n + 1))
    done
    echo waited_for_release_ms=$((n * 200))
}
"#;

/// In an audit's JSON: the IRQs that can be moved and whose affinity has CPU 3, and the
/// tasks other than the workload's that may run there. An IRQ whose affinity left CPU 3 may
/// still have it as its effective CPU until it next fires (x86 moves an IRQ then: "set, move
/// pending"), and its IRQ thread follows it there: the kernel's to move, not a value isold
/// can write, so neither counts.
pub(super) fn exposure(o: &StepOutput, key: &str) -> Result<(usize, usize), String> {
    let text = o.field(key).ok_or(format!("no {key}"))?;
    let v: Value = serde_json::from_str(text).map_err(|e| format!("{key}: {e}: {text}"))?;
    let cpu = v["per_cpu"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["cpu"] == 3))
        .ok_or(format!("{key}: no CPU 3"))?;
    let can = &cpu["can_disturb"];
    let has3 = |aff: &Value| {
        aff.as_str()
            .and_then(|a| a.parse::<libtaskisol::CpuSet>().ok())
            .is_some_and(|s| s.contains(3))
    };
    let irqs = can["irqs"].as_array().map_or(0, |a| {
        a.iter()
            .filter(|i| i["movable"] != false && has3(&i["affinity"]))
            .count()
    });
    let tasks = can["tasks"].as_array().map_or(0, |a| {
        a.iter()
            .filter(|t| !t["comm"].as_str().unwrap_or_default().starts_with("irq/"))
            .count()
    });
    Ok((irqs, tasks))
}

pub(super) fn quiet(key: &'static str) -> Expect {
    Expect::that(
        &format!("{key}: no movable IRQ and no foreign task may run on CPU 3"),
        move |o: &StepOutput| match exposure(o, key)? {
            (0, 0) => Ok(()),
            (i, t) => Err(format!("{i} movable IRQ(s), {t} task(s)")),
        },
    )
}

pub(super) fn exposed(key: &'static str) -> Expect {
    Expect::that(
        &format!("{key}: movable IRQs and other tasks may run on CPU 3"),
        move |o: &StepOutput| match exposure(o, key)? {
            (i, t) if i > 0 && t > 0 => Ok(()),
            (i, t) => Err(format!("only {i} movable IRQ(s), {t} task(s)")),
        },
    )
}

/// `isold claims` (the `claims` line) lists a claim with both texts.
pub(super) fn claims_has(a: &'static str, b: &'static str) -> Expect {
    Expect::that(
        &format!("isold claims lists '{a}' and '{b}'"),
        move |o: &StepOutput| match o.field("claims") {
            Some(c) if c.contains(a) && c.contains(b) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
}

/// Where the image's build context goes in the guest.
const CONTEXT: &str = "/usr/local/share/taskisol/image";

/// The image's build context as scripts/build-image stages it, put into the guest.
fn stage_image(s: &mut Scenario) {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(repo.join("scripts/build-image"))
        .arg("--stage-only")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scripts/build-image --stage-only: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    fn walk(base: &std::path::Path, rel: &std::path::Path, out: &mut Vec<(String, u32, Vec<u8>)>) {
        for e in std::fs::read_dir(base.join(rel)).unwrap() {
            let e = e.unwrap();
            let r = rel.join(e.file_name());
            let meta = std::fs::metadata(e.path()).unwrap();
            if meta.is_dir() {
                walk(base, &r, out);
            } else {
                use std::os::unix::fs::PermissionsExt;
                let mode = if meta.permissions().mode() & 0o111 != 0 {
                    0o755
                } else {
                    0o644
                };
                out.push((
                    r.display().to_string(),
                    mode,
                    std::fs::read(e.path()).unwrap(),
                ));
            }
        }
    }
    let mut files = Vec::new();
    walk(dir.path(), std::path::Path::new(""), &mut files);
    for (rel, mode, bytes) in files {
        s.file(&format!("{CONTEXT}/{rel}"), mode, &bytes);
    }
}

/// `podman run` of the image as the DaemonSet runs it: privileged, the host's PID, network and
/// cgroup namespaces, the node's state, configuration and the directories its items write.
/// The node's files the DaemonSet's container mounts (dist/kubernetes/isold.yaml): of
/// /etc/default only irqbalance's file.
macro_rules! daemonset_mounts {
    () => {
        "-v /etc/isold:/etc/isold:ro -v /run/isold:/run/isold \
     -v /var/lib/isold:/var/lib/isold -v /etc/modprobe.d:/etc/modprobe.d \
     -v /etc/default/irqbalance:/etc/default/irqbalance \
     -v /etc/systemd/system.conf.d:/etc/systemd/system.conf.d"
    };
}
const DAEMONSET_MOUNTS: &str = daemonset_mounts!();
/// The image run as the DaemonSet runs it.
const DAEMONSET_RUN: &str = concat!(
    "podman run -d --name isold --privileged --pid=host --network=host --cgroupns=host ",
    daemonset_mounts!(),
    " localhost/isold:test run"
);

/// The host directories the install and uninstall scripts work on, under /host.
const HOST_FILES: &str = "-v /usr/local/bin:/host/usr/local/bin \
     -v /usr/share/containers/oci/hooks.d:/host/usr/share/containers/oci/hooks.d";

/// Where Debian's Prometheus goes in the guest.
const PROMETHEUS: &str = "/usr/local/share/taskisol/prometheus";

/// Its configuration: the daemon's listener scraped every 2 s, the shipped alert rules
/// evaluated as often.
const PROMETHEUS_YML: &str = "global:
  scrape_interval: 2s
  scrape_timeout: 2s
  evaluation_interval: 2s
rule_files:
  - /etc/prometheus/isold-alerts.yml
scrape_configs:
  - job_name: isold
    static_configs:
      - targets: [\"127.0.0.1:9645\"]
";

/// Debian's Prometheus (unpacked by scripts/setup-qemu), its configuration and the alert
/// rules of dist/prometheus, put into the guest.
fn add_prometheus(s: &mut Scenario) {
    let bin = taskisol_tests::qemu::cache_dir().join("prometheus/usr/bin/prometheus");
    let bytes = std::fs::read(&bin).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: run scripts/setup-qemu (it unpacks Debian's prometheus package there)",
            bin.display()
        )
    });
    s.file(PROMETHEUS, 0o755, &bytes);
    s.file(
        "/etc/prometheus/prometheus.yml",
        0o644,
        PROMETHEUS_YML.as_bytes(),
    );
    s.file(
        "/etc/prometheus/isold-alerts.yml",
        0o644,
        include_bytes!("../../../dist/prometheus/isold-alerts.yml"),
    );
}

/// A real Prometheus scraping the containerised daemon: CPU 2's LOC count before it starts,
/// the count Prometheus's HTTP API gives back once it has scraped, the count after, the
/// policy's gauge, and the alert rules as Prometheus evaluated them (JSON, one line each).
const PROMETHEUS_STEPS: &str = r#"loc2() { awk '$1 == "LOC:" { print $4 }' /proc/interrupts; }
api() { /usr/bin/busybox wget -qO- "http://127.0.0.1:9090/api/v1/$1"; }
LOC2='isold_cpu_interrupts_total%7Bcpu%3D%222%22%2Csource%3D%22LOC%22%7D'
echo loc_before=$(loc2)
t0=$(now_cs)
/usr/local/share/taskisol/prometheus --config.file=/etc/prometheus/prometheus.yml     --storage.tsdb.path=/tmp/prometheus --web.listen-address=127.0.0.1:9090 >/tmp/prometheus.log 2>&1 &
prom=$!
n=0; while ! api "query?query=$LOC2" 2>/dev/null | grep -q '"value"' && [ $n -lt 240 ]; do
    /usr/bin/busybox usleep 500000; n=$((n + 1))
done
echo prom_first_value_s=$(secs $(($(now_cs) - t0)))
echo prom_loc2=$(api "query?query=$LOC2")
echo loc_after=$(loc2)
echo prom_holds=$(api 'query?query=isold_policy_holds')
n=0; while api rules | grep -q '"health":"unknown"' && [ $n -lt 60 ]; do
    /usr/bin/busybox usleep 500000; n=$((n + 1))
done
echo prom_rules=$(api rules)
echo prom_alerts=$(api alerts)
kill $prom; wait $prom 2>/dev/null
tail -3 /tmp/prometheus.log
"#;

/// The JSON a step printed as `key=...`.
fn json_field(o: &StepOutput, key: &str) -> Result<Value, String> {
    let text = o.field(key).ok_or(format!("no {key}"))?;
    serde_json::from_str(text).map_err(|e| format!("{key}: {e}: {text}"))
}

/// The value of an instant query's first series, as Prometheus's HTTP API printed it.
fn query_value(o: &StepOutput, key: &str) -> Result<f64, String> {
    let v = json_field(o, key)?;
    v["data"]["result"][0]["value"][1]
        .as_str()
        .and_then(|n| n.parse().ok())
        .ok_or(format!("{key}: no value in {v}"))
}

fn prometheus_expects() -> Vec<Expect> {
    vec![
        Expect::that(
            "Prometheus gives back CPU 2's LOC count as the kernel counted it",
            |o: &StepOutput| {
                let got = query_value(o, "prom_loc2")?;
                let count = |k: &str| num(o, k).ok_or(format!("no {k}"));
                let (before, after) = (count("loc_before")?, count("loc_after")?);
                if before <= got && got <= after {
                    Ok(())
                } else {
                    Err(format!("{got} not within {before}..={after}"))
                }
            },
        ),
        Expect::that(
            "Prometheus: the policy holds",
            |o: &StepOutput| match query_value(o, "prom_holds")? {
                1.0 => Ok(()),
                v => Err(format!("isold_policy_holds = {v}")),
            },
        ),
        Expect::that(
            "Prometheus evaluates the six shipped alert rules without error",
            |o: &StepOutput| {
                let v = json_field(o, "prom_rules")?;
                let rules: Vec<(String, String)> = v["data"]["groups"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
                    .map(|r| {
                        (
                            r["name"].as_str().unwrap_or_default().to_string(),
                            r["health"].as_str().unwrap_or_default().to_string(),
                        )
                    })
                    .collect();
                let names: Vec<&str> = rules.iter().map(|(n, _)| n.as_str()).collect();
                if names
                    != [
                        "IsolatedCpuInterrupted",
                        "IsolatedCpuShared",
                        "IsolatedCpuTicking",
                        "ContainerClaimRefused",
                        "IsolationPolicyBroken",
                        "IsolatedCpuStalls",
                        "IsolatedCpuInterruptionOver20us",
                    ]
                    || rules.iter().any(|(_, h)| h != "ok")
                {
                    return Err(format!("{rules:?}"));
                }
                Ok(())
            },
        ),
        Expect::that(
            "no IsolationPolicyBroken alert while the policy holds",
            |o: &StepOutput| {
                let v = json_field(o, "prom_alerts")?;
                let alerts = v["data"]["alerts"].as_array().ok_or(format!("{v}"))?;
                match alerts
                    .iter()
                    .find(|a| a["labels"]["alertname"] == "IsolationPolicyBroken")
                {
                    None => Ok(()),
                    Some(a) => Err(format!("{a}")),
                }
            },
        ),
    ]
}

#[test]
fn rt612_isold_hook_isolates_a_podman_containers_cpus_while_it_runs() {
    let mut s = Scenario::debian_containers("rt612_isold_containers", "");
    s.binaries
        .extend(["isol-idle", "isol-reaction"].map(String::from));
    s.file("/etc/systemd/system/isold.service", 0o644, UNIT);
    s.file(
        "/usr/share/containers/oci/hooks.d/isold.json",
        0o644,
        HOOKS_D,
    );
    // CPU 3 is the containers' (the kubelet's exclusive CPUs, on a node); 0-1 stay the
    // housekeeping CPUs whatever a container asks.
    s.file(
        "/etc/isold/isold.toml",
        0o644,
        b"isolated_cpus = \"2\"\n[containers]\ncpus = \"3\"\n",
    );
    s.step_with_timeout(
        "setup",
        &format!(
            "{PRE}{FUNCS}echo root_fs=$(awk '$2 == \"/\" {{ print $3 }}' /proc/mounts | tail -1)\n\
             podman import {BUSYBOX_IMAGE_TAR} {IMAGE} >/tmp/import.out 2>&1; echo import_rc=$?\n\
             echo driver=$(podman info --format '{{{{.Store.GraphDriverName}}}}')\n\
             systemctl start isold; echo start_rc=$?\n\
             echo active=$(systemctl is-active isold)\n\
             sleep 1\n\
             isold_snapshot /tmp/s0; echo snapshot_lines=$(wc -l </tmp/s0)\n\
             echo pm3=$(pm3)\n\
             audit audit_before"
        ),
        Duration::from_secs(300),
        vec![
            Expect::field("root_fs", "tmpfs"),
            Expect::field("import_rc", "0"),
            Expect::field("driver", "vfs"),
            Expect::field("start_rc", "0"),
            Expect::field("active", "active"),
            Expect::field("pm3", "0"),
            exposed("audit_before"),
        ],
    );
    s.step_with_timeout(
        "claim",
        &format!(
            "{PRE}{FUNCS}t0=$(now_cs)\n\
             podman run -d --name rt --network none --cpuset-cpus 3 \
             --annotation isold.io/isolate=true --annotation cpu-c-states.crio.io=disable \
             {IMAGE} sleep 100000 >/dev/null 2>/tmp/run.err; echo run_rc=$?; cat /tmp/run.err\n\
             echo run_s=$(secs $(($(now_cs) - t0)))\n\
             pid=$(podman inspect -f '{{{{.State.Pid}}}}' rt)\n\
             echo affinity=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/$pid/status)\n\
             echo claims=$(claims)\n\
             echo pm3=$(pm3)\n\
             audit audit_during\n\
             t0=$(now_cs)\n\
             podman stop -t 1 rt >/dev/null; podman rm rt >/dev/null; echo stop_rc=$?\n\
             echo stop_s=$(secs $(($(now_cs) - t0)))\n\
             no_claims\n\
             echo pm3_after=$(pm3)\n\
             isold_snapshot /tmp/s1\nsnapshot_diff /tmp/s0 /tmp/s1\n\
             journalctl -u isold -o cat | grep -E 'claim|release' | tail -5"
        ),
        Duration::from_secs(300),
        vec![
            Expect::field("run_rc", "0"),
            Expect::field("affinity", "3"),
            claims_has("CPUs 3, pid ", ": isolated 3, PM QoS n/a"),
            Expect::field("pm3", "n/a"),
            quiet("audit_during"),
            Expect::field("stop_rc", "0"),
            Expect::field("pm3_after", "0"),
            Expect::field("differences", "0"),
        ],
    );
    // A tenant asks for the housekeeping CPUs: refused whole, its start failed, nothing
    // changed, the reason in the journal and counted in the status.
    s.step_with_timeout(
        "refused",
        &format!(
            "{PRE}{FUNCS}podman run --rm --name hk --network none --cpuset-cpus 0-1 \
             --annotation isold.io/isolate=true {IMAGE} true >/dev/null 2>/tmp/hk.err; rc=$?; echo hk_rc=$rc; [ $rc -ne 0 ] && echo hk_failed=yes\n\
             grep -q 'CPUs 0-1 are not for containers' /tmp/hk.err && echo hk_reason_podman=shown; tail -3 /tmp/hk.err\n\
             journalctl -u isold -o cat | grep -q 'claim refused: container .*CPUs 0-1 are not for containers' && echo hk_reason_journal=logged\n\
             journalctl -t isold-hook -o cat | grep -q 'claim refused: container .*CPUs 0-1 are not for containers' && echo hk_reason_hook=logged\n\
             counted() {{ isold status | grep -q 'claims refused: 1 (not_allowed 1)'; }}\n\
             wait_for 10 counted && echo hk_counted=yes\n\
             no_claims\n\
             isold_snapshot /tmp/s_hk\nsnapshot_diff /tmp/s0 /tmp/s_hk"
        ),
        Duration::from_secs(300),
        vec![
            Expect::field("hk_failed", "yes"),
            Expect::field("hk_reason_journal", "logged"),
            Expect::field("hk_reason_hook", "logged"),
            Expect::field("hk_counted", "yes"),
            Expect::field("differences", "0"),
        ],
    );
    // No local client stalls the daemon: with the listener on (its unit drop-in), 20 idle
    // and a slow-drip scraper, 5 idle and a slow-drip client of the claims socket (root's,
    // as any root process could): a scrape and `isold claims` answer at once, 20 new wide
    // tasks are narrowed within 2 s, the idle ones are closed at their deadline, and
    // `systemctl stop` returns at once with fresh idle clients connected.
    s.step_with_timeout(
        "pests",
        &format!(
            "{PRE}{FUNCS}mkdir -p /etc/systemd/system/isold.service.d\n\
             printf '[Service]\\nRestrictAddressFamilies=AF_INET AF_INET6\\nIPAddressAllow=localhost\\n' >/etc/systemd/system/isold.service.d/metrics.conf\n\
             printf 'isolated_cpus = \"2\"\\n[containers]\\ncpus = \"3\"\\n[metrics]\\nlisten = \"127.0.0.1:9645\"\\ninterval = 1\\n' >/etc/isold/isold.toml\n\
             systemctl daemon-reload; systemctl restart isold; echo restart_rc=$?\n\
             up() {{ /usr/bin/busybox wget -qO /dev/null http://127.0.0.1:9645/metrics; }}\n\
             wait_for 30 up; echo up_rc=$?\n\
             isol-idle tcp 127.0.0.1:9645 20 8 >/tmp/idle_tcp.out &\n\
             isol-idle unix /run/isold/isold.sock 5 8 >/tmp/idle_unix.out &\n\
             isol-idle drip-tcp 127.0.0.1:9645 8 >/dev/null &\n\
             isol-idle drip-unix /run/isold/isold.sock 8 >/dev/null &\n\
             sleep 1\n\
             t0=$(now_cs); /usr/bin/busybox wget -qO /tmp/m http://127.0.0.1:9645/metrics; echo scrape_rc=$?\n\
             echo scrape_s=$(secs $(($(now_cs) - t0)))\n\
             t0=$(now_cs); isold claims >/dev/null; echo claims_rc=$?\n\
             echo claims_s=$(secs $(($(now_cs) - t0)))\n\
             isol-reaction 20 0-3 2 2000 5 | grep -v '^task '\n\
             wait\n\
             sed 's/^/tcp_/' /tmp/idle_tcp.out; sed 's/^/unix_/' /tmp/idle_unix.out\n\
             isol-idle tcp 127.0.0.1:9645 20 30 >/dev/null & a=$!\n\
             isol-idle unix /run/isold/isold.sock 5 30 >/dev/null & b=$!\n\
             sleep 1\n\
             t0=$(now_cs); systemctl stop isold; echo stop_rc=$?\n\
             echo stop_s=$(secs $(($(now_cs) - t0)))\n\
             kill $a $b; wait\n\
             systemctl start isold; echo start_rc=$?"
        ),
        Duration::from_secs(300),
        vec![
            Expect::field("restart_rc", "0"),
            Expect::field("up_rc", "0"),
            Expect::field("scrape_rc", "0"),
            at_most("scrape_s", 2.0),
            Expect::field("claims_rc", "0"),
            at_most("claims_s", 2.0),
            Expect::field("narrowed", "20"),
            Expect::field("tcp_connected", "20"),
            Expect::field("tcp_closed", "20"),
            Expect::field("unix_connected", "5"),
            Expect::field("unix_closed", "5"),
            Expect::field("stop_rc", "0"),
            at_most("stop_s", 5.0),
            Expect::field("start_rc", "0"),
        ],
    );
    // A claim whose record is made unreadable while the daemon is down is given back at its
    // start, although its container still runs; the bad file is set aside.
    s.step_with_timeout(
        "lost_record",
        &format!(
            "{PRE}{FUNCS}podman run -d --name lost --network none --cpuset-cpus 3 \
             --annotation isold.io/isolate=true {IMAGE} sleep 100000 >/dev/null; echo lost_rc=$?\n\
             echo irq4_claimed=$(cat /proc/irq/4/smp_affinity_list)\n\
             systemctl stop isold\n\
             echo '{{' >/run/isold/claims.json\n\
             systemctl start isold; echo start_rc=$?\n\
             back() {{ [ \"$(cat /proc/irq/4/smp_affinity_list)\" = 0-1,3 ]; }}\n\
             wait_for 20 back; echo given_back_rc=$?\n\
             echo irq4_after=$(cat /proc/irq/4/smp_affinity_list)\n\
             [ -f /run/isold/claims.json.bad ] && echo set_aside=yes\n\
             journalctl -u isold -o cat | grep -q 'claims.json.bad; starting without' && echo logged=yes\n\
             echo still_running=$(podman inspect -f '{{{{.State.Running}}}}' lost)\n\
             podman rm -f lost >/dev/null; rm -f /run/isold/claims.json.bad\n\
             no_claims\n\
             isold_snapshot /tmp/s_lost\nsnapshot_diff /tmp/s0 /tmp/s_lost"
        ),
        Duration::from_secs(300),
        vec![
            Expect::field("lost_rc", "0"),
            Expect::field("irq4_claimed", "0-1"),
            Expect::field("start_rc", "0"),
            Expect::field("given_back_rc", "0"),
            Expect::field("irq4_after", "0-1,3"),
            Expect::field("set_aside", "yes"),
            Expect::field("logged", "yes"),
            Expect::field("still_running", "true"),
            Expect::field("differences", "0"),
        ],
    );
    // Rootless podman: the hook runs as the user, who cannot reach isold's socket: the
    // container's start fails with that said, and nothing changes.
    s.step_with_timeout(
        "rootless",
        &format!(
            "{PRE}{FUNCS}useradd -m tenant; echo useradd_rc=$?\n\
             sed -i '/^tenant:/d' /etc/subuid /etc/subgid 2>/dev/null\n\
             mkdir -p /tmp/tenant-run; chown tenant /tmp/tenant-run; chmod 700 /tmp/tenant-run\n\
             cp {BUSYBOX_IMAGE_TAR} /tmp/busybox.tar; chmod 644 /tmp/busybox.tar\n\
             su tenant -s /bin/sh -c 'cd /tmp && export XDG_RUNTIME_DIR=/tmp/tenant-run && \
             podman --cgroup-manager cgroupfs --storage-driver vfs import /tmp/busybox.tar localhost/rl:1 >/dev/null 2>/tmp/rl-import.err; echo rl_import_rc=$?; \
             podman --cgroup-manager cgroupfs --storage-driver vfs run --rm --network none \
             --annotation isold.io/isolate=true localhost/rl:1 true >/dev/null 2>/tmp/rl.err; echo rl_rc=$?'\n\
             tail -3 /tmp/rl-import.err; tail -3 /tmp/rl.err\n\
             grep -q 'error executing hook .*(exit code: 1)' /tmp/rl.err && echo rl_failed=by_the_hook\n\
             journalctl -t isold-hook -o cat | grep -q 'it runs rootless (uid [0-9]*): only root' && echo rl_reason=logged\n\
             journalctl -u isold -o cat | grep -q 'rootless' && echo rl_daemon=asked || echo rl_daemon=not_asked\n\
             isold_snapshot /tmp/s_rl\nsnapshot_diff /tmp/s0 /tmp/s_rl"
        ),
        Duration::from_secs(300),
        vec![
            Expect::field("useradd_rc", "0"),
            Expect::field("rl_import_rc", "0"),
            Expect::field("rl_failed", "by_the_hook"),
            Expect::field("rl_reason", "logged"),
            Expect::field("rl_daemon", "not_asked"),
            Expect::field("differences", "0"),
        ],
    );
    s.step_with_timeout(
        "cycles",
        &format!(
            "{PRE}{FUNCS}ok=0; i=0; t0=$(now_cs)\n\
             while [ $i -lt 20 ]; do\n\
               a=$(podman run --rm --network none --cpuset-cpus 3 --annotation isold.io/isolate=true \
             {IMAGE} sh -c 'grep Cpus_allowed_list /proc/self/status' 2>>/tmp/cycles.err | tr -d '\\t')\n\
               [ \"$a\" = Cpus_allowed_list:3 ] && ok=$((ok + 1))\n\
               i=$((i + 1))\n\
             done\n\
             echo cycles_ok=$ok\n\
             echo cycle_s=$(secs $(( ($(now_cs) - t0) / 20 )))\n\
             i=0; t0=$(now_cs)\n\
             while [ $i -lt 5 ]; do\n\
               podman run --rm --network none --cpuset-cpus 3 {IMAGE} \
             sh -c 'grep Cpus_allowed_list /proc/self/status' >/dev/null 2>>/tmp/cycles.err\n\
               i=$((i + 1))\n\
             done\n\
             echo plain_cycle_s=$(secs $(( ($(now_cs) - t0) / 5 )))\n\
             tail -3 /tmp/cycles.err\n\
             no_claims\n\
             echo left=$(podman ps -aq | wc -l)\n\
             isold_snapshot /tmp/s2\nsnapshot_diff /tmp/s0 /tmp/s2"
        ),
        Duration::from_secs(600),
        vec![
            Expect::field("cycles_ok", "20"),
            Expect::field("left", "0"),
            Expect::field("differences", "0"),
        ],
    );
    // No poststop hook at all: conmon killed first, then the container's process. The daemon
    // finds the process gone within its interval.
    s.step_with_timeout(
        "kill9",
        &format!(
            "{PRE}{FUNCS}podman run -d --name victim --network none --cpuset-cpus 3 \
             --annotation isold.io/isolate=true {IMAGE} sleep 100000 >/dev/null; echo run_rc=$?\n\
             echo pm_claims=$(claims)\n\
             pid=$(podman inspect -f '{{{{.State.Pid}}}}' victim)\n\
             conmon=$(podman inspect -f '{{{{.State.ConmonPid}}}}' victim)\n\
             audit audit_victim\n\
             t0=$(now_cs)\n\
             kill -9 $conmon; kill -9 $pid; echo kill_rc=$?\n\
             no_claims\n\
             echo kill_to_release_s=$(secs $(($(now_cs) - t0)))\n\
             echo pm3_after=$(pm3)\n\
             isold_snapshot /tmp/s3\nsnapshot_diff /tmp/s0 /tmp/s3\n\
             podman rm -f victim >/dev/null 2>&1; echo rm_rc=$?\n\
             journalctl -u isold -o cat | grep 'is gone' | tail -1 | sed 's/^/gone: /'"
        ),
        Duration::from_secs(300),
        vec![
            Expect::field("run_rc", "0"),
            quiet("audit_victim"),
            Expect::field("kill_rc", "0"),
            Expect::field("pm3_after", "0"),
            Expect::field("differences", "0"),
            Expect::output_has("is gone: releasing CPUs 3"),
        ],
    );
    // Without the annotation: nothing changes while it runs.
    s.step_with_timeout(
        "plain",
        &format!(
            "{PRE}{FUNCS}podman run -d --name plain --network none --cpuset-cpus 3 \
             {IMAGE} sleep 100000 >/dev/null; echo run_rc=$?\n\
             echo claims=$(claims)\n\
             isold_snapshot /tmp/s4\nsnapshot_diff /tmp/s0 /tmp/s4\n\
             podman rm -f plain >/dev/null; echo rm_rc=$?"
        ),
        Duration::from_secs(300),
        vec![
            Expect::field("run_rc", "0"),
            Expect::field("claims", "no container claims CPUs"),
            Expect::field("differences", "0"),
            Expect::field("rm_rc", "0"),
        ],
    );
    // A restart of the daemon keeps the claim (and CPU 3 quiet); the stop after releases it.
    s.step_with_timeout(
        "restart",
        &format!(
            "{PRE}{FUNCS}podman run -d --name kept --network none --cpuset-cpus 3 \
             --annotation isold.io/isolate=true {IMAGE} sleep 100000 >/dev/null; echo run_rc=$?\n\
             systemctl restart isold; echo restart_rc=$?\n\
             echo claims=$(claims)\n\
             echo pm3=$(pm3)\n\
             audit audit_restarted\n\
             podman stop -t 1 kept >/dev/null; podman rm kept >/dev/null; echo stop_rc=$?\n\
             no_claims\n\
             isold_snapshot /tmp/s5\nsnapshot_diff /tmp/s0 /tmp/s5"
        ),
        Duration::from_secs(300),
        vec![
            Expect::field("run_rc", "0"),
            Expect::field("restart_rc", "0"),
            claims_has("CPUs 3, pid ", ": isolated 3"),
            quiet("audit_restarted"),
            Expect::field("stop_rc", "0"),
            Expect::field("differences", "0"),
        ],
    );
    // The image, built in the guest from the staged context, run as the DaemonSet runs it:
    // it applies the policy (after isold restore undid the service's), repairs drift, serves
    // metrics, takes a container's claim over the node's socket, and its stop leaves the node
    // isolated (on_stop = "keep").
    stage_image(&mut s);
    add_prometheus(&mut s);
    s.step_with_timeout(
        "image_build",
        &format!(
            "{PRE}systemctl stop isold; echo stop_rc=$?\n\
             isold restore >/dev/null; echo restore_rc=$?\n\
             echo irq4_restored=$(cat /proc/irq/4/smp_affinity_list)\n\
             printf 'ENABLED=\"1\"\\n# an administrator'\\''s line\\n' >/etc/default/irqbalance\n\
             cp /etc/default/irqbalance /tmp/irqbalance.orig\n\
             isold_snapshot /tmp/s_orig\n\
             mkdir -p {CONTEXT}/rootfs/run {CONTEXT}/rootfs/var/lib {CONTEXT}/rootfs/tmp {CONTEXT}/rootfs/etc/isold\n\
             t0=$(now_cs)\n\
             podman build --network none -t localhost/isold:test {CONTEXT} >/tmp/build.out 2>&1; echo build_rc=$?\n\
             echo build_s=$(secs $(($(now_cs) - t0)))\n\
             tail -3 /tmp/build.out\n\
             echo image_mb=$(podman image inspect -f '{{{{.Size}}}}' localhost/isold:test | awk '{{ printf \"%.1f\", $1 / 1048576 }}')"
        ),
        Duration::from_secs(300),
        vec![
            Expect::field("stop_rc", "0"),
            Expect::field("restore_rc", "0"),
            Expect::field("irq4_restored", "0-3"),
            Expect::field("build_rc", "0"),
        ],
    );
    s.step_with_timeout(
        "daemonset",
        &format!(
            "{PRE}{FUNCS}mkdir -p /etc/systemd/system.conf.d\n\
             printf 'isolated_cpus = \"2\"\\non_stop = \"restore\"\\n[containers]\\ncpus = \"3\"\\n[metrics]\\nlisten = \"127.0.0.1:9645\"\\ninterval = 1\\n' >/etc/isold/isold.toml\n\
             podman run --rm --privileged {HOST_FILES} --entrypoint /bin/busybox localhost/isold:test \
             sh /usr/share/isold/install-host.sh; echo install_rc=$?\n\
             grep -q '\"path\": \"/usr/local/bin/isold\"' /usr/share/containers/oci/hooks.d/isold.json && [ -x /usr/local/bin/isold ] && echo installed=yes\n\
             mkdir -p /run/isold /var/lib/isold; chmod 755 /run/isold /var/lib/isold\n\
             {DAEMONSET_RUN} >/dev/null 2>/tmp/ds.err; echo run_rc=$?; cat /tmp/ds.err\n\
             irq4_kept() {{ [ \"$(cat /proc/irq/4/smp_affinity_list)\" = 0-1,3 ]; }}\n\
             scraped() {{ /usr/bin/busybox wget -qO /tmp/metrics http://127.0.0.1:9645/metrics && grep -q '^isold_drift_repairs_total{{item=\"irq_affinity\"' /tmp/metrics && grep -q 'cpu=\"2\"' /tmp/metrics; }}\n\
             wait_for 20 irq4_kept\n\
             echo irq4=$(cat /proc/irq/4/smp_affinity_list)\n\
             echo run_mode=$(stat -c %a /run/isold)\necho lib_mode=$(stat -c %a /var/lib/isold)\n\
             running() {{ isold status >/dev/null; }}\n\
             wait_for 20 running\n\
             isold status >/dev/null; echo status_rc=$?\n\
             echo 0-3 >/proc/irq/4/smp_affinity_list\n\
             wait_for 10 irq4_kept\n\
             echo irq4_repaired=$(cat /proc/irq/4/smp_affinity_list)\n\
             wait_for 10 scraped\n\
             /usr/bin/busybox wget -qO /tmp/metrics http://127.0.0.1:9645/metrics; echo wget_rc=$?\n\
             echo holds=$(awk '$1 == \"isold_policy_holds\" {{ print $2 }}' /tmp/metrics)\n\
             echo repairs=$(grep -c '^isold_drift_repairs_total{{item=\"irq_affinity\"' /tmp/metrics)\n\
             echo cpu2_series=$(grep -c 'cpu=\"2\"' /tmp/metrics)\n\
             echo series=$(grep -vc '^#' /tmp/metrics)\n\
             echo sample_s=$(awk '$1 == \"isold_health_sample_duration_seconds\" {{ print $2 }}' /tmp/metrics)\n\
             {PROMETHEUS_STEPS}\
             podman run -d --name claimer --network none --cpuset-cpus 3 \
             --annotation isold.io/isolate=true {IMAGE} sleep 100000 >/dev/null; echo claimer_rc=$?\n\
             echo claims=$(claims)\n\
             echo irq4_claimed=$(cat /proc/irq/4/smp_affinity_list)\n\
             podman rm -f claimer >/dev/null; no_claims\n\
             echo irq4_released=$(cat /proc/irq/4/smp_affinity_list)\n\
             echo banned=$(sed -n 's/^IRQBALANCE_BANNED_CPULIST=//p' /etc/default/irqbalance)\n\
             # The roll: SIGTERM to the pod (on_stop = \"restore\": a pod's stop is no undo),\n\
             # a new pod; sampled every 50 ms throughout.\n\
             rm -f /tmp/roll.done\n\
             ( while [ ! -e /tmp/roll.done ]; do echo \"$(cat /proc/sys/kernel/timer_migration) $(cat /proc/irq/4/smp_affinity_list)\"; /usr/bin/busybox usleep 50000; done >/tmp/roll.samples ) &\n\
             sampler=$!\n\
             /usr/bin/busybox usleep 300000\n\
             podman stop -t 30 isold >/dev/null; echo stop_rc=$?\n\
             echo exit_code=$(podman inspect -f '{{{{.State.ExitCode}}}}' isold)\n\
             echo irq4_after_stop=$(cat /proc/irq/4/smp_affinity_list)\n\
             isold verify >/dev/null; echo verify_rc=$?\n\
             podman logs isold 2>&1 | grep -m1 'the policy stays in force'\n\
             podman rm isold >/dev/null\n\
             {DAEMONSET_RUN} >/dev/null 2>>/tmp/ds.err; echo rerun_rc=$?\n\
             running_again() {{ isold status >/dev/null; }}\n\
             wait_for 30 running_again; echo status_again_rc=$?\n\
             /usr/bin/busybox usleep 300000\n\
             touch /tmp/roll.done; wait $sampler\n\
             echo roll_samples=$(wc -l </tmp/roll.samples)\n\
             echo roll_lapses=$(grep -vc '^0 0-1,3$' /tmp/roll.samples)\n\
             grep -v '^0 0-1,3$' /tmp/roll.samples | head -3"
        ),
        Duration::from_secs(300),
        vec![
            Expect::field("run_rc", "0"),
            Expect::field("irq4", "0-1,3"),
            Expect::field("status_rc", "0"),
            Expect::field("irq4_repaired", "0-1,3"),
            Expect::field("wget_rc", "0"),
            Expect::field("holds", "1"),
            // A drift repair counted, and CPU 2's health series are there.
            at_least("repairs", 1.0),
            at_least("cpu2_series", 1.0),
            Expect::field("claimer_rc", "0"),
            Expect::field("irq4_claimed", "0-1"),
            Expect::field("irq4_released", "0-1,3"),
            Expect::field("stop_rc", "0"),
            Expect::field("exit_code", "0"),
            Expect::field("irq4_after_stop", "0-1,3"),
            Expect::field("verify_rc", "0"),
            Expect::field("run_mode", "700"),
            Expect::field("lib_mode", "700"),
            Expect::field("install_rc", "0"),
            Expect::field("installed", "yes"),
            // irqbalance's file, mounted alone, is rewritten in place.
            Expect::field("banned", "2"),
            Expect::field("rerun_rc", "0"),
            Expect::field("status_again_rc", "0"),
            at_least("roll_samples", 10.0),
            Expect::field("roll_lapses", "0"),
        ]
        .into_iter()
        .chain(prometheus_expects())
        .collect(),
    );
    // Uninstall as docs/KUBERNETES.md says: the DaemonSet's pod gone, the uninstall Job's
    // script (the image's) restores every value and removes the hook, the binary and the
    // state; the node is as it was before the DaemonSet.
    s.step_with_timeout(
        "uninstall",
        &format!(
            "{PRE}{FUNCS}podman stop -t 30 isold >/dev/null; podman rm isold >/dev/null; echo ds_gone=$?\n\
             echo isolated_before=$(cat /proc/irq/4/smp_affinity_list)\n\
             podman run --rm --privileged --pid=host --network=host --cgroupns=host {DAEMONSET_MOUNTS} {HOST_FILES} \
             --entrypoint /bin/busybox localhost/isold:test sh /usr/share/isold/uninstall-host.sh >/tmp/un.out 2>&1; echo uninstall_rc=$?\n\
             tail -3 /tmp/un.out\n\
             echo host_files_left=$(ls /usr/share/containers/oci/hooks.d/isold.json /usr/local/bin/isold 2>/dev/null | wc -l)\n\
             echo state_left=$(find /run/isold /var/lib/isold -mindepth 1 2>/dev/null | wc -l)\n\
             cmp -s /etc/default/irqbalance /tmp/irqbalance.orig && echo irqbalance=original\n\
             isold_snapshot /tmp/s_un\nsnapshot_diff /tmp/s_orig /tmp/s_un"
        ),
        Duration::from_secs(300),
        vec![
            Expect::field("ds_gone", "0"),
            Expect::field("isolated_before", "0-1,3"),
            Expect::field("uninstall_rc", "0"),
            Expect::field("host_files_left", "0"),
            Expect::field("state_left", "0"),
            Expect::field("irqbalance", "original"),
            Expect::field("differences", "0"),
        ],
    );
    let o = run(&s).unwrap_or_else(|e| panic!("{e}"));
    let f = |step: &str, key: &str| {
        o.outputs
            .get(step)
            .and_then(|out| out.field(key))
            .unwrap_or("-")
            .to_string()
    };
    eprintln!(
        "podman run -d with a claim {} s, stop and rm {} s; one run --rm cycle {} s with a claim, {} s without; kill -9 to released {} s",
        f("claim", "run_s"),
        f("claim", "stop_s"),
        f("cycles", "cycle_s"),
        f("cycles", "plain_cycle_s"),
        f("kill9", "kill_to_release_s"),
    );
    eprintln!(
        "image: built in {} s, {} MiB; in it, isold run's health sample of CPU 2 took {} s, {} series",
        f("image_build", "build_s"),
        f("image_build", "image_mb"),
        f("daemonset", "sample_s"),
        f("daemonset", "series"),
    );
    o.assert_ok();
}
