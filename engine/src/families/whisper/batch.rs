//! Several requests of one model decoded as one batch. Each request runs its windows
//! on a thread of its own (the host's work: the log-mel, the token rules, the
//! fallback, the segments), while the calling thread runs every graph on the model's
//! network, each request in a cache slot of its own; the decoder steps of the
//! requests waiting for one run as one graph over their slots
//! ([`WhisperNet::build_step`]), which reads the weights once for all of them, and so
//! do the windows waiting to be encoded on a GPU ([`WhisperNet::encode_windows`]). On the
//! CPU a step's column gets the bits a lone step of its slot gets
//! ([`crate::layers::Layers::batches_columns`]), so a request's transcript does not
//! depend on the requests beside it; on a GPU its products may round otherwise.

use std::sync::mpsc::{channel, Receiver, Sender};

use crate::asr::{DecodeOptions, Transcript};
use crate::error::{EngineError, Result};
use crate::ggml::{GgmlError, Scheduler};

use super::decode::{max_new, Decoding, WindowNet};
use super::model::{Read, StepInput, WhisperNet};
use super::row::Row;
use super::Whisper;

/// What a request asks of the network ([`WindowNet`]'s calls).
enum Op {
    Encode(Vec<f32>),
    Prompt(Vec<u32>),
    Align(Vec<u32>, Vec<usize>),
    Step(StepInput),
    /// The request is over (sent when its member is dropped, also on a panic).
    Done,
}

/// The answer to an [`Op`].
enum Reply {
    Encoded,
    Logits(Vec<f32>),
    Aligned(Vec<f32>, Vec<Vec<f32>>),
    Row(Row),
}

/// A request's side of the batch: its calls go to the thread that runs the graphs.
struct Member {
    /// Its index in the batch, which is also its cache slot.
    index: usize,
    positions: usize,
    ops: Sender<(usize, Op)>,
    replies: Receiver<Result<Reply>>,
}

impl Member {
    fn ask(&mut self, op: Op) -> Result<Reply> {
        let gone = || EngineError::Ggml(GgmlError::Failed("the batch's graphs stopped".into()));
        self.ops.send((self.index, op)).map_err(|_| gone())?;
        self.replies.recv().map_err(|_| gone())?
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        // The runner has stopped when this fails; then nobody waits for it.
        let _ = self.ops.send((self.index, Op::Done));
    }
}

/// An answer of another kind than its call's: a bug of this module.
fn mismatch() -> EngineError {
    EngineError::Ggml(GgmlError::Failed(
        "the batch answered a call with another call's result".into(),
    ))
}

impl WindowNet for Member {
    fn encode(&mut self, mel: &[f32]) -> Result<()> {
        match self.ask(Op::Encode(mel.to_vec()))? {
            Reply::Encoded => Ok(()),
            _ => Err(mismatch()),
        }
    }

    fn prompt(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        match self.ask(Op::Prompt(tokens.to_vec()))? {
            Reply::Logits(logits) => Ok(logits),
            _ => Err(mismatch()),
        }
    }

    fn align(&mut self, tokens: &[u32], layers: &[usize]) -> Result<(Vec<f32>, Vec<Vec<f32>>)> {
        match self.ask(Op::Align(tokens.to_vec(), layers.to_vec()))? {
            Reply::Aligned(logits, scores) => Ok((logits, scores)),
            _ => Err(mismatch()),
        }
    }

    fn step(&mut self, input: StepInput) -> Result<Row> {
        match self.ask(Op::Step(input))? {
            Reply::Row(row) => Ok(row),
            _ => Err(mismatch()),
        }
    }

    fn positions(&self) -> usize {
        self.positions
    }
}

impl Whisper {
    /// Transcribes each `(samples, options)` of `jobs` as [`Whisper::transcribe`] does,
    /// the requests decoded as one batch (see the module's doc). The outer error is a
    /// failure of the batch as a whole (its caches could not be made); each request
    /// has its own result.
    pub fn transcribe_batch(
        &mut self,
        jobs: &[(&[f32], &DecodeOptions)],
    ) -> Result<Vec<Result<Transcript>>> {
        let prompts: Vec<Result<Vec<u32>>> = jobs.iter().map(|(_, o)| self.prompt(o)).collect();
        self.net.add_slots(jobs.len())?;
        let (decoding, net, sched, step_sched) = self.parts();
        let hp = decoding.hp;
        std::thread::scope(|scope| {
            let (ops, received) = channel();
            let mut replies = Vec::with_capacity(jobs.len());
            let mut positions = Vec::with_capacity(jobs.len());
            let mut running = Vec::new();
            let mut results: Vec<Option<Result<Transcript>>> = Vec::new();
            for (index, ((samples, opts), prompt)) in jobs.iter().zip(prompts).enumerate() {
                let prompt = match prompt {
                    Ok(p) => p,
                    Err(e) => {
                        results.push(Some(Err(e)));
                        replies.push(None);
                        positions.push(0);
                        continue;
                    }
                };
                results.push(None);
                let (reply, replied) = channel();
                replies.push(Some(reply));
                let n_kv = prompt.len() + max_new(hp, &prompt);
                positions.push(n_kv);
                let mut member = Member {
                    index,
                    positions: n_kv,
                    ops: ops.clone(),
                    replies: replied,
                };
                let (samples, opts) = (*samples, *opts);
                let thread = scope.spawn(move || decoding.run(&mut member, samples, opts, &prompt));
                running.push((index, thread));
            }
            drop(ops);
            let runner = Runner {
                net,
                sched,
                step_sched,
                decoding,
                replies: &replies,
                positions: &positions,
            };
            let served = runner.serve(&received);
            // Members still waiting get their error as the runner's senders drop.
            drop(replies);
            for (index, thread) in running {
                results[index] = Some(thread.join().unwrap_or_else(|panic| {
                    Err(EngineError::Ggml(GgmlError::Failed(format!(
                        "a request of the batch panicked: {}",
                        crate::ggml::panic_text(&*panic)
                    ))))
                }));
            }
            served?;
            Ok(results
                .into_iter()
                .map(|r| r.expect("every request has a result"))
                .collect())
        })
    }
}

/// The thread that runs the batch's graphs.
struct Runner<'a, 'w> {
    net: &'w WhisperNet,
    sched: &'w mut Scheduler,
    step_sched: &'w mut Scheduler,
    decoding: Decoding<'w>,
    /// Each member's reply channel (`None` for a request that never started).
    replies: &'a [Option<Sender<Result<Reply>>>],
    /// Each member's step positions (its `n_kv`).
    positions: &'a [usize],
}

/// The members' calls waiting for the runner.
struct Pending {
    ops: Vec<Option<Op>>,
    /// Members not done yet.
    live: Vec<bool>,
}

impl Pending {
    /// Waits until every live member has a call waiting; false once none is live.
    fn gather(&mut self, received: &Receiver<(usize, Op)>) -> bool {
        loop {
            let waiting = self
                .live
                .iter()
                .zip(&self.ops)
                .all(|(live, op)| !live || op.is_some());
            if waiting {
                return self.live.iter().any(|&l| l);
            }
            // Every member's sender is gone: nobody is left to wait for.
            let Ok((m, op)) = received.recv() else {
                return false;
            };
            match op {
                Op::Done => {
                    self.live[m] = false;
                    self.ops[m] = None;
                }
                op => self.ops[m] = Some(op),
            }
        }
    }

    /// The members whose call is a decoder step, in order.
    fn stepping(&self) -> Vec<usize> {
        (0..self.ops.len())
            .filter(|&m| matches!(self.ops[m], Some(Op::Step(_))))
            .collect()
    }
}

impl Runner<'_, '_> {
    /// Answers the members' calls until every one is done: each round waits until
    /// every live member has a call, runs the calls that are not steps one by one,
    /// then the steps as one graph (built again only when the members stepping
    /// change).
    fn serve(self, received: &Receiver<(usize, Op)>) -> Result<()> {
        let n = self.replies.len();
        let mut pending = Pending {
            ops: (0..n).map(|_| None).collect(),
            live: self.replies.iter().map(Option::is_some).collect(),
        };
        if self.net.steps_every_slot(n) {
            return self.serve_every_slot(received, pending);
        }
        while pending.gather(received) {
            run_alone(self.net, self.sched, self.replies, &mut pending);
            let members = pending.stepping();
            if members.is_empty() {
                continue;
            }
            let slots: Vec<(usize, usize)> =
                members.iter().map(|&m| (m, self.positions[m])).collect();
            let eot = self.decoding.tok.specials().eot as usize;
            let net = self.net;
            let ctx = net.step_context(members.len())?;
            let (mut graph, step) = net.build_step(&ctx, &slots, eot, self.decoding.suppress)?;
            let mut prepared = self.step_sched.prepare(&mut graph)?;
            // The same members step again and again while none starts a window.
            loop {
                let inputs: Vec<StepInput> = members
                    .iter()
                    .map(|&m| match pending.ops[m].take() {
                        Some(Op::Step(input)) => input,
                        _ => unreachable!("`stepping` listed only steps"),
                    })
                    .collect();
                let ran = step.run_columns(&mut prepared, &inputs);
                for (i, &m) in members.iter().enumerate() {
                    let row = match &ran {
                        Ok(()) => step.read(i, inputs[i].read).map(Reply::Row),
                        Err(e) => Err(EngineError::Ggml(GgmlError::Failed(format!(
                            "the batch's decoder step: {e}"
                        )))),
                    };
                    reply(self.replies, m, row);
                }
                if !pending.gather(received) {
                    return Ok(());
                }
                run_alone(net, self.sched, self.replies, &mut pending);
                if pending.stepping() != members {
                    break;
                }
            }
        }
        Ok(())
    }
}

impl Runner<'_, '_> {
    /// [`Self::serve`] where a step runs over every slot at once
    /// ([`WhisperNet::steps_every_slot`]): one graph for the whole batch, in which a
    /// slot that is not stepping (its member between windows, done or never started,
    /// or no member's) feeds a token whose key and value go to its last position,
    /// which no step of a member reads unwritten.
    fn serve_every_slot(
        self,
        received: &Receiver<(usize, Op)>,
        mut pending: Pending,
    ) -> Result<()> {
        // Every slot of the network, also those beyond this batch's members (a smaller
        // batch after a larger one), so that the step is one batch.
        let n = self.net.slots();
        let n_kv = self.positions.iter().copied().max().unwrap_or(1).max(1);
        let slots: Vec<(usize, usize)> = (0..n).map(|m| (m, n_kv)).collect();
        let eot = self.decoding.tok.specials().eot as usize;
        let net = self.net;
        let ctx = net.step_context(n)?;
        let (mut graph, step) = net.build_step(&ctx, &slots, eot, self.decoding.suppress)?;
        let mut prepared = self.step_sched.prepare(&mut graph)?;
        let idle = StepInput {
            token: 0,
            n_past: n_kv - 1,
            read: Read::Summary,
        };
        while pending.gather(received) {
            run_alone(net, self.sched, self.replies, &mut pending);
            let members = pending.stepping();
            if members.is_empty() {
                continue;
            }
            let inputs: Vec<StepInput> = (0..n)
                .map(|m| match pending.ops.get_mut(m).and_then(Option::take) {
                    Some(Op::Step(input)) => input,
                    _ => idle,
                })
                .collect();
            let reads: Vec<Read> = inputs.iter().map(|i| i.read).collect();
            let ran = step
                .run_columns(&mut prepared, &inputs)
                .and_then(|()| step.rows(&reads));
            match ran {
                Ok(mut rows) => {
                    for &m in &members {
                        let row = std::mem::replace(&mut rows[m], Row::full(Vec::new()));
                        reply(self.replies, m, Ok(Reply::Row(row)));
                    }
                }
                Err(e) => {
                    for &m in &members {
                        let e = GgmlError::Failed(format!("the batch's decoder step: {e}"));
                        reply(self.replies, m, Err(EngineError::Ggml(e)));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Runs the waiting calls that are not steps on the members' slots of `net`: the
/// windows to encode as one graph ([`WhisperNet::encode_windows`], as many at a time
/// as [`WhisperNet::windows_per_encode`] says), the others one by one.
fn run_alone(
    net: &WhisperNet,
    sched: &mut Scheduler,
    replies: &[Option<Sender<Result<Reply>>>],
    pending: &mut Pending,
) {
    let encoding: Vec<usize> = (0..pending.ops.len())
        .filter(|&m| matches!(pending.ops[m], Some(Op::Encode(_))))
        .collect();
    for group in encoding.chunks(net.windows_per_encode()) {
        let windows: Vec<(usize, &[f32])> = group
            .iter()
            .map(|&m| match &pending.ops[m] {
                Some(Op::Encode(mel)) => (m, mel.as_slice()),
                _ => unreachable!("`encoding` listed only encodes"),
            })
            .collect();
        let encoded = net
            .encode_windows(sched, &windows)
            .map_err(|e| e.to_string());
        for &m in group {
            pending.ops[m] = None;
            let answer = match &encoded {
                Ok(()) => Ok(Reply::Encoded),
                Err(e) => Err(EngineError::Ggml(GgmlError::Failed(format!(
                    "the batch's encoder: {e}"
                )))),
            };
            reply(replies, m, answer);
        }
    }
    for m in 0..pending.ops.len() {
        let answer = match pending.ops[m].take() {
            Some(Op::Prompt(tokens)) => net
                .decode(sched, m, &tokens, 0, tokens.len())
                .map(Reply::Logits),
            Some(Op::Align(tokens, layers)) => net
                .align_pass(sched, m, &tokens, &layers)
                .map(|(logits, scores)| Reply::Aligned(logits, scores)),
            // Steps wait for the batch's graph.
            other => {
                pending.ops[m] = other;
                continue;
            }
        };
        reply(replies, m, answer);
    }
}

/// Sends member `m` its answer.
fn reply(replies: &[Option<Sender<Result<Reply>>>], m: usize, answer: Result<Reply>) {
    if let Some(Some(to)) = replies.get(m) {
        // A member that is gone (it panicked) needs no answer.
        let _ = to.send(answer);
    }
}
