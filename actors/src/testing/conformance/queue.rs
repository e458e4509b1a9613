//! The rules of the queue and of commands
//! ([`QueueStore`](crate::QueueStore)).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Subject;
use crate::ports::{
    ClaimOutcome, QueueClaim, ReconcileDecision, RunCommand, RunQuery, RunRecord, RunStatus, Store,
    fencing,
};
use crate::testing::records::*;

/// A command stored for a run is taken once, in id order, and only by the
/// executor that holds the run when it is taken; each run's waiting commands
/// are counted, and a command for no run is refused.
pub(super) async fn a_command_is_taken_once_and_by_the_runs_owner_only(store: Arc<dyn Store>) {
    store.create_run(unowned("r")).await.unwrap();
    claimed(store.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());
    let resume = RunCommand::Resume {
        guidance: Some("go on".to_owned()),
    };
    let reconcile = RunCommand::Reconcile {
        key: "r/run/1/0".to_owned(),
        decision: ReconcileDecision::MarkDone {
            result: "done".to_owned(),
        },
    };
    let first = store.send_command("r", resume.clone()).await.unwrap();
    let second = store.send_command("r", reconcile.clone()).await.unwrap();
    assert!(first < second, "ids go up: {first}, {second}");
    assert!(
        store
            .send_command(
                "missing",
                RunCommand::Cancel {
                    reason: "no".to_owned()
                }
            )
            .await
            .is_err(),
        "a command for no run is refused"
    );

    // Each run's waiting commands are counted, and only its own.
    store.create_run(unowned("other")).await.unwrap();
    assert_eq!(store.count_commands("r").await.unwrap(), 2);
    assert_eq!(store.count_commands("other").await.unwrap(), 0);

    // Another executor takes nothing: the run is not its own.
    assert!(store.take_commands("exec-b").await.unwrap().is_empty());
    let taken = store.take_commands("exec-a").await.unwrap();
    let taken: Vec<_> = taken
        .into_iter()
        .map(|c| (c.id, c.run_id, c.command))
        .collect();
    assert_eq!(
        taken,
        vec![
            (first, "r".to_owned(), resume),
            (second, "r".to_owned(), reconcile),
        ]
    );
    // Taken once.
    assert!(store.take_commands("exec-a").await.unwrap().is_empty());
    assert_eq!(store.count_commands("r").await.unwrap(), 0);

    // A command waits for whoever holds the run when it is taken.
    let cancel = RunCommand::Cancel {
        reason: "stop".to_owned(),
    };
    store.send_command("r", cancel.clone()).await.unwrap();
    claimed(store.claim_run("r", "exec-b", 2_000, TTL).await.unwrap());
    assert!(store.take_commands("exec-a").await.unwrap().is_empty());
    let taken = store.take_commands("exec-b").await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].command, cancel);
}

/// Queued runs are claimed oldest first, at most `max` at a time, each as
/// `fencing::claim_queued` makes it, and no run in another status is claimed
/// from the queue.
pub(super) async fn queued_runs_are_claimed_oldest_first_at_most_max(store: Arc<dyn Store>) {
    // Created out of id order: the oldest is the smallest id.
    for run_id in ["q2", "q0", "q3", "q1"] {
        store.create_run(queued(run_id)).await.unwrap();
    }
    for (run_id, status) in [
        ("a-running", RunStatus::Running),
        ("a-orphaned", RunStatus::Orphaned),
        ("a-waiting", RunStatus::WaitingHuman),
        ("a-completed", RunStatus::Completed),
    ] {
        store
            .create_run(run_record(run_id, None, 1, 0, status))
            .await
            .unwrap();
    }
    assert!(
        store
            .claim_queued(claim("exec-a", 2_000, 0))
            .await
            .unwrap()
            .is_empty(),
        "max 0 claims nothing"
    );
    let before = store.load_run("q0").await.unwrap().unwrap();
    let first = store.claim_queued(claim("exec-a", 2_000, 2)).await.unwrap();
    let ids: Vec<&str> = first.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids, ["q0", "q1"]);
    // The record every store makes is the rule's.
    assert_eq!(
        Some(first[0].clone()),
        fencing::claim_queued(&before, &claim("exec-a", 2_000, 2))
    );
    for record in &first {
        assert_eq!(record.status, RunStatus::Running);
        assert_eq!(record.owner_id.as_deref(), Some("exec-a"));
        assert_eq!(record.fence, 1);
        assert_eq!(record.lease_expires_at_ms, 2_000 + TTL);
        assert_eq!(
            store.load_run(&record.run_id).await.unwrap().as_ref(),
            Some(record)
        );
    }
    assert_eq!(queued_ids(store.as_ref()).await, ["q3", "q2"]);
    // A queued run claimed by id runs too.
    match store.claim_run("q2", "exec-b", 2_000, TTL).await.unwrap() {
        ClaimOutcome::Claimed(record) => assert_eq!(record.status, RunStatus::Running),
        other => panic!("unexpected {other:?}"),
    }
    let rest = store
        .claim_queued(claim("exec-b", 3_000, 10))
        .await
        .unwrap();
    let ids: Vec<&str> = rest.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids, ["q3"], "only queued runs are claimed");
    assert!(
        store
            .claim_queued(claim("exec-b", 3_000, 10))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(queued_ids(store.as_ref()).await.is_empty());
    for (run_id, status) in [
        ("a-running", RunStatus::Running),
        ("a-orphaned", RunStatus::Orphaned),
        ("a-waiting", RunStatus::WaitingHuman),
        ("a-completed", RunStatus::Completed),
    ] {
        let record = store.load_run(run_id).await.unwrap().unwrap();
        assert_eq!((record.status, record.fence), (status, 1), "{run_id}");
    }
}

/// A claim of at most `max` queued runs by `owner_id` at `now_ms`.
fn claim(owner_id: &str, now_ms: u64, max: usize) -> QueueClaim {
    QueueClaim {
        owner_id: owner_id.to_owned(),
        now_ms,
        ttl_ms: TTL,
        max,
        room: crate::keyed_limits::ClaimRoom::default(),
    }
}

/// Queued runs are claimed in fair turns across tenants: each tenant's
/// oldest first, its turns after the runs it has running, a turn's runs
/// oldest first, as
/// [`fair_order`](crate::tenancy::fair_order) orders them; a tenant that
/// queued many runs holds another's single run back by one of its own.
/// The queued runs are counted by tenant as they are.
pub(super) async fn queued_runs_are_claimed_in_fair_turns_across_tenants(store: Arc<dyn Store>) {
    // `big` queued twelve runs first, then the default tenant one, then
    // `small` two.
    let mut all = Vec::new();
    for n in 0..12 {
        all.push((format!("q{n:02}"), Some("big")));
    }
    all.push(("q12".to_owned(), None));
    all.push(("q13".to_owned(), Some("small")));
    all.push(("q14".to_owned(), Some("small")));
    for (run_id, tenant) in all.iter().rev() {
        let mut record = queued(run_id);
        record.tenant = tenant.map(str::to_owned);
        store.create_run(record).await.unwrap();
    }
    // The runs one claim starts together, in id order.
    let ids = |claimed: Vec<RunRecord>| -> Vec<String> {
        let mut ids: Vec<String> = claimed.into_iter().map(|r| r.run_id).collect();
        ids.sort();
        ids
    };
    let entries = all.iter().map(|(id, tenant)| {
        Ok::<_, std::convert::Infallible>((id.clone(), tenant.map(str::to_owned)))
    });
    let mut rule = crate::tenancy::fair_order(entries, &BTreeMap::new(), 4).unwrap();
    rule.sort();
    let counts = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
        pairs.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect()
    };
    assert_eq!(
        store.count_queued_by_tenant().await.unwrap(),
        counts(&[("big", 12), ("default", 1), ("small", 2)])
    );
    let first = ids(store.claim_queued(claim("exec-a", 2_000, 4)).await.unwrap());
    assert_eq!(first, ["q00", "q01", "q12", "q13"]);
    assert_eq!(
        store.count_queued_by_tenant().await.unwrap(),
        counts(&[("big", 10), ("small", 1)])
    );
    assert_eq!(first, rule);
    // `big` has two runs going on now, `small` one: one run's room goes to
    // `small`, though `big`'s next run is older.
    let second = ids(store.claim_queued(claim("exec-b", 2_000, 1)).await.unwrap());
    assert_eq!(second, ["q14"]);
    let third = ids(store.claim_queued(claim("exec-b", 2_000, 2)).await.unwrap());
    assert_eq!(third, ["q02", "q03"]);
    let rest = ids(store
        .claim_queued(claim("exec-a", 3_000, 100))
        .await
        .unwrap());
    assert_eq!(rest.len(), 8, "{rest:?}");
    assert!(queued_ids(store.as_ref()).await.is_empty());
}

/// A claim under keyed limits takes queued runs in fair order while each
/// run's keys have room, and skips a run whose key has none for the next:
/// a tenant at its limit, or a flow at its own, holds back no other run.
pub(super) async fn queued_runs_are_claimed_within_the_room_of_each_key(store: Arc<dyn Store>) {
    use crate::keyed_limits::{ClaimRoom, KeyRoom, KeyValue};
    // `big` queued six runs of `burst` and one of `other`, then `small`
    // one of `burst`, then the default tenant one of `other`.
    let mut all: Vec<(String, Option<&str>, &str)> = (0..6)
        .map(|n| (format!("q{n:02}"), Some("big"), "burst"))
        .collect();
    all.push(("q06".to_owned(), Some("big"), "other"));
    all.push(("q07".to_owned(), Some("small"), "burst"));
    all.push(("q08".to_owned(), None, "other"));
    for (run_id, tenant, flow) in &all {
        let mut record = queued(run_id);
        record.tenant = tenant.map(str::to_owned);
        record.flow = serde_json::json!({"name": flow, "max_steps": 8});
        store.create_run(record).await.unwrap();
    }
    // `big` may start two more, any other tenant three; `burst` two more,
    // any other flow five.
    let mut tenants = KeyRoom::new("per_tenant", "tenant".parse().unwrap(), Some(3), None);
    tenants.held.insert(KeyValue(vec!["big".to_owned()]), 1);
    let mut flows = KeyRoom::new("per_flow", "flow".parse().unwrap(), Some(5), None);
    flows.held.insert(KeyValue(vec!["burst".to_owned()]), 3);
    let mut within = claim("exec-a", 2_000, 10);
    within.room = ClaimRoom {
        endpoint: "http://models".to_owned(),
        rooms: vec![tenants, flows],
    };
    let mut first: Vec<String> = store
        .claim_queued(within)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    first.sort();
    // q00 and q07 take `burst`'s two; q01..q05 are skipped for it; q06 takes
    // `big`'s second; q08 is the default tenant's.
    assert_eq!(first, ["q00", "q06", "q07", "q08"]);
    let mut left = queued_ids(store.as_ref()).await;
    left.sort();
    assert_eq!(left, ["q01", "q02", "q03", "q04", "q05"]);
    // Room of none: nothing is claimed, nothing changes.
    let mut provider = KeyRoom::new("provider", "endpoint".parse().unwrap(), Some(1), None);
    provider
        .held
        .insert(KeyValue(vec!["http://models".to_owned()]), 1);
    let mut none = claim("exec-a", 2_000, 10);
    none.room = ClaimRoom {
        endpoint: "http://models".to_owned(),
        rooms: vec![provider],
    };
    assert!(store.claim_queued(none).await.unwrap().is_empty());
    assert_eq!(queued_ids(store.as_ref()).await.len(), 5);
    // A flow that asks one of the provider's ten for its runs: its second
    // run waits while the other runs take their room.
    for run_id in ["q09", "q10"] {
        let mut record = queued(run_id);
        record.flow = serde_json::json!({
            "name": "digest", "max_steps": 8, "keyed_limits": {"provider": {"live": 1}}
        });
        store.create_run(record).await.unwrap();
    }
    let mut tightened = claim("exec-a", 2_000, 10);
    tightened.room = ClaimRoom {
        endpoint: "http://models".to_owned(),
        rooms: vec![KeyRoom::new(
            "provider",
            "endpoint".parse().unwrap(),
            Some(10),
            None,
        )],
    };
    let mut second: Vec<String> = store
        .claim_queued(tightened)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    second.sort();
    assert_eq!(second, ["q01", "q02", "q03", "q04", "q05", "q09"]);
    // Without limits, the rest.
    let rest = store
        .claim_queued(claim("exec-b", 3_000, 100))
        .await
        .unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].run_id, "q10");
    assert_eq!((rest[0].status, rest[0].fence), (RunStatus::Running, 1));
}

/// A queued run, unowned.
pub(super) fn queued(run_id: &str) -> RunRecord {
    run_record(run_id, None, 0, 0, RunStatus::Queued)
}

/// The ids of the queued runs, newest first.
async fn queued_ids(store: &dyn Store) -> Vec<String> {
    let mut query = RunQuery::first(1_000);
    query.status = Some(RunStatus::Queued);
    store
        .list_runs_page(&query)
        .await
        .unwrap()
        .runs
        .into_iter()
        .map(|r| r.run_id)
        .collect()
}

/// Claimers racing on separate handles over 50 queued runs claim each
/// exactly once, and a claimed run is no longer queued.
pub(super) async fn claimers_racing_claim_each_queued_run_exactly_once(subject: Subject) {
    const RUNS: usize = 50;
    const CLAIMERS: usize = 5;
    for n in 0..RUNS {
        subject
            .store
            .create_run(queued(&format!("q{n:03}")))
            .await
            .unwrap();
    }
    let start = Arc::new(tokio::sync::Barrier::new(CLAIMERS));
    let mut claimers = Vec::new();
    for i in 0..CLAIMERS {
        let (store, start) = (subject.another_handle().await, Arc::clone(&start));
        claimers.push(tokio::spawn(async move {
            let owner = format!("exec-{i}");
            start.wait().await;
            let mut mine = Vec::new();
            loop {
                let claimed = store.claim_queued(claim(&owner, 1_000, 3)).await.unwrap();
                if claimed.is_empty() {
                    return mine;
                }
                assert!(claimed.len() <= 3);
                mine.extend(claimed);
                tokio::task::yield_now().await;
            }
        }));
    }
    let mut owners = BTreeMap::new();
    for (i, claimer) in claimers.into_iter().enumerate() {
        for record in claimer.await.unwrap() {
            assert_eq!(record.owner_id, Some(format!("exec-{i}")));
            assert_eq!((record.status, record.fence), (RunStatus::Running, 1));
            let earlier = owners.insert(record.run_id.clone(), i);
            assert_eq!(earlier, None, "{} claimed twice", record.run_id);
        }
    }
    assert_eq!(owners.len(), RUNS, "every queued run is claimed");
    for (run_id, i) in &owners {
        let stored = subject.store.load_run(run_id).await.unwrap().unwrap();
        assert_eq!(stored.owner_id, Some(format!("exec-{i}")), "{run_id}");
        assert_eq!(stored.status, RunStatus::Running);
    }
    assert!(queued_ids(subject.store.as_ref()).await.is_empty());
}
