//! Network devices of the host's network namespace: which are virtual, their rx and tx
//! queues, their channels (the `SIOCETHTOOL` ioctl's `ETHTOOL_GCHANNELS` and
//! `ETHTOOL_SCHANNELS`: one system call of 36 bytes, no netlink library).
//!
//! On a captured tree ([`SysRoot`] other than `/`) a device's channels are the stand-in file
//! `/sys/class/net/DEV/ethtool_channels` (eight numbers: the maxima of rx, tx, other and
//! combined, then their counts; a ninth, when there, is the fewest rx or combined channels
//! the device's RSS table lets it have), and setting them removes or adds the queue
//! directories as the kernel does, so that the whole engine runs on fixtures.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::errno::Errno;

use crate::error::{Error, Result};
use crate::sysroot::SysRoot;

/// Where the devices are listed.
pub const CLASS_NET: &str = "/sys/class/net";

/// The per-namespace default RPS mask of new rx queues (Linux 6.3 and later).
pub const RPS_DEFAULT_MASK: &str = "/proc/sys/net/core/rps_default_mask";

/// The stand-in file of a captured tree's channels.
const TREE_CHANNELS: &str = "ethtool_channels";

/// One network device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetDev {
    /// Its name.
    pub name: String,
    /// Its ifindex.
    pub ifindex: u32,
    /// Whether it is virtual (its device path is below `/devices/virtual/`: veth, bridge,
    /// bond, vlan, tun, lo), as tuned tells them.
    pub is_virtual: bool,
    /// Its rx queues' numbers (`queues/rx-N`), ascending.
    pub rx: Vec<u32>,
    /// Its tx queues' numbers (`queues/tx-N`), ascending.
    pub tx: Vec<u32>,
}

/// Whether `name` can be a network device's name (the kernel's `dev_valid_name`): 1 to 15
/// bytes, no `/`, `:` or white space, not `.` or `..`. A state file's device is checked by it.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace())
}

/// The kernel file of device `dev`'s queue `queue` (`rx-0`) attribute `attr` (`rps_cpus`).
pub fn queue_file(dev: &str, queue: &str, attr: &str) -> String {
    format!("{CLASS_NET}/{dev}/queues/{queue}/{attr}")
}

/// Whether `queue/attr` names a queue mask isold records (`rx-3/rps_cpus`, `tx-0/xps_cpus`,
/// `tx-0/xps_rxqs`).
pub fn valid_queue_attr(queue: &str, attr: &str) -> bool {
    let n = |p: &str| {
        queue
            .strip_prefix(p)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    (n("rx-") && attr == "rps_cpus") || (n("tx-") && matches!(attr, "xps_cpus" | "xps_rxqs"))
}

/// Every device of the namespace, by name.
pub fn devices(root: &SysRoot) -> Result<Vec<NetDev>> {
    if !root.exists(CLASS_NET) {
        return Ok(Vec::new());
    }
    let mut names = root.read_dir_names(CLASS_NET)?;
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        // A device that went away since the listing is no device.
        if let Some(d) = device(root, &name)? {
            out.push(d);
        }
    }
    Ok(out)
}

/// Device `name`, `None` when there is none.
pub fn device(root: &SysRoot, name: &str) -> Result<Option<NetDev>> {
    let dir = format!("{CLASS_NET}/{name}");
    let ifindex = match root.read_value_opt(format!("{dir}/ifindex"))? {
        Some(v) => v.trim().parse().map_err(|_| Error::Parse {
            path: root.path(format!("{dir}/ifindex")),
            input: v.clone(),
            reason: "not an ifindex".into(),
        })?,
        None => return Ok(None),
    };
    let link = std::fs::read_link(root.path(&dir)).unwrap_or_default();
    let is_virtual = link.to_string_lossy().contains("/virtual/");
    let (mut rx, mut tx) = (Vec::new(), Vec::new());
    let queues = format!("{dir}/queues");
    if root.exists(&queues) {
        for q in root.read_dir_names(&queues)? {
            if let Some(n) = q.strip_prefix("rx-").and_then(|n| n.parse().ok()) {
                rx.push(n);
            } else if let Some(n) = q.strip_prefix("tx-").and_then(|n| n.parse().ok()) {
                tx.push(n);
            }
        }
    }
    rx.sort_unstable();
    tx.sort_unstable();
    Ok(Some(NetDev {
        name: name.to_string(),
        ifindex,
        is_virtual,
        rx,
        tx,
    }))
}

/// The IRQs of device `dev`'s bus device (its PCI function's MSI and MSI-X vectors: for
/// virtio-net, the queues' and the configuration's), ascending; none for a virtual device.
pub fn irqs(root: &SysRoot, dev: &str) -> Vec<u32> {
    let Ok(real) = std::fs::canonicalize(root.path(format!("{CLASS_NET}/{dev}"))) else {
        return Vec::new();
    };
    let top = root.path("/sys/devices");
    let mut dir = real.as_path();
    while let Some(parent) = dir.parent() {
        if !parent.starts_with(&top) {
            break;
        }
        if let Ok(entries) = std::fs::read_dir(parent.join("msi_irqs")) {
            let mut n: Vec<u32> = entries
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect();
            n.sort_unstable();
            return n;
        }
        dir = parent;
    }
    Vec::new()
}

/// The name of the device with index `ifindex`, if any.
pub fn name_of(root: &SysRoot, ifindex: u32) -> Option<String> {
    devices(root)
        .ok()?
        .into_iter()
        .find(|d| d.ifindex == ifindex)
        .map(|d| d.name)
}

/// A device's channels: for rx, tx, other and combined, the maximum and the count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Channels {
    /// The maxima: rx, tx, other, combined.
    pub max: [u32; 4],
    /// The counts: rx, tx, other, combined.
    pub count: [u32; 4],
}

/// The kinds of channel, in the order of [`Channels::count`].
pub const KINDS: [&str; 4] = ["rx", "tx", "other", "combined"];

/// Counts as `ethtool -l` names them: `combined 4`, `rx 1 tx 3` (zeros left out).
pub fn counts_shown(count: &[u32; 4]) -> String {
    let parts: Vec<String> = KINDS
        .iter()
        .zip(count)
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(" ")
    }
}

impl Channels {
    /// The counts that leave at most `n` queues of each kind that carries packets (combined
    /// where the device has combined channels, rx and tx where it has separate ones): never
    /// more than now, never fewer than 1 where there was one. `other` (link interrupts, not
    /// queues) stays.
    pub fn at_most(&self, n: u32) -> [u32; 4] {
        let n = n.max(1);
        let mut c = self.count;
        for k in [0, 1, 3] {
            c[k] = c[k].min(n);
        }
        c
    }
}

#[repr(C)]
#[derive(Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

const ETHTOOL_GCHANNELS: u32 = 0x3c;
const ETHTOOL_SCHANNELS: u32 = 0x3d;

/// The ioctl on a generic netlink socket, as ethtool falls back to: the kernel passes a
/// device ioctl on any socket to the device (netlink has none of its own), and isold.service
/// allows no IP socket (RestrictAddressFamilies=AF_UNIX AF_NETLINK).
fn ethtool(dev: &str, ch: &mut EthtoolChannels) -> std::result::Result<(), Errno> {
    // SAFETY: socket(2) with constant arguments; the descriptor is owned at once.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_GENERIC,
        )
    };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: fd is a new descriptor nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain data; all zeros is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(dev.bytes().take(15)) {
        *d = s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = (ch as *mut EthtoolChannels).cast();
    // SAFETY: SIOCETHTOOL reads the command from, and writes at most the 36 bytes of,
    // the struct ifr_data points to, which lives for the call.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL, &mut ifr) };
    if r < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// Device `dev`'s channels; `None` when its driver has none (EOPNOTSUPP: lo, veth before
/// 5.x, most virtual devices); an error names the device and the kernel's errno (ENODEV: it
/// is gone).
pub fn channels(root: &SysRoot, dev: &str) -> Result<Option<Channels>> {
    if !root.is_host() {
        return tree_channels(root, dev);
    }
    let mut ch = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..Default::default()
    };
    match ethtool(dev, &mut ch) {
        Ok(()) => Ok(Some(Channels {
            max: [ch.max_rx, ch.max_tx, ch.max_other, ch.max_combined],
            count: [ch.rx_count, ch.tx_count, ch.other_count, ch.combined_count],
        })),
        Err(Errno::EOPNOTSUPP) => Ok(None),
        Err(e) => Err(Error::syscall(
            format!("ioctl(SIOCETHTOOL, ETHTOOL_GCHANNELS) of {dev}"),
            e,
        )),
    }
}

/// Set device `dev`'s channel counts (rx, tx, other, combined), as `ethtool -L` does; the
/// kernel's error names what it refuses (EINVAL: over a maximum, under what an RSS table or
/// filters use; EOPNOTSUPP: no channels support; ENODEV: gone).
pub fn set_channels(root: &SysRoot, dev: &str, count: [u32; 4]) -> Result<()> {
    if !root.is_host() {
        return set_tree_channels(root, dev, count);
    }
    let mut ch = EthtoolChannels {
        cmd: ETHTOOL_SCHANNELS,
        rx_count: count[0],
        tx_count: count[1],
        other_count: count[2],
        combined_count: count[3],
        ..Default::default()
    };
    ethtool(dev, &mut ch).map_err(|e| {
        Error::syscall(
            format!(
                "ioctl(SIOCETHTOOL, ETHTOOL_SCHANNELS {}) of {dev}",
                counts_shown(&count)
            ),
            e,
        )
    })
}

fn tree_channels(root: &SysRoot, dev: &str) -> Result<Option<Channels>> {
    Ok(tree_file(root, dev)?.map(|(ch, _)| ch))
}

/// A tree's channels and the fewest its RSS table allows.
fn tree_file(root: &SysRoot, dev: &str) -> Result<Option<(Channels, u32)>> {
    if !root.exists(format!("{CLASS_NET}/{dev}")) {
        return Err(Error::syscall(
            format!("ioctl(SIOCETHTOOL, ETHTOOL_GCHANNELS) of {dev}"),
            Errno::ENODEV,
        ));
    }
    let path = format!("{CLASS_NET}/{dev}/{TREE_CHANNELS}");
    let Some(text) = root.read_value_opt(&path)? else {
        return Ok(None);
    };
    let n: Vec<u32> = text
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let (&[a, b, c, d, e, f, g, h], rss) = (&n[..n.len().min(8)], n.get(8)) else {
        return Err(Error::Parse {
            path: root.path(&path),
            input: text,
            reason: "not eight numbers".into(),
        });
    };
    Ok(Some((
        Channels {
            max: [a, b, c, d],
            count: [e, f, g, h],
        },
        rss.copied().unwrap_or(0),
    )))
}

/// A captured tree's channel change: checked against the maxima as the kernel checks it, the
/// queues above the new counts removed with their masks, new ones made with mask 0.
fn set_tree_channels(root: &SysRoot, dev: &str, count: [u32; 4]) -> Result<()> {
    let op = || {
        format!(
            "ioctl(SIOCETHTOOL, ETHTOOL_SCHANNELS {}) of {dev}",
            counts_shown(&count)
        )
    };
    let Some((ch, rss)) = tree_file(root, dev)? else {
        return Err(Error::syscall(op(), Errno::EOPNOTSUPP));
    };
    if count.iter().zip(ch.max).any(|(c, m)| *c > m)
        || count[0] + count[3] == 0
        || count[1] + count[3] == 0
        || count[0] + count[3] < rss
    {
        return Err(Error::syscall(op(), Errno::EINVAL));
    }
    let mut line = format!(
        "{} {} {} {} {} {} {} {}",
        ch.max[0], ch.max[1], ch.max[2], ch.max[3], count[0], count[1], count[2], count[3]
    );
    if rss > 0 {
        line.push_str(&format!(" {rss}"));
    }
    root.write_attr(format!("{CLASS_NET}/{dev}/{TREE_CHANNELS}"), &line)?;
    let queues = format!("{CLASS_NET}/{dev}/queues");
    for (prefix, n, attr) in [
        ("rx-", count[0] + count[3], "rps_cpus"),
        ("tx-", count[1] + count[3], "xps_cpus"),
    ] {
        let have = if root.exists(&queues) {
            root.read_dir_names(&queues)?
        } else {
            Vec::new()
        };
        for q in &have {
            if q.strip_prefix(prefix)
                .and_then(|i| i.parse::<u32>().ok())
                .is_some_and(|i| i >= n)
            {
                std::fs::remove_dir_all(root.path(format!("{queues}/{q}"))).map_err(|e| {
                    Error::Write {
                        path: root.path(format!("{queues}/{q}")),
                        data: String::new(),
                        source: e,
                    }
                })?;
            }
        }
        for i in 0..n {
            let file = format!("{queues}/{prefix}{i}/{attr}");
            if !root.exists(&file) {
                let dir = root.path(format!("{queues}/{prefix}{i}"));
                std::fs::create_dir_all(&dir).map_err(|e| Error::Write {
                    path: dir.clone(),
                    data: String::new(),
                    source: e,
                })?;
                std::fs::write(root.path(&file), "0\n").map_err(|e| Error::Write {
                    path: root.path(&file),
                    data: "0".into(),
                    source: e,
                })?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_queue_files_are_checked_as_the_kernel_checks_them() {
        for ok in ["eth0", "veth1a2b3c4d", "enp0s3", "a"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "a:b", "a b", "0123456789abcdef"] {
            assert!(!valid_name(bad), "{bad}");
        }
        assert!(valid_queue_attr("rx-12", "rps_cpus"));
        assert!(valid_queue_attr("tx-0", "xps_cpus") && valid_queue_attr("tx-0", "xps_rxqs"));
        for (q, a) in [
            ("rx-", "rps_cpus"),
            ("rx-1", "xps_cpus"),
            ("tx-1", "rps_cpus"),
            ("rx-1/..", "rps_cpus"),
            ("rx-x", "rps_cpus"),
        ] {
            assert!(!valid_queue_attr(q, a), "{q}/{a}");
        }
    }

    #[test]
    fn at_most_never_raises_and_keeps_one() {
        let virtio = Channels {
            max: [0, 0, 0, 4],
            count: [0, 0, 0, 4],
        };
        assert_eq!(virtio.at_most(2), [0, 0, 0, 2]);
        assert_eq!(virtio.at_most(8), [0, 0, 0, 4]);
        assert_eq!(virtio.at_most(0), [0, 0, 0, 1]);
        let veth = Channels {
            max: [4, 4, 0, 0],
            count: [1, 3, 0, 0],
        };
        assert_eq!(veth.at_most(2), [1, 2, 0, 0]);
        let nic = Channels {
            max: [0, 0, 1, 63],
            count: [0, 0, 1, 32],
        };
        assert_eq!(nic.at_most(6), [0, 0, 1, 6]);
        assert_eq!(counts_shown(&nic.at_most(6)), "other 1 combined 6");
        assert_eq!(counts_shown(&[0; 4]), "none");
    }

    #[test]
    fn a_tree_shrinks_and_regrows_queues_as_the_kernel_does() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::new(dir.path());
        let put = |rel: &str, text: &str| {
            let p = dir.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        let d = "sys/class/net/eth0";
        for q in 0..4 {
            put(&format!("{d}/queues/rx-{q}/rps_cpus"), "5\n");
            put(&format!("{d}/queues/tx-{q}/xps_cpus"), "1\n");
        }
        put(&format!("{d}/ifindex"), "2\n");
        put(&format!("{d}/ethtool_channels"), "0 0 0 4 0 0 0 4\n");
        assert_eq!(
            channels(&root, "eth0").unwrap().unwrap().count,
            [0, 0, 0, 4]
        );
        set_channels(&root, "eth0", [0, 0, 0, 2]).unwrap();
        let dev = device(&root, "eth0").unwrap().unwrap();
        assert_eq!((dev.rx, dev.tx), (vec![0, 1], vec![0, 1]));
        assert_eq!(
            set_channels(&root, "eth0", [0, 0, 0, 5])
                .unwrap_err()
                .errno(),
            Some(libc::EINVAL)
        );
        set_channels(&root, "eth0", [0, 0, 0, 4]).unwrap();
        let f = |q: &str, a: &str| root.read_to_string(queue_file("eth0", q, a)).unwrap();
        assert_eq!(
            (f("rx-0", "rps_cpus"), f("rx-3", "rps_cpus")),
            ("5\n".into(), "0\n".into())
        );
        assert_eq!(
            channels(&root, "nosuch").unwrap_err().errno(),
            Some(libc::ENODEV)
        );
        put("sys/class/net/lo/ifindex", "1\n");
        assert_eq!(channels(&root, "lo").unwrap(), None);
    }

    /// The ioctl on this machine's loopback device: its driver has no channels.
    #[test]
    fn the_host_loopback_has_no_channels() {
        let root = SysRoot::host();
        assert_eq!(channels(&root, "lo").unwrap(), None);
        assert_eq!(
            channels(&root, "nosuchdev0").unwrap_err().errno(),
            Some(libc::ENODEV)
        );
    }
}
