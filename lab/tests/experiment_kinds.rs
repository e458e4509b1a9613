//! `leasehold_lab` beyond one call: workers with a step budget
//! (budget checkpoints, restarts up the tree), model endpoints that are
//! dead for a while, tool calls that stall and recover or hang after
//! reporting progress, and the evaluator's price; each through the real
//! engine on paused time.

use std::time::Duration;

use leasehold_lab::{OperationKind, Options, Report, StrategyReport, Workload, WorkloadError, run};

fn experiment(workload: &str, strategies: &[&str]) -> Report {
    let workload = Workload::parse(workload).expect("valid workload");
    let options = Options {
        strategies: Some(strategies.iter().map(|s| (*s).to_owned()).collect()),
        ..Options::default()
    };
    run(&workload, &options).expect("the experiment runs")
}

fn by_name<'r>(report: &'r Report, name: &str) -> &'r StrategyReport {
    report
        .strategies
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("{name} in {report:?}"))
}

/// `count` workers that need `steps` steps of `step` each (a chunk every
/// 500 ms), declared with `max_steps`, under 30 s leases and a renewal cap
/// of 40; `more` is added to `[workers]`.
fn workers(count: u32, steps: u32, max_steps: u32, step: &str, more: &str) -> String {
    format!(
        "seed = 4\n[workers]\ncount = {count}\nsteps = {{ min = {steps}, max = {steps} }}\n\
         max_steps = {max_steps}\nstep_duration = {{ dist = \"fixed\", value = \"{step}\" }}\n\
         chunk_interval = \"500ms\"\n{more}\n\
         [strategy]\nlease = \"30s\"\nmax_renewals = 40\n"
    )
}

fn refused(text: &str) -> WorkloadError {
    Workload::parse(text).expect_err("refused")
}

#[test]
fn worker_stall_and_price_keys_are_checked_naming_the_key() {
    let good = workers(1, 3, 2, "5s", "");
    Workload::parse(&good).expect("valid");
    let error = refused(&good.replace("max = 3", "max = 1"));
    assert_eq!(error.key, "workers.steps.max");
    assert!(error.message.contains("`min` (3)"), "{error}");
    assert_eq!(
        refused(&good.replace("min = 3", "min = 0")).key,
        "workers.steps.min"
    );
    assert_eq!(
        refused(&good.replace("max_steps = 2", "max_steps = 10001")).key,
        "workers.max_steps"
    );
    assert_eq!(
        refused(&good.replace("\"5s\"", "\"0s\"")).key,
        "workers.step_duration.value"
    );
    assert_eq!(
        refused(&good.replace("count = 1", "count = 1\nloop_probability = 2.0")).key,
        "workers.loop_probability"
    );
    let streams = "seed = 1\n[model_streams]\ncount = 1\n\
                   duration = { dist = \"fixed\", value = \"1s\" }\nchunk_interval = \"100ms\"\n";
    assert_eq!(
        refused(&format!("{streams}dead_probability = 0.5\n")).key,
        "model_streams.dead_for"
    );
    let tools =
        "seed = 1\n[tool_calls]\ncount = 1\nduration = { dist = \"fixed\", value = \"1s\" }\n";
    assert_eq!(
        refused(&format!("{tools}stall_probability = 0.5\n")).key,
        "tool_calls.stall"
    );
    let error = refused(&format!(
        "{tools}[evaluator]\nprice_per_million_tokens = -1.0\n"
    ));
    assert_eq!(error.key, "evaluator.price_per_million_tokens");
    assert!(error.message.contains("-1"), "{error}");
}

#[test]
fn a_worker_past_its_step_budget_is_extended_at_its_checkpoint_and_kept_by_leasehold_and_cut_by_deadline()
 {
    // Nine steps of 10 s each, declared with 6: at the checkpoint after
    // step 6 the evaluator (right: it is getting there) extends it to 12.
    let report = experiment(&workers(3, 9, 6, "10s", ""), &["leasehold", "deadline"]);
    let leasehold = by_name(&report, "leasehold");
    assert_eq!(leasehold.alive, 3, "{leasehold:?}");
    assert_eq!(leasehold.slow_alive_killed, 0, "{leasehold:?}");
    assert_eq!(leasehold.budget_extended, 3, "{leasehold:?}");
    assert_eq!(leasehold.budget_wrapped_up, 0, "{leasehold:?}");
    assert_eq!(leasehold.runs_completed, 3, "{leasehold:?}");
    // Each step streams alive within its lease; the checkpoint is the only
    // evaluator call.
    assert_eq!(leasehold.evaluator_calls, 3, "{leasehold:?}");
    // A deadline of 30 s around a worker of 90 s cuts every attempt, and
    // the steps each attempt streamed are thrown away.
    let deadline = by_name(&report, "deadline");
    assert_eq!(deadline.slow_alive_killed, 3, "{deadline:?}");
    assert!(deadline.wasted_tokens > 0, "{deadline:?}");
    assert_eq!(leasehold.wasted_tokens, 0, "{leasehold:?}");
}

#[test]
fn a_looping_worker_is_wrapped_up_at_its_checkpoint_and_a_wrong_evaluator_extends_it_up_to_the_cap()
{
    // A worker of 5 s steps that never finishes, declared with 2 steps.
    let looping = workers(2, 3, 2, "5s", "loop_probability = 1.0");
    let report = experiment(&looping, &["leasehold"]);
    let leasehold = &report.strategies[0];
    assert_eq!((leasehold.alive, leasehold.hangs), (0, 2), "{leasehold:?}");
    assert_eq!(leasehold.hangs_detected, 2, "{leasehold:?}");
    assert_eq!(leasehold.budget_extended, 0, "{leasehold:?}");
    assert_eq!(leasehold.budget_wrapped_up, 2, "{leasehold:?}");
    // Two steps of 5 s, then the evaluator's 500 ms: the wrap-up.
    let p50 = leasehold.detect_p50_ms.expect("detected");
    assert!((10_500..11_500).contains(&p50), "{leasehold:?}");
    assert_eq!(leasehold.runs_completed, 2, "{leasehold:?}");

    // Always wrong, the evaluator extends the loop: 2 → 4 → 8 → 16 steps,
    // then the cap of three extensions wraps it up anyway.
    let report = experiment(
        &format!("{looping}[evaluator]\naccuracy = 0.0\n"),
        &["leasehold"],
    );
    let wrong = &report.strategies[0];
    assert_eq!(wrong.budget_extended, 6, "{wrong:?}");
    assert_eq!(wrong.budget_wrapped_up, 2, "{wrong:?}");
    assert_eq!(wrong.hangs_detected, 2, "{wrong:?}");
    let p50 = wrong.detect_p50_ms.expect("detected");
    assert!(p50 >= 80_000, "sixteen steps of 5 s: {wrong:?}");
}

#[test]
fn a_worker_whose_step_hangs_is_cut_and_its_failure_goes_up_the_tree_or_to_a_person() {
    let hanging = workers(1, 4, 0, "5s", "hang_probability = 1.0");
    let report = experiment(&hanging, &["leasehold", "deadline"]);
    for strategy in &report.strategies {
        assert_eq!(strategy.hangs, 1, "{strategy:?}");
        assert_eq!(strategy.hangs_detected, 1, "{strategy:?}");
        // Each attempt is cut again: more than one cut.
        assert!(strategy.kills > 1, "{strategy:?}");
    }
    // Under the deadline the worker's own lease cuts the whole worker
    // first; given up, its failure reaches the root as the spawn's result,
    // and the root's model answers without it: the run completes.
    let deadline = by_name(&report, "deadline");
    assert_eq!(deadline.runs_completed, 1, "{deadline:?}");
    // leasehold finds the hung model call itself within seconds (its
    // silence, judged against the pace of the worker's earlier steps) and
    // restarts it; when its restarts are spent, the run waits for a person.
    let leasehold = by_name(&report, "leasehold");
    assert!(
        leasehold.detect_p50_ms.is_some_and(|ms| ms < 10_000),
        "{leasehold:?}"
    );
    assert_eq!(leasehold.runs_paused, 1, "{leasehold:?}");
    // Under fail-fast the first cut fails the run.
    let report = experiment(
        &format!("{hanging}supervision = \"fail_fast\"\non_exhausted = \"fail\"\n"),
        &["leasehold"],
    );
    let fail_fast = &report.strategies[0];
    assert_eq!(fail_fast.runs_failed, 1, "{fail_fast:?}");
    assert_eq!(fail_fast.kills, 1, "{fail_fast:?}");
}

/// Two 5 s streams sent to a model server down for 45 s, restarted
/// `backoff` apart (doubling).
fn dead_streams(backoff: &str) -> String {
    format!(
        "seed = 10\n[model_streams]\ncount = 2\n\
         duration = {{ dist = \"fixed\", value = \"5s\" }}\nchunk_interval = \"500ms\"\n\
         dead_probability = 1.0\ndead_for = {{ dist = \"fixed\", value = \"45s\" }}\n\
         [strategy]\nbackoff = \"{backoff}\"\n"
    )
}

#[test]
fn a_stream_sent_to_a_dead_model_endpoint_streams_only_when_sent_again_after_it_came_back() {
    // The model server is down for 45 s; a stream takes 5 s.
    let report = experiment(
        &dead_streams("1s"),
        &["deadline", "deadline@30s", "leasehold"],
    );
    let [short, long, leasehold] = [
        by_name(&report, "deadline"),
        by_name(&report, "deadline@30s"),
        by_name(&report, "leasehold"),
    ];
    for strategy in [short, long, leasehold] {
        assert_eq!(strategy.dead_endpoints, 2, "{strategy:?}");
        // A lost call streams nothing: nothing to throw away.
        assert_eq!(strategy.wasted_tokens, 0, "{strategy:?}");
    }
    // 10 s attempts with backoffs of 1, 2 and 4 s: all four are sent while
    // it is down, and the run pauses for a person.
    assert_eq!(short.dead_endpoints_answered, 0, "{short:?}");
    assert_eq!(short.runs_paused, 2, "{short:?}");
    // Cut at 30 s, the second is lost too (sent at 31 s), the third streams.
    assert_eq!(long.dead_endpoints_answered, 2, "{long:?}");
    assert_eq!(long.kills, 4, "{long:?}");
    // No one run's pace judges another's (three runs must teach it first):
    // the second stream's silence is judged by its period and the ladder,
    // not by how soon the first stream's first chunk came, and its
    // restarts span the outage.
    assert_eq!(leasehold.dead_endpoints_answered, 2, "{leasehold:?}");
    let spaced = experiment(&dead_streams("20s"), &["leasehold"]);
    let leasehold = &spaced.strategies[0];
    assert_eq!(leasehold.dead_endpoints_answered, 2, "{leasehold:?}");
    assert_eq!(leasehold.runs_completed, 2, "{leasehold:?}");
}

#[test]
fn a_tool_call_that_stalls_then_recovers_is_kept_by_leasehold_and_cut_by_idle_kill() {
    // 20 s of work with progress every second, silent once for 25 s.
    let report = experiment(
        r#"
seed = 5
[tool_calls]
count = 3
duration = { dist = "fixed", value = "20s" }
progress_interval = "1s"
stall_probability = 1.0
stall = { dist = "fixed", value = "25s" }
"#,
        &["leasehold", "idle_kill"],
    );
    let leasehold = by_name(&report, "leasehold");
    assert_eq!(leasehold.alive, 3, "{leasehold:?}");
    assert_eq!(leasehold.slow_alive_killed, 0, "{leasehold:?}");
    assert_eq!(leasehold.runs_completed, 3, "{leasehold:?}");
    // A whole 10 s lease without progress: cut, and the retry (which does
    // not stall: a stall is transient) answers.
    let idle = by_name(&report, "idle_kill");
    assert_eq!(idle.slow_alive_killed, 3, "{idle:?}");
    assert_eq!(idle.kills, 3, "{idle:?}");
    assert!(idle.wasted_tool_ms > 0, "{idle:?}");
    assert_eq!(idle.runs_completed, 3, "{idle:?}");
}

#[test]
fn a_tool_call_that_hangs_after_reporting_progress_is_timed_from_when_it_fell_silent() {
    let text = r#"
seed = 6
[tool_calls]
count = 12
duration = { dist = "fixed", value = "60s" }
progress_interval = "1s"
hang_probability = 1.0
"#;
    let workload = Workload::parse(text).expect("valid");
    let operations = workload.generate(6);
    let points: Vec<Duration> = operations.iter().filter_map(|o| o.hangs_at).collect();
    assert_eq!(points.len(), 12);
    assert!(points.iter().all(|&p| p < Duration::from_secs(60)));
    assert!(
        points.iter().any(|&p| p > Duration::from_secs(10)),
        "{points:?}"
    );
    assert!(matches!(
        operations[0].kind,
        OperationKind::ToolCall { progress: Some(_) }
    ));
    let report = experiment(text, &["idle_kill", "leasehold"]);
    // Progress renews the idle timeout until the call falls silent; the
    // next expiry that saw none cuts it, one or two 10 s leases later.
    let idle = by_name(&report, "idle_kill");
    assert_eq!(idle.hangs_detected, 12, "{idle:?}");
    assert!(idle.detect_p99_ms.expect("detected") <= 20_000, "{idle:?}");
    assert!(idle.detect_p50_ms.expect("detected") >= 10_000, "{idle:?}");
    // leasehold renews on progress too, then spends its two free renewals
    // and asks the evaluator, which says the truth.
    let leasehold = by_name(&report, "leasehold");
    assert_eq!(leasehold.hangs_detected, 12, "{leasehold:?}");
    assert!(
        leasehold.detect_p99_ms.expect("detected") <= 40_500,
        "{leasehold:?}"
    );
}

#[test]
fn the_evaluators_tokens_are_priced_at_the_workloads_price() {
    let text = format!(
        "{}[evaluator]\nprice_per_million_tokens = 2.5\n",
        workers(3, 9, 6, "10s", "")
    );
    let report = experiment(&text, &["leasehold"]);
    let leasehold = &report.strategies[0];
    assert!(leasehold.evaluator_tokens > 0, "{leasehold:?}");
    #[allow(clippy::cast_precision_loss)]
    let expected = leasehold.evaluator_tokens as f64 * 2.5 / 1_000_000.0;
    assert!(
        (leasehold.evaluator_cost - expected).abs() < 1e-9,
        "{leasehold:?}"
    );
    let free = experiment(&workers(3, 9, 6, "10s", ""), &["leasehold"]);
    assert!(free.strategies[0].evaluator_cost.abs() < f64::EPSILON);
}

/// Restarts a cut call once, at once, then carries on without it.
struct RetryOnce;

impl leasehold::SupervisionStrategy for RetryOnce {
    fn decide(
        &mut self,
        child: &leasehold::ChildInfo,
        end: &leasehold::ChildEnd,
        _now: tokio::time::Instant,
    ) -> leasehold::SupervisionAction {
        match end {
            leasehold::ChildEnd::Completed => leasehold::SupervisionAction::Ignore,
            _ if child.attempt < 2 => leasehold::SupervisionAction::Restart {
                after: Duration::ZERO,
            },
            _ => leasehold::SupervisionAction::Ignore,
        }
    }
}

#[test]
fn a_supervision_strategy_of_ones_own_is_compared_beside_the_built_in_one() {
    let workload = Workload::parse(
        r#"
seed = 2
[tool_calls]
count = 3
duration = { dist = "fixed", value = "1s" }
hang_probability = 1.0
"#,
    )
    .expect("valid");
    let factory: leasehold::StrategyFactory = std::sync::Arc::new(|| Box::new(RetryOnce));
    let strategies = [
        workload.resolve("leasehold").expect("built in"),
        workload
            .resolve("leasehold")
            .expect("built in")
            .supervised_by("retry-once", factory),
    ];
    let report =
        leasehold_lab::run_strategies(&workload, &strategies, None).expect("the experiment runs");
    let [built_in, own] = [&report.strategies[0], &report.strategies[1]];
    assert_eq!(built_in.supervision, "restart");
    assert_eq!(own.name, "retry-once");
    assert_eq!(own.supervision, "custom");
    // The same verdicts cut each hung call: four attempts under the
    // built-in restarts, two under one's own; both runs then answer
    // without the tool.
    assert_eq!(built_in.kills, 12, "{built_in:?}");
    assert_eq!(own.kills, 6, "{own:?}");
    assert_eq!(own.hangs_detected, 3, "{own:?}");
    assert_eq!(own.detect_p50_ms, built_in.detect_p50_ms);
    assert_eq!((built_in.runs_completed, own.runs_completed), (3, 3));
    assert!(own.virtual_time_ms < built_in.virtual_time_ms);
}
