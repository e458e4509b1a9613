//! The words every part of the runtime speaks, defined once below all of
//! them: leases (their ids, kinds, terms and meta), verdicts and who
//! decided them, evidence summarised, budget and spending figures, token
//! costs and a transcript's messages, and the events that carry them. It
//! names nothing of the supervision core, the ports or the run, so each of
//! those can stand on it without standing on one another.

pub(crate) mod budget;
pub(crate) mod event;
pub(crate) mod evidence;
pub(crate) mod expiry;
pub(crate) mod lease;
pub(crate) mod limits;
pub(crate) mod records;
pub(crate) mod sink;
pub(crate) mod text;
pub(crate) mod verdict;
