//! Isolation that follows containers on a containerd node, through NRI, driven the way the
//! kubelet drives containerd: the Debian sid root of `scripts/setup-debroot containerd`
//! (containerd 2.1 with NRI on by default, runc 1.3) booted with Debian's 6.12-rt or sid's
//! 7.x-rt from a copy of the root in a tmpfs (`Scenario::debian_containerd`), and isol-cri, a
//! CRI client
//! (tests/src/bin/isol-cri.rs: the RuntimeService over containerd's socket, as the kubelet
//! calls it), running host-network pods whose sandbox and workload are the busybox image
//! imported offline. isold.service runs with `isolated_cpus = "2"`, `[containers] cpus = "3"`
//! and `nri = true`; no OCI hook is installed (containerd reads none).
//!
//! - a pod annotated `isold.io/isolate: "true"` and `cpu-c-states.crio.io: disable` (pod
//!   annotations, as the kubelet passes a pod's) and a container with `cpuset_cpus = "3"`:
//!   while it runs, `isold audit --cpus 3` finds no movable IRQ and no task but the
//!   container's that may run on CPU 3, and CPU 3's PM QoS is `n/a`; so after `systemctl
//!   restart containerd` (the plugin dials again and is synchronized) and after `systemctl
//!   restart isold`; after StopContainer every value isold may touch reads as before, and
//!   after RemoveContainer and RemovePodSandbox still;
//! - a container without the annotation changes nothing while it runs;
//! - a claim the administrator's rule refuses (CPUs 0-1) fails CreateContainer with isold's
//!   reason, as the CRI client sees it, and changes nothing;
//! - a container removed while isold is stopped (stop is not undo: its claim's effects stay)
//!   is given back when isold starts again and the runtime's Synchronize no longer has it;
//! - kill -9 of containerd while a claim holds keeps it; kill -9 of isold and the container
//!   removed meanwhile gives CPU 3 back;
//! - last, isold dials containerd through isol-nri-tap (tests/src/bin/isol-nri-tap.rs), which
//!   records the trunk both ways; the recording is read with isold's own codec
//!   (`check_recording`), and `TASKISOL_UPDATE_FIXTURES=1` writes it to
//!   libtaskisol/tests/fixtures/nri/containerd-2.1.9, the recorded streams of the codec's
//!   unit tests.
//!
//! Built only with `--features qemu` (see docs/TESTING.md).

use std::time::Duration;

use taskisol_tests::qemu::{run, Expect, KernelRole, Scenario, StepOutput, CONTAINERD_IMAGE_TAR};

use super::containers::{claims_has, exposed, quiet, FUNCS};
use super::{at_least, at_most, PRE, UNIT};

/// containerd's configuration (version 3): no registry (the sandbox image is the imported
/// busybox), the `native` snapshotter (no overlay module in the guest), no AppArmor, the
/// cgroupfs driver (runc's default), NRI on at its default socket.
const CONTAINERD_TOML: &str = r#"version = 3
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'native'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = 'docker.io/library/isol-busybox:1'
[plugins.'io.containerd.cri.v1.runtime']
  disable_apparmor = true
[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = '/var/run/nri/nri.sock'
"#;

/// The containerd steps' own shell functions, after the podman scenario's ([`FUNCS`]).
/// `registered N`: waits (30 s at most) for the status to say the plugin is registered with at
/// least N connections made. `cri`: isol-cri. `val K`: K=value of isol-cri's output.
/// `stop_with_retries ID`: StopContainer, up to three tries.
const NRI_FUNCS: &str = r#"
connections() { isold status 2>/dev/null | sed -n 's/.*NRI: registered with .* (connections: \([0-9]*\)).*/\1/p'; }
at_least_connections() { c=$(connections); [ -n "$c" ] && [ "$c" -ge "$1" ]; }
registered() { wait_for 30 at_least_connections "$1"; echo registered_rc=$?; echo nri="$(isold status | grep NRI)"; }
cri() { isol-cri "$@"; }
# StopContainer as the kubelet makes it: again after a failure. The first one after a restart
# of containerd can fail with "ttrpc: closed" (its connection to the container's shim).
stop_with_retries() {
    stop_rc=1
    for i in 1 2 3; do
        if cri stop "$1" >/tmp/stop.out; then stop_rc=0; break; fi
        cat /tmp/stop.out; sleep 1
    done
    echo stop_rc=$stop_rc; echo stop_tries=$i
}
val() { sed -n "s/^$1=//p"; }
"#;

/// `kstate DEFAULT ENTRIES`: /var/lib/kubelet/cpu_manager_state as the kubelet's static
/// policy writes it (a temporary file of mode 0600 renamed into place; checksum 0, which the
/// kubelet accepts).
const KUBELET_FUNCS: &str = r#"
kstate() {
    mkdir -p /var/lib/kubelet
    ( umask 077; printf '{"policyName":"static","defaultCpuSet":"%s","entries":{%s},"checksum":0}' "$1" "$2" >/var/lib/kubelet/.cpu_manager_state.tmp )
    mv /var/lib/kubelet/.cpu_manager_state.tmp /var/lib/kubelet/cpu_manager_state
}
"#;

fn image_steps() -> String {
    format!(
        "wait_for 60 systemctl -q is-active containerd; echo containerd=$(systemctl is-active containerd)\n\
         echo containerd_version=$(containerd --version | awk '{{print $3}}')\n\
         ctr -n k8s.io images import --local --snapshotter native {CONTAINERD_IMAGE_TAR} \
         >/tmp/import.out 2>&1; echo import_rc=$?; tail -2 /tmp/import.out\n"
    )
}

#[test]
fn rt612_isold_nri_isolates_a_containerd_containers_cpus_while_it_runs() {
    isold_nri_isolates_a_containerd_containers_cpus_while_it_runs(KernelRole::Rt612);
}

#[test]
fn rt7_isold_nri_isolates_a_containerd_containers_cpus_while_it_runs() {
    isold_nri_isolates_a_containerd_containers_cpus_while_it_runs(KernelRole::Rt7);
}

fn isold_nri_isolates_a_containerd_containers_cpus_while_it_runs(role: KernelRole) {
    let mut s = Scenario::debian_containerd(&format!("{}_isold_containerd", role.as_str()), "");
    s.role = role;
    s.binaries.push("isol-nri-tap".into());
    s.file("/etc/systemd/system/isold.service", 0o644, UNIT);
    s.file(
        "/etc/containerd/config.toml",
        0o644,
        CONTAINERD_TOML.as_bytes(),
    );
    s.file(
        "/etc/isold/isold.toml",
        0o644,
        b"isolated_cpus = \"2\"\n[containers]\ncpus = \"3\"\nnri = true\n",
    );
    s.step_with_timeout(
        "setup",
        &format!(
            "{PRE}{FUNCS}{NRI_FUNCS}{}\
             systemctl start isold; echo start_rc=$?\n\
             registered 1\n\
             sleep 1\n\
             isold_snapshot /tmp/s0; echo snapshot_lines=$(wc -l </tmp/s0)\n\
             echo pm3=$(pm3)\n\
             audit audit_before",
            image_steps()
        ),
        Duration::from_secs(300),
        vec![
            Expect::field("containerd", "active"),
            Expect::field("import_rc", "0"),
            Expect::field("start_rc", "0"),
            Expect::field("registered_rc", "0"),
            Expect::field("pm3", "0"),
            exposed("audit_before"),
        ],
    );
    s.step_with_timeout(
        "claim",
        &format!(
            "{PRE}{FUNCS}{NRI_FUNCS}t0=$(now_cs)\n\
             pod=$(cri pod rt --annotation isold.io/isolate=true --annotation cpu-c-states.crio.io=disable | tee /tmp/pod.out | val pod); cat /tmp/pod.out\n\
             echo pod_s=$(secs $(($(now_cs) - t0)))\n\
             t0=$(now_cs)\n\
             ctr=$(cri container $pod work --cpuset 3 | tee /tmp/ctr.out | val container); cat /tmp/ctr.out\n\
             echo container_s=$(secs $(($(now_cs) - t0)))\n\
             echo $pod >/tmp/pod; echo $ctr >/tmp/ctr\n\
             pid=$(cri pid $ctr | val pid); echo pid=$pid\n\
             echo affinity=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/$pid/status)\n\
             echo claims=$(claims)\n\
             echo pm3=$(pm3)\n\
             audit audit_during"
        ),
        Duration::from_secs(300),
        vec![
            Expect::that("the pod runs", |o: &StepOutput| match o.field("pod") {
                Some(p) if p.len() == 64 => Ok(()),
                other => Err(format!("{other:?}")),
            }),
            Expect::that("the container runs", |o: &StepOutput| {
                match o.field("container") {
                    Some(p) if p.len() == 64 => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }),
            Expect::field("affinity", "3"),
            claims_has("CPUs 3, pid ", ": isolated 3, PM QoS n/a"),
            Expect::field("pm3", "n/a"),
            quiet("audit_during"),
        ],
    );
    s.step_with_timeout(
        "containerd_restart",
        &format!(
            "{PRE}{FUNCS}{NRI_FUNCS}t0=$(now_cs)\n\
             systemctl restart containerd; echo restart_rc=$?\n\
             registered 2\n\
             echo reconnect_s=$(secs $(($(now_cs) - t0)))\n\
             journalctl -u isold -o cat | grep -i nri | tail -4\n\
             echo claims=$(claims)\n\
             echo pm3=$(pm3)\n\
             audit audit_during"
        ),
        Duration::from_secs(180),
        vec![
            Expect::field("restart_rc", "0"),
            Expect::field("registered_rc", "0"),
            claims_has("CPUs 3, pid ", ": isolated 3, PM QoS n/a"),
            Expect::field("pm3", "n/a"),
            quiet("audit_during"),
        ],
    );
    s.step_with_timeout(
        "isold_restart",
        &format!(
            "{PRE}{FUNCS}{NRI_FUNCS}systemctl restart isold; echo restart_rc=$?\n\
             registered 1\n\
             sleep 1\n\
             echo claims=$(claims)\n\
             echo pm3=$(pm3)\n\
             audit audit_during"
        ),
        Duration::from_secs(180),
        vec![
            Expect::field("restart_rc", "0"),
            Expect::field("registered_rc", "0"),
            claims_has("CPUs 3, pid ", ": isolated 3, PM QoS n/a"),
            Expect::field("pm3", "n/a"),
            quiet("audit_during"),
        ],
    );
    s.step_with_timeout(
        "release",
        &format!(
            "{PRE}{FUNCS}{NRI_FUNCS}pod=$(cat /tmp/pod); ctr=$(cat /tmp/ctr)\n\
             stop_with_retries $ctr\n\
             no_claims\n\
             echo pm3_after=$(pm3)\n\
             isold_snapshot /tmp/s1; snapshot_diff /tmp/s0 /tmp/s1 | sed 's/^differences=/after_stop_differences=/'\n\
             cri rm $ctr; echo rm_rc=$?\n\
             cri stoppod $pod; echo stoppod_rc=$?\n\
             cri rmpod $pod; echo rmpod_rc=$?\n\
             echo claims=$(claims)\n\
             isold_snapshot /tmp/s2; snapshot_diff /tmp/s0 /tmp/s2\n\
             journalctl -u isold -o cat | grep -E 'claim|release' | tail -5"
        ),
        Duration::from_secs(180),
        vec![
            Expect::field("stop_rc", "0"),
            at_most("waited_for_release_ms", 10_000.0),
            Expect::field("pm3_after", "0"),
            Expect::field("after_stop_differences", "0"),
            Expect::field("rm_rc", "0"),
            Expect::field("stoppod_rc", "0"),
            Expect::field("rmpod_rc", "0"),
            Expect::field("claims", "no container claims CPUs"),
            Expect::field("differences", "0"),
        ],
    );
    s.step_with_timeout(
        "unannotated",
        &format!(
            "{PRE}{FUNCS}{NRI_FUNCS}pod=$(cri pod plain | val pod)\n\
             ctr=$(cri container $pod work --cpuset 3 | tee /tmp/ctr.out | val container); cat /tmp/ctr.out\n\
             pid=$(cri pid $ctr | val pid)\n\
             echo affinity=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/$pid/status)\n\
             sleep 2\n\
             echo claims=$(claims)\n\
             isold_snapshot /tmp/s3; snapshot_diff /tmp/s0 /tmp/s3\n\
             cri stop $ctr >/dev/null; cri rm $ctr >/dev/null; cri stoppod $pod >/dev/null; cri rmpod $pod; echo gone_rc=$?"
        ),
        Duration::from_secs(180),
        vec![
            Expect::field("affinity", "3"),
            Expect::field("claims", "no container claims CPUs"),
            Expect::field("differences", "0"),
            Expect::field("gone_rc", "0"),
        ],
    );
    // A tenant asks for the housekeeping CPUs: CreateContainer fails with isold's reason, as
    // the kubelet would show it; nothing changed.
    s.step_with_timeout(
        "refused",
        &format!(
            "{PRE}{FUNCS}{NRI_FUNCS}pod=$(cri pod hk --annotation isold.io/isolate=true | val pod)\n\
             cri container $pod work --cpuset 0-1 >/tmp/hk.out; echo hk_rc=$?\n\
             echo hk_error=$(val error </tmp/hk.out)\n\
             echo containers=$(cri ps | grep -c work)\n\
             echo claims=$(claims)\n\
             echo refused=$(isold status | grep -i 'refused')\n\
             isold_snapshot /tmp/s4; snapshot_diff /tmp/s0 /tmp/s4\n\
             cri stoppod $pod >/dev/null; cri rmpod $pod; echo gone_rc=$?"
        ),
        Duration::from_secs(180),
        vec![
            Expect::field("hk_rc", "1"),
            Expect::that(
                "CreateContainer fails with isold's reason",
                |o: &StepOutput| match o.field("hk_error") {
                    Some(e) if e.contains("isold:") && e.contains("0-1") => Ok(()),
                    other => Err(format!("{other:?}")),
                },
            ),
            Expect::field("containers", "0"),
            Expect::field("claims", "no container claims CPUs"),
            Expect::that("the refusal is counted", |o: &StepOutput| {
                match o.field("refused") {
                    Some(r) if r.contains("refused: 1 (") && r.contains("not_allowed 1") => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }),
            Expect::field("differences", "0"),
            Expect::field("gone_rc", "0"),
        ],
    );
    // The kubelet's way: its static CPU manager's state written as it writes it (reserved
    // 0-1, so a pod of two whole CPUs gets 2-3 and one of one CPU gets 3), pods of each QoS
    // class with the cgroup parent and CPU request it gives them.
    s.step_with_timeout(
        "kubelet",
        &format!(
            "{PRE}{FUNCS}{NRI_FUNCS}{KUBELET_FUNCS}\
             kstate 0-1 '\"uid-kg\":{{\"work\":\"2-3\"}}'\n\
             pod=$(cri pod kg --annotation isold.io/isolate=true | val pod)\n\
             ctr=$(cri container $pod work --cpuset 2-3 | tee /tmp/ctr.out | val container); cat /tmp/ctr.out\n\
             pid=$(cri pid $ctr | val pid)\n\
             echo claims_kg=$(claims)\n\
             echo disagree_kg=$(isold status | grep -c 'disagree')\n\
             echo affinity_before=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/$pid/status)\n\
             cri update $ctr --cpuset 1-3 >/tmp/upd.out; echo update_rc=$?\n\
             echo update_error=$(val error </tmp/upd.out)\n\
             echo cpuset_after=$(cri cpuset $ctr | val cpuset)\n\
             echo affinity_after=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/$pid/status)\n\
             echo claims_after_update=$(claims)\n\
             cri stop $ctr >/dev/null; cri rm $ctr >/dev/null; cri stoppod $pod >/dev/null; cri rmpod $pod >/dev/null\n\
             no_claims\n\
             kstate 0-2 '\"uid-kc\":{{\"work\":\"3\"}}'\n\
             pod=$(cri pod kc --annotation cpu-load-balancing.crio.io=disable --annotation irq-load-balancing.crio.io=disable | val pod)\n\
             ctr=$(cri container $pod work --cpuset 3 | val container)\n\
             echo claims_crio=$(claims)\n\
             echo disagree_crio=$(isold status | grep -A2 'disagree' | tr '\\n' ' ')\n\
             audit audit_crio\n\
             cri stop $ctr >/dev/null; cri rm $ctr >/dev/null; cri stoppod $pod >/dev/null; cri rmpod $pod >/dev/null\n\
             no_claims\n\
             kstate 0-3 ''\n\
             for q in besteffort burstable; do\n\
                 pod=$(cri pod s$q --qos $q --annotation isold.io/isolate=true | val pod)\n\
                 cri container $pod work --qos $q --cpuset 0-3 >/tmp/s.out; echo ${{q}}_rc=$?\n\
             done\n\
             pod=$(cri pod sfr --annotation isold.io/isolate=true | val pod)\n\
             cri container $pod work --cpuset 0-3 --cpus 1500 >/tmp/s.out; echo fractional_rc=$?\n\
             sleep 2\n\
             echo claims_shared=$(claims)\n\
             echo said_shared=$(journalctl -u isold -o cat | grep -c 'asks for isolated CPUs, but')\n\
             journalctl -u isold -o cat | grep 'asks for isolated CPUs, but' | tail -3\n\
             cri rmpods s >/dev/null; echo rmpods_rc=$?\n\
             rm -f /var/lib/kubelet/cpu_manager_state\n\
             isold_snapshot /tmp/s7; snapshot_diff /tmp/s0 /tmp/s7"
        ),
        Duration::from_secs(300),
        vec![
            Expect::that("the 2-CPU pod's claim", |o: &StepOutput| {
                match o.field("claims_kg") {
                    Some(c) if c.contains("CPUs 2-3, pid ") && c.contains("isolated 2-3") => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }),
            Expect::field("disagree_kg", "0"),
            Expect::that(
                "status names the kubelet's shared pool on an isolated CPU",
                |o: &StepOutput| match o.field("disagree_crio") {
                    Some(d) if d.contains("shared pool 0-2 includes isolated CPUs 2") => Ok(()),
                    other => Err(format!("{other:?}")),
                },
            ),
            Expect::field("update_rc", "1"),
            Expect::that(
                "the update to a housekeeping CPU is refused with isold's reason",
                |o: &StepOutput| match o.field("update_error") {
                    Some(e) if e.contains("isold:") && e.contains("1-3") => Ok(()),
                    other => Err(format!("{other:?}")),
                },
            ),
            Expect::field("cpuset_after", "2-3"),
            // Its threads' CPUs as before the update (2-3, or 3 once CPU 2's isolated
            // partition is in place): never CPU 1.
            Expect::that("the container's CPUs did not change", |o: &StepOutput| {
                match (o.field("affinity_before"), o.field("affinity_after")) {
                    (Some(b), Some(a)) if a == b && !a.contains('1') => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }),
            Expect::that("the claim kept the container's CPUs", |o: &StepOutput| {
                match o.field("claims_after_update") {
                    Some(c) if c.contains("CPUs 2-3, pid ") => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }),
            Expect::that("CRI-O's annotations isolate", |o: &StepOutput| {
                match o.field("claims_crio") {
                    Some(c) if c.contains("CPUs 3, pid ") && c.contains("isolated 3") => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }),
            quiet("audit_crio"),
            Expect::field("besteffort_rc", "0"),
            Expect::field("burstable_rc", "0"),
            Expect::field("fractional_rc", "0"),
            Expect::field("claims_shared", "no container claims CPUs"),
            Expect::field("said_shared", "3"),
            Expect::field("rmpods_rc", "0"),
            Expect::field("differences", "0"),
        ],
    );
    // Pods with 128 KiB of annotations each (the size of a real pod's
    // last-applied-configuration, many times over), then isold restarted: the runtime's
    // Synchronize carries them all and is answered within its deadline (containerd's journal
    // since the restart has no `failed to synchronize plugin`), isold is registered within
    // 2 s of the restart, its peak memory stays small. Then 12 pods started at once: all
    // run, and the plugin is never dropped.
    s.step_with_timeout(
        "many_pods",
        &format!(
            "{PRE}{FUNCS}{NRI_FUNCS}cri pods big 5 --pad 131072 | tee /tmp/big.out\n\
             echo big_started=$(val started </tmp/big.out)\n\
             since=$(date '+%Y-%m-%d %H:%M:%S')\n\
             systemctl restart isold; echo restart_rc=$?\n\
             t0=$(now_cs)\n\
             registered 1\n\
             echo registered_s=$(secs $(($(now_cs) - t0)))\n\
             sleep 2\n\
             echo active=$(systemctl is-active isold)\n\
             echo synced_pods=$(journalctl -u isold --since \"$since\" -o cat | sed -n 's/.*NRI: registered and synchronized: \\([0-9]*\\) pod.*/\\1/p' | head -1)\n\
             echo hwm_kib=$(awk '/^VmHWM:/ {{print $2}}' /proc/$(systemctl show -p MainPID --value isold)/status)\n\
             journalctl -u isold -o cat | grep -iE 'NRI|synchron' | tail -3\n\
             c0=$(connections)\n\
             t0=$(now_cs)\n\
             cri pods many 12 | tee /tmp/many.out\n\
             echo many_s=$(secs $(($(now_cs) - t0)))\n\
             echo many_started=$(val started </tmp/many.out)\n\
             echo redials=$(($(connections) - c0))\n\
             echo nri_answers=\"$(isold status | grep NRI | sed 's/.*; answers/answers/')\"\n\
             echo sync_failed=$(journalctl -u containerd --since \"$since\" -o cat | grep -ci 'failed to synchronize plugin')\n\
             journalctl -u containerd --since \"$since\" -o cat | grep -i 'plugin' | tail -3\n\
             cri rmpods big >/dev/null; cri rmpods many; echo rmpods_rc=$?"
        ),
        Duration::from_secs(400),
        vec![
            Expect::field("big_started", "5"),
            Expect::field("restart_rc", "0"),
            Expect::field("registered_rc", "0"),
            at_most("registered_s", 2.0),
            Expect::field("active", "active"),
            // The first registration after the restart synchronized the five big pods.
            at_least("synced_pods", 5.0),
            Expect::field("sync_failed", "0"),
            at_most("hwm_kib", 48.0 * 1024.0),
            Expect::field("many_started", "12"),
            Expect::field("redials", "0"),
            Expect::field("rmpods_rc", "0"),
        ],
    );
    // The claim's cost at container creation: five containers with a claim and five without,
    // each CreateContainer and StartContainer timed as the CRI client waits for them.
    s.step_with_timeout(
        "latency",
        &format!(
            "{PRE}{FUNCS}{NRI_FUNCS}cycles() {{\n\
                 pod=$(cri pod \"$@\" | val pod); out=\n\
                 for i in 1 2 3 4 5; do\n\
                     t0=$(now_cs); ctr=$(cri container $pod w$i --cpuset 3 | val container)\n\
                     out=\"$out $(secs $(($(now_cs) - t0)))\"\n\
                     cri stop $ctr >/dev/null; cri rm $ctr >/dev/null\n\
                 done\n\
                 cri stoppod $pod >/dev/null; cri rmpod $pod >/dev/null\n\
                 echo $out\n\
             }}\n\
             echo claimed_s=$(cycles lat1 --annotation isold.io/isolate=true)\n\
             echo plain_s=$(cycles lat2)\n\
             no_claims"
        ),
        Duration::from_secs(300),
        vec![
            Expect::that("five timed creations each", |o: &StepOutput| {
                for k in ["claimed_s", "plain_s"] {
                    let n = o.field(k).map_or(0, |v| v.split_whitespace().count());
                    if n != 5 {
                        return Err(format!("{k}: {n} times"));
                    }
                }
                Ok(())
            }),
            at_most("waited_for_release_ms", 10_000.0),
        ],
    );
    // Stop is not undo: a container removed while isold is stopped keeps its claim's effects
    // until isold starts again, synchronizes with the runtime, and gives them back.
    s.step_with_timeout(
        "removed_while_stopped",
        &format!(
            "{PRE}{FUNCS}{NRI_FUNCS}pod=$(cri pod rt2 --annotation isold.io/isolate=true --annotation cpu-c-states.crio.io=disable | val pod)\n\
             ctr=$(cri container $pod work --cpuset 3 | tee /tmp/ctr.out | val container); cat /tmp/ctr.out\n\
             echo claims=$(claims)\n\
             systemctl stop isold; echo stop_rc=$?\n\
             echo pm3_stopped=$(pm3)\n\
             cri stop $ctr >/dev/null; cri rm $ctr >/dev/null; cri stoppod $pod >/dev/null; cri rmpod $pod; echo gone_rc=$?\n\
             systemctl start isold; echo start_rc=$?\n\
             registered 1\n\
             no_claims\n\
             echo pm3_after=$(pm3)\n\
             isold_snapshot /tmp/s5; snapshot_diff /tmp/s0 /tmp/s5"
        ),
        Duration::from_secs(240),
        vec![
            claims_has("CPUs 3, pid ", ": isolated 3, PM QoS n/a"),
            Expect::field("stop_rc", "0"),
            Expect::field("pm3_stopped", "n/a"),
            Expect::field("gone_rc", "0"),
            Expect::field("start_rc", "0"),
            Expect::field("registered_rc", "0"),
            at_most("waited_for_release_ms", 10_000.0),
            Expect::field("pm3_after", "0"),
            Expect::field("differences", "0"),
        ],
    );
    // kill -9 of the runtime (its main process: `systemctl kill` would kill the shims in its
    // cgroup too, and the containers with them) while a claim holds: the container lives on
    // under its shim, the plugin registers again and the claim stays. kill -9 of isold, and the container removed
    // before or after systemd has started it again: either the removal or the runtime's
    // Synchronize gives CPU 3 back.
    s.step_with_timeout(
        "kills",
        &format!(
            "{PRE}{FUNCS}{NRI_FUNCS}pod=$(cri pod rt3 --annotation isold.io/isolate=true --annotation cpu-c-states.crio.io=disable | val pod)\n\
             ctr=$(cri container $pod work --cpuset 3 | tee /tmp/ctr.out | val container); cat /tmp/ctr.out\n\
             echo claims_before=$(claims)\n\
             c0=$(connections)\n\
             kill -9 $(systemctl show -p MainPID --value containerd); echo kill_rc=$?\n\
             registered $((c0 + 1))\n\
             journalctl -u isold -o cat | grep -iE 'claim|releas|NRI' | tail -8\n\
             echo claims=$(claims)\n\
             echo pm3_runtime_killed=$(pm3)\n\
             kill -9 $(systemctl show -p MainPID --value isold); echo kill_isold_rc=$?\n\
             stop_with_retries $ctr\n\
             cri rm $ctr >/dev/null; cri stoppod $pod >/dev/null; cri rmpod $pod; echo gone_rc=$?\n\
             wait_for 30 systemctl -q is-active isold; echo active=$(systemctl is-active isold)\n\
             no_claims\n\
             echo pm3_after=$(pm3)\n\
             isold_snapshot /tmp/s6; snapshot_diff /tmp/s0 /tmp/s6"
        ),
        Duration::from_secs(240),
        vec![
            Expect::field("kill_rc", "0"),
            Expect::field("stop_rc", "0"),
            Expect::field("registered_rc", "0"),
            claims_has("CPUs 3, pid ", ": isolated 3, PM QoS n/a"),
            Expect::field("pm3_runtime_killed", "n/a"),
            Expect::field("kill_isold_rc", "0"),
            Expect::field("gone_rc", "0"),
            Expect::field("active", "active"),
            at_most("waited_for_release_ms", 10_000.0),
            Expect::field("pm3_after", "0"),
            Expect::field("differences", "0"),
        ],
    );
    // The last step: isold dials containerd through isol-nri-tap, which records the trunk
    // both ways, for one claimed container's life and a refused creation.
    s.step_with_timeout(
        "record",
        &format!(
            "{PRE}{FUNCS}{NRI_FUNCS}mkdir -p {TAP_DIR}\n\
             isol-nri-tap /run/nri-tap.sock /var/run/nri/nri.sock {TAP_DIR} >/tmp/tap.log 2>&1 &\n\
             wait_for 10 test -S /run/nri-tap.sock\n\
             echo 'nri_socket = \"/run/nri-tap.sock\"' >>/etc/isold/isold.toml\n\
             systemctl restart isold; echo restart_rc=$?\n\
             registered 1\n\
             pod=$(cri pod rec --annotation isold.io/isolate=true --annotation cpu-c-states.crio.io=disable | val pod)\n\
             ctr=$(cri container $pod work --cpuset 3 | tee /tmp/ctr.out | val container); cat /tmp/ctr.out\n\
             echo claims=$(claims)\n\
             cri stop $ctr >/dev/null; cri rm $ctr >/dev/null\n\
             cri container $pod hk --cpuset 0-1 >/tmp/hk.out; echo hk_rc=$?\n\
             cri stoppod $pod >/dev/null; cri rmpod $pod; echo gone_rc=$?\n\
             no_claims\n\
             echo dropped=$(journalctl -u containerd -o cat | grep -ciE 'closing plugin.*(deadline|timeout)')\n\
             journalctl -u containerd -o cat | grep -i 'closing plugin' | tail -3\n\
             systemctl stop isold\n\
             sleep 1\n\
             ls -l {TAP_DIR}; cat /tmp/tap.log\n\
             capture {TAP_DIR}/1-runtime.bin {TAP_DIR}/1-plugin.bin"
        ),
        Duration::from_secs(240),
        vec![
            Expect::field("restart_rc", "0"),
            Expect::field("registered_rc", "0"),
            claims_has("CPUs 3, pid ", ": isolated 3, PM QoS n/a"),
            Expect::field("hk_rc", "1"),
            Expect::field("gone_rc", "0"),
            at_most("waited_for_release_ms", 10_000.0),
            // Through the whole scenario, containerd never dropped the plugin for a late
            // answer.
            Expect::field("dropped", "0"),
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
        "RunPodSandbox {} s; CreateContainer and StartContainer with a claim {} s; \
         containerd restart to the plugin registered again {} s; \
         CreateContainer and StartContainer with a claim: {} s, without: {} s",
        f("claim", "pod_s"),
        f("claim", "container_s"),
        f("containerd_restart", "reconnect_s"),
        f("latency", "claimed_s"),
        f("latency", "plain_s"),
    );
    let recorded = |side: &str| {
        o.files
            .get("record")
            .and_then(|f| f.get(&format!("{TAP_DIR}/1-{side}.bin")))
            .cloned()
            .unwrap_or_else(|| panic!("the record step captured no {side} stream"))
    };
    let (runtime, plugin) = (recorded("runtime"), recorded("plugin"));
    check_recording(&runtime, &plugin).unwrap_or_else(|e| panic!("the recorded NRI trunk: {e}"));
    if std::env::var("TASKISOL_UPDATE_FIXTURES").is_ok_and(|v| v == "1") {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../libtaskisol/tests/fixtures/nri/containerd-2.1.9");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("runtime.bin"), &runtime).unwrap();
        std::fs::write(dir.join("plugin.bin"), &plugin).unwrap();
        eprintln!("NRI recording written to {}", dir.display());
    }
    o.assert_ok();
}

/// Where isol-nri-tap writes in the guest.
const TAP_DIR: &str = "/tmp/nri-tap";

/// What a real containerd and isold said to each other, read with isold's own codec: the
/// runtime's Configure (containerd 2.1.9, 2 s per request), a Synchronize, the claimed
/// container's CreateContainer (its name, cpuset 3 and the pod's annotation), its
/// StartContainer with a process and its RemoveContainer; isold's registration as `isold`
/// 90, its refusal of the CPUs 0-1 container as FAILED_PRECONDITION, and no frame of isold's
/// over 4096 bytes.
fn check_recording(runtime: &[u8], plugin: &[u8]) -> Result<(), String> {
    use libtaskisol::nri::api::{Configure, Event, PodContainer};
    use libtaskisol::nri::mux::{Demux, MAX_SENT_PAYLOAD, PLUGIN_CONN, RUNTIME_CONN};
    use libtaskisol::nri::read_trunk;
    use libtaskisol::nri::ttrpc::{code, Request, Response, REQUEST, RESPONSE};

    let from_runtime = read_trunk(runtime).map_err(|e| format!("runtime side: {e}"))?;
    let from_plugin = read_trunk(plugin).map_err(|e| format!("plugin side: {e}"))?;
    let calls: Vec<Request> = from_runtime
        .iter()
        .filter(|(c, m)| *c == PLUGIN_CONN && m.kind == REQUEST)
        .map(|(_, m)| Request::decode(&m.data))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("a runtime call: {e}"))?;
    let methods: Vec<&str> = calls.iter().map(|r| r.method.as_str()).collect();
    for m in ["Configure", "Synchronize", "CreateContainer", "StateChange"] {
        if !methods.contains(&m) {
            return Err(format!("no {m} among the runtime's calls {methods:?}"));
        }
    }
    let conf = Configure::decode(&calls[0].payload).map_err(|e| format!("Configure: {e}"))?;
    if methods[0] != "Configure"
        || conf.runtime_name != "containerd"
        || !conf.runtime_version.starts_with("2.1.9")
        || conf.request_timeout != 2000
    {
        return Err(format!("first call {} {conf:?}", methods[0]));
    }
    let creations: Vec<PodContainer> = calls
        .iter()
        .filter(|r| r.method == "CreateContainer")
        .map(|r| PodContainer::decode_request(&r.payload))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("CreateContainer: {e}"))?;
    let work = creations
        .iter()
        .filter_map(|pc| pc.container.as_ref().map(|c| (pc, c)))
        .find(|(_, c)| c.name == "work")
        .ok_or(format!(
            "no CreateContainer of 'work' among {}",
            creations.len()
        ))?;
    if work.1.cpus != "3"
        || work
            .0
            .pod
            .annotations
            .get("isold.io/isolate")
            .map(String::as_str)
            != Some("true")
    {
        return Err(format!("CreateContainer of work: {:?}", work));
    }
    let events: Vec<PodContainer> = calls
        .iter()
        .filter(|r| r.method == "StateChange")
        .map(|r| PodContainer::decode_event(&r.payload))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("StateChange: {e}"))?;
    let of_work = |ev: Event| {
        events.iter().find(|pc| {
            pc.event == Some(ev) && pc.container.as_ref().is_some_and(|c| c.id == work.1.id)
        })
    };
    match of_work(Event::StartContainer).and_then(|pc| pc.container.as_ref()) {
        Some(c) if c.pid > 0 => {}
        other => return Err(format!("StartContainer of work: {other:?}")),
    }
    if of_work(Event::RemoveContainer).is_none() {
        return Err("no RemoveContainer of work".into());
    }

    let register = from_plugin
        .iter()
        .find(|(c, m)| *c == RUNTIME_CONN && m.kind == REQUEST)
        .map(|(_, m)| Request::decode(&m.data))
        .ok_or("isold sent no call")?
        .map_err(|e| format!("isold's first call: {e}"))?;
    if register.method != "RegisterPlugin"
        || !register.payload.windows(5).any(|w| w == b"isold")
        || !register.payload.windows(2).any(|w| w == b"90")
    {
        return Err(format!("isold's first call: {register:?}"));
    }
    let refusals = from_plugin
        .iter()
        .filter(|(c, m)| *c == PLUGIN_CONN && m.kind == RESPONSE)
        .filter_map(|(_, m)| Response::decode(&m.data).ok())
        .filter(|r| {
            r.code == code::FAILED_PRECONDITION && r.message.contains("isold: claim refused")
        })
        .count();
    if refusals != 1 {
        return Err(format!("{refusals} refusals in isold's answers, not 1"));
    }
    let mut d = Demux::default();
    d.push(plugin);
    while let Some((_, payload)) = d.next_frame().map_err(|e| e.to_string())? {
        if payload.len() > MAX_SENT_PAYLOAD {
            return Err(format!("isold sent a frame of {} bytes", payload.len()));
        }
    }
    Ok(())
}
