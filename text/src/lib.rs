//! Where a text is cut for speech, in one place for the engine and its text front ends:
//! [`sentences`] cuts a request into the pieces a synthesizer speaks (and a server
//! streams) one after another; [`split_to_limit`] cuts a piece that is still longer than
//! a model's context (in characters or phoneme symbols) at the best place it can.
//!
//! Both work on any script: sentence ends include the CJK marks, and nothing here knows
//! a model, a voice or a language's words beyond the abbreviations that do not end a
//! sentence.

/// Characters that end a sentence (when a boundary follows, see [`sentences`]).
fn is_terminator(c: char) -> bool {
    matches!(c, '.' | '!' | '?' | '…' | '。' | '！' | '？')
}

/// CJK sentence marks: they end a sentence with no space after them.
fn is_cjk_terminator(c: char) -> bool {
    matches!(c, '。' | '！' | '？')
}

/// Closing quotes and brackets, which stay with the sentence they close.
fn is_closer(c: char) -> bool {
    matches!(
        c,
        '"' | '\'' | '”' | '’' | ')' | ']' | '»' | '」' | '』' | '）'
    )
}

/// Clause marks: where a long piece is cut when no sentence end is near.
fn is_clause_mark(c: char) -> bool {
    matches!(c, ',' | ';' | ':' | '—' | '…' | '，' | '、' | '；' | '：')
}

/// Words whose period never ends a sentence (titles, Latin abbreviations), compared
/// without the period and case-insensitively.
const TITLES: &[&str] = &[
    "mr", "mrs", "ms", "mx", "dr", "prof", "st", "mt", "ft", "jr", "sr", "capt", "col", "gen",
    "lt", "sgt", "gov", "sen", "rep", "rev", "hon", "pres", "e.g", "i.e", "vs", "cf", "approx",
    "etc",
];

/// Words whose period ends no sentence when a number follows (`No. 5`, `Fig. 3`).
const BEFORE_NUMBER: &[&str] = &["no", "nos", "fig", "figs", "vol", "pp", "ch", "sec"];

/// Months and weekdays, abbreviations only when written with a capital (`Jan. 5`, not
/// `the sun.`).
const CALENDAR: &[&str] = &[
    "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "mon",
    "tue", "tues", "wed", "thu", "thur", "thurs", "fri", "sat", "sun",
];

/// Splits text (or phonemes) into the pieces that are spoken one after another.
///
/// A piece ends after a run of `.`, `!`, `?`, `…` (or their CJK forms) and any closing
/// quotes or brackets, when white space or the end of the text follows (a CJK mark
/// needs no space), and at a blank line. A lone period after an abbreviation or a
/// single letter (`Dr.`, `J.`, `e.g.`; `No.` before a number; `Jan.` with its capital;
/// a dotted one such as `p.m.` before a lowercase word) ends none. A piece without a letter or digit joins its neighbour. Pieces are trimmed
/// and keep their inner white space; text with no letter or digit at all is one piece,
/// and blank text none.
pub fn sentences(text: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut pieces = Pieces::default();
    let mut start = 0;
    let mut i = 0;
    while i < chars.len() {
        let (at, c) = chars[i];
        if is_terminator(c) {
            let mut j = i + 1;
            while j < chars.len() && is_terminator(chars[j].1) {
                j += 1;
            }
            while j < chars.len() && is_closer(chars[j].1) {
                j += 1;
            }
            let end = chars.get(j).map_or(text.len(), |(b, _)| *b);
            let boundary = j == chars.len() || chars[j].1.is_whitespace() || is_cjk_terminator(c);
            let abbreviation =
                c == '.' && j == i + 1 && abbreviation_before(&text[start..at], &text[end..]);
            if boundary && !abbreviation {
                pieces.push(text, start, end);
                start = end;
            }
            i = j;
        } else {
            let blank_line = c == '\n'
                && text[at + 1..]
                    .trim_start_matches(|c: char| c.is_whitespace() && c != '\n')
                    .starts_with('\n');
            if blank_line {
                pieces.push(text, start, at);
                start = at;
            }
            i += 1;
        }
    }
    pieces.push(text, start, text.len());
    if pieces.ranges.is_empty() {
        let t = text.trim();
        return if t.is_empty() { Vec::new() } else { vec![t] };
    }
    pieces.ranges.iter().map(|&(a, b)| &text[a..b]).collect()
}

/// The byte ranges [`sentences`] has found so far, and where a piece without a letter
/// or digit that came before any other starts (it joins the next one).
#[derive(Default)]
struct Pieces {
    ranges: Vec<(usize, usize)>,
    lead: Option<usize>,
}

impl Pieces {
    /// Adds `text[start..end]`, trimmed: a piece of its own when it holds a letter or a
    /// digit, else joined to the piece before (or the next, when there is none before).
    fn push(&mut self, text: &str, start: usize, end: usize) {
        let piece = &text[start..end];
        let trimmed = piece.trim_start();
        let a = start + (piece.len() - trimmed.len());
        let b = a + trimmed.trim_end().len();
        if a == b {
            return;
        }
        if text[a..b].chars().any(char::is_alphanumeric) {
            self.ranges.push((self.lead.take().unwrap_or(a), b));
        } else if let Some(last) = self.ranges.last_mut() {
            last.1 = b;
        } else {
            self.lead.get_or_insert(a);
        }
    }
}

/// True when the period after `before` (the text up to it) belongs to an abbreviation
/// or an initial, given `after` (the text after it).
fn abbreviation_before(before: &str, after: &str) -> bool {
    let word = before
        .rsplit(|c: char| c.is_whitespace() || matches!(c, '(' | '"' | '“'))
        .next()
        .unwrap_or("");
    if word.chars().count() == 1 && word.chars().all(char::is_alphabetic) {
        return true;
    }
    let lower = word.to_lowercase();
    let next_is_digit = after.trim_start().starts_with(|c: char| c.is_ascii_digit());
    let capitalised = word.starts_with(|c: char| c.is_uppercase());
    // A dotted abbreviation (`p.m.`, `U.S.`) ends a sentence only before a capital.
    let dotted = word.trim_start_matches('.').contains('.');
    let next_is_lowercase = after.trim_start().starts_with(char::is_lowercase);
    TITLES.contains(&lower.as_str())
        || (dotted && next_is_lowercase)
        || (next_is_digit && BEFORE_NUMBER.contains(&lower.as_str()))
        || (capitalised && CALENDAR.contains(&lower.as_str()))
}

/// Cuts `text` into trimmed, non-empty pieces of at most `max` characters (at least 1):
/// after the last sentence end that fits, else after the last clause mark, else at the
/// last space, else after `max` characters. Text that fits is one piece.
pub fn split_to_limit(text: &str, max: usize) -> Vec<String> {
    let max = max.max(1);
    let mut pieces = Vec::new();
    let mut rest: Vec<char> = text.trim().chars().collect();
    while rest.len() > max {
        // The window may end one past `max`: a space there makes the first `max` whole.
        let window = &rest[..=max];
        let cut_after = |is: &dyn Fn(char) -> bool| {
            window[..max]
                .iter()
                .rposition(|&c| is(c))
                .filter(|&i| i > 0)
                .map(|i| i + 1)
        };
        let cut = cut_after(&|c| is_terminator(c) && c != '…')
            .or_else(|| cut_after(&is_clause_mark))
            .or_else(|| {
                window
                    .iter()
                    .rposition(|c| c.is_whitespace())
                    .filter(|&i| i > 0)
            })
            .unwrap_or(max);
        push_trimmed(&mut pieces, &rest[..cut]);
        rest.drain(..cut);
    }
    push_trimmed(&mut pieces, &rest);
    pieces
}

/// Adds `chars` to `pieces`, trimmed, unless nothing is left.
fn push_trimmed(pieces: &mut Vec<String>, chars: &[char]) {
    let piece: String = chars.iter().collect();
    let piece = piece.trim();
    if !piece.is_empty() {
        pieces.push(piece.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_splits_at_sentence_ends_only() {
        assert_eq!(
            sentences("Hello there. How are you? Fine!  "),
            ["Hello there.", "How are you?", "Fine!"]
        );
        assert_eq!(
            sentences("Dr. Smith met J. R. Jones at 3.5 km. \"Really?\" she asked."),
            [
                "Dr. Smith met J. R. Jones at 3.5 km.",
                "\"Really?\"",
                "she asked."
            ]
        );
        assert_eq!(
            sentences("Wait... what?! No (really.) Yes"),
            ["Wait...", "what?!", "No (really.)", "Yes"]
        );
        assert_eq!(
            sentences("First paragraph\n\nSecond one\nstill second"),
            ["First paragraph", "Second one\nstill second"]
        );
        assert_eq!(sentences("一つ。二つ！"), ["一つ。", "二つ！"]);
        assert_eq!(sentences("həlˈoʊ. wˈɜɹld!"), ["həlˈoʊ.", "wˈɜɹld!"]);
        assert_eq!(
            sentences("It costs $3. Buy it."),
            ["It costs $3.", "Buy it."]
        );
    }

    #[test]
    fn abbreviations_keep_their_sentence_together() {
        assert_eq!(
            sentences("Dr. Smith met J. R. R. Tolkien at 3.5 p.m. on St. Mark's Day, e.g. Monday."),
            ["Dr. Smith met J. R. R. Tolkien at 3.5 p.m. on St. Mark's Day, e.g. Monday."]
        );
        assert_eq!(
            sentences("See No. 5 and Fig. 2 on Jan. 3."),
            ["See No. 5 and Fig. 2 on Jan. 3."]
        );
        assert_eq!(
            sentences("I said no. Then I left."),
            ["I said no.", "Then I left."]
        );
        assert_eq!(
            sentences("We saw the sun. It was hot."),
            ["We saw the sun.", "It was hot."]
        );
    }

    #[test]
    fn punctuation_never_stands_alone() {
        assert_eq!(sentences("Hi. ... ! Bye."), ["Hi. ... !", "Bye."]);
        assert_eq!(sentences("... Hi."), ["... Hi."]);
        assert_eq!(sentences(" ?! "), ["?!"]);
        assert!(sentences("  \n ").is_empty());
    }

    #[test]
    fn long_pieces_are_cut_at_sentences_then_clauses_then_spaces() {
        let s = "ab cd. ef gh! ij";
        assert_eq!(split_to_limit(s, 100), ["ab cd. ef gh! ij"]);
        assert_eq!(split_to_limit(s, 8), ["ab cd.", "ef gh!", "ij"]);
        assert_eq!(split_to_limit("ab cd, ef gh ij", 9), ["ab cd,", "ef gh ij"]);
        assert_eq!(split_to_limit("abcdefgh ij", 5), ["abcde", "fgh", "ij"]);
        assert_eq!(split_to_limit("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        assert!(split_to_limit("   ", 5).is_empty());
        for piece in split_to_limit(&"wˈʌn, ".repeat(300), 510) {
            assert!(piece.chars().count() <= 510);
        }
    }

    #[test]
    fn every_piece_fits_and_nothing_is_lost() {
        let text =
            "Ein Satz, der lang ist; noch einer… und 一二三四五六七八九十。 plus 🎉🎉🎉 words";
        for max in 1..40 {
            let pieces = split_to_limit(text, max);
            for p in &pieces {
                assert!(p.chars().count() <= max, "{max}: {p:?}");
            }
            let joined: String = pieces.concat().split_whitespace().collect();
            let want: String = text.split_whitespace().collect();
            assert_eq!(joined, want, "{max}");
        }
    }
}
