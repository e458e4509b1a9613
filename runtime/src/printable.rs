//! Text from outside is printed as text.
//!
//! A flow's name posted over HTTP, a tool's name, a model's answer, a
//! peer's error message: none of it may steer the operator's terminal. Every
//! readable line the command line prints passes what it did not write
//! itself through [`printable`], which escapes each character that a
//! terminal acts on instead of showing: the C0 controls (ESC, BEL, CR, LF,
//! TAB, …), DEL, the C1 controls, and the bidirectional overrides and
//! isolates (U+202A–U+202E, U+2066–U+2069) with the other invisible
//! direction marks (U+061C, U+200E, U+200F) and the line and paragraph
//! separators (U+2028, U+2029). An escaped character is written the way
//! Rust writes it: `\n`, `\r`, `\t`, `\u{1b}`.
//!
//! [`printable_block`] is the same for text shown as a block of its own (a
//! run's answer after `answer:`): its line feeds and tabs stay, so the text
//! keeps its lines, but a line feed is followed by an indent, so no line of
//! it can pass for one the command printed.
//!
//! ```
//! use leasehold::printable::printable;
//!
//! let name = "report\u{1b}]0;pwned\u{7}\u{1b}[2J\nforged row";
//! assert_eq!(printable(name), r"report\u{1b}]0;pwned\u{7}\u{1b}[2J\nforged row");
//! assert!(matches!(printable("plain"), std::borrow::Cow::Borrowed(_)));
//! ```
//!
//! JSON output is escaped by [`printable_json`]: serde_json escapes the C0
//! controls (as `\u001b`, `\n`) but writes DEL, the C1 controls and the
//! direction marks as they are; it writes them as JSON escapes
//! (`\u009b`, `\u202e`), which read back as the same text.

pub mod columns;

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether a terminal acts on `c` instead of showing it, or it changes how
/// the rest of the line reads.
pub fn is_unprintable(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}'
                | '\u{200E}'
                | '\u{200F}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with every [unprintable](is_unprintable) character escaped; the
/// text itself when it has none.
pub fn printable(text: &str) -> Cow<'_, str> {
    escaped(text, |_| false)
}

/// Like [`printable`], but line feeds and tabs stay, each line feed
/// followed by two spaces: for a block of text printed on lines of its own.
pub fn printable_block(text: &str) -> Cow<'_, str> {
    let kept = escaped(text, |c| c == '\n' || c == '\t');
    if !kept.contains('\n') {
        return kept;
    }
    Cow::Owned(kept.replace('\n', "\n  "))
}

/// JSON text (one value, compact or pretty) with every
/// [unprintable](is_unprintable) character but a line feed written as a
/// `\uXXXX` escape: the same JSON value, safe on a terminal. Outside its
/// strings JSON holds no such character but the line feeds and spaces of
/// pretty printing, so each one escaped was inside a string.
pub fn printable_json(json: &str) -> Cow<'_, str> {
    if !json.chars().any(|c| c != '\n' && is_unprintable(c)) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if c != '\n' && is_unprintable(c) {
            // Every such character is in the Basic Multilingual Plane.
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn escaped(text: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(|c| is_unprintable(c) && !keep(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_unprintable(c) && !keep(c) {
            match c {
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                _ => {
                    let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
                }
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn nothing_unprintable_is_left(text in any::<String>()) {
            let shown = printable(&text);
            prop_assert!(!shown.chars().any(is_unprintable), "{shown:?}");
            let block = printable_block(&text);
            prop_assert!(
                !block.chars().any(|c| is_unprintable(c) && c != '\n' && c != '\t'),
                "{block:?}"
            );
            // Every line of a block after the first is indented.
            prop_assert!(block.split('\n').skip(1).all(|line| line.starts_with("  ")));
        }

        #[test]
        fn printable_text_is_left_alone(text in "[^\\p{Cc}\\u{61c}\\u{200e}\\u{200f}\\u{2028}-\\u{202e}\\u{2066}-\\u{2069}]*") {
            prop_assert_eq!(printable(&text), Cow::Borrowed(text.as_str()));
        }
    }

    proptest! {
        #[test]
        fn printable_json_is_the_same_value(text in any::<String>()) {
            let json = serde_json::json!({"text": text}).to_string();
            let shown = printable_json(&json);
            prop_assert!(!shown.chars().any(is_unprintable), "{shown:?}");
            let back: serde_json::Value = serde_json::from_str(&shown).expect("still JSON");
            prop_assert_eq!(back["text"].as_str(), Some(text.as_str()));
        }
    }

    #[test]
    fn each_kind_is_escaped() {
        assert_eq!(printable("a\r\nb\tc\u{7f}"), r"a\r\nb\tc\u{7f}");
        assert_eq!(printable("\u{9b}31m"), r"\u{9b}31m");
        assert_eq!(
            printable("abc\u{202e}cba\u{2066}"),
            r"abc\u{202e}cba\u{2066}"
        );
        assert_eq!(printable("é ✓ 日本"), "é ✓ 日本");
        assert_eq!(printable_block("one\n\u{1b}[2Jtwo"), "one\n  \\u{1b}[2Jtwo");
    }
}
