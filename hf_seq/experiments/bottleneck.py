"""The fixed-context bottleneck (Bahdanau, Cho and Bengio 2015, figure 2), on a synthetic task: reverse a sequence of
letters (`hf_seq.data.sequence_reversal`), scored by exact match against source length.

An encoder-decoder without attention must squeeze the whole source into one fixed-size vector before it writes a
word; as sources grow, that vector runs out of room. Attention lets every output step read all the encoder's states.
Three designs on the same budget (the same batches, the same number of optimizer steps):

- `classic`: the encoder-decoder of Sutskever et al. (2014) / Cho et al. (2014), BahdanauConfig with
  `attention_type="none"`, `encoder_bidirectional=False`, `bridge="final_state"`, `decoder_input="embedding"` and
  `output_layer="linear"`: the decoder starts from the encoder's final state and reads nothing else. Its width is twice the others', so its fixed
  summary is as large as one attention annotation [->h_j; <-h_j]. (The source is read in order, which favours it
  here: the first letter to write is the last one read.)
- `additive`: RNNsearch, the bidirectional GRU encoder and Bahdanau's additive attention.
- `transformer`: the encoder-decoder Transformer (Vaswani et al. 2017) of about the same width, for reference.

Training: sequences of `min_length` to `max_length` letters, one length per batch, AdamW with warm-up and cosine
decay, clipping at 1. Test: fresh sequences of each length, greedy decoding; exact match (the whole reversed sequence
and EOS) and token accuracy, and an alignment learned by the additive model (as the paper's figure 3).
"""

import random
import time
from pathlib import Path

import torch

from hf_seq import (
    BahdanauConfig,
    BahdanauForConditionalGeneration,
    TransformerConfig,
    TransformerForConditionalGeneration,
)
from hf_seq.data import sequence_reversal
from hf_seq.plotting import plot_alignment

from .common import (
    BOS,
    EOS,
    ID_TOKENS,
    LETTER_VOCAB_SIZE,
    PAD,
    check_options,
    claim,
    count_parameters,
    figure,
    finish,
    letter_ids,
    markdown_table,
    output_folder,
    prose,
    save_figure,
    torch_threads,
    train,
)

NAME = "bottleneck"
TITLE = "The fixed-context bottleneck: sequence reversal against source length"
DESIGNS = ("classic", "additive", "transformer")
PEAK_LR = {"classic": 3e-3, "additive": 3e-3, "none": 3e-3, "transformer": 2e-3}
DEFAULTS = dict(steps=1000, batch_size=64, min_length=5, max_length=40, examples=100, jobs=2, seed=0)
QUICK = dict(steps=15, batch_size=8, max_length=12, examples=8, jobs=1)


def make_model(design: str) -> torch.nn.Module:
    special = dict(vocab_size=LETTER_VOCAB_SIZE, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS)
    torch.manual_seed(0)
    if design == "transformer":
        config = TransformerConfig(
            hidden_size=64,
            encoder_layers=2,
            decoder_layers=2,
            num_attention_heads=4,
            intermediate_size=256,
            max_position_embeddings=128,
            dropout=0.0,
            **special,
        )
        return TransformerForConditionalGeneration(config)
    rnn = dict(embedding_size=32, cell_type="gru", initializer_range=0.1, **special)  # 0.01 stalls at this width
    if design == "classic":
        config = BahdanauConfig(
            hidden_size=128,
            attention_type="none",
            encoder_bidirectional=False,
            bridge="final_state",
            decoder_input="embedding",
            output_layer="linear",
            **rnn,
        )
    else:  # "additive", or "none": RNNsearch's own data flow with the attention taken out
        config = BahdanauConfig(hidden_size=64, attention_size=64, deep_output_size=32, attention_type=design, **rnn)
    return BahdanauForConditionalGeneration(config)


def encode(rows: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """Letters -> ids, EOS appended: (sources, targets), each (B, L + 1). A batch holds one length: no padding."""
    source = torch.tensor([letter_ids(r["source"]) + [EOS] for r in rows])
    target = torch.tensor([letter_ids(r["target"]) + [EOS] for r in rows])
    return source, target


@torch.no_grad()
def evaluate(model, lengths, examples: int) -> dict[int, tuple[float, float]]:
    """length -> (exact match, token accuracy) of greedy decoding on fresh sequences (seeds unused in training)."""
    scores = {}
    for length in lengths:
        source, target = encode(sequence_reversal(examples, 10**9 + length, min_length=length, max_length=length))
        out = model.generate(
            input_ids=source,
            max_new_tokens=length + 1,
            do_sample=False,
            pad_token_id=PAD,
            eos_token_id=None,
            decoder_start_token_id=BOS,
        )  # exactly length + 1 tokens, EOS last
        correct = out[:, 1 : length + 2] == target
        scores[length] = (correct.all(1).float().mean().item(), correct[:, :length].float().mean().item())
    return scores


def alignment_figure(model, path: Path, length: int = 16) -> float:
    """Draw the additive model's alignment for one sequence; return the mean weight each output letter puts on the
    source letter it copies (target i reads source L - 1 - i: the anti-diagonal)."""
    source, _ = encode(sequence_reversal(1, seed=7, min_length=length, max_length=length))
    generated = model.generate(
        input_ids=source, max_new_tokens=length + 1, do_sample=False, pad_token_id=PAD, decoder_start_token_id=BOS
    )
    with torch.no_grad():
        alignments = model(input_ids=source, decoder_input_ids=generated[:, :-1], output_attentions=True).alignments
    plot_alignment(
        alignments[0],
        [ID_TOKENS[int(i)] for i in source[0]],
        [ID_TOKENS[int(i)] for i in generated[0, 1:]],
        path,
        title="RNNsearch alignment, reversal (rows: generated tokens)",
    )
    steps = min(length, alignments.shape[1])
    return sum(alignments[0, i, length - 1 - i].item() for i in range(steps)) / steps


def run_design(design: str, options: dict, lengths) -> dict:
    """Train and evaluate one design on one torch thread (the decoder runs one small step per token: a second thread
    only adds a barrier per step); with options["alignment_path"], the additive design also draws its alignment.
    Returns seconds, final_loss, lr, parameters and scores {length: (exact match, token accuracy)}."""
    torch.set_flush_denormal(True)
    with torch_threads(1):
        model = make_model(design)
        seed = options.get("seed", 0)
        rng = random.Random(seed)
        lengths_by_step = [rng.randint(options["min_length"], options["max_length"]) for _ in range(options["steps"])]

        def batch(step):
            rows = sequence_reversal(
                options["batch_size"], seed * 1_000_003 + step, lengths_by_step[step], lengths_by_step[step]
            )
            source, target = encode(rows)
            return {"input_ids": source, "labels": target}

        trained = train(model, batch, options["steps"], PEAK_LR[design], warmup=min(200, options["steps"] // 10 + 1))
        result = {
            "seconds": trained["seconds"],
            "final_loss": trained["final_loss"],
            "lr": PEAK_LR[design],
            "parameters": count_parameters(model),
            "scores": evaluate(model, lengths, options["examples"]),
        }
        if design == "additive" and options.get("alignment_path"):
            result["anti_diagonal_weight"] = alignment_figure(model, Path(options["alignment_path"]))
    return result


def run(quick: bool = False, output_dir=None, **options) -> dict:
    o = check_options(NAME, options, DEFAULTS | (QUICK if quick else {}))
    started, folder = time.perf_counter(), output_folder(output_dir, NAME)
    lengths = tuple(range(10, o["max_length"] + 1, 10)) or (o["max_length"],)
    if quick:
        lengths = (4, o["max_length"])
    design_options = dict(o, alignment_path=str(folder / "alignment.png"))
    if o["jobs"] > 1:  # one process per design: both cores busy, each on one thread
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(o["jobs"], mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {d: pool.submit(run_design, d, design_options, lengths) for d in DESIGNS}
            designs = {d: f.result() for d, f in futures.items()}
    else:
        designs = {d: run_design(d, design_options, lengths) for d in DESIGNS}

    plots = [plot(designs, folder / "exact_match.png"), "alignment.png"]
    body = "\n\n".join(
        [
            prose(__doc__),
            f"{o['steps']} steps on batches of {o['batch_size']} sequences of {o['min_length']}-{o['max_length']} "
            f"letters; {o['examples']} test sequences per length.",
            markdown_table(
                ["design", "parameters", "peak lr", "train s", "final loss", *(f"exact @ {n}" for n in lengths)],
                [
                    [
                        d,
                        f"{r['parameters']:,}",
                        f"{r['lr']:g}",
                        f"{r['seconds']:.0f}",
                        f"{r['final_loss']:.3f}",
                        *(f"{r['scores'][n][0]:.2f}" for n in lengths),
                    ]
                    for d, r in designs.items()
                ],
            ),
            "Token accuracy (the fraction of letters in the right place):",
            markdown_table(
                ["design", *(f"@ {n}" for n in lengths)],
                [[d, *(f"{r['scores'][n][1]:.2f}" for n in lengths)] for d, r in designs.items()],
            ),
        ]
    )
    short, long = lengths[0], lengths[-1]
    classic, additive = designs["classic"]["scores"], designs["additive"]["scores"]
    claims = [
        claim(
            "Without attention, exact match collapses as the source grows: one fixed-size vector cannot hold it",
            f"classic encoder-decoder: exact match {classic[short][0]:.2f} at {short} letters, {classic[long][0]:.2f} "
            f"at {long}; token accuracy {classic[short][1]:.2f} → {classic[long][1]:.2f}",
            classic[long][0] < 0.5 * max(classic[short][0], 1e-9) or classic[long][0] < 0.1,
        ),
        claim(
            "With attention the decoder reads every source position, and long sources stay solvable",
            f"additive attention: exact match {additive[short][0]:.2f} at {short}, {additive[long][0]:.2f} at {long}",
            additive[long][0] > classic[long][0] + 0.2,
        ),
        claim(
            "The alignment of a reversal is the anti-diagonal",
            f"the additive model's weight on the letter each output copies, mean over a 16-letter reversal: "
            f"{designs['additive']['anti_diagonal_weight']:.2f} (alignment.png)",
            designs["additive"]["anti_diagonal_weight"] > 0.5,
        ),
    ]
    results = {"options": {"quick": quick, **o}, "lengths": list(lengths), "designs": designs, "claims": claims}
    return finish(NAME, TITLE, folder, results, body, started, plots)


def plot(designs: dict, path) -> str:
    fig = figure(9, 3.6)
    for k, label in enumerate(("exact match", "token accuracy")):
        axes = fig.add_subplot(1, 2, k + 1)
        for design, result in designs.items():
            lengths = sorted(result["scores"])
            axes.plot(lengths, [result["scores"][n][k] for n in lengths], "o-", label=design)
        axes.set_xlabel("source length (letters)")
        axes.set_ylabel(label)
        axes.set_ylim(-0.03, 1.03)
        axes.grid(alpha=0.3)
        if k == 0:
            axes.legend()
    fig.suptitle("Sequence reversal: same training budget, greedy decoding")
    return save_figure(fig, path)
