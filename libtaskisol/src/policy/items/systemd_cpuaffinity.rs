//! `systemd_cpuaffinity`: systemd's CPUAffinity = the housekeeping CPUs, in a drop-in read
//! at boot.

use super::{Item, Planning, BASE};
use crate::error::Result;
use crate::policy::lines::{FileEdit, Line};
use crate::policy::target::Target;
use crate::sysroot::SysRoot;

/// systemd's drop-in isold owns.
pub const CPUAFFINITY_CONF: &str = "/etc/systemd/system.conf.d/isold-cpuaffinity.conf";

/// The `systemd_cpuaffinity` item.
pub const ITEM: Item = Item {
    name: "systemd_cpuaffinity",
    doc: "systemd's CPUAffinity = the housekeeping CPUs",
    man: MAN,
    plan,
    files: &[CPUAFFINITY_CONF],
    applied_note: Some("systemd CPUAffinity: takes effect after `systemctl daemon-reexec`"),
    waiting,
    line_before_0_2: |l| l == "[Manager]" || l.starts_with("CPUAffinity="),
    ..BASE
};

const MAN: &str = r#"systemd's CPUAffinity = the housekeeping CPUs, in
.I /etc/systemd/system.conf.d/isold\-cpuaffinity.conf
(cpu\-partitioning): systemd, and every service it starts, runs there from the next boot on
(or after
.BR "systemctl daemon\-reexec" ;
a drop\-in written since the boot is reported as waiting, also after a daemon\-reexec, which
leaves no trace isold could read).
Under isold.service the directory
.I /etc/systemd/system.conf.d
must exist."#;

fn plan(p: &mut Planning<'_>) -> Result<()> {
    if !p.policy.on("systemd_cpuaffinity") {
        return Ok(());
    }
    let edit = FileEdit::Lines {
        lines: vec![
            Line::by_prefix(
                "# Written by isold",
                "# Written by isold: systemd and its services on the housekeeping CPUs.".into(),
            ),
            Line::by_prefix("[Manager]", "[Manager]".into()),
            Line::by_prefix(
                "CPUAffinity=",
                format!(
                    "CPUAffinity={}",
                    p.policy.online.difference(&p.policy.static_isolated())
                ),
            ),
        ],
        append: false,
    };
    p.out
        .push(Target::file("systemd_cpuaffinity", CPUAFFINITY_CONF, edit));
    Ok(())
}

/// systemd reads its drop-in as PID 1 at boot (and at `systemctl daemon-reexec`, which
/// leaves no trace isold could read): one written since the boot is not in effect. (PID 1's
/// own affinity says nothing: the tasks item narrows it at once.)
fn waiting(root: &SysRoot, t: &Target) -> Option<String> {
    let (_, changed) = super::file_changed(root, t)?;
    let booted = crate::tasks::boot_time_unix(root).ok()?;
    (changed >= booted).then(|| {
        "the next boot (or `systemctl daemon-reexec`): written after systemd (PID 1) started".into()
    })
}
