//! The rules of the store as a whole: what survives a reopen, and agreement
//! with [`MemoryStore`] outcome for outcome.

use std::sync::Arc;

use super::Subject;
use crate::memory::MemoryStore;
use crate::ports::{ClaimOutcome, PauseRecord, RunStatus, Store, ToolCallState};
use crate::testing::records::*;

/// A terminal write and everything written before it survive closing and
/// reopening the store, and the ended run cannot be claimed.
pub(super) async fn a_terminal_write_and_everything_before_it_survive_a_reopen(subject: Subject) {
    let store = Arc::clone(&subject.store);
    store.create_run(unowned("r")).await.unwrap();
    let run = claimed(store.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());
    let call = tool_call("r/run/1/0", 1, ToolCallState::Done);
    assert!(
        store
            .save_snapshot(snapshot("r", "run", 1, "one"), run.fence)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        store
            .record_tool_call("r", call.clone(), run.fence)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        store
            .append_events("r", shared_events("r", 1..=3), run.fence)
            .await
            .unwrap()
            .is_applied()
    );
    let mut done = update(RunStatus::Completed, 1_200);
    done.answer = Some("42".to_owned());
    assert!(
        store
            .update_run("r", run.fence, done)
            .await
            .unwrap()
            .is_applied()
    );
    store.flush().await.unwrap();
    drop(store);

    let subject = subject.reopened().await;
    let store = &subject.store;
    let ended = store.load_run("r").await.unwrap().unwrap();
    assert_eq!(
        (
            ended.status,
            ended.answer.as_deref(),
            ended.lease_expires_at_ms,
            ended.fence
        ),
        (RunStatus::Completed, Some("42"), 0, 1)
    );
    assert_eq!(
        store.load_snapshots("r").await.unwrap(),
        vec![snapshot("r", "run", 1, "one")]
    );
    assert_eq!(store.load_tool_calls("r").await.unwrap(), vec![call]);
    assert_eq!(store.load_events("r", 0).await.unwrap(), events("r", 1..=3));
    assert_eq!(store.list_runs().await.unwrap(), vec![ended]);
    assert_eq!(
        store.claim_run("r", "exec-b", 9_000, TTL).await.unwrap(),
        ClaimOutcome::Finished(RunStatus::Completed)
    );
}

/// The store answers a scripted sequence of operations outcome for outcome
/// as `MemoryStore` does.
pub(super) async fn the_store_answers_a_scripted_sequence_as_the_memory_store_does(
    store: Arc<dyn Store>,
) {
    let memory = script(&MemoryStore::new()).await;
    let got = script(&*store).await;
    for (expected, got) in memory.iter().zip(&got) {
        assert_eq!(got, expected, "the stores disagree");
    }
    assert_eq!(got.len(), memory.len());
}

/// Runs one scripted sequence of operations and writes down every outcome.
async fn script(store: &dyn Store) -> Vec<String> {
    let mut log = Vec::new();
    macro_rules! step {
        ($e:expr) => {
            log.push(format!("{} => {:?}", stringify!($e), $e.await));
        };
    }
    step!(store.create_run(run_record("r1", Some("a"), 1, 1_500, RunStatus::Running)));
    step!(store.create_run(run_record("r1", Some("b"), 1, 1_500, RunStatus::Running)));
    step!(store.create_run(unowned("r2")));
    step!(store.claim_run("r2", "b", 1_000, TTL));
    step!(store.claim_run("r2", "a", 1_200, TTL));
    step!(store.claim_run("nope", "a", 1_200, TTL));
    step!(store.save_snapshot(snapshot("r1", "run", 1, "one"), 1));
    step!(store.save_snapshot(snapshot("r1", "run/worker:w:1", 1, "w"), 1));
    step!(store.save_snapshot(snapshot("r1", "run", 2, "two"), 1));
    step!(store.save_snapshot(snapshot("r1", "run", 3, "stale"), 7));
    step!(store.save_snapshot(snapshot("nope", "run", 1, "none"), 1));
    step!(store.record_tool_call("r1", tool_call("k2", 2, ToolCallState::Sent), 1));
    step!(store.record_tool_call("r1", tool_call("k1", 1, ToolCallState::Sent), 1));
    step!(store.record_tool_call("r1", tool_call("k1", 1, ToolCallState::Done), 1));
    step!(store.record_tool_call("r2", tool_call("k1", 1, ToolCallState::Sent), 0));
    step!(store.record_tool_call("nope", tool_call("k1", 1, ToolCallState::Sent), 0));
    step!(store.append_events("r1", shared_events("r1", 1..=3), 1));
    step!(store.append_events("r1", shared_events("r1", 4..=4), 2));
    step!(store.append_events("r1", shared_events("r1", 4..=5), 1));
    step!(store.append_events("nope", shared_events("nope", 1..=1), 1));
    step!(store.renew_run("r1", 1, 1_400, TTL));
    step!(store.renew_run("r1", 2, 1_400, TTL));
    step!(store.renew_run("nope", 1, 1_400, TTL));
    let mut paused = update(RunStatus::WaitingHuman, 1_450);
    paused.pause = Some(PauseRecord {
        reason: "escalated".to_owned(),
        subject: "search".to_owned(),
        path: "run".to_owned(),
        call: Some(tool_call("k2", 2, ToolCallState::Unknown)),
    });
    step!(store.update_run("r2", 1, paused.clone()));
    step!(store.update_run("r2", 0, paused.clone()));
    step!(store.update_run("nope", 1, paused.clone()));
    step!(store.create_run(unowned("r0")));
    step!(store.reconcile_orphans(1_800));
    step!(store.reconcile_orphans(5_000));
    step!(store.claim_run("r1", "b", 5_000, TTL));
    step!(store.save_snapshot(snapshot("r1", "run", 4, "resumed"), 2));
    let mut done = update(RunStatus::Completed, 5_100);
    done.answer = Some("42".to_owned());
    step!(store.update_run("r1", 2, done.clone()));
    step!(store.claim_run("r1", "c", 9_000, TTL));
    step!(store.claim_run("r2", "c", 9_000, TTL));
    step!(store.load_run("r1"));
    step!(store.load_run("nope"));
    step!(store.list_runs());
    step!(store.load_snapshots("r1"));
    step!(store.load_snapshots("r2"));
    step!(store.load_tool_calls("r1"));
    step!(store.load_events("r1", 0));
    step!(store.load_events("r1", 2));
    step!(store.load_events("r2", 0));
    step!(store.flush());
    log
}
