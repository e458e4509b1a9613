//! `leasehold demo`.

use std::process::ExitCode;

use clap::Args;

use super::{CliError, GlobalArgs};

/// `leasehold demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Let the person answer the escalation (on stdin, or on the dashboard
    /// with --serve) instead of answering it automatically.
    #[arg(long)]
    interactive: bool,
    /// Serve the dashboard while the demo runs, to watch it.
    #[arg(long)]
    serve: bool,
    /// Where the dashboard listens with --serve (port 0 picks a free port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7878")]
    addr: String,
}

pub(super) async fn run(_global: &GlobalArgs, _args: DemoArgs) -> Result<ExitCode, CliError> {
    Err(CliError::other("the demo is wired in the next change"))
}
