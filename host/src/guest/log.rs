//! A guest's stdout or stderr: the first bytes are kept for the host log (and for naming a
//! panic in an error), the rest is counted and dropped. Writing never fails, so a chatty
//! policy cannot make its own call fail by printing too much.

use bytes::Bytes;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// What one stream captured.
#[derive(Default)]
struct Captured {
    kept: Vec<u8>,
    dropped: u64,
}

/// A bounded in-memory output stream for a guest; clones share the capture.
#[derive(Clone)]
pub struct GuestLog {
    capacity: usize,
    captured: Arc<Mutex<Captured>>,
}

impl GuestLog {
    /// A stream keeping at most `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        GuestLog {
            capacity,
            captured: Arc::default(),
        }
    }

    /// The kept text (lossy UTF-8), with a note of how much was dropped.
    pub fn contents(&self) -> String {
        let captured = self.captured.lock().unwrap_or_else(|e| e.into_inner());
        let mut text = String::from_utf8_lossy(&captured.kept).into_owned();
        if captured.dropped > 0 {
            text.push_str(&format!(
                "\n[... {} more bytes dropped]\n",
                captured.dropped
            ));
        }
        text
    }

    fn append(&self, data: &[u8]) {
        let mut captured = self.captured.lock().unwrap_or_else(|e| e.into_inner());
        let room = self.capacity.saturating_sub(captured.kept.len());
        let take = room.min(data.len());
        captured.kept.extend_from_slice(&data[..take]);
        captured.dropped += (data.len() - take) as u64;
    }
}

#[async_trait::async_trait]
impl Pollable for GuestLog {
    async fn ready(&mut self) {}
}

#[async_trait::async_trait]
impl OutputStream for GuestLog {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

impl AsyncWrite for GuestLog {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for GuestLog {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestLog {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_bytes_and_counts_the_rest() {
        let log = GuestLog::new(8);
        let mut stream = log.p2_stream();
        for _ in 0..3 {
            stream
                .write(Bytes::from_static(b"hello "))
                .expect("never fails");
        }
        assert_eq!(stream.check_write().expect("always writable"), 64 * 1024);
        assert_eq!(log.contents(), "hello he\n[... 10 more bytes dropped]\n");
    }
}
