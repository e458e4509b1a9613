//! The event schema and the bus's overflow policy.

mod common;

use std::sync::Arc;

use common::*;
use leasehold_actors::{
    LeaseId, OverflowAction, TokioClock, prelude::*, testing::ScriptedEvaluator,
};

#[tokio::test(start_paused = true)]
async fn events_carry_seq_at_run_id_path_and_kind() {
    let bus = EventBus::with_clock(64, Arc::new(TokioClock::starting_at(1_000)));
    let mut stream = bus.subscribe();
    let mut config = config(2, 10);
    config.watchdog.free_renewals = 0;
    let supervision = Supervision::start(
        config,
        Some(Arc::new(ScriptedEvaluator::always("INTERVENE"))),
        Arc::new(bus.clone()),
    )
    .await
    .expect("started");
    let handle = supervision
        .leases
        .supervise(stream_spec(), |evidence| async move {
            evidence.progress("1/3");
            std::future::pending::<()>().await
        })
        .expect("started");
    let _ = handle.outcome().await;
    let mut events = Vec::new();
    while let Some(Ok(event)) = stream.try_recv() {
        events.push(event);
    }
    let kinds: Vec<_> = events.iter().map(|e| e.kind.name()).collect();
    assert_eq!(
        kinds,
        [
            "progress",
            "wait",
            "verdict",
            "intervened",
            "operation_timed"
        ]
    );
    let seqs: Vec<_> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    let positions: Vec<_> = events.iter().map(|e| e.position).collect();
    assert_eq!(
        positions,
        [1, 2, 3, 4, 5],
        "the run's own count, with no gap"
    );
    assert_eq!(events[1].at, 11_000, "`at` comes from the clock port");
    assert!(events.iter().all(|e| &*e.run_id == RUN && &*e.path == PATH));

    let json = serde_json::to_value(&*events[1]).expect("serializes");
    assert_eq!(
        json,
        serde_json::json!({
            "seq": 2, "position": 2, "at": 11000, "run_id": RUN, "path": PATH,
            "kind": "wait", "lease_id": handle_id(&events), "lease_kind": "model_stream",
            "subject": "chat", "renewals": 0, "lease_ms": 10000
        })
    );
    // And back: the schema round-trips.
    let back: Event = serde_json::from_value(json).expect("deserializes");
    assert_eq!(back, *events[1]);

    // How the operation went, in time: one item at once, then silence
    // until it was cut at its lease's end.
    let timed = serde_json::to_value(&*events[4]).expect("serializes");
    assert_eq!(
        timed,
        serde_json::json!({
            "seq": 5, "position": 5, "at": 11000, "run_id": RUN, "path": PATH,
            "kind": "operation_timed", "lease_id": handle_id(&events),
            "lease_kind": "model_stream", "subject": "chat",
            "timing": {
                "duration_ms": 10000, "items": 1, "first_item_ms": 0, "last_item_ms": 0,
                "longest_silence_ms": 0, "silence_after": 0, "ended": "cut", "renewals": 0
            }
        })
    );
    let back: Event = serde_json::from_value(timed).expect("deserializes");
    assert_eq!(back, *events[4]);
}

/// One chunk, then silence far past the stream's acceptable pause.
fn stream_spec() -> LeaseSpec {
    LeaseSpec::new(LeaseKind::ModelStream, "chat", secs(10))
        .expect("valid")
        .in_run(RUN, PATH)
}

fn handle_id(events: &[Arc<Event>]) -> u64 {
    match &events[1].kind {
        EventKind::Wait { lease_id, .. } => lease_id.0,
        other => panic!("expected wait, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn every_event_kind_has_a_stable_snake_case_name() {
    let id = LeaseId(1);
    let kinds = [
        EventKind::Progress {
            lease_id: id,
            count: 1,
            note: None,
            reports: 1,
        },
        EventKind::EventsDropped {
            dropped: [("progress".to_owned(), 3)].into(),
            max_run_events: 10,
        },
        EventKind::NudgeQueued {
            lease_id: id,
            nudge: "n".into(),
        },
        EventKind::Intervened {
            lease_id: id,
            reason: "r".into(),
        },
        EventKind::Escalated {
            lease_id: id,
            reason: "r".into(),
        },
        EventKind::RenewalCapReached {
            lease_id: id,
            max_renewals: 3,
        },
        EventKind::LeaseCancelled { lease_id: id },
        EventKind::VerdictDropped {
            lease_id: id,
            verdict: Verdict::Intervene,
            reason: "the run is paused".into(),
        },
        EventKind::ControlRefused {
            command: "resume".into(),
            reason: "run r is not paused".into(),
        },
        EventKind::RunForked(Box::new(leasehold_actors::RunFork {
            flow: "f".into(),
            parent: "run-p".into(),
            loop_path: "run/worker:w:1".into(),
            step: 2,
            guidance: Some("g".into()),
            changes: vec!["max_steps=3".into()],
            person_answers: vec!["a".into()],
        })),
        EventKind::ToolCallReplayed {
            tool: "charge".into(),
            idempotency_key: "run-p/run/1/0".into(),
            made_by: "run-p".into(),
            by_person: true,
        },
        EventKind::ContextOverflow {
            step: 3,
            attempt: 1,
            requested_tokens: Some(4_135),
            context_tokens: None,
            shortened: 2,
            chars_cut: 5_000,
            action: OverflowAction::Shortened,
        },
    ];
    for kind in kinds {
        let json = serde_json::to_value(&kind).expect("serializes");
        assert_eq!(json["kind"], kind.name());
        let back: EventKind = serde_json::from_value(json.clone()).expect("reads back");
        assert_eq!(back, kind, "{json}");
        // In an event too: no field of the kind is named as one of the
        // event's own (`seq`, `at`, `run_id`, `path`, …).
        let event = Event {
            seq: 1,
            position: 1,
            at: 0,
            run_id: "r".into(),
            path: "run".into(),
            kind: kind.clone(),
        };
        let text = serde_json::to_string(&event).expect("serializes");
        let back: Event = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(back, event);
        assert!(
            kind.name()
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '_')
        );
    }
}

#[tokio::test]
async fn bus_overflow_is_reported_to_the_reader_never_silent() {
    let bus = EventBus::with_clock(4, Arc::new(TokioClock::starting_at(0)));
    let mut stream = bus.subscribe();
    for n in 0..10u64 {
        bus.emit(
            RUN,
            PATH,
            EventKind::LeaseCancelled {
                lease_id: LeaseId(n),
            },
        );
    }
    // The reader lost the six oldest and is told exactly that…
    assert_eq!(stream.recv().await, Some(Err(Lagged { missed: 6 })));
    // …then reads the rest in order, with no gap in `seq` it was not told of.
    let mut seqs = Vec::new();
    while let Some(Ok(event)) = stream.try_recv() {
        seqs.push(event.seq);
    }
    assert_eq!(seqs, [7, 8, 9, 10]);
    assert_eq!(bus.last_seq(), 10);
}

#[tokio::test]
async fn emitting_never_blocks_without_readers() {
    let bus = EventBus::with_clock(1, Arc::new(TokioClock::starting_at(0)));
    for n in 0..10_000u64 {
        bus.emit(
            RUN,
            PATH,
            EventKind::LeaseCancelled {
                lease_id: LeaseId(n),
            },
        );
    }
    assert_eq!(bus.last_seq(), 10_000);
}

#[tokio::test]
async fn a_stream_after_a_seq_reads_what_a_subscription_then_would_have_read() {
    let bus = EventBus::with_clock(4, Arc::new(TokioClock::starting_at(0)));
    let cancelled = |n: u64| EventKind::LeaseCancelled {
        lease_id: LeaseId(n),
    };
    bus.emit(RUN, PATH, cancelled(0));
    let mark = bus.last_seq();
    let mut subscribed = bus.subscribe();
    for n in 1..3u64 {
        bus.emit(RUN, PATH, cancelled(n));
    }
    // Within the bus's capacity: the events after the mark, then those to
    // come, exactly as the subscription taken at the mark reads them.
    let mut after = bus.subscribe_after(mark);
    bus.emit(RUN, PATH, cancelled(3));
    let read = |stream: &mut EventStream| {
        let mut seqs = Vec::new();
        while let Some(next) = stream.try_recv() {
            seqs.push(next.map(|event| event.seq));
        }
        seqs
    };
    assert_eq!(read(&mut after), [Ok(2), Ok(3), Ok(4)]);
    assert_eq!(read(&mut subscribed), [Ok(2), Ok(3), Ok(4)]);
    // Further behind than the capacity: told how many it lost, then the
    // rest, as a lagging subscription is.
    let mark = bus.last_seq();
    let mut subscribed = bus.subscribe();
    for n in 4..10u64 {
        bus.emit(RUN, PATH, cancelled(n));
    }
    let mut after = bus.subscribe_after(mark);
    let expected = [Err(Lagged { missed: 2 }), Ok(7), Ok(8), Ok(9), Ok(10)];
    assert_eq!(read(&mut after), expected);
    assert_eq!(read(&mut subscribed), expected);
}
