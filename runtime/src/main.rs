//! The `leasehold` command; see [`leasehold::cli`].
//!
//! The binary, not the library, installs the tracing subscriber: events go
//! to stderr, filtered by `RUST_LOG` or else by the command's default, each
//! line scrubbed of secrets.

use std::process::ExitCode;

use clap::Parser;
use leasehold::cli::{Cli, ScrubbedStderr};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(cli.default_log_filter()));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Secrets never reach the log, whoever writes the line.
        .with_writer(ScrubbedStderr)
        .try_init();
    cli.run_to_exit()
}
