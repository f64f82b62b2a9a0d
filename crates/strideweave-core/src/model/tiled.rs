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
//! * **The book.** Where each tile is, what pins it and its clean copy are kept in a
//!   [`TileBook`], the one set of rules the Python package's `TiledEvictable` follows too;
//!   this type adds what is done *to* its tiles, carriers of this model (make fresh ones,
//!   copy into them, release them).
//! * **Reads and writes** go to a tile's current carrier, on either tier (a secondary tile is
//!   read in place). A write raises the version by one; a write to a tile a pending request
//!   or projection pins is refused (`ModelError::Tiles(TileRefusal::WritePinned)`), while
//!   writes to every other tile go ahead.
//! * **Residency.** [`promote`](TiledEvictable::promote) and [`evict`](TiledEvictable::evict)
//!   move a set of tiles, each by the core's residency rule
//!   ([`Residency`](super::Residency), the Evictable's): a tile moves into a fresh tile of
//!   the other tier, or, made with
//!   [`retaining_clean`](TiledEvictable::retaining_clean), a promote copies and keeps the
//!   secondary tile as the tile's clean copy, and an evict of a clean tile releases the
//!   primary tile and makes the copy current again, writing nothing. The first write to a
//!   tile releases its clean copy. A request pins its tiles from its call to its end:
//!   requests on disjoint tiles run together, and a request on a tile a pending request or
//!   projection pins is refused at its call (`TileRefusal::Pinned`), not queued. Every tile
//!   of a request commits at once, or, when any copy fails, none. `promote_async` and
//!   `evict_async` admit or refuse the request on the calling thread and run its copies on
//!   an engine thread; reads of its tiles see the old tiles until the commit. Residency
//!   changes alter no value and no version.
//! * **Residency policy.** Made with [`with_policy`](TiledEvictable::with_policy), the
//!   composite keeps at most a budget of bytes of tiles on the primary tier, counting those
//!   a pending promote brings in: a promote that would pass it first evicts, in the same
//!   request, unpinned primary tiles outside it, clean ones first, then the least recently
//!   used (a read, a write, a promote or a projection uses a tile). Those evictions commit
//!   before the promote's own tiles and stay committed should it fail. A promote of more
//!   tiles than the budget holds is refused (`TileRefusal::OverBudget`), as is one whose room
//!   the pins do not leave (`TileRefusal::NoRoom`), both before any effect.
//! * **Projections** ([`project`](TiledEvictable::project)) pin the tiles they read and copy
//!   them without holding the book: a request committed meanwhile keeps a tile it replaced
//!   until the projection is done with it.
//! * **Release and moves.** [`release`](TiledEvictable::release) is refused while a request
//!   or projection is pending (`TileRefusal::Pending`), changing nothing. A move of the
//!   composite's tensor claims it (writes are refused meanwhile, and so are requests that
//!   start after the claim) and reads every slot under the book, so no read meets a tile a
//!   commit is swapping, and a residency change meanwhile alters no value; while a request
//!   or projection is pending, the move's commit (the composite's release) is refused,
//!   failing the move and leaving the composite live. The carrier trait's own `release()`,
//!   through an `Arc<dyn Carrier>`, cannot be refused: while something is pending it marks
//!   the composite released and leaves its tiles and tiers to the last request or projection
//!   to end.
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
//!
//! // At most two tiles of 4 f32 on the primary tier: a third promote evicts the tile used least recently.
//! let t = TiledEvictable::with_policy(
//!     HostCarrier::zeros(ElemKind::F32, 0).unwrap(),
//!     HostCarrier::from_f32(&values),
//!     &[4],
//!     &[4],
//!     false,
//!     2 * 4 * 4,
//! )
//! .unwrap();
//! t.promote(&[0]).unwrap();
//! t.promote(&[1]).unwrap();
//! t.get(0).unwrap(); // tile 0 used after tile 1
//! t.promote(&[2]).unwrap();
//! assert_eq!(t.tiles_on(Tier::Primary).unwrap(), [0, 2]);
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::awaitable::ResidencyHandle;
use super::carrier::{admitted, BulkStorage, Carrier, CarrierExt, ClassKey, HookCall, HookToken, IntoCarrier, HOOK};
use super::error::{ModelError, Result};
use super::file::FileCarrier;
use super::host::{HostCarrier, HostStore};
use super::residency::Tier;
use super::state::{CarrierState, OwnerToken};
use super::tensor::Tensor;
use super::tier_ops::{self, Window};
use super::tile_book::{self, TileBook, TileBudget, TileRefusal, TileRequest};
use super::two_tier::action;
use crate::engine::{pool, Completion};
use crate::storage::{ElemKind, FileSlab, FileStore, Scalar};

/// Numbers the slab files of this process's tiled carriers.
static SLAB_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A tile's carrier, with where its slots live for bulk copies: what the book holds for
/// each tile (its current carrier, its clean copy, a tile retired while a projection reads
/// it).
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
    tile_count: usize,
    slots: usize,
    /// The tiers, owned: the factories of fresh tiles.
    tiers: [Arc<dyn Carrier>; 2],
    /// For a file tier, the slab its fresh tiles are regions of.
    slabs: [Option<Arc<FileSlab>>; 2],
    /// Every tile, its residency, pins and clean copy, and the residency policy.
    book: TileBook<Held>,
}

impl std::fmt::Debug for TiledEvictable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TiledEvictable")
            .field("kind", &self.kind)
            .field("grid_shape", &self.grid)
            .field("tile_shape", &self.tile)
            .field("primary_tiles", &self.tiles_on(Tier::Primary).map(|on| on.len()).ok())
            .field("residency_budget", &self.book.budget())
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

/// A request the book admitted, until it ends: however it ends (done, failed, or its code
/// panicking past every containment) dropping it unpins its tiles, so no failure path
/// leaves a tile pinned or the composite's release refused for good.
struct Admitted {
    composite: Arc<TiledEvictable>,
    request: Option<TileRequest<Held>>,
    /// The tiles its commits replaced, given back once the request is over: its phases hold
    /// the tiles they copied from until then, and a host tile's buffer is kept for the next
    /// fresh tiles only when nothing else holds it.
    replaced: Vec<Held>,
}

impl Admitted {
    /// Run every phase, then end the request. A tile hook's panic fails it like an error.
    fn run(mut self) -> Result<()> {
        let request = self.request.as_ref().expect("an admitted request runs once");
        let outcome = tier_ops::contained(|| self.composite.run_phases(request, &mut self.replaced));
        drop(self);
        outcome
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Some(request) = self.request.take() {
            self.composite.book.finish(request);
            self.composite.end_pending(std::mem::take(&mut self.replaced));
        }
    }
}

/// The handle's completion of an asynchronous request: dropped before the request's
/// outcome was recorded (its engine job panicked outside the contained copies), it fails
/// the handle instead of leaving its waiters waiting.
struct Completes(Arc<Completion<Result<()>>>);

impl Drop for Completes {
    fn drop(&mut self) {
        self.0.commit(Err(ModelError::TransferPanicked { message: "a tiled residency request was abandoned".into() }));
    }
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
        Self::build(primary.into_carrier(), secondary.into_carrier(), grid_shape, tile_shape, false, None)
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
        Self::build(primary.into_carrier(), secondary.into_carrier(), grid_shape, tile_shape, true, None)
    }

    /// [`new`](Self::new) or, with `retain_clean`, [`retaining_clean`](Self::retaining_clean),
    /// under a residency policy: at most `budget_bytes` of tiles on the primary tier (see the
    /// module docs). Refused (`Tiling`), before any effect, besides `new`'s refusals: a
    /// budget below one tile's bytes, or a primary tier that seeds more tiles than it holds.
    pub fn with_policy(
        primary: impl IntoCarrier,
        secondary: impl IntoCarrier,
        grid_shape: &[usize],
        tile_shape: &[usize],
        retain_clean: bool,
        budget_bytes: usize,
    ) -> Result<Arc<Self>> {
        Self::build(
            primary.into_carrier(),
            secondary.into_carrier(),
            grid_shape,
            tile_shape,
            retain_clean,
            Some(budget_bytes),
        )
    }

    fn build(
        primary: Arc<dyn Carrier>,
        secondary: Arc<dyn Carrier>,
        grid: &[usize],
        tile: &[usize],
        retain_clean: bool,
        budget_bytes: Option<usize>,
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
        let tile_count = product(grid, "tile count")?;
        let seed_on = match (primary.size(), secondary.size()) {
            (p, 0) if p == slots => Tier::Primary,
            (0, s) if s == slots => Tier::Secondary,
            (p, s) => {
                return Err(tiling(format!(
                    "one tier must hold all {slots} slots and the other none (primary {p}, secondary {s})"
                )))
            }
        };
        let tile_bytes = tile_slots.checked_mul(kind.size()).ok_or_else(|| tiling("the tile size overflows"))?;
        let budget = budget_bytes.map(|bytes| TileBudget::new(bytes, tile_bytes)).transpose()?;
        if let Some(budget) = budget.filter(|b| seed_on == Tier::Primary && tile_count > b.tiles()) {
            return Err(tiling(format!(
                "the primary tier seeds {tile_count} tiles of {tile_bytes} bytes, over the residency_policy budget of {} bytes",
                budget.bytes()
            )));
        }
        let slab_for = |tier: &Arc<dyn Carrier>| -> Result<Option<Arc<FileSlab>>> {
            if tier.class_key() != ClassKey::of::<FileCarrier>() {
                return Ok(None);
            }
            let Some(BulkStorage::File(store)) = tier.bulk_storage(&tier.hook()) else { return Ok(None) };
            let dir = store.path().parent().map_or_else(|| std::path::PathBuf::from("."), |d| d.to_path_buf());
            let n = SLAB_COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!("strideweave-tiles-{}-{n}.slab", std::process::id()));
            Ok(Some(Arc::new(
                FileSlab::new(&path, tile_bytes as u64).map_err(|e| ModelError::io("making the tiles' slab", e))?,
            )))
        };
        let slabs = [slab_for(&primary)?, slab_for(&secondary)?];
        let owner = OwnerToken::fresh();
        primary.state(HOOK).adopt(owner)?;
        if let Err(e) = secondary.state(HOOK).adopt(owner) {
            primary.state(HOOK).disown(owner);
            return Err(e);
        }
        let mut composite = TiledEvictable {
            state: CarrierState::new("TiledEvictable"),
            owner,
            kind,
            mutable: primary.is_mutable_hook(),
            grid: grid.to_vec(),
            tile: tile.to_vec(),
            logical,
            tile_slots,
            tile_count,
            slots,
            tiers: [primary, secondary],
            slabs,
            // Filled below, once the tiles are made (the fresh tiles come from the composite).
            book: TileBook::new(grid.to_vec(), Vec::new(), seed_on, retain_clean, budget),
        };
        // Split the full tier into tiles; on failure give back every tile made and both tiers.
        let seed = composite.tier(seed_on).clone();
        let seed_at = Window::of(&*seed);
        let seeded = composite.fresh_tiles(seed_on, tile_count).and_then(|made| {
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
        composite.book = TileBook::new(grid.to_vec(), made, seed_on, retain_clean, budget);
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
        self.tile_count
    }

    /// The index of the tile at grid coordinate `coord` (first mode fastest).
    pub fn tile_index(&self, coord: &[usize]) -> Result<usize> {
        if coord.len() != self.grid.len() || coord.iter().zip(&self.grid).any(|(&c, &g)| c >= g) {
            return Err(tiling(format!("tile coordinate {coord:?} is outside the grid {:?}", self.grid)));
        }
        Ok(coord.iter().zip(&self.grid).rev().fold(0, |acc, (&c, &g)| acc * g + c))
    }

    /// What the book tells of tile `index`: `Tiling` out of range, `Released` once released.
    fn status(&self, index: usize) -> Result<tile_book::TileStatus> {
        if index >= self.tile_count {
            return Err(self.no_tile(index));
        }
        self.book.state(index)?.ok_or_else(|| self.released())
    }

    /// The tier tile `index` is on.
    pub fn location(&self, index: usize) -> Result<Tier> {
        Ok(self.status(index)?.tier)
    }

    /// Whether tile `index` is on the primary tier with its clean copy kept (an evict of it
    /// writes nothing).
    pub fn is_clean(&self, index: usize) -> Result<bool> {
        Ok(self.status(index)?.clean)
    }

    /// Whether a pending request or projection pins tile `index`: a write to it, and another
    /// request on it, are refused until it ends.
    pub fn is_pinned(&self, index: usize) -> Result<bool> {
        Ok(self.status(index)?.pinned)
    }

    /// The indices of the tiles on `tier`, ascending (none once released). Refused
    /// (`TileRefusal::ReEntered`) when asked from the code of a tile the composite is reading
    /// or writing on this thread.
    pub fn tiles_on(&self, tier: Tier) -> Result<Vec<usize>> {
        Ok(self.book.tiles_on(tier)?)
    }

    /// The residency policy's budget, if the composite was made
    /// [`with_policy`](Self::with_policy).
    pub fn residency_budget(&self) -> Option<TileBudget> {
        self.book.budget()
    }

    /// Gather the tiles `selection` names (one list of grid coordinates per axis, their
    /// Cartesian product, in the caller's order) into a fresh host carrier: a dense tensor of
    /// shape `selection[a].len() * tile_shape[a]`, first mode fastest, each tile read where
    /// it is (residency unchanged). The selected tiles are pinned while they are copied:
    /// writes to them and requests on them are refused meanwhile. Refused (`Tiling`) for a
    /// rank mismatch, an empty axis, a coordinate repeated in an axis or outside the grid;
    /// `Released` once released.
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
        // Every selected tile, first axis fastest: its index and where it goes in the grid of
        // picks (distinct tiles: no coordinate repeats in an axis).
        let picks: usize = selection.iter().map(Vec::len).product();
        let mut indices = Vec::with_capacity(picks);
        let mut origins = Vec::with_capacity(picks);
        for pick in 0..picks {
            let (mut rest, mut grid_coord, mut origin, mut stride) = (pick, Vec::new(), 0, 1);
            for (a, axis) in selection.iter().enumerate() {
                let k = rest % axis.len();
                rest /= axis.len();
                grid_coord.push(axis[k]);
                origin += k * self.tile[a] * stride;
                stride *= compact[a];
            }
            indices.push(self.tile_index(&grid_coord)?);
            origins.push(origin);
        }
        // Pinned, the tiles stay as they are for the copies without the book's lock: nobody
        // writes them, and a tile a request replaces meanwhile is released only after the
        // unpin below. A tile hook's panic fails the projection like an error, after the unpin.
        let pin = self.book.pin_reading(&indices).map_err(|refusal| self.refused(refusal))?;
        let copied = tier_ops::contained(|| {
            for (held, &origin) in pin.tiles().iter().zip(&origins) {
                let runs = rows_within(&self.tile, &compact, origin);
                tier_ops::copy_runs((&*held.carrier, &held.window), (&*to, &to_at), &runs)?;
            }
            Ok(())
        });
        let retired = self.book.unpin(pin);
        self.end_pending(retired);
        copied?;
        self.state.check_live()?; // released while gathering (through the trait's release)
        Tensor::canonical(destination, &compact)
    }

    /// Move tiles `indices` to the primary tier (tiles there already are skipped); every
    /// tile at once, or none. Refused, before any effect, for a bad index, a tile a pending
    /// request or projection pins, or a promote the residency policy cannot make room for.
    pub fn promote(self: &Arc<Self>, indices: &[usize]) -> Result<()> {
        self.request(indices, false)
    }

    /// Move tiles `indices` to the secondary tier (see [`promote`](Self::promote)).
    pub fn evict(self: &Arc<Self>, indices: &[usize]) -> Result<()> {
        self.request(indices, true)
    }

    /// Start [`promote`](Self::promote) on an engine thread: refusals (released, a pending
    /// move, bad indices, a pinned tile, the policy's) return here before any effect; the
    /// tiles stay pinned until the handle is done (see the module docs).
    pub fn promote_async(self: &Arc<Self>, indices: &[usize]) -> Result<ResidencyHandle> {
        self.request_async(indices, false)
    }

    /// Start [`evict`](Self::evict) on an engine thread (see
    /// [`promote_async`](Self::promote_async)).
    pub fn evict_async(self: &Arc<Self>, indices: &[usize]) -> Result<ResidencyHandle> {
        self.request_async(indices, true)
    }

    fn request(self: &Arc<Self>, indices: &[usize], evict: bool) -> Result<()> {
        match self.admit(indices, evict)? {
            Some(admitted) => admitted.run(),
            None => Ok(()),
        }
    }

    fn request_async(self: &Arc<Self>, indices: &[usize], evict: bool) -> Result<ResidencyHandle> {
        let Some(admitted) = self.admit(indices, evict)? else { return Ok(ResidencyHandle::done(Ok(()))) };
        let done = Completes(Arc::new(Completion::new()));
        let handle = ResidencyHandle::on(done.0.clone());
        pool::submit(move || {
            let outcome = admitted.run();
            done.0.commit(outcome);
        });
        Ok(handle)
    }

    /// Check `indices` and have the book admit the request, pinning its tiles: `None` when
    /// none of them moves. Refused before any effect.
    fn admit(self: &Arc<Self>, indices: &[usize], evict: bool) -> Result<Option<Admitted>> {
        self.check_indices(indices)?;
        self.state.check_live()?;
        // A pending move of the composite (or a release under way) claims it: a request is
        // refused then, as it was when requests claimed the composite themselves. The check
        // and the admission are not one step; a request that slips in between fails the
        // move's commit instead (`release_claimed_storage`), so of the two one goes ahead.
        if self.state.is_claimed() {
            return Err(self.state.pending_refusal(action(evict)));
        }
        let request = self.book.request(indices, evict, &[]).map_err(|refusal| self.refused(refusal))?;
        Ok(request.map(|request| Admitted { composite: self.clone(), request: Some(request), replaced: Vec::new() }))
    }

    /// Each phase of an admitted request in order (under a policy, the evictions that make
    /// room, then the request's own tiles): fresh tiles, the copies into them, and the
    /// commit that swaps every tile of the phase at once, the tiles it replaced into
    /// `replaced`. A failure gives back the phase's fresh tiles and stops; a phase committed
    /// already stays committed (no value changed).
    fn run_phases(&self, request: &TileRequest<Held>, replaced: &mut Vec<Held>) -> Result<()> {
        for phase in request.phases() {
            let fresh = self.fresh_tiles(phase.target(), phase.copy_count())?;
            let pairs: Vec<(&Held, &Held)> = phase.copying().map(|step| step.source()).zip(&fresh).collect();
            if let Err(e) = tier_ops::contained(|| self.copy(&pairs)) {
                self.give_back(fresh);
                return Err(e);
            }
            replaced.extend(self.book.commit(phase, fresh));
        }
        Ok(())
    }

    /// After a request or projection ends: give back the tiles the book handed back, and,
    /// when the composite was released through [`CarrierExt::release`] while it was pending
    /// (a release that cannot be refused), release what that release had to leave to the
    /// last request or projection to end.
    fn end_pending(&self, handed_back: Vec<Held>) {
        self.give_back(handed_back);
        if self.state.is_released() {
            if let Ok(Some(tiles)) = self.book.release() {
                self.release_all(tiles);
            }
        }
    }

    /// Every tile and clean copy the book's first release handed back, then both tiers (the
    /// tiles element reads were reading come back from their last reader).
    fn release_all(&self, tiles: Vec<Held>) {
        self.give_back(tiles);
        for tier in &self.tiers {
            tier.state(HOOK).disown(self.owner);
            let _ = tier.release();
        }
    }

    /// Release every tile, every clean copy and both tiers: idempotent; refused, changing
    /// nothing, while a residency request or projection is pending
    /// (`ModelError::Tiles(TileRefusal::Pending)`), and, as for any carrier, while a move
    /// claims the composite (`Claimed`) or a composite owns it (`Owned`).
    ///
    /// This shadows [`CarrierExt::release`], which marks a carrier released before its
    /// release hook runs, so the composite cannot refuse it there (the carrier trait has no
    /// hook before that mark). Here the composite is claimed first, the book's release
    /// (refused while anything is pending) runs under the claim in
    /// [`release_claimed_storage`](Carrier::release_claimed_storage), and only then is the
    /// composite marked released, in one step with the end of the claim, as a move's commit
    /// releases its source: a refusal leaves everything as it was. The claim lasts only the
    /// release, not the pending requests: a claim held while requests run would refuse
    /// writes to every tile and allow one request at a time, which the pins replace. The
    /// trait's release, through an `Arc<dyn Carrier>`, cannot be refused: while something
    /// is pending it marks the composite released and leaves its tiles and tiers to the last
    /// request or projection to end.
    pub fn release(self: &Arc<Self>) -> Result<()> {
        if self.state.is_released() {
            return Ok(());
        }
        let composite: Arc<dyn Carrier> = self.clone();
        let claim = match self.state.claim_for(&composite, "release") {
            Ok(claim) => claim,
            // Released by another thread since the look above: release is idempotent.
            Err(ModelError::Released { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        // A refusal hands the claim back with the error; dropping it ends the claim.
        claim.commit_release().map_err(|(_claim, e)| e)
    }

    fn released(&self) -> ModelError {
        ModelError::Released { carrier: "TiledEvictable".into() }
    }

    /// A refusal of the book as the model reports it: a book released under a read, a write
    /// or a request that found the composite live is the carrier's `Released`, as for any
    /// carrier released meanwhile; every other refusal is `ModelError::Tiles`.
    fn refused(&self, refusal: TileRefusal) -> ModelError {
        match refusal {
            TileRefusal::Released { .. } => self.released(),
            other => ModelError::Tiles(other),
        }
    }

    /// [`refused`](Self::refused), for the book's read and write, whose errors are the
    /// model's already.
    fn refused_error(&self, e: ModelError) -> ModelError {
        match e {
            ModelError::Tiles(refusal) => self.refused(refusal),
            other => other,
        }
    }

    fn no_tile(&self, index: usize) -> ModelError {
        tile_book::out_of_range(index, self.tile_count)
    }

    /// In range and without duplicates.
    fn check_indices(&self, indices: &[usize]) -> Result<()> {
        let mut seen = vec![false; self.tile_count];
        for &i in indices {
            match seen.get_mut(i) {
                None => return Err(self.no_tile(i)),
                Some(true) => return Err(tiling(format!("tile {i} is requested twice"))),
                Some(s) => *s = true,
            }
        }
        Ok(())
    }

    /// Each `(source, fresh)` pair's values into its fresh tile: a run of host tiles going
    /// to consecutive regions of one file (an eviction into a slab), or back, is one gather
    /// write or one scatter read; any other tile is one copy of its own.
    fn copy(&self, pairs: &[(&Held, &Held)]) -> Result<()> {
        let bytes = (self.tile_slots * self.kind.size()) as u64;
        let mut first = 0;
        while first < pairs.len() {
            let run = file_run(&pairs[first..], bytes);
            if run > 1 {
                self.copy_file_run(&pairs[first..first + run])?;
                first += run;
                continue;
            }
            let (source, fresh) = pairs[first];
            let whole = [(0, 0, self.tile_slots)];
            tier_ops::copy_runs((&*source.carrier, &source.window), (&*fresh.carrier, &fresh.window), &whole)?;
            first += 1;
        }
        Ok(())
    }

    /// A run [`file_run`] found: host tiles into consecutive file regions, or back.
    fn copy_file_run(&self, run: &[(&Held, &Held)]) -> Result<()> {
        let hosts: Vec<Arc<HostStore>> = run
            .iter()
            .map(|(source, fresh)| match (&source.window, &fresh.window) {
                (Window::Host(h), _) | (_, Window::Host(h)) => h.clone(),
                _ => unreachable!("a run is host on one side"),
            })
            .collect();
        let bytes = self.tile_slots * self.kind.size();
        match (&run[0].0.window, &run[0].1.window) {
            (Window::Host(_), Window::File(file, base)) => {
                let guards: Vec<_> = hosts.iter().map(|h| h.read()).collect();
                let parts: Vec<&[u8]> = guards.iter().map(|g| &g.as_slice()[..bytes]).collect();
                crate::copy::vectored::file_write_gather(file.file(), *base, &parts)
                    .map_err(|e| ModelError::io("writing tiles to their slab", e))
            }
            (Window::File(file, base), Window::Host(_)) => {
                let mut guards: Vec<_> = hosts.iter().map(|h| h.write()).collect();
                let parts: Vec<(*mut u8, usize)> =
                    guards.iter_mut().map(|g| (g.as_mut_slice()[..bytes].as_mut_ptr(), bytes)).collect();
                // SAFETY: every pointer is the start of `bytes` bytes of a distinct host tile
                // (fresh tiles, one buffer each) whose write guard is held in `guards` until
                // the read returns, so nothing else reads or writes them meanwhile.
                unsafe { crate::copy::vectored::file_read_scatter(file.file(), *base, &parts) }
                    .map_err(|e| ModelError::io("reading tiles from their slab", e))
            }
            _ => unreachable!("a run is host on one side and a file on the other"),
        }
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

/// How many `(source, fresh)` pairs from the first go between host memory and consecutive
/// regions of one file, in order (at most one vectored call's worth): 1 when the first does
/// not start such a run.
fn file_run(pairs: &[(&Held, &Held)], region_bytes: u64) -> usize {
    let file_side = |(source, fresh): &(&Held, &Held)| -> Option<(bool, *const FileStore, u64)> {
        match (&source.window, &fresh.window) {
            (Window::Host(_), Window::File(file, base)) => Some((true, Arc::as_ptr(file), *base)),
            (Window::File(file, base), Window::Host(_)) => Some((false, Arc::as_ptr(file), *base)),
            _ => None,
        }
    };
    let Some((writes, file, base)) = file_side(&pairs[0]) else { return 1 };
    let limit = pairs.len().min(crate::copy::vectored::MAX_RANGES);
    (1..limit).find(|&k| file_side(&pairs[k]) != Some((writes, file, base + k as u64 * region_bytes))).unwrap_or(limit)
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

    /// As a reader of the tile: no commit or release releases it while it is read (a move of
    /// the composite reads every slot this way, so none meets a tile mid-swap); the tiles the
    /// read was the last reader of are given back after it.
    fn read_slot(&self, token: &HookToken, i: usize) -> Result<Scalar> {
        admitted(token, &self.state)?;
        let (tile, within) = self.locate(i);
        let (value, ended) = self.book.read(tile, |held| held.carrier.read_slot(&held.carrier.hook(), within));
        self.give_back(ended);
        value.map_err(|e| self.refused_error(e))
    }

    /// Refused on a pinned tile; the first write to a tile releases its clean copy, stale
    /// from then on.
    fn write_slot(&self, token: &HookToken, i: usize, v: Scalar) -> Result<()> {
        admitted(token, &self.state)?;
        let (tile, within) = self.locate(i);
        let ((), stale) = self
            .book
            .write(tile, |held| held.carrier.write_slot(&held.carrier.hook(), within, v))
            .map_err(|e| self.refused_error(e))?;
        self.give_back(stale);
        Ok(())
    }

    fn is_mutable_hook(&self) -> bool {
        self.mutable
    }

    /// Releases every tile, every clean copy and both tiers. Reached from
    /// [`CarrierExt::release`] through the trait, after the
    /// composite was marked released, so it cannot refuse: while a request or projection is
    /// pending the book keeps the tiles, and the last of them to end releases them
    /// (`end_pending`).
    fn release_storage(&self, token: &HookToken) {
        if !token.admits(&self.state) {
            return;
        }
        if let Ok(Some(tiles)) = self.book.release() {
            self.release_all(tiles);
        }
    }

    /// The release of [`TiledEvictable::release`] and of a move's commit, while the
    /// composite is still claimed and not yet marked released: refused while a request or
    /// projection is pending (`TileRefusal::Pending`), which leaves the composite live (the
    /// move fails).
    fn release_claimed_storage(&self, token: &HookToken) -> Result<()> {
        admitted(token, &self.state)?;
        if let Some(tiles) = self.book.release().map_err(|refusal| self.refused(refusal))? {
            self.release_all(tiles);
        }
        Ok(())
    }
}
