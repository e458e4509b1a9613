//! The readable log's columns: a line's time, the event's path, its kind
//! and what happened, in columns that stay where they are whatever the
//! path (`leasehold run`, `runs events`, `runs trace`, the demo).

use leasehold::printable::printable;

/// The width of the path column, in characters.
pub(crate) const PATH_WIDTH: usize = 36;

/// The width of the kind column: the longest kind's name,
/// `reconciliation_required`.
pub(crate) const KIND_WIDTH: usize = 23;

/// `path`, printable, in a column of [`PATH_WIDTH`] characters: padded when
/// shorter; when longer, its end kept (the operation, and the loops just
/// above it), from a `/` where one is near enough, after an ellipsis, so
/// that the columns after it stay where they are.
pub(crate) fn path_column(path: &str) -> String {
    let path = printable(path);
    let chars: Vec<char> = path.chars().collect();
    if chars.len() <= PATH_WIDTH {
        return format!("{path:<PATH_WIDTH$}");
    }
    // The ellipsis takes one character of the column.
    let tail = &chars[chars.len() - (PATH_WIDTH - 1)..];
    let from = tail
        .iter()
        .position(|c| *c == '/')
        .filter(|at| tail.len() - at >= PATH_WIDTH / 2)
        .unwrap_or(0);
    let kept: String = tail[from..].iter().collect();
    format!("…{kept:<width$}", width = PATH_WIDTH - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_path_is_padded_to_the_column() {
        assert_eq!(path_column("run"), format!("{:<PATH_WIDTH$}", "run"));
    }

    #[test]
    fn a_long_path_keeps_its_end_from_a_slash() {
        let column = path_column("run/worker:research:1/worker:deep:2/tool_call:3.0");
        assert_eq!(column.chars().count(), PATH_WIDTH, "{column}");
        assert_eq!(column.trim_end(), "…/worker:deep:2/tool_call:3.0");
    }

    #[test]
    fn a_long_path_with_no_slash_near_its_end_is_cut_at_the_column() {
        let column = path_column(&format!("run/{}", "x".repeat(60)));
        assert_eq!(column, format!("…{}", "x".repeat(PATH_WIDTH - 1)));
    }

    #[test]
    fn a_path_is_measured_as_it_is_printed() {
        // Control characters are printed escaped: the column holds the
        // escaped text.
        let column = path_column(&format!("run/worker:{}", "\u{7}".repeat(40)));
        assert_eq!(column.chars().count(), PATH_WIDTH, "{column}");
    }
}
