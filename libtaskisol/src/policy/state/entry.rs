//! One recorded original: what it was ([`Original`]), the entry that names it ([`Entry`]),
//! and the check an entry read from a file must pass before it is ever written back
//! ([`Entry::check`]).

use std::path::Path;

use serde::{Deserialize, Serialize};

/// What an original value was, and how to put it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Original {
    /// A kernel attribute file (sysctl, sysfs, `/proc/irq`): its content as read, and the
    /// text that writes it back (they differ for choice files such as THP's
    /// `always [madvise] never`).
    Attr {
        /// Kernel path.
        path: String,
        /// The content as read, byte for byte.
        content: String,
        /// What to write to restore it.
        restore: String,
    },
    /// A configuration file the policy writes: its content, or `None` when it did not exist.
    /// Restore undoes isold's own lines only (see [`crate::policy::files::undo_edit`]).
    File {
        /// Path (below the root).
        path: String,
        /// The original content.
        content: Option<String>,
        /// The outermost directory apply creates for it, removed again by restore (when
        /// empty).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        created_dir: Option<String>,
        /// What isold last wrote (recorded before the write): restore finds isold's lines by
        /// it. `None` in state files before 3533f0d: restore then finds isold's lines by the forms its
        /// item writes (`engine::written_before_0_2`), never puts the original back whole over
        /// the administrator's later lines.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        written: Option<String>,
    },
    /// A thread's CPU affinity.
    Affinity {
        /// Process id.
        pid: i32,
        /// Thread id.
        tid: i32,
        /// Start time (ticks after boot): the thread is restored only if it still matches.
        starttime: u64,
        /// Thread name, for messages.
        comm: String,
        /// The original `Cpus_allowed_list`.
        cpus: String,
        /// The CPUs isold took it off (the isolated ones it had), grown by a later narrowing
        /// and shrunk by a give-back: isold never puts a thread back on one of them, so a
        /// thread found on one at restore was pinned there by its owner since (libvirt's
        /// `<vcpupin>`, DPDK's main lcore, `taskset -p`) and keeps its pin. `None` in state
        /// files before it existed: restore puts the original back whatever the thread has.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        taken_off: Option<String>,
    },
    /// A thread's scheduling policy and priority.
    Sched {
        /// Process id.
        pid: i32,
        /// Thread id.
        tid: i32,
        /// Start time.
        starttime: u64,
        /// Thread name.
        comm: String,
        /// Policy number.
        policy: u32,
        /// Real-time priority.
        rt_priority: u32,
    },
    /// A network device's channel counts (`net_queues`), and the masks of every queue it had
    /// before isold changed them: a channel change destroys the queues above the new count
    /// with their masks, and regrows them at restore with the default mask (virtio-net also
    /// rewrites every queue's XPS), so restore sets the counts, then writes each mask back.
    Channels {
        /// The device's name.
        dev: String,
        /// Its ifindex: restore finds a renamed device by it.
        ifindex: u32,
        /// rx, tx, other and combined counts.
        count: [u32; 4],
        /// Each queue's mask: queue (`rx-3`), attribute (`rps_cpus`), content as read.
        masks: Vec<(String, String, String)>,
        /// The affinity (`smp_affinity_list`) of each of its IRQs before the change: a
        /// driver respreads them when its channels change (virtio-net), so restore writes
        /// them back after the counts.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        irqs: Vec<(u32, String)>,
    },
    /// The `cgroup_partition` item: the cgroup directory and the workloads moved into it.
    Partition(crate::policy::partition::PartitionOriginal),
    /// A thread the stall guard lent a slice (SCHED_DEADLINE, or SCHED_FIFO where the
    /// kernel refuses a deadline task): its own policy, recorded before the loan, written
    /// back when the loan ends, by `isold restore` and at the next start after a crash.
    Loan {
        /// Process id.
        pid: i32,
        /// Thread id.
        tid: i32,
        /// Start time.
        starttime: u64,
        /// Thread name.
        comm: String,
        /// Policy number.
        policy: u32,
        /// Real-time priority.
        rt_priority: u32,
        /// Nice value.
        nice: i32,
        /// Whether it had reset-on-fork.
        reset_on_fork: bool,
    },
    /// The noise ledger's tracefs instance (`isold-noise-<pidns>`), which did not exist
    /// before isold made it. It outlives a stop and a restart of the daemon, its events still
    /// enabled (enabling or disabling a tracepoint patches kernel text, which interrupts every
    /// CPU, the isolated ones with their workload): the next start adopts it as it is, and
    /// `isold restore` removes it.
    TraceInstance {
        /// The instance's directory (`/sys/kernel/tracing/instances/isold-noise-<pidns>`).
        dir: String,
    },
}

impl Original {
    /// Whether the value lives in the running kernel (void after a reboot), as opposed to a
    /// file on disk.
    pub fn is_runtime(&self) -> bool {
        !matches!(self, Original::File { .. })
    }
}

/// One recorded original.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Stable id of the target (`sysctl:vm.stat_interval`, `irq:24`, `task:812:1503`).
    pub id: String,
    /// The item it belongs to.
    pub item: String,
    /// Human-readable description.
    pub label: String,
    /// The original.
    pub original: Original,
}

impl Entry {
    /// Whether this entry is one isold could have recorded: the path it restores follows
    /// from its kind and id (never taken from the file as written), the item is the id's,
    /// the text restore writes is the content recorded, a thread's ids agree. `Err` says
    /// what is wrong; such an entry is never written back (a state file edited to say
    /// `/proc/sys/../../../etc/shadow` writes nothing there).
    ///
    /// Long because it is one arm per kind of entry, each arm the whole rule for that kind: a
    /// reviewer reads every rule in one place.
    pub fn check(&self) -> std::result::Result<(), String> {
        let (kind, key) = self.id.split_once(':').unwrap_or((self.id.as_str(), ""));
        // A thread's entry is named by its kind, tid and start time: a pid reused since is
        // never mistaken for it.
        let thread = |kind: &str, pid: i32, tid: i32, starttime: u64| {
            if self.id != format!("{kind}:{tid}:{starttime}") || pid <= 0 || tid <= 0 {
                return Err(format!(
                    "thread {pid}/{tid} started at {starttime} is not the thread of {}",
                    self.id
                ));
            }
            Ok(())
        };
        let sched = |policy: u32, rt_priority: u32| {
            crate::sched::SchedPolicy::from_stat(policy, rt_priority)
                .map(drop)
                .ok_or_else(|| format!("policy {policy} priority {rt_priority}"))
        };
        let item = |want: &str| -> std::result::Result<(), String> {
            if self.item == want {
                Ok(())
            } else {
                Err(format!(
                    "item {:?} is not the item of {} ({want})",
                    self.item, self.id
                ))
            }
        };
        match &self.original {
            Original::Attr {
                path,
                content,
                restore,
            } => {
                let (it, want) = crate::policy::items::restored_file(kind, key)
                    .ok_or_else(|| format!("{} names no kernel value isold sets", self.id))?;
                if *path != want {
                    return Err(format!("{path} is not the file of {} ({want})", self.id));
                }
                item(it)?;
                let plain = content.trim_end_matches('\n');
                if restore != plain && restore != crate::policy::target::choice_of(content) {
                    return Err(format!(
                        "the text to write back ({restore:?}) is not the content recorded ({plain:?})"
                    ));
                }
                Ok(())
            }
            Original::File {
                path, created_dir, ..
            } => {
                if kind != "file" || key != path {
                    return Err(format!("{path} is not the file of {}", self.id));
                }
                let Some(it) = crate::policy::items::owned_item(path) else {
                    return Err(format!("{path} is not a file isold writes"));
                };
                item(it)?;
                if let Some(d) = created_dir {
                    let d = Path::new(d);
                    let inside = Path::new(path).parent().is_some_and(|p| p.starts_with(d));
                    // Never the root directory (restore removes only empty directories).
                    if !inside || d.components().count() < 2 {
                        return Err(format!(
                            "{} is not a directory apply could have made for {path}",
                            d.display()
                        ));
                    }
                }
                Ok(())
            }
            Original::Affinity {
                pid,
                tid,
                starttime,
                cpus,
                taken_off,
                ..
            } => {
                thread("task", *pid, *tid, *starttime)?;
                item("tasks")?;
                for list in std::iter::once(cpus).chain(taken_off) {
                    crate::cpuset::CpuSet::parse_list(list)
                        .map_err(|e| format!("CPUs {list:?}: {e}"))?;
                }
                Ok(())
            }
            Original::Sched {
                pid,
                tid,
                starttime,
                policy,
                rt_priority,
                ..
            } => {
                thread("sched", *pid, *tid, *starttime)?;
                item("kthread_priority")?;
                sched(*policy, *rt_priority)
            }
            Original::Loan {
                pid,
                tid,
                starttime,
                policy,
                rt_priority,
                nice,
                ..
            } => {
                thread("loan", *pid, *tid, *starttime)?;
                item("stalls")?;
                if !(-20..=19).contains(nice) {
                    return Err(format!("nice {nice}"));
                }
                sched(*policy, *rt_priority)
            }
            Original::TraceInstance { dir } => {
                item("noise")?;
                let named = kind == "trace_instance"
                    && key
                        .strip_prefix(crate::noise::INSTANCE)
                        .and_then(|ns| ns.strip_prefix('-'))
                        .is_some_and(|ns| !ns.is_empty() && ns.bytes().all(|b| b.is_ascii_digit()));
                if !named
                    || !crate::tracefs::TRACEFS
                        .iter()
                        .any(|t| *dir == format!("{t}/instances/{key}"))
                {
                    return Err(format!("{dir} is not the instance of {}", self.id));
                }
                Ok(())
            }
            Original::Channels {
                dev,
                count,
                masks,
                irqs,
                ..
            } => {
                if kind != "net_queues" || key != dev || !crate::net::valid_name(dev) {
                    return Err(format!("{dev:?} is not the device of {}", self.id));
                }
                item("net_queues")?;
                if count[0] + count[3] == 0 || count[1] + count[3] == 0 {
                    return Err(format!("channels {count:?} leave no queue"));
                }
                for (queue, attr, content) in masks {
                    if !crate::net::valid_queue_attr(queue, attr) {
                        return Err(format!("{queue}/{attr} is not a queue mask isold records"));
                    }
                    crate::cpuset::CpuSet::parse_mask(content)
                        .map_err(|e| format!("{queue}/{attr} {content:?}: {e}"))?;
                }
                for (irq, list) in irqs {
                    crate::cpuset::CpuSet::parse_list(list.trim())
                        .map_err(|e| format!("IRQ {irq} {list:?}: {e}"))?;
                }
                Ok(())
            }
            Original::Partition(p) => {
                if kind != "cgroup_partition"
                    || key != p.dir
                    || !crate::policy::paths::valid_partition_dir(&p.dir)
                {
                    return Err(format!(
                        "{} is not the partition directory of {}",
                        p.dir, self.id
                    ));
                }
                item("cgroup_partition")?;
                for m in &p.moved {
                    let cg_ok = m.cgroup.starts_with('/')
                        && !m.cgroup.split('/').any(|c| c == "." || c == "..");
                    if m.pid <= 0 || !cg_ok {
                        return Err(format!(
                            "workload {} in cgroup {:?} is not one isold could have moved",
                            m.pid, m.cgroup
                        ));
                    }
                }
                for n in &p.narrow {
                    let cpus = crate::cpuset::CpuSet::parse_list(&n.cpus);
                    if n.pid <= 0 || n.tid <= 0 || !cpus.is_ok_and(|c| !c.is_empty()) {
                        return Err(format!(
                            "thread {} with CPUs {:?} is not one a partition's removal could widen",
                            n.tid, n.cpus
                        ));
                    }
                }
                Ok(())
            }
        }
    }
}
