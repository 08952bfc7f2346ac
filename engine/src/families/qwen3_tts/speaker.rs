//! The Base model's speaker encoder: 24 kHz reference audio to an x-vector, which the
//! prompt carries where a preset speaker's embedding would go. A log-mel front end
//! (on the host: Slaney mel, periodic Hann, reflection padding) and an ECAPA-TDNN without
//! batch norm (in one ggml graph): a TDNN block, three SE-Res2Net blocks, multi-layer
//! feature aggregation, attentive statistics pooling with global context, a final
//! projection.
//!
//! Activations are [time, channels] (time fastest), the layout the project's f32
//! convolution and reflection padding read; every convolution pads by reflection
//! ("same").
//!
//! Upstream: `qwen-tts==0.1.1` qwen_tts/core/models/modeling_qwen3_tts.py L396-L464
//! (`mel_spectrogram`), L247-L267 (`TimeDelayNetBlock`), L95-L126 (`Res2NetBlock`),
//! L129-L156 (`SqueezeExcitationBlock`), L269-L308 (`SqueezeExcitationRes2NetBlock`),
//! L159-L245 (`AttentiveStatisticsPooling`), L311-L393 (`Qwen3TTSSpeakerEncoder`),
//! L1941-L1954 (`extract_speaker_embedding`).

use realfft::RealFftPlanner;

use crate::error::{EngineError, Result};
use crate::ggml::{Context, DType, Scheduler, Tensor};
use crate::model_file::ModelFile;
use crate::weights::WeightStore;

use super::hparams::SpeakerEncoder as Params;

const P: &str = "speaker_encoder";
/// The mel's transform size, hop and rate (fixed in the upstream code).
const N_FFT: usize = 1024;
const HOP: usize = 256;
/// Floor of the mel energies before the log, and the epsilon under the magnitude's root.
const MEL_FLOOR: f32 = 1e-5;
const MAGNITUDE_EPS: f32 = 1e-9;
/// Floor of the pooling's variances.
const VARIANCE_FLOOR: f32 = 1e-12;

/// The log-mel features the speaker encoder reads, [frames, mel_dim] row-major (one row
/// per frame), of 24 kHz mono `samples`; `None` for a clip shorter than one transform.
pub fn log_mel(samples: &[f32], mel_dim: usize, sample_rate: u32) -> Option<(Vec<f32>, usize)> {
    let pad = (N_FFT - HOP) / 2;
    let x = crate::dsp::reflect_pad(samples, pad)?;
    if x.len() < N_FFT {
        return None;
    }
    let frames = 1 + (x.len() - N_FFT) / HOP;
    let window = crate::dsp::hann_periodic(N_FFT);
    let filters = crate::dsp::mel_filterbank(sample_rate, N_FFT, mel_dim);
    let bins = N_FFT / 2 + 1;
    let fft = RealFftPlanner::<f32>::new().plan_fft_forward(N_FFT);
    let mut input = fft.make_input_vec();
    let mut spectrum = fft.make_output_vec();
    let mut out = vec![0f32; frames * mel_dim];
    let mut magnitude = vec![0f32; bins];
    for t in 0..frames {
        for (i, v) in input.iter_mut().enumerate() {
            *v = x[t * HOP + i] * window[i];
        }
        fft.process(&mut input, &mut spectrum)
            .expect("sizes from the plan");
        for (m, c) in magnitude.iter_mut().zip(&spectrum) {
            *m = (c.re * c.re + c.im * c.im + MAGNITUDE_EPS).sqrt();
        }
        for (m, row) in filters.chunks(bins).enumerate() {
            let e: f32 = row.iter().zip(&magnitude).map(|(w, v)| w * v).sum();
            out[t * mel_dim + m] = e.max(MEL_FLOOR).ln();
        }
    }
    Some((out, frames))
}

/// The speaker encoder's weights, checked at load.
#[derive(Clone)]
pub struct Speaker {
    p: Params,
}

impl Speaker {
    /// Checks every weight of the speaker encoder in the file.
    pub fn load(file: &ModelFile, p: &Params) -> Result<Self> {
        let c = &p.channels;
        let k = &p.kernels;
        let conv = |name: String, oc: usize, ic: usize, k: usize| -> Result<()> {
            file.expect_dims(&format!("{name}.weight"), &[k as i64, ic as i64, oc as i64])?;
            file.expect_dims(&format!("{name}.bias"), &[oc as i64])
        };
        conv(format!("{P}.blocks.0.conv"), c[0], p.mel_dim, k[0])?;
        for i in 1..4 {
            let b = format!("{P}.blocks.{i}");
            let chunk = c[i] / p.res2net_scale;
            conv(format!("{b}.tdnn1.conv"), c[i], c[i - 1], 1)?;
            for j in 0..p.res2net_scale - 1 {
                conv(
                    format!("{b}.res2net_block.blocks.{j}.conv"),
                    chunk,
                    chunk,
                    k[i],
                )?;
            }
            conv(format!("{b}.tdnn2.conv"), c[i], c[i], 1)?;
            conv(format!("{b}.se_block.conv1"), p.se_channels, c[i], 1)?;
            conv(format!("{b}.se_block.conv2"), c[i], p.se_channels, 1)?;
        }
        conv(format!("{P}.mfa.conv"), c[4], c[4], k[4])?;
        conv(
            format!("{P}.asp.tdnn.conv"),
            p.attention_channels,
            3 * c[4],
            1,
        )?;
        conv(format!("{P}.asp.conv"), c[4], p.attention_channels, 1)?;
        conv(format!("{P}.fc"), p.dim, 2 * c[4], 1)?;
        Ok(Speaker { p: p.clone() })
    }

    /// Graph size of one clip.
    pub fn nodes(&self) -> usize {
        1024 + 64 * self.p.res2net_scale
    }

    /// The x-vector of 24 kHz mono `samples`.
    pub fn x_vector(
        &self,
        w: &WeightStore,
        sched: &mut Scheduler,
        samples: &[f32],
    ) -> Result<Vec<f32>> {
        let p = &self.p;
        let (mel, frames) = log_mel(samples, p.mel_dim, p.sample_rate).ok_or_else(|| {
            EngineError::Usage(
                "the reference audio is shorter than the speaker encoder's window".into(),
            )
        })?;
        // [frames, mel] row-major is [mel, frames] in ggml order; the graph wants time fastest.
        let mut time_major = vec![0f32; mel.len()];
        for t in 0..frames {
            for m in 0..p.mel_dim {
                time_major[m * frames + t] = mel[t * p.mel_dim + m];
            }
        }
        let nodes = self.nodes();
        let ctx = Context::new(nodes, nodes)?;
        let t = frames as i64;
        let x = ctx.new_tensor(DType::F32, &[t, p.mel_dim as i64], "mel");
        x.mark_input();
        let mean_of = ctx.new_tensor(DType::F32, &[t, 1], "mean");
        mean_of.mark_input();
        let sum_of = ctx.new_tensor(DType::F32, &[t, 1], "sum");
        sum_of.mark_input();
        let c = &p.channels;
        let k = &p.kernels;
        let d = &p.dilations;
        let h0 = tdnn(&ctx, w, &format!("{P}.blocks.0.conv"), x, k[0], d[0], true);
        let mut hs = Vec::new();
        let mut h = h0;
        for i in 1..4 {
            h = se_res2net(
                &ctx,
                w,
                &format!("{P}.blocks.{i}"),
                h,
                p,
                k[i],
                d[i],
                mean_of,
            );
            hs.push(h);
        }
        let cat = ctx.concat(ctx.concat(hs[0], hs[1], 1), hs[2], 1);
        let m = tdnn(&ctx, w, &format!("{P}.mfa.conv"), cat, k[4], d[4], true);
        // Attentive statistics pooling with global context.
        let row = |v| row_vector(&ctx, v);
        let mean = row(ctx.mul_mat(m, mean_of));
        let centred = ctx.sub(m, mean);
        let std = ctx.sqrt(ctx.clamp(
            row(ctx.mul_mat(ctx.sqr(centred), mean_of)),
            VARIANCE_FLOOR,
            f32::MAX,
        ));
        let zeros = ctx.scale(m, 0.0);
        let a = ctx.concat(
            ctx.concat(m, ctx.add(zeros, mean), 1),
            ctx.add(zeros, std),
            1,
        );
        let a = tdnn(&ctx, w, &format!("{P}.asp.tdnn.conv"), a, 1, 1, true);
        let a = tdnn(&ctx, w, &format!("{P}.asp.conv"), ctx.tanh(a), 1, 1, false);
        let a = ctx.soft_max(a); // over time (axis 0)
        let mu = ctx.mul_mat(ctx.mul(a, m), sum_of); // [C, 1]
        let spread = ctx.sqr(ctx.sub(m, row(mu)));
        let sg = ctx.sqrt(ctx.clamp(
            ctx.mul_mat(ctx.mul(a, spread), sum_of),
            VARIANCE_FLOOR,
            f32::MAX,
        ));
        let pooled = ctx.concat(mu, sg, 0); // [2C, 1]
        let fc = get(w, &format!("{P}.fc.weight"));
        let fc = ctx.reshape(fc, &[2 * c[4] as i64, p.dim as i64]);
        let xvec = ctx.add(ctx.mul_mat(fc, pooled), get(w, &format!("{P}.fc.bias")));
        xvec.mark_output();
        let mut graph = ctx.new_graph(nodes);
        graph.expand(xvec);
        let means = vec![1.0 / frames as f32; frames];
        let ones = vec![1.0f32; frames];
        sched.compute(
            &mut graph,
            &[(x, &time_major), (mean_of, &means), (sum_of, &ones)],
        )?;
        Ok(xvec.read_f32()?)
    }
}

fn get<'a>(w: &'a WeightStore, name: &str) -> Tensor<'a> {
    w.tensor(name)
        .unwrap_or_else(|| panic!("speaker weight {name} was checked at load"))
}

/// A [C, 1] column as a [1, C] row, which broadcasts over time in [T, C].
fn row_vector<'a>(ctx: &'a Context, v: Tensor<'a>) -> Tensor<'a> {
    let n = v.len() as i64;
    ctx.reshape(v, &[1, n])
}

/// A TDNN layer over `x` [T, IC]: reflection padding "same", the convolution `name`
/// (kernel `k`, dilation `d`) with its bias, and ReLU when `relu`.
///
/// Upstream: modeling_qwen3_tts.py L247-L267 (`TimeDelayNetBlock`).
fn tdnn<'a>(
    ctx: &'a Context,
    w: &'a WeightStore,
    name: &str,
    x: Tensor<'a>,
    k: usize,
    d: usize,
    relu: bool,
) -> Tensor<'a> {
    let total = d * (k - 1);
    let x = if total > 0 {
        ctx.pad_reflect_1d(ctx.cont(x), (total / 2) as i32, (total - total / 2) as i32)
    } else {
        x
    };
    let y = ctx.conv_1d_f32_time_major(get(w, &format!("{name}.weight")), x, 1, 0, d as i32);
    let b = get(w, &format!("{name}.bias"));
    let y = ctx.add(y, ctx.reshape(b, &[1, b.ne()[0]]));
    if relu {
        ctx.relu(y)
    } else {
        y
    }
}

/// An SE-Res2Net block over `x` [T, C_in]: a 1x1 TDNN, the Res2Net chunks (each after the
/// first through its own TDNN, fed the previous chunk's output), a 1x1 TDNN, the
/// squeeze-excitation scale, and the residual.
///
/// Upstream: modeling_qwen3_tts.py L269-L308, L95-L126 and L129-L156.
#[allow(clippy::too_many_arguments)]
fn se_res2net<'a>(
    ctx: &'a Context,
    w: &'a WeightStore,
    b: &str,
    x: Tensor<'a>,
    p: &Params,
    k: usize,
    d: usize,
    mean_of: Tensor<'a>,
) -> Tensor<'a> {
    let y = tdnn(ctx, w, &format!("{b}.tdnn1.conv"), x, 1, 1, true);
    let [t, c, _, _] = y.ne();
    let chunk = c / p.res2net_scale as i64;
    let part = |j: usize| ctx.view_2d_rows(y, t, chunk, j * (t * chunk) as usize);
    let mut out = part(0);
    let mut prev: Option<Tensor<'a>> = None;
    for j in 1..p.res2net_scale {
        let input = match prev {
            Some(o) => ctx.add(part(j), o),
            None => ctx.cont(part(j)),
        };
        let o = tdnn(
            ctx,
            w,
            &format!("{b}.res2net_block.blocks.{}.conv", j - 1),
            input,
            k,
            d,
            true,
        );
        out = ctx.concat(if j == 1 { ctx.cont(out) } else { out }, o, 1);
        prev = Some(o);
    }
    let y = tdnn(ctx, w, &format!("{b}.tdnn2.conv"), out, 1, 1, true);
    // Squeeze-excitation: the mean over time through two 1x1 convolutions.
    let s = ctx.mul_mat(y, mean_of); // [C, 1]
    let lin = |name: &str, v: Tensor<'a>| {
        let wt = get(w, &format!("{b}.se_block.{name}.weight"));
        let [_, ic, oc, _] = wt.ne();
        ctx.add(
            ctx.mul_mat(ctx.reshape(wt, &[ic, oc]), v),
            get(w, &format!("{b}.se_block.{name}.bias")),
        )
    };
    let s = ctx.sigmoid(lin("conv2", ctx.relu(lin("conv1", s))));
    ctx.add(ctx.mul(y, ctx.reshape(s, &[1, c])), x)
}
