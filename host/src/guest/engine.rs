//! The one WebAssembly engine of a host and what every plugin load shares: the engine's
//! configuration, the linker holding every import a guest may use (WASI p2 and the toolhost
//! interfaces), the epoch ticker that lets CPU limits interrupt a running guest, the process
//! backend granted to plugins and the compiled-component cache.

use super::cache::ComponentCache;
use super::errors::EngineError;
use super::state::CallState;
use super::wit::latest::ShellTools;
use super::wit::{v0_1_0, v0_2_0, v0_3_0, v0_4_0, v0_5_0};
use crate::process::ProcessBackend;
use crate::sandbox::SandboxSettings;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;
use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine};

/// How often the engine's epoch advances: the granularity of CPU-limit checks and of yielding
/// a busy guest back to the async executor.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// What loading a plugin needs. Built once per host; cheap to clone.
#[derive(Clone)]
pub(crate) struct Loader {
    /// The engine every component is compiled for.
    pub(crate) engine: Engine,
    /// WASI plus the toolhost imports.
    pub(crate) linker: Linker<CallState>,
    /// Granted to plugins with the process grant.
    pub(crate) backend: Arc<dyn ProcessBackend>,
    /// Compiled-component cache; `None` compiles every component afresh.
    pub(crate) cache: Option<ComponentCache>,
    /// The operator's confinement settings, which every plugin's grant narrows.
    pub(crate) sandbox: Arc<SandboxSettings>,
    /// Advances the engine's epoch while a guest runs.
    pub(crate) ticker: Arc<EpochTicker>,
    /// What the people of every scope allowed "from now on" (`approvals`).
    pub(crate) approvals: Arc<crate::ask::approvals::Approvals>,
}

impl Loader {
    /// Whether the component cache holds `bytes` compiled for this engine.
    pub(crate) fn has_compiled(&self, bytes: &[u8]) -> bool {
        super::cache::has_compiled(&self.engine, bytes, self.cache.as_ref())
    }

    /// Set up the engine and linker and start the epoch ticker.
    pub(crate) fn new(
        backend: Arc<dyn ProcessBackend>,
        cache: Option<ComponentCache>,
        sandbox: SandboxSettings,
    ) -> Result<Loader, EngineError> {
        let engine_error = |e: wasmtime::Error| EngineError(format!("{e:#}"));
        let mut config = Config::new();
        config.epoch_interruption(true);
        config.wasm_component_model(true);
        let engine = Engine::new(&config).map_err(engine_error)?;
        let mut linker: Linker<CallState> = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(engine_error)?;
        ShellTools::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).map_err(engine_error)?;
        // The frozen 0.5.0, 0.4.0, 0.3.0, 0.2.0 and 0.1.0 imports, beside the current ones
        // (their names carry the version).
        v0_5_0::ShellTools::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
            .map_err(engine_error)?;
        v0_4_0::ShellTools::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
            .map_err(engine_error)?;
        v0_3_0::ShellTools::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
            .map_err(engine_error)?;
        v0_2_0::ShellTools::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
            .map_err(engine_error)?;
        v0_1_0::ShellTools::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
            .map_err(engine_error)?;
        let ticker = EpochTicker::start(&engine)
            .map_err(|e| EngineError(format!("cannot start the epoch ticker thread: {e}")))?;
        Ok(Loader {
            engine,
            linker,
            backend,
            cache,
            sandbox: Arc::new(sandbox),
            ticker,
            approvals: Arc::default(),
        })
    }
}

/// The thread that advances the engine's epoch every [`EPOCH_TICK`] while at least one guest
/// runs, and sleeps without waking while none does (an idle host does not tick). Without it a
/// runaway guest would never be interrupted, so failing to start it is an error. The thread
/// ends when the last handle is dropped, or the engine.
pub(crate) struct EpochTicker {
    shared: Arc<TickerShared>,
}

#[derive(Default)]
struct TickerShared {
    state: Mutex<TickerState>,
    wake: Condvar,
    /// Epochs advanced so far.
    ticks: AtomicU64,
}

impl TickerShared {
    fn state(&self) -> std::sync::MutexGuard<'_, TickerState> {
        crate::lock(&self.state)
    }
}

#[derive(Default)]
struct TickerState {
    /// Guests running now.
    running: usize,
    /// No handle is left.
    stopped: bool,
}

/// One guest running: the ticker ticks while any of these is alive.
pub(crate) struct Running<'a>(&'a EpochTicker);

impl EpochTicker {
    fn start(engine: &Engine) -> std::io::Result<Arc<EpochTicker>> {
        let shared = Arc::new(TickerShared::default());
        let weak = engine.weak();
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name("toolhost-epoch".to_string())
            .spawn(move || {
                let shared = thread_shared;
                loop {
                    {
                        let state = shared
                            .wake
                            .wait_while(shared.state(), |s| s.running == 0 && !s.stopped)
                            .unwrap_or_else(PoisonError::into_inner);
                        if state.stopped {
                            return;
                        }
                    }
                    let Some(engine) = weak.upgrade() else { return };
                    engine.increment_epoch();
                    drop(engine);
                    shared.ticks.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(EPOCH_TICK);
                }
            })?;
        Ok(Arc::new(EpochTicker { shared }))
    }

    /// Mark a guest as running until the returned guard is dropped.
    pub(crate) fn running(&self) -> Running<'_> {
        let mut state = self.shared.state();
        state.running += 1;
        if state.running == 1 {
            self.shared.wake.notify_one();
        }
        Running(self)
    }

    /// Epochs advanced so far.
    #[cfg(test)]
    fn ticks(&self) -> u64 {
        self.shared.ticks.load(Ordering::Relaxed)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut state = self.0.shared.state();
        state.running = state.running.saturating_sub(1);
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        state.stopped = true;
        self.shared.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits until `condition` holds, for at most 5 s.
    fn eventually(condition: impl Fn() -> bool) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if condition() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        condition()
    }

    #[test]
    fn the_epoch_advances_only_while_a_guest_runs() {
        let engine = Engine::default();
        let ticker = EpochTicker::start(&engine).expect("ticker");
        // Idle: not a single tick over many tick periods.
        std::thread::sleep(EPOCH_TICK * 10);
        assert_eq!(ticker.ticks(), 0);
        let running = ticker.running();
        let at_start = ticker.ticks();
        assert!(eventually(|| ticker.ticks() >= at_start + 3));
        drop(running);
        // The tick under way may finish; then nothing more.
        assert!(eventually(|| {
            let before = ticker.ticks();
            std::thread::sleep(EPOCH_TICK * 3);
            ticker.ticks() == before
        }));
        let stopped_at = ticker.ticks();
        std::thread::sleep(EPOCH_TICK * 10);
        assert_eq!(ticker.ticks(), stopped_at);
    }
}
