//! How a run's snapshot history is stored: each entry keeps only the
//! messages its loop's transcript gained since the entry it continues, so
//! a loop of N steps stores what its N steps said, not N copies of a
//! transcript that grows with them.
//!
//! A [`Snapshot`] handed to [`SnapshotStore::save_snapshot`](super::SnapshotStore::save_snapshot) is always
//! whole. When it carries a [`SnapshotBase`] — "my transcript's first
//! `kept` messages are those of the snapshot of my loop at place `seq` of
//! run `run_id`" — the store keeps it in its stored form ([`stored`]):
//! the transcript's messages after the first `kept`, and the base. A
//! snapshot without a base, a snapshot whose state has no transcript, and
//! every snapshot written before bases existed are kept whole and read as
//! they are.
//!
//! Who writes says what the base is, and only what is true of what landed:
//! a loop names the last of its snapshots the store accepted and that it
//! restored from, and only when its transcript still begins with what that
//! snapshot held (a transcript cut back — a restart, a shortened request —
//! is saved whole); a fork's first snapshots name its parent's snapshots at
//! the fork point, so that a fork shares its parent's history instead of
//! copying it. A refused write lands nothing, so it is nobody's base.
//!
//! Reading gives whole states again: [`Lineage`] holds the stored entries
//! of a run and of the runs its bases reach (a fork's parent, its parent's
//! parent), and rebuilds a transcript by following bases back to a whole
//! entry. A base that names nothing stored, or keeps more messages than
//! its base holds, is an error that says which snapshot names what.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::{Snapshot, StoreError, StoreFuture};

/// The key of a loop's transcript in [`Snapshot::state`].
pub const TRANSCRIPT: &str = "transcript";

/// Where a snapshot's transcript continues from: the snapshot of the same
/// loop at place `seq` of run `run_id`, whose first `kept` messages begin
/// this one's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SnapshotBase {
    /// The run whose history holds the base: this run, or a fork's parent.
    pub run_id: String,
    /// The base's place in that run's history ([`Snapshot::seq`]).
    pub seq: u64,
    /// How many of the base's transcript messages this transcript begins
    /// with.
    pub kept: usize,
}

/// Which of a run's snapshots, as stored
/// ([`SnapshotStore::load_stored_snapshots`](super::SnapshotStore::load_stored_snapshots)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SnapshotTable {
    /// The latest of each loop, in path order.
    Latest,
    /// Every one saved, in the order of their places, then of their paths.
    History,
}

/// `snapshot` as a store keeps it: with a base, only the transcript's
/// messages after the base's `kept`. A snapshot whose state has no
/// transcript is kept whole, without its base. Refused, naming the
/// snapshot, when the base keeps more messages than the transcript has.
pub fn stored(mut snapshot: Snapshot) -> Result<Snapshot, StoreError> {
    let Some(base) = &snapshot.base else {
        return Ok(snapshot);
    };
    let kept = base.kept;
    let Some(transcript) = snapshot
        .state
        .get_mut(TRANSCRIPT)
        .and_then(serde_json::Value::as_array_mut)
    else {
        snapshot.base = None;
        return Ok(snapshot);
    };
    if kept > transcript.len() {
        return Err(StoreError::invalid(format!(
            "the snapshot of `{}` at place {} in run `{}` says it keeps {kept} messages of \
             its base, but its transcript has {}",
            snapshot.path,
            snapshot.seq,
            snapshot.run_id,
            transcript.len()
        )));
    }
    transcript.drain(..kept);
    Ok(snapshot)
}

/// The stored entries of a run and of every run its entries' bases reach,
/// from which whole states are rebuilt.
#[derive(Debug, Default)]
pub struct Lineage {
    /// Each run's stored history, sorted by place then path.
    runs: HashMap<String, Vec<Snapshot>>,
}

impl Lineage {
    /// A lineage of the runs whose stored histories are given.
    pub fn of(runs: impl IntoIterator<Item = (String, Vec<Snapshot>)>) -> Self {
        let mut lineage = Self::default();
        for (run_id, entries) in runs {
            lineage.add(run_id, entries);
        }
        lineage
    }

    /// Adds the stored history of `run_id`.
    pub fn add(&mut self, run_id: String, mut entries: Vec<Snapshot>) {
        entries.sort_by(|a, b| (a.seq, &a.path).cmp(&(b.seq, &b.path)));
        self.runs.insert(run_id, entries);
    }

    /// The runs that entries' bases name and whose histories are not held
    /// yet: what to load and [`add`](Self::add) before rebuilding.
    pub fn missing(&self) -> BTreeSet<String> {
        self.runs
            .values()
            .flatten()
            .filter_map(|entry| entry.base.as_ref())
            .filter(|base| !self.runs.contains_key(&base.run_id))
            .map(|base| base.run_id.clone())
            .collect()
    }

    /// Loads, with `load` (a store's stored history of a run), the history
    /// of `run_id` and of every run its bases reach.
    pub async fn load(
        run_id: &str,
        load: impl Fn(&str) -> StoreFuture<Vec<Snapshot>> + Send + Sync,
    ) -> Result<Self, StoreError> {
        let mut lineage = Self::default();
        lineage.add(run_id.to_owned(), load(run_id).await?);
        lineage.complete(load).await?;
        Ok(lineage)
    }

    /// Loads, with `load`, every run the held entries' bases reach.
    pub async fn complete(
        &mut self,
        load: impl Fn(&str) -> StoreFuture<Vec<Snapshot>> + Send + Sync,
    ) -> Result<(), StoreError> {
        loop {
            let missing = self.missing();
            if missing.is_empty() {
                return Ok(());
            }
            for run_id in missing {
                let entries = load(&run_id).await?;
                self.add(run_id, entries);
            }
        }
    }

    /// The stored entry of the loop at `path` at place `seq` of `run_id`.
    fn entry(&self, run_id: &str, seq: u64, path: &str) -> Option<&Snapshot> {
        let entries = self.runs.get(run_id)?;
        entries
            .binary_search_by(|e| (e.seq, e.path.as_str()).cmp(&(seq, path)))
            .ok()
            .and_then(|at| entries.get(at))
    }

    /// The whole transcript of the loop at `path` at place `seq` of
    /// `run_id`, following bases back to a whole entry.
    pub fn transcript_at(
        &self,
        run_id: &str,
        seq: u64,
        path: &str,
    ) -> Result<Vec<serde_json::Value>, StoreError> {
        let messages = self.messages_at(run_id, seq, path)?;
        Ok(messages.into_iter().cloned().collect())
    }

    /// [`transcript_at`](Self::transcript_at), as references to the
    /// stored messages: nothing is copied.
    fn messages_at(
        &self,
        run_id: &str,
        seq: u64,
        path: &str,
    ) -> Result<Vec<&serde_json::Value>, StoreError> {
        let hops = self.runs.values().map(Vec::len).sum::<usize>();
        let mut pieces: Vec<(usize, &[serde_json::Value])> = Vec::new();
        let (mut run, mut at) = (run_id, seq);
        let mut transcript = loop {
            let entry = self.entry(run, at, path).ok_or_else(|| {
                StoreError::corrupt(format!(
                    "the snapshot history of run `{run_id}` names the snapshot of `{path}` at \
                     place {at} of run `{run}` as where a transcript continues from, and it is \
                     not stored"
                ))
            })?;
            let own = transcript_of(entry)?;
            match &entry.base {
                None => break own.iter().collect::<Vec<_>>(),
                Some(base) => {
                    if pieces.len() > hops {
                        return Err(StoreError::corrupt(format!(
                            "the snapshot history of run `{run_id}`: the transcript of `{path}` \
                             at place {seq} continues from itself"
                        )));
                    }
                    pieces.push((base.kept, own));
                    run = &base.run_id;
                    at = base.seq;
                }
            }
        };
        for (kept, own) in pieces.into_iter().rev() {
            if kept > transcript.len() {
                return Err(StoreError::corrupt(format!(
                    "the snapshot history of run `{run_id}`: a snapshot of `{path}` keeps {kept} \
                     messages of a transcript of {}",
                    transcript.len()
                )));
            }
            transcript.truncate(kept);
            transcript.extend(own);
        }
        Ok(transcript)
    }

    /// `entry` (stored) whole.
    pub fn whole(&self, mut entry: Snapshot) -> Result<Snapshot, StoreError> {
        let Some(base) = entry.base.take() else {
            return Ok(entry);
        };
        let mut transcript = self.transcript_at(&base.run_id, base.seq, &entry.path)?;
        if base.kept > transcript.len() {
            return Err(StoreError::corrupt(format!(
                "the snapshot of `{}` at place {} in run `{}` keeps {} messages of a transcript \
                 of {}",
                entry.path,
                entry.seq,
                entry.run_id,
                base.kept,
                transcript.len()
            )));
        }
        transcript.truncate(base.kept);
        transcript.extend(transcript_of(&entry)?.iter().cloned());
        set_transcript(&mut entry, transcript)?;
        Ok(entry)
    }

    /// Walks the stored history of `run_id` in order, giving `visit` each
    /// entry as stored and its whole transcript, as references to the
    /// stored messages. Nothing is copied and one transcript per loop is
    /// held at a time, so walking a history takes memory in proportion to
    /// its loops' messages now, not to the sum of every state it went
    /// through.
    pub fn walk(
        &self,
        run_id: &str,
        mut visit: impl FnMut(&Snapshot, &[&serde_json::Value]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let Some(entries) = self.runs.get(run_id) else {
            return Ok(());
        };
        // The loop's transcript as of its last entry walked, and where.
        let mut current: HashMap<&str, (u64, Vec<&serde_json::Value>)> = HashMap::new();
        for entry in entries {
            let own = transcript_of(entry)?;
            let mut transcript = match (&entry.base, current.remove(entry.path.as_str())) {
                (None, _) => Vec::new(),
                (Some(base), Some((seq, transcript)))
                    if base.run_id == run_id
                        && base.seq == seq
                        && base.kept <= transcript.len() =>
                {
                    transcript
                }
                (Some(base), _) => self.messages_at(&base.run_id, base.seq, &entry.path)?,
            };
            let kept = entry.base.as_ref().map_or(0, |base| base.kept);
            if kept > transcript.len() {
                return Err(StoreError::corrupt(format!(
                    "the snapshot of `{}` at place {} in run `{run_id}` keeps {kept} messages \
                     of a transcript of {}",
                    entry.path,
                    entry.seq,
                    transcript.len()
                )));
            }
            transcript.truncate(kept);
            transcript.extend(own);
            visit(entry, &transcript)?;
            current.insert(entry.path.as_str(), (entry.seq, transcript));
        }
        Ok(())
    }

    /// Every entry of `run_id`'s history, whole, in order.
    pub fn history(&self, run_id: &str) -> Result<Vec<Snapshot>, StoreError> {
        let mut whole = Vec::new();
        self.walk(run_id, |entry, transcript| {
            whole.push(with_transcript(entry, transcript)?);
            Ok(())
        })?;
        Ok(whole)
    }
}

/// `entry` (stored) with `transcript` as its whole transcript, and no base.
pub fn with_transcript(
    entry: &Snapshot,
    transcript: &[&serde_json::Value],
) -> Result<Snapshot, StoreError> {
    let mut whole = entry.clone();
    if whole.base.take().is_some() {
        set_transcript(&mut whole, transcript.iter().copied().cloned().collect())?;
    }
    Ok(whole)
}

/// The transcript `entry` stores: its messages after its base's, or all of
/// them; none when its state has no transcript.
fn transcript_of(entry: &Snapshot) -> Result<&[serde_json::Value], StoreError> {
    match entry.state.get(TRANSCRIPT) {
        None if entry.base.is_none() => Ok(&[]),
        Some(serde_json::Value::Array(messages)) => Ok(messages),
        _ => Err(StoreError::corrupt(format!(
            "the snapshot of `{}` at place {} in run `{}` continues a transcript but holds no \
             list of messages under `{TRANSCRIPT}`",
            entry.path, entry.seq, entry.run_id
        ))),
    }
}

fn set_transcript(
    entry: &mut Snapshot,
    transcript: Vec<serde_json::Value>,
) -> Result<(), StoreError> {
    let Some(state) = entry.state.as_object_mut() else {
        return Err(StoreError::corrupt(format!(
            "the snapshot of `{}` at place {} in run `{}` continues a transcript but its state \
             is not an object",
            entry.path, entry.seq, entry.run_id
        )));
    };
    state.insert(TRANSCRIPT.to_owned(), serde_json::Value::Array(transcript));
    Ok(())
}

/// A store's whole snapshots of `run_id` from its stored ones: `load`
/// reads a run's stored entries of a table. The history is rebuilt from
/// the run's stored history and its lineage's; the latest of each loop
/// likewise, read only when one of them has a base.
pub fn load_whole(
    run_id: &str,
    table: SnapshotTable,
    load: impl Fn(&str, SnapshotTable) -> StoreFuture<Vec<Snapshot>> + Send + Sync + 'static,
) -> StoreFuture<Vec<Snapshot>> {
    let run_id = run_id.to_owned();
    Box::pin(async move {
        let history = |run: &str| load(run, SnapshotTable::History);
        match table {
            SnapshotTable::History => Lineage::load(&run_id, history).await?.history(&run_id),
            SnapshotTable::Latest => {
                let latest = load(&run_id, SnapshotTable::Latest).await?;
                if latest.iter().all(|s| s.base.is_none()) {
                    return Ok(latest);
                }
                let lineage = Lineage::load(&run_id, history).await?;
                latest.into_iter().map(|s| lineage.whole(s)).collect()
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::RunStatus;
    use serde_json::json;

    fn entry(
        run: &str,
        seq: u64,
        transcript: &[&str],
        base: Option<(&str, u64, usize)>,
    ) -> Snapshot {
        Snapshot {
            run_id: run.to_owned(),
            path: "run".to_owned(),
            step: u32::try_from(seq).unwrap(),
            status: RunStatus::Running,
            state: json!({"steps": seq, TRANSCRIPT: transcript}),
            seq,
            base: base.map(|(run_id, seq, kept)| SnapshotBase {
                run_id: run_id.to_owned(),
                seq,
                kept,
            }),
        }
    }

    fn stored_all(entries: Vec<Snapshot>) -> Vec<Snapshot> {
        entries.into_iter().map(|e| stored(e).unwrap()).collect()
    }

    #[test]
    fn a_history_of_appends_is_stored_as_its_new_messages_and_rebuilt_whole() {
        let whole = vec![
            entry("r", 1, &["a"], None),
            entry("r", 2, &["a", "b"], Some(("r", 1, 1))),
            entry("r", 3, &["a", "b", "c"], Some(("r", 2, 2))),
        ];
        let kept = stored_all(whole.clone());
        assert_eq!(kept[2].state[TRANSCRIPT], json!(["c"]), "only what is new");
        let lineage = Lineage::of([("r".to_owned(), kept)]);
        let rebuilt = lineage.history("r").unwrap();
        let expected: Vec<Snapshot> = whole
            .into_iter()
            .map(|mut s| {
                s.base = None;
                s
            })
            .collect();
        assert_eq!(rebuilt, expected);
    }

    #[test]
    fn a_transcript_cut_back_and_a_whole_entry_after_it_are_rebuilt_right() {
        // A restart cut the transcript back to one message: saved with a
        // base that keeps one; then saved whole; then appended to.
        let whole = vec![
            entry("r", 1, &["a", "b"], None),
            entry("r", 2, &["a", "x"], Some(("r", 1, 1))),
            entry("r", 3, &["y"], None),
            entry("r", 4, &["y", "z"], Some(("r", 3, 1))),
        ];
        let lineage = Lineage::of([("r".to_owned(), stored_all(whole.clone()))]);
        let transcripts: Vec<serde_json::Value> = lineage
            .history("r")
            .unwrap()
            .into_iter()
            .map(|s| s.state[TRANSCRIPT].clone())
            .collect();
        assert_eq!(
            transcripts,
            [
                json!(["a", "b"]),
                json!(["a", "x"]),
                json!(["y"]),
                json!(["y", "z"])
            ]
        );
    }

    #[test]
    fn a_fork_continues_its_parents_entries_and_old_whole_entries_read_as_they_are() {
        // The parent's entries as written before bases existed: no `base`.
        let old: Snapshot = serde_json::from_value(json!({
            "run_id": "p", "path": "run", "step": 1, "status": "running",
            "state": {"steps": 1, TRANSCRIPT: ["a", "b"]}, "seq": 1
        }))
        .unwrap();
        let parent = vec![
            old.clone(),
            entry("p", 2, &["a", "b", "c"], Some(("p", 1, 2))),
        ];
        let fork = vec![
            entry("f", 2, &["a", "b", "c"], Some(("p", 2, 3))),
            entry("f", 3, &["a", "b", "c", "d"], Some(("f", 2, 3))),
        ];
        let mut lineage = Lineage::of([("f".to_owned(), stored_all(fork))]);
        assert_eq!(lineage.missing(), BTreeSet::from(["p".to_owned()]));
        lineage.add("p".to_owned(), stored_all(parent));
        let history = lineage.history("f").unwrap();
        assert_eq!(history[0].state[TRANSCRIPT], json!(["a", "b", "c"]));
        assert_eq!(history[1].state[TRANSCRIPT], json!(["a", "b", "c", "d"]));
        assert_eq!(lineage.history("p").unwrap()[0], old);
    }

    #[test]
    fn a_base_that_is_not_stored_or_keeps_too_much_is_an_error_naming_it() {
        let lineage = Lineage::of([(
            "f".to_owned(),
            stored_all(vec![entry("f", 2, &["a"], Some(("gone", 1, 0)))]),
        )]);
        let error = lineage.history("f").unwrap_err().to_string();
        assert!(
            error.contains("place 1 of run `gone`") && error.contains("not stored"),
            "{error}"
        );
        let too_much = stored(entry("r", 2, &["a"], Some(("r", 1, 2)))).unwrap_err();
        assert!(
            too_much.to_string().contains("keeps 2 messages"),
            "{too_much}"
        );
        let lineage = Lineage::of([(
            "r".to_owned(),
            stored_all(vec![
                entry("r", 1, &["a"], None),
                entry("r", 2, &["a", "b", "c"], Some(("r", 1, 1))),
            ]),
        )]);
        let mut broken = lineage.runs["r"].clone();
        broken[1].base.as_mut().unwrap().kept = 5;
        let lineage = Lineage::of([("r".to_owned(), broken)]);
        let error = lineage.history("r").unwrap_err().to_string();
        assert!(
            error.contains("keeps 5 messages of a transcript of 1"),
            "{error}"
        );
    }
}
