//! `make install`: the files a packager gets, where packagers expect them, and a unit that
//! runs the installed binary with the installed configuration.

use std::path::Path;
use std::process::Command;

fn make_install(destdir: &Path, vars: &[&str]) -> std::process::Output {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    // The release binaries: install-files copies whatever is there, and runs isold to make
    // the configuration's man page (a stand-in for chisol).
    let bins = destdir.join("built");
    std::fs::create_dir_all(&bins).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_isold"), bins.join("isold")).unwrap();
    std::fs::write(bins.join("chisol"), "#!/bin/sh\necho chisol \"$@\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bins.join("chisol"), std::fs::Permissions::from_mode(0o755)).unwrap();
    Command::new("make")
        .current_dir(repo)
        .arg("install-files")
        .arg(format!("DESTDIR={}", destdir.join("root").display()))
        .arg(format!("RELEASE_DIR={}", bins.display()))
        .args(vars)
        .output()
        .expect("make (package make) must be installed")
}

#[test]
fn make_install_puts_binaries_man_pages_unit_and_example_in_their_places() {
    let dir = tempfile::tempdir().unwrap();
    let out = make_install(dir.path(), &["PREFIX=/usr"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let root = dir.path().join("root");
    for (f, mode) in [
        ("usr/bin/isold", 0o755),
        ("usr/bin/chisol", 0o755),
        ("usr/share/man/man8/isold.8", 0o644),
        ("usr/share/man/man5/isold.toml.5", 0o644),
        ("usr/share/man/man1/chisol.1", 0o644),
        ("usr/lib/systemd/system/isold.service", 0o644),
        ("etc/isold/isold.toml.example", 0o644),
        ("usr/share/containers/oci/hooks.d/isold.json", 0o644),
        ("usr/share/bash-completion/completions/isold", 0o644),
        ("usr/share/zsh/vendor-completions/_isold", 0o644),
        ("usr/share/fish/vendor_completions.d/isold.fish", 0o644),
        ("usr/share/bash-completion/completions/chisol", 0o644),
        ("usr/share/zsh/vendor-completions/_chisol", 0o644),
        ("usr/share/fish/vendor_completions.d/chisol.fish", 0o644),
    ] {
        let m = std::fs::metadata(root.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(m.permissions().mode() & 0o777, mode, "{f}");
    }
    assert!(
        root.join("etc/systemd/system.conf.d").is_dir(),
        "the directory the service may write its drop-in to"
    );
    // The configuration itself is the administrator's: never installed.
    assert!(!root.join("etc/isold/isold.toml").exists());
    let unit = std::fs::read_to_string(root.join("usr/lib/systemd/system/isold.service")).unwrap();
    assert!(
        unit.lines()
            .any(|l| l == "ExecStart=/usr/bin/isold --config /etc/isold/isold.toml run"),
        "{unit}"
    );
    assert!(
        unit.contains("\nType=notify\n") && unit.contains("\nExecReload=/bin/kill -HUP $MAINPID\n")
    );
    // The OCI hook runs the installed binary.
    let hook: serde_json::Value = serde_json::from_slice(
        &std::fs::read(root.join("usr/share/containers/oci/hooks.d/isold.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(hook["hook"]["path"], "/usr/bin/isold");
    assert_eq!(hook["stages"], serde_json::json!(["prestart", "poststop"]));
    // The configuration's page lists every item, from its declaration, where the source
    // has its mark.
    let page = std::fs::read_to_string(root.join("usr/share/man/man5/isold.toml.5")).unwrap();
    assert!(!page.contains("@ITEMS@"), "the mark is replaced");
    for item in libtaskisol::policy::items::ALL {
        assert!(
            page.contains(&format!(".TP\n.B {}\n{}", item.name, item.man)),
            "{}",
            item.name
        );
    }
    // The example is a valid configuration.
    let example = root.join("etc/isold/isold.toml.example");
    libtaskisol::policy::config::Config::load(&example).unwrap();
    // The completions are isold's own, each in its shell's form, every command in them.
    let read = |f: &str| std::fs::read_to_string(root.join(f)).unwrap();
    let bash = read("usr/share/bash-completion/completions/isold");
    assert!(bash.contains("complete -F _isold"), "{bash}");
    let zsh = read("usr/share/zsh/vendor-completions/_isold");
    assert!(zsh.starts_with("#compdef isold\n"), "{zsh}");
    let fish = read("usr/share/fish/vendor_completions.d/isold.fish");
    use clap::CommandFactory;
    for cmd in isold::cli::Cli::command().get_subcommands() {
        let name = cmd.get_name();
        assert!(bash.contains(&format!("isold,{name})")), "{name} in bash's");
        assert!(fish.contains(&format!("-a \"{name}\"")), "{name} in fish's");
    }
    assert_eq!(
        read("usr/share/zsh/vendor-completions/_chisol"),
        "chisol --completions zsh\n",
        "chisol's, from chisol"
    );
}

#[test]
fn a_local_prefix_and_sysconfdir_reach_the_unit() {
    let dir = tempfile::tempdir().unwrap();
    let out = make_install(
        dir.path(),
        &["PREFIX=/opt/taskisol", "SYSCONFDIR=/opt/taskisol/etc"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let root = dir.path().join("root");
    let unit = std::fs::read_to_string(root.join("opt/taskisol/lib/systemd/system/isold.service"))
        .unwrap();
    assert!(unit.contains(
        "\nExecStart=/opt/taskisol/bin/isold --config /opt/taskisol/etc/isold/isold.toml run\n"
    ));
    assert!(unit.contains("\nConditionPathExists=/opt/taskisol/etc/isold/isold.toml\n"));
    let hook =
        std::fs::read_to_string(root.join("usr/share/containers/oci/hooks.d/isold.json")).unwrap();
    assert!(
        hook.contains(r#""path": "/opt/taskisol/bin/isold""#),
        "{hook}"
    );
    assert!(root
        .join("opt/taskisol/etc/isold/isold.toml.example")
        .is_file());
    assert!(root.join("opt/taskisol/share/man/man8/isold.8").is_file());
}

/// dist/kubernetes/: every object valid against the Kubernetes API's schema
/// (kubernetes-validate --strict: unknown fields are errors too), and the ConfigMap's
/// isold.toml a configuration isold accepts; the image the DaemonSet names is the one
/// scripts/build-image tags.
#[test]
fn the_kubernetes_manifests_are_valid_and_carry_a_valid_configuration() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cache = std::env::var_os("TASKISOL_CACHE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo.join(".cache"));
    let tool = cache.join("kubernetes-validate/bin/kubernetes-validate");
    assert!(
        tool.exists(),
        "{} is missing: run scripts/setup-qemu (as root: it installs python3-venv and kubernetes-validate into the cache)",
        tool.display()
    );
    let manifest = repo.join("dist/kubernetes/isold.yaml");
    let out = Command::new(&tool)
        .arg("--strict")
        .arg(&manifest)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    for kind in [
        "namespace/isold",
        "configmap/isold-config",
        "daemonset/isold",
    ] {
        assert!(
            text.contains(&format!("passed for resource {kind}")),
            "{text}"
        );
    }
    // The ConfigMap's isold.toml: the block under `isold.toml: |`, 4 spaces in.
    let yaml = std::fs::read_to_string(&manifest).unwrap();
    let toml: String = yaml
        .lines()
        .skip_while(|l| l.trim() != "isold.toml: |")
        .skip(1)
        .take_while(|l| l.starts_with("    ") || l.is_empty())
        .map(|l| format!("{}\n", l.get(4..).unwrap_or("")))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("isold.toml");
    std::fs::write(&file, &toml).unwrap();
    let config = libtaskisol::policy::config::Config::load(&file)
        .unwrap_or_else(|e| panic!("the ConfigMap's isold.toml: {e}\n{toml}"));
    assert!(config.metrics.is_some(), "{toml}");
    assert_eq!(config.on_stop.name(), "keep");
    assert!(yaml.contains("image: localhost/isold:latest"));
    let build = std::fs::read_to_string(repo.join("scripts/build-image")).unwrap();
    assert!(build.contains("-t localhost/isold:latest"));
    // The uninstall Job: valid, and running the script the image carries.
    let job = repo.join("dist/kubernetes/isold-uninstall.yaml");
    let out = Command::new(&tool)
        .arg("--strict")
        .arg(&job)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("passed for resource job/isold-uninstall"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job = std::fs::read_to_string(&job).unwrap();
    assert!(job.contains("/usr/share/isold/uninstall-host.sh"));
    assert!(build.contains("dist/container/uninstall-host.sh"));
    // /etc/default is not mounted whole (GRUB's configuration is there): only the file.
    for y in [&yaml, &job] {
        assert!(!y.contains("path: /etc/default,") && !y.contains("mountPath: /etc/default }"));
        assert!(y.contains("mountPath: /etc/default/irqbalance"));
    }
}
