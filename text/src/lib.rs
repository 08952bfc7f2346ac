//! Where a text is cut for speech, in one place for the engine and its text front ends:
//! [`speakable`] takes out what is markup, not words (SSML or HTML tags, terminal escape
//! sequences, control characters); [`scripts`] names the writing systems a text's
//! letters are in (so a front end that reads one can say what it was given); [`sentences`] cuts a request into the pieces a
//! synthesizer speaks (and a server streams) one after another; [`split_to_limit`] cuts
//! a piece that is still longer than a model's context (in characters or phoneme
//! symbols) at the best place it can.
//!
//! Both work on any script: sentence ends include the CJK marks, and nothing here knows
//! a model, a voice or a language's words beyond the abbreviations that do not end a
//! sentence.

/// The text a request speaks, with what is not meant to be read aloud taken out:
///
/// - SSML (and HTML) tags: `<speak>`, `<break time="1s"/>`, `<emphasis level="x">`,
///   `</p>`, comments `<!-- -->`, `<?xml ...?>` and `<!DOCTYPE ...>`. No family reads
///   SSML's instructions, and OpenAI's speech endpoint takes plain text, so the words
///   inside the tags are spoken and the tags are removed (not refused: clients wrap text
///   in `<speak>` by habit, and refusing would fail a request that has words to say). A
///   paragraph, sentence or break tag leaves a blank line, which ends a piece
///   ([`sentences`]); other tags leave nothing. Only tag-shaped text counts: a name
///   starting with a letter and `name="value"` attributes, so `a < b`, `x<3` or `<b and
///   c>` stay as written. When a tag was removed, the five XML entities (`&amp;` `&lt;`
///   `&gt;` `&quot;` `&apos;`) are read as their characters.
/// - Terminal escape sequences (ANSI colours and cursor moves, `ESC [ ... m`, OSC titles
///   `ESC ] ... BEL`, 8-bit CSI) and every other control character but tab, line feed
///   and carriage return.
pub fn speakable(text: &str) -> String {
    let no_escapes = strip_escapes(text);
    strip_tags(&no_escapes)
}

/// Tag names whose removal leaves a blank line (a piece boundary).
const BLOCK_TAGS: &[&str] = &["p", "s", "break", "paragraph", "sentence", "br"];

/// [`speakable`]'s first step: terminal escape sequences and control characters out.
fn strip_escapes(text: &str) -> String {
    const ESC: char = '\u{1b}';
    const CSI8: char = '\u{9b}';
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    // The end (exclusive) of a CSI sequence whose parameters start at `j`: parameter
    // bytes 0x30-0x3F, intermediates 0x20-0x2F, one final byte 0x40-0x7E.
    let csi_end = |mut j: usize| {
        while j < chars.len() && ('\u{30}'..='\u{3f}').contains(&chars[j]) {
            j += 1;
        }
        while j < chars.len() && ('\u{20}'..='\u{2f}').contains(&chars[j]) {
            j += 1;
        }
        if j < chars.len() && ('\u{40}'..='\u{7e}').contains(&chars[j]) {
            j + 1
        } else {
            j
        }
    };
    while i < chars.len() {
        let c = chars[i];
        if c == ESC {
            i = match chars.get(i + 1) {
                Some('[') => csi_end(i + 2),
                // OSC, DCS, SOS, PM, APC: up to BEL or ESC \ (string terminator).
                Some(']' | 'P' | 'X' | '^' | '_') => {
                    let mut j = i + 2;
                    loop {
                        match chars.get(j) {
                            None => break j,
                            Some('\u{7}') => break j + 1,
                            Some(&ESC) if chars.get(j + 1) == Some(&'\\') => break j + 2,
                            Some(_) => j += 1,
                        }
                    }
                }
                // A two-character escape (ESC 7, ESC c, ESC ( B...).
                Some(&n) if ('\u{20}'..='\u{7e}').contains(&n) => {
                    let mut j = i + 1;
                    while j < chars.len() && ('\u{20}'..='\u{2f}').contains(&chars[j]) {
                        j += 1;
                    }
                    (j + 1).min(chars.len())
                }
                _ => i + 1,
            };
            continue;
        }
        if c == CSI8 {
            i = csi_end(i + 1);
            continue;
        }
        if !c.is_control() || matches!(c, '\t' | '\n' | '\r') {
            out.push(c);
        }
        i += 1;
    }
    out
}

/// [`speakable`]'s second step: tag-shaped markup out, entities in when there was any.
fn strip_tags(text: &str) -> String {
    if !text.contains('<') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut removed = false;
    while let Some(at) = rest.find('<') {
        out.push_str(&rest[..at]);
        match markup_len(&rest[at..]) {
            Some((len, block)) => {
                if block {
                    out.push_str("\n\n");
                }
                removed = true;
                rest = &rest[at + len..];
            }
            None => {
                out.push('<');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    if removed {
        out = out
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&");
    }
    out
}

/// The length in bytes of the markup `s` starts with (`s` starts with `<`), and whether
/// it is a block tag ([`BLOCK_TAGS`]); `None` when `s` does not start with markup.
fn markup_len(s: &str) -> Option<(usize, bool)> {
    for (open, close) in [("<!--", "-->"), ("<?", "?>")] {
        if let Some(body) = s.strip_prefix(open) {
            return body
                .find(close)
                .map(|end| (open.len() + end + close.len(), false));
        }
    }
    if let Some(decl) = s.strip_prefix("<!") {
        if decl.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return decl.find('>').map(|end| (2 + end + 1, false));
        }
        return None;
    }
    let bytes = s.as_bytes();
    let mut i = 1;
    if bytes.get(i) == Some(&b'/') {
        i += 1;
    }
    let name_start = i;
    if !bytes.get(i).is_some_and(u8::is_ascii_alphabetic) {
        return None;
    }
    let is_name = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b':' | b'.');
    while bytes.get(i).copied().is_some_and(is_name) {
        i += 1;
    }
    let name = s[name_start..i].to_ascii_lowercase();
    let name = name.rsplit(':').next().unwrap_or_default();
    // Attributes: white space, a name, `=`, a quoted value.
    loop {
        let spaced = bytes.get(i).is_some_and(|b| b.is_ascii_whitespace());
        while bytes.get(i).is_some_and(|b| b.is_ascii_whitespace()) {
            i += 1;
        }
        match bytes.get(i) {
            Some(b'>') => return Some((i + 1, BLOCK_TAGS.contains(&name))),
            Some(b'/') if bytes.get(i + 1) == Some(&b'>') => {
                return Some((i + 2, BLOCK_TAGS.contains(&name)))
            }
            Some(b) if spaced && b.is_ascii_alphabetic() => {
                while bytes.get(i).copied().is_some_and(is_name) {
                    i += 1;
                }
                while bytes.get(i).is_some_and(|b| b.is_ascii_whitespace()) {
                    i += 1;
                }
                if bytes.get(i) != Some(&b'=') {
                    return None;
                }
                i += 1;
                while bytes.get(i).is_some_and(|b| b.is_ascii_whitespace()) {
                    i += 1;
                }
                let quote = *bytes.get(i).filter(|q| matches!(q, b'"' | b'\''))?;
                let end = s[i + 1..].find(quote as char)?;
                i += 1 + end + 1;
            }
            _ => return None,
        }
    }
}

/// The writing system of a letter, by Unicode block: `Latin` (ASCII and the Latin
/// supplements and extensions), `Greek`, `Cyrillic`, `Armenian`, `Hebrew`, `Arabic`,
/// `Devanagari`, `Bengali`, `Tamil`, `Thai`, `Georgian`, `Hangul`, `Hiragana`,
/// `Katakana`, `Han` (Chinese characters, also in Japanese), `Ethiopic`; `other` for a
/// letter of any other block. `None` for what is not a letter (digits, punctuation,
/// symbols, emoji).
pub fn script(c: char) -> Option<&'static str> {
    if !c.is_alphabetic() {
        return None;
    }
    Some(match c as u32 {
        0x0041..=0x024F | 0x1E00..=0x1EFF | 0x2C60..=0x2C7F | 0xA720..=0xA7FF | 0xFF21..=0xFF5A => {
            "Latin"
        }
        0x0370..=0x03FF | 0x1F00..=0x1FFF => "Greek",
        0x0400..=0x052F | 0x1C80..=0x1C8F | 0x2DE0..=0x2DFF | 0xA640..=0xA69F => "Cyrillic",
        0x0530..=0x058F => "Armenian",
        0x0590..=0x05FF | 0xFB1D..=0xFB4F => "Hebrew",
        0x0600..=0x06FF | 0x0750..=0x077F | 0x08A0..=0x08FF | 0xFB50..=0xFDFF | 0xFE70..=0xFEFF => {
            "Arabic"
        }
        0x0900..=0x097F => "Devanagari",
        0x0980..=0x09FF => "Bengali",
        0x0B80..=0x0BFF => "Tamil",
        0x0E00..=0x0E7F => "Thai",
        0x10A0..=0x10FF => "Georgian",
        0x1100..=0x11FF | 0x3130..=0x318F | 0xAC00..=0xD7AF => "Hangul",
        0x3040..=0x309F => "Hiragana",
        0x30A0..=0x30FF | 0x31F0..=0x31FF | 0xFF66..=0xFF9F => "Katakana",
        0x2E80..=0x2FDF
        | 0x3005..=0x3007
        | 0x3400..=0x4DBF
        | 0x4E00..=0x9FFF
        | 0xF900..=0xFAFF
        | 0x20000..=0x3FFFF => "Han",
        0x1200..=0x139F => "Ethiopic",
        _ => "other",
    })
}

/// The writing systems of `text`'s letters ([`script`]), each once, in the order they
/// first appear; empty for a text without letters.
pub fn scripts(text: &str) -> Vec<&'static str> {
    let mut found = Vec::new();
    for s in text.chars().filter_map(script) {
        if !found.contains(&s) {
            found.push(s);
        }
    }
    found
}

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
    fn ssml_tags_are_removed_and_their_words_kept() {
        assert_eq!(
            speakable(
                r#"<?xml version="1.0"?><speak version="1.1">Hello <emphasis level="strong">world</emphasis>.<break time="500ms"/>Bye &amp; thanks.</speak>"#
            ),
            "Hello world.\n\nBye & thanks."
        );
        assert_eq!(
            sentences(&speakable("<speak><p>One</p><p>Two</p></speak>")),
            ["One", "Two"]
        );
        assert_eq!(
            speakable("<!-- note -->Say <say-as interpret-as='characters'>abc</say-as>"),
            "Say abc"
        );
        // Not markup: left as written, entities too.
        for plain in [
            "if a < b and c > d",
            "x<3 and 5>2",
            "a <b and c> d",
            "Tom &amp; Jerry",
            "<3",
            "a < b/>",
        ] {
            assert_eq!(speakable(plain), plain);
        }
        assert_eq!(speakable("<speak></speak>").trim(), "");
    }

    #[test]
    fn terminal_escapes_and_control_characters_are_removed() {
        assert_eq!(
            speakable("\u{1b}[1;31mError:\u{1b}[0m disk \u{1b}[2Kfull\u{7}"),
            "Error: disk full"
        );
        assert_eq!(
            speakable("\u{1b}]0;title\u{7}Hi\u{1b}]8;;http://x\u{1b}\\link\u{1b}]8;;\u{1b}\\"),
            "Hilink"
        );
        assert_eq!(speakable("a\u{9b}31mb\u{1b}(Bc\u{0}d"), "abcd");
        assert_eq!(speakable("tab\tand\r\nlines"), "tab\tand\r\nlines");
        // A lone escape at the end, an unfinished sequence.
        assert_eq!(speakable("end\u{1b}"), "end");
        assert_eq!(speakable("x\u{1b}[12"), "x");
    }

    #[test]
    fn letters_are_told_apart_by_script() {
        assert_eq!(scripts("Hello, naïve café"), ["Latin"]);
        assert_eq!(scripts("Привет, мир"), ["Cyrillic"]);
        assert_eq!(scripts("مرحبا"), ["Arabic"]);
        assert_eq!(
            scripts("こんにちは世界、カタカナ"),
            ["Hiragana", "Han", "Katakana"]
        );
        assert_eq!(scripts("안녕하세요"), ["Hangul"]);
        assert_eq!(scripts("Hi Ωμέγα"), ["Latin", "Greek"]);
        assert!(scripts("🎉 123 !? ✓").is_empty());
        assert_eq!(script('7'), None);
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
