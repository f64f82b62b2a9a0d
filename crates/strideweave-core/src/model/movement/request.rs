//! One move request: validation in the specification's order, claims, destination growth,
//! the transfer, and one terminal commit or rollback.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use super::route::{self, Job, Route, RouteKind};
use super::super::carrier::{same_carrier, Carrier, CarrierExt};
use super::super::error::{ModelError, Result};
use super::super::state::{ClaimGuard, ClaimId, Role};
use super::super::tensor::Tensor;

/// A validated move holding both claims, ready to transfer. Dropping it without running
/// gives both claims back (the guards' rollback).
pub(crate) struct Pending {
    src_claim: ClaimGuard,
    dst_claim: ClaimGuard,
    route: Route,
    offset: usize,
    output: Tensor,
    grew: bool,
}

fn name(c: &dyn Carrier) -> String {
    c.state().class_name().to_string()
}

/// Validates `tensor` → `destination` in docs/spec/interop-movement.md's table order (the rows a
/// Rust type cannot violate — "not a Tensor", "not a Carrier" — are the type system's),
/// then claims both carriers and grows an empty allocatable destination.
pub(crate) fn initiate(tensor: &Tensor, destination: &Arc<dyn Carrier>) -> Result<Pending> {
    let sub = tensor.single("move")?;
    let source = sub.carrier();
    let layout = sub.layout().clone();
    if source.is_released() {
        return Err(ModelError::Released { carrier: name(&**source) });
    }
    if source.is_owned() {
        return Err(ModelError::Owned { carrier: name(&**source) });
    }
    if same_carrier(source, destination) {
        return Err(ModelError::SameCarrier);
    }
    if destination.is_released() {
        return Err(ModelError::Released { carrier: name(&**destination) });
    }
    if !destination.is_mutable() {
        return Err(ModelError::NotMutable { carrier: name(&**destination) });
    }
    if destination.elem_kind() != tensor.dtype() {
        return Err(ModelError::DTypeMismatch {
            carrier: name(&**destination),
            expected: tensor.dtype(),
            found: destination.elem_kind(),
        });
    }
    // The pinned-class row: every built-in route is keyed by its exact pair, so the
    // resolved route always matches it; custom routes would check their pins here.
    let kind = route::route_kind(source.class_key(), destination.class_key());
    let cosize = layout.cosize() as usize;
    check_room(&**destination, cosize)?;
    // A pair without a transfer is refused after the validation table, before any effect.
    if kind == RouteKind::Unsupported {
        return Err(ModelError::NoRoute { from: name(&**source), to: name(&**destination) });
    }

    // The checks above are re-made atomically by the claims; they ran first only to report
    // in the specified order.
    let id = ClaimId::fresh();
    let src_claim = source.state().try_claim(source, id, Role::Source)?;
    let dst_claim = destination.state().try_claim(destination, id, Role::Destination)?;
    let grew = match check_room(&**destination, cosize)? {
        Room::Enough => false,
        Room::Grow => {
            destination.allocate(cosize)?;
            true
        }
    };
    let output = match Tensor::new(destination.clone(), 0, layout) {
        Ok(t) => t,
        Err(e) => {
            if grew {
                let _ = destination.allocate(0);
            }
            return Err(e);
        }
    };
    let route = route::resolve(&**source, &**destination);
    Ok(Pending { src_claim, dst_claim, route, offset: sub.offset(), output, grew })
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
        Err(ModelError::TooSmall { carrier: name(destination), size, needed: cosize })
    }
}

impl Pending {
    /// The route this move runs.
    pub(crate) fn route_kind(&self) -> RouteKind {
        self.route.kind()
    }

    /// Run the transfer, then the one terminal commit: on success the destination's claim
    /// ends (its value is published with the result tensor) and then the source is released
    /// together with the end of its claim; on failure a grown destination shrinks back to
    /// empty, both claims end, and the source stays live and unchanged.
    pub(crate) fn run(self) -> Result<Tensor> {
        let outcome = {
            let job = Job {
                src: &**self.src_claim.carrier(),
                dst: &**self.dst_claim.carrier(),
                offset: self.offset,
                layout: self.output.layout(),
                elem_size: self.output.dtype().size(),
            };
            catch_unwind(AssertUnwindSafe(|| route::execute(&self.route, &job))).unwrap_or_else(|panic| {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic payload".into());
                Err(ModelError::TransferPanicked { message })
            })
        };
        let Pending { src_claim, dst_claim, route, output, grew, .. } = self;
        // The transfer is over: let go of its storages before the source's release hook.
        drop(route);
        match outcome {
            Ok(()) => {
                dst_claim.finish();
                src_claim.commit_release();
                Ok(output)
            }
            Err(e) => {
                if grew {
                    let _ = dst_claim.carrier().allocate(0);
                }
                drop(output);
                drop(dst_claim);
                drop(src_claim);
                Err(e)
            }
        }
    }
}
