//! Size classes: the slab classes memcached 1.6 would put an item in with its default
//! settings (`-n 48`, `-f 1.25`, 1 MiB pages so a 512 KiB largest chunk). The store has no
//! slabs; it counts items by these classes so that `stats items` and `stats slabs` list the
//! same class ids, with the same items in each, as memcached does.

use std::sync::OnceLock;

/// memcached's `MAX_NUMBER_OF_SLAB_CLASSES`: class ids are below this.
pub const SIZE_CLASS_LIMIT: usize = 64;
/// The smallest chunk: memcached's 48-byte item header plus `-n 48`.
const SMALLEST_CHUNK: u64 = 96;
/// memcached's `-f`.
const GROWTH_FACTOR: f64 = 1.25;
/// memcached's `slab_chunk_max`: half of its 1 MiB slab page.
pub const LARGEST_CHUNK: u64 = 512 * 1024;
/// memcached's `CHUNK_ALIGN_BYTES`.
const CHUNK_ALIGN: u64 = 8;

/// Chunk size of every class, index 0 being class 1 (memcached's `slabs_init`).
pub fn class_chunk_sizes() -> &'static [u64] {
    static SIZES: OnceLock<Vec<u64>> = OnceLock::new();
    SIZES.get_or_init(|| {
        let mut sizes = Vec::new();
        let mut size = SMALLEST_CHUNK;
        while sizes.len() < SIZE_CLASS_LIMIT - 2
            && (size as f64) < LARGEST_CHUNK as f64 / GROWTH_FACTOR
        {
            if !size.is_multiple_of(CHUNK_ALIGN) {
                size += CHUNK_ALIGN - size % CHUNK_ALIGN;
            }
            sizes.push(size);
            size = (size as f64 * GROWTH_FACTOR) as u64;
        }
        sizes.push(LARGEST_CHUNK);
        sizes
    })
}

/// The class id (from 1) of an item of `item_size` bytes ([`crate::item_size`]): the first
/// class whose chunk holds it; items larger than the largest chunk count in the largest class.
pub fn size_class(item_size: u64) -> usize {
    let sizes = class_chunk_sizes();
    sizes
        .partition_point(|&chunk| chunk < item_size)
        .min(sizes.len() - 1)
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_match_memcached_defaults() {
        // Chunk sizes Debian's memcached 1.6.18 reports in `stats slabs`.
        let sizes = class_chunk_sizes();
        assert_eq!(sizes[0], 96);
        assert_eq!(sizes[3], 192);
        assert_eq!(sizes[11], 1184);
        assert_eq!(sizes[21], 11104);
        assert_eq!(sizes[31], 103496);
        assert_eq!(sizes.last(), Some(&LARGEST_CHUNK));
        assert!(sizes.len() < SIZE_CLASS_LIMIT);
        assert_eq!(size_class(74), 1);
        assert_eq!(size_class(96), 1);
        assert_eq!(size_class(97), 2);
        assert_eq!(size_class(165), 4);
        assert_eq!(size_class(100_068), 32);
        assert_eq!(size_class(2_000_000), sizes.len());
    }
}
