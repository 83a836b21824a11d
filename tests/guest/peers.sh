# Guest side of scripts/bench-peers: one tool (tuned, tuna or isold) put through the same
# scenario in the Debian guest. Every figure is printed as a "key=value" line; the host builds
# the table from them and from the audit's JSON (between "--- json" and "--- end").
#
# The scenario (isolated CPUs 2-3, housekeeping 0-1):
#   setup:  every IRQ routed to CPUs 2-3 (and the default affinity), one busy task and 300
#           sleeping ones started with affinity 0-3, a workload pinned to CPU 3;
#   apply:  the tool's way to isolate 2-3, timed, with its peak (or daemon's) resident memory;
#   audit:  isold audit --json of CPUs 2-3 (3 s): IRQs and wide tasks left on 2-3;
#   drift:  a new task with affinity 0-3, vm.stat_interval reset to 1, IRQ 4 (ttyS0) moved
#           back to CPU 3; 3 s later, which of the three were put right;
#   stop:   the tool's way to undo; every value isold's snapshot covers compared with the one
#           taken before apply.

PEERS_CFG=/tmp/isold.toml

peers_setup() {
    for _f in /proc/irq/*/smp_affinity_list; do echo 2-3 >"$_f" 2>/dev/null; done
    echo c >/proc/irq/default_smp_affinity
    setsid taskset -c 0-3 sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &
    _i=0
    while [ $_i -lt 300 ]; do
        setsid taskset -c 0-3 sleep 100000 </dev/null >/dev/null 2>&1 &
        _i=$((_i + 1))
    done
    rm -f /tmp/wl.pid
    setsid taskset -c 3 sh -c 'echo $$ >/tmp/wl.pid; while :; do sleep 0.01; done' </dev/null >/dev/null 2>&1 &
    wait_for 20 test -s /tmp/wl.pid || { echo "the workload did not start"; return 1; }
    # isold leaves the workload alone by itself: its affinity is inside the isolated CPUs.
    printf 'isolated_cpus = "2-3"\n' >"$PEERS_CFG"
    # tuned's profile reads its CPUs from here; tuna takes them on its command line.
    echo "isolated_cores=2-3" >/etc/tuned/realtime-virtual-host-variables.conf
    echo "irqs_on_2_3=$(grep -l '2-3' /proc/irq/*/smp_affinity_list | wc -l)"
    echo "tasks=$(ls -d /proc/[0-9]*/task/[0-9]* | wc -l)"
    isold_snapshot /tmp/snap.before
}

# now_ns: nanoseconds since the epoch (coreutils' date: busybox's has no %N).
now_ns() { /usr/bin/date +%s%N; }

# ms_since NS: milliseconds since a now_ns reading.
ms_since() {
    _now=$(now_ns)
    echo $(((_now - $1) / 1000000))
}

# daemon_rss UNIT: the resident memory of UNIT's main process, kB.
daemon_rss() {
    sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\).*/\1/p' /proc/"$(systemctl show -p MainPID --value "$1")"/status
}

# timed CMD...: CMD timed (its output in /tmp/cmd.out).
timed() {
    _t=$(now_ns)
    "$@" >/tmp/cmd.out 2>&1
    _rc=$?
    echo "apply_ms=$(ms_since "$_t")"
    echo "apply_rc=$_rc"
}

# timed_peak LABEL CMD...: CMD timed, with its peak resident memory from busybox time -v (read
# after the time is taken: each command run in a TCG guest costs a tenth of a second or more).
# busybox converts ru_maxrss as if it counted pages (it is in kB already): divided back here.
timed_peak() {
    _label=$1
    shift
    _t=$(now_ns)
    time -v -o /tmp/time.out "$@" >/tmp/cmd.out 2>&1
    _rc=$?
    echo "apply_ms=$(ms_since "$_t")"
    _pages=$(sed -n 's/.*Maximum resident set size (kbytes): *//p' /tmp/time.out)
    _kb=$((_pages * 1024 / $(getconf PAGESIZE)))
    echo "apply_rc=$_rc"
    echo "rss_kb=$_kb"
    echo "rss_of=$_label (peak)"
}

# tool_apply TOOL: isolate 2-3 with TOOL.
tool_apply() {
    case $1 in
    tuned)
        # The daemon runs first (a distribution boots with it); the profile switch is what a
        # user runs, and what is timed. Its resident memory is the daemon's.
        systemctl start tuned || return 1
        timed tuned-adm profile realtime-virtual-host
        echo "rss_kb=$(daemon_rss tuned)"
        echo "rss_of=tuned daemon (VmRSS)"
        ;;
    tuna) timed_peak "tuna --isolate" tuna --cpus=2-3 --isolate ;;
    isold-run)
        # The service (dist/isold.service): its start returns once READY=1 is sent, after
        # the apply.
        mkdir -p /etc/isold
        cp "$PEERS_CFG" /etc/isold/isold.toml
        timed systemctl start isold
        echo "rss_kb=$(daemon_rss isold)"
        echo "rss_of=isold run daemon (VmRSS)"
        ;;
    # --timings: where apply's time went (stage and item, system calls), after the report.
    isold)
        # Start-up alone (exec, dynamic linking, page faults of the binary): in every apply.
        _t=$(now_ns)
        isold --version >/dev/null
        echo "startup_ms=$(ms_since "$_t")"
        timed_peak "isold apply" isold --config "$PEERS_CFG" apply --timings
        ;;
    esac
    sed '/^timings:/,$d' /tmp/cmd.out | tail -n 3 | sed 's/^/  /'
    sed -n '/^timings:/,$p' /tmp/cmd.out | sed 's/^/  /'
}

peers_audit() {
    isold --config "$PEERS_CFG" audit --cpus 2-3 --duration 3 --json >/tmp/audit.json
    echo "--- json $1"
    cat /tmp/audit.json
    echo "--- end"
    echo "workload_affinity=$(grep Cpus_allowed_list /proc/"$(cat /tmp/wl.pid)"/status | cut -f2)"
    echo "irqs_on_2_3=$(grep -l -E '^(2|3|2-3)$' /proc/irq/*/smp_affinity_list | wc -l)"
}

peers_drift() {
    setsid taskset -c 0-3 sleep 100000 </dev/null >/dev/null 2>&1 &
    echo $! >/tmp/drift.pid
    echo 1 >/proc/sys/vm/stat_interval
    echo 3 >/proc/irq/4/smp_affinity_list
    sleep 3
    echo "drift_task=$(grep Cpus_allowed_list /proc/"$(cat /tmp/drift.pid)"/status | cut -f2)"
    echo "drift_sysctl=$(cat /proc/sys/vm/stat_interval)"
    echo "drift_irq=$(cat /proc/irq/4/smp_affinity_list)"
}

tool_stop() {
    _t=$(now_ns)
    case $1 in
    tuned) systemctl stop tuned ;;
    # tuna keeps no record of what it changed: --include allows 2-3 again for every thread.
    tuna) tuna --cpus=2-3 --include ;;
    isold) isold restore | tail -n 1 ;;
    # Stopping the service is not undoing it: isold restore is.
    isold-run) systemctl stop isold && isold restore | tail -n 1 ;;
    esac
    echo "stop_rc=$?"
    echo "stop_ms=$(ms_since "$_t")"
    isold_snapshot /tmp/snap.after
    snapshot_diff /tmp/snap.before /tmp/snap.after >/tmp/diff.out
    # Values the drift step changed by hand are not the tool's to put back... except that
    # restoring them to their originals is exactly what a restore should do: keep them in.
    echo "settings_not_restored=$(grep -c '^differs: /\|^missing after: /' /tmp/diff.out)"
    echo "tasks_not_restored=$(grep -c '^differs: task:' /tmp/diff.out)"
    grep '^differs: /\|^missing after: /' /tmp/diff.out | head -n 20 | sed 's/^/  /'
}

# clock_ms CMD...: CMD's wall time in milliseconds on standard output, from bash's own clock
# read right before and after it (its output in /tmp/cmd.out; CMD's exit status). A `date`
# forked on each side would add its own start, a tenth of a second or more under TCG, to every
# figure: most of a fast command's.
clock_ms() {
    bash -c 's=${EPOCHREALTIME/./}; "$@" >/tmp/cmd.out 2>&1; rc=$?; e=${EPOCHREALTIME/./}
        echo $(((e - s) / 1000)); exit $rc' clock "$@"
}

# pairs_round N: one round of scripts/bench-oneshot in the same boot: tuned's profile switch
# and its stop, then isold apply and isold restore, each timed alone (clock_ms), each leaving
# the guest as the scenario's setup left it. tuned's daemon is started (untimed) with the
# profile it had at boot, so that the timed command is the switch a user runs; its stop is
# `systemctl stop tuned`, which rolls the profile back.
pairs_round() {
    _n=$1
    systemctl start tuned || return 1
    _ms=$(clock_ms tuned-adm profile realtime-virtual-host) || { cat /tmp/cmd.out; return 1; }
    echo "tuned_apply_ms.$_n=$_ms"
    _ms=$(clock_ms systemctl stop tuned) || { cat /tmp/cmd.out; return 1; }
    echo "tuned_stop_ms.$_n=$_ms"
    # The next start must not come up with realtime-virtual-host already applied.
    cp /tmp/tuned.profile.boot /etc/tuned/active_profile
    _ms=$(clock_ms isold --config "$PEERS_CFG" apply) || { cat /tmp/cmd.out; return 1; }
    echo "isold_apply_ms.$_n=$_ms"
    _ms=$(clock_ms isold restore) || { cat /tmp/cmd.out; return 1; }
    echo "isold_restore_ms.$_n=$_ms"
    # Another build of isold to compare with (scripts/bench-oneshot --base), the same way.
    if [ -x /usr/local/bin/isold-base ]; then
        _ms=$(clock_ms isold-base --config "$PEERS_CFG" apply) || { cat /tmp/cmd.out; return 1; }
        echo "base_apply_ms.$_n=$_ms"
        _ms=$(clock_ms isold-base restore) || { cat /tmp/cmd.out; return 1; }
        echo "base_restore_ms.$_n=$_ms"
    fi
}

# pairs_setup: the scenario's setup, and tuned's boot profile kept for pairs_round.
pairs_setup() {
    peers_setup || return 1
    cp /etc/tuned/active_profile /tmp/tuned.profile.boot 2>/dev/null || : >/tmp/tuned.profile.boot
    echo "tuned_boot_profile=$(cat /tmp/tuned.profile.boot)"
    # Every program a round runs, read once (the page cache), as a user's would be.
    isold --version >/dev/null
    tuned-adm --version >/dev/null 2>&1
    :
}

# pairs_profile: isold apply and restore once more with --timings (where the time went),
# untimed by the table; and what starting a process costs in this guest (the part of each
# command's time that --timings does not see).
pairs_profile() {
    for _c in /bin/true "isold --version" "isold restore"; do
        # shellcheck disable=SC2086 # the command and its arguments
        echo "start_ms[$_c]=$(clock_ms $_c)"
    done
    isold --config "$PEERS_CFG" apply --timings >/tmp/apply.out 2>&1 || { cat /tmp/apply.out; return 1; }
    isold restore --timings >/tmp/restore.out 2>&1 || { cat /tmp/restore.out; return 1; }
    echo "--- apply --timings"
    sed 's/^/  /' /tmp/apply.out
    echo "--- restore --timings"
    sed 's/^/  /' /tmp/restore.out
}
