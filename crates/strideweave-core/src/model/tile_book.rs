//! The book of a tiled two-tier composite (extension-and-tiling.md §7): where each tile is,
//! which requests pin it, which projections read it in place, its clean copy, and the
//! residency policy's budget and least-recently-used order. It is the one place these rules
//! live: the Rust [`TiledEvictable`](super::TiledEvictable) keeps core carriers in it and the
//! Python binding keeps Python tiles, as [`TwoTier`](super::two_tier::TwoTier) serves both
//! Evictables. What is done *to* a tile (make a fresh one, copy into it, release it) stays
//! with each model; the book only hands tiles out and takes them back.
//!
//! * **Requests** ([`request`](TileBook::request)) pin every tile they cover, before any
//!   effect: a tile already pinned refuses the request, so requests on disjoint tiles run
//!   together and conflicting ones are refused, not queued. Each tile's step is the core's
//!   residency rule ([`Residency`], the Evictable's). A request's phases commit one at a
//!   time ([`commit`](TileBook::commit)), every tile of a phase at once; its end
//!   ([`finish`](TileBook::finish)) unpins.
//! * **Projections and the route out** pin the tiles they read
//!   ([`pin_reading`](TileBook::pin_reading), [`pin_all`](TileBook::pin_all)): a residency
//!   request refuses them meanwhile, and a request already running that replaces a tile a
//!   projection reads keeps the old tile until the last such reader finishes.
//! * **Writes** ([`write`](TileBook::write)) are refused on a pinned tile; a write drops the
//!   tile's clean copy. A write runs the tile's code outside the lock, as a writer of the
//!   tile: a request, projection, move out or inspection that would read or replace that
//!   tile waits for its writers to finish (they are not refused: a write is one slot).
//! * **Reads** ([`read`](TileBook::read)) run outside the lock too, as readers of the tile
//!   they use: a commit that replaces it, or the book's release, keeps it until the read ends
//!   and hands it back then.
//! * So a tile's code that waits for another thread using the composite (a tier's hook
//!   joining a thread that reads or writes another tile) does not wait for a lock its own
//!   read or write holds.
//! * A tile's own code that re-enters the book on the thread running it (during a read or a
//!   write) is refused ([`TileRefusal::ReEntered`]) instead of waiting for itself.
//! * **The residency policy** ([`TileBudget`]): a promote that would leave more tiles on the
//!   primary tier than the budget holds first evicts unpinned tiles outside the request,
//!   clean before dirty, least recently used first, in the same request.
//!
//! Tiles the book hands back (replaced, stale, retired, released) are the caller's to
//! release, outside the book's lock.
//!
//! ```
//! use strideweave_core::model::tile_book::TileBook;
//! use strideweave_core::model::Tier;
//!
//! // Three tiles named by strings, all on the primary tier.
//! let book = TileBook::new(vec![3], vec!["a", "b", "c"], Tier::Primary, false, None);
//! let request = book.request(&[1], true, &[]).unwrap().expect("tile 1 moves");
//! assert!(book.write(1, |_| Ok(())).is_err(), "pinned while the request runs");
//! let phase = &request.phases()[0];
//! assert_eq!(phase.copying().map(|s| *s.source()).collect::<Vec<_>>(), ["b"]);
//! let replaced = book.commit(phase, vec!["b on the secondary tier"]);
//! assert_eq!(replaced, ["b"]);
//! book.finish(request);
//! assert_eq!(book.tiles_on(Tier::Secondary).unwrap(), [1]);
//! ```

use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use parking_lot::{Condvar, Mutex, MutexGuard};
use thiserror::Error;

use super::error::{ModelError, Result};
use super::residency::{Residency, Tier, Transition};

/// Why the book refused. The texts are the Python package's, so both models say the same.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TileRefusal {
    /// The composite is released.
    #[error("cannot {action} a released TiledEvictable")]
    Released {
        /// What was refused ("promote tiles of", "project", …).
        action: &'static str,
    },
    /// A request covers a tile a pending request or projection pins.
    #[error(
        "cannot {action} a TiledEvictable: tile {coordinate} is pinned by a pending residency request or projection"
    )]
    Pinned {
        /// What was refused.
        action: &'static str,
        /// The tile's grid coordinate, as a tuple.
        coordinate: String,
    },
    /// A write to a pinned tile.
    #[error("cannot write to tile {coordinate} of a TiledEvictable: it is pinned by a pending residency request or projection")]
    WritePinned {
        /// The tile's grid coordinate, as a tuple.
        coordinate: String,
    },
    /// A release or a move while any request or projection is pending.
    #[error("cannot {action} a TiledEvictable while a residency request or projection is pending")]
    Pending {
        /// What was refused ("release", "move").
        action: &'static str,
    },
    /// A promote larger than the residency policy's budget by itself (a ValueError).
    #[error("cannot promote {tiles} tiles of a TiledEvictable: they need {bytes} bytes, over its residency_policy budget of {budget}")]
    OverBudget {
        /// The tiles requested.
        tiles: usize,
        /// Their bytes.
        bytes: usize,
        /// The budget in bytes.
        budget: usize,
    },
    /// A promote that needs room the pins do not leave.
    #[error("cannot promote tiles of a TiledEvictable within its residency_policy budget: {excess} tiles must leave the primary tier first and only {free} are neither pinned nor in use")]
    NoRoom {
        /// Tiles that must leave the primary tier.
        excess: usize,
        /// Tiles that could.
        free: usize,
    },
    /// A tile's own code (a tier's hook) called back into the composite while the book was
    /// using that tile on this thread.
    #[error("cannot {action} a TiledEvictable from the code of one of its own tiles")]
    ReEntered {
        /// What was refused.
        action: &'static str,
    },
}

impl TileRefusal {
    /// Whether the refusal is about the arguments (the spec's ValueError) rather than the
    /// composite's state (RuntimeError).
    pub fn is_bad_argument(&self) -> bool {
        matches!(self, TileRefusal::OverBudget { .. })
    }
}

/// The residency policy's budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileBudget {
    budget_bytes: usize,
    tile_bytes: usize,
}

impl TileBudget {
    /// `budget_bytes` of primary tier for tiles of `tile_bytes` each. Refused when the budget
    /// holds no tile.
    pub fn new(budget_bytes: usize, tile_bytes: usize) -> Result<Self> {
        if tile_bytes == 0 || budget_bytes < tile_bytes {
            return Err(ModelError::Tiling {
                message: format!("residency_policy budget {budget_bytes} bytes is below one tile's {tile_bytes} bytes"),
            });
        }
        Ok(TileBudget { budget_bytes, tile_bytes })
    }

    /// How many tiles the budget holds.
    pub fn tiles(&self) -> usize {
        self.budget_bytes / self.tile_bytes
    }

    /// The budget in bytes.
    pub fn bytes(&self) -> usize {
        self.budget_bytes
    }
}

/// One tile's entry.
struct Entry<T> {
    current: T,
    /// The tile's other-tier copy a `retain_clean` promote kept, while the tile is unwritten.
    clean: Option<T>,
    residency: Residency,
    /// Writes so far: the residency rule's version of this tile.
    writes: u64,
    /// Requests and readers holding the tile.
    pins: u32,
    /// Projections and element reads reading the tile in place.
    readers: u32,
    /// Element writes running on the tile (outside the lock).
    writers: u32,
    /// Tiles a commit replaced while readers read them: released when the last one finishes.
    retired: Vec<T>,
    /// A pending promote brings the tile in (it counts against the budget).
    promoting: bool,
    /// The tick of the tile's last use (least-recently-used order).
    last_use: u64,
}

struct Entries<T> {
    tiles: Vec<Entry<T>>,
    tick: u64,
    /// The tiles of entries the book's release found being read: handed back by their last
    /// reader (the release took every other tile).
    orphans: Vec<Orphan<T>>,
}

/// A released book's tile (with its clean copy and retired tiles) that element reads or
/// writes still use.
struct Orphan<T> {
    index: usize,
    users: u32,
    tiles: Vec<T>,
}

/// The book of a tiled composite (see the module docs). `T` is how a model holds a tile.
pub struct TileBook<T> {
    grid: Vec<usize>,
    budget: Option<TileBudget>,
    entries: Mutex<Entries<T>>,
    /// Set under the lock; read without it, so a tile's code asking whether its composite is
    /// released or busy gets an answer instead of waiting for the lock its own caller holds.
    released: AtomicBool,
    /// Requests and projections not finished (changed under the lock, read without it).
    pending: AtomicUsize,
    /// Signalled when a tile's last writer finishes.
    unwritten: Condvar,
}

impl<T> fmt::Debug for TileBook<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TileBook").field("grid", &self.grid).field("budget", &self.budget).finish_non_exhaustive()
    }
}

thread_local! {
    /// The books whose lock this thread holds (by address): a tile's code that calls back
    /// into one is refused instead of waiting for itself.
    static HELD_HERE: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// The book noted as in use by this thread (its lock held, or a tile's code running for
/// it) while this lives.
struct InUseHere {
    key: usize,
}

impl InUseHere {
    /// Note book `key` as in use here, or refuse when it is already (a tile's code re-entering).
    fn enter(key: usize, action: &'static str) -> std::result::Result<Self, TileRefusal> {
        HELD_HERE.with(|held| {
            let mut held = held.borrow_mut();
            if held.contains(&key) {
                return Err(TileRefusal::ReEntered { action });
            }
            held.push(key);
            Ok(InUseHere { key })
        })
    }
}

impl Drop for InUseHere {
    fn drop(&mut self) {
        HELD_HERE.with(|held| {
            let mut held = held.borrow_mut();
            if let Some(at) = held.iter().rposition(|&k| k == self.key) {
                held.remove(at);
            }
        });
    }
}

/// The book's lock, noted as held by this thread while it lives.
struct Held<'a, T> {
    guard: MutexGuard<'a, Entries<T>>,
    _here: InUseHere,
}

impl<T> std::ops::Deref for Held<'_, T> {
    type Target = Entries<T>;
    fn deref(&self) -> &Entries<T> {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for Held<'_, T> {
    fn deref_mut(&mut self) -> &mut Entries<T> {
        &mut self.guard
    }
}

/// One tile's step in a phase.
#[derive(Debug)]
pub struct TileStep<T> {
    index: usize,
    step: Transition,
    writes: u64,
    source: T,
}

impl<T> TileStep<T> {
    /// The tile's index.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The tile's current holder: what a copy reads (pinned, so nothing writes it).
    pub fn source(&self) -> &T {
        &self.source
    }

    /// Whether the step copies the tile into a fresh one (a clean eviction does not).
    pub fn transfers(&self) -> bool {
        self.step.transfers()
    }
}

/// One tier change of a request: its tiles into one tier.
#[derive(Debug)]
pub struct TilePhase<T> {
    evict: bool,
    steps: Vec<TileStep<T>>,
}

impl<T> TilePhase<T> {
    /// Whether the phase moves its tiles to the secondary tier.
    pub fn evicts(&self) -> bool {
        self.evict
    }

    /// The tier the phase's tiles go to.
    pub fn target(&self) -> Tier {
        if self.evict {
            Tier::Secondary
        } else {
            Tier::Primary
        }
    }

    /// Every tile of the phase.
    pub fn steps(&self) -> &[TileStep<T>] {
        &self.steps
    }

    /// The tiles the phase copies, in order: [`commit`](TileBook::commit) takes one fresh
    /// tile for each.
    pub fn copying(&self) -> impl Iterator<Item = &TileStep<T>> {
        self.steps.iter().filter(|s| s.transfers())
    }

    /// How many tiles the phase copies.
    pub fn copy_count(&self) -> usize {
        self.copying().count()
    }
}

/// A residency request admitted by [`TileBook::request`]: its tiles are pinned until
/// [`TileBook::finish`] takes it back.
#[derive(Debug)]
#[must_use = "a request pins its tiles until the book finishes it"]
pub struct TileRequest<T> {
    pinned: Vec<usize>,
    promoting: Vec<usize>,
    phases: Vec<TilePhase<T>>,
}

impl<T> TileRequest<T> {
    /// The phases, in order: the policy's evictions first, then the request's own tiles.
    pub fn phases(&self) -> &[TilePhase<T>] {
        &self.phases
    }

    /// Take the phases (and the tiles they hold) out of the request, so that a caller drops
    /// them where it chooses: [`TileBook::finish`] needs only what the request pinned.
    pub fn take_phases(&mut self) -> Vec<TilePhase<T>> {
        std::mem::take(&mut self.phases)
    }
}

/// Tiles pinned for reading by [`TileBook::pin_reading`] or [`TileBook::pin_all`], until
/// [`TileBook::unpin`] takes them back.
#[derive(Debug)]
#[must_use = "a reading pin holds its tiles until the book unpins it"]
pub struct ReadPin<T> {
    indices: Vec<usize>,
    reading: bool,
    tiles: Vec<T>,
}

impl<T> ReadPin<T> {
    /// The pinned tiles' holders, in the order asked for.
    pub fn tiles(&self) -> &[T] {
        &self.tiles
    }

    /// Hand the pinned tiles' holders to the caller, the pin keeping its indices: a binding
    /// drops them where it may (a Python object's last reference only with the GIL, which the
    /// book's lock is taken without).
    pub fn take_tiles(&mut self) -> Vec<T> {
        std::mem::take(&mut self.tiles)
    }

    /// The pinned tiles' indices, in the order asked for.
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }
}

/// What [`TileBook::state`] tells of one tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TileStatus {
    /// The tier holding it.
    pub tier: Tier,
    /// Whether a pending request or projection pins it.
    pub pinned: bool,
    /// Whether it is on the primary tier with its clean copy kept.
    pub clean: bool,
}

impl<T: Clone> TileBook<T> {
    /// A book of `tiles` (tile-index order) in a grid of `grid_shape`, all on tier `on`;
    /// `retain_clean` makes a promote keep each tile's secondary copy while it stays clean.
    pub fn new(
        grid_shape: Vec<usize>,
        tiles: Vec<T>,
        on: Tier,
        retain_clean: bool,
        budget: Option<TileBudget>,
    ) -> Self {
        let tiles = tiles
            .into_iter()
            .map(|current| {
                let mut residency = Residency::new(retain_clean);
                if on == Tier::Secondary {
                    residency.commit(Transition::Move { evict: true }, 0);
                }
                Entry {
                    current,
                    clean: None,
                    residency,
                    writes: 0,
                    pins: 0,
                    readers: 0,
                    writers: 0,
                    retired: Vec::new(),
                    promoting: false,
                    last_use: 0,
                }
            })
            .collect();
        TileBook {
            grid: grid_shape,
            budget,
            entries: Mutex::new(Entries { tiles, tick: 0, orphans: Vec::new() }),
            released: AtomicBool::new(false),
            pending: AtomicUsize::new(0),
            unwritten: Condvar::new(),
        }
    }

    /// The lock, or the refusal when this thread holds it already (a tile's code re-entering).
    fn lock(&self, action: &'static str) -> std::result::Result<Held<'_, T>, TileRefusal> {
        let here = self.in_use_here(action)?;
        Ok(Held { guard: self.entries.lock(), _here: here })
    }

    /// This book noted as in use by this thread, or the refusal when it is already.
    fn in_use_here(&self, action: &'static str) -> std::result::Result<InUseHere, TileRefusal> {
        InUseHere::enter(self as *const Self as usize, action)
    }

    /// Wait (the lock given up meanwhile) until no tile `busy` names has a writer; refused
    /// when the book is released meanwhile.
    fn wait_unwritten(
        &self,
        held: &mut Held<'_, T>,
        action: &'static str,
        mut busy: impl FnMut(&Entries<T>) -> bool,
    ) -> std::result::Result<(), TileRefusal> {
        while busy(held) {
            self.unwritten.wait(&mut held.guard);
            if self.released.load(Ordering::Acquire) {
                return Err(TileRefusal::Released { action });
            }
        }
        Ok(())
    }

    /// The lock, for a live book.
    fn lock_live(&self, action: &'static str) -> std::result::Result<Held<'_, T>, TileRefusal> {
        let held = self.lock(action)?;
        if self.released.load(Ordering::Acquire) {
            return Err(TileRefusal::Released { action });
        }
        Ok(held)
    }

    /// The grid coordinate of tile `index`, written as a Python tuple (`(1, 0)`, `(3,)`).
    pub fn coordinate_text(&self, index: usize) -> String {
        let mut rest = index;
        let parts: Vec<String> = self
            .grid
            .iter()
            .map(|&g| {
                let c = rest % g;
                rest /= g;
                c.to_string()
            })
            .collect();
        if parts.len() == 1 {
            format!("({},)", parts[0])
        } else {
            format!("({})", parts.join(", "))
        }
    }

    /// The residency policy's budget, if any.
    pub fn budget(&self) -> Option<TileBudget> {
        self.budget
    }

    /// Whether the composite's tiles have been released.
    pub fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// Whether a request or projection is pending.
    pub fn is_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire) > 0
    }

    /// Tile `index`'s tier, pins and cleanliness; `None` once released or out of range.
    /// Refused when asked from the code of a tile the book is using on this thread.
    pub fn state(&self, index: usize) -> std::result::Result<Option<TileStatus>, TileRefusal> {
        let entries = self.lock("query tile state of")?;
        if self.is_released() {
            return Ok(None);
        }
        Ok(entries.tiles.get(index).map(|e| TileStatus {
            tier: e.residency.resident(),
            pinned: e.pins > 0,
            clean: !e.residency.is_evicted() && e.clean.is_some(),
        }))
    }

    /// The indices of the tiles on `tier`, ascending (none once released): one consistent
    /// view, as a commit swaps every tile of a phase at once. Refused when asked from the code
    /// of a tile the book is using on this thread.
    pub fn tiles_on(&self, tier: Tier) -> std::result::Result<Vec<usize>, TileRefusal> {
        let entries = self.lock("list the tiles of")?;
        if self.is_released() {
            return Ok(Vec::new());
        }
        Ok((0..entries.tiles.len()).filter(|&i| entries.tiles[i].residency.resident() == tier).collect())
    }

    /// Run `inspect` on every tile's holder, tier and count of writes so far (tile-index
    /// order) under the book's lock: one consistent view, no tile written, replaced or
    /// released meanwhile (`action` names the refusal once released). A tile's count is
    /// taken with its write, under the lock, so it tells whether the tile changed since an
    /// earlier view exactly (the composite's version counts a write only after it leaves
    /// the book).
    pub fn inspect<R>(&self, action: &'static str, inspect: impl FnOnce(&[(&T, Tier, u64)]) -> Result<R>) -> Result<R> {
        let mut entries = self.lock_live(action)?;
        self.wait_unwritten(&mut entries, action, |e| e.tiles.iter().any(|t| t.writers > 0))?;
        let tiles: Vec<(&T, Tier, u64)> =
            entries.tiles.iter().map(|e| (&e.current, e.residency.resident(), e.writes)).collect();
        inspect(&tiles)
    }

    /// Run `read` on tile `index`'s holder, as a reader of it and outside the book's lock:
    /// a commit that replaces the tile meanwhile, or the book's release, keeps it until the
    /// read ends. Returns the read's outcome and the tiles this read was the last reader of
    /// (replaced or released meanwhile), to release. `read` calling back into this book on
    /// this thread is refused ([`TileRefusal::ReEntered`]).
    pub fn read<R>(&self, index: usize, read: impl FnOnce(&T) -> Result<R>) -> (Result<R>, Vec<T>) {
        let counted = |entry: &mut Entry<T>| {
            entry.readers += 1;
            Ok(())
        };
        match self.run_outside_lock(index, "read", counted, read) {
            Ok(outcome) => (outcome, self.end_read(index)),
            Err(refused) => (Err(refused), Vec::new()),
        }
    }

    /// Run `run` on tile `index`'s holder outside the book's lock, once `admit` (under the
    /// lock) has refused it or counted it as a user of the tile; the book stays noted as in
    /// use on this thread meanwhile, so `run` re-entering it is refused. The outer error is a
    /// refusal before anything was counted; the inner result is `run`'s, whose use the caller
    /// ends.
    fn run_outside_lock<R>(
        &self,
        index: usize,
        action: &'static str,
        admit: impl FnOnce(&mut Entry<T>) -> Result<()>,
        run: impl FnOnce(&T) -> Result<R>,
    ) -> Result<Result<R>> {
        let mut held = self.lock_live(action)?;
        if self.budget.is_some() {
            touch(&mut held, &[index]);
        }
        let len = held.tiles.len();
        let entry = held.tiles.get_mut(index).ok_or_else(|| out_of_range(index, len))?;
        admit(entry)?;
        let tile = entry.current.clone();
        let Held { guard, _here: here } = held;
        drop(guard);
        let outcome = run(&tile);
        drop((here, tile));
        Ok(outcome)
    }

    /// A read of tile `index` ended: the tiles it was the last reader of.
    fn end_read(&self, index: usize) -> Vec<T> {
        let mut entries = self.entries.lock();
        if self.released.load(Ordering::Acquire) {
            return orphan_used(&mut entries, index);
        }
        let entry = &mut entries.tiles[index];
        entry.readers -= 1;
        if entry.readers == 0 {
            std::mem::take(&mut entry.retired)
        } else {
            Vec::new()
        }
    }

    /// Run `write` on tile `index`'s holder, as a writer of it and outside the book's lock,
    /// unless the tile is pinned. After a successful write the tile is dirty. Returns the
    /// write's outcome and the tiles to release: its clean copy, stale now, and (should the
    /// book have been released meanwhile) the tile itself once its last user is done.
    /// `write` calling back into this book on this thread is refused
    /// ([`TileRefusal::ReEntered`]).
    pub fn write<R>(&self, index: usize, write: impl FnOnce(&T) -> Result<R>) -> Result<(R, Vec<T>)> {
        let counted = |entry: &mut Entry<T>| {
            if entry.pins > 0 {
                return Err(TileRefusal::WritePinned { coordinate: self.coordinate_text(index) }.into());
            }
            entry.writers += 1;
            Ok(())
        };
        let outcome = self.run_outside_lock(index, "write to", counted, write)?;
        let mut entries = self.entries.lock();
        if self.released.load(Ordering::Acquire) {
            let ended = orphan_used(&mut entries, index);
            self.unwritten.notify_all();
            return outcome.map(|r| (r, ended));
        }
        let entry = &mut entries.tiles[index];
        entry.writers -= 1;
        let stale = match &outcome {
            Ok(_) => {
                entry.writes += 1;
                entry.residency.mark_dirty();
                entry.clean.take()
            }
            Err(_) => None,
        };
        if entry.writers == 0 {
            self.unwritten.notify_all();
        }
        outcome.map(|r| (r, stale.into_iter().collect()))
    }

    /// Admit a request to move `indices` (checked in range and distinct by the caller) to
    /// the secondary tier (`evict`) or the primary: `None` when none of them moves. Under a
    /// policy a promote first makes room, never evicting a tile of `protect`. Refused before
    /// any effect when released, a tile is pinned, or the policy cannot make room.
    pub fn request(
        &self,
        indices: &[usize],
        evict: bool,
        protect: &[usize],
    ) -> std::result::Result<Option<TileRequest<T>>, TileRefusal> {
        let action = if evict { "evict tiles of" } else { "promote tiles of" };
        let mut entries = self.lock_live(action)?;
        let policy = self.budget.filter(|_| !evict);
        // Admitted in one hold of the lock: a wait for a write gives the lock up, so the
        // checks start again after it.
        let (moving, victims) = loop {
            if let Some(&pinned) = indices.iter().find(|&&i| entries.tiles[i].pins > 0) {
                return Err(TileRefusal::Pinned { action, coordinate: self.coordinate_text(pinned) });
            }
            // A write running on a requested tile finishes first (a write cannot start on a
            // pinned tile, so once admitted the request has its tiles to itself).
            if indices.iter().any(|&i| entries.tiles[i].writers > 0) {
                self.wait_unwritten(&mut entries, action, |e| indices.iter().any(|&i| e.tiles[i].writers > 0))?;
                continue;
            }
            if policy.is_some() {
                touch(&mut entries, indices);
            }
            let moving: Vec<usize> =
                indices.iter().copied().filter(|&i| entries.tiles[i].residency.is_evicted() != evict).collect();
            if moving.is_empty() {
                return Ok(None);
            }
            let Some(budget) = policy else { break (moving, Vec::new()) };
            match make_room(&entries, budget, indices, moving.len(), protect) {
                // Tiles being written are no victims now, but may be once written.
                Err(TileRefusal::NoRoom { .. }) if entries.tiles.iter().any(|e| e.writers > 0) => {
                    self.wait_unwritten(&mut entries, action, |e| e.tiles.iter().any(|t| t.writers > 0))?;
                }
                chosen => break (moving, chosen?),
            }
        };
        let mut phases = Vec::with_capacity(2);
        if !victims.is_empty() {
            phases.push(phase(&entries, &victims, true));
        }
        phases.push(phase(&entries, &moving, evict));
        let pinned: Vec<usize> = indices.iter().chain(&victims).copied().collect();
        for &i in &pinned {
            entries.tiles[i].pins += 1;
        }
        let promoting = if policy.is_some() { moving } else { Vec::new() };
        for &i in &promoting {
            entries.tiles[i].promoting = true;
        }
        self.pending.fetch_add(1, Ordering::AcqRel);
        Ok(Some(TileRequest { pinned, promoting, phases }))
    }

    /// Commit one phase: every tile at once takes its fresh tile (`staged`, one per
    /// [`copying`](TilePhase::copying) step, in order) or, evicted clean, its kept copy.
    /// Hands back the tiles replaced, to be released; a replaced tile a projection still
    /// reads is kept until the last reader finishes, and a tile a `retain_clean` promote
    /// replaced is kept as the tile's clean copy.
    pub fn commit(&self, phase: &TilePhase<T>, staged: Vec<T>) -> Vec<T> {
        debug_assert_eq!(staged.len(), phase.copy_count(), "one fresh tile per copied tile");
        let mut entries = self.entries.lock();
        let mut fresh = staged.into_iter();
        let mut replaced = Vec::new();
        for s in &phase.steps {
            let entry = &mut entries.tiles[s.index];
            let next = match s.step {
                Transition::DropCleanPrimary => entry.clean.take().expect("a clean eviction has its copy"),
                _ => fresh.next().expect("one fresh tile per copied tile"),
            };
            let old = std::mem::replace(&mut entry.current, next);
            if s.step == Transition::CopyUp {
                entry.clean = Some(old);
            } else if entry.readers > 0 {
                entry.retired.push(old);
            } else {
                replaced.push(old);
            }
            entry.residency.commit(s.step, s.writes);
        }
        replaced
    }

    /// A request's end, committed or not: its tiles unpinned. (It hands nothing back: the
    /// tiles its commits replaced came back from [`commit`](Self::commit), and only readers
    /// retire tiles.)
    pub fn finish(&self, request: TileRequest<T>) {
        let mut entries = self.entries.lock();
        for &i in &request.pinned {
            entries.tiles[i].pins -= 1;
        }
        for &i in &request.promoting {
            entries.tiles[i].promoting = false;
        }
        self.pending.fetch_sub(1, Ordering::AcqRel);
    }

    /// Pin `indices` for a projection that reads them in place. Refused once released.
    pub fn pin_reading(&self, indices: &[usize]) -> std::result::Result<ReadPin<T>, TileRefusal> {
        let mut entries = self.lock_live("project")?;
        self.wait_unwritten(&mut entries, "project", |e| indices.iter().any(|&i| e.tiles[i].writers > 0))?;
        if self.budget.is_some() {
            touch(&mut entries, indices);
        }
        let mut tiles = Vec::with_capacity(indices.len());
        for &i in indices {
            let entry = &mut entries.tiles[i];
            entry.pins += 1;
            entry.readers += 1;
            tiles.push(entry.current.clone());
        }
        self.pending.fetch_add(1, Ordering::AcqRel);
        Ok(ReadPin { indices: indices.to_vec(), reading: true, tiles })
    }

    /// Pin every tile for a move out of the composite: refused while any request or
    /// projection is pending (and once released), so of the two exactly one goes ahead.
    pub fn pin_all(&self) -> std::result::Result<ReadPin<T>, TileRefusal> {
        let mut entries = self.lock_live("move")?;
        self.wait_unwritten(&mut entries, "move", |e| e.tiles.iter().any(|t| t.writers > 0))?;
        if self.is_pending() {
            return Err(TileRefusal::Pending { action: "move" });
        }
        let indices: Vec<usize> = (0..entries.tiles.len()).collect();
        let tiles = entries
            .tiles
            .iter_mut()
            .map(|e| {
                e.pins += 1;
                e.current.clone()
            })
            .collect();
        self.pending.fetch_add(1, Ordering::AcqRel);
        Ok(ReadPin { indices, reading: false, tiles })
    }

    /// Take back a reading pin; hands back the tiles retired while it read them.
    pub fn unpin(&self, pin: ReadPin<T>) -> Vec<T> {
        let mut entries = self.entries.lock();
        let mut retired = Vec::new();
        for &i in &pin.indices {
            let entry = &mut entries.tiles[i];
            entry.pins -= 1;
            if pin.reading {
                entry.readers -= 1;
                if entry.readers == 0 {
                    retired.append(&mut entry.retired);
                }
            }
        }
        self.pending.fetch_sub(1, Ordering::AcqRel);
        retired
    }

    /// Release the book: hands back every tile and clean copy, to be released, but those an
    /// element read is reading, which its last reader hands back ([`read`](Self::read)).
    /// Refused while a request or projection is pending; `None` once released already.
    pub fn release(&self) -> std::result::Result<Option<Vec<T>>, TileRefusal> {
        let mut entries = self.lock("release")?;
        if self.released.load(Ordering::Acquire) {
            return Ok(None);
        }
        if self.is_pending() {
            return Err(TileRefusal::Pending { action: "release" });
        }
        self.released.store(true, Ordering::Release);
        let mut handed = Vec::new();
        for (index, e) in std::mem::take(&mut entries.tiles).into_iter().enumerate() {
            let tiles = std::iter::once(e.current).chain(e.clean).chain(e.retired);
            if e.readers + e.writers > 0 {
                entries.orphans.push(Orphan { index, users: e.readers + e.writers, tiles: tiles.collect() });
            } else {
                handed.extend(tiles);
            }
        }
        Ok(Some(handed))
    }
}

/// The refusal of tile `index` in a composite of `count` tiles (the Rust `TiledEvictable`'s
/// too).
pub(crate) fn out_of_range(index: usize, count: usize) -> ModelError {
    ModelError::Tiling { message: format!("tile {index} is out of range for {count} tiles") }
}

fn touch<T>(entries: &mut Entries<T>, indices: &[usize]) {
    entries.tick += 1;
    let tick = entries.tick;
    for &i in indices {
        if let Some(entry) = entries.tiles.get_mut(i) {
            entry.last_use = tick;
        }
    }
}

/// The steps of moving `indices` to one tier, each by the residency rule.
fn phase<T: Clone>(entries: &Entries<T>, indices: &[usize], evict: bool) -> TilePhase<T> {
    let steps = indices
        .iter()
        .filter_map(|&index| {
            let entry = &entries.tiles[index];
            entry.residency.plan(evict, entry.writes).map(|step| TileStep {
                index,
                step,
                writes: entry.writes,
                source: entry.current.clone(),
            })
        })
        .collect();
    TilePhase { evict, steps }
}

/// The primary tiles a promote of `moving` tiles must evict first to stay within `budget`:
/// none if it fits; else unpinned primary tiles outside the request and `protect`, clean
/// before dirty, least recently used first.
/// A read or write of tile `index` of a released book ended: the tile's orphaned tiles when
/// it was their last user.
fn orphan_used<T>(entries: &mut Entries<T>, index: usize) -> Vec<T> {
    let Some(at) = entries.orphans.iter().position(|o| o.index == index) else { return Vec::new() };
    let orphan = &mut entries.orphans[at];
    orphan.users -= 1;
    if orphan.users == 0 {
        entries.orphans.swap_remove(at).tiles
    } else {
        Vec::new()
    }
}

fn make_room<T>(
    entries: &Entries<T>,
    budget: TileBudget,
    requested: &[usize],
    moving: usize,
    protect: &[usize],
) -> std::result::Result<Vec<usize>, TileRefusal> {
    let limit = budget.tiles();
    if requested.len() > limit {
        return Err(TileRefusal::OverBudget {
            tiles: requested.len(),
            bytes: requested.len() * budget.tile_bytes,
            budget: budget.budget_bytes,
        });
    }
    let tiles = &entries.tiles;
    let resident = tiles.iter().filter(|e| !e.residency.is_evicted() || e.promoting).count();
    let excess = (resident + moving).saturating_sub(limit);
    if excess == 0 {
        return Ok(Vec::new());
    }
    let mut candidates: Vec<usize> = (0..tiles.len())
        .filter(|&i| {
            let e = &tiles[i];
            !e.residency.is_evicted()
                && e.pins == 0
                && e.writers == 0
                && !e.promoting
                && !requested.contains(&i)
                && !protect.contains(&i)
        })
        .collect();
    if candidates.len() < excess {
        return Err(TileRefusal::NoRoom { excess, free: candidates.len() });
    }
    candidates.sort_by_key(|&i| (tiles[i].clean.is_none(), tiles[i].last_use));
    candidates.truncate(excess);
    Ok(candidates)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn book(n: usize, retain_clean: bool, budget: Option<TileBudget>) -> TileBook<String> {
        TileBook::new(vec![n], (0..n).map(|i| format!("p{i}")).collect(), Tier::Primary, retain_clean, budget)
    }

    fn run(book: &TileBook<String>, indices: &[usize], evict: bool) -> Vec<String> {
        let Some(request) = book.request(indices, evict, &[]).unwrap() else { return Vec::new() };
        let mut released = Vec::new();
        for phase in request.phases() {
            let staged = phase.copying().map(|s| format!("{}'", s.source())).collect();
            released.extend(book.commit(phase, staged));
        }
        book.finish(request);
        released
    }

    #[test]
    fn requests_on_disjoint_tiles_run_together_and_conflicting_ones_are_refused() {
        let b = book(3, false, None);
        let first = b.request(&[0, 1], true, &[]).unwrap().unwrap();
        let other = b.request(&[2], true, &[]).unwrap().unwrap();
        let refused = b.request(&[1, 2], false, &[]).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "cannot promote tiles of a TiledEvictable: tile (1,) is pinned by a pending residency request or projection"
        );
        assert!(b.release().is_err() && b.is_pending());
        b.finish(first);
        b.finish(other);
        assert!(
            !b.is_pending() && b.tiles_on(Tier::Secondary).unwrap().is_empty(),
            "unfinished requests changed nothing"
        );
    }

    #[test]
    fn a_replaced_tile_a_projection_reads_is_kept_until_the_reader_finishes() {
        let b = book(2, false, None);
        let request = b.request(&[0], true, &[]).unwrap().unwrap();
        let pin = b.pin_reading(&[0]).unwrap();
        assert_eq!(pin.tiles(), ["p0"]);
        assert!(b.commit(&request.phases()[0], vec!["s0".into()]).is_empty(), "retired, not released");
        b.finish(request);
        assert_eq!(b.unpin(pin), ["p0"]);
        assert_eq!(b.read(0, |t| Ok(t.clone())).0.unwrap(), "s0");
    }

    #[test]
    fn a_tile_replaced_while_an_element_read_runs_is_handed_back_by_that_read() {
        let b = book(2, false, None);
        let (value, ended) = b.read(0, |t| {
            // The read's code runs outside the lock: another thread's request and its commit
            // go through meanwhile.
            std::thread::scope(|s| {
                s.spawn(|| {
                    let request = b.request(&[0], true, &[]).unwrap().unwrap();
                    assert!(b.commit(&request.phases()[0], vec!["s0".into()]).is_empty(), "retired, not released");
                    b.finish(request);
                });
            });
            Ok(t.clone())
        });
        assert_eq!((value.unwrap(), ended), ("p0".to_string(), vec!["p0".to_string()]));
        let (value, ended) = b.read(0, |t| Ok(t.clone()));
        assert_eq!((value.unwrap(), ended), ("s0".to_string(), Vec::new()));
    }

    #[test]
    fn a_release_leaves_the_tiles_being_read_to_their_last_reader() {
        let b = book(2, false, None);
        let (outer, ended) = b.read(1, |_| {
            let (inner, ended) = std::thread::scope(|s| {
                s.spawn(|| {
                    // Another thread reads the same tile, and a third releases the book
                    // during both reads.
                    b.read(1, |t| {
                        std::thread::scope(|s| {
                            s.spawn(|| {
                                let handed = b.release().unwrap().unwrap();
                                assert_eq!(handed, ["p0"], "tile 1 is being read");
                                assert_eq!(b.release(), Ok(None), "released once");
                            });
                        });
                        Ok(t.clone())
                    })
                })
                .join()
                .unwrap()
            });
            assert_eq!((inner.unwrap(), ended), ("p1".to_string(), Vec::new()), "not the last reader");
            Ok(())
        });
        assert!(outer.is_ok());
        assert_eq!(ended, ["p1"], "the last reader hands the tile back");
        assert!(matches!(b.read(0, |_| Ok(())).0, Err(ModelError::Tiles(TileRefusal::Released { .. }))));
    }

    #[test]
    fn an_element_read_runs_beside_another_threads_use_of_the_book_and_refuses_its_own_re_entry() {
        let b = book(2, false, None);
        let (value, _) = b.read(0, |_| {
            let refused = b.read(1, |_| Ok(())).0.unwrap_err();
            assert!(matches!(refused, ModelError::Tiles(TileRefusal::ReEntered { action: "read" })), "{refused}");
            assert!(matches!(b.write(1, |_| Ok(())), Err(ModelError::Tiles(TileRefusal::ReEntered { .. }))));
            // Another thread reads and writes meanwhile (it waited for the lock before).
            std::thread::scope(|s| {
                s.spawn(|| {
                    assert_eq!(b.read(1, |t| Ok(t.clone())).0.unwrap(), "p1");
                    b.write(0, |_| Ok(())).unwrap();
                })
                .join()
                .unwrap()
            });
            Ok(7)
        });
        assert_eq!(value.unwrap(), 7);
        assert!(b.read(1, |_| Ok(())).0.is_ok(), "nothing left marked in use on this thread");
    }

    #[test]
    fn a_write_runs_beside_other_threads_and_a_request_on_its_tile_waits_for_it() {
        use std::sync::atomic::AtomicBool;
        use std::sync::mpsc::channel;
        let b = book(2, false, None);
        let written = AtomicBool::new(false);
        let (started, began) = channel();
        let (b_ref, written_ref) = (&b, &written);
        std::thread::scope(|s| {
            // A request on tile 0, started while the write of tile 0 runs: it waits for it.
            let request = s.spawn(move || {
                began.recv().unwrap();
                let request = b_ref.request(&[0], true, &[]).unwrap().unwrap();
                assert!(written_ref.load(Ordering::SeqCst), "the request went ahead under the write");
                b_ref.finish(request);
            });
            let (outcome, handed) = b
                .write(0, |_| {
                    // Another tile is read, written and evicted while this write runs.
                    std::thread::scope(|inner| {
                        inner
                            .spawn(|| {
                                assert_eq!(b.read(1, |t| Ok(t.clone())).0.unwrap(), "p1");
                                b.write(1, |_| Ok(())).unwrap();
                                assert_eq!(run(&b, &[1], true), ["p1"]);
                            })
                            .join()
                            .unwrap();
                    });
                    started.send(()).unwrap();
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    assert!(!request.is_finished(), "the request did not wait for the write");
                    written.store(true, Ordering::SeqCst);
                    Ok(7)
                })
                .unwrap();
            assert_eq!((outcome, handed), (7, Vec::<String>::new()));
        });
        assert!(!b.is_pending());
    }

    #[test]
    fn the_residency_policy_evicts_a_tile_being_written_only_once_written() {
        let budget = TileBudget::new(16, 16).unwrap(); // one tile
        let b = TileBook::new(vec![2], vec!["s0".to_string(), "s1".into()], Tier::Secondary, false, Some(budget));
        assert_eq!(run(&b, &[0], false), ["s0"]);
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let (b, done) = (&b, &done);
            let ((), handed) = b
                .write(0, |_| {
                    // A promote of tile 1 must evict tile 0, which this write is writing.
                    let promote = s.spawn(move || {
                        assert_eq!(run(b, &[1], false), ["s0'", "s1"]);
                        assert!(done.load(Ordering::SeqCst), "tile 0 was evicted under its write");
                    });
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    assert!(!promote.is_finished(), "the promote did not wait for the write");
                    done.store(true, Ordering::SeqCst);
                    Ok(())
                })
                .unwrap();
            assert!(handed.is_empty());
        });
        assert_eq!((b.tiles_on(Tier::Primary).unwrap(), b.tiles_on(Tier::Secondary).unwrap()), (vec![1], vec![0]));
    }

    #[test]
    fn clean_copies_are_kept_by_a_promote_reused_by_an_evict_and_dropped_by_a_write() {
        let b = TileBook::new(vec![2], vec!["s0".to_string(), "s1".into()], Tier::Secondary, true, None);
        assert!(run(&b, &[0, 1], false).is_empty(), "both secondary tiles kept as clean copies");
        assert_eq!(b.state(0).unwrap(), Some(TileStatus { tier: Tier::Primary, pinned: false, clean: true }));
        let ((), stale) = b.write(1, |_| Ok(())).unwrap();
        assert_eq!(stale, ["s1"]);
        let request = b.request(&[0, 1], true, &[]).unwrap().unwrap();
        assert_eq!(request.phases()[0].copying().map(TileStep::index).collect::<Vec<_>>(), [1], "tile 0 is clean");
        let mut released = b.commit(&request.phases()[0], vec!["s1''".to_string()]);
        released.sort();
        assert_eq!(released, ["s0'", "s1'"], "the primary tiles go; tile 0's clean copy is current again");
        b.finish(request);
        assert_eq!(b.read(0, |t| Ok(t.clone())).0.unwrap(), "s0");
    }
}
