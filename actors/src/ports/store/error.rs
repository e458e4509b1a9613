//! [`StoreError`]: a store that failed, with what kind of failure it was
//! and, where there is one, the error underneath.
//!
//! Outcomes a store expects — a stale fence, a claim another executor
//! holds, a run that has ended — are values ([`Fenced`](super::Fenced),
//! [`ClaimOutcome`](super::ClaimOutcome)), never errors. What is left is
//! sorted by [`StoreErrorKind`], so that a caller (or a wrapper: a retry,
//! a metric by kind) tells a lost connection, worth trying again, from a
//! damaged entry or a run that is not there, which are not.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// What kind of failure a [`StoreError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The write conflicts with what is kept: a run of that id already
    /// exists.
    Conflict,
    /// No such run.
    NotFound,
    /// What is kept cannot be read back: a damaged entry, a format this
    /// build does not know, a store whose last writes were not committed.
    Corrupt,
    /// The store cannot be used now: its connection was lost, its pool is
    /// exhausted, another process holds it, it is shutting down. Trying
    /// again later may succeed.
    Unavailable,
    /// The store refused what it was given, or how it was opened: a
    /// malformed URL, a value that cannot be encoded, an id too long, a
    /// call outside a tokio runtime. Trying again will not help.
    Invalid,
    /// The store's own machinery failed (an I/O error, a database error)
    /// in a way none of the other kinds says.
    Failed,
}

impl StoreErrorKind {
    /// The kind's name, in `snake_case` (`not_found`): for logs and
    /// metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Self::Conflict => "conflict",
            Self::NotFound => "not_found",
            Self::Corrupt => "corrupt",
            Self::Unavailable => "unavailable",
            Self::Invalid => "invalid",
            Self::Failed => "failed",
        }
    }

    /// Whether trying again later may succeed: a store that cannot be used
    /// now ([`Unavailable`](Self::Unavailable)) or whose machinery failed
    /// ([`Failed`](Self::Failed): an I/O error, a serialization failure, a
    /// connection reset mid-statement). A conflict, a run not found,
    /// damage and a refused value are permanent: the same write fails the
    /// same way.
    pub fn is_transient(self) -> bool {
        matches!(self, Self::Unavailable | Self::Failed)
    }
}

impl fmt::Display for StoreErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A store that failed (I/O, corruption, a locked database, a run that is
/// not there): its [`kind`](Self::kind), what happened in words, and the
/// error underneath, if any ([`Error::source`]).
///
/// It reads `store failed: <what happened>`. Cheap to clone: the source
/// is shared. Two errors are equal when their kind and words are; the
/// source is not compared.
#[derive(Clone)]
pub struct StoreError {
    kind: StoreErrorKind,
    message: String,
    source: Option<Arc<dyn Error + Send + Sync>>,
}

impl StoreError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// A write that conflicts with what is kept ([`StoreErrorKind::Conflict`]).
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::Conflict, message)
    }

    /// No such run ([`StoreErrorKind::NotFound`]).
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::NotFound, message)
    }

    /// What is kept cannot be read back ([`StoreErrorKind::Corrupt`]).
    pub fn corrupt(message: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::Corrupt, message)
    }

    /// The store cannot be used now ([`StoreErrorKind::Unavailable`]).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::Unavailable, message)
    }

    /// The store refused what it was given ([`StoreErrorKind::Invalid`]).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::Invalid, message)
    }

    /// The store's own machinery failed ([`StoreErrorKind::Failed`]).
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::Failed, message)
    }

    /// The same error, caused by `source`.
    #[must_use]
    pub fn with_source(mut self, source: impl Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// What kind of failure it is.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// Whether trying again later may succeed
    /// ([`StoreErrorKind::is_transient`]).
    pub fn is_transient(&self) -> bool {
        self.kind.is_transient()
    }

    /// What happened, in words (without the `store failed:` before it).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same kind of error, its words said of something larger: `the
    /// store at …: <message>`.
    #[must_use]
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "store failed: {}", self.message)
    }
}

impl fmt::Debug for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("StoreError");
        debug
            .field("kind", &self.kind)
            .field("message", &self.message);
        if let Some(source) = &self.source {
            debug.field("source", source);
        }
        debug.finish()
    }
}

impl Error for StoreError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source
            .as_deref()
            .map(|source| source as &(dyn Error + 'static))
    }
}

impl PartialEq for StoreError {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.message == other.message
    }
}

impl Eq for StoreError {}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::{StoreError, StoreErrorKind};

    #[test]
    fn an_error_reads_as_before_and_keeps_its_kind_and_source() {
        let io = std::io::Error::other("disk gone");
        let error = StoreError::unavailable("writing run `r`").with_source(io);
        assert_eq!(error.to_string(), "store failed: writing run `r`");
        assert_eq!(error.kind(), StoreErrorKind::Unavailable);
        assert_eq!(error.source().unwrap().to_string(), "disk gone");
        // Equal by kind and words, the source aside.
        assert_eq!(error, StoreError::unavailable("writing run `r`"));
        assert_ne!(error, StoreError::failed("writing run `r`"));
        let placed = StoreError::corrupt("an entry").context("the store at `/x`");
        assert_eq!(placed.message(), "the store at `/x`: an entry");
        assert_eq!(placed.kind(), StoreErrorKind::Corrupt);
    }
}
