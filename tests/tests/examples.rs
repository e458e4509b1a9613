//! The examples, run as tests: each one's `main` ends in assertions of its
//! own, so an example that stops doing what it says fails here.

#[path = "../../examples/examples/own_policy.rs"]
mod own_policy;

#[test]
fn a_verdict_policy_of_ones_own_runs_through_the_engine_and_the_experiment() {
    own_policy::main().expect("the example holds");
}

#[path = "../../examples/examples/own_ports.rs"]
mod own_ports;

#[test]
fn a_model_client_a_tool_client_and_an_evaluator_of_ones_own_run_a_flow() {
    own_ports::main().expect("the example holds");
}
