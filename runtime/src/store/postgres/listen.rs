//! The PostgreSQL store's change feed: one dedicated connection that
//! `LISTEN`s on the channel every write notifies (`pg_notify` in the
//! write's own statement or transaction, so a notification is delivered
//! only for a write that committed) and re-broadcasts each change to the
//! store's subscribers.
//!
//! When the connection drops (the server restarted, the network failed),
//! it is opened again after [`RECONNECT_AFTER`]; once `LISTEN` is in place
//! again a [`StoreChange::Resync`] tells subscribers to re-read what they
//! follow, since notifications sent meanwhile are lost. The first `LISTEN`
//! sends one too: a subscriber that subscribed before it may have missed
//! changes.

use std::time::Duration;

use leasehold_actors::{ChangeHub, StoreChange};
use tokio::sync::watch;
use tokio_postgres::AsyncMessage;
use tokio_postgres_rustls::MakeRustlsConnect;
use tokio_util::sync::CancellationToken;

/// The channel every write notifies.
pub(super) const CHANNEL: &str = "leasehold";

/// How long to wait before opening a dropped `LISTEN` connection again.
pub(super) const RECONNECT_AFTER: Duration = Duration::from_millis(500);

/// Starts the listener on the current tokio runtime; it stops when `stop`
/// is cancelled, and sets `ready` once its first `LISTEN` is in place.
/// Does nothing outside a runtime (and says so).
pub(super) fn start(
    mut config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    hub: ChangeHub,
    stop: CancellationToken,
    ready: watch::Sender<bool>,
    store: String,
) -> bool {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(%store, "the store's change feed needs a tokio runtime; not listening");
        return false;
    };
    // An idle connection on a dead network is found by TCP keepalives.
    config
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(30));
    runtime.spawn(async move {
        loop {
            match listen(&config, &tls, &hub, &stop, &ready).await {
                Ok(()) if stop.is_cancelled() => return,
                Ok(()) => tracing::warn!(%store, "the store's LISTEN connection closed"),
                Err(error) => {
                    let error = super::with_causes(&error);
                    tracing::warn!(%store, %error, "the store's LISTEN connection failed");
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(RECONNECT_AFTER) => {}
            }
        }
    });
    true
}

/// One `LISTEN` connection, until it drops or `stop` is cancelled.
async fn listen(
    config: &tokio_postgres::Config,
    tls: &MakeRustlsConnect,
    hub: &ChangeHub,
    stop: &CancellationToken,
    ready: &watch::Sender<bool>,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(tls.clone()).await?;
    let forward = async {
        while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let AsyncMessage::Notification(notification) = message? {
                match serde_json::from_str::<StoreChange>(notification.payload()) {
                    Ok(change) => hub.publish(change),
                    Err(error) => tracing::warn!(
                        payload = notification.payload(),
                        %error,
                        "a notification on the store's channel is not a change"
                    ),
                }
            }
        }
        Ok(())
    };
    let listening = async {
        client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
        hub.publish(StoreChange::Resync);
        ready.send_replace(true);
        std::future::pending::<Result<(), tokio_postgres::Error>>().await
    };
    tokio::select! {
        ended = forward => ended,
        failed = listening => failed,
        () = stop.cancelled() => Ok(()),
    }
}
