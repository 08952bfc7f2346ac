//! Where a model's time goes, without a profiler: while a thread records
//! ([`start_recording`]), every [`Scheduler::compute_with`] on it logs its graph's
//! allocation, input upload and compute times, the scheduler's split and copy counts,
//! and the time at which each stage tensor ([`mark_stage`]) was finished on its device.
//! A stage mark makes the scheduler stop and wait for the device at that node (ggml's
//! eval callback), so stage times are exact for what ran before them and the marks cost
//! one synchronisation each; nothing is recorded, and no callback set, otherwise.

use std::cell::RefCell;
use std::ffi::{c_void, CStr};
use std::time::Instant;

use super::{sys, Scheduler, Tensor};

/// Name prefix of a stage tensor.
const STAGE_PREFIX: &str = "stage:";

/// One graph computation's times, in seconds.
#[derive(Debug, Clone, Default)]
pub struct GraphTiming {
    /// Nodes in the graph.
    pub nodes: usize,
    /// Pieces the scheduler cut the graph into (one per change of backend).
    pub splits: i32,
    /// The scheduler's input copies (pipeline copies of split inputs).
    pub copies: i32,
    /// `ggml_backend_sched_alloc_graph`: assigning backends and allocating tensors.
    pub alloc_s: f64,
    /// Writing the inputs.
    pub upload_s: f64,
    /// Computing the graph, up to the device's last result.
    pub compute_s: f64,
    /// Each stage mark reached, with the time from the start of the compute.
    pub stages: Vec<(String, f64)>,
}

thread_local! {
    static LOG: RefCell<Option<Vec<GraphTiming>>> = const { RefCell::new(None) };
}

/// Starts (or restarts, emptying the log) recording on this thread.
pub fn start_recording() {
    LOG.with(|l| *l.borrow_mut() = Some(Vec::new()));
}

/// Stops recording on this thread and returns what was recorded.
pub fn take_recording() -> Vec<GraphTiming> {
    LOG.with(|l| l.borrow_mut().take()).unwrap_or_default()
}

/// True while this thread records.
pub fn recording() -> bool {
    LOG.with(|l| l.borrow().is_some())
}

/// Names `t` as the end of stage `stage`: while recording, the time it is finished is
/// logged (`t` must be a computed node of the graph, not a view of an input).
pub fn mark_stage(t: Tensor<'_>, stage: &str) {
    t.set_name(&format!("{STAGE_PREFIX}{stage}"));
}

/// The eval callback's state: when the compute began and the stages reached.
struct StageClock {
    start: Instant,
    stages: Vec<(String, f64)>,
}

/// ggml's eval callback: asks to stop at every stage tensor, then logs the time. A
/// panic in it is caught (none may cross into ggml): the compute goes on, that stage
/// unrecorded.
unsafe extern "C" fn on_node(t: *mut sys::ggml_tensor, ask: bool, user_data: *mut c_void) -> bool {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: ggml passes a live tensor, whose name is a NUL-terminated array.
        let name = unsafe { CStr::from_ptr((*t).name.as_ptr()) }.to_string_lossy();
        // ggml names the views and copies of a named tensor after it ("<name> (cont)"):
        // only the tensor itself ends its stage.
        let Some(stage) = name.strip_prefix(STAGE_PREFIX).filter(|s| !s.contains(' ')) else {
            return !ask;
        };
        if !ask {
            // SAFETY: the user data is the StageClock that `compute_recorded` keeps alive
            // (and lends to nothing else) during the compute that calls this.
            let clock = unsafe { &mut *(user_data as *mut StageClock) };
            let elapsed = clock.start.elapsed().as_secs_f64();
            clock.stages.push((stage.to_string(), elapsed));
        }
        true
    }))
    .unwrap_or(true)
}

impl Scheduler {
    /// Computes `graph` (already allocated, inputs written) with the stage clock on,
    /// and logs the timing; `alloc_s` and `upload_s` were measured by the caller.
    pub(super) fn compute_recorded(
        &mut self,
        graph: *mut sys::ggml_cgraph,
        alloc_s: f64,
        upload_s: f64,
    ) -> sys::ggml_status {
        let sched = self.raw.as_ptr();
        let mut clock = StageClock {
            start: Instant::now(),
            stages: Vec::new(),
        };
        // SAFETY: the scheduler and graph are live; the callback's user data outlives
        // the compute, and the callback is removed before `clock` goes away.
        let status = unsafe {
            sys::ggml_backend_sched_set_eval_callback(
                sched,
                Some(on_node),
                &mut clock as *mut StageClock as *mut c_void,
            );
            let status = sys::ggml_backend_sched_graph_compute(sched, graph);
            sys::ggml_backend_sched_set_eval_callback(sched, None, std::ptr::null_mut());
            status
        };
        let compute_s = clock.start.elapsed().as_secs_f64();
        // SAFETY: pure queries of live objects.
        let (nodes, splits, copies) = unsafe {
            (
                sys::ggml_graph_n_nodes(graph) as usize,
                sys::ggml_backend_sched_get_n_splits(sched),
                sys::ggml_backend_sched_get_n_copies(sched),
            )
        };
        let timing = GraphTiming {
            nodes,
            splits,
            copies,
            alloc_s,
            upload_s,
            compute_s,
            stages: clock.stages,
        };
        LOG.with(|l| {
            if let Some(log) = l.borrow_mut().as_mut() {
                log.push(timing);
            }
        });
        status
    }
}
