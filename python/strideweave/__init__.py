"""strideweave: tensor storage, interop and movement over hierarchical layouts.

The top-level namespace only re-exports; each name lives in the module that owns it
(see ARCHITECTURE.md).
"""
from strideweave import _native
from strideweave.layout import *  # noqa: F401,F403
from strideweave.carriers import *  # noqa: F401,F403
from strideweave.tensor import *  # noqa: F401,F403
from strideweave.operation import *  # noqa: F401,F403
from strideweave.friendly import sum as sum  # noqa: F401  (spec name; "as" re-exports it)
from strideweave.profiler import *  # noqa: F401,F403
from strideweave.carriers.move import *  # noqa: F401,F403
from strideweave.carriers.extension import *  # noqa: F401,F403
from strideweave.carriers.tiled_evictable import *  # noqa: F401,F403

__version__ = _native.__version__
