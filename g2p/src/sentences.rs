//! Sentence splitting, so a long text is synthesized (and streamed) a sentence at a time and
//! no piece outgrows Kokoro's context.
//!
//! A sentence ends at `.`, `!`, `?` or `…` (closing quotes and brackets stay with it) that is
//! followed by white space and then something that can start a sentence; a period after a
//! title (`Dr.`, `Mr.`), a single-letter initial (`J. R. R.`) or a mid-sentence abbreviation
//! (`e.g.`, `vs.`) does not end one. A blank line always ends a paragraph and its sentence.

/// Abbreviations that are followed by more of the same sentence (titles before a name,
/// Latin abbreviations), compared without their final period and case-insensitively.
const NON_FINAL: &[&str] = &[
    "mr", "mrs", "ms", "mx", "dr", "prof", "st", "mt", "ft", "capt", "col", "gen", "lt", "sgt",
    "gov", "sen", "rep", "rev", "hon", "pres", "e.g", "i.e", "vs", "cf", "approx", "no", "nos",
    "fig", "figs", "vol", "pp", "ch", "sec", "jan", "feb", "mar", "apr", "jun", "jul", "aug",
    "sep", "sept", "oct", "nov", "dec", "mon", "tue", "tues", "wed", "thu", "thur", "thurs", "fri",
    "sat", "sun",
];

/// The sentences of `text`, trimmed, in order; empty ones left out.
pub fn split(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for paragraph in paragraphs(text) {
        split_paragraph(&paragraph, &mut out);
    }
    out
}

/// Paragraphs (split at blank lines) with their inner white space collapsed to one space.
fn paragraphs(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            if !current.is_empty() {
                out.push(current.join(" "));
                current.clear();
            }
        } else {
            current.push(line);
        }
    }
    if !current.is_empty() {
        out.push(current.join(" "));
    }
    out.into_iter()
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| !p.is_empty())
        .collect()
}

fn split_paragraph(paragraph: &str, out: &mut Vec<String>) {
    let chars: Vec<char> = paragraph.chars().collect();
    let mut start = 0;
    let mut i = 0;
    while i < chars.len() {
        if !is_terminator(chars[i]) {
            i += 1;
            continue;
        }
        let mut end = i + 1;
        while end < chars.len() && (is_terminator(chars[end]) || is_closer(chars[end])) {
            end += 1;
        }
        let at_space = end < chars.len() && chars[end] == ' ';
        let next = chars.get(end + 1).copied();
        let starts_sentence =
            next.is_some_and(|c| c.is_uppercase() || c.is_ascii_digit() || "\"“‘'([¿¡".contains(c));
        if at_space && starts_sentence && !(chars[i] == '.' && abbreviation_before(&chars, i)) {
            push(&chars[start..end], out);
            start = end + 1;
        }
        i = end;
    }
    push(&chars[start..], out);
}

fn push(chars: &[char], out: &mut Vec<String>) {
    let sentence: String = chars.iter().collect();
    let sentence = sentence.trim();
    if !sentence.is_empty() {
        out.push(sentence.to_string());
    }
}

fn is_terminator(c: char) -> bool {
    matches!(c, '.' | '!' | '?' | '…')
}

fn is_closer(c: char) -> bool {
    matches!(c, '"' | '”' | '’' | '\'' | ')' | ']')
}

/// Whether the word ending at the period `chars[dot]` is an abbreviation that continues
/// the sentence, or a single-letter initial.
fn abbreviation_before(chars: &[char], dot: usize) -> bool {
    let word_start = chars[..dot]
        .iter()
        .rposition(|c| c.is_whitespace() || "(\"“".contains(*c))
        .map_or(0, |p| p + 1);
    let word: String = chars[word_start..dot].iter().collect();
    if word.chars().count() == 1 && word.chars().all(|c| c.is_alphabetic()) {
        return true;
    }
    let lower = word.to_lowercase();
    NON_FINAL.contains(&lower.as_str())
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn splits_at_sentence_ends() {
        assert_eq!(
            split("Hello there. How are you? Fine!  \"Yes.\" (Sure.) 3 cats."),
            vec![
                "Hello there.",
                "How are you?",
                "Fine!",
                "\"Yes.\"",
                "(Sure.)",
                "3 cats."
            ]
        );
    }

    #[test]
    fn keeps_abbreviations_initials_and_decimals() {
        assert_eq!(
            split("Dr. Smith met J. R. R. Tolkien at 3.5 p.m. on St. Mark's Day, e.g. Monday."),
            vec!["Dr. Smith met J. R. R. Tolkien at 3.5 p.m. on St. Mark's Day, e.g. Monday."]
        );
        assert_eq!(
            split("It costs $3. Buy it."),
            vec!["It costs $3.", "Buy it."]
        );
        assert_eq!(split("wait... what"), vec!["wait... what"]);
    }

    #[test]
    fn blank_lines_end_paragraphs_and_lines_join() {
        assert_eq!(
            split("A title\n\nFirst line\nsecond line.\r\n\r\nLast"),
            vec!["A title", "First line second line.", "Last"]
        );
        assert!(split(" \n\t ").is_empty());
    }
}
