//! `_native.initiate`: the one initiation of every move the entry's fast routes do not take
//! whole (user hooks, definition routes, profiled and logged moves, subclasses, a composite's
//! moves between its tiers, `MoveOperation.forward`, a recorded move's backward).
//!
//! In order, and every step here:
//! 1. the validation table (`MoveRequest::check_rows`, the core's `VALIDATION_ORDER`), which
//!    asks once for the pair's route decision (`routes.rs`) and, for a recorded move, the
//!    reverse one, before the route's rows;
//! 2. a definition route's `prepare` (its refusals raise here, before any effect), falling
//!    back to the elementwise operation where the definition permits it;
//! 3. the request (it is the claim) and its operation;
//! 4. both claims, checked and taken in one step (of two racing requests exactly one wins);
//! 5. the move's log record and profiler event, the growth of an empty destination, the
//!    `output` the transfer writes through (the claim admits it, by a weak reference to the
//!    request), a provider's `TransferRequest.output`, the autograd node of a recorded move;
//!    a failure here abandons the request (nothing stays claimed or grown) and raises;
//! 6. the submission of the transfer; from here every failure is the request's one terminal
//!    commit, and the caller gets the handle.
//!
//! What runs in Python is what the specification defines in Python terms, handed over once
//! at import by `carriers/move.py` (`configure_initiate`): route resolution from the
//! registries, a provider's `prepare`, the operation's transfer (`_submit`: `_copy`, a
//! provider's `submit`), the autograd node, the log and the profiler.

use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyType, PyWeakrefReference};

use crate::carrier_base::CarrierBase;
use crate::carrier_state::{take_claims, PyJudge};
use crate::inline_move::grad_enabled;
use crate::move_request::{request_hooks, MoveRequest};
use crate::routes::Route;

/// What `carriers/move.py` hands the initiation once, at import (one item per field).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct Hooks {
    /// `move._lookup_route(source_class, destination_class)`: the pair's cached decision.
    lookup_route: Py<PyAny>,
    /// `move._operation_route(operation_class, source_class, destination_class)`: the route of
    /// one operation called directly (`MoveOperation.forward`).
    operation_route: Py<PyAny>,
    /// `extension.prepare_route(decision, tensor, destination)`: `(prepared, transfer_request)`.
    prepare_route: Py<PyAny>,
    /// `ElementwiseMoveOperation`: the fallback of a definition route that declined.
    elementwise: Py<PyType>,
    /// `MoveOperation`: the node of a provider's move.
    move_operation: Py<PyType>,
    /// `move._log_begin(source, destination, implementation, nbytes)`: the move's token.
    log_begin: Py<PyAny>,
    /// `move._log_abort(token)`: a request abandoned before its submission.
    log_abort: Py<PyAny>,
    /// `move._log_submitted(token, handle)`: the submission's end.
    log_submitted: Py<PyAny>,
    /// `extension.is_definition_backed(carrier)`.
    is_definition_backed: Py<PyAny>,
    /// `extension.allocate_destination(carrier, n)`: a definition's allocation.
    allocate_definition: Py<PyAny>,
    /// `move._output(tensor, destination, grant)`: the Tensor over the destination the claim
    /// admits writes through.
    output: Py<PyAny>,
    /// `move._bind_window(transfer_request, tensor, destination, grant)`: a provider's
    /// `TransferRequest.output`.
    bind_window: Py<PyAny>,
    /// `move._record(request, operation, tensor, source, destination, reverse)`.
    record: Py<PyAny>,
    /// `move._submit(request, operation, prepared)`.
    submit: Py<PyAny>,
}

static HOOKS: PyOnceLock<Hooks> = PyOnceLock::new();

/// `configure_initiate({...})`, once.
#[pyfunction]
fn configure_initiate(py: Python<'_>, hooks: Hooks) -> PyResult<()> {
    HOOKS.set(py, hooks).map_err(|_| PyRuntimeError::new_err("the move initiation is configured once"))
}

fn hooks(py: Python<'_>) -> PyResult<&Hooks> {
    HOOKS.get(py).ok_or_else(|| PyRuntimeError::new_err("strideweave's move initiation is not configured"))
}

/// Validate, resolve, claim, size and submit one move; the request (its handle is the
/// move's). Errors before the submission raise here with nothing changed; errors after it
/// are the handle's terminal failure.
#[pyfunction]
#[pyo3(signature = (tensor, destination, *, between_tiers=false, route=None, operation=None, attach=true))]
fn initiate<'py>(
    tensor: &Bound<'py, PyAny>,
    destination: &Bound<'py, PyAny>,
    between_tiers: bool,
    route: Option<Bound<'py, PyAny>>,
    operation: Option<Bound<'py, PyAny>>,
    attach: bool,
) -> PyResult<Bound<'py, MoveRequest>> {
    let py = tensor.py();
    let hooks = hooks(py)?;
    let route = route.filter(|r| !r.is_none());
    let operation = operation.filter(|o| !o.is_none());

    // 1. The table, with the routes asked for once the arguments have passed their rows (so
    //    `tensor` is a Tensor and `destination` a Carrier by then).
    let mut resolve = || -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>, bool)> {
        let source_class = tensor.getattr(intern!(py, "carrier"))?.get_type();
        let destination_class = destination.get_type();
        let recording = attach
            && !between_tiers
            && grad_enabled()
            && tensor.call_method0(intern!(py, "is_differentiable"))?.is_truthy()?;
        let reverse = if recording {
            hooks.lookup_route.bind(py).call1((&destination_class, &source_class))?
        } else {
            py.None().into_bound(py)
        };
        let chosen = match (&route, &operation) {
            (Some(route), _) => route.clone(),
            (None, None) => hooks.lookup_route.bind(py).call1((&source_class, &destination_class))?,
            (None, Some(op)) => {
                hooks.operation_route.bind(py).call1((op.get_type(), &source_class, &destination_class))?
            }
        };
        Ok((chosen, reverse, recording))
    };
    let checked = MoveRequest::check_rows(tensor, destination, between_tiers, &mut resolve)?;
    let destination = destination.cast::<CarrierBase>()?;
    let source = tensor.getattr(intern!(py, "carrier"))?.cast_into::<CarrierBase>()?;

    // 2. A definition route's prepare: its refusal raises before any effect.
    let mut chosen = checked.route.cast_into::<Route>()?;
    let decision = chosen.getattr(intern!(py, "decision"))?;
    let (mut prepared, mut transfer_request) = (None, None);
    if !decision.is_none() {
        let out = hooks.prepare_route.bind(py).call1((&decision, tensor, destination))?;
        let (p, t): (Bound<'py, PyAny>, Bound<'py, PyAny>) = out.extract()?;
        if p.is_none() {
            let fallback = hooks.elementwise.bind(py).clone().into_any();
            chosen = Bound::new(py, Route::operation(fallback))?;
        } else {
            prepared = Some(p);
            transfer_request = Some(t).filter(|t| !t.is_none());
        }
    }

    // 3. The request and its operation.
    let request = Bound::new(py, MoveRequest::new(tensor, destination, between_tiers)?)?;
    let operation = match operation {
        Some(op) => op,
        None => match chosen.get().operation_class(py) {
            Some(class) => class.bind(py).call0()?,
            None => hooks.move_operation.bind(py).call0()?,
        },
    };
    let implementation = match &prepared {
        None => operation.get_type(),
        Some(_) => decision.getattr(intern!(py, "route"))?.getattr(intern!(py, "provider"))?.get_type(),
    };
    request.get().set_parts(prepared.clone(), None, None);

    // 4. Both claims in one step.
    let request_hooks = request_hooks(py)?;
    let releasing = request_hooks.releasing.bind(py);
    let entries = [
        (source.clone(), "source".to_string(), "move".to_string()),
        (destination.clone(), "destination".to_string(), "move into".to_string()),
    ];
    take_claims(request.as_any(), &entries, &PyJudge { active: None, releasing, owner: None })?;

    // 5. What the transfer is handed; a failure abandons the request.
    let cosize = request.get().cosize();
    let token = match prepare_transfer(
        py,
        hooks,
        &request,
        tensor,
        (&source, destination),
        &operation,
        &implementation,
        transfer_request.as_ref(),
        &checked.reverse,
        (checked.grow, checked.recording, cosize),
    ) {
        Ok(token) => token,
        Err(err) => {
            MoveRequest::abandon(&request)?;
            hooks.log_abort.bind(py).call1((request.get().token(py),))?;
            return Err(err);
        }
    };

    // 6. The submission; past it, every failure is terminal.
    if let Err(err) = hooks.submit.bind(py).call1((&request, &operation, prepared)) {
        MoveRequest::commit(&request, Some(err.into_value(py).into_bound(py).into_any()))?;
    }
    if !between_tiers {
        hooks.log_submitted.bind(py).call1((token, request.get().handle(py)))?;
    }
    Ok(request)
}

/// Step 5: the log record, growth, `output`, a provider's window and the autograd node.
/// Returns the log token (None between tiers).
#[allow(clippy::too_many_arguments)]
fn prepare_transfer<'py>(
    py: Python<'py>,
    hooks: &Hooks,
    request: &Bound<'py, MoveRequest>,
    tensor: &Bound<'py, PyAny>,
    (source, destination): (&Bound<'py, CarrierBase>, &Bound<'py, CarrierBase>),
    operation: &Bound<'py, PyAny>,
    implementation: &Bound<'py, PyType>,
    transfer_request: Option<&Bound<'py, PyAny>>,
    reverse: &Bound<'py, PyAny>,
    (grow, recording, cosize): (bool, bool, i64),
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let token = if request.get().is_between_tiers() {
        None
    } else {
        // The moved span's bytes, as the request's progress counts them.
        let nbytes = request.get().total_bytes();
        let token = hooks.log_begin.bind(py).call1((source, destination, implementation, nbytes))?;
        request.get().set_parts(None, None, Some(token.clone()));
        Some(token)
    };
    if grow {
        if hooks.is_definition_backed.bind(py).call1((destination,))?.is_truthy()? {
            hooks.allocate_definition.bind(py).call1((destination, cosize))?;
        } else {
            request_hooks(py)?.allocate_claimed.bind(py).call1((destination, request, cosize))?;
        }
        request.get().mark_grown();
    }
    // The claim admits writes through what the transfer is handed, never through the
    // destination itself: a weak reference, so a published result does not keep its request
    // alive.
    let grant = PyWeakrefReference::new(request)?;
    let output = hooks.output.bind(py).call1((tensor, destination, &grant))?;
    request.get().set_parts(None, Some(output), None);
    if let Some(transfer_request) = transfer_request {
        hooks.bind_window.bind(py).call1((transfer_request, tensor, destination, &grant))?;
    }
    if recording {
        let args =
            PyTuple::new(py, [request.as_any(), operation, tensor, source.as_any(), destination.as_any(), reverse])?;
        hooks.record.bind(py).call1(args)?;
    }
    Ok(token)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(configure_initiate, m)?)?;
    m.add_function(wrap_pyfunction!(initiate, m)?)?;
    Ok(())
}
