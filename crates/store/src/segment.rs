//! Segments: fixed-size regions of memory a shard appends its items to. A segment is
//! mapped once (an anonymous private mapping, so untouched pages cost nothing and unmapping
//! returns every page at once) and given back whole, never piecemeal: the memory of freed
//! items is reused by moving a segment's live items out and unmapping it, not by an
//! allocator that keeps freed chunks resident between live ones.

use std::ptr::NonNull;

use crate::item::PAGE_BYTES;

/// Smallest segment: room for the longest inline item (header, 250-byte key, a value just
/// under [`crate::EXTERNAL_VALUE_MIN`]) several times over.
pub const SEGMENT_BYTES_MIN: usize = 16 * 1024;
/// Largest segment.
pub const SEGMENT_BYTES_MAX: usize = 1024 * 1024;
/// Pages given back at once behind the eviction cursor (fewer system calls).
const RELEASE_BYTES_MIN: usize = 4 * PAGE_BYTES;

/// Zero-initialised memory of its own: an anonymous mapping, or (if the kernel refuses one)
/// a heap allocation. A segment's records and the key index's slots live in one each.
pub(crate) enum AnonymousMemory {
    Mapped { start: NonNull<u8>, len: usize },
    Heap(Box<[u8]>),
}

// SAFETY: the mapping is owned exclusively by this value (no other pointer into it exists
// outside borrows of it), so moving it to another thread is sound.
unsafe impl Send for AnonymousMemory {}

impl AnonymousMemory {
    pub fn new(len: usize) -> AnonymousMemory {
        if len == 0 {
            return AnonymousMemory::Heap(Box::default());
        }
        // SAFETY: an anonymous private mapping at an address the kernel chooses; the result
        // is checked for MAP_FAILED before use.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        match NonNull::new(raw.cast::<u8>()) {
            Some(start) if raw != libc::MAP_FAILED => AnonymousMemory::Mapped { start, len },
            _ => AnonymousMemory::Heap(vec![0u8; len].into_boxed_slice()),
        }
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            // SAFETY: `start` points at `len` readable, zero-initialised (anonymous mapping)
            // bytes for the life of `self`.
            AnonymousMemory::Mapped { start, len } => unsafe {
                std::slice::from_raw_parts(start.as_ptr(), *len)
            },
            AnonymousMemory::Heap(bytes) => bytes,
        }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            // SAFETY: as in `bytes`; `&mut self` guarantees exclusive access.
            AnonymousMemory::Mapped { start, len } => unsafe {
                std::slice::from_raw_parts_mut(start.as_ptr(), *len)
            },
            AnonymousMemory::Heap(bytes) => bytes,
        }
    }

    /// Gives the whole pages of the first `len` bytes back to the kernel (a mapping only:
    /// heap memory stays); they read as zeros afterwards.
    fn release_front(&mut self, len: usize) {
        if let AnonymousMemory::Mapped { start, len: mapped } = self {
            let pages = len.min(*mapped) / PAGE_BYTES * PAGE_BYTES;
            if pages > 0 {
                // SAFETY: the range lies within the mapping made in `new`; the caller no
                // longer reads those bytes (see `Segment::release_before`).
                unsafe {
                    libc::madvise(start.as_ptr().cast(), pages, libc::MADV_DONTNEED);
                }
            }
        }
    }

    /// Pages of the mapping resident in memory (tests only).
    #[cfg(test)]
    fn resident_pages(&self) -> usize {
        let AnonymousMemory::Mapped { start, len } = self else {
            return 0;
        };
        let mut residency = vec![0u8; len.div_ceil(PAGE_BYTES)];
        // SAFETY: the range is exactly the mapping, and `residency` has a byte per page.
        let result = unsafe { libc::mincore(start.as_ptr().cast(), *len, residency.as_mut_ptr()) };
        assert_eq!(result, 0, "mincore on a segment");
        residency.iter().filter(|&&page| page & 1 != 0).count()
    }
}

impl Drop for AnonymousMemory {
    fn drop(&mut self) {
        if let AnonymousMemory::Mapped { start, len } = self {
            // SAFETY: the range is exactly the mapping made in `new`, and no reference into
            // it outlives `self`.
            unsafe {
                libc::munmap(start.as_ptr().cast(), *len);
            }
        }
    }
}

impl std::fmt::Debug for AnonymousMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AnonymousMemory::Mapped { len, .. } => write!(f, "Mapped({len} bytes)"),
            AnonymousMemory::Heap(bytes) => write!(f, "Heap({} bytes)", bytes.len()),
        }
    }
}

/// One segment: items appended one after the other from offset 0 up to `used`; `dead` of
/// those bytes belong to items removed or replaced since. The records before `first` are
/// all dead and their whole pages given back to the kernel: walks start at `first`.
#[derive(Debug)]
pub(crate) struct Segment {
    memory: AnonymousMemory,
    /// Bytes appended so far (the next item goes here).
    pub used: usize,
    /// Bytes of items no longer stored.
    pub dead: usize,
    /// Offset of the first record that may still be read (a record boundary).
    pub first: usize,
    /// Bytes at the start whose pages were given back.
    released: usize,
}

impl Segment {
    /// A new, empty segment of `capacity` bytes.
    pub fn new(capacity: usize) -> Segment {
        Segment {
            memory: AnonymousMemory::new(capacity),
            used: 0,
            dead: 0,
            first: 0,
            released: 0,
        }
    }

    /// Declares every record before `offset` (a record boundary) dead for good: walks start
    /// there, and the whole pages before it go back to the kernel once there are at least
    /// [`RELEASE_BYTES_MIN`] of them.
    pub fn release_before(&mut self, offset: usize) {
        self.first = self.first.max(offset.min(self.used));
        let releasable = self.first / PAGE_BYTES * PAGE_BYTES;
        if releasable >= self.released + RELEASE_BYTES_MIN {
            self.memory.release_front(releasable);
            self.released = releasable;
        }
    }

    /// Pages of the segment resident in memory (tests only).
    #[cfg(test)]
    pub fn resident_pages(&self) -> usize {
        self.memory.resident_pages()
    }

    /// Bytes still free at the end.
    pub fn room(&self) -> usize {
        self.memory.bytes().len() - self.used
    }

    /// Bytes of items still stored here.
    pub fn live(&self) -> usize {
        self.used - self.dead
    }

    /// The appended bytes from `offset` on.
    pub fn records_at(&self, offset: usize) -> &[u8] {
        &self.memory.bytes()[offset..self.used]
    }

    /// The appended bytes from `offset` on, writable.
    pub fn records_at_mut(&mut self, offset: usize) -> &mut [u8] {
        let used = self.used;
        &mut self.memory.bytes_mut()[offset..used]
    }

    /// Claims `len` bytes at the end and returns them with their offset; the caller checked
    /// [`Segment::room`].
    pub fn append(&mut self, len: usize) -> (usize, &mut [u8]) {
        let offset = self.used;
        self.used += len;
        (offset, &mut self.memory.bytes_mut()[offset..offset + len])
    }
}
