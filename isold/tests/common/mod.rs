//! Helpers shared by isold's integration tests.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// Copy a captured tree; files become 0644 (readable by the unprivileged user of the CLI
/// tests) whatever the checkout's modes.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
            std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
}

/// Run isold on the running system as an unprivileged user (nobody, when the tests run as
/// root): (exit code, stdout, stderr).
#[allow(dead_code)]
pub fn isold_unprivileged(args: &[&str]) -> (i32, String, String) {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(env!("CARGO_BIN_EXE_isold"));
    c.args(args);
    if nix::unistd::geteuid().is_root() {
        c.uid(65534).gid(65534);
    }
    let out = c.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Run isold with `args`, below `root` (`--root`) when given: (exit code, stdout, stderr).
// Each test binary compiles this module; cli.rs runs isold as another user instead.
#[allow(dead_code)]
pub fn isold_at(root: Option<&Path>, args: &[&str]) -> (i32, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_isold"));
    if let Some(r) = root {
        c.arg("--root").arg(r);
    }
    let out = c.args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
