//! Every format the state files have had loads, and restore keeps the administrator's lines
//! with each: one fixture per format in tests/fixtures/state/, made by `isold apply` of that
//! version on the same fake root (see the README there).

mod common;
use common::{copy_dir, put};

use std::path::{Path, PathBuf};

use libtaskisol::policy::engine;
use libtaskisol::policy::state::{Entry, Original, State, StateFiles};
use libtaskisol::SysRoot;

const IRQBALANCE_DEBIAN: &str = include_str!("../../isold/tests/data/irqbalance-1.9.2-1-debian12");
const ADMIN_IRQBALANCE: &str = "IRQBALANCE_ARGS=\"--policyscript=/etc/irqbalance.sh\"\n";
const ADMIN_KVM: &str = "blacklist kvm_amd\n";

/// The fake root of make.sh as that version's apply left it: the kernel's values the state
/// records changed to something else, the fixture's files (state files, files written).
fn after_apply(fixture: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    copy_dir(&top.join("tests/fixtures/debian-6.12-rt-isol23"), r);
    put(r, "proc/sys/kernel/timer_migration", "1\n");
    put(r, "proc/sys/vm/stat_interval", "1\n");
    put(r, "proc/sys/kernel/sched_rt_runtime_us", "950000\n");
    put(r, "proc/sys/kernel/printk", "7\t4\t1\t7\n");
    put(
        r,
        "proc/sys/kernel/random/boot_id",
        "5d3a1c1e-0000-4000-8000-000000000001\n",
    );
    put(r, "sys/kernel/mm/ksm/run", "0\n");
    put(r, "sys/module/kvm/parameters/nx_huge_pages", "N\n");
    put(r, "etc/default/irqbalance", IRQBALANCE_DEBIAN);
    copy_dir(&fixture.join("after-apply"), r);
    dir
}

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/state");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    assert_eq!(v.len(), 5, "{v:?}");
    v
}

/// Load, then restore on a fake root where the administrator added a line to the file isold
/// edited (irqbalance's defaults) and to the file it created (the KVM options) after the
/// apply: both lines stay, isold's line is gone, every other original comes back exactly.
#[test]
fn every_earlier_state_format_loads_and_restore_keeps_the_administrators_lines() {
    for fx in fixtures() {
        let name = fx.file_name().unwrap().to_string_lossy().into_owned();
        let t = after_apply(&fx);
        let r = t.path();
        let root = SysRoot::new(r);
        let files = StateFiles::default_for(&root);
        let mut entries: Vec<Entry> = Vec::new();
        for f in [&files.runtime, &files.persistent] {
            if let Some(st) = State::load(f).unwrap_or_else(|e| panic!("{name}: {e}")) {
                entries.extend(st.entries().iter().cloned());
            }
        }
        for e in &entries {
            assert_eq!(e.check(), Ok(()), "{name}: {}", e.id);
        }
        assert!(entries.len() > 5, "{name}: {}", entries.len());
        if name.starts_with("journal-") {
            // The second apply's entry, a journal line as that version wrote it (no mark).
            assert!(entries.iter().any(|e| e.id == "ksm"), "{name}");
            let journal = std::fs::read_to_string(r.join("run/isold/state.journal")).unwrap();
            assert!(!journal.contains("\"crc32\""), "{name}: {journal}");
        }
        let irqb = entries
            .iter()
            .find(|e| e.id == "file:/etc/default/irqbalance")
            .unwrap_or_else(|| panic!("{name}: no irqbalance entry"));
        assert!(
            matches!(&irqb.original, Original::File { content: Some(c), .. } if c == IRQBALANCE_DEBIAN),
            "{name}"
        );
        // What apply left, then the administrator's additions.
        let edited = std::fs::read_to_string(r.join("etc/default/irqbalance")).unwrap();
        assert!(
            edited.contains("\nIRQBALANCE_BANNED_CPULIST=2-3\n"),
            "{name}: {edited}"
        );
        put(
            r,
            "etc/default/irqbalance",
            &format!("{edited}{ADMIN_IRQBALANCE}"),
        );
        let kvm = std::fs::read_to_string(r.join("etc/modprobe.d/isold-kvm.conf")).unwrap();
        put(
            r,
            "etc/modprobe.d/isold-kvm.conf",
            &format!("{kvm}{ADMIN_KVM}"),
        );
        // The kernel's values as apply changed them (anything but the original).
        for e in &entries {
            if let Original::Attr { path, content, .. } = &e.original {
                let p = r.join(path.trim_start_matches('/'));
                if p.exists() {
                    std::fs::write(&p, format!("{}x\n", content.trim_end())).unwrap();
                }
            }
        }

        let rep = engine::restore(&root, &files).unwrap_or_else(|e| panic!("{name}: {e}"));
        let problems: Vec<String> = rep
            .problems()
            .map(|o| format!("{}: {}", o.label, o.status))
            .collect();
        assert_eq!(problems, Vec::<String>::new(), "{name}");
        assert_eq!(
            std::fs::read_to_string(r.join("etc/default/irqbalance")).unwrap(),
            format!("{IRQBALANCE_DEBIAN}{ADMIN_IRQBALANCE}"),
            "{name}: the original with the administrator's line, without isold's"
        );
        assert_eq!(
            std::fs::read_to_string(r.join("etc/modprobe.d/isold-kvm.conf")).unwrap(),
            ADMIN_KVM,
            "{name}: isold's lines out, the administrator's kept"
        );
        for e in &entries {
            if let Original::Attr { path, content, .. } = &e.original {
                let p = r.join(path.trim_start_matches('/'));
                if p.exists() {
                    assert_eq!(
                        std::fs::read_to_string(&p).unwrap(),
                        *content,
                        "{name}: {path}"
                    );
                }
            }
        }
        assert!(
            !r.join("run/isold/state.json").exists()
                && !r.join("var/lib/isold/state.json").exists(),
            "{name}: every original restored leaves no state file"
        );
    }
}

/// Without the administrator's lines, a file isold created is removed and the file it edited
/// is the original byte for byte, with each format.
#[test]
fn with_no_later_edit_restore_gives_back_every_file_exactly() {
    for fx in fixtures() {
        let name = fx.file_name().unwrap().to_string_lossy().into_owned();
        let t = after_apply(&fx);
        let r = t.path();
        let root = SysRoot::new(r);
        let rep = engine::restore(&root, &StateFiles::default_for(&root)).unwrap();
        assert_eq!(rep.problems().count(), 0, "{name}");
        assert_eq!(
            std::fs::read(r.join("etc/default/irqbalance")).unwrap(),
            IRQBALANCE_DEBIAN.as_bytes(),
            "{name}"
        );
        assert!(!r.join("etc/modprobe.d/isold-kvm.conf").exists(), "{name}");
    }
}
