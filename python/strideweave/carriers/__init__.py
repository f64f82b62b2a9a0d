"""strideweave.carriers: dtype descriptors and the built-in carriers."""
from strideweave.carriers.dtype import *  # noqa: F401,F403
from strideweave.carriers.base import *  # noqa: F401,F403
from strideweave.carriers.generic import *  # noqa: F401,F403
from strideweave.carriers.cpu import *  # noqa: F401,F403
from strideweave.carriers.file_backed import *  # noqa: F401,F403
from strideweave.carriers.block_device import *  # noqa: F401,F403
from strideweave.carriers.evictable import *  # noqa: F401,F403
from strideweave.carriers import dtype as _dtype, base as _base, generic as _generic, cpu as _cpu
from strideweave.carriers import file_backed as _fb, block_device as _bd, evictable as _ev

__all__ = [*_dtype.__all__, *_base.__all__, *_generic.__all__, *_cpu.__all__, *_fb.__all__,
           *_bd.__all__, *_ev.__all__]
