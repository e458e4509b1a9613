//! The README's main job, on paused time: the demo shows what it claims.

use leasehold::lease::LeaseError;

#[tokio::test(start_paused = true)]
async fn demo_keeps_slow_work_alive_intervenes_hung_and_escalates() {
    let mut log = Vec::new();
    let report = leasehold_examples::run_demo(&mut log)
        .await
        .expect("demo runs");
    let log = String::from_utf8(log).expect("utf-8 log");
    assert_eq!(report.slow.as_deref(), Ok("28 pages crawled"), "{log}");
    assert_eq!(report.evaluator_calls_on_slow, 0, "{log}");
    assert!(
        matches!(report.hung, Err(LeaseError::Intervened { .. })),
        "{log}"
    );
    assert!(
        matches!(report.payment, Err(LeaseError::Escalated { .. })),
        "{log}"
    );
    assert_eq!(report.evaluator_calls, 2, "{log}");
    assert!(report.as_expected());
    assert!(log.contains("RENEW by evidence"), "{log}");
    assert!(log.contains("took 2.8 s"), "{log}");
}
