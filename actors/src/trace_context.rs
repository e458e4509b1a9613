//! W3C trace context: the trace a run belongs to, and `traceparent`.
//!
//! Every run belongs to one trace, continued across a pause, a resume and
//! a change of executor. A run started within a caller's trace (the
//! `traceparent` of `POST /runs`, kept with the run) belongs to the
//! caller's, its root span a child of the caller's span; any other run's
//! trace id is derived from the run's id (a UUID v5 of it), so every
//! executor and every log line that names the run names the same trace
//! without storing anything ([`run_trace_id`], [`trace_id_for`]). A `traceparent` header
//! (`00-TRACEID-SPANID-FLAGS`) is read by [`TraceParent::parse`], refusing
//! what the W3C specification refuses: another length, upper-case or
//! non-hex digits, a trace or span id of zeros, version `ff`.
//!
//! ```
//! use leasehold_actors::{TraceParent, trace_id_of};
//!
//! let trace = trace_id_of("run-1");
//! assert_eq!(trace.len(), 32);
//! assert_eq!(trace, trace_id_of("run-1"));
//! let parent = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")?;
//! assert_eq!(parent.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
//! assert!(parent.sampled);
//! assert!(TraceParent::parse("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_err());
//! # Ok::<(), leasehold_actors::TraceParentError>(())
//! ```

use serde::{Deserialize, Serialize};

/// The namespace of the UUIDs trace ids are derived from.
const NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x6c65_6173_6568_6f6c_642d_7472_6163_6573);

/// The trace id of run `run_id`: 32 lower-case hex digits, the same
/// wherever it is computed.
pub fn trace_id_of(run_id: &str) -> String {
    uuid::Uuid::new_v5(&NAMESPACE, run_id.as_bytes())
        .simple()
        .to_string()
}

/// The trace of run `run_id`: its caller's, when it was started within
/// one (`caller`), else the one derived from its id ([`trace_id_of`]).
pub fn run_trace_id(run_id: &str, caller: Option<&TraceParent>) -> String {
    caller.map_or_else(|| trace_id_of(run_id), |caller| caller.trace_id.clone())
}

/// The live runs started within a caller's trace, and that trace: what
/// [`trace_id_for`] answers for a log line that has only the run's id.
static CALLER_TRACES: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<String, String>>,
> = std::sync::LazyLock::new(Default::default);

fn caller_traces() -> std::sync::MutexGuard<'static, std::collections::HashMap<String, String>> {
    CALLER_TRACES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Remembers, while `run_id` is live in this process, that it belongs to
/// the caller's trace `trace_id`.
pub(crate) fn remember_caller_trace(run_id: &str, trace_id: &str) {
    caller_traces().insert(run_id.to_owned(), trace_id.to_owned());
}

/// Forgets what [`remember_caller_trace`] remembered of `run_id`.
pub(crate) fn forget_caller_trace(run_id: &str) {
    caller_traces().remove(run_id);
}

/// The trace of run `run_id` as this process knows it: its caller's while
/// it is live here and was started within one, else the one derived from
/// its id. What a log line about a run outside its span names.
pub fn trace_id_for(run_id: &str) -> String {
    caller_traces()
        .get(run_id)
        .cloned()
        .unwrap_or_else(|| trace_id_of(run_id))
}

/// The span id of the operation `key` (a loop's path and what in it, e.g.
/// `run/model_call:3#1`) of run `run_id`: 16 lower-case hex digits, never
/// all zero, the same wherever it is computed, so the span a model server
/// or a tool server is told of is the one the run's trace holds. Derived
/// from the run, not the trace, so that runs sharing a caller's trace have
/// spans of their own.
pub fn span_id_of(run_id: &str, key: &str) -> String {
    let name = format!("{run_id}/{key}");
    let bytes = uuid::Uuid::new_v5(&NAMESPACE, name.as_bytes()).into_bytes();
    let mut id = [0u8; 8];
    id.copy_from_slice(&bytes[..8]);
    if id == [0; 8] {
        id[7] = 1;
    }
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `traceparent` of the operation `key` of run `run_id` in trace
/// `trace_id`, sampled.
pub fn traceparent_of(trace_id: &str, run_id: &str, key: &str) -> String {
    TraceParent {
        trace_id: trace_id.to_owned(),
        span_id: span_id_of(run_id, key),
        sampled: true,
    }
    .header()
}

/// A parsed `traceparent`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TraceParent {
    /// The trace: 32 lower-case hex digits, not all zero.
    pub trace_id: String,
    /// The caller's span: 16 lower-case hex digits, not all zero.
    pub span_id: String,
    /// Whether the caller sampled it.
    pub sampled: bool,
}

/// Why a `traceparent` was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a W3C traceparent (`00-<32 hex>-<16 hex>-<2 hex>`): {0}")]
pub struct TraceParentError(String);

impl TraceParent {
    /// Reads a `traceparent` header's value.
    pub fn parse(value: &str) -> Result<Self, TraceParentError> {
        let refuse = |why: &str| Err(TraceParentError(why.to_owned()));
        let parts: Vec<&str> = value.trim().split('-').collect();
        let [version, trace_id, span_id, flags, ..] = parts[..] else {
            return refuse("expected four fields separated by `-`");
        };
        let hex = |s: &str, len: usize| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if !hex(version, 2) || version == "ff" {
            return refuse("the version is not two lower-case hex digits other than ff");
        }
        if version == "00" && parts.len() != 4 {
            return refuse("version 00 has exactly four fields");
        }
        if !hex(trace_id, 32) || trace_id.bytes().all(|b| b == b'0') {
            return refuse("the trace id is not 32 lower-case hex digits, not all zero");
        }
        if !hex(span_id, 16) || span_id.bytes().all(|b| b == b'0') {
            return refuse("the parent id is not 16 lower-case hex digits, not all zero");
        }
        if !hex(flags, 2) {
            return refuse("the flags are not two lower-case hex digits");
        }
        let sampled = u8::from_str_radix(flags, 16).is_ok_and(|f| f & 1 == 1);
        Ok(Self {
            trace_id: trace_id.to_owned(),
            span_id: span_id.to_owned(),
            sampled,
        })
    }

    /// The header's value.
    pub fn header(&self) -> String {
        let flags = if self.sampled { "01" } else { "00" };
        format!("00-{}-{}-{flags}", self.trace_id, self.span_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_read_and_written_back_and_bad_ones_are_refused() {
        let value = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        let parsed = TraceParent::parse(value).expect("valid");
        assert!(!parsed.sampled);
        assert_eq!(parsed.header(), value);
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",
        ] {
            assert!(TraceParent::parse(bad).is_err(), "{bad:?}");
        }
        // A later version may carry more fields.
        assert!(
            TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x").is_ok()
        );
    }

    #[test]
    fn an_operations_traceparent_is_valid_and_its_own() {
        let trace = trace_id_of("run-1");
        let a = traceparent_of(&trace, "run-1", "run/model_call:1#1");
        let b = traceparent_of(&trace, "run-1", "run/model_call:1#2");
        assert_ne!(a, b);
        assert_eq!(a, traceparent_of(&trace, "run-1", "run/model_call:1#1"));
        // Two runs in one caller's trace: the same operation, spans of
        // their own.
        assert_ne!(a, traceparent_of(&trace, "run-2", "run/model_call:1#1"));
        let parsed = TraceParent::parse(&a).expect("valid");
        assert_eq!(parsed.trace_id, trace);
        assert!(parsed.sampled);
    }

    #[test]
    fn runs_have_distinct_stable_trace_ids() {
        assert_ne!(trace_id_of("run-1"), trace_id_of("run-2"));
        assert!(
            trace_id_of("run-1")
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
    }
}
