//! The durable stores: `SledStore` (the `store` feature), the
//! [`Store`](leasehold_actors::Store) port on an embedded sled
//! database, and `PostgresStore` (the `postgres` feature), the same port on
//! a PostgreSQL database that many executors share.
//!
//! It keeps runs, the latest snapshot of each loop, tool-call records and
//! the event log, and applies exactly the ownership rules of
//! [`fencing`](leasehold_actors::fencing): every write that changes a
//! run carries the writer's fence and lands, atomically with the fence
//! check, only if that fence is the run's current one. It behaves like
//! [`MemoryStore`](leasehold_actors::MemoryStore), outcome for
//! outcome, and adds durability:
//!
//! - [`Durability`] says when a write counts as done (`sync`, `async`,
//!   `exit`);
//! - one group-commit task makes writes durable, one sled `flush()` for
//!   every write queued so far;
//! - values carry a format version, and the database records its store
//!   format, so a later format can migrate instead of misreading;
//! - finished runs are deleted once their retention has passed
//!   ([`Retention::purge_finished`](leasehold_actors::Retention::purge_finished)),
//!   and sled's page cache is bounded ([`SledConfig::cache_capacity`]).
//!
//! `docs/durability.md` states what survives a process crash and a power
//! cut in each mode.
//!
//! ```no_run
//! use leasehold::RunStore;
//! use leasehold::store::{Durability, SledConfig, SledStore};
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = SledStore::open(SledConfig::new("/var/lib/leasehold/runs").with_durability(Durability::Sync))?;
//! for run in store.list_runs().await? {
//!     println!("{} {:?}", run.run_id, run.status);
//! }
//! # Ok(()) }
//! ```

mod durability;

// The sled store itself, each part of the port in a file of its own
// under `sled/`, as the PostgreSQL store's are under `postgres/`.
// `Durability` stays in every build: configuration reads and prints the
// `durability` key whichever features are on.
#[cfg(feature = "store")]
mod sled;
// The PostgreSQL store, shared by many executors.
#[cfg(feature = "postgres")]
mod postgres;

pub use durability::{Durability, ParseDurabilityError};

/// The default bound of the sled store's page cache
/// (`sled.cache_capacity`): 64 MiB, room for the records of an executor's
/// live runs and the recent events its streams read, not its whole
/// history (sled's own default, 1 GiB, is what a busy executor's cache
/// grows into).
pub const DEFAULT_CACHE_CAPACITY: u64 = 64 << 20;

/// Whether `url` names a PostgreSQL database (`postgres://…` or
/// `postgresql://…`): what the `store` key accepts.
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

#[cfg(feature = "store")]
pub use self::sled::{SledConfig, SledStore};
/// `url` with its credentials hidden: what configuration listings, errors
/// and logs show (see [`crate::secret`]).
pub use crate::secret::redact_url;
#[cfg(feature = "postgres")]
pub use postgres::{PostgresConfig, PostgresStore};
