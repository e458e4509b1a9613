//! The `leasehold` command; see [`leasehold_cli::cli`].
//!
//! The binary, not the library, installs the tracing subscriber: events go
//! to stderr, filtered by `RUST_LOG` or else by the command's default, each
//! line scrubbed of secrets, as text or (`--log-format json`) as JSON; the
//! text in colour only on a terminal, and never with `NO_COLOR`.
//!
//! The binary, not the library, also picks the allocator: an executor makes
//! many small allocations on one worker thread and frees them on another
//! (an event published by a run, written by the log's task), where glibc's
//! arenas contend; mimalloc's per-thread heaps free them without a lock
//! (`docs/benchmarks.md`, *Swarm*).

use std::process::ExitCode;

use clap::Parser;
use leasehold_cli::cli::{Cli, LogFormat, ScrubbedStderr};
use tracing_subscriber::EnvFilter;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Transparent huge pages off for this process (the system's setting
    // stands for every other): a server of many small, short-lived
    // allocations would fault memory in, and zero it, 2 MiB at a time —
    // a quarter of a swarm's CPU and 5 % of its memory
    // (`docs/benchmarks.md`, *Swarm*). Refused by an old kernel: no harm.
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_thp_disable(true);
    let cli = Cli::parse();
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(cli.default_log_filter()));
    let colour = Cli::log_in_colour(
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let log = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        // Secrets never reach the log, whoever writes the line.
        .with_writer(ScrubbedStderr);
    let _ = match cli.log_format() {
        LogFormat::Text => log.try_init(),
        // Each line an object, with the spans it is in: a run's carries
        // its `run_id` and `trace_id`.
        LogFormat::Json => log
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
    };
    cli.run_to_exit()
}
