//! isold.service through the life of a production host, under a real systemd: the Debian root
//! of scripts/setup-debroot booted with Debian's 6.12-rt or sid's 7.x-rt, with /etc and
//! /var/lib on a disk (tests/guest/persist-init) so that the guest really reboots with them
//! kept.
//!
//! - stop is not undo (`on_stop = "keep"`, the default): after `systemctl stop` the policy
//!   holds (verify exit 0); `isold restore` is refused while the service runs, and afterwards
//!   gives back every value of the snapshot taken before the first start, with a line the
//!   administrator added to irqbalance's defaults kept;
//! - `on_stop = "restore"`: `systemctl restart` shows no moment where a moved IRQ or a narrowed
//!   task is back on an isolated CPU, nor one without the CPU latency request; `systemctl
//!   stop` restores; a reboot and a poweroff leave the policy and the boot-time files in place
//!   (checked during the shutdown, after isold.service has stopped);
//! - the boot-time files (KVM module options, irqbalance's banned CPUs, systemd's CPUAffinity
//!   drop-in, the GRUB drop-in) survive the reboot and take effect (PID 1 on the housekeeping
//!   CPUs, kvm loaded with isold's options); `isold restore` in the new boot removes them and
//!   leaves /etc as it was before the first apply;
//! - `systemd-analyze security` of the unit, before and after its hardening.
//!
//! Built only with `--features qemu` (see docs/TESTING.md).

use std::time::Duration;

use taskisol_tests::qemu::{run, Expect, KernelRole, Scenario, StepOutput};

use super::{at_least, num, PRE, UNIT};

const UNIT_BEFORE: &[u8] = include_bytes!("../../guest/isold-before-hardening.service");

/// The policy: the default preset (kvm and irqbalance items on) plus systemd's CPUAffinity,
/// so that every boot-time file is written.
fn config(on_stop: &str) -> String {
    format!(
        "printf 'isolated_cpus = \"2-3\"\\non_stop = \"{on_stop}\"\\n[items]\\nsystemd_cpuaffinity = true\\n' >/etc/isold/isold.toml\n"
    )
}

const FILES: &str = "/etc/modprobe.d/isold-kvm.conf /etc/systemd/system.conf.d/isold-cpuaffinity.conf /etc/default/grub.d/isold.cfg";

/// What a check during a shutdown expects: isold.service has stopped, and the policy and the
/// boot-time files are all in place.
fn shutdown_check(name: &str) -> (&str, &'static str, Vec<Expect>) {
    (
        name,
        "echo isold=$(systemctl is-active isold)\n\
         echo timer_migration=$(cat /proc/sys/kernel/timer_migration)\n\
         echo irq4=$(cat /proc/irq/4/smp_affinity_list)\n\
         isold verify >/tmp/verify.out 2>&1; echo verify_rc=$?\n\
         grep -E 'deviates|failed' /tmp/verify.out | head -n 5\n\
         echo files=$(ls /etc/modprobe.d/isold-kvm.conf /etc/systemd/system.conf.d/isold-cpuaffinity.conf /etc/default/grub.d/isold.cfg 2>/dev/null | wc -l)\n\
         echo banned=$(grep -c '^IRQBALANCE_BANNED_CPULIST=2-3$' /etc/default/irqbalance)\n\
         journalctl -u isold --no-pager -o cat | grep -c 'but this is the system shutting down' | sed 's/^/logged=/'",
        vec![
            Expect::field("isold", "inactive"),
            Expect::field("timer_migration", "0"),
            Expect::field("irq4", "0-1"),
            Expect::field("verify_rc", "0"),
            Expect::field("files", "3"),
            Expect::field("banned", "1"),
            at_least("logged", 1.0),
        ],
    )
}

/// The number of lines that differ between the /etc snapshot taken before the first apply
/// and one taken now (`etc_changed`), with the first of them.
const ETC_DIFF: &str = "etc_snapshot /tmp/etc.now\n\
    diff /var/lib/taskisol/etc.before /tmp/etc.now | grep '^[<>]' >/tmp/etc.diff\n\
    echo etc_changed=$(wc -l </tmp/etc.diff)\nhead -n 8 /tmp/etc.diff | sed 's/^/etc: /'\n";

#[test]
fn rt612_isold_service_stop_restart_reboot_poweroff() {
    isold_service_stop_restart_reboot_poweroff(KernelRole::Rt612);
}

#[test]
fn rt7_isold_service_stop_restart_reboot_poweroff() {
    isold_service_stop_restart_reboot_poweroff(KernelRole::Rt7);
}

fn isold_service_stop_restart_reboot_poweroff(role: KernelRole) {
    let mut s = Scenario::debian(&format!("{}_isold_lifecycle", role.as_str()), "");
    s.role = role;
    let rt7 = role == KernelRole::Rt7;
    s.disk_mb = Some(768);
    s.timeout = Duration::from_secs(1800);
    s.file("/etc/systemd/system/isold.service", 0o644, UNIT);
    s.file(
        "/etc/systemd/system/isold-before-hardening.service",
        0o644,
        UNIT_BEFORE,
    );
    s.step_with_timeout(
        "setup",
        &format!(
            // /etc/systemd/system.conf.d as `make install` creates it: isold.service can make
            // it writable, not create it.
            "{PRE}mkdir -p /etc/isold /var/lib/taskisol /etc/systemd/system.conf.d\n{}\
             /usr/sbin/modprobe -v kvm; echo modprobe_rc=$?\n\
             echo kvmclock_periodic_sync=$(cat /sys/module/kvm/parameters/kvmclock_periodic_sync 2>/dev/null || echo absent)\n\
             cp -p /etc/default/irqbalance /var/lib/taskisol/irqbalance.orig\n\
             i=0; while [ $i -lt 20 ]; do setsid taskset -c 0-3 sleep 100000 </dev/null >/dev/null 2>&1 & i=$((i+1)); done\n\
             setsid taskset -c 0-3 sleep 100000 </dev/null >/dev/null 2>&1 &\necho $! >/var/lib/taskisol/wide.pid\n\
             setsid taskset -c 3 sleep 100000 </dev/null >/dev/null 2>&1 &\n\
             sleep 1\nisold_snapshot /tmp/snap.before; echo snapshot_lines=$(wc -l </tmp/snap.before)\n\
             etc_snapshot /var/lib/taskisol/etc.before; echo etc_lines=$(wc -l </var/lib/taskisol/etc.before)\n\
             echo timer_migration=$(cat /proc/sys/kernel/timer_migration)\n\
             echo pid1=$(grep Cpus_allowed_list /proc/1/status | cut -f2)",
            config("keep")
        ),
        Duration::from_secs(180),
        vec![
            Expect::exit(0),
            at_least("snapshot_lines", 100.0),
            at_least("etc_lines", 300.0),
            Expect::field("timer_migration", "1"),
            Expect::field("pid1", "0-3"),
            Expect::field("modprobe_rc", "0"),
            Expect::field("kvmclock_periodic_sync", if rt7 { "absent" } else { "Y" }),
        ],
    );
    s.step_with_timeout(
        "systemd_analyze_security",
        "for u in isold-before-hardening isold; do\n\
         systemd-analyze security --no-pager $u.service >/tmp/sec.$u 2>&1\n\
         echo \"exposure_$u=$(sed -n 's/.*Overall exposure level for [^:]*: \\([0-9.]*\\).*/\\1/p' /tmp/sec.$u)\"\n\
         done\ngrep -E '^ *✗' /tmp/sec.isold | sed 's/^/open: /'",
        Duration::from_secs(120),
        vec![Expect::that(
            "the hardened unit's exposure below the one before",
            |o: &StepOutput| match (
                num(o, "exposure_isold-before-hardening"),
                num(o, "exposure_isold"),
            ) {
                (Some(before), Some(after)) if after < before => Ok(()),
                other => Err(format!("before, after: {other:?}")),
            },
        )],
    );
    s.step_with_timeout(
        "start_keep_restore_refused_while_running",
        &format!(
            "{PRE}systemctl start isold; echo start_rc=$?\n\
             echo active=$(systemctl is-active isold)\n\
             isold status; echo status_rc=$?\n\
             isold verify >/tmp/v.out; echo verify_rc=$?\ngrep 'set, waiting' /tmp/v.out\n\
             isold restore; echo restore_rc=$?\n\
             echo timer_migration=$(cat /proc/sys/kernel/timer_migration)\n\
             echo banned=$(grep -c '^IRQBALANCE_BANNED_CPULIST=2-3$' /etc/default/irqbalance)"
        ),
        Duration::from_secs(180),
        vec![
            Expect::field("start_rc", "0"),
            Expect::field("active", "active"),
            Expect::field("status_rc", "0"),
            Expect::stdout_has("  on stop: keep every value (isold restore undoes them)"),
            // Files that only a reboot or a module load make effective say so.
            Expect::stdout_has("isold-cpuaffinity.conf: set, takes effect after the next boot (or `systemctl daemon-reexec`): written after systemd (PID 1) started"),
            // 7.x's kvm has no kvmclock_periodic_sync: isold leaves it out of the file, whose
            // nx_huge_pages=0 the module (N under TCG) already has.
            if rt7 {
                Expect::output_lacks("isold-kvm.conf: set")
            } else {
                Expect::stdout_has("isold-kvm.conf: set, takes effect after the kvm modules are loaded again (or a reboot): kvm.kvmclock_periodic_sync is Y, the file says 0")
            },
            Expect::field("verify_rc", "0"),
            Expect::field("restore_rc", "1"),
            Expect::output_has("is keeping the policy and would put it right again: stop it first (systemctl stop isold), then run isold restore"),
            Expect::field("timer_migration", "0"),
            Expect::field("banned", "1"),
        ],
    );
    s.step_with_timeout(
        "stop_keeps_the_policy",
        "systemctl stop isold; echo stop_rc=$?\n\
         echo result=$(systemctl show -p Result --value isold)\n\
         isold verify >/tmp/v.out; echo verify_rc=$?\n\
         echo timer_migration=$(cat /proc/sys/kernel/timer_migration)\n\
         echo irq4=$(cat /proc/irq/4/smp_affinity_list)\n\
         echo wide=$(grep Cpus_allowed_list /proc/$(cat /var/lib/taskisol/wide.pid)/status | cut -f2)\n\
         journalctl -u isold --no-pager -o cat | grep -c 'the policy stays in force (on_stop = \"keep\")' | sed 's/^/logged=/'\n\
         isold status; echo status_rc=$?",
        Duration::from_secs(120),
        vec![
            Expect::field("stop_rc", "0"),
            Expect::field("result", "success"),
            Expect::field("verify_rc", "0"),
            Expect::field("timer_migration", "0"),
            Expect::field("irq4", "0-1"),
            Expect::field("wide", "0-1"),
            Expect::field("logged", "1"),
            Expect::field("status_rc", "3"),
        ],
    );
    s.step_with_timeout(
        "restore_gives_back_everything_and_keeps_the_admins_line",
        &format!(
            "echo 'IRQBALANCE_ARGS=\"--journal\"' >>/etc/default/irqbalance\n\
             isold restore >/tmp/r.out; echo restore_rc=$?\ntail -n 3 /tmp/r.out\n\
             isold_snapshot /tmp/snap.after\nsnapshot_diff /tmp/snap.before /tmp/snap.after\n\
             {ETC_DIFF}\
             {{ cat /var/lib/taskisol/irqbalance.orig; echo 'IRQBALANCE_ARGS=\"--journal\"'; }} | cmp - /etc/default/irqbalance && echo admin_line=kept\n\
             echo etc_only_irqbalance=$(grep -vc ' /etc/default/irqbalance' /tmp/etc.diff)\n\
             cp -p /var/lib/taskisol/irqbalance.orig /etc/default/irqbalance\n\
             echo state_files=$(ls /run/isold/state.json /var/lib/isold/state.json 2>/dev/null | wc -l)"
        ),
        Duration::from_secs(180),
        vec![
            Expect::field("restore_rc", "0"),
            Expect::field("differences", "0"),
            Expect::field("admin_line", "kept"),
            Expect::field("etc_only_irqbalance", "0"),
            Expect::field("state_files", "0"),
        ],
    );
    s.step_with_timeout(
        "restart_shows_no_window",
        &format!(
            "{PRE}{}systemctl start isold; echo start_rc=$?\n\
             w=$(cat /var/lib/taskisol/wide.pid)\n\
             echo before=$(cat /proc/irq/4/smp_affinity_list)/$(grep Cpus_allowed_list /proc/$w/status | cut -f2)\n\
             rm -f /tmp/win /tmp/win.*\n\
             watch_cpus 4 $w /tmp/win &\nwp=$!\n\
             ( while [ ! -e /tmp/win.stop ]; do od -An -td4 /dev/cpu_dma_latency | tr -d ' '; done | sort | uniq -c >/tmp/dma ) &\ndp=$!\n\
             sleep 1\nsystemctl restart isold; echo restart_rc=$?\nsleep 2\n\
             touch /tmp/win.stop; wait $wp $dp\ncat /tmp/win\nhead -n 5 /tmp/win.bad\n\
             echo dma_values=$(awk '{{print $2}}' /tmp/dma | sort -u | tr '\\n' ' ')\n\
             echo dma_samples=$(awk '{{n += $1}} END {{print n}}' /tmp/dma)\n\
             echo active=$(systemctl is-active isold)\n\
             journalctl -u isold --no-pager -o cat | grep -c 'but this is a restart of the service' | sed 's/^/logged=/'\n\
             journalctl -u isold --no-pager -o cat | grep -c 'took the CPU latency request back' | sed 's/^/dma_taken_back=/'\n\
             m=$(systemctl show -p MainPID --value isold)\n\
             echo dma_fds=$(ls -l /proc/$m/fd | grep -c cpu_dma_latency)\n\
             systemctl show -p NFileDescriptorStore isold | sed 's/^/store: /'",
            config("restore")
        ),
        Duration::from_secs(180),
        vec![
            Expect::field("start_rc", "0"),
            Expect::field("before", "0-1/0-1"),
            Expect::field("restart_rc", "0"),
            Expect::field("bad", "0"),
            at_least("samples", 20.0),
            Expect::field("dma_values", "3"),
            at_least("dma_samples", 5.0),
            Expect::field("active", "active"),
            Expect::field("logged", "1"),
            // The new process holds the very request the old one made.
            Expect::field("dma_taken_back", "1"),
            Expect::field("dma_fds", "1"),
            Expect::stdout_has("store: NFileDescriptorStore=1"),
        ],
    );
    s.step_with_timeout(
        "stop_restores_with_on_stop_restore",
        &format!(
            "systemctl stop isold; echo stop_rc=$?\n\
             journalctl -u isold --no-pager -o cat | grep -c 'a stop, and on_stop = \"restore\": restoring the original values' | sed 's/^/logged=/'\n\
             isold_snapshot /tmp/snap.after2\nsnapshot_diff /tmp/snap.before /tmp/snap.after2\n\
             {ETC_DIFF}echo dma=$(od -An -td4 /dev/cpu_dma_latency | tr -d ' ')"
        ),
        Duration::from_secs(180),
        vec![
            Expect::field("stop_rc", "0"),
            Expect::field("logged", "1"),
            Expect::field("differences", "0"),
            Expect::field("etc_changed", "0"),
            Expect::field("dma", "2000000000"),
        ],
    );
    // A state file cut short: the unit fails once with exit 6 and the reason, and does not
    // restart in a loop (RestartPreventExitStatus=6).
    s.step_with_timeout(
        "corrupt_state_file_no_restart_loop",
        "printf '{\"version\": 1, \"boot_id\": \"x\", \"isol' >/run/isold/state.json\n\
         systemctl start isold; echo start_rc=$?\nsleep 3\n\
         echo active=$(systemctl is-active isold)\n\
         echo n_restarts=$(systemctl show -p NRestarts --value isold)\n\
         echo exec_status=$(systemctl show -p ExecMainStatus --value isold)\n\
         systemctl status isold --no-pager -l -n 5 >/tmp/st.out 2>&1\n\
         echo shown=$(grep -c 'not a usable isold state file' /tmp/st.out)\n\
         rm /run/isold/state.json\nsystemctl reset-failed isold",
        Duration::from_secs(120),
        vec![
            Expect::field("start_rc", "1"),
            Expect::field("active", "failed"),
            Expect::field("n_restarts", "0"),
            Expect::field("exec_status", "6"),
            at_least("shown", 1.0),
        ],
    );
    s.step_with_timeout(
        "start_and_write_grub_before_the_reboot",
        &format!(
            "{PRE}systemctl start isold; echo start_rc=$?\n\
             isold bootargs --write-grub; echo grub_rc=$?\n\
             echo files=$(ls {FILES} 2>/dev/null | wc -l)\n\
             isold verify >/tmp/v.out; echo verify_rc=$?\n\
             echo waiting=$(grep -c '^  set, waiting' /tmp/v.out)\ngrep 'set, waiting' /tmp/v.out\n\
             cat /proc/sys/kernel/random/boot_id >/var/lib/taskisol/boot1"
        ),
        Duration::from_secs(180),
        vec![
            Expect::field("start_rc", "0"),
            Expect::field("grub_rc", "0"),
            Expect::field("files", "3"),
            Expect::field("verify_rc", "0"),
            // systemd's CPUAffinity, the kvm options (not on 7.x, above) and the GRUB drop-in.
            Expect::field("waiting", if rt7 { "2" } else { "3" }),
            Expect::stdout_has("update-grub and a reboot: the running kernel lacks isolcpus="),
        ],
    );
    s.reboot(
        "reboot",
        Some(shutdown_check("after_isold_stopped_at_reboot")),
    );
    s.step_with_timeout(
        "boot_time_files_survive_and_take_effect",
        &format!(
            "echo new_boot=$([ \"$(cat /proc/sys/kernel/random/boot_id)\" != \"$(cat /var/lib/taskisol/boot1)\" ] && echo yes || echo no)\n\
             echo files=$(ls {FILES} 2>/dev/null | wc -l)\n\
             echo banned=$(grep -c '^IRQBALANCE_BANNED_CPULIST=2-3$' /etc/default/irqbalance)\n\
             echo pid1=$(grep Cpus_allowed_list /proc/1/status | cut -f2)\n\
             echo runtime_state=$(ls /run/isold/state.json 2>/dev/null || echo none)\n\
             echo persistent_state=$(ls /var/lib/isold/state.json 2>/dev/null || echo none)\n\
             echo timer_migration=$(cat /proc/sys/kernel/timer_migration)\n\
             lsmod | grep -w kvm | sed 's/^/loaded: /'\n/usr/sbin/modprobe -v kvm; echo modprobe_rc=$?\n\
             echo nx_huge_pages=$(cat /sys/module/kvm/parameters/nx_huge_pages)\n\
             echo kvmclock_periodic_sync=$(cat /sys/module/kvm/parameters/kvmclock_periodic_sync 2>/dev/null || echo absent)\n\
             isold status; echo status_rc=$?"
        ),
        Duration::from_secs(120),
        vec![
            Expect::field("new_boot", "yes"),
            Expect::field("files", "3"),
            Expect::field("banned", "1"),
            // systemd read isold's drop-in as PID 1 of this boot.
            Expect::field("pid1", "0-1"),
            Expect::field("runtime_state", "none"),
            Expect::field("persistent_state", "/var/lib/isold/state.json"),
            // The reboot reset the kernel's values; isold.service is not enabled here.
            Expect::field("timer_migration", "1"),
            // kvm loaded with isold's options.
            Expect::field("modprobe_rc", "0"),
            Expect::field("nx_huge_pages", "N"),
            Expect::field("kvmclock_periodic_sync", if rt7 { "absent" } else { "N" }),
            Expect::field("status_rc", "3"),
        ],
    );
    s.step_with_timeout(
        "restore_after_the_reboot_leaves_etc_as_before",
        &format!(
            "isold restore >/tmp/r.out; echo restore_rc=$?\ncat /tmp/r.out\n{ETC_DIFF}\
             echo persistent_state=$(ls /var/lib/isold/state.json 2>/dev/null || echo none)"
        ),
        Duration::from_secs(120),
        vec![
            Expect::field("restore_rc", "0"),
            Expect::stdout_has(
                "restored          /etc/default/grub.d/isold.cfg: restored: removed",
            ),
            Expect::stdout_has(
                "restored          /etc/default/irqbalance: restored: original content",
            ),
            Expect::field("etc_changed", "0"),
            Expect::field("persistent_state", "none"),
        ],
    );
    s.step_with_timeout(
        "start_before_the_poweroff",
        &format!(
            "{PRE}systemctl start isold; echo start_rc=$?\n\
             isold bootargs --write-grub >/dev/null; echo grub_rc=$?\n\
             echo files=$(ls {FILES} 2>/dev/null | wc -l)"
        ),
        Duration::from_secs(180),
        vec![
            Expect::field("start_rc", "0"),
            Expect::field("grub_rc", "0"),
            Expect::field("files", "3"),
        ],
    );
    s.poweroff(
        "poweroff",
        Some(shutdown_check("after_isold_stopped_at_poweroff")),
    );
    let o = run(&s).unwrap_or_else(|e| panic!("{e}"));
    for step in ["systemd_analyze_security", "restart_shows_no_window"] {
        if let Some(out) = o.outputs.get(step) {
            eprintln!("{step}:\n{}", out.stdout);
        }
    }
    o.assert_ok();
}
