//! Columns of text for the terminal (`leasehold config`, the experiment's
//! table), laid out without `format!` widths.
//!
//! A width given to `format!` at run time (`{:<w$}`) panics above
//! `u16::MAX`, so a 70 000-character value would stop the command; and one
//! long value would pad every other line to its length. Here a column is
//! as wide as its widest cell up to [`MAX_COLUMN`] characters: a longer
//! cell is printed whole and overflows its column on its own line only.
//! Padding is pushed as spaces, whatever the width; a control character
//! in a cell is shown escaped ([`printable`]), so that a name cannot move
//! the cursor or forge a row.

/// The widest a column gets, in characters: a longer cell overflows it.
pub const MAX_COLUMN: usize = 48;

/// Which side of its column a cell keeps to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// Text: padded on the right.
    Left,
    /// Numbers: padded on the left.
    Right,
}

/// The width of a column holding `cells`: its widest cell as printed, in
/// characters, at most [`MAX_COLUMN`].
pub fn width<'a>(cells: impl IntoIterator<Item = &'a str>) -> usize {
    cells
        .into_iter()
        .map(|cell| printable(cell).chars().count())
        .max()
        .unwrap_or(0)
        .min(MAX_COLUMN)
}

/// The widths of the columns of a table: each as wide as its heading and
/// its cells ([`width`]).
pub fn widths<const N: usize>(header: &[&str; N], rows: &[[String; N]]) -> [usize; N] {
    std::array::from_fn(|i| {
        width(std::iter::once(header[i]).chain(rows.iter().map(|row| row[i].as_str())))
    })
}

/// Appends `cell` to `out`, [`printable`], padded with spaces to `width`
/// characters on the side `align` says; a cell as wide or wider is appended
/// as it is.
pub fn push_padded(out: &mut String, cell: &str, width: usize, align: Align) {
    let cell = printable(cell);
    let padding = width.saturating_sub(cell.chars().count());
    if align == Align::Right {
        out.extend(std::iter::repeat_n(' ', padding));
    }
    out.push_str(&cell);
    if align == Align::Left {
        out.extend(std::iter::repeat_n(' ', padding));
    }
}

use super::printable;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_is_padded_to_its_column_and_a_longer_one_overflows_it() {
        let mut out = String::new();
        push_padded(&mut out, "ab", 4, Align::Left);
        out.push('|');
        push_padded(&mut out, "ab", 4, Align::Right);
        out.push('|');
        push_padded(&mut out, "abcdef", 4, Align::Right);
        out.push('|');
        push_padded(&mut out, "a\n", 4, Align::Left);
        assert_eq!(out, "ab  |  ab|abcdef|a\\n ");
    }

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(printable("plain é"), "plain é");
        assert_eq!(printable("a\nb\u{1b}[2J"), "a\\nb\\u{1b}[2J");
    }

    #[test]
    fn a_column_is_at_most_max_column_wide_whatever_its_cells() {
        let long = "é".repeat(70_000);
        assert_eq!(width(["ab", long.as_str()]), MAX_COLUMN);
        assert_eq!(width(["ab", "abc"]), 3);
        assert_eq!(width([]), 0);
        let mut out = String::new();
        push_padded(&mut out, &long, 100_000, Align::Left);
        assert_eq!(out.chars().count(), 100_000);
    }
}
