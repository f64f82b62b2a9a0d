//! Biased element access: how `Tensor::get`/`set` of a host carrier go without a lock or any
//! locked instruction, and what every transition does so that they stay exact.
//!
//! **Why.** Keeping a buffer alive and a claim out for the length of one element access takes
//! at least one read-modify-write or full fence per access if every thread may access at any
//! time. On the machines we measured each such instruction costs about 6 ns, against 1.5 ns
//! for a slice read, so per-call access could not come near a slice.
//!
//! **How.** A carrier's state can be *biased* to one thread, the one that accesses its
//! elements. That thread's access names the carrier in a slot of its own thread with a plain
//! store, checks the bias and the state with plain loads, reads or writes one element with an
//! atomic load or store, counts a write with a plain load and store of the version (it is the
//! only writer of it while biased), and clears its slot. The mark is the thread's own, not
//! the carrier's: a thread that lost the bias just as it was about to access must not clear
//! the mark of the thread that holds it now. Every other thread, and every transition that
//! must not overlap such an access (a claim, an owner, a release, a write or count by another
//! thread), *revokes* the bias first, under the state's lock: it clears the bias, runs a
//! process-wide memory barrier (`membarrier`, `MEMBARRIER_CMD_PRIVATE_EXPEDITED`), and waits
//! until the owner's slot no longer names the carrier. The barrier orders the owner's store
//! before its loads as a fence would, but only when a revocation happens, so either the
//! owner's access sees the revocation and steps aside to the locked path, or the revoker sees
//! the mark and waits for the access to end (nanoseconds; it runs no foreign code).
//!
//! This is the asymmetric-fence scheme the `membarrier(2)` manual describes (and biased
//! locking, BRAVO). It is hand-written because no maintained crate offers a revocable
//! per-object bias; the barrier itself is `rustix`'s `membarrier`.
//!
//! **When.** A carrier is biased by the first locked access that finds it live, unowned,
//! unclaimed and unbiased, to that access's thread. After a revocation it stays unbiased for
//! [`REBIAS_AFTER`] locked accesses, so a carrier that threads take turns on pays a barrier
//! per that many accesses at most. Where `membarrier` is missing (not Linux, or a kernel or
//! sandbox without it), nothing is ever biased and every access takes the locked path.

use std::cell::Cell;
use std::sync::atomic::{compiler_fence, AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::sync::OnceLock;

use crossbeam_utils::CachePadded;

/// Locked accesses after a revocation before the carrier may be biased again.
pub(crate) const REBIAS_AFTER: u32 = 256;

/// A thread's slot: the carrier it is accessing right now, if any. Slots are leaked, never
/// freed, so a revoker may read the slot of a thread that has ended; a thread that ends gives
/// its slot back for the next thread that needs one, which inherits any bias the slot holds
/// (sound: the ended thread accesses nothing).
struct Slot {
    /// The key ([`ElementBias`] address) of the carrier being accessed, 0 when none.
    accessing: AtomicUsize,
    /// Whether a live thread holds this slot.
    taken: AtomicBool,
    /// The next slot of the list; written once, before the slot is published.
    next: *const CachePadded<Slot>,
}

// SAFETY: `next` is written before the slot is published (by a CAS of `SLOTS`) and never
// again; every other field is atomic.
unsafe impl Sync for Slot {}

/// Every slot ever made, newest first.
static SLOTS: AtomicPtr<CachePadded<Slot>> = AtomicPtr::new(std::ptr::null_mut());

thread_local! {
    /// This thread's slot, null until its first locked access offers it a bias (or after its
    /// slot went back, while the thread ends). No destructor: it stays readable to the end.
    static MINE: Cell<*const Slot> = const { Cell::new(std::ptr::null()) };
    /// Gives the slot back when the thread ends.
    static GIVE_BACK: GiveBack = const { GiveBack };
}

struct GiveBack;

impl Drop for GiveBack {
    fn drop(&mut self) {
        let slot = MINE.with(|mine| mine.replace(std::ptr::null()));
        // SAFETY: slots are leaked; a non-null `MINE` is one.
        if let Some(slot) = unsafe { slot.as_ref() } {
            slot.taken.store(false, Ordering::Release);
        }
    }
}

/// This thread's slot, if it has one (the fast path: no registration).
#[inline]
fn my_slot() -> *const Slot {
    MINE.with(Cell::get)
}

/// This thread's slot, taken now if it has none; null while the thread ends.
fn my_slot_or_take() -> *const Slot {
    let mine = my_slot();
    if !mine.is_null() {
        return mine;
    }
    // Registering the give-back first: if the thread is ending, no slot is taken.
    if GIVE_BACK.try_with(|_| ()).is_err() {
        return std::ptr::null();
    }
    let slot = take_slot();
    MINE.with(|m| m.set(slot));
    slot
}

/// The slots, newest first.
fn slots() -> impl Iterator<Item = &'static Slot> {
    let mut next = SLOTS.load(Ordering::Acquire) as *const CachePadded<Slot>;
    std::iter::from_fn(move || {
        // SAFETY: slots are leaked, and `next` is null or a slot published by a CAS of
        // `SLOTS` that this thread's acquire load synchronised with.
        let slot: &'static CachePadded<Slot> = unsafe { next.as_ref()? };
        next = slot.next;
        Some(&**slot)
    })
}

/// A free slot, or a new one published.
fn take_slot() -> &'static Slot {
    for slot in slots() {
        if !slot.taken.load(Ordering::Relaxed)
            && slot.taken.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok()
        {
            return slot;
        }
    }
    let mut head = SLOTS.load(Ordering::Relaxed);
    let fresh = Box::into_raw(Box::new(CachePadded::new(Slot {
        accessing: AtomicUsize::new(0),
        taken: AtomicBool::new(true),
        next: head,
    })));
    while let Err(now) = SLOTS.compare_exchange_weak(head, fresh, Ordering::AcqRel, Ordering::Relaxed) {
        head = now;
        // SAFETY: `fresh` is not published yet (the CAS failed): this thread owns it alone.
        unsafe { (&mut *fresh).next = head };
    }
    // SAFETY: leaked, so valid for ever; from here on only read or changed atomically.
    unsafe { &*fresh }
}

#[cfg(target_os = "linux")]
mod barrier {
    use rustix::thread::{membarrier, membarrier_query, MembarrierCommand};

    /// Whether the kernel offers the private expedited barrier, registering for it.
    pub(super) fn register() -> bool {
        membarrier_query().contains_command(MembarrierCommand::PrivateExpedited)
            && membarrier(MembarrierCommand::RegisterPrivateExpedited).is_ok()
    }

    /// A full memory barrier on every running thread of the process.
    pub(super) fn heavy() {
        if membarrier(MembarrierCommand::PrivateExpedited).is_err() {
            // Registered, so the kernel does not refuse it; if it ever did, continuing
            // could let an access overlap a transition.
            eprintln!("strideweave: membarrier failed after registration; aborting");
            std::process::abort();
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod barrier {
    pub(super) fn register() -> bool {
        false
    }

    pub(super) fn heavy() {
        unreachable!("nothing is biased without membarrier")
    }
}

/// Whether carriers may be biased in this process (asked once).
fn barrier_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(barrier::register)
}

/// A carrier's element bias (see the module docs). Taking and revoking it happen under the
/// carrier state's lock, so a bias is never taken between a transition's change and its
/// revocation.
#[derive(Debug, Default)]
pub(crate) struct ElementBias {
    /// The owning thread's slot address, 0 when unbiased.
    owner: AtomicUsize,
    /// Locked accesses still to come before the bias may be taken again.
    credit: AtomicU32,
}

/// One access by the bias owner; dropping it ends the access.
#[must_use = "the access lasts while this lives"]
pub(crate) struct BiasedAccess<'a>(&'static Slot, std::marker::PhantomData<&'a ElementBias>);

impl Drop for BiasedAccess<'_> {
    #[inline]
    fn drop(&mut self) {
        // Release: a revoker that sees the slot clear sees the access's element and version
        // stores.
        self.0.accessing.store(0, Ordering::Release);
    }
}

impl ElementBias {
    /// Unbiased.
    pub(crate) const fn new() -> Self {
        ElementBias { owner: AtomicUsize::new(0), credit: AtomicU32::new(0) }
    }

    /// The key this carrier's accesses write in their thread's slot.
    #[inline]
    fn key(&self) -> usize {
        self as *const Self as usize
    }

    /// Begin an access when this thread owns the bias: the caller then checks the state with
    /// plain loads, which see every change a revocation made before it.
    #[inline]
    pub(crate) fn enter(&self) -> Option<BiasedAccess<'_>> {
        let me = my_slot();
        if me.is_null() || self.owner.load(Ordering::Relaxed) != me as usize {
            return None;
        }
        // SAFETY: slots are leaked; `me` is this thread's.
        let slot: &'static Slot = unsafe { &*me };
        slot.accessing.store(self.key(), Ordering::Relaxed);
        // The light side of the asymmetric fence: the compiler keeps the flag store before the
        // loads below; the revoker's `membarrier` orders them on the processor.
        compiler_fence(Ordering::SeqCst);
        let access = BiasedAccess(slot, std::marker::PhantomData);
        (self.owner.load(Ordering::Relaxed) == me as usize).then_some(access)
    }

    /// Whether this thread owns the bias.
    #[cfg(test)]
    pub(crate) fn is_mine(&self) -> bool {
        let me = my_slot();
        !me.is_null() && self.owner.load(Ordering::Relaxed) == me as usize
    }

    /// A locked access went through on a free carrier, under the state's lock: take the bias
    /// for this thread if nobody has it and no revocation is recent.
    pub(crate) fn offer(&self) {
        if self.owner.load(Ordering::Relaxed) != 0 {
            return;
        }
        let credit = self.credit.load(Ordering::Relaxed);
        if credit > 0 {
            self.credit.store(credit - 1, Ordering::Relaxed);
            return;
        }
        if barrier_available() {
            let me = my_slot_or_take();
            if !me.is_null() {
                self.owner.store(me as usize, Ordering::Relaxed);
            }
        }
    }

    /// Whether a bias may be offered (a quick test before taking the state's lock).
    #[inline]
    pub(crate) fn unowned(&self) -> bool {
        self.owner.load(Ordering::Relaxed) == 0
    }

    /// Under the state's lock, after a change that turns accesses away or before a write
    /// the owner does not make: end the bias of any other thread and wait for its access.
    pub(crate) fn revoke_others(&self) {
        let owner = self.owner.load(Ordering::Relaxed);
        // The owner's own transitions need no revocation: its accesses come after them in
        // program order.
        if owner == 0 || owner == my_slot() as usize {
            return;
        }
        self.owner.store(0, Ordering::Relaxed);
        barrier::heavy();
        // SAFETY: `owner` is a slot address (`offer`), and slots are leaked.
        let slot: &Slot = unsafe { &*(owner as *const Slot) };
        let mut spins = 0u32;
        while slot.accessing.load(Ordering::Acquire) == self.key() {
            // The access runs no foreign code; it ends in nanoseconds unless its thread was
            // preempted: spin briefly, then let it run.
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        self.credit.store(REBIAS_AFTER, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_thread_gives_its_slot_back() {
        let bias = ElementBias::new();
        let before = slots().count();
        for _ in 0..50 {
            std::thread::scope(|s| {
                s.spawn(|| {
                    bias.offer();
                    assert!(bias.is_mine() || !barrier_available());
                    bias.owner.store(0, Ordering::Relaxed);
                });
            });
        }
        // Fifty threads one after another reuse a slot; other tests running meanwhile may
        // take a few of their own.
        let grown = slots().count() - before;
        assert!(grown < 16, "{grown} slots for threads that ended");
    }

    #[test]
    fn a_thread_that_lost_the_bias_does_not_clear_the_owners_access() {
        let bias = ElementBias::new();
        std::thread::scope(|s| {
            // `stale` owns the bias, then loses it to the test thread.
            s.spawn(|| {
                bias.offer();
                assert!(bias.is_mine() || !barrier_available());
            })
            .join()
            .unwrap();
        });
        bias.owner.store(0, Ordering::Relaxed);
        bias.offer();
        if !barrier_available() {
            return;
        }
        let access = bias.enter().expect("the test thread owns the bias");
        // Another thread tries to enter (it does not own the bias) and fails: the owner's
        // access is still marked.
        std::thread::scope(|s| {
            s.spawn(|| assert!(bias.enter().is_none()));
        });
        assert_eq!(access.0.accessing.load(Ordering::Relaxed), bias.key());
        drop(access);
        assert_eq!(my_slot_ref().accessing.load(Ordering::Relaxed), 0);
    }

    fn my_slot_ref() -> &'static Slot {
        // SAFETY: slots are leaked; the test thread has one (it took the bias).
        unsafe { &*my_slot() }
    }
}
