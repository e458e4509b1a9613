//! Routes a server's progress notifications to the evidence cell of the call
//! they belong to.
//!
//! Each call registers its progress token with the evidence of its lease;
//! every notification for that token becomes one item of evidence, with its
//! value and total: a value that rose is progress, one that did not is a
//! keepalive (see [`Evidence::progress_value`]). A
//! notification that arrives before its call has registered (the server can
//! be quicker than the task that sent the request) is held, a few at most,
//! and delivered at registration, so no progress is lost to that race; its
//! note is held cut to [`EARLY_NOTE_BYTES`], so what is held stays small
//! whatever the server sends. The evidence cell cuts every note to the
//! engine's `limits.progress_note` and coalesces what it stores.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use leasehold_actors::{Evidence, cut_note};
use rmcp::ClientHandler;
use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam, ProgressToken,
    ProtocolVersion,
};
use rmcp::service::{NotificationContext, RoleClient};

/// How many early notifications are held for calls not yet registered.
const EARLY_CAPACITY: usize = 64;

/// The most of an early notification's note that is held, in bytes: 64 of
/// them at most, whatever the size of a message (the evidence cuts it again
/// to its own bound when it is delivered).
const EARLY_NOTE_BYTES: usize = 4096;

/// The progress routes of one connection (progress tokens are counted per
/// connection, so routes never outlive it).
#[derive(Default)]
pub(super) struct ProgressRoutes {
    state: Mutex<Routes>,
}

/// A notification held until its call registers: its value, total and
/// note (cut).
#[derive(Clone)]
struct Early {
    value: f64,
    total: Option<f64>,
    note: String,
}

#[derive(Default)]
struct Routes {
    live: HashMap<ProgressToken, Evidence>,
    early: VecDeque<(ProgressToken, Early)>,
}

impl ProgressRoutes {
    fn lock(&self) -> MutexGuard<'_, Routes> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends the notifications for `token` to `evidence` from now on, and
    /// delivers those that came early.
    pub(super) fn register(&self, token: ProgressToken, evidence: Evidence) {
        let early: Vec<Early> = {
            let mut routes = self.lock();
            let mut early = Vec::new();
            routes.early.retain(|(held, notification)| {
                if *held == token {
                    early.push(notification.clone());
                    false
                } else {
                    true
                }
            });
            routes.live.insert(token, evidence.clone());
            early
        };
        for held in early {
            evidence.progress_value(held.value, held.total, held.note);
        }
    }

    /// Stops routing `token`.
    pub(super) fn unregister(&self, token: &ProgressToken) {
        let removed = self.lock().live.remove(token);
        drop(removed);
    }

    /// Reports one notification as evidence of its call.
    pub(super) fn deliver(&self, params: &ProgressNotificationParam) {
        let note = note(params);
        let evidence = {
            let mut routes = self.lock();
            match routes.live.get(&params.progress_token) {
                Some(evidence) => evidence.clone(),
                None => {
                    if routes.early.len() == EARLY_CAPACITY {
                        routes.early.pop_front();
                    }
                    routes.early.push_back((
                        params.progress_token.clone(),
                        Early {
                            value: params.progress,
                            total: params.total,
                            note: cut_note(note, EARLY_NOTE_BYTES),
                        },
                    ));
                    return;
                }
            }
        };
        // Outside the lock: reporting publishes an event.
        evidence.progress_value(params.progress, params.total, note);
    }
}

/// The note of a notification: the server's message, else `progress/total`.
fn note(params: &ProgressNotificationParam) -> String {
    match (&params.message, params.total) {
        (Some(message), _) if !message.is_empty() => message.clone(),
        (_, Some(total)) => format!("{}/{}", params.progress, total),
        (_, None) => format!("{}", params.progress),
    }
}

/// The client side of one MCP connection: introduces itself as leasehold and
/// routes progress notifications.
pub(super) struct Handler {
    routes: Arc<ProgressRoutes>,
}

impl Handler {
    pub(super) fn new(routes: Arc<ProgressRoutes>) -> Self {
        Self { routes }
    }
}

impl ClientHandler for Handler {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.routes.deliver(&params);
    }

    fn get_info(&self) -> ClientConfig {
        // The last protocol version with an `initialize` handshake: the one
        // every server of the 2025 line understands.
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("leasehold", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::NumberOrString;

    fn progress(
        token: i64,
        progress: f64,
        total: Option<f64>,
        message: Option<&str>,
    ) -> ProgressNotificationParam {
        let mut params =
            ProgressNotificationParam::new(ProgressToken(NumberOrString::Number(token)), progress);
        params.total = total;
        params.message = message.map(str::to_owned);
        params
    }

    #[test]
    fn notes_say_progress_of_total_or_the_servers_message() {
        assert_eq!(note(&progress(1, 3.0, Some(10.0), None)), "3/10");
        assert_eq!(note(&progress(1, 0.5, None, None)), "0.5");
        assert_eq!(
            note(&progress(1, 3.0, Some(10.0), Some("indexing"))),
            "indexing"
        );
    }

    #[test]
    fn notifications_before_registration_are_delivered_at_registration() {
        let routes = ProgressRoutes::default();
        routes.deliver(&progress(7, 1.0, Some(2.0), None));
        routes.deliver(&progress(8, 1.0, Some(2.0), None));
        let evidence = Evidence::detached();
        routes.register(ProgressToken(NumberOrString::Number(7)), evidence.clone());
        assert_eq!(evidence.count(), 1);
        routes.deliver(&progress(7, 2.0, Some(2.0), None));
        assert_eq!(evidence.count(), 2);
        routes.unregister(&ProgressToken(NumberOrString::Number(7)));
        routes.deliver(&progress(7, 3.0, Some(2.0), None));
        assert_eq!(evidence.count(), 2, "an unregistered call gets no evidence");
    }

    #[test]
    fn early_notes_are_held_cut() {
        let routes = ProgressRoutes::default();
        let huge = "x".repeat(1024 * 1024);
        for _ in 0..2 * EARLY_CAPACITY {
            routes.deliver(&progress(9, 1.0, None, Some(&huge)));
        }
        let held: usize = routes
            .lock()
            .early
            .iter()
            .map(|(_, held)| held.note.len())
            .sum();
        assert!(
            held <= EARLY_CAPACITY * (EARLY_NOTE_BYTES + 64),
            "{held} bytes held for calls not yet registered"
        );
    }
}
