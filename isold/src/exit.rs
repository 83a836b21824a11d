//! What every command of isold shares, at the bottom of the crate: its exit codes, and the
//! policy loaded from the configuration file.

use libtaskisol::policy::{config::Config, Policy};
use std::io::Write;

use libtaskisol::SysRoot;

/// Exit code: success (verify: no deviation).
pub const EXIT_OK: i32 = 0;
/// Exit code: a failure: a target that could not be set, a deviation (verify), a boot
/// argument missing (bootargs), the kernel's state unreadable.
pub const EXIT_FAILURE: i32 = 1;
/// Exit code: the command line cannot be used (no command, an unknown command or option, a
/// malformed value); nothing was read or changed.
pub const EXIT_USAGE: i32 = 2;
/// Exit code of `isold status`: `isold run` is not running (LSB: "program is not running").
pub const EXIT_NOT_RUNNING: i32 = 3;
/// Exit code of `isold status`: whether it runs cannot be told (its status file cannot be
/// read: permission denied, or not valid). LSB: "program or service status is unknown".
pub const EXIT_STATUS_UNKNOWN: i32 = 4;
/// Exit code of every command whose configuration or state file cannot be used (unreadable,
/// invalid, of another version): nothing was changed, and running it again does not help
/// (isold.service has RestartPreventExitStatus=6). LSB: "program is not configured".
pub const EXIT_NOT_CONFIGURED: i32 = 6;

pub fn fail(msg: impl std::fmt::Display) -> i32 {
    eprintln!("isold: {msg}");
    EXIT_FAILURE
}

/// [`fail`] with the exit code a library error calls for: a state file that cannot be used is
/// [`EXIT_NOT_CONFIGURED`], anything else [`EXIT_FAILURE`].
pub fn fail_with(e: libtaskisol::Error) -> i32 {
    let code = match e {
        libtaskisol::Error::State { .. } => EXIT_NOT_CONFIGURED,
        _ => EXIT_FAILURE,
    };
    eprintln!("isold: {e}");
    code
}

/// A configuration that cannot be used: said, and [`EXIT_NOT_CONFIGURED`].
pub fn unconfigured(msg: impl std::fmt::Display) -> i32 {
    eprintln!("isold: {msg}");
    EXIT_NOT_CONFIGURED
}

/// A command line that cannot be used: said with the hint to --help, and [`EXIT_USAGE`].
pub fn usage(msg: impl std::fmt::Display) -> i32 {
    eprintln!("isold: {msg}\nTry 'isold --help' for more information.");
    EXIT_USAGE
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
