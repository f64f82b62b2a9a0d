//! `_native.initiate`: the one initiation of every move the entry's fast routes do not take
//! whole (user hooks, definition routes, profiled and logged moves, subclasses, a composite's
//! moves between its tiers, `MoveOperation.forward`, a recorded move's backward).
//!
//! It runs the core's one move request (`model::movement::Request`, the request the Rust
//! model's moves and the fast routes run), with the Python carriers as its parties
//! ([`Parties`]: `MoveParties` answered in Python terms). In order:
//! 1. the core validates: the table (`Rows`, the core's `VALIDATION_ORDER`), which asks once
//!    for the pair's route decision (`routes.rs`) and, for a recorded move, the reverse one,
//!    before the route's rows; then a definition route's `prepare` (its refusals raise here,
//!    before any effect), falling back to the elementwise operation where the definition
//!    permits it;
//! 2. the request object (it is the claim) and its operation;
//! 3. the core admits it: both claims, checked and taken in one step (of two racing requests
//!    exactly one wins), then the growth of an empty destination while claimed;
//! 4. the move's log record and profiler event, the `output` the transfer writes through (the
//!    claim admits it, by a weak reference to the request), a provider's
//!    `TransferRequest.output`, the autograd node of a recorded move; a failure here abandons
//!    the request (nothing stays claimed or grown) and raises;
//! 5. the submission of the transfer; from here every failure is the request's one terminal
//!    commit (the core's), and the caller gets the handle.
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

use strideweave_core::model::movement::{Check, CommitSteps, MoveParties, Request};

use crate::carrier_base::CarrierBase;
use crate::carrier_state::{take_claims, PyJudge};
use crate::inline_move::{config, exact_single_view, grad_enabled, profiling, result_view};
use crate::move_entry::move_logging;
use crate::move_request::{destination_size, request_hooks, too_small, Checked, MoveRequest, Rows, Steps};
use crate::routes::Route;
use crate::transfer::elementwise_host_copy;

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

    // 1. The core's request validates: the table, with the routes asked for once the
    //    arguments have passed their rows (so `tensor` is a Tensor and `destination` a Carrier
    //    by then), then a definition route's prepare, whose refusal raises before any effect.
    let operation_class = operation.as_ref().map(|op| op.get_type());
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
        let chosen = match (&route, &operation_class) {
            (Some(route), _) => route.clone(),
            (None, None) => hooks.lookup_route.bind(py).call1((&source_class, &destination_class))?,
            (None, Some(class)) => hooks.operation_route.bind(py).call1((class, &source_class, &destination_class))?,
        };
        Ok((chosen, reverse, recording))
    };
    let mut parties = Parties {
        hooks,
        rows: Rows::new(tensor, destination, between_tiers, &mut resolve)?,
        tensor,
        destination,
        prepared: None,
        request: None,
    };
    let validated = Request::validate(&mut parties)?;
    let Prepared { route: chosen, prepared, transfer_request, checked } =
        parties.prepared.take().expect("validation prepared the route");
    let destination = destination.cast::<CarrierBase>()?;
    let source = tensor.getattr(intern!(py, "carrier"))?.cast_into::<CarrierBase>()?;
    let decision = chosen.getattr(intern!(py, "decision"))?;

    // 2. The request (it is the claim) and its operation.
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

    // 3. The core's request admits it: both claims in one step (of two racing requests
    //    exactly one wins), then the growth of an empty destination, while claimed.
    parties.request = Some(request.clone());
    request.get().request().admit(validated, &mut parties)?;

    // 4. What the transfer is handed; a failure abandons the request.
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
        checked.recording,
    ) {
        Ok(token) => token,
        Err(err) => {
            MoveRequest::abandon(&request)?;
            hooks.log_abort.bind(py).call1((request.get().token(py),))?;
            return Err(err);
        }
    };

    // 5. The submission; past it, every failure is terminal. The elementwise operation's
    //    small copy between host storages runs here, as its `_submit` would run it.
    let ran_here = match (&prepared, config(py)) {
        (None, Some(cfg)) if operation.get_type().is(hooks.elementwise.bind(py)) => {
            elementwise_host_copy(cfg, tensor, destination)
        }
        _ => None,
    };
    let submitted = match ran_here {
        Some(copied) => copied.map(|()| MoveRequest::commit(&request, None)),
        None => hooks.submit.bind(py).call1((&request, &operation, prepared)).map(|_| Ok(())),
    };
    match submitted {
        Ok(committed) => committed?,
        Err(err) => MoveRequest::commit(&request, Some(err.into_value(py).into_bound(py).into_any()))?,
    }
    if let Some(token) = token {
        hooks.log_submitted.bind(py).call1((token, request.get().handle(py)))?;
    }
    Ok(request)
}

/// Step 4: the log record, `output`, a provider's window and the autograd node. Returns the
/// log token (None between tiers, and for a move neither logged nor profiled).
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
    recording: bool,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    // Neither logged nor profiled (no profiler anywhere, the log below DEBUG), the token is
    // None: what `_log_begin` would answer, without calling it.
    let token = if request.get().is_between_tiers() || (!profiling() && !move_logging(py)?) {
        None
    } else {
        // The moved span's bytes, as the request's progress counts them.
        let nbytes = request.get().total_bytes();
        let token = hooks.log_begin.bind(py).call1((source, destination, implementation, nbytes))?;
        request.get().set_parts(None, None, Some(token.clone()));
        Some(token)
    };
    // The claim admits writes through what the transfer is handed, never through the
    // destination itself: a weak reference, so a published result does not keep its request
    // alive.
    let grant = PyWeakrefReference::new(request)?;
    let output = match native_output(tensor, destination, &grant)? {
        Some(output) => output,
        None => hooks.output.bind(py).call1((tensor, destination, &grant))?,
    };
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

/// `move._output(tensor, destination, grant)` made here for a one-subtensor `Tensor`: the
/// Tensor the inline move publishes (`inline_move::result_view`), holding the grant. None
/// (the hook decides) for anything else.
fn native_output<'py>(
    tensor: &Bound<'py, PyAny>,
    destination: &Bound<'py, CarrierBase>,
    grant: &Bound<'py, PyWeakrefReference>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let Some(cfg) = config(tensor.py()) else {
        return Ok(None);
    };
    let Some(view) = exact_single_view(cfg, tensor) else {
        return Ok(None);
    };
    let output = result_view(cfg, destination, view)?;
    output.get().grant_to(grant.as_any());
    Ok(Some(output.into_any()))
}

/// What a definition route's preparation gave, with the table's decisions.
struct Prepared<'py> {
    /// The route the move takes (the elementwise operation when a definition declined).
    route: Bound<'py, Route>,
    prepared: Option<Bound<'py, PyAny>>,
    transfer_request: Option<Bound<'py, PyAny>>,
    checked: Checked<'py>,
}

/// The Python carriers of one general move as the core request's parties: the table's rows
/// answered in Python terms (`Rows`), a definition route's preparation, the claims held by the
/// request object, a growth through the destination's own allocation hook, and the request's
/// commit steps.
struct Parties<'a, 'py> {
    hooks: &'a Hooks,
    rows: Rows<'a, 'py>,
    tensor: &'a Bound<'py, PyAny>,
    destination: &'a Bound<'py, PyAny>,
    prepared: Option<Prepared<'py>>,
    /// The request object, once made (between validation and admission): the claim.
    request: Option<Bound<'py, MoveRequest>>,
}

impl<'py> Parties<'_, 'py> {
    fn request(&self) -> &Bound<'py, MoveRequest> {
        self.request.as_ref().expect("the request is made before its admission")
    }

    fn destination(&self) -> &Bound<'py, CarrierBase> {
        self.destination.cast::<CarrierBase>().expect("a Carrier once the table passed")
    }
}

impl CommitSteps for Parties<'_, '_> {
    type Error = PyErr;

    fn release_source(&mut self) -> PyResult<()> {
        Steps::of(self.request())?.release_source()
    }

    fn shrink_destination(&mut self) {
        if let Ok(mut steps) = Steps::of(self.request()) {
            steps.shrink_destination();
        }
    }

    fn end_claims(&mut self) {
        if let Ok(mut steps) = Steps::of(self.request()) {
            steps.end_claims();
        }
    }
}

impl<'py> MoveParties for Parties<'_, 'py> {
    fn check(&mut self, row: Check) -> PyResult<()> {
        self.rows.check(row)
    }

    /// A definition route's prepare: it may still refuse, or decline in favour of the
    /// elementwise operation where the definition permits it.
    fn prepare(&mut self) -> PyResult<()> {
        let py = self.tensor.py();
        let checked = self.rows.checked();
        let mut route = checked.route.clone().cast_into::<Route>()?;
        let decision = route.getattr(intern!(py, "decision"))?;
        let (mut prepared, mut transfer_request) = (None, None);
        if !decision.is_none() {
            let out = self.hooks.prepare_route.bind(py).call1((&decision, self.tensor, self.destination))?;
            let (p, t): (Bound<'py, PyAny>, Bound<'py, PyAny>) = out.extract()?;
            if p.is_none() {
                let fallback = self.hooks.elementwise.bind(py).clone().into_any();
                route = Bound::new(py, Route::operation(fallback))?;
            } else {
                prepared = Some(p);
                transfer_request = Some(t).filter(|t| !t.is_none());
            }
        }
        self.prepared = Some(Prepared { route, prepared, transfer_request, checked });
        Ok(())
    }

    fn claim(&mut self) -> PyResult<()> {
        let py = self.tensor.py();
        let source = self.tensor.getattr(intern!(py, "carrier"))?.cast_into::<CarrierBase>()?;
        let entries = [
            (source, "source".to_string(), "move".to_string()),
            (self.destination().clone(), "destination".to_string(), "move into".to_string()),
        ];
        let releasing = request_hooks(py)?.releasing.bind(py);
        take_claims(self.request().as_any(), &entries, &PyJudge { active: None, releasing, owner: None })
    }

    /// Through the destination's own allocation (a definition's, or its `_allocate` as the
    /// request's act), when the table allowed it and the destination, now claimed, is still
    /// empty.
    fn grow(&mut self) -> PyResult<bool> {
        if !self.rows.may_grow() {
            return Ok(false);
        }
        let py = self.tensor.py();
        let (destination, request) = (self.destination(), self.request());
        let cosize = request.get().cosize();
        let size = destination_size(destination.as_any())?;
        if size >= cosize {
            // Grown by another move between the table and the claim: room enough now.
            return Ok(false);
        }
        if size != 0 {
            return Err(too_small(destination.as_any(), size, cosize)?);
        }
        if self.hooks.is_definition_backed.bind(py).call1((destination,))?.is_truthy()? {
            self.hooks.allocate_definition.bind(py).call1((destination, cosize))?;
        } else {
            request_hooks(py)?.allocate_claimed.bind(py).call1((destination, request, cosize))?;
        }
        Ok(true)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(configure_initiate, m)?)?;
    m.add_function(wrap_pyfunction!(initiate, m)?)?;
    Ok(())
}
