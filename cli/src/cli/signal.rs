//! The one shutdown signal of every command: SIGINT (Ctrl-C), SIGTERM
//! (what systemd, Docker and Kubernetes send) and SIGHUP (the terminal
//! was closed, or the SSH session that ran the command dropped) stop
//! `run`, `runs resume`, `demo` and `serve` the same way.
//!
//! [`Signals::install`] replaces the default action of the three signals
//! (which would end the process at once, leave its runs held by a dead
//! process and its stdio MCP servers running, each in a process group of
//! its own) for the rest of the process's life. From then on no signal is
//! lost: one that arrives before anybody waits is kept, and every clone of
//! [`Signals`] sees it. The command then stops its runs in place — they
//! stay resumable —, kills its tool servers and exits with
//! [`Stop::exit_code`]: 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP
//! (128 plus the signal's number, as a shell reports a process a signal
//! ended). After a hangup nobody may read what the command says: what it
//! writes on a closed terminal is dropped (`say!`, `out!`), never a
//! panic.

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// Which signal asked the process to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// SIGINT: Ctrl-C at the terminal.
    Interrupt,
    /// SIGTERM: a service manager or `kill`.
    Terminate,
    /// SIGHUP: the terminal (or the SSH session) went away.
    Hangup,
}

impl Stop {
    /// The exit code after stopping on this signal: 128 plus its number.
    pub(crate) fn exit_code(self) -> u8 {
        match self {
            Self::Interrupt => super::EXIT_INTERRUPTED,
            Self::Terminate => super::EXIT_TERMINATED,
            Self::Hangup => super::EXIT_HUNG_UP,
        }
    }

    /// The signal's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Interrupt => "SIGINT",
            Self::Terminate => "SIGTERM",
            Self::Hangup => "SIGHUP",
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP, heard from [`Signals::install`] on. Clones
/// share what was heard.
#[derive(Clone, Debug)]
pub(crate) struct Signals {
    heard: watch::Receiver<Option<Stop>>,
}

impl Signals {
    /// Takes over SIGINT, SIGTERM and SIGHUP for the rest of the process's
    /// life. Must be called within the tokio runtime.
    pub(crate) fn install() -> std::io::Result<Self> {
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        let mut hangup = signal(SignalKind::hangup())?;
        let (tell, heard) = watch::channel(None);
        tokio::spawn(async move {
            loop {
                let stop = tokio::select! {
                    Some(()) = interrupt.recv() => Stop::Interrupt,
                    Some(()) = terminate.recv() => Stop::Terminate,
                    Some(()) = hangup.recv() => Stop::Hangup,
                    else => return,
                };
                // The first signal decides the exit code; a later one only
                // hears that the process is on its way out.
                if tell.borrow().is_some() {
                    say!(
                        "leasehold: {} received; already stopping (runs stop in place, tool \
                         servers are killed, within seconds)",
                        stop.name()
                    );
                } else {
                    tell.send_replace(Some(stop));
                }
            }
        });
        Ok(Self { heard })
    }

    /// Completes when SIGINT, SIGTERM or SIGHUP has arrived (at once if one already
    /// has) with which one came first.
    pub(crate) async fn stopped(&self) -> Stop {
        let mut heard = self.heard.clone();
        let first = heard.wait_for(Option::is_some).await.ok().and_then(|s| *s);
        match first {
            Some(stop) => stop,
            // The listener is gone (the runtime is shutting down): nothing
            // more will be heard.
            None => std::future::pending().await,
        }
    }

    /// The signal heard first, if one has arrived.
    pub(crate) fn heard(&self) -> Option<Stop> {
        *self.heard.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_codes_are_128_plus_the_signal_number() {
        assert_eq!(Stop::Interrupt.exit_code(), 128 + 2);
        assert_eq!(Stop::Terminate.exit_code(), 128 + 15);
        assert_eq!(Stop::Hangup.exit_code(), 128 + 1);
    }
}
