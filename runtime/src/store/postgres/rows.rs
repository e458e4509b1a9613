//! Between the store's records and PostgreSQL rows: the columns of a run,
//! the names of statuses, JSON values and checked integer conversions
//! (PostgreSQL's `bigint` is signed; fences and Unix-ms times are `u64`, so
//! a value past `i64::MAX` is refused with an error, never wrapped).

use std::fmt::Display;

use leasehold_actors::{RunRecord, RunStatus, StoreError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_postgres::Row;

/// The columns of `runs` that make a [`RunRecord`], in the order
/// [`run_from_row`] reads them.
pub(super) const RUN_COLUMNS: &str = "run_id, flow, status, owner_id, fence, lease_expires_at_ms, \
     reason, answer, pause, created_at_ms, updated_at_ms, fork, trace_parent, tenant";

/// `value` as a `bigint`.
pub(super) fn to_i64(value: u64, what: &dyn Display) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| {
        StoreError::invalid(format!(
            "{what} ({value}) is beyond what PostgreSQL's bigint holds ({})",
            i64::MAX
        ))
    })
}

/// A `bigint` read back as a `u64`.
pub(super) fn to_u64(value: i64, what: &dyn Display) -> Result<u64, StoreError> {
    u64::try_from(value)
        .map_err(|_| StoreError::corrupt(format!("{what} is corrupt: negative ({value})")))
}

/// `value` as JSON.
pub(super) fn to_json<T: Serialize>(
    value: &T,
    what: &dyn Display,
) -> Result<serde_json::Value, StoreError> {
    serde_json::to_value(value)
        .map_err(|e| StoreError::invalid(format!("cannot encode {what}: {e}")))
}

/// A value read back from JSON.
pub(super) fn from_json<T: DeserializeOwned>(
    value: serde_json::Value,
    what: &dyn Display,
) -> Result<T, StoreError> {
    serde_json::from_value(value)
        .map_err(|e| StoreError::corrupt(format!("{what} is corrupt: {e}")))
}

/// A status's name, as the events and the API spell it (`waiting_human`).
pub(super) fn status_name(status: RunStatus) -> Result<String, StoreError> {
    match to_json(&status, &"a run status")? {
        serde_json::Value::String(name) => Ok(name),
        other => Err(StoreError::corrupt(format!(
            "a run status encoded as {other}, not a name"
        ))),
    }
}

/// The record in a row of [`RUN_COLUMNS`].
pub(super) fn run_from_row(row: &Row) -> Result<RunRecord, StoreError> {
    let run_id: String = get(row, 0)?;
    let what = |field: &str| format!("the {field} of run `{run_id}`");
    let status: String = get(row, 2)?;
    let pause: Option<serde_json::Value> = get(row, 8)?;
    let fork: Option<serde_json::Value> = get(row, 11)?;
    let trace_parent: Option<String> = get(row, 12)?;
    Ok(RunRecord {
        flow: from_json(get(row, 1)?, &what("flow"))?,
        status: from_json(serde_json::Value::String(status), &what("status"))?,
        owner_id: get(row, 3)?,
        fence: to_u64(get(row, 4)?, &what("fence"))?,
        lease_expires_at_ms: to_u64(get(row, 5)?, &what("lease expiry"))?,
        reason: get(row, 6)?,
        answer: get(row, 7)?,
        pause: pause
            .map(|pause| from_json(pause, &what("pause")))
            .transpose()?,
        created_at_ms: to_u64(get(row, 9)?, &what("creation time"))?,
        updated_at_ms: to_u64(get(row, 10)?, &what("update time"))?,
        fork: fork
            .map(|fork| from_json(fork, &what("lineage")))
            .transpose()?,
        trace_parent: trace_parent
            .map(|header| {
                leasehold_actors::TraceParent::parse(&header).map_err(|e| {
                    StoreError::corrupt(format!("{} cannot be read: {e}", what("trace context")))
                })
            })
            .transpose()?,
        tenant: get(row, 13)?,
        run_id,
    })
}

/// The bound values of a run's columns, in the order of [`RUN_COLUMNS`].
pub(super) struct RunParams {
    run_id: String,
    flow: serde_json::Value,
    status: String,
    owner_id: Option<String>,
    fence: i64,
    lease_expires_at_ms: i64,
    reason: Option<String>,
    answer: Option<String>,
    pause: Option<serde_json::Value>,
    created_at_ms: i64,
    updated_at_ms: i64,
    fork: Option<serde_json::Value>,
    trace_parent: Option<String>,
    tenant: Option<String>,
}

impl RunParams {
    /// `record`'s columns, refusing numbers a `bigint` cannot hold.
    pub(super) fn new(record: &RunRecord) -> Result<Self, StoreError> {
        let what = |field: &str| format!("the {field} of run `{}`", record.run_id);
        Ok(Self {
            run_id: record.run_id.clone(),
            flow: to_json(&record.flow, &what("flow"))?,
            status: status_name(record.status)?,
            owner_id: record.owner_id.clone(),
            fence: to_i64(record.fence, &what("fence"))?,
            lease_expires_at_ms: to_i64(record.lease_expires_at_ms, &what("lease expiry"))?,
            reason: record.reason.clone(),
            answer: record.answer.clone(),
            pause: record
                .pause
                .as_ref()
                .map(|pause| to_json(pause, &what("pause")))
                .transpose()?,
            created_at_ms: to_i64(record.created_at_ms, &what("creation time"))?,
            updated_at_ms: to_i64(record.updated_at_ms, &what("update time"))?,
            fork: record
                .fork
                .as_ref()
                .map(|fork| to_json(fork, &what("lineage")))
                .transpose()?,
            trace_parent: record.trace_parent.as_ref().map(|parent| parent.header()),
            tenant: record.tenant.clone(),
        })
    }

    /// The values, in the order of [`RUN_COLUMNS`] (`$1` … `$14`).
    pub(super) fn values(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 14] {
        [
            &self.run_id,
            &self.flow,
            &self.status,
            &self.owner_id,
            &self.fence,
            &self.lease_expires_at_ms,
            &self.reason,
            &self.answer,
            &self.pause,
            &self.created_at_ms,
            &self.updated_at_ms,
            &self.fork,
            &self.trace_parent,
            &self.tenant,
        ]
    }
}

pub(super) fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    index: usize,
) -> Result<T, StoreError> {
    row.try_get(index).map_err(|e| {
        StoreError::corrupt(format!(
            "column {index} of a row of the PostgreSQL store cannot be read: {e}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_past_bigint_are_refused_not_wrapped() {
        assert_eq!(to_i64(7, &"a fence").unwrap(), 7);
        let err = to_i64(u64::MAX, &"a fence").unwrap_err();
        assert!(err.message().contains("a fence"), "{err}");
        assert!(to_u64(-1, &"a fence").is_err());
    }

    #[test]
    fn statuses_are_named_as_the_api_names_them() {
        assert_eq!(
            status_name(RunStatus::WaitingHuman).unwrap(),
            "waiting_human"
        );
    }
}
