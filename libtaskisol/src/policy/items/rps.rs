//! `rps`: receive packet steering of virtual devices (a pod's veth) onto the housekeeping
//! CPUs, as OpenShift's performance profiles do, and `net.core.rps_default_mask` so that a
//! device is born with it. Off by default: steering costs throughput.
//!
//! No XPS setting: XPS picks the tx queue a sending CPU uses; it puts no work on a CPU (a
//! packet an isolated CPU sends is the workload's own), and the queue's completion interrupt
//! follows the IRQ affinity `irq_affinity` keeps.

use super::{Item, Machine, Planning, Setting, BASE};
use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::net::{self, NetDev, RPS_DEFAULT_MASK};
use crate::policy::config::glob_match;
use crate::policy::target::{attr, Want};
use crate::policy::Policy;

/// The `rps` item.
pub const ITEM: Item = Item {
    name: "rps",
    doc: "rps_cpus of virtual devices' rx queues and rps_default_mask = the housekeeping CPUs",
    man: MAN,
    plan,
    restores,
    audit,
    per_device: true,
    ..BASE
};

const MAN: &str = r#"The
.I rps_cpus
of every rx queue of every virtual device (veth, bridge, bond, VLAN, lo; a device that is not
virtual only where
.B [net] rps_physical
names it) and
.B net.core.rps_default_mask
(Linux 6.3 and later: new rx queues are born with it) = the housekeeping CPUs, as OpenShift's
performance profiles do for pods: the packets a pod's veth receives are processed on the
housekeeping CPUs, not on the isolated CPU that happened to send or receive them (default
off: steering costs throughput).
The kernel keeps only CPUs that are housekeeping for it and online when a mask is written.
Devices and queues that appear while
.B isold run
runs (a pod's veth) get it within a second, from the kernel's device events, also on
kernels without rps_default_mask; the originals of a device that goes away leave the state
file within a minute of its removal (restore could only find it gone), so that pod churn
does not grow it.
Each mask is recorded before it is first written, 0 included, and
.B isold restore
writes it back byte for byte, rps_default_mask after the queues.
XPS is left alone: it picks the tx queue a sending CPU uses and puts no work on a CPU.
Only the host's network namespace is seen."#;

/// Whether the item takes device `d`'s rx queues.
fn takes(policy: &Policy, d: &NetDev) -> bool {
    let net = &policy.config.net;
    !net.ignores(&d.name)
        && (d.is_virtual || net.rps_physical.iter().any(|p| glob_match(p, &d.name)))
}

fn plan(p: &mut Planning<'_>) -> Result<()> {
    if !p.policy.on("rps") {
        return Ok(());
    }
    let hk = &p.policy.housekeeping;
    // The default first: a queue born while the rest is written is born right (not in a
    // plan of named devices only).
    if p.devices.is_none() && p.root.exists(RPS_DEFAULT_MASK) {
        p.out.push(attr(
            "rps",
            "rps:default".into(),
            "net.core.rps_default_mask".into(),
            RPS_DEFAULT_MASK.into(),
            Want::Mask(hk.clone()),
        ));
    }
    for d in p.net_devices()? {
        if !takes(p.policy, &d) {
            continue;
        }
        for n in &d.rx {
            p.out.push(attr(
                "rps",
                format!("rps:{}:rx-{n}", d.name),
                format!("{} rx-{n} rps_cpus", d.name),
                net::queue_file(&d.name, &format!("rx-{n}"), "rps_cpus"),
                Want::Mask(hk.clone()),
            ));
        }
    }
    Ok(())
}

fn restores(kind: &str, key: &str) -> Option<String> {
    if kind != "rps" {
        return None;
    }
    if key == "default" {
        return Some(RPS_DEFAULT_MASK.into());
    }
    let (dev, queue) = key.split_once(':')?;
    (net::valid_name(dev) && net::valid_queue_attr(queue, "rps_cpus") && queue.starts_with("rx-"))
        .then(|| net::queue_file(dev, queue, "rps_cpus"))
}

/// Virtual devices whose rx queues are steered nowhere (0) or onto audited CPUs.
fn audit(m: &Machine<'_>, out: &mut Vec<Setting>) -> Result<()> {
    let reaches = |text: &str| match CpuSet::parse_mask(text.trim()) {
        Ok(set) => set.is_empty() || !set.is_disjoint(m.cpus),
        Err(_) => false,
    };
    let mut open = Vec::new();
    let mut virtual_devices = 0;
    for d in net::devices(m.root)?.into_iter().filter(|d| d.is_virtual) {
        virtual_devices += 1;
        let off = d.rx.iter().any(|n| {
            m.root
                .read_to_string(net::queue_file(&d.name, &format!("rx-{n}"), "rps_cpus"))
                .is_ok_and(|t| reaches(&t))
        });
        if off {
            open.push(d.name);
        }
    }
    if virtual_devices > 0 {
        let value = match open.len() {
            0 => format!(
                "{virtual_devices} virtual device(s), every rx queue steered off these CPUs"
            ),
            n if n > 8 => format!(
                "{}, ... ({n} of {virtual_devices} virtual devices)",
                open[..8].join(", ")
            ),
            n => format!(
                "{} ({n} of {virtual_devices} virtual devices)",
                open.join(", ")
            ),
        };
        out.extend(Setting::judged(
            "RPS of virtual devices",
            Some(value),
            |_| open.is_empty(),
            "packets a veth receives are processed on the CPU they arrive on, an isolated one too (RPS off or reaching it)",
            "isold item rps",
        ));
    }
    let default = m.root.read_value_opt(RPS_DEFAULT_MASK)?;
    out.extend(Setting::judged(
        "net.core.rps_default_mask",
        default.map(|v| crate::policy::target::mask_shown(&v)),
        |v| !reaches(v.split(' ').next().unwrap_or(v)),
        "a device made from now on (a pod's veth) starts without RPS off the isolated CPUs",
        "isold item rps",
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{Machine, Setting, ALL};
    use crate::cpuset::CpuSet;
    use crate::sysroot::SysRoot;

    fn put(d: &std::path::Path, rel: &str, text: &str) {
        let p = d.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// A tree with a 4-channel NIC and a veth whose rx queue reaches CPU 3.
    fn tree(veth_mask: &str, channels: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        put(d, "sys/devices/system/cpu/online", "0-3\n");
        put(d, "proc/sys/net/core/rps_default_mask", "0\n");
        for (path, name, mask, ch) in [
            (
                "sys/devices/pci0000:00/0000:00:03.0/net",
                "eth0",
                "0",
                Some(channels),
            ),
            ("sys/devices/virtual/net", "veth0", veth_mask, None),
        ] {
            put(d, &format!("{path}/{name}/ifindex"), "2\n");
            put(
                d,
                &format!("{path}/{name}/queues/rx-0/rps_cpus"),
                &format!("{mask}\n"),
            );
            if let Some(c) = ch {
                put(
                    d,
                    &format!("{path}/{name}/ethtool_channels"),
                    &format!("{c}\n"),
                );
                // A queue pair per combined channel, as the kernel makes them.
                let n: u32 = c.rsplit(' ').next().unwrap().parse().unwrap();
                for q in 0..n {
                    put(d, &format!("{path}/{name}/queues/rx-{q}/rps_cpus"), "0\n");
                    put(d, &format!("{path}/{name}/queues/tx-{q}/xps_cpus"), "0\n");
                }
            }
            std::fs::create_dir_all(d.join("sys/class/net")).unwrap();
            let up = format!("../../{}/{name}", path.strip_prefix("sys/").unwrap());
            std::os::unix::fs::symlink(up, d.join(format!("sys/class/net/{name}"))).unwrap();
        }
        dir
    }

    fn findings(root: &SysRoot) -> Vec<Setting> {
        let cpus: CpuSet = "2-3".parse().unwrap();
        let m = Machine {
            root,
            threads: &[],
            cpus: &cpus,
        };
        let mut out = Vec::new();
        for item in ALL
            .iter()
            .filter(|i| ["net_queues", "rps"].contains(&i.name))
        {
            (item.audit)(&m, &mut out).unwrap();
        }
        out
    }

    #[test]
    fn the_audit_names_devices_that_reach_the_isolated_cpus_and_the_item_that_fixes_it() {
        let t = tree("8", "0 0 0 4 0 0 0 4");
        let got = findings(&SysRoot::new(t.path()));
        let v: Vec<(&str, &str, bool, &str)> = got
            .iter()
            .map(|s| (s.name.as_str(), s.value.as_str(), s.ok, s.fix.as_str()))
            .collect();
        assert_eq!(
            v,
            [
                (
                    "network channels",
                    "eth0 combined 4 (2 housekeeping CPU(s))",
                    false,
                    "isold item net_queues"
                ),
                (
                    "RPS of virtual devices",
                    "veth0 (1 of 1 virtual devices)",
                    false,
                    "isold item rps"
                ),
                // A mask with its CPUs beside it.
                (
                    "net.core.rps_default_mask",
                    "0 (no CPU)",
                    false,
                    "isold item rps"
                ),
            ]
        );
        // Steered off the audited CPUs and no more channels than housekeeping CPUs: quiet.
        let t = tree("3", "0 0 0 4 0 0 0 2");
        std::fs::write(t.path().join("proc/sys/net/core/rps_default_mask"), "3\n").unwrap();
        let f = findings(&SysRoot::new(t.path()));
        assert!(f.iter().all(|s| s.ok));
        assert!(f.iter().any(|s| s.value == "3 (CPUs 0-1)"), "{f:?}");
    }

    /// Machines past 32 CPUs: the mask written has the comma groups the kernel parses and
    /// no more than it needs; what the kernel prints back (zero-padded to nr_cpu_ids) is
    /// read as the same CPUs.
    #[test]
    fn masks_of_big_machines_in_the_kernels_format() {
        use crate::policy::target::Want;
        let hk: CpuSet = "0-3,32-35".parse().unwrap();
        let w = Want::Mask(hk);
        assert_eq!(w.write_text("00000000,00000000\n"), "f,0000000f");
        assert!(w.matches("0000000f,0000000f\n"));
        assert!(!w.matches("0000000f,0000000e\n"));
        let hk: CpuSet = "0-7,440-447".parse().unwrap();
        let w = Want::Mask(hk.clone());
        let printed = hk.to_mask_string_width(448);
        assert_eq!(printed.split(',').count(), 14);
        assert!(w.matches(&format!("{printed}\n")));
        assert_eq!(w.write_text("0\n"), printed.trim_start_matches('0'));
    }
}
