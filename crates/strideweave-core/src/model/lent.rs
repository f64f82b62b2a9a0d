//! A host store lent out by a slice or a view ([`slices`](super::slices),
//! [`views`](super::views)): the one place a guard holds its carrier and its store, and
//! gives both back.
//!
//! Lending claims the carrier (live, unowned, unclaimed, else refused at the call), so while
//! the guard lives every write, move, release and further lending of the carrier, from any
//! thread, the guard's own included, is refused (`Claimed`, "pending move") instead of
//! waiting for the guard; then it takes the store's lock (read to read, write to write), which
//! keeps a transfer that started before the claim from overlapping the guard. A store lent for
//! writing also refuses element reads (`HostCarrier::read_slot`): the elements are being
//! written through the guard, and a read that waited could be waiting for its own thread.

use std::sync::Arc;

use super::carrier::{Carrier, HOOK};
use super::error::Result;
use super::host::HostStore;
use super::state::ClaimGuard;

/// A lent store (see the module docs); dropping it gives the lock back, then the claim.
pub(super) struct Lent {
    store: Arc<HostStore>,
    writing: bool,
    _claim: ClaimGuard,
}

impl std::fmt::Debug for Lent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lent").field("writing", &self.writing).finish_non_exhaustive()
    }
}

impl Lent {
    /// Lend `carrier`'s `store` for reading: the claim, then a read lock; the buffer's start.
    pub(super) fn read(carrier: &Arc<dyn Carrier>, store: Arc<HostStore>) -> Result<(Lent, *const u8)> {
        let claim = carrier.state(HOOK).claim_for(carrier, "lend")?;
        let guard = store.read();
        let base = guard.as_ptr();
        std::mem::forget(guard); // given back by `drop`
        Ok((Lent { store, writing: false, _claim: claim }, base))
    }

    /// Lend `carrier`'s `store` for writing, after the public write's checks (released, owned
    /// or not mutable → refused; claimed → `Claimed`): the claim, one write counted in the
    /// version, then the write lock; the buffer's start.
    pub(super) fn write(carrier: &Arc<dyn Carrier>, store: Arc<HostStore>) -> Result<(Lent, *mut u8)> {
        carrier.state(HOOK).begin_write()?.check_writable(carrier.is_mutable_hook())?;
        // The claim checks live, unowned and unclaimed again, in one step with taking it.
        let claim = carrier.state(HOOK).claim_for(carrier, "lend")?;
        let gate = carrier.state(HOOK).begin_write()?;
        debug_assert!(gate.claimed_by(claim.id()), "the carrier is ours");
        gate.commit();
        let mut guard = store.write();
        let base = guard.as_mut_slice().as_mut_ptr();
        std::mem::forget(guard); // given back by `drop`
        store.lend_for_writing(true);
        Ok((Lent { store, writing: true, _claim: claim }, base))
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if self.writing {
            self.store.lend_for_writing(false);
            // SAFETY: `write` took the write lock of this store and forgot its guard; this
            // gives exactly that lock back, once.
            unsafe { self.store.force_unlock_write() }
        } else {
            // SAFETY: `read` took one read lock of this store and forgot its guard; this
            // gives exactly that lock back, once.
            unsafe { self.store.force_unlock_read() }
        }
    }
}
