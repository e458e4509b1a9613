//! [`ServerLimits`]: what the HTTP server's clients may hold, and for how
//! long. It lives here, not in `leasehold-server`, because configuration
//! reads and prints the `server.*` keys in every build, so one
//! configuration file serves every build; the server re-exports it.

use std::time::Duration;

/// What the server's clients may hold, and for how long. None of these
/// bounds an event stream's life or a run's: a run never hangs off a
/// request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// How long a client may take to send a request's headers; an idle
    /// kept-alive connection is closed after as long.
    pub header_timeout: Duration,
    /// How long a client may take to send a request's body.
    pub body_timeout: Duration,
    /// Open connections at once; further clients wait to be accepted.
    pub max_connections: u32,
    /// Event streams open at once; past it a 503 with `Retry-After`.
    pub max_event_streams: u32,
    /// On shutdown, how long requests in flight may take to finish.
    pub shutdown_grace: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_connections: 512,
            max_event_streams: 128,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}
