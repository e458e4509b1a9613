//! A reply that is always answered.
//!
//! A lease waiting for a verdict and a loop waiting for its budget checkpoint
//! must never wait for ever: if the actor that owes the answer goes away and
//! drops the request, the reply answers by itself with the safe default of
//! its kind ([`Unanswered`]) — `RENEW` for a lease, `WRAP_UP` for a budget.

use tokio::sync::oneshot;

/// The answer a [`Reply`] gives when it is dropped unanswered.
pub trait Unanswered: Send + 'static {
    /// The safe default.
    fn unanswered() -> Self;
}

/// Where an answer goes. Called exactly once, by [`Reply::send`] or, if it is
/// dropped unsent, with [`Unanswered::unanswered`].
pub struct Reply<T: Unanswered>(Option<Box<dyn FnOnce(T) + Send>>);

impl<T: Unanswered> Reply<T> {
    /// A reply that calls `f` with the answer.
    pub fn new(f: impl FnOnce(T) + Send + 'static) -> Self {
        Self(Some(Box::new(f)))
    }

    /// A reply into a oneshot channel, for callers that await the answer.
    pub fn oneshot() -> (Self, oneshot::Receiver<T>) {
        let (tx, rx) = oneshot::channel();
        (
            Self::new(move |answer| {
                let _ = tx.send(answer);
            }),
            rx,
        )
    }

    /// Delivers `answer`.
    pub fn send(mut self, answer: T) {
        if let Some(f) = self.0.take() {
            f(answer);
        }
    }
}

impl<T: Unanswered> Drop for Reply<T> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            tracing::warn!(
                answer = std::any::type_name::<T>(),
                "a request was dropped unanswered; answering with the safe default"
            );
            f(T::unanswered());
        }
    }
}

impl<T: Unanswered> std::fmt::Debug for Reply<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Reply<{}>", std::any::type_name::<T>())
    }
}
