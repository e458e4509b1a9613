//! The configuration's layers, refusals and timing arithmetic. What
//! `leasehold config` prints of a configuration is tested with the command,
//! in `cli/tests/config_described.rs`.

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use leasehold::{
    EngineConfig, LeaseKind,
    config::{
        Config, Flag, IDLE_TIMEOUT_FORMULA, KEYS_TABLE_END, KEYS_TABLE_START, LoadError, Source,
    },
    model::ModelRole,
    store::Durability,
};

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name: &str| map.get(name).cloned()
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn temp_toml(text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::Builder::new()
        .suffix(".toml")
        .tempfile()
        .expect("temp file");
    file.write_all(text.as_bytes()).expect("write");
    file
}

#[test]
fn defaults_match_the_actors_defaults_and_come_from_default() {
    let config = Config::load(None, no_env).expect("defaults load");
    assert_eq!(config, Config::default());
    assert_eq!(config.engine_config(), EngineConfig::default());
    assert_eq!(config.watchdog_role.value, ModelRole::Fast);
    assert!(!config.resume_on_boot.value);
    assert_eq!(config.durability.value, Durability::Sync);
    assert_eq!(config.file, None);
    for (key, value, source) in config.entries() {
        if key.file == "model.idle_timeout" {
            assert_eq!(source, Source::Derived(IDLE_TIMEOUT_FORMULA));
            assert_eq!(value, "15m 15s");
            continue;
        }
        assert_eq!(source, Source::Default, "{}", key.env);
        assert_eq!(value, key.default, "documented default of {}", key.env);
    }
}

#[test]
fn the_idle_timeout_unset_is_derived_so_the_watchdog_judges_a_silent_call_first() {
    let defaults = Config::default();
    let idle = defaults.idle_timeout();
    // (2 free renewals + 1) × the longer model lease (5m, blocking) + 15s.
    assert_eq!(idle.value, Duration::from_secs(15 * 60 + 15));
    assert_eq!(idle.source, Source::Derived(IDLE_TIMEOUT_FORMULA));
    assert!(
        idle.source
            .to_string()
            .starts_with("derived: (watchdog.free_renewals + 1)"),
        "{}",
        idle.source
    );
    for kind in [LeaseKind::ModelStream, LeaseKind::ModelBlocking] {
        assert!(idle.value >= defaults.first_judgment(kind), "{kind}");
    }
    // It follows the effective configuration, and reaches the model client.
    let config = Config::load(
        None,
        env_of(&[
            ("LEASEHOLD_LEASE_MODEL_STREAM", "10m"),
            ("LEASEHOLD_WATCHDOG_FREE_RENEWALS", "3"),
            ("LEASEHOLD_EVALUATOR_TIMEOUT", "30s"),
            ("LEASEHOLD_MODEL_BASE_URL", "http://127.0.0.1:8000/v1"),
            ("LEASEHOLD_MODEL_NAME", "big"),
        ]),
    )
    .expect("loads");
    let derived = Duration::from_secs(4 * 10 * 60 + 30);
    assert_eq!(config.idle_timeout().value, derived);
    assert_eq!(
        config.model_settings().expect("settings").idle_timeout,
        derived
    );
    let shown = config
        .entries()
        .into_iter()
        .find(|(key, _, _)| key.file == "model.idle_timeout")
        .expect("listed");
    assert_eq!(shown.1, "40m 30s");
    assert!(shown.2.to_string().starts_with("derived: "), "{}", shown.2);
    assert_eq!(config.warnings(), Vec::<String>::new());
    // Set, it is what was set, from where it was set.
    let set =
        Config::load(None, env_of(&[("LEASEHOLD_MODEL_IDLE_TIMEOUT", "20m")])).expect("loads");
    assert_eq!(set.idle_timeout().value, Duration::from_secs(20 * 60));
    assert_eq!(
        set.idle_timeout().source,
        Source::Env("LEASEHOLD_MODEL_IDLE_TIMEOUT".into())
    );
}

#[test]
fn the_derived_idle_timeout_counts_no_free_renewals_under_always_evaluate() {
    let config = Config::load(
        None,
        env_of(&[("LEASEHOLD_WATCHDOG_POLICY", "always_evaluate")]),
    )
    .expect("loads");
    // The longer model lease (5m, blocking) once, then the evaluator's 15s:
    // the first expiry already asks the evaluator.
    let idle = config.idle_timeout();
    assert_eq!(idle.value, Duration::from_secs(5 * 60 + 15));
    assert_eq!(idle.source, Source::Derived(IDLE_TIMEOUT_FORMULA));
    assert!(IDLE_TIMEOUT_FORMULA.contains("always_evaluate"));
    assert_eq!(config.warnings(), Vec::<String>::new());
}

#[test]
fn an_idle_timeout_that_cuts_a_model_call_before_its_first_judgment_is_warned_about() {
    // 1m against a stream judged at 6m15s and a blocking call at 15m15s.
    let config =
        Config::load(None, env_of(&[("LEASEHOLD_MODEL_IDLE_TIMEOUT", "1m")])).expect("loads");
    let warnings = config.warnings();
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    for (warning, lease, judged) in [
        (&warnings[0], "LEASEHOLD_LEASE_MODEL_STREAM", "6m15s"),
        (&warnings[1], "LEASEHOLD_LEASE_MODEL_BLOCKING", "15m15s"),
    ] {
        assert!(
            warning.starts_with(
                "`model.idle_timeout` (LEASEHOLD_MODEL_IDLE_TIMEOUT, from the environment) is 1m"
            ),
            "{warning}"
        );
        assert!(warning.contains(lease), "{warning}");
        assert!(warning.contains(&format!("judged ({judged}")), "{warning}");
        assert!(
            warning.contains("before the watchdog has judged it"),
            "{warning}"
        );
    }
    // Just long enough for the blocking call: no warning; a millisecond
    // less cuts the blocking call only.
    let enough =
        Config::load(None, env_of(&[("LEASEHOLD_MODEL_IDLE_TIMEOUT", "15m 15s")])).expect("loads");
    assert_eq!(enough.warnings(), Vec::<String>::new());
    let short = Config::load(
        None,
        env_of(&[("LEASEHOLD_MODEL_IDLE_TIMEOUT", "15m 14s 999ms")]),
    )
    .expect("loads");
    let warnings = short.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains("LEASEHOLD_LEASE_MODEL_BLOCKING"),
        "{warnings:?}"
    );
    // A longer lease with the idle timeout left in a file: the stream is cut.
    let file = temp_toml("[model]\nidle_timeout = \"20m\"\n[lease]\nmodel_stream = \"10m\"\n");
    let config = Config::load(Some(file.path()), no_env).expect("loads");
    let warnings = config.warnings().join("\n");
    assert!(
        warnings.contains("`model.idle_timeout` (LEASEHOLD_MODEL_IDLE_TIMEOUT, file "),
        "{warnings}"
    );
    assert!(
        warnings.contains("LEASEHOLD_LEASE_MODEL_STREAM"),
        "{warnings}"
    );
}

#[test]
fn environment_overrides_file_overrides_default_and_each_value_names_its_source() {
    let file = temp_toml(
        "durability = \"async\"\n\
         [lease]\n\
         tool_call = \"90s\"\n\
         model_stream = \"1m\"\n\
         [restart]\n\
         max = 5\n",
    );
    let path = file.path();
    let env = env_of(&[
        ("LEASEHOLD_LEASE_TOOL_CALL", "250ms"),
        ("LEASEHOLD_RESUME_ON_BOOT", "yes"),
    ]);
    let config = Config::load(Some(path), env).expect("loads");

    assert_eq!(config.lease_tool_call.value, Duration::from_millis(250));
    assert_eq!(
        config.lease_tool_call.source,
        Source::Env("LEASEHOLD_LEASE_TOOL_CALL".into())
    );
    assert_eq!(config.lease_model_stream.value, Duration::from_secs(60));
    assert_eq!(
        config.lease_model_stream.source,
        Source::File(path.to_path_buf())
    );
    assert_eq!(config.restart_max.value, 5);
    assert_eq!(config.durability.value, Durability::Async);
    assert!(config.resume_on_boot.value);
    assert_eq!(config.lease_worker_step.source, Source::Default);
    assert_eq!(config.file.as_deref(), Some(path));
    assert_eq!(config.engine_config().restart.max_restarts, 5);
}

#[test]
fn the_file_can_be_named_by_leasehold_config() {
    let file = temp_toml("[watchdog]\nfree_renewals = 4\n");
    let path = file.path().to_str().expect("utf-8 path").to_owned();
    let config = Config::load(None, env_of(&[("LEASEHOLD_CONFIG", &path)])).expect("loads");
    assert_eq!(config.free_renewals.value, 4);
    assert_eq!(config.free_renewals.source, Source::File(path.into()));
}

#[test]
fn a_bad_duration_names_the_variable_and_what_it_expected() {
    let error = Config::load(
        None,
        env_of(&[("LEASEHOLD_LEASE_TOOL_CALL", "five minutes")]),
    )
    .expect_err("refused");
    let text = error.to_string();
    assert!(matches!(error, LoadError::BadValue { .. }), "{error:?}");
    assert!(text.contains("LEASEHOLD_LEASE_TOOL_CALL"), "{text}");
    assert!(
        text.contains("a duration such as 250ms, 90s or 5m"),
        "{text}"
    );
    assert!(text.contains("five minutes"), "{text}");
}

#[test]
fn a_bad_file_value_names_the_file_key() {
    let file = temp_toml("[watchdog]\nrole = \"slow\"\n");
    let error = Config::load(Some(file.path()), no_env).expect_err("refused");
    let text = error.to_string();
    assert!(text.contains("watchdog.role"), "{text}");
    assert!(text.contains("default or fast"), "{text}");
}

#[test]
fn an_unknown_file_key_is_refused_with_its_path() {
    let file = temp_toml("[lease]\ntool_cal = \"5m\"\n");
    let error = Config::load(Some(file.path()), no_env).expect_err("refused");
    match &error {
        LoadError::UnknownKey { key, path } => {
            assert_eq!(key, "lease.tool_cal");
            assert_eq!(path, file.path());
        }
        other => panic!("expected an unknown key, got {other:?}"),
    }
    assert!(error.to_string().contains("lease.tool_cal"), "{error}");
}

#[test]
fn free_renewals_above_the_renewal_cap_are_refused() {
    let env = env_of(&[
        ("LEASEHOLD_WATCHDOG_FREE_RENEWALS", "5"),
        ("LEASEHOLD_LEASE_MAX_RENEWALS", "4"),
    ]);
    let error = Config::load(None, env).expect_err("refused");
    let text = error.to_string();
    assert!(text.contains("LEASEHOLD_WATCHDOG_FREE_RENEWALS"), "{text}");
    assert!(text.contains("LEASEHOLD_LEASE_MAX_RENEWALS (4)"), "{text}");
}

#[test]
fn a_lease_below_lease_min_and_a_longest_backoff_below_the_first_are_refused_naming_both() {
    let error = Config::load(
        None,
        env_of(&[
            ("LEASEHOLD_LEASE_MIN", "1s"),
            ("LEASEHOLD_LEASE_TOOL_CALL", "500ms"),
        ]),
    )
    .expect_err("refused");
    assert_eq!(
        error.to_string(),
        "invalid `LEASEHOLD_LEASE_TOOL_CALL (lease.tool_call)`: expected at least \
         LEASEHOLD_LEASE_MIN (1s): no lease may be shorter, got 500ms"
    );
    let error = Config::load(None, env_of(&[("LEASEHOLD_RESTART_BACKOFF_INITIAL", "1m")]))
        .expect_err("refused");
    assert_eq!(
        error.to_string(),
        "invalid `LEASEHOLD_RESTART_BACKOFF_MAX (restart.backoff_max)`: expected at least \
         LEASEHOLD_RESTART_BACKOFF_INITIAL (1m): the backoff grows from the first to the \
         longest, got 30s"
    );
}

#[test]
fn the_outage_keys_reach_the_engine_and_probes_that_shrink_or_a_wave_of_none_are_refused() {
    let config = Config::load(
        None,
        env_of(&[
            ("LEASEHOLD_OUTAGE_FAILURES", "3"),
            ("LEASEHOLD_OUTAGE_PROBE_INITIAL", "250ms"),
            ("LEASEHOLD_OUTAGE_PROBE_MAX", "2m"),
            ("LEASEHOLD_OUTAGE_RESUME_WAVE", "20"),
        ]),
    )
    .expect("loads");
    assert_eq!(
        config.engine_config().outages,
        leasehold::Outages {
            failures: 3,
            probe_initial: Duration::from_millis(250),
            probe_max: Duration::from_secs(120),
            resume_wave: 20,
        }
    );
    let error = Config::load(None, env_of(&[("LEASEHOLD_OUTAGE_PROBE_INITIAL", "1m")]))
        .expect_err("refused");
    assert_eq!(
        error.to_string(),
        "invalid `LEASEHOLD_OUTAGE_PROBE_MAX (outage.probe_max)`: expected at least \
         LEASEHOLD_OUTAGE_PROBE_INITIAL (1m): the wait between probes grows from the first to \
         the longest, got 30s"
    );
    for key in ["LEASEHOLD_OUTAGE_FAILURES", "LEASEHOLD_OUTAGE_RESUME_WAVE"] {
        let error = Config::load(None, env_of(&[(key, "0")])).expect_err("refused");
        assert!(error.to_string().contains(key), "{error}");
        assert!(error.to_string().contains("expected at least 1"), "{error}");
    }
}

#[test]
fn a_renamed_key_is_read_under_its_old_name_and_warned_about_naming_the_new_one() {
    // From the environment.
    let config = Config::load(None, env_of(&[("LEASEHOLD_WATCHDOG_MAX_RENEWALS", "7")]))
        .expect("the old variable is read");
    assert_eq!(config.max_renewals.value, 7);
    assert_eq!(
        config.max_renewals.source,
        Source::Env("LEASEHOLD_WATCHDOG_MAX_RENEWALS".into())
    );
    let warnings = config.warnings();
    assert_eq!(
        warnings,
        [
            "LEASEHOLD_WATCHDOG_MAX_RENEWALS (env LEASEHOLD_WATCHDOG_MAX_RENEWALS) is the old name \
          of LEASEHOLD_LEASE_MAX_RENEWALS: it is read as LEASEHOLD_LEASE_MAX_RENEWALS, but write \
          LEASEHOLD_LEASE_MAX_RENEWALS"
        ]
    );
    // Both names in one layer: the new one wins, and the old is called
    // ignored.
    let both = Config::load(
        None,
        env_of(&[
            ("LEASEHOLD_WATCHDOG_MAX_RENEWALS", "7"),
            ("LEASEHOLD_LEASE_MAX_RENEWALS", "8"),
        ]),
    )
    .expect("loads");
    assert_eq!(both.max_renewals.value, 8);
    assert!(
        both.warnings()[0].contains("is ignored"),
        "{:?}",
        both.warnings()
    );

    // From the file, old names in old tables.
    let file = temp_toml("[watchdog]\nmax_renewals = 6\n[restart]\nmax = 1\n");
    let config = Config::load(Some(file.path()), no_env).expect("the old file keys are read");
    assert_eq!(config.max_renewals.value, 6);
    assert_eq!(config.restart_max.value, 1);
    assert_eq!(config.engine_config().restart.max_restarts, 1);
    let warnings = config.warnings().join("\n");
    for (old, new) in [
        ("watchdog.max_renewals", "lease.max_renewals"),
        ("restart.max", "restart.max_restarts"),
    ] {
        assert!(
            warnings.contains(&format!(
                "{old} (file {}) is the old name of {new}",
                file.path().display()
            )),
            "{warnings}"
        );
    }
    let both = temp_toml("[watchdog]\nmax_renewals = 6\n[lease]\nmax_renewals = 5\n");
    let config = Config::load(Some(both.path()), no_env).expect("loads");
    assert_eq!(config.max_renewals.value, 5);
    // A bad value under the old name is refused under the name it was given.
    let bad = Config::from_toml_str("[watchdog]\nmax_renewals = \"many\"\n").unwrap_err();
    assert!(
        bad.to_string()
            .contains(": watchdog.max_renewals: expected a whole number"),
        "{bad}"
    );

    // From a flag.
    let config = Config::load_layers(
        None,
        no_env,
        &[Flag::parse_set("restart.max=2").expect("a flag")],
    )
    .expect("the old key is taken by --set");
    assert_eq!(config.restart_max.value, 2);
    assert!(
        config.warnings()[0].starts_with(
            "restart.max (flag --set restart.max) is the old name of restart.max_restarts"
        ),
        "{:?}",
        config.warnings()
    );
}

#[test]
fn budget_max_extensions_may_be_lowered_but_not_raised_past_3() {
    for max in ["0", "2", "3"] {
        let config = Config::load(None, env_of(&[("LEASEHOLD_BUDGET_MAX_EXTENSIONS", max)]))
            .unwrap_or_else(|e| panic!("{max} refused: {e}"));
        assert_eq!(
            config.engine_config().budget.max_extensions.to_string(),
            max
        );
    }
    let error = Config::load(None, env_of(&[("LEASEHOLD_BUDGET_MAX_EXTENSIONS", "4")]))
        .expect_err("above 3 is refused");
    let text = error.to_string();
    assert!(
        text.contains("LEASEHOLD_BUDGET_MAX_EXTENSIONS (budget.max_extensions)"),
        "{text}"
    );
    assert!(text.contains("at most 3"), "{text}");
    assert!(
        text.contains("from env LEASEHOLD_BUDGET_MAX_EXTENSIONS"),
        "{text}"
    );
    assert!(text.ends_with("got 4"), "{text}");
    let error = Config::from_toml_str("[budget]\nmax_extensions = 1000\n")
        .expect_err("a file above 3 is refused too");
    assert!(
        error
            .to_string()
            .contains("LEASEHOLD_BUDGET_MAX_EXTENSIONS (budget.max_extensions)"),
        "{error}"
    );
}

#[test]
fn a_zero_duration_is_refused_naming_the_variable() {
    let error =
        Config::load(None, env_of(&[("LEASEHOLD_RESTART_WINDOW", "0s")])).expect_err("refused");
    assert!(
        error.to_string().contains("LEASEHOLD_RESTART_WINDOW"),
        "{error}"
    );
}

#[test]
fn the_timing_arithmetic_of_the_defaults() {
    let config = Config::default();
    let tool = config.timing(LeaseKind::ToolCall);
    let minutes = |m: u64| Duration::from_secs(m * 60);
    assert_eq!(tool.lease, minutes(5));
    assert_eq!(tool.first_evaluation, minutes(15));
    // 11 leases of 5 min, and 8 expiries (renewals 2 to 9) that each wait up
    // to 15 s for the evaluator before the lease is re-armed.
    assert_eq!(tool.lease_periods, 11);
    assert_eq!(tool.evaluations, 8);
    assert_eq!(tool.renewal_cap, minutes(57));
    assert_eq!(tool.attempts, 4);
    // Backoffs 1 s, 2 s, 4 s, each at the top of its ±10 % jitter.
    assert_eq!(tool.backoffs, Duration::from_millis(7_700));
    assert_eq!(
        tool.worst_case,
        minutes(4 * 57) + Duration::from_millis(7_700)
    );
    assert_eq!(
        tool.to_string(),
        "tool_call: lease 5m · free renewals until 15m · first evaluation at 15m · \
         renewal cap at 57m (11 leases + 8 evaluations of at most 15s) · 4 attempts · \
         backoffs at most 7s700ms · worst case 3h48m7s700ms · ceiling 4h"
    );
    let stream = config.timing(LeaseKind::ModelStream);
    assert_eq!(stream.first_evaluation, minutes(6));
    assert_eq!(stream.renewal_cap, minutes(24));
    assert_eq!(config.timings().len(), LeaseKind::ALL.len());
}

#[test]
fn the_worst_case_counts_each_evaluation_and_every_backoff_at_the_top_of_its_jitter() {
    // The configuration of a measured frozen stream, which printed "worst
    // case 18s300ms" and was given up after 21.8 s.
    let env = env_of(&[
        ("LEASEHOLD_LEASE_MODEL_STREAM", "1s"),
        ("LEASEHOLD_LEASE_MAX_RENEWALS", "4"),
        ("LEASEHOLD_RESTART_MAX_RESTARTS", "2"),
        ("LEASEHOLD_EVALUATOR_TIMEOUT", "800ms"),
    ]);
    let config = Config::load(None, env).expect("loads");
    let stream = config.timing(LeaseKind::ModelStream);
    assert_eq!(stream.evaluations, 2);
    assert_eq!(
        stream.renewal_cap,
        Duration::from_millis(5 * 1_000 + 2 * 800)
    );
    assert_eq!(stream.backoffs, Duration::from_millis(1_100 + 2_200));
    assert_eq!(stream.worst_case, Duration::from_millis(3 * 6_600 + 3_300));
    assert_eq!(
        stream.to_string(),
        "model_stream: lease 1s · free renewals until 3s · first evaluation at 3s · \
         renewal cap at 6s600ms (5 leases + 2 evaluations of at most 800ms) · 3 attempts · \
         backoffs at most 3s300ms · worst case 23s100ms · ceiling 4h"
    );

    // With every renewal free no expiry waits for the evaluator, even when
    // an unvalidated configuration has more free renewals than the cap.
    let mut all_free = config.clone();
    all_free.free_renewals.value = 4;
    assert_eq!(all_free.timing(LeaseKind::ModelStream).evaluations, 0);
    all_free.free_renewals.value = 9;
    let timing = all_free.timing(LeaseKind::ModelStream);
    assert_eq!(timing.evaluations, 0);
    assert_eq!(timing.renewal_cap, Duration::from_secs(5));

    // A jittered backoff off the whole millisecond waits until the next one,
    // as tokio's timers do: 1003 ms × 1.1 = 1103.3 ms is waited as 1104 ms.
    let env = env_of(&[
        ("LEASEHOLD_RESTART_MAX_RESTARTS", "1"),
        ("LEASEHOLD_RESTART_BACKOFF_INITIAL", "1003ms"),
    ]);
    let config = Config::load(None, env).expect("loads");
    assert_eq!(
        config.timing(LeaseKind::ToolCall).backoffs,
        Duration::from_millis(1_104)
    );
}

#[test]
fn backoffs_past_the_maximum_are_summed_without_looping_per_restart() {
    let env = env_of(&[("LEASEHOLD_RESTART_MAX_RESTARTS", "4294967295")]);
    let config = Config::load(None, env).expect("loads");
    let timing = config.timing(LeaseKind::ToolCall);
    assert_eq!(timing.attempts, u32::MAX);
    assert!(timing.worst_case > Duration::from_secs(3_600 * 24 * 365));
}

#[test]
fn the_key_table_of_docs_configuration_md_is_the_one_the_code_writes() {
    let doc = include_str!("../../docs/configuration.md");
    let written = Config::keys_table();
    let (start, end) = (
        doc.find(KEYS_TABLE_START)
            .expect("docs/configuration.md marks where its key table starts"),
        doc.find(KEYS_TABLE_END)
            .expect("docs/configuration.md marks where its key table ends"),
    );
    let table = doc[start + KEYS_TABLE_START.len()..end].trim_start_matches('\n');
    if let Some((line, (documented, generated))) = table
        .lines()
        .chain(std::iter::repeat(""))
        .zip(written.lines().chain(std::iter::repeat("")))
        .take(table.lines().count().max(written.lines().count()))
        .enumerate()
        .find(|(_, (documented, generated))| documented != generated)
    {
        panic!(
            "docs/configuration.md's key table differs from runtime/src/config/keys.rs \
             at its line {}:\n  doc:  {documented}\n  code: {generated}\n\
             Put the table Config::keys_table() writes between the markers:\n{written}",
            line + 1
        );
    }
}

#[test]
fn every_variable_is_named_after_its_file_key() {
    let variable = |file: &str| format!("LEASEHOLD_{}", file.replace('.', "_").to_uppercase());
    let keys = Config::keys();
    for key in keys.iter().filter(|k| !k.file.is_empty()) {
        assert_eq!(
            key.env,
            variable(key.file),
            "variable named after its file key"
        );
        if let Some(old) = key.old {
            assert_eq!(old.env, variable(old.file), "old variable of {}", key.file);
            assert!(
                !keys.iter().any(|k| k.file == old.file || k.env == old.env),
                "{}'s old name is another key's name",
                key.file
            );
        }
    }
    let entries = Config::default().entries();
    assert_eq!(entries.len() + 1, Config::keys().len());
}

#[test]
fn the_documented_timing_lines_are_those_of_the_defaults() {
    let doc = include_str!("../../docs/configuration.md");
    for timing in Config::default().timings() {
        let line = timing.to_string();
        assert!(doc.contains(&line), "docs/configuration.md lacks: {line}");
    }
}

#[test]
fn flags_override_the_environment_and_name_themselves_as_the_source() {
    let env = env_of(&[
        ("LEASEHOLD_LEASE_TOOL_CALL", "90s"),
        ("LEASEHOLD_DATA_DIR", "/from/env"),
    ]);
    let flags = [
        Flag::parse_set("lease.tool_call=3s").expect("flag"),
        Flag {
            key: "data_dir".into(),
            value: "/from/flag".into(),
            given_as: "--data-dir".into(),
        },
    ];
    let config = Config::load_layers(None, env, &flags).expect("loads");
    assert_eq!(config.lease_tool_call.value, Duration::from_secs(3));
    assert_eq!(
        config.lease_tool_call.source,
        Source::Flag("--set lease.tool_call".into())
    );
    assert_eq!(config.data_dir.source, Source::Flag("--data-dir".into()));
    assert_eq!(
        config.data_dir.value,
        std::path::PathBuf::from("/from/flag")
    );

    let error = Config::load_layers(
        None,
        no_env,
        &[Flag::parse_set("lease.tool_cal=3s").expect("flag")],
    )
    .expect_err("unknown key");
    assert!(error.to_string().contains("lease.tool_cal"), "{error}");
    let error = Config::load_layers(
        None,
        no_env,
        &[Flag::parse_set("lease.tool_call=soon").expect("flag")],
    )
    .expect_err("bad value");
    assert!(
        error.to_string().contains("--set lease.tool_call"),
        "{error}"
    );
    assert!(error.to_string().contains("duration"), "{error}");
    assert!(Flag::parse_set("lease.tool_call").is_err(), "KEY=VALUE");
}

#[test]
fn model_settings_come_from_the_configuration_and_name_what_is_missing() {
    let error = Config::load(None, no_env)
        .expect("loads")
        .model_settings()
        .expect_err("no endpoint");
    assert!(
        error.to_string().contains("LEASEHOLD_MODEL_BASE_URL"),
        "{error}"
    );
    let config = Config::load(
        None,
        env_of(&[
            ("LEASEHOLD_MODEL_BASE_URL", "http://127.0.0.1:8000/v1"),
            ("LEASEHOLD_MODEL_NAME", "big"),
            ("LEASEHOLD_MODEL_API_KEY", "sk-secret"),
            ("LEASEHOLD_FAST_MODEL_NAME", "small"),
            ("LEASEHOLD_MODEL_IDLE_TIMEOUT", "20s"),
        ]),
    )
    .expect("loads");
    let settings = config.model_settings().expect("settings");
    assert_eq!(settings.default.model, "big");
    let fast = settings.fast.expect("a fast endpoint");
    assert_eq!(fast.model, "small");
    assert_eq!(
        fast.base_url, "http://127.0.0.1:8000/v1",
        "inherits the URL"
    );
    assert_eq!(
        fast.api_key.as_deref(),
        Some("sk-secret"),
        "inherits the key"
    );
    assert_eq!(settings.idle_timeout, Duration::from_secs(20));
    let shown: Vec<String> = config.entries().into_iter().map(|(_, v, _)| v).collect();
    assert!(
        !shown.iter().any(|v| v.contains("sk-secret")),
        "keys are never printed"
    );
    assert!(shown.iter().any(|v| v == "(set)"));
}

#[test]
fn warnings_name_combinations_that_defeat_themselves() {
    let defaults = Config::load(None, no_env).expect("loads");
    assert_eq!(
        defaults.warnings(),
        Vec::<String>::new(),
        "the defaults agree"
    );

    let config = Config::load(
        None,
        env_of(&[
            ("LEASEHOLD_LEASE_MODEL_STREAM", "1s"),
            ("LEASEHOLD_LEASE_MAX_RENEWALS", "2"),
            ("LEASEHOLD_MODEL_IDLE_TIMEOUT", "1m"),
            ("LEASEHOLD_RESTART_WINDOW", "12h"),
            ("LEASEHOLD_SERVER_ADDR", "0.0.0.0:7878"),
        ]),
    )
    .expect("loads");
    let warnings = config.warnings().join("\n");
    assert!(
        warnings.contains(
            "`model.idle_timeout` (LEASEHOLD_MODEL_IDLE_TIMEOUT, from the environment) is 1m"
        ),
        "{warnings}"
    );
    assert!(
        warnings.contains("never asked"),
        "free = max = 2: {warnings}"
    );
    // No evaluation happens: its timeout is beside the point.
    assert!(
        !warnings.contains("LEASEHOLD_EVALUATOR_TIMEOUT"),
        "{warnings}"
    );
    assert!(warnings.contains("LEASEHOLD_API_TOKEN"), "{warnings}");
    let asked = Config::load(
        None,
        env_of(&[
            ("LEASEHOLD_LEASE_MODEL_STREAM", "1s"),
            ("LEASEHOLD_LEASE_MAX_RENEWALS", "2"),
            ("LEASEHOLD_WATCHDOG_FREE_RENEWALS", "1"),
        ]),
    )
    .expect("loads");
    let warnings = asked.warnings().join("\n");
    assert!(
        warnings.contains(
            "`evaluator_timeout` (LEASEHOLD_EVALUATOR_TIMEOUT, default) is 15s, not shorter than \
             the shortest lease (1s, `lease.model_stream` (LEASEHOLD_LEASE_MODEL_STREAM, from the \
             environment))"
        ),
        "{warnings}"
    );
    assert!(!warnings.contains("LEASEHOLD_RESTART_WINDOW"), "{warnings}");
    let error = Config::load(None, env_of(&[("LEASEHOLD_SERVER_ADDR", "localhost")]))
        .expect_err("not a socket address");
    assert!(
        error.to_string().contains("LEASEHOLD_SERVER_ADDR"),
        "{error}"
    );
}

#[test]
fn the_file_declares_tool_servers_and_refuses_a_bad_declaration_naming_it() {
    let file = temp_toml(
        "[[tools]]\n\
         name = \"ops\"\n\
         command = [\"python3\", \"ops.py\"]\n\
         env = { REGION = \"eu\" }\n\
         idempotent = { get_status = true }\n\
         \n\
         [[tools]]\n\
         name = \"search\"\n\
         url = \"http://127.0.0.1:9100/mcp\"\n\
         \n\
         [server]\n\
         max_live_runs = 3\n",
    );
    let config = Config::load(Some(file.path()), no_env).expect("loads");
    assert_eq!(config.tools.len(), 2);
    assert_eq!(config.tools[0].name, "ops");
    assert_eq!(
        config.tools[0].command.as_deref(),
        Some(&["python3".into(), "ops.py".into()][..])
    );
    assert_eq!(config.tools[0].env["REGION"], "eu");
    assert_eq!(
        config.tools[1].url.as_deref(),
        Some("http://127.0.0.1:9100/mcp")
    );
    assert_eq!(config.server_max_live_runs.value, 3);

    for (text, path) in [
        ("[[tools]]\nname = \"ops\"\n", "tools[0]"),
        (
            "[[tools]]\nname = \"ops\"\ncommand = [\"a\"]\nurl = \"http://x/\"\n",
            "tools[0]",
        ),
        (
            "[[tools]]\nname = \"ops\"\ncommand = []\n",
            "tools[0].command",
        ),
        ("[[tools]]\nname = \"ops\"\ncomand = [\"a\"]\n", "tools[0]"),
        (
            "[[tools]]\nname = \"a\"\nurl = \"http://x/\"\n[[tools]]\nname = \"a\"\nurl = \"http://y/\"\n",
            "tools[1].name",
        ),
        ("tools = \"ops\"\n", "tools"),
    ] {
        let file = temp_toml(text);
        let error = Config::load(Some(file.path()), no_env).expect_err(text);
        let message = error.to_string();
        assert!(
            matches!(error, LoadError::BadToolServer { .. }),
            "{text}: {message}"
        );
        assert!(message.contains(path), "{text}: names {path}: {message}");
    }
}

#[test]
fn sizes_and_lists_parse_and_bad_ones_are_refused_naming_the_key() {
    let env = env_of(&[
        ("LEASEHOLD_LIMITS_TOOL_RESULT", "512KiB"),
        ("LEASEHOLD_LIMITS_MODEL_ANSWER", "2 MiB"),
        ("LEASEHOLD_LIMITS_MODEL_BODY", "65536"),
        (
            "LEASEHOLD_SERVER_ALLOWED_HOSTS",
            "leasehold.internal, 10.0.0.5:7878,",
        ),
    ]);
    let config = Config::load(None, env).expect("loads");
    assert_eq!(config.limits_tool_result.value, 512 * 1024);
    assert_eq!(config.engine_config().max_tool_result_bytes, 512 * 1024);
    assert_eq!(config.limits_model_answer.value, 2 << 20);
    assert_eq!(config.limits_model_body.value, 65536);
    assert_eq!(
        config.server_allowed_hosts.value,
        vec!["leasehold.internal".to_owned(), "10.0.0.5:7878".to_owned()]
    );
    let shown: HashMap<&str, String> = config
        .entries()
        .into_iter()
        .map(|(key, value, _)| (key.file, value))
        .collect();
    assert_eq!(shown["limits.tool_result"], "512KiB");
    assert_eq!(
        shown["server.allowed_hosts"],
        "leasehold.internal,10.0.0.5:7878"
    );
    let with_model = Config::load(
        None,
        env_of(&[
            ("LEASEHOLD_LIMITS_MODEL_ANSWER", "2MiB"),
            ("LEASEHOLD_LIMITS_MODEL_BODY", "65536"),
            ("LEASEHOLD_MODEL_BASE_URL", "http://127.0.0.1:9/v1"),
            ("LEASEHOLD_MODEL_NAME", "m"),
        ]),
    )
    .expect("loads");
    let settings = with_model.model_settings().expect("model settings");
    assert_eq!(settings.max_answer_bytes, 2 << 20);
    assert_eq!(settings.max_body_bytes, 65536);
    let zero = Config::load(None, env_of(&[("LEASEHOLD_SERVER_MAX_LIVE_RUNS", "0")]))
        .expect_err("a zero limit")
        .to_string();
    assert!(zero.contains("LEASEHOLD_SERVER_MAX_LIVE_RUNS"), "{zero}");
    for bad in ["0", "lots", "2GiB", "-1"] {
        let error = Config::load(None, env_of(&[("LEASEHOLD_LIMITS_TOOL_RESULT", bad)]))
            .expect_err(bad)
            .to_string();
        assert!(error.contains("LEASEHOLD_LIMITS_TOOL_RESULT"), "{error}");
    }
}

#[test]
fn restart_on_exhausted_is_read_and_a_bad_value_is_refused_naming_the_key() {
    use leasehold::OnExhausted;
    assert_eq!(
        Config::default().engine_config().restart.on_exhausted,
        OnExhausted::Pause
    );
    let config =
        Config::load(None, env_of(&[("LEASEHOLD_RESTART_ON_EXHAUSTED", "fail")])).expect("loads");
    assert_eq!(
        config.engine_config().restart.on_exhausted,
        OnExhausted::Fail
    );
    let error = Config::load(None, env_of(&[("LEASEHOLD_RESTART_ON_EXHAUSTED", "retry")]))
        .expect_err("refused");
    let message = error.to_string();
    assert!(
        message.contains("LEASEHOLD_RESTART_ON_EXHAUSTED") && message.contains("pause or fail"),
        "{message}"
    );
}

#[test]
fn evidence_renewals_and_the_repetition_threshold_are_read_from_every_layer() {
    let defaults = Config::default().engine_config().supervision.watchdog;
    assert_eq!(defaults.evidence_renewals, 3);
    assert!((defaults.repetition_threshold - 0.5).abs() < f64::EPSILON);
    let env = env_of(&[
        ("LEASEHOLD_WATCHDOG_EVIDENCE_RENEWALS", "5"),
        ("LEASEHOLD_WATCHDOG_REPETITION_THRESHOLD", "0.8"),
    ]);
    let config = Config::load(None, env).expect("loads");
    let watchdog = config.engine_config().supervision.watchdog;
    assert_eq!(watchdog.evidence_renewals, 5);
    assert!((watchdog.repetition_threshold - 0.8).abs() < f64::EPSILON);
    assert_eq!(
        config.repetition_threshold.source,
        Source::Env("LEASEHOLD_WATCHDOG_REPETITION_THRESHOLD".into())
    );
    let shown: Vec<_> = config
        .entries()
        .into_iter()
        .filter(|(key, _, _)| {
            key.file.starts_with("watchdog.re") || key.file == "watchdog.evidence_renewals"
        })
        .map(|(key, value, _)| (key.file, value))
        .collect();
    assert_eq!(
        shown,
        [
            ("watchdog.evidence_renewals", "5".to_owned()),
            ("watchdog.repetition_threshold", "0.8".to_owned())
        ]
    );
    let file =
        Config::from_toml_str("[watchdog]\nevidence_renewals = 0\nrepetition_threshold = 0.25\n")
            .expect("a file sets both, the share as a TOML float");
    let watchdog = file.engine_config().supervision.watchdog;
    assert_eq!(watchdog.evidence_renewals, 0);
    assert!((watchdog.repetition_threshold - 0.25).abs() < f64::EPSILON);
}

#[test]
fn a_repetition_threshold_outside_0_to_1_is_refused_naming_the_variable() {
    for bad in ["1.5", "-0.1", "NaN", "half"] {
        let error = Config::load(
            None,
            env_of(&[("LEASEHOLD_WATCHDOG_REPETITION_THRESHOLD", bad)]),
        )
        .expect_err("refused");
        let text = error.to_string();
        assert!(
            text.contains("LEASEHOLD_WATCHDOG_REPETITION_THRESHOLD")
                && text.contains("a share from 0 to 1"),
            "{bad}: {text}"
        );
    }
}

#[test]
fn the_verdict_policy_is_read_refused_when_unknown_and_changes_the_timing_arithmetic() {
    use leasehold::{PolicyChoice, PolicyName};
    assert_eq!(
        Config::default()
            .engine_config()
            .supervision
            .watchdog
            .policy,
        PolicyChoice::all(PolicyName::LEASEHOLD)
    );
    // What is not a policy name is refused as the configuration is read.
    for bad in [
        "idle-kill",
        "Deadline",
        "leasehold, leasehold",
        "tool = deadline",
    ] {
        let error =
            Config::load(None, env_of(&[("LEASEHOLD_WATCHDOG_POLICY", bad)])).expect_err("refused");
        let text = error.to_string();
        assert!(
            text.contains("LEASEHOLD_WATCHDOG_POLICY") && text.contains("idle_kill"),
            "{bad}: {text}"
        );
    }
    // A name no policy has — an embedder registers its own — is refused
    // when the engine is built, naming the key and the known names.
    let unknown = Config::load(None, env_of(&[("LEASEHOLD_WATCHDOG_POLICY", "timeout")]))
        .expect("a well-formed name");
    let refused = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(
            leasehold::Engine::builder()
                .config(unknown.engine_config())
                .model(std::sync::Arc::new(leasehold::testing::ScriptedModel::new()))
                .build(),
        )
        .err()
        .expect("refused");
    let text = refused.to_string();
    assert!(
        text.contains("watchdog.policy")
            && text.contains("\"timeout\"")
            && text.contains("idle_kill"),
        "{text}"
    );
    // Per kind: the arithmetic of each kind follows its own policy.
    let mixed = Config::load(
        None,
        env_of(&[(
            "LEASEHOLD_WATCHDOG_POLICY",
            "leasehold, tool_call = deadline",
        )]),
    )
    .expect("loads");
    assert_eq!(
        mixed.timing(LeaseKind::ToolCall).policy,
        PolicyName::DEADLINE
    );
    assert_eq!(
        mixed.timing(LeaseKind::ModelStream).policy,
        PolicyName::LEASEHOLD
    );
    let timing = |policy: &str| {
        Config::load(None, env_of(&[("LEASEHOLD_WATCHDOG_POLICY", policy)]))
            .expect("loads")
            .timing(LeaseKind::ToolCall)
    };
    let minutes = |m: u64| Duration::from_secs(m * 60);
    // A deadline cuts each attempt at its first expiry.
    let deadline = timing("deadline");
    assert_eq!(deadline.renewal_cap, minutes(5));
    assert_eq!(deadline.evaluations, 0);
    assert!(
        deadline
            .to_string()
            .contains("policy deadline, never evaluated"),
        "{deadline}"
    );
    // Idle-kill runs to the cap, never waiting for an evaluator.
    let idle = timing("idle_kill");
    assert_eq!(idle.renewal_cap, minutes(55));
    assert_eq!(idle.evaluations, 0);
    // Always-evaluate has no free renewals: one evaluation per renewal.
    let always = timing("always_evaluate");
    assert_eq!(always.first_evaluation, minutes(5));
    assert_eq!(always.evaluations, 10);
    assert_eq!(timing("leasehold").evaluations, 8);
}

#[test]
fn progress_limits_below_their_floor_are_refused_naming_the_key() {
    let error = Config::from_toml_str("[limits]\nprogress_note = \"10B\"\n")
        .expect_err("a note cap below 64 bytes");
    let text = error.to_string();
    for needle in [
        "LEASEHOLD_LIMITS_PROGRESS_NOTE",
        "limits.progress_note",
        "64B",
        "10B",
    ] {
        assert!(text.contains(needle), "no {needle} in: {text}");
    }
    let error = Config::from_toml_str("[limits]\nrun_events = 0\n").expect_err("no events");
    let text = error.to_string();
    assert!(text.contains("LEASEHOLD_LIMITS_RUN_EVENTS"), "{text}");
    let config = Config::from_toml_str(
        "[limits]\nprogress_note = \"4KiB\"\nprogress_interval = \"250ms\"\nrun_events = 500\n",
    )
    .expect("limits within bounds");
    let limits = config.engine_config().events;
    assert_eq!(limits.max_progress_note_bytes, 4096);
    assert_eq!(
        limits.progress_interval,
        std::time::Duration::from_millis(250)
    );
    assert_eq!(limits.max_run_events, 500);
}

#[test]
fn retention_is_a_duration_or_forever_and_the_sled_cache_a_size() {
    let config = Config::load(None, env_of(&[])).expect("loads");
    assert_eq!(
        config.executor_retention.value,
        Some(Duration::from_secs(7 * 24 * 3600))
    );
    assert_eq!(
        config.engine_config().retention,
        config.executor_retention.value
    );
    assert_eq!(config.sled_cache_capacity.value, 64 << 20);
    let env = env_of(&[
        ("LEASEHOLD_EXECUTOR_RETENTION", "forever"),
        ("LEASEHOLD_SLED_CACHE_CAPACITY", "256MiB"),
    ]);
    let config = Config::load(None, env).expect("loads");
    assert_eq!(config.executor_retention.value, None);
    assert_eq!(config.engine_config().retention, None);
    assert_eq!(config.sled_cache_capacity.value, 256 << 20);
    let shown: Vec<String> = config
        .entries()
        .into_iter()
        .filter(|(key, _, _)| key.file == "executor.retention" || key.file == "sled.cache_capacity")
        .map(|(_, value, _)| value)
        .collect();
    assert_eq!(shown, ["forever", "256MiB"]);
    let env = env_of(&[("LEASEHOLD_EXECUTOR_RETENTION", "12h")]);
    let config = Config::load(None, env).expect("loads");
    assert_eq!(
        config.executor_retention.value,
        Some(Duration::from_secs(12 * 3600))
    );
    for (variable, value) in [
        ("LEASEHOLD_EXECUTOR_RETENTION", "0s"),
        ("LEASEHOLD_EXECUTOR_RETENTION", "never"),
        ("LEASEHOLD_SLED_CACHE_CAPACITY", "2GiB"),
        ("LEASEHOLD_SLED_CACHE_CAPACITY", "lots"),
    ] {
        let error = Config::load(None, env_of(&[(variable, value)])).unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains(variable) && message.contains(value),
            "{message}"
        );
    }
}

#[test]
fn webhook_receivers_are_read_from_the_file_shown_without_their_secret_and_a_bad_one_is_refused() {
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let file = temp_toml(&format!(
        "[webhooks]\n\
         retry_first = \"1s\"\n\
         [webhooks.receivers.ops]\n\
         url = \"https://hooks.example.com/leasehold?token=s3cret\"\n\
         secret = \"{secret}\"\n\
         events = [\"waiting_human\", \"failed\"]\n\
         runs = \"named\"\n"
    ));
    let config = Config::load(Some(file.path()), no_env).expect("loads");
    assert_eq!(config.webhook_receivers.len(), 1);
    assert_eq!(config.webhooks_retry_first.value, Duration::from_secs(1));

    let bad = temp_toml("[webhooks.receivers.ops]\nurl = \"https://h/\"\nsecret = \"hunter2\"\n");
    let refused = Config::load(Some(bad.path()), no_env)
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("webhooks.receivers.\"ops\".secret")
            && refused.contains("whsec_")
            && refused.contains(&bad.path().display().to_string()),
        "{refused}"
    );
    let too_quick = temp_toml("[webhooks]\nretry_first = \"1ms\"\n");
    let refused = Config::load(Some(too_quick.path()), no_env)
        .unwrap_err()
        .to_string();
    assert!(refused.contains("webhooks.retry_first"), "{refused}");
}
