//! `leasehold`'s cargo features: an embedder that turns the default features
//! off gets the engine without the stores' databases, the model client or
//! the MCP client — no reqwest, no hyper, no rmcp; with them on, still no
//! HTTP server, command line, demo or test utilities, which live in
//! `leasehold-server`, `leasehold-cli` and `leasehold-lab`. `openai` brings the model client (reqwest) alone, `mcp`
//! the MCP client (rmcp) without its server side. The dependency tree is
//! read with `cargo tree`, offline, from the lock file.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// rmcp's features that bring in its server side.
const RMCP_SERVER_FEATURES: [&str; 3] = [
    "server",
    "server-side-http",
    "transport-streamable-http-server",
];

/// What an embedder that brings its own model client and tool client must
/// not compile: the HTTP clients and servers, the MCP SDK, the command line.
const HEAVY: [&str; 6] = ["rmcp", "reqwest", "hyper", "hyper-util", "clap", "axum"];

/// Each package of `leasehold`'s normal dependency tree, by name, with its
/// enabled features.
fn normal_tree(feature_args: &[&str]) -> BTreeMap<String, Vec<String>> {
    tree_of("leasehold", feature_args)
}

/// Each package of `package`'s normal dependency tree, by name, with its
/// enabled features.
fn tree_of(package: &str, feature_args: &[&str]) -> BTreeMap<String, Vec<String>> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests package sits in the workspace");
    let output = Command::new(env!("CARGO"))
        .current_dir(workspace)
        .args(["tree", "-p", package, "-e", "normal", "--prefix", "none"])
        .args(["--offline", "--format", "{p} [{f}]"])
        .args(feature_args)
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut packages = BTreeMap::<String, Vec<String>>::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Some((package, features)) = line.split_once(" [") else {
            continue;
        };
        let name = package.split_whitespace().next().unwrap_or_default();
        let features = features.trim_end_matches(" (*)").trim_end_matches(']');
        packages.entry(name.to_owned()).or_default().extend(
            features
                .split(',')
                .filter(|f| !f.is_empty())
                .map(str::to_owned),
        );
    }
    packages
}

fn rmcp_server_features(tree: &BTreeMap<String, Vec<String>>) -> Vec<&str> {
    tree.get("rmcp")
        .into_iter()
        .flatten()
        .map(String::as_str)
        .filter(|f| RMCP_SERVER_FEATURES.contains(f))
        .collect()
}

#[test]
fn without_default_features_leasehold_pulls_in_no_http_client_mcp_clap_or_axum() {
    let tree = normal_tree(&["--no-default-features"]);
    assert!(
        tree.contains_key("leasehold"),
        "the tree was read: {tree:?}"
    );
    for absent in HEAVY.into_iter().chain([
        "sled",
        "tracing-subscriber",
        "prometheus-client",
        "process-wrap",
        "rustls",
    ]) {
        assert!(!tree.contains_key(absent), "{absent} is in the tree");
    }
}

#[test]
fn openai_alone_brings_the_model_client_without_the_mcp_client() {
    let tree = normal_tree(&["--no-default-features", "--features", "openai"]);
    assert!(tree.contains_key("reqwest"), "the model client: {tree:?}");
    for absent in ["rmcp", "process-wrap", "clap", "axum"] {
        assert!(!tree.contains_key(absent), "{absent} is in the tree");
    }
}

#[test]
fn mcp_alone_brings_the_mcp_client_without_its_server_side() {
    let tree = normal_tree(&["--no-default-features", "--features", "mcp"]);
    assert!(tree.contains_key("rmcp"), "the MCP client: {tree:?}");
    for absent in ["clap", "axum"] {
        assert!(!tree.contains_key(absent), "{absent} is in the tree");
    }
    assert_eq!(rmcp_server_features(&tree), Vec::<&str>::new());
}

#[test]
fn the_default_features_carry_no_server_command_line_demo_or_test_utilities() {
    let tree = normal_tree(&[]);
    for present in ["sled", "tokio-postgres", "reqwest", "rmcp"] {
        assert!(tree.contains_key(present), "{present} is not in the tree");
    }
    for absent in [
        "clap",
        "axum",
        "prometheus-client",
        "leasehold-server",
        "tracing-subscriber",
        "mimalloc",
        "leasehold-lab",
        "rand_distr",
        "plotters",
    ] {
        assert!(!tree.contains_key(absent), "{absent} is in the tree");
    }
    assert_eq!(rmcp_server_features(&tree), Vec::<&str>::new());
    for crate_with_test_utilities in ["tokio", "leasehold-actors"] {
        assert!(
            !tree[crate_with_test_utilities]
                .iter()
                .any(|f| f == "test-util"),
            "{crate_with_test_utilities}'s test-util is on: {:?}",
            tree[crate_with_test_utilities]
        );
    }
}

#[test]
fn the_binary_brings_its_command_line_server_demo_and_lab() {
    let tree = tree_of("leasehold-cli", &[]);
    for present in
        HEAVY
            .into_iter()
            .chain(["sled", "tracing-subscriber", "mimalloc", "leasehold-lab"])
    {
        assert!(tree.contains_key(present), "{present} is not in the tree");
    }
    assert!(rmcp_server_features(&tree).contains(&"server"));
}

#[tokio::test(start_paused = true)]
async fn a_run_through_the_library_installs_no_tracing_subscriber() {
    use std::sync::Arc;

    use leasehold::{
        Engine,
        config::Config,
        testing::{ScriptedModel, Turn},
    };

    Config::load_layers(None, |_| None, &[]).expect("the default configuration loads");
    let model = ScriptedModel::new().script("run", [Turn::answer("done")]);
    let engine = Engine::builder()
        .model(Arc::new(model))
        .build()
        .await
        .expect("engine");
    let flow =
        serde_json::from_value(serde_json::json!({"name": "quiet", "task": "t", "max_steps": 1}))
            .expect("flow");
    let mut run = engine.start(flow).await.expect("started");
    assert_eq!(run.wait().await.answer.as_deref(), Some("done"));

    assert!(
        !tracing::dispatcher::has_been_set(),
        "the library installed a global tracing subscriber"
    );
}
