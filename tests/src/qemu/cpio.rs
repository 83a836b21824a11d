//! A writer for the "newc" cpio format, the only one the kernel's initramfs unpacker reads.
//!
//! Hand-written because it is 80 lines and the cpio crates on crates.io either wrap the
//! `cpio` program or do not write device nodes; the format is fixed by
//! Documentation/driver-api/early-userspace/buffer-format.rst.

use std::collections::BTreeSet;

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFCHR: u32 = 0o020000;
const S_IFLNK: u32 = 0o120000;

/// An in-memory newc archive. Parent directories are added on demand, so callers only name
/// the files they care about.
#[derive(Debug, Default)]
pub struct Cpio {
    out: Vec<u8>,
    next_ino: u32,
    dirs: BTreeSet<String>,
    names: BTreeSet<String>,
}

impl Cpio {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether an entry of that path was already added.
    pub fn contains(&self, path: &str) -> bool {
        self.names.contains(path.trim_start_matches('/'))
    }

    pub fn dir(&mut self, path: &str) {
        let path = path.trim_matches('/');
        if path.is_empty() || self.dirs.contains(path) {
            return;
        }
        self.parents(path);
        self.dirs.insert(path.to_string());
        self.entry(path, S_IFDIR | 0o755, 0, b"");
    }

    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) {
        let path = path.trim_start_matches('/');
        self.parents(path);
        self.entry(path, S_IFREG | (mode & 0o7777), 0, data);
    }

    /// A character device node, e.g. /dev/console (5, 1): the kernel opens it for init's
    /// stdio before init has had a chance to mount devtmpfs.
    pub fn char_dev(&mut self, path: &str, major: u32, minor: u32) {
        let path = path.trim_start_matches('/');
        self.parents(path);
        self.entry(path, S_IFCHR | 0o600, (major << 8) | minor, b"");
    }

    /// A symbolic link to `target` (its data is the target's path).
    pub fn symlink(&mut self, path: &str, target: &str) {
        let path = path.trim_start_matches('/');
        self.parents(path);
        self.entry(path, S_IFLNK | 0o777, 0, target.as_bytes());
    }

    /// Closes the archive with the trailer and returns its bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, 0, b"");
        self.out
    }

    fn parents(&mut self, path: &str) {
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
    }

    fn entry(&mut self, name: &str, mode: u32, rdev: u32, data: &[u8]) {
        self.names.insert(name.to_string());
        self.next_ino += 1;
        let nlink = if mode & S_IFDIR == S_IFDIR { 2 } else { 1 };
        let fields = [
            self.next_ino,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime: fixed, so identical inputs give identical archives
            u32::try_from(data.len()).expect("initramfs member larger than 4 GiB"),
            0, // devmajor
            0, // devminor
            rdev >> 8,
            rdev & 0xff,
            u32::try_from(name.len() + 1).expect("name length"),
            0, // check: unused by newc (only crc format uses it)
        ];
        self.out.extend_from_slice(b"070701");
        for f in fields {
            self.out.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while self.out.len() % 4 != 0 {
            self.out.push(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_fields_and_alignment_follow_newc() {
        let mut c = Cpio::new();
        c.file("/a/b", 0o755, b"xyz");
        let bytes = c.finish();
        // first entry is the implied parent directory "a"
        assert_eq!(&bytes[..6], b"070701");
        assert_eq!(&bytes[110..112], b"a\0");
        assert_eq!(bytes.len() % 4, 0);
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("a/b\0"));
        assert!(text.contains("xyz"));
        assert!(text.contains("TRAILER!!!"));
        // mode of the file: regular, 0755
        let second = text.find("070701000000020").expect("second entry");
        assert_eq!(&text[second + 14..second + 22], "000081ed");
    }
}
