//! The guest's stderr: counted and its end kept, never passed on.
//!
//! A plugin that crashes usually says why on stderr first (a Rust panic
//! message, a Python traceback). The byte count tells the deadline logic that
//! a crash report is being written ([`super::clock`]); the kept end (where a
//! panic message or an exception's text is) is appended to the failure's
//! detail. Writes never fail and never block, so a
//! chatty plugin behaves as it did with stderr discarded.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Bytes of stderr kept for failure details (the last ones written).
pub(crate) const KEEP: usize = 2048;

/// A shared handle on one instance's stderr.
#[derive(Clone, Default)]
pub(crate) struct ErrorOutput {
    written: Arc<AtomicU64>,
    tail: Arc<Mutex<VecDeque<u8>>>,
}

impl ErrorOutput {
    /// Bytes written since the instance started.
    pub fn bytes(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// The text written after the first `from` bytes, or its last
    /// [`KEEP`] bytes.
    pub fn text_since(&self, from: u64) -> String {
        let tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        let since = self.bytes().saturating_sub(from).min(tail.len() as u64) as usize;
        let bytes: Vec<u8> = tail.iter().skip(tail.len() - since).copied().collect();
        String::from_utf8_lossy(&bytes).trim().to_string()
    }

    fn record(&self, buf: &[u8]) {
        let mut tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        self.written.fetch_add(buf.len() as u64, Ordering::Relaxed);
        let keep = &buf[buf.len().saturating_sub(KEEP)..];
        let overflow = (tail.len() + keep.len()).saturating_sub(KEEP);
        tail.drain(..overflow);
        tail.extend(keep);
    }
}

impl IsTerminal for ErrorOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for ErrorOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for ErrorOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.record(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for ErrorOutput {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for ErrorOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.record(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_everything_keeps_the_end() {
        let out = ErrorOutput::default();
        out.record(b"first line\n");
        let mark = out.bytes();
        out.record(&vec![b'x'; 3 * KEEP]);
        out.record(b"\npanicked: the reason\n");
        assert_eq!(out.bytes(), mark + 3 * KEEP as u64 + 22);
        let text = out.text_since(mark);
        assert!(text.ends_with("panicked: the reason"), "{text}");
        assert!(text.len() <= KEEP && !text.contains("first line"));
        out.record(b"more");
        assert_eq!(out.text_since(out.bytes() - 4), "more");
    }
}
