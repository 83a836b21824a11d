//! Kernel parameters under `/proc/sys`, by their sysctl(8) names (`kernel.timer_migration`).

use crate::error::{Error, Result};
use crate::sysroot::SysRoot;

/// The kernel path of sysctl `name`: dots separate directories, as in sysctl(8); a name
/// written with slashes is taken as is. Refuses names that would leave `/proc/sys`.
pub fn path_of(name: &str) -> Result<String> {
    let rel = if name.contains('/') {
        name.to_string()
    } else {
        name.replace('.', "/")
    };
    if rel.is_empty()
        || rel
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == ".." || c.contains(char::is_whitespace))
    {
        return Err(Error::Invalid(format!("invalid sysctl name {name:?}")));
    }
    Ok(format!("/proc/sys/{rel}"))
}

/// Read sysctl `name` (trailing newline removed); `None` when this kernel has no such
/// parameter.
pub fn read(root: &SysRoot, name: &str) -> Result<Option<String>> {
    root.read_value_opt(path_of(name)?)
}

/// Write sysctl `name`.
pub fn write(root: &SysRoot, name: &str, value: &str) -> Result<()> {
    root.write(path_of(name)?, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_names_to_paths() {
        assert_eq!(
            path_of("kernel.timer_migration").unwrap(),
            "/proc/sys/kernel/timer_migration"
        );
        assert_eq!(
            path_of("net/ipv4/conf/eth0.100/rp_filter").unwrap(),
            "/proc/sys/net/ipv4/conf/eth0.100/rp_filter"
        );
        for bad in ["", "kernel..x", "../etc/passwd", "kernel/../../x", "a b"] {
            assert!(path_of(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reads_and_writes_below_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::new(dir.path());
        assert_eq!(read(&root, "kernel.timer_migration").unwrap(), None);
        std::fs::create_dir_all(dir.path().join("proc/sys/kernel")).unwrap();
        std::fs::write(dir.path().join("proc/sys/kernel/timer_migration"), "1\n").unwrap();
        assert_eq!(
            read(&root, "kernel.timer_migration").unwrap().as_deref(),
            Some("1")
        );
        write(&root, "kernel.timer_migration", "0").unwrap();
        assert_eq!(
            read(&root, "kernel/timer_migration").unwrap().as_deref(),
            Some("0")
        );
        assert!(write(&root, "kernel..x", "0").is_err());
    }
}
