//! verify: the policy compared with the live system, read-only; and the files written but
//! not in effect yet (what a daemon's status lists as waiting).

use super::{evaluate, outcome, want_shown, Eval};
use crate::error::Result;
use crate::policy::plan::{plan, Op, Target};
use crate::policy::state::State;
use crate::policy::state::StateFiles;
use crate::policy::{common::report, Outcome, Policy, Report, Status};
use crate::sysroot::SysRoot;

/// Compare the live system with `policy`, read-only. Targets the last apply found
/// unchangeable (recorded in the runtime state file) are reported as such; files that are
/// right but not in effect yet (read at boot or at a module's load) are "waiting".
pub fn verify(root: &SysRoot, policy: &Policy, files: &StateFiles) -> Result<Report> {
    let unchangeable = State::unchangeable_of(&files.runtime)?;
    let mut rep = report("verify", Some(policy));
    for t in plan(policy, root)? {
        let status =
            match crate::cost::stage("check", t.item, || evaluate(root, &policy.isolated, &t)) {
                Eval::Done(Status::AlreadyRight) if matches!(t.op, Op::File { .. }) => {
                    takes_effect(root, &t)
                }
                Eval::Done(s) => s,
                Eval::Change { from, .. } => match unchangeable.get(&t.id) {
                    Some(reason) => Status::NotChangeable {
                        reason: reason.clone(),
                    },
                    None => Status::Deviates {
                        current: from,
                        want: want_shown(&t),
                    },
                },
            };
        rep.outcomes.push(outcome(&t, status));
    }
    if let Some(o) = grub_waiting(root) {
        rep.outcomes.push(o);
    }
    Ok(rep)
}

/// The policy's files that are written but not in effect yet, each with what it waits for:
/// cheap (no task scan), for a daemon's status.
pub fn waiting(root: &SysRoot, policy: &Policy) -> Result<Vec<Outcome>> {
    let mut out = Vec::new();
    for t in crate::policy::plan::file_targets(policy, root)? {
        if let Eval::Done(Status::AlreadyRight) = evaluate(root, &policy.isolated, &t) {
            let s = takes_effect(root, &t);
            if matches!(s, Status::Waiting { .. }) {
                out.push(outcome(&t, s));
            }
        }
    }
    out.extend(grub_waiting(root));
    Ok(out)
}

/// Whether a file that holds what the policy wants is in effect: `Waiting` with what it
/// takes, else `AlreadyRight`.
fn takes_effect(root: &SysRoot, t: &Target) -> Status {
    if !matches!(t.op, Op::File { .. }) {
        return Status::AlreadyRight;
    }
    let until = crate::policy::items::by_name(t.item).and_then(|i| (i.waiting)(root, t));
    match until {
        Some(until) => Status::Waiting { until },
        None => Status::AlreadyRight,
    }
}

/// The GRUB drop-in of `isold bootargs --write-grub`, when the running kernel lacks some of
/// its arguments: it waits for update-grub and a reboot.
fn grub_waiting(root: &SysRoot) -> Option<Outcome> {
    let path = crate::policy::bootargs::GRUB_DROP_IN;
    let text = root.read_to_string(path).ok()?;
    let cmdline = root.read_value_opt("/proc/cmdline").ok()??;
    let lacks: Vec<&str> = crate::policy::bootargs::drop_in_args(&text)
        .into_iter()
        .filter(|a| !crate::policy::bootargs::in_effect(&cmdline, a))
        .collect();
    let status = if lacks.is_empty() {
        Status::AlreadyRight
    } else {
        Status::Waiting {
            until: format!(
                "update-grub and a reboot: the running kernel lacks {}",
                lacks.join(" ")
            ),
        }
    };
    Some(Outcome {
        item: "bootargs".into(),
        id: format!("file:{path}"),
        label: path.into(),
        status,
    })
}
