//! The guest half of scripts/bench-net: the network items at scale, one boot per kernel
//! (6.12-rt by default; 6.1 has no rps_default_mask, so there the daemon alone steers a new
//! device). In the guest, under QEMU/TCG with 4 vCPUs, isolated CPUs 2-3:
//!
//! - 500 veth pairs (1,000 devices) made with `ip -batch`; `isold apply` timed without and with
//!   `rps` (and restored after each);
//! - `isold run` with `rps`: 30 pairs made one after the other, each device's time from
//!   `ip link add` returning to its rx queue's mask read as the housekeeping CPUs (median,
//!   worst; read every 10 ms by the shell's builtin `read`);
//! - 10 s of 50 pairs a second (100 devices a second): isold's CPU time over them, and how
//!   many devices were left unsteered 3 s after the last; again with the stall guard and the
//!   noise ledger off (a reload), for the network's own share.
//!
//!   qemu-bench-net [rt612|stock61|rt7 ...]

use taskisol_tests::qemu::{self, Expect, KernelRole, Scenario};

const SCRIPT: &str = r#"taskset -pc 0-1 $$ >/dev/null
printf 'isolated_cpus = "2-3"\n[items]\nrps = true\n' >/tmp/nb.toml
printf 'isolated_cpus = "2-3"\n' >/tmp/nb0.toml
pairs() { _i=$2; while [ $_i -lt $3 ]; do echo "link add $1a$_i type veth peer name $1b$_i"; _i=$((_i + 1)); done; }
steered() { read -r _m <"/sys/class/net/$1/queues/rx-0/rps_cpus" && [ "$_m" = 3 ]; }
pairs n 0 500 >/tmp/nb.batch
t0=$(now_cs); /usr/sbin/ip -batch /tmp/nb.batch; echo create_1000_veths_seconds=$(secs $(($(now_cs) - t0)))
echo devices=$(ls /sys/class/net | wc -l)
t0=$(now_cs); isold --config /tmp/nb0.toml apply >/dev/null; echo apply_rc=$?
echo apply_without_rps_seconds=$(secs $(($(now_cs) - t0)))
isold restore >/dev/null
t0=$(now_cs); isold --config /tmp/nb.toml apply >/tmp/nb.apply; echo apply_rc=$?
echo apply_with_rps_seconds=$(secs $(($(now_cs) - t0)))
echo masks_set=$(grep -c 'rps_cpus: changed' /tmp/nb.apply)
isold restore >/dev/null; echo restore_rc=$?
setsid isold --config /tmp/nb.toml run </dev/null >/tmp/nb.log 2>&1 &
echo $! >/tmp/nb.pid
wait_for 300 isold status >/dev/null && echo daemon=up
sleep 5
i=0
while [ $i -lt 30 ]; do
    /usr/sbin/ip link add ca$i type veth peer name cb$i
    t=$(now_cs)
    while ! steered ca$i && [ $(($(now_cs) - t)) -lt 1000 ]; do usleep 10000; done
    echo "lat_ms $(( ($(now_cs) - t) * 10 ))"
    i=$((i + 1))
done >/tmp/nb.lat
awk '{ print $2 }' /tmp/nb.lat | sort -n | awk '{ v[NR] = $1 } END { print "appear_to_mask_ms_median=" v[int((NR + 1) / 2)]; print "appear_to_mask_ms_worst=" v[NR] }'
cpu() { set -- $(cut -d' ' -f14,15 /proc/$(cat /tmp/nb.pid)/stat); echo $(($1 + $2)); }
# burst PREFIX NAME: 10 s of 50 pairs a second; isold's CPU over them and 3 s after, and the
# devices left unsteered then.
burst() {
    c0=$(cpu); t0=$(now_cs)
    s=0
    while [ $s -lt 10 ]; do
        pairs $1 $((s * 50)) $((s * 50 + 50)) >/tmp/nb.b$s
        /usr/sbin/ip -batch /tmp/nb.b$s
        s=$((s + 1))
        while [ $(($(now_cs) - t0)) -lt $((s * 100)) ]; do usleep 20000; done
    done
    sleep 3
    c1=$(cpu); t1=$(now_cs)
    echo ${2}_isold_cpu_percent=$(awk -v c=$((c1 - c0)) -v t=$((t1 - t0)) 'BEGIN { printf "%.1f", 100 * c / t }')
    n=0; for d in /sys/class/net/$1*; do steered ${d##*/} || n=$((n + 1)); done
    echo ${2}_unsteered_3s_after=$n
}
isold status | grep -E 'guard:|ledger:' | sed 's/^/before: /'
burst r burst
isold status | grep -E 'guard:|ledger:' | sed 's/^/after: /'
# The same with the stall guard and the noise ledger off (a reload): the network's own cost.
printf 'isolated_cpus = "2-3"\n[items]\nrps = true\n[noise]\nenabled = false\n[stalls]\nenabled = false\n' >/tmp/nb.toml
kill -HUP $(cat /tmp/nb.pid); sleep 5
burst q burst_net_only
echo isold_vmhwm_kb=$(awk '/VmHWM/ { print $2 }' /proc/$(cat /tmp/nb.pid)/status)
kill $(cat /tmp/nb.pid)
"#;

fn scenario(role: KernelRole) -> Scenario {
    let mut s = Scenario::new(&format!("{}-bench-net", role.as_str()), role, "");
    s.binaries.push("isold".into());
    s.binaries.push("/usr/sbin/ip".into());
    s.modules(&["veth"]);
    s.memory_mb = s.memory_mb.max(2048);
    s.timeout = std::time::Duration::from_secs(3600);
    s.step_with_timeout(
        "net_bench",
        SCRIPT,
        std::time::Duration::from_secs(3000),
        vec![
            Expect::field("daemon", "up"),
            Expect::field("burst_unsteered_3s_after", "0"),
            Expect::field("burst_net_only_unsteered_3s_after", "0"),
        ],
    );
    s
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let roles: Vec<KernelRole> = if args.is_empty() {
        vec![KernelRole::Rt612]
    } else {
        args.iter()
            .map(|r| match r.as_str() {
                "stock61" => KernelRole::Stock61,
                "rt612" => KernelRole::Rt612,
                "rt7" => KernelRole::Rt7,
                other => {
                    eprintln!("qemu-bench-net: unknown kernel {other:?} (stock61, rt612, rt7)");
                    std::process::exit(2);
                }
            })
            .collect()
    };
    let mut ok = true;
    for role in roles {
        eprintln!("bench-net: booting {}", role.as_str());
        match qemu::run(&scenario(role)) {
            Ok(o) => {
                println!("\n## {}: {}", role.as_str(), o.summary());
                if let Some(out) = o.outputs.get("net_bench") {
                    println!("\n{}{}", out.stdout, out.stderr);
                }
                for f in &o.failures {
                    println!("FAILED: {f}");
                    ok = false;
                }
            }
            Err(e) => {
                eprintln!("qemu-bench-net: {e}");
                ok = false;
            }
        }
    }
    if !ok {
        std::process::exit(1);
    }
}
