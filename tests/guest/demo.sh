# Guest side of scripts/demo. Output is for a human; each audit's JSON goes between
# "--- json STAGE" and "--- end" lines, which the host turns into the closing table.

demo_kernel() {
    echo "kernel:        $(uname -r)"
    echo "command line:  $(cat /proc/cmdline)"
    echo "isolated:      $(cat /sys/devices/system/cpu/isolated)   (isolcpus domain)"
    echo "nohz_full:     $(cat /sys/devices/system/cpu/nohz_full)"
}

# demo_noise: what a busy machine looks like before anyone isolates anything: every IRQ
# routed to CPUs 2-3, two busy tasks and 50 sleepers allowed on every CPU.
demo_noise() {
    for _f in /proc/irq/*/smp_affinity_list; do echo 2-3 >"$_f" 2>/dev/null; done
    echo c >/proc/irq/default_smp_affinity
    for _i in 1 2; do setsid taskset -c 0-3 sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 & done
    _i=0
    while [ $_i -lt 50 ]; do setsid taskset -c 0-3 sleep 100000 </dev/null >/dev/null 2>&1 & _i=$((_i + 1)); done
    printf 'isolated_cpus = "2-3"\n' >/tmp/isold.toml
    echo "every IRQ routed to CPUs 2-3; 2 busy tasks and 50 sleepers started with taskset -c 0-3"
    echo "policy /tmp/isold.toml: isolated_cpus = \"2-3\" (preset realtime-virtual-host)"
}

# demo_audit STAGE SECS: the audit of CPUs 2-3 over SECS seconds, as JSON; the host shows
# it in isold's human form and puts it in the table.
demo_audit() {
    isold --config /tmp/isold.toml audit --duration "$2" --json >/tmp/audit.json
    echo "--- json $1"
    cat /tmp/audit.json
    echo "--- end"
}

# demo_partition: the policy also makes an isolated cpuset partition of its CPUs.
demo_partition() {
    printf '[items]\ncgroup_partition = true\n' >>/tmp/isold.toml
    echo "policy: [items] cgroup_partition = true (an isolated cpuset partition /sys/fs/cgroup/isolated)"
}

demo_apply() {
    echo "\$ isold apply"
    isold --config /tmp/isold.toml apply | tail -n 1
}

# demo_workload_start [CGROUP]: a SCHED_FIFO busy loop on CPU 3 (in CGROUP, a partition).
demo_workload_start() {
    rm -f /tmp/wl.pid
    _cg=${1:+--cgroup $1 }
    echo "\$ chisol ${_cg}-f 1 -c 3 -- sh -c 'busy loop'   (SCHED_FIFO 1 on isolated CPU 3)"
    # shellcheck disable=SC2086
    setsid chisol $_cg-f 1 -c 3 -- sh -c 'echo $$ > /tmp/wl.pid; while :; do :; done' </dev/null >/dev/null 2>&1 &
    wait_for 20 test -s /tmp/wl.pid || { echo "workload did not start"; return 1; }
    _pid=$(cat /tmp/wl.pid)
    echo "workload pid $_pid: Cpus_allowed_list $(grep Cpus_allowed_list /proc/"$_pid"/status | cut -f2), $(sched_of "$_pid" | tr '\n' ' ')"
    sleep 1
}

# demo_oslat [CGROUP]: oslat (rt-tests) on isolated CPU 3 for 16 s, in CGROUP (a partition)
# with its main thread on CPU 2, else on CPU 0; isold's noise ledger recording CPUs 2-3 for 10 s
# inside oslat's run: the ledger's JSON, then oslat's worst gap.
demo_oslat() {
    if [ -n "$1" ]; then _main=2; else _main=0; fi
    echo "\$ oslat -c 3 -C $_main -D 16 &   (rt-tests: a busy loop timing its own gaps, on isolated CPU 3)"
    setsid sh -c "${1:+echo \$\$ >$1/cgroup.procs; }exec oslat -c 3 -C $_main -D 16" </dev/null >/tmp/oslat.out 2>&1 &
    _o=$!
    sleep 3
    echo "\$ isold noise --cpus 2-3 --duration 10   (beside it)"
    isold --config /tmp/isold.toml noise --cpus 2-3 --duration 10 --json >/tmp/noise.json 2>/tmp/noise.err
    echo "noise_rc=$?"
    wait $_o
    sed 's/^/noise: /' /tmp/noise.err
    echo "--- json noise"
    cat /tmp/noise.json
    echo "--- end"
    grep -i 'maximum' /tmp/oslat.out
    echo "oslat_max_us=$(sed -n 's/^ *Maximum:[^0-9]*\([0-9]*\).*/\1/p' /tmp/oslat.out | head -n 1)"
}

demo_workload_stop() {
    kill "$(cat /tmp/wl.pid)"
    echo "workload stopped"
    echo "\$ isold restore"
    isold restore | tail -n 1
}
