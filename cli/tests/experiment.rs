//! `leasehold_lab`: the workload file and its errors, the seeded
//! generator, and strategies compared through the real engine on paused
//! time.

use std::time::Duration;

use leasehold_lab::{
    ExperimentError, MAX_CHUNKS, OperationKind, Options, Report, StrategyReport, Workload, run,
};

fn options(strategies: &[&str]) -> Options {
    Options {
        strategies: Some(strategies.iter().map(|s| (*s).to_owned()).collect()),
        ..Options::default()
    }
}

fn experiment(workload: &str, strategies: &[&str]) -> Report {
    let workload = Workload::parse(workload).expect("valid workload");
    run(&workload, &options(strategies)).expect("the experiment runs")
}

/// The report's strategies, as many as named.
fn strategies<const N: usize>(report: &Report) -> [&StrategyReport; N] {
    let all: Vec<&StrategyReport> = report.strategies.iter().collect();
    all.try_into()
        .unwrap_or_else(|all: Vec<_>| panic!("{N} strategies, not {}", all.len()))
}

/// A workload of `count` model streams of `duration` each, a chunk every
/// `interval`, with `more` lines of `[model_streams]` (and after).
fn fixed_streams(count: u32, duration: &str, interval: &str, more: &str) -> String {
    format!(
        "seed = 1\n[model_streams]\ncount = {count}\n\
         duration = {{ dist = \"fixed\", value = \"{duration}\" }}\n\
         chunk_interval = \"{interval}\"\n{more}"
    )
}

fn refused_at(text: &str) -> String {
    Workload::parse(text).expect_err("refused").key
}

const STREAMS: &str = r#"
seed = 1
[model_streams]
count = 2
duration = { dist = "lognormal", median = "2s", sigma = 0.5 }
chunk_interval = "100ms"
"#;

#[test]
fn a_workload_error_names_the_offending_key() {
    assert_eq!(
        refused_at(&STREAMS.replace("chunk_interval", "chunk_intervl")),
        "model_streams.chunk_intervl"
    );
    assert_eq!(
        refused_at(&STREAMS.replace("sigma = 0.5", "sigma = -1.0")),
        "model_streams.duration.sigma"
    );
    assert_eq!(
        refused_at(&STREAMS.replace("\"100ms\"", "\"soon\"")),
        "model_streams.chunk_interval"
    );
    assert_eq!(
        refused_at(&format!("{STREAMS}stall_probability = 0.5\n")),
        "model_streams.stall"
    );
    assert_eq!(
        refused_at(&format!("{STREAMS}hang_probability = 1.5\n")),
        "model_streams.hang_probability"
    );
    assert_eq!(refused_at("seed = 1\n"), ".");
    let error = Workload::parse(&format!(
        "{STREAMS}[strategy.sweep]\npolicies = [\"deadline\", \"Time Out\"]\nleases = [\"5s\"]\n"
    ))
    .expect_err("refused");
    assert_eq!(error.key, "strategy.sweep.policies[1]");
    // A name no built-in has may be an embedder's policy: the plan, which
    // knows the registered ones, refuses it.
    let workload = Workload::parse(&format!(
        "{STREAMS}[strategy.sweep]\npolicies = [\"deadline\", \"timeout\"]\nleases = [\"5s\"]\n"
    ))
    .expect("parses");
    let Err(ExperimentError::Workload(error)) = leasehold_lab::plan(&workload, &Options::default())
    else {
        panic!("an unknown policy in the sweep is refused by the plan");
    };
    assert_eq!(error.key, "strategy.sweep.policies[1]");
    assert!(error.message.contains("`timeout`"), "{error}");
}

#[test]
fn the_same_seed_draws_the_same_operations_and_another_seed_others() {
    let workload = Workload::parse(&STREAMS.replace("count = 2", "count = 50")).expect("valid");
    let first = workload.generate(1);
    assert_eq!(first, workload.generate(1));
    assert_ne!(first, workload.generate(2));
    assert_eq!(first.len(), 50);
    // A log-normal of median 2 s spreads both ways around it.
    assert!(first.iter().any(|o| o.work < Duration::from_secs(2)));
    assert!(first.iter().any(|o| o.work > Duration::from_secs(2)));
}

#[test]
fn an_unknown_strategy_is_refused_naming_the_known_ones() {
    let workload = Workload::parse(STREAMS).expect("valid");
    let error = run(&workload, &options(&["timeout"])).expect_err("refused");
    let message = error.to_string();
    assert!(message.contains("`timeout`"), "{message}");
    assert!(
        message.contains("leasehold, deadline, idle_kill"),
        "{message}"
    );
}

#[test]
fn slow_but_alive_streams_are_kept_by_leasehold_and_cut_by_deadline() {
    // Four streams of 30 s, a chunk every second, under 10 s leases.
    let report = experiment(
        &fixed_streams(4, "30s", "1s", ""),
        &["leasehold", "deadline"],
    );
    let [leasehold, deadline] = strategies(&report);
    assert_eq!(leasehold.alive, 4);
    assert_eq!(leasehold.slow_alive_killed, 0);
    assert_eq!(leasehold.wasted_tokens, 0);
    assert_eq!(leasehold.runs_completed, 4);
    assert_eq!(deadline.slow_alive_killed, 4);
    assert!((deadline.slow_alive_killed_share - 1.0).abs() < f64::EPSILON);
    // Every attempt cut at its first expiry, 10 chunks in: 4 attempts each.
    assert_eq!(deadline.kills, 16);
    assert_eq!(deadline.wasted_tokens, 16 * 10);
    assert_eq!(deadline.runs_paused, 4);
}

/// Every stream falls silent once for 35 s, three and a half leases.
const STALLS: &str = "stall_probability = 1.0\nstall = { dist = \"fixed\", value = \"35s\" }\n";

#[test]
fn a_stall_that_recovers_is_kept_by_leasehold_and_cut_by_idle_kill() {
    let report = experiment(
        &fixed_streams(3, "5s", "500ms", STALLS),
        &["leasehold", "idle_kill"],
    );
    let [leasehold, idle_kill] = strategies(&report);
    assert_eq!(leasehold.slow_alive_killed, 0);
    assert_eq!(leasehold.runs_completed, 3);
    // Each stream's stall outlasts two free renewals: the evaluator is
    // asked, and renews a live stream. No one run's pace judges another's
    // (three must teach it first), so each of the three streams is asked
    // once.
    assert_eq!(leasehold.evaluator_calls, 3, "{leasehold:?}");
    assert_eq!(idle_kill.slow_alive_killed, 3);
    assert_eq!(idle_kill.evaluator_calls, 0);
    // Restarted, the stream does not stall again, and completes.
    assert_eq!(idle_kill.runs_completed, 3);
}

#[test]
fn a_hang_is_detected_at_the_deadline_and_after_the_ladder_under_leasehold() {
    // Tool calls that never answer: the deadline cuts at its first expiry;
    // leasehold renews twice for free, then asks the evaluator (500 ms).
    let report = experiment(
        r#"
seed = 5
[tool_calls]
count = 3
duration = { dist = "fixed", value = "1s" }
hang_probability = 1.0
"#,
        &["deadline", "leasehold", "deadline@25s"],
    );
    let [deadline, leasehold, long] = strategies(&report);
    assert_eq!(deadline.hangs, 3);
    assert_eq!(deadline.hangs_detected, 3);
    assert_eq!(deadline.detect_p50_ms, Some(10_000));
    assert_eq!(deadline.detect_p99_ms, Some(10_000));
    assert_eq!(leasehold.detect_p50_ms, Some(30_500));
    assert_eq!(long.lease_ms, 25_000);
    assert_eq!(long.detect_p99_ms, Some(25_000));
    // Each hung call is tried four times, each attempt thrown away; the
    // loop's model then answers without the tool.
    assert_eq!(deadline.wasted_tool_ms, 3 * 4 * 10_000);
    assert_eq!(deadline.runs_completed, 3);
}

#[test]
fn a_looping_stream_is_cut_by_leasehold_on_its_repetition_before_any_expiry_and_by_idle_kill_only_at_the_cap()
 {
    let report = experiment(
        &fixed_streams(2, "5s", "1s", "loop_probability = 1.0\n"),
        &["leasehold", "deadline", "idle_kill"],
    );
    let [leasehold, deadline, idle_kill] = strategies(&report);
    assert_eq!(leasehold.hangs, 2);
    assert_eq!(deadline.detect_p99_ms, Some(10_000));
    // Chunks keep coming, so idle_kill renews until the cap: 11 leases.
    assert_eq!(idle_kill.detect_p50_ms, Some(110_000));
    assert_eq!(idle_kill.evaluator_calls, 0);
    // The repetition of its text, measured as it streams, sends the stream
    // to the evaluator (500 ms) as soon as the tail repeats itself, before
    // any expiry: cut after 6.5 s, before even the 10 s deadline.
    assert_eq!(leasehold.detect_p50_ms, Some(6_500));
    assert_eq!(leasehold.runs_paused, 2);
}

const MIXED: &str = r#"
seed = 11
[model_streams]
count = 30
duration = { dist = "lognormal", median = "20s", sigma = 0.8 }
chunk_interval = "500ms"
stall_probability = 0.3
stall = { dist = "lognormal", median = "15s", sigma = 0.5 }
hang_probability = 0.1
loop_probability = 0.05
[tool_calls]
count = 20
duration = { dist = "pareto", scale = "2s", shape = 1.2 }
progress_interval = "3s"
hang_probability = 0.1
[evaluator]
latency = "1s"
accuracy = 0.9
[strategy.sweep]
policies = ["deadline"]
leases = ["5s", "1m"]
"#;

#[test]
fn the_same_seed_gives_a_byte_identical_report() {
    let workload = Workload::parse(MIXED).expect("valid");
    let first = run(&workload, &Options::default()).expect("runs");
    let second = run(&workload, &Options::default()).expect("runs");
    assert_eq!(first.to_json(), second.to_json());
    assert_eq!(first.to_csv().expect("csv"), second.to_csv().expect("csv"));
    let names: Vec<&str> = first.strategies.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "leasehold",
            "deadline",
            "idle_kill",
            "deadline@5s",
            "deadline@1m"
        ]
    );
    let dirs = [
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    ];
    first.write_to(dirs[0].path()).expect("written");
    second.write_to(dirs[1].path()).expect("written");
    for file in ["report.json", "report.csv", "tradeoff.svg", "wasted.svg"] {
        let a = std::fs::read(dirs[0].path().join(file)).expect("read");
        let b = std::fs::read(dirs[1].path().join(file)).expect("read");
        assert_eq!(a, b, "{file}");
    }
    let other = run(
        &workload,
        &Options {
            seed: Some(12),
            ..Options::default()
        },
    )
    .expect("runs");
    assert_ne!(first.to_json(), other.to_json());
    let json: serde_json::Value = serde_json::from_str(&first.to_json()).expect("json");
    for key in [
        "name",
        "slow_alive_killed",
        "detect_p50_ms",
        "detect_p99_ms",
        "wasted_tokens",
        "evaluator_calls",
        "runs_completed",
        "runs_paused",
    ] {
        assert!(json["strategies"][0].get(key).is_some(), "{key}");
    }
}

#[test]
fn on_the_essay_workload_leasehold_cuts_no_live_operation_and_finds_hangs_as_fast_as_the_30s_deadline()
 {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/experiments/essay.toml");
    let workload = Workload::load(&path).expect("the example loads");
    let report = run(&workload, &Options::default()).expect("runs");
    let by_name = |name: &str| {
        report
            .strategies
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("{name} in {report:?}"))
    };
    let leasehold = by_name("leasehold");
    assert_eq!(leasehold.slow_alive_killed, 0, "{leasehold:?}");
    assert!(leasehold.hangs_detected > 0, "{leasehold:?}");
    // Every kind of operation is in it: workers reach their checkpoints,
    // dead endpoints come back.
    assert!(leasehold.budget_extended > 0, "{leasehold:?}");
    assert_eq!(leasehold.dead_endpoints_answered, leasehold.dead_endpoints);
    // Below the whole deadline curve: hangs found at least as fast as by
    // the 30 s deadline (p50), with fewer live operations cut than any
    // deadline — the longer ones find hangs slower still, the shorter ones
    // cut more.
    let deadline = by_name("deadline");
    assert!(
        leasehold.detect_p50_ms <= deadline.detect_p50_ms,
        "{leasehold:?} {deadline:?}"
    );
    for point in [
        "deadline",
        "deadline@10s",
        "deadline@1m",
        "deadline@2m",
        "deadline@5m",
    ] {
        let point = by_name(point);
        assert!(
            leasehold.slow_alive_killed < point.slow_alive_killed,
            "{leasehold:?} {point:?}"
        );
    }
    // The report kept beside it, which docs/experiments.md shows, is what
    // the workload gives, byte for byte.
    let kept = path.with_file_name("essay-report");
    let dir = tempfile::tempdir().expect("dir");
    report.write_to(dir.path()).expect("written");
    for file in ["report.json", "report.csv", "tradeoff.svg", "wasted.svg"] {
        let made = std::fs::read(dir.path().join(file)).expect("made");
        let committed = std::fs::read(kept.join(file)).expect("kept");
        assert!(
            made == committed,
            "examples/experiments/essay-report/{file} is not what the workload gives: \
             run `leasehold experiment examples/experiments/essay.toml`"
        );
    }
    assert!(by_name("deadline").slow_alive_killed > 0);
    assert!(by_name("idle_kill").slow_alive_killed > 0);
    // The sweep: a longer deadline cuts fewer live operations and takes
    // longer to cut a hang.
    let sweep: Vec<_> = ["deadline@10s", "deadline@1m", "deadline@2m", "deadline@5m"]
        .map(by_name)
        .to_vec();
    for pair in sweep.windows(2) {
        assert!(
            pair[0].slow_alive_killed > pair[1].slow_alive_killed,
            "{pair:?}"
        );
        assert!(pair[0].detect_p50_ms < pair[1].detect_p50_ms, "{pair:?}");
    }
}

#[test]
fn an_evaluator_that_is_always_wrong_cuts_stalled_live_streams_under_leasehold() {
    let report = experiment(
        &fixed_streams(
            3,
            "5s",
            "500ms",
            &format!("{STALLS}[evaluator]\naccuracy = 0.0\n"),
        ),
        &["leasehold"],
    );
    let leasehold = &report.strategies[0];
    // Past the two free renewals the evaluator is asked, and answers
    // INTERVENE about a live stream: each is cut once, then completes.
    assert_eq!(leasehold.slow_alive_killed, 3, "{leasehold:?}");
    assert_eq!(leasehold.runs_completed, 3);
}

#[test]
fn the_command_prints_the_json_report_and_writes_json_csv_and_plots() {
    use std::process::Command;

    let dir = tempfile::tempdir().expect("dir");
    let workload = dir.path().join("w.toml");
    std::fs::write(
        &workload,
        r#"
seed = 9
[model_streams]
count = 3
duration = { dist = "fixed", value = "30s" }
chunk_interval = "1s"
[tool_calls]
count = 1
duration = { dist = "fixed", value = "1s" }
hang_probability = 1.0
"#,
    )
    .expect("written");
    let out = dir.path().join("out");
    let output = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("experiment")
        .arg(&workload)
        .args(["--strategies", "leasehold,deadline@20s", "--json", "--out"])
        .arg(&out)
        .output()
        .expect("runs");
    assert!(output.status.success(), "{output:?}");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(json["strategies"][1]["name"], "deadline@20s");
    assert_eq!(json["strategies"][1]["slow_alive_killed"], 3);
    assert_eq!(
        std::fs::read(out.join("report.json")).expect("report.json"),
        output.stdout
    );
    let csv = std::fs::read_to_string(out.join("report.csv")).expect("report.csv");
    assert!(csv.starts_with("name,policy,lease_ms,"), "{csv}");
    assert_eq!(csv.lines().count(), 3);
    for plot in ["tradeoff.svg", "wasted.svg"] {
        let svg = std::fs::read_to_string(out.join(plot)).expect("plot");
        assert!(svg.starts_with("<svg"), "{plot}");
        assert!(svg.contains("deadline@20s"), "{plot}");
    }

    // Without `--out`, the report and its plots go beside the workload,
    // as `w-report/`, and the table is printed.
    let output = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("experiment")
        .arg(&workload)
        .args(["--strategies", "leasehold,deadline@20s"])
        .output()
        .expect("runs");
    assert!(output.status.success(), "{output:?}");
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(
        table.starts_with("4 operations per strategy, seed 9"),
        "{table}"
    );
    let beside = dir.path().join("w-report");
    assert_eq!(
        std::fs::read(beside.join("report.json")).expect("report.json beside"),
        std::fs::read(out.join("report.json")).expect("report.json")
    );
    for file in ["report.csv", "tradeoff.svg", "wasted.svg"] {
        assert!(beside.join(file).is_file(), "{file}");
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("w-report"), "{stderr}");

    std::fs::write(
        &workload,
        "seed = 1\n[model_streams]\ncount = 1\nchunk_interval = \"1s\"\nduration = { dist = \"pareto\", scale = \"1s\", shape = 0 }\n",
    )
    .expect("written");
    let refused = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("experiment")
        .arg(&workload)
        .output()
        .expect("runs");
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("`model_streams.duration.shape`"),
        "{stderr}"
    );
}

#[test]
fn a_call_to_a_dead_endpoint_gets_its_answer_only_from_a_retry_sent_after_it_came_back() {
    // The endpoint is dead for 45 s: a call sent before is lost, one sent
    // after answers in a second.
    let report = experiment(
        r#"
seed = 10
[tool_calls]
count = 2
duration = { dist = "fixed", value = "1s" }
dead_probability = 1.0
dead_for = { dist = "fixed", value = "45s" }
"#,
        &["deadline", "deadline@30s", "leasehold"],
    );
    let [short, long, leasehold] = strategies(&report);
    for strategy in [short, long, leasehold] {
        assert_eq!(strategy.dead_endpoints, 2, "{strategy:?}");
        assert_eq!(strategy.alive + strategy.hangs, 0, "{strategy:?}");
    }
    // 10 s attempts with backoffs of 1, 2 and 4 s: the fourth and last is
    // sent at 37.2 s, still into the dead endpoint.
    assert_eq!(short.dead_endpoints_answered, 0);
    assert_eq!(short.kills, 8);
    // Cut at 30 s, the second attempt is lost too, the third answers.
    assert_eq!(long.dead_endpoints_answered, 2);
    assert_eq!(long.kills, 4);
    assert_eq!(leasehold.dead_endpoints_answered, 2);
    assert_eq!(leasehold.runs_completed, 2);
}

#[test]
fn a_stream_drawn_longer_than_max_chunks_is_cut_to_that_many_chunks() {
    let workload = Workload::parse(&fixed_streams(1, "24h", "1ms", "")).expect("valid");
    let operation = &workload.generate(1)[0];
    assert_eq!(
        operation.kind,
        OperationKind::ModelStream {
            chunks: MAX_CHUNKS,
            interval: Duration::from_millis(1)
        }
    );
    assert_eq!(operation.work, Duration::from_millis(u64::from(MAX_CHUNKS)));
}

/// Two strategies of the workload's own beside the built-ins, and a sweep
/// of one of them.
const DEFINED: &str = r#"
[[strategies]]
name = "deadline-fail-fast"
policy = "deadline"
supervision = "fail_fast"
on_exhausted = "fail"

[[strategies]]
name = "capped"
policy = "leasehold"
max_renewals = 1
free_renewals = 1

[strategy.sweep]
policies = ["capped"]
leases = ["20s", "1m"]
"#;

#[test]
fn a_workload_defines_strategies_of_its_own_and_sweeps_them() {
    // Four streams of 30 s, a chunk every second, under 10 s leases.
    let workload = Workload::parse(&fixed_streams(4, "30s", "1s", DEFINED)).expect("valid");
    let report = run(&workload, &Options::default()).expect("runs");
    let names: Vec<&str> = report.strategies.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "leasehold",
            "deadline",
            "idle_kill",
            "deadline-fail-fast",
            "capped",
            "capped@20s",
            "capped@1m"
        ]
    );
    let [
        leasehold,
        deadline,
        _,
        fail_fast,
        capped,
        capped_20s,
        capped_1m,
    ] = strategies(&report);
    assert_eq!(leasehold.slow_alive_killed, 0, "{leasehold:?}");
    // The built-in deadline restarts each stream three times, then pauses
    // its run; the same policy failing fast cuts it once and fails it.
    assert_eq!(
        (deadline.kills, deadline.runs_paused),
        (16, 4),
        "{deadline:?}"
    );
    assert_eq!(fail_fast.supervision, "fail_fast");
    assert_eq!(
        (fail_fast.kills, fail_fast.runs_failed),
        (4, 4),
        "{fail_fast:?}"
    );
    // A renewal cap of 1 bounds doubt, not a stream whose chunks keep
    // coming (rule 13): even capped at 1, the 30 s streams complete.
    assert_eq!(capped.max_renewals, 1);
    assert_eq!(capped.slow_alive_killed, 0, "{capped:?}");
    assert_eq!(capped_20s.slow_alive_killed, 0, "{capped_20s:?}");
    assert_eq!(capped_1m.slow_alive_killed, 0, "{capped_1m:?}");
    assert_eq!((capped_20s.lease_ms, capped_20s.max_renewals), (20_000, 1));
}

#[test]
fn a_defined_strategy_that_is_wrong_is_refused_naming_its_key() {
    let base = fixed_streams(1, "1s", "100ms", "");
    let with = |defined: &str| refused_at(&format!("{base}{defined}"));
    assert_eq!(
        with("[[strategies]]\nname = \"deadline\"\npolicy = \"leasehold\"\n"),
        "strategies[0].name"
    );
    assert_eq!(
        with(
            "[[strategies]]\nname = \"a\"\npolicy = \"leasehold\"\n[[strategies]]\nname = \"a\"\npolicy = \"deadline\"\n"
        ),
        "strategies[1].name"
    );
    assert_eq!(
        with("[[strategies]]\nname = \"a@b\"\npolicy = \"leasehold\"\n"),
        "strategies[0].name"
    );
    assert_eq!(
        with("[[strategies]]\nname = \"a\"\npolicy = \"Time Out\"\n"),
        "strategies[0].policy"
    );
    // A policy name no built-in has may be an embedder's: the plan, which
    // knows the registered policies, refuses it before anything runs.
    let unknown = Workload::parse(&format!(
        "{base}[[strategies]]\nname = \"a\"\npolicy = \"timeout\"\n"
    ))
    .expect("parses");
    match leasehold_lab::plan(&unknown, &options(&["a"])) {
        Err(ExperimentError::Workload(error)) => {
            assert_eq!(error.key, "strategies[0].policy", "{error}");
            assert!(error.to_string().contains("`timeout`"), "{error}");
        }
        other => panic!("expected a refusal naming the policy, got {other:?}"),
    }
    assert_eq!(
        with("[[strategies]]\nname = \"a\"\npolicy = \"leasehold\"\nmax_renewals = 1\n"),
        "strategies[0].free_renewals",
        "two free renewals, the default, above a cap of one"
    );
    assert_eq!(
        with("[[strategies]]\nname = \"a\"\npolicy = \"leasehold\"\nlease = \"0s\"\n"),
        "strategies[0].lease"
    );
    let workload = Workload::parse(&format!(
        "{base}[[strategies]]\nname = \"mine\"\npolicy = \"leasehold\"\n\
         [strategy.sweep]\npolicies = [\"yours\"]\nleases = [\"5s\"]\n"
    ))
    .expect("parses: `yours` may be an embedder's policy");
    let Err(ExperimentError::Workload(error)) = leasehold_lab::plan(&workload, &Options::default())
    else {
        panic!("an unknown policy in the sweep is refused by the plan");
    };
    assert_eq!(error.key, "strategy.sweep.policies[0]");
    assert!(error.message.contains("mine"), "{error}");
}

/// The `y` of the `<text>` element whose content is exactly `content`.
fn text_y(svg: &str, content: &str) -> Option<f64> {
    let end = [
        format!(">{content}</text>"),
        format!(">\n{content}\n</text>"),
    ]
    .iter()
    .find_map(|pattern| svg.find(pattern.as_str()))?;
    let start = svg[..end].rfind("<text")?;
    let tag = &svg[start..end];
    let y = tag.split(" y=\"").nth(1)?.split('"').next()?;
    y.parse().ok()
}

#[test]
fn the_trade_off_plot_colours_strategies_by_family_with_a_legend_and_labels_that_do_not_overlap() {
    let svg = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/experiments/essay-report/tradeoff.svg"),
    )
    .expect("the essay's plot");
    // leasehold and leasehold-fail-fast lie on the same point: their labels
    // are stacked, not drawn over each other.
    let (a, b) = (
        text_y(&svg, "leasehold-fail-fast").expect("its label"),
        text_y(&svg, "leasehold").expect("its label (or legend)"),
    );
    assert!((a - b).abs() >= 12.0, "labels at {a} and {b}");
    // A legend line per family, each in its family's colour.
    for family in ["deadline", "idle_kill"] {
        assert!(text_y(&svg, family).is_some(), "no legend for {family}");
    }
    for colour in ["#008C46", "#285AC8", "#E67800"] {
        assert!(
            svg.to_ascii_uppercase().contains(colour),
            "no {colour} in the plot"
        );
    }
    // The share axis ends at 100 %.
    assert!(
        text_y(&svg, "100").is_some(),
        "the share axis does not end at 100"
    );
    assert!(text_y(&svg, "110").is_none() && text_y(&svg, "120").is_none());
}

/// The incident library: each workload and the strategies its table runs.
const INCIDENTS: [(&str, &str); 5] = [
    (
        "long-tool-argument",
        "leasehold,deadline,idle_kill,always_evaluate,deadline@2m",
    ),
    (
        "silent-reasoning",
        "leasehold,deadline,idle_kill,always_evaluate",
    ),
    (
        "wedged-keepalives",
        "leasehold,deadline,idle_kill,always_evaluate",
    ),
    (
        "tools-list-hangs",
        "leasehold,deadline,idle_kill,always_evaluate",
    ),
    (
        "stall-recovers",
        "leasehold,deadline,idle_kill,always_evaluate",
    ),
];

#[test]
fn the_incident_librarys_report_in_experiments_md_is_what_its_workloads_give() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let doc = std::fs::read_to_string(root.join("docs/experiments.md")).expect("the doc");
    let mut reports = Vec::new();
    for (name, strategies) in INCIDENTS {
        let path = root.join(format!("examples/experiments/incidents/{name}.toml"));
        let workload = Workload::load(&path).expect("the incident loads");
        let report = run(
            &workload,
            &Options {
                strategies: Some(strategies.split(',').map(str::to_owned).collect()),
                ..Options::default()
            },
        )
        .expect("runs");
        let table = report.to_table();
        assert!(
            doc.contains(table.trim_end()),
            "docs/experiments.md does not show what {name}.toml gives:\n{table}"
        );
        reports.push((name, report));
    }
    let by = |incident: &str, strategy: &str| {
        reports
            .iter()
            .find(|(name, _)| *name == incident)
            .and_then(|(_, report)| report.strategies.iter().find(|s| s.name == strategy))
            .cloned()
            .unwrap_or_else(|| panic!("{strategy} on {incident}"))
    };
    // A wedged provider's keep-alives fool the read timeout until the cap;
    // leasehold finds the hang within seconds.
    let (leasehold, idle) = (
        by("wedged-keepalives", "leasehold"),
        by("wedged-keepalives", "idle_kill"),
    );
    assert!(leasehold.detect_p50_ms < Some(10_000), "{leasehold:?}");
    assert!(idle.detect_p50_ms > Some(600_000), "{idle:?}");
    // Live work is never cut by leasehold, where a deadline shorter than
    // it, or an idle timeout shorter than its silence, cuts it.
    for incident in ["long-tool-argument", "silent-reasoning", "stall-recovers"] {
        assert_eq!(by(incident, "leasehold").slow_alive_killed, 0, "{incident}");
    }
    assert_eq!(by("silent-reasoning", "idle_kill").slow_alive_killed, 6);
    assert_eq!(by("long-tool-argument", "deadline@2m").slow_alive_killed, 4);
}

/// Intervenes at the first expiry unless progress arrived in the last
/// half lease: a stricter idle timeout, of an embedder's own.
#[derive(Debug)]
struct HalfLease;

impl leasehold::VerdictPolicy for HalfLease {
    fn name(&self) -> &str {
        "half_lease"
    }

    fn judge(&self, expiry: &leasehold::Expiry<'_>) -> leasehold::Judgement {
        if let Some(capped) = leasehold::renewal_cap(expiry) {
            return capped;
        }
        let half = u64::try_from(expiry.lease.as_millis() / 2).unwrap_or(u64::MAX);
        let decision = match expiry.evidence.last_progress_age_ms {
            Some(age) if age < half => {
                leasehold::Decision::renew(leasehold::DecidedBy::Policy, "half_lease: recent")
            }
            _ => leasehold::Decision {
                verdict: leasehold::Verdict::Intervene,
                reason: "half_lease: quiet".to_owned(),
                nudge: None,
                decided_by: leasehold::DecidedBy::Policy,
            },
        };
        leasehold::Judgement::Decided(decision)
    }
}

const TOOLS_WITH_PROGRESS: &str = r#"
seed = 11

[tool_calls]
count = 6
duration = { dist = "fixed", value = "20s" }
progress_interval = "2s"
hang_probability = 0.5

[strategy]
lease = "5s"
"#;

#[test]
fn an_embedders_verdict_policy_is_compared_beside_the_built_ins_from_rust_and_from_its_own_binary()
{
    // From Rust: a strategy named as the policy, at a lease of its own too.
    let workload = Workload::parse(TOOLS_WITH_PROGRESS).expect("valid workload");
    let with_policy = Options {
        strategies: Some(vec![
            "leasehold".into(),
            "half_lease".into(),
            "half_lease@10s".into(),
        ]),
        policies: vec![std::sync::Arc::new(HalfLease)],
        ..Options::default()
    };
    let report = run(&workload, &with_policy).expect("runs");
    let [leasehold, half, longer] = strategies::<3>(&report);
    assert_eq!(leasehold.policy, "leasehold");
    assert_eq!(
        (half.name.as_str(), half.policy.as_str()),
        ("half_lease", "half_lease")
    );
    assert_eq!(longer.lease_ms, 10_000);
    assert_eq!(half.hangs_detected, half.hangs, "a quiet call is cut");
    // Unregistered, the same name is refused naming what is known.
    let refused = run(&workload, &options(&["half_lease"])).expect_err("unknown");
    assert!(refused.to_string().contains("half_lease"), "{refused}");

    // From a `leasehold` binary of one's own: the command line with the
    // policy registered runs the same comparison.
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("tools.toml");
    std::fs::write(&path, TOOLS_WITH_PROGRESS).expect("written");
    let out = dir.path().join("report");
    let cli = <leasehold_cli::cli::Cli as clap::Parser>::try_parse_from([
        "leasehold",
        "experiment",
        path.to_str().expect("utf-8"),
        "--strategies",
        "leasehold,half_lease",
        "--out",
        out.to_str().expect("utf-8"),
    ])
    .expect("parses")
    .with_policy(std::sync::Arc::new(HalfLease));
    let code = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(cli.run())
        .expect("the command runs");
    assert_eq!(code, std::process::ExitCode::SUCCESS);
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).expect("read"))
            .expect("json");
    let policies: Vec<&str> = written["strategies"]
        .as_array()
        .expect("strategies")
        .iter()
        .filter_map(|s| s["policy"].as_str())
        .collect();
    assert_eq!(policies, ["leasehold", "half_lease"]);
}

#[test]
fn a_strategy_a_workload_defines_may_be_judged_by_an_embedders_policy() {
    let text = format!(
        "{TOOLS_WITH_PROGRESS}\n[[strategies]]\nname = \"half-10s\"\npolicy = \"half_lease\"\nlease = \"10s\"\n"
    );
    let workload = Workload::parse(&text).expect("an embedder's policy may be named");
    let with_policy = Options {
        strategies: Some(vec!["deadline".into(), "half-10s".into()]),
        policies: vec![std::sync::Arc::new(HalfLease)],
        ..Options::default()
    };
    let report = run(&workload, &with_policy).expect("runs");
    let [_, half] = strategies::<2>(&report);
    assert_eq!(
        (half.name.as_str(), half.policy.as_str(), half.lease_ms),
        ("half-10s", "half_lease", 10_000)
    );
    assert_eq!(
        half.hangs_detected, half.hangs,
        "its policy cuts a quiet call"
    );
    let refused = run(&workload, &options(&["half-10s"])).expect_err("unregistered");
    assert!(
        refused.to_string().contains("strategies[0].policy"),
        "{refused}"
    );
    // The sweep may name it too: `half_lease@10s` among the defaults.
    let swept = Workload::parse(&format!(
        "{TOOLS_WITH_PROGRESS}\n[strategy.sweep]\npolicies = [\"half_lease\"]\nleases = [\"10s\"]\n"
    ))
    .expect("an embedder's policy may be swept");
    let names = swept.strategy.default_names(&swept.strategies);
    assert!(names.iter().any(|n| n == "half_lease@10s"), "{names:?}");
    let own: Vec<std::sync::Arc<dyn leasehold::VerdictPolicy>> =
        vec![std::sync::Arc::new(HalfLease)];
    let strategy = swept
        .strategy
        .strategy_judged("half_lease@10s", &swept.strategies, &own)
        .expect("resolves");
    assert_eq!(strategy.policy.as_str(), "half_lease");
    assert_eq!(strategy.lease, Duration::from_secs(10));
    assert!(strategy.judge.is_some());
    let planned = Options {
        policies: own,
        ..Options::default()
    };
    leasehold_lab::plan(&swept, &planned).expect("planned with the policy registered");
}
