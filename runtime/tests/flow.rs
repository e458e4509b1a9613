//! Flows: parsing, validation and what overrides do, one test per rule.

use std::path::{Path, PathBuf};
use std::time::Duration;

use leasehold::{
    CommandArg, FlowError, LeaseConfig, StrategyKind, WatchdogConfig,
    flow_file::{FlowFileError, load, parse_json, parse_toml},
};
use proptest::prelude::*;

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/flows")
        .join(name)
}

/// A valid TOML flow with `extra` appended.
fn toml_with(extra: &str) -> String {
    format!("name = \"n\"\ntask = \"t\"\nmax_steps = 5\n{extra}")
}

fn toml_refusal(extra: &str) -> FlowError {
    parse_toml(&toml_with(extra)).expect_err("the flow should be refused")
}

#[test]
fn example_flows_parse_and_validate() {
    let toml = load(&example("research.toml")).expect("research.toml loads");
    let json = load(&example("research.json")).expect("research.json loads");
    assert_eq!(toml, json);
    assert_eq!(toml.name, "research");
    assert!(toml.workers.contains_key("researcher"));
    assert_eq!(
        toml.tools[0].command.as_deref(),
        Some(&["node", "server-everything/dist/index.js", "stdio"].map(CommandArg::from)[..])
    );
    assert_eq!(toml.supervision.strategy, Some(StrategyKind::Restart));
}

#[test]
fn a_flow_serializes_back_to_an_equal_flow() {
    let flow = load(&example("research.toml")).unwrap();
    let json = serde_json::to_string(&flow).unwrap();
    assert!(json.contains(r#""tool_call":"5m""#), "{json}");
    assert_eq!(parse_json(&json).unwrap(), flow);
}

#[test]
fn unknown_key_is_refused_with_its_path() {
    let toml = toml_refusal("[leases]\ntool_cal = \"5m\"\n");
    assert_eq!(toml.path, "leases.tool_cal");
    assert!(
        toml.message
            .starts_with("unknown field `tool_cal`, expected one of"),
        "{toml}"
    );

    let json = parse_json(r#"{"name":"n","task":"t","max_steps":5,"leases":{"tool_cal":"5m"}}"#)
        .unwrap_err();
    assert_eq!(json.path, "leases.tool_cal");
    assert!(json.to_string().starts_with(
        "flow refused at `leases.tool_cal`: unknown field `tool_cal`, expected one of"
    ));

    let in_array = toml_refusal(
        "[[tools]]\nname = \"a\"\nurl = \"http://a\"\n[[tools]]\nname = \"b\"\ncomand = [\"x\"]\n",
    );
    assert_eq!(in_array.path, "tools[1].comand");
}

#[test]
fn bad_duration_is_refused_with_its_path() {
    let toml = toml_refusal("[leases]\ntool_call = \"fast\"\n");
    assert_eq!(toml.path, "leases.tool_call");
    assert_eq!(
        toml.message,
        r#"expected a duration such as "250ms", "90s" or "5m", got "fast" (line 5, column 13)"#
    );

    let json = parse_json(r#"{"name":"n","task":"t","max_steps":5,"leases":{"tool_call":30}}"#)
        .unwrap_err();
    assert_eq!(json.path, "leases.tool_call");
    assert!(
        json.message
            .contains(r#"expected a duration such as "250ms""#),
        "{json}"
    );
}

#[test]
fn missing_field_is_refused_with_its_path() {
    let worker = toml_refusal("[workers.research]\nprompt = \"p\"\n");
    assert_eq!(worker.path, "workers.research");
    assert!(
        worker.message.starts_with("missing field `max_steps`"),
        "{worker}"
    );

    let root = parse_json(r#"{"name":"n","max_steps":5}"#).unwrap_err();
    assert_eq!(root.path, ".");
    assert!(root.message.starts_with("missing field `task`"), "{root}");
}

#[test]
fn syntax_errors_name_the_line_and_column() {
    let error = parse_toml("name = \"n\"\ntask =\n").unwrap_err();
    assert_eq!(error.path, ".");
    assert!(error.message.ends_with("(line 2, column 7)"), "{error}");
    let trailing = parse_json(r#"{"name":"n","task":"t","max_steps":5} x"#).unwrap_err();
    assert_eq!(trailing.path, ".");
    assert!(
        trailing.message.starts_with("trailing characters"),
        "{trailing}"
    );
}

#[test]
fn name_and_task_must_not_be_empty() {
    let error = parse_toml("name = \" \"\ntask = \"t\"\nmax_steps = 0\n").unwrap_err();
    assert_eq!(error.path, "name");
    let error = parse_toml("name = \"n\"\ntask = \"\"\nmax_steps = 0\n").unwrap_err();
    assert_eq!(error.path, "task");
}

#[test]
fn tool_server_has_at_most_one_transport_and_neither_is_a_reference() {
    let both = toml_refusal("[[tools]]\nname = \"a\"\ncommand = [\"x\"]\nurl = \"http://a\"\n");
    assert_eq!(both.path, "tools[0]");
    assert_eq!(
        both.message,
        "expected exactly one of `command` or `url`, got both"
    );
    // Neither: a reference to a server the runtime provides by name.
    let reference = parse_toml(&toml_with("[[tools]]\nname = \"a\"\n")).expect("a reference");
    assert!(reference.tools[0].is_reference());
    let env_alone = toml_refusal("[[tools]]\nname = \"a\"\nenv = { K = \"v\" }\n");
    assert_eq!(env_alone.path, "tools[0].env");
    let env_with_url =
        toml_refusal("[[tools]]\nname = \"a\"\nurl = \"http://a\"\nenv = { K = \"v\" }\n");
    assert_eq!(env_with_url.path, "tools[0].env");
    let empty = toml_refusal(
        "[[tools]]\nname = \"a\"\nurl = \"http://a\"\n[[tools]]\nname = \"b\"\ncommand = []\n",
    );
    assert_eq!(empty.path, "tools[1].command");
    let not_http = toml_refusal("[[tools]]\nname = \"a\"\nurl = \"ftp://a\"\n");
    assert_eq!(not_http.path, "tools[0].url");
    parse_toml(&toml_with(
        "[[tools]]\nname = \"a\"\nurl = \"https://tools.example/mcp\"\n",
    ))
    .expect("an https url is a transport");
}

#[test]
fn tool_server_names_are_unique_and_not_empty() {
    let duplicate = toml_refusal(
        "[[tools]]\nname = \"a\"\nurl = \"http://a\"\n[[tools]]\nname = \"a\"\nurl = \"http://b\"\n",
    );
    assert_eq!(duplicate.path, "tools[1].name");
    assert!(duplicate.message.contains("`tools[0]`"), "{duplicate}");
    let empty = toml_refusal("[[tools]]\nname = \"\"\nurl = \"http://a\"\n");
    assert_eq!(empty.path, "tools[0].name");
}

#[test]
fn worker_tools_must_name_declared_servers() {
    let servers = "[[tools]]\nname = \"search\"\nurl = \"http://a\"\n";
    let error = toml_refusal(&format!(
        "{servers}[workers.research]\nprompt = \"p\"\nmax_steps = 3\ntools = [\"search\", \"browse\"]\n"
    ));
    assert_eq!(error.path, "workers.research.tools[1]");
    assert!(error.message.contains(r#""browse""#), "{error}");
    parse_toml(&toml_with(&format!(
        "{servers}[workers.research]\nprompt = \"p\"\nmax_steps = 3\ntools = [\"search\"]\n"
    )))
    .expect("a declared server is accepted");
}

#[test]
fn worker_prompt_must_not_be_empty() {
    let error = toml_refusal("[workers.research]\nprompt = \"\"\nmax_steps = 3\n");
    assert_eq!(error.path, "workers.research.prompt");
}

#[test]
fn zero_durations_are_refused_with_their_path() {
    let error = toml_refusal("[leases]\nworker_step = \"0s\"\n");
    assert_eq!(error.path, "leases.worker_step");
    assert_eq!(error.message, "expected a duration above 0, got 0s");
    let error = toml_refusal("[supervision]\nwindow = \"0ms\"\n");
    assert_eq!(error.path, "supervision.window");
}

#[test]
fn a_flows_restart_window_under_its_old_name_is_read_and_written_back_as_window() {
    for (text, json) in [
        (
            "[supervision]\nrestart_window = \"10m\"\n",
            r#"{"name":"n","task":"t","max_steps":5,"supervision":{"restart_window":"10m"}}"#,
        ),
        (
            "[supervision]\nwindow = \"10m\"\n",
            r#"{"name":"n","task":"t","max_steps":5,"supervision":{"window":"10m"}}"#,
        ),
    ] {
        let flow = parse_toml(&toml_with(text)).expect("read");
        assert_eq!(flow.supervision.window, Some(Duration::from_secs(600)));
        assert_eq!(parse_json(json).expect("read"), flow);
        let written = serde_json::to_value(&flow).expect("written");
        assert_eq!(written["supervision"], serde_json::json!({"window": "10m"}));
    }
}

#[test]
fn free_renewals_above_max_renewals_in_flow_is_refused() {
    let error = toml_refusal("[leases]\nmax_renewals = 2\nfree_renewals = 3\n");
    assert_eq!(error.path, "leases.free_renewals");
    assert_eq!(
        error.message,
        "expected at most `leases.max_renewals` (2): free renewals above the renewal cap are \
         never reached, got 3"
    );
    parse_toml(&toml_with(
        "[leases]\nmax_renewals = 3\nfree_renewals = 3\n",
    ))
    .expect("free_renewals equal to max_renewals is accepted");
}

#[test]
fn jitter_must_be_a_fraction() {
    let error = toml_refusal("[supervision]\njitter = 1.5\n");
    assert_eq!(error.path, "supervision.jitter");
    let error = toml_refusal("[supervision]\njitter = -0.1\n");
    assert_eq!(error.path, "supervision.jitter");
}

#[test]
fn backoff_max_below_backoff_initial_is_refused() {
    let error = toml_refusal("[supervision]\nbackoff_initial = \"2s\"\nbackoff_max = \"1s\"\n");
    assert_eq!(error.path, "supervision.backoff_max");
    assert_eq!(
        error.message,
        "expected at least `supervision.backoff_initial` (2s): the backoff grows from the first \
         to the longest, got 1s"
    );
}

#[test]
fn a_flow_may_lower_the_extension_cap_but_never_raise_it_past_3() {
    for max in [0, 1, 3] {
        let flow = parse_toml(&toml_with(&format!("[budget]\nmax_extensions = {max}\n")))
            .unwrap_or_else(|e| panic!("max_extensions = {max} is refused: {e}"));
        assert_eq!(flow.budget.max_extensions, Some(max));
    }
    for max in [4, 1000, u32::MAX] {
        let error = toml_refusal(&format!("[budget]\nmax_extensions = {max}\n"));
        assert_eq!(error.path, "budget.max_extensions");
        assert!(
            error.message.starts_with("expected at most 3")
                && error.message.ends_with(&format!("got {max}")),
            "{error}"
        );
    }
    let error =
        parse_json(r#"{"name":"n","task":"t","max_steps":5,"budget":{"max_extensions":4}}"#)
            .expect_err("a JSON flow above the cap is refused too");
    assert_eq!(error.path, "budget.max_extensions");
}

#[test]
fn milestones_must_be_named_and_unique() {
    let error = toml_refusal("milestones = [\"plan\", \"plan\"]\n");
    assert_eq!(error.path, "milestones[1]");
    let error =
        toml_refusal("[workers.research]\nprompt = \"p\"\nmax_steps = 3\nmilestones = [\"\"]\n");
    assert_eq!(error.path, "workers.research.milestones[0]");
}

#[test]
fn overrides_apply_on_the_runtime_configuration() {
    let flow = parse_toml(&toml_with(
        "[leases]\ntool_call = \"90s\"\nmax_renewals = 4\nfree_renewals = 1\n",
    ))
    .unwrap();
    let base = LeaseConfig::default();
    let lease = flow.lease_config(base);
    assert_eq!(lease.tool_call, Duration::from_secs(90));
    assert_eq!(lease.max_renewals, 4);
    assert_eq!(lease.model_stream, base.model_stream);
    assert_eq!(lease.model_blocking, base.model_blocking);
    assert_eq!(lease.worker_step, base.worker_step);

    let watchdog = flow.watchdog_config(&WatchdogConfig::default());
    assert_eq!(watchdog.free_renewals, 1);
    assert_eq!(
        watchdog.evaluator_timeout,
        WatchdogConfig::default().evaluator_timeout
    );

    let plain = parse_toml(&toml_with("")).unwrap();
    assert_eq!(plain.lease_config(base), base);
    assert_eq!(
        plain.watchdog_config(&WatchdogConfig::default()),
        WatchdogConfig::default()
    );
}

#[test]
fn stream_defaults_to_true() {
    assert!(parse_toml(&toml_with("")).unwrap().stream);
    assert!(!parse_toml(&toml_with("stream = false\n")).unwrap().stream);
}

#[test]
fn tool_idempotency_is_read_from_the_flow() {
    let flow = load(&example("research.toml")).unwrap();
    assert_eq!(flow.tool_idempotency("everything", "echo"), Some(true));
    assert_eq!(flow.tool_idempotency("everything", "add"), None);
    assert_eq!(flow.tool_idempotency("elsewhere", "echo"), None);
    let flow = parse_toml(&toml_with(
        "[[tools]]\nname = \"fs\"\nurl = \"http://fs\"\nidempotent = { write = false }\n",
    ))
    .unwrap();
    assert_eq!(flow.tool_idempotency("fs", "write"), Some(false));
}

#[test]
fn unlimited_max_steps_is_zero() {
    let flow = parse_toml(
        "name = \"n\"\ntask = \"t\"\nmax_steps = 0\n[workers.w]\nprompt = \"p\"\nmax_steps = 0\n",
    )
    .expect("max_steps = 0 is accepted");
    assert_eq!(flow.max_steps, 0);
    assert_eq!(flow.workers["w"].max_steps, 0);
    let negative = toml_refusal("[workers.w]\nprompt = \"p\"\nmax_steps = -1\n");
    assert_eq!(negative.path, "workers.w.max_steps");
}

#[test]
fn load_names_the_file_and_refuses_unknown_extensions() {
    let yaml = load(Path::new("flows/research.yaml")).unwrap_err();
    assert!(
        matches!(yaml, FlowFileError::UnknownFormat { .. }),
        "{yaml:?}"
    );
    assert_eq!(
        yaml.to_string(),
        "cannot load flow file `flows/research.yaml`: expected a `.toml` or `.json` extension"
    );

    let missing = load(Path::new("no/such/flow.toml")).unwrap_err();
    assert!(matches!(missing, FlowFileError::Io { .. }), "{missing:?}");
    assert!(
        missing
            .to_string()
            .starts_with("cannot read flow file `no/such/flow.toml`: ")
    );

    let dir = std::env::temp_dir().join(format!("leasehold-flow-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("typo.TOML");
    std::fs::write(&file, toml_with("[leases]\ntool_cal = \"5m\"\n")).unwrap();
    let invalid = load(&file).unwrap_err();
    std::fs::remove_dir_all(&dir).unwrap();
    let FlowFileError::Invalid { path, error } = &invalid else {
        panic!("expected Invalid, got {invalid:?}");
    };
    assert_eq!(path, &file);
    assert_eq!(error.path, "leases.tool_cal");
    assert!(
        invalid.to_string().starts_with(&format!(
            "flow file `{}` refused at `leases.tool_cal`: unknown field `tool_cal`",
            file.display()
        )),
        "{invalid}"
    );
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics_the_parsers(text in any::<String>()) {
        let _ = parse_toml(&text);
        let _ = parse_json(&text);
    }

    #[test]
    fn arbitrary_values_in_a_flow_never_panic_the_parsers(
        key in "[a-z_]{1,12}",
        value in prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            any::<f64>().prop_map(|x| format!("{x:?}")),
            "[ -~]{0,16}".prop_map(|s| format!("{s:?}")),
        ],
        table in prop_oneof![Just(""), Just("[leases]\n"), Just("[supervision]\n"), Just("[budget]\n"), Just("[workers.w]\n")],
    ) {
        let _ = parse_toml(&toml_with(&format!("{table}{key} = {value}\n")));
        let _ = parse_json(&format!(r#"{{"name":"n","task":"t","max_steps":5,"{key}":{value}}}"#));
    }
}

#[test]
fn a_flow_sets_its_evidence_renewals_for_the_watchdog() {
    let flow = parse_toml(&toml_with("[leases]\nevidence_renewals = 1\n")).expect("parses");
    assert_eq!(flow.leases.evidence_renewals, Some(1));
    let base = leasehold::WatchdogConfig::default();
    assert_eq!(flow.watchdog_config(&base).evidence_renewals, 1);
    let unset = parse_toml(&toml_with("")).expect("parses");
    assert_eq!(unset.watchdog_config(&base).evidence_renewals, 3);
}
