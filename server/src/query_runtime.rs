//! The thread pool that runs query execution and projection epochs, apart
//! from the one that serves connections.
//!
//! Tokio does not preempt tasks, so CPU-heavy work sharing worker threads
//! with the protocol front ends delays everything else on them: other
//! sessions' messages, cancel requests, `/health`. Execution therefore runs
//! here and the front ends await its results; a cancel is answered at once,
//! and the aborted execution stops at its next yield point (see
//! [`crate::yield_points`]).

use std::future::Future;

use tokio::runtime::{Builder, Runtime};
use tokio::task::JoinHandle;

use crate::error::ServerError;

pub struct QueryRuntime {
    /// Always `Some` until drop: a runtime must be shut down without
    /// blocking, since the database may be dropped inside async code.
    runtime: Option<Runtime>,
}

impl QueryRuntime {
    /// One worker per available core.
    pub fn new() -> Result<Self, ServerError> {
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
        let runtime = Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name("weir-query")
            .thread_stack_size(crate::WORKER_STACK_BYTES)
            .enable_all()
            .build()
            .map_err(|e| ServerError::internal(format!("cannot start the query runtime: {e}")))?;
        Ok(Self {
            runtime: Some(runtime),
        })
    }

    /// The query threads' handle, for long-lived tasks started elsewhere.
    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime
            .as_ref()
            .expect("the runtime lives until drop")
            .handle()
    }

    /// Runs `future` on the query threads; dropping the handle does not
    /// stop it, aborting does.
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.runtime
            .as_ref()
            .expect("the runtime lives until drop")
            .spawn(future)
    }
}

impl Drop for QueryRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
