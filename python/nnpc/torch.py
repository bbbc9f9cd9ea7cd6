"""nnpc.torch: firmware as a trainable PyTorch layer, with the hardware's exact numerics.

::

    import torch, nnpc.torch
    layer = nnpc.torch.FirmwareLayer("samples/train/digits_mlp.nnp",
                                     weights="samples/train/digits_mlp.weights.safetensors")
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    loss = torch.nn.functional.cross_entropy(layer(x), labels)
    loss.backward(); opt.step()

The forward values are the concordant software graph's, bit-identical to ``nnpc run`` with the
parameters' current values. The backward pass is the straight-through gradient ``nnpc train``
uses (docs/training.md), for the parameters and the inputs, computed by nnpc's Rust crates
(``Graph.gradients``); no gradient logic lives here. The work runs on the CPU with the GIL
released.

The layer is one opaque custom op (``nnpc::firmware``, with ``nnpc::firmware_backward`` for its
gradient) registered through ``torch.library``, so ``torch.compile`` treats it as a single op it
does not trace into.
"""

import itertools
import os
import weakref
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import nn

from . import DataError, Graph, _as_array, load_tensors
from . import compile as _compile

__all__ = ["FirmwareLayer"]

# For the custom ops (torch.compile): the layers by key, and the tapes of the forward passes
# whose backward pass may still come. A tape lives as long as the key tensor its forward op
# returned (autograd saves it): that tensor's numpy buffer drops the tape when freed.
_LAYERS: "weakref.WeakValueDictionary[int, FirmwareLayer]" = weakref.WeakValueDictionary()
_TAPES: Dict[int, Any] = {}
_KEYS = itertools.count(1)


def _layer(key: int) -> "FirmwareLayer":
    layer = _LAYERS.get(key)
    if layer is None:
        raise RuntimeError(f"nnpc.torch: no FirmwareLayer with key {key} (it was deleted)")
    return layer


def _numpy(t: torch.Tensor) -> Any:
    """A tensor's values for the Rust core (any float dtype and strides; bfloat16 included)."""
    return t.detach().cpu()


def _run(
    layer: "FirmwareLayer", weights: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor], record: bool
) -> Tuple[List[torch.Tensor], Any]:
    """The concordant graph's outputs (float32, on the first input's device), and the tape of
    the pass where ``record`` (else ``None``)."""
    w = {n: _numpy(t) for n, t in zip(layer._weight_names, weights)}
    x = {n: _numpy(t) for n, t in zip(layer._input_names, inputs)}
    if record:
        outputs, tape = layer.graph._record(w, x)
    else:
        outputs, tape = layer.graph.run(w, x, dtype="float32"), None
    device = inputs[0].device
    return [torch.from_numpy(outputs[n]).to(device) for n in layer._output_names], tape


def _gradients(
    layer: "FirmwareLayer",
    tape: Any,
    output_grads: Sequence[Optional[torch.Tensor]],
    weights: Sequence[torch.Tensor],
    inputs: Sequence[torch.Tensor],
) -> List[torch.Tensor]:
    """The gradients by weight, then by input (each in its tensor's dtype and device), from
    the gradients by output (``None``: none) at the tape's values."""
    if tape is None:
        raise RuntimeError(
            "nnpc.torch: the FirmwareLayer's forward pass kept no values to differentiate "
            "(it ran under torch.no_grad() or in .eval() mode); run it in .train() mode with "
            "gradients enabled"
        )
    grads = {n: _numpy(g) for n, g in zip(layer._output_names, output_grads) if g is not None}
    dw, dx = layer.graph._backward(tape, grads)
    out = [torch.from_numpy(dw[n]).to(w.dtype).to(w.device) for n, w in zip(layer._weight_names, weights)]
    out += [torch.from_numpy(dx[n]).to(x.dtype).to(x.device) for n, x in zip(layer._input_names, inputs)]
    return out


class _Differentiated(torch.autograd.Function):
    """The layer in eager mode: the tape lives on the autograd node, as long as its graph."""

    @staticmethod
    def forward(ctx, layer: "FirmwareLayer", n_weights: int, *tensors: torch.Tensor):
        outs, tape = _run(layer, tensors[:n_weights], tensors[n_weights:], record=True)
        ctx.layer, ctx.tape, ctx.n_weights = layer, tape, n_weights
        ctx.save_for_backward(*tensors)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads: torch.Tensor):
        tensors, n = ctx.saved_tensors, ctx.n_weights
        g = _gradients(ctx.layer, ctx.tape, grads, tensors[:n], tensors[n:])
        return (None, None, *g)


# The same layer as opaque custom ops, for torch.compile: the compiler sees one op (and one
# for its gradient) and does not trace into them. Ops take integers, not Python objects: the
# layer by key, and the tape by the key tensor the forward op returns.


def _tape_key(tape: Any) -> torch.Tensor:
    """A tensor naming `tape`; the tape is dropped when the tensor's storage is freed."""
    key = next(_KEYS)
    _TAPES[key] = tape
    buffer = np.array(key, dtype=np.int64)
    weakref.finalize(buffer, _TAPES.pop, key, None)
    return torch.from_numpy(buffer)


@torch.library.custom_op("nnpc::firmware", mutates_args=())
def _firmware(
    key: int, weights: List[torch.Tensor], inputs: List[torch.Tensor], record: bool
) -> List[torch.Tensor]:
    outs, tape = _run(_layer(key), weights, inputs, record)
    return outs + [_tape_key(tape) if record else torch.tensor(0, dtype=torch.int64)]


@_firmware.register_fake
def _(key, weights, inputs, record):
    layer = _layer(key)
    shape = lambda n: (inputs[0].shape[0], *layer.graph.outputs[n])  # noqa: E731
    outs = [inputs[0].new_empty(shape(n), dtype=torch.float32) for n in layer._output_names]
    return outs + [torch.empty((), dtype=torch.int64)]


@torch.library.custom_op("nnpc::firmware_backward", mutates_args=())
def _firmware_backward(
    key: int,
    tape_key: torch.Tensor,
    output_grads: List[torch.Tensor],
    weights: List[torch.Tensor],
    inputs: List[torch.Tensor],
) -> List[torch.Tensor]:
    tape = _TAPES.get(int(tape_key))
    return _gradients(_layer(key), tape, output_grads, weights, inputs)


@_firmware_backward.register_fake
def _(key, tape_key, output_grads, weights, inputs):
    return [torch.empty_like(t) for t in itertools.chain(weights, inputs)]


def _setup_context(ctx, inputs, output):
    key, weights, xs, _ = inputs
    ctx.key, ctx.n_weights = key, len(weights)
    ctx.save_for_backward(output[-1], *weights, *xs)


def _backward(ctx, grads):
    tape_key, *saved = ctx.saved_tensors
    n = ctx.n_weights
    layer = _layer(ctx.key)
    batch = saved[n].shape[0]
    output_grads = [
        g if g is not None else torch.zeros((batch, *layer.graph.outputs[name]))
        for name, g in zip(layer._output_names, grads[:-1])
    ]
    g = _firmware_backward(ctx.key, tape_key, output_grads, saved[:n], saved[n:])
    return None, g[:n], g[n:], None


_firmware.register_autograd(_backward, setup_context=_setup_context)

WeightsLike = Union[None, str, "os.PathLike[str]", Mapping[str, Any]]


class FirmwareLayer(nn.Module):
    """A firmware program as a ``torch.nn.Module`` whose parameters are its weights.

    ``program`` is a ``.nnp`` path or firmware text (as :func:`nnpc.compile`), or a compiled
    :class:`nnpc.Graph`; ``target`` overrides the firmware's target. ``weights`` is a mapping
    of weight name to tensor or array, a weights file (safetensors, ``.npy``, a directory of
    ``.npy``), or ``None`` for the seeded random weights of ``nnpc run --seed SEED``.

    The parameters are the program's loaded matrices and vectors, named as declared, in their
    declared shapes, float32: ``layer.state_dict()`` saved with
    ``safetensors.torch.save_file`` is a file ``nnpc run --weights`` reads.

    ``layer(x)`` takes the one input of a one-input, one-output program (``[batch, *shape]``,
    float16/bfloat16/float32/float64, any strides) and returns the output, float32;
    ``layer(**inputs)`` returns ``{output: tensor}`` for programs with several. Weights or
    inputs the program cannot use raise :class:`nnpc.DataError` before anything runs.
    """

    def __init__(
        self,
        program: Union[str, "os.PathLike[str]", Graph],
        target: Optional[str] = None,
        weights: WeightsLike = None,
        *,
        seed: int = 0,
    ):
        super().__init__()
        graph = program if isinstance(program, Graph) else _compile(program, target)
        self.graph = graph
        self._weight_names: List[str] = sorted(graph.weights)
        self._input_names: List[str] = list(graph.inputs)
        self._output_names: List[str] = list(graph.outputs)
        start = self._starting_weights(weights, seed)
        for name in self._weight_names:
            value = torch.as_tensor(np.asarray(start[name], dtype=np.float32))
            self.register_parameter(name, nn.Parameter(value.clone()))
        self._key = next(_KEYS)
        _LAYERS[self._key] = self

    def _starting_weights(self, weights: WeightsLike, seed: int) -> Dict[str, Any]:
        if weights is None:
            return self.graph.random_weights(seed)
        if isinstance(weights, (str, os.PathLike)):
            weights = load_tensors(weights)
        if not isinstance(weights, Mapping):
            raise TypeError("weights must be a mapping of names to arrays, a file path or None")
        given = {str(k): _as_array(v, str(k)) for k, v in weights.items()}
        unknown = sorted(set(given) - set(self._weight_names))
        if unknown:
            raise DataError(
                f"weights: `{unknown[0]}` is not a weight of {self.graph.name}; its weights are "
                + ", ".join(f"`{n}`" for n in self._weight_names)
            )
        # The Rust core checks every weight as `nnpc run --weights` does (names, shapes,
        # finite values) on one zero input set.
        zeros = {n: np.zeros((1, *s), np.float32) for n, s in self.graph.inputs.items()}
        self.graph._record(given, zeros)
        return given

    def extra_repr(self) -> str:
        return f"{self.graph.name!r} on {self.graph.target!r}"

    def _inputs(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> List[torch.Tensor]:
        if args and kwargs or len(args) > 1:
            raise TypeError("call the layer with one input tensor, or with inputs by name")
        if args:
            if len(self._input_names) != 1:
                raise TypeError(
                    f"{self.graph.name} has {len(self._input_names)} inputs "
                    f"({', '.join(self._input_names)}); pass them by name"
                )
            kwargs = {self._input_names[0]: args[0]}
        unknown = sorted(set(kwargs) - set(self._input_names))
        if unknown:
            raise DataError(
                f"`{unknown[0]}` is not an input of {self.graph.name}; its inputs are "
                + ", ".join(f"`{n}`" for n in self._input_names)
            )
        xs = []
        for name in self._input_names:
            if name not in kwargs:
                raise DataError(f"no tensor for input `{name}`; pass one of shape [batch, "
                                + ", ".join(map(str, self.graph.inputs[name])) + "]")
            x = kwargs[name]
            if not isinstance(x, torch.Tensor):
                x = torch.as_tensor(np.asarray(x))
            shape = self.graph.inputs[name]
            if x.dim() != len(shape) + 1 or tuple(x.shape[1:]) != tuple(shape) or x.shape[0] == 0:
                raise DataError(
                    f"input `{name}` has shape {list(x.shape)}; the layer takes [batch, "
                    + ", ".join(map(str, shape)) + "] (batch first, batch at least 1)"
                )
            xs.append(x)
        return xs

    def forward(self, *args: Any, **inputs: Any) -> Union[torch.Tensor, Dict[str, torch.Tensor]]:
        xs = self._inputs(args, inputs)
        weights = [getattr(self, n) for n in self._weight_names]
        record = (
            self.training
            and torch.is_grad_enabled()
            and any(t.requires_grad for t in itertools.chain(weights, xs))
        )
        if torch.compiler.is_compiling():
            outs = _firmware(self._key, weights, xs, record)[:-1]
        elif record:
            outs = list(_Differentiated.apply(self, len(weights), *weights, *xs))
        else:
            outs = _run(self, weights, xs, record=False)[0]
        if args:
            if len(outs) != 1:
                raise TypeError(
                    f"{self.graph.name} has {len(outs)} outputs; call the layer with inputs by "
                    "name for a dict of them"
                )
            return outs[0]
        return dict(zip(self._output_names, outs))
