//! Several requests of one model decoded as one batch. Each request runs its windows
//! on a thread of its own (the host's work: the log-mel, the token rules, the
//! fallback, the segments), while the calling thread runs every graph on the model's
//! network, each request in a cache slot of its own; the decoder steps of the
//! requests waiting for one run as one graph over their slots
//! ([`WhisperNet::build_step`]), which reads the weights once for all of them. On the
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
    /// the requests decoded as one batch (see the module's doc) of at most `width` at
    /// once: as one ends, the next waiting one starts in its cache slot, so the batch
    /// stays full while requests wait. The outer error is a failure of the batch as a
    /// whole (its caches could not be made); each request has its own result.
    pub fn transcribe_batch(
        &mut self,
        jobs: &[(&[f32], &DecodeOptions)],
        width: usize,
    ) -> Result<Vec<Result<Transcript>>> {
        let mut results: Vec<Option<Result<Transcript>>> = Vec::with_capacity(jobs.len());
        let mut startable = Vec::with_capacity(jobs.len());
        for (job, (_, opts)) in jobs.iter().enumerate() {
            match self.prompt(opts) {
                Ok(prompt) => {
                    results.push(None);
                    startable.push((job, prompt));
                }
                Err(e) => results.push(Some(Err(e))),
            }
        }
        let width = width.clamp(1, startable.len().max(1));
        self.net.add_slots(width)?;
        let (decoding, net, sched, step_sched) = self.parts();
        let hp = decoding.hp;
        // Each request's step positions: its prompt and the most tokens after it.
        let n_kv = |prompt: &[u32]| prompt.len() + max_new(hp, prompt);
        let most_positions = startable.iter().map(|(_, p)| n_kv(p)).max().unwrap_or(1);
        std::thread::scope(|scope| {
            let (ops, received) = channel();
            let mut running = Vec::new();
            let mut waiting = startable.into_iter();
            // Starts the next waiting request in `slot`: its reply channel and positions.
            let mut start = |slot: usize| {
                let (job, prompt) = waiting.next()?;
                let (reply, replied) = channel();
                let positions = n_kv(&prompt);
                let mut member = Member {
                    index: slot,
                    positions,
                    ops: ops.clone(),
                    replies: replied,
                };
                let (samples, opts) = jobs[job];
                let thread = scope.spawn(move || decoding.run(&mut member, samples, opts, &prompt));
                running.push((job, thread));
                Some((reply, positions))
            };
            let mut slots = Slots {
                replies: Vec::with_capacity(width),
                positions: Vec::with_capacity(width),
                start: &mut start,
            };
            for slot in 0..width {
                slots.fill(slot);
            }
            let runner = Runner {
                net,
                sched,
                step_sched,
                decoding,
                most_positions,
            };
            let served = runner.serve(&received, &mut slots);
            // Members still waiting get their error as the runner's senders drop.
            drop(slots);
            for (job, thread) in running {
                results[job] = Some(thread.join().unwrap_or_else(|panic| {
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

/// A member's reply channel and step positions, as [`Slots::start`] gives them.
type Started = (Sender<Result<Reply>>, usize);

/// The batch's cache slots: the member in each and how to start the next request.
struct Slots<'a> {
    /// Each slot's member's reply channel (`None` once no request is left for it).
    replies: Vec<Option<Sender<Result<Reply>>>>,
    /// Each slot's member's step positions (its `n_kv`).
    positions: Vec<usize>,
    /// Starts the next waiting request in a slot; `None` when none waits.
    start: &'a mut dyn FnMut(usize) -> Option<Started>,
}

impl Slots<'_> {
    /// Starts the next waiting request in `slot` (pushed at the end while the slots
    /// are made); whether one was left.
    fn fill(&mut self, slot: usize) -> bool {
        let started = (self.start)(slot);
        let live = started.is_some();
        let (reply, positions) = started.map_or((None, 0), |(r, p)| (Some(r), p));
        if slot < self.replies.len() {
            self.replies[slot] = reply;
            self.positions[slot] = positions;
        } else {
            self.replies.push(reply);
            self.positions.push(positions);
        }
        live
    }
}

/// The thread that runs the batch's graphs.
struct Runner<'w> {
    net: &'w WhisperNet,
    sched: &'w mut Scheduler,
    step_sched: &'w mut Scheduler,
    decoding: Decoding<'w>,
    /// The most step positions of any request of the batch.
    most_positions: usize,
}

/// The members' calls waiting for the runner.
struct Pending {
    ops: Vec<Option<Op>>,
    /// Slots whose member is not done yet.
    live: Vec<bool>,
}

impl Pending {
    /// Waits until every live member has a call waiting; false once none is live. A
    /// member that is done hands its slot to the next waiting request.
    fn gather(&mut self, received: &Receiver<(usize, Op)>, slots: &mut Slots<'_>) -> bool {
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
                    self.ops[m] = None;
                    self.live[m] = slots.fill(m);
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

impl Runner<'_> {
    /// Answers the members' calls until every one is done: each round waits until
    /// every live member has a call, runs the calls that are not steps one by one,
    /// then the steps as one graph (built again only when the members stepping
    /// change).
    fn serve(self, received: &Receiver<(usize, Op)>, slots: &mut Slots<'_>) -> Result<()> {
        let n = slots.replies.len();
        let mut pending = Pending {
            ops: (0..n).map(|_| None).collect(),
            live: slots.replies.iter().map(Option::is_some).collect(),
        };
        if self.net.steps_every_slot(n) {
            return self.serve_every_slot(received, pending, slots);
        }
        while pending.gather(received, slots) {
            run_alone(self.net, self.sched, &slots.replies, &mut pending);
            let members = pending.stepping();
            if members.is_empty() {
                continue;
            }
            let at: Vec<(usize, usize)> =
                members.iter().map(|&m| (m, slots.positions[m])).collect();
            let eot = self.decoding.tok.specials().eot as usize;
            let net = self.net;
            let ctx = net.step_context(members.len())?;
            let (mut graph, step) = net.build_step(&ctx, &at, eot, self.decoding.suppress)?;
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
                    reply(&slots.replies, m, row);
                }
                if !pending.gather(received, slots) {
                    return Ok(());
                }
                run_alone(net, self.sched, &slots.replies, &mut pending);
                if pending.stepping() != members {
                    break;
                }
            }
        }
        Ok(())
    }

    /// [`Self::serve`] where a step runs over every slot at once
    /// ([`WhisperNet::steps_every_slot`]): one graph for the whole batch, in which a
    /// slot that is not stepping (its member between windows, done or never started,
    /// or no member's) feeds a token whose key and value go to its last position,
    /// which no step of a member reads unwritten.
    fn serve_every_slot(
        self,
        received: &Receiver<(usize, Op)>,
        mut pending: Pending,
        slots: &mut Slots<'_>,
    ) -> Result<()> {
        // Every slot of the network, also those beyond this batch's members (a smaller
        // batch after a larger one), so that the step is one batch.
        let n = self.net.slots();
        let n_kv = self.most_positions.max(1);
        let every: Vec<(usize, usize)> = (0..n).map(|m| (m, n_kv)).collect();
        let eot = self.decoding.tok.specials().eot as usize;
        let net = self.net;
        let ctx = net.step_context(n)?;
        let (mut graph, step) = net.build_step(&ctx, &every, eot, self.decoding.suppress)?;
        let mut prepared = self.step_sched.prepare(&mut graph)?;
        let idle = StepInput {
            token: 0,
            n_past: n_kv - 1,
            read: Read::Summary,
        };
        while pending.gather(received, slots) {
            run_alone(net, self.sched, &slots.replies, &mut pending);
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
                        reply(&slots.replies, m, Ok(Reply::Row(row)));
                    }
                }
                Err(e) => {
                    for &m in &members {
                        let e = GgmlError::Failed(format!("the batch's decoder step: {e}"));
                        reply(&slots.replies, m, Err(EngineError::Ggml(e)));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Runs the waiting calls that are not steps, each on the member's slot of `net`.
fn run_alone(
    net: &WhisperNet,
    sched: &mut Scheduler,
    replies: &[Option<Sender<Result<Reply>>>],
    pending: &mut Pending,
) {
    for m in 0..pending.ops.len() {
        let answer = match pending.ops[m].take() {
            Some(Op::Encode(mel)) => net.encode(sched, m, &mel).map(|_| Reply::Encoded),
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
