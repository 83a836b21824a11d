//! The kernel's event sources a daemon needs to react to change instead of polling:
//!
//! - [`ProcEvents`]: the process events connector (netlink `NETLINK_CONNECTOR`, `CN_IDX_PROC`;
//!   include/uapi/linux/cn_proc.h): fork, exec, comm and exit of every task. It needs
//!   `CAP_NET_ADMIN` and the initial network and PID namespaces; [`ProcEvents::open`] says
//!   why when it cannot have it.
//! - [`Uevents`]: kobject uevents (netlink `NETLINK_KOBJECT_UEVENT`, group 1): devices coming
//!   and going, the moment new IRQs appear.
//!
//! Both sockets are non-blocking and close-on-exec; poll their [`AsFd`] and call `read` until
//! it returns nothing. Parsing is separate from the sockets ([`parse_proc_events`],
//! [`parse_uevent`]) and tested on bytes laid out as the kernel writes them.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::error::{Error, Result};

const NETLINK_CONNECTOR: libc::c_int = 11;
const CN_IDX_PROC: u32 = 1;
const CN_VAL_PROC: u32 = 1;
const PROC_CN_MCAST_LISTEN: u32 = 1;
const NLMSG_HDRLEN: usize = 16;
const CN_MSG_LEN: usize = 20;
const NLMSG_DONE: u16 = 3;
const NLMSG_ERROR: u16 = 2;

const PROC_EVENT_FORK: u32 = 0x0000_0001;
const PROC_EVENT_EXEC: u32 = 0x0000_0002;
const PROC_EVENT_COMM: u32 = 0x0000_0200;
const PROC_EVENT_EXIT: u32 = 0x8000_0000;

/// One process event; pids are the kernel's (a thread's id is its `pid`, its process's
/// `tgid`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcEvent {
    /// A new task: a process when `child_pid == child_tgid`, else a thread.
    Fork {
        parent_tgid: i32,
        child_pid: i32,
        child_tgid: i32,
    },
    /// A process replaced its image (the task has one thread now).
    Exec { pid: i32, tgid: i32 },
    /// A task changed its name (prctl PR_SET_NAME, pthread_setname_np, a kthread named).
    Comm { pid: i32, tgid: i32, comm: String },
    /// A task exited.
    Exit { pid: i32, tgid: i32 },
}

/// A process event and when the kernel sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamped {
    /// The event's `timestamp_ns`: CLOCK_MONOTONIC when the kernel made it (for an exec: at
    /// the end of execve(2), the new image loaded).
    pub at_ns: u64,
    pub event: ProcEvent,
}

/// What one read of the connector gave.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ProcBatch {
    pub events: Vec<Stamped>,
    /// The socket overflowed (ENOBUFS): events were lost and the caller must rescan.
    pub lost: bool,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// One `struct proc_event` (what, cpu, timestamp_ns, then the union at offset 16).
fn parse_proc_event(ev: &[u8]) -> Option<Stamped> {
    const D: usize = 16;
    let what = u32_at(ev, 0)?;
    let at_ns = u64::from_ne_bytes(ev.get(8..16)?.try_into().ok()?);
    let event = match what {
        PROC_EVENT_FORK => ProcEvent::Fork {
            parent_tgid: i32_at(ev, D + 4)?,
            child_pid: i32_at(ev, D + 8)?,
            child_tgid: i32_at(ev, D + 12)?,
        },
        PROC_EVENT_EXEC => ProcEvent::Exec {
            pid: i32_at(ev, D)?,
            tgid: i32_at(ev, D + 4)?,
        },
        PROC_EVENT_COMM => {
            let raw = ev.get(D + 8..D + 24)?;
            let end = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
            ProcEvent::Comm {
                pid: i32_at(ev, D)?,
                tgid: i32_at(ev, D + 4)?,
                comm: String::from_utf8_lossy(&raw[..end]).into_owned(),
            }
        }
        PROC_EVENT_EXIT => ProcEvent::Exit {
            pid: i32_at(ev, D)?,
            tgid: i32_at(ev, D + 4)?,
        },
        _ => return None,
    };
    Some(Stamped { at_ns, event })
}

/// The events in one datagram of the connector: netlink messages, each a `cn_msg` whose data
/// is a `proc_event`. Messages of other connector users, the listen acknowledgement and
/// kinds of events not listed in [`ProcEvent`] are skipped; a truncated message ends the
/// parse.
pub fn parse_proc_events(buf: &[u8]) -> Vec<ProcEvent> {
    parse_stamped_events(buf)
        .into_iter()
        .map(|s| s.event)
        .collect()
}

/// [`parse_proc_events`] with each event's time.
pub fn parse_stamped_events(buf: &[u8]) -> Vec<Stamped> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + NLMSG_HDRLEN <= buf.len() {
        let Some(len) = u32_at(buf, at).map(|l| l as usize) else {
            break;
        };
        if len < NLMSG_HDRLEN || at + len > buf.len() {
            break;
        }
        let msg = &buf[at..at + len];
        let ty = u16_at(msg, 4).unwrap_or(0);
        if ty != NLMSG_ERROR {
            let cn = &msg[NLMSG_HDRLEN..];
            let is_proc = u32_at(cn, 0) == Some(CN_IDX_PROC) && u32_at(cn, 4) == Some(CN_VAL_PROC);
            let data_len = u16_at(cn, 16).map_or(0, usize::from);
            if let (true, Some(data)) = (is_proc, cn.get(CN_MSG_LEN..CN_MSG_LEN + data_len)) {
                out.extend(parse_proc_event(data));
            }
        }
        // NLMSG_ALIGN: messages start on 4-byte boundaries.
        at += (len + 3) & !3;
    }
    out
}

fn netlink_socket(protocol: libc::c_int, groups: u32, what: &str) -> Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; the result is checked before use.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            protocol,
        )
    };
    if fd < 0 {
        return Err(Error::syscall(
            format!("socket(AF_NETLINK, {what})"),
            nix::errno::Errno::last(),
        ));
    }
    // SAFETY: fd was just returned by socket(2) and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_nl is plain data; all-zero is a valid value.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    addr.nl_groups = groups;
    // SAFETY: addr is a valid sockaddr_nl and the length is its size.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            std::ptr::addr_of!(addr).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(Error::syscall(
            format!("bind(netlink {what}, groups {groups})"),
            nix::errno::Errno::last(),
        ));
    }
    // A burst (a fork storm, a device with hundreds of queues) must not overflow the socket:
    // 8 MiB when privileged (SO_RCVBUFFORCE), else whatever rmem_max allows.
    let size: libc::c_int = 8 << 20;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: size is a valid c_int and its length is given.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                std::ptr::addr_of!(size).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            break;
        }
    }
    Ok(fd)
}

/// Read one datagram; `Ok(None)` when none is waiting.
fn recv(fd: &OwnedFd, buf: &mut [u8], what: &str) -> std::result::Result<Option<usize>, Error> {
    // SAFETY: buf is valid for buf.len() bytes of writes.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n >= 0 {
        return Ok(Some(n as usize));
    }
    match nix::errno::Errno::last() {
        nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR => Ok(None),
        e => Err(Error::syscall(format!("recv(netlink {what})"), e)),
    }
}

/// The inode numbers of the initial PID and user namespaces (include/linux/proc_ns.h).
const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;
const PROC_USER_INIT_INO: u64 = 0xEFFF_FFFD;

/// Whether a `/proc/self/ns/*` link (`pid:[4026531836]`) names the initial namespace.
fn in_initial_namespace(link: &str, init: u64) -> bool {
    link.rsplit_once('[')
        .and_then(|(_, n)| n.strip_suffix(']'))
        .and_then(|n| n.parse::<u64>().ok())
        == Some(init)
}

/// A subscription to the process events connector.
#[derive(Debug)]
pub struct ProcEvents {
    fd: OwnedFd,
    buf: Vec<u8>,
}

impl ProcEvents {
    /// Subscribe. Fails with EPERM without CAP_NET_ADMIN, and with ECONNREFUSED or EPERM
    /// outside the initial namespaces (the connector only reports there).
    pub fn open() -> Result<ProcEvents> {
        // The kernel ignores a subscription from outside the initial PID and user
        // namespaces without an error (cn_proc_mcast_ctl): say so instead of listening to
        // nothing.
        for (ns, init) in [("pid", PROC_PID_INIT_INO), ("user", PROC_USER_INIT_INO)] {
            let link = std::fs::read_link(format!("/proc/self/ns/{ns}")).map_err(|source| {
                Error::Read {
                    path: format!("/proc/self/ns/{ns}").into(),
                    source,
                }
            })?;
            if !in_initial_namespace(&link.to_string_lossy(), init) {
                return Err(Error::syscall(
                    format!(
                        "process events connector: not in the initial {ns} namespace ({})",
                        link.display()
                    ),
                    nix::errno::Errno::EPERM,
                ));
            }
        }
        let fd = netlink_socket(NETLINK_CONNECTOR, CN_IDX_PROC, "connector")?;
        let mut msg = Vec::with_capacity(NLMSG_HDRLEN + CN_MSG_LEN + 4);
        let total = (NLMSG_HDRLEN + CN_MSG_LEN + 4) as u32;
        msg.extend_from_slice(&total.to_ne_bytes());
        msg.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        msg.extend_from_slice(&0u16.to_ne_bytes()); // flags
        msg.extend_from_slice(&0u32.to_ne_bytes()); // seq
        msg.extend_from_slice(&std::process::id().to_ne_bytes());
        msg.extend_from_slice(&CN_IDX_PROC.to_ne_bytes());
        msg.extend_from_slice(&CN_VAL_PROC.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes()); // seq
        msg.extend_from_slice(&0u32.to_ne_bytes()); // ack
        msg.extend_from_slice(&4u16.to_ne_bytes()); // len
        msg.extend_from_slice(&0u16.to_ne_bytes()); // flags
        msg.extend_from_slice(&PROC_CN_MCAST_LISTEN.to_ne_bytes());
        // SAFETY: msg is valid for msg.len() bytes of reads.
        let n = unsafe { libc::send(fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
        if n < 0 {
            return Err(Error::syscall(
                "send(netlink connector, PROC_CN_MCAST_LISTEN)",
                nix::errno::Errno::last(),
            ));
        }
        Ok(ProcEvents {
            fd,
            buf: vec![0; 64 << 10],
        })
    }

    /// Every event waiting now (possibly none).
    pub fn read(&mut self) -> Result<ProcBatch> {
        let mut batch = ProcBatch::default();
        loop {
            match recv(&self.fd, &mut self.buf, "connector") {
                Ok(Some(n)) => batch.events.extend(parse_stamped_events(&self.buf[..n])),
                Ok(None) => return Ok(batch),
                Err(e) if e.errno() == Some(libc::ENOBUFS) => batch.lost = true,
                Err(e) => return Err(e),
            }
        }
    }
}

impl AsFd for ProcEvents {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// One kobject uevent: `ACTION@DEVPATH` and its `KEY=VALUE` lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uevent {
    pub action: String,
    pub devpath: String,
    pub subsystem: Option<String>,
}

impl Uevent {
    /// The network device this event is about, for a device (`net`) or one of its queues
    /// (`queues`): the name after `/net/` in its path. `None` for any other event.
    pub fn net_device(&self) -> Option<&str> {
        if !matches!(self.subsystem.as_deref(), Some("net" | "queues")) {
            return None;
        }
        let (_, rest) = self.devpath.rsplit_once("/net/")?;
        let name = rest.split('/').next()?;
        (!name.is_empty()).then_some(name)
    }
}

/// A kernel uevent datagram ("add@/devices/...\0ACTION=add\0SUBSYSTEM=pci\0..."); `None` for
/// udev's re-broadcasts ("libudev" header) and anything else.
pub fn parse_uevent(buf: &[u8]) -> Option<Uevent> {
    let mut fields = buf.split(|b| *b == 0).map(String::from_utf8_lossy);
    let head = fields.next()?;
    let (action, devpath) = head.split_once('@')?;
    let subsystem = fields.find_map(|f| f.strip_prefix("SUBSYSTEM=").map(str::to_string));
    Some(Uevent {
        action: action.to_string(),
        devpath: devpath.to_string(),
        subsystem,
    })
}

/// A subscription to the kernel's uevents.
#[derive(Debug)]
pub struct Uevents {
    fd: OwnedFd,
    buf: Vec<u8>,
}

impl Uevents {
    pub fn open() -> Result<Uevents> {
        Ok(Uevents {
            fd: netlink_socket(libc::NETLINK_KOBJECT_UEVENT, 1, "kobject uevent")?,
            buf: vec![0; 16 << 10],
        })
    }

    /// Every uevent waiting now; `lost` as for [`ProcBatch`].
    pub fn read(&mut self) -> Result<(Vec<Uevent>, bool)> {
        let mut out = Vec::new();
        let mut lost = false;
        loop {
            match recv(&self.fd, &mut self.buf, "kobject uevent") {
                Ok(Some(n)) => out.extend(parse_uevent(&self.buf[..n])),
                Ok(None) => return Ok((out, lost)),
                Err(e) if e.errno() == Some(libc::ENOBUFS) => lost = true,
                Err(e) => return Err(e),
            }
        }
    }
}

impl AsFd for Uevents {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod net_tests {
    use super::*;

    #[test]
    fn a_network_device_and_its_queues_name_the_device() {
        let ev = |text: &str| parse_uevent(text.replace(' ', "\0").as_bytes()).unwrap();
        let e = ev("add@/devices/virtual/net/vC/queues/rx-0 ACTION=add SUBSYSTEM=queues");
        assert_eq!(e.net_device(), Some("vC"));
        let e =
            ev("add@/devices/pci0000:00/0000:00:03.0/virtio0/net/eth0 ACTION=add SUBSYSTEM=net");
        assert_eq!(e.net_device(), Some("eth0"));
        let e = ev("add@/devices/pci0000:00/0000:00:03.0/virtio0 ACTION=add SUBSYSTEM=virtio");
        assert_eq!(e.net_device(), None);
        let e = ev("add@/devices/virtual/net/x ACTION=add SUBSYSTEM=pci");
        assert_eq!(e.net_device(), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A netlink message carrying one proc_event as the kernel lays it out.
    fn message(what: u32, data: &[u8]) -> Vec<u8> {
        let mut ev = Vec::new();
        ev.extend_from_slice(&what.to_ne_bytes());
        ev.extend_from_slice(&1u32.to_ne_bytes()); // cpu
        ev.extend_from_slice(&123_456u64.to_ne_bytes()); // timestamp_ns
        ev.extend_from_slice(data);
        // The union is 24 bytes at least (comm, exit): the kernel sends the whole struct.
        while ev.len() < 16 + 24 {
            ev.push(0);
        }
        let mut cn = Vec::new();
        cn.extend_from_slice(&CN_IDX_PROC.to_ne_bytes());
        cn.extend_from_slice(&CN_VAL_PROC.to_ne_bytes());
        cn.extend_from_slice(&7u32.to_ne_bytes());
        cn.extend_from_slice(&0u32.to_ne_bytes());
        cn.extend_from_slice(&(ev.len() as u16).to_ne_bytes());
        cn.extend_from_slice(&0u16.to_ne_bytes());
        cn.extend_from_slice(&ev);
        let mut m = Vec::new();
        let len = (NLMSG_HDRLEN + cn.len()) as u32;
        m.extend_from_slice(&len.to_ne_bytes());
        m.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&cn);
        while m.len() % 4 != 0 {
            m.push(0);
        }
        m
    }

    fn ints(v: &[i32]) -> Vec<u8> {
        v.iter().flat_map(|i| i.to_ne_bytes()).collect()
    }

    #[test]
    fn fork_exec_comm_and_exit_are_read_from_one_datagram() {
        let mut buf = message(PROC_EVENT_FORK, &ints(&[100, 100, 200, 200]));
        buf.extend(message(PROC_EVENT_FORK, &ints(&[100, 100, 201, 100])));
        buf.extend(message(PROC_EVENT_EXEC, &ints(&[200, 200])));
        let mut comm = ints(&[201, 100]);
        comm.extend_from_slice(b"worker/3\0\0\0\0\0\0\0\0");
        buf.extend(message(PROC_EVENT_COMM, &comm));
        buf.extend(message(PROC_EVENT_EXIT, &ints(&[201, 100, 0, 17, 1, 1])));
        assert_eq!(
            parse_proc_events(&buf),
            vec![
                ProcEvent::Fork {
                    parent_tgid: 100,
                    child_pid: 200,
                    child_tgid: 200
                },
                ProcEvent::Fork {
                    parent_tgid: 100,
                    child_pid: 201,
                    child_tgid: 100
                },
                ProcEvent::Exec {
                    pid: 200,
                    tgid: 200
                },
                ProcEvent::Comm {
                    pid: 201,
                    tgid: 100,
                    comm: "worker/3".into()
                },
                ProcEvent::Exit {
                    pid: 201,
                    tgid: 100
                },
            ]
        );
        // Each event keeps the kernel's timestamp_ns.
        let stamped = parse_stamped_events(&buf);
        assert_eq!(stamped.len(), 5);
        assert!(stamped.iter().all(|e| e.at_ns == 123_456));
        assert_eq!(
            stamped[2].event,
            ProcEvent::Exec {
                pid: 200,
                tgid: 200
            }
        );
    }

    #[test]
    fn other_events_other_connectors_and_truncated_messages_are_skipped() {
        // PROC_EVENT_UID (4) and PROC_EVENT_NONE (0, the listen acknowledgement).
        let mut buf = message(4, &ints(&[5, 5, 0, 0]));
        buf.extend(message(0, &[]));
        let mut other = message(PROC_EVENT_EXEC, &ints(&[9, 9]));
        other[NLMSG_HDRLEN..NLMSG_HDRLEN + 4].copy_from_slice(&2u32.to_ne_bytes());
        buf.extend(other);
        let mut err = message(PROC_EVENT_EXEC, &ints(&[8, 8]));
        err[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        buf.extend(err);
        buf.extend(message(PROC_EVENT_EXEC, &ints(&[10, 10])));
        let cut = message(PROC_EVENT_EXEC, &ints(&[11, 11]));
        buf.extend_from_slice(&cut[..cut.len() - 8]);
        assert_eq!(
            parse_proc_events(&buf),
            vec![ProcEvent::Exec { pid: 10, tgid: 10 }]
        );
        assert_eq!(parse_proc_events(&[0; 8]), vec![]);
        // A length below the header's own would loop forever if trusted.
        let mut zero = message(PROC_EVENT_EXEC, &ints(&[12, 12]));
        zero[0..4].copy_from_slice(&0u32.to_ne_bytes());
        assert_eq!(parse_proc_events(&zero), vec![]);
    }

    #[test]
    fn the_initial_namespaces_are_known_by_their_fixed_inodes() {
        assert!(in_initial_namespace("pid:[4026531836]", PROC_PID_INIT_INO));
        assert!(in_initial_namespace(
            "user:[4026531837]",
            PROC_USER_INIT_INO
        ));
        assert!(!in_initial_namespace("pid:[4026532210]", PROC_PID_INIT_INO));
        assert!(!in_initial_namespace("pid:", PROC_PID_INIT_INO));
    }

    #[test]
    fn uevents_give_action_devpath_and_subsystem() {
        let raw = b"add@/devices/pci0000:00/0000:00:04.0/virtio2\0ACTION=add\0DEVPATH=/devices/pci0000:00/0000:00:04.0/virtio2\0SUBSYSTEM=virtio\0SEQNUM=1234\0";
        assert_eq!(
            parse_uevent(raw),
            Some(Uevent {
                action: "add".into(),
                devpath: "/devices/pci0000:00/0000:00:04.0/virtio2".into(),
                subsystem: Some("virtio".into()),
            })
        );
        assert_eq!(parse_uevent(b"libudev\0\xfe\xed\xca\xfe"), None);
        assert_eq!(
            parse_uevent(b"remove@/devices/x\0").map(|u| u.subsystem),
            Some(None)
        );
    }
}
