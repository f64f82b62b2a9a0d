//! Block copies: a dense block of `block` shape inside a dense `src_shape` array, placed into
//! a dense `dst_shape` array (every shape first mode fastest). A tiled tier's projection, its
//! route to CPU (tiles into the logical array) and its construction (the logical array into
//! tiles) are lists of such blocks sharing one geometry.
//!
//! A block is copied row by row along mode 0 without building a span list: a projection of a
//! thousand 64x64 tiles is 64k rows, and materialising them costs more than copying them.
//! When a block's rows continue each other in a file (the whole tile), the file side is one
//! scatter read or gather write straight from or into the rows. A large host-to-host request
//! writes its rows with streaming stores (`copy::streaming`).

use std::io;

use super::{check_range, host_bytes, host_bytes_mut, store_slots, SpanError, Store};
use crate::copy;

/// A block at slot `src_off` of store `src`, copied to slot `dst_off` of store `dst`
/// (indices into the request's store list).
#[derive(Clone, Copy, Debug)]
pub struct Block {
    /// Index of the source store in the request.
    pub src: usize,
    /// First source slot.
    pub src_off: u64,
    /// Index of the destination store in the request.
    pub dst: usize,
    /// First destination slot.
    pub dst_off: u64,
}

/// The shared geometry of a block request: each row's offset in both arrays.
#[derive(Debug)]
pub struct BlockGeometry {
    /// Slots per row (the block's mode-0 extent).
    row: u64,
    /// `(source offset, destination offset)` of each row, relative to the block's offsets.
    rows: Vec<(u64, u64)>,
    /// Slots from a block's first to one past its last, in the source and destination arrays.
    src_reach: u64,
    dst_reach: u64,
    /// Rows follow each other without gaps in the source / destination array.
    src_dense: bool,
    dst_dense: bool,
}

fn dense_strides(shape: &[u64]) -> Option<Vec<u64>> {
    let mut strides = Vec::with_capacity(shape.len());
    let mut acc = 1u64;
    for &e in shape {
        strides.push(acc);
        acc = acc.checked_mul(e)?;
    }
    Some(strides)
}

impl BlockGeometry {
    /// Checks that `block` fits both arrays (one rank, positive extents) and lays out its rows.
    pub fn new(block: &[u64], src_shape: &[u64], dst_shape: &[u64]) -> Result<Self, SpanError> {
        let rank = block.len();
        if rank == 0 || src_shape.len() != rank || dst_shape.len() != rank {
            return Err(SpanError::Geometry(format!(
                "block_shape, src_shape and dst_shape need one equal, non-zero rank, got {}, {} and {}",
                rank,
                src_shape.len(),
                dst_shape.len()
            )));
        }
        for (a, &e) in block.iter().enumerate() {
            if e == 0 || e > src_shape[a] || e > dst_shape[a] {
                return Err(SpanError::Geometry(format!(
                    "block_shape[{a}] = {e} must be positive and fit src_shape[{a}] = {} and dst_shape[{a}] = {}",
                    src_shape[a], dst_shape[a]
                )));
            }
        }
        let overflow = || SpanError::Geometry("block geometry overflows".to_owned());
        let ss = dense_strides(src_shape).ok_or_else(overflow)?;
        let ds = dense_strides(dst_shape).ok_or_else(overflow)?;
        let count = block[1..].iter().try_fold(1u64, |a, &e| a.checked_mul(e)).ok_or_else(overflow)?;
        let mut rows = Vec::with_capacity(usize::try_from(count).map_err(|_| overflow())?);
        for row in 0..count {
            // Decode the row's coordinate over modes 1.. and place it in both arrays.
            let (mut rest, mut so, mut dso) = (row, 0u64, 0u64);
            for a in 1..rank {
                let r = rest % block[a];
                rest /= block[a];
                so += r * ss[a];
                dso += r * ds[a];
            }
            rows.push((so, dso));
        }
        let (last_src, last_dst) = *rows.last().expect("a block has at least one row");
        let dense = |shape: &[u64]| block[..rank - 1] == shape[..rank - 1];
        Ok(Self {
            row: block[0],
            src_reach: last_src + block[0],
            dst_reach: last_dst + block[0],
            src_dense: dense(src_shape),
            dst_dense: dense(dst_shape),
            rows,
        })
    }
}

impl BlockGeometry {
    /// The slots one block copies (its rows times the row's length).
    pub fn block_slots(&self) -> u64 {
        self.row * self.rows.len() as u64
    }

    /// Slots from a block's first to one past its last, in the source array.
    pub fn src_reach(&self) -> u64 {
        self.src_reach
    }

    /// Slots from a block's first to one past its last, in the destination array.
    pub fn dst_reach(&self) -> u64 {
        self.dst_reach
    }
}

/// Whether blocks of shape `block` placed into a dense `dst_shape` array (first mode fastest)
/// at each of the destination slots `offsets` write pairwise disjoint slots, by a rule quick
/// to check: every block starts on the lattice of whole blocks, fits inside the array along
/// every mode, and no two start at the same slot. Blocks placed otherwise may be disjoint
/// too; for them this answers `false`. A tiled tier's tiles placed into one array (its
/// projections and its route to CPU) pass, so their blocks can be copied at the same time.
pub fn placed_on_lattice(block: &[u64], dst_shape: &[u64], offsets: &[u64]) -> bool {
    if block.len() != dst_shape.len() || block.contains(&0) {
        return false;
    }
    let Some(total) = dst_shape.iter().try_fold(1u64, |acc, &n| acc.checked_mul(n)) else { return false };
    let mut seen = std::collections::HashSet::with_capacity(offsets.len());
    offsets.iter().all(|&at| {
        let mut rest = at;
        let on_lattice = at < total
            && block.iter().zip(dst_shape).all(|(&b, &n)| {
                let c = rest % n;
                rest /= n;
                c % b == 0 && c + b <= n
            });
        on_lattice && seen.insert(at)
    })
}

/// Checks every block's reach against the stores' current sizes and refuses a block whose
/// source and destination ranges overlap in one store. Nothing is read or written.
pub fn check_blocks(stores: &[Store<'_>], elem: usize, geo: &BlockGeometry, blocks: &[Block]) -> Result<(), SpanError> {
    let slots = store_slots(stores, elem)?;
    for (k, b) in blocks.iter().enumerate() {
        check_range(&slots, "block", k, "source", b.src, b.src_off, geo.src_reach)?;
        check_range(&slots, "block", k, "destination", b.dst, b.dst_off, geo.dst_reach)?;
        let disjoint = b.src_off + geo.src_reach <= b.dst_off || b.dst_off + geo.dst_reach <= b.src_off;
        if b.src == b.dst && !disjoint {
            return Err(SpanError::Overlap { item: "block", index: k });
        }
    }
    Ok(())
}

/// Copies every block in order. Call [`check_blocks`] first: this trusts the ranges.
///
/// # Safety
/// The blocks passed [`check_blocks`] for these stores and this geometry, the stores stay
/// alive, and no other thread writes any source or destination range during the call.
pub unsafe fn run_blocks(stores: &[Store<'_>], elem: usize, geo: &BlockGeometry, blocks: &[Block]) -> io::Result<()> {
    let row_bytes = geo.row as usize * elem;
    // A large gather streams its host-to-host rows (see copy::streaming): each row is a few
    // hundred bytes of a destination far larger than the cache.
    let streaming = row_bytes * geo.rows.len() * blocks.len() >= copy::STREAM_THRESHOLD;
    // SAFETY: as this function's contract.
    let streamed = if streaming { unsafe { stream_host_chains(stores, elem, geo, blocks, row_bytes) } } else { 0 };
    let done = run_each(stores, elem, geo, &blocks[streamed..], row_bytes);
    if streaming {
        copy::stream_fence();
    }
    done
}

/// The bytes a chain of blocks writes per row together (see [`stream_host_chains`]).
const CHAIN_ROW_BYTES: usize = 4096;

/// The least distance in slots between two rows of a block in the destination (`u64::MAX`
/// for a block of one row): a chain of blocks one row apart may be this many slots long
/// before one block's row reaches the next row of the first.
fn row_gap(geo: &BlockGeometry) -> u64 {
    let mut starts: Vec<u64> = geo.rows.iter().map(|&(_, d)| d).collect();
    starts.sort_unstable();
    starts.windows(2).map(|w| w[1] - w[0]).min().unwrap_or(u64::MAX)
}

/// The host-to-host blocks of a large gather, with streaming stores, up to the first block
/// of another kind (returns how many it ran; [`run_each`] runs the rest in order).
///
/// Blocks that continue one another's rows in the destination (each next one a row further,
/// on the same destination, read from another store: the tiles of one column of a grid
/// placed into its array) form a chain, copied row by row across the chain: the destination
/// is then written front to back, a column of the array at a time, instead of a few hundred
/// bytes in each of its pages in turn. Rows of a chain never overlap (it is at most
/// [`row_gap`] long), and every block of it reads a store no block writes, so the order
/// within a chain changes nothing that anybody can see.
///
/// # Safety
/// As [`run_blocks`].
unsafe fn stream_host_chains(
    stores: &[Store<'_>],
    elem: usize,
    geo: &BlockGeometry,
    blocks: &[Block],
    row_bytes: usize,
) -> usize {
    // A chain's rows together fill a page of the destination: longer chains read from more
    // tiles at once than the prefetchers follow (64 tiles of 256-byte rows ran 1.5x slower
    // than 16), shorter ones write fewer bytes of a page at a time.
    let page_of_rows = (CHAIN_ROW_BYTES / row_bytes.max(1)).max(1);
    let longest = usize::try_from(row_gap(geo) / geo.row.max(1)).unwrap_or(usize::MAX).clamp(1, page_of_rows);
    let host = |i: usize| match stores[i] {
        Store::Host(buffer) => Some(buffer),
        Store::File(_) => None,
    };
    let mut rows: Vec<(*const u8, *mut u8)> = Vec::new();
    let mut i = 0;
    while i < blocks.len() {
        let first = &blocks[i];
        let (Some(_), Some(dst)) = (host(first.src), host(first.dst)) else { break };
        let mut n = 1;
        while i + n < blocks.len() && n < longest {
            let (prev, next) = (&blocks[i + n - 1], &blocks[i + n]);
            let continues = next.dst == first.dst
                && next.src != first.dst
                && first.src != first.dst
                && next.dst_off == prev.dst_off + geo.row
                && host(next.src).is_some();
            if !continues {
                break;
            }
            n += 1;
        }
        let chain = &blocks[i..i + n];
        rows.clear();
        for &(so, dso) in &geo.rows {
            for b in chain {
                let Some(src) = host(b.src) else { unreachable!("a chain reads host stores") };
                // SAFETY: every row lies inside the checked block reach of both stores
                // (check_blocks), so both pointers are inside their buffers.
                rows.push(unsafe {
                    (
                        src.as_ptr().add((b.src_off + so) as usize * elem).cast_const(),
                        dst.as_ptr().add((b.dst_off + dso) as usize * elem),
                    )
                });
            }
        }
        // SAFETY: the rows are inside their buffers (above), do not overlap one another
        // (check_blocks, and a chain's rows are at most `row_gap` long), and nobody else
        // writes them (this function's contract); run_blocks fences the stores.
        unsafe { copy::stream_rows(&rows, row_bytes) };
        i += n;
    }
    i
}

/// The body of [`run_blocks`]: every block in order.
///
/// # Safety
/// As [`run_blocks`].
unsafe fn run_each(
    stores: &[Store<'_>],
    elem: usize,
    geo: &BlockGeometry,
    blocks: &[Block],
    row_bytes: usize,
) -> io::Result<()> {
    for b in blocks {
        match (stores[b.src], stores[b.dst]) {
            (Store::Host(src), Store::Host(dst)) => {
                for &(so, dso) in &geo.rows {
                    // SAFETY: every row lies inside the checked block reach of both stores,
                    // the ranges do not overlap (check_blocks), and nobody else writes them.
                    unsafe {
                        let from = host_bytes(src, b.src_off + so, geo.row, elem).as_ptr();
                        let to = host_bytes_mut(dst, b.dst_off + dso, geo.row, elem).as_mut_ptr();
                        copy::copy_span_host_to_host(from, to, row_bytes);
                    }
                }
            }
            (Store::File(file), Store::Host(dst)) if geo.src_dense => {
                // The whole block is one file range: one scatter read straight into the rows.
                let parts: Vec<(*mut u8, usize)> = geo
                    .rows
                    .iter()
                    // SAFETY: every row lies inside the checked block reach of `dst`.
                    .map(|&(_, dso)| (unsafe { dst.as_ptr().add((b.dst_off + dso) as usize * elem) }, row_bytes))
                    .collect();
                // SAFETY: the rows lie inside the live destination buffer (check_blocks) and
                // nobody else touches it during the request (this function's contract).
                unsafe { copy::file_read_scatter(file.file(), b.src_off * elem as u64, &parts) }?;
            }
            (Store::File(file), Store::Host(dst)) => {
                for &(so, dso) in &geo.rows {
                    // SAFETY: as above.
                    let to = unsafe { host_bytes_mut(dst, b.dst_off + dso, geo.row, elem) };
                    copy::file_read_into_host(file.file(), (b.src_off + so) * elem as u64, to)?;
                }
            }
            (Store::Host(src), Store::File(file)) if geo.dst_dense => {
                // The whole block is one file range: one gather write straight from the rows.
                let parts: Vec<&[u8]> = geo
                    .rows
                    .iter()
                    // SAFETY: as above.
                    .map(|&(so, _)| unsafe { host_bytes(src, b.src_off + so, geo.row, elem) })
                    .collect();
                copy::file_write_gather(file.file(), b.dst_off * elem as u64, &parts)?;
            }
            (Store::Host(src), Store::File(file)) => {
                for &(so, dso) in &geo.rows {
                    // SAFETY: as above.
                    let from = unsafe { host_bytes(src, b.src_off + so, geo.row, elem) };
                    copy::file_write_from_host(file.file(), (b.dst_off + dso) * elem as u64, from)?;
                }
            }
            (Store::File(from), Store::File(to)) => {
                for &(so, dso) in &geo.rows {
                    copy::file_copy(
                        from.file(),
                        (b.src_off + so) * elem as u64,
                        to.file(),
                        (b.dst_off + dso) * elem as u64,
                        row_bytes as u64,
                    )?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::HostBuffer;
    use crate::tiles::test_support::{file_values, host_values, host_with, temp_file};

    fn run(stores: &[Store<'_>], geo: &BlockGeometry, blocks: &[Block]) -> Result<(), SpanError> {
        check_blocks(stores, 4, geo, blocks)?;
        // SAFETY: checked above; the test owns every store.
        unsafe { run_blocks(stores, 4, geo, blocks) }.map_err(SpanError::from)
    }

    /// A gather large enough to stream (2048x2048 u32 from 64x64 tiles: 16 MiB), its tiles
    /// in grid order (each column of the grid a chain of blocks one row apart), in reverse
    /// order (no chains), and with tiles placed twice at one slot inside what would be a
    /// chain (the last placement wins): every order gives the array the tiles make.
    #[test]
    fn streamed_chains_place_what_the_block_order_places() {
        let (side, t) = (2048u64, 64u64);
        let grid = side / t;
        let expected: Vec<u32> = (0..(side * side) as u32).collect();
        let origin = |k: u64| t * (k % grid) + t * side * (k / grid);
        let tiles: Vec<HostBuffer> = (0..grid * grid)
            .map(|k| {
                let o = origin(k);
                let values: Vec<u32> = (0..t * t).map(|s| (o + s % t + side * (s / t)) as u32).collect();
                host_with(&values)
            })
            .collect();
        let place = BlockGeometry::new(&[t, t], &[t, t], &[side, side]).unwrap();
        let block = |k: u64| Block { src: 1 + k as usize, src_off: 0, dst: 0, dst_off: origin(k) };
        let in_order: Vec<Block> = (0..grid * grid).map(block).collect();
        let reversed: Vec<Block> = (0..grid * grid).rev().map(block).collect();
        // Tile 1 placed over tile 0's slot, then tile 0 again: tile 0 wins its slot, and tile
        // 1 is placed at its own after.
        let mut twice: Vec<Block> = vec![Block { dst_off: origin(0), ..block(1) }, block(0)];
        twice.extend((1..grid * grid).map(block));
        // Tile 1 placed one array row below tile 0's slot, after it: each of its rows lands on
        // the next row of tile 0's, and wins it (the block order), which a chain of the two
        // would reverse.
        let mut row_below: Vec<Block> = vec![block(0), Block { dst_off: origin(0) + side, ..block(1) }];
        row_below.extend((2..grid * grid).map(block));
        let cases =
            [("grid order", &in_order), ("reversed", &reversed), ("placed twice", &twice), ("a row below", &row_below)];
        for (name, blocks) in cases {
            let (out, reference) = (
                HostBuffer::new((side * side * 4) as usize, true).unwrap(),
                HostBuffer::new((side * side * 4) as usize, true).unwrap(),
            );
            let mut stores: Vec<Store<'_>> = vec![Store::Host(&out)];
            stores.extend(tiles.iter().map(Store::Host));
            assert!(place.block_slots() * 4 * blocks.len() as u64 >= crate::copy::STREAM_THRESHOLD as u64);
            run(&stores, &place, blocks).unwrap();
            stores[0] = Store::Host(&reference);
            // SAFETY: the same checked blocks, one block after another with ordinary stores.
            unsafe { run_each(&stores, 4, &place, blocks, (t * 4) as usize) }.unwrap();
            assert!(host_values(&out) == host_values(&reference), "{name}");
            if name != "a row below" {
                assert!(host_values(&out) == expected, "{name}");
            }
        }
        assert_eq!(row_gap(&place), side);
    }

    /// Tiles of a 4x6 array in 2x3 blocks: origins (0,0) = 0, (2,0) = 2, (0,3) = 12, (2,3) = 14.
    #[test]
    fn placements_on_the_block_lattice_are_disjoint_and_others_are_not_claimed() {
        let on = |offsets: &[u64]| placed_on_lattice(&[2, 3], &[4, 6], offsets);
        assert!(on(&[0, 2, 12, 14]) && on(&[14, 0]) && on(&[]));
        assert!(!on(&[0, 0]), "two blocks at one slot");
        assert!(!on(&[1]), "off the lattice in mode 0 (overlaps both blocks of its column)");
        assert!(!on(&[4]), "off the lattice in mode 1");
        assert!(!on(&[24]), "outside the array");
        assert!(!placed_on_lattice(&[3, 3], &[4, 6], &[3]), "a block at row 3 of 4 does not fit mode 0");
        assert!(!placed_on_lattice(&[2, 0], &[4, 6], &[0]) && !placed_on_lattice(&[2], &[4, 6], &[0]));
        assert!(!placed_on_lattice(&[2, 3], &[0, 6], &[0]), "an empty array holds no block");
    }

    /// A 4x4 logical array of 2x2 tiles, first mode fastest: value = slot.
    fn logical() -> Vec<u32> {
        (0..16).collect()
    }

    #[test]
    fn tiles_cut_from_and_placed_back_into_a_logical_array() {
        let src = host_with(&logical());
        let tiles: Vec<HostBuffer> = (0..4).map(|_| HostBuffer::new(16, true).unwrap()).collect();
        let back = HostBuffer::new(64, true).unwrap();
        let mut stores: Vec<Store<'_>> = vec![Store::Host(&src), Store::Host(&back)];
        stores.extend(tiles.iter().map(Store::Host));
        // Tile (i, j) starts at slot 2i + 8j of the logical array.
        let origin = |t: u64| 2 * (t % 2) + 8 * (t / 2);
        let cut = BlockGeometry::new(&[2, 2], &[4, 4], &[2, 2]).unwrap();
        let blocks: Vec<Block> =
            (0..4).map(|t| Block { src: 0, src_off: origin(t), dst: 2 + t as usize, dst_off: 0 }).collect();
        run(&stores, &cut, &blocks).unwrap();
        assert_eq!(host_values(&tiles[1]), [2, 3, 6, 7]); // the specification's tile (1, 0)
        let place = BlockGeometry::new(&[2, 2], &[2, 2], &[4, 4]).unwrap();
        let blocks: Vec<Block> =
            (0..4).map(|t| Block { src: 2 + t as usize, src_off: 0, dst: 1, dst_off: origin(t) }).collect();
        run(&stores, &place, &blocks).unwrap();
        assert_eq!(host_values(&back), logical());
    }

    #[test]
    fn file_tiles_gather_and_scatter_through_one_positioned_call_each() {
        let (file, path) = temp_file("blocks");
        file.set_len(16).unwrap();
        let src = host_with(&logical());
        let out = HostBuffer::new(64, true).unwrap();
        let stores = [Store::Host(&src), Store::File(&file), Store::Host(&out)];
        // Cut tile (1, 1) into the file (dense destination), then place it at tile (0, 0).
        run(
            &stores,
            &BlockGeometry::new(&[2, 2], &[4, 4], &[2, 2]).unwrap(),
            &[Block { src: 0, src_off: 10, dst: 1, dst_off: 0 }],
        )
        .unwrap();
        assert_eq!(file_values(&file), [10, 11, 14, 15]);
        run(
            &stores,
            &BlockGeometry::new(&[2, 2], &[2, 2], &[4, 4]).unwrap(),
            &[Block { src: 1, src_off: 0, dst: 2, dst_off: 0 }],
        )
        .unwrap();
        assert_eq!(&host_values(&out)[..6], [10, 11, 0, 0, 14, 15]);
        // A sub-block of the file's array (not dense): read row by row.
        run(
            &stores,
            &BlockGeometry::new(&[1, 2], &[2, 2], &[4, 4]).unwrap(),
            &[Block { src: 1, src_off: 1, dst: 2, dst_off: 2 }],
        )
        .unwrap();
        assert_eq!(&host_values(&out)[..8], [10, 11, 11, 0, 14, 15, 15, 0]);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn bad_geometry_ranges_and_overlaps_are_refused() {
        assert!(BlockGeometry::new(&[3], &[2], &[4]).is_err());
        assert!(BlockGeometry::new(&[1, 1], &[2], &[4]).is_err());
        assert!(BlockGeometry::new(&[0], &[2], &[4]).is_err());
        let a = host_with(&[1, 2, 3, 4]);
        let b = host_with(&[9, 9, 9, 9]);
        let stores = [Store::Host(&a), Store::Host(&b)];
        let geo = BlockGeometry::new(&[2], &[2], &[4]).unwrap();
        let err = run(
            &stores,
            &geo,
            &[Block { src: 0, src_off: 0, dst: 1, dst_off: 0 }, Block { src: 0, src_off: 0, dst: 1, dst_off: 3 }],
        )
        .unwrap_err();
        assert!(
            matches!(err, SpanError::OutOfRange { item: "block", index: 1, side: "destination", end: 5, slots: 4 }),
            "{err}"
        );
        assert_eq!(host_values(&b), [9, 9, 9, 9]);
        let err = run(&stores, &geo, &[Block { src: 0, src_off: 0, dst: 0, dst_off: 1 }]).unwrap_err();
        assert!(matches!(err, SpanError::Overlap { item: "block", index: 0 }));
        assert_eq!(host_values(&a), [1, 2, 3, 4]);
    }
}
