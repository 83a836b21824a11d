//! Which paths name the emulated `/proc/<pid>/task_isolation`.
//!
//! The series registers the file only in `tgid_base_stuff` (fs/proc/base.c), so it exists at
//! `/proc/<pid>/` and `/proc/self/` but not under `/proc/<pid>/task/<tid>/` nor
//! `/proc/thread-self/`. A tid works at the top level because `/proc/<tid>` resolves any task.
//! Paths that do not match are left to the real kernel, where the file does not exist.

/// The process directory a matching path goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcDir {
    /// `/proc/self`: the calling task's thread group leader.
    SelfDir,
    /// `/proc/<n>`: task `n` (a tgid or any tid).
    Task(i32),
}

/// Matches an absolute path, after lexical clean-up of `//` and `.`, which always name the
/// directory they are in. A path with a `..` component is never matched: the kernel walks
/// `..` from the directory the walk reached, so `/proc/self/nonexistent/../task_isolation` is
/// ENOENT, and telling that apart needs every component looked up; the stock kernel answers
/// such a path (ENOENT, the file does not exist there), the only cost being that a roundabout
/// path that would reach the file on a patched kernel is not emulated. Relative paths,
/// `*at()` paths relative to a directory fd and a trailing slash are not matched either.
pub fn match_task_isolation(path: &[u8]) -> Option<ProcDir> {
    if path.first() != Some(&b'/') || path.last() == Some(&b'/') {
        return None;
    }
    let mut parts: Vec<&[u8]> = Vec::new();
    for comp in path.split(|&b| b == b'/') {
        match comp {
            b"" | b"." => {}
            b".." => return None,
            c => parts.push(c),
        }
    }
    let [b"proc", dir, b"task_isolation"] = parts.as_slice() else {
        return None;
    };
    if *dir == b"self" {
        return Some(ProcDir::SelfDir);
    }
    // proc's name_to_int(): decimal, no leading zero, fits in an int.
    if dir.is_empty() || dir[0] == b'0' || !dir.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(dir)
        .ok()?
        .parse::<i32>()
        .ok()
        .map(ProcDir::Task)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_only_the_tgid_level_file() {
        let m = |p: &str| match_task_isolation(p.as_bytes());
        assert_eq!(m("/proc/self/task_isolation"), Some(ProcDir::SelfDir));
        assert_eq!(m("/proc/42/task_isolation"), Some(ProcDir::Task(42)));
        assert_eq!(m("//proc/./42/./task_isolation"), Some(ProcDir::Task(42)));
        assert_eq!(m("/proc/self/../42/task_isolation"), None);
        assert_eq!(m("/proc/self/nonexistent/../task_isolation"), None);
        assert_eq!(m("/proc/42/task/43/task_isolation"), None);
        assert_eq!(m("/proc/thread-self/task_isolation"), None);
        assert_eq!(m("/proc/042/task_isolation"), None);
        assert_eq!(m("/proc/self/task_isolation/"), None);
        assert_eq!(m("proc/self/task_isolation"), None);
        assert_eq!(m("/proc/99999999999/task_isolation"), None);
    }
}
