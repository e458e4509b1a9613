//! The repetition signal: how much of a stream's recent text repeats itself.
//!
//! A model stuck in a loop keeps producing evidence — every chunk is a sign
//! of life — while going nowhere. The measure here is the share of repeated
//! **word 3-grams** in the bounded tail of the text: `1 − distinct / total`
//! over the sequences of three consecutive words. A sentence of `k` words
//! said `m` times scores about `1 − 1/m`; ordinary prose, where a phrase of
//! three words rarely comes back within two kilobytes, scores a few
//! hundredths.
//!
//! Why words and not characters: words are found by splitting on white
//! space, so the measure does not depend on where the chunks were cut, and a
//! triple of words is specific enough that the function words of ordinary
//! prose ("of the", "in a") do not count as repetition, where character
//! 8-grams repeat in any long English text. Text without spaces between words
//! (Chinese, Japanese) yields few 3-grams, and therefore no signal rather than
//! a false one.
//!
//! The measure is computed only at a lease's expiry, on at most
//! [`TAIL_BYTES`](super::TAIL_BYTES) of text: a few hundred words, a few
//! microseconds.

use std::collections::HashSet;

/// Fewer 3-grams than this are too little text to judge: no signal.
pub const MIN_TRIGRAMS: usize = 16;

/// The share of repeated word 3-grams in `text`, from 0 (none repeats) to
/// almost 1 (one phrase over and over); `None` when `text` has fewer than
/// [`MIN_TRIGRAMS`] 3-grams.
pub fn repetition(text: &str) -> Option<f64> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let total = words.len().checked_sub(2)?;
    if total < MIN_TRIGRAMS {
        return None;
    }
    let distinct: HashSet<&[&str]> = words.windows(3).collect();
    let repeated = total - distinct.len();
    Some(ratio(repeated, total))
}

fn ratio(part: usize, whole: usize) -> f64 {
    // Both are bounded by the tail's few hundred words: exact in a u32.
    let as_f64 = |n: usize| f64::from(u32::try_from(n).unwrap_or(u32::MAX));
    as_f64(part) / as_f64(whole)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROSE: &str = "\
        A deadline does two jobs at once: it detects failure and it allocates \
        resources. The two jobs pull the same number in opposite directions, \
        and when the one number fires it cancels, so a slow tool and a dead \
        tool leave the same trace. In the incident behind the essay a \
        five-minute server write timeout cancelled a healthy run, its model \
        call, its wrap-up and its state persistence: five minutes of work, \
        zero delivered, state lost. Raising the timeout only moves the point \
        of destruction. Detection is a lease, a timer beside the work, never \
        around it; when it expires nothing is cancelled and a watchdog is \
        asked what to do. Allocation is a policy decision with graded \
        answers, made with evidence and recorded.";

    #[test]
    fn a_looping_text_scores_high() {
        let looping = "Let me check the file again. ".repeat(40);
        let score = repetition(&looping).expect("enough text");
        assert!(score > 0.9, "looping text scored {score}");
        // Three times over is already more repeated than not.
        let thrice = "I will now read the configuration file to find the key. ".repeat(3);
        let score = repetition(&thrice).expect("enough text");
        assert!(score > 0.6, "a sentence said thrice scored {score}");
    }

    #[test]
    fn ordinary_prose_scores_low() {
        let score = repetition(PROSE).expect("enough text");
        assert!(score < 0.05, "prose scored {score}");
    }

    #[test]
    fn prose_with_one_repeated_phrase_stays_low() {
        let text = format!("{PROSE} Raising the timeout only moves the point of destruction.");
        let score = repetition(&text).expect("enough text");
        assert!(score < 0.15, "prose with one echo scored {score}");
    }

    #[test]
    fn too_little_text_gives_no_signal() {
        assert_eq!(repetition(""), None);
        assert_eq!(repetition("ok ok ok ok ok"), None);
        assert_eq!(repetition(&"重复".repeat(500)), None);
    }
}
