//! The state: every original value isold changed, persisted before it is first overwritten,
//! and everything that keeps it safe. One room, whose imports go one way:
//!
//! - [`entry`]: one original ([`Original`]) and its [`Entry`], checked before it is ever
//!   written back;
//! - [`durable`]: writes, fsyncs and renames that survive a crash (and the fault injector of
//!   the library's own tests);
//! - `journal`: entries appended one line at a time, with their length and CRC-32;
//! - [`mod@file`]: a state file ([`State`]) and where the two live ([`StateFiles`]), over the
//!   three above;
//! - `ledger`: both files as one, what apply, verify and restore work on, over [`mod@file`].
//!
//! Nothing here imports the policy engine, and nothing below [`mod@file`] imports it.

pub mod durable;
pub mod entry;
pub mod file;
mod journal;
mod ledger;

pub use entry::{Entry, Original};
pub use file::*;
pub use journal::{append_entries, journal_path, set_aside_kept, set_aside_path, JOURNAL_MAX};
pub(crate) use journal::{ends_with_newline, journal_line, open_journal};
pub(crate) use ledger::Ledger;
