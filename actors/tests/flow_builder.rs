//! Flows written in Rust: the typed builder and JSON values, refused
//! naming the key as flow files are.

use std::time::Duration;

use leasehold_actors::prelude::*;

#[test]
fn a_flow_built_in_rust_is_checked_as_a_flow_file_is_and_its_refusals_name_the_key() {
    let flow = Flow::builder("triage", "Sort the issues.")
        .max_steps(4)
        .tool_server(ToolServer::url("github", "https://mcp.example/mcp").idempotent("list", true))
        .worker("reader", WorkerKind::new("Read one.", 3).tools(["github"]))
        .lease(LeaseKind::WorkerStep, Duration::from_secs(600))
        .policy_for(LeaseKind::ToolCall, PolicyName::IDLE_KILL)
        .build()
        .expect("a valid flow");
    // What the builder makes is what the same flow file says.
    let json = serde_json::to_value(&flow).expect("serializes");
    assert_eq!(Flow::from_json(json).expect("reads back"), flow);
    assert_eq!(
        flow.leases
            .policy
            .as_ref()
            .map(|p| p.name_for(LeaseKind::ToolCall).clone()),
        Some(PolicyName::IDLE_KILL)
    );

    for (built, key) in [
        (Flow::builder("", "task").build(), "name"),
        (
            Flow::builder("n", "t")
                .lease(LeaseKind::ToolCall, Duration::from_millis(1))
                .build(),
            "leases.tool_call",
        ),
        (
            Flow::builder("n", "t")
                .max_renewals(1)
                .free_renewals(2)
                .build(),
            "leases.free_renewals",
        ),
        (
            Flow::builder("n", "t")
                .tool_server(ToolServer::url("a", "ftp://nowhere"))
                .build(),
            "tools[0].url",
        ),
    ] {
        let refused = built.expect_err(key);
        assert_eq!(refused.path, key, "{refused}");
    }
}

#[test]
fn a_flow_read_from_json_names_the_key_of_an_unknown_field_or_a_wrong_type() {
    let base = || serde_json::json!({"name": "n", "task": "t", "max_steps": 3});
    for (patch, key) in [
        (
            serde_json::json!({"leases": {"tool_cal": "90s"}}),
            "leases.tool_cal",
        ),
        (
            serde_json::json!({"leases": {"tool_call": 90}}),
            "leases.tool_call",
        ),
        (serde_json::json!({"max_steps": "three"}), "max_steps"),
        (
            serde_json::json!({"workers": {"r": {"prompt": "p", "max_steps": -1}}}),
            "workers.r.max_steps",
        ),
        (
            serde_json::json!({"leases": {"policy": "Deadline"}}),
            "leases.policy",
        ),
    ] {
        let mut flow = base();
        if let (Some(flow), Some(patch)) = (flow.as_object_mut(), patch.as_object()) {
            flow.extend(patch.clone());
        }
        let refused = Flow::from_json(flow).expect_err(key);
        assert_eq!(refused.path, key, "{refused}");
    }
}
