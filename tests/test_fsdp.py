"""Fully sharded data parallelism (FSDP2) on two CPU processes over gloo, launched the ecosystem's way:
`accelerate launch --config_file recipes/accelerate/fsdp.yaml --num_processes 2 -m hf_seq.cli train ...`.

A sharded run must train the model one process trains, hold half of every parameter in each process while it
trains, resume after `kill -9` to the weights of the uninterrupted sharded run, and save one `model.safetensors`
that `from_pretrained` loads."""

import json
import sys
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from hf_seq.errors import InvalidValueError
from hf_seq.training import pretraining as training
from hf_seq.training import sharding
from tests.test_training import ROOT, _free_port, _train, _weights, kill_after_first_checkpoint, train_here

NO_DROPOUT = ["model.embedding_dropout=0.0", "model.hidden_dropout=0.0"]


def fsdp_launcher(config=ROOT / "recipes" / "accelerate" / "fsdp.yaml"):
    return (
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config), "--num_processes", "2",
        "--main_process_port", str(_free_port()), "-m", "hf_seq.cli",
    )  # fmt: skip


def finish(process) -> str:
    output = process.communicate(timeout=600)[0]
    assert process.returncode == 0, output
    return output


@pytest.mark.parametrize(
    "family_overrides",
    [
        [],
        # the recurrent layers are the units: nn.LSTM's flat weights must follow FSDP's gathered parameters
        [
            "family=rnn",
            "model={cell_type: lstm, hidden_size: 32, num_hidden_layers: 2, embedding_dropout: 0.0, hidden_dropout: 0.0, output_dropout: 0.0}",
        ],
    ],
    ids=["gpt", "lstm"],
)
def test_two_sharded_processes_train_like_one_and_save_one_model(tmp_path, family_overrides):
    steps = ["training.max_steps=4", "training.save_every=2", *NO_DROPOUT]
    if family_overrides:
        steps = ["training.max_steps=4", "training.save_every=2", *family_overrides]
    train_here(tmp_path, tmp_path / "one", steps)
    output = finish(_train(tmp_path, tmp_path / "two", steps, launcher=fsdp_launcher()))
    assert "FSDP2:" in output

    # while training, each process held half of every parameter: the checkpoint's two shards split the model
    checkpoint = tmp_path / "two" / "checkpoints" / "checkpoint-2"
    shards = [load_file(str(checkpoint / f"model_shard_{rank}.safetensors")) for rank in (0, 1)]
    whole = _weights(tmp_path / "one")
    total = sum(t.numel() for t in whole.values() if t.dim() > 0)
    held = [sum(t.numel() for t in shard.values()) for shard in shards]
    assert all(0 < h < total for h in held) and abs(held[0] - held[1]) <= 0.2 * total, (held, total)
    assert set(shards[0]) == set(shards[1])

    # the same weights as one process (DDP's tolerance), saved whole, under the model's own names
    sharded = _weights(tmp_path / "two")
    assert set(sharded) == set(whole)
    for name in whole:
        torch.testing.assert_close(sharded[name], whole[name], rtol=1e-4, atol=1e-5, msg=name)
    metrics = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert metrics["distributed_type"] == "FSDP" and metrics["num_processes"] == 2
    assert metrics["parameters_per_process"] == pytest.approx(0.5, abs=0.1)
    assert json.loads((tmp_path / "one" / "metrics.json").read_text())["distributed_type"] == "NO"
    assert "fully sharded data parallel (FSDP2)" in (tmp_path / "two" / "README.md").read_text()

    # the folder loads in a fresh library state, through the Auto class and the code saved beside the weights
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tmp_path / "two", trust_remote_code=True)
    for name, tensor in model.state_dict().items():
        if name in sharded:
            torch.testing.assert_close(tensor, sharded[name], rtol=0, atol=0)
    assert not list((tmp_path / "two").glob("_fsdp*.py")), "torch's FSDP files were saved as the model's code"


def test_a_killed_sharded_run_resumes_to_the_uninterrupted_weights(tmp_path):
    held_out = ["data.eval_fraction=0.5", "training.save_every=2"]
    finish(_train(tmp_path, tmp_path / "whole", held_out, launcher=fsdp_launcher()))

    victim = _train(tmp_path, tmp_path / "killed", [*held_out, "training.eval_every=1"], launcher=fsdp_launcher())
    kill_after_first_checkpoint(victim, tmp_path / "killed", tree=True)  # the launcher and its workers

    resumed = _train(
        tmp_path, tmp_path / "killed", [*held_out, "--resume", "training.eval_every=1"], launcher=fsdp_launcher()
    )
    assert "resuming from" in finish(resumed)
    whole, killed = _weights(tmp_path / "whole"), _weights(tmp_path / "killed")
    for name in whole:
        torch.testing.assert_close(killed[name], whole[name], rtol=0, atol=0, msg=name)


@pytest.mark.parametrize(
    "env, message",
    [
        ({"FSDP_VERSION": "1"}, "fsdp_version: 1; hf-seq shards with FSDP2"),
        ({"FSDP_AUTO_WRAP_POLICY": "SIZE_BASED_WRAP"}, "fsdp_auto_wrap_policy: 'SIZE_BASED_WRAP'; allowed"),
        ({"FSDP_OFFLOAD_PARAMS": "true"}, "fsdp_offload_params: true is not supported"),
        ({"ACCELERATE_USE_DEEPSPEED": "true"}, "a DeepSpeed launch config: .* recipes/accelerate/fsdp.yaml"),
    ],
)
def test_fsdp_settings_hf_seq_does_not_carry_out_are_refused(monkeypatch, env, message):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(InvalidValueError, match=message):
        sharding.requested()


def test_a_wrap_class_the_model_lacks_is_named(monkeypatch):
    from hf_seq import GPTConfig, GPTForCausalLM

    model = GPTForCausalLM(GPTConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2))
    settings = sharding.ShardingSettings(wrap_classes=("LlamaDecoderLayer",))
    with pytest.raises(InvalidValueError, match=r"\['LlamaDecoderLayer'\] are not modules of GPTForCausalLM.*GPTBlock"):
        sharding.shard(model, settings)


# ---------------------------------------------------------------------------------------- asked for, not started
def accelerate_launch(*flags):
    """An `accelerate launch` command line as its console script runs it (the parent of the training process)."""
    return [sys.executable, "/venv/bin/accelerate", "launch", *flags, "-m", "hf_seq.cli", "train", "recipe.yaml"]


FSDP_YAML = str(ROOT / "recipes" / "accelerate" / "fsdp.yaml")
CPU_YAML = str(ROOT / "recipes" / "accelerate" / "cpu.yaml")
ONE_PROCESS = SimpleNamespace(num_processes=1, distributed_type="DistributedType.NO", print=print)


def simple_launcher_env(monkeypatch, processes: int):
    """What accelerate's simple launcher (accelerate/utils/launch.py, prepare_simple_launcher_cmd_env) exports."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "NO")
    for key in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    if processes > 1:
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", "29500")


@pytest.mark.parametrize(
    "argv, processes, line",
    [
        (
            accelerate_launch("--config_file", FSDP_YAML, "--num_processes", "2", "--cpu"),
            2,
            "note: accelerate launch asked for FSDP over 2 processes, but its one-process launcher started 1 process, "
            "not distributed (leave out --cpu to start them)",
        ),
        (  # the config's own count (8) when --num_processes is not given; FSDP alone is also a shortfall
            accelerate_launch("--cpu", "--config_file", FSDP_YAML),
            2,
            "note: accelerate launch asked for FSDP over 8 processes, but its one-process launcher started 1 process",
        ),
        (
            accelerate_launch("--config_file", FSDP_YAML, "--num_processes", "1", "--cpu"),
            1,
            "note: accelerate launch asked for FSDP, but its one-process launcher started 1 process, not distributed",
        ),
        (
            [sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "3", "-m", "hf_seq.cli"],
            3,
            "note: accelerate launch asked for 3 processes, but its one-process launcher started 1 process",
        ),
        (  # a CPU config asking for processes: no --cpu to leave out
            accelerate_launch("--config_file", CPU_YAML, "--num_processes", "2"),
            2,
            "note: accelerate launch asked for 2 processes, but its one-process launcher started 1 process, not "
            "distributed (several CPU processes: torchrun, docs/cluster.md)",
        ),
        ([], 2, "note: accelerate launch asked for several processes, but its one-process launcher started 1 process"),
    ],
    ids=["fsdp-cpu-2", "fsdp-config-count", "fsdp-one-process", "module-launcher", "cpu-config", "argv-unreadable"],
)
def test_a_launch_asking_for_what_the_run_lacks_says_so_in_one_line(monkeypatch, capsys, argv, processes, line):
    """`accelerate launch --cpu` (its simple launcher) starts one process whatever the config's distributed type and
    --num_processes say; the run says so at the start, in one line, from what that launch exports and its command."""
    simple_launcher_env(monkeypatch, processes)
    monkeypatch.setattr(training, "_launcher_argv", lambda: argv)
    training.note_launch_shortfall(ONE_PROCESS, fsdp=None)
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 1 and printed[0].startswith(line), printed


@pytest.mark.parametrize(
    "argv, processes, world_size",
    [
        (accelerate_launch("--config_file", CPU_YAML), 1, None),  # one process asked for, one run
        (accelerate_launch("--cpu"), 1, None),
        (accelerate_launch("--config_file", FSDP_YAML, "--num_processes", "2"), 2, "2"),  # torch's launcher ran them
        (["python", "-m", "hf_seq.cli", "train", "recipe.yaml"], 0, None),  # no accelerate launch at all
    ],
    ids=["cpu-config", "cpu-flag", "torchrun-workers", "plain"],
)
def test_a_launch_that_got_what_it_asked_for_says_nothing(monkeypatch, capsys, argv, processes, world_size):
    if processes:
        simple_launcher_env(monkeypatch, processes)
    else:
        monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    if world_size:
        monkeypatch.setenv("WORLD_SIZE", world_size)
    monkeypatch.setattr(training, "_launcher_argv", lambda: argv)
    training.note_launch_shortfall(ONE_PROCESS, fsdp=None)
    assert capsys.readouterr().out == ""


def test_fsdp_launched_with_cpu_says_at_the_start_that_it_runs_one_process(tmp_path):
    """The real launch: `accelerate launch --config_file fsdp.yaml --num_processes 2 --cpu` runs one process."""
    launcher = (*fsdp_launcher()[:-2], "--cpu", "-m", "hf_seq.cli")
    small = ["training.max_steps=2", "training.eval_every=2", "data.max_chars=40000", "tokenizer.vocab_size=300"]
    output = finish(_train(tmp_path, tmp_path / "run", small, launcher=launcher))
    line = (
        "note: accelerate launch asked for FSDP over 2 processes, but its one-process launcher started 1 process, "
        "not distributed (leave out --cpu to start them)"
    )
    assert line in output.splitlines() and output.count("asked for FSDP") == 1, output
    assert output.index(line) < output.index("tokenizing"), output  # at the start, before the data is read
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert (metrics["distributed_type"], metrics["num_processes"]) == ("NO", 1)
