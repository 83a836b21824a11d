//! `net_queues`: every network device that is not virtual keeps at most as many channels as
//! there are housekeeping CPUs (tuned's `[net] channels`, without raising a count): fewer
//! queues, and fewer queue interrupts to keep off the isolated CPUs. Planned before the IRQs,
//! so that the affinity of the interrupts a driver respreads when its channels change
//! (virtio-net spreads them over every CPU) is set after it.

use super::{Item, Machine, Planning, Setting, BASE};
use crate::error::Result;
use crate::net;
use crate::policy::target::{known, Op, Target};
use crate::policy::Status;

/// The `net_queues` item.
pub const ITEM: Item = Item {
    name: "net_queues",
    doc: "network devices' channels: at most one per housekeeping CPU",
    man: MAN,
    plan,
    audit,
    per_device: true,
    ..BASE
};

const MAN: &str = r#"Every network device that is not virtual (its device path is not below
.IR /sys/devices/virtual :
PCI and virtio NICs are in; veth, bridges, bonds, VLANs and lo are not, as tuned has it)
keeps at most as many channels as there are housekeeping CPUs, or
.B [net] channels
(realtime\-virtual\-host): combined channels where the device has them, rx and tx where it
has separate ones.
A count is never raised and never goes below 1.
A device that refuses (no channels support, a driver limit, an RSS table or filters that
use more queues) is reported by name with the kernel's error, and the others are done.
The driver then spreads its queues' interrupts anew (virtio\-net over every CPU): isold sets
their affinity after the change, as
.B irq_affinity
says.
The counts and every queue's RPS and XPS masks are recorded before the change;
.B isold restore
sets the counts back first, then every mask.
Devices that appear while
.B isold run
runs (a hot\-plugged NIC) get it within a second.
Only the host's network namespace is seen."#;

/// The most channels a device keeps under `policy`.
fn most(p: &Planning<'_>) -> u32 {
    p.policy
        .config
        .net
        .channels
        .unwrap_or(p.policy.housekeeping.len() as u32)
}

fn plan(p: &mut Planning<'_>) -> Result<()> {
    if !p.policy.on("net_queues") {
        return Ok(());
    }
    let n = most(p);
    for d in p.net_devices()? {
        if d.is_virtual || p.policy.config.net.ignores(&d.name) {
            continue;
        }
        let id = format!("net_queues:{}", d.name);
        let label = format!("{} channels", d.name);
        // No more queues of either kind than the count: no more channels either (rx queues
        // are rx + combined channels, tx queues tx + combined). Known without the ioctl,
        // which takes the kernel's rtnl lock: a steady daemon never asks for it.
        if d.rx.len() as u32 <= n && d.tx.len() as u32 <= n {
            p.out
                .push(known("net_queues", id, label, Status::AlreadyRight));
            continue;
        }
        let t = match net::channels(p.root, &d.name) {
            // Gone since the listing.
            Err(e) if e.errno() == Some(libc::ENODEV) => continue,
            Err(e) => known(
                "net_queues",
                id,
                label,
                Status::Failed {
                    error: e.to_string(),
                },
            ),
            Ok(None) => known(
                "net_queues",
                id,
                label,
                Status::NotChangeable {
                    reason: "its driver has no channels (EOPNOTSUPP)".into(),
                },
            ),
            Ok(Some(ch)) => Target {
                item: "net_queues",
                id,
                label,
                op: Op::Channels {
                    dev: d.name.clone(),
                    ifindex: d.ifindex,
                    want: ch.at_most(n),
                },
            },
        };
        p.out.push(t);
    }
    Ok(())
}

/// Devices with more channels than housekeeping CPUs.
fn audit(m: &Machine<'_>, out: &mut Vec<Setting>) -> Result<()> {
    let Ok(online) = crate::topology::online_cpus(m.root) else {
        return Ok(());
    };
    let hk = online.difference(m.cpus).len().max(1) as u32;
    let mut over = Vec::new();
    let mut devices = 0;
    for d in net::devices(m.root)?.into_iter().filter(|d| !d.is_virtual) {
        devices += 1;
        // As the plan: the ioctl only where the queues say there may be too many channels.
        if d.rx.len() as u32 <= hk && d.tx.len() as u32 <= hk {
            continue;
        }
        if let Ok(Some(ch)) = net::channels(m.root, &d.name) {
            if ch.at_most(hk) != ch.count {
                over.push(format!("{} {}", d.name, net::counts_shown(&ch.count)));
            }
        }
    }
    if devices == 0 {
        return Ok(());
    }
    let value = if over.is_empty() {
        format!("{devices} device(s), none with more channels than the {hk} housekeeping CPU(s)")
    } else {
        format!("{} ({hk} housekeeping CPU(s))", over.join(", "))
    };
    out.extend(Setting::judged(
        "network channels",
        Some(value),
        |_| over.is_empty(),
        "a NIC with more queues than housekeeping CPUs has queue interrupts, and work, to spread onto the isolated CPUs",
        "isold item net_queues",
    ));
    Ok(())
}
