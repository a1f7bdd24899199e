//! TEMPORARY stand-in until the real manager lands.
use super::*;
use std::sync::Arc;
#[derive(Default, Clone)]
pub struct ProcessManagerConfig { pub state_dir: Option<std::path::PathBuf> }
pub struct ProcessManager;
impl ProcessManager {
    pub fn new(_c: ProcessManagerConfig) -> Arc<Self> { Arc::new(ProcessManager) }
    pub async fn shutdown(&self) {}
}
impl ProcessBackend for ProcessManager {
    fn start<'a>(&'a self, _s: &'a str, _r: StartRequest) -> BoxFuture<'a, Result<String, ProcessError>> { Box::pin(async { Err(ProcessError::Failed("stub".into())) }) }
    fn wait<'a>(&'a self, _s: &'a str, _i: &'a str, _t: Duration, _f: ReadFrom) -> BoxFuture<'a, Result<OutputSnapshot, ProcessError>> { Box::pin(async { Err(ProcessError::Failed("stub".into())) }) }
    fn read(&self, _s: &str, _i: &str, _f: ReadFrom) -> Result<OutputSnapshot, ProcessError> { Err(ProcessError::Failed("stub".into())) }
    fn list(&self, _s: &str) -> Vec<ProcessInfo> { vec![] }
    fn signal(&self, _s: &str, _i: &str, _g: Signal) -> Result<(), ProcessError> { Err(ProcessError::Failed("stub".into())) }
    fn end_scope<'a>(&'a self, _s: &'a str) -> BoxFuture<'a, ()> { Box::pin(async {}) }
}
