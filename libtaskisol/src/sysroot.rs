//! Where the kernel's files live: `/proc`, `/sys`, `/dev`, `/etc`.
//!
//! Every file access of the library goes through a [`SysRoot`], so that tests (and tools that
//! inspect a captured tree) can point the library at a fixture directory instead of `/`.
//! Paths are always given in the kernel's absolute form (`/proc/interrupts`) and joined to the
//! root here, in one place.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::cost::{self, Call};
use crate::error::{Error, Result};

/// The root directory under which `/proc`, `/sys`, `/dev` and `/etc` are found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysRoot {
    root: PathBuf,
}

impl Default for SysRoot {
    fn default() -> Self {
        Self::host()
    }
}

impl SysRoot {
    /// The running system: files are read at their real paths.
    pub fn host() -> Self {
        SysRoot {
            root: PathBuf::from("/"),
        }
    }

    /// A tree that mirrors the kernel's layout below `root` (e.g. a test fixture).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        SysRoot { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// True when this is the running system's `/`.
    pub fn is_host(&self) -> bool {
        self.root == Path::new("/")
    }

    /// The real path of the kernel path `abs` (`/proc/cmdline` -> `<root>/proc/cmdline`).
    /// Relative paths are taken as relative to the root as well.
    pub fn path(&self, abs: impl AsRef<Path>) -> PathBuf {
        let abs = abs.as_ref();
        let rel = abs.strip_prefix("/").unwrap_or(abs);
        if rel.as_os_str().is_empty() {
            return self.root.clone();
        }
        self.root.join(rel)
    }

    /// Whether the kernel path exists (following symlinks).
    pub fn exists(&self, abs: impl AsRef<Path>) -> bool {
        self.path(abs).exists()
    }

    /// Read a whole file as text. The error names the real path and the errno.
    ///
    /// /proc and /sys files report a size of 0, so a plain `fs::read_to_string` reads them
    /// 32 bytes first and doubles from there: six system calls for a task's `stat`. Reading
    /// into a page-sized buffer takes one (and one more to see the end).
    pub fn read_to_string(&self, abs: impl AsRef<Path>) -> Result<String> {
        let path = self.path(abs);
        let read = || -> std::io::Result<String> {
            let buf = read_all(&path)?;
            String::from_utf8(buf)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()))
        };
        read().map_err(|source| Error::Read { path, source })
    }

    /// Read a file the kernel prints as one record, whole on the first read (a task's `stat`,
    /// any text under a page): one `read(2)` when it returns less than the buffer and ends in
    /// a newline, the text complete; a regular file (a fake root's) returns less only at its
    /// end too. Anything else is read on to its end as [`SysRoot::read_to_string`] reads.
    /// A thread read costs one system call less: a whole pass over 500 threads under QEMU is
    /// 500 calls less.
    pub fn read_record(&self, abs: impl AsRef<Path>) -> Result<String> {
        let path = self.path(abs);
        let read = || -> std::io::Result<String> {
            let buf = read_upto(&path, true)?;
            String::from_utf8(buf)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()))
        };
        read().map_err(|source| Error::Read { path, source })
    }

    /// Read a whole file as bytes.
    pub fn read(&self, abs: impl AsRef<Path>) -> Result<Vec<u8>> {
        let path = self.path(abs);
        read_all(&path).map_err(|source| Error::Read { path, source })
    }

    /// Read a one-value file (sysfs attribute, sysctl) with the trailing newline removed.
    pub fn read_value(&self, abs: impl AsRef<Path>) -> Result<String> {
        let mut s = self.read_to_string(abs)?;
        while s.ends_with('\n') {
            s.pop();
        }
        Ok(s)
    }

    /// Read a file and parse its text with `parse`; a parse failure becomes
    /// [`Error::Parse`] naming the real path, the content and the reason.
    pub fn read_parsed<T>(
        &self,
        abs: impl AsRef<Path>,
        parse: impl FnOnce(&str) -> std::result::Result<T, String>,
    ) -> Result<T> {
        let abs = abs.as_ref();
        let content = self.read_to_string(abs)?;
        parse(&content).map_err(|reason| Error::Parse {
            path: self.path(abs),
            input: content,
            reason,
        })
    }

    /// Like [`SysRoot::read_value`], but a missing file is `Ok(None)`: many isolation files
    /// only exist with a kernel option or version (`nohz_full`, `cpuset.cpus.isolated`).
    pub fn read_value_opt(&self, abs: impl AsRef<Path>) -> Result<Option<String>> {
        match self.read_value(abs) {
            Ok(v) => Ok(Some(v)),
            Err(Error::Read { source, .. }) if source.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Write `data` to a file in one `write(2)`, as sysfs and procfs expect. The error names
    /// the real path, the data and the errno.
    pub fn write(&self, abs: impl AsRef<Path>, data: impl AsRef<[u8]>) -> Result<()> {
        use std::io::Write;
        let path = self.path(abs);
        let data = data.as_ref();
        let res = cost::call(Call::Open, || {
            fs::OpenOptions::new()
                .write(true)
                .truncate(!self.is_host())
                .open(&path)
        })
        .and_then(|mut f| {
            let w = cost::call(Call::Write, || f.write_all(data));
            cost::call(Call::Close, || drop(f));
            w
        });
        res.map_err(|source| Error::Write {
            path,
            data: String::from_utf8_lossy(data).into_owned(),
            source,
        })
    }

    /// Write a kernel attribute (sysctl, sysfs, `/proc/irq`) as [`SysRoot::write`] does. A
    /// captured tree also gets the trailing newline the kernel adds when it prints the value,
    /// so that reading it back behaves as on the running system.
    pub fn write_attr(&self, abs: impl AsRef<Path>, text: &str) -> Result<()> {
        if self.is_host() {
            self.write(abs, text)
        } else {
            self.write(abs, format!("{text}\n"))
        }
    }

    /// The numeric entry names of a directory, ascending: pids under `/proc`, IRQs under
    /// `/proc/irq`.
    pub fn read_dir_numbers<T: std::str::FromStr + Ord>(
        &self,
        abs: impl AsRef<Path>,
    ) -> Result<Vec<T>> {
        let mut v: Vec<T> = self
            .read_dir_names(abs)?
            .into_iter()
            .filter_map(|n| n.parse().ok())
            .collect();
        v.sort_unstable();
        Ok(v)
    }

    /// The entry names of a directory (unsorted), e.g. the tids in `/proc/<pid>/task`.
    pub fn read_dir_names(&self, abs: impl AsRef<Path>) -> Result<Vec<String>> {
        let path = self.path(abs);
        cost::call(Call::ReadDir, || list(path))
    }
}

/// The entry names of the directory at `path`.
fn list(path: PathBuf) -> Result<Vec<String>> {
    let rd = fs::read_dir(&path).map_err(|source| Error::Read {
        path: path.clone(),
        source,
    })?;
    let mut names = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|source| Error::Read {
            path: path.clone(),
            source,
        })?;
        names.push(ent.file_name().to_string_lossy().into_owned());
    }
    Ok(names)
}

/// The whole content of the file at `path`: one open, reads into a buffer that doubles from
/// 4 KiB (a /proc file has no size to ask for), one close.
fn read_all(path: &Path) -> io::Result<Vec<u8>> {
    read_upto(path, false)
}

/// The file's bytes: to the read that returns 0, or with `record`, to the first read that
/// returns less than it was given room for and ends in a newline (see
/// [`SysRoot::read_record`]).
fn read_upto(path: &Path, record: bool) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut f = cost::call(Call::Open, || fs::File::open(path))?;
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    let res = loop {
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        let room = buf.len() - len;
        match cost::call(Call::Read, || f.read(&mut buf[len..])) {
            Ok(0) => break Ok(()),
            Ok(n) if record && n < room && buf[len + n - 1] == b'\n' => {
                len += n;
                break Ok(());
            }
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => break Err(e),
        }
    };
    cost::call(Call::Close, || drop(f));
    res?;
    buf.truncate(len);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_kernel_paths_below_the_root() {
        let r = SysRoot::new("/tmp/fixture");
        assert_eq!(
            r.path("/proc/cmdline"),
            Path::new("/tmp/fixture/proc/cmdline")
        );
        assert_eq!(r.path("sys/x"), Path::new("/tmp/fixture/sys/x"));
        assert_eq!(
            SysRoot::host().path("/proc/1/stat"),
            Path::new("/proc/1/stat")
        );
    }

    #[test]
    fn a_record_is_read_whole_in_one_read_when_it_fits_and_ends_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let r = SysRoot::new(dir.path());
        // A pipe whose writer stays open: reading to the end would wait for ever; a record
        // is the first read's text, since it ends in a newline.
        let fifo = dir.path().join("stat");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let writer = std::thread::spawn({
            let fifo = fifo.clone();
            move || {
                use std::io::Write;
                let mut w = fs::OpenOptions::new().write(true).open(fifo).unwrap();
                w.write_all(b"1 (init) S 0\n").unwrap();
                std::thread::sleep(std::time::Duration::from_secs(2));
            }
        });
        let t = std::time::Instant::now();
        assert_eq!(r.read_record("/stat").unwrap(), "1 (init) S 0\n");
        assert!(
            t.elapsed() < std::time::Duration::from_secs(2),
            "waited for the writer"
        );
        writer.join().unwrap();
        // Longer than the buffer, or without a newline at the end: read to the end.
        let long = "x".repeat(5000) + "\n" + &"y".repeat(3000) + "\n";
        fs::write(dir.path().join("long"), &long).unwrap();
        assert_eq!(r.read_record("/long").unwrap(), long);
        fs::write(dir.path().join("bare"), "no newline").unwrap();
        assert_eq!(r.read_record("/bare").unwrap(), "no newline");
        assert_eq!(
            SysRoot::host()
                .read_record("/proc/self/stat")
                .unwrap()
                .split(' ')
                .next(),
            Some(std::process::id().to_string().as_str())
        );
        let e = r.read_record("/missing").unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOENT));
    }

    #[test]
    fn errors_name_the_file_and_errno() {
        let dir = tempfile::tempdir().unwrap();
        let r = SysRoot::new(dir.path());
        let e = r.read_value("/sys/devices/system/cpu/online").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("sys/devices/system/cpu/online"), "{msg}");
        assert!(msg.contains("No such file or directory"), "{msg}");
        assert_eq!(e.errno(), Some(libc::ENOENT));
        assert_eq!(
            r.read_value_opt("/sys/devices/system/cpu/nohz_full")
                .unwrap(),
            None
        );
    }

    #[test]
    fn the_host_is_slash() {
        assert_eq!(SysRoot::default(), SysRoot::host());
        assert!(SysRoot::host().is_host());
        assert_eq!(SysRoot::host().root(), Path::new("/"));
        let r = SysRoot::new("/tmp/fixture");
        assert!(!r.is_host());
        assert_eq!(r.root(), Path::new("/tmp/fixture"));
        assert_eq!(r.path("/"), Path::new("/tmp/fixture"));
    }

    #[test]
    fn reads_writes_and_lists_below_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let r = SysRoot::new(dir.path());
        std::fs::create_dir_all(dir.path().join("proc/42/task/43")).unwrap();
        std::fs::create_dir_all(dir.path().join("proc/42/task/42")).unwrap();
        std::fs::write(dir.path().join("proc/f"), [0xff, b'a', b'\n']).unwrap();
        assert!(r.exists("/proc/f"));
        assert!(!r.exists("/proc/g"));
        assert_eq!(r.read("/proc/f").unwrap(), [0xff, b'a', b'\n']);
        assert_eq!(r.read("/proc/g").unwrap_err().errno(), Some(libc::ENOENT));
        let mut names = r.read_dir_names("/proc/42/task").unwrap();
        names.sort();
        assert_eq!(names, ["42", "43"]);
        let e = r.read_dir_names("/proc/7/task").unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOENT));
        assert!(e.to_string().contains("proc/7/task"), "{e}");
        // A fixture file is replaced, as a sysfs attribute's value is.
        r.write("/proc/f", "1\n").unwrap();
        assert_eq!(r.read("/proc/f").unwrap(), b"1\n");
        let e = r.write("/proc/none/x", "5\n").unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOENT));
        assert!(
            e.to_string().starts_with("failed to write '5' to ")
                && e.to_string().contains("proc/none/x"),
            "{e}"
        );
        // Only a missing file is "absent"; any other error is one.
        let e = r.read_value_opt("/proc/f/x").unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOTDIR));
        assert_eq!(r.read_value_opt("/proc/f").unwrap().as_deref(), Some("1"));
    }

    #[test]
    fn read_value_strips_newlines_only() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        std::fs::write(dir.path().join("proc/x"), " 0-3 \n").unwrap();
        assert_eq!(
            SysRoot::new(dir.path()).read_value("/proc/x").unwrap(),
            " 0-3 "
        );
    }
}
