r"""Recurrent layers shared by the recurrent families (the RNN language models and the RNN encoder-decoder).

Four cells; x_t is the input at step t, h_t the state, σ the logistic function, ⊙ the elementwise product.

`elman` (Elman 1990, "Finding structure in time"), f = tanh or relu (nn.RNN keeps two bias vectors; b = b_ih + b_hh):

$$
h_t = f(W_{xh} x_t + W_{hh} h_{t-1} + b)
$$

`gated`, the gated Elman network: an update gate decides how much of the old state each unit keeps:

$$
\begin{aligned}
z_t &= \sigma(W_{xz} x_t + W_{hz} h_{t-1} + b_z) \\
h_t &= z_t \odot h_{t-1} + (1 - z_t) \odot \mathrm{relu}(W_{xh} x_t + W_{hh} h_{t-1} + b_h)
\end{aligned}
$$

`gru` (Cho et al. 2014, eqs. 5-8), as cuDNN and nn.GRU compute it, with the reset gate applied after the recurrent
product:

$$
\begin{aligned}
r_t &= \sigma(W_{ir} x_t + b_{ir} + W_{hr} h_{t-1} + b_{hr}), \quad z_t = \sigma(W_{iz} x_t + b_{iz} + W_{hz} h_{t-1} + b_{hz}) \\
n_t &= \tanh(W_{in} x_t + b_{in} + r_t \odot (W_{hn} h_{t-1} + b_{hn})), \quad h_t = (1 - z_t) \odot n_t + z_t \odot h_{t-1}
\end{aligned}
$$

`lstm` (Hochreiter and Schmidhuber 1997, with the forget gate of Gers et al. 2000):

$$
\begin{aligned}
i_t, f_t, o_t &= \sigma(W_{x\cdot} x_t + W_{h\cdot} h_{t-1} + b_\cdot), \quad g_t = \tanh(W_{xg} x_t + W_{hg} h_{t-1} + b_g) \\
c_t &= f_t \odot c_{t-1} + i_t \odot g_t, \quad h_t = o_t \odot \tanh(c_t)
\end{aligned}
$$

`elman`, `gru` and `lstm` run PyTorch's fused kernels (cuDNN on GPU; ATen, oneDNN for the LSTM, on CPU) through
nn.RNN, nn.GRU and nn.LSTM: a whole sequence per call, never a Python loop per step (a single step on CPU goes
through the one-step cell kernels instead, see `RecurrentLayer._one_step`). The gated cell has no fused kernel, so
`GatedElman` does what can be done without one: the input projections of all steps in one matrix product, then a
step loop of one (B, H) x (H, 2H) product and a few elementwise operations, with backpropagation through time
written out by hand (`_GatedElmanScan`) so that autograd records one node per sequence instead of ~8 per step
(1.4-1.7x faster than autograd through the loop on CPU, forward + backward). TorchScript (deprecated in torch 2)
was not faster in that measurement, and torch.compile would unroll the loop for every sequence length.

The fused kernels keep their gates to themselves. `RecurrentLayer.gates` returns them, with the states they give, to
look inside a model: the LSTM's and the GRU's from the equations above step by step (`_lstm_step`, `_gru_step`), the
gated cell's from the very loop its forward pass runs. `forward` never calls it.

Padding: a mask (B, T), 1 on real tokens, may put pads anywhere (right padding for training, left padding for
generation). `RecurrentStack` moves each row's real tokens to the front, runs packed sequences of each row's own
length (so a state stops at the row's last real token and the backward direction starts there), and puts the
outputs back in place, zeros on the pads: each row of a padded batch gets what it gets alone.

Shapes: B batch, T time steps, I input features, H hidden units per direction, D directions (1 or 2), L layers.
Tensors are batch-first; states are (L * D, B, H), layer-major, as PyTorch's recurrent modules lay them out.
"""

from typing import NamedTuple

import torch
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from transformers.modeling_layers import GradientCheckpointingLayer

from .configuration_rnn import CELL_TYPES, NONLINEARITIES


# ---------------------------------------------------------------------------------------- the gated Elman network
def _gated_elman_loop(projected, weight_hh, h, mask, keep_gates: bool):
    """The recurrence of the gated cell. `projected` (B, T, 2H) holds W_x x_t + b for every step, the update gate's
    rows first, then the candidate's; `mask` (B, T) or None: on a False step the state is carried over unchanged.
    Returns the states (B, T, H), the last state (B, H) and, with `keep_gates`, z_t and the candidates for backward."""
    batch_size, steps, _ = projected.shape
    size = h.shape[-1]
    states = projected.new_empty(batch_size, steps, size)
    gates = candidates = None
    if keep_gates:
        gates, candidates = projected.new_empty(batch_size, steps, size), projected.new_empty(batch_size, steps, size)
    weight_hh_t = weight_hh.t()
    for t in range(steps):
        a = torch.addmm(projected[:, t], h, weight_hh_t)  # (B, 2H)
        z = torch.sigmoid(a[:, :size])
        candidate = torch.relu(a[:, size:])
        new_h = candidate + z * (h - candidate)  # z * h + (1 - z) * candidate
        h = new_h if mask is None else torch.where(mask[:, t, None], new_h, h)
        states[:, t] = h
        if keep_gates:
            gates[:, t], candidates[:, t] = z, candidate
    return states, h, gates, candidates


class _GatedElmanScan(torch.autograd.Function):
    """The gated recurrence with its gradient written out (backpropagation through time):
    with a_t = (a_z, a_c) the pre-activations and h_t = c + z (h_{t-1} - c),
        dL/da_z = dh_t (h_{t-1} - c_t) z_t (1 - z_t),   dL/da_c = dh_t (1 - z_t) [c_t > 0],
        dL/dh_{t-1} = dh_t z_t + dL/da_t W_hh   (+ the loss's own gradient at step t - 1),
        dL/dW_hh = sum_t dL/da_t^T h_{t-1}   (one matrix product over all steps)."""

    @staticmethod
    def forward(ctx, projected, weight_hh, h0, mask):
        states, h, gates, candidates = _gated_elman_loop(projected, weight_hh, h0, mask, keep_gates=True)
        ctx.save_for_backward(weight_hh, h0, states, gates, candidates, mask)
        return states, h

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_states, grad_last):
        weight_hh, h0, states, gates, candidates, mask = ctx.saved_tensors
        batch_size, steps, size = states.shape
        previous = torch.cat([h0[:, None], states[:, :-1]], 1)  # h_{t-1}, (B, T, H)
        grad_a = states.new_empty(batch_size, steps, 2 * size)
        grad_h = grad_last.clone()
        for t in range(steps - 1, -1, -1):
            grad_h = grad_h + grad_states[:, t]
            z, candidate = gates[:, t], candidates[:, t]
            grad_az = grad_h * (previous[:, t] - candidate) * z * (1 - z)
            grad_ac = grad_h * (1 - z) * (candidate > 0)
            grad_at = torch.cat([grad_az, grad_ac], 1)  # (B, 2H)
            if mask is None:
                grad_h = torch.addmm(grad_h * z, grad_at, weight_hh)
            else:  # a carried step passes its gradient through unchanged
                keep = mask[:, t, None]
                grad_at = grad_at * keep
                grad_h = torch.where(keep, torch.addmm(grad_h * z, grad_at, weight_hh), grad_h)
            grad_a[:, t] = grad_at
        grad_weight_hh = grad_a.flatten(0, 1).t() @ previous.flatten(0, 1)  # (2H, H)
        return grad_a, grad_weight_hh, grad_h, None


def gated_elman_scan(projected, weight_hh, h0, mask=None):
    """Run the gated recurrence over (B, T, 2H) input projections from state h0 (B, H); returns ((B, T, H), (B, H))."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in (projected, weight_hh, h0)):
        return _GatedElmanScan.apply(projected, weight_hh, h0, mask)
    return _gated_elman_loop(projected, weight_hh, h0, mask, keep_gates=False)[:2]


def _reverse_padded(x: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
    """Reverse each row's first `lengths[b]` steps in time (all of them without lengths), leaving the rest."""
    if lengths is None:
        return x.flip(1)
    steps = torch.arange(x.shape[1], device=x.device)
    lengths = lengths.to(x.device)[:, None]
    index = torch.where(steps < lengths, lengths - 1 - steps, steps)  # (B, T)
    return x.gather(1, index[..., None].expand_as(x))


class GatedElman(nn.Module):
    """One layer of the gated Elman network (see the module docstring), one or two directions, with the interface of
    a one-layer batch-first nn.RNN: `forward(x, hx, lengths) -> (output (B, T, D*H), h_n (D, B, H))`.

    Parameters are named as nn.RNN names them: `weight_ih_l0` (2H, I) = [W_xz; W_xh], `weight_hh_l0` (2H, H) =
    [W_hz; W_hh], `bias_l0` (2H) = [b_z; b_h], and the same with `_reverse` for the backward direction."""

    def __init__(self, input_size: int, hidden_size: int, bidirectional: bool = False):
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        self.num_directions = 2 if bidirectional else 1
        self.suffixes = ("", "_reverse")[: self.num_directions]
        for suffix in self.suffixes:
            self.register_parameter(f"weight_ih_l0{suffix}", nn.Parameter(torch.empty(2 * hidden_size, input_size)))
            self.register_parameter(f"weight_hh_l0{suffix}", nn.Parameter(torch.empty(2 * hidden_size, hidden_size)))
            self.register_parameter(f"bias_l0{suffix}", nn.Parameter(torch.empty(2 * hidden_size)))
        self.reset_parameters()

    def reset_parameters(self):
        bound = self.hidden_size**-0.5  # nn.RNN's initialisation
        for param in self.parameters():
            nn.init.uniform_(param, -bound, bound)

    def forward(self, x, hx=None, lengths=None):
        """x (B, T, I) with each row's real steps first, `lengths` (B,) of them (None: all T are real)."""
        batch_size, steps = x.shape[:2]
        if hx is None:
            hx = x.new_zeros(self.num_directions, batch_size, self.hidden_size)
        mask = None
        if lengths is not None:
            mask = torch.arange(steps, device=x.device) < lengths.to(x.device)[:, None]
        outputs, last = [], []
        for direction, suffix in enumerate(self.suffixes):
            sequence = x if direction == 0 else _reverse_padded(x, lengths)
            projected = nn.functional.linear(
                sequence, getattr(self, f"weight_ih_l0{suffix}"), getattr(self, f"bias_l0{suffix}")
            )  # (B, T, 2H): every step's input projection in one product
            states, h = gated_elman_scan(projected, getattr(self, f"weight_hh_l0{suffix}"), hx[direction], mask)
            outputs.append(states if direction == 0 else _reverse_padded(states, lengths))
            last.append(h)
        return torch.cat(outputs, -1), torch.stack(last)

    def extra_repr(self):
        return f"{self.input_size}, {self.hidden_size}, bidirectional={self.num_directions == 2}"


# ------------------------------------------------------------------------------------ LSTM and GRU gates, step by step
def _lstm_step(rnn: nn.LSTM, projected_t, h, c):
    """One LSTM step from x_t's input projection W_x x_t + b_x (B, 4H) and (h_{t-1}, c_{t-1}): the gates (nn.LSTM's
    rows are ordered i, f, g, o) and (h_t, c_t)."""
    i, f, g, o = (projected_t + nn.functional.linear(h, rnn.weight_hh_l0, rnn.bias_hh_l0)).chunk(4, -1)
    gates = {"input_gate": i.sigmoid(), "forget_gate": f.sigmoid(), "output_gate": o.sigmoid(), "candidate": g.tanh()}
    c = gates["forget_gate"] * c + gates["input_gate"] * gates["candidate"]
    return gates, gates["output_gate"] * torch.tanh(c), c


def _gru_step(rnn: nn.GRU, projected_t, h, c=None):
    """One GRU step from x_t's input projection (B, 3H) and h_{t-1}: the gates r_t, z_t and the candidate n_t (nn.GRU's
    rows are ordered r, z, n; r multiplies W_hn h + b_hn, cuDNN's form) and (h_t, no cell)."""
    x_r, x_z, x_n = projected_t.chunk(3, -1)
    h_r, h_z, h_n = nn.functional.linear(h, rnn.weight_hh_l0, rnn.bias_hh_l0).chunk(3, -1)
    reset, update = torch.sigmoid(x_r + h_r), torch.sigmoid(x_z + h_z)
    candidate = torch.tanh(x_n + reset * h_n)
    gates = {"reset_gate": reset, "update_gate": update, "candidate": candidate}
    return gates, (1 - update) * candidate + update * h, None


# ------------------------------------------------------------------------------------------------ layer and stack
class RecurrentLayer(GradientCheckpointingLayer):
    """One layer, one or two directions: a one-layer fused nn.RNN / nn.GRU / nn.LSTM, or a GatedElman.

    A GradientCheckpointingLayer, so `model.activation_checkpointing_enable()` recomputes the layer in the backward
    pass instead of keeping its activations (the tensors it gets are positional for that reason)."""

    def __init__(
        self, cell_type: str, input_size: int, hidden_size: int, nonlinearity: str = "tanh", bidirectional=False
    ):
        super().__init__()
        self.cell_type = cell_type
        kwargs = dict(batch_first=True, bidirectional=bidirectional)
        if cell_type == "elman":
            self.rnn = nn.RNN(input_size, hidden_size, nonlinearity=nonlinearity, **kwargs)
        elif cell_type == "gru":
            self.rnn = nn.GRU(input_size, hidden_size, **kwargs)
        elif cell_type == "lstm":
            self.rnn = nn.LSTM(input_size, hidden_size, **kwargs)
        else:
            self.rnn = GatedElman(input_size, hidden_size, bidirectional)

    def forward(self, x, hidden=None, cell=None, lengths=None):
        """x (B, T, I), rows' real steps first; hidden, cell (D, B, H) or None (zeros); lengths (B,) >= 1 or None.
        Returns the outputs (B, T, D*H), zero after each row's length, and the last hidden and cell states."""
        if self.cell_type == "gated":
            output, hidden = self.rnn(x, hidden, lengths)
            return output, hidden, None
        if x.shape[1] == 1 and lengths is None and x.device.type == "cpu" and not self.rnn.bidirectional:
            return self._one_step(x, hidden, cell)
        hx = hidden
        if self.cell_type == "lstm" and hidden is not None:
            hx = (hidden, cell)
        if lengths is None:
            output, state = self.rnn(x, hx)
        else:
            packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
            output, state = self.rnn(packed, hx)
            output, _ = pad_packed_sequence(output, batch_first=True, total_length=x.shape[1])
        if self.cell_type == "lstm":
            return output, state[0], state[1]
        return output, state, None

    def gates(self, x, hidden=None, cell=None) -> dict[str, torch.Tensor]:
        """The forward direction's gate activations at every step, with the states they give: x (B, T, I), every step
        real; hidden, cell (D, B, H) or None (zeros), as `forward` takes them. Returns (B, T, H) tensors:
        `input_gate`, `forget_gate`, `output_gate`, `candidate` (g_t) and `cell` (c_t) for the LSTM; `reset_gate`,
        `update_gate` and `candidate` (n_t) for the GRU; `update_gate` (z_t) and `candidate` for the gated cell;
        and `hidden` (h_t), the forward direction's part of what `forward` returns (to rounding, for the fused cells).
        The module docstring's equations, one step at a time: to look inside, not to train."""
        if self.cell_type == "elman":
            raise ValueError(
                f"RecurrentLayer.gates: cell_type={self.cell_type!r} has no gates; the cells with gates are 'gated', "
                "'gru' and 'lstm'."
            )
        rnn = self.rnn
        h = x.new_zeros(x.shape[0], rnn.hidden_size) if hidden is None else hidden[0]
        if self.cell_type == "gated":  # the loop its forward pass runs, keeping z_t and the candidates
            projected = nn.functional.linear(x, rnn.weight_ih_l0, rnn.bias_l0)
            states, _, update, candidate = _gated_elman_loop(projected, rnn.weight_hh_l0, h, None, keep_gates=True)
            return {"update_gate": update, "candidate": candidate, "hidden": states}
        c = torch.zeros_like(h) if cell is None else cell[0]
        step = _lstm_step if self.cell_type == "lstm" else _gru_step
        steps = []
        for projected_t in nn.functional.linear(x, rnn.weight_ih_l0, rnn.bias_ih_l0).unbind(1):  # (B, 4H or 3H)
            gates, h, c = step(rnn, projected_t, h, c)
            steps.append(gates | {"hidden": h} | ({"cell": c} if c is not None else {}))
        return {name: torch.stack([values[name] for values in steps], 1) for name in steps[0]}

    def _one_step(self, x, hidden, cell):
        """One time step through the one-step fused kernels (those of nn.LSTMCell / nn.GRUCell / nn.RNNCell). On CPU,
        nn.LSTM's sequence kernel (oneDNN) lays the weights out anew on every call, which makes a one-token decoding
        step 5-20x slower than the step itself (measured with 650 units: 9.6 ms against 0.5 ms)."""
        rnn, x_t = self.rnn, x[:, 0]
        weights = (rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0, rnn.bias_hh_l0)
        h = x_t.new_zeros(x_t.shape[0], rnn.hidden_size) if hidden is None else hidden[0]
        if self.cell_type == "lstm":
            h, c = torch.lstm_cell(x_t, (h, torch.zeros_like(h) if cell is None else cell[0]), *weights)
            return h[:, None], h[None], c[None]
        if self.cell_type == "gru":
            h = torch.gru_cell(x_t, h, *weights)
        else:
            h = (torch.rnn_tanh_cell if rnn.nonlinearity == "tanh" else torch.rnn_relu_cell)(x_t, h, *weights)
        return h[:, None], h[None], None


class RecurrentStackOutput(NamedTuple):
    output: torch.Tensor  # (B, T, D*H): the last layer's states; zeros on padding
    hidden: torch.Tensor  # (L*D, B, H): each layer's state after its last real step
    cell: torch.Tensor | None  # (L*D, B, H): the LSTM's memory cells, else None
    layer_outputs: tuple[torch.Tensor, ...] | None  # every layer's output (B, T, D*H), when asked for


class RecurrentStack(nn.Module):
    """`num_layers` recurrent layers of one cell type, with dropout between layers (as nn.LSTM's `dropout`).

    `forward(inputs (B, T, I), state=(hidden, cell) or None, attention_mask (B, T) or None)`: the state is what a
    previous call returned (None: zeros); `cell` is the LSTM's (None: zeros) and ignored by the other cells.
    Returns a `RecurrentStackOutput`.
    Called one step at a time with its own state, it is a decoder; with `bidirectional=True`, an encoder whose
    `hidden[-2:]` are the last layer's summaries of the sequence read forwards and backwards."""

    def __init__(
        self,
        cell_type: str,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        dropout: float = 0.0,
        bidirectional: bool = False,
    ):
        super().__init__()
        if cell_type not in CELL_TYPES:
            raise ValueError(f"cell_type={cell_type!r} is not supported; allowed values: {list(CELL_TYPES)}.")
        if nonlinearity not in NONLINEARITIES:
            raise ValueError(f"nonlinearity={nonlinearity!r} is not supported; allowed values: {list(NONLINEARITIES)}.")
        self.cell_type, self.hidden_size, self.num_layers = cell_type, hidden_size, num_layers
        self.num_directions = 2 if bidirectional else 1
        self.output_size = self.num_directions * hidden_size
        self.layers = nn.ModuleList(
            RecurrentLayer(
                cell_type, input_size if i == 0 else self.output_size, hidden_size, nonlinearity, bidirectional
            )
            for i in range(num_layers)
        )
        self.dropout = nn.Dropout(dropout)

    def initial_state(self, batch_size: int, device=None, dtype=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        hidden = torch.zeros(
            self.num_layers * self.num_directions, batch_size, self.hidden_size, device=device, dtype=dtype
        )
        return hidden, (torch.zeros_like(hidden) if self.cell_type == "lstm" else None)

    def forward(
        self,
        inputs: torch.Tensor,
        state: tuple[torch.Tensor, torch.Tensor | None] | None = None,
        attention_mask: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        reverse: bool = False,
        dropout_masks: list[torch.Tensor] | None = None,
    ) -> RecurrentStackOutput:
        """`reverse=True` reads each row's real steps last to first (Sutskever et al.'s reversed source); the outputs
        stay in input order either way. `dropout_masks`: the scaled keep-masks (B, T, D*H) between layers, in place
        of fresh ones (a caller running the same steps twice draws them once).

        With `output_hidden_states`, every returned layer output is the tensor the rest of the computation reads:
        the next layer gathers its input from it, and the final states are read from it."""
        batch_size, steps = inputs.shape[:2]
        if state is None:
            state = self.initial_state(batch_size, inputs.device, inputs.dtype)
        hidden, cell = state
        if self.cell_type == "lstm" and cell is None:  # e.g. a decoder started from an encoder's hidden state only
            cell = torch.zeros_like(hidden)
        padded = attention_mask is not None and not bool(attention_mask.all())
        lengths = order = None
        if padded or reverse:
            real = attention_mask.bool() if padded else torch.ones(batch_size, steps, dtype=torch.bool)
            real = real.to(inputs.device)
            position = torch.arange(steps, device=inputs.device)
            # the reading order: real steps first (last to first when reversed), then the padding
            key = torch.where(real, steps - 1 - position if reverse else position, steps + position)
            order = key.argsort(1)  # (B, T): the input position read at each step
            lengths = real.sum(1) if padded else None

        def read(y):  # input order -> reading order
            return y if order is None else y.gather(1, order[..., None].expand(-1, -1, y.shape[-1]))

        def restore(y):  # reading order -> input order, zero on padding
            if order is None:
                return y
            if lengths is not None:
                y = y * (position < lengths[:, None])[..., None]
            return torch.zeros_like(y).scatter(1, order[..., None].expand_as(y), y)

        # A row with no real step (a chunk of pads) runs one dummy step; its state is restored below.
        run_lengths = None if lengths is None else lengths.clamp(min=1)
        x, hiddens, cells, layer_outputs = inputs, [], [], []
        span = self.num_directions
        for i, layer in enumerate(self.layers):
            x = read(x)
            if i > 0:
                x = x * dropout_masks[i - 1] if dropout_masks is not None else self.dropout(x)
            layer_cell = None if cell is None else cell[i * span : (i + 1) * span]
            x, h, c = layer(x, hidden[i * span : (i + 1) * span], layer_cell, run_lengths)
            x = restore(x)
            if output_hidden_states:
                h = self._final_states(x, order, lengths, h)
                layer_outputs.append(x)
            hiddens.append(h)
            cells.append(c)
        new_hidden = torch.cat(hiddens)
        new_cell = torch.cat(cells) if self.cell_type == "lstm" else None
        if lengths is not None:
            empty = (lengths == 0).to(new_hidden.device)[None, :, None]
            new_hidden = torch.where(empty, hidden, new_hidden)
            if new_cell is not None:
                new_cell = torch.where(empty, cell, new_cell)
        return RecurrentStackOutput(x, new_hidden, new_cell, tuple(layer_outputs) if output_hidden_states else None)

    def _final_states(self, outputs, order, lengths, hidden) -> torch.Tensor:
        """Each direction's state after its last real step (D, B, H), read from the layer's outputs (B, T, D*H) in
        input order: forwards at the last step read, backwards at the first. Equal to the layer's own final state."""
        batch_size, steps = outputs.shape[:2]
        rows = torch.arange(batch_size, device=outputs.device)
        last = (lengths.clamp(min=1) - 1) if lengths is not None else torch.full_like(rows, steps - 1)
        first = torch.zeros_like(rows)
        if order is not None:
            last, first = order[rows, last], order[rows, first]
        finals = outputs[rows, last, : self.hidden_size][None]
        if self.num_directions == 2:
            finals = torch.cat([finals, outputs[rows, first, self.hidden_size :][None]])
        return finals.to(hidden.dtype)


__all__ = [
    "CELL_TYPES",
    "NONLINEARITIES",
    "GatedElman",
    "RecurrentLayer",
    "RecurrentStack",
    "RecurrentStackOutput",
    "gated_elman_scan",
]
