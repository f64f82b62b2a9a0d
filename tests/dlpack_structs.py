"""ctypes views of the DLPack 1.0 ABI, for inspecting capsules at the C level in tests.

The structures mirror dlpack.h (DLPack 1.0): DLDevice, DLDataType, DLTensor, DLManagedTensor
(legacy, capsule name ``dltensor``) and DLManagedTensorVersioned (``dltensor_versioned``).
Only the test suite uses them; strideweave itself never imports DLPack capsules.
"""
from __future__ import annotations

import ctypes

LEGACY = b"dltensor"
VERSIONED = b"dltensor_versioned"
USED_LEGACY = b"used_dltensor"
USED_VERSIONED = b"used_dltensor_versioned"

READ_ONLY = 1 << 0
K_DL_INT = 0
K_DL_FLOAT = 2
K_DL_CPU = 1


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_uint), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))),
]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", DLTensor),
]

assert ctypes.sizeof(DLTensor) == 48
assert ctypes.sizeof(DLManagedTensor) == 64
assert ctypes.sizeof(DLManagedTensorVersioned) == 80

_api = ctypes.pythonapi
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_void_p]

# PyCapsule_SetName keeps the char* it is given, so renamed capsules need names that live
# for the whole process: keep them in module-level buffers.
_NAME_BUFFERS = {name: ctypes.create_string_buffer(name) for name in (USED_LEGACY, USED_VERSIONED)}


def capsule_name(capsule: object) -> bytes:
    return _api.PyCapsule_GetName(capsule)


def _view(capsule: object):
    name = capsule_name(capsule)
    address = _api.PyCapsule_GetPointer(capsule, name)
    struct = DLManagedTensorVersioned if name.endswith(b"versioned") else DLManagedTensor
    return ctypes.cast(address, ctypes.POINTER(struct)).contents


def managed(capsule: object):
    """The managed tensor inside an unconsumed capsule, as a ctypes structure (by reference).

    The view keeps the capsule alive: the structure lives in memory the capsule's destructor
    frees, so `managed(t.__dlpack__())` must not outlive its capsule.
    """
    view = _view(capsule)
    view._capsule = capsule
    return view


def dims(tensor: DLTensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
    n = tensor.ndim
    return tuple(tensor.shape[i] for i in range(n)), tuple(tensor.strides[i] for i in range(n))


def consume(capsule: object):
    """Take ownership the way a DLPack consumer does: read the pointer, rename the capsule.

    Returns the managed structure; the caller must now call its deleter exactly once.
    """
    name = capsule_name(capsule)
    m = _view(capsule)  # deliberately not keeping the capsule alive: the caller owns m now
    used = USED_VERSIONED if name == VERSIONED else USED_LEGACY
    if _api.PyCapsule_SetName(capsule, ctypes.addressof(_NAME_BUFFERS[used])) != 0:
        raise RuntimeError("PyCapsule_SetName failed")
    return m


def call_deleter(m) -> None:
    """Call a consumed managed tensor's deleter, as its new owner must."""
    m.deleter(ctypes.pointer(m))
