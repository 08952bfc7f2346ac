//! Word-level timestamps from Whisper's cross-attention, the way OpenAI's
//! `whisper/timing.py` and faster-whisper (through CTranslate2's `align`) compute them:
//! the decoder reads a window's text once more after `<|notimestamps|>`; the
//! cross-attention of the model's alignment heads (a few (layer, head) pairs whose
//! attention follows the audio) is turned into a token-by-frame cost (softmax over the
//! window's frames, standardised over the tokens, median-filtered along time, averaged
//! over the heads); dynamic time warping finds the monotonic path through it, and each
//! word starts where the path first reaches its first token. faster-whisper's clean-up
//! follows: punctuation merged into its word, over-long words at sentence and segment
//! boundaries trimmed, segment bounds moved to their words.
//!
//! Upstream: `openai/whisper@v20250625` whisper/timing.py (`median_filter`, `dtw_cpu`,
//! `backtrace`, `find_alignment`, `merge_punctuations`, `add_word_timestamps`),
//! whisper/tokenizer.py (`split_tokens_on_unicode`, `split_tokens_on_spaces`), and
//! `faster-whisper==1.2.1` faster_whisper/transcribe.py (`add_word_timestamps`,
//! `find_alignment`), whose results the tests compare with.

use super::tokenizer::Tokenizer;

/// Median filter width along time (OpenAI's and faster-whisper's default).
pub const MEDIAN_FILTER_WIDTH: usize = 7;

/// Punctuation merged into the following word (OpenAI's default).
pub const PREPEND_PUNCTUATIONS: &str = "\"'“¿([{-";

/// Punctuation merged into the preceding word (OpenAI's default).
pub const APPEND_PUNCTUATIONS: &str = "\"'.。,，!！?？:：”)]}、";

/// Python's `string.punctuation`.
const ASCII_PUNCTUATION: &str = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

/// One word of a window's alignment, times in seconds from the window's start.
#[derive(Debug, Clone, PartialEq)]
pub struct WordTiming {
    /// The word's text (with its leading space).
    pub word: String,
    /// Its tokens.
    pub tokens: Vec<u32>,
    /// Start in seconds.
    pub start: f64,
    /// End in seconds.
    pub end: f64,
    /// Mean probability of its tokens.
    pub probability: f64,
}

/// The median of each `width`-wide stretch of `row` (odd `width`), mirrored at the
/// ends without repeating the edge value (PyTorch's `reflect` padding); a row not
/// longer than half the width is returned as it is.
pub fn median_filter(row: &[f32], width: usize) -> Vec<f32> {
    let n = row.len();
    let half = width / 2;
    if n <= half {
        return row.to_vec();
    }
    let reflect = |i: isize| -> usize {
        let n = n as isize;
        let r = i.abs();
        (if r >= n { 2 * (n - 1) - r } else { r }) as usize
    };
    let mut window = vec![0f32; width];
    (0..n)
        .map(|j| {
            for (k, w) in window.iter_mut().enumerate() {
                *w = row[reflect(j as isize + k as isize - half as isize)];
            }
            window.sort_by(f32::total_cmp);
            window[half]
        })
        .collect()
}

/// The cost matrix of the alignment: `scores` holds, for each alignment head, its
/// scaled attention scores as [tokens][total_frames]; the first `frames` of each row are
/// softmaxed, each (head, frame) column standardised over the tokens (population
/// standard deviation), each row median-filtered along time, and the heads averaged.
/// Returns [tokens][frames].
pub fn attention_matrix(
    scores: &[Vec<f32>],
    tokens: usize,
    total_frames: usize,
    frames: usize,
) -> Vec<f32> {
    let frames = frames.min(total_frames);
    let mut sum = vec![0f32; tokens * frames];
    for head in scores {
        let mut w = vec![0f32; tokens * frames];
        for t in 0..tokens {
            let row = &head[t * total_frames..t * total_frames + frames];
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let exp: Vec<f64> = row.iter().map(|&v| f64::from(v - max).exp()).collect();
            let total: f64 = exp.iter().sum();
            for (f, e) in exp.iter().enumerate() {
                w[t * frames + f] = (e / total) as f32;
            }
        }
        for f in 0..frames {
            let col = (0..tokens).map(|t| f64::from(w[t * frames + f]));
            let mean = col.clone().sum::<f64>() / tokens as f64;
            let var = col.map(|v| (v - mean) * (v - mean)).sum::<f64>() / tokens as f64;
            let std = var.sqrt();
            for t in 0..tokens {
                let v = f64::from(w[t * frames + f]);
                w[t * frames + f] = ((v - mean) / std) as f32;
            }
        }
        for t in 0..tokens {
            let filtered = median_filter(&w[t * frames..(t + 1) * frames], MEDIAN_FILTER_WIDTH);
            for (s, v) in sum[t * frames..(t + 1) * frames].iter_mut().zip(filtered) {
                *s += v;
            }
        }
    }
    let heads = scores.len().max(1) as f32;
    sum.iter().map(|v| v / heads).collect()
}

/// Dynamic time warping of the cost `-x` (`x` is [n][m]): the monotonic path from
/// (0, 0) to (n-1, m-1) of least total cost, as (row, column) pairs in order. Ties
/// prefer a step in time, then in tokens, as OpenAI's and CTranslate2's loops do.
pub fn negative_dtw(x: &[f32], n: usize, m: usize) -> Vec<(usize, usize)> {
    let inf = f32::INFINITY;
    let mut cost = vec![inf; (n + 1) * (m + 1)];
    let mut trace = vec![0u8; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    cost[0] = 0.0;
    for j in 1..=m {
        for i in 1..=n {
            let (c0, c1, c2) = (
                cost[at(i - 1, j - 1)],
                cost[at(i - 1, j)],
                cost[at(i, j - 1)],
            );
            let (c, t) = if c0 < c1 && c0 < c2 {
                (c0, 0)
            } else if c1 < c0 && c1 < c2 {
                (c1, 1)
            } else {
                (c2, 2)
            };
            cost[at(i, j)] = -x[(i - 1) * m + (j - 1)] + c;
            trace[at(i, j)] = t;
        }
    }
    for j in 0..=m {
        trace[at(0, j)] = 2;
    }
    for i in 0..=n {
        trace[at(i, 0)] = 1;
    }
    let (mut i, mut j) = (n, m);
    let mut path = Vec::new();
    while i > 0 || j > 0 {
        path.push((i.wrapping_sub(1), j.wrapping_sub(1)));
        match trace[at(i, j)] {
            0 => {
                i -= 1;
                j -= 1;
            }
            1 => i -= 1,
            _ => j -= 1,
        }
    }
    path.reverse();
    // The path's first step out of the (0, 0) corner is the one entry outside the
    // matrix; OpenAI keeps only in-matrix pairs in practice (its corner row and column
    // are never reached from a finite cost).
    path.retain(|&(i, j)| i < n && j < m);
    path
}

/// `tokens` cut into words at spaces and punctuation, each word its text and tokens
/// (a subword that does not decode to whole characters joins the next one first).
///
/// Upstream: `openai/whisper@v20250625` whisper/tokenizer.py L277-L320
/// (`split_tokens_on_unicode`, `split_tokens_on_spaces`).
pub fn split_to_words(tok: &Tokenizer, tokens: &[u32]) -> (Vec<String>, Vec<Vec<u32>>) {
    let eot = tok.specials().eot;
    let replacement = '\u{fffd}';
    let full: Vec<char> = tok.decode(tokens).chars().collect();
    let (mut subwords, mut subword_tokens) = (Vec::new(), Vec::new());
    let mut current = Vec::new();
    let mut offset = 0;
    for &t in tokens {
        current.push(t);
        let decoded = tok.decode(&current);
        let bad = decoded.chars().position(|c| c == replacement);
        if bad.is_none_or(|i| full.get(offset + i) == Some(&replacement)) {
            offset += decoded.chars().count();
            subwords.push(decoded);
            subword_tokens.push(std::mem::take(&mut current));
        }
    }
    let (mut words, mut word_tokens): (Vec<String>, Vec<Vec<u32>>) = (Vec::new(), Vec::new());
    for (sub, toks) in subwords.into_iter().zip(subword_tokens) {
        let special = toks[0] >= eot;
        let with_space = sub.starts_with(' ');
        let punctuation = ASCII_PUNCTUATION.contains(sub.trim());
        match words.last_mut() {
            Some(last) if !(special || with_space || punctuation) => {
                last.push_str(&sub);
                word_tokens
                    .last_mut()
                    .expect("a word for each text")
                    .extend(toks);
            }
            _ => {
                words.push(sub);
                word_tokens.push(toks);
            }
        }
    }
    (words, word_tokens)
}

/// Words and their times from the DTW path over the matrix rows of `<|notimestamps|>`
/// and the text tokens (`path` as (row, frame)), with `probs[i]` the probability the
/// decoder gave text token `i`; `frames_per_second` of the encoder (50).
///
/// Upstream: `openai/whisper@v20250625` whisper/timing.py L207-L240 (the end of
/// `find_alignment`).
pub fn word_timings(
    tok: &Tokenizer,
    text_tokens: &[u32],
    probs: &[f32],
    path: &[(usize, usize)],
    frames_per_second: f64,
) -> Vec<WordTiming> {
    let mut with_eot = text_tokens.to_vec();
    with_eot.push(tok.specials().eot);
    let (words, word_tokens) = split_to_words(tok, &with_eot);
    if word_tokens.len() <= 1 {
        return Vec::new();
    }
    let mut boundaries = vec![0usize];
    for w in &word_tokens[..word_tokens.len() - 1] {
        boundaries.push(boundaries.last().expect("starts at 0") + w.len());
    }
    // The time at which the path first reaches each row.
    let mut jump_times = Vec::new();
    let mut previous = None;
    for &(row, frame) in path {
        if previous != Some(row) {
            jump_times.push(frame as f64 / frames_per_second);
            previous = Some(row);
        }
    }
    let time = |i: usize| jump_times.get(i).copied().unwrap_or(0.0);
    words
        .into_iter()
        .zip(word_tokens)
        .zip(boundaries.windows(2))
        .map(|((word, tokens), b)| {
            let p = &probs[b[0].min(probs.len())..b[1].min(probs.len())];
            let probability = if p.is_empty() {
                0.0
            } else {
                p.iter().map(|&v| f64::from(v)).sum::<f64>() / p.len() as f64
            };
            WordTiming {
                word,
                tokens,
                start: time(b[0]),
                end: time(b[1]),
                probability,
            }
        })
        .collect()
}

/// Merges punctuation into the neighbouring word: a word that is one of `prepended`
/// (after its leading space) joins the word after it, one of `appended` joins the word
/// before it; a merged word is left empty, tokens and all.
///
/// Upstream: `openai/whisper@v20250625` whisper/timing.py L243-L275 (`merge_punctuations`).
pub fn merge_punctuations(alignment: &mut [WordTiming], prepended: &str, appended: &str) {
    if alignment.len() >= 2 {
        let mut j = alignment.len() - 1;
        for i in (0..alignment.len() - 1).rev() {
            let previous = &alignment[i];
            if previous.word.starts_with(' ') && prepended.contains(previous.word.trim()) {
                let (word, tokens) = (
                    std::mem::take(&mut alignment[i].word),
                    std::mem::take(&mut alignment[i].tokens),
                );
                let following = &mut alignment[j];
                following.word = word + &following.word;
                following.tokens = [tokens, std::mem::take(&mut following.tokens)].concat();
            } else {
                j = i;
            }
        }
    }
    let (mut i, mut j) = (0, 1);
    while j < alignment.len() {
        let following = &alignment[j];
        if !alignment[i].word.ends_with(' ') && appended.contains(following.word.as_str()) {
            let (word, tokens) = (
                std::mem::take(&mut alignment[j].word),
                std::mem::take(&mut alignment[j].tokens),
            );
            let previous = &mut alignment[i];
            previous.word.push_str(&word);
            previous.tokens.extend(tokens);
        } else {
            i = j;
        }
        j += 1;
    }
}

/// One timed piece of a window, as the word clean-up sees it: its bounds in seconds
/// (moved to its words' when they are more plausible), its text tokens, and the words
/// it receives.
#[derive(Debug, Clone, PartialEq)]
pub struct TimedPiece {
    /// Start in seconds.
    pub start: f64,
    /// End in seconds.
    pub end: f64,
    /// Its text tokens (no timestamps).
    pub text_tokens: Vec<u32>,
    /// Its words: (text, start, end, probability), times in seconds.
    pub words: Vec<(String, f64, f64, f64)>,
}

/// Rounds to hundredths, as Python's `round(x, 2)` does for these values.
fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Distributes a window's alignment over its pieces and applies faster-whisper's
/// clean-up: words at sentence ends trimmed to twice the median word duration (at most
/// 0.7 s), punctuation merged, the first word after a pause shortened, and each
/// piece's start and end moved to its words unless a word is implausibly long.
/// `time_offset` is the window's start; returns the last speech time, carried to the
/// next window.
///
/// Upstream: `faster-whisper==1.2.1` faster_whisper/transcribe.py
/// `WhisperModel.add_word_timestamps` (OpenAI's whisper/timing.py L278-L385).
pub fn add_word_timestamps(
    pieces: &mut [TimedPiece],
    mut alignment: Vec<WordTiming>,
    time_offset: f64,
    mut last_speech_timestamp: f64,
) -> f64 {
    let durations: Vec<f64> = alignment
        .iter()
        .map(|w| w.end - w.start)
        .filter(|&d| d != 0.0)
        .collect();
    let median = if durations.is_empty() {
        0.0
    } else {
        let mut d = durations.clone();
        d.sort_by(f64::total_cmp);
        let n = d.len();
        if n % 2 == 1 {
            d[n / 2]
        } else {
            (d[n / 2 - 1] + d[n / 2]) / 2.0
        }
    };
    let median_duration = median.min(0.7);
    let max_duration = median_duration * 2.0;
    if !durations.is_empty() {
        let sentence_end = ".。!！?？";
        for i in 1..alignment.len() {
            if alignment[i].end - alignment[i].start > max_duration {
                if sentence_end.contains(alignment[i].word.as_str()) {
                    alignment[i].end = alignment[i].start + max_duration;
                } else if sentence_end.contains(alignment[i - 1].word.as_str()) {
                    alignment[i].start = alignment[i].end - max_duration;
                }
            }
        }
    }
    merge_punctuations(&mut alignment, PREPEND_PUNCTUATIONS, APPEND_PUNCTUATIONS);
    let mut word_index = 0;
    for piece in pieces.iter_mut() {
        let mut saved_tokens = 0;
        let mut words: Vec<(String, f64, f64, f64)> = Vec::new();
        while word_index < alignment.len() && saved_tokens < piece.text_tokens.len() {
            let timing = &alignment[word_index];
            if !timing.word.is_empty() {
                words.push((
                    timing.word.clone(),
                    round2(time_offset + timing.start),
                    round2(time_offset + timing.end),
                    timing.probability,
                ));
            }
            saved_tokens += timing.tokens.len();
            word_index += 1;
        }
        if !words.is_empty() {
            let first_long = words[0].2 - words[0].1 > max_duration;
            let pair_long = words.len() > 1 && words[1].2 - words[0].1 > max_duration * 2.0;
            if words[0].2 - last_speech_timestamp > median_duration * 4.0
                && (first_long || pair_long)
            {
                if words.len() > 1 && words[1].2 - words[1].1 > max_duration {
                    let boundary = (words[1].2 / 2.0).max(words[1].2 - max_duration);
                    words[0].2 = boundary;
                    words[1].1 = boundary;
                }
                words[0].1 = (words[0].2 - max_duration).max(0.0);
            }
            if piece.start < words[0].2 && piece.start - 0.5 > words[0].1 {
                words[0].1 = (words[0].2 - median_duration).min(piece.start).max(0.0);
            } else {
                piece.start = words[0].1;
            }
            let last = words.len() - 1;
            if piece.end > words[last].1 && piece.end + 0.5 < words[last].2 {
                words[last].2 = (words[last].1 + median_duration).max(piece.end);
            } else {
                piece.end = words[last].2;
            }
            last_speech_timestamp = piece.end;
        }
        piece.words = words;
    }
    last_speech_timestamp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_filter_reflects_at_the_ends() {
        // numpy: the reflect-padded width-3 medians of [5, 1, 4, 2, 3].
        assert_eq!(
            median_filter(&[5.0, 1.0, 4.0, 2.0, 3.0], 3),
            [1.0, 4.0, 2.0, 3.0, 2.0]
        );
        // A row no longer than half the width is kept.
        assert_eq!(median_filter(&[2.0, 1.0, 3.0], 7), [2.0, 1.0, 3.0]);
        // Padded [0, 0, 9 | 0, 9, 0, 0, 9, 9, 9, 0 | 9, 9, 9]: the 9 at index 1 gives
        // way to the zeros around it, the zeros at 2, 3 and 7 to the 9s.
        assert_eq!(
            median_filter(&[0.0, 9.0, 0.0, 0.0, 9.0, 9.0, 9.0, 0.0], 7),
            [0.0, 0.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0]
        );
    }

    #[test]
    fn dtw_follows_the_diagonal_of_a_clear_alignment() {
        // Three tokens over six frames, each token owning two frames (1) and
        // disliking the others (-1), so that one path is best (with zeros there,
        // paths through them tie and OpenAI's tie-break picks among them).
        let (n, m) = (3, 6);
        let mut x = vec![-1f32; n * m];
        for i in 0..n {
            x[i * m + 2 * i] = 1.0;
            x[i * m + 2 * i + 1] = 1.0;
        }
        let path = negative_dtw(&x, n, m);
        assert_eq!(path.first(), Some(&(0, 0)));
        assert_eq!(path.last(), Some(&(n - 1, m - 1)));
        assert!(path
            .windows(2)
            .all(|w| w[1].0 >= w[0].0 && w[1].1 >= w[0].1));
        let first_frame: Vec<usize> = (0..n)
            .map(|row| path.iter().find(|p| p.0 == row).unwrap().1)
            .collect();
        assert_eq!(first_frame, [0, 2, 4]);
    }

    fn word(w: &str, start: f64, end: f64) -> WordTiming {
        WordTiming {
            word: w.into(),
            tokens: vec![1],
            start,
            end,
            probability: 0.9,
        }
    }

    #[test]
    fn punctuation_joins_its_word() {
        let mut a = vec![
            word(" \"", 0.0, 0.1),
            word(" Hello", 0.1, 0.5),
            word(",", 0.5, 0.6),
            word(" world", 0.6, 1.0),
            word(".", 1.0, 1.1),
        ];
        merge_punctuations(&mut a, PREPEND_PUNCTUATIONS, APPEND_PUNCTUATIONS);
        let words: Vec<&str> = a.iter().map(|w| w.word.as_str()).collect();
        assert_eq!(words, ["", " \" Hello,", "", " world.", ""]);
        assert_eq!(a[1].tokens.len(), 3);
        assert_eq!((a[1].start, a[1].end), (0.1, 0.5));
    }

    #[test]
    fn pieces_take_their_words_and_their_bounds() {
        let mut pieces = vec![
            TimedPiece {
                start: 0.0,
                end: 1.0,
                text_tokens: vec![1, 1],
                words: vec![],
            },
            TimedPiece {
                start: 1.0,
                end: 2.0,
                text_tokens: vec![1],
                words: vec![],
            },
        ];
        let alignment = vec![
            word(" a", 0.1, 0.4),
            word(" b", 0.4, 0.8),
            word(" c", 1.2, 1.6),
        ];
        let last = add_word_timestamps(&mut pieces, alignment, 10.0, 0.0);
        assert_eq!(pieces[0].words.len(), 2);
        assert_eq!(pieces[1].words.len(), 1);
        assert_eq!((pieces[0].start, pieces[0].end), (10.1, 10.8));
        assert_eq!((pieces[1].start, pieces[1].end), (11.2, 11.6));
        assert_eq!(last, 11.6);
    }
}
