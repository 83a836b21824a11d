//! `isold run` as the systemd service it ships as (dist/isold.service), under a real systemd:
//! the Debian root of scripts/setup-debroot booted with Debian's 6.12-rt or sid's 7.x-rt
//! *without* isolation arguments, `isolated_cpus = "2-3"`, `on_stop = "restore"` (the default, "keep", is in
//! tests/tests/qemu_debian/lifecycle.rs with the restarts and reboots). Start (active only after READY=1), wide tasks narrowed
//! as they exec, drift put back, a hot-plugged NIC's IRQs moved, reload, stop with a full
//! snapshot compared, and kill -9 followed by start and stop. Built only with
//! `--features qemu` (see docs/TESTING.md).

use std::time::Duration;

use taskisol_tests::qemu::{hotplug_virtio_net, run, Expect, KernelRole, Scenario, StepOutput};

use super::{at_least, at_most, PRE, UNIT};

/// The checks of the service's start: it is active, said READY=1 with its STATUS line only
/// after applying, and `isold status` describes it.
fn start_checks(s: &mut Scenario, step: &str) {
    s.step_with_timeout(
        step,
        &format!(
            "{PRE}systemctl start isold; echo start_rc=$?\n\
             echo active=$(systemctl is-active isold)\n\
             echo status_text=$(systemctl show -p StatusText --value isold)\n\
             echo main_pid=$(systemctl show -p MainPID --value isold)\n\
             isold status; echo status_rc=$?"
        ),
        Duration::from_secs(120),
        vec![
            Expect::field("start_rc", "0"),
            Expect::field("active", "active"),
            Expect::field("status_text", "isolating CPUs 2-3; tasks: proc connector"),
            Expect::field("status_rc", "0"),
            Expect::stdout_has("isold run: running (pid "),
            Expect::stdout_has("tasks: proc connector; devices: uevents"),
            Expect::stdout_has("holding /dev/cpu_dma_latency at 3 us"),
        ],
    );
}

/// The step of `[metrics]` under the unit: the journal's lines of this start counted (the
/// cursor of the last entry before it), then the drop-in of isold(8), METRICS.
const METRICS_UNIT: &str = r#"printf 'isolated_cpus = "2-3"\non_stop = "restore"\n[metrics]\nlisten = "127.0.0.1:9645"\ntextfile = "/var/lib/prometheus/node-exporter/isold.prom"\ninterval = 1\n' >/etc/isold/isold.toml
mkdir -p /var/lib/prometheus/node-exporter
cursor=$(journalctl -u isold -n 1 -o export --no-pager | sed -n 's/^__CURSOR=//p')
systemctl start isold; echo start_rc=$?
sleep 3
journalctl -u isold --after-cursor="$cursor" --no-pager -o cat >/tmp/metrics.journal
grep -E 'metrics|cannot write' /tmp/metrics.journal
echo refused_listen=$(grep -c 'cannot listen on 127.0.0.1:9645 for metrics: Address family not supported' /tmp/metrics.journal)
echo refused_textfile=$(grep -c 'cannot write /var/lib/prometheus/node-exporter/isold.prom: Read-only file system' /tmp/metrics.journal)
echo hinted=$(grep -c 'needs the drop-in of isold(8), METRICS' /tmp/metrics.journal)
mkdir -p /etc/systemd/system/isold.service.d
printf '[Service]\nRestrictAddressFamilies=AF_INET AF_INET6\nIPAddressAllow=localhost\nReadWritePaths=-/var/lib/prometheus/node-exporter\n' >/etc/systemd/system/isold.service.d/metrics.conf
systemctl daemon-reload
systemctl restart isold; echo restart_rc=$?
n=0; while [ ! -s /var/lib/prometheus/node-exporter/isold.prom ] && [ $n -lt 50 ]; do /usr/bin/busybox usleep 200000; n=$((n + 1)); done
timeout 10 /usr/bin/busybox wget -qO /tmp/metrics http://127.0.0.1:9645/metrics; echo wget_rc=$?
echo holds=$(awk '$1 == "isold_policy_holds" { print $2 }' /tmp/metrics)
echo textfile_holds=$(awk '$1 == "isold_policy_holds" { print $2 }' /var/lib/prometheus/node-exporter/isold.prom)
systemctl stop isold; echo stop_rc=$?
rm -r /etc/systemd/system/isold.service.d; systemctl daemon-reload
"#;

#[test]
fn rt612_isold_service_keeps_cpus_isolated_and_restores_on_stop() {
    isold_service_keeps_cpus_isolated_and_restores_on_stop(KernelRole::Rt612);
}

#[test]
fn rt7_isold_service_keeps_cpus_isolated_and_restores_on_stop() {
    isold_service_keeps_cpus_isolated_and_restores_on_stop(KernelRole::Rt7);
}

fn isold_service_keeps_cpus_isolated_and_restores_on_stop(role: KernelRole) {
    let mut s = Scenario::debian(&format!("{}_isold_service", role.as_str()), "");
    s.role = role;
    s.binaries.push("isol-reaction".into());
    s.binaries.push("isol-drift".into());
    s.binaries.push("isol-pinner".into());
    s.file("/etc/systemd/system/isold.service", 0o644, UNIT);
    s.on_request("hotplug-net", hotplug_virtio_net("hotnet"));
    s.step_with_timeout(
        "setup",
        "mkdir -p /etc/isold\nprintf 'isolated_cpus = \"2-3\"\\non_stop = \"restore\"\\n[kthread_priority]\\n\"irq/*-virtio*\" = \"fifo:60\"\\n' >/etc/isold/isold.toml\n\
         i=0; while [ $i -lt 20 ]; do setsid taskset -c 0-3 sleep 100000 </dev/null >/dev/null 2>&1 & i=$((i+1)); done\n\
         setsid taskset -c 3 sleep 100000 </dev/null >/dev/null 2>&1 &\necho $! >/tmp/workload.pid\n\
         sleep 1\nisold_snapshot /tmp/snap.before; echo snapshot_lines=$(wc -l </tmp/snap.before)\n\
         echo stat_interval=$(cat /proc/sys/vm/stat_interval)\n\
         echo timer_migration=$(cat /proc/sys/kernel/timer_migration)",
        Duration::from_secs(120),
        vec![
            Expect::exit(0),
            at_least("snapshot_lines", 100.0),
            Expect::field("stat_interval", "1"),
            Expect::field("timer_migration", "1"),
        ],
    );
    start_checks(&mut s, "start");
    s.step(
        "ready_after_apply",
        // The daemon's "isolating CPUs" line (logged after the apply, before READY=1) comes
        // before systemd's "Started" line.
        "journalctl -u isold --no-pager -o cat | grep -n -E 'isolating CPUs|Started ' | head -n 2",
        vec![Expect::that(
            "the apply logged before the unit became active",
            |o: &StepOutput| {
                let l: Vec<&str> = o.stdout.lines().collect();
                match (l.first(), l.get(1)) {
                    (Some(a), Some(b))
                        if a.contains("isolating CPUs 2-3") && b.contains("Started ") =>
                    {
                        Ok(())
                    }
                    _ => Err(format!("journal lines {l:?}")),
                }
            },
        )],
    );
    s.step(
        "applied_values",
        // /dev/cpu_dma_latency reads back the CPU latency limit in force (s32).
        "echo dma_latency=$(od -An -td4 /dev/cpu_dma_latency | tr -d ' ')\n\
         echo stat_interval=$(cat /proc/sys/vm/stat_interval)\n\
         echo workload=$(grep Cpus_allowed_list /proc/$(cat /tmp/workload.pid)/status | cut -f2)\n\
         echo irq4=$(cat /proc/irq/4/smp_affinity_list)",
        vec![
            Expect::field("dma_latency", "3"),
            Expect::field("stat_interval", "10"),
            Expect::field("workload", "3"),
            Expect::field("irq4", "0-1"),
        ],
    );
    // The issue's bound is 49 of 50 within 20 ms of the exec. Under TCG (one host thread
    // for four vCPUs, on a shared machine whose own host steals time) 27-48 of 50 made it
    // from run to run, median 7-20 ms: the guest runs 50-100 times slower than a real CPU,
    // and isold's own work is 1.6 ms of guest time of that (-v logs it). Ten tasks go first
    // uncounted: the first runs of each code path are translated by TCG. What is asserted is
    // what holds on any host, however loaded: every task narrowed within 1 s of its exec (a
    // tenth of the 10 s task scan), and isold's own count of tasks it narrowed in answer to
    // their process event covers them. The times are printed, not asserted: scripts/
    // bench-daemon measures them, docs/TESTING.md and BENCHMARKS.md have the figures.
    s.step_with_timeout(
        "wide_tasks_narrowed_at_exec",
        &format!(
            "{PRE}isol-reaction 50 0-3 2-3 1000 10 || exit 1\nsleep 0.5\n\
             isold status --json | tr -d ' \\n' >/tmp/st.json\n\
             echo tasks_corrected=$(grep -o '\"tasks\":[0-9]*' /tmp/st.json | cut -d: -f2)\n\
             for k in count median_ms p99_ms max_ms; do echo \"daemon_$k=$(grep -o \"\\\"$k\\\":[0-9.e-]*\" /tmp/st.json | cut -d: -f2)\"; done"
        ),
        Duration::from_secs(180),
        vec![
            Expect::exit(0),
            Expect::field("narrowed", "50"),
            // isold's own count, kept in its status, of the tasks it narrowed in answer to a
            // process event (a task found by the scan is not in it). Of the 60 tasks some
            // are caught at their fork event, between their widening and their exec, and a
            // few were seen narrow by then (56-60 counted in the runs): at least the 50
            // measured.
            at_least("daemon_count", 50.0),
        ],
    );
    // Ten times, at random phases of the check: the sysctl reset and IRQ 4 moved onto CPU 3,
    // both put back within the interval (1 s), each correction counted.
    s.step_with_timeout(
        "drift_put_back_within_the_interval",
        &format!(
            "{PRE}isol-drift 10 3000 /proc/sys/vm/stat_interval=1 /proc/irq/4/smp_affinity_list=3\n\
             echo stat_interval=$(cat /proc/sys/vm/stat_interval)\n\
             echo irq4=$(cat /proc/irq/4/smp_affinity_list)\nsleep 0.5\nisold status"
        ),
        Duration::from_secs(120),
        vec![
            Expect::field("put_back", "10"),
            at_most("max_ms", 1000.0),
            Expect::field("stat_interval", "10"),
            Expect::field("irq4", "0-1"),
            Expect::stdout_has("irq_affinity 10"),
            Expect::stdout_has("sysctl 10"),
        ],
    );
    // Threads pinned into the isolated CPUs by their creator 0-20 ms after it made them wide
    // (DPDK's lcores, QEMU's vCPUs): isold narrows the ones still wide and never undoes a
    // pin, also one made while it was narrowing the thread. Three runs of 200 threads.
    s.step_with_timeout(
        "self_pinning_threads_keep_their_pins",
        &format!(
            "{PRE}lost=0; threads=0\n\
             echo tasks_before=$(isold status --json | tr -d ' ' | grep -o '\"tasks\":[0-9]*' | cut -d: -f2)\n\
             for run in 1 2 3; do\n\
               taskset -c 0-3 isol-pinner stress 200 1500 20 2 3 >/tmp/pin.out; echo run_rc=$?\n\
               grep '^loss: ' /tmp/pin.out | head -n 3\n\
               lost=$((lost + $(sed -n 's/^lost=//p' /tmp/pin.out)))\n\
               threads=$((threads + $(sed -n 's/^threads=//p' /tmp/pin.out)))\n\
             done\n\
             echo threads=$threads\necho lost=$lost\n\
             echo tasks_after=$(isold status --json | tr -d ' ' | grep -o '\"tasks\":[0-9]*' | cut -d: -f2)"
        ),
        Duration::from_secs(240),
        vec![
            Expect::field("threads", "600"),
            Expect::field("lost", "0"),
            Expect::output_lacks("run_rc=1"),
        ],
    );
    s.step_with_timeout(
        "hotplugged_nic_irqs_on_housekeeping",
        "host_request hotplug-net\n\
         wait_for 60 grep -q 'virtio.*input' /proc/interrupts || echo timeout=yes\nsleep 2\n\
         for i in $(grep 'virtio.*put' /proc/interrupts | cut -d: -f1); do echo \"irq$i=$(cat /proc/irq/$i/smp_affinity_list)\"; done\n\
         for d in /proc/[0-9]*; do case $(cat $d/comm) in irq/*-virtio*) echo \"prio $(cat $d/comm) $(sched_of ${d##*/} | tr '\\n' ' ')\";; esac; done",
        Duration::from_secs(120),
        vec![
            Expect::stdout_has("=0-1"),
            // The NIC's IRQ threads (PREEMPT_RT threads every IRQ) are new kthreads: the
            // configuration's rule gives them FIFO 60 (the kernel's default is 50).
            Expect::that("the NIC's IRQ threads at SCHED_FIFO 60", |o: &StepOutput| {
                let prio: Vec<&str> = o.stdout.lines().filter(|l| l.starts_with("prio ")).collect();
                if !prio.is_empty()
                    && prio
                        .iter()
                        .all(|l| l.ends_with("rt_priority=60 policy=1 "))
                {
                    Ok(())
                } else {
                    Err(format!("{prio:?}"))
                }
            }),
            Expect::that("every queue IRQ of the NIC on 0-1", |o: &StepOutput| {
                let bad: Vec<&str> = o
                    .stdout
                    .lines()
                    .filter(|l| l.starts_with("irq") && !l.ends_with("=0-1"))
                    .collect();
                if bad.is_empty() {
                    Ok(())
                } else {
                    Err(format!("{bad:?}"))
                }
            }),
        ],
    );
    s.step(
        "reload_applies_the_changed_file",
        "printf 'isolated_cpus = \"2-3\"\\non_stop = \"restore\"\\n[sysctl]\\n\"vm.stat_interval\" = 20\\n\"kernel.timer_migration\" = false\\n' >/etc/isold/isold.toml\n\
         systemctl reload isold; echo reload_rc=$?\n\
         wait_for 30 sh -c \"isold status | grep -q 'reloads: 1'\"\n\
         echo stat_interval=$(cat /proc/sys/vm/stat_interval)\n\
         echo timer_migration=$(cat /proc/sys/kernel/timer_migration)\n\
         echo active=$(systemctl is-active isold)\nisold status | grep reloads",
        vec![
            Expect::field("reload_rc", "0"),
            Expect::field("stat_interval", "20"),
            // No longer in the policy: back to its original.
            Expect::field("timer_migration", "1"),
            Expect::field("active", "active"),
            Expect::field("reloads", "1"),
        ],
    );
    s.step_with_timeout(
        "stop_restores_every_original",
        // A process isold narrowed at its exec, then pinned by its owner onto CPU 3 (as DPDK
        // pins its main lcore): the stop's restore leaves that pin; everything else is back.
        // Until taskset has run, the forked shell reads the shell's own 0-1: poll only once
        // sleep is exec'd.
        "aff() { sed -n 's/^Cpus_allowed_list:\t//p' /proc/$1/status; }\n\
         setsid taskset -c 0-3 sleep 100000 </dev/null >/dev/null 2>&1 &\np=$!\n\
         m=0; while [ \"$(cat /proc/$p/comm)\" != sleep ] && [ $m -lt 300 ]; do /usr/bin/busybox usleep 10000; m=$((m + 1)); done\n\
         n=0; while [ \"$(aff $p)\" != 0-1 ] && [ $n -lt 300 ]; do /usr/bin/busybox usleep 100000; n=$((n + 1)); done\n\
         echo owner_narrowed=$(aff $p)\necho owner_narrowed_polls=$n\n\
         if [ \"$(aff $p)\" != 0-1 ]; then grep -E '^(Name|Pid|PPid|Cpus_allowed_list):' /proc/$p/status >&2; isold status >&2; journalctl -u isold -n 20 --no-pager -o cat >&2; fi\n\
         taskset -p -c 3 $p >/dev/null; echo owner_pinned=$(aff $p)\n\
         systemctl stop isold; echo stop_rc=$?\n\
         echo owner_after_stop=$(aff $p)\nkill $p; wait $p 2>/dev/null\n\
         echo result=$(systemctl show -p Result --value isold)\n\
         echo exec_status=$(systemctl show -p ExecMainStatus --value isold)\n\
         isold status; echo status_rc=$?\n\
         isold_snapshot /tmp/snap.after\nsnapshot_diff /tmp/snap.before /tmp/snap.after",
        Duration::from_secs(120),
        vec![
            Expect::field("owner_narrowed", "0-1"),
            Expect::field("owner_pinned", "3"),
            Expect::field("owner_after_stop", "3"),
            Expect::field("stop_rc", "0"),
            Expect::field("result", "success"),
            Expect::field("exec_status", "0"),
            Expect::field("status_rc", "3"),
            Expect::field("differences", "0"),
        ],
    );
    start_checks(&mut s, "start_again");
    s.step_with_timeout(
        "kill9_then_start_then_stop_restores_every_original",
        "old=$(systemctl show -p MainPID --value isold)\n\
         systemctl kill -s KILL isold\nsleep 4\nsystemctl start isold\n\
         new=$(systemctl show -p MainPID --value isold)\n\
         echo restarted=$([ \"$new\" != \"$old\" ] && [ \"$new\" != 0 ] && echo yes || echo no)\n\
         echo n_restarts=$(systemctl show -p NRestarts --value isold)\n\
         echo active=$(systemctl is-active isold)\n\
         echo stat_interval_running=$(cat /proc/sys/vm/stat_interval)\n\
         systemctl stop isold; echo stop_rc=$?\n\
         echo state_file=$(ls /run/isold/state.json 2>/dev/null || echo none)\n\
         echo dma_latency=$(od -An -td4 /dev/cpu_dma_latency | tr -d ' ')\n\
         isold_snapshot /tmp/snap.after2\nsnapshot_diff /tmp/snap.before /tmp/snap.after2",
        Duration::from_secs(180),
        vec![
            Expect::field("restarted", "yes"),
            Expect::field("active", "active"),
            Expect::field("stat_interval_running", "20"),
            Expect::field("stop_rc", "0"),
            Expect::field("state_file", "none"),
            Expect::field("dma_latency", "2000000000"),
            Expect::field("differences", "0"),
        ],
    );
    s.step_with_timeout(
        "without_the_connector_tasks_are_found_by_scans",
        // In a network namespace of its own the connector cannot be reached: isold says so
        // once and finds the wide task by its /proc scan.
        &format!(
            "{PRE}unshare -n isold --config /etc/isold/isold.toml --state /tmp/ns/state.json run --task-interval 0.5 2>/tmp/ns.log &
             pid=$!
wait_for 30 test -s /tmp/ns/status.json || echo no_status=1
             setsid taskset -c 0-3 sleep 1000 </dev/null >/dev/null 2>&1 &
w=$!
             wait_for 10 sh -c \"grep -q 'Cpus_allowed_list:.0-1$' /proc/$w/status\" && echo narrowed=yes
             kill -TERM $pid; wait $pid; echo rc=$?
kill $w
             grep -c 'process events connector unavailable' /tmp/ns.log | sed 's/^/warnings=/'"
        ),
        Duration::from_secs(120),
        vec![
            Expect::field("narrowed", "yes"),
            Expect::field("rc", "0"),
            Expect::field("warnings", "1"),
        ],
    );
    // The partition, kept by inotify on its files: made at the start with the workload
    // pinned to CPU 3 moved in; turned into a member by hand five times, an isolated
    // partition again each time at the event; the stop removes it and every value is as
    // before. For this step the service checks what it cannot watch every 60 s (a runtime
    // drop-in, removed after): a partition made again within isol-drift's 3 s came from the
    // inotify event, on any host. (With the watch broken it waits for the periodic check and
    // put_back is 0; the times, 14-63 ms with a first one of up to 137 ms under TCG, are
    // printed, not asserted.)
    s.step_with_timeout(
        "partition_made_again_at_once_and_removed_on_stop",
        &format!(
            "{PRE}printf 'isolated_cpus = \"2-3\"\\non_stop = \"restore\"\\n[items]\\ncgroup_partition = true\\n' >/etc/isold/isold.toml
             mkdir -p /sys/fs/cgroup/rt; echo $(cat /tmp/workload.pid) >/sys/fs/cgroup/rt/cgroup.procs
             mkdir -p /run/systemd/system/isold.service.d
             printf '[Service]\\nExecStart=\\nExecStart=/usr/bin/isold run --interval 60\\n' >/run/systemd/system/isold.service.d/interval.conf
             systemctl daemon-reload
             systemctl start isold; echo start_rc=$?
             echo interval=$(systemctl show -p ExecStart --value isold | grep -o 'interval [0-9]*' | cut -d' ' -f2)
             echo partition=$(cat /sys/fs/cgroup/isolated/cpuset.cpus.partition)
             echo workload_cgroup=$(cat /proc/$(cat /tmp/workload.pid)/cgroup)
             isol-drift 5 3000 /sys/fs/cgroup/isolated/cpuset.cpus.partition=member
             echo partition_after=$(cat /sys/fs/cgroup/isolated/cpuset.cpus.partition)
             echo workload_after=$(grep Cpus_allowed_list /proc/$(cat /tmp/workload.pid)/status | cut -f2)
             sleep 0.5; isold status | grep -o 'cgroup_partition [0-9]*' | sed 's/ /=/'
             journalctl -u isold --no-pager -o cat | grep -c 'corrected isolated partition' | sed 's/^/logged=/'
             systemctl stop isold; echo stop_rc=$?
             rm -r /run/systemd/system/isold.service.d; systemctl daemon-reload
             [ -e /sys/fs/cgroup/isolated ] && echo dir=present || echo dir=absent
             isold_snapshot /tmp/snap.after3\nsnapshot_diff /tmp/snap.before /tmp/snap.after3"
        ),
        Duration::from_secs(180),
        vec![
            Expect::field("start_rc", "0"),
            Expect::field("partition", "isolated"),
            // From the administrator's own cgroup /rt (isold never takes a task out of a
            // systemd unit's).
            Expect::field("workload_cgroup", "0::/isolated"),
            Expect::field("interval", "60"),
            Expect::field("put_back", "5"),
            Expect::field("partition_after", "isolated"),
            Expect::field("workload_after", "3"),
            Expect::field("cgroup_partition", "5"),
            at_least("logged", 5.0),
            Expect::field("stop_rc", "0"),
            Expect::field("dir", "absent"),
            Expect::field("differences", "0"),
        ],
    );
    // The partition never takes what is not its own: a slice systemd manages, a workload in a
    // unit's cgroup, a process with threads on both sides (QEMU's emulator and vCPUs); each
    // refused by isold apply, the cgroups as they were.
    s.step_with_timeout(
        "partition_refuses_slices_units_and_split_processes",
        &format!(
            "{PRE}cgroups() {{ for f in /sys/fs/cgroup/system.slice/cpuset.cpus.partition /sys/fs/cgroup/system.slice/cpuset.cpus; do echo \"$f $(cat $f)\"; done; ls -d /sys/fs/cgroup/isolated 2>/dev/null; }}
             cgroups >/tmp/cg.before
             printf 'isolated_cpus = \"2-3\"\\n[items]\\ncgroup_partition = \"/sys/fs/cgroup/system.slice\"\\n' >/tmp/slice.toml
             isold --config /tmp/slice.toml apply >/tmp/a.out; echo slice_rc=$?
             grep -o 'belongs to systemd (system.slice)' /tmp/a.out | sed 's/^/slice=/'
             isold restore >/dev/null; echo restore1_rc=$?
             printf 'isolated_cpus = \"2-3\"\\n[items]\\ncgroup_partition = true\\n' >/tmp/part.toml
             systemd-run --unit=rtapp --quiet taskset -c 3 sleep 100000; sleep 1
             isold --config /tmp/part.toml apply >/tmp/a.out; echo unit_rc=$?
             grep -o 'in rtapp.service run in a systemd unit' /tmp/a.out | sed 's/^/unit=/'
             grep -c 'AllowedCPUs=2-3' /tmp/a.out | sed 's/^/how=/'
             echo rtapp_cgroup=$(cat /proc/$(systemctl show -p MainPID --value rtapp)/cgroup)
             isold restore >/dev/null; echo restore2_rc=$?
             systemctl stop rtapp
             setsid taskset -c 0-1 isol-pinner split 2 3 >/tmp/split.out 2>&1 </dev/null &
             wait_for 20 grep -q ready /tmp/split.out || echo split_not_ready=1
             isold --config /tmp/part.toml apply >/tmp/a.out; echo split_rc=$?
             grep -o 'isol-pinner: 2 threads inside' /tmp/a.out | sed 's/^/split=/'
             isold restore >/dev/null; echo restore3_rc=$?
             pkill -f 'isol-pinner split'
             cgroups >/tmp/cg.after
             cmp /tmp/cg.before /tmp/cg.after && echo cgroups=unchanged"
        ),
        Duration::from_secs(180),
        vec![
            Expect::field("slice_rc", "1"),
            Expect::field("slice", "belongs to systemd (system.slice)"),
            Expect::field("unit_rc", "1"),
            Expect::field("unit", "in rtapp.service run in a systemd unit"),
            Expect::field("how", "1"),
            Expect::field("rtapp_cgroup", "0::/system.slice/rtapp.service"),
            Expect::field("split_rc", "1"),
            Expect::field("split", "isol-pinner: 2 threads inside"),
            Expect::field("restore1_rc", "0"),
            Expect::field("restore2_rc", "0"),
            Expect::field("restore3_rc", "0"),
            Expect::field("cgroups", "unchanged"),
        ],
    );
    // The workload's IRQ ([irqs] allow): the serial port's IRQ routed to CPU 3 on purpose
    // stays there through the start, two seconds of scans and the stop (which restores the
    // rest), while every other movable IRQ moves to 0-1 and back.
    s.step_with_timeout(
        "allowed_irq_stays_on_its_isolated_cpu",
        &format!(
            "{PRE}printf 'isolated_cpus = \"2-3\"\\non_stop = \"restore\"\\n[irqs]\\nallow = [\"ttyS0\"]\\n' >/etc/isold/isold.toml
             echo 3 >/proc/irq/4/smp_affinity_list
             echo irq1_before=$(cat /proc/irq/1/smp_affinity_list)
             systemctl start isold; echo start_rc=$?
             echo irq4_started=$(cat /proc/irq/4/smp_affinity_list)
             echo irq1_started=$(cat /proc/irq/1/smp_affinity_list)
             sleep 2
             echo irq4_scanned=$(cat /proc/irq/4/smp_affinity_list)
             isold verify >/dev/null; echo verify_rc=$?
             systemctl stop isold; echo stop_rc=$?
             echo irq4_stopped=$(cat /proc/irq/4/smp_affinity_list)
             echo irq1_stopped=$(cat /proc/irq/1/smp_affinity_list)
             echo 0-3 >/proc/irq/4/smp_affinity_list"
        ),
        Duration::from_secs(120),
        vec![
            Expect::field("start_rc", "0"),
            Expect::field("irq4_started", "3"),
            Expect::field("irq1_started", "0-1"),
            Expect::field("irq4_scanned", "3"),
            Expect::field("verify_rc", "0"),
            Expect::field("stop_rc", "0"),
            Expect::field("irq4_stopped", "3"),
            Expect::that("IRQ 1 restored", |o: &StepOutput| {
                match (o.field("irq1_before"), o.field("irq1_stopped")) {
                    (Some(a), Some(b)) if a == b => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }),
        ],
    );
    // A state that survives a cut write: a journal line torn as an append cut short by a full
    // disk leaves it, one more wide task is narrowed after it, and the service restarts with
    // the line set aside and shown by `isold status`; restore is exact. Then a full state
    // directory: apply fails before any change, naming the directory and the errno.
    s.step_with_timeout(
        "torn_journal_line_and_full_state_directory",
        &format!(
            "{PRE}narrowed() {{ [ \"$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/$1/status)\" = 0-1 ]; }}
             printf 'isolated_cpus = \"2-3\"\\n' >/etc/isold/isold.toml
             isold_snapshot /tmp/t0
             systemctl start isold; echo start_rc=$?
             setsid taskset -c 0-3 sleep 100000 </dev/null >/dev/null 2>&1 & w1=$!
             wait_for 10 narrowed $w1 && echo w1=narrowed
             printf '{{\"len\":4242,\"crc32\":\"00' >>/run/isold/state.journal
             setsid taskset -c 0-3 sleep 100000 </dev/null >/dev/null 2>&1 & w2=$!
             wait_for 10 narrowed $w2 && echo w2=narrowed
             systemctl restart isold; echo restart_rc=$?
             echo active=$(systemctl is-active isold)
             echo set_aside=\"$(isold status | grep 'set aside')\"
             [ -s /run/isold/state.journal.bad ] && echo bad=kept
             systemctl stop isold; isold restore >/dev/null; echo restore_rc=$?
             kill $w1 $w2; wait $w1 $w2 2>/dev/null
             isold_snapshot /tmp/t1; snapshot_diff /tmp/t0 /tmp/t1 | sed 's/^/torn_/'
             mount -t tmpfs -o size=64k tmpfs /run/isold
             dd if=/dev/zero of=/run/isold/fill bs=4k count=64 2>/dev/null
             isold apply >/tmp/full.out 2>&1; echo full_rc=$?; cat /tmp/full.out
             isold_snapshot /tmp/t2; snapshot_diff /tmp/t0 /tmp/t2 | sed 's/^/full_/'
             umount /run/isold; isold restore >/dev/null; echo cleanup_rc=$?"
        ),
        Duration::from_secs(180),
        vec![
            Expect::field("start_rc", "0"),
            Expect::field("w1", "narrowed"),
            Expect::field("w2", "narrowed"),
            Expect::field("restart_rc", "0"),
            Expect::field("active", "active"),
            Expect::that("isold status shows the line set aside", |o: &StepOutput| {
                match o.field("set_aside") {
                    Some(l) if l.contains("1 line(s) set aside") => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }),
            Expect::field("bad", "kept"),
            Expect::field("restore_rc", "0"),
            Expect::field("torn_differences", "0"),
            Expect::that("a full state directory fails the apply", |o: &StepOutput| {
                match o.field("full_rc") {
                    Some("0") | None => Err(format!("{:?}", o.field("full_rc"))),
                    Some(_) => Ok(()),
                }
            }),
            Expect::output_has("cannot record the original values in /run/isold"),
            Expect::output_has("No space left on device"),
            Expect::field("full_differences", "0"),
            Expect::field("cleanup_rc", "0"),
        ],
    );
    // The administrator's lines in a file isold edits (issue 48): twenty rounds of a start, a
    // line appended while the daemon watches the file (at a different phase of its check each
    // time), and a stop that restores. Every line stays; isold's own line goes each time.
    if role == KernelRole::Rt612 {
        s.step_with_timeout(
            "administrators_lines_survive_edit_stop_restore",
            "printf 'isolated_cpus = \"2-3\"\\non_stop = \"restore\"\\n' >/etc/isold/isold.toml\n\
             printf '#IRQBALANCE_ONESHOT=\\n#IRQBALANCE_BANNED_CPULIST=\\n' >/etc/default/irqbalance\n\
             lost=0; left=0; i=1\n\
             while [ $i -le 20 ]; do\n\
               systemctl start isold || echo start_failed=$i\n\
               wait_for 10 grep -q '^IRQBALANCE_BANNED_CPULIST=2-3$' /etc/default/irqbalance || echo not_written=$i\n\
               echo \"ADMIN_$i=\\\"--journal\\\"\" >>/etc/default/irqbalance\n\
               /usr/bin/busybox usleep $(( (i % 7) * 300000 ))\n\
               systemctl stop isold\n\
               grep -q \"^ADMIN_$i=\" /etc/default/irqbalance || lost=$((lost + 1))\n\
               grep -q '^IRQBALANCE_BANNED_CPULIST=' /etc/default/irqbalance && left=$((left + 1))\n\
               i=$((i + 1))\n\
             done\n\
             echo lost=$lost; echo left=$left\n\
             echo admin_lines=$(grep -c '^ADMIN_' /etc/default/irqbalance)\n\
             journalctl -u isold --no-pager -o cat | grep -c 'corrected /etc/default/irqbalance' | sed 's/^/corrected=/'\n\
             rm /etc/default/irqbalance\n\
             printf 'isolated_cpus = \"2-3\"\\n' >/etc/isold/isold.toml",
            Duration::from_secs(300),
            vec![
                Expect::output_lacks("start_failed="),
                Expect::output_lacks("not_written="),
                Expect::field("lost", "0"),
                Expect::field("left", "0"),
                Expect::field("admin_lines", "20"),
                Expect::field("corrected", "0"),
            ],
        );
    }
    // `[metrics]` under the shipped unit: without the drop-in of isold(8) the sandbox refuses
    // the listener and the textfile, and the journal says which drop-in opens them; with it,
    // both publish.
    s.step_with_timeout(
        "metrics_under_the_unit_need_its_drop_in",
        &format!("{PRE}{METRICS_UNIT}"),
        Duration::from_secs(180),
        vec![
            Expect::field("start_rc", "0"),
            Expect::field("refused_listen", "1"),
            Expect::field("refused_textfile", "1"),
            Expect::field("hinted", "2"),
            Expect::field("restart_rc", "0"),
            Expect::field("wget_rc", "0"),
            Expect::field("holds", "1"),
            Expect::field("textfile_holds", "1"),
            Expect::field("stop_rc", "0"),
        ],
    );
    // Last: the race itself slows the daemon's answers for a while.
    // The racer (issue 27, item 4): 10,000 threads by default (TASKISOL_RACER_THREADS: the
    // figures in BENCHMARKS.md are of 20,000, which costs the suite 4-7 minutes), 2,000 at a
    // time, each pinning itself into 2-3 at a random moment 0-150 ms after it starts, while
    // isold narrows the ones it finds wide (50 ms after their fork). Pins isold saw change
    // under it are its owner's (counted in `isold status`); what cannot be closed (a pin
    // between isold's last read and its write, the kernel having no compare-and-swap; under
    // TCG a vCPU the host preempts there holds it open for milliseconds: 19-43 of 20,000 here)
    // is bounded at 0.5 %, and the figures printed for BENCHMARKS.md. Then the originals of
    // the exited threads leave the state (every thousand exits, and a minute after the last
    // pass): what is left is the live narrowed threads'.
    let threads: u32 = std::env::var("TASKISOL_RACER_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    s.step_with_timeout(
        "racer",
        &format!(
            "{PRE}field() {{ isold status --json | tr -d ' \\n' | grep -o \"$1\" | grep -o '[0-9]*$'; }}\n\
             printf 'isolated_cpus = \"2-3\"\\non_stop = \"restore\"\\n[metrics]\\ntextfile = \"/run/isold/isold.prom\"\\ninterval = 1\\n' >/etc/isold/isold.toml\n\
             systemctl start isold; echo start_rc=$?\n\
             echo owner_pins_before=$(field '\"owner_pins\":{{\"count\":[0-9]*' || echo 0)\n\
             echo tasks_before=$(field '\"tasks\":[0-9]*')\n\
             taskset -c 0-3 isol-pinner race {threads} 2000 150000 1000 2 3 >/tmp/race.out; echo race_rc=$?\n\
             cat /tmp/race.out\n\
             echo owner_pins_after=$(field '\"owner_pins\":{{\"count\":[0-9]*' || echo 0)\n\
             sleep 2; echo owner_pins_metric=$(sed -n 's/^isold_owner_pins_total \\([0-9]*\\).*/\\1/p' /run/isold/isold.prom)\n\
             echo tasks_after=$(field '\"tasks\":[0-9]*')\n\
             echo active=$(systemctl is-active isold)\n\
             isold status | grep -E \"owner's pin|corrections\"\n\
             cs() {{ cut -d' ' -f1 /proc/uptime | tr -d .; }}\n\
             state_threads() {{ cat /run/isold/state.json /run/isold/state.journal 2>/dev/null | grep -o '\"task:[0-9]*:[0-9]*\"' | sort -u | wc -l; }}\n\
             echo state_threads_after_race=$(state_threads)\n\
             t0=$(cs); while [ $(state_threads) -ge 300 ] && [ $(( $(cs) - t0 )) -lt 12000 ]; do /usr/bin/busybox usleep 500000; done\n\
             echo state_threads_settled=$(state_threads)\necho state_settled_after_ms=$(( ($(cs) - t0) * 10 ))\n\
             journalctl -u isold --no-pager -o cat | grep -c 'that are gone dropped' | sed 's/^/forget_passes=/'\n\
             t0=$(cs); setsid taskset -c 0-3 sleep 100000 </dev/null >/dev/null 2>&1 &\np=$!\n\
             while [ \"$(sed -n 's/^Cpus_allowed_list:\\t//p' /proc/$p/status)\" != 0-1 ] && [ $(( $(cs) - t0 )) -lt 12000 ]; do /usr/bin/busybox usleep 20000; done\n\
             echo narrowed_after_racer_ms=$(( ($(cs) - t0) * 10 ))\nkill $p; wait $p 2>/dev/null\n\
             t0=$(cs); systemctl stop isold; echo stop_rc=$?\n\
             echo stop_after_racer_ms=$(( ($(cs) - t0) * 10 ))"
        ),
        Duration::from_secs(900),
        vec![
            Expect::field("start_rc", "0"),
            Expect::field("race_rc", "0"),
            Expect::field("threads", &threads.to_string()),
            Expect::field("active", "active"),
            // isold was in the race: it narrowed threads before their pins, and the pins
            // made after it stood.
            at_least("narrowed_first", 100.0),
            at_most("lost", f64::from(threads) / 200.0),
            // The pins isold saw change under it are counted as their owners' (306 in the
            // first run; isold before the count had none).
            at_least("owner_pins_after", 1.0),
            // And in the metrics (`isold_owner_pins_total`).
            at_least("owner_pins_metric", 1.0),
            // The originals of the racer's exited threads leave the state (every thousand
            // exits, and a minute after the last pass): the live narrowed threads' are left,
            // about a hundred (13,000 stayed until the stop before).
            at_most("state_threads_settled", 300.0),
            at_least("forget_passes", 1.0),
            Expect::field("stop_rc", "0"),
        ],
    );
    let o = run(&s).unwrap_or_else(|e| panic!("{e}"));
    if let Some(out) = o.outputs.get("wide_tasks_narrowed_at_exec") {
        let figures: Vec<&str> = out
            .stdout
            .lines()
            .filter(|l| !l.starts_with("task ") && !l.starts_with("warm-up "))
            .collect();
        eprintln!("reaction to exec'd wide tasks: {}", figures.join(" "));
    }
    o.assert_ok();
}
