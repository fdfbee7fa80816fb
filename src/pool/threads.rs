//! The pool's threads: starting them, the worker loop, and recording their exit.

use std::io;
use std::sync::Arc;

use super::builder::PoolBuilder;
use super::core::Core;
use super::monitor::{self, Watched};
use crate::contain::contain;
#[cfg(target_os = "linux")]
use crate::contain::log_contained;

/// Builds the shared state of the pool `builder` describes and starts its threads: one
/// worker per slot, and the stuck-job monitor unless it is turned off.
pub(crate) fn start(builder: &PoolBuilder) -> io::Result<Arc<Core>> {
    let stuck_after = builder.validated_stuck_after()?;
    let nice = builder.validated_nice()?;
    let idle = builder.worker_sched_idle;
    let core = Arc::new(Core::new(builder)?);
    let weak = Arc::downgrade(&core);
    let hook: std::sync::Weak<dyn crate::gate::limit::OnClosedIdle> = weak;
    core.limit.on_closed_idle(hook);
    for index in 0..core.workers.count() {
        let worker = core.clone();
        let name = format!("{}-{index}", core.limit.name());
        spawn(&core, builder, name, true, move || {
            if idle {
                enter_idle_class();
            }
            lower_priority(nice);
            work(&worker, index)
        })?;
    }
    if let Some(threshold) = stuck_after {
        let watcher = core.clone();
        let name = format!("{}-monitor", core.limit.name());
        spawn(&core, builder, name, false, move || {
            let watched = Watched {
                monitor: &watcher.monitor,
                workers: &watcher.workers,
                stuck: &watcher.stats.stuck,
                reporter: &watcher.reporter,
            };
            monitor::watch(watched, threshold)
        })?;
    }
    Ok(core)
}

/// The loop of worker `index`: take a job, run it, until the pool is closed and no
/// admitted job is left.
fn work(core: &Core, index: usize) {
    // Whether this worker's last job came back to back with the one before (see
    // `Workers::next_task`): it then spins for the next one before parking.
    let mut back_to_back = false;
    while let Some(task) = core
        .workers
        .next_task(index, &mut back_to_back, || core.is_done())
    {
        // A task contains every call into user code itself and gives its slot back even
        // while unwinding; this only keeps the loop alive should anything still escape.
        contain("a pool worker's task", || task.run(index));
    }
}

/// Sets the calling worker's nice value to `nice`, unless it is 0 or the thread already
/// runs at a higher value (see [`PoolBuilder::worker_nice`]).
#[cfg(target_os = "linux")]
fn lower_priority(nice: u8) {
    use rustix::process::{getpriority_process, setpriority_process};
    let nice = i32::from(nice);
    if nice == 0 || getpriority_process(None).is_ok_and(|current| current >= nice) {
        return;
    }
    // On Linux, `setpriority(PRIO_PROCESS, 0)` changes the calling thread only.
    if let Err(err) = setpriority_process(None, nice) {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("a pool worker");
        log_contained!(
            warn,
            "{name}: cannot set nice value {nice}, running on at the inherited one: {err}"
        );
    }
}

/// Per-thread nice values are a Linux feature: elsewhere the setting does nothing.
#[cfg(not(target_os = "linux"))]
fn lower_priority(_nice: u8) {}

/// Moves the calling worker into the idle scheduling class (see
/// [`PoolBuilder::worker_sched_idle`]), keeping its nice value.
#[cfg(target_os = "linux")]
fn enter_idle_class() {
    use rustix::process::{getpriority_process, setpriority_process};
    use thread_priority::{
        NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy,
        set_thread_priority_and_policy, thread_native_id, thread_schedule_policy,
    };
    let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
    let inherited = getpriority_process(None).ok();
    // `thread_priority` sets the class, then the nice value to the class's only priority
    // (0), which fails without privilege for a thread that inherited a higher one. What
    // counts is the class: read it back (glibc reports the policy it last set
    // successfully) rather than trust the result.
    let result = set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, idle);
    if thread_schedule_policy().ok() != Some(idle) {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("a pool worker");
        log_contained!(
            warn,
            "{name}: cannot enter the idle scheduling class, running on in its own: {result:?}"
        );
    }
    // With privilege the reset succeeded: a worker never runs above the thread that built
    // the pool, whatever class it may leave for.
    if let Some(inherited) = inherited {
        if getpriority_process(None).is_ok_and(|now| now != inherited) {
            if let Err(err) = setpriority_process(None, inherited) {
                // Only a negative value can fail here (lowering a nice value needs
                // privilege): the worker then runs at 0, still not above its builder.
                let thread = std::thread::current();
                let name = thread.name().unwrap_or("a pool worker");
                log_contained!(warn, "{name}: cannot restore nice value {inherited}: {err}");
            }
        }
    }
}

/// The idle class is a Linux feature: elsewhere the setting does nothing.
#[cfg(not(target_os = "linux"))]
fn enter_idle_class() {}

/// Records a thread's exit when dropped, however the thread ends.
struct Exit {
    core: Arc<Core>,
    worker: bool,
}

impl Drop for Exit {
    fn drop(&mut self) {
        self.core.thread_exited(self.worker);
    }
}

fn spawn(
    core: &Arc<Core>,
    builder: &PoolBuilder,
    name: String,
    worker: bool,
    body: impl FnOnce() + Send + 'static,
) -> io::Result<()> {
    let mut thread = std::thread::Builder::new().name(name.clone());
    if let Some(size) = builder.stack_size {
        thread = thread.stack_size(size);
    }
    core.thread_starting(worker);
    let exit = Exit {
        core: core.clone(),
        worker,
    };
    match thread.spawn(move || {
        let _exit = exit;
        body();
    }) {
        Ok(handle) => {
            core.thread_started(handle);
            Ok(())
        }
        Err(err) => {
            // The closure (and with it `exit`) was dropped: the thread is counted out.
            // Threads already running exit once they see the pool closed.
            core.close();
            Err(io::Error::new(
                err.kind(),
                format!("cannot spawn thread `{name}`: {err}"),
            ))
        }
    }
}
