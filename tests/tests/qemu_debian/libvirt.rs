//! isold.service on a KVM host: the Debian root of `scripts/setup-debroot libvirt` (systemd,
//! libvirtd, QEMU) booted with Debian's 6.12-rt without isolation arguments,
//! `isolated_cpus = "2-3"`, the service running, and libvirt domains whose vCPUs are pinned
//! onto the isolated CPUs (`<vcpupin>`). QEMU runs them under TCG inside the TCG guest: they
//! only have to run, never to boot anything.
//!
//! - `vm`: `<vcpupin>` 2 and 3, `<emulatorpin>` 0-1 (realtime-virtual-host's shape): 20
//!   start/destroy cycles, each vCPU thread on its pin and every other thread of QEMU on 0-1,
//!   checked until settled and again a second later;
//! - `vm-wide`: the same pins without `<emulatorpin>`, so that QEMU and each vCPU thread start
//!   on every CPU and libvirt pins the vCPUs while isold narrows what is wide: 10 cycles, the
//!   same checks (the emulator's threads narrowed by isold);
//! - with `vm` running and the service stopped, `cgroup_partition` is refused naming QEMU
//!   (threads on both sides), and with `vm-in` (everything on 2-3) running it is refused naming
//!   the domain's systemd scope; the domains keep their pins and the cgroups are unchanged.
//!
//! Built only with `--features qemu` (see docs/TESTING.md).

use std::time::Duration;

use taskisol_tests::qemu::{run, Expect, Scenario, StepOutput};

use super::{PRE, UNIT};

/// A domain of two vCPUs pinned onto `pins`, with an `<emulatorpin>` if given: 64 MiB, no
/// disk, no network, a pty console, no balloon.
fn domain(name: &str, emulatorpin: Option<&str>, pins: [&str; 2]) -> Vec<u8> {
    let emulator = emulatorpin.map_or_else(String::new, |c| {
        format!("    <emulatorpin cpuset='{c}'/>\n")
    });
    format!(
        "<domain type='qemu'>
  <name>{name}</name>
  <memory unit='MiB'>64</memory>
  <vcpu placement='static'>2</vcpu>
  <cputune>
    <vcpupin vcpu='0' cpuset='{}'/>
    <vcpupin vcpu='1' cpuset='{}'/>
{emulator}  </cputune>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <console type='pty'/>
    <memballoon model='none'/>
  </devices>
</domain>
",
        pins[0], pins[1]
    )
    .into_bytes()
}

/// Shell functions for the cycles. `vm_threads NAME OTHERS`: prints `ok` when QEMU of domain
/// NAME has its two vCPU threads on 2 and 3 and every other thread on OTHERS, else what is
/// wrong (`tid(comm)=cpus`). `cycles NAME N OTHERS`: N start/destroy cycles, each waiting up
/// to 60 s for `ok`, checking again a second later; prints one `cycle=` line per cycle
/// (start to settled in ms, virsh start alone in ms) and `lost=`, the checks that found a
/// vCPU thread off its pin once settled.
const FUNCS: &str = r#"
now_ms() { read -r up _ </proc/uptime; echo $(( ${up%.*}${up#*.} * 10 )); }
settle() {
    n=0
    while [ "$(vm_threads $1 $2)" != ok ] && [ $n -lt 300 ]; do
        /usr/bin/busybox usleep 200000; n=$((n + 1))
    done
}
vm_threads() {
    pid=$(cat /run/libvirt/qemu/$1.pid 2>/dev/null) || { echo "no pid file"; return; }
    bad=""; vcpus=0
    for t in /proc/$pid/task/*; do
        comm=$(cat $t/comm 2>/dev/null) || continue
        aff=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' $t/status 2>/dev/null)
        case "$comm" in
        "CPU 0/TCG") want=2; vcpus=$((vcpus + 1)) ;;
        "CPU 1/TCG") want=3; vcpus=$((vcpus + 1)) ;;
        *) want=$2 ;;
        esac
        [ "$aff" = "$want" ] || bad="$bad ${t##*/}($comm)=$aff"
    done
    [ "$vcpus" = 2 ] || bad="$bad vcpus=$vcpus"
    if [ -z "$bad" ]; then echo ok; else echo "$bad"; fi
}
cycles() {
    lost=0; i=1
    while [ $i -le $2 ]; do
        t0=$(now_ms)
        virsh -q start $1 >/tmp/virsh.out 2>&1 || { echo "start_failed=$i $(cat /tmp/virsh.out)"; return; }
        t1=$(now_ms)
        n=0; state=$(vm_threads $1 $3)
        while [ "$state" != ok ] && [ $n -lt 600 ]; do
            /usr/bin/busybox usleep 100000; n=$((n + 1)); state=$(vm_threads $1 $3)
        done
        t2=$(now_ms)
        [ "$state" = ok ] || echo "unsettled=$i $state"
        sleep 1
        again=$(vm_threads $1 $3)
        [ "$again" = ok ] || { lost=$((lost + 1)); echo "loss: cycle $i:$again"; }
        echo "cycle=$i settled_ms=$((t2 - t0)) start_ms=$((t1 - t0))"
        virsh -q destroy $1 >/dev/null 2>&1 || echo "destroy_failed=$i"
        i=$((i + 1))
    done
    echo "lost=$lost"
}
# Tasks isold corrected since it started (the key appears with the first one).
tasks_fixed() { v=$(isold status --json | tr -d ' \n' | grep -o '"tasks":[0-9]*' | cut -d: -f2); echo ${v:-0}; }
"#;

/// The figures of a `cycles` run: (cycles, median and max start-to-settled ms).
fn settled(o: &StepOutput) -> (usize, u64, u64) {
    let mut ms: Vec<u64> = o
        .stdout
        .lines()
        .filter(|l| l.starts_with("cycle="))
        .filter_map(|l| {
            l.split("settled_ms=")
                .nth(1)?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    ms.sort_unstable();
    let median = ms.get(ms.len() / 2).copied().unwrap_or(0);
    (ms.len(), median, ms.last().copied().unwrap_or(0))
}

fn cycles_step(s: &mut Scenario, step: &str, vm: &str, n: u32, others: &str) {
    s.step_with_timeout(
        step,
        &format!(
            "{PRE}{FUNCS}echo fixed_before=$(tasks_fixed)\n\
             cycles {vm} {n} {others}\n\
             echo fixed_after=$(tasks_fixed)\n\
             isold verify >/tmp/verify.out; echo verify_rc=$?"
        ),
        Duration::from_secs(60 + 45 * u64::from(n)),
        vec![
            Expect::field("lost", "0"),
            Expect::output_lacks("unsettled="),
            Expect::output_lacks("start_failed="),
            Expect::output_lacks("destroy_failed="),
            Expect::field("verify_rc", "0"),
            Expect::that(
                &format!("{n} cycles"),
                move |o: &StepOutput| match settled(o) {
                    (c, _, _) if c == n as usize => Ok(()),
                    (c, _, _) => Err(format!("{c} cycles")),
                },
            ),
        ],
    );
}

#[test]
fn rt612_isold_service_keeps_libvirt_vcpu_pins() {
    let mut s = Scenario::debian_libvirt("rt612_isold_libvirt", "");
    s.file("/etc/systemd/system/isold.service", 0o644, UNIT);
    s.file(
        "/etc/taskisol/vm.xml",
        0o644,
        &domain("vm", Some("0-1"), ["2", "3"]),
    );
    s.file(
        "/etc/taskisol/vm-wide.xml",
        0o644,
        &domain("vm-wide", None, ["2", "3"]),
    );
    s.file(
        "/etc/taskisol/vm-in.xml",
        0o644,
        &domain("vm-in", Some("2-3"), ["2", "3"]),
    );
    // libvirtd answers (socket activation) and knows QEMU: the first connection probes the
    // emulator's capabilities, slow under TCG; then the three domains are defined.
    s.step_with_timeout(
        "libvirt_ready",
        &format!(
            "{PRE}mkdir -p /etc/isold\nprintf 'isolated_cpus = \"2-3\"\\n' >/etc/isold/isold.toml\n\
             virsh -q version >/tmp/version.out 2>&1; echo version_rc=$?; cat /tmp/version.out\n\
             for d in vm vm-wide vm-in; do virsh -q define /etc/taskisol/$d.xml >/dev/null; echo define_$d=$?; done\n\
             virsh -q list --all --name | sort | tr '\\n' ' ' | sed 's/^/domains=/'; echo"
        ),
        Duration::from_secs(300),
        vec![
            Expect::field("version_rc", "0"),
            Expect::field("define_vm", "0"),
            Expect::field("define_vm-wide", "0"),
            Expect::field("define_vm-in", "0"),
            Expect::field("domains", "vm vm-in vm-wide"),
        ],
    );
    s.step_with_timeout(
        "start",
        &format!(
            "{PRE}systemctl start isold; echo start_rc=$?\necho active=$(systemctl is-active isold)"
        ),
        Duration::from_secs(120),
        vec![
            Expect::field("start_rc", "0"),
            Expect::field("active", "active"),
        ],
    );
    cycles_step(&mut s, "pinned_domain_20_cycles", "vm", 20, "0-1");
    cycles_step(&mut s, "wide_emulator_10_cycles", "vm-wide", 10, "0-1");
    // The partition with the service stopped (isold restore needs it stopped): a running
    // domain with threads on both sides is refused naming QEMU; one whose threads are all on
    // 2-3 is a workload in its systemd scope, refused naming the scope. Nothing changes.
    s.step_with_timeout(
        "partition_refuses_a_running_domain",
        &format!(
            "{PRE}{FUNCS}systemctl stop isold; echo stop_rc=$?\n\
             cgroups() {{ cat /sys/fs/cgroup/cgroup.subtree_control; ls -d /sys/fs/cgroup/isolated 2>/dev/null; }}\n\
             cgroups >/tmp/cg.before\n\
             printf 'isolated_cpus = \"2-3\"\\n[items]\\ncgroup_partition = true\\n' >/tmp/part.toml\n\
             virsh -q start vm >/dev/null; echo start_vm=$?\n\
             settle vm 0-1; echo vm_before=$(vm_threads vm 0-1)\n\
             isold --config /tmp/part.toml apply >/tmp/a.out; echo split_rc=$?\n\
             grep -o 'qemu-system-x86: 2 threads inside' /tmp/a.out | head -1 | sed 's/^/split=/'\n\
             echo vm_after=$(vm_threads vm 0-1)\n\
             virsh -q destroy vm >/dev/null\n\
             isold restore >/dev/null; echo restore1_rc=$?\n\
             virsh -q start vm-in >/dev/null; echo start_vm_in=$?\n\
             settle vm-in 2-3; echo vm_in_before=$(vm_threads vm-in 2-3)\n\
             isold --config /tmp/part.toml apply >/tmp/a.out; echo scope_rc=$?\n\
             grep -o 'in machine-qemu[^ ]*[.]scope run in a systemd unit' /tmp/a.out | head -1 | sed 's/^/scope=/'\n\
             grep -c 'AllowedCPUs=2-3' /tmp/a.out | sed 's/^/how=/'\n\
             echo vm_in_after=$(vm_threads vm-in 2-3)\n\
             virsh -q destroy vm-in >/dev/null\n\
             isold restore >/dev/null; echo restore2_rc=$?\n\
             cgroups >/tmp/cg.after\n\
             cmp /tmp/cg.before /tmp/cg.after && echo cgroups=unchanged\n\
             cat /tmp/a.out"
        ),
        Duration::from_secs(300),
        vec![
            Expect::field("stop_rc", "0"),
            Expect::field("start_vm", "0"),
            Expect::field("vm_before", "ok"),
            Expect::field("split_rc", "1"),
            Expect::field("split", "qemu-system-x86: 2 threads inside"),
            Expect::field("vm_after", "ok"),
            Expect::field("restore1_rc", "0"),
            Expect::field("start_vm_in", "0"),
            Expect::field("vm_in_before", "ok"),
            Expect::field("scope_rc", "1"),
            Expect::that("the scope named", |o: &StepOutput| {
                o.field("scope")
                    .filter(|v| v.contains("vm") && v.ends_with("run in a systemd unit"))
                    .map(|_| ())
                    .ok_or_else(|| "no scope line".to_string())
            }),
            Expect::field("how", "1"),
            Expect::field("vm_in_after", "ok"),
            Expect::field("restore2_rc", "0"),
            Expect::field("cgroups", "unchanged"),
        ],
    );
    let o = run(&s).unwrap_or_else(|e| panic!("{e}"));
    for step in ["pinned_domain_20_cycles", "wide_emulator_10_cycles"] {
        if let Some(out) = o.outputs.get(step) {
            let (n, median, max) = settled(out);
            let fixed = |k| out.field(k).and_then(|v| v.parse::<u64>().ok());
            let corrected = match (fixed("fixed_before"), fixed("fixed_after")) {
                (Some(a), Some(b)) => (b - a).to_string(),
                _ => "?".into(),
            };
            eprintln!(
                "{step}: {n} cycles, start to settled median {median} ms, max {max} ms; tasks isold corrected: {corrected}"
            );
        }
    }
    o.assert_ok();
}
