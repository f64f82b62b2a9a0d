//! Biased element access: how `Tensor::get`/`set` of a host carrier go without a lock or any
//! locked instruction, and what every transition does so that they stay exact.
//!
//! **Why.** Keeping a buffer alive and a claim out for the length of one element access takes
//! at least one read-modify-write or full fence per access if every thread may access at any
//! time. On the machines we measured each such instruction costs about 6 ns, against 1.5 ns
//! for a slice read, so per-call access could not come near a slice.
//!
//! **How.** A carrier's state can be *biased* to one thread, the one that accesses its
//! elements. That thread's access writes a flag of the carrier (`active`) with a plain store,
//! checks the bias and the state with plain loads, reads or writes one element with an atomic
//! load or store, counts a write with a plain load and store of the version (it is the only
//! writer of it while biased), and clears the flag. Every other thread, and every transition
//! that must not overlap such an access (a claim, an owner, a release, a write or count by
//! another thread), *revokes* the bias first, under the state's lock: it clears the bias,
//! runs a process-wide memory barrier (`membarrier`, `MEMBARRIER_CMD_PRIVATE_EXPEDITED`),
//! and waits until the flag is clear. The barrier orders the owner's flag store before its
//! loads as a fence would, but only when a revocation happens, so either the owner's access
//! sees the revocation and steps aside to the locked path, or the revoker sees the flag and
//! waits for the access to end (nanoseconds; it runs no foreign code).
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

use std::sync::atomic::{compiler_fence, AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Locked accesses after a revocation before the carrier may be biased again.
pub(crate) const REBIAS_AFTER: u32 = 256;

/// A token for the calling thread: the address of a thread-local, unique among live threads.
/// A thread that starts after another ended may get its token; the bias then passes to it,
/// which is sound, since the ended thread accesses nothing.
#[inline]
pub(crate) fn this_thread() -> usize {
    thread_local! {
        static TOKEN: u8 = const { 0 };
    }
    TOKEN.with(|t| t as *const u8 as usize)
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
    /// The owning thread's token, 0 when unbiased.
    owner: AtomicUsize,
    /// Set by the owner for the length of one access.
    active: AtomicBool,
    /// Locked accesses still to come before the bias may be taken again.
    credit: AtomicU32,
}

/// One access by the bias owner; dropping it ends the access.
#[must_use = "the access lasts while this lives"]
pub(crate) struct BiasedAccess<'a>(&'a ElementBias);

impl Drop for BiasedAccess<'_> {
    #[inline]
    fn drop(&mut self) {
        // Release: a revoker that sees the flag clear sees the access's element and version
        // stores.
        self.0.active.store(false, Ordering::Release);
    }
}

impl ElementBias {
    /// Unbiased.
    pub(crate) const fn new() -> Self {
        ElementBias { owner: AtomicUsize::new(0), active: AtomicBool::new(false), credit: AtomicU32::new(0) }
    }

    /// Begin an access when this thread owns the bias: the caller then checks the state with
    /// plain loads, which see every change a revocation made before it.
    #[inline]
    pub(crate) fn enter(&self) -> Option<BiasedAccess<'_>> {
        let me = this_thread();
        if self.owner.load(Ordering::Relaxed) != me {
            return None;
        }
        self.active.store(true, Ordering::Relaxed);
        // The light side of the asymmetric fence: the compiler keeps the flag store before the
        // loads below; the revoker's `membarrier` orders them on the processor.
        compiler_fence(Ordering::SeqCst);
        let access = BiasedAccess(self);
        (self.owner.load(Ordering::Relaxed) == me).then_some(access)
    }

    /// Whether this thread owns the bias (then its own transitions need no revocation: its
    /// accesses come after them in program order).
    #[inline]
    pub(crate) fn is_mine(&self) -> bool {
        self.owner.load(Ordering::Relaxed) == this_thread()
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
            self.owner.store(this_thread(), Ordering::Relaxed);
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
        if owner == 0 || self.is_mine() {
            return;
        }
        self.owner.store(0, Ordering::Relaxed);
        barrier::heavy();
        let mut spins = 0u32;
        while self.active.load(Ordering::Acquire) {
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
