"""Seeded mutations of every shipped recipe through the loader: each one loads or is refused with a `UserError` (one
line at the command), never another exception; and a few accepted odd ones train two steps to finite losses or stop
with a `UserError`."""

import math
import random

import pytest
import yaml

from hf_seq.errors import UserError
from hf_seq.training.recipes import load_recipe, recipe_command, shipped_recipes

SEED, MUTATIONS = 0, 400
ODD_VALUES = [0, -1, 1, 10**30, 1e30, -1e-9, float("nan"), float("inf"), float("-inf"), "", None, [], {}, "abc",
              [1, 2], {"a": 1}, True, 2**63, 0.5, "1e30"]  # fmt: skip


def _shipped() -> dict[str, dict]:
    return {name: yaml.safe_load(path.read_text()) for name, path in sorted(shipped_recipes().items())}


def _misspelt(key: str, rng: random.Random) -> str:
    i = rng.randrange(len(key))
    return key[:i] + key[i + 1 :] if len(key) > 3 else key + "x"


def mutate(tree: dict, rng: random.Random) -> tuple[dict, str]:
    """One mutation of a recipe tree, and what it did."""
    sections = [k for k, v in tree.items() if isinstance(v, dict)]
    section = rng.choice(sections)
    kind = rng.choice(["value", "value", "value", "misspelt", "scalar section", "top value"])
    if kind == "scalar section":
        tree[section] = rng.choice([5, "x", None, [1]])
        return tree, f"{section}={tree[section]!r}"
    if kind == "top value":
        key = rng.choice(["family", "task"])
        tree[key] = rng.choice(ODD_VALUES)
        return tree, f"{key}={tree[key]!r}"
    from hf_seq.training.recipes import DataRecipe, TrainingRecipe

    known = {"data": DataRecipe.__dataclass_fields__, "training": TrainingRecipe.__dataclass_fields__}
    keys = sorted({*tree[section], *known.get(section, ())}) or ["x"]
    key = rng.choice(keys)
    if kind == "misspelt":
        tree[section][_misspelt(key, rng)] = tree[section].pop(key, 1)
        return tree, f"{section}.{key} misspelt"
    tree[section][key] = rng.choice(ODD_VALUES)
    return tree, f"{section}.{key}={tree[section][key]!r}"


def test_every_mutation_loads_or_is_a_user_error():
    rng, shipped, outcomes = random.Random(SEED), _shipped(), {"loaded": [], "refused": 0}
    for _ in range(MUTATIONS):
        name = rng.choice(sorted(shipped))
        tree, what = mutate(yaml.safe_load(yaml.safe_dump(shipped[name])), rng)
        command = recipe_command(tree) if isinstance(tree.get("task"), str | None) else "train"
        try:
            load_recipe(tree, command=command)
        except UserError as error:
            assert str(error) and "\n" not in str(error).strip(), (name, what, str(error))
            outcomes["refused"] += 1
        except Exception as error:  # noqa: BLE001  (the point: anything else is a bug)
            pytest.fail(f"{name} with {what}: {type(error).__name__}: {error}")
        else:
            outcomes["loaded"].append((name, what))
    # the mutations are odd enough to be refused mostly, yet some are accepted
    assert outcomes["refused"] > MUTATIONS / 2 and outcomes["loaded"], outcomes


@pytest.mark.parametrize(
    "overrides",
    [["training.weight_decay=0"], ["training.warmup_steps=0"], ["training.max_grad_norm=0"],
     ["training.learning_rate=1e30", "training.warmup_steps=0"], ["model.hidden_dropout=0.99"]],
)  # fmt: skip
def test_accepted_odd_values_train_two_steps_to_finite_losses_or_a_user_error(tmp_path, overrides):
    from hf_seq.training.pretraining import run
    from tests.test_training import TINY_GPT

    recipe = load_recipe(TINY_GPT, [f"training.output_dir={tmp_path / 'run'}", "training.log_with=none",
                                    "training.max_steps=2", "data.max_chars=30000", "training.threads=1",
                                    *overrides])  # fmt: skip
    try:
        result = run(recipe, progress=False)
    except UserError as error:
        assert "diverged" in str(error), error
        return
    assert all(math.isfinite(e["eval_loss"]) for e in result.evaluations), result.evaluations
