//! The state file's journal: entries recorded one at a time (a daemon narrowing each new
//! task), appended next to the state file and fdatasync'd, so that recording costs the same
//! however many originals are kept. Each line is one JSON object with its entry's length and
//! CRC-32 in front (`journal_line`); a whole line whose mark does not match is set aside for
//! the administrator (`state.journal.bad`, `keep_set_aside`), everything else is used. The
//! state file ([`super::file`]) reads it and folds it in at its next whole write; it
//! re-exports what others use.

use std::fs;
use std::path::{Path, PathBuf};

use super::durable;
use super::entry::Entry;
use crate::error::{Error, Result};

/// The journal of a state file: entries recorded since its last whole write, one JSON line
/// each (`state.json` -> `state.journal`).
pub fn journal_path(path: &Path) -> PathBuf {
    path.with_extension("journal")
}

/// CRC-32 as zlib, gzip and Ethernet compute it (reflected polynomial 0xEDB88320), by a table
/// made at compile time. A dozen lines of a public standard (its check value is tested):
/// no crate in the lock file computes it, and the journal's mark needs nothing more.
pub(super) fn crc32(bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 == 1 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    };
    let mut crc = !0u32;
    for &b in bytes {
        crc = TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// What begins every journal line isold writes: the entry's length and CRC-32 are its first
/// two fields (`{"len":312,"crc32":"1c291ca3","id":...}`), so that the line stays one JSON
/// object (an older isold reads it as the entry, the extra fields ignored) and a line cut
/// short, run together with the next or changed in any byte is told from a whole one.
const MARK: &str = "{\"len\":";

/// `e` as one journal line, with its newline: the entry's JSON (`{"id":...}`, `len` bytes,
/// CRC-32 `crc32` of exactly those bytes) with the mark in front.
pub(crate) fn journal_line(e: &Entry) -> String {
    let body = serde_json::to_string(e).expect("entry serializes");
    format!(
        "{MARK}{},\"crc32\":\"{:08x}\",{}\n",
        body.len(),
        crc32(body.as_bytes()),
        &body[1..]
    )
}

/// The entry of one marked journal line (without its newline): `None` when the mark cannot
/// be read, the length is not the body's (cut short, run together: told without reading
/// the body) or the CRC-32 is not (any byte changed), or the body is no entry.
pub(super) fn marked_entry(line: &str) -> Option<Entry> {
    let rest = line.strip_prefix(MARK)?;
    let (len, rest) = rest.split_once(",\"crc32\":\"")?;
    let (crc, rest) = rest.split_at_checked(8)?;
    let (len, crc) = (
        len.parse::<usize>().ok()?,
        u32::from_str_radix(crc, 16).ok()?,
    );
    let body = format!("{{{}", rest.strip_prefix("\",")?);
    if body.len() != len || crc32(body.as_bytes()) != crc {
        return None;
    }
    serde_json::from_str(&body).ok()
}

/// The parts of one whole journal line, each an entry or a line to set aside. A line is
/// split before each mark: an append that ran into a line cut short (by a writer that did
/// not end it) loses only the cut part. A JSON string never holds the mark's bare quotes,
/// so only a line's own start is one. A line without a mark (isold before the mark) is an
/// entry when it parses as one whole.
pub(super) fn journal_entries(line: &str) -> Vec<std::result::Result<Entry, &str>> {
    let mut starts: Vec<usize> = line.match_indices(MARK).map(|(i, _)| i).collect();
    if starts.first() != Some(&0) {
        starts.insert(0, 0);
    }
    starts
        .iter()
        .enumerate()
        .map(|(n, &from)| {
            let part = &line[from..starts.get(n + 1).copied().unwrap_or(line.len())];
            let entry = if part.starts_with(MARK) {
                marked_entry(part)
            } else {
                serde_json::from_str::<Entry>(part).ok()
            };
            entry.ok_or(part)
        })
        .collect()
}

/// Past this size the journal is folded into the state file by a whole write.
pub const JOURNAL_MAX: u64 = 1 << 20;

/// Append `entries` to the journal of the state file at `path`: one write of whole lines and
/// one fdatasync, whatever the number of entries already recorded. `Ok(false)`, and nothing
/// written, when the journal has grown past 1 MiB and should be folded into a whole write
/// ([`super::file::State::save`]). The caller holds the lock and has checked that no entry's id is
/// recorded yet.
pub fn append_entries(path: &Path, entries: &[Entry]) -> Result<bool> {
    let jpath = journal_path(path);
    if fs::metadata(&jpath).map_or(0, |m| m.len()) > JOURNAL_MAX {
        return Ok(false);
    }
    let mut lines = String::new();
    // A last line cut short (a full disk) is ended first: this append's lines stay whole.
    if !ends_with_newline(&jpath) {
        lines.push('\n');
    }
    for e in entries {
        lines.push_str(&journal_line(e));
    }
    let werr = |source| Error::Write {
        path: jpath.clone(),
        data: "(isold journal)".into(),
        source,
    };
    let mut f = open_journal(&jpath).map_err(werr)?;
    durable::write(&mut f, lines.as_bytes())
        .and_then(|()| durable::sync_data(&f))
        .map_err(werr)?;
    Ok(true)
}

/// Whether the file at `path` is empty, missing, or ends with a newline.
pub(crate) fn ends_with_newline(path: &Path) -> bool {
    use std::os::unix::fs::FileExt;
    let Ok(f) = fs::File::open(path) else {
        return true;
    };
    let len = f.metadata().map_or(0, |m| m.len());
    let mut last = [0u8];
    len == 0 || (f.read_exact_at(&mut last, len - 1).is_ok() && last[0] == b'\n')
}

/// Where the journal lines that were not entries go: next to the journal.
pub fn set_aside_path(path: &Path) -> PathBuf {
    path.with_extension("journal.bad")
}

/// Add `lines` (journal lines that were no entries) to the set-aside file of the state file
/// at `path`, for the administrator: before the journal that holds them is removed.
pub(super) fn keep_set_aside(path: &Path, lines: &[String]) -> Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let bad = set_aside_path(path);
    let mut text = lines.join("\n");
    text.push('\n');
    open_journal(&bad)
        .and_then(|mut f| {
            durable::write(&mut f, text.as_bytes()).and_then(|()| durable::sync_data(&f))
        })
        .map_err(|source| Error::Write {
            path: bad,
            data: "(isold set-aside journal lines)".into(),
            source,
        })
}

/// How many lines the set-aside file of the state file at `path` holds (`None`: there is
/// none): what `isold status` shows until the administrator has looked at them.
pub fn set_aside_kept(path: &Path) -> Option<usize> {
    fs::read_to_string(set_aside_path(path))
        .ok()
        .map(|t| t.lines().count())
}

/// The journal at `jpath`, open for appending: created 0600 in a 0700 directory, never
/// through a symlink.
pub(crate) fn open_journal(jpath: &Path) -> std::io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = jpath.parent().filter(|d| !d.as_os_str().is_empty()) {
        crate::policy::files::private_dir(dir)?;
    }
    fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(crate::policy::files::NOFOLLOW)
        .open(jpath)
}
