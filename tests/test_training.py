"""The recipe-driven training loop: recipes are checked before training, a killed run resumes to the same weights,
and two processes train to the same result as one."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from hf_seq.training.recipes import RecipeError, load_recipe

ROOT = Path(__file__).resolve().parents[1]
TINY_GPT = {
    "family": "gpt",
    "model": {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "max_position_embeddings": 32,
        "embedding_dropout": 0.1,  # dropout on: resuming must restore the RNG too
        "attention_dropout": 0.0,
        "hidden_dropout": 0.1,
    },
    "tokenizer": {"vocab_size": 400},
    "data": {"dataset": "stdlib", "block_size": 32, "max_chars": 150_000, "eval_examples": 16},
    "training": {
        "max_steps": 12,
        "batch_size": 8,
        "learning_rate": 3e-3,
        "warmup_steps": 2,
        "eval_every": 6,
        "save_every": 3,
    },
}


def write_recipe(tmp_path, recipe, name="recipe.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(recipe))
    return path


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["training.max_stepz=3"], r"unknown recipe key\(s\) \['training.max_stepz'\]"),
        (["training.max_steps=three"], r"'training.max_steps': expected int"),
        (["training.scheduler=exponential"], r"allowed values: \['wsd', 'cosine'"),
        (["model.hidden_sise=64"], r"model.hidden_sise"),
        (["model.position_embedding_type=absolute"], r"allowed values: \['learned'"),
        (
            ["task=masked_lm"],
            r"family 'hf_seq_gpt' cannot do task 'masked_lm'; it can do: \['causal_lm', 'time_series', 'music'\]",
        ),
        (["family=lstm-ish"], r"unknown hf-seq family 'lstm-ish'"),
        (["training.batch_size=10", "training.gradient_accumulation_steps=4"], "divisible"),
        (["training.max_steps"], "key=value"),
        (["training.log_with=wandb"], "wandb is not installed"),
    ],
)
def test_bad_recipes_fail_before_training_naming_the_key(overrides, message):
    with pytest.raises(RecipeError, match=message):
        load_recipe(TINY_GPT, overrides)


def test_overrides_are_typed():
    recipe = load_recipe(
        TINY_GPT,
        [
            "training.learning_rate=1e-4",
            "model.hidden_size=64",
            "training.log_with=null",
            "training.mixed_precision=no",
        ],
    )
    assert recipe.training.mixed_precision == "no"
    assert recipe.training.learning_rate == 1e-4 and recipe.model["hidden_size"] == 64
    assert recipe.task == "causal_lm"


def _train(tmp_path, out, extra=(), launcher=(sys.executable, "-m", "hf_seq.cli"), **popen):
    recipe = write_recipe(tmp_path, TINY_GPT)
    # one thread: runs compared bit for bit must not split their products differently (the default follows the load)
    cmd = [*launcher, "train", str(recipe), f"training.output_dir={out}", "training.threads=1", *extra]
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen
    )


def train_here(tmp_path, out, extra=()):
    """`_train`'s run in this process, for the reference runs the subprocesses are compared with: the same command
    and recipe, one thread, without a fresh interpreter's imports (about 9 s of a core here)."""
    from hf_seq.cli import main

    recipe = write_recipe(tmp_path, TINY_GPT)
    assert main(["train", str(recipe), f"training.output_dir={out}", "training.threads=1", *extra]) == 0


def _weights(folder):
    return load_file(str(Path(folder) / "model.safetensors"))


# half the files held out: evaluating after every step is then slow enough to interrupt a run mid-way
HELD_OUT = ["data.eval_fraction=0.5"]


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (torch's launcher starts its workers in sessions of their own)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def kill_after_first_checkpoint(process, output_dir, tree: bool = False) -> None:
    """SIGKILL a training run once its first checkpoint is complete (with `tree`, every process below it too, as a
    scheduler kills a job), and check that it had not finished."""
    checkpoints = Path(output_dir) / "checkpoints"
    deadline = time.time() + 300
    while not list(checkpoints.glob("checkpoint-*/state.json")) and time.time() < deadline:
        time.sleep(0.05)
    for pid in [process.pid, *(descendants(process.pid) if tree else [])]:
        os.kill(pid, signal.SIGKILL)
    process.communicate()
    assert process.returncode == -signal.SIGKILL
    assert not (Path(output_dir) / "model.safetensors").exists()


def test_killed_run_resumes_to_the_same_weights(tmp_path):
    train_here(tmp_path, tmp_path / "whole", HELD_OUT)

    # evaluating after every step slows the victim down (so it is killed mid-run) without changing its weights
    victim = _train(tmp_path, tmp_path / "killed", [*HELD_OUT, "training.eval_every=1"])
    kill_after_first_checkpoint(victim, tmp_path / "killed")

    resumed = _train(tmp_path, tmp_path / "killed", [*HELD_OUT, "--resume", "training.eval_every=1"])
    output = resumed.communicate(timeout=600)[0]
    assert resumed.returncode == 0, output
    assert "resuming from" in output
    whole, killed = _weights(tmp_path / "whole"), _weights(tmp_path / "killed")
    for name in whole:
        torch.testing.assert_close(killed[name], whole[name], rtol=0, atol=0, msg=name)

    # artefacts of a finished run: card with the measured perplexity, loss curve, metrics
    card = (tmp_path / "whole" / "README.md").read_text()
    assert "library_name: transformers" in card and "Bits per byte" in card
    assert (tmp_path / "whole" / "loss_curve.png").stat().st_size > 1000


def test_starting_over_an_existing_run_is_refused(tmp_path):
    out = tmp_path / "run"
    (out / "checkpoints" / "checkpoint-3").mkdir(parents=True)
    (out / "checkpoints" / "checkpoint-3" / "state.json").write_text("{}")  # written last: a complete checkpoint
    recipe = load_recipe(TINY_GPT, [f"training.output_dir={out}"])
    from hf_seq.training.pretraining import run

    with pytest.raises(FileExistsError, match="--resume"):
        run(recipe, progress=False)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_two_processes_train_like_one(tmp_path):
    """Data parallelism over gloo on CPU: 2 processes x 4 rows == 1 process x 8 rows."""
    train_here(tmp_path, tmp_path / "one", ["training.max_steps=4", "model.embedding_dropout=0.0", "model.hidden_dropout=0.0"])
    launcher = (
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(_free_port()),
        "-m",
        "hf_seq.cli",
    )
    two = _train(
        tmp_path,
        tmp_path / "two",
        ["training.max_steps=4", "model.embedding_dropout=0.0", "model.hidden_dropout=0.0"],
        launcher=launcher,
    )
    out_two = two.communicate(timeout=600)[0]
    assert two.returncode == 0, out_two
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-4, atol=1e-5, msg=name)


def test_a_compiled_run_saves_the_models_own_weights(tmp_path):
    """`training.compile`: the saved folder holds the model's own parameter names (not torch.compile's
    `_orig_mod.` ones) and loads with from_pretrained."""
    out = tmp_path / "compiled"
    run = _train(tmp_path, out, ["training.compile=true", "training.max_steps=2", "training.eval_every=2"])
    output = run.communicate(timeout=600)[0]
    assert run.returncode == 0, output
    weights = _weights(out)
    assert weights and not [name for name in weights if "_orig_mod" in name]
    from hf_seq import GPTForCausalLM

    model = GPTForCausalLM.from_pretrained(out)
    for name, tensor in model.state_dict().items():
        if name in weights:
            torch.testing.assert_close(tensor, weights[name], rtol=0, atol=0)


def test_select_by_loss_saves_the_best_evaluation_and_patience_stops(tmp_path):
    """A learning rate far too high makes the held-out loss rise after its first steps: the saved model must be the
    best evaluation's (evaluate on the folder reproduces that loss exactly), and patience stops the run two
    evaluations after it."""
    out = tmp_path / "selected"
    overrides = ["training.select_by=loss", "training.patience=2", "training.eval_every=1", "training.max_steps=12"]
    overrides += ["training.learning_rate=0.3", "training.warmup_steps=0", "training.scheduler=constant"]
    overrides += ["model.embedding_dropout=0.0", "model.hidden_dropout=0.0"]
    run = _train(tmp_path, out, overrides)
    output = run.communicate(timeout=600)[0]
    assert run.returncode == 0, output
    metrics = json.loads((out / "metrics.json").read_text())
    losses = {e["step"]: e["eval_loss"] for e in metrics["evaluations"]}
    best = min(losses, key=losses.get)
    assert metrics["best_step"] == best and metrics["eval_loss"] == losses[best]
    assert best < max(losses), "the loss never rose: the test does not test selection"
    assert metrics["stopped_early"] == best + 2 == max(losses)

    from hf_seq.training.pretraining import evaluate_folder

    assert evaluate_folder(out)["eval_loss"] == losses[best]
