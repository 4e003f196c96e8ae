"""The state a recurrent model carries from one call to the next, as an explicit object.

A Transformer's cache grows with the context; a recurrent network's state is fixed in size: the last hidden
vector of every layer (and the LSTM's memory cell). `generate()` treats the object returned under
`past_key_values` as a cache: it passes it back at every step, asks `get_seq_length()`, and during beam search
calls `reorder_cache(beam_idx)` so that every beam continues from the state of the hypothesis it extends.

Training with truncated backpropagation through time carries the state across batches:

    state = None
    for chunk in chunks:
        out = model(chunk, past_key_values=state, labels=chunk, use_cache=True)
        out.loss.backward()
        state = out.past_key_values.detach()   # keep the values, cut the gradient path to earlier chunks

Families with more per-sequence state (an attention decoder's context vector, say) subclass `RecurrentState`
with more fields and list their batch dimensions in `batch_dims`; the batch operations then cover them.
"""

from dataclasses import dataclass, fields, replace
from typing import ClassVar

import torch


@dataclass(eq=False)
class RecurrentState:
    """`hidden` (and `cell` for an LSTM) are laid out as PyTorch's recurrent modules return them:
    (num_layers * num_directions, B, H), layer-major, index `layer * num_directions + direction`.
    `seen_tokens` counts the time steps consumed so far (padding included), the length of the attention mask
    that goes with the next call's inputs."""

    hidden: torch.Tensor
    cell: torch.Tensor | None = None
    seen_tokens: int = 0

    batch_dims: ClassVar[dict[str, int]] = {"hidden": 1, "cell": 1}  # field -> its batch dimension
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
        return self.hidden.shape[self.batch_dims["hidden"]]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.seen_tokens

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Beam search, in place: row i becomes the former row `beam_idx[i]`."""
        self.batch_select_indices(beam_idx)

    def batch_select_indices(self, indices: torch.LongTensor) -> None:
        """In place: keep (and order) the rows in `indices`."""
        for name, value, dim in self._batched():
            setattr(self, name, value.index_select(dim, indices.to(value.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        """In place: each row repeated `repeats` times in a row, as generate expands a batch for beams or samples."""
        for name, value, dim in self._batched():
            setattr(self, name, value.repeat_interleave(repeats, dim=dim))

    def detach(self) -> "RecurrentState":
        """A copy whose tensors no longer carry a gradient path (truncated backpropagation through time)."""
        return replace(self, **{name: value.detach() for name, value, _ in self._batched()})

    def to_tuple(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(hidden, cell), the form the recurrent layers take."""
        return self.hidden, self.cell


@dataclass(eq=False)
class SSMState(RecurrentState):
    """A state-space model's state, of fixed size whatever the context (transformers' Mamba cache holds the same two
    parts per layer): `hidden` holds every layer's SSM state (num_layers, B, channels, modes), complex for a complex
    S4D; `cell` the short convolution's last kernel - 1 inputs (num_layers, B, kernel - 1, channels) in Mamba, None
    in S4D, which has no such convolution."""

    @property
    def ssm_states(self) -> torch.Tensor:
        return self.hidden

    @property
    def conv_states(self) -> torch.Tensor | None:
        return self.cell


__all__ = ["RecurrentState", "SSMState"]
