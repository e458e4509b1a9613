//! An operation raced against its cancellation, looking at the token only
//! when the token woke it.
//!
//! `tokio::select!` over `token.cancelled()` and the work polls both at
//! every wake, and a poll of the token takes its lock: a streamed call is
//! woken at every chunk, so the lock was taken at every chunk of every call.
//! Here the token is polled with a waker of its own, and only at the first
//! poll and after it woke the task.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Runs `work` until it ends (`Some` of its output) or `token` is cancelled
/// (`None`, and `work` is dropped unfinished). A cancellation already made
/// wins over work that would end at its first poll, as with a biased
/// `select!` that looks at the token first.
pub(crate) fn until_cancelled<Fut: Future>(
    token: CancellationToken,
    work: Fut,
) -> UntilCancelled<Fut> {
    let bell = Arc::new(Bell {
        rung: AtomicBool::new(true),
        task: AtomicWaker::new(),
    });
    UntilCancelled {
        work,
        cancelled: token.cancelled_owned(),
        waker: Waker::from(Arc::clone(&bell)),
        bell,
        known: None,
    }
}

pin_project_lite::pin_project! {
    /// The future of [`until_cancelled`]. Written out, not an `async fn`:
    /// an `async fn` keeps its argument and the local it is pinned in side
    /// by side, so the work's future was held twice.
    pub(crate) struct UntilCancelled<Fut> {
        #[pin]
        work: Fut,
        #[pin]
        cancelled: WaitForCancellationFutureOwned,
        bell: Arc<Bell>,
        // The bell as a waker, for polling the token.
        waker: Waker,
        // The task's waker as the bell last knew it: given again when it
        // changed (a task's own waker stays the same from poll to poll) or
        // the bell rang (ringing uses it up).
        known: Option<Waker>,
    }
}

impl<Fut: Future> Future for UntilCancelled<Fut> {
    type Output = Option<Fut::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let rung = this.bell.rung.swap(false, Ordering::AcqRel);
        if rung
            || this
                .known
                .as_ref()
                .is_none_or(|known| !known.will_wake(cx.waker()))
        {
            this.bell.task.register(cx.waker());
            *this.known = Some(cx.waker().clone());
        }
        if rung
            && this
                .cancelled
                .poll(&mut Context::from_waker(this.waker))
                .is_ready()
        {
            return Poll::Ready(None);
        }
        this.work.poll(cx).map(Some)
    }
}

/// The token's waker: marks that the token woke the task, and wakes it.
struct Bell {
    rung: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Bell {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.rung.store(true, Ordering::Release);
        self.task.wake();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn work_that_ends_gives_its_output() {
        let token = CancellationToken::new();
        let out = until_cancelled(token, async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            7
        })
        .await;
        assert_eq!(out, Some(7));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancellation_while_the_work_waits_ends_it_and_drops_it() {
        let token = CancellationToken::new();
        let dropped = Arc::new(AtomicBool::new(false));
        struct Flag(Arc<AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
            }
        }
        let flag = Flag(dropped.clone());
        let cancel = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            cancel.cancel();
        });
        // The work is woken many times before the cancellation: each wake
        // that is not the token's leaves the token unpolled, and the
        // token's own wake is still seen.
        let out = until_cancelled(token, async move {
            let _flag = flag;
            for _ in 0..1000 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert_eq!(out, None::<()>);
        assert!(dropped.load(Ordering::Acquire), "the work was dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn a_parents_cancellation_reaches_a_childs_work() {
        let parent = CancellationToken::new();
        let child = parent.child_token();
        parent.cancel();
        let out = until_cancelled(child, async { 1 }).await;
        assert_eq!(out, None, "a cancellation made first wins over ready work");
    }
}
