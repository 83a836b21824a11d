//! The noise ledger's events from the kernel's records, by each event's `format` file.

use super::Event;

/// The tracepoints the ledger records, below an instance's `events/`. The vectors present
/// differ by kernel and architecture: those without a directory are left out.
pub const EVENTS: [&str; 5] = [
    "irq/irq_handler_entry",
    "irq/irq_handler_exit",
    "irq/softirq_entry",
    "irq/softirq_exit",
    "sched/sched_switch",
];

/// The NMI tracepoint (after the handler ran, with its length).
pub const NMI_EVENT: &str = "nmi/nmi_handler";

/// The TLB flush tracepoint (x86): inside a function call IPI, a flush for another CPU's
/// change of the memory map (a sibling thread's munmap or mprotect) tells a TLB shootdown.
pub const TLB_EVENT: &str = "tlb/tlb_flush";

/// `tlb_flush`'s reason for a flush asked by another CPU (TLB_REMOTE_SHOOTDOWN,
/// include/linux/mm_types.h).
pub const TLB_REMOTE_SHOOTDOWN: i64 = 1;

/// The APIC vectors' tracepoints (`irq_vectors/<name>_entry` and `_exit`, x86).
pub const VECTORS: [&str; 11] = [
    "local_timer",
    "reschedule",
    "call_function",
    "call_function_single",
    "irq_work",
    "x86_platform_ipi",
    "thermal_apic",
    "threshold_apic",
    "deferred_error_apic",
    "error_apic",
    "spurious_apic",
];

#[derive(Debug, Clone)]
enum Decode {
    IrqEntry {
        irq: crate::rawtrace::Field,
        name: crate::rawtrace::Field,
    },
    IrqExit {
        irq: crate::rawtrace::Field,
    },
    SoftirqEntry {
        vec: crate::rawtrace::Field,
    },
    SoftirqExit {
        vec: crate::rawtrace::Field,
    },
    VectorEntry(String),
    VectorExit(String),
    Nmi {
        handler: crate::rawtrace::Field,
        delta: crate::rawtrace::Field,
    },
    Switch {
        prev_pid: crate::rawtrace::Field,
        prev_state: crate::rawtrace::Field,
        next_pid: crate::rawtrace::Field,
        next_comm: crate::rawtrace::Field,
    },
    Tlb {
        reason: crate::rawtrace::Field,
    },
}

/// Turns raw records into [`Event`]s, by the `format` files of the events recorded.
#[derive(Debug, Clone, Default)]
pub struct Decoder {
    by_id: std::collections::HashMap<u16, Decode>,
}

impl Decoder {
    /// Learn an event from its `format` file (`system/name` as in [`EVENTS`]); an event the
    /// ledger does not know, or a format without the fields it reads, is an error naming it.
    pub fn learn(
        &mut self,
        event: &str,
        format: &crate::rawtrace::Format,
    ) -> std::result::Result<(), String> {
        let f = |name: &str| {
            format
                .field(name)
                .cloned()
                .ok_or_else(|| format!("{event}: no field {name} in its format"))
        };
        let d = match event {
            "irq/irq_handler_entry" => Decode::IrqEntry {
                irq: f("irq")?,
                name: f("name")?,
            },
            "irq/irq_handler_exit" => Decode::IrqExit { irq: f("irq")? },
            "irq/softirq_entry" => Decode::SoftirqEntry { vec: f("vec")? },
            "irq/softirq_exit" => Decode::SoftirqExit { vec: f("vec")? },
            "nmi/nmi_handler" => Decode::Nmi {
                handler: f("handler")?,
                delta: f("delta_ns")?,
            },
            "sched/sched_switch" => Decode::Switch {
                prev_pid: f("prev_pid")?,
                prev_state: f("prev_state")?,
                next_pid: f("next_pid")?,
                next_comm: f("next_comm")?,
            },
            "tlb/tlb_flush" => Decode::Tlb {
                reason: f("reason")?,
            },
            other => match other.strip_prefix("irq_vectors/").and_then(|v| {
                v.strip_suffix("_entry")
                    .map(|n| (n, true))
                    .or_else(|| v.strip_suffix("_exit").map(|n| (n, false)))
            }) {
                Some((n, true)) => Decode::VectorEntry(n.to_string()),
                Some((n, false)) => Decode::VectorExit(n.to_string()),
                None => return Err(format!("{other}: not an event of the noise ledger")),
            },
        };
        self.by_id.insert(format.id, d);
        Ok(())
    }

    /// The event of one record; `None` for a record of an event not learnt, or one too short
    /// for its fields.
    pub fn decode(&self, rec: &[u8]) -> Option<Event> {
        let d = self.by_id.get(&crate::rawtrace::common_type(rec)?)?;
        Some(match d {
            Decode::IrqEntry { irq, name } => Event::IrqEntry {
                irq: irq.i64_of(rec)?,
                name: name.str_of(rec).unwrap_or_default().to_string(),
            },
            Decode::IrqExit { irq } => Event::IrqExit {
                irq: irq.i64_of(rec)?,
            },
            Decode::SoftirqEntry { vec } => Event::SoftirqEntry {
                vec: vec.u64_of(rec)?,
            },
            Decode::SoftirqExit { vec } => Event::SoftirqExit {
                vec: vec.u64_of(rec)?,
            },
            Decode::VectorEntry(n) => Event::VectorEntry { name: n.clone() },
            Decode::VectorExit(n) => Event::VectorExit { name: n.clone() },
            Decode::Nmi { handler, delta } => Event::Nmi {
                // A function pointer: its address (the kernel prints the symbol).
                handler: format!("{:#x}", handler.u64_of(rec)?),
                delta_ns: delta.u64_of(rec)?,
            },
            Decode::Switch {
                prev_pid,
                prev_state,
                next_pid,
                next_comm,
            } => Event::Switch {
                prev_pid: prev_pid.i64_of(rec)? as i32,
                // The task state's report bits (TASK_REPORT, 0x7f) and TASK_REPORT_IDLE
                // (0x80): none set is a thread still runnable (preempted, or yielding).
                prev_runnable: prev_state.i64_of(rec)? & 0xff == 0,
                next_pid: next_pid.i64_of(rec)? as i32,
                next_comm: next_comm.str_of(rec).unwrap_or_default().to_string(),
            },
            Decode::Tlb { reason } => Event::TlbFlush {
                reason: reason.i64_of(rec)?,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    /// Records decoded by their formats: an IRQ's entry with its name, a switch, a record
    /// of an event not learnt.
    #[test]
    fn records_are_decoded_by_their_formats() {
        let entry = crate::rawtrace::Format::parse("name: irq_handler_entry\nID: 139\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\tfield:int irq;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:__data_loc char[] name;\toffset:12;\tsize:4;\tsigned:1;\n").unwrap();
        let switch = crate::rawtrace::Format::parse("name: sched_switch\nID: 316\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n").unwrap();
        let timer = crate::rawtrace::Format::parse("name: local_timer_entry\nID: 77\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:int vector;\toffset:8;\tsize:4;\tsigned:1;\n").unwrap();
        let mut d = Decoder::default();
        d.learn("irq/irq_handler_entry", &entry).unwrap();
        d.learn("sched/sched_switch", &switch).unwrap();
        d.learn("irq_vectors/local_timer_entry", &timer).unwrap();
        assert!(d
            .learn("irq/irq_handler_exit", &timer)
            .unwrap_err()
            .contains("no field irq"));
        assert!(d.learn("block/block_rq_issue", &timer).is_err());
        let mut rec = vec![0u8; 24];
        rec[0..2].copy_from_slice(&139u16.to_le_bytes());
        rec[8..12].copy_from_slice(&4i32.to_le_bytes());
        rec[12..16].copy_from_slice(&(16u32 | (6 << 16)).to_le_bytes());
        rec[16..22].copy_from_slice(b"ttyS0\0");
        assert_eq!(
            d.decode(&rec),
            Some(Event::IrqEntry {
                irq: 4,
                name: "ttyS0".into()
            })
        );
        let mut sw = vec![0u8; 64];
        sw[0..2].copy_from_slice(&316u16.to_le_bytes());
        sw[24..28].copy_from_slice(&812i32.to_le_bytes());
        // Preempted: TASK_REPORT_MAX.
        sw[32..40].copy_from_slice(&0x100i64.to_le_bytes());
        sw[40..51].copy_from_slice(b"kworker/3:1");
        sw[56..60].copy_from_slice(&33i32.to_le_bytes());
        assert_eq!(
            d.decode(&sw),
            Some(Event::Switch {
                prev_pid: 812,
                prev_runnable: true,
                next_pid: 33,
                next_comm: "kworker/3:1".into()
            })
        );
        let mut t = vec![0u8; 12];
        t[0..2].copy_from_slice(&77u16.to_le_bytes());
        assert_eq!(
            d.decode(&t),
            Some(Event::VectorEntry {
                name: "local_timer".into()
            })
        );
        t[0..2].copy_from_slice(&78u16.to_le_bytes());
        assert_eq!(d.decode(&t), None);
        assert_eq!(d.decode(&sw[..40]), None);
    }
}
