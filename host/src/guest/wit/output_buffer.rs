//! The host side of the `toolhost:plugin/output-buffer` import: head/tail buffers a guest
//! creates for output it builds itself. Each one is charged, head, tail and overhead, to the
//! call's memory budget when created and given back when dropped, so a guest cannot grow past
//! its memory limit through buffers either.
//!
//! The older interfaces (0.5.0, 0.4.0, 0.3.0, 0.2.0, then 0.1.0), at the end, delegate to the
//! current one.

use super::latest::{GuestBuffer, wit_buffer};
use super::v0_1_0::{old_buffer, truncation};
use super::{v0_2_0, v0_3_0, v0_4_0, v0_5_0};
use crate::buffer::HeadTailBuffer;
use crate::guest::state::CallState;
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

// The 0.5.0, 0.4.0, 0.3.0 and 0.2.0 interfaces: the same buffers, delegated to the current
// interface.

/// Serve the `output-buffer` interface of frozen version `$version`, the current one under
/// its own types.
macro_rules! same_as_current {
    ($version:ident) => {
        impl $version::output_buffer::Host for CallState {}

        impl $version::output_buffer::HostHeadTailBuffer for CallState {
            async fn new(
                &mut self,
                head_bytes: u32,
                tail_bytes: u32,
            ) -> wasmtime::Result<Resource<GuestBuffer>> {
                wit_buffer::HostHeadTailBuffer::new(self, head_bytes, tail_bytes).await
            }

            async fn write(
                &mut self,
                buffer: Resource<GuestBuffer>,
                data: Vec<u8>,
            ) -> wasmtime::Result<()> {
                wit_buffer::HostHeadTailBuffer::write(self, buffer, data).await
            }

            async fn total_bytes(
                &mut self,
                buffer: Resource<GuestBuffer>,
            ) -> wasmtime::Result<u64> {
                wit_buffer::HostHeadTailBuffer::total_bytes(self, buffer).await
            }

            async fn render(
                &mut self,
                buffer: Resource<GuestBuffer>,
            ) -> wasmtime::Result<$version::output_buffer::Rendered> {
                let rendered = wit_buffer::HostHeadTailBuffer::render(self, buffer).await?;
                Ok(rendered.into())
            }

            async fn drop(&mut self, buffer: Resource<GuestBuffer>) -> wasmtime::Result<()> {
                wit_buffer::HostHeadTailBuffer::drop(self, buffer).await
            }
        }
    };
}

same_as_current!(v0_5_0);
same_as_current!(v0_4_0);
same_as_current!(v0_3_0);
same_as_current!(v0_2_0);

// The 0.1.0 interface: the same buffers, delegated to the current interface.

impl old_buffer::Host for CallState {}

impl old_buffer::HostHeadTailBuffer for CallState {
    async fn new(
        &mut self,
        head_bytes: u32,
        tail_bytes: u32,
    ) -> wasmtime::Result<Resource<GuestBuffer>> {
        wit_buffer::HostHeadTailBuffer::new(self, head_bytes, tail_bytes).await
    }

    async fn write(
        &mut self,
        buffer: Resource<GuestBuffer>,
        data: Vec<u8>,
    ) -> wasmtime::Result<()> {
        wit_buffer::HostHeadTailBuffer::write(self, buffer, data).await
    }

    async fn total_bytes(&mut self, buffer: Resource<GuestBuffer>) -> wasmtime::Result<u64> {
        wit_buffer::HostHeadTailBuffer::total_bytes(self, buffer).await
    }

    async fn render(
        &mut self,
        buffer: Resource<GuestBuffer>,
    ) -> wasmtime::Result<old_buffer::Rendered> {
        let rendered = wit_buffer::HostHeadTailBuffer::render(self, buffer).await?;
        Ok(old_buffer::Rendered {
            text: rendered.text,
            truncation: rendered.truncation.map(truncation),
        })
    }

    async fn drop(&mut self, buffer: Resource<GuestBuffer>) -> wasmtime::Result<()> {
        wit_buffer::HostHeadTailBuffer::drop(self, buffer).await
    }
}
