//! A network device's channels as a value the engine sets and restore puts back
//! ([`super::Op::Channels`], [`Original::Channels`]): read, changed and read back, and the
//! original counts written back before every queue mask recorded with them. Below both the
//! engine and restore.

use super::common::failed;
use super::state::Original;
use super::Status;
use crate::error::Error;
use crate::net::{self, counts_shown};
use crate::sysroot::SysRoot;

/// What [`evaluate`] found.
pub(super) enum Found {
    /// Nothing to do: right, gone, no channels, unreadable.
    Done(Status),
    /// The change to make, from these counts, with the original to record first.
    Change { from: String, original: Original },
}

/// What the device's channels are now against `want`: done (right, gone, no channels), or
/// the change to make with the original to record first (the counts, every queue's mask and
/// the affinity of the device's IRQs).
pub(super) fn evaluate(root: &SysRoot, dev: &str, ifindex: u32, want: &[u32; 4]) -> Found {
    match net::channels(root, dev) {
        Err(e) if e.errno() == Some(libc::ENODEV) => Found::Done(Status::Gone),
        Err(e) => Found::Done(failed(e)),
        Ok(None) => Found::Done(Status::NotChangeable {
            reason: "its driver has no channels (EOPNOTSUPP)".into(),
        }),
        Ok(Some(ch)) if &ch.count == want => Found::Done(Status::AlreadyRight),
        Ok(Some(ch)) => Found::Change {
            from: counts_shown(&ch.count),
            original: Original::Channels {
                dev: dev.to_string(),
                ifindex,
                count: ch.count,
                masks: queue_masks(root, dev),
                irqs: net::irqs(root, dev)
                    .into_iter()
                    .filter_map(|n| {
                        let list = root
                            .read_to_string(crate::irq::irq_file(n, "smp_affinity_list"))
                            .ok()?;
                        Some((n, list))
                    })
                    .collect(),
            },
        },
    }
}

/// Every queue mask of `dev` as read now (a queue without XPS, one tx queue only, has none).
fn queue_masks(root: &SysRoot, dev: &str) -> Vec<(String, String, String)> {
    let Ok(Some(d)) = net::device(root, dev) else {
        return Vec::new();
    };
    let queues =
        d.rx.iter()
            .map(|n| (format!("rx-{n}"), "rps_cpus"))
            .chain(d.tx.iter().flat_map(|n| {
                [
                    (format!("tx-{n}"), "xps_cpus"),
                    (format!("tx-{n}"), "xps_rxqs"),
                ]
            }));
    queues
        .filter_map(|(q, attr)| {
            let content = root.read_to_string(net::queue_file(dev, &q, attr)).ok()?;
            Some((q, attr.to_string(), content))
        })
        .collect()
}

/// Set the counts `want` (they were `from`) and read them back. The flag says whether the
/// write took effect. A refusal (EINVAL: a driver limit, an RSS table or filters that use
/// more queues; EOPNOTSUPP) is the kernel's: not changeable, with its error.
pub(super) fn change(root: &SysRoot, dev: &str, want: &[u32; 4], from: String) -> (Status, bool) {
    if let Err(e) = net::set_channels(root, dev, *want) {
        return match e.errno() {
            Some(libc::ENODEV) => (Status::Gone, false),
            Some(libc::EINVAL | libc::EOPNOTSUPP) => (
                Status::NotChangeable {
                    reason: format!("the kernel refuses: {e}"),
                },
                false,
            ),
            _ => (failed(e), false),
        };
    }
    let status = match net::channels(root, dev) {
        Ok(Some(ch)) if &ch.count == want => Status::Changed {
            from,
            to: counts_shown(want),
        },
        Ok(Some(ch)) => failed(format!(
            "{dev}: set channels {}, they read back {}",
            counts_shown(want),
            counts_shown(&ch.count)
        )),
        Ok(None) => failed(format!("{dev}: its channels can no longer be read")),
        Err(e) => failed(e),
    };
    (status, true)
}

/// Put back a device's channels, then every queue mask recorded with them (the queues a
/// shrink destroyed came back with the default mask; virtio-net rewrote every XPS). A device
/// renamed since is found by its ifindex; one that is gone needs nothing. Then the affinity
/// of each of its IRQs, which the driver spread anew.
pub(super) fn restore(
    root: &SysRoot,
    dev: &str,
    ifindex: u32,
    count: &[u32; 4],
    masks: &[(String, String, String)],
    irqs: &[(u32, String)],
) -> Status {
    let same = net::device(root, dev)
        .ok()
        .flatten()
        .is_some_and(|d| d.ifindex == ifindex);
    let name = if same {
        dev.to_string()
    } else {
        match net::name_of(root, ifindex) {
            Some(n) => n,
            None => return Status::Gone,
        }
    };
    match net::channels(root, &name) {
        Err(e) if e.errno() == Some(libc::ENODEV) => return Status::Gone,
        Err(e) => return failed(e),
        Ok(None) => return failed(format!("{name}: its driver has no channels now")),
        Ok(Some(ch)) if &ch.count == count => {}
        Ok(Some(_)) => {
            if let Err(e) = net::set_channels(root, &name, *count) {
                return failed(e);
            }
        }
    }
    let mut wrong = Vec::new();
    for (queue, attr, content) in masks {
        let path = net::queue_file(&name, queue, attr);
        let text = content.trim_end_matches('\n');
        match root.read_to_string(&path) {
            Ok(now) if &now == content => continue,
            Ok(_) => {}
            // A queue the driver no longer makes at these counts.
            Err(e) if e.errno() == Some(libc::ENOENT) => continue,
            Err(e) => {
                wrong.push(e.to_string());
                continue;
            }
        }
        let back = root
            .write_attr(&path, text)
            .and_then(|()| root.read_to_string(&path));
        match back {
            Ok(b) if &b == content => {}
            Ok(b) => wrong.push(format!(
                "{queue}/{attr}: wrote '{text}', reads back '{}'",
                b.trim_end()
            )),
            Err(Error::Write { source, .. }) => wrong.push(format!(
                "{queue}/{attr}: '{text}': {}",
                crate::error::io_strerror(&source)
            )),
            Err(e) => wrong.push(e.to_string()),
        }
    }
    // The driver spread its interrupts anew when the counts changed: the affinity each had
    // before isold's change goes back (one the kernel refuses was never changed).
    for (n, list) in irqs {
        let path = crate::irq::irq_file(*n, "smp_affinity_list");
        match root.read_to_string(&path) {
            Ok(now) if &now == list => continue,
            Err(e) if e.errno() == Some(libc::ENOENT) => continue,
            _ => {}
        }
        let text = list.trim_end_matches('\n');
        match root
            .write_attr(&path, text)
            .and_then(|()| root.read_to_string(&path))
        {
            Ok(b) if &b == list => {}
            Ok(b) => wrong.push(format!(
                "IRQ {n}: wrote {text}, reads back {}",
                b.trim_end()
            )),
            Err(e) => wrong.push(format!("IRQ {n}: {e}")),
        }
    }
    if wrong.is_empty() {
        Status::Restored {
            to: counts_shown(count),
        }
    } else {
        failed(format!(
            "{name}: channels {} back, but {}",
            counts_shown(count),
            wrong.join("; ")
        ))
    }
}
