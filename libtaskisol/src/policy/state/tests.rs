//! Tests of the state file, its journal and the ledger.

use super::super::entry::Original;
use super::super::journal::{crc32, marked_entry, set_aside_kept, set_aside_path, JOURNAL_MAX};
use super::super::ledger::Ledger;
use super::*;
use std::io::Write;

fn entry(id: &str, content: &str) -> Entry {
    Entry {
        id: id.into(),
        item: "sysctl".into(),
        label: id.into(),
        original: Original::Attr {
            path: "/proc/sys/x".into(),
            content: content.into(),
            restore: content.trim_end().into(),
        },
    }
}

/// A journal's fingerprint grows with its appends: the same as the whole text's.
#[test]
fn a_fingerprint_streams() {
    let mut st = Stream::new("{\"id\":1}\n");
    st.add("{\"id\":2}");
    st.add("\n");
    let whole = fingerprint("{\"id\":1}\n{\"id\":2}\n");
    assert_eq!(st.fingerprint(), whole);
    assert_eq!(whole.len, 18);
    assert_ne!(fingerprint("{\"id\":1}\n"), whole);
}

/// Each pass over the entries counts them all, on this thread.
#[test]
fn passes_over_the_entries_are_counted() {
    let mut st = State::new("b".into(), "2-3".into(), "c".into());
    for id in ["a", "b", "c"] {
        st.record(entry(id, "1\n"));
    }
    let before = entries_examined();
    assert_eq!(st.entries().len(), 3);
    st.entries_mut().retain(|e| e.id != "b");
    assert_eq!(entries_examined() - before, 6);
    // Looked up by the index made once (two entries), not by a pass per lookup.
    let before = entries_examined();
    assert!(st.has("a") && st.has("c") && !st.has("b"));
    assert_eq!(entries_examined() - before, 2);
}

#[test]
fn the_state_file_is_json_with_an_original_a_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let mut st = State::new("b\"1".into(), "2-3".into(), "/etc/a\nb.toml".into());
    st.save(&path).unwrap();
    assert_eq!(State::load(&path).unwrap().unwrap(), st);
    st.record(entry("sysctl:a", "1\n"));
    st.record(entry("sysctl:b", "\"2\"\t\n"));
    st.unchangeable.insert("irq:0".into(), "EIO".into());
    st.save(&path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(serde_json::from_str::<State>(&text).unwrap(), st);
    *LAST.lock().unwrap() = None;
    assert_eq!(State::load(&path).unwrap().unwrap(), st);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 11, "{text}");
    assert!(lines[6].starts_with("    {\"id\":\"sysctl:a\""), "{text}");
    assert!(lines[7].starts_with("    {\"id\":\"sysctl:b\""), "{text}");
}

#[test]
fn the_first_original_wins_and_survives_a_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run/isold/state.json");
    let mut st = State::new("b".into(), "2-3".into(), "/etc/isold/isold.toml".into());
    assert!(st.record(entry("sysctl:x", "1\n")));
    assert!(
        !st.record(entry("sysctl:x", "0\n")),
        "an original is never replaced"
    );
    st.save(&path).unwrap();
    let back = State::load(&path).unwrap().unwrap();
    assert_eq!(back, st);
    assert_eq!(
        back.entries()[0].original,
        Original::Attr {
            path: "/proc/sys/x".into(),
            content: "1\n".into(),
            restore: "1".into()
        }
    );
    assert!(!dir.path().join("run/isold/.state.json.tmp").exists());
    State::remove(&path).unwrap();
    assert_eq!(State::load(&path).unwrap(), None);
    State::remove(&path).unwrap();
}

/// Entries recorded one at a time go to the journal; loading merges them, a line cut by a
/// crash is not an entry, a whole write folds the journal in and removes it.
#[test]
fn the_journal_holds_appended_originals_until_a_whole_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let jpath = journal_path(&path);
    assert_eq!(jpath, dir.path().join("state.journal"));
    let mut st = State::new("b".into(), "2-3".into(), "c".into());
    st.record(entry("sysctl:a", "1\n"));
    st.save(&path).unwrap();
    let main = fs::read_to_string(&path).unwrap();

    assert!(st.record(entry("sysctl:b", "2\n")));
    st.append(&path, &st.entries()[1..]).unwrap();
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        main,
        "the state file is not rewritten"
    );
    assert_eq!(fs::read_to_string(&jpath).unwrap().lines().count(), 1);
    assert_eq!(State::load(&path).unwrap().unwrap(), st);

    // Another process appends (append_entries), then one of its lines is cut by a crash.
    let c = entry("sysctl:c", "3\n");
    assert!(append_entries(&path, std::slice::from_ref(&c)).unwrap());
    let mut f = fs::OpenOptions::new().append(true).open(&jpath).unwrap();
    f.write_all(b"{\"id\":\"sysctl:d\",\"it").unwrap();
    let back = State::load(&path).unwrap().unwrap();
    let ids: Vec<&str> = back.entries().iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["sysctl:a", "sysctl:b", "sysctl:c"]);
    // A journal line for an id already recorded never replaces the first original.
    let again = entry("sysctl:a", "9\n");
    fs::write(
        &jpath,
        format!(
            "{}\n{}\n",
            serde_json::to_string(&again).unwrap(),
            serde_json::to_string(&c).unwrap()
        ),
    )
    .unwrap();
    let back = State::load(&path).unwrap().unwrap();
    assert_eq!(back.entries()[0], entry("sysctl:a", "1\n"));
    assert_eq!(back.entries().len(), 2);

    // A broken line in the middle is set aside; the lines around it are used.
    fs::write(
        &jpath,
        format!("not json\n{}\n", serde_json::to_string(&c).unwrap()),
    )
    .unwrap();
    let back = State::load(&path).unwrap().unwrap();
    assert_eq!(back.set_aside, ["not json"]);
    assert!(back.has("sysctl:c"));

    // A whole write folds the journal in; remove takes both.
    fs::remove_file(&jpath).unwrap();
    st.append(&path, &st.entries()[1..]).unwrap();
    assert!(jpath.exists());
    st.save(&path).unwrap();
    assert!(!jpath.exists());
    assert_eq!(State::load(&path).unwrap().unwrap(), st);
    st.append(&path, &st.entries()[1..]).unwrap();
    State::remove(&path).unwrap();
    assert!(!jpath.exists() && !path.exists());
    assert_eq!(State::load(&path).unwrap(), None);
}

fn with_unchangeable(id: &str, why: &str, e: Entry) -> State {
    let mut st = State::new("b".into(), "2-3".into(), "c".into());
    st.record(e);
    st.unchangeable.insert(id.into(), why.into());
    st
}

/// What was read last is kept to save a parse, keyed by the file's content: a state file
/// another process rewrote is read anew, entries and unchangeable marks alike.
#[test]
fn a_state_file_rewritten_elsewhere_is_read_anew() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let a = with_unchangeable("irq:0", "EPERM", entry("sysctl:a", "1\n"));
    a.save(&path).unwrap();
    assert_eq!(State::load(&path).unwrap().unwrap(), a);
    assert_eq!(State::unchangeable_of(&path).unwrap(), a.unchangeable);
    // Another process's write (this one's save would be remembered).
    let b = with_unchangeable("irq:2", "EIO", entry("sysctl:b", "2\n"));
    fs::write(&path, serde_json::to_string(&b).unwrap()).unwrap();
    assert_eq!(State::unchangeable_of(&path).unwrap(), b.unchangeable);
    assert_eq!(State::load(&path).unwrap().unwrap(), b);
}

/// An append to one state file never passes for another file's content.
#[test]
fn appending_to_one_state_file_leaves_another_as_it_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (dir.path().join("a.json"), dir.path().join("b.json"));
    let a = with_unchangeable("irq:0", "EPERM", entry("sysctl:a", "1\n"));
    a.save(&pa).unwrap();
    let mut b = with_unchangeable("irq:2", "EIO", entry("sysctl:b", "2\n"));
    b.save(&pb).unwrap();
    assert_eq!(State::load(&pa).unwrap().unwrap(), a);
    b.record(entry("sysctl:c", "3\n"));
    b.append(&pb, &[entry("sysctl:c", "3\n")]).unwrap();
    assert_eq!(State::unchangeable_of(&pa).unwrap(), a.unchangeable);
    assert_eq!(State::load(&pa).unwrap().unwrap(), a);
    assert_eq!(State::load(&pb).unwrap().unwrap(), b);
}

/// An append cut short by a full disk leaves a torn last line: the next append starts on
/// a line of its own, every whole entry before and after loads, the torn line is set
/// aside and goes to `state.journal.bad` at the next whole write, once.
#[test]
fn a_torn_journal_line_loses_nothing_around_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let jpath = journal_path(&path);
    let mut st = State::new("b".into(), "2-3".into(), "c".into());
    st.record(entry("sysctl:a", "1\n"));
    st.save(&path).unwrap();
    assert!(append_entries(&path, &[entry("sysctl:b", "2\n")]).unwrap());
    assert!(append_entries(&path, &[entry("sysctl:b2", "2\n")]).unwrap());
    // A whole last line needs no ending: no empty line between appends.
    let text = fs::read_to_string(&jpath).unwrap();
    assert_eq!(text.lines().count(), 2, "{text:?}");
    assert!(!text.contains("\n\n"), "{text:?}");
    // The disk fills in the middle of the next append.
    let torn = serde_json::to_string(&entry("sysctl:x", "9\n")).unwrap();
    let mut f = fs::OpenOptions::new().append(true).open(&jpath).unwrap();
    f.write_all(&torn.as_bytes()[..20]).unwrap();
    drop(f);
    // Space again: the next appends.
    assert!(append_entries(&path, &[entry("sysctl:c", "3\n")]).unwrap());
    assert!(append_entries(&path, &[entry("sysctl:d", "4\n")]).unwrap());
    let back = State::load(&path).unwrap().unwrap();
    let ids: Vec<&str> = back.entries().iter().map(|e| e.id.as_str()).collect();
    assert_eq!(
        ids,
        ["sysctl:a", "sysctl:b", "sysctl:b2", "sysctl:c", "sysctl:d"]
    );
    assert_eq!(back.set_aside, [&torn[..20]]);
    back.save(&path).unwrap();
    let bad = set_aside_path(&path);
    assert_eq!(bad, dir.path().join("state.journal.bad"));
    assert_eq!(
        fs::read_to_string(&bad).unwrap(),
        format!("{}\n", &torn[..20])
    );
    assert!(!jpath.exists());
    let again = State::load(&path).unwrap().unwrap();
    assert!(again.set_aside.is_empty());
    assert_eq!(again.entries().len(), 5);
    again.save(&path).unwrap();
    assert_eq!(
        fs::read_to_string(&bad).unwrap().lines().count(),
        1,
        "set aside twice"
    );
}

/// The check value of CRC-32 (the standard's "123456789"), and of nothing.
#[test]
fn crc32_is_the_standard_one() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32(b""), 0);
    assert_eq!(crc32(b"a"), 0xE8B7_BE43);
}

fn journal_of(entries: &[Entry]) -> String {
    entries.iter().map(journal_line).collect()
}

fn sample_entries() -> Vec<Entry> {
    vec![
        entry("sysctl:a", "1\n"),
        entry("sysctl:b", "\"{\\\"len\\\":9}\"\t\n"),
        entry("sysctl:\u{e9}t\u{e9}", "caf\u{e9}\n"),
        entry("sysctl:d", "4\n"),
    ]
}

/// A journal line is one JSON object: the entry with its length and CRC-32 in front,
/// which an isold without the mark reads as the entry.
#[test]
fn a_journal_line_is_the_entry_with_its_length_and_crc() {
    let e = entry("sysctl:a", "1\n");
    let line = journal_line(&e);
    let body = serde_json::to_string(&e).unwrap();
    assert_eq!(
        line,
        format!(
            "{{\"len\":{},\"crc32\":\"{:08x}\",{}\n",
            body.len(),
            crc32(body.as_bytes()),
            &body[1..]
        )
    );
    assert!(line.starts_with("{\"len\":"), "{line}");
    assert_eq!(line.matches('\n').count(), 1);
    assert_eq!(serde_json::from_str::<Entry>(&line).unwrap(), e);
    assert_eq!(marked_entry(line.trim_end()), Some(e));
}

fn loaded(dir: &Path, journal: &str) -> State {
    let path = dir.join("state.json");
    if !path.exists() {
        State::new("b".into(), "2-3".into(), "c".into())
            .save(&path)
            .unwrap();
    }
    fs::write(journal_path(&path), journal).unwrap();
    *LAST.lock().unwrap() = None;
    State::load(&path).unwrap().unwrap()
}

fn ids(st: &State) -> Vec<String> {
    st.entries().iter().map(|e| e.id.clone()).collect()
}

/// A journal cut at any byte loads every entry whose line is whole before the cut, and
/// nothing else; once the next append has ended the cut line, it is set aside and the
/// entries before and after it load.
#[test]
fn a_journal_cut_at_any_byte_loads_everything_before_the_cut() {
    let dir = tempfile::tempdir().unwrap();
    let all = sample_entries();
    let text = journal_of(&all);
    let ends: Vec<usize> = text.match_indices('\n').map(|(i, _)| i + 1).collect();
    let next = entry("sysctl:next", "5\n");
    for cut in 0..=text.len() {
        let Some(head) = text.get(..cut) else {
            continue; // inside a character: a byte cut is still a text cut elsewhere
        };
        let whole = ends.iter().filter(|&&e| e <= cut).count();
        let want: Vec<String> = all[..whole].iter().map(|e| e.id.clone()).collect();
        let st = loaded(dir.path(), head);
        assert_eq!(ids(&st), want, "cut at {cut}");
        assert!(st.set_aside.is_empty(), "cut at {cut}: {:?}", st.set_aside);
        // The next append (it ends a cut line first).
        let path = dir.path().join("state.json");
        assert!(append_entries(&path, std::slice::from_ref(&next)).unwrap());
        *LAST.lock().unwrap() = None;
        let st = State::load(&path).unwrap().unwrap();
        let torn = &text[ends.get(whole.wrapping_sub(1)).map_or(0, |&e| e)..cut];
        // Cut just before its newline, a line is whole once the append has ended it.
        let ended = whole < all.len() && ends[whole] == cut + 1;
        let mut want = want;
        if ended {
            want.push(all[whole].id.clone());
        }
        want.push(next.id.clone());
        assert_eq!(ids(&st), want, "cut at {cut}, then an append");
        if torn.is_empty() || ended {
            assert!(st.set_aside.is_empty(), "cut at {cut}");
        } else {
            assert_eq!(st.set_aside, [torn], "cut at {cut}");
        }
    }
}

/// Bytes cut from anywhere in a marked line, or any byte of it changed, never load as an
/// entry with another value: the line is set aside (or, its mark alone hit, read whole),
/// and the lines around it load.
#[test]
fn a_changed_or_shortened_line_is_set_aside_and_its_neighbours_load() {
    let dir = tempfile::tempdir().unwrap();
    let all = sample_entries();
    let lines: Vec<String> = all.iter().map(journal_line).collect();
    let mid = &lines[1];
    let mut tried = 0;
    for at in 0..mid.len() - 1 {
        for bad in [
            // One byte changed (never into a line end).
            {
                let mut b = mid.clone().into_bytes();
                b[at] ^= if b[at] == b'\x0b' { 0x02 } else { 0x01 };
                String::from_utf8(b).ok()
            },
            // One byte taken out.
            mid.get(..at)
                .zip(mid.get(at + 1..))
                .map(|(a, b)| format!("{a}{b}")),
        ]
        .into_iter()
        .flatten()
        {
            tried += 1;
            let text = format!("{}{bad}{}{}", lines[0], lines[2], lines[3]);
            let st = loaded(dir.path(), &text);
            for e in st.entries() {
                assert!(all.contains(e), "byte {at}: {e:?} from {bad:?}");
            }
            for id in ["sysctl:a", "sysctl:\u{e9}t\u{e9}", "sysctl:d"] {
                assert!(st.has(id), "byte {at}: {id} lost to {bad:?}");
            }
            // Set aside whole, or in parts where a changed byte made a second mark.
            let parts = if st.has("sysctl:b") {
                String::new()
            } else {
                bad.strip_suffix('\n').unwrap_or(&bad).to_string()
            };
            assert_eq!(st.set_aside.concat(), parts, "byte {at}: {bad:?}");
        }
    }
    assert!(tried > 2 * 100, "{tried}");
}

/// Lines of an isold before the mark load as they did; a line without the mark that is
/// no entry is set aside.
#[test]
fn journal_lines_without_the_mark_still_load() {
    let dir = tempfile::tempdir().unwrap();
    let all = sample_entries();
    let old: String = all[..2]
        .iter()
        .map(|e| serde_json::to_string(e).unwrap() + "\n")
        .collect();
    let text = format!("{old}not an entry\n{}", journal_of(&all[2..]));
    let st = loaded(dir.path(), &text);
    assert_eq!(st.entries(), all.as_slice());
    assert_eq!(st.set_aside, ["not an entry"]);
}

/// An append that ran into a line cut short (a writer that did not end it) loses only
/// the cut part.
#[test]
fn lines_run_together_lose_only_the_cut_part() {
    let dir = tempfile::tempdir().unwrap();
    let all = sample_entries();
    let lines: Vec<String> = all.iter().map(journal_line).collect();
    let cut = &lines[1][..40];
    let text = format!("{}{cut}{}{}", lines[0], lines[2], lines[3]);
    let st = loaded(dir.path(), &text);
    assert_eq!(ids(&st), ["sysctl:a", "sysctl:\u{e9}t\u{e9}", "sysctl:d"]);
    assert_eq!(st.set_aside, [cut]);
    // Without marks (an older isold's lines), the run-together line is set aside whole.
    let old = |e: &Entry| serde_json::to_string(e).unwrap();
    let text = format!("{}\n{}{}\n", old(&all[0]), &old(&all[1])[..9], old(&all[2]));
    let st = loaded(dir.path(), &text);
    assert_eq!(ids(&st), ["sysctl:a"]);
    assert_eq!(st.set_aside.len(), 1);
}

/// The journal and the lock are never opened through a symlink left in their place.
#[test]
fn the_journal_and_the_lock_refuse_a_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let victim = dir.path().join("victim");
    fs::write(&victim, "precious").unwrap();
    std::os::unix::fs::symlink(&victim, journal_path(&path)).unwrap();
    let e = append_entries(&path, &[entry("sysctl:x", "1\n")]).unwrap_err();
    assert_eq!(e.errno(), Some(libc::ELOOP), "{e}");
    std::os::unix::fs::symlink(&victim, crate::policy::engine::lock_path(&path)).unwrap();
    let e = crate::policy::engine::lock(&path).unwrap_err();
    assert_eq!(e.errno(), Some(libc::ELOOP), "{e}");
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
}

/// The journal takes appends up to JOURNAL_MAX bytes; past it, the caller folds it in.
#[test]
fn the_journal_limit_is_inclusive() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let j = fs::File::create(journal_path(&path)).unwrap();
    j.set_len(JOURNAL_MAX).unwrap();
    assert!(append_entries(&path, &[entry("sysctl:a", "1\n")]).unwrap());
    j.set_len(JOURNAL_MAX + 1).unwrap();
    assert!(!append_entries(&path, &[entry("sysctl:b", "1\n")]).unwrap());
    assert_eq!(
        fs::metadata(journal_path(&path)).unwrap().len(),
        JOURNAL_MAX + 1
    );
}

#[test]
fn a_journal_past_its_limit_is_folded_by_a_whole_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let mut st = State::new("b".into(), "2-3".into(), "c".into());
    st.save(&path).unwrap();
    fs::write(journal_path(&path), vec![b'\n'; JOURNAL_MAX as usize + 1]).unwrap();
    assert!(!append_entries(&path, &[entry("x", "1\n")]).unwrap());
    st.record(entry("x", "1\n"));
    st.append(&path, st.entries()).unwrap();
    assert!(!journal_path(&path).exists(), "folded into state.json");
    assert_eq!(State::load(&path).unwrap().unwrap(), st);
}

#[test]
fn a_foreign_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    fs::write(&path, "{\"version\": 9}").unwrap();
    let e = State::load(&path).unwrap_err().to_string();
    assert!(
        e.contains("state.json: not a usable isold state file: missing field"),
        "{e}"
    );
    assert!(e.contains(".broken"), "says what the admin can do: {e}");
    // Cut short by a full disk or a copy: named as such.
    let st = State::new("b".into(), "2-3".into(), "c".into());
    st.save(&path).unwrap();
    let whole = fs::read_to_string(&path).unwrap();
    fs::write(&path, &whole[..whole.len() / 2]).unwrap();
    let e = State::load(&path).unwrap_err().to_string();
    assert!(e.contains("it ends early"), "{e}");
    fs::write(&path, whole.replace("\"version\": 1", "\"version\": 7")).unwrap();
    let e = State::load(&path).unwrap_err().to_string();
    assert!(
        e.contains("its format is version 7, this isold reads version 1"),
        "{e}"
    );
}

/// A read or remove error other than "no such file" is an error, not "no state".
#[test]
fn only_a_missing_file_means_no_state() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("state.json");
    assert!(State::load(&p).unwrap().is_none());
    State::remove(&p).unwrap();
    std::fs::create_dir_all(p.join("x")).unwrap();
    assert!(State::load(&p).is_err());
    assert!(State::remove(&p).is_err());
}

/// Workloads added to a partition entry later: a pid it lists with the same start time
/// is the same process (kept as recorded); a reused pid is another one (added).
#[test]
fn later_workloads_are_added_once() {
    use crate::policy::partition::{Moved, PartitionOriginal};
    let moved = |pid, starttime, cgroup: &str| Moved {
        pid,
        starttime,
        comm: "w".into(),
        cgroup: cgroup.into(),
        threads: vec![],
    };
    let mut st = State::new("b".into(), "2-3".into(), "c".into());
    st.record(Entry {
        id: "cgroup_partition:/sys/fs/cgroup/iso".into(),
        item: "cgroup_partition".into(),
        label: "p".into(),
        original: Original::Partition(PartitionOriginal {
            dir: "/sys/fs/cgroup/iso".into(),
            created: true,
            enabled_cpuset: true,
            cpus: None,
            exclusive: None,
            partition: None,
            moved: vec![moved(10, 100, "/")],
            narrow: vec![],
        }),
    });
    st.add_moved(
        "cgroup_partition:/sys/fs/cgroup/iso",
        &[
            moved(10, 100, "/elsewhere"),
            moved(10, 200, "/a"),
            moved(11, 100, "/b"),
        ],
    );
    st.add_moved("other", &[moved(12, 1, "/c")]);
    let Original::Partition(p) = &st.entries()[0].original else {
        panic!()
    };
    let got: Vec<(i32, u64, &str)> = p
        .moved
        .iter()
        .map(|m| (m.pid, m.starttime, m.cgroup.as_str()))
        .collect();
    assert_eq!(got, vec![(10, 100, "/"), (10, 200, "/a"), (11, 100, "/b")]);
}

fn attr(id: &str, item: &str, path: &str, content: &str, restore: &str) -> Entry {
    Entry {
        id: id.into(),
        item: item.into(),
        label: id.into(),
        original: Original::Attr {
            path: path.into(),
            content: content.into(),
            restore: restore.into(),
        },
    }
}

fn file(path: &str, created_dir: Option<&str>) -> Entry {
    Entry {
        id: format!("file:{path}"),
        item: if path.contains("irqbalance") {
            "irqbalance"
        } else {
            "kvm"
        }
        .into(),
        label: path.into(),
        original: Original::File {
            path: path.into(),
            content: None,
            created_dir: created_dir.map(str::to_string),
            written: Some("x\n".into()),
        },
    }
}

/// What apply records passes; an entry whose path, item, text or thread does not follow
/// from its id is refused, whatever the rest says.
#[test]
fn an_entry_must_be_one_isold_records() {
    let good = [
        attr(
            "sysctl:vm.stat_interval",
            "sysctl",
            "/proc/sys/vm/stat_interval",
            "1\n",
            "1",
        ),
        attr(
            "thp",
            "thp",
            "/sys/kernel/mm/transparent_hugepage/enabled",
            "always [madvise] never\n",
            "madvise",
        ),
        attr(
            "irq:24",
            "irq_affinity",
            "/proc/irq/24/smp_affinity_list",
            "0-3\n",
            "0-3",
        ),
        attr(
            "irq:default",
            "irq_affinity",
            "/proc/irq/default_smp_affinity",
            "f\n",
            "f",
        ),
        attr(
            "pm_qos:cpu3",
            "pm_qos",
            "/sys/devices/system/cpu/cpu3/power/pm_qos_resume_latency_us",
            "0\n",
            "0",
        ),
        attr(
            "cpufreq:cpu2",
            "cpufreq",
            "/sys/devices/system/cpu/cpu2/cpufreq/scaling_governor",
            "powersave\n",
            "powersave",
        ),
        attr(
            "workqueue",
            "workqueue",
            "/sys/devices/virtual/workqueue/cpumask",
            "f\n",
            "f",
        ),
        attr(
            "workqueue:writeback",
            "workqueue",
            "/sys/devices/virtual/workqueue/writeback/cpumask",
            "f\n",
            "f",
        ),
        attr(
            "machinecheck:machinecheck1",
            "machinecheck",
            "/sys/devices/system/machinecheck/machinecheck1/ignore_ce",
            "0\n",
            "0",
        ),
        attr(
            "printk",
            "printk",
            "/proc/sys/kernel/printk",
            "7\t4\t1\t7\n",
            "7\t4\t1\t7",
        ),
        attr("ksm", "ksm", "/sys/kernel/mm/ksm/run", "0\n", "0"),
        file("/etc/modprobe.d/isold-kvm.conf", Some("/etc/modprobe.d")),
        // A tree without /etc (a captured one) gets it made.
        file("/etc/modprobe.d/isold-kvm.conf", Some("/etc")),
        file("/etc/default/irqbalance", None),
    ];
    for e in &good {
        assert_eq!(e.check(), Ok(()), "{e:?}");
    }
    let bad = [
        attr(
            "sysctl:vm.stat_interval",
            "sysctl",
            "/proc/sys/../../../etc/shadow",
            "1\n",
            "1",
        ),
        attr(
            "sysctl:../../etc/shadow",
            "sysctl",
            "/proc/sys/../../etc/shadow",
            "1\n",
            "1",
        ),
        attr(
            "sysctl:vm.stat_interval",
            "sysctl",
            "/proc/sys/vm/stat_interval",
            "1\n",
            "0",
        ),
        attr(
            "sysctl:vm.stat_interval",
            "thp",
            "/proc/sys/vm/stat_interval",
            "1\n",
            "1",
        ),
        attr(
            "irq:24",
            "irq_affinity",
            "/proc/irq/25/smp_affinity_list",
            "0-3\n",
            "0-3",
        ),
        attr(
            "irq:x",
            "irq_affinity",
            "/proc/irq/x/smp_affinity_list",
            "0-3\n",
            "0-3",
        ),
        attr(
            "irq:x",
            "irq_affinity",
            "/proc/irq/0/smp_affinity_list",
            "0-3\n",
            "0-3",
        ),
        attr(
            "workqueue:..",
            "workqueue",
            "/sys/devices/virtual/workqueue/../cpumask",
            "f\n",
            "f",
        ),
        attr(
            "pm_qos:cpu",
            "pm_qos",
            "/sys/devices/system/cpu/cpu/power/pm_qos_resume_latency_us",
            "0\n",
            "0",
        ),
        attr(
            "machinecheck:../x",
            "machinecheck",
            "/sys/devices/system/machinecheck/../x/ignore_ce",
            "0\n",
            "0",
        ),
        attr("anything", "sysctl", "/proc/sys/vm/x", "1\n", "1"),
        file("/etc/passwd", None),
        file("/etc/modprobe.d/isold-kvm.conf", Some("/")),
        file("/etc/modprobe.d/isold-kvm.conf", Some("/usr/lib")),
    ];
    for e in &bad {
        assert!(e.check().is_err(), "{e:?}");
    }
    let mut f = file("/etc/default/irqbalance", None);
    f.id = "file:/etc/default/grub".into();
    assert!(f.check().is_err());

    let task = |id: &str, pid: i32, tid: i32, item: &str| Entry {
        id: id.into(),
        item: item.into(),
        label: "t".into(),
        original: Original::Affinity {
            pid,
            tid,
            starttime: 5,
            comm: "t".into(),
            cpus: "0-3".into(),
            taken_off: None,
        },
    };
    assert_eq!(task("task:21:5", 20, 21, "tasks").check(), Ok(()));
    assert!(task("task:22:5", 20, 21, "tasks").check().is_err());
    assert!(task("task:21:6", 20, 21, "tasks").check().is_err());
    assert!(task("task:21:5", 0, 21, "tasks").check().is_err());
    assert!(task("task:21:5", 20, 21, "sysctl").check().is_err());
    let sched = |id: &str, policy: u32| Entry {
        id: id.into(),
        item: "kthread_priority".into(),
        label: "t".into(),
        original: Original::Sched {
            pid: 21,
            tid: 21,
            starttime: 5,
            comm: "t".into(),
            policy,
            rt_priority: if policy == 1 { 2 } else { 0 },
        },
    };
    assert_eq!(sched("sched:21:5", 1).check(), Ok(()));
    assert!(sched("task:21:5", 1).check().is_err());
    assert!(sched("sched:21:5", 42).check().is_err());
    let loan = |id: &str, item: &str, nice: i32| Entry {
        id: id.into(),
        item: item.into(),
        label: "t".into(),
        original: Original::Loan {
            pid: 21,
            tid: 21,
            starttime: 5,
            comm: "kworker/3:1".into(),
            policy: 0,
            rt_priority: 0,
            nice,
            reset_on_fork: false,
        },
    };
    assert_eq!(loan("loan:21:5", "stalls", 0).check(), Ok(()));
    assert!(loan("sched:21:5", "stalls", 0).check().is_err());
    assert!(loan("loan:21:6", "stalls", 0).check().is_err());
    assert!(loan("loan:21:5", "kthread_priority", 0).check().is_err());
    assert!(loan("loan:21:5", "stalls", 20).check().is_err());

    // The noise ledger's instance: only the daemon's name, only below a tracefs directory.
    let inst = |id: &str, item: &str, dir: &str| Entry {
        id: id.into(),
        item: item.into(),
        label: String::new(),
        original: Original::TraceInstance { dir: dir.into() },
    };
    let ok = "trace_instance:isold-noise-4026531836";
    for dir in [
        "/sys/kernel/tracing/instances/isold-noise-4026531836",
        "/sys/kernel/debug/tracing/instances/isold-noise-4026531836",
    ] {
        assert_eq!(inst(ok, "noise", dir).check(), Ok(()), "{dir}");
    }
    let dir = "/sys/kernel/tracing/instances/isold-noise-4026531836";
    assert!(inst(ok, "stalls", dir).check().is_err());
    assert!(inst("sysctl:isold-noise-4026531836", "noise", dir)
        .check()
        .is_err());
    for bad in [
        "/sys/kernel/tracing/instances/isold-noise-1",
        "/sys/kernel/tracing/instances/isold-noise-4026531836/..",
        "/sys/kernel/tracing/instances/../../../../etc",
        "/etc/instances/isold-noise-4026531836",
    ] {
        assert!(inst(ok, "noise", bad).check().is_err(), "{bad}");
    }
    for id in [
        "trace_instance:isold-noise-",
        "trace_instance:isold-noise-12x",
        "trace_instance:isold-audit-5",
        "trace_instance:isold-noise5",
    ] {
        let d = format!("/sys/kernel/tracing/instances/{}", &id[15..]);
        assert!(inst(id, "noise", &d).check().is_err(), "{id}");
    }

    use crate::policy::partition::{Moved, PartitionOriginal};
    let part = |dir: &str, cgroup: &str| Entry {
        id: format!("cgroup_partition:{dir}"),
        item: "cgroup_partition".into(),
        label: "p".into(),
        original: Original::Partition(PartitionOriginal {
            dir: dir.into(),
            created: true,
            enabled_cpuset: false,
            cpus: None,
            exclusive: None,
            partition: None,
            moved: vec![Moved {
                pid: 7,
                starttime: 1,
                comm: "w".into(),
                cgroup: cgroup.into(),
                threads: vec![],
            }],
            narrow: vec![],
        }),
    };
    assert_eq!(
        part("/sys/fs/cgroup/iso", "/system.slice/x.service").check(),
        Ok(())
    );
    assert!(part("/sys/fs/cgroup/../../etc", "/").check().is_err());
    assert!(part("/etc/x", "/").check().is_err());
    assert!(part("/sys/fs/cgroup/iso", "/../../x").check().is_err());
    assert!(part("/sys/fs/cgroup/iso", "relative").check().is_err());
    // The threads a removal widens: real ids and a CPU list, or the entry is refused.
    use crate::policy::partition::Narrow;
    let with_narrow = |pid: i32, cpus: &str| {
        let mut e = part("/sys/fs/cgroup/iso", "/");
        if let Original::Partition(p) = &mut e.original {
            p.narrow.push(Narrow {
                pid,
                tid: pid,
                starttime: 1,
                cpus: cpus.into(),
            });
        }
        e
    };
    assert_eq!(with_narrow(1, "0-1").check(), Ok(()));
    assert!(with_narrow(0, "0-1").check().is_err());
    assert!(with_narrow(1, "").check().is_err());
    assert!(with_narrow(1, "0-x").check().is_err());
}

fn files_in(dir: &Path) -> StateFiles {
    StateFiles::new(dir.join("run/state.json"), dir.join("lib/state.json"))
}

fn tree_root(dir: &Path, boot: &str) -> SysRoot {
    let p = dir.join("root/proc/sys/kernel/random");
    fs::create_dir_all(&p).unwrap();
    fs::write(p.join("boot_id"), format!("{boot}\n")).unwrap();
    SysRoot::new(dir.join("root"))
}

/// Kernel values go to the runtime file, files to the persistent one; a runtime file of
/// an earlier boot gives its files' originals to the persistent file and is gone.
#[test]
fn the_ledger_splits_runtime_values_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let files = files_in(dir.path());
    let root = tree_root(dir.path(), "boot-1");
    let mut l = Ledger::load(&files, &root, "2-3".into(), "c".into()).unwrap();
    assert!(l.is_empty_on_disk());
    let sysctl = attr("sysctl:vm.x", "sysctl", "/proc/sys/vm/x", "1\n", "1");
    let kvm = file("/etc/modprobe.d/isold-kvm.conf", Some("/etc/modprobe.d"));
    l.state.record(sysctl.clone());
    l.state.record(kvm.clone());
    l.persist().unwrap();
    let run = State::load(&files.runtime).unwrap().unwrap();
    let pers = State::load(&files.persistent).unwrap().unwrap();
    assert_eq!(run.entries(), std::slice::from_ref(&sysctl));
    assert_eq!(pers.entries(), std::slice::from_ref(&kvm));
    // Both files are 0600 in 0700 directories.
    use std::os::unix::fs::MetadataExt;
    for f in [&files.runtime, &files.persistent] {
        assert_eq!(fs::metadata(f).unwrap().mode() & 0o777, 0o600);
        assert_eq!(
            fs::metadata(f.parent().unwrap()).unwrap().mode() & 0o777,
            0o700
        );
    }

    // One more kernel value: appended to the journal, the files stay as they are.
    let main = fs::read_to_string(&files.runtime).unwrap();
    let pers_text = fs::read_to_string(&files.persistent).unwrap();
    let mut l = Ledger::load(&files, &root, "2-3".into(), "c".into()).unwrap();
    assert_eq!(l.state.entries(), [sysctl.clone(), kvm.clone()]);
    let other = attr("sysctl:vm.y", "sysctl", "/proc/sys/vm/y", "2\n", "2");
    l.state.record(other.clone());
    l.persist().unwrap();
    assert_eq!(fs::read_to_string(&files.runtime).unwrap(), main);
    assert_eq!(fs::read_to_string(&files.persistent).unwrap(), pers_text);
    assert!(journal_path(&files.runtime).exists());

    // A reboot: the kernel values are void, the file's original stays.
    let root = tree_root(dir.path(), "boot-2");
    let mut l = Ledger::load(&files, &root, "2-3".into(), "c".into()).unwrap();
    assert!(l.earlier_boot);
    assert_eq!(l.state.entries(), std::slice::from_ref(&kvm));
    l.persist().unwrap();
    assert!(!files.runtime.exists() && !journal_path(&files.runtime).exists());
    assert_eq!(
        State::load(&files.persistent).unwrap().unwrap().entries(),
        std::slice::from_ref(&kvm)
    );

    // isold 0.1 kept files in the runtime file: after a reboot they move.
    let mut old = State::new("boot-1".into(), "2-3".into(), "c".into());
    let irqb = file("/etc/default/irqbalance", None);
    old.record(irqb.clone());
    old.save(&files.runtime).unwrap();
    let mut l = Ledger::load(&files, &root, "2-3".into(), "c".into()).unwrap();
    l.persist().unwrap();
    assert!(!files.runtime.exists());
    assert_eq!(
        State::load(&files.persistent).unwrap().unwrap().entries(),
        [irqb, kvm]
    );
}

/// Set-aside journal lines leave the journal at the ledger's next write, into the
/// set-aside file, once: also when that write removes the state file (a restore).
#[test]
fn the_ledger_keeps_set_aside_lines_once_even_when_it_removes_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let files = files_in(dir.path());
    let root = tree_root(dir.path(), "boot-1");
    let a = attr("sysctl:vm.x", "sysctl", "/proc/sys/vm/x", "1\n", "1");
    let mut run = State::new("boot-1".into(), "2-3".into(), "c".into());
    run.record(a.clone());
    run.save(&files.runtime).unwrap();
    let jpath = journal_path(&files.runtime);
    let bad = set_aside_path(&files.runtime);
    fs::write(&jpath, "{\"len\":3,\"crc32\":\"00000000\",\"id\":1}\n").unwrap();
    let mut l = Ledger::load(&files, &root, String::new(), String::new()).unwrap();
    assert_eq!(l.state.set_aside.len(), 1);
    // Nothing else to write: the lines alone make the write.
    l.persist().unwrap();
    assert!(!jpath.exists());
    assert_eq!(set_aside_kept(&files.runtime), Some(1));
    l.persist().unwrap();
    let l = Ledger::load(&files, &root, String::new(), String::new()).unwrap();
    assert!(l.state.set_aside.is_empty());
    assert_eq!(set_aside_kept(&files.runtime), Some(1));
    // A restore's write: the state file goes, the lines stay.
    fs::write(&jpath, "cut\n").unwrap();
    let mut l = Ledger::load(&files, &root, String::new(), String::new()).unwrap();
    assert_eq!(l.state.set_aside, ["cut"]);
    l.state.entries_mut().clear();
    l.persist().unwrap();
    assert!(!files.runtime.exists() && !jpath.exists());
    assert_eq!(
        fs::read_to_string(&bad).unwrap().lines().last(),
        Some("cut")
    );
    assert_eq!(set_aside_kept(&files.runtime), Some(2));
}

/// A tampered entry is set aside with its reason and leaves the files at the next write;
/// a kernel value in the persistent file is one.
#[test]
fn the_ledger_sets_tampered_entries_aside() {
    let dir = tempfile::tempdir().unwrap();
    let files = files_in(dir.path());
    let root = tree_root(dir.path(), "boot-1");
    let mut run = State::new("boot-1".into(), "2-3".into(), "c".into());
    let good = attr("sysctl:vm.x", "sysctl", "/proc/sys/vm/x", "1\n", "1");
    run.record(good.clone());
    run.record(attr(
        "sysctl:vm.y",
        "sysctl",
        "/proc/sys/../../etc/y",
        "1\n",
        "1",
    ));
    run.save(&files.runtime).unwrap();
    let mut pers = State::new("boot-1".into(), "2-3".into(), "c".into());
    pers.record(attr("sysctl:vm.z", "sysctl", "/proc/sys/vm/z", "1\n", "1"));
    pers.save(&files.persistent).unwrap();
    let mut l = Ledger::load(&files, &root, String::new(), String::new()).unwrap();
    assert_eq!(l.state.entries(), std::slice::from_ref(&good));
    let why: Vec<&str> = l.rejected.iter().map(|(_, w)| w.as_str()).collect();
    assert_eq!(why.len(), 2, "{why:?}");
    assert!(why[0].contains("holds files only"), "{why:?}");
    assert!(why[1].contains("is not the file of sysctl:vm.y"), "{why:?}");
    l.persist().unwrap();
    assert_eq!(
        State::load(&files.runtime).unwrap().unwrap().entries(),
        [good]
    );
    assert!(!files.persistent.exists());
}
