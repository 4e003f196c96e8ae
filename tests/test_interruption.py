"""Interruption, resume and overwrite: no lost work, no silent restart, no code run from a checkpoint folder."""

import json
import pickle
import signal
import time
from pathlib import Path

import pytest
import torch

from hf_seq.training.pretraining import run
from hf_seq.training.recipes import RecipeError, load_recipe
from tests.test_training import HELD_OUT, TINY_GPT, _train, _weights, train_here


def _recipe(out, *overrides):
    return load_recipe(TINY_GPT, [f"training.output_dir={out}", "training.log_with=none", *overrides])


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """An uninterrupted run, the reference for every resumed one."""
    tmp = tmp_path_factory.mktemp("whole")
    train_here(tmp, tmp / "run", HELD_OUT)
    return _weights(tmp / "run")


def _interrupt(tmp_path, out, signum):
    victim = _train(tmp_path, out, [*HELD_OUT, "training.eval_every=1"])
    deadline = time.time() + 300
    while not list((out / "checkpoints").glob("checkpoint-*/state.json")) and time.time() < deadline:
        time.sleep(0.05)
    victim.send_signal(signum)
    return victim, victim.communicate(timeout=300)[0]


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_saves_the_current_step_and_resume_finishes_identically(tmp_path, whole, signum, code):
    out = tmp_path / "run"
    victim, output = _interrupt(tmp_path, out, signum)
    assert victim.returncode == code, output
    assert "--resume" in output and f"{signal.Signals(signum).name}: saved a checkpoint of step" in output
    step = int(output.split("saved a checkpoint of step ")[1].split()[0])
    assert (out / "checkpoints" / f"checkpoint-{step}" / "state.json").exists()
    assert not (out / "model.safetensors").exists()

    resumed = _train(tmp_path, out, [*HELD_OUT, "--resume", "training.eval_every=1"])
    output = resumed.communicate(timeout=600)[0]
    assert resumed.returncode == 0, output
    assert f"(step {step})" in output
    for name, tensor in _weights(out).items():
        torch.testing.assert_close(tensor, whole[name], rtol=0, atol=0, msg=name)


class _Exploit:
    def __reduce__(self):
        import pathlib

        return (pathlib.Path.touch, (pathlib.Path(MARKER),))


MARKER = ""


def test_resume_never_unpickles_a_planted_file_and_falls_back_to_an_intact_checkpoint(tmp_path, whole):
    global MARKER
    out = tmp_path / "run"
    finished = _train(tmp_path, out, HELD_OUT)  # keeps the checkpoints of steps 6 and 9
    output = finished.communicate(timeout=600)[0]
    assert finished.returncode == 0, output
    (out / "model.safetensors").unlink()  # as if the run had died after step 9
    MARKER = str(tmp_path / "code-ran")
    latest = out / "checkpoints" / "checkpoint-9"
    for planted in latest.glob("random_states_*.pkl"):
        planted.write_bytes(pickle.dumps({"state": _Exploit()}))
    resumed = _train(tmp_path, out, [*HELD_OUT, "--resume"])
    output = resumed.communicate(timeout=600)[0]
    assert resumed.returncode == 0, output
    assert not (tmp_path / "code-ran").exists(), "a pickle from the checkpoint folder ran"
    assert f"checkpoint {latest} does not load" in output and "(step 6)" in output
    for name, tensor in _weights(out).items():
        torch.testing.assert_close(tensor, whole[name], rtol=0, atol=0, msg=name)


def test_a_finished_run_is_not_overwritten_without_overwrite(tmp_path):
    out = tmp_path / "run"
    run(_recipe(out, "training.max_steps=2"), progress=False)
    before = (out / "model.safetensors").read_bytes()
    with pytest.raises(FileExistsError, match=f"{out}.*--overwrite"):
        run(_recipe(out, "training.max_steps=2", "training.learning_rate=0.1"), progress=False)
    assert (out / "model.safetensors").read_bytes() == before
    run(_recipe(out, "training.max_steps=2", "training.learning_rate=0.1"), progress=False, overwrite=True)
    assert (out / "model.safetensors").read_bytes() != before


def test_a_run_that_stopped_before_its_first_checkpoint_does_not_block_the_next(tmp_path):
    """A run whose data did not load (a mistyped path) left only its recipe behind: nothing to resume, nothing to
    lose. The same command with the path corrected trains, without --overwrite; a run with a checkpoint is still
    protected."""
    out = tmp_path / "run"
    with pytest.raises(FileNotFoundError, match="data.dataset"):
        run(_recipe(out, "data.dataset=" + str(tmp_path / "typo.txt")), progress=False)
    assert (out / "checkpoints" / "recipe.json").exists()
    run(_recipe(out, "training.max_steps=2", "training.save_every=1"), progress=False)
    (out / "model.safetensors").unlink()
    (out / "config.json").unlink()  # as if killed after its checkpoints
    with pytest.raises(FileExistsError, match="checkpoints.*--resume"):
        run(_recipe(out, "training.max_steps=2"), progress=False)


def test_resume_when_no_checkpoint_loads_is_a_user_error_naming_the_way_out(tmp_path):
    from hf_seq.errors import UserError

    out = tmp_path / "run"
    run(_recipe(out, "training.max_steps=2", "training.save_every=1"), progress=False)
    for checkpoint in (out / "checkpoints").glob("checkpoint-*"):
        (checkpoint / "model.safetensors").write_bytes(b"")
    with pytest.raises(UserError, match="no checkpoint .* loads.*--overwrite") as error:
        run(_recipe(out, "training.max_steps=2"), resume=True, progress=False)
    assert isinstance(error.value, RuntimeError)  # what it was before: code catching that still does


def test_resume_without_a_checkpoint_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no run to resume"):
        run(_recipe(tmp_path / "empty"), resume=True, progress=False)


def test_resume_with_a_changed_recipe_lists_the_differences(tmp_path):
    out = tmp_path / "run"
    run(_recipe(out, "training.max_steps=4", "training.save_every=2"), progress=False)
    (out / "model.safetensors").unlink()
    with pytest.raises(RecipeError, match=r"training.learning_rate: 0.003 -> 0.1"):
        run(_recipe(out, "training.max_steps=4", "training.learning_rate=0.1"), resume=True, progress=False)
    # max_steps may change: the run goes on to the new end
    summary = run(_recipe(out, "training.max_steps=6", "training.save_every=2"), resume=True, progress=False)
    assert summary["steps"] == 6


def test_fp16_on_a_cpu_is_refused_with_the_alternative(tmp_path):
    with pytest.raises(RecipeError, match="fp16.*bf16"):
        run(_recipe(tmp_path / "run", "training.mixed_precision=fp16"), progress=False)


def test_bf16_on_a_cpu_trains_and_saves_fp32_weights(tmp_path):
    # a process of its own: accelerate fixes the mixed precision of a process at its first Accelerator
    process = _train(tmp_path, tmp_path / "run", ["training.max_steps=3", "training.mixed_precision=bf16"])
    output = process.communicate(timeout=600)[0]
    assert process.returncode == 0, output
    summary = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert torch.isfinite(torch.tensor(summary["final_train_loss"]))
    assert {t.dtype for t in _weights(tmp_path / "run").values()} == {torch.float32}


def test_a_full_disk_during_a_save_names_the_checkpoint_and_keeps_the_earlier_one(tmp_path, monkeypatch):
    import errno

    from accelerate import Accelerator

    out = tmp_path / "run"
    real_save = Accelerator.save_state
    calls = []

    def fill_the_disk(self, output_dir=None, **kwargs):
        calls.append(output_dir)
        if len(calls) == 2:  # the second checkpoint: write part of it, then run out of space
            Path(output_dir).mkdir(parents=True, exist_ok=True)
            (Path(output_dir) / "model.safetensors").write_bytes(b"\0" * 10)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(self, output_dir, **kwargs)

    monkeypatch.setattr(Accelerator, "save_state", fill_the_disk)
    with pytest.raises(OSError, match=r"checkpoint of step 6 .*No space left.*checkpoint-3 is intact.*--resume"):
        run(_recipe(out), progress=False)
    monkeypatch.setattr(Accelerator, "save_state", real_save)
    summary = run(_recipe(out), resume=True, progress=False)  # the half-written folder is never read
    assert summary["steps"] == 12


def test_a_half_written_checkpoint_is_never_read(tmp_path):
    out = tmp_path / "run"
    run(_recipe(out, "training.max_steps=4", "training.save_every=2"), progress=False)
    (out / "model.safetensors").unlink()
    partial = out / "checkpoints" / ".partial-checkpoint-4"  # what a kill -9 in the middle of a save leaves
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"\0" * 10)
    summary = run(_recipe(out, "training.max_steps=4", "training.save_every=2"), resume=True, progress=False)
    assert summary["steps"] == 4


def test_a_repeated_sigterm_still_saves_and_a_second_ctrl_c_stops_at_once():
    """On a cluster one preemption notice can reach a process twice (Slurm signals the whole job step, torchrun's
    agent forwards its own copy): the run must still finish its step and save. A Ctrl-C after any stop request is the
    user's "stop now"."""
    from hf_seq.training.pretraining import StopRequest

    with StopRequest() as stop:
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)
        assert stop.signal == "SIGTERM"
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) is not stop._handle  # the previous handlers are back
