//! A move's transfer run by its caller: [`PendingMove::into_transfer`](super::PendingMove::into_transfer)
//! splits a pending move into the destination window the transfer fills ([`MoveOutput`]) and
//! the one terminal commit ([`MoveCommit`]), which any thread may make once the transfer is
//! over.
//!
//! The claim admits what the transfer was handed, never a thread: while the move is pending,
//! a write through its `MoveOutput` passes (uncounted: a move's fill is not a write), and
//! every other write, release or move of the destination is refused with `Claimed`, from
//! whichever thread, the filling one included. Once the commit has ended the claim, a write
//! through the output is an ordinary public write. Each write through the output holds the
//! destination's state lock while it stores, so writes from several threads are serialized and
//! none can fall after the commit's end of the claim.

use std::sync::Arc;

use super::carrier_request::Pending;
use super::route::{self, Job, RouteKind};
use super::MoveOutcome;
use crate::layout::Layout;
use crate::model::carrier::{checked_slot, read_at, scalar_kind, write_checked, Carrier, HookCall, HOOK};
use crate::model::element::Element;
use crate::model::error::{ModelError, Result};
use crate::model::host::HostCarrier;
use crate::model::state::{ClaimId, WriteGate};
use crate::model::tensor::ordinal;

/// The destination window of a pending move, as the caller's own transfer writes it: the
/// move's layout at offset 0 of the destination. Clones write the same window (one per
/// filling thread, say).
#[derive(Clone)]
pub struct MoveOutput {
    carrier: Arc<dyn Carrier>,
    layout: Arc<Layout>,
    claim: ClaimId,
}

impl std::fmt::Debug for MoveOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MoveOutput").field("claim", &self.claim).field("size", &self.len()).finish()
    }
}

impl MoveOutput {
    pub(super) fn new(carrier: Arc<dyn Carrier>, layout: Arc<Layout>, claim: ClaimId) -> Self {
        MoveOutput { carrier, layout, claim }
    }

    /// The window's layout (the moved tensor's).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// How many elements the window has (the layout's size).
    pub fn len(&self) -> usize {
        self.layout.size() as usize
    }

    /// Whether the window has no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn slot(&self, k: usize) -> Result<i64> {
        Ok(self.layout.try_index_of_int(ordinal(k)?)?)
    }

    /// Write element `k` (ordinal, first mode fastest) as the move's transfer: admitted while
    /// the move claims the destination, and not counted in its version; after the commit, an
    /// ordinary public write.
    pub fn set<T: Element>(&self, k: usize, value: T) -> Result<()> {
        let slot = self.slot(k)?;
        let value = value.to_scalar();
        let carrier = &*self.carrier;
        let Some(_gate) = self.admitted()? else {
            return write_checked(carrier, None, slot, value);
        };
        let slot = checked_slot(slot, carrier.size())?;
        let kind = carrier.elem_kind();
        if scalar_kind(value) != kind {
            return Err(ModelError::ValueKind { value, kind });
        }
        // Stored under the gate: the claim cannot end meanwhile.
        carrier.write_slot(&carrier.hook(), slot, value)
    }

    /// Write the whole window from `values`, in ordinal order (first mode fastest), as the
    /// move's transfer: every slot and value is checked first, then all are stored under one
    /// hold of the destination's state (so nothing is written when one is refused, and the
    /// fill costs one lock, not one per element). After the commit, each element is an
    /// ordinary public write instead, as through [`set`](Self::set).
    ///
    /// ```
    /// use strideweave_core::model::movement::prepare_move;
    /// use strideweave_core::model::{HostCarrier, Tensor};
    ///
    /// let t = Tensor::canonical(HostCarrier::from_f32(&[1.0, 2.0]), &[2]).unwrap();
    /// let (output, commit) = prepare_move(&t, HostCarrier::from_f32(&[0.0; 2]), None).unwrap().into_transfer();
    /// output.write_from(&t.values_as::<f32>().unwrap()).unwrap();
    /// assert_eq!(commit.commit(Ok(())).unwrap().values_f32().unwrap(), vec![1.0, 2.0]);
    /// ```
    pub fn write_from<T: Element>(&self, values: &[T]) -> Result<()> {
        if values.len() != self.len() {
            return Err(ModelError::LengthMismatch { expected: self.len(), found: values.len() });
        }
        let carrier = &*self.carrier;
        let Some(_gate) = self.admitted()? else {
            return values.iter().enumerate().try_for_each(|(k, &value)| self.set(k, value));
        };
        let kind = carrier.elem_kind();
        let cosize = self.layout.cosize() as usize;
        // Every slot the layout addresses lies below its cosize.
        checked_slot(cosize as i64 - 1, carrier.size())?;
        // The values staged at their slots in host memory of the window's span, then one bulk
        // copy into the destination by the pair's route (the kernels a move runs), which
        // writes the layout's slots only. Still under the gate: the claim cannot end meanwhile.
        let source = HostCarrier::zeros(kind, cosize)?;
        {
            let store = source.store().expect("a fresh carrier is live");
            let mut staged = store.write();
            let staged = staged.as_mut_slice();
            let width = kind.size();
            let identity = self.layout.is_ordinal_identity();
            for (k, &value) in values.iter().enumerate() {
                let value = value.to_scalar();
                if scalar_kind(value) != kind {
                    return Err(ModelError::ValueKind { value, kind });
                }
                let slot = if identity { k } else { self.slot(k)? as usize };
                kind.encode(value, &mut staged[slot * width..(slot + 1) * width]);
            }
        }
        let route = route::resolve_as(RouteKind::HostToHost, &*source, carrier);
        let job = Job {
            src: &*source,
            dst: carrier,
            offset: 0,
            layout: &self.layout,
            elem_size: kind.size(),
            progress: None,
        };
        route::execute(&route, &job)
    }

    /// The destination's state held for a write of this move's transfer, once checked that
    /// the move still claims the destination and that it is mutable; None once the claim has
    /// ended (the write is then an ordinary public one). Held, it keeps the claim from ending
    /// and drops uncounted: a move's fill is not a write.
    fn admitted(&self) -> Result<Option<WriteGate<'_>>> {
        let carrier = &*self.carrier;
        // Asked before the state is locked: a foreign carrier's hook may read that state.
        let mutable = carrier.is_mutable_hook();
        let gate = carrier.state(HOOK).begin_write()?;
        if !gate.claimed_by(self.claim) {
            return Ok(None);
        }
        if !mutable {
            return Err(ModelError::NotMutable { carrier: carrier.state(HOOK).class_name().into() });
        }
        Ok(Some(gate))
    }

    /// Element `k` of the window (a public read).
    pub fn get<T: Element>(&self, k: usize) -> Result<T> {
        T::from_scalar(read_at(&*self.carrier, self.slot(k)?)?)
    }
}

/// The terminal commit of a move whose transfer the caller runs. Send it to the thread that
/// finishes the transfer; dropping it uncommitted rolls the move back as a failure would.
#[must_use = "a move whose transfer the caller runs holds both carriers until it is committed or dropped"]
pub struct MoveCommit(pub(super) Pending);

impl std::fmt::Debug for MoveCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MoveCommit").field("bytes", &self.0.bytes()).finish()
    }
}

impl MoveCommit {
    /// The one terminal commit, with `transfer` the outcome of the caller's transfer. `Ok`:
    /// the source is released and the moved tensor (the destination at offset 0, the same
    /// layout) returned. `Err`: the source stays live and unchanged, a destination the move
    /// grew shrinks back to empty, both claims end, and the error is returned; the
    /// destination keeps whatever the transfer wrote.
    pub fn commit(self, transfer: Result<()>) -> MoveOutcome {
        self.0.commit(transfer)
    }
}
