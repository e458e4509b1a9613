//! The rules of snapshots, their history and tool-call records
//! ([`SnapshotStore`](crate::SnapshotStore)).

use std::sync::Arc;

use crate::ports::{
    ForkOrigin, PurgeRule, RunStatus, Snapshot, SnapshotBase, Store, ToolCallState,
};
use crate::testing::records::*;

/// A tool call keeps one record per idempotency key, the latest, read in key
/// order.
pub(super) async fn tool_calls_keep_one_record_per_idempotency_key(store: Arc<dyn Store>) {
    store.create_run(unowned("r")).await.unwrap();
    let run = claimed(store.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());
    for call in [
        tool_call("r/run/1/0", 1, ToolCallState::Sent),
        tool_call("r/run/1/1", 1, ToolCallState::Sent),
        tool_call("r/run/1/0", 1, ToolCallState::Done),
        tool_call("r/run/1/1", 1, ToolCallState::Unknown),
    ] {
        assert!(
            store
                .record_tool_call("r", call, run.fence)
                .await
                .unwrap()
                .is_applied()
        );
    }
    assert_eq!(
        store.load_tool_calls("r").await.unwrap(),
        vec![
            tool_call("r/run/1/0", 1, ToolCallState::Done),
            tool_call("r/run/1/1", 1, ToolCallState::Unknown),
        ],
        "the latest record of each key, in key order"
    );
}

/// Every snapshot saved is kept in its run's history, in the order of its
/// place ([`Snapshot::seq`]), beside the latest of each loop; a fork's
/// lineage, and a tool call's place, maker and whether a person gave its
/// result, read back as written; runs' histories do not mix.
pub(super) async fn snapshot_history_and_a_forks_lineage_are_kept_as_written(
    store: Arc<dyn Store>,
) {
    let mut record = unowned("fork");
    record.fork = Some(crate::ports::ForkOrigin {
        parent: "parent".to_owned(),
        path: "run/worker:research:1".to_owned(),
        step: 2,
        seq: 7,
        guidance: Some("cite the sources".to_owned()),
        changes: vec!["leases.tool_call=30s".to_owned()],
        person_answers: vec!["A person reviewed the escalation and answered: go".to_owned()],
    });
    // Started within a caller's trace, too: kept as written.
    record.trace_parent = Some(
        crate::TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .expect("valid"),
    );
    store.create_run(record.clone()).await.unwrap();
    store.create_run(unowned("other")).await.unwrap();
    let run = claimed(store.claim_run("fork", "exec-a", 1_000, TTL).await.unwrap());
    assert_eq!(run.fork, record.fork, "the lineage, read back from a claim");
    assert_eq!(run.trace_parent, record.trace_parent, "the caller's trace");
    let other = store.load_run("other").await.unwrap().unwrap();
    assert_eq!(other.trace_parent, None);
    let other = claimed(
        store
            .claim_run("other", "exec-a", 1_000, TTL)
            .await
            .unwrap(),
    );
    let saves = [
        ("run", 1, 3),
        ("run/worker:research:1", 1, 4),
        ("run", 2, 9),
    ];
    // Written out of their order: the history is read in it.
    for (path, step, seq) in saves.iter().rev() {
        let mut saved = snapshot("fork", path, *step, &format!("{path} at {step}"));
        saved.seq = *seq;
        assert!(
            store
                .save_snapshot(saved, run.fence)
                .await
                .unwrap()
                .is_applied()
        );
    }
    assert!(
        store
            .save_snapshot(snapshot("other", "run", 1, "elsewhere"), other.fence)
            .await
            .unwrap()
            .is_applied()
    );
    let history = store.load_snapshot_history("fork").await.unwrap();
    let read: Vec<(&str, u32, u64)> = history
        .iter()
        .map(|s| (s.path.as_str(), s.step, s.seq))
        .collect();
    assert_eq!(read, saves, "every snapshot, in the order of its place");
    assert_eq!(history[2].state["transcript"][0]["content"], "run at 2");
    assert_eq!(
        store.load_snapshots("fork").await.unwrap().len(),
        2,
        "the latest of each loop"
    );
    assert_eq!(store.load_snapshot_history("other").await.unwrap().len(), 1);
    let mut call = tool_call("parent/run/1/0", 1, ToolCallState::Done);
    call.seq = 2;
    call.by_person = true;
    call.made_by = Some("parent".to_owned());
    assert!(
        store
            .record_tool_call("fork", call.clone(), run.fence)
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(store.load_tool_calls("fork").await.unwrap(), vec![call]);
    assert_eq!(
        store.load_run("fork").await.unwrap().unwrap().fork,
        record.fork
    );
}

/// How long each large message of the history rules is (bytes).
const LARGE: usize = 64 * 1024;

/// A message of `LARGE` bytes that no compression shrinks, the same for
/// the same `seed`.
fn large(seed: u64) -> serde_json::Value {
    let mut rng = fastrand::Rng::with_seed(seed);
    let content: String = std::iter::repeat_with(|| rng.alphanumeric())
        .take(LARGE)
        .collect();
    serde_json::json!({"role": "tool", "content": content})
}

/// The loop `run` of `run_id` at place `seq`, its transcript `messages`,
/// continuing `base` (run, place, messages kept) if given.
fn step(
    run_id: &str,
    seq: u64,
    messages: &[serde_json::Value],
    base: Option<(&str, u64, usize)>,
) -> Snapshot {
    Snapshot {
        run_id: run_id.to_owned(),
        path: "run".to_owned(),
        step: u32::try_from(seq).unwrap_or(u32::MAX),
        status: RunStatus::Running,
        state: serde_json::json!({"steps": seq, "transcript": messages, "calls": []}),
        seq,
        base: base.map(|(run_id, seq, kept)| SnapshotBase {
            run_id: run_id.to_owned(),
            seq,
            kept,
        }),
    }
}

/// `snapshot` as a store answers it: whole, with no base.
fn whole(mut snapshot: Snapshot) -> Snapshot {
    snapshot.base = None;
    snapshot
}

/// Saves `snapshot` with `fence`, which must land.
async fn save(store: &dyn Store, snapshot: Snapshot, fence: u64) {
    let saved = store.save_snapshot(snapshot, fence).await.unwrap();
    assert!(saved.is_applied(), "{saved:?}");
}

/// Saves `steps` steps of the loop `run` of `run_id` with `fence` as a
/// loop does, from place `first`: each adds a large message and names the
/// last snapshot that landed as its base. Answers the whole states saved.
async fn loop_steps(
    store: &dyn Store,
    run_id: &str,
    fence: u64,
    transcript: &mut Vec<serde_json::Value>,
    mut last: Option<(String, u64)>,
    places: std::ops::RangeInclusive<u64>,
) -> Vec<Snapshot> {
    let mut saved = Vec::new();
    for seq in places {
        let kept = transcript.len();
        transcript.push(large(seq));
        let base = last.as_ref().map(|(run, at)| (run.as_str(), *at, kept));
        let snapshot = step(run_id, seq, transcript, base);
        save(store, snapshot.clone(), fence).await;
        saved.push(whole(snapshot));
        last = Some((run_id.to_owned(), seq));
    }
    saved
}

/// A loop's history grows with its steps, not their square: each entry
/// that names its base keeps only the messages since, and the history and
/// the latest read back whole — across a write refused for its fence
/// (nobody's base) and a transcript cut back by a restart (saved whole).
pub(super) async fn a_loops_history_grows_with_its_steps_not_their_square(store: Arc<dyn Store>) {
    let store = store.as_ref();
    store.create_run(unowned("r")).await.unwrap();
    let run = claimed(store.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());
    let mut transcript = vec![serde_json::json!({"role": "user", "content": "task"})];
    let mut expected = loop_steps(store, "r", run.fence, &mut transcript, None, 1..=6).await;
    // A stale writer's step lands nothing, and names nothing.
    let refused = step("r", 7, &[serde_json::json!("stale")], Some(("r", 6, 0)));
    let refused = store.save_snapshot(refused, run.fence + 1).await.unwrap();
    assert!(!refused.is_applied(), "{refused:?}");
    let last = Some(("r".to_owned(), 6));
    expected.extend(loop_steps(store, "r", run.fence, &mut transcript, last, 7..=8).await);
    // A restart cut the transcript back: saved whole, then continued.
    transcript.truncate(2);
    transcript.push(large(9));
    let restarted = step("r", 9, &transcript, None);
    save(store, restarted.clone(), run.fence).await;
    expected.push(restarted);
    let last = Some(("r".to_owned(), 9));
    expected.extend(loop_steps(store, "r", run.fence, &mut transcript, last, 10..=12).await);

    assert_eq!(
        store.load_snapshot_history("r").await.unwrap(),
        expected,
        "every state whole, in order"
    );
    assert_eq!(
        store.load_snapshots("r").await.unwrap(),
        expected[expected.len() - 1..],
        "the latest, whole"
    );
    // Stored: one large message a step but the restart's two, and the
    // latest's one; whole states would hold 55.
    let bytes = store.snapshot_bytes("r").await.unwrap();
    let steps = u64::try_from(expected.len()).unwrap();
    let large = u64::try_from(LARGE).unwrap();
    assert!(
        bytes < 2 * steps * large,
        "{bytes} bytes stored for {steps} steps of {large} bytes each: more than linear"
    );
    assert!(
        bytes > steps * large,
        "{bytes} bytes: the messages are kept"
    );
}

/// A fork shares its parent's history: its first snapshot names the
/// parent's at the fork point, so its own storage grows only with its own
/// steps; its history and latest read back whole; and the parent is not
/// purged while the fork continues it, only once the fork is.
pub(super) async fn a_fork_shares_its_parents_history_and_stores_only_its_own_steps(
    store: Arc<dyn Store>,
) {
    let store = store.as_ref();
    store.create_run(unowned("p")).await.unwrap();
    let parent = claimed(store.claim_run("p", "exec-a", 1_000, TTL).await.unwrap());
    let mut transcript = vec![serde_json::json!({"role": "user", "content": "task"})];
    loop_steps(store, "p", parent.fence, &mut transcript, None, 1..=10).await;
    let ended = store.update_run("p", parent.fence, update(RunStatus::Completed, 1_000));
    assert!(ended.await.unwrap().is_applied());

    let mut record = unowned("f");
    record.fork = Some(ForkOrigin {
        parent: "p".to_owned(),
        path: "run".to_owned(),
        step: 11,
        seq: 10,
        guidance: None,
        changes: Vec::new(),
        person_answers: Vec::new(),
    });
    store.create_run(record).await.unwrap();
    let fork = claimed(store.claim_run("f", "exec-a", 1_000, TTL).await.unwrap());
    let start = step("f", 10, &transcript, Some(("p", 10, transcript.len())));
    save(store, start.clone(), fork.fence).await;
    let last = Some(("f".to_owned(), 10));
    let mut expected = vec![whole(start)];
    expected.extend(loop_steps(store, "f", fork.fence, &mut transcript, last, 11..=13).await);

    assert_eq!(store.load_snapshot_history("f").await.unwrap(), expected);
    assert_eq!(
        store.load_snapshots("f").await.unwrap(),
        expected[expected.len() - 1..]
    );
    let bytes = store.snapshot_bytes("f").await.unwrap();
    let large = u64::try_from(LARGE).unwrap();
    assert!(
        bytes < 5 * large,
        "{bytes} bytes stored for a fork of 3 steps of {large} bytes each: it copied its \
         parent's 10"
    );
    let parent_bytes = store.snapshot_bytes("p").await.unwrap();
    assert!(
        parent_bytes < 12 * large,
        "{parent_bytes} bytes for the parent's 10 steps"
    );

    // The parent is due, the fork lives: the parent stays.
    let rule = |limit| PurgeRule {
        now_ms: 1_000_000,
        retention_ms: Some(1_000),
        limit,
    };
    assert_eq!(
        store.purge_finished(rule(10)).await.unwrap().purged,
        Vec::<String>::new()
    );
    assert_eq!(store.load_snapshot_history("f").await.unwrap(), expected);
    // The fork ends: it goes first, its parent on the next pass.
    let ended = store.update_run("f", fork.fence, update(RunStatus::Completed, 2_000));
    assert!(ended.await.unwrap().is_applied());
    assert_eq!(store.purge_finished(rule(10)).await.unwrap().purged, ["f"]);
    assert_eq!(store.purge_finished(rule(10)).await.unwrap().purged, ["p"]);
    assert!(store.load_snapshot_history("p").await.unwrap().is_empty());
}
