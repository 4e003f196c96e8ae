"""The training budget: training.max_seconds alone is the budget (no hidden step cap); with max_steps too, the run
ends at whichever comes first and says which. A fake clock makes every step last the same time, so the tests do not
depend on the machine's speed."""

import copy
import json
import types

import pytest

from hf_seq.training import finetuning
from hf_seq.training import pretraining as training
from hf_seq.training.recipes import DEFAULT_MAX_STEPS, RecipeError, load_recipe
from tests.test_training import TINY_GPT

SECONDS_PER_STEP = 10.0


@pytest.fixture
def fake_clock(monkeypatch):
    """Each reading of the clock is SECONDS_PER_STEP later than the last: the loop reads it once per step."""
    now = [0.0]

    def perf_counter():
        now[0] += SECONDS_PER_STEP
        return now[0]

    for module in (training, finetuning):
        monkeypatch.setattr(module, "time", types.SimpleNamespace(perf_counter=perf_counter, sleep=lambda s: None))


def _recipe(tmp_path, **budget):
    tree = copy.deepcopy(TINY_GPT)
    del tree["training"]["max_steps"]
    overrides = [f"training.{key}={value}" for key, value in budget.items()]
    quiet = ["training.eval_every=10000", "training.save_every=10000", "training.threads=1", "training.log_with=none"]
    return load_recipe(tree, [f"training.output_dir={tmp_path / 'run'}", *quiet, *overrides])


def test_the_step_budget_is_resolved_from_what_the_recipe_gives(tmp_path):
    assert _recipe(tmp_path).training.max_steps == DEFAULT_MAX_STEPS  # neither: 400 steps
    assert _recipe(tmp_path, max_seconds=1500).training.max_steps is None  # the time alone is the budget
    assert _recipe(tmp_path, max_seconds=1500, max_steps=30).training.max_steps == 30
    with pytest.raises(RecipeError, match="'training.max_steps' must be positive"):
        _recipe(tmp_path, max_steps=0)


def test_max_seconds_alone_trains_past_the_default_step_cap(tmp_path, fake_clock, capsys):
    # 4100 s at 10 s a step: 410 steps, more than the 400 a step cap would allow; the last one ends at 4100 s
    summary = training.run(_recipe(tmp_path, max_seconds=4100), progress=False).summary
    assert summary["steps"] == 410
    printed = capsys.readouterr().out
    assert "training.max_seconds=4100 is the budget (no step limit): the wsd schedule follows" in printed
    assert "step 10: at 10 s/step, training.max_seconds=4100 holds about 410 steps" in printed


@pytest.mark.parametrize(
    "max_steps, steps, says",
    [
        (30, 20, "training.max_seconds=200 holds about 20 steps"),
        (15, 15, "training.max_steps=15 ends the run, after about 150 s (within training.max_seconds=200)"),
    ],
)
def test_both_limits_the_run_says_which_one_ends_it(tmp_path, fake_clock, capsys, max_steps, steps, says):
    summary = training.run(_recipe(tmp_path, max_seconds=200, max_steps=max_steps), progress=False).summary
    assert summary["steps"] == steps
    assert summary["final_learning_rate"] == pytest.approx(0.0, abs=1e-12)  # whichever limit ended it, at the floor
    printed = capsys.readouterr().out
    assert f"training.max_steps={max_steps} and training.max_seconds=200 given: the run ends at whichever" in printed
    assert f"step 10: at 10 s/step, {says}" in printed


def test_finetune_stops_at_max_seconds_and_needs_max_steps(tmp_path, fake_clock):
    tree = {
        "family": "gpt",
        "task": "sequence_classification",
        "model": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 32},
        "tokenizer": {"vocab_size": 300, "min_frequency": 1},
        "data": {"dataset": "parentheses", "block_size": 32, "max_examples": 200, "eval_examples": 20},
        "training": {"batch_size": 8, "eval_every": 100, "save_every": 100, "output_dir": str(tmp_path / "ft")},
    }
    with pytest.raises(RecipeError, match="'training.max_steps': hf-seq finetune needs it"):
        load_recipe(tree, ["training.max_seconds=50"], command="finetune")
    recipe = load_recipe(tree, ["training.max_seconds=50", "training.max_steps=12"], command="finetune")
    assert finetuning.finetune(recipe)["steps"] == 5  # the clock passes 50 s at the end of step 5


@pytest.mark.parametrize("kind", ["wsd", "cosine"])
def test_a_run_that_slows_down_still_ends_on_its_budget_with_the_rate_at_its_floor(tmp_path, monkeypatch, kind):
    """Half the speed after the first 10% of the seconds: the schedule, a function of the seconds elapsed, still ends
    within 5% of the time limit with the learning rate at its floor, and the rate never rises after the warm-up. The
    clock moves only in the steps (10 s, then 20 s) and the evaluations (30 s each)."""
    now = [0.0]

    def slowing_step(*args, **kwargs):
        now[0] += 10.0 if now[0] < 400 else 20.0
        return train_step(*args, **kwargs)

    def slow_evaluation(*args, **kwargs):
        now[0] += 30.0
        return evaluate(*args, **kwargs)

    train_step, evaluate = training.train_step, training.tasks.evaluate
    monkeypatch.setattr(training, "time", types.SimpleNamespace(perf_counter=lambda: now[0], sleep=lambda s: None))
    monkeypatch.setattr(training, "train_step", slowing_step)
    monkeypatch.setattr(training.tasks, "evaluate", slow_evaluation)
    recipe = _recipe(tmp_path, max_seconds=4000, scheduler=kind)
    recipe.training.eval_every = 25
    result = training.run(recipe, progress=False)
    summary = result.summary
    assert abs(summary["seconds"] - 4000) <= 0.05 * 4000
    assert 190 <= summary["steps"] <= 215  # 40 steps at 10 s, then (4000 - 400 - 8 * 30) / 20 = 168 at 20 s
    assert summary["final_learning_rate"] == pytest.approx(0.0, abs=1e-12)
    rates = json.loads((tmp_path / "run" / "metrics.json").read_text())
    schedule = rates["schedule"]
    assert schedule["kind"] == kind and schedule["final_learning_rate"] == pytest.approx(0.0, abs=1e-12)
    phases = schedule["phases_seconds"]
    assert phases["warmup"] == 0 and 0 < phases["stable"] <= phases["decay"] < phases["end"] == summary["seconds"]
    if kind == "wsd":  # the decay takes the last 20% of the budget: it starts near 3,200 s (cosine's at the warm-up)
        assert 3200 - 30 <= phases["decay"] <= 3200 + 30
    learning_rates = result_rates(tmp_path)
    warm = recipe.training.warmup_steps
    assert all(b <= a + 1e-15 for a, b in zip(learning_rates[warm:], learning_rates[warm + 1 :]))
    assert max(learning_rates) == pytest.approx(recipe.training.learning_rate, rel=1e-3)


def result_rates(tmp_path) -> list[float]:
    """Each step's learning rate, as metrics.json records it ([step, rate], every step in a short run)."""
    kept = json.loads((tmp_path / "run" / "metrics.json").read_text())["learning_rates"]
    assert [step for step, _ in kept] == list(range(1, len(kept) + 1))
    return [rate for _, rate in kept]


def test_a_stable_run_continues_and_a_decay_branch_ends_at_the_floor(tmp_path, fake_clock):
    """decay_fraction 0: the run ends at its peak rate with a checkpoint; resumed with a larger budget it goes on at
    the peak, and a branch resumed with decay_fraction = b / (now + b) decays to the floor over the last b seconds."""
    peak = 3e-3
    stable = training.run(_recipe(tmp_path, max_seconds=200, decay_fraction=0), progress=False).summary
    assert stable["steps"] == 20 and stable["final_learning_rate"] == pytest.approx(peak)
    continued = training.run(_recipe(tmp_path, max_seconds=300, decay_fraction=0), resume=True, progress=False)
    rates = result_rates(tmp_path)
    assert continued.summary["steps"] > 25 and rates[20:] == pytest.approx([peak] * (len(rates) - 20))
    now = continued.summary["seconds"]  # where the branch starts, as its checkpoint says
    branch = _recipe(tmp_path, max_seconds=now + 100, decay_fraction=100 / (now + 100))
    summary = training.run(branch, resume=True, progress=False).summary
    rates = result_rates(tmp_path)[continued.summary["steps"] :]
    assert summary["seconds"] == pytest.approx(now + 100, abs=10)
    assert rates[0] < peak and rates[-1] == pytest.approx(0.0, abs=1e-12)
    assert all(b < a for a, b in zip(rates, rates[1:])) and len(rates) >= 8
