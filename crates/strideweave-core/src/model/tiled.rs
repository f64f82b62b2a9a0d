//! `TiledEvictable`: a carrier whose values are split into tiles of one shape, each tile on
//! its own carrier in the primary (fast) or the secondary (large) tier, moved between them a
//! set of tiles at a time (extension-and-tiling.md §7, for Rust users).
//!
//! * **Geometry.** The logical shape is `grid_shape[a] * tile_shape[a]`; slot `s` is its
//!   coordinate `x` (first mode fastest), in tile `x[a] / tile_shape[a]` (tiles numbered first
//!   mode fastest too) at in-tile slot `x mod tile_shape`, first mode fastest.
//! * **Construction** takes two tiers, one of the full size and one empty, and splits the full
//!   one into tile carriers made with its [`allocate_like`](Carrier::allocate_like). The
//!   composite owns both tiers and every tile; it is mutable only if the primary is.
//! * **Reads and writes** go to a tile's current carrier, on either tier (a secondary tile is
//!   read in place). A write raises the version by one.
//! * **Residency.** [`promote`](TiledEvictable::promote) and [`evict`](TiledEvictable::evict)
//!   move a set of tiles, each by the core's residency rule ([`Residency`], the Evictable's):
//!   a tile moves into a fresh tile of the other tier, or, made with
//!   [`retaining_clean`](TiledEvictable::retaining_clean), a promote copies and keeps the
//!   secondary tile as the tile's clean copy, and an evict of a clean tile releases the
//!   primary tile and makes the copy current again, writing nothing. The first write to a
//!   tile releases its clean copy. A request commits every tile at once, or, when any copy
//!   fails, changes nothing. `promote_async`/`evict_async` run the copies on an engine
//!   thread; until their handle is done, writes, moves and release of the carrier are
//!   refused as for a pending move (reads see the old tiles), and a later request waits for
//!   it. A blocking request holds the carrier the same way while it runs: another thread's
//!   write, move or release is refused, not made to wait, and its reads see the old tiles.
//!   Residency changes alter no value and no version.
//!
//! Decisions of this Rust model, narrower than the Python package's: one request at a time
//! (the Python one runs requests on disjoint tiles together, and refuses writes only to a
//! pending request's tiles); projections are blocking; no residency policy yet.
//!
//! ```
//! use strideweave_core::model::{CarrierExt, FileCarrier, HostCarrier, Tier, TiledEvictable};
//! use strideweave_core::storage::{ElemKind, Scalar};
//!
//! // A 4×4 array in 2×2 tiles: slots 2, 3, 6 and 7 lie in tile (1, 0), index 1.
//! let values: Vec<f32> = (0..16).map(|v| v as f32).collect();
//! let t = TiledEvictable::new(HostCarrier::from_f32(&values), FileCarrier::temp(ElemKind::F32).unwrap(), &[2, 2], &[2, 2])
//!     .unwrap();
//! assert_eq!(t.tile_index(&[1, 0]).unwrap(), 1);
//! t.evict(&[1]).unwrap();
//! assert_eq!((t.location(1).unwrap(), t.location(0).unwrap()), (Tier::Secondary, Tier::Primary));
//! assert_eq!(t.get(6).unwrap(), Scalar::F32(6.0)); // read in place on the secondary tier
//! t.set(7, Scalar::F32(70.0)).unwrap();
//! t.promote(&[1]).unwrap();
//! assert_eq!((t.get(7).unwrap(), t.version()), (Scalar::F32(70.0), 1));
//! ```

use std::sync::Arc;

use parking_lot::Mutex;

use super::awaitable::ResidencyHandle;
use std::sync::atomic::{AtomicU64, Ordering};

use super::carrier::{admitted, BulkStorage, Carrier, CarrierExt, ClassKey, HookCall, HookToken, IntoCarrier, HOOK};
use super::error::{ModelError, Result};
use super::file::FileCarrier;
use super::host::HostCarrier;
use super::host::HostStore;
use super::residency::{Residency, Tier, Transition};
use super::state::{CarrierState, OwnerToken};
use super::tensor::Tensor;
use super::tier_ops::{self, Transitions, Window};
use super::two_tier::{action, Hold};
use crate::storage::{ElemKind, FileSlab, FileStore, Scalar};

/// Numbers the slab files of this process's tiled carriers.
static SLAB_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A tile's carrier, with where its slots live for bulk copies.
#[derive(Clone)]
struct Held {
    carrier: Arc<dyn Carrier>,
    window: Window,
    /// A slab tile's region: freed with others in one step when the tile is given back.
    region: Option<(Arc<FileSlab>, u64)>,
    /// A host tile this composite made: its buffer is given back with the others' for the
    /// next promote's fresh tiles.
    host: Option<Arc<HostCarrier>>,
}

/// One tile: the carrier holding its values, the clean copy a `retain_clean` promote kept,
/// its residency, and how many writes it has had (the residency's version for this tile).
struct Tile {
    current: Held,
    clean: Option<Held>,
    residency: Residency,
    writes: u64,
}

/// One tile of a request, staged: its transition, the carrier its values leave, and the
/// fresh tile they go to (none for a clean eviction).
struct StagedTile {
    index: usize,
    step: Transition,
    writes: u64,
    source: Held,
    fresh: Option<Held>,
}

/// A tile in a region of a slab file: the fresh tiles of a file tier (a file per tile would
/// cost a create and an unlink each, more than moving a small tile's bytes).
struct SlabTile {
    state: CarrierState,
    kind: ElemKind,
    slots: usize,
    store: Arc<FileStore>,
    base: u64,
}

impl SlabTile {
    fn at(&self, i: usize) -> Result<u64> {
        if i >= self.slots {
            return Err(ModelError::SlotOutOfRange { index: i as i64, size: self.slots });
        }
        Ok(self.base + (i * self.kind.size()) as u64)
    }
}

impl Carrier for SlabTile {
    fn state(&self, _: &HookToken) -> &CarrierState {
        &self.state
    }

    fn elem_kind(&self) -> ElemKind {
        self.kind
    }

    fn size(&self) -> usize {
        self.state.live_size(self.slots)
    }

    fn read_slot(&self, token: &HookToken, i: usize) -> Result<Scalar> {
        admitted(token, &self.state)?;
        super::file::read_scalar(&self.store, self.at(i)?, self.kind)
    }

    fn write_slot(&self, token: &HookToken, i: usize, v: Scalar) -> Result<()> {
        admitted(token, &self.state)?;
        super::file::write_scalar(&self.store, self.at(i)?, self.kind, v)
    }

    fn is_mutable_hook(&self) -> bool {
        true
    }

    // The region goes back to the slab when the composite gives the tile back
    // (`TiledEvictable::give_back`), with the others it gives back at once: one shrink of the
    // file instead of one per tile.
}

/// A tiled two-tier carrier (see the module docs).
pub struct TiledEvictable {
    state: CarrierState,
    owner: OwnerToken,
    kind: ElemKind,
    mutable: bool,
    grid: Vec<usize>,
    tile: Vec<usize>,
    logical: Vec<usize>,
    tile_slots: usize,
    slots: usize,
    /// The tiers, owned: the factories of fresh tiles.
    tiers: [Arc<dyn Carrier>; 2],
    /// For a file tier, the slab its fresh tiles are regions of.
    slabs: [Option<Arc<FileSlab>>; 2],
    tiles: Mutex<Vec<Tile>>,
    /// One request at a time, blocking or asynchronous.
    transitions: Transitions,
}

impl std::fmt::Debug for TiledEvictable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TiledEvictable")
            .field("kind", &self.kind)
            .field("grid_shape", &self.grid)
            .field("tile_shape", &self.tile)
            .field("primary_tiles", &self.tiles_on(Tier::Primary).len())
            .finish()
    }
}

fn tiling(message: impl Into<String>) -> ModelError {
    ModelError::Tiling { message: message.into() }
}

/// The product of `extents`, or the refusal naming `what` when it overflows.
fn product(extents: &[usize], what: &str) -> Result<usize> {
    extents.iter().try_fold(1usize, |acc, &e| acc.checked_mul(e)).ok_or_else(|| tiling(format!("the {what} overflows")))
}

impl TiledEvictable {
    /// Tiles of `tile_shape` in a grid of `grid_shape` over `primary` and `secondary`: one of
    /// them holds the values (the full logical size), the other is empty. Refused, before
    /// any effect: one carrier as both tiers (`TiersNotDistinct`), differing kinds
    /// (`TierDTypesDiffer`), empty shapes, unequal ranks, a zero extent, or tier sizes other
    /// than one full and one empty (`Tiling`), a tier released or owned.
    pub fn new(
        primary: impl IntoCarrier,
        secondary: impl IntoCarrier,
        grid_shape: &[usize],
        tile_shape: &[usize],
    ) -> Result<Arc<Self>> {
        Self::build(primary.into_carrier(), secondary.into_carrier(), grid_shape, tile_shape, false)
    }

    /// [`new`](Self::new), with clean tiles: a promote copies each tile and keeps its
    /// secondary tile as a clean copy, and an evict of a tile not written since releases the
    /// primary tile and writes nothing.
    pub fn retaining_clean(
        primary: impl IntoCarrier,
        secondary: impl IntoCarrier,
        grid_shape: &[usize],
        tile_shape: &[usize],
    ) -> Result<Arc<Self>> {
        Self::build(primary.into_carrier(), secondary.into_carrier(), grid_shape, tile_shape, true)
    }

    fn build(
        primary: Arc<dyn Carrier>,
        secondary: Arc<dyn Carrier>,
        grid: &[usize],
        tile: &[usize],
        retain_clean: bool,
    ) -> Result<Arc<Self>> {
        if super::carrier::same_carrier(&primary, &secondary) {
            return Err(ModelError::TiersNotDistinct { composite: "TiledEvictable" });
        }
        let kind = primary.elem_kind();
        if secondary.elem_kind() != kind {
            return Err(ModelError::TierDTypesDiffer {
                composite: "TiledEvictable",
                primary: kind.dtype_name(),
                secondary: secondary.elem_kind().dtype_name(),
            });
        }
        if grid.is_empty() || tile.is_empty() {
            return Err(tiling("grid_shape and tile_shape must not be empty"));
        }
        if grid.len() != tile.len() {
            return Err(tiling(format!("grid_shape has rank {} but tile_shape rank {}", grid.len(), tile.len())));
        }
        if grid.iter().chain(tile).any(|&e| e == 0) {
            return Err(tiling("every extent of grid_shape and tile_shape must be at least 1"));
        }
        let logical: Vec<usize> = grid
            .iter()
            .zip(tile)
            .map(|(&g, &t)| g.checked_mul(t).ok_or_else(|| tiling("the logical shape overflows")))
            .collect::<Result<_>>()?;
        let slots = product(&logical, "logical size")?;
        let tile_slots = product(tile, "tile size")?;
        let seed_on = match (primary.size(), secondary.size()) {
            (p, 0) if p == slots => Tier::Primary,
            (0, s) if s == slots => Tier::Secondary,
            (p, s) => {
                return Err(tiling(format!(
                    "one tier must hold all {slots} slots and the other none (primary {p}, secondary {s})"
                )))
            }
        };
        let slab_for = |tier: &Arc<dyn Carrier>| -> Result<Option<Arc<FileSlab>>> {
            if tier.class_key() != ClassKey::of::<FileCarrier>() {
                return Ok(None);
            }
            let Some(BulkStorage::File(store)) = tier.bulk_storage(&tier.hook()) else { return Ok(None) };
            let dir = store.path().parent().map_or_else(|| std::path::PathBuf::from("."), |d| d.to_path_buf());
            let n = SLAB_COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!("strideweave-tiles-{}-{n}.slab", std::process::id()));
            let region =
                (tile_slots as u64).checked_mul(kind.size() as u64).ok_or_else(|| tiling("the tile size overflows"))?;
            Ok(Some(Arc::new(FileSlab::new(&path, region).map_err(|e| ModelError::io("making the tiles' slab", e))?)))
        };
        let slabs = [slab_for(&primary)?, slab_for(&secondary)?];
        let owner = OwnerToken::fresh();
        primary.state(HOOK).adopt(owner)?;
        if let Err(e) = secondary.state(HOOK).adopt(owner) {
            primary.state(HOOK).disown(owner);
            return Err(e);
        }
        let composite = TiledEvictable {
            state: CarrierState::new("TiledEvictable"),
            owner,
            kind,
            mutable: primary.is_mutable_hook(),
            grid: grid.to_vec(),
            tile: tile.to_vec(),
            logical,
            tile_slots,
            slots,
            tiers: [primary, secondary],
            slabs,
            tiles: Mutex::new(Vec::new()),
            transitions: Transitions::default(),
        };
        // Split the full tier into tiles; on failure give back every tile made and both tiers.
        let seed = composite.tier(seed_on).clone();
        let seed_at = Window::of(&*seed);
        let count = product(grid, "tile count")?;
        let seeded = composite.fresh_tiles(seed_on, count).and_then(|made| {
            for (index, tile) in made.iter().enumerate() {
                let runs = composite.runs_of(index);
                if let Err(e) = tier_ops::copy_runs((&*seed, &seed_at), (&*tile.carrier, &tile.window), &runs) {
                    composite.give_back(made);
                    return Err(e);
                }
            }
            Ok(made)
        });
        let made = match seeded {
            Ok(made) => made,
            Err(e) => {
                for tier in &composite.tiers {
                    tier.state(HOOK).disown(owner);
                }
                return Err(e);
            }
        };
        let tiles = made
            .into_iter()
            .map(|current| {
                let mut residency = Residency::new(retain_clean);
                if seed_on == Tier::Secondary {
                    residency.commit(Transition::Move { evict: true }, 0);
                }
                Tile { current, clean: None, residency, writes: 0 }
            })
            .collect();
        *composite.tiles.lock() = tiles;
        Ok(Arc::new(composite))
    }

    /// `n` fresh tiles for `tier`, owned: regions of its slab for a file tier, else from the
    /// tier's `allocate_like`. On failure none is left.
    fn fresh_tiles(&self, tier: Tier, n: usize) -> Result<Vec<Held>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let slab = match tier {
            Tier::Primary => &self.slabs[0],
            Tier::Secondary => &self.slabs[1],
        };
        if let Some(slab) = slab {
            let (store, cells) = slab.allocate(n).map_err(|e| ModelError::io("growing the tiles' slab", e))?;
            return Ok(cells
                .into_iter()
                .map(|cell| {
                    let base = cell * slab.region_bytes();
                    let tile = SlabTile {
                        state: CarrierState::new("FileCarrier"),
                        kind: self.kind,
                        slots: self.tile_slots,
                        store: store.clone(),
                        base,
                    };
                    let window = Window::File(store.clone(), base);
                    tile.state.adopt(self.owner).expect("a fresh tile is free");
                    Held { carrier: Arc::new(tile), window, region: Some((slab.clone(), cell)), host: None }
                })
                .collect());
        }
        if self.tier(tier).class_key() == ClassKey::of::<HostCarrier>() {
            return Ok(HostCarrier::batch_for_overwrite(self.kind, self.tile_slots, n)?
                .into_iter()
                .map(|host| {
                    host.state(HOOK).adopt(self.owner).expect("a fresh tile is free");
                    let carrier: Arc<dyn Carrier> = host.clone();
                    Held { window: Window::of(&*carrier), carrier, region: None, host: Some(host) }
                })
                .collect());
        }
        let mut made = Vec::with_capacity(n);
        for _ in 0..n {
            match tier_ops::fresh_like(&**self.tier(tier), self.kind, self.tile_slots, self.owner) {
                Ok(carrier) => made.push(Held { window: Window::of(&*carrier), carrier, region: None, host: None }),
                Err(e) => {
                    self.give_back(made);
                    return Err(e);
                }
            }
        }
        Ok(made)
    }

    /// Release tiles the composite made and never committed (or has replaced); the regions
    /// of slab tiles go back to their slab together.
    fn give_back(&self, tiles: impl IntoIterator<Item = Held>) {
        let mut regions: Vec<(Arc<FileSlab>, Vec<u64>)> = Vec::new();
        let mut buffers = Vec::new();
        for tile in tiles {
            // The tile's window holds its host store too: let go of it first, so the buffer
            // is nobody else's when the tile is released.
            let Held { carrier, window, region, host } = tile;
            drop(window);
            match &host {
                Some(host) => {
                    tier_ops::release_owned_by(&**host, self.owner, false, || host.release_storage_into(&mut buffers))
                }
                None => tier_ops::release_owned(&*carrier, self.owner, false),
            }
            if let Some((slab, cell)) = region {
                match regions.iter_mut().find(|(s, _)| Arc::ptr_eq(s, &slab)) {
                    Some((_, cells)) => cells.push(cell),
                    None => regions.push((slab, vec![cell])),
                }
            }
        }
        for (slab, cells) in regions {
            let _ = slab.free(&cells);
        }
        drop(crate::storage::HostBuffer::keep_batch(buffers));
    }

    fn tier(&self, which: Tier) -> &Arc<dyn Carrier> {
        match which {
            Tier::Primary => &self.tiers[0],
            Tier::Secondary => &self.tiers[1],
        }
    }

    /// The primary tier (owned; the factory of primary tiles).
    pub fn primary(&self) -> &Arc<dyn Carrier> {
        self.tier(Tier::Primary)
    }

    /// The secondary tier (owned; the factory of secondary tiles).
    pub fn secondary(&self) -> &Arc<dyn Carrier> {
        self.tier(Tier::Secondary)
    }

    /// The grid of tiles.
    pub fn grid_shape(&self) -> &[usize] {
        &self.grid
    }

    /// The shape of every tile.
    pub fn tile_shape(&self) -> &[usize] {
        &self.tile
    }

    /// `grid_shape[a] * tile_shape[a]`: the shape of the values.
    pub fn logical_shape(&self) -> &[usize] {
        &self.logical
    }

    /// How many tiles there are (the product of `grid_shape`).
    pub fn tile_count(&self) -> usize {
        self.tiles.lock().len()
    }

    /// The index of the tile at grid coordinate `coord` (first mode fastest).
    pub fn tile_index(&self, coord: &[usize]) -> Result<usize> {
        if coord.len() != self.grid.len() || coord.iter().zip(&self.grid).any(|(&c, &g)| c >= g) {
            return Err(tiling(format!("tile coordinate {coord:?} is outside the grid {:?}", self.grid)));
        }
        Ok(coord.iter().zip(&self.grid).rev().fold(0, |acc, (&c, &g)| acc * g + c))
    }

    /// The tier tile `index` is on.
    pub fn location(&self, index: usize) -> Result<Tier> {
        let tiles = self.tiles.lock();
        Ok(tiles.get(index).ok_or_else(|| self.no_tile(index))?.residency.resident())
    }

    /// Whether tile `index` is on the primary tier with its clean copy kept (an evict of it
    /// writes nothing).
    pub fn is_clean(&self, index: usize) -> Result<bool> {
        let tiles = self.tiles.lock();
        let tile = tiles.get(index).ok_or_else(|| self.no_tile(index))?;
        Ok(!tile.residency.is_evicted() && tile.clean.is_some())
    }

    /// The indices of the tiles on `tier`, ascending.
    pub fn tiles_on(&self, tier: Tier) -> Vec<usize> {
        let tiles = self.tiles.lock();
        (0..tiles.len()).filter(|&i| tiles[i].residency.resident() == tier).collect()
    }

    /// Gather the tiles `selection` names (one list of grid coordinates per axis, their
    /// Cartesian product, in the caller's order) into a fresh host carrier: a dense tensor of
    /// shape `selection[a].len() * tile_shape[a]`, first mode fastest, each tile read where
    /// it is (residency unchanged). Refused (`Tiling`) for a rank mismatch, an empty axis, a
    /// coordinate repeated in an axis or outside the grid; `Released` once released.
    ///
    /// ```
    /// use strideweave_core::model::{FileCarrier, HostCarrier, TiledEvictable};
    /// use strideweave_core::storage::ElemKind;
    ///
    /// let values: Vec<f32> = (0..6).map(|v| v as f32).collect();
    /// let t = TiledEvictable::new(HostCarrier::from_f32(&values), FileCarrier::temp(ElemKind::F32).unwrap(), &[3], &[2])
    ///     .unwrap();
    /// t.evict(&[2]).unwrap();
    /// let picked = t.project(&[vec![2, 0]]).unwrap();
    /// assert_eq!(picked.values_f32().unwrap(), vec![4.0, 5.0, 0.0, 1.0]);
    /// ```
    pub fn project(&self, selection: &[Vec<usize>]) -> Result<Tensor> {
        self.state.check_live()?;
        if selection.len() != self.grid.len() {
            return Err(tiling(format!(
                "a selection of rank {} for a grid of rank {}",
                selection.len(),
                self.grid.len()
            )));
        }
        for (a, axis) in selection.iter().enumerate() {
            if axis.is_empty() {
                return Err(tiling(format!("axis {a} of the selection is empty")));
            }
            let mut seen = vec![false; self.grid[a]];
            for &c in axis {
                match seen.get_mut(c) {
                    None => {
                        return Err(tiling(format!("coordinate {c} of axis {a} is outside the grid {:?}", self.grid)))
                    }
                    Some(true) => return Err(tiling(format!("coordinate {c} is repeated in axis {a}"))),
                    Some(s) => *s = true,
                }
            }
        }
        let compact: Vec<usize> = selection.iter().zip(&self.tile).map(|(axis, &t)| axis.len() * t).collect();
        let destination = HostCarrier::zeros(self.kind, product(&compact, "projection")?)?;
        let to: Arc<dyn Carrier> = destination.clone();
        let to_at = Window::of(&*to);
        let tiles = self.tiles.lock();
        // Every selected tile, first axis fastest: its grid coordinate and its place in the grid of picks.
        let picks: usize = selection.iter().map(Vec::len).product();
        for pick in 0..picks {
            let (mut rest, mut grid_coord, mut origin, mut stride) = (pick, Vec::new(), 0, 1);
            for (a, axis) in selection.iter().enumerate() {
                let k = rest % axis.len();
                rest /= axis.len();
                grid_coord.push(axis[k]);
                origin += k * self.tile[a] * stride;
                stride *= compact[a];
            }
            let tile = &tiles[self.tile_index(&grid_coord)?];
            let runs = rows_within(&self.tile, &compact, origin);
            tier_ops::copy_runs((&*tile.current.carrier, &tile.current.window), (&*to, &to_at), &runs)?;
        }
        drop(tiles);
        self.state.check_live()?; // released while gathering: the copies may have read nothing
        let extents: Vec<usize> = compact;
        Tensor::canonical(destination, &extents)
    }

    /// Move tiles `indices` to the primary tier (tiles there already are skipped); every
    /// tile at once, or none. Waits first for an asynchronous request still running.
    pub fn promote(self: &Arc<Self>, indices: &[usize]) -> Result<()> {
        self.request(indices, false)
    }

    /// Move tiles `indices` to the secondary tier (see [`promote`](Self::promote)).
    pub fn evict(self: &Arc<Self>, indices: &[usize]) -> Result<()> {
        self.request(indices, true)
    }

    /// Start [`promote`](Self::promote) on an engine thread: refusals (released, a pending
    /// move, bad indices) return here before any effect; see the module docs for what is
    /// refused until the handle is done.
    pub fn promote_async(self: &Arc<Self>, indices: &[usize]) -> Result<ResidencyHandle> {
        self.request_async(indices, false)
    }

    /// Start [`evict`](Self::evict) on an engine thread (see
    /// [`promote_async`](Self::promote_async)).
    pub fn evict_async(self: &Arc<Self>, indices: &[usize]) -> Result<ResidencyHandle> {
        self.request_async(indices, true)
    }

    fn request(self: &Arc<Self>, indices: &[usize], evict: bool) -> Result<()> {
        let composite: Arc<dyn Carrier> = self.clone();
        self.transitions.blocking(
            || composite.claim(action(evict)),
            || match self.begin(indices, evict)? {
                Some(staged) => self.complete(staged),
                None => Ok(()),
            },
        )
    }

    fn request_async(self: &Arc<Self>, indices: &[usize], evict: bool) -> Result<ResidencyHandle> {
        let composite = self.clone();
        let held: Arc<dyn Carrier> = self.clone();
        self.transitions.start(
            || held.claim(action(evict)),
            || self.begin(indices, evict),
            move |staged| composite.complete(staged),
        )
    }

    /// Stage a request under the tiles' lock: `None` when nothing is left to copy (committed
    /// here); else the staged tiles. Reads see the old tiles until the commit swaps them, so
    /// neither a blocking nor an asynchronous request keeps the lock while it copies.
    fn begin(&self, indices: &[usize], evict: bool) -> Result<Option<Vec<StagedTile>>> {
        self.check_indices(indices)?;
        let mut tiles = self.tiles.lock();
        let staged = self.stage(&tiles, indices, evict)?;
        if staged.iter().all(|s| !s.step.transfers()) {
            self.finish(&mut tiles, staged, Ok(()))?;
            return Ok(None);
        }
        Ok(Some(staged))
    }

    /// Copy a staged request, then commit it or give back what it made. A hook's panic fails
    /// the request like any other failure.
    fn complete(&self, staged: Vec<StagedTile>) -> Result<()> {
        let copied = tier_ops::contained(|| self.copy(&staged));
        self.finish(&mut self.tiles.lock(), staged, copied)
    }

    fn no_tile(&self, index: usize) -> ModelError {
        // The grid's product fitted at construction.
        tiling(format!("tile {index} is out of range for {} tiles", self.grid.iter().product::<usize>()))
    }

    /// In range and without duplicates.
    fn check_indices(&self, indices: &[usize]) -> Result<()> {
        let count = self.tiles.lock().len();
        let mut seen = vec![false; count];
        for &i in indices {
            match seen.get_mut(i) {
                None => return Err(self.no_tile(i)),
                Some(true) => return Err(tiling(format!("tile {i} is requested twice"))),
                Some(s) => *s = true,
            }
        }
        Ok(())
    }

    /// Each requested tile's transition, with the fresh tiles made in one batch; on failure
    /// none is left and nothing else has changed.
    fn stage(&self, tiles: &[Tile], indices: &[usize], evict: bool) -> Result<Vec<StagedTile>> {
        let steps: Vec<(usize, Transition)> = indices
            .iter()
            .filter_map(|&i| tiles[i].residency.plan(evict, tiles[i].writes).map(|step| (i, step)))
            .collect();
        let target = if evict { Tier::Secondary } else { Tier::Primary };
        let mut fresh =
            self.fresh_tiles(target, steps.iter().filter(|(_, step)| step.transfers()).count())?.into_iter();
        Ok(steps
            .into_iter()
            .map(|(index, step)| StagedTile {
                index,
                step,
                writes: tiles[index].writes,
                source: tiles[index].current.clone(),
                fresh: if step.transfers() { fresh.next() } else { None },
            })
            .collect())
    }

    /// Every staged tile's values into its fresh tile: a run of host tiles going to
    /// consecutive regions of one file (an eviction into a slab), or back, is one gather
    /// write or one scatter read; any other tile is one copy of its own.
    fn copy(&self, staged: &[StagedTile]) -> Result<()> {
        let bytes = (self.tile_slots * self.kind.size()) as u64;
        let mut first = 0;
        while first < staged.len() {
            let run = file_run(&staged[first..], bytes);
            if run > 1 {
                self.copy_file_run(&staged[first..first + run])?;
                first += run;
                continue;
            }
            let s = &staged[first];
            if let Some(fresh) = &s.fresh {
                let whole = [(0, 0, self.tile_slots)];
                tier_ops::copy_runs((&*s.source.carrier, &s.source.window), (&*fresh.carrier, &fresh.window), &whole)?;
            }
            first += 1;
        }
        Ok(())
    }

    /// A run [`file_run`] found: host tiles into consecutive file regions, or back.
    fn copy_file_run(&self, run: &[StagedTile]) -> Result<()> {
        let ends =
            |s: &StagedTile| (s.source.window.clone(), s.fresh.as_ref().expect("a run transfers").window.clone());
        let hosts: Vec<Arc<HostStore>> = run
            .iter()
            .map(|s| match ends(s) {
                (Window::Host(h), _) | (_, Window::Host(h)) => h,
                _ => unreachable!("a run is host on one side"),
            })
            .collect();
        let bytes = self.tile_slots * self.kind.size();
        match ends(&run[0]) {
            (Window::Host(_), Window::File(file, base)) => {
                let guards: Vec<_> = hosts.iter().map(|h| h.read()).collect();
                let parts: Vec<&[u8]> = guards.iter().map(|g| &g.as_slice()[..bytes]).collect();
                crate::copy::vectored::file_write_gather(file.file(), base, &parts)
                    .map_err(|e| ModelError::io("writing tiles to their slab", e))
            }
            (Window::File(file, base), Window::Host(_)) => {
                let mut guards: Vec<_> = hosts.iter().map(|h| h.write()).collect();
                let parts: Vec<(*mut u8, usize)> =
                    guards.iter_mut().map(|g| (g.as_mut_slice()[..bytes].as_mut_ptr(), bytes)).collect();
                // SAFETY: every pointer is the start of `bytes` bytes of a distinct host tile
                // (fresh tiles, one buffer each) whose write guard is held in `guards` until
                // the read returns, so nothing else reads or writes them meanwhile.
                unsafe { crate::copy::vectored::file_read_scatter(file.file(), base, &parts) }
                    .map_err(|e| ModelError::io("reading tiles from their slab", e))
            }
            _ => unreachable!("a run is host on one side and a file on the other"),
        }
    }

    fn abandon(&self, staged: Vec<StagedTile>) {
        self.give_back(staged.into_iter().filter_map(|s| s.fresh));
    }

    /// Commit every staged tile at once after its copy succeeded, or give back what was made.
    fn finish(&self, tiles: &mut [Tile], staged: Vec<StagedTile>, copied: Result<()>) -> Result<()> {
        if let Err(e) = copied {
            self.abandon(staged);
            return Err(e);
        }
        // The tiles left behind go back together: one slab step, one batch of buffers.
        let mut left_behind = Vec::new();
        for s in staged {
            let tile = &mut tiles[s.index];
            let left = match (s.step, s.fresh) {
                (Transition::CopyUp, Some(fresh)) => {
                    tile.clean = Some(std::mem::replace(&mut tile.current, fresh));
                    None
                }
                (_, Some(fresh)) => Some(std::mem::replace(&mut tile.current, fresh)),
                // A clean eviction: the kept copy is current again.
                (_, None) => tile.clean.take().map(|copy| std::mem::replace(&mut tile.current, copy)),
            };
            left_behind.extend(left);
            tile.residency.commit(s.step, s.writes);
        }
        self.give_back(left_behind);
        Ok(())
    }

    /// The rows of tile `index` inside the logical array: `(logical slot, in-tile slot,
    /// count)` runs along the first mode.
    fn runs_of(&self, index: usize) -> Vec<(usize, usize, usize)> {
        // The tile's origin, as a logical slot.
        let (mut rest, mut origin, mut stride) = (index, 0, 1);
        for a in 0..self.grid.len() {
            origin += (rest % self.grid[a]) * self.tile[a] * stride;
            rest /= self.grid[a];
            stride *= self.logical[a];
        }
        rows_within(&self.tile, &self.logical, origin)
            .into_iter()
            .map(|(within, outer, count)| (outer, within, count))
            .collect()
    }

    /// The tile holding logical slot `slot`, and the slot within it.
    fn locate(&self, slot: usize) -> (usize, usize) {
        let (mut rest, mut tile, mut within, mut grid_stride, mut tile_stride) = (slot, 0, 0, 1, 1);
        for a in 0..self.grid.len() {
            let x = rest % self.logical[a];
            rest /= self.logical[a];
            tile += (x / self.tile[a]) * grid_stride;
            within += (x % self.tile[a]) * tile_stride;
            grid_stride *= self.grid[a];
            tile_stride *= self.tile[a];
        }
        (tile, within)
    }
}

/// The rows of a tile of shape `tile` placed at slot `origin` of a dense array of shape
/// `outer` (both first mode fastest): `(in-tile slot, array slot, count)` runs along the
/// first mode.
fn rows_within(tile: &[usize], outer: &[usize], origin: usize) -> Vec<(usize, usize, usize)> {
    let row = tile[0];
    let rows: usize = tile[1..].iter().product();
    (0..rows)
        .map(|r| {
            let (mut rest, mut offset, mut stride) = (r, 0, outer[0]);
            for a in 1..tile.len() {
                offset += (rest % tile[a]) * stride;
                rest /= tile[a];
                stride *= outer[a];
            }
            (r * row, origin + offset, row)
        })
        .collect()
}

/// How many staged tiles from the first go between host memory and consecutive regions of
/// one file, in order (at most one vectored call's worth): 1 when the first does not start
/// such a run.
fn file_run(staged: &[StagedTile], region_bytes: u64) -> usize {
    let file_side = |s: &StagedTile| -> Option<(bool, *const FileStore, u64)> {
        match (&s.source.window, &s.fresh.as_ref()?.window) {
            (Window::Host(_), Window::File(file, base)) => Some((true, Arc::as_ptr(file), *base)),
            (Window::File(file, base), Window::Host(_)) => Some((false, Arc::as_ptr(file), *base)),
            _ => None,
        }
    };
    let Some((writes, file, base)) = file_side(&staged[0]) else { return 1 };
    let limit = staged.len().min(crate::copy::vectored::MAX_RANGES);
    (1..limit).find(|&k| file_side(&staged[k]) != Some((writes, file, base + k as u64 * region_bytes))).unwrap_or(limit)
}

impl Carrier for TiledEvictable {
    fn state(&self, _: &HookToken) -> &CarrierState {
        &self.state
    }

    fn elem_kind(&self) -> ElemKind {
        self.kind
    }

    fn size(&self) -> usize {
        self.state.live_size(self.slots)
    }

    fn read_slot(&self, token: &HookToken, i: usize) -> Result<Scalar> {
        admitted(token, &self.state)?;
        let (tile, within) = self.locate(i);
        // Under the lock: a request's commit cannot release the tile while it is read.
        let tiles = self.tiles.lock();
        let tile = tiles.get(tile).ok_or_else(|| ModelError::Released { carrier: "TiledEvictable".into() })?;
        tile.current.carrier.read_slot(&tile.current.carrier.hook(), within)
    }

    /// The first write to a tile releases its clean copy: it would be stale.
    fn write_slot(&self, token: &HookToken, i: usize, v: Scalar) -> Result<()> {
        admitted(token, &self.state)?;
        let (index, within) = self.locate(i);
        let mut tiles = self.tiles.lock();
        let tile = tiles.get_mut(index).ok_or_else(|| ModelError::Released { carrier: "TiledEvictable".into() })?;
        tile.current.carrier.write_slot(&tile.current.carrier.hook(), within, v)?;
        tile.writes += 1;
        tile.residency.mark_dirty();
        let stale = tile.clean.take();
        self.give_back(stale);
        Ok(())
    }

    fn is_mutable_hook(&self) -> bool {
        self.mutable
    }

    /// Releases every tile, every clean copy and both tiers.
    fn release_storage(&self, token: &HookToken) {
        if !token.admits(&self.state) {
            return;
        }
        let tiles = std::mem::take(&mut *self.tiles.lock());
        for tile in tiles {
            self.give_back(std::iter::once(tile.current).chain(tile.clean));
        }
        for tier in &self.tiers {
            tier.state(HOOK).disown(self.owner);
            let _ = tier.release();
        }
    }
}
