//! The one WebAssembly engine of a host and what every plugin load shares: the engine's
//! configuration, the linker holding every import a guest may use (WASI p2 and the toolhost
//! interfaces), the epoch ticker that lets CPU limits interrupt a running guest, the process
//! backend granted to plugins and the compiled-component cache.

use super::bindings::ShellTools;
use super::cache::ComponentCache;
use super::errors::EngineError;
use super::state::CallState;
use super::v0_1_0;
use crate::process::ProcessBackend;
use crate::sandbox::SandboxSettings;
use std::sync::Arc;
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
}

impl Loader {
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
        // The frozen 0.1.0 imports, beside the current ones (their names carry the version).
        v0_1_0::ShellTools::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
            .map_err(engine_error)?;
        start_epoch_ticker(&engine)
            .map_err(|e| EngineError(format!("cannot start the epoch ticker thread: {e}")))?;
        Ok(Loader {
            engine,
            linker,
            backend,
            cache,
            sandbox: Arc::new(sandbox),
        })
    }
}

/// Advance the engine's epoch every [`EPOCH_TICK`] until the engine is dropped. Without it a
/// runaway guest would never be interrupted, so failing to start it is an error.
fn start_epoch_ticker(engine: &Engine) -> std::io::Result<()> {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("toolhost-epoch".to_string())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .map(drop)
}
