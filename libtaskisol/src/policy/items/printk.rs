//! `printk`: the console log level, the first field of kernel.printk.

use super::{Item, Machine, Planning, Setting, BASE};
use crate::error::Result;
use crate::policy::target::{attr, Want};

/// The console log level's file.
pub const PRINTK: &str = "/proc/sys/kernel/printk";

/// The `printk` item.
pub const ITEM: Item = Item {
    name: "printk",
    doc: "console log level (first field of kernel.printk)",
    man: MAN,
    parse: |v| match v {
        "false" => Ok(None),
        _ => v
            .parse::<u8>()
            .ok()
            .filter(|n| *n <= 8)
            .map(|n| Some(n.to_string()))
            .ok_or_else(|| format!("takes a console log level 0..8 or false, not {v:?}")),
    },
    plan,
    restores: |kind, key| (kind == "printk" && key.is_empty()).then(|| PRINTK.into()),
    audit,
    ..BASE
};

const MAN: &str = r#"The console log level, the first field of kernel.printk (realtime presets: 4): a slow serial
console holds the CPU that prints."#;

fn plan(p: &mut Planning<'_>) -> Result<()> {
    if let Some(v) = p.policy.value("printk") {
        p.out.push(attr(
            "printk",
            "printk".into(),
            "console log level (kernel.printk)".into(),
            PRINTK.into(),
            Want::First(v.to_string()),
        ));
    }
    Ok(())
}

fn audit(m: &Machine<'_>, out: &mut Vec<Setting>) -> Result<()> {
    let level = crate::sysctl::read(m.root, "kernel.printk")
        .ok()
        .flatten()
        .and_then(|v| v.split_whitespace().next().map(str::to_string));
    let Some(level) = level else { return Ok(()) };
    let consoles = m.root.read_to_string("/proc/consoles").ok();
    let serial: Vec<String> = consoles
        .as_deref()
        .unwrap_or("")
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("ttyS") || n.starts_with("ttyAMA"))
        .map(str::to_string)
        .collect();
    let quiet_enough = level.parse::<u32>().is_ok_and(|l| l <= 4);
    let value = if serial.is_empty() {
        format!("console loglevel {level}")
    } else {
        format!(
            "console loglevel {level}, serial console {}",
            serial.join(", ")
        )
    };
    out.extend(Setting::judged(
        "printk",
        Some(value),
        |_| serial.is_empty() || quiet_enough,
        "a kernel message on a slow serial console can hold the printing CPU for over 10 ms",
        "isold item printk (4)",
    ));
    Ok(())
}
