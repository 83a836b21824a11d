//! isold.service in the Debian root of scripts/setup-debroot, booted with systemd as PID 1 on
//! Debian's 6.12-rt and sid's 7.x-rt (the suites that matter for restore: service, lifecycle,
//! containerd, package): the service itself (`service`), a production host's restarts and reboots
//! (`lifecycle`), a KVM host with libvirt (`libvirt`), containers under podman
//! (`containers`), the Debian package under dpkg (`package`) and restore after a partition
//! on a host booted with isolcpus= (`partition`, 7.x-rt). They are one test binary so
//! that the test harness runs two guests at a time: QEMU runs each guest on one host thread
//! (`-accel tcg,thread=single`), so two of them use the machine's two cores where one binary
//! per scenario left one idle.
//!
//! Run one with a filter: `cargo test -p taskisol-tests --features qemu --test qemu_debian
//! containers::`. Built only with `--features qemu` (see docs/TESTING.md).

use taskisol_tests::qemu::{Expect, StepOutput};

mod containerd;
mod containers;
mod libvirt;
mod lifecycle;
mod package;
mod partition;
mod service;

/// Every step starts on the housekeeping CPUs, so the step's own shell is not a wide task
/// the daemon narrows under it.
const PRE: &str = "taskset -pc 0-1 $$ >/dev/null\n";

/// The unit file as it ships.
const UNIT: &[u8] = include_bytes!("../../../dist/isold.service");

/// A number a step printed as `key=value`.
fn num(out: &StepOutput, key: &str) -> Option<f64> {
    out.field(key).and_then(|v| v.parse().ok())
}

/// A step printed `key=value` with a value of at most `max`.
fn at_most(key: &'static str, max: f64) -> Expect {
    Expect::that(
        &format!("{key} <= {max}"),
        move |o: &StepOutput| match num(o, key) {
            Some(n) if n <= max => Ok(()),
            other => Err(format!("{key} = {other:?}")),
        },
    )
}

/// A step printed `key=value` with a value of at least `min`.
fn at_least(key: &'static str, min: f64) -> Expect {
    Expect::that(
        &format!("{key} >= {min}"),
        move |o: &StepOutput| match num(o, key) {
            Some(n) if n >= min => Ok(()),
            other => Err(format!("{key} = {other:?}")),
        },
    )
}
