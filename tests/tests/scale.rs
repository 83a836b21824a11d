//! isold's work grows linearly with the machine: apply, verify and restore on trees grown from
//! the captured 6.12-rt one (taskisol_tests::scale) at two sizes, four times apart, counting
//! operations rather than time (times are figures for scripts/bench-scale, BENCHMARKS.md).
//!
//! The count is `state::entries_examined`: every pass over the recorded originals. Looking
//! each new original up by a search of all those recorded before (as apply once did, 38 % of
//! a 20,000-thread apply in memcmp) makes it grow with the square of the size.

use std::path::Path;

use libtaskisol::policy::engine;
use libtaskisol::policy::state::entries_examined;
use libtaskisol::sysroot::SysRoot;
use taskisol_tests::scale::{grow, Grown, Scale};

struct Counts {
    size: Grown,
    changed: usize,
    apply: u64,
    verify: u64,
    restore: u64,
}

fn counts(dir: &Path, s: Scale) -> Counts {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/debian-6.12-rt-isold");
    let root_dir = dir.join(format!("root-{}", s.procs));
    let size = grow(&fixture, &root_dir, &s).unwrap();
    let config = root_dir.join("isold.toml");
    std::fs::write(&config, "isolated_cpus = \"2-3,6-7\"\n").unwrap();
    let root = SysRoot::new(&root_dir);
    let policy = libtaskisol::policy::load(&config, &root).unwrap();
    let files = engine::default_state_files(&root);

    let before = entries_examined();
    let rep = engine::apply(&root, &policy, &files).unwrap();
    let apply = entries_examined() - before;
    assert!(rep.problems().next().is_none(), "{}", rep.summary());
    let changed = rep.count("changed");
    // Every added thread was wide: each was narrowed and its original recorded.
    assert!(changed >= s.procs * s.threads_per_proc, "{}", rep.summary());

    let before = entries_examined();
    let rep = engine::verify(&root, &policy, &files).unwrap();
    let verify = entries_examined() - before;
    assert!(rep.problems().next().is_none(), "{}", rep.summary());

    let before = entries_examined();
    let rep = engine::restore(&root, &files).unwrap();
    let restore = entries_examined() - before;
    assert!(rep.problems().next().is_none(), "{}", rep.summary());
    assert!(rep.count("restored") >= changed, "{}", rep.summary());
    Counts {
        size,
        changed,
        apply,
        verify,
        restore,
    }
}

#[test]
fn apply_verify_and_restore_examine_the_originals_a_bounded_number_of_times() {
    let t = tempfile::tempdir().unwrap();
    let small = counts(
        t.path(),
        Scale {
            cpus: 8,
            procs: 100,
            threads_per_proc: 10,
            irqs: 50,
        },
    );
    let big = counts(
        t.path(),
        Scale {
            cpus: 8,
            procs: 400,
            threads_per_proc: 10,
            irqs: 200,
        },
    );
    for c in [&small, &big] {
        eprintln!(
            "{} threads, {} IRQs, {} changed: originals examined by apply {}, verify {}, restore {}",
            c.size.threads, c.size.irqs, c.changed, c.apply, c.verify, c.restore
        );
    }
    let work = |c: &Counts| (c.size.threads + c.size.irqs) as f64;
    let work_ratio = work(&big) / work(&small);
    assert!(work_ratio > 3.0, "{work_ratio}");
    for (what, a, b) in [
        ("apply", small.apply, big.apply),
        ("verify", small.verify, big.verify),
        ("restore", small.restore, big.restore),
    ] {
        // At most a few passes over the originals, whatever the size...
        let per = |n: u64, c: &Counts| n as f64 / c.changed as f64;
        assert!(
            per(b, &big) <= 20.0,
            "{what}: {b} originals examined for {} recorded",
            big.changed
        );
        // ...so the count grows as the work does (a search per target would square it).
        let growth = b as f64 / a.max(1) as f64;
        assert!(
            growth <= 1.2 * work_ratio,
            "{what}: {a} -> {b} originals examined ({growth:.1}x) for {work_ratio:.1}x the work"
        );
    }
}

/// bootargs on a 448-CPU machine isolating every other CPU: the lists in the kernel's group
/// syntax, and a line over the kernel's limit refused with nothing written.
#[test]
fn bootargs_on_448_cpus_writes_short_lists_and_refuses_a_line_too_long() {
    let t = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/debian-6.12-rt-isold");
    let root = t.path().join("root");
    let size = grow(
        &fixture,
        &root,
        &Scale {
            cpus: 448,
            procs: 0,
            threads_per_proc: 0,
            irqs: 0,
        },
    )
    .unwrap();
    assert_eq!(size.cpus, 448);
    let isold = |args: &[&str]| {
        let mut v = vec![
            "isold".into(),
            "--root".into(),
            root.clone().into_os_string(),
        ];
        v.extend(args.iter().map(|a| (*a).into()));
        isold::main_with_args(v)
    };
    let drop_in = root.join("etc/default/grub.d/isold.cfg");
    assert_eq!(
        isold(&["bootargs", "--cpus", "1-447:1/2", "--write-grub"]),
        0
    );
    let text = std::fs::read_to_string(&drop_in).unwrap();
    for want in [
        " isolcpus=managed_irq,domain,1-447:1/2 ",
        " nohz_full=1-447:1/2 ",
        " rcu_nocbs=1-447:1/2 ",
        " irqaffinity=0-446:1/2 ",
    ] {
        assert!(text.contains(want), "{want} in {text}");
    }
    assert_eq!(isold(&["restore"]), 0);
    assert!(!drop_in.exists());

    // A command line already 1,900 bytes long: with isold's arguments it would pass 2047.
    let long = format!(
        "BOOT_IMAGE=/vmlinuz root=/dev/vda ro {}\n",
        "x".repeat(1900)
    );
    std::fs::write(root.join("proc/cmdline"), long).unwrap();
    assert_eq!(
        isold(&["bootargs", "--cpus", "1-447:1/2", "--write-grub"]),
        1
    );
    assert!(!drop_in.exists());
    assert_eq!(isold(&["bootargs", "--cpus", "1-447:1/2"]), 1);
}
