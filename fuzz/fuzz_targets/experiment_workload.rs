//! An experiment's workload file: arbitrary text is a validated workload
//! within the experiment's bounds (strategies counted after the sweep, the
//! estimate of simulated events) or a refusal naming the key, never a
//! panic; and its strategies' names print in the report's table, CSV and
//! plots.
#![no_main]

use leasehold_lab::{
    DEFAULT_MAX_EVENTS, MAX_STRATEGIES, Options, Report, StrategyReport, Workload, plan,
    tradeoff_svg, wasted_svg,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let Ok(workload) = Workload::parse(text) else {
        return;
    };
    assert!(workload.validate().is_ok());
    let names = workload.strategy.default_names(&workload.strategies);
    match plan(&workload, &Options::default()) {
        Ok(planned) => {
            let estimate = planned.estimate();
            assert!(estimate.events() <= DEFAULT_MAX_EVENTS);
            assert!(usize::try_from(estimate.strategies).is_ok_and(|n| n <= MAX_STRATEGIES));
            assert!(!estimate.to_string().is_empty());
        }
        // Refused before anything is drawn or played, naming the key.
        Err(refused) => assert!(!refused.to_string().is_empty()),
    }
    // The names as the report prints them, without playing anything.
    let report = Report {
        seed: workload.seed,
        operations: 0,
        strategies: names
            .iter()
            .take(MAX_STRATEGIES)
            .filter_map(|name| workload.resolve(name).ok())
            .map(|strategy| StrategyReport::new(&strategy, &[], &[], 0.0))
            .collect(),
    };
    assert_eq!(report.to_table().lines().count(), report.strategies.len() + 2);
    assert!(report.to_csv().is_ok());
    assert!(tradeoff_svg(&report).is_ok());
    assert!(wasted_svg(&report).is_ok());
});
