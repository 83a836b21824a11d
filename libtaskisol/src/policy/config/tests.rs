//! The configuration's tests.

use super::parse::parse_sched;
use super::*;
use crate::policy::items;
use std::path::Path;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("/etc/isold/isold.toml"))
}

/// Where the preset was named, for the advice a guest gets: the default has no place.
#[test]
fn the_presets_line_is_kept() {
    let c = parse("isolated_cpus = \"2-3\"\n\npreset = \"realtime\"\n").unwrap();
    assert_eq!(c.preset_at().as_deref(), Some("/etc/isold/isold.toml:3"));
    let c = parse("isolated_cpus = \"2-3\"\n").unwrap();
    assert_eq!(c.preset_at(), None);
}

#[test]
fn the_smallest_file_is_the_preset() {
    let c = parse("isolated_cpus = \"2-3\"\n").unwrap();
    assert_eq!(
        c.isolated,
        CpuSpec::List(CpuSet::parse_list("2-3").unwrap())
    );
    assert_eq!(c.preset, Preset::RealtimeVirtualHost);
    assert!(c
        .sysctl
        .contains(&("kernel.timer_migration".into(), "0".into())));
    assert!(c
        .sysctl
        .contains(&("kernel.sched_rt_runtime_us".into(), "-1".into())));
    assert_eq!(c.value("thp"), Some("never"));
    assert_eq!(c.value("ksm"), Some("2"));
    assert!(
        c.on("irq_affinity")
            && c.on("tasks")
            && c.on("workqueue")
            && c.on("machinecheck")
            && c.on("irqbalance")
    );
    assert_eq!(
        c.kthread_priority[0],
        ("ksoftirqd/*".into(), SchedPolicy::Fifo(2))
    );
    assert_eq!(c.kvm.len(), 3);
    assert_eq!(c.value("cgroup_partition"), None);
    assert!(!c.on("systemd_cpuaffinity"));
    assert_eq!(c.isolated_line, Some(1));
    assert_eq!(c.on_stop, OnStop::Keep, "stopping is not undoing");
}

#[test]
fn irqs_allow_takes_numbers_and_names() {
    let c =
        parse("isolated_cpus = \"2-3\"\n[irqs]\nallow = [24, \"25\", \"eth1-rx-*\"]\n").unwrap();
    assert_eq!(
        c.irq_allow,
        [
            IrqAllow::Number(24),
            IrqAllow::Number(25),
            IrqAllow::Name("eth1-rx-*".into())
        ]
    );
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        allowed_irq(&c.irq_allow, 30, &names(&["virtio0", "eth1-rx-3"])),
        Some(&IrqAllow::Name("eth1-rx-*".into()))
    );
    assert_eq!(
        allowed_irq(&c.irq_allow, 25, &[]),
        Some(&IrqAllow::Number(25))
    );
    assert_eq!(allowed_irq(&c.irq_allow, 26, &names(&["eth1-tx-0"])), None);
    assert_eq!(IrqAllow::Number(24).to_string(), "24");
    assert_eq!(IrqAllow::Name("a*".into()).to_string(), "\"a*\"");
    for (text, want) in [
        ("allow = [\"\"]", "irqs.allow: an empty name matches no IRQ"),
        ("allow = [-1]", "irqs.allow: -1 is not an IRQ number"),
        (
            "allow = [true]",
            "irqs.allow takes IRQ numbers and name patterns, not boolean",
        ),
        (
            "allow = \"eth*\"",
            "irqs.allow must be an array of IRQ numbers and name patterns",
        ),
        ("alow = [1]", "unknown key 'alow' (did you mean 'allow'?)"),
    ] {
        let e = parse(&format!("isolated_cpus = \"2-3\"\n[irqs]\n{text}\n")).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("/etc/isold/isold.toml:3: {want}"),
            "{text}"
        );
    }
}

/// Two settings of one file would fight at every check of the daemon: a configuration
/// error naming both; turning either off resolves it. An empty value is no value.
#[test]
fn one_file_one_setting_and_no_empty_values() {
    let e =
        parse("isolated_cpus = \"2-3\"\n[sysctl]\n\"kernel.printk\" = \"7 4 1 7\"\n").unwrap_err();
    assert_eq!(
            e.to_string(),
            "/etc/isold/isold.toml:3: [sysctl] kernel.printk (line 3) and the printk item (preset realtime-virtual-host) both write /proc/sys/kernel/printk: isold would undo one with the other at every check; keep one (false turns either off)"
        );
    let e = parse(
        "isolated_cpus = \"2-3\"\n[items]\nprintk = 3\n[sysctl]\n\"kernel.printk\" = \"7 4 1 7\"\n",
    )
    .unwrap_err();
    assert!(
            e.to_string().starts_with("/etc/isold/isold.toml:3: [sysctl] kernel.printk (line 5) and the printk item (line 3) both write"),
            "{e}"
        );
    assert!(parse(
            "isolated_cpus = \"2-3\"\n[items]\nprintk = false\n[sysctl]\n\"kernel.printk\" = \"7 4 1 7\"\n"
        )
        .is_ok());
    let e = parse(
        "isolated_cpus = \"2-3\"\n[sysctl]\n\"vm.stat_interval\" = 5\n\"vm/stat_interval\" = 6\n",
    )
    .unwrap_err();
    assert!(
            e.to_string().starts_with("/etc/isold/isold.toml:4: [sysctl] vm.stat_interval (line 3) and [sysctl] vm/stat_interval (line 4) both write /proc/sys/vm/stat_interval"),
            "{e}"
        );
    let e = parse("isolated_cpus = \"2-3\"\n[sysctl]\n\"vm.swappiness\" = \" \"\n").unwrap_err();
    assert_eq!(
            e.to_string(),
            "/etc/isold/isold.toml:3: sysctl vm.swappiness: an empty value writes nothing (give a value, or false to leave it alone)"
        );
    let c = parse("isolated_cpus = \"2-3\"\n\n[sysctl]\n\"vm.swappiness\" = 1\n").unwrap();
    assert_eq!(c.sysctl_lines.get("vm.swappiness"), Some(&4));
    assert!(
        !c.sysctl_lines.contains_key("vm.dirty_ratio"),
        "a preset's has no line"
    );
}

#[test]
fn containers_name_the_cpus_claims_may_take() {
    assert_eq!(parse("isolated_cpus = \"2\"\n").unwrap().containers, None);
    let c = parse("isolated_cpus = \"2\"\n\n[containers]\ncpus = \"3-5,7\"\n")
        .unwrap()
        .containers
        .unwrap();
    assert_eq!((c.cpus.to_string(), c.cpus_line), ("3-5,7".into(), Some(4)));
    let empty = parse("isolated_cpus = \"2\"\n[containers]\n").unwrap();
    let empty = empty.containers.unwrap();
    assert_eq!(empty.cpus, CpuSet::new());
    assert!(!empty.nri);
    assert_eq!(empty.nri_socket, Path::new("/var/run/nri/nri.sock"));
    let nri =
        parse("isolated_cpus = \"2\"\n[containers]\nnri = true\nnri_socket = \"/run/x.sock\"\n")
            .unwrap()
            .containers
            .unwrap();
    assert!(nri.nri);
    assert_eq!(nri.nri_socket, Path::new("/run/x.sock"));
    for (line, why) in [
        ("cpus = 3", "containers.cpus must be a string"),
        ("cpus = \"3-x\"", "containers.cpus: "),
        ("cpu = \"3\"", "unknown key 'cpu' (did you mean 'cpus'?)"),
        ("nri = \"yes\"", "containers.nri takes true or false"),
        (
            "nri_socket = \"nri.sock\"",
            "containers.nri_socket must be an absolute path",
        ),
    ] {
        let e = parse(&format!("isolated_cpus = \"2\"\n[containers]\n{line}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(why) && e.contains(":3: "), "{line}: {e}");
    }
}

#[test]
fn the_noise_ledger_is_on_by_default_and_tuned_or_turned_off_by_the_table() {
    let c = parse("isolated_cpus = \"2-3\"\n").unwrap();
    assert_eq!(c.noise, NoiseConfig::default());
    assert!(c.noise.enabled);
    let c = parse(
            "isolated_cpus = \"2-3\"\n[noise]\nenabled = false\ninterval = 0.5\nsources = 4\nignore_cpus = \"2\"\n",
        )
        .unwrap();
    assert!(!c.noise.enabled);
    assert_eq!(c.noise.interval, std::time::Duration::from_millis(500));
    assert_eq!(c.noise.sources, 4);
    assert_eq!(c.noise.ignore_cpus, "2".parse().unwrap());
    for (bad, says) in [
        ("interval = 0", "noise.interval"),
        ("sources = 0", "noise.sources"),
        ("enabled = 1", "noise.enabled"),
        ("buffer = 1", "buffer"),
    ] {
        let e = parse(&format!("isolated_cpus = \"2-3\"\n[noise]\n{bad}\n")).unwrap_err();
        assert!(e.to_string().contains(says), "{bad}: {e}");
    }
}

#[test]
fn stalls_are_guarded_by_default_and_tuned_or_turned_off_by_the_table() {
    let c = parse("isolated_cpus = \"2-3\"\n").unwrap();
    assert_eq!(c.stalls, StallsConfig::default());
    assert!(c.stalls.enabled);
    assert_eq!((c.stalls.runtime_us, c.stalls.period_us), (100, 500_000));
    let c = parse(
            "isolated_cpus = \"2-3\"\n[stalls]\nthreshold = 1.5\nperiod_us = 1000000\nlend_for = 2\nignore_cpus = \"3\"\nignore_threads = [\"ktimers/*\"]\n",
        )
        .unwrap();
    assert_eq!(c.stalls.threshold, std::time::Duration::from_millis(1500));
    assert_eq!(c.stalls.period_us, 1_000_000);
    assert_eq!(c.stalls.lend_for, std::time::Duration::from_secs(2));
    assert_eq!(c.stalls.ignore_cpus, "3".parse().unwrap());
    assert_eq!(c.stalls.ignore_threads, ["ktimers/*"]);
    assert!(
        !parse("isolated_cpus = \"2-3\"\n[stalls]\nenabled = false\n")
            .unwrap()
            .stalls
            .enabled
    );
    for (line, want) in [
        ("period_us = 399999", "lends up to 1.0 % of the CPU"),
        (
            "runtime_us = 5000\nperiod_us = 100000",
            "at most 1 %: period_us of 500000 or more",
        ),
        (
            "runtime_us = 1",
            "stalls.runtime_us: 1 is not a number of microseconds from 2",
        ),
        (
            "threshold = 0",
            "stalls.threshold: 0 is not a number of seconds",
        ),
        ("enabled = 1", "stalls.enabled takes true or false"),
        ("ignore_cpus = \"x\"", "stalls.ignore_cpus:"),
        ("thresold = 2", "threshold"),
    ] {
        let e = parse(&format!("isolated_cpus = \"2-3\"\n[stalls]\n{line}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{line}: {e}");
    }
}

#[test]
fn metrics_take_a_loopback_listener_a_prom_file_and_an_interval() {
    assert_eq!(parse("isolated_cpus = \"2-3\"\n").unwrap().metrics, None);
    let m = parse("isolated_cpus = \"2-3\"\n[metrics]\nlisten = \"127.0.0.1:9645\"\n")
        .unwrap()
        .metrics
        .unwrap();
    assert_eq!(m.listen, Some("127.0.0.1:9645".parse().unwrap()));
    assert_eq!((m.textfile, m.interval), (None, METRICS_INTERVAL));
    let m = parse(
            "isolated_cpus = \"2-3\"\n[metrics]\ntextfile = \"/var/lib/node_exporter/isold.prom\"\ninterval = 2.5\nlisten = \"[::1]:9645\"\n",
        )
        .unwrap()
        .metrics
        .unwrap();
    assert_eq!(m.listen, Some("[::1]:9645".parse().unwrap()));
    assert_eq!(
        m.textfile.as_deref(),
        Some(Path::new("/var/lib/node_exporter/isold.prom"))
    );
    assert_eq!(m.interval, std::time::Duration::from_millis(2500));
    for (line, want) in [
        (
            "listen = \"0.0.0.0:9645\"",
            "metrics.listen: 0.0.0.0:9645 is not a loopback address",
        ),
        (
            "listen = \"localhost\"",
            "metrics.listen: \"localhost\" is not an address and port",
        ),
        ("listen = 9645", "metrics.listen must be a string"),
        ("listen = \"127.0.0.1:0\"", "metrics.listen: give a port"),
        (
            "textfile = \"isold.prom\"",
            "metrics.textfile: \"isold.prom\" is not an absolute file path",
        ),
        (
            "textfile = \"/tmp/isold.txt\"",
            "metrics.textfile: \"/tmp/isold.txt\" does not end in .prom",
        ),
        ("textfile = true", "metrics.textfile must be a string"),
        (
            "interval = 0",
            "metrics.interval: 0 is not a number of seconds from 1 to 3600",
        ),
        ("interval = 3601", "metrics.interval: 3601 is not"),
        (
            "interval = \"5\"",
            "metrics.interval must be a number of seconds",
        ),
        ("port = 1", "unknown key 'port'"),
    ] {
        let e = parse(&format!("isolated_cpus = \"2-3\"\n[metrics]\n{line}\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("/etc/isold/isold.toml:3: {want}")),
            "{line}: {e}"
        );
    }
    let e = parse("isolated_cpus = \"2-3\"\n[metrics]\ninterval = 5\n").unwrap_err();
    assert!(e.to_string().contains("[metrics] publishes nothing"), "{e}");
    let e = parse("isolated_cpus = \"2-3\"\nmetrics = 1\n").unwrap_err();
    assert!(e.to_string().contains("metrics must be a table"), "{e}");
}

#[test]
fn on_stop_keeps_or_restores() {
    let c = parse("isolated_cpus = \"2-3\"\non_stop = \"restore\"\n").unwrap();
    assert_eq!(c.on_stop, OnStop::Restore);
    assert_eq!(c.on_stop.name(), "restore");
    let c = parse("on_stop = \"keep\"\nisolated_cpus = \"2-3\"\n").unwrap();
    assert_eq!(c.on_stop, OnStop::Keep);
    assert_eq!(c.on_stop.name(), "keep");
    let e = parse("isolated_cpus = \"2-3\"\non_stop = \"restor\"\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "/etc/isold/isold.toml:2: unknown on_stop value 'restor' (did you mean 'restore'?)"
    );
    let e = parse("isolated_cpus = \"2-3\"\non_stop = true\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "/etc/isold/isold.toml:2: on_stop must be a string"
    );
}

#[test]
fn overrides_and_opt_outs() {
    let c = parse(
            "isolated_cpus = \"auto\"\npreset = \"cpu-partitioning\"\n\
             [items]\nthp = \"madvise\"\nksm = false\ncgroup_partition = true\nkthread_priority = true\n\
             [sysctl]\n\"vm.swappiness\" = 1\n\"kernel.nmi_watchdog\" = false\n\"kernel.printk_ratelimit\" = \"5\"\n\
             [kthread_priority]\n\"irq/*-virtio*\" = \"fifo:50\"\n\
             [tasks]\nallow_comm = [\"myapp*\"]\nallow_cgroup = [\"/machine.slice\"]\n",
        )
        .unwrap();
    assert_eq!(c.isolated, CpuSpec::Auto);
    assert_eq!(c.preset, Preset::CpuPartitioning);
    assert_eq!(c.value("thp"), Some("madvise"));
    assert_eq!(c.value("ksm"), None);
    assert_eq!(c.value("cgroup_partition"), Some(DEFAULT_PARTITION));
    assert!(c.sysctl.contains(&("vm.swappiness".into(), "1".into())));
    assert!(!c.sysctl.iter().any(|(k, _)| k == "kernel.nmi_watchdog"));
    assert!(c
        .sysctl
        .contains(&("kernel.printk_ratelimit".into(), "5".into())));
    assert!(!c
        .sysctl
        .iter()
        .any(|(k, _)| k == "kernel.sched_rt_runtime_us"));
    assert_eq!(
        c.kthread_priority,
        vec![("irq/*-virtio*".into(), SchedPolicy::Fifo(50))]
    );
    assert!(c.allow_comm.contains(&"myapp*".to_string()));
    assert!(c.allow_comm.contains(&"pmd*".to_string()));
    assert_eq!(c.allow_cgroup, vec!["/machine.slice".to_string()]);
    assert!(c.on("systemd_cpuaffinity"));
}

#[test]
fn errors_name_file_line_and_reason() {
    for (text, line, want) in [
        (
            "isolated_cpu = \"2-3\"\n",
            Some(1),
            "unknown key 'isolated_cpu' (did you mean 'isolated_cpus'?)",
        ),
        (
            "\n\nisolated_cpus = \"2-x\"\n",
            Some(3),
            "isolated_cpus: invalid CPU list",
        ),
        (
            "isolated_cpus = \"2\"\npreset = \"realtime-virtual\"\n",
            Some(2),
            "unknown preset 'realtime-virtual' (did you mean 'realtime-virtual-host'?)",
        ),
        (
            "isolated_cpus = \"2\"\n[items]\nthp = \"nevr\"\n",
            Some(3),
            "thp takes never, madvise, always or false, not \"nevr\"",
        ),
        (
            "isolated_cpus = \"2\"\n[items]\nirq_afinity = false\n",
            Some(3),
            "unknown item 'irq_afinity' (did you mean 'irq_affinity'?)",
        ),
        (
            "isolated_cpus = \"2\"\n[sysctl]\n\"vm.swappiness\" = true\n",
            Some(3),
            "takes a number, a string or false",
        ),
        (
            "isolated_cpus = \"2\"\n[kthread_priority]\n\"rcuc/*\" = \"fifo:100\"\n",
            Some(3),
            "bad priority",
        ),
        (
            "isolated_cpus = \"2\"\n[tasks]\nallow_cgroup = [\"machine.slice\"]\n",
            Some(3),
            "not a cgroup path",
        ),
        (
            "isolated_cpus = 2\n",
            Some(1),
            "isolated_cpus must be a string",
        ),
        ("preset = \"realtime\"\n", None, "isolated_cpus is missing"),
        ("isolated_cpus = \"2\"\n[items\n", Some(2), "not valid TOML"),
        (
            "isolated_cpus = \"2\"\n[kvm]\nkvmclock = 0\n",
            Some(3),
            "not module.parameter",
        ),
        (
            "isolated_cpus = \"2\"\n[items]\npm_qos = -1\n",
            Some(3),
            "pm_qos takes",
        ),
        (
            "isolated_cpus = \"2\"\n[items]\nirq_affinity = \"yes\"\n",
            Some(3),
            "irq_affinity takes true or false, not \"yes\"",
        ),
        // Far from every item: the list, not a guess.
        (
            "isolated_cpus = \"2\"\n[items]\ncgroup = true\n",
            Some(3),
            "unknown item 'cgroup' (valid: ",
        ),
    ] {
        let e = parse(text).unwrap_err();
        assert_eq!(e.line, line, "{text:?}: {e}");
        assert!(e.reason.contains(want), "{text:?}: {e}");
        assert!(e.to_string().starts_with("/etc/isold/isold.toml:"), "{e}");
    }
}

/// Every value check of the file, accepted and refused, each refusal with its reason.
#[test]
fn values_are_checked_one_by_one() {
    let ok = |body: &str| {
        parse(&format!("isolated_cpus = \"2\"\n{body}")).unwrap_or_else(|e| panic!("{body:?}: {e}"))
    };
    let refused = |body: &str, want: &str| {
        let e = parse(&format!("isolated_cpus = \"2\"\n{body}")).unwrap_err();
        assert!(e.reason.contains(want), "{body:?}: {e}");
    };
    let part = |v: &str| format!("[items]\ncgroup_partition = \"{v}\"\n");
    assert_eq!(
        ok(&part("/sys/fs/cgroup/rt/")).value("cgroup_partition"),
        Some("/sys/fs/cgroup/rt")
    );
    assert_eq!(
        ok(&part("/sys/fs/cgroup/a")).value("cgroup_partition"),
        Some("/sys/fs/cgroup/a")
    );
    assert_eq!(
        ok("[items]\ncgroup_partition = false\n").value("cgroup_partition"),
        None
    );
    for bad in [
        "/sys/fs/cgroup/",
        "/sys/fs/cgroup",
        "/sys/fs/cgroupx/a",
        "/sys/fs/cgroup/../etc",
        "/sys/fs/cgroup/./a",
        "/sys/fs/cgroup/a/..",
        "/tmp/x",
    ] {
        refused(
            &part(bad),
            "cgroup_partition takes true, false or a cgroup directory below /sys/fs/cgroup/",
        );
    }
    refused(
        "[sysctl]\n\"vm.swappiness\" = \"1\\n2\"\n",
        "a value cannot span lines",
    );
    refused("[sysctl]\n\"vm.swappiness\" = \"true\"\n", "needs a value");
    refused(
        "[kthread_priority]\n\"ksoftirqd/*\" = true\n",
        "takes \"fifo:N\"",
    );
    assert!(!ok("[kthread_priority]\n\"ksoftirqd/*\" = false\n")
        .kthread_priority
        .iter()
        .any(|(p, _)| p == "ksoftirqd/*"));
    let kvm = ok("[kvm]\n\"kvm.halt_poll_ns\" = 0\n\"kvm.nx_huge_pages\" = false\n").kvm;
    assert!(kvm.contains(&("kvm".into(), "halt_poll_ns".into(), "0".into())));
    assert!(!kvm
        .iter()
        .any(|(m, p, _)| m == "kvm" && p == "nx_huge_pages"));
    for key in ["kvm", ".x", "kvm.", "kv m.x", "kvm.a-b"] {
        refused(
            &format!("[kvm]\n\"{key}\" = 1\n"),
            "is not module.parameter",
        );
    }
    refused("[kvm]\n\"kvm.x\" = \"\"\n", "bad value");
    refused("[kvm]\n\"kvm.x\" = \"a b\"\n", "bad value");
    refused(
        "[kvm]\n\"kvm.x\" = true\n",
        "takes a number, a string or false",
    );
    refused(
        "[tasks]\nallow_comm = [\"\"]\n",
        "must be an array of non-empty strings",
    );
    refused(
        "[tasks]\nallow_comm = [1]\n",
        "must be an array of non-empty strings",
    );
    refused(
        "[tasks]\nallow_comm = \"x\"\n",
        "must be an array of strings",
    );
    refused("[tasks]\nallow_pid = [\"x\"]\n", "unknown key 'allow_pid'");
    let e = parse("isolated_cpus = \"\"\n").unwrap_err();
    assert!(e.reason.contains("isolated_cpus is empty"), "{e}");
}

/// `true` keeps a list item's preset entries, `false` empties it; cpufreq takes a
/// governor's name, nothing else.
#[test]
fn list_items_switch_and_cpufreq_takes_a_name() {
    let on = parse(
        "isolated_cpus = \"2\"\n[items]\nsysctl = true\nkthread_priority = true\nkvm = true\n",
    )
    .unwrap();
    assert!(!on.sysctl.is_empty());
    assert!(!on.kvm.is_empty());
    assert!(!on.kthread_priority.is_empty());
    let off = parse(
        "isolated_cpus = \"2\"\n[items]\nsysctl = false\nkthread_priority = false\nkvm = false\n",
    )
    .unwrap();
    assert!(off.sysctl.is_empty());
    assert!(off.kvm.is_empty());
    assert!(off.kthread_priority.is_empty());
    for good in ["performance", "my_gov2"] {
        let c = parse(&format!(
            "isolated_cpus = \"2\"\n[items]\ncpufreq = \"{good}\"\n"
        ))
        .unwrap();
        assert_eq!(c.value("cpufreq"), Some(good));
    }
    for bad in ["", "perf ormance", "../x", "per-formance"] {
        let e = parse(&format!(
            "isolated_cpus = \"2\"\n[items]\ncpufreq = \"{bad}\"\n"
        ))
        .unwrap_err();
        assert!(
            e.reason.contains("cpufreq takes a governor name or false"),
            "{bad:?}: {e}"
        );
    }
}

#[test]
fn scheduling_policies_and_their_priorities() {
    assert_eq!(parse_sched("fifo:1"), Ok(SchedPolicy::Fifo(1)));
    assert_eq!(parse_sched("rr:99"), Ok(SchedPolicy::RoundRobin(99)));
    assert_eq!(parse_sched("other"), Ok(SchedPolicy::Other));
    for bad in ["other:5", "rr", "rr:0", "fifo:100", "batch:1", "fifo:x"] {
        assert!(parse_sched(bad).is_err(), "{bad}");
    }
    assert_eq!(items::flag("false"), Ok(None));
    assert_eq!(items::flag("true"), Ok(Some("true".into())));
    assert!(items::flag("yes").is_err());
}

/// A restricted copy keeps exactly the items named, for every item of the table and
/// every preset, and nothing else of the file changes.
#[test]
fn restricted_copies_keep_exactly_the_items_named() {
    let off_all = |c: &Config| {
        let mut d = c.clone();
        for item in items::ALL.iter().map(|i| i.name) {
            d.set_item(item, "false").unwrap();
        }
        d
    };
    for p in Preset::ALL {
        let text =
            format!("isolated_cpus = \"1\"\npreset = \"{p}\"\n[tasks]\nallow_comm = [\"x*\"]\n");
        let c = parse(&text).unwrap();
        assert_eq!(c.only(&[]), off_all(&c));
        assert_eq!(c.without(&[]), c);
        for item in items::ALL.iter().map(|i| i.name) {
            let mut want = c.clone();
            want.set_item(item, "false").unwrap();
            assert_eq!(c.without(&[item]), want, "{p} without {item}");
            let only = c.only(&[item]);
            assert_eq!(only.without(&[item]), off_all(&c), "{p} only {item}");
            assert_eq!(only.allow_comm, c.allow_comm);
            assert_eq!(
                (only.file.clone(), only.isolated.clone()),
                (c.file.clone(), c.isolated.clone())
            );
        }
    }
    let c = parse("isolated_cpus = \"1\"\n").unwrap();
    let only = c.only(&["cgroup_partition", "tasks"]);
    assert!(only.on("tasks") && only.sysctl.is_empty() && only.kthread_priority.is_empty());
    assert_eq!(only.value("cgroup_partition"), c.value("cgroup_partition"));
}

#[test]
fn every_preset_parses_with_every_item_switched() {
    for p in Preset::ALL {
        for item in items::ALL.iter().map(|i| i.name) {
            for v in ["true", "false"] {
                let text =
                    format!("isolated_cpus = \"1\"\npreset = \"{p}\"\n[items]\n{item} = {v}\n");
                let c = parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
                if v == "false" {
                    assert_eq!(c, {
                        let mut d = parse(&text.replace(&format!("{item} = false"), "")).unwrap();
                        d.set_item(item, "false").unwrap();
                        d
                    });
                }
            }
        }
    }
}

/// tuned's spelling of sysctl names: dotted keys (`vm.stat_interval = 10`, which TOML reads
/// as tables), `[sysctl.vm]` and inline tables name what the quoted key names, in file
/// order, with their lines; [kvm]'s module.parameter alike. One name spelled both ways is
/// refused, naming both lines.
#[test]
fn tuned_dotted_names_are_the_names() {
    let quoted = parse(
        "isolated_cpus = \"2-3\"\n[sysctl]\n\"vm.stat_interval\" = 10\n\"kernel.nmi_watchdog\" = false\n\"net.core.busy_read\" = 50\n\"vm.dirty_ratio\" = 5\n",
    )
    .unwrap();
    let dotted = parse(
        "isolated_cpus = \"2-3\"\n[sysctl]\nvm.stat_interval = 10\nkernel.nmi_watchdog = false\nnet.core.busy_read = 50\nvm.dirty_ratio = 5\n",
    )
    .unwrap();
    assert_eq!(dotted.sysctl, quoted.sysctl);
    assert!(dotted
        .sysctl
        .contains(&("net.core.busy_read".into(), "50".into())));
    assert!(!dotted
        .sysctl
        .iter()
        .any(|(k, _)| k == "kernel.nmi_watchdog"));
    // File order, across the prefixes TOML groups them by.
    let added: Vec<&str> = dotted
        .sysctl
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| ["net.core.busy_read", "vm.dirty_ratio"].contains(k))
        .collect();
    assert_eq!(added, ["net.core.busy_read", "vm.dirty_ratio"]);
    assert_eq!(dotted.sysctl_lines.get("vm.stat_interval"), Some(&3));
    assert_eq!(dotted.sysctl_lines.get("vm.dirty_ratio"), Some(&6));
    // A name turned off sets nothing: no line of its own.
    assert!(!dotted.sysctl_lines.contains_key("kernel.nmi_watchdog"));
    let tables = parse(
        "isolated_cpus = \"2-3\"\n[sysctl]\nkernel.nmi_watchdog = false\nnet = { core = { busy_read = 50 } }\n[sysctl.vm]\nstat_interval = 10\ndirty_ratio = 5\n",
    )
    .unwrap();
    let sorted = |c: &Config| {
        let mut v = c.sysctl.clone();
        v.sort();
        v
    };
    assert_eq!(sorted(&tables), sorted(&quoted));

    let kvm =
        parse("isolated_cpus = \"2-3\"\n[kvm]\nkvm.halt_poll_ns = 0\nkvm.nx_huge_pages = false\n")
            .unwrap();
    let kvm_quoted = parse(
        "isolated_cpus = \"2-3\"\n[kvm]\n\"kvm.halt_poll_ns\" = 0\n\"kvm.nx_huge_pages\" = false\n",
    )
    .unwrap();
    assert_eq!(kvm.kvm, kvm_quoted.kvm);
    assert!(kvm
        .kvm
        .contains(&("kvm".into(), "halt_poll_ns".into(), "0".into())));

    let e = parse(
        "isolated_cpus = \"2-3\"\n[sysctl]\n\"vm.stat_interval\" = 5\nvm.stat_interval = 6\n",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "/etc/isold/isold.toml:4: [sysctl] vm.stat_interval is set twice: here and before (line 3); keep one"
    );
    // A value TOML reads as a table of tables is still no name's value.
    let e = parse("isolated_cpus = \"2-3\"\n[sysctl]\nvm = [{ a = 1 }]\n").unwrap_err();
    assert!(
        e.to_string()
            .contains("sysctl vm takes a number, a string or false"),
        "{e}"
    );
}
