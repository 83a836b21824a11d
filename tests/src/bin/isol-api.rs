//! Drives every call of libtaskisol's task-isolation API on the calling task and prints one
//! JSON line per call: `{"step": .., "ok": .., "value": .., "error": .., "errno": ..}`.
//! Run it under `isol-emu` (tests/tests/lib_emu.rs checks the lines); on a stock kernel it
//! prints the detection failure and stops, issuing no task-isolation prctl.

use libtaskisol::abi;
use libtaskisol::{Inherit, QuiesceConfig, TaskIsolation};
use serde_json::{json, Value};

fn report<T: serde::Serialize>(step: &str, r: libtaskisol::Result<T>) {
    let line = match r {
        Ok(v) => json!({"step": step, "ok": true, "value": v}),
        Err(e) => json!({"step": step, "ok": false, "error": e.to_string(), "errno": e.errno()}),
    };
    println!("{line}");
}

fn state(ti: &TaskIsolation) -> libtaskisol::Result<String> {
    ti.thread_state().map(|s| s.to_string())
}

fn main() {
    let ti = match TaskIsolation::detect() {
        Ok(t) => t,
        Err(e) => {
            println!(
                "{}",
                json!({"step": "detect", "ok": false, "error": e.to_string()})
            );
            std::process::exit(1);
        }
    };
    println!("{}", json!({"step": "detect", "ok": true}));
    report("features", ti.features());
    report("supported_quiesce", ti.supported_quiesce());
    report("fresh.configured", ti.configured());
    report("fresh.quiesce_mask", ti.quiesce_mask());
    report("fresh.inherit", ti.inherit().map(|i| i.0));
    report("fresh.active", ti.active());
    report("fresh.state", state(&ti));

    let vm = abi::ISOL_F_QUIESCE_VMSTATS;
    report(
        "bad.oneshot_outside_mask",
        ti.set_quiesce(QuiesceConfig {
            mask: 0,
            oneshot: vm,
        }),
    );
    report("set_quiesce", ti.set_quiesce(QuiesceConfig::every_time(vm)));
    report("configured", ti.configured());
    report("quiesce_mask", ti.quiesce_mask());
    report("configured.state", state(&ti));

    report(
        "bad.inherit_active_without_conf",
        ti.set_inherit(Inherit(abi::ISOL_INHERIT_ACTIVE)),
    );
    report("set_inherit.conf", ti.set_inherit(Inherit::CONF));
    report("inherit", ti.inherit().map(|i| i.0));

    report("bad.activate_unknown_feature", ti.activate(1 << 5));
    report("activate", ti.activate(abi::ISOL_F_QUIESCE));
    report("active", ti.active());
    report("active.state", state(&ti));

    // A thread created now inherits the configuration (CONF) but not the active state.
    let child: Value = std::thread::spawn(|| {
        let ti = TaskIsolation::detect().expect("the interface is still there");
        json!({
            "configured": ti.configured().ok(),
            "active": ti.active().ok(),
            "inherit": ti.inherit().ok().map(|i| i.0),
            "state": ti.thread_state().ok().map(|s| s.to_string()),
        })
    })
    .join()
    .expect("thread");
    println!("{}", json!({"step": "thread", "ok": true, "value": child}));

    report("deactivate", ti.deactivate());
    report("deactivated.active", ti.active());

    // Oneshot: one sync, then the kernel clears the bit from the quiesce mask.
    report(
        "set_quiesce.oneshot",
        ti.set_quiesce(QuiesceConfig {
            mask: vm,
            oneshot: vm,
        }),
    );
    report("oneshot.activate", ti.activate(abi::ISOL_F_QUIESCE));
    report("oneshot.quiesce_mask_after_sync", ti.quiesce_mask());
    report("oneshot.state", state(&ti));
}
