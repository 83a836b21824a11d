# Helpers for step scripts (every step script starts by sourcing this file).
RESULTS=/dev/ttyS1

# emit JSON: one line on the results port. Through a file and cat, not printf straight to the
# port: printf's stdio gives up on a write cut by a signal (EINTR), and init takes SIGCHLD
# whenever an orphan exits (busybox timeout's watchdog does after every step), which cut long
# results at 4096 bytes. cat retries the write until every byte is out.
emit() {
    printf '%s\n' "$*" >/tmp/.emit.$$
    cat /tmp/.emit.$$ >"$RESULTS"
    rm -f /tmp/.emit.$$
}

# run_step NAME TIMEOUT SCRIPT: one line of /scenario/steps.sh (the runner: init, or
# debian-runner under systemd).
run_step() {
    emit "{\"ev\":\"start\",\"step\":\"$1\"}"
    echo "taskisol: step $1"
    timeout -s KILL "$2" sh "$3" </dev/null >/tmp/step.out 2>/tmp/step.err
    rc=$?
    emit "{\"ev\":\"result\",\"step\":\"$1\",\"rc\":$rc,\"stdout\":\"$(base64 -w 0 </tmp/step.out)\",\"stderr\":\"$(base64 -w 0 </tmp/step.err)\"}"
}

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
    for _f in online present possible isolated nohz_full housekeeping; do
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

# capture_isold_view: capture_isolation_view plus every file isold's presets read or write,
# and each task's stat, status and cgroup (the fake-root tests of isold run on this tree).
capture_isold_view() {
    capture_isolation_view "$@"
    for _f in vm/swappiness vm/dirty_ratio vm/dirty_background_ratio vm/stat_interval \
        kernel/numa_balancing kernel/hung_task_timeout_secs kernel/nmi_watchdog \
        kernel/timer_migration kernel/sched_rt_runtime_us kernel/printk kernel/random/boot_id \
        net/core/busy_read net/core/busy_poll net/ipv4/tcp_fastopen; do
        capture /proc/sys/$_f
    done
    capture /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/ksm/run
    for _d in /sys/devices/system/machinecheck/machinecheck*; do capture "$_d/ignore_ce"; done
    for _d in /sys/devices/system/cpu/cpu[0-9]*; do
        capture "$_d/power/pm_qos_resume_latency_us" "$_d/cpufreq/scaling_governor" \
            "$_d/cpufreq/scaling_available_governors"
    done
    for _d in /sys/devices/virtual/workqueue/*/cpumask; do capture "$_d"; done
    for _p in /proc/[0-9]*; do
        capture "$_p/cgroup"
        for _t in "$_p"/task/[0-9]*; do capture "$_t/stat" "$_t/status"; done
    done
}

# capture_audit_view: capture_isold_view plus the counters and consoles isold audit reads.
capture_audit_view() {
    capture_isold_view
    capture /proc/softirqs /proc/consoles
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

# now_cs: time since boot in centiseconds (/proc/uptime prints two decimals).
now_cs() {
    _u=$(cut -d' ' -f1 /proc/uptime)
    echo $((${_u%.*} * 100 + 1${_u#*.} - 100))
}

# secs CENTISECONDS: "12.34"
secs() { printf '%d.%02d\n' $(($1 / 100)) $(($1 % 100)); }

# seed_stat_refresh WINDOW: the case that motivated the task-isolation patches. With RT
# throttling off (sched_rt_runtime_us=-1) and a SCHED_FIFO busy loop on isolated CPU 3, started
# as a user would (chisol -f 1 -c 3), `echo 1 > /proc/sys/vm/stat_refresh` queues vmstat work
# on every CPU and waits for all of it; the kworker of CPU 3 is a SCHED_OTHER task. Waits up to
# WINDOW s for the write while the loop runs, then kills the loop and waits up to 30 s more.
# Prints key=value lines (times in seconds); undoes the loop and the sysctl on every way out
# but SIGKILL, which seed_cleanup covers. Also asks `chisol --fallback=native` about the same
# workload first, so its decision can be compared with what the kernel then does.
seed_stat_refresh() {
    _window_cs=$(($1 * 100))
    rm -f /tmp/seed.*
    cat /proc/sys/kernel/sched_rt_runtime_us >/tmp/seed.rt_saved
    echo "sched_rt_runtime_us_saved=$(cat /tmp/seed.rt_saved)"
    echo -1 >/proc/sys/kernel/sched_rt_runtime_us
    echo "sched_rt_runtime_us=$(cat /proc/sys/kernel/sched_rt_runtime_us)"
    chisol -q vmstat_sync --fallback=native -f 1 -c 3 -- sh -c 'echo native_fallback_started=yes' \
        >/tmp/seed.fb 2>/tmp/seed.fb_err
    echo "native_fallback_rc=$?"
    cat /tmp/seed.fb
    sed 's/^/native_fallback_says=/' /tmp/seed.fb_err
    chisol -f 1 -c 3 -- sh -c 'echo $$ >/tmp/seed.loop; while :; do :; done' &
    _job=$!
    if ! wait_for 20 test -s /tmp/seed.loop; then
        echo "loop_started=no"
        seed_cleanup
        return 1
    fi
    _loop=$(cat /tmp/seed.loop)
    echo "loop_started=yes"
    echo "loop_cpus=$(grep Cpus_allowed_list /proc/"$_loop"/status | cut -f2)"
    sched_of "$_loop" | sed 's/^/loop_/'
    _t0=$(now_cs)
    # The end time is taken by the writer itself, the moment the write returns.
    (
        echo 1 >/proc/sys/vm/stat_refresh
        echo $? >/tmp/seed.rc
        now_cs >/tmp/seed.t1.part && mv /tmp/seed.t1.part /tmp/seed.t1
    ) &
    _writer=$!
    while [ ! -e /tmp/seed.t1 ] && [ $(($(now_cs) - _t0)) -lt "$_window_cs" ]; do
        usleep 100000
    done
    _t=$(now_cs)
    # Where the loop is now: still running on CPU 3, or not (field 3 = state, 39 = CPU).
    _st=$(cat /proc/"$_loop"/stat 2>/dev/null)
    _st=${_st##*) }
    # shellcheck disable=SC2086
    set -- $_st
    echo "loop_state=$1"
    echo "loop_cpu=${37}"
    if [ -e /tmp/seed.t1 ]; then
        echo "returned_with_loop_running=yes"
        echo "write_seconds=$(secs $(($(cat /tmp/seed.t1) - _t0)))"
    else
        echo "returned_with_loop_running=no"
        echo "still_blocked_after=$(secs $((_t - _t0)))"
    fi
    _tk=$(now_cs)
    kill -9 "$_loop"
    wait "$_job" 2>/dev/null
    if wait_for 30 test -e /tmp/seed.t1; then
        [ "$(cat /tmp/seed.t1)" -ge "$_tk" ] &&
            echo "returned_after_kill=$(secs $(($(cat /tmp/seed.t1) - _tk)))"
        echo "write_seconds_total=$(secs $(($(cat /tmp/seed.t1) - _t0)))"
        echo "write_rc=$(cat /tmp/seed.rc)"
    else
        echo "returned_after_kill=never"
    fi
    wait "$_writer" 2>/dev/null
    seed_cleanup
    echo "sched_rt_runtime_us_restored=$(cat /proc/sys/kernel/sched_rt_runtime_us)"
}

# quiesce_case WINDOW POLICY WORKLOAD...: the seed's case, for kernels with the task-isolation
# interface and without. RT throttling off; CPU 3's workqueue work traced in a tracing instance
# of its own (made before the workload starts: enabling events patches kernel text, which
# interrupts every CPU); WORKLOAD started (it puts a thread of scheduling policy POLICY, 1 for
# SCHED_FIFO, on CPU 3 itself: oslat's or isol-meter's -c 3). Once that thread runs on CPU 3: the main thread's and the measuring thread's
# /proc/<tid>/task_isolation, then $QUIET_S s (3 by default) in which CPU 3's work is counted,
# then
# `echo 1 > /proc/sys/vm/stat_refresh` timed for up to WINDOW s, then SIGINT to the workload
# (oslat and isol-meter print their results on it), and SIGKILL 10 s later if it is still
# there. Prints key=value lines (times in seconds; states with "|" for newlines) and the
# workload's output prefixed "out: ".
quiesce_case() {
    _window_cs=$(($1 * 100))
    _policy=$2
    shift 2
    rm -rf /tmp/q.*
    cat /proc/sys/kernel/sched_rt_runtime_us >/tmp/q.rt_saved
    echo -1 >/proc/sys/kernel/sched_rt_runtime_us
    _ti=/sys/kernel/tracing/instances/quiesce
    rmdir $_ti 2>/dev/null
    mkdir $_ti
    echo 8 >$_ti/tracing_cpumask
    echo 1 >$_ti/events/workqueue/workqueue_execute_start/enable
    echo 1 >$_ti/events/workqueue/workqueue_execute_end/enable
    "$@" >/tmp/q.out 2>/tmp/q.err &
    _pid=$!
    echo $_pid >/tmp/q.pid
    # The measuring thread: one of the workload's threads of POLICY running on CPU 3. Looked for
    # twice, 1.5 s apart: oslat first runs a pre-heat thread there for a second, then its
    # measuring thread.
    _tid=$(quiesce_find "$_pid" "$_policy")
    usleep 1500000
    _tid=$(quiesce_find "$_pid" "$_policy")
    if [ -z "$_tid" ]; then
        echo "measuring_thread=none"
        sed 's/^/err: /' /tmp/q.err
        quiesce_cleanup
        return 1
    fi
    # The workload's start-up (and its activation) done: what the kernel says of each thread.
    usleep 500000
    echo "measuring_tid=$_tid"
    echo "main_tid=$_pid"
    echo "threads=$(ls /proc/$_pid/task | wc -l)"
    if [ -e /proc/$_tid/task_isolation ]; then
        echo "measuring_state=$(tr '\n' '|' </proc/$_tid/task_isolation)"
        echo "main_state=$(tr '\n' '|' </proc/$_pid/task_isolation)"
    else
        echo "measuring_state=absent"
    fi
    echo "measuring_cpus=$(grep Cpus_allowed_list /proc/$_tid/status | cut -f2)"
    sched_of $_tid | sed 's/^/measuring_/'
    : >$_ti/trace
    sleep "${QUIET_S:-3}"
    echo "cpu3_works_quiet=$(grep -c workqueue_execute_start $_ti/trace)"
    echo "cpu3_vmstat_update_quiet=$(grep -c 'function vmstat_update' $_ti/trace)"
    grep workqueue_execute_start $_ti/trace | sed 's/.*function /cpu3_work: /' | sort | uniq -c | sed 's/^ *//' | head -20
    _t0=$(now_cs)
    (
        echo 1 >/proc/sys/vm/stat_refresh
        echo $? >/tmp/q.rc
        now_cs >/tmp/q.t1.part && mv /tmp/q.t1.part /tmp/q.t1
    ) &
    _writer=$!
    while [ ! -e /tmp/q.t1 ] && [ $(($(now_cs) - _t0)) -lt "$_window_cs" ]; do
        usleep 100000
    done
    _st=$(cat /proc/"$_tid"/stat 2>/dev/null)
    _st=${_st##*) }
    # shellcheck disable=SC2086
    set -- $_st
    echo "measuring_state_then=$1"
    echo "measuring_cpu_then=${37}"
    if [ -e /tmp/q.t1 ]; then
        echo "returned_with_loop_running=yes"
        echo "write_seconds=$(secs $(($(cat /tmp/q.t1) - _t0)))"
    else
        echo "returned_with_loop_running=no"
        echo "still_blocked_after=$(secs $(($(now_cs) - _t0)))"
    fi
    # CPU 3's work from the measuring thread's start to the write's end (or the window's).
    cp $_ti/trace /tmp/q.trace
    echo "cpu3_vmstat_update_total=$(grep -c 'function vmstat_update' /tmp/q.trace)"
    _tk=$(now_cs)
    kill -INT $_pid
    wait_for 10 sh -c "! kill -0 $_pid 2>/dev/null" || kill -9 $_pid
    wait $_pid
    echo "workload_rc=$?"
    if wait_for 30 test -e /tmp/q.t1; then
        [ "$(cat /tmp/q.t1)" -ge "$_tk" ] && echo "returned_after_stop=$(secs $(($(cat /tmp/q.t1) - _tk)))"
        echo "write_rc=$(cat /tmp/q.rc)"
    else
        echo "returned_after_stop=never"
    fi
    wait $_writer 2>/dev/null
    # vmstat_update on CPU 3 in that stretch, with how long each ran (execute_start to
    # execute_end, in us).
    awk '/workqueue_execute_start/ && /vmstat_update/ { split($0, a, ": workqueue"); n = split(a[1], f, " "); t = f[n]; sub(/:$/, "", t); w = $0; sub(/.*work struct /, "", w); sub(/:.*/, "", w); start[w] = t }
         /workqueue_execute_end/ { w = $0; sub(/.*work struct /, "", w); sub(/[: ].*/, "", w); if (w in start) { split($0, a, ": workqueue"); n = split(a[1], f, " "); t = f[n]; sub(/:$/, "", t); printf "vmstat_update_us=%.1f\n", (t - start[w]) * 1e6; delete start[w] } }' /tmp/q.trace
    sed 's/^/out: /' /tmp/q.out
    sed 's/^/err: /' /tmp/q.err
    quiesce_cleanup
}

# quiesce_find PID POLICY: the first thread of PID running on CPU 3 with scheduling policy
# POLICY (stat's field 39 is the CPU, 41 the policy, counted after the comm); waits up to 30 s.
quiesce_find() {
    _n=150
    while [ $_n -gt 0 ]; do
        for _t in /proc/$1/task/*; do
            _st=$(cat $_t/stat 2>/dev/null) || continue
            _st=${_st##*) }
            # shellcheck disable=SC2086
            set -- $1 $2 $_st
            if [ "${39}" = 3 ] && [ "${41}" = "$2" ] && [ "$3" = R ]; then
                echo "${_t##*/}"
                return 0
            fi
        done
        usleep 200000
        _n=$((_n - 1))
    done
    return 1
}

# any_thread_active PID: some thread of PID has the task-isolation quiesce active.
any_thread_active() {
    for _t in /proc/$1/task/*; do
        grep -q 'Active state: quiesce' /proc/${_t##*/}/task_isolation 2>/dev/null && return 0
    done
    return 1
}

# quiesce_cleanup: stops quiesce_case's workload, restores RT throttling, removes the instance.
quiesce_cleanup() {
    [ -s /tmp/q.pid ] && kill -9 "$(cat /tmp/q.pid)" 2>/dev/null
    [ -s /tmp/q.rt_saved ] && cat /tmp/q.rt_saved >/proc/sys/kernel/sched_rt_runtime_us
    _ti=/sys/kernel/tracing/instances/quiesce
    if [ -d $_ti ]; then
        echo 0 >$_ti/events/workqueue/workqueue_execute_start/enable
        echo 0 >$_ti/events/workqueue/workqueue_execute_end/enable
        rmdir $_ti
    fi
    return 0
}

# seed_cleanup: kills seed_stat_refresh's loop and restores RT throttling (for a run that was
# killed by its step timeout: the loop would starve everything else on CPU 3).
seed_cleanup() {
    [ -s /tmp/seed.loop ] && kill -9 "$(cat /tmp/seed.loop)" 2>/dev/null
    [ -s /tmp/seed.rt_saved ] && cat /tmp/seed.rt_saved >/proc/sys/kernel/sched_rt_runtime_us
    return 0
}

# isold_snapshot FILE: every value isold may touch, one "key value" line each (file contents
# with newlines, tabs and spaces folded; threads keyed by tid:starttime with
# "affinity:policy:rt_priority"). snapshot_diff compares two of them.
isold_snapshot() {
    {
        for _f in /proc/sys/vm/swappiness /proc/sys/vm/dirty_ratio /proc/sys/vm/dirty_background_ratio \
            /proc/sys/net/core/busy_read /proc/sys/net/core/busy_poll /proc/sys/net/ipv4/tcp_fastopen \
            /proc/sys/kernel/numa_balancing /proc/sys/kernel/hung_task_timeout_secs \
            /proc/sys/kernel/nmi_watchdog /proc/sys/vm/stat_interval /proc/sys/kernel/timer_migration \
            /proc/sys/kernel/sched_rt_runtime_us /proc/sys/kernel/printk \
            /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/ksm/run \
            /sys/devices/system/machinecheck/machinecheck*/ignore_ce \
            /sys/devices/virtual/workqueue/cpumask /sys/devices/virtual/workqueue/*/cpumask \
            /sys/devices/system/cpu/cpu*/power/pm_qos_resume_latency_us \
            /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor \
            /proc/irq/default_smp_affinity /proc/irq/*/smp_affinity_list /proc/irq/*/smp_affinity \
            /proc/sys/net/core/rps_default_mask /sys/class/net/*/queues/*/rps_cpus \
            /sys/class/net/*/queues/*/xps_cpus; do
            [ -r "$_f" ] && echo "$_f $(tr '\n\t ' '|__' <"$_f" 2>/dev/null)"
        done
        # Each network device's queue counts (its channels, as the kernel made the queues).
        for _d in /sys/class/net/*; do
            echo "$_d/queues $(ls -d "$_d"/queues/rx-* 2>/dev/null | wc -l)rx_$(ls -d "$_d"/queues/tx-* 2>/dev/null | wc -l)tx"
        done
        # Two processes for all threads (a fork per thread is too slow under TCG): the stat
        # lines (tid first; fields counted after the last ") ", comm may hold spaces) and the
        # affinity lines, joined by tid.
        { cat /proc/[0-9]*/task/[0-9]*/stat 2>/dev/null; grep -H Cpus_allowed_list /proc/[0-9]*/task/[0-9]*/status 2>/dev/null; } |
            awk '/^\/proc\// { split($1, p, "/"); aff[p[5]] = $2; next }
                 { tid = $1; c = $0; sub(/^[0-9]+ \(/, "", c); sub(/\) [^)]*$/, "", c)
                   # IRQ threads follow the effective CPU of their IRQ, set by the kernel when
                   # the IRQ next fires: not a value isold owns.
                   if (c ~ /^irq\//) next
                   sub(/.*\) /, ""); st[tid] = $20; pol[tid] = $39 ":" $38
                   # PF_NO_SETAFFINITY (0x04000000 in the flags, field 9): the kernel manages
                   # the affinity (a workqueue rescuer binds itself to the CPU it rescues);
                   # isold never writes it, only the policy.
                   if (int($7 / 67108864) % 2 == 1) kernel[tid] = 1 }
                 END { for (t in st) if (t in aff) print "task:" t ":" st[t] " " (t in kernel ? "kernel" : aff[t]) ":" pol[t] }'
    } >"$1"
}

# snapshot_diff BEFORE AFTER: every file value that differs or vanished, every thread present
# in both whose affinity or policy differs; ends with "differences=N".
snapshot_diff() {
    awk 'NR == FNR { a[$1] = $2; next }
         { b[$1] = $2 }
         ($1 in a) && a[$1] != $2 { print "differs: " $1 " before " a[$1] " after " $2; n++ }
         END { for (k in a) if (!(k in b) && k !~ /^task:/) { print "missing after: " k; n++ }
               print "differences=" n + 0 }' "$1" "$2"
}

# reboot_step NAME CHECK: a real reboot of a Debian guest with a disk (systemctl reboot: every
# unit stops, the kernel goes down and boots again). The step's result is sent first; CHECK (a
# run_step line, or -) runs during the shutdown once isold.service has stopped
# (tests/guest/at-shutdown); the runner goes on with the next step after the boot.
reboot_step() {
    _shutdown_step "$1" "$2" reboot
}

# poweroff_step NAME CHECK: as reboot_step, with systemctl poweroff: the scenario's last step.
poweroff_step() {
    _shutdown_step "$1" "$2" poweroff
}

_shutdown_step() {
    emit "{\"ev\":\"start\",\"step\":\"$1\"}"
    mkdir -p /run/taskisol
    printf '%s\n' "$2" >/run/taskisol/at-shutdown
    [ "$3" = poweroff ] && : >/run/taskisol/final
    # The runner's count: this step is done once the system goes down.
    echo "$step_no" >/var/lib/taskisol/done
    sync
    emit "{\"ev\":\"result\",\"step\":\"$1\",\"rc\":0,\"stdout\":\"$(echo "$3" | base64 -w 0)\",\"stderr\":\"\"}"
    systemctl "$3"
    sleep 1000
}

# etc_snapshot FILE: every entry under /etc (path, type, mode, owner, group, size, symlink
# target) and the sha256 of every regular file, sorted (GNU find: busybox's has no -printf);
# compared with diff. /etc/isold, the
# administrator's own configuration (which the tests edit), is left out.
etc_snapshot() {
    {
        /usr/bin/find /etc -xdev -path /etc/isold -prune -o -printf '%p %y %m %U %G %s %l\n'
        /usr/bin/find /etc -xdev -path /etc/isold -prune -o -type f -exec sha256sum {} +
    } | sort >"$1"
}

# watch_cpus IRQ PID OUT: until OUT.stop exists, read IRQ's smp_affinity_list and PID's
# Cpus_allowed_list over and over with shell builtins only (no fork per sample). OUT gets
# "samples=N" and "bad=N": the samples that named CPU 2 or 3 (listed in OUT.bad).
watch_cpus() {
    _n=0
    _bad=0
    : >"$3.bad"
    while [ ! -e "$3.stop" ]; do
        read -r _irq <"/proc/irq/$1/smp_affinity_list"
        _aff=
        while read -r _k _v; do
            [ "$_k" = Cpus_allowed_list: ] && _aff=$_v
        done <"/proc/$2/status"
        _n=$((_n + 1))
        case "$_irq $_aff" in
        *2* | *3*)
            _bad=$((_bad + 1))
            echo "sample $_n: irq $1 on $_irq, task $2 on $_aff" >>"$3.bad"
            ;;
        esac
    done
    printf 'samples=%s\nbad=%s\n' "$_n" "$_bad" >"$3"
}

# lent_threads: the threads with SCHED_DEADLINE now (policy 6, stat field 41), one
# "tid:comm" each, space-separated.
lent_threads() {
    for _f in /proc/[0-9]*/task/[0-9]*/stat; do
        _s=$(cat "$_f" 2>/dev/null) || continue
        _c=${_s#*(}
        _c=${_c%)*}
        _s=${_s##*) }
        # shellcheck disable=SC2086
        set -- $_s
        [ "${39}" = 6 ] && printf '%s ' "${_f#/proc/*/task/}" | sed "s,/stat ,:$_c ,"
    done
    echo
}

# net_masks DEV: the rps_cpus of each of DEV's rx queues, on one line.
net_masks() { cat /sys/class/net/"$1"/queues/rx-*/rps_cpus | tr '\n' ' '; }
# net_rx_count DEV: DEV's rx queues.
net_rx_count() { ls -d /sys/class/net/"$1"/queues/rx-* | wc -l; }
# net_steered DEV MASK: DEV has rx queues, every one steered to MASK.
net_steered() {
    _m=$(cat /sys/class/net/"$1"/queues/rx-*/rps_cpus 2>/dev/null)
    [ -n "$_m" ] && [ -z "$(echo "$_m" | grep -vx "$2")" ]
}
# veth_pair A B: a veth pair with 4 rx and 4 tx queues on each end, by iproute2's ip (busybox's
# applet has no veth).
veth_pair() {
    /usr/sbin/ip link add "$1" numtxqueues 4 numrxqueues 4 type veth peer name "$2" numtxqueues 4 numrxqueues 4
}
# nic_irqs_on CPUS: the queue interrupts of the virtio NIC whose affinity names a CPU of the
# pattern CPUS ("[23]").
nic_irqs_on() {
    for _i in $(grep -E 'virtio[0-9]+-(input|output)' /proc/interrupts | cut -d: -f1); do
        grep -q "$1" /proc/irq/$_i/smp_affinity_list && echo "$_i:$(cat /proc/irq/$_i/smp_affinity_list)"
    done | tr '\n' ' '
}

# sg_isold_up: isold run (config /tmp/sg.toml) started in the background, its pid in
# /tmp/sg.isold, and its status answering.
sg_isold_up() {
    setsid isold --config /tmp/sg.toml run -v </dev/null >>/tmp/sg.log 2>&1 &
    echo $! >/tmp/sg.isold
    wait_for 30 isold status >/dev/null
}

# loop_on_cpu3 FILE: a SCHED_FIFO 1 busy loop on CPU 3 started as a user would
# (`chisol -f 1 -c 3`), its pid in FILE once it runs.
loop_on_cpu3() {
    chisol -f 1 -c 3 -- sh -c "echo \$\$ >$1; while :; do :; done" &
    wait_for 20 test -s "$1"
}

# stat_refresh_bg FILE: `echo 1 > /proc/sys/vm/stat_refresh` in the background; FILE gets the
# time it returned (now_cs) once it does.
stat_refresh_bg() {
    (
        echo 1 >/proc/sys/vm/stat_refresh
        now_cs >"$1.part" && mv "$1.part" "$1"
    ) &
}

sg_lent_any() { [ -n "$(lent_threads | tr -d ' ')" ]; }
# sg_cpu2_irqs: CPU 2's local timer, rescheduling, function call and irq work interrupts.
sg_cpu2_irqs() { awk '$1 ~ /^(LOC|RES|CAL|IWI):$/ { n += $4 } END { print n }' /proc/interrupts; }
# no_lent_thread: no thread runs SCHED_DEADLINE now.
no_lent_thread() { [ -z "$(lent_threads)" ]; }
sg_no_loan() { ! grep -q '^isold_stall_loans [1-9]' /tmp/sg.prom; }
# sg_hog_lent: the hog has a loan out: SCHED_DEADLINE now, or its loan recorded in the state
# (SCHED_FIFO pulses, its own policy between them).
sg_hog_lent() {
    sched_of "$(cat /tmp/sg.hog)" | grep -q '^policy=6$' ||
        grep -q "\"loan:$(cat /tmp/sg.hog):" /run/isold/state.json /run/isold/state.journal 2>/dev/null
}
# sg_frozen_lent: isold stopped (SIGSTOP) with the hog lent; isold let go on again if not.
sg_frozen_lent() {
    kill -STOP "$(cat /tmp/sg.isold)"
    sg_hog_lent && return 0
    kill -CONT "$(cat /tmp/sg.isold)"
    return 1
}
# sg_isold_gone: isold ended (a zombie until the step's shell reaps it counts as ended).
sg_isold_gone() {
    _p=$(cat /tmp/sg.isold)
    ! kill -0 "$_p" 2>/dev/null || grep -q ') Z' /proc/"$_p"/stat 2>/dev/null
}

# sg_clock PID: "UPTIME EXEC_NS": the time since boot and the thread's CPU time, read by one
# process back to back (a fork between the two reads takes milliseconds under TCG).
# sg_share FILE0 FILE1: the CPU share between two sg_clock lines.
sg_share() { cat "$1" "$2" | awk 'NR == 1 { u0 = $1; e0 = $2 } NR == 2 { printf "%.4f", ($2 - e0) / (($1 - u0) * 1e9) }'; }
sg_clock() { awk 'NR == 1 { u = $1 } NR == 2 { print u, $1 }' /proc/uptime /proc/"$1"/schedstat; }

# sq_irqs: CPUs 2 and 3's LOC RES CAL IWI, "N2 N3".
sq_irqs() { awk '$1 ~ /^(LOC|RES|CAL|IWI):$/ { a += $4; b += $5 } END { print a, b }' /proc/interrupts; }

# stall_guard_quiet: `isold run` with the stall guard and the noise ledger (the guard's items
# only, config on stdin), CPUs 2-3 idle: its passes read the ledger's event counts instead of
# /proc/stat (isold status counts them), and the idle CPUs take no more interrupts over 5 s
# than with no isold at all.
stall_guard_quiet() {
    cat >/tmp/sq.toml
    echo "kernel=$(uname -r)"
    sleep 1
    _i0=$(sq_irqs)
    sleep 5
    echo "$_i0 $(sq_irqs)" | awk '{ print "irqs_without=" $3 - $1 " " $4 - $2 }'
    # Its figures reach the status at each task sweep: every 2 s here.
    setsid isold --config /tmp/sq.toml run -v --task-interval 2 </dev/null >/tmp/sq.log 2>&1 &
    _p=$!
    wait_for 30 isold status >/dev/null || { echo isold_up=no; cat /tmp/sq.log; return 1; }
    # Its first start enables the ledger's events (text patching interrupts every CPU once).
    sleep 3
    _i0=$(sq_irqs)
    sleep 5
    echo "$_i0 $(sq_irqs)" | awk '{ print "irqs_with=" $3 - $1 " " $4 - $2 }'
    sleep 2
    isold status >/tmp/sq.status
    sed -n '/noise ledger\|stall guard\|guard:/s/^/status: /p' /tmp/sq.status
    sed -n 's/.* \([0-9]*\) passes (\([0-9]*\) without \/proc\/stat[^;]*; \([0-9]*\) before a sleep.*/passes=\1 quiet_passes=\2 slept=\3/p' /tmp/sq.status |
        tr ' ' '\n'
    # A reload that changes the policy leaves the ledger recording: its sched_switch stays
    # enabled.
    printf '[stalls]\nthreshold = 3\n' >>/tmp/sq.toml
    kill -HUP $_p
    wait_for 20 grep -q 'reload: apply' /tmp/sq.log
    echo "switch_enabled_after_reload=$(cat /sys/kernel/tracing/instances/isold*/events/sched/sched_switch/enable)"
    # The ledger turned off by a reload while the guard keeps its files open: its instance
    # goes (the guard closes them first; an open file keeps the instance busy).
    echo "instances_before_noise_off=$(ls /sys/kernel/tracing/instances | tr '\n' ' ')"
    printf '[noise]\nenabled = false\n' >>/tmp/sq.toml
    kill -HUP $_p
    wait_for 20 eval '! ls /sys/kernel/tracing/instances | grep -q "^isold"'
    echo "instances_after_noise_off=$(ls /sys/kernel/tracing/instances | tr '\n' ' ')"
    grep 'noise ledger' /tmp/sq.log | tail -n 3 | sed 's/^/log: /'
    kill -TERM $_p
    wait_for 20 eval '! kill -0 $_p 2>/dev/null'
    isold --config /tmp/sq.toml restore >/tmp/sq.restore 2>&1
    echo "restore_rc=$?"
}

# stall_guard_case WINDOW: the seed's case with `isold run` in charge (only isolated_cpus, and
# a textfile for its metrics). The guard off first: a SCHED_FIFO loop from `chisol -f 1 -c 3`
# and `echo 1 > /proc/sys/vm/stat_refresh` hangs. Then the guard on (a reload): the write
# returns and a SCHED_OTHER task started on CPU 3 runs; the loop stays FIFO on CPU 3 with its
# share of the CPU over WINDOW s; isold status and the metrics name the rescues; a stop and a
# kill -9 plus `isold restore` leave no thread SCHED_DEADLINE. On kernels with a fair server
# (6.12+) its runtime on CPU 3 is 0 for the case (the kernel would serve the kworker by
# itself after about a second) and put back after.
stall_guard_case() {
    rm -f /tmp/sg.*
    [ -e /sys/kernel/debug/sched ] || mount -t debugfs none /sys/kernel/debug
    _fs=/sys/kernel/debug/sched/fair_server/cpu3/runtime
    if [ -e $_fs ]; then
        cat $_fs >/tmp/sg.fair
        echo 0 >$_fs || echo "fair_server_write=failed"
        echo "fair_server_runtime=$(cat $_fs)"
        if [ "$(cat $_fs)" != 0 ]; then
            echo "fair_server_serves=yes"
            stall_guard_served
            return
        fi
    fi
    _conf='isolated_cpus = "2-3"\n[metrics]\ntextfile = "/tmp/sg.prom"\ninterval = 1\n'
    # shellcheck disable=SC2059
    printf "$_conf[stalls]\nenabled = false\n" >/tmp/sg.toml
    sg_isold_up && echo isold_up=yes
    echo "sched_rt_runtime_us=$(cat /proc/sys/kernel/sched_rt_runtime_us)"
    loop_on_cpu3 /tmp/sg.loop || { echo loop_started=no; return 1; }
    _loop=$(cat /tmp/sg.loop)
    sleep 1
    # CPU 2 idle, the guard off: its interrupts over 5 s (compared with the guard on below).
    _i0=$(sg_cpu2_irqs)
    sleep 5
    echo "cpu2_irqs_guard_off=$(($(sg_cpu2_irqs) - _i0))"
    _t0=$(now_cs)
    sg_clock "$_loop" >/tmp/sg.b0
    stat_refresh_bg /tmp/sg.t1
    # isold audit meanwhile names the kworker of CPU 3 as starving, behind the loop (once it
    # is: the write queues its work). On 6.1 it may not return before the kworker runs: its
    # output is read once the guard is on.
    sleep 1
    (
        isold audit --cpus 2-3 --duration 2 >/tmp/sg.audit 2>&1
        now_cs >/tmp/sg.audit.done
    ) &
    _ta=$(now_cs)
    while [ ! -e /tmp/sg.t1 ] && [ $(($(now_cs) - _t0)) -lt 800 ]; do usleep 200000; done
    if [ ! -e /tmp/sg.audit.done ]; then
        echo "audit_blocked_with_the_guard_off=yes"
        # Where it waits (for the next look at why).
        for _p in $(pidof isold); do
            [ "$_p" = "$(cat /tmp/sg.isold)" ] && continue
            sed "s/^/audit_stack: /" /proc/"$_p"/stack 2>/dev/null | head -n 12
        done
        # And whatever else waits in the kernel (who holds what the audit waits for).
        for _t in /proc/[0-9]*/task/*; do
            grep -q '^State:[[:space:]]*D' $_t/status 2>/dev/null || continue
            echo "waiting_task: ${_t#/proc/} $(cat $_t/comm)"
            sed "s/^/waiting_stack: /" $_t/stack 2>/dev/null | head -n 10
        done
    fi
    # The loop alone on CPU 3 meanwhile: its share as the guest's clocks measure it (under
    # TCG the scheduler's clock and the uptime drift apart by a few per cent).
    sg_clock "$_loop" >/tmp/sg.b1
    echo "loop_share_alone=$(sg_share /tmp/sg.b0 /tmp/sg.b1)"
    if [ -e /tmp/sg.t1 ]; then
        echo "guard_off_stat_refresh_seconds=$(secs $(($(cat /tmp/sg.t1) - _t0)))"
    else
        echo "guard_off_blocked_after=$(secs $(($(now_cs) - _t0)))"
    fi
    grep 'stall guard: off' /tmp/sg.log | tail -n 1 | sed 's/^/log: /'
    # The guard on, by a reload.
    # shellcheck disable=SC2059
    printf "$_conf" >/tmp/sg.toml
    sg_clock "$_loop" >/tmp/sg.c0
    _t0=$(now_cs)
    kill -HUP "$(cat /tmp/sg.isold)"
    # A SCHED_OTHER task on CPU 3 (a workload's logging thread): a shell waiting on a fifo,
    # pinned onto CPU 3 by an operator (taskset -p), then woken there.
    mkfifo /tmp/sg.fifo
    sleep 1
    sh -c ': >/tmp/sg.ready; read -r _ </tmp/sg.fifo; read -r u _ </proc/uptime; echo "$u" >/tmp/sg.t2' </dev/null >/dev/null 2>&1 &
    echo $! >/tmp/sg.task
    # Once it waits on the fifo (its exec done on a housekeeping CPU).
    wait_for 20 test -e /tmp/sg.ready
    usleep 300000
    taskset -pc 3 "$(cat /tmp/sg.task)" >/dev/null
    sleep 1
    _tw=$(now_cs)
    echo go >/tmp/sg.fifo
    wait_for 40 test -s /tmp/sg.t1 -a -s /tmp/sg.t2
    [ -e /tmp/sg.t1 ] && echo "stat_refresh_seconds=$(secs $(($(cat /tmp/sg.t1) - _t0)))"
    if [ -s /tmp/sg.t2 ]; then
        _u=$(cat /tmp/sg.t2)
        echo "other_task_seconds=$(secs $((${_u%.*} * 100 + 1${_u#*.} - 100 - _tw)))"
    fi
    wait_for 60 test -e /tmp/sg.audit.done
    [ -e /tmp/sg.audit.done ] && echo "audit_seconds=$(secs $(($(cat /tmp/sg.audit.done) - _ta)))"
    grep -A1 -e STARVING -e '^starving now' /tmp/sg.audit | sed 's/^/audit: /'
    tr '\n' ' ' </tmp/sg.audit | tr -s ' ' | grep -q "STARVING: kthread [0-9]* kworker/3:[^ ]*, runnable the whole [0-9.]* s window without running behind task $_loop sh" &&
        echo "audit_names_starving_kworker=yes"
    # The loop's share from the guard's start to WINDOW s after it.
    while [ $(($(now_cs) - _t0)) -lt $(($1 * 100)) ]; do usleep 200000; done
    sg_clock "$_loop" >/tmp/sg.c1
    echo "loop_share=$(sg_share /tmp/sg.c0 /tmp/sg.c1)"
    sched_of "$_loop" | sed 's/^/loop_/'
    echo "loop_cpus=$(grep Cpus_allowed_list /proc/"$_loop"/status | cut -f2)"
    _st=$(cat /proc/"$_loop"/stat)
    _st=${_st##*) }
    # shellcheck disable=SC2086
    set -- $_st
    echo "loop_cpu=${37}"
    sleep 2
    wait_for 30 sg_no_loan
    # CPU 2 idle, the guard on and nothing starving: the same 5 s.
    _i0=$(sg_cpu2_irqs)
    sleep 5
    echo "cpu2_irqs_guard_on=$(($(sg_cpu2_irqs) - _i0))"
    # What the lent threads used of CPU 3 since the guard started (the metrics' sum of the
    # loans that ended), and that time.
    sleep 1.5
    echo "lent_window_seconds=$(secs $(($(now_cs) - _t0)))"
    isold status >/tmp/sg.status
    sed 's/^/status: /' /tmp/sg.status
    grep 'stall guard: ' /tmp/sg.log | sed 's/^/log: /'
    wait_for 5 grep -q '^isold_stall_rescues_total' /tmp/sg.prom
    grep '^isold_stall' /tmp/sg.prom | sed 's/^/metric: /'
    # No loan is left behind: the loop still runs, so a kworker can starve and be lent again
    # (vmstat's work every stat_interval) at any moment; a loan lasts 3 s at most, so a
    # leaked one is a thread still lent after 30 s with no moment free of loans.
    wait_for 30 no_lent_thread
    echo "lent_after_rescues=$(lent_threads)"
    # A SCHED_OTHER hog on CPU 3: it starves again after each loan; a stop (SIGTERM) while
    # it is lent gives it back, a kill -9 leaves it lent until `isold restore`.
    setsid taskset -c 3 sh -c 'echo $$ >/tmp/sg.hog; while :; do :; done' </dev/null >/dev/null 2>&1 &
    wait_for 10 test -s /tmp/sg.hog
    wait_for 60 sg_hog_lent && echo "hog_lent_before_stop=yes"
    # The loop's share and the hog's CPU time over 8 s of loans: the hog is a thread that
    # takes whatever it is given.
    sg_clock "$_loop" >/tmp/sg.h0
    sg_clock "$(cat /tmp/sg.hog)" >/tmp/sg.g0
    sleep 8
    sg_clock "$_loop" >/tmp/sg.h1
    sg_clock "$(cat /tmp/sg.hog)" >/tmp/sg.g1
    echo "hog_phase_loop_share=$(sg_share /tmp/sg.h0 /tmp/sg.h1)"
    echo "hog_phase_hog_share=$(sg_share /tmp/sg.g0 /tmp/sg.g1)"
    kill -TERM "$(cat /tmp/sg.isold)"
    wait_for 20 sg_isold_gone
    echo "lent_after_stop=$(lent_threads)"
    echo "hog_policy_after_stop=$(sched_of "$(cat /tmp/sg.hog)" | sed -n 's/^policy=//p')"
    grep -c '"loan:' /run/isold/state.json 2>/dev/null | sed 's/^/loans_in_state_after_stop=/'
    sg_isold_up
    # A kill -9 while the hog is lent: isold stopped (SIGSTOP) at a moment the hog is lent,
    # then killed, so what is seen is what the kill leaves.
    wait_for 60 sg_frozen_lent && echo "hog_lent_at_kill=yes"
    echo "hog_policy_at_kill=$(sched_of "$(cat /tmp/sg.hog)" | sed -n 's/^policy=//p')"
    kill -9 "$(cat /tmp/sg.isold)"
    wait_for 10 sg_isold_gone
    grep -q "\"loan:$(cat /tmp/sg.hog):" /run/isold/state.json /run/isold/state.journal 2>/dev/null &&
        echo "hog_loan_kept_after_kill=yes"
    tail -n 8 /tmp/sg.log | sed 's/^/log2: /'
    isold restore >/tmp/sg.restore 2>&1
    echo "restore_rc=$?"
    grep -i 'lent a slice' /tmp/sg.restore | sed 's/^/restore: /'
    grep -q "lent a slice: sh (pid $(cat /tmp/sg.hog)): restored" /tmp/sg.restore && echo "hog_restored=yes"
    echo "lent_after_restore=$(lent_threads)"
    echo "hog_policy_after_restore=$(sched_of "$(cat /tmp/sg.hog)" | sed -n 's/^policy=//p')"
    stall_guard_cleanup
    echo "lent_at_end=$(lent_threads)"
}

# stall_guard_served: the case where the kernel's fair server serves CPU 3's fair tasks (its
# runtime could not be set to 0): the guard on, the loop, the write and the task on CPU 3
# finish (the kernel's doing), and the guard lends CPU 3's kworker nothing.
stall_guard_served() {
    printf 'isolated_cpus = "2-3"\n[metrics]\ntextfile = "/tmp/sg.prom"\ninterval = 1\n' >/tmp/sg.toml
    sg_isold_up && echo isold_up=yes
    echo "sched_rt_runtime_us=$(cat /proc/sys/kernel/sched_rt_runtime_us)"
    loop_on_cpu3 /tmp/sg.loop || { echo loop_started=no; return 1; }
    _loop=$(cat /tmp/sg.loop)
    sleep 1
    _t0=$(now_cs)
    stat_refresh_bg /tmp/sg.t1
    mkfifo /tmp/sg.fifo
    sh -c ': >/tmp/sg.ready; read -r _ </tmp/sg.fifo; read -r u _ </proc/uptime; echo "$u" >/tmp/sg.t2' </dev/null >/dev/null 2>&1 &
    echo $! >/tmp/sg.task
    wait_for 20 test -e /tmp/sg.ready
    usleep 300000
    taskset -pc 3 "$(cat /tmp/sg.task)" >/dev/null
    _tw=$(now_cs)
    echo go >/tmp/sg.fifo
    wait_for 40 test -s /tmp/sg.t1 -a -s /tmp/sg.t2
    [ -e /tmp/sg.t1 ] && echo "stat_refresh_seconds=$(secs $(($(cat /tmp/sg.t1) - _t0)))"
    if [ -s /tmp/sg.t2 ]; then
        _u=$(cat /tmp/sg.t2)
        echo "other_task_seconds=$(secs $((${_u%.*} * 100 + 1${_u#*.} - 100 - _tw)))"
    fi
    sleep 3
    echo "lent_window_seconds=$(secs $(($(now_cs) - _t0)))"
    sched_of "$_loop" | sed 's/^/loop_/'
    echo "loop_cpus=$(grep Cpus_allowed_list /proc/"$_loop"/status | cut -f2)"
    _st=$(cat /proc/"$_loop"/stat)
    _st=${_st##*) }
    # shellcheck disable=SC2086
    set -- $_st
    echo "loop_cpu=${37}"
    isold status | sed 's/^/status: /'
    grep 'stall guard: ' /tmp/sg.log | sed 's/^/log: /'
    grep '^isold_stall' /tmp/sg.prom | sed 's/^/metric: /'
    # As above: a loan may start again while the loop runs; a leaked one never ends.
    wait_for 30 no_lent_thread
    echo "lent_after_rescues=$(lent_threads)"
    stall_guard_cleanup
    echo "lent_at_end=$(lent_threads)"
}

# stall_guard_cleanup: the loop, the hog and isold ended, every value restored, the fair
# server's runtime back (also after a step killed by its timeout).
stall_guard_cleanup() {
    for _p in /tmp/sg.loop /tmp/sg.hog /tmp/sg.task /tmp/sg.isold; do
        [ -s $_p ] && kill -9 "$(cat $_p)" 2>/dev/null
    done
    usleep 300000
    isold restore >/dev/null 2>&1
    [ -s /tmp/sg.fair ] && cat /tmp/sg.fair >/sys/kernel/debug/sched/fair_server/cpu3/runtime
    return 0
}

# sb_cpu_ns PID: the CPU time of every thread of PID so far, nanoseconds (schedstat).
sb_cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ n += $1 } END { printf "%.0f\n", n }'; }
# sb_cost PID SECS: PID's CPU time over SECS s, in ms per s.
sb_cost() {
    _a=$(sb_cpu_ns "$1")
    sleep "$2"
    echo "$_a $(sb_cpu_ns "$1") $2" | awk '{ printf "%.3f\n", ($2 - $1) / 1e6 / $3 }'
}

# sb_isold_split WHEN: for isold, its status's CPU time by service over its last seconds and
# the guard's own figures (passes, quiet ones, sleeps, walks), as isold_WHEN_split= and
# isold_WHEN_guard= lines; nothing for another guard.
sb_isold_split() {
    [ "$_sbn" = isold ] || return 0
    isold --config /etc/sb-isold.toml status 2>/dev/null |
        sed -n "s/^  CPU time: /isold_$1_split=/p; s/^ *guard: /isold_$1_guard=/p"
}

# stall_bench NAME CMD...: one stall guard (isold run, or stalld) over CPUs 2-3 of the ISOL23
# guest, started as CMD on the housekeeping CPUs, RT throttling off: its CPU time over 20 s
# with nothing starving; with a SCHED_FIFO loop from `chisol -f 1 -c 3`, the time
# `echo 1 > /proc/sys/vm/stat_refresh` and a SCHED_OTHER task put on CPU 3 take; then its CPU
# time over 20 s with the loop on and nothing left to rescue, the loop's share over those
# 20 s, and idle CPU 2's interrupts (LOC RES CAL IWI) over 5 s. On 6.12+ the fair server's
# runtime on CPU 3 is 0 meanwhile. Lines NAME_key=value; everything ended at the end.
stall_bench() {
    _sbn=$1
    shift
    rm -f /tmp/sb.*
    [ -e /sys/kernel/debug/sched ] || mount -t debugfs none /sys/kernel/debug
    _fs=/sys/kernel/debug/sched/fair_server/cpu3/runtime
    [ -e $_fs ] && { cat $_fs >/tmp/sb.fair; echo 0 >$_fs; }
    cat /proc/sys/kernel/sched_rt_runtime_us >/tmp/sb.rt
    echo -1 >/proc/sys/kernel/sched_rt_runtime_us
    setsid taskset -c 0-1 "$@" </dev/null >/tmp/sb.log 2>&1 &
    _g=$!
    sleep 5
    kill -0 $_g 2>/dev/null || { echo "${_sbn}_started=no"; cat /tmp/sb.log; return 1; }
    echo "${_sbn}_idle_cost_ms_per_s=$(sb_cost $_g 20)"
    sb_isold_split idle
    loop_on_cpu3 /tmp/sb.loop
    _loop=$(cat /tmp/sb.loop)
    sleep 1
    _t0=$(now_cs)
    stat_refresh_bg /tmp/sb.t1
    sleep 1
    _t2=$(now_cs)
    taskset -c 3 sh -c 'now_cs() { _u=$(cut -d" " -f1 /proc/uptime); echo $((${_u%.*} * 100 + 1${_u#*.} - 100)); }; now_cs >/tmp/sb.t2.part; mv /tmp/sb.t2.part /tmp/sb.t2' &
    wait_for 90 test -s /tmp/sb.t1 -a -s /tmp/sb.t2
    if [ -s /tmp/sb.t1 ]; then
        echo "${_sbn}_stat_refresh_s=$(secs $(($(cat /tmp/sb.t1) - _t0)))"
    else
        echo "${_sbn}_stat_refresh_s=blocked after $(secs $(($(now_cs) - _t0)))"
    fi
    if [ -s /tmp/sb.t2 ]; then
        echo "${_sbn}_task_s=$(secs $(($(cat /tmp/sb.t2) - _t2)))"
    else
        echo "${_sbn}_task_s=not run after $(secs $(($(now_cs) - _t2)))"
    fi
    sleep 5
    sg_clock "$_loop" >/tmp/sb.c0
    echo "${_sbn}_busy_cost_ms_per_s=$(sb_cost $_g 20)"
    sb_isold_split busy
    kill -0 $_g 2>/dev/null && echo "${_sbn}_alive=yes" || tail -n 20 /tmp/sb.log | sed "s/^/${_sbn}_died: /"
    sg_clock "$_loop" >/tmp/sb.c1
    echo "${_sbn}_loop_share=$(sg_share /tmp/sb.c0 /tmp/sb.c1)"
    _i0=$(sg_cpu2_irqs)
    sleep 5
    echo "${_sbn}_cpu2_irqs_5s=$(($(sg_cpu2_irqs) - _i0))"
    kill -9 "$_loop" 2>/dev/null
    kill -TERM $_g
    wait_for 10 eval '! kill -0 $_g 2>/dev/null'
    kill -9 $_g 2>/dev/null
    grep -ciE 'boost|lent' /tmp/sb.log | sed "s/^/${_sbn}_log_rescue_lines=/"
    grep -iE 'boost|lent' /tmp/sb.log | head -n 6 | sed "s/^/${_sbn}_log: /"
    echo "${_sbn}_deadline_left=$(lent_threads)"
    cat /tmp/sb.rt >/proc/sys/kernel/sched_rt_runtime_us
    [ -s /tmp/sb.fair ] && cat /tmp/sb.fair >$_fs
    sleep 1
    return 0
}

# stall_bench_idle: idle CPU 2's interrupts over 5 s with no guard running (the baseline of
# stall_bench's figure).
stall_bench_idle() {
    sleep 2
    _i0=$(sg_cpu2_irqs)
    sleep 5
    echo "none_cpu2_irqs_5s=$(($(sg_cpu2_irqs) - _i0))"
}

# irq_count IRQ CPU: IRQ's count on CPU in /proc/interrupts.
irq_count() { awk -v irq="$1:" -v col=$(($2 + 2)) '$1 == irq { print $col }' /proc/interrupts; }

# noise_case: the noise ledger as a user meets it, with oslat (rt-tests) as the workload on
# isolated CPU 3. `isold run` records CPUs 2-3 (its ledger on by default; irq_affinity off so
# that an IRQ may be let onto CPU 3). Idle CPU 2's interrupts over 3 s before isold and with
# its ledger recording. Then, while oslat runs, the culprits: ttyS0's IRQ 4 let onto CPU 3 and
# fired from CPU 0 by writes to the serial port; a shell pinned to CPU 3 waking every 300 ms;
# CPU 3's kworker run five times (stat_refresh); on CPU 2 a workload whose sibling thread on
# CPU 0 unmaps pages (TLB shootdowns). What the kernel counted (IRQ 4 on CPU 3, TLB on CPU 2),
# the daemon's ledger before and after (`isold noise --json`), a one-time `isold noise
# --duration` inside the same stretch, oslat's maximum, the metrics, the human forms; isold
# stopped and restored, and no instance left.
noise_case() {
    _orig=$(cat /proc/irq/4/smp_affinity_list)
    rm -f /tmp/nz.* /tmp/noise.*
    printf 'isolated_cpus = "2-3"\n[items]\nirq_affinity = false\n[stalls]\nenabled = false\n[metrics]\ntextfile = "/tmp/nz.prom"\ninterval = 1\n' >/tmp/nz.toml
    # Idle CPU 2's interrupts over 3 s, no ledger.
    sleep 1
    _i0=$(sg_cpu2_irqs)
    sleep 3
    echo "cpu2_irqs_ledger_off=$(($(sg_cpu2_irqs) - _i0))"
    setsid isold --config /tmp/nz.toml run </dev/null >/tmp/nz.log 2>&1 &
    echo $! >/tmp/nz.isold
    wait_for 60 grep -q '"state": "recording CPUs 2-3"' /run/isold/status.json && echo "ledger_recording=yes"
    sleep 1
    _i0=$(sg_cpu2_irqs)
    sleep 3
    echo "cpu2_irqs_ledger_on=$(($(sg_cpu2_irqs) - _i0))"
    # oslat on CPU 3 (its main thread on CPU 0), until everything below is done (SIGINT ends
    # it with its figures; 300 s bounds a step that goes wrong).
    oslat -c 3 -C 0 -D 300 >/tmp/nz.oslat 2>&1 &
    _os=$!
    # Past its start-up (its measuring loop runs once its threads are set up).
    sleep 6
    # Its measuring thread: the one allowed on CPU 3 only.
    for _t in /proc/$_os/task/*; do
        grep -q '^Cpus_allowed_list:[[:space:]]*3$' $_t/status && echo "oslat_worker=${_t##*/}"
    done
    _n0=$(now_cs)
    # 30 s: the culprits below take 5 s, and with two guests on the host's two cores the
    # commands between them took 10 s more (a 10 s window once ended half way through).
    isold noise --cpus 2-3 --duration 30 --json >/tmp/noise.json 2>/tmp/noise.err &
    _nz=$!
    # The culprits below must fall in its window. Under TCG, with oslat spinning on CPU 3,
    # each event it enables takes 0.2-0.5 s (text patching waits on every CPU): it took 5-15 s
    # to start here, and over 30 s with two guests on the host's two cores.
    if wait_for 120 grep -q 'isold noise: recording' /tmp/noise.err; then
        echo "noise_started_after=$(secs $(($(now_cs) - _n0)))"
    else
        echo "noise_started_after=never"
    fi
    sleep 1.5
    isold noise --json >/tmp/nz.before
    _c0=$(irq_count 4 3)
    _t0=$(awk '$1 == "TLB:" { print $4 }' /proc/interrupts)
    isol-tlb 2 0 200 4 >/tmp/nz.tlb &
    _tlb=$!
    echo 3 >/proc/irq/4/smp_affinity_list || echo "irq4_moved=no" >>/tmp/nz.out
    taskset -c 3 sh -c 'i=0; while [ $i -lt 10 ]; do usleep 300000; i=$((i + 1)); done' &
    _sh=$!
    # 8 bursts of 1 KB through the serial port (QEMU's UART interrupts a few times for each)
    # and CPU 3's kworker run five times (stat_refresh queues vmstat work on every CPU).
    for _i in 1 2 3 4 5 6 7 8; do
        dd if=/dev/zero bs=1024 count=1 2>/dev/null | tr '\0' '.' >/dev/ttyS0
        [ $_i -le 5 ] && echo 1 >/proc/sys/vm/stat_refresh
        usleep 200000
    done
    wait $_sh
    wait $_tlb
    usleep 500000
    echo "$_orig" >/proc/irq/4/smp_affinity_list
    _c1=$(irq_count 4 3)
    _t1=$(awk '$1 == "TLB:" { print $4 }' /proc/interrupts)
    wait $_nz
    echo "noise_rc=$?"
    cat /tmp/nz.out 2>/dev/null
    echo "pinned_sh=$_sh"
    echo "irq4_cpu3=$((_c1 - _c0))"
    echo "tlb_cpu2=$((_t1 - _t0))"
    cat /tmp/nz.tlb
    # The daemon's file follows within its interval (1 s).
    sleep 2.5
    isold noise --json >/tmp/nz.after
    echo "daemon_noise_rc=$?"
    kill -INT $_os
    wait $_os
    echo "oslat_max_us=$(sed -n "s/^ *Maximum:[^0-9]*\([0-9]*\).*/\1/p" /tmp/nz.oslat | head -n 1)"
    grep -i 'maximum\|error' /tmp/nz.oslat | sed 's/^/oslat: /'
    for _f in noise.json nz.before nz.after; do
        echo "--- $_f"
        cat /tmp/$_f
        echo "--- end"
    done
    sed 's/^/noise_err: /' /tmp/noise.err
    isold noise --since 1m --json >/tmp/nz.since
    echo "since_rc=$?"
    grep -q '"from_unix"' /tmp/nz.since && echo "since_window=yes"
    isold noise | sed 's/^/human: /'
    isold status | grep -i 'noise\|longest' | sed 's/^/status: /'
    grep '^isold_cpu_noise' /tmp/nz.prom | grep -v '_bucket' | sed 's/^/metric: /'
    grep '^isold_cpu_foreign_context_switches_total' /tmp/nz.prom | sed 's/^/metric: /'
    grep '^isold_cpu_noise_duration_seconds_bucket{cpu="3",le="2e-05"}\|^isold_cpu_noise_duration_seconds_bucket{cpu="3",le="0.00002"}' /tmp/nz.prom | sed 's/^/metric: /'
    kill -TERM "$(cat /tmp/nz.isold)"
    wait_for 20 sg_gone "$(cat /tmp/nz.isold)"
    isold noise >/tmp/nz.stopped 2>&1
    echo "stopped_rc=$?"
    head -n 2 /tmp/nz.stopped | sed 's/^/stopped: /'
    grep -A1 '^note' /tmp/nz.stopped | sed 's/^/stopped: /'
    isold restore >/dev/null 2>&1
    echo "restore_rc=$?"
    echo "instances_after=$(ls /sys/kernel/tracing/instances | tr '\n' ' ')"
}
# sg_gone PID: PID ended (a zombie counts as ended).
sg_gone() { ! kill -0 "$1" 2>/dev/null || grep -q ') Z' /proc/"$1"/stat 2>/dev/null; }

# nb_cpu3_irqs: every interrupt CPU 3 took so far (its column of /proc/interrupts).
nb_cpu3_irqs() { awk 'NR > 1 && $5 ~ /^[0-9]+$/ { n += $5 } END { print n }' /proc/interrupts; }
# nb_events: the interruptions of CPU 3 isold's ledger counted so far (its noise.json).
nb_events() { isold noise --cpus 3 --json | sed -n 's/^      "events": \([0-9]*\),$/\1/p' | head -n 1; }
# nb_tlb: the TLB shootdowns CPU 3 took so far.
nb_tlb() { awk '$1 == "TLB:" { print $5 }' /proc/interrupts; }
# nb_measure NAME SECS PID TID: over SECS s, the ledger thread TID's and isold PID's CPU time
# (ms per s), CPU 3's interrupts and the ledger's interruptions (per s). Lines NAME_key=value.
# nb_threads PID: "comm/tid runtime_ns" for each of PID's threads.
nb_threads() {
    for _d in /proc/"$1"/task/*; do
        [ -r "$_d"/schedstat ] || continue
        echo "$(cat "$_d"/comm)/${_d##*/} $(cut -d' ' -f1 "$_d"/schedstat)"
    done
}
nb_measure() {
    _a=$(cut -d' ' -f1 /proc/"$3"/task/"$4"/schedstat)
    _b=$(sb_cpu_ns "$3")
    _i=$(nb_cpu3_irqs)
    _t=$(nb_tlb)
    _e=$(nb_events)
    nb_threads "$3" >/tmp/nb.threads.a
    sleep "$2"
    nb_threads "$3" >/tmp/nb.threads.b
    # Each thread's own share (comm: its name), to see where the daemon's time goes.
    awk -v w="$1" -v s="$2" 'NR == FNR { a[$1] = $2; next } { d[$1] += $2 - a[$1] } END { for (t in d) printf "%s_thread_%s_ms_per_s=%.3f\n", w, t, d[t] / 1e6 / s }' /tmp/nb.threads.a /tmp/nb.threads.b | sort
    echo "$1_ledger_ms_per_s=$(echo "$_a $(cut -d' ' -f1 /proc/"$3"/task/"$4"/schedstat) $2" | awk '{ printf "%.3f", ($2 - $1) / 1e6 / $3 }')"
    echo "$1_isold_ms_per_s=$(echo "$_b $(sb_cpu_ns "$3") $2" | awk '{ printf "%.3f", ($2 - $1) / 1e6 / $3 }')"
    echo "$1_cpu3_irqs_per_s=$(( ($(nb_cpu3_irqs) - _i) / $2 ))"
    echo "$1_cpu3_tlb_per_s=$(( ($(nb_tlb) - _t) / $2 ))"
    # The ledger's file follows within its interval; the reads were made the same way.
    echo "$1_ledger_events_per_s=$(( ($(nb_events) - _e) / $2 ))"
}
# noise_bench RATE...: the noise ledger's cost in `isold run` (ledger on, metrics on, the
# stall guard and irq_affinity off) with CPU 3 idle, then with a workload on CPU 3 whose
# sibling thread on CPU 0 unmaps a page RATE times a second (a TLB shootdown IPI to CPU 3
# each), each over 20 s; lost pages at the end.
noise_bench() {
    rm -f /tmp/nb.*
    # NB_STALLS=on: the stall guard on too, as shipped (the whole daemon idle, issue 49).
    _stalls='[stalls]\nenabled = false\n'
    [ "${NB_STALLS:-off}" = on ] && _stalls=''
    printf "isolated_cpus = \"2-3\"\n[items]\nirq_affinity = false\n${_stalls}[metrics]\ntextfile = \"/tmp/nb.prom\"\ninterval = 1\n" >/tmp/nb.toml
    echo "stalls=${NB_STALLS:-off}"
    setsid taskset -c 0-1 isold --config /tmp/nb.toml run </dev/null >/tmp/nb.log 2>&1 &
    _p=$!
    wait_for 60 grep -q '"state": "recording CPUs 2-3"' /run/isold/status.json || {
        echo "started=no"
        cat /tmp/nb.log
        return 1
    }
    _tid=$(grep -l '^isold-noise$' /proc/"$_p"/task/*/comm | sed 's,/comm$,,; s,.*/,,')
    echo "noise_tid=$_tid"
    sleep 3
    nb_measure idle 20 "$_p" "$_tid"
    for _r in "$@"; do
        isol-tlb 3 0 "$_r" 26 >/tmp/nb.tlb &
        _w=$!
        sleep 3
        nb_measure "rate$_r" 20 "$_p" "$_tid"
        wait $_w
        sed "s/^/rate${_r}_/" /tmp/nb.tlb
        sleep 2
    done
    grep '"lost_pages"' /run/isold/status.json | sed 's/^ */status: /'
    isold status | grep 'CPU time' | sed 's/^ */services: /'
    isold noise --cpus 3 | head -n 8 | sed 's/^/human: /'
    kill -TERM "$_p"
    wait_for 20 sg_gone "$_p"
    isold restore >/dev/null 2>&1
    echo "restore_rc=$?"
}

# restart_case WINDOW: `isold run` as shipped (isolated_cpus only: the stall guard and the noise
# ledger on), a SCHED_FIFO loop on CPU 3, CPU 2 idle. The IPIs (CAL, RES, IWI, TLB) CPUs 2 and 3
# take over WINDOW s with nothing done (control), over WINDOW s from a stop (SIGTERM) and a
# start (restart), and from a kill -9 and a start (kill9). Where the kernel has the
# ipi_send_cpu and ipi_send_cpumask tracepoints (6.6+), an instance of the case's own, enabled
# before the windows, names each IPI's call site ("NAME_site: COUNT CALLSITE").
restart_case() {
    rm -f /tmp/rs.*
    printf 'isolated_cpus = "2-3"\n' >/tmp/rs.toml
    rs_up && echo "first_recording=yes"
    loop_on_cpu3 /tmp/rs.loop || {
        echo loop_started=no
        return 1
    }
    _T=/sys/kernel/tracing
    _I=$_T/instances/rs-ipis
    if [ -d $_T/events/ipi/ipi_send_cpumask ] && [ -d $_T/events/ipi/ipi_send_cpu ]; then
        mkdir $_I
        echo 'cpumask & CPUS{2-3}' >$_I/events/ipi/ipi_send_cpumask/filter
        echo 'cpu >= 2' >$_I/events/ipi/ipi_send_cpu/filter
        echo 1 >$_I/events/ipi/ipi_send_cpumask/enable
        echo 1 >$_I/events/ipi/ipi_send_cpu/enable
        echo "ipi_sites=yes"
    else
        echo "ipi_sites=no"
    fi
    sleep 3
    rs_window control "$1" true
    rs_window restart "$1" rs_restart
    grep -q 'adopted' /run/isold/status.json && echo "adopted_after_restart=yes"
    rs_window kill9 "$1" rs_kill9
    grep -q 'adopted' /run/isold/status.json && echo "adopted_after_kill9=yes"
    if [ -d $_I ]; then
        echo 0 >$_I/events/enable
        rmdir $_I
    fi
    kill -TERM "$(cat /tmp/rs.isold)"
    wait_for 20 sg_gone "$(cat /tmp/rs.isold)"
    echo "instances_after_stop=$(ls $_T/instances | tr '\n' ' ')"
    kill "$(cat /tmp/rs.loop)"
    isold restore >/dev/null 2>&1
    echo "restore_rc=$?"
    echo "instances_after_restore=$(ls $_T/instances | tr '\n' ' ')"
    grep -i 'noise ledger' /tmp/rs.log | sed 's/^/log: /'
}
rs_up() {
    setsid isold --config /tmp/rs.toml run </dev/null >>/tmp/rs.log 2>&1 &
    echo $! >/tmp/rs.isold
    wait_for 60 grep -qs '"state": "recording CPUs 2-3' /run/isold/status.json
}
rs_restart() {
    kill -TERM "$(cat /tmp/rs.isold)"
    wait_for 20 sg_gone "$(cat /tmp/rs.isold)"
    rs_up
}
rs_kill9() {
    kill -9 "$(cat /tmp/rs.isold)"
    wait_for 20 sg_gone "$(cat /tmp/rs.isold)"
    rs_up
}
# rs_ipis: CPU 2's and CPU 3's CAL, RES, IWI and TLB summed.
rs_ipis() { awk '$1 ~ /^(CAL|RES|IWI|TLB):$/ { c2 += $4; c3 += $5 } END { print c2, c3 }' /proc/interrupts; }
# rs_window NAME SECONDS CMD: CMD run at the start of a window of SECONDS s (CMD's own time
# included); NAME_cpu2 and NAME_cpu3 are the IPIs each took, NAME_site lines their call sites.
rs_window() {
    [ -d "$_I" ] && echo >$_I/trace
    _t0=$(now_cs)
    # shellcheck disable=SC2046
    set -- "$1" "$2" "$3" $(rs_ipis)
    $3 || echo "$1_cmd=failed"
    while [ $(($(now_cs) - _t0)) -lt $(($2 * 100)) ]; do usleep 200000; done
    # shellcheck disable=SC2046
    set -- "$1" "$2" "$3" "$4" "$5" $(rs_ipis)
    echo "$1_cpu2=$(($6 - $4))"
    echo "$1_cpu3=$(($7 - $5))"
    echo "$1_seconds=$(secs $(($(now_cs) - _t0)))"
    [ -d "$_I" ] && grep -v '^#' $_I/trace | sed -E 's/.*callsite=([^ ]*).*/\1/' | sort | uniq -c | sed "s/^ */$1_site: /"
}
