//! The next token's logits as the host holds them while decoding: the whole row (after
//! the prompt pass, or when sampling at a temperature), or what the decoder step graph
//! leaves of it at temperature 0: a summary of the text tokens (a largest logit, its
//! value, Σ e^(l - max)) and every logit from end-of-text on. Whisper's masks and
//! timestamp rules only ever treat the text tokens as one block, so the summary and the
//! 1,608 special and timestamp logits choose the token the whole row would (barring
//! exact ties among text logits), without copying 51,864 logits back each step.

use crate::cpu_kernels::logits::{summarize, LogitsSummary};

/// A row of next-token logits: `tail` holds the logits of tokens `from..`; tokens
/// below `from` are known by `head` only (nothing when `from` is 0, `None` once they
/// are all masked).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    head: Option<LogitsSummary>,
    from: usize,
    tail: Vec<f32>,
}

impl Row {
    /// Every logit of the row.
    pub fn full(logits: Vec<f32>) -> Self {
        Self {
            head: None,
            from: 0,
            tail: logits,
        }
    }

    /// The tokens below `from` summarised by `head` (`head.max` -inf: all masked),
    /// the logits of tokens `from..` in `tail`.
    pub fn summarized(head: LogitsSummary, from: usize, tail: Vec<f32>) -> Self {
        Self {
            head: (head.max > f32::NEG_INFINITY).then_some(head),
            from,
            tail,
        }
    }

    /// Every logit, when the row holds them all (`None` for a summarised row).
    pub fn logits(&self) -> Option<&[f32]> {
        (self.from == 0).then_some(&self.tail[..])
    }

    /// Masks the tokens `ids`. A summarised row masks those from `from` on; the ones
    /// below it were masked where the summary was made (the step graph's head ban).
    pub fn mask(&mut self, ids: impl IntoIterator<Item = usize>) {
        for i in ids {
            if let Some(l) = i.checked_sub(self.from).and_then(|j| self.tail.get_mut(j)) {
                *l = f32::NEG_INFINITY;
            }
        }
    }

    /// Masks the tokens `start..end` (clamped to the row). A range that reaches into a
    /// summarised head must cover it all: the head's tokens are one block.
    pub fn mask_range(&mut self, start: usize, end: usize) {
        let (head, tail) = self.split(start, end);
        if head {
            self.head = None;
        }
        self.tail[tail].fill(f32::NEG_INFINITY);
    }

    /// The largest logit of the tokens `start..end` (-inf when all are masked); a
    /// range that reaches into a summarised head must cover it.
    pub fn max_in(&self, start: usize, end: usize) -> f32 {
        let (head, tail) = self.split(start, end);
        let head_max = match self.head {
            Some(h) if head => h.max,
            _ => f32::NEG_INFINITY,
        };
        head_max.max(crate::cpu_kernels::logits::max(&self.tail[tail]))
    }

    /// Whether the tokens `start..end` reach into the summarised head, and the part of
    /// the tail they cover.
    fn split(&self, start: usize, end: usize) -> (bool, std::ops::Range<usize>) {
        let head = start < self.from && end > start;
        assert!(
            !head || (start == 0 && end >= self.from),
            "tokens {start}..{end} cut the summarised block 0..{}",
            self.from
        );
        let n = self.tail.len();
        let a = start.saturating_sub(self.from).min(n);
        let b = end.saturating_sub(self.from).min(n);
        (head, a..b.max(a))
    }

    /// Σ e^(l - max) over the tokens from `start` on, which lie in the tail, in f64.
    pub fn exp_sum_from(&self, start: usize, max: f32) -> f64 {
        let a = start.checked_sub(self.from).expect("tokens from the tail");
        self.tail[a.min(self.tail.len())..]
            .iter()
            .map(|&l| ((l - max) as f64).exp())
            .sum()
    }

    /// The row's largest logit and its log-probability under the softmax of the whole
    /// row: the greedy choice. On a tie between the head and the tail the head's (lower)
    /// token wins, as on a whole row.
    pub fn argmax_logprob(&self) -> (usize, f32) {
        let tail = summarize(&self.tail);
        let Some(head) = self.head else {
            return (self.from + tail.argmax, -(tail.sum_exp.ln() as f32));
        };
        let max = head.max.max(tail.max);
        let sum = head.sum_exp * ((head.max - max) as f64).exp()
            + tail.sum_exp * ((tail.max - max) as f64).exp();
        let best = if head.max >= tail.max {
            head.argmax
        } else {
            self.from + tail.argmax
        };
        (best, -(sum.ln() as f32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary_of(x: &[f32]) -> LogitsSummary {
        summarize(x)
    }

    /// A summarised row answers every query as the whole row does.
    #[test]
    fn a_summarised_row_chooses_as_the_whole_row() {
        let n = 300;
        let from = 200;
        let mut state = 7u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) as f32 / (1u64 << 31) as f32) * 8.0 - 4.0
        };
        for case in 0..200 {
            let mut logits: Vec<f32> = (0..n).map(|_| next()).collect();
            if case % 3 == 0 {
                // the best token in the tail
                logits[from + case % 100] = 9.0;
            }
            let banned = [3usize, 17, 150, 205];
            let mut head = logits[..from].to_vec();
            for &b in banned.iter().filter(|&&b| b < from) {
                head[b] = f32::NEG_INFINITY;
            }
            let mut whole = Row::full(logits.clone());
            let mut part = Row::summarized(summary_of(&head), from, logits[from..].to_vec());
            whole.mask(banned);
            part.mask(banned);
            if case % 4 == 1 {
                whole.mask_range(0, from + 10);
                part.mask_range(0, from + 10);
            }
            whole.mask_range(from + 50, from + 60);
            part.mask_range(from + 50, from + 60);
            for (a, b) in [(0, from), (0, n), (from + 5, n), (from, from + 1)] {
                assert_eq!(
                    whole.max_in(a, b),
                    part.max_in(a, b),
                    "case {case} {a}..{b}"
                );
            }
            let m = whole.max_in(0, n);
            let (x, y) = (
                whole.exp_sum_from(from + 20, m),
                part.exp_sum_from(from + 20, m),
            );
            assert!((x - y).abs() <= 1e-12 * x.max(1.0), "case {case}: {x} {y}");
            let (wb, wl) = whole.argmax_logprob();
            let (pb, pl) = part.argmax_logprob();
            assert_eq!(wb, pb, "case {case}");
            assert!((wl - pl).abs() < 1e-5, "case {case}: {wl} {pl}");
        }
    }

    #[test]
    #[should_panic(expected = "cut the summarised block")]
    fn a_range_may_not_cut_the_summarised_block() {
        let head = summary_of(&[0.0, 1.0]);
        Row::summarized(head, 2, vec![0.0; 3]).mask_range(1, 4);
    }

    #[test]
    fn masking_the_whole_head_leaves_the_tail() {
        let head = summary_of(&[5.0, 1.0]);
        let mut row = Row::summarized(head, 2, vec![0.0, 2.0, f32::NEG_INFINITY]);
        assert_eq!(row.argmax_logprob().0, 0);
        row.mask_range(0, 2);
        let (best, logprob) = row.argmax_logprob();
        assert_eq!(best, 3);
        let expected = -(1.0 + (-2.0f64).exp()).ln() as f32;
        assert!((logprob - expected).abs() < 1e-6);
        assert_eq!(row.logits(), None);
    }
}
