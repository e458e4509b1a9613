//! `leasehold paces`: what the store learned of each endpoint's pace — a
//! model at its URL, a tool, a kind of worker — and resetting a key.

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::Args;
use leasehold::{Pace, Spread};

use super::{CliError, GlobalArgs, runs::existing_store, write_stdout};

/// `leasehold paces`.
#[derive(Debug, Args)]
pub(super) struct PacesArgs {
    /// The paces as one JSON object, key to pace, instead of the table.
    #[arg(long)]
    json: bool,
    /// Forget what was learned of this pace key (repeatable); the next
    /// call of that endpoint starts cold and learns it again.
    #[arg(long, value_name = "KEY")]
    reset: Vec<String>,
}

/// Prints the learned paces, after resetting the keys asked for.
pub(super) async fn run(global: &GlobalArgs, args: PacesArgs) -> Result<ExitCode, CliError> {
    let config = global.load(&[])?;
    let store = existing_store(&config)?;
    if !args.reset.is_empty() {
        let known = store.load_paces().await?;
        if let Some(unknown) = args
            .reset
            .iter()
            .find(|key| !known.iter().any(|(known, _)| known == *key))
        {
            return Err(CliError::other(format!(
                "no pace was learned for `{unknown}`: `leasehold paces` lists the keys"
            )));
        }
        let resets = args.reset.iter().map(|key| (key.clone(), None)).collect();
        store.save_paces(resets).await?;
        store.flush().await?;
    }
    let paces = store.load_paces().await?;
    let text = if args.json {
        let object: serde_json::Map<String, serde_json::Value> = paces
            .iter()
            .map(|(key, pace)| (key.clone(), serde_json::to_value(pace).unwrap_or_default()))
            .collect();
        format!("{}\n", serde_json::Value::Object(object))
    } else {
        table(&paces)
    };
    write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// One line per key: how many calls taught it, the usual time to a first
/// item and between items (mean ± deviation).
fn table(paces: &[(String, Pace)]) -> String {
    use leasehold::printable::columns::{self, Align};
    if paces.is_empty() {
        return "no pace learned yet: each endpoint's is learned from its calls that end by \
                themselves\n"
            .to_owned();
    }
    let spread = |spread: Option<Spread>| {
        spread.map_or_else(
            || "-".to_owned(),
            |s| format!("{:.0} ms ± {:.0}", s.mean_ms, s.std_ms),
        )
    };
    let rows: Vec<[String; 4]> = paces
        .iter()
        .map(|(key, pace)| {
            [
                leasehold::printable::printable(key).into_owned(),
                format!(
                    "{}{}",
                    pace.calls,
                    if pace.pinned { " (pinned)" } else { "" }
                ),
                spread(pace.first_item),
                spread(pace.interval),
            ]
        })
        .collect();
    let header = ["pace key", "calls", "first item", "between items"];
    let widths = columns::widths(&header, &rows);
    let mut out = String::new();
    for row in std::iter::once(header.map(str::to_owned)).chain(rows) {
        for (i, cell) in row.iter().enumerate() {
            let align = if i == 0 { Align::Left } else { Align::Right };
            columns::push_padded(&mut out, cell, widths[i], align);
            out.push_str(if i == 3 { "" } else { "  " });
        }
        let _ = writeln!(out);
    }
    out
}
