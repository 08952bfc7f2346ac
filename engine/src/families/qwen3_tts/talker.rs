//! The talker and its code predictor: the two decoders that turn the prompt into codec
//! frames. The talker reads the prompt rows (text and codec embeddings summed) and one
//! row per frame after it, and predicts each frame's first code (group 0); the code
//! predictor, a small decoder with a fresh cache per frame, reads the talker's last
//! hidden state and that code and predicts the frame's other codes one group at a time.
//!
//! Upstream: `qwen-tts==0.1.1` qwen_tts/core/models/modeling_qwen3_tts.py L1427-L1561
//! (`Qwen3TTSTalkerModel`), L1564-L1744 (`Qwen3TTSTalkerForConditionalGeneration`: the
//! text projection L1575-L1577, the summed frame input L1669-L1692, `codec_head`
//! L1727), L808-L818 (`Qwen3TTSTalkerResizeMLP`), L1015-L1153 and L1156-L1320 (the code
//! predictor and its per-group heads).

use crate::backend::Runtime;
use crate::error::Result;
use crate::ggml::{Context, Scheduler, Tensor};
use crate::layers::Layers;
use crate::model_file::ModelFile;
use crate::weights::WeightStore;

use super::hparams::HParams;
use super::transformer::{rms_norm, DecoderLayer, KvCache, Variant};

const TALKER: &str = "talker.model";
const PREDICTOR: &str = "predictor";

/// Nodes of one decoder layer's graph, with room to spare.
const NODES_PER_LAYER: usize = 64;

/// The talker's and code predictor's weights, checked at load.
#[derive(Clone)]
pub struct Talker {
    hp: HParams,
    talker_layers: Vec<DecoderLayer>,
    predictor_layers: Vec<DecoderLayer>,
    /// Whether a projection maps the talker's width to the code predictor's.
    projected: bool,
}

impl Talker {
    /// Checks every weight of the talker and the code predictor in the file.
    pub fn load(w: &ModelFile, hp: &HParams) -> Result<Self> {
        let (t, p) = (&hp.talker, &hp.predictor);
        let (th, ph) = (t.hidden as i64, p.hidden as i64);
        let text = hp.text_hidden as i64;
        let shapes: Vec<(String, Vec<i64>)> = vec![
            (
                format!("{TALKER}.text_embedding.weight"),
                vec![text, hp.text_vocab as i64],
            ),
            (
                "talker.text_projection.linear_fc1.weight".into(),
                vec![text, text],
            ),
            ("talker.text_projection.linear_fc1.bias".into(), vec![text]),
            (
                "talker.text_projection.linear_fc2.weight".into(),
                vec![text, th],
            ),
            ("talker.text_projection.linear_fc2.bias".into(), vec![th]),
            (
                format!("{TALKER}.codec_embedding.weight"),
                vec![th, hp.talker_vocab as i64],
            ),
            (format!("{TALKER}.norm.weight"), vec![th]),
            (
                "talker.codec_head.weight".into(),
                vec![th, hp.talker_vocab as i64],
            ),
            (format!("{PREDICTOR}.norm.weight"), vec![ph]),
        ];
        for (name, ne) in &shapes {
            w.expect_dims(name, ne)?;
        }
        for g in 0..hp.code_groups - 1 {
            w.expect_dims(
                &format!("{PREDICTOR}.codec_embedding.{g}.weight"),
                &[th, hp.predictor_vocab as i64],
            )?;
            w.expect_dims(
                &format!("{PREDICTOR}.lm_head.{g}.weight"),
                &[ph, hp.predictor_vocab as i64],
            )?;
        }
        let projected = t.hidden != p.hidden;
        if projected {
            w.expect_dims(
                &format!("{PREDICTOR}.small_to_mtp_projection.weight"),
                &[th, ph],
            )?;
            w.expect_dims(&format!("{PREDICTOR}.small_to_mtp_projection.bias"), &[ph])?;
        }
        let talker_layers = (0..t.layers)
            .map(|l| DecoderLayer::load(w, &format!("{TALKER}.layers.{l}"), t, Variant::HeadNorms))
            .collect::<Result<_>>()?;
        let predictor_layers = (0..p.layers)
            .map(|l| {
                DecoderLayer::load(w, &format!("{PREDICTOR}.layers.{l}"), p, Variant::HeadNorms)
            })
            .collect::<Result<_>>()?;
        Ok(Talker {
            hp: hp.clone(),
            talker_layers,
            predictor_layers,
            projected,
        })
    }

    /// Graph size of a talker step or prompt.
    pub fn talker_nodes(&self) -> usize {
        NODES_PER_LAYER * (self.hp.talker.layers + 2)
    }

    /// Graph size of a code-predictor step.
    pub fn predictor_nodes(&self) -> usize {
        NODES_PER_LAYER * (self.hp.predictor.layers + 2)
    }

    /// The text side of prompt rows: `text_projection(text_embedding(ids))`, one row of
    /// the talker's width per id.
    ///
    /// Upstream: modeling_qwen3_tts.py L808-L818 and L1575-L1577.
    pub fn text_rows(
        &self,
        w: &WeightStore,
        layers: &Layers,
        sched: &mut Scheduler,
        ids: &[u32],
    ) -> Result<Vec<f32>> {
        let n = ids.len() as i64;
        let ctx = Context::new(64, 64)?;
        let idx = ctx.new_i32_tensor(&[n], "ids");
        idx.mark_input();
        let x = ctx.get_rows(weight(w, &format!("{TALKER}.text_embedding.weight")), idx);
        let lin = |name: &str, x| -> Result<Tensor<'_>> {
            layers.linear(
                &ctx,
                weight(w, &format!("talker.text_projection.{name}.weight")),
                Some(weight(w, &format!("talker.text_projection.{name}.bias"))),
                x,
            )
        };
        let y = lin("linear_fc2", ctx.silu(lin("linear_fc1", x)?))?;
        y.mark_output();
        let mut graph = ctx.new_graph(64);
        graph.expand(y);
        let ids: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
        sched.compute_with(&mut graph, &[], &[(idx, &ids)])?;
        Ok(y.read_f32()?)
    }

    /// Rows of the talker's codec embedding for `ids` (control ids, speakers).
    pub fn codec_rows(
        &self,
        w: &WeightStore,
        sched: &mut Scheduler,
        ids: &[u32],
    ) -> Result<Vec<f32>> {
        let frames: Vec<Vec<u32>> = ids.iter().map(|&i| vec![i]).collect();
        self.frame_rows(w, sched, &frames)
    }

    /// One row per frame: the sum of its codes' embeddings, group 0 from the talker's
    /// codec embedding and group `g` from the code predictor's table `g - 1`, as the
    /// talker reads each frame it made (a frame of one code is a plain codec row).
    ///
    /// Upstream: modeling_qwen3_tts.py L1669-L1692 and L1990-L1999.
    pub fn frame_rows(
        &self,
        w: &WeightStore,
        sched: &mut Scheduler,
        frames: &[Vec<u32>],
    ) -> Result<Vec<f32>> {
        let groups = frames.first().map_or(0, Vec::len);
        assert!(
            groups > 0 && groups <= self.hp.code_groups && frames.iter().all(|f| f.len() == groups),
            "frames of one to code_groups codes each"
        );
        let nodes = 8 * groups + 8;
        let ctx = Context::new(nodes, nodes)?;
        let mut columns = Vec::new();
        let mut sum: Option<Tensor<'_>> = None;
        for g in 0..groups {
            let table = if g == 0 {
                format!("{TALKER}.codec_embedding.weight")
            } else {
                format!("{PREDICTOR}.codec_embedding.{}.weight", g - 1)
            };
            let idx = ctx.new_i32_tensor(&[frames.len() as i64], &format!("codes{g}"));
            idx.mark_input();
            let rows = ctx.to_f32(ctx.get_rows(weight(w, &table), idx));
            sum = Some(match sum {
                Some(s) => ctx.add(s, rows),
                None => rows,
            });
            columns.push((idx, frames.iter().map(|f| f[g] as i32).collect::<Vec<_>>()));
        }
        let y = sum.expect("at least one group");
        y.mark_output();
        let mut graph = ctx.new_graph(nodes);
        graph.expand(y);
        let ints: Vec<(Tensor<'_>, &[i32])> =
            columns.iter().map(|(t, v)| (*t, v.as_slice())).collect();
        sched.compute_with(&mut graph, &[], &ints)?;
        Ok(y.read_f32()?)
    }

    /// Feeds `rows` (the talker's width each) after `n_past` cached positions: the
    /// group-0 logits of the last row and the last normed hidden state (what the code
    /// predictor reads). `frame` is a frame's 16 codes whose embeddings are summed and
    /// added to the single row instead (a generation step).
    #[allow(clippy::too_many_arguments)]
    pub fn step(
        &self,
        w: &WeightStore,
        layers: &Layers,
        sched: &mut Scheduler,
        cache: &KvCache,
        n_past: usize,
        rows: &[f32],
        frame: Option<&[u32]>,
    ) -> Result<(Vec<f32>, Vec<f32>)> {
        let hp = &self.hp;
        let hidden = hp.talker.hidden;
        let t = rows.len() / hidden;
        let nodes = self.talker_nodes() + 4 * hp.code_groups;
        let ctx = Context::new(nodes, nodes)?;
        let mut graph = ctx.new_graph(nodes);
        let input = ctx.new_tensor(crate::ggml::DType::F32, &[hidden as i64, t as i64], "rows");
        input.mark_input();
        let pos = ctx.new_i32_tensor(&[t as i64], "pos");
        pos.mark_input();
        let mut x = input;
        let mut ints: Vec<(Tensor<'_>, Vec<i32>)> = Vec::new();
        if let Some(codes) = frame {
            for (g, &code) in codes.iter().enumerate() {
                let table = if g == 0 {
                    format!("{TALKER}.codec_embedding.weight")
                } else {
                    format!("{PREDICTOR}.codec_embedding.{}.weight", g - 1)
                };
                let idx = ctx.new_i32_tensor(&[1], &format!("code{g}"));
                idx.mark_input();
                x = ctx.add(x, ctx.to_f32(ctx.get_rows(weight(w, &table), idx)));
                ints.push((idx, vec![code as i32]));
            }
        }
        let mask = (t > 1).then(|| {
            let m = ctx.new_tensor(
                crate::ggml::DType::F32,
                &[(n_past + t) as i64, t as i64],
                "mask",
            );
            m.mark_input();
            m
        });
        for (l, layer) in self.talker_layers.iter().enumerate() {
            x = layer.build(&ctx, &mut graph, w, layers, x, pos, cache, l, n_past, mask)?;
        }
        let last = if t > 1 {
            ctx.view_2d_rows(x, hidden as i64, 1, (t - 1) * hidden)
        } else {
            x
        };
        let h = rms_norm(
            &ctx,
            w,
            last,
            &format!("{TALKER}.norm.weight"),
            hp.talker.rms_eps,
        );
        let logits = layers.linear(&ctx, weight(w, "talker.codec_head.weight"), None, h)?;
        h.mark_output();
        logits.mark_output();
        graph.expand(h);
        graph.expand(logits);
        let positions: Vec<i32> = (n_past..n_past + t).map(|p| p as i32).collect();
        let causal = mask.map(|_| causal_mask(n_past, t, None));
        let mut floats: Vec<(Tensor<'_>, &[f32])> = vec![(input, rows)];
        if let (Some(m), Some(c)) = (mask, causal.as_deref()) {
            floats.push((m, c));
        }
        let mut int_inputs: Vec<(Tensor<'_>, &[i32])> = vec![(pos, &positions)];
        int_inputs.extend(ints.iter().map(|(t, v)| (*t, v.as_slice())));
        sched.compute_with(&mut graph, &floats, &int_inputs)?;
        Ok((logits.read_f32()?, h.read_f32()?))
    }

    /// One code-predictor step after `n_past` positions of this frame: the frame's start
    /// (two positions) or the code of group `group` (later steps, one position); returns
    /// the logits of the head that predicts group `group + 1`, for the last position.
    ///
    /// Upstream: modeling_qwen3_tts.py L1250-L1312 (`forward`: embedding of the previous
    /// group's code L1281, `small_to_mtp_projection`, the head of step
    /// `generation_steps` L1299).
    #[allow(clippy::too_many_arguments)]
    pub fn predict(
        &self,
        w: &WeightStore,
        layers: &Layers,
        sched: &mut Scheduler,
        cache: &KvCache,
        n_past: usize,
        input: PredictorInput<'_>,
        group: usize,
    ) -> Result<Vec<f32>> {
        let hp = &self.hp;
        let nodes = self.predictor_nodes();
        let ctx = Context::new(nodes, nodes)?;
        let mut graph = ctx.new_graph(nodes);
        let th = hp.talker.hidden;
        let mut floats: Vec<(Tensor<'_>, &[f32])> = Vec::new();
        let mut ints: Vec<(Tensor<'_>, Vec<i32>)> = Vec::new();
        let x = match input {
            PredictorInput::Start { hidden, code } => {
                let h = ctx.new_tensor(crate::ggml::DType::F32, &[th as i64, 1], "hidden");
                h.mark_input();
                floats.push((h, hidden));
                let idx = ctx.new_i32_tensor(&[1], "code");
                idx.mark_input();
                ints.push((idx, vec![code as i32]));
                let row = ctx.to_f32(
                    ctx.get_rows(weight(w, &format!("{TALKER}.codec_embedding.weight")), idx),
                );
                ctx.concat(h, row, 1)
            }
            PredictorInput::Code(code) => {
                let idx = ctx.new_i32_tensor(&[1], "code");
                idx.mark_input();
                ints.push((idx, vec![code as i32]));
                let table = format!("{PREDICTOR}.codec_embedding.{}.weight", group - 1);
                ctx.to_f32(ctx.get_rows(weight(w, &table), idx))
            }
        };
        let t = x.ne()[1] as usize;
        let mut x = if self.projected {
            layers.linear(
                &ctx,
                weight(w, &format!("{PREDICTOR}.small_to_mtp_projection.weight")),
                Some(weight(
                    w,
                    &format!("{PREDICTOR}.small_to_mtp_projection.bias"),
                )),
                x,
            )?
        } else {
            x
        };
        let pos = ctx.new_i32_tensor(&[t as i64], "pos");
        pos.mark_input();
        let mask = (t > 1).then(|| {
            let m = ctx.new_tensor(
                crate::ggml::DType::F32,
                &[(n_past + t) as i64, t as i64],
                "mask",
            );
            m.mark_input();
            m
        });
        for (l, layer) in self.predictor_layers.iter().enumerate() {
            x = layer.build(&ctx, &mut graph, w, layers, x, pos, cache, l, n_past, mask)?;
        }
        let ph = hp.predictor.hidden;
        let last = if t > 1 {
            ctx.view_2d_rows(x, ph as i64, 1, (t - 1) * ph)
        } else {
            x
        };
        let h = rms_norm(
            &ctx,
            w,
            last,
            &format!("{PREDICTOR}.norm.weight"),
            hp.predictor.rms_eps,
        );
        let logits = layers.linear(
            &ctx,
            weight(w, &format!("{PREDICTOR}.lm_head.{group}.weight")),
            None,
            h,
        )?;
        logits.mark_output();
        graph.expand(logits);
        let positions: Vec<i32> = (n_past..n_past + t).map(|p| p as i32).collect();
        let causal = mask.map(|_| causal_mask(n_past, t, None));
        if let (Some(m), Some(c)) = (mask, causal.as_deref()) {
            floats.push((m, c));
        }
        let mut int_inputs: Vec<(Tensor<'_>, &[i32])> = vec![(pos, &positions)];
        int_inputs.extend(ints.iter().map(|(t, v)| (*t, v.as_slice())));
        sched.compute_with(&mut graph, &floats, &int_inputs)?;
        Ok(logits.read_f32()?)
    }

    /// A key/value cache for the talker of `capacity` positions.
    pub fn talker_cache(&self, runtime: &Runtime, capacity: usize) -> Result<KvCache> {
        KvCache::new(runtime, &self.hp.talker, capacity)
    }

    /// A key/value cache for one frame of the code predictor.
    pub fn predictor_cache(&self, runtime: &Runtime) -> Result<KvCache> {
        KvCache::new(runtime, &self.hp.predictor, self.hp.code_groups + 1)
    }
}

/// What a code-predictor step reads.
pub enum PredictorInput<'a> {
    /// The frame's start: the talker's last hidden state and the frame's group-0 code,
    /// embedded by the talker's codec table.
    Start {
        /// The talker's normed last hidden state.
        hidden: &'a [f32],
        /// The group-0 code.
        code: u32,
    },
    /// The previous group's code.
    Code(u32),
}

/// The weight `name`, checked at load.
fn weight<'a>(w: &'a WeightStore, name: &str) -> Tensor<'a> {
    w.tensor(name)
        .unwrap_or_else(|| panic!("weight {name} was checked at load"))
}

/// The additive attention mask of `t` queries after `n_past` cached positions: query
/// `i` sees keys `j <= n_past + i`, and with a `window` only those with
/// `j > n_past + i - window`. Rows of `n_past + t` values, one row per query.
pub fn causal_mask(n_past: usize, t: usize, window: Option<usize>) -> Vec<f32> {
    let n_kv = n_past + t;
    let mut m = vec![f32::NEG_INFINITY; n_kv * t];
    for i in 0..t {
        let q = n_past + i;
        let first = window.map_or(0, |w| (q + 1).saturating_sub(w));
        for j in first..=q {
            m[i * n_kv + j] = 0.0;
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::causal_mask;

    #[test]
    fn masks_see_the_past_and_the_window() {
        let inf = f32::NEG_INFINITY;
        assert_eq!(causal_mask(0, 2, None), [0.0, inf, 0.0, 0.0]);
        assert_eq!(causal_mask(1, 1, None), [0.0, 0.0]);
        assert_eq!(
            causal_mask(0, 3, Some(2)),
            [0.0, inf, inf, 0.0, 0.0, inf, inf, 0.0, 0.0]
        );
    }
}
