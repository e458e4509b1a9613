//! The README's main job, on paused time: the demo shows what it claims.

use leasehold::RunStatus;

#[tokio::test(start_paused = true)]
async fn demo_shows_evidence_renewals_an_extension_a_restart_and_a_pause() {
    let mut log = Vec::new();
    let report = leasehold_examples::run_demo(&mut log)
        .await
        .expect("demo runs");
    let log = String::from_utf8(log).expect("utf-8 log");
    assert_eq!(report.state.status, RunStatus::Completed, "{log}");
    assert!(
        report
            .state
            .answer
            .as_deref()
            .is_some_and(|a| a.contains("no rollback")),
        "{log}"
    );
    assert_eq!(report.extensions, 1, "{log}");
    assert_eq!(report.restarts, 1, "{log}");
    assert_eq!(report.pauses, 1, "{log}");
    assert_eq!(report.search_renewed_by_evidence, 3, "{log}");
    assert_eq!(report.search_evaluator_calls, 0, "{log}");
    assert!(report.as_expected());
    assert!(log.contains(leasehold_examples::GUIDANCE), "{log}");
    assert!(log.contains("budget_extended"), "{log}");
}
