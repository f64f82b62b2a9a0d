//! `_native.MoveRequest`: one move of the Python carriers from its admission to its one
//! terminal commit, for every move the two native moves (`inline_move.rs`, `async_move.rs`)
//! do not take whole. It holds the core's [`Request`], the one move request every move runs
//! (`initiate.rs` validates and admits through it), and is the Python carriers' side of it:
//! the table's rows answered for them (`Rows`, in the core's `VALIDATION_ORDER`) and the
//! commit's steps (`Steps`), so the order of the checks, of admission and of the commit's
//! steps, and the commit's exactly-once guarantee, are the core's. What the Python carriers
//! add enters through their hooks, called where the specification calls them:
//! `_is_mutable`/`is_mutable`, `dtype`, `release` (with its `_release` hook), `_allocate(0)`
//! to shrink a grown destination, and the framework's own Python pieces the request drives:
//! route resolution (a callback: routes are Python classes and definitions), the autograd
//! node's attachment and the profiler's `move_complete`.
//!
//! What stays in `carriers/move.py` is what the specification defines in Python terms: which
//! route a pair takes, how a `MoveOperation` or a provider runs its transfer, and the node
//! a recorded move makes. The request object is also the claim its carriers hold: it admits
//! the writes through the Tensors it handed the transfer (`output`), its own commit's release
//! of the source and its own resizing of the destination.
//!
//! Commit order (the core's `Terminal`): on success attach the node, release the source
//! while the request still claims it (so no other move takes it in between), then drop both
//! claims, complete the progress, record `move_complete` and resolve the handle; on failure
//! shrink a grown destination while it is still claimed (so no other move starts filling it
//! first), drop both claims, clear the node, record `move_complete` and fail the handle.

use parking_lot::Mutex;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyType};
use pyo3::{PyTraverseError, PyVisit};

use strideweave_core::model::movement::{validate_settled, Check, CommitSteps, Request};
use strideweave_core::model::movement::{MoveRefusal, Party};

use crate::error;

use crate::carrier_base::CarrierBase;
use crate::carrier_state::{check_unclaimed, drop_claim, owner_object, type_name, PyJudge};
use crate::engine::{new_handle, AwaitResult};
use crate::inline_move::{config, exact_single_view, Config};
use crate::storage::{FileStorage, HostStorage, SlotAccess};
use crate::tensor_base::{TensorBase, View};
use crate::transfer::TransferProgress;

/// What `carriers/move.py` registers once, as a dict with one item per field.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(crate) struct RequestHooks {
    tensor: Py<PyType>,
    carrier: Py<PyType>,
    await_move: Py<PyType>,
    /// `base.not_a_carrier(name, value)`: the TypeError for a non-carrier argument.
    not_a_carrier: Py<PyAny>,
    /// `base.RELEASING`, the claim of a carrier whose release hook runs.
    pub(crate) releasing: Py<PyAny>,
    /// `move._grows_when_empty(carrier)`: whether an empty destination may grow to the span.
    grows_when_empty: Py<PyAny>,
    /// `base.Allocatable`: a destination the request grew shrinks back through its `_allocate`.
    allocatable: Py<PyAny>,
    /// `_autograd.attach_result(node, output, recorded)`.
    attach_result: Py<PyAny>,
    /// `profiler._move_complete(token, succeeded)`.
    move_complete: Py<PyAny>,
    /// `move._slot_bytes(dtype)`: the slot size `AwaitMove.bytes_total` counts.
    slot_bytes: Py<PyAny>,
    /// `AwaitMove._fail(handle, exc)`: a move's terminal failure (it also logs it).
    fail_move: Py<PyAny>,
    /// `_autograd.clear_node(node)`: unlinks the autograd node of a failed move.
    clear_node: Py<PyAny>,
    /// `Carrier._sw_release_for(source, owner, request)`: the commit's release of the source,
    /// admitted by the request's claim.
    release_for: Py<PyAny>,
    /// `Carrier._sw_allocate_claimed(destination, request, n)`: a claimed destination grown
    /// or shrunk as the request's own act.
    pub(crate) allocate_claimed: Py<PyAny>,
    /// `base.tier_is_mutable(carrier)`: a composite's owned tier asked as its owner asks.
    tier_is_mutable: Py<PyAny>,
}

/// The hooks, for the native moves that share the request's failure end (`async_move.rs`).
pub(crate) fn request_hooks(py: Python<'_>) -> PyResult<&RequestHooks> {
    hooks(py)
}

impl RequestHooks {
    /// Fails a move's handle through `AwaitMove._fail` (so its WARNING is logged).
    pub(crate) fn fail(&self, handle: &Bound<'_, PyAny>, error: &Bound<'_, PyAny>) -> PyResult<()> {
        self.fail_move.bind(handle.py()).call1((handle, error)).map(drop)
    }

    /// Unlinks a failed move's autograd node.
    pub(crate) fn clear(&self, node: &Bound<'_, PyAny>) -> PyResult<()> {
        self.clear_node.bind(node.py()).call1((node,)).map(drop)
    }
}

static HOOKS: PyOnceLock<RequestHooks> = PyOnceLock::new();

fn hooks(py: Python<'_>) -> PyResult<&RequestHooks> {
    HOOKS.get(py).ok_or_else(|| PyRuntimeError::new_err("the move request is not configured"))
}

/// `configure_move_request({...})` (one item per `RequestHooks` field), once.
#[pyfunction]
fn configure_move_request(py: Python<'_>, hooks: RequestHooks) -> PyResult<()> {
    HOOKS.set(py, hooks).map_err(|_| PyValueError::new_err("the move request is configured once"))
}

/// The fields a request gains after its construction; read and set from Python by the move
/// module and by the claim checks. Never locked while Python code runs.
#[derive(Default)]
struct Parts {
    node: Option<Py<PyAny>>,
    recorded: Option<Py<PyAny>>,
    token: Option<Py<PyAny>>,
    output: Option<Py<PyAny>>,
    prepared: Option<Py<PyAny>>,
}

/// One move between its initiation and its terminal commit; also the claim its carriers hold.
#[pyclass(frozen, weakref, module = "strideweave._native")]
pub struct MoveRequest {
    #[pyo3(get)]
    tensor: Py<PyAny>,
    #[pyo3(get)]
    source: Py<CarrierBase>,
    #[pyo3(get)]
    destination: Py<CarrierBase>,
    #[pyo3(get)]
    layout: Py<PyAny>,
    #[pyo3(get)]
    cosize: i64,
    #[pyo3(get)]
    handle: Py<AwaitResult>,
    #[pyo3(get)]
    between_tiers: bool,
    progress: Py<TransferProgress>,
    request: Request,
    parts: Mutex<Parts>,
}

/// `value`, with Python's None as absent.
fn present(value: Option<Bound<'_, PyAny>>) -> Option<Py<PyAny>> {
    value.filter(|v| !v.is_none()).map(Bound::unbind)
}

fn cloned(py: Python<'_>, value: &Option<Py<PyAny>>) -> Option<Py<PyAny>> {
    value.as_ref().map(|v| v.clone_ref(py))
}

/// What the validation table decided about a move that passed it.
pub(crate) struct Checked<'py> {
    /// The pair's route (a `routes::Route`).
    pub(crate) route: Bound<'py, PyAny>,
    /// The reverse route a recorded move's backward takes, else None.
    pub(crate) reverse: Bound<'py, PyAny>,
    /// Whether the move records an autograd node.
    pub(crate) recording: bool,
    /// Whether an empty destination grows to the moved span.
    pub(crate) grow: bool,
}

/// `(route, reverse_route_or_None, recording)`, asked once the arguments passed their rows.
pub(crate) type Resolve<'a, 'py> = dyn FnMut() -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>, bool)> + 'a;

/// The rows of the validation table answered for the Python carriers: the arguments' rows
/// (`Arguments`), then, with the route asked for once before the first of them, the route's
/// rows (`Route`). The core's request walks them in its order.
pub(crate) struct Rows<'a, 'py> {
    arguments: Arguments<'a, 'py>,
    resolve: &'a mut Resolve<'a, 'py>,
    resolved: Option<(Bound<'py, PyAny>, Bound<'py, PyAny>, bool)>,
    grow: bool,
}

impl<'a, 'py> Rows<'a, 'py> {
    pub(crate) fn new(
        tensor: &'a Bound<'py, PyAny>,
        destination: &'a Bound<'py, PyAny>,
        between_tiers: bool,
        resolve: &'a mut Resolve<'a, 'py>,
    ) -> PyResult<Self> {
        let hooks = hooks(tensor.py())?;
        let arguments = Arguments { hooks, tensor, destination, between_tiers, source: None };
        Ok(Rows { arguments, resolve, resolved: None, grow: false })
    }

    /// Answer one row (see `MoveParties::check`).
    pub(crate) fn check(&mut self, row: Check) -> PyResult<()> {
        match row {
            Check::PinnedClasses | Check::Room | Check::RoutePermitted => {
                if self.resolved.is_none() {
                    self.resolved = Some((self.resolve)()?);
                }
                let (route, reverse, _) = self.resolved.as_ref().expect("resolved above");
                let hooks = self.arguments.hooks;
                let mut rows = Route { hooks, arguments: &self.arguments, route, reverse, grow: self.grow };
                rows.check(row)?;
                self.grow = rows.grow;
                Ok(())
            }
            row => self.arguments.check(row),
        }
    }

    /// Whether the table allowed an empty destination to grow to the moved span.
    pub(crate) fn may_grow(&self) -> bool {
        self.grow
    }

    /// What the table decided, once every row passed.
    pub(crate) fn checked(&self) -> Checked<'py> {
        let (route, reverse, recording) = self.resolved.clone().expect("the route's rows ran");
        Checked { route, reverse, recording, grow: self.grow }
    }
}

impl MoveRequest {
    /// Every check of docs/spec/interop-movement.md's table before any effect, in the core's
    /// order (`VALIDATION_ORDER`); `resolve` is called once, before the route's rows.
    pub(crate) fn check_rows<'a, 'py>(
        tensor: &'a Bound<'py, PyAny>,
        destination: &'a Bound<'py, PyAny>,
        between_tiers: bool,
        resolve: &'a mut Resolve<'a, 'py>,
    ) -> PyResult<Checked<'py>> {
        let mut rows = Rows::new(tensor, destination, between_tiers, resolve)?;
        validate_settled(|row| rows.check(row))?;
        Ok(rows.checked())
    }

    /// The core's request this one runs (its admission, its one terminal commit).
    pub(crate) fn request(&self) -> &Request {
        &self.request
    }

    /// The moved span in slots (the layout's cosize).
    pub(crate) fn cosize(&self) -> i64 {
        self.cosize
    }

    /// Whether this is a composite's move between its own tiers (no node, log or profiling).
    pub(crate) fn is_between_tiers(&self) -> bool {
        self.between_tiers
    }

    /// The bytes the move spans (`AwaitMove.bytes_total`: the cosize in slots of the dtype's size).
    pub(crate) fn total_bytes(&self) -> u64 {
        self.progress.get().total_bytes()
    }

    /// The request's handle.
    pub(crate) fn handle<'py>(&self, py: Python<'py>) -> &Bound<'py, AwaitResult> {
        self.handle.bind(py)
    }

    /// Sets the fields a request gains after its construction (see `Parts`).
    pub(crate) fn set_parts(
        &self,
        prepared: Option<Bound<'_, PyAny>>,
        output: Option<Bound<'_, PyAny>>,
        token: Option<Bound<'_, PyAny>>,
    ) {
        if prepared.is_some() {
            self.write(|p| &mut p.prepared, prepared);
        }
        if output.is_some() {
            self.write(|p| &mut p.output, output);
        }
        if token.is_some() {
            self.write(|p| &mut p.token, token);
        }
    }

    fn read(&self, py: Python<'_>, field: fn(&Parts) -> &Option<Py<PyAny>>) -> Option<Py<PyAny>> {
        cloned(py, field(&self.parts.lock()))
    }

    fn write(&self, field: fn(&mut Parts) -> &mut Option<Py<PyAny>>, value: Option<Bound<'_, PyAny>>) {
        // The displaced object is dropped after the lock: its `__del__` may read us.
        let old = std::mem::replace(field(&mut self.parts.lock()), present(value));
        drop(old);
    }
}

/// The rows of the validation table that need only the arguments, answered for the Python
/// carriers with the messages the specification's tests name.
struct Arguments<'a, 'py> {
    hooks: &'a RequestHooks,
    tensor: &'a Bound<'py, PyAny>,
    destination: &'a Bound<'py, PyAny>,
    between_tiers: bool,
    source: Option<Bound<'py, CarrierBase>>,
}

impl<'py> Arguments<'_, 'py> {
    fn py(&self) -> Python<'py> {
        self.tensor.py()
    }

    fn is_tensor(&self) -> PyResult<bool> {
        self.tensor.is_instance(self.hooks.tensor.bind(self.py()))
    }

    fn source(&self) -> &Bound<'py, CarrierBase> {
        self.source.as_ref().expect("the source is known from the IsTensor row on")
    }

    fn destination(&self) -> &Bound<'py, CarrierBase> {
        self.destination.cast::<CarrierBase>().expect("a Carrier from the IsCarrier row on")
    }

    /// A claim refuses every other request, whoever asks: no thread is exempt.
    fn unclaimed(&self, carrier: &Bound<'py, CarrierBase>, action: &str) -> PyResult<()> {
        let releasing = self.hooks.releasing.bind(self.py());
        check_unclaimed(carrier, action, &PyJudge { active: None, releasing, owner: None })
    }

    fn check(&mut self, row: Check) -> PyResult<()> {
        let py = self.py();
        match row {
            Check::OneSubtensor => {
                if self.is_tensor()? && subtensor_count(self.tensor)? != 1 {
                    return Err(error::move_refusal(MoveRefusal::MultiSubtensor));
                }
            }
            Check::IsTensor => {
                if !self.is_tensor()? {
                    return Err(error::move_refusal(MoveRefusal::NotATensor { found: type_name(self.tensor)? }));
                }
                let carrier = match plain_view(self.tensor) {
                    Some((view, _)) => view.carrier.bind(py).clone(),
                    None => self.tensor.getattr(intern!(py, "carrier"))?,
                };
                self.source = Some(carrier.cast_into::<CarrierBase>()?);
            }
            Check::SourceLive => {
                if self.source().get().released() {
                    let carrier = type_name(self.source().as_any())?;
                    return Err(error::move_refusal(MoveRefusal::Released { party: Party::Source, carrier }));
                }
            }
            Check::SourceUnowned => {
                if !self.between_tiers && !self.source().get().owner_is_none() {
                    let owner = self
                        .source()
                        .get()
                        .state()
                        .cell()
                        .with_owner(|o| o.and_then(owner_object).map(|o| o.clone_ref(py)));
                    let owner = owner.map_or_else(|| py.None().into_bound(py), |o| o.into_bound(py));
                    return Err(error::move_refusal(MoveRefusal::SourceOwned {
                        carrier: type_name(self.source().as_any())?,
                        owner: type_name(&owner)?,
                    }));
                }
            }
            Check::SourceUnclaimed => self.unclaimed(self.source(), "move")?,
            Check::IsCarrier => {
                if !self.destination.is_instance(self.hooks.carrier.bind(py))? {
                    let error = self.hooks.not_a_carrier.bind(py).call1(("destination", self.destination))?;
                    return Err(PyErr::from_value(error));
                }
            }
            Check::DistinctCarriers => {
                if self.destination.is(self.source()) {
                    return Err(error::move_refusal(MoveRefusal::SameCarrier));
                }
            }
            Check::DestinationLive => {
                if self.destination().get().released() {
                    let carrier = type_name(self.destination)?;
                    return Err(error::move_refusal(MoveRefusal::Released { party: Party::Destination, carrier }));
                }
            }
            Check::DestinationMutable => {
                // A composite moving between its own tiers asks the tier's hook: the tier is
                // owned, which the public answer refuses.
                let mutable = if self.between_tiers {
                    self.hooks.tier_is_mutable.bind(py).call1((self.destination,))?.is_truthy()?
                } else if let Some(builtin) = exact_builtin(self.destination) {
                    // `Carrier.is_mutable` over the built-ins' `_is_mutable`: live, unowned and
                    // the built-in mutable flag.
                    let builtin = builtin.get();
                    !builtin.released() && builtin.owner_is_none() && builtin.mutable_flag()
                } else {
                    self.destination.call_method0(intern!(py, "is_mutable"))?.is_truthy()?
                };
                if !mutable {
                    let carrier = type_name(self.destination)?;
                    return Err(error::move_refusal(MoveRefusal::DestinationNotMutable { carrier }));
                }
            }
            Check::DestinationUnclaimed => self.unclaimed(self.destination(), "move into")?,
            Check::SameDType => {
                // The built-ins' `dtype()` returns their `_dtype`, which the native slot holds.
                let stored = exact_builtin(self.destination).and_then(|builtin| builtin.get().dtype.get(py));
                let theirs = match stored {
                    Some(dtype) => dtype.into_bound(py),
                    None => self.destination.call_method0(intern!(py, "dtype"))?,
                };
                let ours = match plain_view(self.tensor) {
                    Some((view, _)) => view.dtype.bind(py).clone(),
                    None => self.tensor.call_method0(intern!(py, "dtype"))?,
                };
                if !theirs.is(&ours) {
                    return Err(error::move_refusal(MoveRefusal::DTypeMismatch {
                        found: theirs.getattr(intern!(py, "name"))?.str()?.to_string(),
                        expected: ours.getattr(intern!(py, "name"))?.str()?.to_string(),
                    }));
                }
            }
            Check::PinnedClasses | Check::Room | Check::RoutePermitted => {
                unreachable!("the route's rows are answered by `Route`")
            }
            // A row the core's table adds later (the enum is non-exhaustive) has no answer
            // here yet: refuse the move rather than skip a check.
            other => {
                return Err(PyRuntimeError::new_err(format!("internal error: no answer to the move check {other:?}")))
            }
        }
        Ok(())
    }
}

/// `profiler._move_complete(token, succeeded)`, for a profiled request only.
fn record_completion(hooks: &RequestHooks, py: Python<'_>, token: Option<Py<PyAny>>, succeeded: bool) -> PyResult<()> {
    match token {
        Some(token) => hooks.move_complete.bind(py).call1((token, succeeded)).map(drop),
        None => Ok(()),
    }
}

/// The native view of a one-subtensor `Tensor` of exactly the package's class, whose
/// `carrier`, `layout` and `dtype()` answer from it (a subclass may override them: it is asked).
fn plain_view<'a, 'py>(tensor: &'a Bound<'py, PyAny>) -> Option<(&'a View, &'py Config)> {
    let cfg = config(tensor.py())?;
    Some((exact_single_view(cfg, tensor)?, cfg))
}

/// How many subtensors a Tensor has: its native view knows, unless it was never set up.
fn subtensor_count(tensor: &Bound<'_, PyAny>) -> PyResult<usize> {
    if tensor.cast::<TensorBase>().is_ok_and(|t| t.get().view().is_ok_and(|view| view.single)) {
        return Ok(1);
    }
    tensor.getattr(intern!(tensor.py(), "subtensors"))?.len()
}

/// `carrier` when its class is exactly a built-in one (`CPU`, `FileBacked`), whose
/// `is_mutable()`, `dtype()` and `size()` answer from native state: the request reads that
/// state instead of calling them (three Python calls fewer a move). A subclass may override
/// any of them, so it is always asked.
fn exact_builtin<'a, 'py>(carrier: &'a Bound<'py, PyAny>) -> Option<&'a Bound<'py, CarrierBase>> {
    let py = carrier.py();
    let cfg = config(py)?;
    let class = carrier.get_type();
    if !class.is(cfg.cpu.bind(py)) && !class.is(cfg.file_backed.bind(py)) {
        return None;
    }
    carrier.cast::<CarrierBase>().ok()
}

/// `destination.size()`: read natively for an exact built-in class (`RustBackedCarrier.size`,
/// 0 once released, else its storage's slot count), else asked.
pub(crate) fn destination_size(destination: &Bound<'_, PyAny>) -> PyResult<i64> {
    let py = destination.py();
    let native = exact_builtin(destination).and_then(|builtin| {
        let base = builtin.get();
        if base.released() {
            return Some(0);
        }
        let count = base.storage.with(py, |storage| {
            if let Ok(host) = storage.cast::<HostStorage>() {
                host.get().live_count().ok()
            } else if let Ok(file) = storage.cast::<FileStorage>() {
                file.get().live_count().ok()
            } else {
                None
            }
        });
        count.flatten().and_then(|n| i64::try_from(n).ok())
    });
    match native {
        Some(size) => Ok(size),
        None => destination.call_method0(intern!(py, "size"))?.extract(),
    }
}

/// The room row's refusal: `destination` holds `size` slots where the move needs `needed`.
pub(crate) fn too_small(destination: &Bound<'_, PyAny>, size: i64, needed: i64) -> PyResult<PyErr> {
    Ok(error::move_refusal(MoveRefusal::TooSmall {
        carrier: type_name(destination)?,
        size: usize::try_from(size).unwrap_or(0),
        needed: usize::try_from(needed).unwrap_or(0),
    }))
}

/// The rows that need the resolved route: the route (a `routes::Route`) and, for a recorded
/// move, the reverse route.
struct Route<'a, 'py> {
    hooks: &'a RequestHooks,
    arguments: &'a Arguments<'a, 'py>,
    route: &'a Bound<'py, PyAny>,
    reverse: &'a Bound<'py, PyAny>,
    grow: bool,
}

impl Route<'_, '_> {
    fn check(&mut self, row: Check) -> PyResult<()> {
        let py = self.route.py();
        let (source, destination) = (self.arguments.source().as_any(), self.arguments.destination.as_any());
        match row {
            Check::PinnedClasses => {
                let operation = self.route.getattr(intern!(py, "operation_class"))?;
                if operation.is_none() {
                    return Ok(());
                }
                for (pin, carrier, party) in [
                    (intern!(py, "source_class"), source, Party::Source),
                    (intern!(py, "destination_class"), destination, Party::Destination),
                ] {
                    let pinned = operation.getattr(pin)?;
                    if !pinned.is_none() && !carrier.get_type().is(&pinned) {
                        return Err(error::move_refusal(MoveRefusal::PinnedClass {
                            operation: operation.getattr(intern!(py, "__name__"))?.str()?.to_string(),
                            pinned: pinned.getattr(intern!(py, "__name__"))?.str()?.to_string(),
                            party,
                            found: type_name(carrier)?,
                        }));
                    }
                }
            }
            Check::Room => {
                let cosize: i64 = match plain_view(self.arguments.tensor) {
                    Some((view, _)) => view.layout.bind(py).get().core().cosize(),
                    None => self
                        .arguments
                        .tensor
                        .getattr(intern!(py, "layout"))?
                        .getattr(intern!(py, "cosize"))?
                        .extract()?,
                };
                let size = destination_size(destination)?;
                if size < cosize {
                    if size == 0 && self.hooks.grows_when_empty.bind(py).call1((destination,))?.is_truthy()? {
                        self.grow = true;
                    } else {
                        return Err(too_small(destination, size, cosize)?);
                    }
                }
            }
            Check::RoutePermitted => {
                // The reverse route first: a recorded move must be able to go back.
                if !self.reverse.is_none() {
                    self.reverse.call_method0(intern!(py, "check_permitted"))?;
                }
                self.route.call_method0(intern!(py, "check_permitted"))?;
            }
            _ => unreachable!("the argument rows are answered by `Arguments`"),
        }
        Ok(())
    }
}

/// The request's side of the core's terminal commit (see the module docs).
pub(crate) struct Steps<'a, 'py> {
    request: &'a Bound<'py, MoveRequest>,
    hooks: &'a RequestHooks,
}

impl<'a, 'py> Steps<'a, 'py> {
    /// The commit steps of `request`.
    pub(crate) fn of(request: &'a Bound<'py, MoveRequest>) -> PyResult<Self> {
        Ok(Steps { request, hooks: hooks(request.py())? })
    }
}

impl CommitSteps for Steps<'_, '_> {
    type Error = PyErr;

    fn publish(&mut self) -> PyResult<()> {
        let py = self.request.py();
        let (node, output, recorded) = {
            let parts = self.request.get().parts.lock();
            (cloned(py, &parts.node), cloned(py, &parts.output), cloned(py, &parts.recorded))
        };
        if let Some(node) = node {
            self.hooks.attach_result.bind(py).call1((node, output, recorded))?;
        }
        Ok(())
    }

    fn release_source(&mut self) -> PyResult<()> {
        let py = self.request.py();
        let request = self.request.get();
        let source = request.source.bind(py);
        // Released as this request's own act: the request passes itself, its claim admits
        // the release, and the carrier stays claimed by it to everybody else (its own
        // `_release` hook included) until the release is over.
        let owner = if request.between_tiers {
            // The composite's own tier, released for its owner, which it stays.
            source.get().state().cell().with_owner(|owner| owner.and_then(owner_object).map(|o| o.clone_ref(py)))
        } else {
            None
        };
        self.hooks.release_for.bind(py).call1((source, owner, self.request)).map(drop)
    }

    fn shrink_destination(&mut self) {
        let py = self.request.py();
        let destination = self.request.get().destination.bind(py);
        // Best effort: the move has failed either way, and its claims must still end.
        if destination.is_instance(self.hooks.allocatable.bind(py)).unwrap_or(false) {
            let _ = self.hooks.allocate_claimed.bind(py).call1((destination, self.request, 0));
        }
    }

    fn end_claims(&mut self) {
        let request = self.request.get();
        let py = self.request.py();
        let claim = self.request.as_any();
        drop_claim(request.destination.bind(py).get(), claim);
        drop_claim(request.source.bind(py).get(), claim);
    }
}

#[pymethods]
impl MoveRequest {
    /// `MoveRequest(tensor, destination, between_tiers)` for arguments `check` accepted: the
    /// request with its pending handle (an `AwaitMove` whose progress totals the moved span).
    #[new]
    pub(crate) fn new(
        tensor: &Bound<'_, PyAny>,
        destination: &Bound<'_, CarrierBase>,
        between_tiers: bool,
    ) -> PyResult<Self> {
        let py = tensor.py();
        let hooks = hooks(py)?;
        let (source, layout, cosize, slot_bytes) = match plain_view(tensor) {
            Some((view, cfg)) => (
                view.carrier.bind(py).clone(),
                view.layout.bind(py).clone().into_any(),
                view.layout.bind(py).get().core().cosize(),
                cfg.slot_bytes(view.dtype.bind(py)),
            ),
            None => {
                let layout = tensor.getattr(intern!(py, "layout"))?;
                let cosize: i64 = layout.getattr(intern!(py, "cosize"))?.extract()?;
                (tensor.getattr(intern!(py, "carrier"))?, layout, cosize, None)
            }
        };
        let source = source.cast_into::<CarrierBase>()?;
        let slot_bytes: u64 = match slot_bytes {
            Some(bytes) => bytes,
            None => hooks.slot_bytes.bind(py).call1((tensor.call_method0(intern!(py, "dtype"))?,))?.extract()?,
        };
        let total = u64::try_from(cosize).unwrap_or(0).saturating_mul(slot_bytes);
        let handle = new_handle(hooks.await_move.bind(py))?;
        let progress = Py::new(py, TransferProgress::with_total(total))?;
        handle.cast::<AwaitResult>()?.get().count_bytes_with(progress.clone_ref(py));
        Ok(MoveRequest {
            tensor: tensor.clone().unbind(),
            source: source.unbind(),
            destination: destination.clone().unbind(),
            layout: layout.unbind(),
            cosize,
            handle: handle.cast_into::<AwaitResult>()?.unbind(),
            between_tiers,
            progress,
            request: Request::new(),
            parts: Mutex::new(Parts::default()),
        })
    }

    /// Every check of docs/spec/interop-movement.md's table before any effect, in the
    /// core's order (`VALIDATION_ORDER`). `resolve()` is called once the arguments have
    /// passed and returns `(route, reverse_route_or_None, recording)`; the route's rows
    /// (pinned classes, room, permitted routes) follow. Returns `(route, reverse, recording,
    /// grow)`, `grow` true when an empty destination must grow to the moved span.
    #[staticmethod]
    fn check<'py>(
        tensor: &Bound<'py, PyAny>,
        destination: &Bound<'py, PyAny>,
        between_tiers: bool,
        resolve: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let py = tensor.py();
        let checked = Self::check_rows(tensor, destination, between_tiers, &mut || {
            let out = resolve.call0()?;
            let (route, reverse, recording): (Bound<'py, PyAny>, Bound<'py, PyAny>, bool) = out.extract()?;
            Ok((route, reverse, recording))
        })?;
        let recording = checked.recording.into_pyobject(py)?.to_owned().into_any();
        let grow = checked.grow.into_pyobject(py)?.to_owned().into_any();
        PyTuple::new(py, [checked.route, checked.reverse, recording, grow])
    }

    /// Lets the cycle collector see what the request holds: a failure's traceback frames
    /// often refer back to the request through the handle's recorded failure.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.tensor)?;
        visit.call(&self.source)?;
        visit.call(&self.destination)?;
        visit.call(&self.layout)?;
        visit.call(&self.handle)?;
        visit.call(&self.progress)?;
        // Never blocks the collector: a request whose parts are being changed right now is
        // reachable from the thread changing them, so skipping them this pass is sound.
        if let Some(parts) = self.parts.try_lock() {
            for field in [&parts.node, &parts.recorded, &parts.token, &parts.output, &parts.prepared] {
                visit.call(field)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        let cleared = std::mem::take(&mut *self.parts.lock());
        drop(cleared);
    }

    /// Whether the terminal commit has run.
    #[getter]
    fn committed(&self) -> bool {
        self.request.is_committed()
    }

    #[getter]
    fn node(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.read(py, |p| &p.node)
    }

    #[setter]
    fn set_node(&self, value: Option<Bound<'_, PyAny>>) {
        self.write(|p| &mut p.node, value)
    }

    #[getter]
    fn recorded(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.read(py, |p| &p.recorded)
    }

    #[setter]
    fn set_recorded(&self, value: Option<Bound<'_, PyAny>>) {
        self.write(|p| &mut p.recorded, value)
    }

    #[getter]
    pub(crate) fn token(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.read(py, |p| &p.token)
    }

    #[setter]
    fn set_token(&self, value: Option<Bound<'_, PyAny>>) {
        self.write(|p| &mut p.token, value)
    }

    #[getter]
    fn output(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.read(py, |p| &p.output)
    }

    #[setter]
    fn set_output(&self, value: Option<Bound<'_, PyAny>>) {
        self.write(|p| &mut p.output, value)
    }

    #[getter]
    fn prepared(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.read(py, |p| &p.prepared)
    }

    #[setter]
    fn set_prepared(&self, value: Option<Bound<'_, PyAny>>) {
        self.write(|p| &mut p.prepared, value)
    }

    /// Whether the destination was grown for this request (a failed commit shrinks it).
    #[getter]
    fn grown(&self) -> bool {
        self.request.grown()
    }

    /// Records a growth made outside the request's admission (a request driven by hand).
    #[setter]
    fn set_grown(&self, grown: bool) -> PyResult<()> {
        if !grown {
            return Err(PyValueError::new_err("a grown destination stays grown until the commit"));
        }
        self.request.mark_grown();
        Ok(())
    }

    /// The one terminal commit (the module docs' order), on whichever thread finishes the
    /// transfer: `error` None after a transfer that succeeded, else its exception. Later calls
    /// do nothing.
    #[pyo3(signature = (error=None))]
    pub(crate) fn commit(slf: &Bound<'_, Self>, error: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        let py = slf.py();
        let hooks = hooks(py)?;
        let request = slf.get();
        let transfer = match error.filter(|e| !e.is_none()) {
            None => Ok(()),
            Some(e) => Err(PyErr::from_value(e)),
        };
        let mut steps = Steps { request: slf, hooks };
        let Some(outcome) = request.request.commit(&mut steps, transfer) else {
            return Ok(());
        };
        let (prepared, node, token, output) = {
            let mut parts = request.parts.lock();
            (parts.prepared.take(), cloned(py, &parts.node), cloned(py, &parts.token), cloned(py, &parts.output))
        };
        drop(prepared);
        let handle = request.handle.bind(py);
        // The handle reaches its outcome whatever the bookkeeping hooks do: a waiter must
        // never hang because the profiler or a node raised. Their failure is raised after.
        let bookkeeping = match outcome {
            Ok(()) => {
                request.progress.get().complete();
                let recorded = record_completion(hooks, py, token, true);
                handle.get().succeed(output.unwrap_or_else(|| py.None()));
                recorded
            }
            Err(error) => {
                let cleared = node.map_or(Ok(()), |node| hooks.clear(node.bind(py)));
                let recorded = record_completion(hooks, py, token, false);
                hooks.fail(handle.as_any(), error.into_value(py).bind(py))?;
                cleared.and(recorded)
            }
        };
        bookkeeping
    }

    /// Undo a request that fails before its transfer is submitted: shrink a grown
    /// destination, drop both claims and clear the autograd node. The handle is never
    /// resolved (the caller raises instead); a later `commit` does nothing.
    pub(crate) fn abandon(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let hooks = hooks(py)?;
        let request = slf.get();
        let mut steps = Steps { request: slf, hooks };
        let abandoned = PyRuntimeError::new_err("the move request was abandoned before its transfer");
        if !request.request.abandon(&mut steps, abandoned) {
            return Ok(());
        }
        let (prepared, node) = {
            let mut parts = request.parts.lock();
            (parts.prepared.take(), cloned(py, &parts.node))
        };
        drop(prepared);
        if let Some(node) = node {
            hooks.clear(node.bind(py))?;
        }
        Ok(())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<MoveRequest>()?;
    m.add_function(wrap_pyfunction!(configure_move_request, m)?)?;
    Ok(())
}
