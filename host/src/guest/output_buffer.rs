//! The host side of the `toolhost:plugin/output-buffer` import: head/tail buffers a guest
//! creates for output it builds itself. Each one is charged, head, tail and overhead, to the
//! call's memory budget when created and given back when dropped, so a guest cannot grow past
//! its memory limit through buffers either.

use super::bindings::{GuestBuffer, wit_buffer};
use super::state::CallState;
use crate::buffer::HeadTailBuffer;
use wasmtime::component::Resource;

/// Largest head or tail a guest may ask a buffer for.
const MAX_GUEST_BUFFER_PART: u32 = 16 * 1024 * 1024;
/// Bytes charged for a guest buffer beyond its head and tail (struct and table entry).
const BUFFER_OVERHEAD: usize = 256;

impl wit_buffer::Host for CallState {}

impl wit_buffer::HostHeadTailBuffer for CallState {
    async fn new(
        &mut self,
        head_bytes: u32,
        tail_bytes: u32,
    ) -> wasmtime::Result<Resource<GuestBuffer>> {
        let head = head_bytes.clamp(1, MAX_GUEST_BUFFER_PART) as usize;
        let tail = tail_bytes.clamp(1, MAX_GUEST_BUFFER_PART) as usize;
        let size = head + tail + BUFFER_OVERHEAD;
        self.limiter.charge(size, "a guest buffer")?;
        Ok(self.table.push(GuestBuffer {
            inner: HeadTailBuffer::new(head, tail),
            size,
        })?)
    }

    async fn write(
        &mut self,
        buffer: Resource<GuestBuffer>,
        data: Vec<u8>,
    ) -> wasmtime::Result<()> {
        self.table.get_mut(&buffer)?.inner.write(&data);
        Ok(())
    }

    async fn total_bytes(&mut self, buffer: Resource<GuestBuffer>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&buffer)?.inner.total_bytes())
    }

    async fn render(
        &mut self,
        buffer: Resource<GuestBuffer>,
    ) -> wasmtime::Result<wit_buffer::Rendered> {
        let rendered = self.table.get(&buffer)?.inner.render();
        Ok(wit_buffer::Rendered {
            text: rendered.text,
            truncation: rendered.truncation.map(Into::into),
        })
    }

    async fn drop(&mut self, buffer: Resource<GuestBuffer>) -> wasmtime::Result<()> {
        let removed = self.table.delete(buffer)?;
        self.limiter.release(removed.size);
        Ok(())
    }
}
