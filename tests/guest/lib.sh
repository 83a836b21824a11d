# Helpers for step scripts (every step script starts by sourcing this file).
RESULTS=/dev/ttyS1

# emit JSON: one line on the results port.
emit() { printf '%s\n' "$*" >"$RESULTS"; }

# host_request NAME: ask the host to act (e.g. hot-plug a device through QMP). The host does
# not answer on the port; the caller polls for the effect (see wait_for).
host_request() { emit "{\"ev\":\"request\",\"name\":\"$1\"}"; }

# wait_for SECONDS CMD...: run CMD every 0.2 s until it succeeds; fails after SECONDS.
wait_for() {
    _n=$(($1 * 5))
    shift
    while ! "$@"; do
        _n=$((_n - 1))
        [ "$_n" -le 0 ] && return 1
        usleep 200000
    done
}

# capture FILE...: send files to the host (skips files that do not exist).
capture() {
    for _f in "$@"; do
        [ -e "$_f" ] || continue
        if _b=$(base64 -w 0 <"$_f" 2>/dev/null); then
            emit "{\"ev\":\"file\",\"path\":\"$_f\",\"b64\":\"$_b\"}"
        else
            emit "{\"ev\":\"file\",\"path\":\"$_f\",\"error\":\"unreadable\"}"
        fi
    done
}

# capture_isolation_view [PARTITION_DIR...]: everything fake-root tests need to see the
# guest's isolation as libtaskisol sees it.
capture_isolation_view() {
    capture /proc/cmdline /proc/sys/kernel/osrelease /proc/interrupts /proc/irq/default_smp_affinity
    for _d in /proc/irq/[0-9]*; do
        capture "$_d/smp_affinity" "$_d/smp_affinity_list" "$_d/effective_affinity" "$_d/effective_affinity_list"
    done
    for _f in online present possible isolated nohz_full; do
        capture /sys/devices/system/cpu/$_f
    done
    for _f in cpumask cpumask_requested cpumask_isolated writeback/cpumask; do
        capture /sys/devices/virtual/workqueue/$_f
    done
    for _f in cpuset.cpus.effective cpuset.cpus.isolated cgroup.subtree_control cgroup.controllers; do
        capture /sys/fs/cgroup/$_f
    done
    for _p in "$@"; do
        for _f in cpuset.cpus cpuset.cpus.effective cpuset.cpus.exclusive cpuset.cpus.exclusive.effective \
            cpuset.cpus.partition cgroup.type cgroup.procs; do
            capture "$_p/$_f"
        done
    done
    capture /proc/self/mountinfo /proc/self/cgroup
}

# sched_of PID: "policy=P rt_priority=R" from /proc/PID/stat (fields 41 and 40; the fields
# are counted after the last ')' because comm may contain spaces).
sched_of() {
    _s=$(cat /proc/"$1"/stat)
    _s=${_s##*) }
    # shellcheck disable=SC2086
    set -- $_s
    shift 37
    echo "rt_priority=$1"
    echo "policy=$2"
}

# irq_lines: the number of numbered IRQ lines in /proc/interrupts.
irq_lines() { grep -c '^ *[0-9][0-9]*:' /proc/interrupts; }

# cpu_counts IRQ_LINE_PREFIX: the per-CPU columns of one /proc/interrupts row ("LOC:" ...).
cpu_counts() { grep "^ *$1" /proc/interrupts | awk '{print $2, $3, $4, $5}'; }
