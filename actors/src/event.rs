//! The public event schema and the bus that carries it.
//!
//! The schema — [`Event`], [`EventKind`] and their vocabulary — is a contract
//! with users: names are snake_case and stable, and it imports no actor, so
//! changing an actor cannot silently change the wire format. The
//! [`EventBus`] carries it: bounded, never blocking a run, and a reader that
//! falls behind is told by [`EventStream::recv`] how many events it lost
//! ([`Lagged`]). Beside the events, not among them, the bus carries the text
//! the runs' model calls stream ([`Texts`]), for readers that show an answer
//! as it is written. [`EventLimits`] bound what a peer's reports cost a run's
//! log. A [`LogTail`] reads a run's log while it is appended to.

mod bus;
mod tail;

pub(crate) use crate::vocabulary::event::overflow_sizes;
pub use crate::vocabulary::event::{
    BudgetRecord, CallOutcome, Event, EventKind, HandedTo, OverflowAction, RunFork, counted,
};
pub(crate) use crate::vocabulary::limits::cut_at_boundary;
pub use crate::vocabulary::limits::{
    DEFAULT_MAX_PROGRESS_NOTE_BYTES, DEFAULT_MAX_RUN_EVENTS, DEFAULT_PROGRESS_INTERVAL,
    EventLimits, MIN_PROGRESS_NOTE_BYTES, cut_note,
};
pub use crate::vocabulary::text::{MAX_KEPT_TEXT, TextDelta, TextFollow, Texts};
pub use bus::{EventBus, EventStream, Lagged};
pub use tail::{LogTail, TailRead};
