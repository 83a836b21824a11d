//! libtaskisol's task-isolation API, call by call, on the emulated patched kernel (the
//! isol-api program drives it; isol-emu implements the reference ABI), and on this stock
//! kernel, where it must stop at detection.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

const NONE: &str = "Configured state: none \nActive state: none \nQuiescing: none \n";
const CONFIGURED: &str =
    "Configured state: quiesce \nActive state: none \nQuiescing: vmstat_sync \n";
const ACTIVE: &str =
    "Configured state: quiesce \nActive state: quiesce \nQuiescing: vmstat_sync \n";

fn api_under_emu(emu_opts: &[&str]) -> (Option<i32>, HashMap<String, Value>, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_isol-emu"))
        .args(["--log", log.to_str().unwrap()])
        .args(emu_opts)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_isol-api"))
        .output()
        .unwrap();
    let steps = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["step"].as_str().unwrap().to_string(), v)
        })
        .collect();
    let log = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (out.status.code(), steps, log)
}

fn ok(steps: &HashMap<String, Value>, step: &str) -> Value {
    let v = steps.get(step).unwrap_or_else(|| panic!("no step {step}"));
    assert_eq!(v["ok"], true, "{step}: {v}");
    v["value"].clone()
}

fn einval(steps: &HashMap<String, Value>, step: &str, op: &str) {
    let v = steps.get(step).unwrap_or_else(|| panic!("no step {step}"));
    assert_eq!(v["ok"], false, "{step} must fail: {v}");
    assert_eq!(v["errno"], libc::EINVAL, "{step}: {v}");
    let msg = v["error"].as_str().unwrap();
    assert!(
        msg.starts_with(&format!("prctl {op}"))
            && msg.ends_with("failed with EINVAL: Invalid argument"),
        "{step}: {msg}"
    );
}

#[test]
fn every_api_call_on_the_emulated_kernel() {
    let (code, s, _) = api_under_emu(&[]);
    assert_eq!(code, Some(0));
    assert_eq!(ok(&s, "features"), 1, "ISOL_F_QUIESCE");
    assert_eq!(ok(&s, "supported_quiesce"), 1, "ISOL_F_QUIESCE_VMSTATS");
    // A fresh task has no context: reading the configuration gives zeros, the inheritance
    // and active state are EINVAL.
    assert_eq!(ok(&s, "fresh.configured"), 0);
    assert_eq!(ok(&s, "fresh.quiesce_mask"), 0);
    einval(&s, "fresh.inherit", "PR_ISOL_CFG_GET(I_CFG_INHERIT)");
    einval(&s, "fresh.active", "PR_ISOL_ACTIVATE_GET");
    assert_eq!(ok(&s, "fresh.state"), NONE);

    einval(
        &s,
        "bad.oneshot_outside_mask",
        "PR_ISOL_CFG_SET(I_CFG_FEAT, ISOL_F_QUIESCE",
    );
    ok(&s, "set_quiesce");
    assert_eq!(ok(&s, "configured"), 1);
    assert_eq!(ok(&s, "quiesce_mask"), 1);
    assert_eq!(ok(&s, "configured.state"), CONFIGURED);

    einval(
        &s,
        "bad.inherit_active_without_conf",
        "PR_ISOL_CFG_SET(I_CFG_INHERIT, 0x2)",
    );
    ok(&s, "set_inherit.conf");
    assert_eq!(ok(&s, "inherit"), 1);

    einval(
        &s,
        "bad.activate_unknown_feature",
        "PR_ISOL_ACTIVATE_SET(0x20)",
    );
    ok(&s, "activate");
    assert_eq!(ok(&s, "active"), 1);
    assert_eq!(ok(&s, "active.state"), ACTIVE);

    assert_eq!(
        ok(&s, "thread"),
        json!({"configured": 1, "active": 0, "inherit": 1, "state": CONFIGURED}),
        "a thread inherits the configuration (CONF), not the active state"
    );

    ok(&s, "deactivate");
    assert_eq!(ok(&s, "deactivated.active"), 0);

    ok(&s, "set_quiesce.oneshot");
    ok(&s, "oneshot.activate");
    assert_eq!(
        ok(&s, "oneshot.quiesce_mask_after_sync"),
        0,
        "after one sync the oneshot bit leaves the quiesce mask"
    );
    assert_eq!(
        ok(&s, "oneshot.state"),
        "Configured state: quiesce \nActive state: quiesce \nQuiescing: none \n"
    );
}

#[test]
fn kernel_refusals_surface_with_their_errno() {
    let (_, s, _) = api_under_emu(&["--fail", "63=EOPNOTSUPP"]);
    let v = &s["features"];
    assert_eq!(v["ok"], false);
    assert_eq!(v["errno"], libc::EOPNOTSUPP);
    assert_eq!(
        v["error"],
        "prctl PR_ISOL_FEAT_GET(0) failed with EOPNOTSUPP: Operation not supported"
    );
}

#[test]
fn stock_kernel_stops_at_detection_without_isolation_prctls() {
    assert!(
        !Path::new("/proc/self/task_isolation").exists(),
        "needs a stock host kernel"
    );
    let (code, s, log) = api_under_emu(&["--trace-only"]);
    assert_eq!(code, Some(1));
    assert_eq!(s.len(), 1, "{s:?}");
    let d = &s["detect"];
    assert_eq!(d["ok"], false);
    assert!(
        d["error"]
            .as_str()
            .unwrap()
            .contains("no /proc/self/task_isolation"),
        "{d}"
    );
    assert!(log
        .iter()
        .filter(|e| e["ev"] == "prctl")
        .all(|e| !(63..=67).contains(&e["option"].as_i64().unwrap())));
}
