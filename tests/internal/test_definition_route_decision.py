"""The route decision `carriers.extension.resolve_route` hands the move layer for a
definition-backed pair (docs/spec/extension-and-tiling.md §5), and the sealing its class-level
lookup does (§4). A move only ever resolves classes it already holds instances of, and
constructing an instance seals the class first, so neither the decision value nor sealing by
resolution alone is reachable through public API. What a user sees of resolution (which
provider's prepare runs, the errors a move raises) is tested through `sw.move` in
tests/spec/extension_and_tiling/test_s5_movement.py."""
import pytest

import strideweave as sw
from strideweave.carriers import extension as ext
from strideweave.carriers.extension import TransferRoute

from defined_carriers import defined_class, fresh_class, noop_provider, sealed_by


def test_resolve_exact_route_is_a_frozen_decision_naming_the_route():
    other = fresh_class("Other")
    cls = defined_class(routes=lambda c: [TransferRoute(c, sw.CPU, "to_cpu", noop_provider()),
                                          TransferRoute(c, other, "to_other", noop_provider())])
    decision = ext.resolve_route(cls, sw.CPU)
    assert decision.route.route_id == "to_cpu" and decision.fallback is False
    assert ext.resolve_route(cls, other).route.route_id == "to_other"
    with pytest.raises(AttributeError):
        decision.route = None


def seal_by_route(cls):
    try:
        ext.resolve_route(cls, sw.CPU)
    except NotImplementedError:
        pass


def seal_by_destination_role(cls):
    ext.resolve_route(sw.CPU, cls)


@pytest.mark.parametrize("seal", [seal_by_route, seal_by_destination_role])
def test_route_resolution_seals_a_class_it_names(seal):
    cls = sealed_by(seal)
    assert ext.definition_of(cls) is None
    cls()  # still a working definition-free class
