//! The inputs of scripts/build-kernel, as the script and the kernel's own tools expect them:
//! the series lists exactly the patches there are, each signed off and in order; the package
//! test's configuration (guest.config) keeps every option of the suite's test kernel
//! (test.config); the source version is pinned.

use std::path::PathBuf;

fn kernel_dir() -> PathBuf {
    taskisol_tests::qemu::workspace_root().join("kernel")
}

#[test]
fn the_series_lists_every_patch_in_order() {
    let dir = kernel_dir().join("patches");
    let series: Vec<String> = std::fs::read_to_string(dir.join("series"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(String::from)
        .collect();
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".patch"))
        .collect();
    files.sort();
    assert_eq!(series, files, "kernel/patches/series and the .patch files");
    for (i, name) in series.iter().enumerate() {
        assert!(
            name.starts_with(&format!("{:04}-", i + 1)),
            "{name} is patch {} of the series",
            i + 1
        );
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        assert!(
            text.contains("\nSigned-off-by: "),
            "{name} has no Signed-off-by"
        );
        assert!(
            text.contains(&format!("Subject: [PATCH {}/{}]", i + 1, series.len())),
            "{name}: its Subject does not number it {}/{}",
            i + 1,
            series.len()
        );
    }
}

fn options(name: &str) -> Vec<(String, String)> {
    std::fs::read_to_string(kernel_dir().join("config").join(name))
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("CONFIG_"))
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect()
}

#[test]
fn the_packaged_kernel_keeps_every_option_of_the_test_kernel() {
    let guest = options("guest.config");
    for (k, v) in options("test.config") {
        if k == "CONFIG_LOCALVERSION" {
            continue;
        }
        assert!(
            guest.iter().any(|(gk, gv)| *gk == k && *gv == v),
            "kernel/config/guest.config lacks {k}={v} of test.config"
        );
    }
    assert!(guest.contains(&("CONFIG_MODULES".into(), "y".into())));
    let first = std::fs::read_to_string(kernel_dir().join("config/guest.config")).unwrap();
    assert_eq!(
        first.lines().next(),
        Some("# allnoconfig fragment"),
        "scripts/build-kernel deb --config takes it as a fragment by its first line"
    );
}

#[test]
fn the_source_version_is_pinned() {
    let text = std::fs::read_to_string(kernel_dir().join("SOURCE")).unwrap();
    let version = text
        .lines()
        .find_map(|l| l.strip_prefix("version="))
        .expect("kernel/SOURCE has a version= line");
    assert!(version.starts_with("6.1."), "{version}");
}
