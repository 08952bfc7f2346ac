//! Whisper's timestamp tokens: the rules that constrain them while decoding (OpenAI's
//! `ApplyTimestampRules`) and the cut of a window's tokens into timed segments
//! (faster-whisper's `generate_segments`).

use super::row::Row;

/// Whisper's timestamp rules (OpenAI's `ApplyTimestampRules`, which CTranslate2 follows)
/// on the next token's logits (a whole or summarised [`Row`]), given the tokens generated so far in this window:
/// timestamps come in pairs (a lone timestamp is followed by another or end-of-text,
/// a pair by text), never decrease, the first token is a timestamp no later than
/// `max_initial` steps, and when the timestamps' total probability beats every text
/// token, a timestamp is chosen.
pub fn apply_timestamp_rules(
    row: &mut Row,
    tokens: &[u32],
    tb: usize,
    eot: usize,
    max_initial: usize,
) {
    let is_ts = |t: u32| t as usize >= tb;
    let last_ts = tokens.last().is_some_and(|&t| is_ts(t));
    let penultimate_ts = tokens.len() < 2 || is_ts(tokens[tokens.len() - 2]);
    if last_ts {
        if penultimate_ts {
            row.mask_range(tb, usize::MAX);
        } else {
            row.mask_range(0, eot);
        }
    }
    if let Some(&t) = tokens.iter().rev().find(|&&t| is_ts(t)) {
        let floor = if last_ts && !penultimate_ts {
            t as usize
        } else {
            t as usize + 1
        };
        row.mask_range(tb, floor);
    }
    if tokens.is_empty() {
        row.mask_range(0, tb);
        row.mask_range(tb + max_initial + 1, usize::MAX);
    }
    let text_max = row.max_in(0, tb);
    let max = text_max.max(row.max_in(tb, usize::MAX));
    if max == f32::NEG_INFINITY {
        return;
    }
    let ts_mass = row.exp_sum_from(tb, max);
    if ts_mass > 0.0 && ts_mass.ln() > (text_max - max) as f64 {
        row.mask_range(0, tb);
    }
}

/// A window's tokens cut into segments: (start step, end step, tokens) each, and how
/// far the next window starts (in timestamp steps; `None`: after the whole window).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowSplit {
    /// Segments as (start, end, tokens with their timestamps).
    pub pieces: Vec<(usize, usize, Vec<u32>)>,
    /// Where the next window starts, when the window ended inside speech.
    pub advance_steps: Option<usize>,
}

/// Cuts a window's tokens at each pair of consecutive timestamps (faster-whisper's
/// `generate_segments`); `window_steps` is the window's length in timestamp steps.
pub fn split_at_timestamps(tokens: &[u32], tb: u32, window_steps: usize) -> WindowSplit {
    let step = |t: u32| (t - tb) as usize;
    let single_ending =
        tokens.len() >= 2 && tokens[tokens.len() - 2] < tb && tokens[tokens.len() - 1] >= tb;
    let mut cuts: Vec<usize> = (1..tokens.len())
        .filter(|&i| tokens[i] >= tb && tokens[i - 1] >= tb)
        .collect();
    if cuts.is_empty() {
        let end = tokens
            .iter()
            .rev()
            .find(|&&t| t >= tb)
            .map(|&t| step(t))
            .filter(|&e| e > 0)
            .unwrap_or(window_steps);
        return WindowSplit {
            pieces: vec![(0, end, tokens.to_vec())],
            advance_steps: None,
        };
    }
    if single_ending {
        cuts.push(tokens.len());
    }
    let mut pieces = Vec::new();
    let mut from = 0;
    for &cut in &cuts {
        let piece = &tokens[from..cut];
        let start = piece.first().filter(|&&t| t >= tb).map_or(0, |&t| step(t));
        let end = piece
            .last()
            .filter(|&&t| t >= tb)
            .map_or(start, |&t| step(t));
        pieces.push((start, end, piece.to_vec()));
        from = cut;
    }
    let advance_steps = if single_ending {
        None
    } else {
        Some(step(tokens[from - 1]))
    };
    WindowSplit {
        pieces,
        advance_steps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TB: u32 = 100;

    #[test]
    fn timestamp_pairs_cut_segments_and_set_the_next_window() {
        // <|0.00|> a b <|1.00|><|1.20|> c <|2.00|>: ends on a lone timestamp after
        // text (speech continues past it), so the whole window is consumed.
        let t = [TB, 1, 2, TB + 50, TB + 60, 3, TB + 100];
        let split = split_at_timestamps(&t, TB, 1500);
        assert_eq!(
            split.pieces,
            vec![
                (0, 50, vec![TB, 1, 2, TB + 50]),
                (60, 100, vec![TB + 60, 3, TB + 100])
            ]
        );
        assert_eq!(split.advance_steps, None);
        // Ends on a pair: the next window starts at the last timestamp.
        let t = [TB, 1, TB + 40, TB + 40, 2, TB + 90, TB + 90];
        let split = split_at_timestamps(&t, TB, 1500);
        assert_eq!(split.pieces.len(), 2);
        assert_eq!(split.advance_steps, Some(90));
        // No pair: one segment up to the last timestamp, or the window without one.
        let split = split_at_timestamps(&[TB, 1, 2, TB + 70], TB, 1500);
        assert_eq!(split.pieces, vec![(0, 70, vec![TB, 1, 2, TB + 70])]);
        assert_eq!(split_at_timestamps(&[1, 2], TB, 1500).pieces[0].1, 1500);
    }

    #[test]
    fn timestamp_rules_follow_whisper() {
        let n = TB as usize + 200;
        let eot = TB as usize - 5;
        let allowed = |tokens: &[u32], logits: &[f32]| -> Vec<usize> {
            let mut row = Row::full(logits.to_vec());
            apply_timestamp_rules(&mut row, tokens, TB as usize, eot, 50);
            let l = row.logits().unwrap();
            (0..n).filter(|&i| l[i].is_finite()).collect()
        };
        let flat = vec![0f32; n];
        // First token: a timestamp no later than step 50.
        assert_eq!(
            allowed(&[], &flat),
            (TB as usize..=TB as usize + 50).collect::<Vec<_>>()
        );
        // After a lone timestamp following text: a timestamp not before it, or eot.
        let mut eot_heavy = flat.clone();
        eot_heavy[eot] = 10.0;
        let after = allowed(&[TB, 1, TB + 30], &eot_heavy);
        assert!(after.contains(&eot) && after.contains(&(TB as usize + 30)));
        assert!(!after.contains(&1) && !after.contains(&(TB as usize + 29)));
        // After a pair: text only, unless timestamps dominate.
        let mut text_heavy = flat.clone();
        text_heavy[7] = 10.0;
        let after = allowed(&[TB, 1, TB + 30, TB + 30], &text_heavy);
        assert!(after.contains(&7) && after.iter().all(|&i| i < TB as usize));
        // Timestamps' total probability above the best text token forces a timestamp.
        let mut ts_heavy = flat.clone();
        ts_heavy[TB as usize + 80..].fill(3.0);
        let after = allowed(&[TB, 1], &ts_heavy);
        assert!(after.iter().all(|&i| i >= TB as usize), "{after:?}");
    }
}
