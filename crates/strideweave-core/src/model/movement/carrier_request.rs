//! The Rust model's carriers in the one move request (`request.rs`): the rows answered by the
//! carrier trait, the claims held as `ClaimGuard`s, growth through `Carrier::allocate`, and the
//! pending move that runs the pair's route (or hands the transfer to its caller) before the
//! terminal commit. The Python binding's fast routes run this too, over its carriers' adapters.

use crate::model::carrier::{HookCall, HOOK};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use super::super::carrier::{same_carrier, Carrier, CarrierExt};
use super::super::error::{ModelError, Result};
use super::super::state::{ClaimId, Role};
use super::super::tensor::{Subtensor, Tensor};
use super::output::MoveOutput;
use super::refusal::{MoveRefusal, Party};
use super::request::{MoveParties, Request};
use super::route::{self, Job, Route, RouteKind};
use super::table::Check;
use super::terminal::CommitSteps;
use crate::layout::Layout;
use crate::storage::ElemKind;
use crate::transfer::Progress;

/// A validated move holding both claims, ready to transfer. Dropping it without running
/// abandons the request: a destination it grew shrinks back to empty (while still claimed)
/// and both claims end.
pub(crate) struct Pending {
    parts: Option<Parts>,
}

struct Parts {
    request: Request,
    parties: CarrierParties,
    route: Route,
    offset: usize,
    layout: Arc<Layout>,
    dtype: ElemKind,
    progress: Option<Arc<Progress>>,
}

/// The Rust model's carriers as a request's parties: the rows answered by the carrier trait
/// and the carriers' states. The parties hold both carriers, so a claim is only its id (no
/// `ClaimGuard`, whose own handle on the carrier would cost two reference counts per claim
/// on every small move); their drop ends a claim still held, as a guard's would.
struct CarrierParties {
    source: Arc<dyn Carrier>,
    destination: Arc<dyn Carrier>,
    dtype: ElemKind,
    kind: RouteKind,
    cosize: usize,
    src_claim: Option<ClaimId>,
    dst_claim: Option<ClaimId>,
}

fn name(c: &dyn Carrier) -> String {
    c.state(HOOK).class_name().to_string()
}

/// Validates `tensor` → `destination` in the order of the specification's table
/// ([`VALIDATION_ORDER`](super::VALIDATION_ORDER); the rows a Rust type cannot violate — "not
/// a Tensor", "not a Carrier", a pinned class — pass at once), then claims both carriers and
/// grows an empty allocatable destination: the one [`Request`]. `decided`: the route a binding
/// decided for the pair of its classes; it cannot permit a pair the classes' identities refuse.
pub(crate) fn initiate(tensor: &Tensor, destination: Arc<dyn Carrier>, decided: Option<RouteKind>) -> Result<Pending> {
    // The table's first row: a source carrier exists only for a single-subtensor tensor.
    initiate_window(tensor.single("move")?, tensor.dtype(), destination, decided)
}

/// [`initiate`] for the window of a single-subtensor tensor of `dtype`.
pub(crate) fn initiate_window(
    sub: &Subtensor,
    dtype: ElemKind,
    destination: Arc<dyn Carrier>,
    decided: Option<RouteKind>,
) -> Result<Pending> {
    let source = sub.carrier();
    let layout = sub.shared_layout().clone();
    let kind = match (route::route_kind(source.class_key(), destination.class_key()), decided) {
        (RouteKind::Unsupported, _) => RouteKind::Unsupported,
        (_, Some(decided)) => decided,
        (by_class, None) => by_class,
    };
    let mut parties = CarrierParties {
        source: source.clone(),
        destination,
        dtype,
        kind,
        cosize: layout.cosize() as usize,
        src_claim: None,
        dst_claim: None,
    };
    let request = Request::initiate(&mut parties)?;
    // From here a failure is the pending move's drop: a grown destination shrinks back.
    let route = route::resolve_as(kind, &*parties.source, &*parties.destination);
    Ok(Pending { parts: Some(Parts { request, parties, route, offset: sub.offset(), layout, dtype, progress: None }) })
}

impl MoveParties for CarrierParties {
    // Inlined into the table's walk: every small move asks all fourteen rows, and a call per
    // row (each returning a `ModelError`-sized result) cost more than the checks.
    #[inline(always)]
    fn check(&mut self, row: Check) -> Result<()> {
        let (source, destination) = (&self.source, &self.destination);
        match row {
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
            Check::SameDType if destination.elem_kind() != self.dtype => Err(MoveRefusal::DTypeMismatch {
                found: destination.elem_kind().dtype_name().into(),
                expected: self.dtype.dtype_name().into(),
            }
            .into()),
            Check::SameDType => Ok(()),
            Check::Room => check_room(&**destination, self.cosize).map(drop),
            // A pair without a transfer is refused after the validation table, before any effect.
            Check::RoutePermitted if self.kind == RouteKind::Unsupported => {
                Err(ModelError::NoRoute { from: name(&**source), to: name(&**destination) })
            }
            Check::RoutePermitted => Ok(()),
        }
    }

    /// The claims re-make the table's checks atomically; it ran first only to report in the
    /// specified order.
    #[inline]
    fn claim(&mut self) -> Result<()> {
        let id = ClaimId::fresh();
        self.source.state(HOOK).claim_move(&*self.source, id, Role::Source)?;
        self.src_claim = Some(id);
        // Refused here: the parties' drop (or the request's commit) gives the source's back.
        self.destination.state(HOOK).claim_move(&*self.destination, id, Role::Destination)?;
        self.dst_claim = Some(id);
        Ok(())
    }

    #[inline]
    fn grow(&mut self) -> Result<bool> {
        // Asked again under the claim, which settles the size: the table's answer may be stale.
        match check_room(&*self.destination, self.cosize)? {
            Room::Grow => {
                self.destination.allocate(&self.destination.hook(), self.cosize)?;
                Ok(true)
            }
            Room::Enough => Ok(false),
        }
    }
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
        if let Some(mut parts) = self.parts.take() {
            drop(parts.route);
            parts.request.abandon(
                &mut parts.parties,
                ModelError::Hook { carrier: "move".into(), message: "abandoned before its transfer".into() },
            );
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
        let claim = parts.parties.dst_claim.expect("a pending move holds its claims");
        MoveOutput::new(parts.parties.destination.clone(), parts.layout.clone(), claim)
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
                src: &*parts.parties.source,
                dst: &*parts.parties.destination,
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
        let Parts { request, mut parties, route, layout, .. } = parts;
        // The moved tensor is made while the destination is still claimed, so nobody can
        // release it in between; a failure to make it fails the move like the transfer's.
        let (outcome, output) = match (outcome, with_output) {
            (Ok(()), true) => match Tensor::new(parties.destination.clone(), 0, layout) {
                Ok(output) => (Ok(()), Some(output)),
                Err(e) => (Err(e), None),
            },
            (outcome, _) => (outcome, None),
        };
        // The transfer is over: let go of its storages before the source's release hook.
        drop(route);
        match request.commit(&mut parties, outcome) {
            Some(Ok(())) => Ok(output),
            Some(Err(e)) => Err(e),
            None => unreachable!("a pending move commits once"),
        }
    }
}

/// The Rust model's side of the terminal commit: its claims.
impl CommitSteps for CarrierParties {
    type Error = ModelError;

    fn release_source(&mut self) -> Result<()> {
        if let Some(claim) = self.src_claim {
            // A hook that fails leaves the source claimed: `end_claims` gives it back, and
            // the source stays live.
            self.source.state(HOOK).release_claimed_by(&*self.source, claim)?;
            self.src_claim = None;
        }
        Ok(())
    }

    fn shrink_destination(&mut self) {
        if self.dst_claim.is_some() {
            let _ = self.destination.allocate(&self.destination.hook(), 0);
        }
    }

    fn end_claims(&mut self) {
        if let Some(claim) = self.dst_claim.take() {
            self.destination.state(HOOK).end_move_claim(claim);
        }
        // A source claim still held here belongs to a failed move: ending it leaves the
        // source live.
        if let Some(claim) = self.src_claim.take() {
            self.source.state(HOOK).end_move_claim(claim);
        }
    }
}

impl Drop for CarrierParties {
    /// Parties dropped holding a claim (a claim refused halfway, a panic): give it back.
    fn drop(&mut self) {
        self.end_claims();
    }
}
