//! The kernel command line a policy needs: what only a reboot can set (isolcpus, nohz_full,
//! rcu_nocbs, irqaffinity, ...), which of it the running kernel lacks, and a GRUB drop-in that
//! adds it. The arguments are those of tuned's realtime profiles (shared/reference), per
//! preset; the CPU lists come from the policy.
//!
//! An argument is satisfied by the running command line when the kernel would do at least
//! what it asks: `isolcpus=` with the same flags and a list that covers the isolated CPUs,
//! `nohz_full=`/`rcu_nocbs=` covering them, `irqaffinity=` inside the housekeeping CPUs, and
//! the other arguments verbatim. The command line is read as the kernel parses it: the first
//! `isolcpus=` and the first `nohz_full=` count (kernel/sched/isolation.c sets each
//! housekeeping type once and ignores a later mismatching list), the last of the others
//! (they are parsed again at each occurrence); and the boot CPU (0), which keeps the
//! timekeeping, is never a nohz_full CPU (the kernel takes it out of the list), so it is
//! neither asked for nor counted.

/// The CPU that boots the kernel and keeps the timekeeping: never in nohz_full.
pub const BOOT_CPU: usize = 0;

/// The kernel's command-line buffer on x86 (`COMMAND_LINE_SIZE`), its terminating NUL
/// included: a line of at most 2047 bytes. The boot protocol hands the same bound to the
/// bootloader (`cmdline_size`), and GRUB refuses a longer line for a kernel that declares
/// it, so one check covers both. The line GRUB builds starts with `BOOT_IMAGE=...`, which
/// `/proc/cmdline` shows.
pub const COMMAND_LINE_SIZE: usize = 2048;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::sysroot::SysRoot;

use super::preset::Preset;

/// One argument of the kernel command line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootArg {
    /// The whole argument as it goes on the command line (`nohz_full=2-3`, `nosoftlockup`).
    pub arg: String,
    /// What it does for the isolated CPUs.
    pub why: String,
    /// Its value on the running kernel's command line (`/proc/cmdline`), if any.
    pub current: Option<String>,
    /// Whether the running kernel's command line does what it asks.
    pub satisfied: bool,
}

/// The arguments `preset` needs for `isolated` CPUs, `housekeeping` taking the rest, in the
/// order they go on the command line, each checked against `cmdline`. `vendor` is the CPU
/// vendor (`/proc/cpuinfo`'s `vendor_id`), which picks the P-state driver to disable.
pub fn needed(
    preset: Preset,
    isolated: &CpuSet,
    housekeeping: &CpuSet,
    vendor: Option<&str>,
    cmdline: &str,
) -> Vec<BootArg> {
    let mut out: Vec<(String, &'static str)> = Vec::new();
    if preset != Preset::CpuPartitioning {
        out.push((
            format!("isolcpus=managed_irq,domain,{}", isolated.to_kernel_list()),
            "keeps the scheduler's load balancing and managed IRQs (multi-queue devices) off the isolated CPUs",
        ));
    }
    let mut nohz = isolated.clone();
    nohz.remove(BOOT_CPU);
    if !nohz.is_empty() {
        out.push((
            "nohz=on".into(),
            "lets the tick stop (needed for nohz_full)",
        ));
        out.push((
            format!("nohz_full={}", nohz.to_kernel_list()),
            if nohz == *isolated {
                "stops the scheduler tick on an isolated CPU that runs one task"
            } else {
                "stops the scheduler tick on an isolated CPU that runs one task (not on the boot CPU 0, which keeps the timekeeping: the kernel takes it out of nohz_full)"
            },
        ));
    }
    out.push((
        format!("rcu_nocbs={}", isolated.to_kernel_list()),
        "runs RCU callbacks in rcuo kthreads on the housekeeping CPUs",
    ));
    out.push((
        format!("irqaffinity={}", housekeeping.to_kernel_list()),
        "sends every IRQ to the housekeeping CPUs from boot",
    ));
    out.push((
        "skew_tick=1".into(),
        "offsets the CPUs' ticks so they do not contend for the same locks",
    ));
    out.push((
        "tsc=reliable".into(),
        "stops the clocksource watchdog from checking the TSC on every CPU",
    ));
    out.push((
        "nosoftlockup".into(),
        "stops the soft-lockup watchdog's per-CPU timer",
    ));
    match vendor {
        Some("GenuineIntel") => out.push((
            "intel_pstate=disable".into(),
            "keeps intel_pstate from changing the frequency under the workload",
        )),
        Some("AuthenticAMD") => out.push((
            "amd_pstate=disable".into(),
            "keeps amd_pstate from changing the frequency under the workload",
        )),
        _ => {}
    }
    out.into_iter()
        .map(|(arg, why)| {
            let (name, want) = match arg.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (arg.clone(), None),
            };
            let current = value_as_parsed(cmdline, &name);
            let satisfied = satisfies(&name, current.as_deref(), want.as_deref());
            BootArg {
                arg,
                why: why.into(),
                current: current.map(|v| {
                    if v.is_empty() {
                        name.clone()
                    } else {
                        format!("{name}={v}")
                    }
                }),
                satisfied,
            }
        })
        .collect()
}

/// Whether the argument `arg` (`nohz_full=2-3`, `nosoftlockup`) is in effect on `cmdline`,
/// read as the kernel parses it.
pub fn in_effect(cmdline: &str, arg: &str) -> bool {
    let (name, want) = match arg.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (arg, None),
    };
    satisfies(name, value_as_parsed(cmdline, name).as_deref(), want)
}

/// Whether the kernel's value `have` of `name` (none: the argument is absent) does what
/// `want` asks (none: a bare word).
fn satisfies(name: &str, have: Option<&str>, want: Option<&str>) -> bool {
    match (have, want) {
        (Some(have), Some(want)) => value_satisfies(name, have, want),
        (Some(have), None) => have.is_empty(),
        // The tick may stop unless `nohz=off`: the kernel's default is on.
        (None, want) => name == "nohz" && matches!(want, None | Some("on")),
    }
}

/// The value of `name` that the kernel uses: the first occurrence for `isolcpus` and
/// `nohz_full`, the last for the others (see the module documentation).
pub fn value_as_parsed(cmdline: &str, name: &str) -> Option<String> {
    match name {
        "isolcpus" | "nohz_full" => first_value(cmdline, name),
        _ => last_value(cmdline, name),
    }
}

/// The value of the first `name` or `name=value` on `cmdline`: `Some("")` for a bare `name`.
pub fn first_value(cmdline: &str, name: &str) -> Option<String> {
    cmdline
        .split_whitespace()
        .find_map(|w| match w.split_once('=') {
            Some((n, v)) if n == name => Some(v.to_string()),
            None if w == name => Some(String::new()),
            _ => None,
        })
}

/// The value of the last `name` or `name=value` on `cmdline`: `Some("")` for a bare `name`.
pub fn last_value(cmdline: &str, name: &str) -> Option<String> {
    cmdline
        .split_whitespace()
        .rev()
        .find_map(|w| match w.split_once('=') {
            Some((n, v)) if n == name => Some(v.to_string()),
            None if w == name => Some(String::new()),
            _ => None,
        })
}

/// Whether `have` (the running kernel's value of `name`) does what `want` asks.
fn value_satisfies(name: &str, have: &str, want: &str) -> bool {
    match name {
        "isolcpus" => {
            let (have_flags, have_cpus) = isolcpus_parts(have);
            let (want_flags, want_cpus) = isolcpus_parts(want);
            match (have_cpus, want_cpus) {
                (Some(h), Some(w)) => {
                    w.is_subset(&h) && want_flags.iter().all(|f| have_flags.contains(f))
                }
                _ => false,
            }
        }
        "nohz_full" => match (list(have), list(want)) {
            (Some(mut h), Some(w)) => {
                h.remove(BOOT_CPU);
                w.is_subset(&h)
            }
            _ => false,
        },
        "rcu_nocbs" => match (list(have), list(want)) {
            (Some(h), Some(w)) => w.is_subset(&h),
            _ => false,
        },
        "irqaffinity" => match (list(have), list(want)) {
            (Some(h), Some(w)) => !h.is_empty() && h.is_subset(&w),
            _ => false,
        },
        _ => have == want,
    }
}

fn list(v: &str) -> Option<CpuSet> {
    CpuSet::parse_list(v).ok()
}

/// `managed_irq,domain,2-3` -> (["managed_irq", "domain"], 2-3). Without flags the kernel
/// means `domain`.
fn isolcpus_parts(v: &str) -> (Vec<&str>, Option<CpuSet>) {
    let mut flags = Vec::new();
    let mut rest = v;
    while let Some((head, tail)) = rest.split_once(',') {
        if head.chars().next().is_some_and(|c| c.is_ascii_alphabetic()) {
            flags.push(head);
            rest = tail;
        } else {
            break;
        }
    }
    if flags.is_empty() {
        flags.push("domain");
    }
    (flags, list(rest))
}

/// The CPU vendor of `/proc/cpuinfo` (`GenuineIntel`, `AuthenticAMD`), if readable.
pub fn cpu_vendor(root: &SysRoot) -> Option<String> {
    let text = root.read_to_string("/proc/cpuinfo").ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "vendor_id").then(|| v.trim().to_string())
    })
}

pub use super::paths::GRUB_DROP_IN;

/// The command line the next boot gets with `args` in it: `cmdline` (the running one) without
/// the arguments of the names `args` set (an earlier drop-in's), then `args`.
pub fn next_cmdline(cmdline: &str, args: &[&BootArg]) -> String {
    let name = |a: &str| a.split_once('=').map_or(a, |(n, _)| n).to_string();
    let ours: std::collections::HashSet<String> = args.iter().map(|a| name(&a.arg)).collect();
    let mut words: Vec<&str> = cmdline
        .split_whitespace()
        .filter(|w| !ours.contains(&name(w)))
        .collect();
    words.extend(args.iter().map(|a| a.arg.as_str()));
    words.join(" ")
}

/// Why `line` cannot be a kernel command line (longer than [`COMMAND_LINE_SIZE`] allows).
pub fn too_long(line: &str) -> Option<String> {
    let max = COMMAND_LINE_SIZE - 1;
    (line.len() > max).then(|| {
        format!(
            "the kernel command line would be {} bytes, over the {max} the kernel and GRUB take on x86 (COMMAND_LINE_SIZE {COMMAND_LINE_SIZE}); the kernel would cut it and lose the arguments at its end",
            line.len()
        )
    })
}

/// The GRUB drop-in that appends `args` to the default kernel command line; `update-grub`
/// then puts it in the boot configuration. `isold bootargs --write-grub` gives it every
/// argument the policy needs, so that the next boot has them all whichever of them the
/// running one took from an earlier drop-in.
pub fn grub_drop_in(args: &[&BootArg]) -> String {
    let line: Vec<&str> = args.iter().map(|a| a.arg.as_str()).collect();
    format!(
        "# Written by `isold bootargs --write-grub`: the kernel arguments of the isolation\n\
         # policy. Run update-grub and reboot to use them; remove this file and run update-grub\n\
         # to stop.\n\
         GRUB_CMDLINE_LINUX_DEFAULT=\"$GRUB_CMDLINE_LINUX_DEFAULT {}\"\n",
        line.join(" ")
    )
}

/// The arguments of a drop-in [`grub_drop_in`] wrote (what it appends to
/// `GRUB_CMDLINE_LINUX_DEFAULT`).
pub fn drop_in_args(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("GRUB_CMDLINE_LINUX_DEFAULT=\""))
        .flat_map(|l| l.trim_end_matches('"').split_whitespace())
        .filter(|w| !w.starts_with('$'))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    fn args(preset: Preset, vendor: Option<&str>, cmdline: &str) -> Vec<BootArg> {
        needed(preset, &set("2-3"), &set("0-1"), vendor, cmdline)
    }

    #[test]
    fn the_realtime_presets_need_tuneds_arguments() {
        let a = args(Preset::RealtimeVirtualHost, Some("GenuineIntel"), "quiet");
        let words: Vec<&str> = a.iter().map(|a| a.arg.as_str()).collect();
        assert_eq!(
            words,
            [
                "isolcpus=managed_irq,domain,2-3",
                "nohz=on",
                "nohz_full=2-3",
                "rcu_nocbs=2-3",
                "irqaffinity=0-1",
                "skew_tick=1",
                "tsc=reliable",
                "nosoftlockup",
                "intel_pstate=disable"
            ]
        );
        assert!(a.iter().all(|a| a.current.is_none()));
        let unmet: Vec<&str> = a
            .iter()
            .filter(|a| !a.satisfied)
            .map(|a| a.arg.as_str())
            .collect();
        assert_eq!(
            unmet.len(),
            words.len() - 1,
            "all but nohz=on, the default: {unmet:?}"
        );
        let amd = args(Preset::Realtime, Some("AuthenticAMD"), "");
        assert_eq!(amd.last().unwrap().arg, "amd_pstate=disable");
        let other = args(Preset::Realtime, None, "");
        assert_eq!(other.last().unwrap().arg, "nosoftlockup");
    }

    /// The kernel keeps the first isolcpus= and nohz_full= (a later mismatching one is
    /// ignored) and the last of the others.
    #[test]
    fn the_command_line_is_read_as_the_kernel_parses_it() {
        let sat = |cmdline: &str, arg: &str| {
            args(Preset::RealtimeVirtualHost, None, cmdline)
                .into_iter()
                .find(|a| a.arg.starts_with(arg))
                .unwrap()
                .satisfied
        };
        assert!(sat("nohz_full=2-3 nohz_full=1", "nohz_full="));
        assert!(!sat("nohz_full=1 nohz_full=2-3", "nohz_full="));
        assert!(sat(
            "isolcpus=managed_irq,domain,2-3 isolcpus=1",
            "isolcpus="
        ));
        assert!(!sat(
            "isolcpus=1 isolcpus=managed_irq,domain,2-3",
            "isolcpus="
        ));
        assert!(sat("rcu_nocbs=1 rcu_nocbs=2-3", "rcu_nocbs="));
        assert!(!sat("rcu_nocbs=2-3 rcu_nocbs=1", "rcu_nocbs="));
        assert!(sat("irqaffinity=2 irqaffinity=0-1", "irqaffinity="));
        assert_eq!(
            value_as_parsed("a nohz_full=1 nohz_full=2", "nohz_full").as_deref(),
            Some("1")
        );
        assert_eq!(
            value_as_parsed("x irqaffinity=1 irqaffinity=0", "irqaffinity").as_deref(),
            Some("0")
        );
    }

    /// The boot CPU keeps the timekeeping: the kernel takes it out of nohz_full, so it is not
    /// asked for, and a list naming it counts without it.
    #[test]
    fn an_argument_in_effect_as_the_kernel_parses_it() {
        assert!(in_effect("quiet", "nohz=on"), "the kernel's default");
        assert!(!in_effect("nohz=off", "nohz=on"));
        assert!(in_effect("nohz_full=1-3 nohz_full=5", "nohz_full=2-3"));
        assert!(!in_effect("nohz_full=5 nohz_full=1-3", "nohz_full=2-3"));
        assert!(in_effect("a nosoftlockup", "nosoftlockup"));
        assert!(!in_effect("nosoftlockup=0", "nosoftlockup"));
        assert!(!in_effect("", "skew_tick=1"));
    }

    #[test]
    fn the_boot_cpu_is_never_nohz_full() {
        let a = needed(
            Preset::Realtime,
            &set("0-1"),
            &set("2-3"),
            None,
            "nohz_full=0-1",
        );
        let nohz = a.iter().find(|a| a.arg.starts_with("nohz_full=")).unwrap();
        assert_eq!(nohz.arg, "nohz_full=1");
        assert!(nohz.why.contains("not on the boot CPU 0"), "{}", nohz.why);
        assert!(nohz.satisfied);
        let a = needed(
            Preset::Realtime,
            &set("0-1"),
            &set("2-3"),
            None,
            "nohz_full=0",
        );
        assert!(
            !a.iter()
                .find(|a| a.arg.starts_with("nohz_full="))
                .unwrap()
                .satisfied
        );
        // Only the boot CPU: no nohz_full= at all (and no nohz=on for it).
        let a = needed(
            Preset::Realtime,
            &set("0"),
            &set("1-3"),
            None,
            "nohz_full=0",
        );
        assert!(!a.iter().any(|a| a.arg.starts_with("nohz")), "{a:?}");
        assert!(a.iter().any(|a| a.arg == "rcu_nocbs=0"));
    }

    #[test]
    fn cpu_partitioning_needs_no_isolcpus() {
        let a = args(Preset::CpuPartitioning, None, "");
        assert_eq!(a[0].arg, "nohz=on");
        assert!(!a.iter().any(|a| a.arg.starts_with("isolcpus")));
    }

    fn satisfied(cmdline: &str, name: &str) -> bool {
        args(Preset::RealtimeVirtualHost, None, cmdline)
            .into_iter()
            .find(|a| a.arg.starts_with(name))
            .unwrap()
            .satisfied
    }

    #[test]
    fn a_wider_list_satisfies_and_a_narrower_does_not() {
        assert!(satisfied("nohz_full=1-3", "nohz_full"));
        assert!(!satisfied("nohz_full=3", "nohz_full"));
        assert!(satisfied("rcu_nocbs=0-3", "rcu_nocbs"));
        assert!(!satisfied("rcu_nocbs=bogus", "rcu_nocbs"));
        // irqaffinity: the IRQs must stay inside the housekeeping CPUs.
        assert!(satisfied("irqaffinity=0", "irqaffinity"));
        assert!(!satisfied("irqaffinity=0-2", "irqaffinity"));
    }

    #[test]
    fn isolcpus_needs_its_flags_and_bare_means_domain() {
        assert!(satisfied("isolcpus=domain,managed_irq,1-3", "isolcpus"));
        assert!(!satisfied("isolcpus=2-3", "isolcpus"), "no managed_irq");
        assert!(!satisfied("isolcpus=managed_irq,domain,3", "isolcpus"));
        assert!(!satisfied("isolcpus=managed_irq,domain,", "isolcpus"));
        assert_eq!(isolcpus_parts("2-3").0, ["domain"]);
        assert_eq!(isolcpus_parts("nohz,2-3").0, ["nohz"]);
    }

    /// A repeated argument counts as the kernel takes it: the first nohz_full= (the kernel
    /// ignores a later one), the last skew_tick=; plain words match exactly.
    #[test]
    fn repeated_arguments_count_as_the_kernel_takes_them_and_plain_words_match_exactly() {
        let a = args(
            Preset::Realtime,
            None,
            "nohz_full=2-3 skew_tick=0 nosoftlockup tsc=unstable nohz_full=3 skew_tick=1",
        );
        let get = |n: &str| a.iter().find(|a| a.arg.starts_with(n)).unwrap();
        assert!(get("nohz_full").satisfied);
        assert_eq!(get("nohz_full").current.as_deref(), Some("nohz_full=2-3"));
        assert!(get("skew_tick").satisfied);
        assert!(get("nosoftlockup").satisfied);
        assert_eq!(get("nosoftlockup").current.as_deref(), Some("nosoftlockup"));
        assert!(!get("tsc").satisfied);
        assert!(get("nohz=").satisfied, "on by default");
        assert!(!satisfied("nohz=off", "nohz="));
        assert_eq!(
            last_value("nosoftlockup=1", "nosoftlockup").as_deref(),
            Some("1")
        );
        assert!(!satisfied("nosoftlockup=1", "nosoftlockup"));
        // A bare isolcpus or nohz_full (the kernel takes the first) is an empty value, and
        // it is the one that counts over a later one with CPUs.
        assert_eq!(
            first_value("quiet nohz_full nohz_full=2-3", "nohz_full").as_deref(),
            Some("")
        );
        assert_eq!(
            value_as_parsed("nohz_full=2-3 isolcpus isolcpus=2-3", "isolcpus").as_deref(),
            Some("")
        );
        assert_eq!(first_value("quiet", "nohz_full"), None);
    }

    #[test]
    fn the_grub_drop_in_appends_to_the_default_line() {
        let a = args(Preset::Realtime, None, "");
        let refs: Vec<&BootArg> = a.iter().filter(|a| a.arg.starts_with("no")).collect();
        let text = grub_drop_in(&refs);
        assert!(
            text.ends_with(
                "GRUB_CMDLINE_LINUX_DEFAULT=\"$GRUB_CMDLINE_LINUX_DEFAULT nohz=on nohz_full=2-3 nosoftlockup\"\n"
            ),
            "{text}"
        );
        assert!(text.lines().take(3).all(|l| l.starts_with('#')));
    }

    #[test]
    fn the_next_line_replaces_an_earlier_drop_ins_arguments_and_has_a_limit() {
        let all = args(
            Preset::RealtimeVirtualHost,
            None,
            "BOOT_IMAGE=/vmlinuz ro nohz_full=2 quiet nosoftlockup",
        );
        let every: Vec<&BootArg> = all.iter().collect();
        let next = next_cmdline(
            "BOOT_IMAGE=/vmlinuz ro nohz_full=2 quiet nosoftlockup",
            &every,
        );
        assert!(
            next.starts_with("BOOT_IMAGE=/vmlinuz ro quiet isolcpus="),
            "{next}"
        );
        assert_eq!(next.matches("nohz_full=").count(), 1, "{next}");
        assert_eq!(next.matches("nosoftlockup").count(), 1, "{next}");
        assert_eq!(too_long(&"x".repeat(2047)), None);
        assert!(too_long(&"x".repeat(2048))
            .unwrap()
            .contains("2048 bytes, over the 2047"));
    }

    #[test]
    fn the_vendor_comes_from_cpuinfo() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        let root = SysRoot::new(dir.path());
        assert_eq!(cpu_vendor(&root), None);
        std::fs::write(
            dir.path().join("proc/cpuinfo"),
            "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 23\n",
        )
        .unwrap();
        assert_eq!(cpu_vendor(&root).as_deref(), Some("AuthenticAMD"));
    }
}
