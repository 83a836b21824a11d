# Guest side of scripts/bench-daemon: isold.service in the Debian guest, measured. Every
# figure is a "key=value" line.

# daemon_cpu_ms: the CPU time isold's process used so far (utime + stime), milliseconds.
daemon_cpu_ms() {
    _pid=$(systemctl show -p MainPID --value isold)
    # Fields after the comm's ") ": utime is the 12th, stime the 13th.
    sed 's/.*) //' /proc/"$_pid"/stat | awk -v hz="$(getconf CLK_TCK)" '{ print int(($12 + $13) * 1000 / hz) }'
}

daemon_mem() {
    _pid=$(systemctl show -p MainPID --value isold)
    echo "rss_kb=$(sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\).*/\1/p' /proc/"$_pid"/status)"
    echo "hwm_kb=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\).*/\1/p' /proc/"$_pid"/status)"
}

bench_setup() {
    mkdir -p /etc/isold
    printf 'isolated_cpus = "2-3"\n' >/etc/isold/isold.toml
    _i=0
    while [ $_i -lt 50 ]; do
        setsid taskset -c 0-3 sleep 100000 </dev/null >/dev/null 2>&1 &
        _i=$((_i + 1))
    done
    systemctl start isold || return 1
    echo "tasks=$(ls -d /proc/[0-9]*/task/[0-9]* | wc -l)"
    daemon_mem
}

# bench_idle SECS: isold's CPU time while nothing changes.
bench_idle() {
    _a=$(daemon_cpu_ms)
    sleep "$1"
    _b=$(daemon_cpu_ms)
    echo "idle_cpu_ms=$((_b - _a))"
    echo "idle_s=$1"
    daemon_mem
}

# irq_rows FILE: each row of /proc/interrupts with its count on CPUs 2 and 3 summed.
irq_rows() {
    awk 'NR > 1 { s = 0; for (i = 4; i <= 5; i++) if ($i ~ /^[0-9]+$/) s += $i; print $1, s }' /proc/interrupts >"$1"
}

# irq_window LABEL SECS: the interrupts on CPUs 2-3 over SECS seconds, in total per second
# ("irqs_per_s_LABEL=") and by row ("LABEL ROW COUNT" for each row that counted any).
irq_window() {
    irq_rows /tmp/irq.a
    sleep "$2"
    irq_rows /tmp/irq.b
    awk -v label="$1" -v secs="$2" 'NR == FNR { a[$1] = $2; next }
        { d = $2 - a[$1]; t += d; if (d > 0) print label, $1, d }
        END { print "irqs_per_s_" label "=" t / secs }' /tmp/irq.a /tmp/irq.b
}

# bench_interrupts SECS: interrupts on CPUs 2-3 with isold running, then with it stopped in
# place (SIGSTOP: the policy stays applied, the daemon does nothing), twice each.
bench_interrupts() {
    irq_window running "$1"
    systemctl kill -s STOP isold
    irq_window stopped "$1"
    systemctl kill -s CONT isold
    irq_window running2 "$1"
    systemctl kill -s STOP isold
    irq_window stopped2 "$1"
    systemctl kill -s CONT isold
}

# bench_storm N: N processes forked and gone; isold's CPU time and peak memory across it.
bench_storm() {
    _a=$(daemon_cpu_ms)
    isol-forkstorm "$1"
    sleep 2
    _b=$(daemon_cpu_ms)
    echo "storm_cpu_ms=$((_b - _a))"
    daemon_mem
    echo "active=$(systemctl is-active isold)"
}
