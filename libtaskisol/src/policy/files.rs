//! Files on disk that isold writes: its state directories, its temporary files, and the
//! configuration files it edits for an item (irqbalance's defaults, modprobe.d, systemd's
//! system.conf.d, GRUB's drop-in).
//!
//! The rules, each the answer to a way a careless write hurts a host:
//! - isold's own directories are made 0700: they hold the originals of every value.
//! - A temporary file is created exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`): a symlink or file
//!   someone left under its name is never written through, only removed.
//! - A file that is replaced keeps its owner and mode (a 0600 file owned by another user stays
//!   so), and a symlink is never replaced by a file.
//! - Where the directory cannot take a temporary file (a service whose sandbox makes only the
//!   file itself writable), the file is rewritten in place.
//! - Undoing an edit undoes isold's own lines only ([`undo_edit`]): what an admin added since
//!   stays.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The flags of every file isold opens for writing in its own directories or in /etc:
/// `O_NOFOLLOW` (a symlink in its place is refused, never written through) and `O_CLOEXEC`.
pub const NOFOLLOW: i32 = libc::O_NOFOLLOW | libc::O_CLOEXEC;

/// Make `dir` and any missing parent, each new one mode 0700 (whatever the umask).
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut b = fs::DirBuilder::new();
    b.recursive(true).mode(0o700);
    b.create(dir)?;
    // DirBuilder's mode is filtered by the umask: set it exactly on the directory asked for.
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

/// Make `dir` private to its owner (0700) whoever created it and with whatever mode: a
/// directory of originals that others can read or enter is taken back. `Ok(Some(mode))`
/// when it had another mode. A symlink in its place is refused, never followed.
pub fn take_private_dir(dir: &Path) -> std::io::Result<Option<u32>> {
    match fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => private_dir(dir).map(|()| None),
        Err(e) => Err(e),
        Ok(m) if m.file_type().is_symlink() || !m.is_dir() => Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{} is not a directory", dir.display()),
        )),
        Ok(m) if m.mode() & 0o7777 == 0o700 => Ok(None),
        Ok(m) => {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
            Ok(Some(m.mode() & 0o7777))
        }
    }
}

/// Create `path` for writing, exclusively and never through a symlink, mode `mode`. A file
/// (or symlink) already there under that name is removed first (unlink never follows a
/// symlink); if another appears before the create, the create fails rather than use it.
pub fn create_exclusive(path: &Path, mode: u32) -> std::io::Result<fs::File> {
    let open = || {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(NOFOLLOW)
            .open(path)
    };
    match open() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            fs::remove_file(path)?;
            open()
        }
        other => other,
    }
}

/// The temporary name of `path` in its own directory (`.NAME.isold-tmp`).
pub fn temp_name(path: &Path) -> std::path::PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "isold".into(), |n| n.to_string_lossy());
    path.with_file_name(format!(".{name}.isold-tmp"))
}

/// Replace `path` with `bytes` atomically: a temporary file created exclusively in the same
/// directory, fsync, rename, fsync of the directory. The new file keeps the owner and mode of
/// the one it replaces; a new file is 0644 (`new_mode`: another mode for a new file). A
/// symlink at `path` is refused. When the directory does not take the temporary file
/// (read-only, as under a service's `ReadWritePaths=` of the file alone) and the file exists,
/// it is rewritten in place instead.
pub fn replace(path: &Path, bytes: &[u8], new_mode: Option<u32>) -> std::io::Result<()> {
    replace_with(path, bytes, new_mode, true)
}

/// [`replace`] without the fsyncs: atomic for a reader (the old file or the new one, never
/// a part), but a crash may leave either. For a file written again every few seconds whose
/// loss costs nothing (the metrics' textfile): the syncs were most of its cost.
pub fn replace_volatile(path: &Path, bytes: &[u8], new_mode: Option<u32>) -> std::io::Result<()> {
    replace_with(path, bytes, new_mode, false)
}

fn replace_with(
    path: &Path,
    bytes: &[u8],
    new_mode: Option<u32>,
    durable: bool,
) -> std::io::Result<()> {
    let old = match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => return Err(std::io::Error::other(
            "is a symlink: isold does not replace a symlink with a file; edit its target instead",
        )),
        Ok(m) => Some(m),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let tmp = temp_name(path);
    let mode = old
        .as_ref()
        .map_or(new_mode.unwrap_or(0o644), |m| m.mode() & 0o7777);
    let mut f = match create_exclusive(&tmp, 0o600) {
        Ok(f) => f,
        Err(e)
            if old.is_some()
                && matches!(e.raw_os_error(), Some(libc::EROFS) | Some(libc::EACCES)) =>
        {
            return rewrite_in_place(path, bytes);
        }
        Err(e) => return Err(e),
    };
    let written = (|| {
        if let Some(m) = &old {
            std::os::unix::fs::fchown(&f, Some(m.uid()), Some(m.gid()))?;
        }
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.write_all(bytes)?;
        if durable {
            f.sync_all()?;
        }
        drop(f);
        fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        // A file mounted alone (a pod's hostPath of one file, a unit's BindPaths=) cannot be
        // renamed over: it is rewritten in place.
        if old.is_some() && e.raw_os_error() == Some(libc::EBUSY) {
            return rewrite_in_place(path, bytes);
        }
        return Err(e);
    }
    if durable {
        sync_dir(path)?;
    }
    Ok(())
}

fn rewrite_in_place(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .custom_flags(NOFOLLOW)
        .open(path)?;
    f.write_all(bytes)?;
    f.set_len(bytes.len() as u64)?;
    f.sync_all()
}

/// fsync the directory of `path`, so that a rename in it survives a crash.
pub fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    fs::File::open(dir)?.sync_all()
}

/// Undo isold's edit of a file: `original` is the file before isold's first write (`None`: it
/// did not exist), `written` what isold wrote, `current` the file now. Lines are compared
/// without their line ends; every run of lines isold changed (replaced, or added) is looked
/// for in `current` and put back as it was in `original`, so lines added or changed elsewhere
/// since stay. `Ok(None)`: nothing is left (the file was isold's own; remove it);
/// `Err(line)`: a line isold wrote is no longer there, so its change cannot be told from the
/// admin's (the file is left as it is).
pub fn undo_edit(
    original: Option<&str>,
    written: &str,
    current: &str,
) -> Result<Option<String>, String> {
    undo(original, written, current, true)
}

/// [`undo_edit`] where a run of isold's lines that is no longer in `current` is left out of
/// the undo rather than stopping it: `current` without what remains of isold's edit. What a
/// second write of a file records as its original: the file as its administrator has it.
pub fn undo_edit_kept(original: Option<&str>, written: &str, current: &str) -> Option<String> {
    undo(original, written, current, false).unwrap_or_else(|_| Some(current.to_string()))
}

fn undo(
    original: Option<&str>,
    written: &str,
    current: &str,
    strict: bool,
) -> Result<Option<String>, String> {
    let orig: Vec<&str> = original.map_or_else(Vec::new, |o| o.lines().collect());
    let wrote: Vec<&str> = written.lines().collect();
    let mut cur: Vec<&str> = current.lines().collect();
    // Where each of isold's runs is found in `current`, searched in order.
    let mut from = 0;
    for hunk in hunks(&orig, &wrote) {
        let ours = &wrote[hunk.wrote.clone()];
        let theirs = &orig[hunk.orig.clone()];
        if ours.is_empty() {
            // isold only removed lines (no item does): nothing to find them by.
            if strict {
                return Err(theirs.first().copied().unwrap_or_default().to_string());
            }
            continue;
        }
        let Some(at) = (from..=cur.len().saturating_sub(ours.len()))
            .find(|&i| cur.len() >= i + ours.len() && &cur[i..i + ours.len()] == ours)
        else {
            if strict {
                return Err(ours[0].to_string());
            }
            continue;
        };
        cur.splice(at..at + ours.len(), theirs.iter().copied());
        from = at + theirs.len();
    }
    if original.is_none() && cur.iter().all(|l| l.trim().is_empty()) {
        return Ok(None);
    }
    let mut out = cur.join("\n");
    // The line end of the last line follows the file as it is now; an original without one
    // keeps its lack when nothing came after it.
    let ends = match original {
        Some(o) if cur == orig => o.ends_with('\n'),
        _ => current.ends_with('\n'),
    };
    if ends && !out.is_empty() {
        out.push('\n');
    }
    Ok(Some(out))
}

/// A run of lines that differs between `orig` and `wrote`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hunk {
    orig: std::ops::Range<usize>,
    wrote: std::ops::Range<usize>,
}

/// The runs of lines that differ between `a` and `b` (Myers' diff, from the `similar` crate).
fn hunks(a: &[&str], b: &[&str]) -> Vec<Hunk> {
    similar::capture_diff_slices(similar::Algorithm::Myers, a, b)
        .into_iter()
        .filter_map(|op| match op.as_tag_tuple() {
            (similar::DiffTag::Equal, _, _) => None,
            (_, orig, wrote) => Some(Hunk { orig, wrote }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state directory someone else made 0755 is taken back to 0700 (and said); one that is
    /// 0700 is left; a missing one is made 0700; a symlink in its place is refused.
    #[test]
    fn state_directories_are_taken_back_private() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("run/isold");
        fs::create_dir_all(&d).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(take_private_dir(&d).unwrap(), Some(0o755));
        assert_eq!(fs::metadata(&d).unwrap().mode() & 0o7777, 0o700);
        assert_eq!(take_private_dir(&d).unwrap(), None);
        let new = t.path().join("var/lib/isold");
        assert_eq!(take_private_dir(&new).unwrap(), None);
        assert_eq!(fs::metadata(&new).unwrap().mode() & 0o7777, 0o700);
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        assert!(take_private_dir(&link).is_err());
        let file = t.path().join("file");
        fs::write(&file, "").unwrap();
        assert!(take_private_dir(&file).is_err());
    }

    const DEBIAN: &str = "#IRQBALANCE_ONESHOT=\n#IRQBALANCE_BANNED_CPULIST=\n#OPTIONS=\"\"\n";

    #[test]
    fn an_appended_line_is_removed_and_the_admins_line_stays() {
        let wrote = format!("{DEBIAN}IRQBALANCE_BANNED_CPULIST=2-3\n");
        assert_eq!(
            undo_edit(Some(DEBIAN), &wrote, &wrote).unwrap().as_deref(),
            Some(DEBIAN)
        );
        let admin = format!("{wrote}IRQBALANCE_ARGS=\"--journal\"\n");
        assert_eq!(
            undo_edit(Some(DEBIAN), &wrote, &admin).unwrap().unwrap(),
            format!("{DEBIAN}IRQBALANCE_ARGS=\"--journal\"\n")
        );
        // The admin's line before isold's.
        let admin = format!("A=1\n{wrote}");
        assert_eq!(
            undo_edit(Some(DEBIAN), &wrote, &admin).unwrap().unwrap(),
            format!("A=1\n{DEBIAN}")
        );
    }

    /// What a second write records as the file's original: the file as its administrator has
    /// it, isold's own change taken out, and where isold's lines are gone from the file (the
    /// administrator removed them) the file as it is.
    #[test]
    fn a_second_writes_original_is_the_administrators_file() {
        let wrote = format!("{DEBIAN}IRQBALANCE_BANNED_CPULIST=3\n");
        let admin = format!("{wrote}IRQBALANCE_ARGS=\"--journal\"\n");
        assert_eq!(
            undo_edit_kept(Some(DEBIAN), &wrote, &admin).as_deref(),
            Some(format!("{DEBIAN}IRQBALANCE_ARGS=\"--journal\"\n").as_str())
        );
        let removed = format!("{DEBIAN}IRQBALANCE_ARGS=\"--journal\"\n");
        assert_eq!(
            undo_edit_kept(Some(DEBIAN), &wrote, &removed).as_deref(),
            Some(removed.as_str())
        );
        // isold made the file: nothing of it left once isold's lines are out.
        assert_eq!(undo_edit_kept(None, "A=1\n", "A=1\n"), None);
    }

    /// A file now shorter than isold's run of lines cannot hold it: not found (strict), the
    /// file as it is (kept).
    #[test]
    fn a_file_shorter_than_isolds_lines_does_not_hold_them() {
        let wrote = "X=1\nA=1\nB=2\n";
        assert!(undo_edit(Some("X=1\n"), wrote, "C=3\n").is_err());
        assert_eq!(
            undo_edit_kept(Some("X=1\n"), wrote, "C=3\n").as_deref(),
            Some("C=3\n")
        );
    }

    #[test]
    fn a_replaced_line_comes_back() {
        let orig = "X=1\nIRQBALANCE_BANNED_CPULIST=7\nY=2\n";
        let wrote = "X=1\nIRQBALANCE_BANNED_CPULIST=2-3\nY=2\n";
        let cur = "X=1\nIRQBALANCE_BANNED_CPULIST=2-3\nY=3\nZ=4\n";
        assert_eq!(
            undo_edit(Some(orig), wrote, cur).unwrap().unwrap(),
            "X=1\nIRQBALANCE_BANNED_CPULIST=7\nY=3\nZ=4\n"
        );
    }

    #[test]
    fn a_line_the_admin_changed_is_not_guessed_at() {
        let wrote = format!("{DEBIAN}IRQBALANCE_BANNED_CPULIST=2-3\n");
        let cur = format!("{DEBIAN}IRQBALANCE_BANNED_CPULIST=1-3\n");
        assert_eq!(
            undo_edit(Some(DEBIAN), &wrote, &cur).unwrap_err(),
            "IRQBALANCE_BANNED_CPULIST=2-3"
        );
    }

    #[test]
    fn isolds_own_file_goes_unless_the_admin_added_to_it() {
        let wrote = "# Written by isold\noptions kvm nx_huge_pages=0\n";
        assert_eq!(undo_edit(None, wrote, wrote).unwrap(), None);
        let cur = format!("{wrote}options kvm_intel nested=0\n");
        assert_eq!(
            undo_edit(None, wrote, &cur).unwrap().unwrap(),
            "options kvm_intel nested=0\n"
        );
    }

    #[test]
    fn a_missing_line_end_is_kept_where_it_was() {
        // with_banned_cpus ends an unterminated last line before appending.
        let orig = "A=1";
        let wrote = "A=1\nIRQBALANCE_BANNED_CPULIST=2-3\n";
        assert_eq!(undo_edit(Some(orig), wrote, wrote).unwrap().unwrap(), "A=1");
        let cur = format!("{wrote}B=2\n");
        assert_eq!(
            undo_edit(Some(orig), wrote, &cur).unwrap().unwrap(),
            "A=1\nB=2\n"
        );
    }

    #[test]
    fn hunks_are_the_runs_that_differ() {
        let h = hunks(&["a", "b", "c"], &["a", "x", "c", "d"]);
        assert_eq!(
            h,
            [
                Hunk {
                    orig: 1..2,
                    wrote: 1..2
                },
                Hunk {
                    orig: 3..3,
                    wrote: 3..4
                }
            ]
        );
        assert!(hunks(&["a"], &["a"]).is_empty());
        assert_eq!(
            hunks(&[], &["a"]),
            [Hunk {
                orig: 0..0,
                wrote: 0..1
            }]
        );
    }

    #[test]
    fn temporary_files_are_never_written_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("victim");
        fs::write(&target, "keep").unwrap();
        let path = dir.path().join("state.json");
        std::os::unix::fs::symlink(&target, temp_name(&path)).unwrap();
        replace(&path, b"new", None).unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "keep");
        assert_eq!(fs::read_to_string(&path).unwrap(), "new");
        assert!(!temp_name(&path).exists());
        // A symlink at the path itself is refused.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(replace(&link, b"x", None)
            .unwrap_err()
            .to_string()
            .contains("symlink"));
        assert_eq!(fs::read_to_string(&target).unwrap(), "keep");
    }

    #[test]
    fn a_replaced_file_keeps_its_mode_and_a_new_one_is_0644() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        fs::write(&path, "a").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        replace(&path, b"b", None).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o600);
        let new = dir.path().join("g");
        replace(&new, b"b", None).unwrap();
        assert_eq!(fs::metadata(&new).unwrap().mode() & 0o7777, 0o644);
    }

    /// A directory that takes no temporary file (a service sandbox that makes only the file
    /// writable; here a directory the writer may not write) gets the file rewritten in place:
    /// same inode, new bytes, the old tail cut. A new file there is an error.
    #[test]
    fn a_file_in_a_directory_that_takes_no_temporary_file_is_rewritten_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grub");
        fs::write(&path, "a much longer original line\n").unwrap();
        let ino = fs::metadata(&path).unwrap().ino();
        let try_replace = || -> (std::io::Result<()>, std::io::Result<()>) {
            (
                replace(&path, b"short\n", None),
                replace(&dir.path().join("new"), b"x", None),
            )
        };
        // SAFETY: geteuid has no preconditions.
        let (existing, new) = if unsafe { libc::geteuid() } != 0 {
            fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o555)).unwrap();
            let r = try_replace();
            fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
            r
        } else {
            // Root writes any directory: the write is made by a child as nobody, which may
            // write the file (its owner) but not the root-owned directory.
            fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
            std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
            // SAFETY: the child only makes system calls and allocates (glibc's malloc is
            // fork-safe) before _exit; the parent waits for it.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
            if pid == 0 {
                // SAFETY: plain system calls in the child, which leaves by _exit.
                unsafe {
                    if libc::setresgid(65534, 65534, 65534) != 0
                        || libc::setresuid(65534, 65534, 65534) != 0
                    {
                        libc::_exit(3);
                    }
                    let (a, b) = try_replace();
                    libc::_exit(match (a, b) {
                        (Ok(()), Err(_)) => 0,
                        (Err(_), _) => 1,
                        (Ok(()), Ok(())) => 2,
                    });
                }
            }
            let mut status = 0;
            // SAFETY: pid is our child; status is a valid pointer.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            assert!(libc::WIFEXITED(status), "child: {status:#x}");
            let code = libc::WEXITSTATUS(status);
            let err = || Err(std::io::Error::other(format!("child exit {code}")));
            match code {
                0 => (Ok(()), err()),
                2 => (Ok(()), Ok(())),
                _ => (err(), err()),
            }
        };
        existing.unwrap();
        assert!(new.is_err(), "a new file where no file can be made");
        assert_eq!(fs::read_to_string(&path).unwrap(), "short\n");
        assert_eq!(
            fs::metadata(&path).unwrap().ino(),
            ino,
            "rewritten in place"
        );
        assert!(!temp_name(&path).exists());
    }

    #[test]
    fn private_dirs_are_0700() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("run/isold");
        private_dir(&d).unwrap();
        assert_eq!(fs::metadata(&d).unwrap().mode() & 0o7777, 0o700);
        assert_eq!(
            fs::metadata(dir.path().join("run")).unwrap().mode() & 0o077,
            0
        );
    }
}
