//! What the tests of the served API share: an app served on a loopback
//! port until dropped, a client of it ([`client`]), and how long a test
//! waits. Each test binary uses a part of it; the command's tests use it
//! too, to serve what `leasehold runs --server` talks to.
#![allow(dead_code)]

pub mod client;

use std::sync::Arc;
use std::time::Duration;

use leasehold::executor::{Executor, ExecutorOptions};
use leasehold::testing::ScriptedModel;
use leasehold::{Engine, MemoryStore};
use leasehold_server::{self as server, App, ServerOptions};
use tokio::net::TcpListener;

/// How long a test waits for the server to do what it should before
/// calling it failed. Generous for a loaded 2-core machine.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// An engine on a fresh store in memory whose runs play `model`.
pub async fn scripted_engine(model: ScriptedModel) -> Engine {
    Engine::builder()
        .model(Arc::new(model))
        .store(Arc::new(MemoryStore::new()))
        .build()
        .await
        .expect("engine")
}

/// The app of `engine` with the default executor options, served with
/// `options`.
pub fn app(engine: Engine, options: ServerOptions) -> Arc<App> {
    App::new(
        Executor::new(Arc::new(engine), ExecutorOptions::default()),
        options,
    )
}

/// An app served on a loopback port; stopped when dropped.
pub struct Served {
    /// `http://ADDR`.
    pub base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Served {
    /// Serves `app`.
    pub async fn start(app: Arc<App>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server::serve(listener, app, async {
            let _ = stopped.await;
        }));
        Self {
            base: format!("http://{addr}"),
            stop: Some(stop),
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
