//! isold's command line (man/isold.8 is checked against it by a test).

use std::path::PathBuf;

use clap::{ArgAction, Args, Parser, Subcommand};

/// Apply, verify and restore an isolated-CPU policy.
#[derive(Debug, Parser)]
#[command(
    name = "isold",
    version,
    disable_version_flag = true,
    about = "Isolate CPUs for latency-critical work: apply, verify and restore an isolation policy.",
    after_help = "Examples:\n  isold apply                       # /etc/isold/isold.toml\n  isold verify --json\n  isold --config ./isold.toml apply\n  isold audit --duration 5\n  isold bootargs\n  isold restore"
)]
pub struct Cli {
    /// The configuration file [default: /etc/isold/isold.toml below --root].
    #[arg(short = 'c', long = "config", value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,

    /// Act on the /proc, /sys, /etc and /run below DIR instead of the running system (a captured tree).
    #[arg(long = "root", value_name = "DIR", global = true)]
    pub root: Option<PathBuf>,

    /// The state file that keeps the original values of the running kernel [default: /run/isold/state.json below --root].
    #[arg(long = "state", value_name = "FILE", global = true)]
    pub state: Option<PathBuf>,

    /// The state file that keeps the original content of the files isold writes, across reboots [default: /var/lib/isold/state.json below --root].
    #[arg(long = "persistent-state", value_name = "FILE", global = true)]
    pub persistent_state: Option<PathBuf>,

    /// Print version information and exit.
    #[arg(short = 'V', long = "version", action = ArgAction::Version)]
    pub version: Option<bool>,

    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Output options shared by the commands.
#[derive(Debug, Args)]
pub struct Output {
    /// Print the report as JSON (documented in isold(8)).
    #[arg(long = "json")]
    pub json: bool,

    /// List every target, also those already right or left alone.
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,

    /// Print where the time went to standard error: by stage and item, and the system calls by kind.
    #[arg(long = "timings")]
    pub timings: bool,
}

/// Options of `isold restore`.
#[derive(Debug, Args)]
pub struct RestoreArgs {
    #[command(flatten)]
    pub out: Output,

    /// When a state file cannot be read, restore what can be read of it: every original on a
    /// whole line of its own is kept, the file is set aside as FILE.corrupt, and what was lost
    /// is counted (the package's removal uses it).
    #[arg(long = "salvage")]
    pub salvage: bool,
}

/// isold's commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Record the original values, apply the policy and read every value back.
    Apply(Output),
    /// Compare the running system with the policy; exit 1 on any deviation.
    Verify(Output),
    /// What apply would change, each value as it is and as the policy wants it; change nothing
    /// (exit 0 whatever it lists, 1 only when something cannot be read).
    Plan(Output),
    /// Put back every original value recorded by apply (refused while `isold run` runs).
    Restore(RestoreArgs),
    /// Check the configuration file and print the resolved policy; change nothing.
    Check(Output),
    /// Who can and who did disturb each isolated CPU, with the fix for each; changes no setting (a window records the tick_stop tracepoint, which interrupts every CPU once; --duration 0 touches nothing).
    Audit(AuditArgs),
    /// Every interruption of each isolated CPU, timed and named: the longest, and the sources ranked by the time they took; from the ledger of the running `isold run`, or recorded once with --duration.
    Noise(NoiseArgs),
    /// The kernel arguments the policy needs and which of them the running kernel lacks.
    Bootargs(BootargsArgs),
    /// Apply the policy and keep it true until SIGTERM or SIGINT (the service); on_stop says whether stopping restores.
    Run(RunArgs),
    /// Whether `isold run` is running, its policy and the corrections it made.
    Status(StatusArgs),
    /// The OCI hook: claim a starting container's CPUs from `isold run`, release them when it stops (the container's state on standard input).
    Hook(HookArgs),
    /// The containers' claims `isold run` holds.
    Claims(StatusArgs),
    /// Every item of the configuration's `[items]`: what it sets and its value in each preset.
    Items(ItemsArgs),
    /// Print the completion script of SHELL for isold's commands and options (the package installs bash's, zsh's and fish's).
    Completions(CompletionsArgs),
}

/// Options of `isold completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL", value_enum)]
    pub shell: clap_complete::Shell,
}

/// Options of `isold items`.
#[derive(Debug, Args)]
pub struct ItemsArgs {
    /// Print the isold.toml(5) page TEMPLATE with the items' paragraphs in place of its
    /// `.\" @ITEMS@` line (how the installed page is made).
    #[arg(long = "man-page", value_name = "TEMPLATE", hide = true)]
    pub man_page: Option<std::path::PathBuf>,

    /// Print the items as JSON (documented in isold(8)).
    #[arg(long = "json")]
    pub json: bool,
}

/// Options of `isold hook`.
#[derive(Debug, Args)]
pub struct HookArgs {
    /// What the container does when `isold run` is not running: start without isolated CPUs, or fail to start.
    #[arg(
        long = "if-down",
        value_name = "WHAT",
        value_enum,
        default_value = "start"
    )]
    pub if_down: IfDown,

    /// What the container does when `isold run` refuses its claim (CPUs the configuration does not give containers, another pod's CPUs): fail to start, or start without isolated CPUs.
    #[arg(
        long = "if-refused",
        value_name = "WHAT",
        value_enum,
        default_value = "fail"
    )]
    pub if_refused: IfDown,

    /// The hook stage (poststop releases; any other claims) [default: from the state's status].
    #[arg(long = "stage", value_name = "STAGE", value_parser = ["prestart", "createRuntime", "createContainer", "poststop"])]
    pub stage: Option<String>,
}

/// `isold hook --if-down` and `--if-refused`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IfDown {
    /// The container starts, without isolated CPUs (said on standard error).
    Start,
    /// The container does not start.
    Fail,
}

/// Options of `isold run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Longest time, in seconds, a value that has no change event (sysctls, sysfs, IRQs,
    /// workqueues) stays drifted before it is put back: each is read every half of it.
    #[arg(long = "interval", value_name = "SECS", default_value = "1",
          value_parser = parse_interval)]
    pub interval: f64,

    /// Seconds between checks of every thread's affinity (one system call each; catches
    /// affinity changes made without an exec).
    #[arg(long = "task-interval", value_name = "SECS", default_value = "10",
          value_parser = parse_interval)]
    pub task_interval: f64,

    /// Log more: -v each event acted on, -vv every event.
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    pub verbose: u8,
}

fn parse_interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.01..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?} is not a number of seconds from 0.01 to 3600"
        )),
    }
}

/// Options of `isold status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print the status as JSON.
    #[arg(long = "json")]
    pub json: bool,
}

/// Options of `isold audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// The CPUs to audit [default: the configuration's isolated CPUs when the file exists,
    /// else the CPUs the kernel isolates].
    #[arg(long = "cpus", value_name = "LIST")]
    pub cpus: Option<String>,

    /// Seconds to watch the CPUs for the "disturbed by" part, recording the kernel's
    /// tick_stop tracepoint meanwhile; 0 takes no window: what can disturb only, no rate,
    /// nothing enabled.
    #[arg(
        short = 'd',
        long = "duration",
        value_name = "SECS",
        default_value = "2"
    )]
    pub duration: f64,

    /// Also run the kernel's osnoise tracer on the CPUs during the window (needs root).
    #[arg(long = "osnoise")]
    pub osnoise: bool,

    /// Print the audit as JSON (documented in isold(8)).
    #[arg(long = "json")]
    pub json: bool,

    /// List every IRQ, task and kthread that can disturb each CPU.
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
}

/// Options of `isold noise`.
#[derive(Debug, Args)]
pub struct NoiseArgs {
    /// The CPUs to show: among those the running daemon records, or with --duration those to
    /// record [default: every one the daemon records; with --duration the configuration's
    /// isolated CPUs when the file exists, else the CPUs the kernel isolates].
    #[arg(long = "cpus", value_name = "LIST")]
    pub cpus: Option<String>,

    /// Record the CPUs' interruptions for SECS seconds, once, instead of reading the ledger of
    /// the running `isold run`: a tracing instance of its own, removed after, whose events
    /// (about 30 tracepoints) are enabled one by one at its start; enabling each interrupts
    /// every CPU once.
    #[arg(short = 'd', long = "duration", value_name = "SECS")]
    pub duration: Option<f64>,

    /// From the running daemon's ledger, the interruptions of the last DURATION only (90s,
    /// 10m, 2h, 1d; whole minutes, whole hours past the last hour) [default: since its start].
    #[arg(long = "since", value_name = "DURATION", conflicts_with = "duration")]
    pub since: Option<String>,

    /// Print the figures as JSON (documented in isold(8)).
    #[arg(long = "json")]
    pub json: bool,

    /// List every source of each CPU.
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
}

/// Options of `isold bootargs`.
#[derive(Debug, Args)]
pub struct BootargsArgs {
    /// The isolated CPUs [default: the configuration's when the file exists, else the CPUs
    /// the kernel isolates].
    #[arg(long = "cpus", value_name = "LIST")]
    pub cpus: Option<String>,

    /// Write every argument to /etc/default/grub.d/isold.cfg, replacing an earlier one GRUB's
    /// files have that the kernel would keep instead (then run update-grub).
    #[arg(long = "write-grub")]
    pub write_grub: bool,

    /// Print the arguments as JSON.
    #[arg(long = "json")]
    pub json: bool,
}
