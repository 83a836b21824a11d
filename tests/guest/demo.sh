# Guest side of scripts/demo: show what disturbs the isolated CPUs, then run a workload there
# with chisol. Output is for a human. ISOLATED is the CPU list under study (e.g. 2-3).

# expand_cpus LIST: "0-1,3" -> "0 1 3"
expand_cpus() {
    echo "$1" | tr ',' '\n' | while IFS=- read -r a b; do
        [ -z "$a" ] && continue
        seq "$a" "${b:-$a}"
    done | tr '\n' ' '
}

# touches LIST: does the CPU list LIST include an isolated CPU?
touches() {
    for _c in $(expand_cpus "$1"); do
        case " $ISO_CPUS " in *" $_c "*) return 0 ;; esac
    done
    return 1
}

ISO_CPUS=$(expand_cpus "$ISOLATED")

demo_kernel() {
    echo "kernel:        $(uname -r)"
    echo "command line:  $(cat /proc/cmdline)"
    echo "isolated:      $(cat /sys/devices/system/cpu/isolated)   (isolcpus domain)"
    echo "nohz_full:     $(cat /sys/devices/system/cpu/nohz_full)"
    echo "cpuset root:   cpuset.cpus.isolated=$(cat /sys/fs/cgroup/cpuset.cpus.isolated 2>/dev/null)"
}

demo_irqs() {
    echo "IRQs whose effective affinity includes CPUs $ISOLATED:"
    _n=0
    for _d in /proc/irq/[0-9]*; do
        _irq=${_d##*/}
        _eff=$(cat "$_d/effective_affinity_list" 2>/dev/null) || continue
        touches "$_eff" || continue
        _name=$(grep "^ *$_irq:" /proc/interrupts | awk '{ $1=$2=$3=$4=$5=""; print }' | sed 's/^ *//')
        printf '  IRQ %-4s affinity %-6s effective %-4s %s\n' "$_irq" "$(cat "$_d/smp_affinity_list")" "$_eff" "$_name"
        _n=$((_n + 1))
    done
    [ "$_n" = 0 ] && echo "  none"
    echo "  (per-CPU managed IRQs, e.g. a virtio-blk queue bound to one CPU, stay on that CPU:"
    echo "   isolcpus=managed_irq only moves managed IRQs whose mask also has a housekeeping CPU)"
}

# interrupt_deltas SECONDS: per-CPU interrupt counts on the isolated CPUs over SECONDS.
interrupt_deltas() {
    cat /proc/interrupts >/tmp/irq.before
    sleep "$1"
    cat /proc/interrupts >/tmp/irq.after
    echo "interrupts on CPUs $ISOLATED during $1 s (row: CPU0 CPU1 CPU2 CPU3 delta):"
    awk -v iso="$ISO_CPUS" '
        FNR == 1 { next }
        NR == FNR { for (i = 2; i <= 5; i++) before[$1, i] = $i; next }
        {
            line = ""; hit = 0
            for (i = 2; i <= 5; i++) {
                d = $i - before[$1, i]
                line = line sprintf(" %6d", d)
                if (index(" " iso " ", " " (i - 2) " ") && d > 0) hit = 1
            }
            if (hit) {
                desc = ""; for (j = 6; j <= NF; j++) desc = desc " " $j
                printf "  %-5s%s  %s\n", $1, line, desc
            }
        }' /tmp/irq.before /tmp/irq.after
}

demo_tasks() {
    echo "tasks allowed on CPUs $ISOLATED (K = kernel thread, pinned = PF_NO_SETAFFINITY):"
    _k=0; _u=0; _p=0
    for _pid in $(ls /proc | grep '^[0-9][0-9]*$' | sort -n); do
        _st=$(cat "/proc/$_pid/stat" 2>/dev/null) || continue
        _comm=${_st#*(}; _comm=${_comm%)*}
        _rest=${_st##*) }
        # shellcheck disable=SC2086
        set -- $_rest
        _flags=$7
        _allowed=$(grep Cpus_allowed_list "/proc/$_pid/status" 2>/dev/null | cut -f2)
        touches "$_allowed" || continue
        _kind=user
        if [ $((_flags & 0x00200000)) != 0 ]; then _kind=K; _k=$((_k + 1)); else _u=$((_u + 1)); fi
        _pin=""
        if [ $((_flags & 0x04000000)) != 0 ]; then _pin=pinned; _p=$((_p + 1)); fi
        printf '  %-6s %-4s %-18s allowed %-6s %s\n' "$_pid" "$_kind" "$_comm" "$_allowed" "$_pin"
    done
    echo "  $_k kernel threads ($_p of them pinned per-CPU), $_u user tasks"
}

demo_workload() {
    rm -f /tmp/stop /tmp/wl.pid
    echo "running: chisol --isolated -f 1 -- sh -c 'busy loop'"
    chisol --isolated -f 1 -- sh -c 'echo $$ > /tmp/wl.pid; while [ ! -e /tmp/stop ]; do :; done' &
    _chisol=$!
    wait_for 20 test -s /tmp/wl.pid || { echo "workload did not start"; return 1; }
    _pid=$(cat /tmp/wl.pid)
    _seen=""
    for _i in 1 2 3 4 5 6 7 8; do
        _st=$(cat /proc/"$_pid"/stat)
        _rest=${_st##*) }
        # shellcheck disable=SC2086
        set -- $_rest
        _seen="$_seen ${37}"
        usleep 250000
    done
    echo "workload pid $_pid:"
    echo "  Cpus_allowed_list: $(grep Cpus_allowed_list /proc/"$_pid"/status | cut -f2)"
    sched_of "$_pid" | sed 's/^/  /; s/policy=1$/policy=1 (SCHED_FIFO)/'
    echo "  ran on CPU (8 samples, field 39 of /proc/PID/stat):$_seen"
    interrupt_deltas 2
    touch /tmp/stop
    wait "$_chisol"
    echo "workload exited with status $?"
}
