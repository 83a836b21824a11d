//! The kernel's binary trace format: the pages of a tracefs instance's
//! `per_cpu/cpuN/trace_pipe_raw`, and the records in them as each event's `format` file lays
//! them out. Read this way, a reader on a housekeeping CPU gets every event with its
//! nanosecond timestamp and asks nothing of the CPU that recorded it (the text files print
//! microseconds, and a blocking reader makes the writer wake it with an irq_work on its own
//! CPU: an interrupt of the very CPU watched).
//!
//! The layout is the ring buffer's (kernel/trace/ring_buffer.c, include/linux/ring_buffer.h),
//! the same on every kernel since 5.x:
//! - a page: a header (`header_page`: a u64 timestamp, the committed length with two flags
//!   in its top bits, the data), then events;
//! - an event: a u32 header, `type_len` in its low 5 bits and a time delta in the other 27,
//!   then its payload: `type_len` 1..=28 is a data record of `type_len * 4` bytes; 0 a data
//!   record whose length is the next u32; 29 padding (to the page's end when its delta is 0,
//!   else the next u32 long); 30 a time extension (the next u32 holds the delta's bits above
//!   27); 31 an absolute timestamp (the same, 59 bits, the top ones from the page's);
//! - a data record: the event's fields at the offsets of its `format` file, `common_type`
//!   (the event's id) first.

use crate::error::{Error, Result};

/// The page header's committed length: the bytes of events on the page, with these flags
/// above them.
const COMMIT_MISSED_EVENTS: u64 = 1 << 31;
const COMMIT_MISSED_STORED: u64 = 1 << 30;
const COMMIT_FLAGS: u64 = COMMIT_MISSED_EVENTS | COMMIT_MISSED_STORED;

const TYPE_DATA_MAX: u32 = 28;
const TYPE_PADDING: u32 = 29;
const TYPE_TIME_EXTEND: u32 = 30;
const TYPE_TIME_STAMP: u32 = 31;
const TS_SHIFT: u32 = 27;
const TS_MASK_59: u64 = (1 << 59) - 1;

/// Where a page's parts are (`events/header_page`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLayout {
    /// The timestamp's offset (a u64).
    pub timestamp: usize,
    /// The committed length's offset and size (8 on 64-bit kernels, 4 on 32-bit ones).
    pub commit: (usize, usize),
    /// Where the events start.
    pub data: usize,
}

impl Default for PageLayout {
    /// A 64-bit kernel's.
    fn default() -> Self {
        PageLayout {
            timestamp: 0,
            commit: (8, 8),
            data: 16,
        }
    }
}

impl PageLayout {
    /// Parse `events/header_page`.
    pub fn parse(text: &str) -> std::result::Result<PageLayout, String> {
        let fields = parse_fields(text)?;
        let get = |name: &str| {
            fields
                .iter()
                .find(|f| f.name == name)
                .ok_or_else(|| format!("no field {name}"))
        };
        let ts = get("timestamp")?;
        let commit = get("commit")?;
        let data = get("data")?;
        if ts.size != 8 || !(commit.size == 4 || commit.size == 8) {
            return Err(format!(
                "timestamp of {} bytes, commit of {}",
                ts.size, commit.size
            ));
        }
        Ok(PageLayout {
            timestamp: ts.offset,
            commit: (commit.offset, commit.size),
            data: data.offset,
        })
    }
}

/// What a page said besides its events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageInfo {
    /// Events were lost before this page (the writer overran the reader).
    pub missed: bool,
    /// How many, when the kernel stored the number after the events.
    pub missed_count: Option<u64>,
    /// Data records on the page.
    pub records: usize,
    /// The page's last timestamp (of its last event, or its own when empty).
    pub last_ts: u64,
}

/// Walk the events of one page, calling `record(timestamp_ns, payload)` for each data record
/// in order; `payload` starts with the event's `common_type`. A page cut short (a read of
/// fewer bytes than its header says) is an error that names the offset.
pub fn parse_page(
    page: &[u8],
    layout: &PageLayout,
    mut record: impl FnMut(u64, &[u8]),
) -> std::result::Result<PageInfo, String> {
    let need = layout.data;
    if page.len() < need {
        return Err(format!("a page of {} bytes: no header", page.len()));
    }
    let mut ts = u64_at(page, layout.timestamp);
    let raw_commit = match layout.commit.1 {
        8 => u64_at(page, layout.commit.0),
        _ => u64::from(u32_at(page, layout.commit.0)),
    };
    let commit = (raw_commit & !COMMIT_FLAGS & 0xffff_ffff) as usize;
    let end = layout.data + commit;
    if end > page.len() {
        return Err(format!(
            "the page commits {commit} bytes of events, {} are there",
            page.len() - layout.data
        ));
    }
    let mut info = PageInfo {
        missed: raw_commit & COMMIT_MISSED_EVENTS != 0,
        missed_count: None,
        records: 0,
        last_ts: ts,
    };
    if raw_commit & COMMIT_MISSED_STORED != 0 && end + 8 <= page.len() {
        info.missed_count = Some(u64_at(page, end));
    }
    let mut at = layout.data;
    while at + 4 <= end {
        let head = u32_at(page, at);
        let type_len = head & 0x1f;
        let delta = u64::from(head >> 5);
        let need_word = |at: usize| -> std::result::Result<u32, String> {
            if at + 8 > end {
                return Err(format!("an event header at {at} runs past the page's end"));
            }
            Ok(u32_at(page, at + 4))
        };
        match type_len {
            TYPE_PADDING => {
                if delta == 0 {
                    break;
                }
                // A discarded event: its length counts its own length word; its delta is
                // not added (the kernel's reader, rb_update_read_stamp, skips it).
                let len = need_word(at)? as usize;
                at += 4 + len.max(4);
            }
            TYPE_TIME_EXTEND => {
                let hi = u64::from(need_word(at)?);
                ts += (hi << TS_SHIFT) | delta;
                at += 8;
            }
            TYPE_TIME_STAMP => {
                let hi = u64::from(need_word(at)?);
                let abs = ((hi << TS_SHIFT) | delta) & TS_MASK_59;
                ts = (ts & !TS_MASK_59) | abs;
                at += 8;
            }
            n => {
                // A data record: its length in the next word (counting that word, as
                // rb_event_data_length does), or `type_len` words.
                let (start, len) = if n == 0 {
                    (at + 8, (need_word(at)? as usize).saturating_sub(4))
                } else {
                    debug_assert!(n <= TYPE_DATA_MAX);
                    (at + 4, n as usize * 4)
                };
                if start + len > end {
                    return Err(format!(
                        "a record at {at} of {len} bytes runs past the page"
                    ));
                }
                ts += delta;
                record(ts, &page[start..start + len]);
                info.records += 1;
                at = start + len;
            }
        }
    }
    info.last_ts = ts;
    Ok(info)
}

/// How a field is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// A number (1, 2, 4 or 8 bytes), or a fixed array (`char comm[16]`) of `size` bytes.
    Inline,
    /// `__data_loc`: a u32 whose low 16 bits are the offset from the record's start and high
    /// 16 bits the length.
    DataLoc,
    /// `__rel_loc`: the same, the offset from the end of the u32 itself.
    RelLoc,
}

/// One field of an event's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Its name (`irq`, `prev_comm`, `common_pid`).
    pub name: String,
    /// Its C type as the format file says (`int`, `char[16]`, `__data_loc char[]`).
    pub ctype: String,
    /// Offset from the record's start.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
    /// Signed.
    pub signed: bool,
    /// How it is stored.
    pub storage: Storage,
}

impl Field {
    /// The field as an unsigned number (sign-extended when it is signed, as a u64), or
    /// `None` when the record is too short or the field is no number.
    pub fn u64_of(&self, rec: &[u8]) -> Option<u64> {
        if self.storage != Storage::Inline {
            return None;
        }
        let b = rec.get(self.offset..self.offset + self.size)?;
        Some(match (self.size, self.signed) {
            (1, false) => u64::from(b[0]),
            (1, true) => b[0] as i8 as i64 as u64,
            (2, false) => u64::from(u16::from_le_bytes([b[0], b[1]])),
            (2, true) => i16::from_le_bytes([b[0], b[1]]) as i64 as u64,
            (4, false) => u64::from(u32::from_le_bytes(b.try_into().ok()?)),
            (4, true) => i32::from_le_bytes(b.try_into().ok()?) as i64 as u64,
            (8, _) => u64::from_le_bytes(b.try_into().ok()?),
            _ => return None,
        })
    }

    /// The field as a signed number.
    pub fn i64_of(&self, rec: &[u8]) -> Option<i64> {
        self.u64_of(rec).map(|v| v as i64)
    }

    /// The field as a string: a char array up to its first NUL, or a dynamic string.
    pub fn str_of<'a>(&self, rec: &'a [u8]) -> Option<&'a str> {
        let bytes = match self.storage {
            Storage::Inline => rec.get(self.offset..self.offset + self.size)?,
            Storage::DataLoc | Storage::RelLoc => {
                let loc =
                    u32::from_le_bytes(rec.get(self.offset..self.offset + 4)?.try_into().ok()?);
                let (off, len) = ((loc & 0xffff) as usize, (loc >> 16) as usize);
                let start = match self.storage {
                    Storage::RelLoc => self.offset + 4 + off,
                    _ => off,
                };
                rec.get(start..start + len)?
            }
        };
        let end = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
        std::str::from_utf8(&bytes[..end]).ok()
    }
}

/// An event's `format` file: its name, id and fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    /// `name:` (`irq_handler_entry`).
    pub name: String,
    /// `ID:`: the records' `common_type`.
    pub id: u16,
    /// Every field, the common ones first.
    pub fields: Vec<Field>,
}

impl Format {
    /// Parse an `events/<system>/<event>/format` file.
    pub fn parse(text: &str) -> std::result::Result<Format, String> {
        let mut name = None;
        let mut id = None;
        for line in text.lines() {
            if let Some(v) = line.strip_prefix("name:") {
                name = Some(v.trim().to_string());
            } else if let Some(v) = line.strip_prefix("ID:") {
                id = Some(
                    v.trim()
                        .parse::<u16>()
                        .map_err(|e| format!("ID {:?}: {e}", v.trim()))?,
                );
            }
        }
        Ok(Format {
            name: name.ok_or("no name: line")?,
            id: id.ok_or("no ID: line")?,
            fields: parse_fields(text)?,
        })
    }

    /// The field named `name`.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Read `<instance>/events/<system>/<event>/format`.
    pub fn read(root: &crate::sysroot::SysRoot, dir: &str, event: &str) -> Result<Format> {
        let path = format!("{dir}/events/{event}/format");
        let text = root.read_to_string(&path)?;
        Format::parse(&text).map_err(|reason| Error::Parse {
            path: root.path(&path),
            input: text.lines().next().unwrap_or_default().to_string(),
            reason,
        })
    }
}

/// The records' common type: the u16 at their start.
pub fn common_type(rec: &[u8]) -> Option<u16> {
    Some(u16::from_le_bytes(rec.get(0..2)?.try_into().ok()?))
}

/// The `field:` lines of a format file (or of `header_page`).
fn parse_fields(text: &str) -> std::result::Result<Vec<Field>, String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("field:") else {
            continue;
        };
        // "field:int irq;\toffset:8;\tsize:4;\tsigned:1;"
        let mut parts = rest.split(';').map(str::trim);
        let decl = parts.next().unwrap_or_default();
        let mut offset = None;
        let mut size = None;
        let mut signed = false;
        for p in parts {
            if let Some(v) = p.strip_prefix("offset:") {
                offset = v.parse::<usize>().ok();
            } else if let Some(v) = p.strip_prefix("size:") {
                size = v.parse::<usize>().ok();
            } else if let Some(v) = p.strip_prefix("signed:") {
                signed = v == "1";
            }
        }
        let (Some(offset), Some(size)) = (offset, size) else {
            return Err(format!("field line without offset or size: {line}"));
        };
        let storage = if decl.starts_with("__data_loc") {
            Storage::DataLoc
        } else if decl.starts_with("__rel_loc") {
            Storage::RelLoc
        } else {
            Storage::Inline
        };
        // The name: the last word, less an array suffix ("char prev_comm[16]").
        let last = decl.rsplit([' ', '\t', '*']).next().unwrap_or_default();
        let name = last.split('[').next().unwrap_or_default().to_string();
        if name.is_empty() {
            return Err(format!("field line without a name: {line}"));
        }
        let ctype = match decl.rfind(last) {
            Some(i) => {
                let t = decl[..i].trim();
                match last.find('[') {
                    Some(b) => format!("{t}{}", &last[b..]),
                    None => t.to_string(),
                }
            }
            None => String::new(),
        };
        out.push(Field {
            name,
            ctype,
            offset,
            size,
            signed,
            storage,
        });
    }
    Ok(out)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 6.1's events/header_page.
    const HEADER_PAGE: &str = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n\tfield: char data;\toffset:16;\tsize:4080;\tsigned:1;\n";

    /// 6.1's irq_handler_entry format.
    const IRQ_ENTRY: &str = "name: irq_handler_entry\nID: 139\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\tfield:int irq;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:__data_loc char[] name;\toffset:12;\tsize:4;\tsigned:1;\n\nprint fmt: \"irq=%d name=%s\", REC->irq, __get_str(name)\n";

    /// 6.1's sched_switch format (its fields).
    const SWITCH: &str = "name: sched_switch\nID: 316\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n";

    #[test]
    fn formats_name_their_fields_offsets_and_storage() {
        let f = Format::parse(IRQ_ENTRY).unwrap();
        assert_eq!((f.name.as_str(), f.id), ("irq_handler_entry", 139));
        let names: Vec<&str> = f.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "common_type",
                "common_flags",
                "common_preempt_count",
                "common_pid",
                "irq",
                "name"
            ]
        );
        let irq = f.field("irq").unwrap();
        assert_eq!((irq.offset, irq.size, irq.signed), (8, 4, true));
        assert_eq!(irq.ctype, "int");
        assert_eq!(f.field("name").unwrap().storage, Storage::DataLoc);
        let s = Format::parse(SWITCH).unwrap();
        let comm = s.field("prev_comm").unwrap();
        assert_eq!(
            (comm.offset, comm.size, comm.ctype.as_str()),
            (8, 16, "char[16]")
        );
        assert_eq!(s.field("next_pid").unwrap().offset, 56);
        assert!(Format::parse("ID: 1\n").unwrap_err().contains("name"));
        assert_eq!(
            PageLayout::parse(HEADER_PAGE).unwrap(),
            PageLayout::default()
        );
    }

    /// An irq_handler_entry record: irq 4, name "ttyS0" after the fixed part.
    fn irq_record(pid: i32, irq: i32) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&139u16.to_le_bytes());
        r.extend_from_slice(&[1, 0]);
        r.extend_from_slice(&pid.to_le_bytes());
        r.extend_from_slice(&irq.to_le_bytes());
        let name = b"ttyS0\0";
        r.extend_from_slice(&(16u32 | ((name.len() as u32) << 16)).to_le_bytes());
        r.extend_from_slice(name);
        while r.len() % 4 != 0 {
            r.push(0);
        }
        r
    }

    /// A page as the kernel writes it: `events` are (delta, payload) data records, or time
    /// extensions / absolute stamps / padding given as their raw type.
    enum Ev {
        Data(u32, Vec<u8>),
        /// A record with its length in the next word (type_len 0).
        Long(u32, Vec<u8>),
        Extend(u64),
        Stamp(u64),
        Pad(u32, u32),
    }

    fn page(ts: u64, flags: u64, events: &[Ev]) -> Vec<u8> {
        let mut data = Vec::new();
        for e in events {
            match e {
                Ev::Data(delta, p) => {
                    assert!(p.len() % 4 == 0 && p.len() / 4 <= 28);
                    data.extend_from_slice(&((p.len() as u32 / 4) | (delta << 5)).to_le_bytes());
                    data.extend_from_slice(p);
                }
                Ev::Long(delta, p) => {
                    data.extend_from_slice(&(delta << 5).to_le_bytes());
                    data.extend_from_slice(&(p.len() as u32 + 4).to_le_bytes());
                    data.extend_from_slice(p);
                }
                Ev::Extend(d) => {
                    data.extend_from_slice(&(30 | (((d & 0x7ff_ffff) as u32) << 5)).to_le_bytes());
                    data.extend_from_slice(&((d >> 27) as u32).to_le_bytes());
                }
                Ev::Stamp(t) => {
                    data.extend_from_slice(&(31 | (((t & 0x7ff_ffff) as u32) << 5)).to_le_bytes());
                    data.extend_from_slice(&((t >> 27) as u32).to_le_bytes());
                }
                Ev::Pad(delta, len) => {
                    data.extend_from_slice(&(29 | (delta << 5)).to_le_bytes());
                    data.extend_from_slice(&len.to_le_bytes());
                    data.extend(std::iter::repeat(0).take(len.saturating_sub(4) as usize));
                }
            }
        }
        let mut p = Vec::new();
        p.extend_from_slice(&ts.to_le_bytes());
        p.extend_from_slice(&(data.len() as u64 | flags).to_le_bytes());
        p.extend_from_slice(&data);
        p.resize(4096, 0);
        p
    }

    #[test]
    fn a_pages_records_come_with_their_timestamps() {
        let f = Format::parse(IRQ_ENTRY).unwrap();
        let rec = irq_record(0, 4);
        let big = vec![7u8; 29 * 4];
        let p = page(
            1_000_000,
            0,
            &[
                Ev::Data(100, rec.clone()),
                Ev::Extend(1 << 30),
                Ev::Data(5, rec.clone()),
                Ev::Pad(3, 8),
                Ev::Long(2, big.clone()),
                Ev::Stamp(5_000_000_000),
                Ev::Data(1, rec.clone()),
            ],
        );
        let mut got = Vec::new();
        let info = parse_page(&p, &PageLayout::default(), |ts, r| {
            got.push((ts, r.to_vec()))
        })
        .unwrap();
        assert_eq!(info.records, 4);
        assert!(!info.missed);
        let t1 = 1_000_100;
        let t2 = t1 + (1 << 30) + 5;
        let t3 = t2 + 2;
        let t4 = 5_000_000_001;
        let stamps: Vec<u64> = got.iter().map(|(t, _)| *t).collect();
        assert_eq!(stamps, [t1, t2, t3, t4]);
        assert_eq!(info.last_ts, t4);
        assert_eq!(got[2].1, big);
        let r = &got[0].1;
        assert_eq!(common_type(r), Some(139));
        assert_eq!(f.field("irq").unwrap().i64_of(r), Some(4));
        assert_eq!(f.field("common_pid").unwrap().i64_of(r), Some(0));
        assert_eq!(f.field("name").unwrap().str_of(r), Some("ttyS0"));
    }

    #[test]
    fn losses_padding_to_the_end_and_short_pages() {
        let rec = irq_record(9, 1);
        let mut p = page(
            10,
            COMMIT_MISSED_EVENTS | COMMIT_MISSED_STORED,
            &[Ev::Data(1, rec.clone()), Ev::Pad(0, 0)],
        );
        // The number of missed events after the committed bytes.
        let commit = 4 + rec.len() + 8;
        p[16 + commit..16 + commit + 8].copy_from_slice(&42u64.to_le_bytes());
        let mut n = 0;
        let info = parse_page(&p, &PageLayout::default(), |_, _| n += 1).unwrap();
        assert_eq!(n, 1);
        assert!(info.missed);
        assert_eq!(info.missed_count, Some(42));
        // A read shorter than the page's commit.
        let e = parse_page(&p[..20], &PageLayout::default(), |_, _| {}).unwrap_err();
        assert!(e.contains("commits"), "{e}");
        let e = parse_page(&p[..8], &PageLayout::default(), |_, _| {}).unwrap_err();
        assert!(e.contains("no header"), "{e}");
    }
}
