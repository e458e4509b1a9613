//! A file's tables of named entries (`[keyed_limits.NAME]`,
//! `[webhooks.receivers.NAME]`): each entry read field by field, every
//! error naming where (`keyed_limits."provider".live`) and what was wrong.

/// An error of the file: where, and what was wrong.
pub(crate) type Wrong = (String, String);

/// A table of named entries: where it is in the file and what it holds,
/// for its errors.
pub(crate) struct NamedTables {
    /// Its path in the file: `keyed_limits`.
    pub at: &'static str,
    /// One entry, then many: `limit`, `limits`.
    pub noun: (&'static str, &'static str),
    /// What an entry holds: "`url` and `secret`".
    pub holds: &'static str,
    /// The most entries it may have.
    pub max: usize,
}

impl NamedTables {
    /// Reads each entry of `value` with `read`, which takes the entry's
    /// name and its fields; refuses what is not a table of tables, more
    /// than [`max`](Self::max) entries, and a blank name.
    pub(crate) fn read<T>(
        &self,
        value: toml::Value,
        mut read: impl FnMut(String, &mut Entry) -> Result<T, Wrong>,
    ) -> Result<Vec<T>, Wrong> {
        let (one, many) = self.noun;
        let toml::Value::Table(entries) = value else {
            return Err((
                self.at.to_owned(),
                format!(
                    "expected a table of {many} (`[{}.NAME]` with {})",
                    self.at, self.holds
                ),
            ));
        };
        if entries.len() > self.max {
            return Err((
                self.at.to_owned(),
                format!("{} {many}; at most {}", entries.len(), self.max),
            ));
        }
        entries
            .into_iter()
            .map(|(name, value)| {
                let at = format!("{}.{}", self.at, toml::Value::String(name.clone()));
                let mut entry = Entry {
                    at,
                    one,
                    fields: toml::Table::new(),
                };
                if name.trim().is_empty() {
                    return Err(entry.wrong("", format!("a {one}'s name may not be blank")));
                }
                let toml::Value::Table(fields) = value else {
                    return Err(entry.wrong("", format!("expected a table with {}", self.holds)));
                };
                entry.fields = fields;
                read(name, &mut entry)
            })
            .collect()
    }
}

/// One named entry's fields, taken one by one.
pub(crate) struct Entry {
    at: String,
    one: &'static str,
    fields: toml::Table,
}

impl Entry {
    /// An error at the entry (`field` empty) or at one of its fields.
    pub(crate) fn wrong(&self, field: &str, message: String) -> Wrong {
        let at = if field.is_empty() {
            self.at.clone()
        } else {
            format!("{}.{field}", self.at)
        };
        (at, message)
    }

    /// Takes `field`'s value, if given.
    pub(crate) fn take(&mut self, field: &str) -> Option<toml::Value> {
        self.fields.remove(field)
    }

    /// Takes `field` as text, if given.
    pub(crate) fn text(&mut self, field: &str) -> Result<Option<String>, Wrong> {
        match self.take(field) {
            None => Ok(None),
            Some(toml::Value::String(text)) => Ok(Some(text)),
            Some(other) => {
                Err(self.wrong(field, format!("expected text, found {}", other.type_str())))
            }
        }
    }

    /// Refuses a field left untaken, naming it and the fields an entry
    /// has (`has`).
    pub(crate) fn done(&self, has: &str) -> Result<(), Wrong> {
        match self.fields.keys().next() {
            Some(unknown) => {
                Err(self.wrong(unknown, format!("unknown field: a {} has {has}", self.one)))
            }
            None => Ok(()),
        }
    }
}
