//! `leasehold config` as the command describes a loaded configuration:
//! each value with its variable and where it came from, the warnings, the
//! declared tool servers, and webhook receivers without their secrets. The
//! configuration's own layers, refusals and arithmetic are tested beside
//! it, in `runtime/tests/config.rs`.

use leasehold::config::{Config, IDLE_TIMEOUT_FORMULA};
use leasehold_cli::cli::describe_config;

/// The configuration the variables `vars` give, with no file.
fn from_env(vars: &[(&str, &str)]) -> Config {
    let env = |name: &str| {
        vars.iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| (*value).to_owned())
    };
    Config::load(None, env).expect("loads")
}

/// The configuration the file `text` gives, with no variable.
fn from_file(text: &str) -> Config {
    let dir = tempfile::tempdir().expect("a directory");
    let path = dir.path().join("leasehold.toml");
    std::fs::write(&path, text).expect("write the file");
    Config::load(Some(&path), |_: &str| None).expect("loads")
}

#[test]
fn the_derived_idle_timeout_is_listed_with_its_formula_and_no_warning() {
    let config = from_env(&[
        ("LEASEHOLD_LEASE_MODEL_STREAM", "10m"),
        ("LEASEHOLD_WATCHDOG_FREE_RENEWALS", "3"),
        ("LEASEHOLD_EVALUATOR_TIMEOUT", "30s"),
        ("LEASEHOLD_MODEL_BASE_URL", "http://127.0.0.1:8000/v1"),
        ("LEASEHOLD_MODEL_NAME", "big"),
    ]);
    let described = describe_config(&config);
    let line = described
        .lines()
        .find(|l| {
            l.starts_with("model.idle_timeout ") && l.contains(" LEASEHOLD_MODEL_IDLE_TIMEOUT ")
        })
        .expect("`leasehold config` lists the idle timeout");
    assert!(line.contains("40m 30s"), "{line}");
    assert!(
        line.ends_with(&format!("derived: {IDLE_TIMEOUT_FORMULA}")),
        "{line}"
    );
    assert!(!described.contains("# warnings"), "{described}");
}

#[test]
fn an_idle_timeout_that_cuts_a_model_call_before_its_first_judgment_is_described_as_a_warning() {
    let config = from_env(&[("LEASEHOLD_MODEL_IDLE_TIMEOUT", "1m")]);
    let described = describe_config(&config);
    assert!(
        described.contains("warning: `model.idle_timeout` (LEASEHOLD_MODEL_IDLE_TIMEOUT, from the environment) is 1m"),
        "{described}"
    );
}

#[test]
fn a_renamed_key_read_under_its_old_name_is_described_as_a_warning() {
    let config = from_env(&[("LEASEHOLD_WATCHDOG_MAX_RENEWALS", "7")]);
    let described = describe_config(&config);
    assert!(
        described.contains("warning: LEASEHOLD_WATCHDOG_MAX_RENEWALS (env"),
        "{described}"
    );
}

#[test]
fn declared_tool_servers_are_described_by_their_command_or_url() {
    let config = from_file(
        "[[tools]]\n\
         name = \"ops\"\n\
         command = [\"python3\", \"ops.py\"]\n\
         env = { REGION = \"eu\" }\n\
         idempotent = { get_status = true }\n\
         \n\
         [[tools]]\n\
         name = \"search\"\n\
         url = \"http://127.0.0.1:9100/mcp\"\n",
    );
    let described = describe_config(&config);
    assert!(described.contains("command python3 ops.py"), "{described}");
    assert!(
        described.contains("url http://127.0.0.1:9100/mcp"),
        "{described}"
    );
}

#[test]
fn webhook_receivers_are_described_without_their_secret_or_the_credentials_of_their_url() {
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let config = from_file(&format!(
        "[webhooks]\n\
         retry_first = \"1s\"\n\
         [webhooks.receivers.ops]\n\
         url = \"https://hooks.example.com/leasehold?token=s3cret\"\n\
         secret = \"{secret}\"\n\
         events = [\"waiting_human\", \"failed\"]\n\
         runs = \"named\"\n"
    ));
    let described = describe_config(&config);
    assert!(
        described.contains("ops  https://hooks.example.com/leasehold?token=*** · waiting_human, failed · runs whose flow names it · secret ***"),
        "{described}"
    );
    assert!(!described.contains("MfKQ9r8"), "{described}");
    assert!(!described.contains("s3cret"), "{described}");
}
