//! One move request: validation in the specification's order, claims, destination growth,
//! the transfer, and one terminal commit or rollback.

use crate::model::carrier::HOOK;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use super::super::carrier::{same_carrier, Carrier, CarrierExt};
use super::super::error::{ModelError, Result};
use super::super::state::{ClaimGuard, ClaimId, Role};
use super::super::tensor::{Subtensor, Tensor};
use super::output::MoveOutput;
use super::refusal::{MoveRefusal, Party};
use super::route::{self, Job, Route, RouteKind};
use super::table::{validate, Check};
use super::terminal::{CommitSteps, Terminal};
use crate::layout::Layout;
use crate::storage::ElemKind;
use crate::transfer::Progress;

/// A validated move holding both claims, ready to transfer. Dropping it without running
/// shrinks a destination it grew back to empty (while still claimed) and gives both claims
/// back (the guards' rollback).
pub(crate) struct Pending {
    parts: Option<Parts>,
}

struct Parts {
    src_claim: ClaimGuard,
    dst_claim: ClaimGuard,
    route: Route,
    offset: usize,
    layout: Arc<Layout>,
    dtype: ElemKind,
    grew: bool,
    progress: Option<Arc<Progress>>,
}

fn name(c: &dyn Carrier) -> String {
    c.state(HOOK).class_name().to_string()
}

/// Validates `tensor` → `destination` in the order of the specification's table
/// ([`VALIDATION_ORDER`](super::VALIDATION_ORDER); the rows a Rust type cannot violate — "not
/// a Tensor", "not a Carrier", a pinned class — pass at once), then claims both carriers and
/// grows an empty allocatable destination. `decided`: the route a binding decided for the pair
/// of its classes; it cannot permit a pair the classes' identities refuse.
pub(crate) fn initiate(tensor: &Tensor, destination: &Arc<dyn Carrier>, decided: Option<RouteKind>) -> Result<Pending> {
    // The table's first row: a source carrier exists only for a single-subtensor tensor.
    initiate_window(tensor.single("move")?, tensor.dtype(), destination, decided)
}

/// [`initiate`] for the window of a single-subtensor tensor of `dtype`.
pub(crate) fn initiate_window(
    sub: &Subtensor,
    dtype: ElemKind,
    destination: &Arc<dyn Carrier>,
    decided: Option<RouteKind>,
) -> Result<Pending> {
    let source = sub.carrier();
    let layout = sub.shared_layout().clone();
    let kind = match (route::route_kind(source.class_key(), destination.class_key()), decided) {
        (RouteKind::Unsupported, _) => RouteKind::Unsupported,
        (_, Some(decided)) => decided,
        (by_class, None) => by_class,
    };
    let cosize = layout.cosize() as usize;
    validate(|row| match row {
        Check::OneSubtensor | Check::IsTensor | Check::IsCarrier | Check::PinnedClasses => Ok(()),
        Check::SourceLive => live(&**source, Party::Source),
        Check::SourceUnowned if source.is_owned() => Err(ModelError::Owned { carrier: name(&**source) }),
        Check::SourceUnowned => Ok(()),
        Check::SourceUnclaimed => unclaimed(&**source, "move"),
        Check::DistinctCarriers if same_carrier(source, destination) => Err(MoveRefusal::SameCarrier.into()),
        Check::DistinctCarriers => Ok(()),
        Check::DestinationLive => live(&**destination, Party::Destination),
        Check::DestinationMutable if !destination.is_mutable() => {
            Err(MoveRefusal::DestinationNotMutable { carrier: name(&**destination) }.into())
        }
        Check::DestinationMutable => Ok(()),
        Check::DestinationUnclaimed => unclaimed(&**destination, "move into"),
        Check::SameDType if destination.elem_kind() != dtype => Err(MoveRefusal::DTypeMismatch {
            found: destination.elem_kind().dtype_name().into(),
            expected: dtype.dtype_name().into(),
        }
        .into()),
        Check::SameDType => Ok(()),
        Check::Room => check_room(&**destination, cosize).map(drop),
        // A pair without a transfer is refused after the validation table, before any effect.
        Check::RoutePermitted if kind == RouteKind::Unsupported => {
            Err(ModelError::NoRoute { from: name(&**source), to: name(&**destination) })
        }
        Check::RoutePermitted => Ok(()),
    })?;

    // The checks above are re-made atomically by the claims; they ran first only to report
    // in the specified order.
    let id = ClaimId::fresh();
    let src_claim = source.state(HOOK).try_claim(source, id, Role::Source)?;
    let dst_claim = destination.state(HOOK).try_claim(destination, id, Role::Destination)?;
    let grew = match check_room(&**destination, cosize)? {
        Room::Enough => false,
        Room::Grow => {
            destination.allocate(HOOK, cosize)?;
            true
        }
    };
    // From here a failure is the pending move's drop: a grown destination shrinks back.
    let route = route::resolve_as(kind, &**source, &**destination);
    Ok(Pending {
        parts: Some(Parts { src_claim, dst_claim, route, offset: sub.offset(), layout, dtype, grew, progress: None }),
    })
}

fn live(carrier: &dyn Carrier, party: Party) -> Result<()> {
    if carrier.is_released() {
        return Err(MoveRefusal::Released { party, carrier: name(carrier) }.into());
    }
    Ok(())
}

fn unclaimed(carrier: &dyn Carrier, action: &'static str) -> Result<()> {
    if carrier.state(HOOK).is_claimed() {
        return Err(ModelError::Claimed { carrier: name(carrier), action });
    }
    Ok(())
}

enum Room {
    Enough,
    Grow,
}

fn check_room(destination: &dyn Carrier, cosize: usize) -> Result<Room> {
    let size = destination.size();
    if size >= cosize {
        Ok(Room::Enough)
    } else if size == 0 && destination.can_allocate() {
        Ok(Room::Grow)
    } else {
        Err(MoveRefusal::TooSmall { carrier: name(destination), size, needed: cosize }.into())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(parts) = self.parts.take() {
            if parts.grew {
                let _ = parts.dst_claim.carrier().allocate(HOOK, 0);
            }
            // The guards give both claims back.
        }
    }
}

impl Pending {
    fn parts(&self) -> &Parts {
        self.parts.as_ref().expect("a pending move has its parts until it runs")
    }

    /// The bytes the transfer spans (the layout's cosize in slots of the dtype).
    pub(crate) fn bytes(&self) -> usize {
        let parts = self.parts();
        (parts.layout.cosize() as usize).saturating_mul(parts.dtype.size())
    }

    /// Count the transfer's bytes into `progress` as it runs (a bulk transfer of host memory
    /// guarded by claims counts chunk by chunk).
    pub(crate) fn count_into(&mut self, progress: Arc<Progress>) {
        if let Some(parts) = self.parts.as_mut() {
            parts.progress = Some(progress);
        }
    }

    /// The route this move runs.
    pub(crate) fn route_kind(&self) -> RouteKind {
        self.parts().route.kind()
    }

    /// The destination window as this move's own transfer writes it ([`MoveOutput`]).
    pub(crate) fn output(&self) -> MoveOutput {
        let parts = self.parts();
        MoveOutput::new(parts.dst_claim.carrier().clone(), parts.layout.clone(), parts.dst_claim.id())
    }

    /// Run the transfer, then the one terminal commit ([`Terminal`]): on success the source
    /// is released together with the end of its claim, then the destination's claim ends
    /// (its value is published with the result tensor); on failure a grown destination
    /// shrinks back to empty while still claimed, both claims end, and the source stays live
    /// and unchanged.
    pub(crate) fn run(self) -> Result<Tensor> {
        self.complete(None, true).map(|output| output.expect("asked for the moved tensor"))
    }

    /// [`run`](Self::run) without making the moved tensor (a binding makes its own).
    pub(crate) fn finish(self) -> Result<()> {
        self.complete(None, false).map(drop)
    }

    /// The terminal commit of a transfer the caller ran (through [`output`](Self::output)):
    /// `transfer` is its outcome. As [`run`](Self::run) from there on.
    pub(crate) fn commit(self, transfer: Result<()>) -> Result<Tensor> {
        self.complete(Some(transfer), true).map(|output| output.expect("asked for the moved tensor"))
    }

    /// `transfer`: the outcome of a transfer the caller ran; None runs the route's.
    fn complete(mut self, transfer: Option<Result<()>>, with_output: bool) -> Result<Option<Tensor>> {
        let parts = self.parts.take().expect("a pending move runs once");
        let outcome = if let Some(transfer) = transfer {
            transfer
        } else {
            let job = Job {
                src: &**parts.src_claim.carrier(),
                dst: &**parts.dst_claim.carrier(),
                offset: parts.offset,
                layout: &parts.layout,
                elem_size: parts.dtype.size(),
                progress: parts.progress.as_ref(),
            };
            catch_unwind(AssertUnwindSafe(|| route::execute(&parts.route, &job))).unwrap_or_else(|panic| {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic payload".into());
                Err(ModelError::TransferPanicked { message })
            })
        };
        let Parts { src_claim, dst_claim, route, layout, grew, .. } = parts;
        // The moved tensor is made while the destination is still claimed, so nobody can
        // release it in between; a failure to make it fails the move like the transfer's.
        let (outcome, output) = match (outcome, with_output) {
            (Ok(()), true) => match Tensor::new(dst_claim.carrier().clone(), 0, layout) {
                Ok(output) => (Ok(()), Some(output)),
                Err(e) => (Err(e), None),
            },
            (outcome, _) => (outcome, None),
        };
        // The transfer is over: let go of its storages before the source's release hook.
        drop(route);
        let mut steps = Claims { source: Some(src_claim), destination: Some(dst_claim) };
        match Terminal::new().commit(&mut steps, outcome, grew) {
            Some(Ok(())) => Ok(output),
            Some(Err(e)) => Err(e),
            None => unreachable!("a fresh terminal commits"),
        }
    }
}

/// The Rust request's claims, ended by its terminal commit.
struct Claims {
    source: Option<ClaimGuard>,
    destination: Option<ClaimGuard>,
}

impl CommitSteps for Claims {
    type Error = ModelError;

    fn release_source(&mut self) -> Result<()> {
        if let Some(claim) = self.source.take() {
            if let Err((claim, e)) = claim.commit_release() {
                // Still claimed: `end_claims` gives it back, and the source stays live.
                self.source = Some(claim);
                return Err(e);
            }
        }
        Ok(())
    }

    fn shrink_destination(&mut self) {
        if let Some(claim) = &self.destination {
            let _ = claim.carrier().allocate(HOOK, 0);
        }
    }

    fn end_claims(&mut self) {
        if let Some(claim) = self.destination.take() {
            claim.finish();
        }
        // A source claim still held here belongs to a failed move: dropping it gives the
        // claim back and leaves the source live.
        drop(self.source.take());
    }
}
