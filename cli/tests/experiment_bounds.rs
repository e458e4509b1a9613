//! Experiments are bounded before they start: at most `MAX_STRATEGIES`
//! strategies counted after the sweep expands, at most `--max-events`
//! simulated events as estimated from the drawn operations; a workload
//! past either is refused at once naming the key, the count or estimate
//! and the limit. A workload within them prints its estimate and its
//! progress on standard error, its report alone on standard output, and
//! its memory does not grow with its operations.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use leasehold_lab::{
    DEFAULT_MAX_EVENTS, MAX_STRATEGIES, Options, Plan, Workload, plan, run_strategies,
};

/// How long a refusal may take on a loaded machine; a workload that is
/// not refused plays for far longer (hours, for the ones below).
const PATIENCE: Duration = Duration::from_secs(60);

const STREAMS: &str = "seed = 1\n[model_streams]\ncount = 2\n\
    duration = { dist = \"fixed\", value = \"3s\" }\nchunk_interval = \"500ms\"\n";

/// `leasehold experiment` on the workload `text`, with `args`, given
/// [`PATIENCE`]: killed and failed if it takes longer.
fn experiment(dir: &Path, text: &str, args: &[&str]) -> Output {
    let workload = dir.join("w.toml");
    std::fs::write(&workload, text).expect("written");
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("experiment")
        .arg(&workload)
        .args(["--out", dir.join("out").to_str().expect("utf-8")])
        .args(args)
        .stdout(Stdio::from(
            std::fs::File::create(dir.join("stdout")).expect("stdout"),
        ))
        .stderr(Stdio::from(
            std::fs::File::create(dir.join("stderr")).expect("stderr"),
        ))
        .spawn()
        .expect("leasehold starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            break status;
        }
        if started.elapsed() > PATIENCE {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "`leasehold experiment` still running after {PATIENCE:?}: {}",
                std::fs::read_to_string(dir.join("stderr")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: std::fs::read(dir.join("stdout")).expect("stdout"),
        stderr: std::fs::read(dir.join("stderr")).expect("stderr"),
    }
}

/// The refusal's message, checking that it is one: exit 1, nothing on
/// standard output, no report written.
fn refused(dir: &Path, output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(output.stdout.is_empty());
    assert!(!dir.join("out").exists(), "a report was written");
    stderr
}

#[test]
fn a_sweep_past_the_strategy_limit_is_refused_at_once_naming_the_sweep_and_the_count() {
    let dir = tempfile::tempdir().expect("dir");
    let leases: Vec<String> = (1..=15_000).map(|s| format!("\"{s}s\"")).collect();
    let text = format!(
        "{STREAMS}[strategy.sweep]\npolicies = [\"deadline\"]\nleases = [{}]\n",
        leases.join(",")
    );
    let stderr = refused(dir.path(), &experiment(dir.path(), &text, &[]));
    assert!(stderr.contains("`strategy.sweep`"), "{stderr}");
    assert!(stderr.contains("15000 strategies"), "{stderr}");
    assert!(
        stderr.contains(&format!("at most {MAX_STRATEGIES}")),
        "{stderr}"
    );
}

#[test]
fn a_hundred_thousand_streams_of_a_hundred_thousand_chunks_are_refused_at_once_naming_the_estimate_and_the_limit()
 {
    let dir = tempfile::tempdir().expect("dir");
    // One day at 864 ms a chunk: 100,000 chunks each.
    let text = "seed = 1\n[model_streams]\ncount = 100000\n\
        duration = { dist = \"fixed\", value = \"1day\" }\nchunk_interval = \"864ms\"\n";
    let stderr = refused(dir.path(), &experiment(dir.path(), text, &[]));
    assert!(stderr.contains("`model_streams`"), "{stderr}");
    // Three default strategies, each streaming 10,000,000,000 chunks.
    assert!(
        stderr.contains("100,000 operations under 3 strategies (300,000 runs)"),
        "{stderr}"
    );
    assert!(stderr.contains("about 30,"), "{stderr}");
    assert_eq!(DEFAULT_MAX_EVENTS, 1_000_000_000);
    assert!(
        stderr.contains("expected at most 1,000,000,000 simulated events"),
        "{stderr}"
    );
    assert!(stderr.contains("--max-events"), "{stderr}");
}

#[test]
fn more_strategies_than_the_limit_are_refused_whether_named_or_run_by_default() {
    let dir = tempfile::tempdir().expect("dir");
    let names = vec!["deadline"; MAX_STRATEGIES + 1].join(",");
    let stderr = refused(
        dir.path(),
        &experiment(dir.path(), STREAMS, &["--strategies", &names]),
    );
    assert!(stderr.contains("`--strategies`"), "{stderr}");
    assert!(stderr.contains("65 strategies named"), "{stderr}");

    // 62 strategies of its own and the three built-ins run by default.
    let defined: String = (0..62)
        .map(|i| format!("[[strategies]]\nname = \"own-{i}\"\npolicy = \"deadline\"\n"))
        .collect();
    let workload = Workload::parse(&format!("{STREAMS}{defined}")).expect("valid");
    let error = plan(&workload, &Options::default()).expect_err("refused");
    assert!(
        error.to_string().contains("at `strategies`: 65 strategies"),
        "{error}"
    );
    // Named, a few of them run.
    let options = Options {
        strategies: Some(vec!["own-0".into(), "own-61".into()]),
        ..Options::default()
    };
    assert_eq!(
        plan(&workload, &options)
            .expect("planned")
            .estimate()
            .strategies,
        2
    );
    // An embedder's own list is held to the same limit.
    let many = vec![workload.resolve("deadline").expect("built in"); MAX_STRATEGIES + 1];
    let error = run_strategies(&workload, &many, None).expect_err("refused");
    assert!(error.to_string().contains("at `strategies`"), "{error}");
}

#[test]
fn the_estimate_counts_every_kind_and_the_limit_is_the_estimate() {
    let workload = Workload::parse(
        "seed = 3\n[model_streams]\ncount = 10\n\
         duration = { dist = \"fixed\", value = \"50s\" }\nchunk_interval = \"500ms\"\n\
         [tool_calls]\ncount = 4\nduration = { dist = \"fixed\", value = \"20s\" }\n\
         progress_interval = \"2s\"\n\
         [workers]\ncount = 2\nsteps = { min = 3, max = 3 }\nmax_steps = 0\n\
         step_duration = { dist = \"fixed\", value = \"5s\" }\nchunk_interval = \"1s\"\n",
    )
    .expect("valid");
    let leasehold = workload.resolve("leasehold").expect("built in");
    let estimate = Plan::new(&workload, vec![leasehold.clone()], None, None)
        .expect("planned")
        .estimate();
    assert_eq!((estimate.operations, estimate.strategies), (16, 1));
    // Each stream streams 100 chunks, each tool call reports progress 10
    // times, each worker streams 15 chunks in 3 steps (each step a model
    // and a tool call, started and finished); every run and attempt counts
    // for its actors, every lease period (10 s) for a verdict.
    let run = 500 + 50;
    assert_eq!(estimate.model_streams, 10 * (run + 100 + 5));
    assert_eq!(estimate.tool_calls, 4 * (run + 10 + 2));
    assert_eq!(estimate.workers, 2 * (run + 15 + 3 * 4 + 1));
    // Twice the strategies, twice the events.
    let twice = Plan::new(&workload, vec![leasehold.clone(); 2], None, None)
        .expect("planned")
        .estimate();
    assert_eq!(twice.events(), 2 * estimate.events());
    // The limit is inclusive, and a refusal names the heaviest kind.
    let events = estimate.events();
    assert!(Plan::new(&workload, vec![leasehold.clone()], None, Some(events)).is_ok());
    let error = Plan::new(&workload, vec![leasehold], None, Some(events - 1)).expect_err("over");
    assert_eq!(error.key, "model_streams");
    assert!(
        error.message.starts_with(&estimate.to_string())
            && error.message.contains("expected at most"),
        "{error}"
    );
    assert!(
        estimate
            .to_string()
            .starts_with("16 operations under 1 strategy (16 runs), about "),
        "{estimate}"
    );
}

#[test]
fn a_hung_streams_keepalives_count_in_the_estimate() {
    // Ten streams that hang at once and send a keep-alive every
    // millisecond until their attempts are cut: the keep-alives are events
    // like any chunk, and a workload of too many is refused before it runs.
    let quiet = "seed = 3\n[model_streams]\ncount = 10\n\
                 duration = { dist = \"fixed\", value = \"50s\" }\nchunk_interval = \"500ms\"\n\
                 hang_probability = 1.0\n";
    let estimate = |text: &str| {
        let workload = Workload::parse(text).expect("valid");
        let leasehold = workload.resolve("leasehold").expect("built in");
        Plan::new(&workload, vec![leasehold], None, None)
            .expect("planned")
            .estimate()
    };
    let without = estimate(quiet);
    let with = estimate(&format!("{quiet}keepalive_interval = \"1ms\"\n"));
    // Each attempt lives at most 11 leases of 10 s: 110 000 keep-alives.
    assert!(
        with.model_streams >= without.model_streams + 10 * 110_000,
        "{with:?} against {without:?}"
    );
}

#[test]
fn a_workload_within_its_bounds_prints_its_estimate_and_progress_on_stderr_and_only_its_report_on_stdout()
 {
    let dir = tempfile::tempdir().expect("dir");
    let text = format!(
        "{STREAMS}[tool_calls]\ncount = 1\nduration = {{ dist = \"fixed\", value = \"1s\" }}\n"
    );
    let output = experiment(
        dir.path(),
        &text,
        &["--strategies", "leasehold,deadline@20s", "--json"],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines[0].starts_with("experiment: 3 operations under 2 strategies (6 runs), about ")
            && lines[0].ends_with(" simulated events"),
        "{stderr}"
    );
    let progress = [
        "experiment: strategy 1/2 leasehold: 3 operations",
        "experiment: strategy 1/2 leasehold: done in ",
        "experiment: strategy 2/2 deadline@20s: 3 operations",
        "experiment: strategy 2/2 deadline@20s: done in ",
    ];
    for (line, expected) in lines[1..].iter().zip(progress) {
        assert!(line.starts_with(expected), "{stderr}");
    }
    assert!(lines[5].starts_with("wrote report.json"), "{stderr}");
    // Standard output is the report, as written, and nothing else.
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("only JSON");
    assert_eq!(json["strategies"][1]["name"], "deadline@20s");
    assert_eq!(
        std::fs::read(dir.path().join("out/report.json")).expect("report.json"),
        output.stdout
    );

    // Below its estimate, the same workload is refused, naming the limit.
    let dir = tempfile::tempdir().expect("dir");
    let stderr = refused(
        dir.path(),
        &experiment(dir.path(), &text, &["--max-events", "1000"]),
    );
    assert!(
        stderr.contains("expected at most 1,000 simulated events"),
        "{stderr}"
    );
}

/// The peak resident memory of `leasehold experiment` on `text`, in KiB,
/// read from `/proc` while it runs (the high-water mark only grows, so the
/// last reading before it exits is its peak but for its last moments).
#[cfg(target_os = "linux")]
fn peak_kib(dir: &Path, text: &str) -> u64 {
    let workload = dir.join("w.toml");
    std::fs::write(&workload, text).expect("written");
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("experiment")
        .arg(&workload)
        .args(["--strategies", "leasehold", "--json", "--out"])
        .arg(dir.join("out"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("leasehold starts");
    let status = format!("/proc/{}/status", child.id());
    let started = Instant::now();
    let mut peak = 0;
    loop {
        if let Some(done) = child.try_wait().expect("the child can be waited for") {
            assert!(done.success());
            return peak;
        }
        let high_water = std::fs::read_to_string(&status)
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("VmHWM:"))?.to_owned();
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .unwrap_or(0);
        peak = peak.max(high_water);
        assert!(started.elapsed() < 4 * PATIENCE, "still running");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(target_os = "linux")]
#[test]
fn an_experiments_memory_does_not_grow_with_its_operations() {
    let tools = |count: u32| {
        format!(
            "seed = 1\n[tool_calls]\ncount = {count}\nduration = {{ dist = \"fixed\", value = \"1s\" }}\n"
        )
    };
    let dirs = [
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    ];
    let few = peak_kib(dirs[0].path(), &tools(300));
    let many = peak_kib(dirs[1].path(), &tools(3_000));
    // Each run used to stay in the in-memory store and the scripted fakes
    // until the strategy ended: 2 700 more runs, 70 MiB more.
    assert!(
        many < few + 24 * 1024,
        "300 operations: {few} KiB at most; 3000: {many} KiB"
    );
}
