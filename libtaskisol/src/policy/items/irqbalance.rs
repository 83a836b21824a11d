//! `irqbalance`: IRQBALANCE_BANNED_CPULIST = the isolated CPUs in irqbalance's defaults
//! file, where it exists.

use super::{read_file_opt, Item, Planning, BASE};
use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::policy::lines::{FileEdit, Line};
use crate::policy::target::Target;
use crate::sysroot::SysRoot;

/// irqbalance's defaults files isold edits: Debian's, then Red Hat's.
pub const IRQBALANCE_FILES: [&str; 2] = ["/etc/default/irqbalance", "/etc/sysconfig/irqbalance"];

/// The `irqbalance` item.
pub const ITEM: Item = Item {
    name: "irqbalance",
    doc: "IRQBALANCE_BANNED_CPULIST = the isolated CPUs",
    man: MAN,
    plan,
    files: &IRQBALANCE_FILES,
    applied_note: Some(
        "irqbalance: restart it (systemctl try-restart irqbalance) to use the banned CPUs",
    ),
    waiting,
    ..BASE
};

const MAN: &str = r#"IRQBALANCE_BANNED_CPULIST = the isolated CPUs in
.I /etc/default/irqbalance
(Debian) or
.I /etc/sysconfig/irqbalance
(RHEL), where they exist (all presets): the first uncommented assignment is replaced, or
one is appended; restore takes out only that change.
irqbalance reads the file when it starts (isold.service starts before irqbalance.service);
a running irqbalance keeps its old list until it is restarted, which verify and status say."#;

fn plan(p: &mut Planning<'_>) -> Result<()> {
    if !p.policy.on("irqbalance") {
        return Ok(());
    }
    for path in IRQBALANCE_FILES {
        if read_file_opt(p.root, path)?.is_none() {
            continue;
        }
        let edit = banned_cpus(&p.policy.static_isolated());
        p.out.push(Target::file("irqbalance", path, edit));
    }
    Ok(())
}

/// isold's one line in irqbalance's defaults: the first uncommented
/// IRQBALANCE_BANNED_CPULIST= set to `cpus`, or one appended.
pub fn banned_cpus(cpus: &CpuSet) -> FileEdit {
    FileEdit::Lines {
        lines: vec![Line::by_prefix(
            "IRQBALANCE_BANNED_CPULIST=",
            format!("IRQBALANCE_BANNED_CPULIST={cpus}"),
        )],
        append: true,
    }
}

/// `text` with its first uncommented IRQBALANCE_BANNED_CPULIST= replaced by `cpus`, or one
/// appended; everything else kept.
pub fn with_banned_cpus(text: &str, cpus: &CpuSet) -> String {
    banned_cpus(cpus).apply(Some(text))
}

/// irqbalance reads its defaults file when it starts: a daemon started before the file's
/// last change still bans the CPUs it read then.
fn waiting(root: &SysRoot, t: &Target) -> Option<String> {
    let (path, changed) = super::file_changed(root, t)?;
    let pid = crate::tasks::pids_named(root, "irqbalance")
        .ok()?
        .into_iter()
        .next()?;
    let started = crate::tasks::process_start_unix(root, pid).ok()??;
    (started < changed).then(|| {
        format!(
            "a restart of irqbalance (systemctl try-restart irqbalance): pid {pid} read {path} before it was changed"
        )
    })
}
