"""What a head passes on, in norm (Kobayashi et al. 2020, "Attention is Not Only a Weight"): for token j, layer
and head h, ``||f_h(x_j)||`` where ``f_h(x) = (x W_V + b_V)_h W_O^h`` is the head's value vector (with the value
bias) through the head's slice of the attention's output projection, without the output bias, as ``BertNormOutput``
of their released code computes it (gorokoba560/norm-analysis-of-transformer). A head's contribution from j to i is
``α_ij f_h(x_j)``, of norm ``α_ij ||f_h(x_j)||``.

The output projection is the attention module's own (``o_proj``, ``out_lin``, ``c_proj``, ``Wo``, ``dense``) or, in
BERT's layout, its parent's ``output.dense``. A grouped-query model's key/value head passes its values through each of
its query heads' slices. The norm is taken through the head's Gram matrix ``G_h = W_O^h W_O^h^T`` (``d x d``) in
float32: ``||v W_O^h||^2 = v G_h v^T``, so no ``[tokens, hidden]`` vector is made per head.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary, ref

import torch
from transformers.pytorch_utils import Conv1D

from atlas.errors import AtlasError

_OWN = ("o_proj", "out_lin", "c_proj", "Wo", "dense")  # an attention module's output projection, by family
# each module's parent, held weakly both ways (a parent holds its children: a strong value would keep every model alive)
_PARENTS: WeakKeyDictionary[torch.nn.Module, ref[torch.nn.Module]] = WeakKeyDictionary()
# each output projection's head Gram matrices, with the weight they were made of (its storage, version, dtype)
_GRAMS: WeakKeyDictionary[torch.nn.Module, tuple[tuple, torch.Tensor]] = WeakKeyDictionary()


def know_parents(model: torch.nn.Module) -> None:
    """Remember each module's parent, so that an attention module finds an output projection its parent holds."""
    for parent in model.modules():
        for child in parent.children():
            _PARENTS[child] = ref(parent)


def output_projection(module: torch.nn.Module) -> torch.nn.Module:
    """The linear map (``Linear`` or GPT-2's ``Conv1D``) that takes the attention module's heads' outputs, concatenated,
    to the hidden size."""
    for name in _OWN:
        found = getattr(module, name, None)
        if isinstance(found, torch.nn.Linear | Conv1D):
            return found
    parent = _PARENTS.get(module)
    output = getattr(parent and parent(), "output", None)
    found = getattr(output, "dense", None)
    if isinstance(found, torch.nn.Linear):
        return found
    raise AtlasError(f"value norms: no output projection found beside attention module {type(module).__name__}")


def head_grams(projection: torch.nn.Module, heads: int, dim: int) -> torch.Tensor:
    """Each head's ``W_O^h W_O^h^T`` ``[heads, dim, dim]`` in float32 (head h: inputs ``h * dim`` to
    ``(h + 1) * dim`` of the projection), made once per weight (again where it changed)."""
    weight = projection.weight
    made = (weight.data_ptr(), weight._version, weight.dtype, weight.device, heads)
    kept = _GRAMS.get(projection)
    if kept is not None and kept[0] == made:
        return kept[1]
    as_float = weight.detach().float()  # Linear: [out, in]; Conv1D: [in, out]
    per_head = (as_float if isinstance(projection, Conv1D) else as_float.T).reshape(heads, dim, -1)
    grams = per_head @ per_head.transpose(1, 2)
    _GRAMS[projection] = (made, grams)
    return grams


def value_norms(module: torch.nn.Module, value: torch.Tensor) -> torch.Tensor:
    """``||f_h(x_j)||`` ``[batch, heads, n]`` (float32) of the values ``[batch, heads, n, dim]`` the attention module
    weighs (key/value heads already repeated for its query heads)."""
    heads, dim = value.shape[1], value.shape[-1]
    grams = head_grams(output_projection(module), heads, dim)
    v = value.float()
    return torch.linalg.vecdot(v @ grams, v).clamp_(min=0).sqrt_()
