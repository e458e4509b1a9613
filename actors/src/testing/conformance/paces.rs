//! The rules of learned paces ([`PaceStore`](crate::PaceStore)).

use std::sync::Arc;

use super::Subject;
use crate::pace::{CallPace, Pace, PaceBook, Spread};

/// Learned paces are kept, replaced when learned again, deleted by a reset,
/// and survive a reopen.
pub(super) async fn learned_paces_are_kept_replaced_reset_and_survive_a_reopen(subject: Subject) {
    let book = PaceBook::new();
    let call = |first: f64, interval: f64| CallPace {
        first_item_ms: Some(first),
        intervals: Some((
            10,
            Spread {
                mean_ms: interval,
                std_ms: interval / 10.0,
            },
        )),
    };
    book.learn(
        "model_stream:model a at http://127.0.0.1:1/v1",
        1,
        &call(300.0, 50.0),
    );
    book.learn("tool_call:search", 1, &call(2_000.0, 1_000.0));
    book.learn("worker_step:worker:w", 1, &call(10_000.0, 10_000.0));
    let store = Arc::clone(&subject.store);
    store.save_paces(book.take_changed()).await.unwrap();
    // Learned again: replaced, not added. Reset: gone.
    book.learn("tool_call:search", 2, &call(1_000.0, 500.0));
    book.reset("worker_step:worker:w");
    store.save_paces(book.take_changed()).await.unwrap();
    store.flush().await.unwrap();
    drop(store);
    let subject = subject.reopened().await;
    let kept: Vec<(String, Pace)> = subject.store.load_paces().await.unwrap();
    let expected: Vec<(String, Pace)> = book.all().into_iter().collect();
    assert_eq!(kept, expected);
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert_eq!(kept[1].1.calls, 2, "{kept:?}");
}
