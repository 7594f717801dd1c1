//! A tx packet's payload where it lies: runs of guest memory, by host address, that a
//! connection writes to its host socket straight from there (no copy through a buffer of its
//! own), in the turn that read them. What the socket does not take by the end of that turn is
//! copied into the connection's buffer, so a span never outlives the turn: the handler returns a
//! turn's tx chains to the guest only after the muxer's flush, which empties every connection's
//! spans.

use std::collections::VecDeque;

/// Up to this many iovecs go to one `writev` (the buffer's two slices, then the spans).
pub const IOVECS_PER_WRITE: usize = 64;

/// `len` bytes at host address `ptr`.
#[derive(Debug, Clone, Copy)]
pub struct Span {
    ptr: *const u8,
    len: usize,
}

// SAFETY: a span is an address and a length. It is dereferenced only by the connection that
// holds it, on the thread running the handler, within the turn that created it; spans are never
// held when a muxer moves between threads (every turn's flush empties them).
unsafe impl Send for Span {}

impl Span {
    /// `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `[ptr, ptr + len)` must stay mapped and readable until the span is written or copied:
    /// for guest memory, until the chain it came from goes back to the guest.
    pub unsafe fn new(ptr: *const u8, len: usize) -> Self {
        Self { ptr, len }
    }

    /// Bytes that live for the whole program (control packets' empty payloads, tests).
    pub fn of(bytes: &'static [u8]) -> Self {
        Self {
            ptr: bytes.as_ptr(),
            len: bytes.len(),
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// As an iovec for `writev`.
    pub fn iovec(&self) -> libc::iovec {
        libc::iovec {
            iov_base: self.ptr as *mut libc::c_void,
            iov_len: self.len,
        }
    }

    /// Drops its first `n` bytes (`n ≤ len`).
    pub fn advance(&mut self, n: usize) {
        let n = n.min(self.len);
        self.ptr = self.ptr.wrapping_add(n);
        self.len -= n;
    }

    /// Appends its bytes to `out`.
    pub fn copy_into(&self, out: &mut VecDeque<u8>) {
        let mut chunk = [0u8; 4096];
        let mut done = 0;
        // Bounded: each pass copies up to a chunk of `len`.
        while done < self.len {
            let n = (self.len - done).min(chunk.len());
            // SAFETY: `new`'s contract keeps `[ptr, ptr + len)` mapped and readable until the
            // span is written or copied (here); `chunk` is a separate local buffer of at least
            // `n` bytes. The guest may write the bytes meanwhile: any value is a valid `u8`.
            unsafe {
                std::ptr::copy_nonoverlapping(self.ptr.add(done), chunk.as_mut_ptr(), n);
            }
            out.extend(&chunk[..n]);
            done += n;
        }
    }
}

/// The sum of the spans' lengths.
pub fn total(spans: &[Span]) -> usize {
    spans.iter().map(Span::len).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_and_copy_take_the_rest() {
        let mut s = Span::of(b"hello world");
        assert_eq!(s.len(), 11);
        s.advance(6);
        let mut out = VecDeque::new();
        s.copy_into(&mut out);
        assert_eq!(out.iter().copied().collect::<Vec<_>>(), b"world");
        s.advance(99);
        assert!(s.is_empty());
        assert_eq!(total(&[Span::of(b"ab"), Span::of(b"cde")]), 5);
    }

    #[test]
    fn a_span_longer_than_a_chunk_is_copied_whole() {
        let bytes: &'static [u8] = Box::leak((0..10_000u32).map(|i| i as u8).collect());
        let mut out = VecDeque::new();
        Span::of(bytes).copy_into(&mut out);
        assert!(out.iter().copied().eq(bytes.iter().copied()));
    }
}
