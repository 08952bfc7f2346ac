//! Token choice shared by the families that decode token by token: a small seeded
//! generator, so sampled results are reproducible, and the choice from logits after
//! temperature, top-k and top-p, as Hugging Face's warpers make it (greedy at
//! temperature 0).

/// A small deterministic generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Sampler(u64);

impl Sampler {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Sampler(seed)
    }

    /// A uniform number in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// How a token is drawn from logits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Choice {
    /// 0 (or below): greedy, the first largest logit; else the logits are divided by it.
    pub temperature: f32,
    /// Keep only the `top_k` largest (ties with the last kept stay); 0: all.
    pub top_k: usize,
    /// Keep the smallest set of largest tokens whose probability passes `top_p`; 1: all.
    pub top_p: f32,
}

/// The index of the first largest value (`torch.argmax`'s choice on ties); 0 when
/// every value is `-inf` or NaN.
pub fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] || logits[best].is_nan() {
            best = i;
        }
    }
    best
}

/// A token from `logits` as `choice` says, drawing from `rng` when sampling.
///
/// Upstream: `transformers==4.57.3` generation/logits_process.py
/// (`TemperatureLogitsWarper`, `TopKLogitsWarper`, `TopPLogitsWarper`) and the
/// multinomial draw of generation/utils.py `_sample`.
pub fn choose(logits: &[f32], choice: &Choice, rng: &mut Sampler) -> usize {
    if choice.temperature <= 0.0 || logits.is_empty() {
        return argmax(logits);
    }
    let mut order: Vec<usize> = (0..logits.len())
        .filter(|&i| logits[i].is_finite())
        .collect();
    if order.is_empty() {
        return argmax(logits);
    }
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    if choice.top_k > 0 && choice.top_k < order.len() {
        let kth = logits[order[choice.top_k - 1]];
        order.retain(|&i| logits[i] >= kth);
    }
    let max = logits[order[0]];
    let weights: Vec<f64> = order
        .iter()
        .map(|&i| (((logits[i] - max) / choice.temperature) as f64).exp())
        .collect();
    let mut keep = weights.len();
    if choice.top_p < 1.0 {
        let total: f64 = weights.iter().sum();
        // Hugging Face drops the tokens whose cumulative probability, summed from the
        // least likely, stays at or below 1 - top_p: the most likely ones are kept.
        let mut tail = 0.0;
        for (n, w) in weights.iter().enumerate().rev() {
            tail += w / total;
            if tail > 1.0 - choice.top_p as f64 {
                keep = n + 1;
                break;
            }
        }
        keep = keep.max(1);
    }
    let total: f64 = weights[..keep].iter().sum();
    let mut target = rng.uniform() * total;
    for (n, w) in weights[..keep].iter().enumerate() {
        if target < *w {
            return order[n];
        }
        target -= w;
    }
    order[keep - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_largest() {
        let rng = &mut Sampler::new(1);
        let greedy = Choice {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
        };
        assert_eq!(choose(&[1.0, 3.0, 3.0, f32::NEG_INFINITY], &greedy, rng), 1);
    }

    #[test]
    fn sampling_follows_the_tempered_distribution_within_top_k() {
        let rng = &mut Sampler::new(7);
        let logits = [0.0f32, 0.5f32.ln(), 3.0f32.ln(), -1e9];
        let choice = Choice {
            temperature: 1.0,
            top_k: 2,
            top_p: 1.0,
        };
        let mut counts = [0usize; 4];
        for _ in 0..20_000 {
            counts[choose(&logits, &choice, rng)] += 1;
        }
        assert_eq!(counts[3], 0);
        assert_eq!(
            counts[1], 0,
            "top-2 keeps the two largest only (3 and 1, not 0.5)"
        );
        let share = counts[2] as f64 / 20_000.0;
        assert!((share - 0.75).abs() < 0.02, "{share}");
    }

    #[test]
    fn top_p_keeps_the_smallest_set_that_passes_it() {
        let rng = &mut Sampler::new(3);
        let logits = [0.7f32.ln(), 0.2f32.ln(), 0.1f32.ln()];
        let choice = Choice {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.8,
        };
        let picks: std::collections::BTreeSet<usize> =
            (0..2000).map(|_| choose(&logits, &choice, rng)).collect();
        assert_eq!(picks, [0, 1].into_iter().collect());
    }
}
