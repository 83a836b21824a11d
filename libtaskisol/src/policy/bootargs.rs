//! The kernel command line a policy needs: what only a reboot can set (isolcpus, nohz_full,
//! rcu_nocbs, irqaffinity, ...), which of it the running kernel lacks, and a GRUB drop-in that
//! adds it. The arguments are those of tuned's realtime profiles (shared/reference), per
//! preset; the CPU lists come from the policy.
//!
//! An argument is satisfied by the running command line when the kernel would do at least
//! what it asks: `isolcpus=` with the same flags and a list that covers the isolated CPUs,
//! `nohz_full=`/`rcu_nocbs=` covering them, `irqaffinity=` inside the housekeeping CPUs, and
//! the other arguments verbatim. The command line is read as the kernel parses it: every
//! occurrence of an argument reaches its handler, left to right (`parse_args` in
//! init/main.c calls the `__setup`/`early_param` function once per occurrence), and what
//! stays depends on the handler ([`takes`]). The boot CPU (0), which keeps the timekeeping,
//! is never a nohz_full CPU (the kernel takes it out of the list), so it is neither asked
//! for nor counted.
//!
//! A GRUB drop-in appends to `GRUB_CMDLINE_LINUX_DEFAULT`, which is the end of the kernel
//! line ([`super::grub`]): an argument whose first occurrence counts loses to one written
//! earlier in GRUB's files, and one whose last counts to a `.cfg` sourced after the drop-in.
//! [`grub_conflicts`] finds them, with their file and line.

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

/// What of the machine picks arguments: the CPU vendor (`/proc/cpuinfo`'s `vendor_id`), which
/// picks the P-state driver to disable, and whether there is any cpufreq to disable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Machine {
    /// `vendor_id` of the first CPU.
    pub vendor: Option<String>,
    /// The kernel has a cpufreq driver: a policy in `/sys/devices/system/cpu/cpufreq`, or
    /// intel_pstate's or amd_pstate's own directory. Virtual machines have none.
    pub cpufreq: bool,
}

impl Machine {
    /// The machine below `root`.
    pub fn read(root: &SysRoot) -> Machine {
        let policies = root
            .read_dir_names("/sys/devices/system/cpu/cpufreq")
            .is_ok_and(|names| names.iter().any(|n| n.starts_with("policy")));
        Machine {
            vendor: cpu_vendor(root),
            cpufreq: policies
                || root.exists("/sys/devices/system/cpu/intel_pstate")
                || root.exists("/sys/devices/system/cpu/amd_pstate"),
        }
    }

    /// A machine of `vendor` with cpufreq.
    pub fn with_vendor(vendor: Option<&str>) -> Machine {
        Machine {
            vendor: vendor.map(str::to_string),
            cpufreq: true,
        }
    }

    /// The P-state argument of the CPU's vendor, what it does, and whether it applies: not
    /// without cpufreq, unless the command line has it already (the driver it disabled
    /// leaves no directory of its own).
    fn pstate(&self, cmdline: &str) -> Option<(&'static str, &'static str, bool)> {
        let (arg, why) = match self.vendor.as_deref() {
            Some("GenuineIntel") => (
                "intel_pstate=disable",
                "keeps intel_pstate from changing the frequency under the workload",
            ),
            Some("AuthenticAMD") => (
                "amd_pstate=disable",
                "keeps amd_pstate from changing the frequency under the workload",
            ),
            _ => return None,
        };
        let name = arg.split_once('=').map_or(arg, |(n, _)| n);
        let on_line = value_as_parsed(cmdline, name, Some("disable")).is_some();
        Some((arg, why, self.cpufreq || on_line))
    }
}

/// An argument the machine has no use for, and why: said once instead of proposed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotNeeded {
    /// The argument (`intel_pstate=disable`).
    pub arg: String,
    /// Why it is left out (`no cpufreq on this machine`).
    pub why: String,
}

/// The arguments [`needed`] leaves out for hardware `machine` lacks.
pub fn not_needed(machine: &Machine, cmdline: &str) -> Vec<NotNeeded> {
    match machine.pstate(cmdline) {
        Some((arg, _, false)) => vec![NotNeeded {
            arg: arg.into(),
            why: "no cpufreq on this machine (no driver, no policy): nothing to disable".into(),
        }],
        _ => Vec::new(),
    }
}

/// The arguments `preset` needs for `isolated` CPUs, `housekeeping` taking the rest, in the
/// order they go on the command line, each checked against `cmdline`, for the hardware of
/// `machine` (see [`not_needed`] for what it leaves out).
pub fn needed(
    preset: Preset,
    isolated: &CpuSet,
    housekeeping: &CpuSet,
    machine: &Machine,
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
    if let Some((arg, why, true)) = machine.pstate(cmdline) {
        out.push((arg.into(), why));
    }
    out.into_iter()
        .map(|(arg, why)| {
            let (name, want) = match arg.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (arg.clone(), None),
            };
            let current = value_as_parsed(cmdline, &name, want.as_deref());
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
    satisfies(name, value_as_parsed(cmdline, name, want).as_deref(), want)
}

/// Whether the kernel's value `have` of `name` (none: the argument is absent) does what
/// `want` asks (none: a bare word).
fn satisfies(name: &str, have: Option<&str>, want: Option<&str>) -> bool {
    match (have, want) {
        (Some(have), Some(want)) => value_satisfies(name, have, want),
        // nosoftlockup_setup() ignores what follows the name.
        (Some(_), None) if name == "nosoftlockup" => true,
        (Some(have), None) => have.is_empty(),
        // The tick may stop unless `nohz=off`: the kernel's default is on.
        (None, want) => name == "nohz" && matches!(want, None | Some("on")),
    }
}

/// Which occurrence of a repeated argument the kernel acts on, from the handler each one
/// reaches (Linux 6.x; the functions named are those that parse the argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    /// The first that is accepted: `housekeeping_setup()` in kernel/sched/isolation.c (for
    /// `housekeeping_isolcpus_setup` and `housekeeping_nohz_full_setup`) sets a housekeeping
    /// type's CPUs once; a later `isolcpus=`/`nohz_full=` whose list differs for a type
    /// already set is refused whole ("Housekeeping: nohz_full= must match isolcpus="), one
    /// with the same list only adds its new flags. One whose list does not parse or is
    /// empty is not accepted, and the next one counts. A bare `isolcpus` or `nohz_full`
    /// (no `=`) never reaches the handler (`__setup("isolcpus=")` matches the `=`).
    First,
    /// The last: each occurrence parses into the same variable again.
    /// `rcu_nocb_setup()` (kernel/rcu/tree_nocb.h: `cpulist_parse` clears the mask),
    /// `irq_affinity_setup()` (kernel/irq/irqdesc.c), `setup_tick_nohz()` and `skew_tick()`
    /// (kernel/time/tick-sched.c), `amd_pstate_param()` (drivers/cpufreq/amd-pstate.c:
    /// `cppc_state` is the last mode).
    Last,
    /// Any: each occurrence sets a flag that no other occurrence clears.
    /// `nosoftlockup_setup()` (kernel/watchdog.c; `__setup("nosoftlockup")` matches by
    /// prefix, so `nosoftlockup=0` disables it too), `tsc_setup()` (arch/x86/kernel/tsc.c:
    /// `reliable` sets `tsc_clocksource_reliable`), `intel_pstate_setup()`
    /// (drivers/cpufreq/intel_pstate.c: `disable` sets `no_load`).
    Any,
}

/// How the kernel takes a repeated `name` (see [`Takes`]).
pub fn takes(name: &str) -> Takes {
    match name {
        "isolcpus" | "nohz_full" => Takes::First,
        "nosoftlockup" | "tsc" | "intel_pstate" => Takes::Any,
        _ => Takes::Last,
    }
}

/// The occurrences of `name` in `words`: each one's index and value (`""` for a bare word).
/// `nosoftlockup` matches with any value (its handler is reached by prefix).
fn occurrences<'a>(words: &[&'a str], name: &str) -> Vec<(usize, &'a str)> {
    words
        .iter()
        .enumerate()
        .filter_map(|(i, w)| match w.split_once('=') {
            Some((n, v)) if n == name => Some((i, v)),
            None if *w == name => Some((i, "")),
            _ => None,
        })
        .collect()
}

/// The CPU list a housekeeping argument sets (`isolcpus=` after its flags), when the
/// kernel accepts it: it parses and is not empty.
fn housekeeping_cpus(name: &str, value: &str) -> Option<CpuSet> {
    let cpus = if name == "isolcpus" {
        isolcpus_parts(value).1
    } else {
        list(value)
    };
    cpus.filter(|c| !c.is_empty())
}

/// The occurrence of `name` the kernel acts on in `words`, for an argument that wants
/// `want`: its index (none: no occurrence counts) and the value in effect. For
/// [`Takes::First`] the value is the first accepted occurrence's (an `isolcpus=` with the
/// flags of later ones on the same CPUs added); for [`Takes::Any`] the first that does what
/// `want` asks, else the last.
pub fn used(words: &[&str], name: &str, want: Option<&str>) -> Option<(usize, String)> {
    let occ = occurrences(words, name);
    match takes(name) {
        Takes::First => {
            let accepted: Vec<(usize, &str, CpuSet)> = occ
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .filter_map(|&(i, v)| housekeeping_cpus(name, v).map(|c| (i, v, c)))
                .collect();
            let (i, v, cpus) = accepted.first()?.clone();
            if name != "isolcpus" {
                return Some((i, v.to_string()));
            }
            let mut flags = isolcpus_parts(v).0;
            for (_, later, c) in &accepted[1..] {
                if *c == cpus {
                    for f in isolcpus_parts(later).0 {
                        if !flags.contains(&f) {
                            flags.push(f);
                        }
                    }
                }
            }
            if flags == isolcpus_parts(v).0 {
                Some((i, v.to_string()))
            } else {
                Some((i, format!("{},{}", flags.join(","), cpus.to_kernel_list())))
            }
        }
        Takes::Last => occ.last().map(|&(i, v)| (i, v.to_string())),
        Takes::Any => occ
            .iter()
            .find(|(_, v)| satisfies(name, Some(v), want))
            .or(occ.last())
            .map(|&(i, v)| (i, v.to_string())),
    }
}

/// The value of `name` that the kernel uses on `cmdline` for an argument that wants `want`
/// (see [`used`]).
pub fn value_as_parsed(cmdline: &str, name: &str, want: Option<&str>) -> Option<String> {
    let words: Vec<&str> = cmdline.split_whitespace().collect();
    used(&words, name, want).map(|(_, v)| v)
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

/// Why the kernel takes the occurrence it takes, for messages.
pub fn takes_why(name: &str) -> String {
    match takes(name) {
        Takes::First => format!(
            "the kernel keeps the first {name}= it accepts and refuses a later one with other CPUs (housekeeping_setup)"
        ),
        Takes::Last => format!("the kernel keeps the last {name}="),
        Takes::Any => format!("every {name} counts"),
    }
}

/// An occurrence in GRUB's files that the kernel would take over an argument of isold's
/// drop-in, or the assignment that drops the drop-in's line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Conflict {
    /// The drop-in's argument (`isolcpus=managed_irq,domain,2-3`).
    pub arg: String,
    /// The occurrence the kernel would use instead (`isolcpus=1`); empty when the drop-in's
    /// words are not on the line at all.
    pub word: String,
    /// The file it is written in.
    pub file: String,
    /// Its line (from 1).
    pub line: usize,
    /// The variable assigned there.
    pub var: String,
    /// Why it wins.
    pub why: String,
    /// The bytes of `file` that spell `word`, when it can be replaced in place.
    #[serde(skip)]
    pub span: Option<(usize, usize)>,
}

impl Conflict {
    /// `file:line (VAR)`.
    pub fn whence(&self) -> String {
        format!("{}:{} ({})", self.file, self.line, self.var)
    }
}

/// What in GRUB's configuration `model` (isold's drop-in included) would make the kernel
/// ignore one of `args`, the drop-in's arguments: for an argument whose first occurrence
/// counts, each earlier one it would take instead; for one whose last counts, each later
/// one; and an assignment of `GRUB_CMDLINE_LINUX_DEFAULT` after the drop-in that leaves its
/// words out.
pub fn grub_conflicts(model: &super::grub::Model, args: &[&BootArg]) -> Vec<Conflict> {
    let words: Vec<&str> = model.words.iter().map(|w| w.text.as_str()).collect();
    let mut out = Vec::new();
    for a in args {
        let (name, want) = match a.arg.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (a.arg.as_str(), None),
        };
        let ours: Vec<usize> = (0..words.len())
            .filter(|&i| words[i] == a.arg && model.words[i].file == GRUB_DROP_IN)
            .collect();
        let (Some(&first), Some(&last)) = (ours.first(), ours.last()) else {
            let (file, line) = model
                .default_assignments
                .last()
                .cloned()
                .unwrap_or_default();
            out.push(Conflict {
                arg: a.arg.clone(),
                word: String::new(),
                file,
                line,
                var: super::grub::CMDLINE_LINUX_DEFAULT.into(),
                why: format!(
                    "{} is set again after {GRUB_DROP_IN} without ${}, so the drop-in's arguments are not on the kernel line",
                    super::grub::CMDLINE_LINUX_DEFAULT,
                    super::grub::CMDLINE_LINUX_DEFAULT
                ),
                span: None,
            });
            continue;
        };
        let Some((used_at, value)) = used(&words, name, want) else {
            continue;
        };
        if satisfies(name, Some(&value), want) {
            continue;
        }
        let wins = |i: usize, v: &str| {
            model.words[i].file != GRUB_DROP_IN
                && v != want.unwrap_or("")
                && match takes(name) {
                    Takes::First => i < first && housekeeping_cpus(name, v).is_some(),
                    Takes::Last => i > last,
                    Takes::Any => i == used_at,
                }
        };
        for (i, v) in occurrences(&words, name) {
            if wins(i, v) {
                let w = &model.words[i];
                out.push(Conflict {
                    arg: a.arg.clone(),
                    word: w.text.clone(),
                    file: w.file.clone(),
                    line: w.line,
                    var: w.var.clone(),
                    why: takes_why(name),
                    span: w.span,
                });
            }
        }
    }
    out
}

/// Why the running kernel does not do what `arg` asks although `cmdline` has it: another
/// occurrence of its name is the one the kernel took (see [`Takes`]).
pub fn running_conflict(cmdline: &str, arg: &str) -> Option<String> {
    let (name, want) = match arg.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (arg, None),
    };
    let words: Vec<&str> = cmdline.split_whitespace().collect();
    let occ = occurrences(&words, name);
    if occ.len() < 2 || !occ.iter().any(|(_, v)| satisfies(name, Some(v), want)) {
        return None;
    }
    let (i, value) = used(&words, name, want)?;
    if satisfies(name, Some(&value), want) {
        return None;
    }
    let n = occ.iter().position(|(j, _)| *j == i)? + 1;
    Some(format!(
        "/proc/cmdline has {} {name}= (word {} of {} is {}): {}",
        occ.len(),
        n,
        occ.len(),
        words[i],
        takes_why(name)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    fn args(preset: Preset, vendor: Option<&str>, cmdline: &str) -> Vec<BootArg> {
        needed(
            preset,
            &set("2-3"),
            &set("0-1"),
            &Machine::with_vendor(vendor),
            cmdline,
        )
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
            value_as_parsed("a nohz_full=1 nohz_full=2", "nohz_full", None).as_deref(),
            Some("1")
        );
        assert_eq!(
            value_as_parsed("x irqaffinity=1 irqaffinity=0", "irqaffinity", None).as_deref(),
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
        // nosoftlockup_setup() is reached by prefix and ignores the value.
        assert!(in_effect("nosoftlockup=0", "nosoftlockup"));
        assert!(!in_effect("", "skew_tick=1"));
    }

    #[test]
    fn the_boot_cpu_is_never_nohz_full() {
        let a = needed(
            Preset::Realtime,
            &set("0-1"),
            &set("2-3"),
            &Machine::default(),
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
            &Machine::default(),
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
            &Machine::default(),
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
        // __setup("nosoftlockup") is reached by prefix: its handler ignores the value.
        assert!(satisfied("nosoftlockup=1", "nosoftlockup"));
        // A bare isolcpus or nohz_full never reaches the handler (`__setup("isolcpus=")`),
        // nor does an empty list count: the next one does.
        assert_eq!(
            first_value("quiet nohz_full nohz_full=2-3", "nohz_full").as_deref(),
            Some("")
        );
        assert_eq!(
            value_as_parsed("nohz_full=2-3 isolcpus isolcpus=2-3", "isolcpus", None).as_deref(),
            Some("2-3")
        );
        assert_eq!(
            value_as_parsed("nohz_full= nohz_full=x nohz_full=3", "nohz_full", None).as_deref(),
            Some("3")
        );
        assert_eq!(first_value("quiet", "nohz_full"), None);
        // A bare nohz_full (7.2 rejects it; 6.x hands it to init) isolates nothing.
        assert!(!satisfied("quiet nohz_full", "nohz_full"));
        assert!(!satisfied("nohz_full isolcpus=2-3", "nohz_full"));
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
    fn no_pstate_argument_without_cpufreq() {
        let vm = Machine {
            vendor: Some("AuthenticAMD".into()),
            cpufreq: false,
        };
        let pstate = |a: &[BootArg]| a.iter().find(|a| a.arg.contains("pstate")).cloned();
        let a = needed(Preset::Realtime, &set("2-3"), &set("0-1"), &vm, "");
        assert_eq!(pstate(&a), None);
        assert_eq!(
            not_needed(&vm, ""),
            vec![NotNeeded {
                arg: "amd_pstate=disable".into(),
                why: "no cpufreq on this machine (no driver, no policy): nothing to disable".into()
            }]
        );
        // On the line already, the driver it disabled leaves no directory: still an argument
        // of the next boot's line, and had.
        let a = needed(
            Preset::Realtime,
            &set("2-3"),
            &set("0-1"),
            &vm,
            "ro amd_pstate=disable",
        );
        assert!(pstate(&a).unwrap().satisfied);
        assert_eq!(not_needed(&vm, "ro amd_pstate=disable"), vec![]);
        let metal = Machine::with_vendor(Some("GenuineIntel"));
        assert_eq!(not_needed(&metal, ""), vec![]);
        let a = needed(Preset::Realtime, &set("2-3"), &set("0-1"), &metal, "");
        assert_eq!(pstate(&a).unwrap().arg, "intel_pstate=disable");
        // An unknown vendor has no argument, needed or not.
        assert_eq!(not_needed(&Machine::default(), ""), vec![]);
    }

    #[test]
    fn cpufreq_is_a_policy_or_a_pstate_driver() {
        let dir = tempfile::tempdir().unwrap();
        let cpu = dir.path().join("sys/devices/system/cpu");
        std::fs::create_dir_all(cpu.join("cpufreq")).unwrap();
        let root = SysRoot::new(dir.path());
        assert!(!Machine::read(&root).cpufreq, "an empty cpufreq directory");
        std::fs::create_dir_all(cpu.join("intel_pstate")).unwrap();
        assert!(Machine::read(&root).cpufreq);
        std::fs::remove_dir(cpu.join("intel_pstate")).unwrap();
        std::fs::create_dir_all(cpu.join("cpufreq/policy0")).unwrap();
        assert!(Machine::read(&root).cpufreq);
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

    /// housekeeping_setup(): a later isolcpus= on the same CPUs adds its flags, one on other
    /// CPUs is refused; the flags each count once (Any), the last rcu_nocbs= counts.
    #[test]
    fn each_argument_counts_as_its_kernel_handler_takes_it() {
        let w = |s: &'static str| s.split_whitespace().collect::<Vec<_>>();
        assert_eq!(
            used(
                &w("isolcpus=domain,2-3 isolcpus=managed_irq,2-3 isolcpus=managed_irq,1"),
                "isolcpus",
                None
            ),
            Some((0, "domain,managed_irq,2-3".to_string()))
        );
        assert!(in_effect(
            "isolcpus=domain,2-3 isolcpus=managed_irq,domain,2-3",
            "isolcpus=managed_irq,domain,2-3"
        ));
        assert!(!in_effect(
            "isolcpus=domain,2 isolcpus=managed_irq,domain,2-3",
            "isolcpus=managed_irq,domain,2-3"
        ));
        assert_eq!(takes("rcu_nocbs"), Takes::Last);
        assert_eq!(takes("skew_tick"), Takes::Last);
        assert!(in_effect("tsc=reliable tsc=unstable", "tsc=reliable"));
        assert!(in_effect(
            "intel_pstate=disable intel_pstate=passive",
            "intel_pstate=disable"
        ));
        assert!(!in_effect(
            "amd_pstate=disable amd_pstate=active",
            "amd_pstate=disable"
        ));
        assert_eq!(
            used(
                &w("tsc=unstable tsc=reliable tsc=nowatchdog"),
                "tsc",
                Some("reliable")
            ),
            Some((1, "reliable".to_string()))
        );
    }

    fn grub_model(
        default_grub: &str,
        later: Option<&str>,
        args: &[&BootArg],
    ) -> super::super::grub::Model {
        use super::super::grub::{model, with_file, Source, DEFAULT_GRUB};
        let mut s = vec![Source {
            path: DEFAULT_GRUB.into(),
            text: default_grub.into(),
        }];
        if let Some(t) = later {
            s.push(Source {
                path: "/etc/default/grub.d/zz-later.cfg".into(),
                text: t.into(),
            });
        }
        model(&with_file(&s, GRUB_DROP_IN, &grub_drop_in(args)))
    }

    /// An earlier isolcpus= in /etc/default/grub is what the kernel keeps over the
    /// drop-in's; a later .cfg's rcu_nocbs= over the drop-in's; a .cfg that sets the
    /// default line anew drops the drop-in. Each conflict names its file, line and variable.
    #[test]
    fn grub_conflicts_name_the_occurrence_the_kernel_would_keep() {
        let a = args(Preset::RealtimeVirtualHost, None, "");
        let every: Vec<&BootArg> = a.iter().collect();
        let m = grub_model(
            "GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT=\"quiet isolcpus=1 isolcpus=managed_irq,domain,2-3\"\nGRUB_CMDLINE_LINUX=\"rcu_nocbs=1 nohz_full=1-3\"\n",
            Some("GRUB_CMDLINE_LINUX_DEFAULT=\"$GRUB_CMDLINE_LINUX_DEFAULT rcu_nocbs=3\"\n"),
            &every,
        );
        let c = grub_conflicts(&m, &every);
        let shown: Vec<(String, String, String)> = c
            .iter()
            .map(|c| (c.arg.clone(), c.word.clone(), c.whence()))
            .collect();
        assert_eq!(
            shown,
            [
                (
                    "isolcpus=managed_irq,domain,2-3".to_string(),
                    "isolcpus=1".to_string(),
                    "/etc/default/grub:2 (GRUB_CMDLINE_LINUX_DEFAULT)".to_string()
                ),
                (
                    "rcu_nocbs=2-3".to_string(),
                    "rcu_nocbs=3".to_string(),
                    "/etc/default/grub.d/zz-later.cfg:1 (GRUB_CMDLINE_LINUX_DEFAULT)".to_string()
                ),
            ],
            "nohz_full=1-3 covers 2-3 and comes first: no conflict; rcu_nocbs=1 comes before the drop-in: none"
        );
        assert!(c[0].why.contains("first isolcpus="), "{}", c[0].why);
        assert!(c[0].span.is_some());
        // No conflict without earlier or later occurrences.
        let m = grub_model("GRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"\n", None, &every);
        assert_eq!(grub_conflicts(&m, &every), []);
        // A later .cfg that sets the line anew.
        let m = grub_model("", Some("GRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"\n"), &every);
        let c = grub_conflicts(&m, &every);
        assert_eq!(c.len(), every.len());
        assert_eq!(c[0].word, "");
        assert_eq!(
            c[0].whence(),
            "/etc/default/grub.d/zz-later.cfg:1 (GRUB_CMDLINE_LINUX_DEFAULT)"
        );
    }

    #[test]
    fn the_running_line_names_the_occurrence_the_kernel_took() {
        assert_eq!(
            running_conflict("ro isolcpus=1 isolcpus=managed_irq,domain,2-3", "isolcpus=managed_irq,domain,2-3").as_deref(),
            Some("/proc/cmdline has 2 isolcpus= (word 1 of 2 is isolcpus=1): the kernel keeps the first isolcpus= it accepts and refuses a later one with other CPUs (housekeeping_setup)")
        );
        assert_eq!(
            running_conflict("ro isolcpus=1", "isolcpus=managed_irq,domain,2-3"),
            None
        );
        assert_eq!(running_conflict("rcu_nocbs=2-3 rcu_nocbs=1", "rcu_nocbs=2-3").as_deref(), Some("/proc/cmdline has 2 rcu_nocbs= (word 2 of 2 is rcu_nocbs=1): the kernel keeps the last rcu_nocbs="));
        assert_eq!(
            running_conflict("rcu_nocbs=1 rcu_nocbs=2-3", "rcu_nocbs=2-3"),
            None
        );
    }
}
