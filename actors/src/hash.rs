//! The hash maps of the hot paths, keyed by run ids, paths and lease ids.
//!
//! std's SipHash costs more per key than these maps can afford at tens of
//! thousands of live runs; foldhash is fast and still seeded per process,
//! so a client choosing run ids cannot pick colliding keys ahead of time.

/// A hash map with foldhash's per-process seeded hasher.
pub(crate) type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A hash set with foldhash's per-process seeded hasher.
pub(crate) type Set<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;
