//! Restore exact on 7.x: the Debian root booted with Debian sid's 7.x-rt and `isolcpus=2-3`
//! under a real systemd, so that init and every task forked at boot have the affinity the
//! kernel gave them (CPUs 0-1). `isold apply` with the `cgroup_partition` item (7.x accepts an
//! isolated partition over boot-isolated CPUs), then `isold restore`: removing the partition
//! makes the kernel reset the root cgroup's tasks to every CPU, and restore must narrow them
//! back, leaving alone a task whose owner pinned it after the apply. Every thread that lived
//! through both is compared by tid and start time. Built only with `--features qemu`.

use std::time::Duration;

use taskisol_tests::qemu::{run, Expect, KernelRole, Scenario, StepOutput};

use super::PRE;

/// `snap FILE`: one line per thread, `tid starttime Cpus_allowed_list comm`, sorted.
const SNAP: &str = "aff() { sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/$1/status; }\n\
snap() {\n\
    for t in /proc/[0-9]*/task/[0-9]*; do\n\
        st=$(sed 's/.*) //' $t/stat 2>/dev/null | cut -d' ' -f20)\n\
        a=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' $t/status 2>/dev/null)\n\
        [ -n \"$st\" ] && [ -n \"$a\" ] && echo \"${t##*/} $st $a $(tr ' ' _ <$t/comm 2>/dev/null)\"\n\
    done | sort -n >$1\n\
}\n";

#[test]
fn rt7_isolcpus_partition_then_restore_gives_every_task_its_affinity() {
    let mut s = Scenario::debian("rt7_partition_restore", "isolcpus=2-3");
    s.role = KernelRole::Rt7;
    s.step_with_timeout(
        "apply_partition_restore",
        &format!(
            "{PRE}{SNAP}\
             mkdir -p /etc/isold\n\
             printf 'isolated_cpus = \"2-3\"\\n[items]\\ncgroup_partition = true\\n' >/etc/isold/isold.toml\n\
             echo init_at_boot=$(aff 1)\n\
             setsid sleep 100000 </dev/null >/dev/null 2>&1 &\nowner=$!\n\
             setsid taskset -c 0-3 sleep 100000 </dev/null >/dev/null 2>&1 &\nwide=$!\n\
             sleep 1\nsnap /tmp/before; echo threads_before=$(wc -l </tmp/before)\n\
             isold apply >/tmp/apply.out 2>&1; echo apply_rc=$?\n\
             grep -i partition /tmp/apply.out\n\
             echo partition=$(cat /sys/fs/cgroup/isolated/cpuset.cpus.partition)\n\
             echo wide_applied=$(aff $wide)\n\
             taskset -pc 0 $owner >/dev/null; echo owner_pinned=$(aff $owner)\n\
             isold restore >/tmp/restore.out 2>&1; echo restore_rc=$?\n\
             grep -i partition /tmp/restore.out\n\
             [ -e /sys/fs/cgroup/isolated ] && echo dir=present || echo dir=absent\n\
             snap /tmp/after\n\
             echo init=$(aff 1)\n\
             echo owner=$(aff $owner)\n\
             echo wide=$(aff $wide)\n\
             awk -v o=$owner 'NR == FNR {{ a[$1 \" \" $2] = $3; next }}\n\
                 $1 == o {{ next }}\n\
                 ($1 \" \" $2) in a {{ n++; if (a[$1 \" \" $2] != $3) {{ c++; print \"changed: \" $0 \" (was \" a[$1 \" \" $2] \")\" }} }}\n\
                 END {{ print \"compared=\" n + 0; print \"changed=\" c + 0 }}' /tmp/before /tmp/after\n\
             echo narrow_at_boot=$(awk '$3 == \"0-1\"' /tmp/before | wc -l)\n\
             kill $owner $wide"
        ),
        Duration::from_secs(240),
        vec![
            Expect::field("init_at_boot", "0-1"),
            Expect::field("apply_rc", "0"),
            Expect::field("partition", "isolated"),
            Expect::field("wide_applied", "0-1"),
            Expect::field("owner_pinned", "0"),
            Expect::field("restore_rc", "0"),
            Expect::stdout_has("narrowed back"),
            Expect::field("dir", "absent"),
            // init as at boot; the owner's pin kept; isold's own narrowing undone.
            Expect::field("init", "0-1"),
            Expect::field("owner", "0"),
            Expect::field("wide", "0-3"),
            Expect::field("changed", "0"),
            Expect::that("most threads compared", |o: &StepOutput| {
                match o.field("compared").and_then(|v| v.parse::<u32>().ok()) {
                    Some(n) if n >= 100 => Ok(()),
                    other => Err(format!("compared = {other:?}")),
                }
            }),
            Expect::that("user tasks were narrow at boot", |o: &StepOutput| {
                match o.field("narrow_at_boot").and_then(|v| v.parse::<u32>().ok()) {
                    Some(n) if n >= 10 => Ok(()),
                    other => Err(format!("narrow_at_boot = {other:?}")),
                }
            }),
        ],
    );
    run(&s).unwrap_or_else(|e| panic!("{e}")).assert_ok();
}
