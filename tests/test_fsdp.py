"""Fully sharded data parallelism (FSDP2) on two CPU processes over gloo, launched the ecosystem's way:
`accelerate launch --config_file recipes/accelerate/fsdp.yaml --num_processes 2 -m hf_seq.cli train ...`.

A sharded run must train the model one process trains, hold half of every parameter in each process while it
trains, resume after `kill -9` to the weights of the uninterrupted sharded run, and save one `model.safetensors`
that `from_pretrained` loads."""

import json
import sys

import pytest
import torch
from safetensors.torch import load_file

from hf_seq import sharding
from hf_seq.errors import InvalidValueError
from tests.test_training import ROOT, _free_port, _train, _weights, kill_after_first_checkpoint

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
    finish(_train(tmp_path, tmp_path / "one", steps))
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
