//! The bulk paths' data buffers: allocated once per stream, on their own pages.
//!
//! Why page-aligned: the kernel copies socket data to and from user memory with
//! `rep movsb`, which on an AMD EPYC test VM ran at 60% of its speed when
//! the destination was 16 bytes past a cache-line boundary (75 against 125 GB/s for 128
//! KiB in cache), and that is where glibc's `malloc` puts a block of 128 KiB (16 bytes
//! into an `mmap`ed page). A receive buffer starting on a page lets at least the first
//! segment of every read land aligned. See docs/tuning.md.

use bytes::Bytes;
use memmap2::{MmapMut, MmapOptions};
use std::io;
use std::ops::{Deref, DerefMut};

/// `len` bytes (at least one) of anonymous memory that starts on a page boundary.
pub struct DataBuffer(MmapMut);

impl DataBuffer {
    /// Zeroed bytes, as a receive buffer.
    pub fn zeroed(len: usize) -> io::Result<DataBuffer> {
        // Anonymous pages come zeroed from the kernel.
        MmapOptions::new()
            .len(len.max(1))
            .map_anon()
            .map(DataBuffer)
    }

    /// Every byte `fill`, as a send payload. Writing them also touches every page now
    /// rather than on the first send.
    pub fn filled(len: usize, fill: u8) -> io::Result<DataBuffer> {
        let mut buf = DataBuffer::zeroed(len)?;
        buf.fill(fill);
        Ok(buf)
    }

    /// The buffer as shared, immutable `Bytes` (the queued senders' payload), without
    /// a copy: it stays where it is.
    pub fn into_bytes(self) -> Bytes {
        Bytes::from_owner(self.0)
    }
}

impl Deref for DataBuffer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl DerefMut for DataBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    #[test]
    fn buffers_start_on_a_page_and_hold_what_was_asked() {
        for len in [1, 1472, 32 << 10, (128 << 10) + 1] {
            let zeroed = DataBuffer::zeroed(len).unwrap();
            assert_eq!(zeroed.len(), len);
            assert_eq!(zeroed.as_ptr() as usize % PAGE, 0, "{len}");
            assert!(zeroed.iter().all(|&b| b == 0));

            let filled = DataBuffer::filled(len, 0xa5).unwrap();
            assert_eq!(filled.as_ptr() as usize % PAGE, 0, "{len}");
            assert!(filled.iter().all(|&b| b == 0xa5));

            // As Bytes the payload stays in place: same address, same bytes.
            let at = filled.as_ptr();
            let bytes = filled.into_bytes();
            assert_eq!(bytes.as_ptr(), at);
            assert_eq!(bytes.len(), len);
            assert_eq!(bytes.slice(..1)[0], 0xa5);
        }
    }

    #[test]
    fn an_empty_request_still_gets_one_byte() {
        let buf = DataBuffer::zeroed(0).unwrap();
        assert_eq!(buf.len(), 1);
    }
}
