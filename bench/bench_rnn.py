"""hf-seq's recurrent language models against the plain PyTorch ways of writing them, and against GPT at decoding.

Training throughput (forward + backward + SGD step with gradient clipping, tokens/s), truncated BPTT with the state
carried (detached) from batch to batch, for:

- `RNNForCausalLM` with `cell_type` lstm, gru, elman (tanh) and gated;
- a bare `nn.LSTM` language model of the same size: the design of pytorch/examples' word_language_model
  (embedding, dropout, a multi-layer nn.LSTM, dropout, a tied linear decoder), written here in a few lines;
- a naive per-step Python loop: the LSTM equations written step by step (one input and one recurrent nn.Linear per
  layer, `for t in range(T): for layer in layers: ...`), what one writes without the fused kernel.

Generation cost per token (ms/token, batch 1, greedy, the model's own state or KV cache) after a context of 64, 512
and 2048 tokens, for `RNNForCausalLM` (lstm) and `GPTForCausalLM` at a similar parameter count: the context is fed
once (not timed), then `--decode-steps` single-token forward passes are timed.

The training models alternate step by step (the order reversing between rounds); figures are medians over rounds
and ratios the median of per-round ratios, with their range. Each is measured by the wall clock and by the process
CPU time: on a machine shared with other jobs the wall clock stretches with their load, the CPU time much less.
On a quiet 2-core CPU a model timed against itself reads 0.92-1.04, so a ratio within about 0.08 of 1 is noise.

    python bench/bench_rnn.py --quick     # about two minutes on 2 cores; prints only
    python bench/bench_rnn.py             # writes bench/results/rnn_cpu.md
"""

import argparse
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from bench_gpt import machine_description
from torch import nn

from hf_seq import GPTConfig, GPTForCausalLM, RNNConfig, RNNForCausalLM


@dataclass(frozen=True)
class Size:
    name: str
    vocab_size: int
    hidden_size: int  # embedding size too: tied embeddings
    num_layers: int
    batch_size: int
    seq_len: int  # BPTT length
    train_steps: int  # timed steps per model per round
    gpt_hidden: int  # the GPT of a similar parameter count
    gpt_layers: int
    gpt_heads: int


SIZES = {
    # pytorch/examples word_language_model defaults (200 units, batch 20, bptt 35), and Zaremba et al.'s medium LSTM
    "small": Size("small", 10000, 200, 2, 20, 35, 8, 192, 2, 3),
    "medium": Size("medium", 10000, 650, 2, 20, 35, 3, 640, 1, 10),
}
QUICK_SIZES = {"quick": Size("quick", 2000, 128, 2, 20, 35, 4, 128, 1, 2)}
CONTEXTS = (64, 512, 2048)
DROPOUT = 0.2


# ------------------------------------------------------------------------------------------------------ baselines
def init_embeddings(model: nn.Module) -> None:
    """word_language_model's init: embeddings U(-0.1, 0.1), decoder bias 0 (PyTorch's default N(0, 1) embeddings
    make huge tied logits); the recurrent weights keep PyTorch's U(-1/sqrt(H), 1/sqrt(H))."""
    nn.init.uniform_(model.encoder.weight, -0.1, 0.1)
    nn.init.zeros_(model.decoder.bias)


class WordLanguageModel(nn.Module):
    """The pytorch/examples word_language_model design: embedding, dropout, nn.LSTM, dropout, tied decoder."""

    def __init__(self, size: Size):
        super().__init__()
        self.drop = nn.Dropout(DROPOUT)
        self.encoder = nn.Embedding(size.vocab_size, size.hidden_size)
        self.rnn = nn.LSTM(size.hidden_size, size.hidden_size, size.num_layers, dropout=DROPOUT, batch_first=True)
        self.decoder = nn.Linear(size.hidden_size, size.vocab_size)
        self.decoder.weight = self.encoder.weight
        init_embeddings(self)

    def forward(self, input_ids, state=None):
        output, state = self.rnn(self.drop(self.encoder(input_ids)), state)
        return self.decoder(self.drop(output)), state


class StepLoopLSTM(nn.Module):
    """The LSTM written step by step in Python: per step and layer, gates = W_x x_t + W_h h_{t-1} + b, then
    c_t = f c_{t-1} + i g and h_t = o tanh(c_t)."""

    def __init__(self, size: Size):
        super().__init__()
        self.drop = nn.Dropout(DROPOUT)
        self.encoder = nn.Embedding(size.vocab_size, size.hidden_size)
        h = size.hidden_size
        self.input_proj = nn.ModuleList(nn.Linear(h, 4 * h) for _ in range(size.num_layers))
        self.hidden_proj = nn.ModuleList(nn.Linear(h, 4 * h, bias=False) for _ in range(size.num_layers))
        self.decoder = nn.Linear(h, size.vocab_size)
        self.decoder.weight = self.encoder.weight
        init_embeddings(self)

    def forward(self, input_ids, state=None):
        output, state = self.recurrence(self.drop(self.encoder(input_ids)), state)
        return self.decoder(self.drop(output)), state

    def recurrence(self, x, state=None):
        batch, steps, h = x.shape
        if state is None:
            state = [(x.new_zeros(batch, h), x.new_zeros(batch, h)) for _ in self.input_proj]
        state = list(state)
        outputs = []
        for t in range(steps):
            inp = x[:, t]
            for layer, (w_x, w_h) in enumerate(zip(self.input_proj, self.hidden_proj)):
                hidden, cell = state[layer]
                i, f, g, o = (w_x(inp) + w_h(hidden)).chunk(4, -1)
                cell = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
                hidden = torch.sigmoid(o) * torch.tanh(cell)
                state[layer] = (hidden, cell)
                inp = self.drop(hidden) if layer < len(self.input_proj) - 1 else hidden
            outputs.append(inp)
        return torch.stack(outputs, 1), state


def detach(state):
    if state is None:
        return None
    if hasattr(state, "detach"):
        return state.detach()
    return type(state)(detach(s) for s in state) if isinstance(state, (tuple, list)) else state


# ------------------------------------------------------------------------------------------------------- training
class TrainLoop:
    """One model, SGD with gradient clipping (as word_language_model), a stream of random batches, and the state
    carried from batch to batch (detached: truncated backpropagation through time)."""

    def __init__(self, name: str, model: nn.Module, size: Size, device: str):
        self.name, self.model, self.device = name, model.to(device).train(), device
        self.hf = isinstance(model, RNNForCausalLM)
        self.optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        generator = torch.Generator().manual_seed(0)
        shape = (4, size.batch_size, size.seq_len + 1)
        self.batches = torch.randint(3, size.vocab_size, shape, generator=generator).to(device)
        self.state, self.step_count = None, 0

    def step(self):
        batch = self.batches[self.step_count % len(self.batches)]
        self.step_count += 1
        if self.hf:
            out = self.model(input_ids=batch[:, :-1], labels=batch[:, :-1], past_key_values=self.state, use_cache=True)
            loss, state = out.loss, out.past_key_values
        else:
            logits, state = self.model(batch[:, :-1], self.state)
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 0.25)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.state = detach(state)

    def run(self, steps: int) -> "Clock":
        synchronize(self.device)
        clock = Clock()
        for _ in range(steps):
            self.step()
        synchronize(self.device)
        return clock.stop()


def rnn_config(size: Size, cell_type: str) -> RNNConfig:
    return RNNConfig(
        vocab_size=size.vocab_size,
        hidden_size=size.hidden_size,
        num_hidden_layers=size.num_layers,
        cell_type=cell_type,
        embedding_dropout=DROPOUT,
        hidden_dropout=DROPOUT,
        output_dropout=DROPOUT,
    )


def train_models(size: Size) -> dict[str, nn.Module]:
    torch.manual_seed(0)
    models = {f"RNNForCausalLM {c}": RNNForCausalLM(rnn_config(size, c)) for c in ("lstm", "gru", "elman", "gated")}
    models["bare nn.LSTM LM"] = WordLanguageModel(size)
    models["per-step loop LSTM"] = StepLoopLSTM(size)
    return models


def bench_training(size: Size, rounds: int, device: str) -> dict[str, list[tuple[float, float]]]:
    """Tokens per wall-clock second and per CPU second, per model and round. The models alternate step by step."""
    loops = [TrainLoop(name, model, size, device) for name, model in train_models(size).items()]
    for loop in loops:  # warm-up
        loop.run(1)
    tokens = {loop.name: [] for loop in loops}
    for r in range(rounds):
        wall, cpu = dict.fromkeys(tokens, 0.0), dict.fromkeys(tokens, 0.0)
        for _ in range(size.train_steps):
            for loop in loops if r % 2 == 0 else loops[::-1]:
                clock = loop.run(1)
                wall[loop.name] += clock.wall
                cpu[loop.name] += clock.cpu
        count = size.train_steps * size.batch_size * size.seq_len
        for name in tokens:
            tokens[name].append((count / wall[name], count / cpu[name]))
        print(
            f"{size.name} training round {r + 1}/{rounds}, tokens/s: "
            + ", ".join(f"{n} {t[-1][0]:,.0f}" for n, t in tokens.items()),
            flush=True,
        )
    return tokens


def bench_recurrence(size: Size, rounds: int, device: str) -> dict[str, list[tuple[float, float]]]:
    """The recurrent layers alone, forward and backward on a (B, T, H) input: where the fused kernels differ from
    the step loop, without the embedding and the vocabulary-sized output layer that all three share."""
    torch.manual_seed(0)
    models = {name: model.to(device).train() for name, model in train_models(size).items()}
    recurrences = {
        "RNNForCausalLM lstm": lambda x: models["RNNForCausalLM lstm"].model.rnn(x).output,
        "bare nn.LSTM LM": lambda x: models["bare nn.LSTM LM"].rnn(x)[0],
        "per-step loop LSTM": lambda x: models["per-step loop LSTM"].recurrence(x)[0],
    }
    x = torch.randn(size.batch_size, size.seq_len, size.hidden_size, device=device, requires_grad=True)

    def run(fn) -> Clock:
        synchronize(device)
        clock = Clock()
        fn(x).sum().backward()
        synchronize(device)
        return clock.stop()

    for fn in recurrences.values():  # warm-up
        run(fn)
    tokens = {name: [] for name in recurrences}
    count = size.batch_size * size.seq_len
    for r in range(rounds):
        for name, fn in recurrences.items() if r % 2 == 0 else list(recurrences.items())[::-1]:
            clocks = [run(fn) for _ in range(size.train_steps)]
            tokens[name].append(
                (count * len(clocks) / sum(c.wall for c in clocks), count * len(clocks) / sum(c.cpu for c in clocks))
            )
    return tokens


# ----------------------------------------------------------------------------------------------------- generation
def generation_models(size: Size) -> dict[str, nn.Module]:
    torch.manual_seed(0)
    gpt = GPTConfig(
        vocab_size=size.vocab_size,
        hidden_size=size.gpt_hidden,
        num_hidden_layers=size.gpt_layers,
        num_attention_heads=size.gpt_heads,
        max_position_embeddings=max(CONTEXTS) + 128,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    return {"RNNForCausalLM lstm": RNNForCausalLM(rnn_config(size, "lstm")), "GPTForCausalLM": GPTForCausalLM(gpt)}


@torch.no_grad()
def decode_ms_per_token(model, context: torch.Tensor, steps: int, device: str) -> tuple[float, float]:
    """Feed the context once, then time `steps` greedy single-token steps with the state / KV cache; returns the
    wall-clock and CPU milliseconds per token."""
    out = model(input_ids=context, use_cache=True, logits_to_keep=1)
    past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
    synchronize(device)
    clock = Clock()
    for _ in range(steps):
        out = model(input_ids=token, past_key_values=past, use_cache=True)
        past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
    synchronize(device)
    clock.stop()
    return clock.wall / steps * 1e3, clock.cpu / steps * 1e3


def bench_generation(size: Size, rounds: int, steps: int, device: str) -> dict[tuple[str, int], list[float]]:
    models = {name: model.to(device).eval() for name, model in generation_models(size).items()}
    generator = torch.Generator().manual_seed(1)
    contexts = {n: torch.randint(3, size.vocab_size, (1, n), generator=generator).to(device) for n in CONTEXTS}
    for model in models.values():
        decode_ms_per_token(model, contexts[64], 2, device)  # warm-up
    ms = {(name, n): [] for name in models for n in CONTEXTS}
    for r in range(rounds):
        for name, model in models.items() if r % 2 == 0 else list(models.items())[::-1]:
            for n in CONTEXTS:
                ms[name, n].append(decode_ms_per_token(model, contexts[n], steps, device))
        print(
            f"{size.name} generation round {r + 1}/{rounds}, ms/token: "
            + ", ".join(f"{k[0]}@{k[1]} {v[-1][0]:.2f}" for k, v in ms.items()),
            flush=True,
        )
    return ms, {name: sum(p.numel() for p in m.parameters()) for name, m in models.items()}


# --------------------------------------------------------------------------------------------------------- report
class Clock:
    """Wall-clock and process CPU seconds. On a shared machine the CPU time of the process is the steadier of the
    two: other processes stretch the wall clock, not (much) the work done."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def stop(self) -> "Clock":
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu
        return self


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def median_ratio(a: list[float], b: list[float]) -> str:
    ratios = [x / y for x, y in zip(a, b)]
    return f"**{statistics.median(ratios):.2f}** ({min(ratios):.2f}-{max(ratios):.2f})"


def column(values: list[tuple[float, float]], which: int) -> list[float]:
    return [v[which] for v in values]


def training_table(size: Size, tokens: dict[str, list[float]]) -> list[str]:
    params = {name: sum(p.numel() for p in m.parameters()) for name, m in train_models(size).items()}
    bare, loop = tokens["bare nn.LSTM LM"], tokens["per-step loop LSTM"]
    rows = [
        f"#### training, {size.name}: vocab {size.vocab_size}, {size.num_layers} layers of {size.hidden_size}, "
        f"batch {size.batch_size} x {size.seq_len} tokens, dropout {DROPOUT}, tied embeddings",
        "",
        "| model | parameters | tokens/s | / bare nn.LSTM LM | / per-step loop | / bare, CPU time | / loop, CPU time |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, values in tokens.items():
        ratios = [median_ratio(column(values, i), column(base, i)) for i in (0, 1) for base in (bare, loop)]
        rows.append(
            f"| {name} | {params[name] / 1e6:.2f}M | {statistics.median(column(values, 0)):,.0f} | "
            f"{ratios[0]} | {ratios[1]} | {ratios[2]} | {ratios[3]} |"
        )
    return rows + [""]


def recurrence_table(size: Size, tokens: dict[str, list[tuple[float, float]]]) -> list[str]:
    loop = tokens["per-step loop LSTM"]
    rows = [
        f"#### the recurrent layers alone, {size.name}: forward + backward of {size.num_layers} LSTM layers of "
        f"{size.hidden_size} on a {size.batch_size} x {size.seq_len} input",
        "",
        "| recurrence | tokens/s | / per-step loop | / per-step loop, CPU time |",
        "|---|---:|---:|---:|",
    ]
    for name, values in tokens.items():
        rows.append(
            f"| {name} | {statistics.median(column(values, 0)):,.0f} | "
            f"{median_ratio(column(values, 0), column(loop, 0))} | {median_ratio(column(values, 1), column(loop, 1))} |"
        )
    return rows + [""]


def generation_table(size: Size, ms, params) -> list[str]:
    names = list(params)
    rows = [
        f"#### generation, {size.name}: ms per new token at batch 1 after a context of n tokens (CPU ms in brackets)",
        "",
        "| model | parameters | "
        + " | ".join(f"n = {n}" for n in CONTEXTS)
        + f" | n = {CONTEXTS[-1]} / n = {CONTEXTS[0]} |",
        "|---|---:|" + "---:|" * (len(CONTEXTS) + 1),
    ]
    for name in names:
        cells = [
            f"{statistics.median(column(ms[name, n], 0)):.2f} ({statistics.median(column(ms[name, n], 1)):.2f})"
            for n in CONTEXTS
        ]
        flat = median_ratio(column(ms[name, CONTEXTS[-1]], 0), column(ms[name, CONTEXTS[0]], 0))
        rows.append(f"| {name} | {params[name] / 1e6:.2f}M | " + " | ".join(cells) + f" | {flat} |")
    ratio = " | ".join(median_ratio(column(ms[names[1], n], 0), column(ms[names[0], n], 0)) for n in CONTEXTS)
    rows.append(f"| {names[1]} / {names[0]} | | {ratio} | |")
    return rows + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--decode-steps", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="one small size, 3 rounds: a few minutes on 2 cores")
    parser.add_argument("--sizes", nargs="*", help=f"subset of {list(SIZES)}")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice, one per core)")
    parser.add_argument("--output", help="markdown file to write (default: bench/results/rnn_<device>.md)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)  # denormals slow CPU training erratically; the same setting for every model
    sizes = QUICK_SIZES if args.quick else {name: SIZES[name] for name in (args.sizes or SIZES)}
    rounds = 3 if args.quick else args.rounds
    steps = 16 if args.quick else args.decode_steps
    sections = []
    for size in sizes.values():
        sections += training_table(size, bench_training(size, rounds, args.device))
        sections += recurrence_table(size, bench_recurrence(size, rounds, args.device))
        sections += generation_table(size, *bench_generation(size, rounds, steps, args.device))

    command = "python bench/bench_rnn.py" + (" --quick" if args.quick else "")
    command += f" --device {args.device}" if args.device != "cpu" else ""
    command += f" --threads {args.threads}" if args.threads else ""
    lines = [
        f"# Recurrent language models: training and generation ({args.device})",
        "",
        f"`{command}`: fp32, eager mode, flush-denormal on, median of {rounds} interleaved rounds; ratios are "
        "medians of per-round ratios (range in brackets), above 1 is faster for tokens/s. Generation: greedy, "
        f"{steps} timed single-token steps after the context.",
        "Targets: training at parity with the bare nn.LSTM LM and at least 5x the per-step loop (10x on a GPU); a "
        "per-token generation cost that stays flat as the context grows (n = 2048 / n = 64 near 1).",
        "",
        *machine_description(args.device),
        "",
        *sections,
    ]
    text = "\n".join(lines)
    print("\n" + text)
    if args.quick and not args.output:
        return  # a smoke test does not overwrite the recorded results
    output = Path(args.output) if args.output else Path(__file__).parent / "results" / f"rnn_{args.device}.md"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    print(f"written to {output}")


if __name__ == "__main__":
    main()
