//! chisol's command line. The man page (man/chisol.1) is checked against these definitions
//! by a test, so help and man never disagree.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{ArgAction, Parser, ValueEnum};

/// What `--fallback` allows when the kernel has no task-isolation interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FallbackArg {
    /// Fail and start nothing (the default).
    None,
    /// Start the workload when the kernel's own vmstat protection covers its CPUs.
    Native,
}

/// Start a command with task isolation, CPU affinity, real-time priority and cgroup placement.
#[derive(Debug, Parser)]
#[command(
    name = "chisol",
    version,
    disable_version_flag = true,
    about = "Run a command with task isolation, CPU pinning, RT priority and cgroup placement.",
    override_usage = "chisol [options] <command> [<argument>...]\n       chisol -i\n       chisol -p <pid>",
    after_help = "Examples:\n  chisol -q vmstat_sync -I conf oslat -f 1 -c 2-3\n  chisol -q vmstat_sync -a -I active --isolated -f 10 ./workload\n  chisol --isolated --cgroup /sys/fs/cgroup/rt --no-thp ./workload\n  chisol -p $(pidof oslat)"
)]
pub struct Cli {
    /// Quiesce kernel activity on return to user mode; LIST is comma-separated (vmstat_sync).
    #[arg(short = 'q', long = "quiesce", value_name = "LIST")]
    pub quiesce: Option<String>,

    /// Children inherit the configuration (conf) or the configuration and active state (active).
    #[arg(short = 'I', long = "inherit", value_name = "conf|active")]
    pub inherit: Option<String>,

    /// Activate the configured isolation before running the command (needs --quiesce).
    #[arg(short = 'a', long = "activate")]
    pub activate: bool,

    /// Print the task-isolation features the kernel supports and exit.
    #[arg(
        short = 'i',
        long = "info",
        conflicts_with_all = [
            "command", "quiesce", "inherit", "activate", "cpu_list", "isolated", "fifo",
            "rr", "no_thp", "cgroup", "fallback", "pid",
        ]
    )]
    pub info: bool,

    /// Show the task-isolation state, CPUs and policy of every thread of PID and exit.
    // Every option that changes a setting conflicts: `-p` would silently ignore it, and the
    // user would believe the setting was applied. (`--fallback` has a default: clap counts
    // only an explicit one as a conflict.)
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        conflicts_with_all = [
            "command", "quiesce", "inherit", "activate", "cpu_list", "isolated", "fifo",
            "rr", "no_thp", "cgroup", "fallback",
        ]
    )]
    pub pid: Option<i32>,

    /// Run the command on the CPUs of LIST (e.g. 2-3,6).
    #[arg(
        short = 'c',
        long = "cpu-list",
        value_name = "LIST",
        conflicts_with = "isolated"
    )]
    pub cpu_list: Option<String>,

    /// Run the command on the CPUs the kernel isolates (isolcpus, nohz_full, isolated cpuset partitions).
    #[arg(long = "isolated")]
    pub isolated: bool,

    /// Run the command with SCHED_FIFO at priority PRIO (1-99).
    #[arg(short = 'f', long = "fifo", value_name = "PRIO", conflicts_with = "rr",
          value_parser = clap::value_parser!(u32).range(1..=99))]
    pub fifo: Option<u32>,

    /// Run the command with SCHED_RR at priority PRIO (1-99).
    #[arg(short = 'r', long = "rr", value_name = "PRIO",
          value_parser = clap::value_parser!(u32).range(1..=99))]
    pub rr: Option<u32>,

    /// Disable transparent huge pages for the command (PR_SET_THP_DISABLE).
    #[arg(long = "no-thp")]
    pub no_thp: bool,

    /// Move into the cgroup v2 directory PATH (e.g. an isolated partition) before running the command.
    #[arg(long = "cgroup", value_name = "PATH")]
    pub cgroup: Option<PathBuf>,

    /// Without the task-isolation interface: fail (none), or run when the kernel's own vmstat protection covers the command's CPUs (native).
    #[arg(long = "fallback", value_name = "MODE", value_enum, default_value_t = FallbackArg::None)]
    pub fallback: FallbackArg,

    /// Print each step before it is applied.
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,

    /// With -i or -p: print JSON (documented in chisol(1)).
    #[arg(long = "json")]
    pub json: bool,

    /// Print the completion script of SHELL (bash, zsh, fish, elvish, powershell) and exit.
    #[arg(
        long = "completions",
        value_name = "SHELL",
        value_enum,
        exclusive = true
    )]
    pub completions: Option<clap_complete::Shell>,

    /// Print version information and exit.
    #[arg(short = 'V', long = "version", action = ArgAction::Version)]
    pub version: Option<bool>,

    /// The command to run, and its arguments (options after it belong to it).
    #[arg(value_name = "command", trailing_var_arg = true)]
    pub command: Vec<OsString>,
}
