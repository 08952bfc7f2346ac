//! Speech-recognition requests of one model decoded together (`batch` in server.json).
//! A request joins its model's queue; while fewer requests lead than the model has
//! workers, it leads: it takes a worker and runs the waiting requests, up to `batch`
//! at a time, through `AsrModel::run_batch`, round after round until none waits, and
//! each request gets its own answer. With a `vad_model` the requests of a round run one
//! after another, each with its chunks decoded together.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use audiocpp_engine::asr::{AsrModel, AsrOutput, DecodeOptions};
use audiocpp_engine::audio::AudioLimits;
use audiocpp_engine::vad::VadModel;
use tokio::sync::oneshot;

use crate::body::decode_upload;
use crate::error::{engine_error, internal, ApiError};
use crate::pool::{with_model, Loaded, Slot};
use crate::AppState;

/// One request's transcription as a round gave it.
pub struct Done {
    pub out: AsrOutput,
    /// The round's wall time (decode and inference of all its requests).
    pub wall_ms: f64,
    /// Requests decoded in the round.
    pub batch: usize,
}

/// A request waiting for a round.
struct Job {
    audio: Vec<u8>,
    language: Option<String>,
    words: bool,
    done: oneshot::Sender<Result<Done, ApiError>>,
}

/// A model's waiting requests and how many requests lead rounds.
#[derive(Default)]
pub struct Queue {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    leaders: usize,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while the lock was held left plain data behind: keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `job`; true when its request is to lead (fewer than `workers` lead).
    fn push(&self, job: Job, workers: usize) -> bool {
        let mut s = self.lock();
        s.jobs.push_back(job);
        let lead = s.leaders < workers.max(1);
        if lead {
            s.leaders += 1;
        }
        lead
    }

    /// Up to `n` waiting requests; none (and one leader fewer) when none waits.
    fn take(&self, n: usize) -> Option<Vec<Job>> {
        let mut s = self.lock();
        if s.jobs.is_empty() {
            s.leaders -= 1;
            return None;
        }
        let n = n.min(s.jobs.len());
        Some(s.jobs.drain(..n).collect())
    }

    /// A leader stopped without emptying the queue (no worker, a failed model, a
    /// panic): one leader fewer, and when none is left the waiting requests get
    /// `error`, since nobody would run them.
    fn abandon(&self, error: &ApiError) {
        let mut s = self.lock();
        s.leaders = s.leaders.saturating_sub(1);
        if s.leaders == 0 {
            for job in s.jobs.drain(..) {
                let _ = job.done.send(Err(error.duplicate()));
            }
        }
    }
}

/// Transcribes `audio` on `slot`'s model in a round with the other requests waiting
/// for it (see the module's doc).
pub async fn transcribe(
    state: &Arc<AppState>,
    slot: &Slot,
    audio: Vec<u8>,
    language: Option<String>,
    words: bool,
) -> Result<Done, ApiError> {
    let (done, answer) = oneshot::channel();
    let job = Job {
        audio,
        language,
        words,
        done,
    };
    if !slot.queue.push(job, slot.parallel()) {
        return answer.await.unwrap_or_else(|_| Err(internal()));
    }
    let queue = Arc::clone(&slot.queue);
    let emptied = Arc::new(AtomicBool::new(false));
    let (limits, batch) = (state.cfg.audio_limits(), slot.entry.batch);
    let flag = Arc::clone(&emptied);
    let led = with_model(state, slot, move |loaded| {
        let Loaded::Asr(model, vad) = loaded else {
            return Err(ApiError::bad_request("this model does not do asr"));
        };
        while let Some(jobs) = queue.take(batch) {
            run_round(model, vad.as_deref_mut(), jobs, &limits, batch);
        }
        flag.store(true, Ordering::Relaxed);
        Ok(())
    })
    .await;
    if let Err(e) = led {
        if !emptied.load(Ordering::Relaxed) {
            slot.queue.abandon(&e);
        }
        // This request's job went with a round that failed, or was failed above.
        return answer.await.unwrap_or(Err(e));
    }
    answer.await.unwrap_or_else(|_| Err(internal()))
}

/// Decodes `jobs` together and answers each.
fn run_round(
    model: &mut AsrModel,
    vad: Option<&mut VadModel>,
    jobs: Vec<Job>,
    limits: &AudioLimits,
    batch: usize,
) {
    let started = Instant::now();
    let n = jobs.len();
    let mut ready = Vec::with_capacity(n);
    for job in jobs {
        let mut opts = model.default_options();
        if let Some(l) = job.language.as_ref().filter(|l| !l.is_empty()) {
            opts.language = l.clone();
        }
        opts.word_timestamps = job.words;
        match decode_upload(&job.audio, model.sample_rate(), limits) {
            Ok(samples) => ready.push((samples, opts, job.done)),
            Err(e) => {
                let _ = job.done.send(Err(e));
            }
        }
    }
    let outs: Vec<Result<AsrOutput, ApiError>> = match vad {
        Some(vad) => {
            let params = vad.asr_chunking_params();
            ready
                .iter()
                .map(|(samples, opts, _)| {
                    model
                        .run_samples_with_vad(samples, opts, vad, &params, batch)
                        .map_err(engine_error)
                })
                .collect()
        }
        None => {
            let inputs: Vec<(&[f32], &DecodeOptions)> =
                ready.iter().map(|(s, o, _)| (&s[..], o)).collect();
            match model.run_batch(&inputs, inputs.len()) {
                Ok(outs) => outs.into_iter().map(|o| o.map_err(engine_error)).collect(),
                Err(e) => {
                    let e = engine_error(e);
                    ready.iter().map(|_| Err(e.duplicate())).collect()
                }
            }
        }
    };
    let wall_ms = started.elapsed().as_secs_f64() * 1000.0;
    for ((_, _, done), out) in ready.into_iter().zip(outs) {
        let _ = done.send(out.map(|out| Done {
            out,
            wall_ms,
            batch: n,
        }));
    }
}
