//! The rules of the outbox ([`Outbox`](crate::Outbox)).

use std::sync::Arc;

use super::Subject;
use crate::ports::{Delivery, Notice, NoticeTake, PauseRecord, RunStatus, RunUpdate, Store};
use crate::testing::records::*;

/// Every notice due at `now_ms`, taken (and so held) at once.
pub(super) async fn every_notice(store: &dyn Store, now_ms: u64) -> Vec<Notice> {
    let take = NoticeTake {
        now_ms,
        hold_ms: 1,
        max: usize::MAX,
    };
    store.take_notices(take).await.unwrap()
}

/// A take at `now_ms` holding for 1 000 ms, at most `max`.
fn notice_take(now_ms: u64, max: usize) -> NoticeTake {
    NoticeTake {
        now_ms,
        hold_ms: 1_000,
        max,
    }
}

/// A pause and an end each keep one notice, with the change that made it
/// ([`outbox::notice_of`](crate::outbox::notice_of)); a resume, a
/// heartbeat and a refused write keep none. A take answers due notices
/// oldest first, at most its `max`, and holds them: taken again only once
/// the hold passed. Only the latest taker settles: removing it, or keeping
/// its progress until its next due time.
pub(super) async fn a_pause_or_an_end_keeps_one_notice_held_by_its_taker_until_settled(
    store: Arc<dyn Store>,
) {
    let mut record = unowned("r");
    record.flow = serde_json::json!({"name": "research", "notify": ["ops"]});
    store.create_run(record).await.unwrap();
    let run = claimed(store.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());
    assert!(every_notice(store.as_ref(), 1 << 50).await.is_empty());

    let pause = RunUpdate {
        pause: Some(PauseRecord {
            reason: "asked a person".to_owned(),
            subject: "search".to_owned(),
            path: "run".to_owned(),
            call: None,
        }),
        ..update(RunStatus::WaitingHuman, 1_100)
    };
    assert!(
        store
            .update_run("r", run.fence, pause)
            .await
            .unwrap()
            .is_applied()
    );
    // Refused: a stale fence keeps no notice.
    let stale_end = store.update_run("r", run.fence + 9, update(RunStatus::Failed, 1_150));
    assert!(!stale_end.await.unwrap().is_applied());
    assert!(
        store
            .renew_run("r", run.fence, 1_160, TTL)
            .await
            .unwrap()
            .is_applied()
    );
    // Resumed, then ended.
    let resumed = store.update_run("r", run.fence, update(RunStatus::Running, 1_200));
    assert!(resumed.await.unwrap().is_applied());
    let mut done = update(RunStatus::Completed, 1_300);
    done.answer = Some("42".to_owned());
    assert!(
        store
            .update_run("r", run.fence, done)
            .await
            .unwrap()
            .is_applied()
    );

    // Not due before the change.
    assert!(
        store
            .take_notices(notice_take(1_099, 10))
            .await
            .unwrap()
            .is_empty()
    );
    // At most `max`, oldest first, held from now.
    let first = store.take_notices(notice_take(2_000, 1)).await.unwrap();
    assert_eq!(first.len(), 1, "{first:?}");
    let paused = &first[0];
    assert_eq!(
        (
            paused.run_id.as_str(),
            paused.status,
            paused.at_ms,
            paused.flow.as_deref(),
            paused.notify.clone(),
            paused.pause.as_ref().map(|p| p.reason.as_str()),
            paused.delivery.due_at_ms,
            paused.delivery.attempts,
        ),
        (
            "r",
            RunStatus::WaitingHuman,
            1_100,
            Some("research"),
            vec!["ops".to_owned()],
            Some("asked a person"),
            3_000,
            0
        )
    );
    let rest = store.take_notices(notice_take(2_000, 10)).await.unwrap();
    assert_eq!(rest.len(), 1, "{rest:?}");
    let ended = &rest[0];
    assert!(
        paused.id < ended.id,
        "ids go up: {} then {}",
        paused.id,
        ended.id
    );
    assert_eq!(
        (ended.status, ended.answer.as_deref()),
        (RunStatus::Completed, Some("42"))
    );
    // Held: nothing is due until the hold passed.
    assert!(
        store
            .take_notices(notice_take(2_999, 10))
            .await
            .unwrap()
            .is_empty()
    );

    // The hold passed: another taker holds them; the first taker's
    // settlement no longer counts.
    let again = store.take_notices(notice_take(3_000, 10)).await.unwrap();
    let ids = |notices: &[Notice]| notices.iter().map(|n| n.id).collect::<Vec<_>>();
    assert_eq!(ids(&again), [paused.id, ended.id]);
    assert!(!store.settle_notice(paused.id, 3_000, None).await.unwrap());
    // The latest taker keeps its progress, due again at 9 000.
    let progress = Delivery {
        due_at_ms: 9_000,
        attempts: 1,
        delivered: vec!["audit".to_owned()],
        last_error: Some("ops: connection refused".to_owned()),
    };
    assert!(
        store
            .settle_notice(paused.id, 4_000, Some(progress.clone()))
            .await
            .unwrap()
    );
    assert!(store.settle_notice(ended.id, 4_000, None).await.unwrap());
    assert!(
        !store.settle_notice(ended.id, 4_000, None).await.unwrap(),
        "settled once"
    );
    assert!(
        store
            .take_notices(notice_take(8_999, 10))
            .await
            .unwrap()
            .is_empty()
    );
    let later = store.take_notices(notice_take(9_000, 10)).await.unwrap();
    assert_eq!(ids(&later), [paused.id]);
    assert_eq!(
        later[0].delivery,
        Delivery {
            due_at_ms: 10_000,
            ..progress
        }
    );
    assert!(store.settle_notice(paused.id, 10_000, None).await.unwrap());
    assert!(every_notice(store.as_ref(), 1 << 50).await.is_empty());
}

/// A notice not yet delivered, and the progress of its delivery, survive
/// a reopen.
pub(super) async fn an_undelivered_notice_and_its_progress_survive_a_reopen(subject: Subject) {
    let store = Arc::clone(&subject.store);
    store.create_run(unowned("r")).await.unwrap();
    let run = claimed(store.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());
    let failed = store.update_run("r", run.fence, update(RunStatus::Failed, 1_100));
    assert!(failed.await.unwrap().is_applied());
    let taken = store.take_notices(notice_take(1_100, 10)).await.unwrap();
    assert_eq!(taken.len(), 1);
    let progress = Delivery {
        due_at_ms: 5_000,
        attempts: 2,
        delivered: vec!["ops".to_owned()],
        last_error: None,
    };
    let settled = store.settle_notice(taken[0].id, 2_100, Some(progress.clone()));
    assert!(settled.await.unwrap());
    store.flush().await.unwrap();
    drop(store);

    let subject = subject.reopened().await;
    let again = subject
        .store
        .take_notices(notice_take(5_000, 10))
        .await
        .unwrap();
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(
        (again[0].id, again[0].status, &again[0].delivery),
        (
            taken[0].id,
            RunStatus::Failed,
            &Delivery {
                due_at_ms: 6_000,
                ..progress
            }
        )
    );
}
