"""The state a stateful model carries from one call to the next, as an explicit object.

A Transformer's cache grows with the context; the state of a recurrent network, a state-space model or a
convolution stack is fixed in size: the last hidden vector of every layer (and the LSTM's memory cell), every layer's
SSM state, or a queue of the last inputs each convolution reads. `generate()` treats the object returned under
`past_key_values` as a cache: it passes it back at every step, asks `get_seq_length()`, and during beam search
calls `reorder_cache(beam_idx)` so that every beam continues from the state of the hypothesis it extends.

Training with truncated backpropagation through time carries the state across batches:

    state = None
    for chunk in chunks:
        out = model(chunk, past_key_values=state, labels=chunk, use_cache=True)
        out.loss.backward()
        state = out.past_key_values.detach()   # keep the values, cut the gradient path to earlier chunks

A state is a dataclass of tensors (or tuples of tensors, one per layer) that lists their batch dimensions in
`batch_dims`; the batch operations of `CarriedState` then cover every field. Families with more per-sequence state
(an attention decoder's context vector, say) subclass one with more fields and more `batch_dims`. The field names are
transformers' where it has the same thing (`MambaCache.ssm_states`, `conv_states`).
"""

from dataclasses import dataclass, fields, replace
from typing import ClassVar

import torch


def _each(value, function):
    """`function` applied to a tensor, or to each tensor of a per-layer tuple."""
    return tuple(function(v) for v in value) if isinstance(value, tuple) else function(value)


class CarriedState:
    """The batch operations generate() calls on a cache, for a dataclass whose `batch_dims` name its batched fields.
    `seen_tokens` (a field of every state) counts the time steps consumed so far (padding included), the length of
    the attention mask that goes with the next call's inputs."""

    batch_dims: ClassVar[dict[str, int]] = {}  # field -> its batch dimension
    holds: ClassVar[str] = ""  # what it holds in place of keys and values, for the error a foreign cache meets
    # generate() reads these of a cache: the state cannot be compiled as a static cache nor cropped (a recurrent
    # state cannot forget its last tokens).
    is_compileable: ClassVar[bool] = False
    is_croppable: ClassVar[bool] = False
    # transformers >= 5.24 reads this per layer: not linear attention, whose state does not count tokens; this one
    # counts them like a key/value cache, so generate() cuts a prompt that repeats them to the new ones
    is_linear: ClassVar[list[bool]] = [False]

    def _batched(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in self.batch_dims and value is not None:
                yield f.name, value, self.batch_dims[f.name]

    @property
    def batch_size(self) -> int:
        name, value, dim = next(self._batched())
        return (value[0] if isinstance(value, tuple) else value).shape[dim]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.seen_tokens

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Beam search, in place: row i becomes the former row `beam_idx[i]`."""
        self.batch_select_indices(beam_idx)

    def batch_select_indices(self, indices: torch.LongTensor) -> None:
        """In place: keep (and order) the rows in `indices`."""
        for name, value, dim in self._batched():
            setattr(self, name, _each(value, lambda v, dim=dim: v.index_select(dim, indices.to(v.device))))

    def batch_repeat_interleave(self, repeats: int) -> None:
        """In place: each row repeated `repeats` times in a row, as generate expands a batch for beams or samples."""
        for name, value, dim in self._batched():
            setattr(self, name, _each(value, lambda v, dim=dim: v.repeat_interleave(repeats, dim=dim)))

    def detach(self):
        """A copy whose tensors no longer carry a gradient path (truncated backpropagation through time)."""
        return replace(self, **{name: _each(value, torch.Tensor.detach) for name, value, _ in self._batched()})


@dataclass(eq=False)
class RecurrentState(CarriedState):
    """A recurrent network's state. `hidden` (and `cell` for an LSTM) are laid out as PyTorch's recurrent modules
    return them: (num_layers * num_directions, B, H), layer-major, index `layer * num_directions + direction`."""

    hidden: torch.Tensor
    cell: torch.Tensor | None = None
    seen_tokens: int = 0

    batch_dims: ClassVar[dict[str, int]] = {"hidden": 1, "cell": 1}
    holds: ClassVar[str] = "a recurrent model keeps no key/value cache"

    def to_tuple(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(hidden, cell), the form the recurrent layers take."""
        return self.hidden, self.cell


@dataclass(eq=False)
class SSMState(CarriedState):
    """A state-space model's state, of fixed size whatever the context (transformers' Mamba cache holds the same two
    parts per layer): `ssm_states`, every layer's SSM state (num_layers, B, channels, modes), complex for a complex
    S4D, (num_layers, B, heads, head_dim, state_size) in Mamba-2; `conv_states`, the short convolution's last
    kernel - 1 inputs (num_layers, B, kernel - 1, channels) in the Mambas (Mamba-2's channels are x, B and C), None
    in S4D, which has no such convolution."""

    ssm_states: torch.Tensor
    conv_states: torch.Tensor | None = None
    seen_tokens: int = 0

    batch_dims: ClassVar[dict[str, int]] = {"ssm_states": 1, "conv_states": 1}
    holds: ClassVar[str] = "a state-space model keeps no key/value cache"

    def layers(self) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """Each layer's (ssm_state, conv_state)."""
        conv_states = [None] * len(self.ssm_states) if self.conv_states is None else self.conv_states
        return list(zip(self.ssm_states, conv_states))


@dataclass(eq=False)
class QueueState(CarriedState):
    """The whole memory of a model that reads a fixed number of past inputs: `conv_states`, one queue per layer,
    (B, length, features), oldest first, zeros where there was no input (before the first token, and padding).
    WaveNet keeps each dilated convolution's last (k-1) d inputs; the fixed-window model, a convolution of width
    n-1 over the embeddings, keeps one queue, the last n-1 embeddings."""

    conv_states: tuple[torch.Tensor, ...]
    seen_tokens: int = 0

    batch_dims: ClassVar[dict[str, int]] = {"conv_states": 0}
    holds: ClassVar[str] = "a model of a fixed window keeps queues of past inputs, not keys and values"


WindowState = ConvState = QueueState  # the names the fixed-window and the WaveNet families first gave it

__all__ = ["CarriedState", "RecurrentState", "SSMState", "QueueState", "WindowState", "ConvState"]
