//! What the crate's unit tests share.

use std::path::{Path, PathBuf};

/// A copy of the tree captured from the 6.12-rt guest (`tests/fixtures/debian-6.12-rt-isold`),
/// to change as a test needs: the directory that holds it (removed when dropped) and the
/// tree's root.
pub fn captured_tree() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("root");
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/debian-6.12-rt-isold");
    let cp = std::process::Command::new("cp")
        .arg("-a")
        .arg(&fixture)
        .arg(&tree)
        .status()
        .unwrap();
    assert!(cp.success(), "cp -a {}", fixture.display());
    (dir, tree)
}
