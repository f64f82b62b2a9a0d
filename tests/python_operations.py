"""An Operation written in Python, as a user writes one, shared by the autograd
tests of autograd-and-profiling.md §3 and §5."""
import strideweave as sw


class Twice(sw.Operation):
    """A Python-level node: 2·a (+ b), saving every positional Tensor."""

    calls = 0

    def _forward(self, a, b=None, scale=2.0):
        self.ctx["scale"] = scale
        out = sw.mul(a, scale)
        return out if b is None else sw.add(out, b)

    def backward(self, gradient):
        type(self).calls += 1
        grads = [sw.mul(gradient, self.ctx["scale"])]
        if len(self.inputs()) == 2:
            grads.append(sw.add(gradient, sw.mul(gradient, 0.0)))
        return tuple(grads)
