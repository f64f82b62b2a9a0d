"""strideweave: tensor storage, interop and movement over hierarchical layouts.

The top-level namespace only re-exports; each name lives in the module that owns it
(see ARCHITECTURE.md).
"""
import atexit as _atexit
import logging as _logging

# Records of the Rust core (bridged by pyo3-log) and of the Python layers go to the
# "strideweave" logger; as a library, leave where they end up to the application.
_logging.getLogger("strideweave").addHandler(_logging.NullHandler())

from strideweave import _native  # noqa: E402
from strideweave import _engine_settings  # noqa: E402,F401  (refuses a bad STRIDEWEAVE_WORKERS at import)
from strideweave.layout import *  # noqa: F401,F403
from strideweave.carriers import *  # noqa: F401,F403
from strideweave.tensor import *  # noqa: F401,F403
from strideweave.operation import *  # noqa: F401,F403
from strideweave.friendly import sum as sum  # noqa: F401  (spec name; "as" re-exports it)
from strideweave.profiler import *  # noqa: F401,F403
from strideweave.carriers.move import *  # noqa: F401,F403
from strideweave.carriers import inline_move as _inline_move  # noqa: E402,F401  (configures the native move)
from strideweave.carriers.extension import *  # noqa: F401,F403
from strideweave.carriers.tiled_evictable import *  # noqa: F401,F403

__version__ = _native.__version__

# Let the engine finish its jobs before the interpreter finalizes (see _engine_exit).
from strideweave._engine_exit import quiesce_at_exit as _quiesce_at_exit  # noqa: E402

_atexit.register(_quiesce_at_exit)
