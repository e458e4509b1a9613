//! From a configuration to an engine: `Config::engine_builder` opens the
//! configured store, calls the configured model and names this executor;
//! what it cannot set up it refuses, naming what failed.

use std::time::Duration;

use leasehold::{
    Flow,
    config::{Config, EngineSetupError},
};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

/// A configuration with the default model at `base_url` and the store in
/// `data_dir`.
fn configured(base_url: Option<String>, data_dir: &std::path::Path) -> Config {
    let mut config = Config::default();
    config.model_base_url.value = base_url;
    config.model_name.value = Some("setup-model".to_owned());
    config.data_dir.value = data_dir.to_path_buf();
    config
}

/// Reads what the peer sends until it holds the end of a JSON body (the
/// request's last `}`) or the peer stops.
async fn read_request(stream: &mut tokio::net::TcpStream) -> String {
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let read = stream.read(&mut buffer).await.expect("the request");
        seen.extend_from_slice(buffer.get(..read).unwrap_or_default());
        let text = String::from_utf8_lossy(&seen);
        if read == 0 || text.contains("\"model\"") && text.trim_end().ends_with('}') {
            return text.into_owned();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_built_from_the_configuration_calls_its_model_keeps_runs_in_its_store_and_is_named()
 {
    let model = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let base_url = format!("http://{}/v1", model.local_addr().expect("its address"));
    let data = tempfile::tempdir().expect("a temp dir");
    let data_dir = data.path().join("runs");
    let config = configured(Some(base_url), &data_dir);

    let engine = config
        .engine_builder()
        .expect("the engine builder")
        .build()
        .await
        .expect("the engine");
    assert!(
        engine.owner_id().starts_with("leasehold@"),
        "{}",
        engine.owner_id()
    );
    assert_eq!(*engine.config(), config.engine_config());
    #[cfg(feature = "store")]
    assert!(data_dir.is_dir(), "the sled store is opened at data_dir");

    let flow: Flow = serde_json::from_value(serde_json::json!({
        "name": "setup", "task": "answer", "max_steps": 1, "stream": false
    }))
    .expect("flow");
    let handle = engine.start(flow).await.expect("started");
    let stored = engine.store().list_runs().await.expect("the runs");
    assert!(
        stored.iter().any(|r| r.run_id == handle.run_id()),
        "{stored:?}"
    );

    // The run's first model call reaches the configured endpoint, naming the
    // configured model.
    let (mut stream, _) = tokio::time::timeout(Duration::from_secs(60), model.accept())
        .await
        .expect("the model is called")
        .expect("a connection");
    let request = read_request(&mut stream).await;
    assert!(
        request.starts_with("POST /v1/chat/completions"),
        "{request}"
    );
    assert!(request.contains("\"setup-model\""), "{request}");
    drop(stream);
    engine.shutdown().await;
}

#[test]
fn a_configuration_without_a_model_endpoint_is_refused_naming_it_before_the_store_is_opened() {
    let data = tempfile::tempdir().expect("a temp dir");
    let data_dir = data.path().join("runs");
    let config = configured(None, &data_dir);

    let refused = config.engine_builder().err().expect("refused");
    assert!(matches!(refused, EngineSetupError::Model(_)), "{refused:?}");
    assert!(
        refused.to_string().contains("LEASEHOLD_MODEL_BASE_URL"),
        "{refused}"
    );
    assert!(!data_dir.exists(), "no store was opened");
}

#[cfg(feature = "store")]
#[test]
fn a_store_that_cannot_be_opened_is_refused_as_the_store() {
    let data = tempfile::tempdir().expect("a temp dir");
    let not_a_dir = data.path().join("a-file");
    std::fs::write(&not_a_dir, "not a store").expect("a file");
    let config = configured(Some("http://127.0.0.1:9/v1".to_owned()), &not_a_dir);

    let refused = config.engine_builder().err().expect("refused");
    assert!(matches!(refused, EngineSetupError::Store(_)), "{refused:?}");
}
