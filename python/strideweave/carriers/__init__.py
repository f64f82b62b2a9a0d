"""strideweave.carriers: dtype descriptors and the built-in carriers."""
from strideweave.carriers.dtype import *  # noqa: F401,F403
from strideweave.carriers.base import *  # noqa: F401,F403
from strideweave.carriers.generic import *  # noqa: F401,F403
from strideweave.carriers.cpu import *  # noqa: F401,F403
from strideweave.carriers.file_backed import *  # noqa: F401,F403
from strideweave.carriers.block_device import *  # noqa: F401,F403
from strideweave.carriers.evictable import *  # noqa: F401,F403

# Static, so that type checkers see the names (a computed list hides them all); a test checks
# that it is exactly the union of the submodules' __all__, so a new public name must be added
# both there and here.
__all__ = [
    # dtype
    "DType", "DTypeCategory", "SimpleDType", "CompoundDType", "BlockScaledDType", "storage_schema",
    "storage_zero",
    # base, generic, cpu, file_backed, block_device, evictable
    "Carrier", "Generic", "CPU", "FileBacked", "BlockDevice", "BlockDeviceCarrier", "Evictable",
]
