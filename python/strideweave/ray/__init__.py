"""strideweave.ray: tensors stored in Ray's object store and moved across a Ray cluster.

Needs the optional `ray` extra (`pip install 'strideweave[ray]'`); `import strideweave` never
imports this package. Importing it registers the exact move pairs CPU <-> RayObjectCarrier
and the pickling of Tensors on a RayObjectCarrier.
"""


def _require_ray() -> None:
    # A function, so the `except ... as exc` name is not a (phantom) attribute of the package
    # for type checkers and stubtest.
    try:
        import ray  # noqa: F401
    except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
        raise ImportError("strideweave.ray needs Ray: install the 'ray' extra "
                          "(pip install 'strideweave[ray]')") from exc


_require_ray()

from strideweave.ray import moves as _moves, pickling as _pickling
from strideweave.ray.carrier import RayObjectCarrier, RayObjectLostError
from strideweave.ray.moves import CpuToRayObjectMoveOperation, RayObjectToCpuMoveOperation

__all__ = ["RayObjectCarrier", "RayObjectLostError", "CpuToRayObjectMoveOperation",
           "RayObjectToCpuMoveOperation"]

_moves.register()
_pickling.register()
