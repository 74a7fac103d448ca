//! The handoff between the pushing thread and the flush thread: a gate that opens when the
//! frozen A generation is durable, which `sync` waits on.

#[cfg(all(loom, test))]
use loom::sync::{Condvar, Mutex};
#[cfg(not(all(loom, test)))]
use std::sync::{Condvar, Mutex};

use std::sync::Arc;

/// Opens when the flushed A generation is durable: `sync` waits on it.
#[derive(Default)]
pub(crate) struct Gate {
    state: Mutex<Option<bool>>,
    cv: Condvar,
}

impl Gate {
    /// Records the outcome of the generation's sync.
    pub(crate) fn open(&self, ok: bool) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.is_none() {
            *s = Some(ok);
        }
        self.cv.notify_all();
    }

    /// Waits for the outcome.
    pub(crate) fn wait(&self) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while s.is_none() {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.unwrap_or(false)
    }
}

/// Closes the gate with "failed" if the flush ends before opening it.
pub(crate) struct GateGuard(pub(crate) Arc<Gate>);

impl Drop for GateGuard {
    fn drop(&mut self) {
        self.0.open(false);
    }
}

/// The handoff between the pushing thread and the flush thread, model-checked with loom:
/// `RUSTFLAGS="--cfg loom" cargo test --release --no-default-features --lib loom`.
///
/// The flush thread makes the frozen generation durable, then opens the gate; the pushing
/// thread's `sync` waits on the gate and acknowledges only if it opened with success; a
/// flush that fails or panics before opening it leaves it failed (the guard), which poisons
/// the sieve; the result is applied only after the join. Loom explores every interleaving.
#[cfg(all(loom, test))]
mod loom_model {
    use super::{Gate, GateGuard};
    use loom::sync::atomic::{AtomicBool, Ordering};
    use loom::sync::Arc;
    use loom::thread;

    /// One freeze: the flush thread syncs (or fails to), opens the gate, and returns its
    /// outcome; the pushing thread syncs while it runs, then joins.
    fn handoff(sync_ok: bool, panic_before_gate: bool) {
        loom::model(move || {
            // The gate is shared through std's Arc, as in the sieve; its Mutex and Condvar are
            // loom's.
            let gate = std::sync::Arc::new(Gate::default());
            let durable = Arc::new(AtomicBool::new(false));
            let (g, d) = (gate.clone(), durable.clone());
            let flusher = thread::spawn(move || {
                let guard = GateGuard(g.clone());
                if panic_before_gate {
                    // Dropping the guard without opening: as a panic or an early `?` does.
                    drop(guard);
                    return Err("flush failed before the gate");
                }
                if !sync_ok {
                    drop(guard);
                    return Err("fsync failed");
                }
                d.store(true, Ordering::Release);
                guard.0.open(true);
                drop(guard); // opening again with "failed" changes nothing
                Ok(())
            });
            // The pushing thread: `sync` waits for the gate.
            let acked = gate.wait();
            if acked {
                // Acknowledged: the generation is durable, and stays acknowledged.
                assert!(durable.load(Ordering::Acquire));
            }
            let outcome = flusher.join().expect("the flush thread ended");
            // The sieve is poisoned exactly when the flush failed; an acknowledgement is
            // given only by a flush that made the generation durable.
            assert_eq!(outcome.is_ok(), sync_ok && !panic_before_gate);
            if acked {
                assert!(outcome.is_ok());
            }
            // A later wait (another `sync`) sees the same answer.
            assert_eq!(gate.wait(), acked);
        });
    }

    #[test]
    fn loom_a_successful_flush_acknowledges_after_the_generation_is_durable() {
        handoff(true, false);
    }

    #[test]
    fn loom_a_failed_fsync_never_acknowledges() {
        handoff(false, false);
    }

    #[test]
    fn loom_a_flush_that_dies_before_the_gate_never_acknowledges_nor_hangs() {
        handoff(true, true);
    }
}
