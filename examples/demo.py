"""A short tour of strideweave's main job: hierarchical layouts, zero-copy DLPack export,
and moving tensors between carriers (blocking and asynchronous) with autograd across the move."""
import numpy as np

import strideweave as sw

F32 = sw.DType.Float32

print(f"strideweave {sw.__version__}")

# A hierarchical layout: 2 x (3 x 4) with strides 1 x (10 x 100), as CuTe writes it.
layout = sw.Layout(sw.Shape([2, [3, 4]]), sw.Stride([1, [10, 100]]))
print(f"layout {layout}: size {layout.size}, cosize {layout.cosize}, injective {layout.is_injective()}")

carrier = sw.CPU(layout.cosize)
t = sw.Tensor(carrier, 0, layout)
for k in range(t.size()):
    t[k] = float(k)
print(f"t[1, [2, 3]] = {t[1, [2, 3]]}  (slot {layout([1, [2, 3]])}), version {t.version}")

# Zero-copy export: NumPy sees one dimension per leaf mode and aliases the carrier's memory.
a = np.from_dlpack(t)
print(f"NumPy view: shape {a.shape}, strides (elements) {tuple(s // 4 for s in a.strides)}")
a[1, 2, 3] = -1.0
print(f"write through NumPy visible in strideweave: t[1, [2, 3]] = {t[1, [2, 3]]}, version still {t.version}")
del a

# Move to a temporary file asynchronously, then back, and differentiate across both moves.
x = sw.Tensor(sw.CPU(4), 0, sw.Layout(sw.Shape(4), sw.Stride(1)))
for k in range(4):
    x[k] = k + 1.0
handle = sw.move_async(x, sw.FileBacked(dtype=F32))
print(f"move_async returned {handle!r}")
on_file = handle.wait()
file_carrier = on_file.carrier
assert isinstance(file_carrier, sw.FileBacked)
print(f"on file: {file_carrier.path.name}, values {on_file.tolist()}, source released {x.carrier.is_released()}")
back = sw.move(on_file, sw.CPU(4))
loss = sw.sum(back * back)
loss.backward()
grad = x.grad
assert grad is not None
print(f"loss {loss[0]}, d loss / d x = {grad.tolist()} (on {type(grad.carrier).__name__})")

with sw.profile() as prof:
    y = sw.move(sw.Tensor(sw.CPU(1 << 20, empty=True), 0, sw.Layout(sw.Shape(1 << 20), sw.Stride(1))),
                sw.FileBacked(dtype=F32))
for e in prof.events():
    destination = e.destination_type.__name__ if e.destination_type is not None else "-"
    print(f"  profile: {e.phase:13s} {e.carrier_type.__name__} -> {destination}"
          f" {e.duration_ns / 1e6:.2f} ms")
y.carrier.release()
