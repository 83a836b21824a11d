//! `kthread_priority`: the rules of `[kthread_priority]` (the table is the configuration's).
//! Planned in the tasks' one pass over the threads ([`super::tasks`]), which reads every
//! thread once for both items.

use super::{Item, BASE};

/// The `kthread_priority` item.
pub const ITEM: Item = Item {
    name: "kthread_priority",
    doc: "the [kthread_priority] rules",
    man: MAN,
    ..BASE
};

const MAN: &str = r#"The rules of
.BR [kthread_priority] ,
matched against the kernel thread's name, not a command line
(realtime\-virtual\-host and \-guest: ksoftirqd/* fifo:2, ktimers/* fifo:2, ktimersoftd/*
fifo:3, rcuc/* fifo:4, rcub/* fifo:4)."#;
