//! The task-isolation ABI row by row, as `isol-rawcall` call lists, for a kernel that has the
//! interface: the project's own 6.1 in QEMU runs each list natively and under `isol-emu` in the
//! same boot, and the two answers must be equal but for process and thread ids (which
//! [`normalize`] numbers in order of appearance). The emulator follows the reference ABI to the
//! letter (tests/tests/emu.rs checks each of these rows against it); a difference is a bug in
//! the emulator or in the kernel, named by the case.
//!
//! The lists are those of tests/tests/emu.rs that ask the kernel something (not the ones about
//! the tracer itself: `--trace-only`, untraced children, its log).

use serde_json::Value;

/// (name, calls): one `isol-rawcall` run each.
pub const CASES: &[(&str, &[&str])] = &[
    (
        "feat_get",
        &[
            "feat-get 0",
            "feat-get 1",
            "feat-get 2",
            "feat-get 3",
            "feat-get 0x100",
        ],
    ),
    ("option_is_a_c_int", &["prctl 0x10000003f 0 buf 0 0"]),
    (
        "cfg_set_quiesce_refusals",
        &[
            "cfg-set-quiesce 1 1 0",
            "cfg-set-quiesce 0 2 0",
            "cfg-set-quiesce 0 3 0",
            "cfg-set-quiesce 0 0 1",
            "cfg-set-quiesce 0 1 2",
            "cfg-set-quiesce 0 1 0 0",
            "cfg-get-inherit",
            "cat-ti self",
        ],
    ),
    (
        "cfg_set_quiesce_mask_zero",
        &[
            "cfg-set-quiesce 0 0 0",
            "cfg-get-feat",
            "cat-ti self",
            "cfg-get-quiesce",
        ],
    ),
    (
        "cfg_get_quiesce",
        &[
            "cfg-get-feat",
            "cfg-get-quiesce",
            "cfg-set-quiesce 0 1 1",
            "cfg-get-quiesce",
            "cfg-get-quiesce 0",
            "cfg-get-quiesce 3",
            "prctl 64 1 2 1 buf",
        ],
    ),
    (
        "cfg_get_inherit",
        &[
            "cfg-get-inherit",
            "cfg-set-inherit 1",
            "cfg-get-inherit",
            "cat-ti self",
        ],
    ),
    (
        "cfg_set_inherit_refusals",
        &[
            "cfg-set-inherit 4",
            "cfg-set-inherit 0x80",
            "cfg-set-inherit 2",
            "cfg-set-inherit 6",
            "cfg-get-inherit",
            "cfg-set-inherit 0",
            "cfg-get-inherit",
            "cfg-set-inherit 1 1",
            "cfg-get-inherit",
        ],
    ),
    (
        "activation",
        &[
            "activate-get",
            "activate-set 1",
            "activate-set 0",
            "cfg-set-quiesce 0 1 0",
            "activate-get",
            "activate-set 2",
            "activate-set 3",
            "activate-set 1",
            "activate-get",
            "cat-ti self",
            "activate-set 0",
            "activate-get",
        ],
    ),
    (
        "activation_without_configuration",
        &["cfg-set-inherit 1", "activate-set 1", "cat-ti self"],
    ),
    (
        "oneshot",
        &[
            "cfg-set-quiesce 0 1 1",
            "cat-ti self",
            "activate-set 1",
            "cat-ti self",
            "cfg-get-quiesce",
        ],
    ),
    (
        "persistent",
        &[
            "cfg-set-quiesce 0 1 0",
            "activate-set 1",
            "activate-get",
            "activate-get",
            "cat-ti self",
        ],
    ),
    (
        "bad_pointers",
        &[
            "badptr feat-get 0",
            "badptr feat-get 1",
            "roptr feat-get 1",
            "badptr cfg-get-feat",
            "badptr cfg-get-quiesce",
            "badptr cfg-set-quiesce 0 1 0",
            "badptr cfg-set-inherit 1",
            "badptr activate-set 1",
            "badptr activate-get",
            "badptr cfg-get-inherit",
            "badptr cfg-set-quiesce 0 1 0 2",
            "cfg-set-quiesce 0 1 0",
            "badptr activate-get",
            "badptr cfg-get-inherit",
            "roptr cfg-get-quiesce",
            "roptr cfg-set-quiesce 0 1 0",
        ],
    ),
    (
        "procfs_text",
        &[
            "cat-ti self",
            "cfg-set-quiesce 0 1 0",
            "cat-ti self",
            "activate-set 1",
            "cat-ti self",
            "cat-ti pid",
            "cat-ti tid",
            "cat-ti parent",
        ],
    ),
    ("procfs_paths", &["probe self", "probe tid"]),
    (
        "procfs_not_below_task",
        &[
            "cfg-set-quiesce 0 1 0",
            "probe task",
            "probe thread-self",
            "cat-ti task",
        ],
    ),
    (
        "procfs_missing_pids",
        &["cat-ti 1", "cat-ti 2147483647", "cat-ti 0"],
    ),
    (
        "procfs_by_tid",
        &[
            "thread-then",
            "cfg-set-quiesce 0 1 0",
            "cat-ti tid",
            "cat-ti self",
            "cat-ti pid",
        ],
    ),
    (
        "fork_without_inherit",
        &[
            "cfg-set-quiesce 0 1 0",
            "activate-set 1",
            "fork-then",
            "activate-get",
            "cfg-get-feat",
            "cat-ti self",
        ],
    ),
    (
        "fork_inherit_conf",
        &[
            "cfg-set-quiesce 0 1 0",
            "activate-set 1",
            "cfg-set-inherit 1",
            "fork-then",
            "cfg-get-feat",
            "cfg-get-quiesce",
            "activate-get",
            "cfg-get-inherit",
            "cat-ti self",
        ],
    ),
    (
        "fork_inherit_active",
        &[
            "cfg-set-quiesce 0 1 0",
            "activate-set 1",
            "cfg-set-inherit 3",
            "fork-then",
            "activate-get",
            "cat-ti self",
        ],
    ),
    (
        "grandchildren",
        &[
            "cfg-set-quiesce 0 1 0",
            "cfg-set-inherit 1",
            "fork-then",
            "fork-then",
            "cfg-get-inherit",
            "cat-ti self",
        ],
    ),
    (
        "threads_inherit_active",
        &[
            "cfg-set-quiesce 0 1 0",
            "activate-set 1",
            "cfg-set-inherit 3",
            "thread-then",
            "activate-get",
            "cfg-get-inherit",
            "cat-ti tid",
        ],
    ),
    (
        "threads_without_inherit",
        &[
            "cfg-set-quiesce 0 1 0",
            "activate-set 1",
            "thread-then",
            "activate-get",
            "cat-ti tid",
        ],
    ),
    (
        "vfork_inherit_active",
        &[
            "cfg-set-quiesce 0 1 0",
            "activate-set 1",
            "cfg-set-inherit 3",
            "spawn-then",
            "activate-get",
            "cat-ti self",
        ],
    ),
    (
        "exec_keeps_the_state",
        &[
            "cfg-set-quiesce 0 1 0",
            "activate-set 1",
            "cfg-set-inherit 3",
            "exec-then",
            "activate-get",
            "cfg-get-inherit",
            "cat-ti self",
        ],
    ),
    (
        "thread_exec_keeps_its_state",
        &[
            "cfg-set-quiesce 0 1 0",
            "cfg-set-inherit 1",
            "activate-set 1",
            "thread-exec-then",
            "activate-get",
            "cat-ti self",
            "ids",
        ],
    ),
    ("ordinary_prctl", &["prctl 3 0 0 0 0"]),
];

/// The guest's script for one case: the calls natively, then under the emulator, each answer
/// between marker lines (`isol-rawcall` must be the guest's, isol-emu too).
pub fn guest_script(calls: &[&str]) -> String {
    let quoted: Vec<String> = calls.iter().map(|c| format!("'{c}'")).collect();
    differential_script(&format!("isol-rawcall {}", quoted.join(" ")))
}

/// The guest's script for any command: natively, then under the emulator, standard error with
/// standard output, each answer between marker lines with its exit status.
pub fn differential_script(cmd: &str) -> String {
    format!(
        "echo '== native'\n{cmd} 2>&1; echo \"rc=$?\"\n\
         echo '== emulated'\nisol-emu -- {cmd} 2>&1; echo \"rc=$?\"\necho '== end'"
    )
}

/// The two answers of [`guest_script`]'s output: (native, emulated), each with its exit line.
pub fn split(stdout: &str) -> Result<(Vec<String>, Vec<String>), String> {
    let mut native = Vec::new();
    let mut emulated = Vec::new();
    let mut cur: Option<&mut Vec<String>> = None;
    let mut seen_end = false;
    for line in stdout.lines() {
        match line {
            "== native" => cur = Some(&mut native),
            "== emulated" => cur = Some(&mut emulated),
            "== end" => {
                seen_end = true;
                cur = None;
            }
            l => {
                if let Some(v) = cur.as_mut() {
                    v.push(l.to_string());
                }
            }
        }
    }
    if !seen_end {
        return Err("the case did not run to its end".into());
    }
    Ok((native, emulated))
}

/// One answer with every process and thread id replaced by its order of appearance (`#1`,
/// `#2`, ...), in the JSON fields and in the paths and texts that contain them.
pub fn normalize(lines: &[String]) -> Vec<String> {
    let mut ids: Vec<u64> = Vec::new();
    let mut id_of = |n: u64| -> String {
        let i = ids.iter().position(|&x| x == n).unwrap_or_else(|| {
            ids.push(n);
            ids.len() - 1
        });
        format!("#{}", i + 1)
    };
    lines
        .iter()
        .map(|l| match serde_json::from_str::<Value>(l) {
            Ok(mut v) => {
                // Timings (isol-worker's longest gap) are the machine's, not the interface's, and
                // so are the addresses of the buffers passed (ASLR): a pointer argument is "ptr".
                if let Some(m) = v.as_object_mut() {
                    m.remove("max_gap_ns");
                    if let Some(Value::Array(args)) = m.get_mut("args") {
                        for a in args.iter_mut() {
                            if a.as_u64().is_some_and(|n| n >= 1 << 16) {
                                *a = Value::String("ptr".into());
                            }
                        }
                    }
                }
                let mut pairs: Vec<(String, String)> = Vec::new();
                for key in ["pid", "tid", "ppid", "child", "thread"] {
                    if let Some(n) = v.get(key).and_then(Value::as_u64) {
                        let name = id_of(n);
                        pairs.push((n.to_string(), name.clone()));
                        v[key] = Value::String(name);
                    }
                }
                let mut text = v.to_string();
                // Paths such as /proc/1234/task_isolation, and a child's wait status.
                for (n, name) in pairs {
                    text = text.replace(&format!("/{n}/"), &format!("/{name}/"));
                    text = text.replace(&format!("Pid({n})"), &format!("Pid({name})"));
                }
                text
            }
            Err(_) => l.clone(),
        })
        .collect()
}

/// Ok when the native and emulated answers of one case are the same (ids aside) and the
/// native one ran: else the first line that differs, both ways.
pub fn judge(stdout: &str) -> Result<(), String> {
    let (native, emulated) = split(stdout)?;
    if native.iter().any(|l| l.contains("refusing to run")) || native.len() < 2 {
        return Err(format!("the command did not run natively: {native:?}"));
    }
    let (a, b) = (normalize(&native), normalize(&emulated));
    if a == b {
        return Ok(());
    }
    let i = a
        .iter()
        .zip(&b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    Err(format!(
        "line {} differs: kernel {:?}, emulator {:?}",
        i + 1,
        a.get(i),
        b.get(i)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_numbered_in_order_of_appearance() {
        let a = vec![
            r#"{"call":"cat-ti pid","pid":4242,"tid":4242,"path":"/proc/4242/task_isolation"}"#
                .to_string(),
            r#"{"call":"x","pid":4242,"tid":4243}"#.to_string(),
            "rc=0".to_string(),
        ];
        let b = vec![
            r#"{"call":"cat-ti pid","pid":77,"tid":77,"path":"/proc/77/task_isolation"}"#
                .to_string(),
            r#"{"call":"x","pid":77,"tid":78}"#.to_string(),
            "rc=0".to_string(),
        ];
        assert_eq!(normalize(&a), normalize(&b));
        let c = vec![r#"{"call":"x","pid":77,"tid":77}"#.to_string()];
        assert_ne!(normalize(&c), normalize(&b[1..]));
    }

    #[test]
    fn a_difference_is_named() {
        let out = "== native\n{\"call\":\"a\",\"ret\":0}\nrc=0\n== emulated\n{\"call\":\"a\",\"ret\":-1}\nrc=0\n== end\n";
        let e = judge(out).unwrap_err();
        assert!(e.starts_with("line 1 differs"), "{e}");
        let same = "== native\n{\"call\":\"a\",\"ret\":0}\nrc=0\n== emulated\n{\"call\":\"a\",\"ret\":0}\nrc=0\n== end\n";
        assert_eq!(judge(same), Ok(()));
        assert!(judge("== native\nrc=2\n== emulated\nrc=0\n").is_err());
    }
}
