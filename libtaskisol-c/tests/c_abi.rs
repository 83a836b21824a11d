//! The C ABI as a C program meets it: the committed header is what cbindgen makes of the
//! source, and a C program compiled against it and linked with the shared library (by its
//! soname) runs. This host has a stock kernel: every call answers -EOPNOTSUPP and issues no
//! task-isolation prctl; the project's own kernel in QEMU runs the same library for real
//! (isol-meter, tests/tests/qemu.rs).

use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Where cargo put this crate's cdylib for the tests: beside the test binary
/// (target/<profile>/deps), or in the profile directory after a `cargo build`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let dir = [deps, deps.parent().unwrap()]
        .into_iter()
        .find(|d| d.join("libtaskisol.so").is_file())
        .unwrap_or(deps)
        .to_path_buf();
    dir
}

#[test]
fn the_header_is_what_cbindgen_makes_of_the_source() {
    let out = tempfile::tempdir().unwrap();
    let header = out.path().join("taskisol.h");
    let r = Command::new("cbindgen")
        .current_dir(crate_dir())
        .args([
            "--quiet",
            "--config",
            "cbindgen.toml",
            "--crate",
            "libtaskisol-c",
            "--output",
        ])
        .arg(&header)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run cbindgen ({e}): apt-get install cbindgen (scripts/setup-qemu does)")
        });
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let made = std::fs::read_to_string(&header).unwrap();
    let committed =
        std::fs::read_to_string(crate_dir().join("include/taskisol/taskisol.h")).unwrap();
    assert!(
        made == committed,
        "include/taskisol/taskisol.h is not what cbindgen makes of src/lib.rs: run make capi-header"
    );
}

#[test]
fn a_c_program_links_and_calls_it() {
    let lib = profile_dir();
    assert!(
        lib.join("libtaskisol.so").is_file(),
        "{} has no libtaskisol.so",
        lib.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("t.c");
    std::fs::write(
        &src,
        r#"#include <errno.h>
#include <stdio.h>
#include <taskisol.h>
int main(void)
{
	uint64_t v = 7, a = 9;
	struct taskisol_state s;
	int r;
	printf("available=%d\n", taskisol_available());
	r = taskisol_configured(&v);
	printf("configured=%d v=%llu\n", r, (unsigned long long)v);
	r = taskisol_activate_configured(&a);
	printf("activate_configured=%d a=%llu\n", r, (unsigned long long)a);
	printf("set_quiesce=%d\n", taskisol_set_quiesce(TASKISOL_QUIESCE_VMSTATS, 0));
	printf("thread_state=%d\n", taskisol_thread_state(0, &s));
	printf("null=%d\n", taskisol_features(NULL));
	printf("names=%s,%s\n", taskisol_names(TASKISOL_F_QUIESCE, 0), taskisol_names(TASKISOL_QUIESCE_VMSTATS, 1));
	printf("eopnotsupp=%d\n", -EOPNOTSUPP);
	return 0;
}
"#,
    )
    .unwrap();
    let exe = dir.path().join("t");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let r = Command::new(&cc)
        .args(["-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-I")
        .arg(crate_dir().join("include/taskisol"))
        .arg("-L")
        .arg(&lib)
        .arg("-ltaskisol")
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    // Linked by its soname, as an installed library is found.
    let r = Command::new("readelf")
        .arg("-d")
        .arg(lib.join("libtaskisol.so"))
        .output()
        .unwrap();
    let dynamic = String::from_utf8_lossy(&r.stdout);
    assert!(
        dynamic.contains("Library soname: [libtaskisol.so.0]"),
        "{dynamic}"
    );
    let soname_dir = dir.path().join("lib");
    std::fs::create_dir(&soname_dir).unwrap();
    std::fs::copy(
        lib.join("libtaskisol.so"),
        soname_dir.join("libtaskisol.so.0"),
    )
    .unwrap();
    let r = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &soname_dir)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let out = String::from_utf8_lossy(&r.stdout).into_owned();
    let eop = -libc::EOPNOTSUPP;
    if Path::new("/proc/self/task_isolation").exists() {
        assert!(out.contains("available=1"), "{out}");
        return;
    }
    assert_eq!(
        out,
        format!(
            "available=0\nconfigured={eop} v=7\nactivate_configured={eop} a=0\nset_quiesce={eop}\n\
             thread_state={eop}\nnull={}\nnames=quiesce,vmstat_sync\neopnotsupp={eop}\n",
            -libc::EFAULT
        )
    );
}
