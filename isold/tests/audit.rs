//! `isold audit` and `isold bootargs` on trees captured from Debian's 6.12-rt in QEMU
//! (tests/fixtures/debian-6.12-rt-audit and its -end twin, a window apart: four busy loops
//! with affinity 0-3, the serial console's IRQ routed to CPU 3 while the guest wrote to it).

use std::path::{Path, PathBuf};
use std::process::Command;

use libtaskisol::audit::{self, Sample, Scope};
use libtaskisol::SysRoot;

mod common;
use common::copy_dir;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
}

/// The tick_stop traces captured from each kernel (libtaskisol/tests/fixtures/tick_stop).
fn tick_traces() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../libtaskisol/tests/fixtures/tick_stop")
}

fn isold(args: &[&str]) -> (i32, String, String) {
    common::isold_at(None, args)
}

fn scope() -> Scope {
    Scope::new("2-3".parse().unwrap(), "--cpus")
}

/// The pids of the busy loops (`sh -c 'while :; do :; done'` with affinity 0-3): the `sh`
/// processes of the tree with that affinity that used over 30 s of CPU time (the capture's own
/// shell, the other `sh` there, used under 10 s).
fn busy_loops(root: &SysRoot) -> Vec<i32> {
    libtaskisol::tasks::all_threads(root)
        .unwrap()
        .into_iter()
        .filter(|t| t.comm == "sh" && t.affinity.to_string() == "0-3" && t.cpu_ticks > 3000)
        .map(|t| t.pid)
        .collect()
}

/// What the kernel counted between the two captures, as the audit reports it: the serial
/// IRQ on CPU 3, a busy loop that ran there, the tick running without nohz_full.
#[test]
fn the_window_between_two_real_captures_names_the_disturbers() {
    let start = SysRoot::new(fixture("debian-6.12-rt-audit"));
    let end = SysRoot::new(fixture("debian-6.12-rt-audit-end"));
    let before = Sample::read(&start).unwrap();
    let after = Sample::read(&end).unwrap();
    let a = audit::audit(&end, &scope(), &before, &after, 10.0).unwrap();
    assert_eq!(a.cpus, "2-3");
    assert_eq!(a.housekeeping, "0-1");
    assert!(a.kernel.contains("rt"), "{}", a.kernel);
    let c3 = &a.per_cpu[1];
    assert_eq!(c3.cpu, 3);
    assert_eq!(c3.verdict, "disturbed");
    let tty = c3
        .disturbed_by
        .iter()
        .find(|d| d.source == "IRQ 4 ttyS0")
        .expect("IRQ 4 counted on CPU 3");
    assert_eq!(tty.kind, "irq");
    let (b, e) = (&before.interrupts, &after.interrupts);
    let count = |t: &libtaskisol::irq::Interrupts| t.irq(4).unwrap().counts[3];
    assert_eq!(tty.count, count(e) - count(b), "the kernel's own delta");
    assert!(tty.count > 0);
    assert_eq!(tty.fix, "isold item irq_affinity");
    let busy = busy_loops(&end);
    assert_eq!(busy.len(), 4, "{busy:?}");
    let named: Vec<&str> = c3
        .disturbed_by
        .iter()
        .filter(|d| d.kind == "task")
        .map(|d| d.source.as_str())
        .collect();
    assert!(
        busy.iter()
            .any(|p| named.contains(&format!("task {p} sh").as_str())),
        "busy loops {busy:?}, CPU 3's tasks {named:?}"
    );
    let tick = c3.tick.as_ref().unwrap();
    assert!(!tick.stopped && !tick.nohz_full, "{tick:?}");
    // Sorted: most first.
    let counts: Vec<u64> = c3.disturbed_by.iter().map(|d| d.count).collect();
    assert!(counts.windows(2).all(|w| w[0] >= w[1]), "{counts:?}");
    // Exposure: every IRQ with a handler may reach CPU 3 after setup routed ttyS0 there.
    let irq4 = c3.can_disturb.irqs.iter().find(|i| i.irq == 4).unwrap();
    assert_eq!(irq4.affinity, "3");
    // Debian's kernels lack CONFIG_GENERIC_IRQ_DEBUGFS: whether an IRQ may move is unknown
    // until an apply tried.
    assert_eq!((irq4.managed, irq4.movable), (None, None));
    let busy_exposed = c3
        .can_disturb
        .tasks
        .iter()
        .filter(|t| busy.contains(&t.pid))
        .count();
    assert_eq!(busy_exposed, 4);
    assert!(c3
        .can_disturb
        .percpu_kthreads
        .iter()
        .any(|t| t.comm == "ksoftirqd/3"));
    assert!(c3
        .can_disturb
        .settings
        .iter()
        .any(|s| s.name == "tick" && !s.ok));
    let missing: Vec<&str> = a.missing_boot_args().map(|b| b.arg.as_str()).collect();
    assert!(missing.contains(&"nohz_full=2-3"), "{missing:?}");
    // Machine-wide: what this boot had (no isolation arguments, nothing applied).
    let setting = |n: &str| {
        a.settings
            .iter()
            .find(|s| s.name == n)
            .unwrap_or_else(|| panic!("{n}: {:?}", a.settings))
    };
    assert_eq!(
        (
            setting("kernel.timer_migration").value.as_str(),
            setting("kernel.timer_migration").ok
        ),
        ("1", false)
    );
    assert_eq!(setting("kernel.sched_rt_runtime_us").value, "950000");
    let pr = setting("console printing threads");
    assert_eq!((pr.value.as_str(), pr.ok), ("pr/ttyS0 on CPUs 0-3", false));
    assert_eq!(
        pr.fix,
        "isold item tasks (moves it to the housekeeping CPUs)"
    );
    let printk = setting("printk");
    assert_eq!(
        (printk.value.as_str(), printk.ok),
        ("console loglevel 4, serial console ttyS0", true)
    );
}

/// The CLI on a captured tree: JSON that parses with the documented fields, no window with
/// `--duration 0`, and a human form that fits 80 columns.
#[test]
fn audit_of_a_captured_tree_from_the_command_line() {
    let root = fixture("debian-6.12-rt-audit");
    let root = root.to_str().unwrap();
    let (rc, out, err) = isold(&[
        "--root", root, "audit", "--cpus", "2-3", "-d", "0", "--json",
    ]);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // The JSON reads back into the library's types, unchanged.
    let typed: audit::Audit = serde_json::from_str(&out).unwrap();
    assert_eq!(serde_json::to_value(&typed).unwrap(), v);
    assert_eq!(v["cpus"], "2-3");
    assert_eq!(v["source"], "--cpus");
    assert_eq!(v["window_s"], 0.0);
    let (rc, out, _) = isold(&[
        "--root", root, "audit", "--cpus", "3", "-d", "0.25", "--json",
    ]);
    assert_eq!(rc, 0);
    let w: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        w["window_s"], 0.25,
        "a captured tree's window is the duration asked for"
    );
    let cpus: Vec<u64> = v["per_cpu"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["cpu"].as_u64().unwrap())
        .collect();
    assert_eq!(cpus, [2, 3]);
    for c in v["per_cpu"].as_array().unwrap() {
        assert_eq!(c["verdict"], "unobserved");
        assert!(c["tick"].is_null());
        assert_eq!(c["disturbed_by"].as_array().unwrap().len(), 0);
        for k in ["irqs", "tasks", "percpu_kthreads", "workloads", "settings"] {
            assert!(c["can_disturb"][k].is_array(), "{k}");
        }
    }
    let (rc, out, err) = isold(&["--root", root, "audit", "--cpus", "2-3", "-d", "0"]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        out.starts_with("isold audit: CPUs 2-3 (--cpus), housekeeping CPUs 0-1, Linux"),
        "{out}"
    );
    assert!(
        out.contains("CPU 3: UNOBSERVED, no window; not isolated by the kernel\n"),
        "{out}"
    );
    assert!(
        out.contains("boot arguments missing (isold bootargs): isolcpus=managed_irq,domain,2-3"),
        "{out}"
    );
    assert!(
        out.ends_with("audit: 2 of 2 CPUs quiet\n") || out.contains("audit: "),
        "{out}"
    );
    let widest = out.lines().map(str::len).max().unwrap();
    assert!(widest <= 80, "a line of {widest} columns:\n{out}");
}

#[test]
fn audit_refuses_bad_cpus_and_durations_and_a_kernel_without_isolation() {
    let root = fixture("debian-6.12-rt-audit");
    let root = root.to_str().unwrap();
    let (rc, out, err) = isold(&["--root", root, "audit", "--cpus", "2-9"]);
    assert_eq!((rc, out.as_str()), (1, ""));
    assert_eq!(
        err,
        "isold: --cpus 2-9: CPUs 4-9 are not online (online: 0-3)\n"
    );
    // A malformed value is a usage error (2), with the pointer to --help.
    let (rc, _, err) = isold(&["--root", root, "audit", "--cpus", "x"]);
    assert_eq!(rc, 2);
    assert!(
        err.ends_with("\nTry 'isold --help' for more information.\n"),
        "{err}"
    );
    assert!(
        err.starts_with("isold: --cpus: invalid CPU list \"x\": "),
        "{err}"
    );
    for (d, shown) in [("-1", "-1"), ("3601", "3601"), ("nan", "NaN")] {
        let (rc, _, err) = isold(&[
            "--root",
            root,
            "audit",
            "--cpus",
            "3",
            &format!("--duration={d}"),
        ]);
        assert_eq!(rc, 2);
        assert_eq!(
            err,
            format!("isold: --duration {shown}: give seconds from 0 to 3600\nTry 'isold --help' for more information.\n")
        );
    }
    // This boot had no isolation arguments and the tree has no configuration file.
    let (rc, _, err) = isold(&["--root", root, "audit"]);
    assert_eq!(rc, 1);
    assert!(
        err.starts_with("isold: no isolated CPUs: the kernel isolates none"),
        "{err}"
    );
    assert!(
        err.ends_with("does not exist; name them with --cpus LIST\n"),
        "{err}"
    );
}

/// bootargs on the captured tree: everything missing (booted without arguments), exit 1;
/// `--write-grub` writes the drop-in below the root and says what to run.
#[test]
fn bootargs_lists_the_missing_and_writes_the_grub_drop_in() {
    let t = tempfile::tempdir().unwrap();
    copy_dir(&fixture("debian-6.12-rt-audit"), t.path());
    let had_etc = t.path().join("etc").exists();
    let root = t.path().to_str().unwrap();
    let (rc, out, err) = isold(&["--root", root, "bootargs", "--cpus", "2-3", "--json"]);
    assert_eq!(rc, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let missing: Vec<&str> = v["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert_eq!(
        &missing[..7],
        [
            "isolcpus=managed_irq,domain,2-3",
            "nohz_full=2-3",
            "rcu_nocbs=2-3",
            "irqaffinity=0-1",
            "skew_tick=1",
            "tsc=reliable",
            "nosoftlockup"
        ]
    );
    let (rc, out, _) = isold(&["--root", root, "bootargs", "--cpus", "2-3"]);
    assert_eq!(rc, 1);
    assert!(
        out.contains("  nohz_full=2-3                        MISSING\n"),
        "{out}"
    );
    assert!(
        out.contains("  nohz=on                              kernel default\n"),
        "{out}"
    );
    let (rc, out, err) = isold(&["--root", root, "bootargs", "--cpus", "2-3", "--write-grub"]);
    assert_eq!(rc, 0, "{err}");
    let path = t.path().join("etc/default/grub.d/isold.cfg");
    assert_eq!(
        out,
        format!(
            "wrote {}; run update-grub and reboot to use it (isold restore removes it)\n",
            path.display()
        )
    );
    // Every argument the policy needs, not only the missing ones (nohz=on, the kernel's
    // default, too): the next boot gets them all from this file.
    let every: Vec<&str> = v["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["arg"].as_str().unwrap())
        .collect();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains(&format!(
            "GRUB_CMDLINE_LINUX_DEFAULT=\"$GRUB_CMDLINE_LINUX_DEFAULT {}\"\n",
            every.join(" ")
        )),
        "{text}"
    );
    assert!(every.contains(&"nohz=on") && every.len() > missing.len());
    // What is written waits for update-grub and a reboot, and says so.
    let (rc, out, _) = isold(&["--root", root, "bootargs", "--cpus", "2-3"]);
    assert_eq!(rc, 1);
    assert!(
        out.contains("  nohz_full=2-3                        MISSING (in /etc/default/grub.d/isold.cfg: waits for update-grub and a reboot)\n"),
        "{out}"
    );
    // Its original (none) is kept where a reboot does not erase it: restore removes the
    // file and the directories made for it, also with no runtime state at all.
    let pers = std::fs::read_to_string(t.path().join("var/lib/isold/state.json")).unwrap();
    assert!(
        pers.contains("\"id\":\"file:/etc/default/grub.d/isold.cfg\""),
        "{pers}"
    );
    assert!(!t.path().join("run/isold/state.json").exists());
    let (rc, out, err) = isold(&["--root", root, "restore"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        out.contains("restored          /etc/default/grub.d/isold.cfg: restored: removed"),
        "{out}"
    );
    assert!(!path.exists());
    assert!(!t.path().join("etc/default/grub.d").exists());
    assert_eq!(
        t.path().join("etc").exists(),
        had_etc,
        "the directories made for it are gone"
    );
    assert!(!t.path().join("var/lib/isold/state.json").exists());
    // With the arguments on the command line, nothing is missing and nothing is written.
    std::fs::write(
        t.path().join("proc/cmdline"),
        format!("console=ttyS0 {}\n", missing.join(" ")),
    )
    .unwrap();
    let (rc, out, _) = isold(&["--root", root, "bootargs", "--cpus", "2-3"]);
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.ends_with("bootargs: the running kernel has every argument\n"),
        "{out}"
    );
    let (rc, out, _) = isold(&["--root", root, "bootargs", "--cpus", "2-3", "--json"]);
    assert_eq!(rc, 0, "nothing missing: {out}");
    assert!(out.contains("\"missing\": []"), "{out}");
    let (rc, out, _) = isold(&["--root", root, "bootargs", "--cpus", "2-3", "--write-grub"]);
    assert_eq!(rc, 0);
    assert_eq!(
        out,
        "bootargs: the running kernel has every argument; nothing written\n"
    );
    assert!(!path.exists());
}

/// Whether an IRQ may move: from the kernel's IRQ flags in debugfs where it has them, else
/// from what `isold apply` recorded in its state file (moved, or refused by the kernel).
#[test]
fn movable_irqs_are_known_from_debugfs_or_from_the_state_file() {
    let t = tempfile::tempdir().unwrap();
    copy_dir(&fixture("debian-6.12-rt-audit"), t.path());
    let root = t.path().to_str().unwrap();
    let dbg = t.path().join("sys/kernel/debug/irq/irqs");
    std::fs::create_dir_all(&dbg).unwrap();
    std::fs::write(dbg.join("1"), "handler:  handle_edge_irq\ndstate:   0x13408200\n            IRQD_ACTIVATED\n            IRQD_AFFINITY_MANAGED\n").unwrap();
    std::fs::write(dbg.join("12"), "handler:  handle_edge_irq\ndstate:   0x10408200\n            IRQD_ACTIVATED\n            IRQD_NO_BALANCING\n").unwrap();
    std::fs::write(
        dbg.join("8"),
        "handler:  handle_edge_irq\ndstate:   0x10408200\n            IRQD_ACTIVATED\n",
    )
    .unwrap();
    let state = t.path().join("state.json");
    use libtaskisol::policy::state::{Entry, Original, State};
    let mut st = State::new(String::new(), "2-3".into(), "x".into());
    st.record(Entry {
        id: "irq:4".into(),
        item: "irq_affinity".into(),
        label: "IRQ 4 (ttyS0)".into(),
        original: Original::Attr {
            path: "/proc/irq/4/smp_affinity_list".into(),
            content: "0-3\n".into(),
            restore: "0-3".into(),
        },
    });
    st.unchangeable
        .insert("irq:0".into(), "the kernel refused (EIO)".into());
    st.save(&state).unwrap();
    let (rc, out, err) = isold(&[
        "--root",
        root,
        "--state",
        state.to_str().unwrap(),
        "audit",
        "--cpus",
        "2-3",
        "-d",
        "0",
        "--json",
    ]);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let irqs = v["per_cpu"][1]["can_disturb"]["irqs"].as_array().unwrap();
    let get = |n: u64| {
        irqs.iter()
            .find(|i| i["irq"] == n)
            .unwrap_or_else(|| panic!("IRQ {n}: {irqs:?}"))
    };
    assert_eq!(
        (get(1)["managed"].clone(), get(1)["movable"].clone()),
        (true.into(), false.into())
    );
    assert!(get(1)["fix"]
        .as_str()
        .unwrap()
        .starts_with("boot argument isolcpus=managed_irq"));
    assert_eq!(
        (get(12)["managed"].clone(), get(12)["movable"].clone()),
        (false.into(), false.into())
    );
    assert!(get(12)["fix"]
        .as_str()
        .unwrap()
        .starts_with("none at run time"));
    assert_eq!(
        (get(8)["managed"].clone(), get(8)["movable"].clone()),
        (false.into(), true.into())
    );
    assert_eq!(get(8)["fix"], "isold item irq_affinity");
    // No debugfs entry: the state file's word.
    assert_eq!(
        (get(0)["managed"].clone(), get(0)["movable"].clone()),
        (serde_json::Value::Null, false.into())
    );
    assert!(get(0)["fix"]
        .as_str()
        .unwrap()
        .starts_with("none at run time"));
    assert_eq!(
        (get(4)["managed"].clone(), get(4)["movable"].clone()),
        (serde_json::Value::Null, true.into())
    );
    assert_eq!(get(9)["movable"], serde_json::Value::Null);
}

/// `--osnoise` on a tree with tracefs: the tracer's per-CPU figures in the audit, and tracefs
/// as it was afterwards; without the tracer, a note and the audit all the same.
#[test]
fn osnoise_figures_join_the_audit_and_tracefs_is_put_back() {
    let t = tempfile::tempdir().unwrap();
    copy_dir(&fixture("debian-6.12-rt-audit"), t.path());
    let root = t.path().to_str().unwrap();
    let osnoise_audit = |json: bool| {
        let mut args = vec![
            "--root",
            root,
            "audit",
            "--cpus",
            "2-3",
            "-d",
            "0",
            "--osnoise",
        ];
        if json {
            args.push("--json");
        }
        isold(&args)
    };
    let tr = t.path().join("sys/kernel/tracing");
    std::fs::create_dir_all(tr.join("osnoise")).unwrap();
    std::fs::write(tr.join("available_tracers"), "timerlat osnoise nop\n").unwrap();
    std::fs::write(tr.join("current_tracer"), "nop\n").unwrap();
    std::fs::write(tr.join("osnoise/cpus"), "0-3\n").unwrap();
    // The tracer's own thread on CPU 3 (a per-CPU kthread): left out of what the audit lists.
    let k = t.path().join("proc/900/task/900");
    std::fs::create_dir_all(&k).unwrap();
    std::fs::write(k.join("stat"), "900 (osnoise/3) S 2 0 0 0 -1 69238848 0 0 0 0 0 0 0 0 20 0 1 0 9000 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n").unwrap();
    std::fs::write(
        k.join("status"),
        "Name:\tosnoise/3\nCpus_allowed_list:\t3\n",
    )
    .unwrap();
    std::fs::write(t.path().join("proc/900/cgroup"), "0::/\n").unwrap();
    std::fs::write(
        tr.join("trace"),
        "# tracer: osnoise\n\
         \x20     osnoise/3-302     [003] .......   120.001102: 1000000         40  99.99600      12      1      0    251      2      0\n",
    )
    .unwrap();
    let (rc, out, err) = osnoise_audit(true);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["per_cpu"][0].get("osnoise").is_none(),
        "no sample from CPU 2"
    );
    let n = &v["per_cpu"][1]["osnoise"];
    assert_eq!(
        (
            n["periods"].as_u64(),
            n["noise_us"].as_u64(),
            n["max_single_us"].as_u64()
        ),
        (Some(1), Some(40), Some(12))
    );
    assert_eq!(
        (n["irq"].as_u64(), n["softirq"].as_u64(), n["hw"].as_u64()),
        (Some(251), Some(2), Some(1))
    );
    let notes: Vec<&str> = v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with("osnoise: no sample from CPU 2"),
        "{notes:?}"
    );
    // The tracer ran on the audited CPUs only, and tracefs is as it was.
    assert_eq!(
        std::fs::read_to_string(tr.join("current_tracer")).unwrap(),
        "nop"
    );
    assert_eq!(
        std::fs::read_to_string(tr.join("osnoise/cpus")).unwrap(),
        "0-3"
    );
    // The tracer's own thread is left out; the other per-CPU kthreads are there.
    let kthreads = v["per_cpu"][1]["can_disturb"]["percpu_kthreads"]
        .as_array()
        .unwrap();
    assert!(
        kthreads.iter().any(|t| t["comm"] == "ksoftirqd/3"),
        "{kthreads:?}"
    );
    assert!(
        !kthreads.iter().any(|t| t["comm"] == "osnoise/3"),
        "{kthreads:?}"
    );
    let (rc, out, _) = osnoise_audit(false);
    assert_eq!(rc, 0);
    assert!(
        out.contains("  osnoise: 40 us of noise in 1.0 s measured (1 periods), longest 12 us;\n"),
        "{out}"
    );
    assert!(
        out.contains("    interference: 251 IRQ, 2 softirq, 0 thread, 0 NMI, 1 hardware\n"),
        "{out}"
    );

    // A kernel without the tracer: said, and the audit goes on.
    std::fs::write(tr.join("available_tracers"), "function nop\n").unwrap();
    let (rc, out, err) = osnoise_audit(true);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["notes"][0],
        "osnoise: the kernel has no osnoise tracer (CONFIG_OSNOISE_TRACER); audited without it"
    );
    assert!(v["per_cpu"][1].get("osnoise").is_none());
    // Another tracer in use is not taken over.
    std::fs::write(tr.join("available_tracers"), "osnoise function nop\n").unwrap();
    std::fs::write(tr.join("current_tracer"), "function\n").unwrap();
    let (rc, _, err) = osnoise_audit(false);
    assert_eq!(rc, 1);
    assert!(
        err.contains("another tracer is in use; not taking it over"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(tr.join("current_tracer")).unwrap(),
        "function\n"
    );
}

/// Without --config and --cpus, the configuration file below the root is used when it exists.
#[test]
fn the_default_configuration_file_gives_the_cpus_when_it_exists() {
    let t = tempfile::tempdir().unwrap();
    copy_dir(&fixture("debian-6.12-rt-audit"), t.path());
    let conf = t.path().join("etc/isold/isold.toml");
    std::fs::create_dir_all(conf.parent().unwrap()).unwrap();
    std::fs::write(&conf, "isolated_cpus = \"3\"\n").unwrap();
    let root = t.path().to_str().unwrap();
    let (rc, out, err) = isold(&["--root", root, "audit", "-d", "0", "--json"]);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["cpus"], "3");
    assert_eq!(v["source"], conf.display().to_string());
    let (rc, out, _) = isold(&["--root", root, "bootargs", "--json"]);
    assert_eq!(rc, 1);
    assert!(out.contains("\"nohz_full=3\""), "{out}");
}

/// On the running system (read-only): the audit leaves itself out of what it reports, and
/// sees the other tasks, this test's among them.
#[test]
fn the_audit_of_this_machine_leaves_itself_out() {
    let child = Command::new(env!("CARGO_BIN_EXE_isold"))
        .args(["audit", "--cpus", "1", "--duration", "0", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let audit_pid = i64::from(child.id());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let me = i64::from(std::process::id());
    let tasks = v["per_cpu"][0]["can_disturb"]["tasks"].as_array().unwrap();
    let pids: Vec<i64> = tasks.iter().map(|t| t["pid"].as_i64().unwrap()).collect();
    assert!(
        pids.contains(&me),
        "this test ({me}) may run on CPU 1: {pids:?}"
    );
    assert!(
        !pids.contains(&audit_pid),
        "the audit ({audit_pid}) reported itself: {pids:?}"
    );
    // --duration 0 is no window: no rate from the two samples' few milliseconds.
    assert_eq!(v["window_s"], 0.0);
    let c = &v["per_cpu"][0];
    assert_eq!(c["verdict"], "unobserved", "{c}");
    assert!(c["tick"].is_null(), "{c}");
    assert_eq!(c["disturbed_by"].as_array().map(Vec::len), Some(0), "{c}");
}

/// The same in words: `--duration 0` prints what can disturb and says there was no window,
/// with no rate anywhere.
#[test]
fn a_zero_window_on_this_machine_prints_no_rate() {
    let out = Command::new(env!("CARGO_BIN_EXE_isold"))
        .args(["audit", "--cpus", "1", "--duration", "0"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("audit: no window (--duration 0): what can disturb, not what did"),
        "{text}"
    );
    for rate in ["/s)", "/s,", "/s "] {
        assert!(!text.contains(rate), "{rate} in {text}");
    }
}

/// The CPU's settings follow the kernel's: the tick stopped only under nohz_full, RCU
/// callbacks offloaded by rcu_nocbs or by nohz_full (which implies it), unbound workqueues
/// allowed there only when the mask includes the CPU.
#[test]
fn tick_rcu_and_workqueue_settings_follow_nohz_full_rcu_nocbs_and_the_mask() {
    let dir = tempfile::tempdir().unwrap();
    let root_dir = dir.path().join("root");
    copy_dir(&fixture("debian-6.12-rt-audit"), &root_dir);
    std::fs::write(root_dir.join("sys/devices/system/cpu/nohz_full"), "3\n").unwrap();
    std::fs::write(
        root_dir.join("proc/cmdline"),
        "console=ttyS0 nohz_full=3 rcu_nocbs=2\n",
    )
    .unwrap();
    // CPUs 0-1 and 3, not 2.
    std::fs::write(
        root_dir.join("sys/devices/virtual/workqueue/cpumask"),
        "b\n",
    )
    .unwrap();
    let root = SysRoot::new(&root_dir);
    let s = Sample::read(&root).unwrap();
    let a = audit::audit(&root, &scope(), &s, &s, 0.0).unwrap();
    let setting = |cpu: usize, name: &str| {
        let c = a.per_cpu.iter().find(|c| c.cpu == cpu).unwrap();
        let s = c
            .can_disturb
            .settings
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("CPU {cpu}: no setting {name}"));
        (s.value.clone(), s.ok)
    };
    assert_eq!(setting(2, "tick"), ("periodic".to_string(), false));
    assert_eq!(setting(3, "tick"), ("nohz_full".to_string(), true));
    assert_eq!(setting(2, "rcu callbacks"), ("offloaded".to_string(), true));
    assert_eq!(setting(3, "rcu callbacks"), ("offloaded".to_string(), true));
    assert_eq!(
        setting(2, "unbound workqueues"),
        ("0-1,3".to_string(), true)
    );
    assert_eq!(
        setting(3, "unbound workqueues"),
        ("0-1,3".to_string(), false)
    );
}

/// /proc/softirqs is optional (a kernel may lack it); any other error reading it is one.
#[test]
fn a_missing_softirqs_file_is_no_softirqs_and_an_unreadable_one_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let root_dir = dir.path().join("root");
    copy_dir(&fixture("debian-6.12-rt-audit"), &root_dir);
    let root = SysRoot::new(&root_dir);
    assert!(Sample::read(&root).unwrap().softirqs.is_some());
    std::fs::remove_file(root_dir.join("proc/softirqs")).unwrap();
    assert!(Sample::read(&root).unwrap().softirqs.is_none());
    std::fs::create_dir(root_dir.join("proc/softirqs")).unwrap();
    let e = Sample::read(&root).unwrap_err().to_string();
    assert!(e.contains("softirqs"), "{e}");
}

/// An IRQ of `[irqs] allow` is the workload's: the audit lists it apart, where it may reach
/// and where it fired, never among the disturbers, and a CPU that only it reached is quiet as
/// far as IRQs go.
#[test]
fn the_workloads_irqs_are_not_disturbers() {
    use libtaskisol::policy::config::IrqAllow;
    let start = SysRoot::new(fixture("debian-6.12-rt-audit"));
    let end = SysRoot::new(fixture("debian-6.12-rt-audit-end"));
    let before = Sample::read(&start).unwrap();
    let after = Sample::read(&end).unwrap();
    for allow in [IrqAllow::Number(4), IrqAllow::Name("tty*".into())] {
        let mut sc = scope();
        sc.allow_irqs = vec![allow.clone()];
        let a = audit::audit(&end, &sc, &before, &after, 10.0).unwrap();
        let c3 = &a.per_cpu[1];
        assert!(
            !c3.disturbed_by
                .iter()
                .any(|d| d.source.starts_with("IRQ 4 ")),
            "{allow}: {:?}",
            c3.disturbed_by
        );
        let fired = c3
            .workload_irqs_fired
            .iter()
            .find(|d| d.source == "IRQ 4 ttyS0")
            .expect("listed as the workload's");
        assert!(fired.count > 0);
        assert!(!c3.can_disturb.irqs.iter().any(|i| i.irq == 4));
        let irq4 = c3
            .can_disturb
            .workload_irqs
            .iter()
            .find(|i| i.irq == 4)
            .unwrap();
        assert_eq!(
            irq4.fix,
            format!("none: the workload's IRQ ([irqs] allow {allow})")
        );
        let text = isold::audit::human(&a, false);
        assert!(
            text.contains("the workload's IRQs fired (meant to be here): IRQ 4 ttyS0 ("),
            "{text}"
        );
        assert!(
            text.contains("    the workload's IRQs: 4 ttyS0\n"),
            "{text}"
        );
    }
}

/// `--cpus` gets the configuration's check: CPUs that cover every online CPU leave no
/// housekeeping CPU, and no drop-in with an empty `irqaffinity=` is ever written.
#[test]
fn bootargs_cpus_must_leave_a_housekeeping_cpu() {
    let t = tempfile::tempdir().unwrap();
    copy_dir(&fixture("debian-6.12-rt-audit"), t.path());
    let root = t.path().to_str().unwrap();
    let (rc, out, err) = isold(&["--root", root, "bootargs", "--cpus", "0-3", "--write-grub"]);
    assert_eq!((rc, out.as_str()), (1, ""));
    assert_eq!(
        err,
        "isold: isolated CPUs 0-3: no housekeeping CPU left: they cover every online CPU (0-3)\n"
    );
    assert!(!t.path().join("etc/default/grub.d/isold.cfg").exists());
}

/// Debian 12's /etc/default/grub as grub2-common 2.06-13+deb12u2 installs it
/// (/usr/share/grub/default/grub): a backquoted command, comments, both kernel lines.
const GRUB_DEBIAN: &str = include_str!("data/grub-2.06-13-debian12");

/// The kernel line update-grub would make of the tree's GRUB files (grub-mkconfig sources
/// /etc/default/grub, then grub.d/*.cfg; 10_linux puts GRUB_CMDLINE_LINUX first, then
/// GRUB_CMDLINE_LINUX_DEFAULT).
fn next_boot_line(root: &Path) -> String {
    use libtaskisol::policy::grub;
    let s = grub::sources(&SysRoot::new(root)).unwrap();
    let m = grub::model(&s);
    m.words
        .iter()
        .map(|w| w.text.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// An isolcpus= the administrator already has in GRUB_CMDLINE_LINUX_DEFAULT comes before the
/// drop-in's, and the kernel keeps the first: bootargs names it with its file and line, and
/// --write-grub replaces it in place (the next boot's kernel then takes every argument of
/// the drop-in), recording the original, which restore puts back byte for byte.
#[test]
fn an_earlier_isolcpus_in_grubs_default_line_is_named_and_replaced_and_restored() {
    let t = tempfile::tempdir().unwrap();
    copy_dir(&fixture("debian-6.12-rt-audit"), t.path());
    let root = t.path().to_str().unwrap();
    let grub = t.path().join("etc/default/grub");
    std::fs::create_dir_all(grub.parent().unwrap()).unwrap();
    let original = GRUB_DEBIAN.replace(
        "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"",
        "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet isolcpus=1\"",
    );
    assert_ne!(original, GRUB_DEBIAN);
    std::fs::write(&grub, &original).unwrap();
    let line = original
        .lines()
        .position(|l| l.starts_with("GRUB_CMDLINE_LINUX_DEFAULT="))
        .unwrap()
        + 1;
    assert_eq!(line, 9);

    let (rc, out, _) = isold(&["--root", root, "bootargs", "--cpus", "2-3"]);
    assert_eq!(rc, 1);
    // Under isolcpus='s own line, and under no other argument's.
    assert!(
        out.contains("      conflict: isolcpus=1 at /etc/default/grub:9 (GRUB_CMDLINE_LINUX_DEFAULT):\n      the kernel keeps the first isolcpus= it accepts and refuses a later one\n"),
        "{out}"
    );
    assert_eq!(out.matches("conflict: isolcpus=1").count(), 1, "{out}");
    let arg_line = out
        .lines()
        .position(|l| l.starts_with("  isolcpus=managed_irq,domain,2-3 "))
        .unwrap();
    let conflict_line = out
        .lines()
        .position(|l| l.starts_with("      conflict: isolcpus=1 "))
        .unwrap();
    assert!(
        out.lines()
            .skip(arg_line + 1)
            .take(conflict_line - arg_line - 1)
            .all(|l| l.starts_with("      ")),
        "the conflict is said under isolcpus=: {out}"
    );
    let (_, out, _) = isold(&["--root", root, "bootargs", "--cpus", "2-3", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let c = v["conflicts"].as_array().unwrap();
    assert_eq!(c.len(), 1, "{out}");
    assert_eq!(c[0]["arg"], "isolcpus=managed_irq,domain,2-3");
    assert_eq!(c[0]["word"], "isolcpus=1");
    assert_eq!(c[0]["file"], "/etc/default/grub");
    assert_eq!(c[0]["line"], 9);
    assert_eq!(c[0]["var"], "GRUB_CMDLINE_LINUX_DEFAULT");
    let every: Vec<String> = v["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["arg"].as_str().unwrap().to_string())
        .collect();

    let (rc, out, err) = isold(&["--root", root, "bootargs", "--cpus", "2-3", "--write-grub"]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        out.starts_with(&format!(
            "replaced isolcpus=1 with isolcpus=managed_irq,domain,2-3 in {} line 9 (GRUB_CMDLINE_LINUX_DEFAULT): ",
            grub.display()
        )),
        "{out}"
    );
    assert!(
        out.contains("isold restore removes it and puts back what it replaced"),
        "{out}"
    );
    // Only the word changed; the kernel of the next boot takes every argument.
    assert_eq!(
        std::fs::read_to_string(&grub).unwrap(),
        original.replace("quiet isolcpus=1", "quiet isolcpus=managed_irq,domain,2-3")
    );
    let next = next_boot_line(t.path());
    assert!(
        next.starts_with("quiet isolcpus=managed_irq,domain,2-3 "),
        "{next}"
    );
    for a in &every {
        assert!(
            libtaskisol::policy::bootargs::in_effect(&next, a),
            "{a} not in effect on {next}"
        );
    }
    // Now what is written only waits for update-grub and a reboot.
    let (_, out, _) = isold(&["--root", root, "bootargs", "--cpus", "2-3"]);
    assert!(!out.contains("conflict:"), "{out}");
    assert!(
        out.contains("  isolcpus=managed_irq,domain,2-3      MISSING (in /etc/default/grub.d/isold.cfg: waits for update-grub and a reboot)\n"),
        "{out}"
    );
    // A second --write-grub changes nothing more, and restore gives back the file as it
    // was, byte for byte, and removes the drop-in.
    let (rc, out, err) = isold(&["--root", root, "bootargs", "--cpus", "2-3", "--write-grub"]);
    assert_eq!(rc, 0, "{err}");
    assert!(!out.contains("replaced"), "{out}");
    let (rc, out, err) = isold(&["--root", root, "restore"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        out.contains("restored          /etc/default/grub: restored: original content"),
        "{out}"
    );
    assert_eq!(std::fs::read(&grub).unwrap(), original.as_bytes());
    assert!(!t.path().join("etc/default/grub.d/isold.cfg").exists());
}

/// The drop-in written, then the administrator puts an isolcpus= of their own in
/// /etc/default/grub, which comes first on the kernel line: bootargs says the drop-in has
/// the argument but the next kernel would not take it, and why.
#[test]
fn an_argument_of_the_drop_in_that_a_later_edit_overrides_is_said_so() {
    let t = tempfile::tempdir().unwrap();
    copy_dir(&fixture("debian-6.12-rt-audit"), t.path());
    let root = t.path().to_str().unwrap();
    let grub = t.path().join("etc/default/grub");
    std::fs::create_dir_all(grub.parent().unwrap()).unwrap();
    std::fs::write(&grub, GRUB_DEBIAN).unwrap();
    let (rc, _, err) = isold(&["--root", root, "bootargs", "--cpus", "2-3", "--write-grub"]);
    assert_eq!(rc, 0, "{err}");
    let (_, out, _) = isold(&["--root", root, "bootargs", "--cpus", "2-3"]);
    assert!(
        out.contains("  isolcpus=managed_irq,domain,2-3      MISSING (in /etc/default/grub.d/isold.cfg: waits for update-grub and a reboot)\n"),
        "{out}"
    );
    std::fs::write(
        &grub,
        GRUB_DEBIAN.replace(
            "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"",
            "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet isolcpus=1\"",
        ),
    )
    .unwrap();
    let (rc, out, _) = isold(&["--root", root, "bootargs", "--cpus", "2-3"]);
    assert_eq!(rc, 1);
    assert!(
        out.contains("  isolcpus=managed_irq,domain,2-3      MISSING (in /etc/default/grub.d/isold.cfg, but the kernel would not take it: see conflict)\n"),
        "{out}"
    );
    assert!(
        out.contains(
            "      conflict: isolcpus=1 at /etc/default/grub:9 (GRUB_CMDLINE_LINUX_DEFAULT):"
        ),
        "{out}"
    );
    // The drop-in's other arguments only wait for update-grub.
    assert!(
        out.contains("  nohz_full=2-3                        MISSING (in /etc/default/grub.d/isold.cfg: waits for update-grub and a reboot)\n"),
        "{out}"
    );
}

/// A second `--write-grub` (other CPUs) after the administrator edited /etc/default/grub:
/// restore takes out isold's change alone. The administrator's `GRUB_TIMEOUT=1` stays, and
/// the `isolcpus=1` isold replaced comes back.
#[test]
fn a_second_write_grub_keeps_the_administrators_edit_at_restore() {
    let t = tempfile::tempdir().unwrap();
    copy_dir(&fixture("debian-6.12-rt-audit"), t.path());
    let root = t.path().to_str().unwrap();
    let grub = t.path().join("etc/default/grub");
    std::fs::create_dir_all(grub.parent().unwrap()).unwrap();
    let original = GRUB_DEBIAN.replace(
        "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"",
        "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet isolcpus=1\"",
    );
    std::fs::write(&grub, &original).unwrap();
    let (rc, _, err) = isold(&["--root", root, "bootargs", "--cpus", "3", "--write-grub"]);
    assert_eq!(rc, 0, "{err}");
    let edited = std::fs::read_to_string(&grub)
        .unwrap()
        .replace("GRUB_TIMEOUT=5", "GRUB_TIMEOUT=1");
    std::fs::write(&grub, &edited).unwrap();
    let (rc, _, err) = isold(&["--root", root, "bootargs", "--cpus", "2-3", "--write-grub"]);
    assert_eq!(rc, 0, "{err}");
    assert!(std::fs::read_to_string(&grub)
        .unwrap()
        .contains("GRUB_TIMEOUT=1\n"));
    let (rc, out, err) = isold(&["--root", root, "restore"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert_eq!(
        std::fs::read_to_string(&grub).unwrap(),
        original.replace("GRUB_TIMEOUT=5", "GRUB_TIMEOUT=1")
    );
    assert!(!t.path().join("etc/default/grub.d/isold.cfg").exists());
}

/// What isold cannot replace it refuses, naming the file, the line and the argument, and
/// writes nothing: a word not written as one plain word, a later file that sets the default
/// line anew. The running kernel's own repeated argument is named too.
#[test]
fn write_grub_refuses_what_it_cannot_replace_and_bootargs_names_the_running_occurrence() {
    let t = tempfile::tempdir().unwrap();
    copy_dir(&fixture("debian-6.12-rt-audit"), t.path());
    let root = t.path().to_str().unwrap();
    let grub = t.path().join("etc/default/grub");
    std::fs::create_dir_all(t.path().join("etc/default/grub.d")).unwrap();
    let quoted = GRUB_DEBIAN.replace(
        "GRUB_CMDLINE_LINUX=\"\"",
        "GRUB_CMDLINE_LINUX=\"nohz_full=\"1",
    );
    std::fs::write(&grub, &quoted).unwrap();
    let (rc, _, err) = isold(&["--root", root, "bootargs", "--cpus", "2-3", "--write-grub"]);
    assert_eq!(rc, 1);
    assert_eq!(
        err,
        "isold: bootargs: the kernel would ignore nohz_full=2-3: the kernel keeps the first nohz_full= it accepts and refuses a later one with other CPUs (housekeeping_setup): nohz_full=1 at /etc/default/grub:10 (GRUB_CMDLINE_LINUX) is not written as one plain word, so isold does not replace it; edit it by hand; nothing written\n"
    );
    assert_eq!(std::fs::read_to_string(&grub).unwrap(), quoted);
    assert!(!t.path().join("etc/default/grub.d/isold.cfg").exists());
    assert!(!t.path().join("var/lib/isold/state.json").exists());

    std::fs::write(&grub, GRUB_DEBIAN).unwrap();
    std::fs::write(
        t.path().join("etc/default/grub.d/zz-cloud.cfg"),
        "GRUB_CMDLINE_LINUX_DEFAULT=\"console=ttyS0\"\n",
    )
    .unwrap();
    let (rc, _, err) = isold(&["--root", root, "bootargs", "--cpus", "2-3", "--write-grub"]);
    assert_eq!(rc, 1);
    assert!(
        err.starts_with("isold: bootargs: the kernel would not get isolcpus=managed_irq,domain,2-3: /etc/default/grub.d/zz-cloud.cfg:1 (GRUB_CMDLINE_LINUX_DEFAULT): GRUB_CMDLINE_LINUX_DEFAULT is set again after /etc/default/grub.d/isold.cfg without $GRUB_CMDLINE_LINUX_DEFAULT"),
        "{err}"
    );
    assert!(!t.path().join("etc/default/grub.d/isold.cfg").exists());
    std::fs::remove_file(t.path().join("etc/default/grub.d/zz-cloud.cfg")).unwrap();

    std::fs::write(
        t.path().join("proc/cmdline"),
        "BOOT_IMAGE=/vmlinuz ro isolcpus=1 isolcpus=managed_irq,domain,2-3 rcu_nocbs=2-3 rcu_nocbs=1\n",
    )
    .unwrap();
    let (rc, out, _) = isold(&["--root", root, "bootargs", "--cpus", "2-3"]);
    assert_eq!(rc, 1);
    assert!(
        out.contains("  isolcpus=managed_irq,domain,2-3      MISSING (kernel has isolcpus=1)\n"),
        "{out}"
    );
    assert!(
        out.contains(
            "      /proc/cmdline has 2 isolcpus= (word 1 of 2 is isolcpus=1): the kernel\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("      /proc/cmdline has 2 rcu_nocbs= (word 2 of 2 is rcu_nocbs=1): the kernel\n      keeps the last rcu_nocbs=\n"),
        "{out}"
    );
}

/// A tracefs in a captured tree: the tick_stop tracepoint and instances, and `trace` (what
/// a new instance records here) from the kernel given (libtaskisol/tests/fixtures/tick_stop).
fn tick_stop_tracefs(root: &Path, trace: &str) -> PathBuf {
    let tr = root.join("sys/kernel/tracing");
    std::fs::create_dir_all(tr.join("events/timer/tick_stop")).unwrap();
    std::fs::create_dir_all(tr.join("instances")).unwrap();
    std::fs::write(tr.join("available_events"), "timer:tick_stop\n").unwrap();
    std::fs::write(tr.join("events/timer/tick_stop/enable"), "0\n").unwrap();
    std::fs::write(tr.join("buffer_size_kb"), "1410\n").unwrap();
    std::fs::write(tr.join("tracing_cpumask"), "f\n").unwrap();
    std::fs::copy(tick_traces().join(trace), tr.join("trace")).unwrap();
    tr
}

/// The window between the two real captures with CPUs 2-3 made nohz_full: the tick ran on
/// CPU 3, and with 6.12-rt's tick_stop trace joined the audit names the kernel's reasons.
#[test]
fn the_kernels_tick_reasons_join_a_window_of_real_captures() {
    let t = tempfile::tempdir().unwrap();
    copy_dir(&fixture("debian-6.12-rt-audit-end"), t.path());
    std::fs::write(t.path().join("sys/devices/system/cpu/nohz_full"), "2-3\n").unwrap();
    let start = SysRoot::new(fixture("debian-6.12-rt-audit"));
    let end = SysRoot::new(t.path());
    let (before, after) = (Sample::read(&start).unwrap(), Sample::read(&end).unwrap());
    let mut a = audit::audit(&end, &scope(), &before, &after, 10.0).unwrap();
    let c3 = &a.per_cpu[1];
    assert!(!c3.tick.as_ref().unwrap().stopped);
    let tick_fix = |a: &audit::Audit| {
        a.per_cpu[1]
            .disturbed_by
            .iter()
            .find(|d| d.kind == "tick")
            .map(|d| d.fix.clone())
            .unwrap()
    };
    assert!(tick_fix(&a).contains("more than one task is runnable"));
    let trace = libtaskisol::tickstop::parse_trace(
        &std::fs::read_to_string(tick_traces().join("debian-6.12-rt.trace")).unwrap(),
    )
    .unwrap();
    a.add_tick_stops(&trace);
    let reasons = a.per_cpu[1].tick.as_ref().unwrap().reasons.clone().unwrap();
    let deps: Vec<(&str, u64)> = reasons
        .iter()
        .map(|r| (r.dependency.as_str(), r.count))
        .collect();
    assert_eq!(deps, [("POSIX_TIMER", 256), ("SCHED", 256)]);
    assert_eq!(reasons[0].pids, [203]);
    assert!(
        tick_fix(&a).starts_with("the kernel kept the tick for POSIX_TIMER (256 times, task 203): a task here runs under a CPU-time limit"),
        "{}",
        tick_fix(&a)
    );
    // CPU 2 had no failed stop in the trace.
    assert_eq!(
        a.per_cpu[0].tick.as_ref().unwrap().reasons,
        Some(Vec::new())
    );
}

/// `isold audit` on a captured tree whose tick runs on nohz_full CPU 3 during the window (the
/// test adds 500 local timer interrupts there once the audit started): with tracefs, the
/// kernel's reason and fix in JSON and text, the instance gone afterwards and the top-level
/// tracefs files untouched; without tracefs, a note and the audit's own wording. 7.x's
/// housekeeping file is shown.
#[test]
fn the_audit_names_the_kernels_reason_a_tick_ran_from_tracefs() {
    let t = tempfile::tempdir().unwrap();
    copy_dir(&fixture("debian-6.12-rt-audit"), t.path());
    std::fs::write(t.path().join("sys/devices/system/cpu/nohz_full"), "2-3\n").unwrap();
    std::fs::write(
        t.path().join("sys/devices/system/cpu/housekeeping"),
        "0-1\n",
    )
    .unwrap();
    let tr = tick_stop_tracefs(t.path(), "debian-7.2.trace");
    let interrupts = std::fs::read_to_string(t.path().join("proc/interrupts")).unwrap();
    let ticked = interrupts.replace(
        "LOC:        860        813        744        701",
        "LOC:        860        813        744       1201",
    );
    assert_ne!(ticked, interrupts);
    let audit = |json: bool| {
        std::fs::write(t.path().join("proc/interrupts"), &interrupts).unwrap();
        let mut c = Command::new(env!("CARGO_BIN_EXE_isold"));
        c.arg("--root").arg(t.path());
        c.args(["audit", "--cpus", "2-3", "-d", "2"]);
        if json {
            c.arg("--json");
        }
        let mut child = c
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The first sample follows the instance's making (or, without tracefs, the start).
        let inst = tr.join(format!(
            "instances/isold-audit-{}-{}",
            libtaskisol::tracefs::own_pid_ns(),
            child.id()
        ));
        let t0 = std::time::Instant::now();
        while tr.exists() && !inst.exists() && t0.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
        std::fs::write(t.path().join("proc/interrupts"), &ticked).unwrap();
        let rc = child.wait().unwrap();
        let mut out = String::new();
        let mut err = String::new();
        use std::io::Read;
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert!(rc.success(), "{err}");
        assert!(!inst.exists(), "the instance is removed");
        out
    };
    let v: serde_json::Value = serde_json::from_str(&audit(true)).unwrap();
    assert_eq!(v["kernel_housekeeping"], "0-1");
    let c3 = &v["per_cpu"][1];
    assert_eq!(c3["tick"]["stopped"], false, "{c3}");
    let reasons = c3["tick"]["reasons"].as_array().unwrap();
    let deps: Vec<(&str, u64)> = reasons
        .iter()
        .map(|r| {
            (
                r["dependency"].as_str().unwrap(),
                r["count"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(deps, [("SCHED", 675), ("POSIX_TIMER", 239)]);
    assert!(reasons[1]["fix"].as_str().unwrap().contains("ulimit -t"));
    assert_eq!(reasons[1]["pids"], serde_json::json!([141]));
    let tick = c3["disturbed_by"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["kind"] == "tick")
        .unwrap();
    assert!(
        tick["fix"]
            .as_str()
            .unwrap()
            .starts_with("the kernel kept the tick for SCHED (675 times, tasks 0 143 144 146): more than one task"),
        "{tick}"
    );
    assert_eq!(v["notes"], serde_json::json!([]));
    for (f, want) in [
        ("events/timer/tick_stop/enable", "0\n"),
        ("buffer_size_kb", "1410\n"),
        ("tracing_cpumask", "f\n"),
    ] {
        assert_eq!(std::fs::read_to_string(tr.join(f)).unwrap(), want, "{f}");
    }
    let out = audit(false);
    assert!(
        out.contains("\nkernel housekeeping CPUs (/sys/devices/system/cpu/housekeeping): 0-1\n"),
        "{out}"
    );
    assert!(
        out.contains("CPU 3: DISTURBED, tick running (250/s, kernel: SCHED); nohz_full\n"),
        "{out}"
    );
    assert!(
        out.contains("POSIX_TIMER (239 times, task 141): a task here runs"),
        "{out}"
    );
    assert!(out.lines().all(|l| l.len() <= 80), "{out}");

    // Without tracefs: said in a note, and the audit's own reading as before.
    std::fs::remove_dir_all(t.path().join("sys/kernel/tracing")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&audit(true)).unwrap();
    let c3 = &v["per_cpu"][1];
    assert!(c3["tick"].get("reasons").is_none(), "{c3}");
    assert_eq!(
        v["notes"],
        serde_json::json!(["tick_stop: tracefs is not mounted (at /sys/kernel/tracing or /sys/kernel/debug/tracing); the tick's reason is the audit's reading of the counters, not the kernel's"])
    );
    let tick = c3["disturbed_by"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["kind"] == "tick")
        .unwrap();
    assert!(tick["fix"]
        .as_str()
        .unwrap()
        .contains("more than one task is runnable"));
}

/// In a virtual machine (the captured QEMU guest's tree with the DMI strings and the CPU flags
/// QEMU gives it) check, plan and bootargs advise the guest preset, and bootargs proposes no
/// P-state argument to a machine without cpufreq, saying so once; named as the guest preset,
/// nothing is advised.
#[test]
fn a_guest_is_told_it_is_one_in_check_plan_and_bootargs() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    copy_dir(&fixture("debian-6.12-rt-isold"), r);
    for (f, v) in [
        ("sys/class/dmi/id/sys_vendor", "QEMU\n"),
        (
            "sys/class/dmi/id/product_name",
            "Standard PC (i440FX + PIIX, 1996)\n",
        ),
        (
            "proc/cpuinfo",
            "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 hypervisor\n",
        ),
    ] {
        std::fs::create_dir_all(r.join(f).parent().unwrap()).unwrap();
        std::fs::write(r.join(f), v).unwrap();
    }
    let config = r.join("isold.toml");
    std::fs::write(&config, "isolated_cpus = \"2-3\"\n").unwrap();
    let root = r.to_str().unwrap();
    let conf = config.to_str().unwrap();
    let advice = "this machine is a virtual machine (qemu, by DMI sys_vendor \"QEMU\"): for a guest with pinned vCPUs the preset is realtime-virtual-guest (preset = \"realtime-virtual-guest\"); realtime-virtual-host (the default) is for the host that runs latency-critical VMs";
    for cmd in ["check", "plan"] {
        let (_, out, err) = isold(&["--root", root, "--config", conf, cmd]);
        assert!(
            out.contains(&format!("note: {advice}\n")),
            "{cmd}: {out}{err}"
        );
    }
    let (_, out, _) = isold(&["--root", root, "--config", conf, "bootargs"]);
    assert!(
        out.contains("  note: this machine is a virtual machine"),
        "{out}"
    );
    assert_eq!(out.matches("amd_pstate").count(), 1, "said once: {out}");
    assert!(
        out.contains(
            "  amd_pstate=disable                   not proposed\n      no cpufreq on this machine"
        ),
        "{out}"
    );
    let (_, out, _) = isold(&["--root", root, "--config", conf, "bootargs", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["virtualization"]["hypervisor"], "qemu");
    assert_eq!(v["advice"], advice);
    assert_eq!(v["not_needed"][0]["arg"], "amd_pstate=disable");
    assert!(
        !v["missing"].to_string().contains("pstate"),
        "{}",
        v["missing"]
    );
    // The guest preset, named: nothing to advise.
    std::fs::write(
        &config,
        "isolated_cpus = \"2-3\"\npreset = \"realtime-virtual-guest\"\n",
    )
    .unwrap();
    for cmd in ["check", "plan", "bootargs"] {
        let (_, out, _) = isold(&["--root", root, "--config", conf, cmd]);
        assert!(!out.contains("virtual machine"), "{cmd}: {out}");
    }
    let (_, out, _) = isold(&["--root", root, "--config", conf, "check", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["advice"], serde_json::Value::Null);
    assert_eq!(v["virtualization"]["hypervisor"], "qemu");
}
