//! What every command of isold shares, at the bottom of the crate: its exit codes, and the
//! policy loaded from the configuration file.

use libtaskisol::policy::{config::Config, Policy};
use std::io::Write;

use libtaskisol::SysRoot;

/// Exit code: success (verify: no deviation).
pub const EXIT_OK: i32 = 0;
/// Exit code: failure, invalid configuration, or (verify) a deviation.
pub const EXIT_FAILURE: i32 = 1;
/// Exit code of `isold status`: `isold run` is not running (LSB: "program is not running").
pub const EXIT_NOT_RUNNING: i32 = 3;
/// Exit code of `isold status`: whether it runs cannot be told (its status file cannot be
/// read: permission denied, or not valid). LSB: "program or service status is unknown".
pub const EXIT_STATUS_UNKNOWN: i32 = 4;
/// Exit code of `isold run` when its configuration or state file cannot be used: restarting
/// does not help (isold.service has RestartPreventExitStatus=6). LSB: "program is not
/// configured".
pub const EXIT_NOT_CONFIGURED: i32 = 6;

pub fn fail(msg: impl std::fmt::Display) -> i32 {
    eprintln!("isold: {msg}");
    EXIT_FAILURE
}

/// The policy of the file at `path`, or the message that says why not.
pub fn load_policy(path: &std::path::Path, root: &SysRoot) -> Result<Policy, String> {
    let config = Config::load(path).map_err(|e| e.to_string())?;
    Policy::resolve(config, root).map_err(|e| e.to_string())
}

/// Print `text` on standard output: a write error (a closed pipe, a full disk) is a failure.
pub fn print_out(text: &str) -> i32 {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => EXIT_OK,
        Err(e) => fail(format!(
            "write error: {}",
            libtaskisol::error::io_strerror(&e)
        )),
    }
}
