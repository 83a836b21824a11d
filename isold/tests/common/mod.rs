//! Helpers shared by isold's integration tests.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

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
