"""`data.batch_tokens`: sequence-to-sequence training batches filled up to a token budget from rows sorted by length
(fairseq's --max-tokens), their padding measured, and a killed run resumed bit for bit."""

import json
import random
import sys
from types import SimpleNamespace

import datasets
import pytest
import torch

from hf_seq.data.corpora import token_budget_batches
from hf_seq.training.pretraining import global_batch, run
from hf_seq.training.recipes import RecipeError, load_recipe
from tests.test_streaming import _finish, _train
from tests.test_training import _free_port, _weights, kill_after_first_checkpoint

# source and target lengths of 500 pairs, correlated as in translation, with a few longer than the budget
_draw = random.Random(0)
SOURCES = [_draw.randint(1, 40) for _ in range(500)] + [250, 300]
TARGETS = [max(1, s + _draw.randint(-5, 8)) for s in SOURCES[:500]] + [260, 150]
BUDGET = 400


def padded(batch: list[int]) -> int:
    return len(batch) * (max(SOURCES[i] for i in batch) + max(TARGETS[i] for i in batch))


def test_every_row_once_an_epoch_within_the_budget_in_length_order():
    for epoch in range(3):
        batches = token_budget_batches(SOURCES, TARGETS, BUDGET, seed=0, epoch=epoch)
        rows = [i for batch in batches for i in batch]
        assert sorted(rows) == list(range(len(SOURCES)))
        for batch in batches:
            assert padded(batch) <= BUDGET or len(batch) == 1  # a row longer than the budget is a batch of its own
        assert [len(b) for b in batches if padded(b) > BUDGET] == [1, 1]
        # cut from one sorted sequence: the batches' (source, target) ranges do not overlap
        spans = sorted(
            (min((SOURCES[i], TARGETS[i]) for i in b), max((SOURCES[i], TARGETS[i]) for i in b)) for b in batches
        )
        assert all(high <= low for (_, high), (low, _) in zip(spans, spans[1:]))
        # full: a batch could not have taken the next row (the padded sizes add up to nearly the budget each)
        assert sum(padded(b) for b in batches) > 0.85 * BUDGET * (len(batches) - 2)


def test_the_batches_change_with_the_epoch_and_repeat_with_the_seed():
    first, second = (token_budget_batches(SOURCES, TARGETS, BUDGET, seed=0, epoch=e) for e in (0, 1))
    assert len(first) == len(second)  # the cuts depend on the lengths alone: step s -> (s // n, s % n)
    assert first != second and sorted(map(sorted, first)) != sorted(map(sorted, second))  # order and ties differ
    assert token_budget_batches(SOURCES, TARGETS, BUDGET, seed=0, epoch=1) == second
    assert token_budget_batches(SOURCES, TARGETS, BUDGET, seed=1, epoch=1) != second
    in_order = token_budget_batches(SOURCES, TARGETS, BUDGET, shuffle=False)
    assert [SOURCES[b[0]] for b in in_order] == sorted(SOURCES[b[0]] for b in in_order)  # data.shuffle: false


def test_every_process_and_accumulation_step_gets_rows():
    batches = token_budget_batches(SOURCES, TARGETS, BUDGET, min_rows=4)
    assert min(len(b) for b in batches) >= 4  # the long rows take neighbours, past the budget
    assert sorted(i for b in batches for i in b) == list(range(len(SOURCES)))
    rows = datasets.Dataset.from_dict({"input_ids": [[1] * s for s in SOURCES], "labels": [[2] * t for t in TARGETS]})

    def collate(features):
        return {"input_ids": torch.tensor([len(f["input_ids"]) * 1000 + len(f["labels"]) for f in features])}

    t = SimpleNamespace(batch_size=8, gradient_accumulation_steps=2, seed=0)
    for step in (0, 7, len(batches) + 3):  # the last one in the second epoch
        taken = []
        for rank in (0, 1):
            accelerator = SimpleNamespace(process_index=rank, num_processes=2, device="cpu")
            micro = global_batch(rows, collate, step, t, accelerator, batch_tokens=BUDGET)
            assert len(micro) == 2 and all(len(m["input_ids"]) for m in micro)
            taken += [int(key) for m in micro for key in m["input_ids"]]
        epoch, index = divmod(step, len(batches))
        expected = token_budget_batches(SOURCES, TARGETS, BUDGET, seed=0, epoch=epoch, min_rows=4)[index]
        assert sorted(taken) == sorted(SOURCES[i] * 1000 + TARGETS[i] for i in expected)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["data.batch_tokens=0"], r"'data.batch_tokens': 0; allowed: a positive number"),
        (["data.batch_tokens=-64"], r"'data.batch_tokens': -64; allowed: a positive number"),
        (["data.batch_tokens=many"], r"'data.batch_tokens': expected int, got 'many'"),
        (["data.batch_tokens=512.5"], r"'data.batch_tokens': expected int, got 512.5"),
        (
            ["family=gpt", "task=causal_lm", "data.batch_tokens=512"],
            r"'data.batch_tokens': 512 is for the tasks \['seq2seq'\].*'causal_lm' packs",
        ),
        (
            ["family=bert", "task=masked_lm", "data.batch_tokens=512"],
            r"'data.batch_tokens': 512 is for .*'masked_lm' packs",
        ),
        (
            ["family=gpt", "task=causal_lm", "data.streaming=true", "data.batch_tokens=512"],
            r"'data.batch_tokens': 512 with data.streaming",
        ),
    ],
)
def test_bad_values_are_refused_naming_the_key(overrides, message):
    with pytest.raises(RecipeError, match=message):
        load_recipe(_recipe(), overrides)


def test_fine_tuning_is_refused():
    with pytest.raises(
        RecipeError, match=r"'data.batch_tokens': 512 is for .*'translation' is trained by transformers' Trainer"
    ):
        load_recipe(
            _recipe(), ["task=translation", "data.batch_tokens=512", "training.max_steps=2"], command="finetune"
        )


def _recipe(**training) -> dict:
    """A tiny Transformer reversing letter sequences of 5-20 tokens: lengths differ, so fixed batches pad."""
    return {
        "family": "transformer",
        "task": "seq2seq",
        "model": {
            "hidden_size": 32,
            "encoder_layers": 1,
            "decoder_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "dropout": 0.1,  # on: resuming must restore the RNG too
        },
        "tokenizer": {"vocab_size": 300, "min_frequency": 1},
        "data": {"dataset": "reversal", "block_size": 32, "max_examples": 240, "eval_examples": 24},
        "training": {
            "max_steps": 6,
            "batch_size": 8,
            "warmup_steps": 2,
            "eval_every": 100,
            "save_every": 100,
            "log_with": "none",
            "generation_max_new_tokens": 24,
        }
        | training,
    }


def test_a_token_budget_run_pads_less_than_fixed_batches(tmp_path):
    fixed = run(load_recipe(_recipe(output_dir=str(tmp_path / "fixed"))), progress=False)
    # 8 pairs of about 13 + 14 tokens: about the same real tokens a step
    budget = run(load_recipe(_recipe(output_dir=str(tmp_path / "budget")), ["data.batch_tokens=224"]), progress=False)
    assert 0.15 < fixed["padding_fraction"] and budget["padding_fraction"] < fixed["padding_fraction"] / 3
    assert (
        budget["padding_fraction"] == json.loads((tmp_path / "budget" / "metrics.json").read_text())["padding_fraction"]
    )
    assert 0.7 < budget["real_tokens"] / fixed["real_tokens"] < 1.4
    for summary in (fixed, budget):  # tokens: the padded source side, as before; real tokens: both sides, no padding
        assert summary["real_tokens"] > summary["tokens"] > 0
    rows = 240 - 12  # 5% held out
    assert fixed["epochs"] == pytest.approx(6 * 8 / rows)
    batches = token_budget_batches(*_lengths(tmp_path / "budget", rows), 224)
    assert budget["epochs"] == pytest.approx(6 / len(batches))


def _lengths(folder, rows):
    """The source and target lengths of the training pairs of a run's recipe, encoded as the run encoded them."""
    from transformers import AutoTokenizer

    from hf_seq.data import tasks

    recipe = load_recipe(json.loads((folder / "recipe.json").read_text()))
    prepared = tasks.prepare(recipe, tokenizer=AutoTokenizer.from_pretrained(folder))
    assert len(prepared.train) == rows
    return [len(ids) for ids in prepared.train["input_ids"]], [len(ids) for ids in prepared.train["labels"]]


def test_a_killed_token_budget_run_resumes_to_the_same_weights(tmp_path):
    # 114 training pairs, about 14 batches an epoch: the run crosses an epoch boundary after the resume
    recipe = _recipe(max_steps=24, save_every=6)
    recipe["data"] |= {"batch_tokens": 224, "max_examples": 120}
    _finish(_train(tmp_path, tmp_path / "whole", recipe))

    victim = _train(tmp_path, tmp_path / "killed", recipe, ["training.eval_every=1"])  # slower: killed mid-run
    kill_after_first_checkpoint(victim, tmp_path / "killed")
    output = _finish(_train(tmp_path, tmp_path / "killed", recipe, ["--resume", "training.eval_every=1"]))
    assert "resuming from" in output
    whole, killed = _weights(tmp_path / "whole"), _weights(tmp_path / "killed")
    for name in whole:
        torch.testing.assert_close(killed[name], whole[name], rtol=0, atol=0, msg=name)
    a, b = (json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("whole", "killed"))
    assert a["epochs"] > 1 and (a["real_tokens"], a["padding_fraction"]) == (b["real_tokens"], b["padding_fraction"])


def test_two_processes_train_like_one_with_accumulation(tmp_path):
    """P x A = 2 either way, so the same batches: 2 processes take every second pair, one process two micro-batches."""
    recipe = _recipe(max_steps=4)
    recipe["model"]["dropout"] = 0.0  # the processes draw their own dropout masks
    recipe["data"]["batch_tokens"] = 224
    _finish(_train(tmp_path, tmp_path / "one", recipe, ["training.gradient_accumulation_steps=2"]))
    launcher = (sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2")
    _finish(
        _train(
            tmp_path,
            tmp_path / "two",
            recipe,
            launcher=(*launcher, "--master_port", str(_free_port()), "-m", "hf_seq.cli"),
        )
    )
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    for name in a:
        torch.testing.assert_close(_without_key_bias(name, b[name]), _without_key_bias(name, a[name]), msg=name)
    one, two = (json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("one", "two"))
    assert one["real_tokens"] == two["real_tokens"]  # counted over both processes
    assert two["eval_loss"] == pytest.approx(one["eval_loss"], rel=1e-5)


def _without_key_bias(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """The weights less the key projection's bias: it shifts every attention score of a query alike, which the
    softmax ignores, so its gradient is rounding noise that Adam scales up to steps of the learning rate's size."""
    if name.endswith("qkv_proj.bias"):
        query, _, value = tensor.chunk(3)
        return torch.cat([query, value])
    return tensor.chunk(2)[1] if name.endswith("kv_proj.bias") else tensor
