"""How a move between definition-backed classes runs (docs/spec/extension-and-tiling.md §5):
the route an exact pair takes, running its `prepare`, checking a provider's completion, and
the guard that keeps the legacy move registry off definition-backed classes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strideweave.carriers import _definition_registry as _registry
from strideweave.carriers._definition_values import (PreparedTransfer, TransferRequest, TransferRoute,
                                                     Unsupported, FrozenValue, class_name)
from strideweave.carriers.base import Carrier

if TYPE_CHECKING:  # annotations only: the tensor module sits above this one
    from strideweave.tensor import Tensor

__all__: list[str] = []  # internal module: the move layer reaches these through extension


class RouteDecision(FrozenValue):
    """How a definition-backed exact pair moves: `route` (or None) and whether the elementwise
    fallback is permitted when there is no route or the route declines."""

    __slots__ = ("source_class", "destination_class", "route", "fallback")
    source_class: type[Carrier]
    destination_class: type[Carrier]
    route: TransferRoute | None
    fallback: bool

    def __init__(self, source_class: type[Carrier], destination_class: type[Carrier], route: TransferRoute | None,
                 fallback: bool) -> None:
        self._sw_set(source_class=source_class, destination_class=destination_class, route=route,
                     fallback=fallback)

    def __repr__(self) -> str:
        return f"RouteDecision(route={self.route!r}, fallback={self.fallback})"


def _pair(source_cls: type, dest_cls: type) -> str:
    return f"({class_name(source_cls)}, {class_name(dest_cls)})"


def resolve_route(source_cls: type, dest_cls: type) -> RouteDecision | None:
    """Resolve an exact pair per §5; None when neither class is definition-backed."""
    source_def, dest_def = _registry.observe_and_lookup_pair(source_cls, dest_cls)
    if source_def is None and dest_def is None:
        return None
    if source_def is None:
        raise NotImplementedError(
            f"no transfer route for {_pair(source_cls, dest_cls)}: {class_name(dest_cls)} is "
            f"definition-backed and {class_name(source_cls)} is not; routes belong to the "
            "source's CarrierDefinition")
    route = source_def._routes.get(dest_cls)
    fallback = (dest_def is not None and source_def.storage.elementwise_fallback
                and dest_def.storage.elementwise_fallback)
    if route is None and not fallback:
        raise NotImplementedError(
            f"no transfer route for {_pair(source_cls, dest_cls)}: {class_name(source_cls)}'s "
            "CarrierDefinition declares none to that exact class and the elementwise fallback "
            "needs both classes defined with elementwise_fallback=True")
    return RouteDecision(source_cls, dest_cls, route, fallback)


def _state(carrier: Carrier) -> tuple[int, bool, int]:
    return (carrier.version, carrier.is_released(), carrier.size())


def prepare_route(decision: RouteDecision, tensor: Tensor,
                  destination: Carrier) -> tuple[PreparedTransfer | None, TransferRequest | None]:
    """Run the decided route's `prepare` (§5 steps 1–2): `(prepared, request)`, the request
    the provider was asked, whose `output` the move binds once it has claimed and sized the
    destination. A None `prepared` means: use the elementwise fallback (no route, or the route
    declined and fallback is permitted)."""
    from strideweave import _autograd

    route = decision.route
    if route is None:
        return None, None
    source = tensor.carrier
    request = TransferRequest(tensor, destination, type(source), type(destination), tensor.dtype(),
                              tensor.layout, tensor.layout.cosize)
    before = (_state(source), _state(destination))
    with _autograd.no_grad():
        result = route.provider.prepare(request)
    pair = _pair(type(source), type(destination))
    if isinstance(result, PreparedTransfer):
        pass
    elif isinstance(result, Unsupported):
        if not decision.fallback:
            raise NotImplementedError(f"transfer route {route.route_id!r} for {pair} declined the "
                                      f"request: {result.reason}")
    else:
        raise TypeError(f"transfer route {route.route_id!r} for {pair}: prepare returned "
                        f"{type(result).__name__}, not PreparedTransfer or Unsupported")
    # The move continues either way, so prepare must have left both carriers as they were.
    if (_state(source), _state(destination)) != before:
        raise RuntimeError(f"transfer route {route.route_id!r} for {pair}: prepare changed a "
                           "carrier's version, size or release state")
    return (result if isinstance(result, PreparedTransfer) else None), request


def check_provider_completion(obj: Any) -> None:
    """Wait for a `submit()` result that is not None and check the ProviderCompletion
    contract (§5 step 5). Runs on a move worker thread; a TypeError raised here, or any
    exception `wait()` raises, becomes the move's terminal failure."""
    name = type(obj).__name__
    if hasattr(obj, "__await__"):
        raise TypeError(f"submit() returned an awaitable {name}: a ProviderCompletion has done "
                        "and wait() and no __await__")
    try:
        done = obj.done
        wait = obj.wait
    except AttributeError:
        raise TypeError(f"submit() returned {name}, which is neither None nor a ProviderCompletion "
                        "(an object with done and wait())") from None
    if type(done) is not bool:
        raise TypeError(f"ProviderCompletion {name}.done is {type(done).__name__}, not bool")
    if not callable(wait):
        raise TypeError(f"ProviderCompletion {name}.wait is not callable")
    result = wait()
    if result is not None:
        raise TypeError(f"ProviderCompletion {name}.wait() returned {type(result).__name__}, "
                        "not None")
    done = obj.done
    if type(done) is not bool:
        raise TypeError(f"ProviderCompletion {name}.done is {type(done).__name__}, not bool")
    if not done:
        raise TypeError(f"ProviderCompletion {name}.done is still False after wait() returned")


def require_no_definition(*classes: Any) -> None:
    """Legacy registry guard (§5): observe the named classes, then RuntimeError if either exact
    class is definition-backed."""
    found = _registry.first_defined(classes)
    if found is not None:
        raise RuntimeError(f"{found.__name__} is definition-backed: the legacy move registry does "
                           "not apply to it; declare its movement as a TransferRoute in its "
                           "CarrierDefinition")
