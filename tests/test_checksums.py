"""Weights damaged after a run saved them are refused by hf-seq, naming the file, instead of loading silently."""

import hashlib
import json
import re
import shutil
import struct

import pytest

from hf_seq.cli import main
from hf_seq.hub.checksums import ChecksumError, WeightValuesError
from hf_seq.hub.publish import push, upload_contents
from hf_seq.training.pretraining import evaluate_folder, run
from tests.test_interruption import _recipe


def flip_data_bytes(path, count=64):
    """Flip the lowest mantissa bit of `count` float32 values in the middle of a safetensors file's tensor data (past
    its 8-byte length and JSON header), as a failing disk would: the header parses and every value stays finite, so
    nothing but the record can tell (the weights are merely wrong)."""
    data = bytearray(path.read_bytes())
    start = 8 + struct.unpack("<Q", data[:8])[0]  # tensor data start 8-aligned, float32 tensors at multiples of 4
    middle = start + (len(data) - start) // 8 * 4
    for value in range(count):
        data[middle + 4 * value] ^= 0x01  # little-endian: byte 0 of a float32 holds its lowest mantissa bits
    path.write_bytes(bytes(data))


def damage_one_value(path, how: str) -> str:
    """Damage the float32 value in the middle of the file's largest tensor: `nan` writes 0xFF bytes over it (a NaN),
    `exponent` flips the highest bit of its exponent (0.02 becomes about 7e36: finite, and the logits NaN). Returns
    the tensor's name."""
    data = bytearray(path.read_bytes())
    header_size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + header_size])
    name, entry = max(
        ((k, v) for k, v in header.items() if k != "__metadata__"),
        key=lambda kv: -kv[1]["data_offsets"][0] + kv[1]["data_offsets"][1],
    )
    assert entry["dtype"] == "F32"
    first, last = entry["data_offsets"]
    at = 8 + header_size + first + (last - first) // 8 * 4
    if how == "nan":
        data[at : at + 4] = b"\xff" * 4
    else:
        data[at + 3] ^= 0x40  # little-endian: byte 3 holds the sign and the highest exponent bits
    path.write_bytes(bytes(data))
    return name


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("checksums") / "run"
    run(_recipe(out, "training.max_steps=2", "training.threads=1"), progress=False)
    return out


@pytest.fixture
def damaged(finished, tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(finished, folder)
    flip_data_bytes(folder / "model.safetensors")
    return folder


def test_a_finished_run_records_the_sha256_of_its_weights(finished):
    record = json.loads((finished / "checksums.json").read_text())
    expected = hashlib.sha256((finished / "model.safetensors").read_bytes()).hexdigest()
    assert record == {"sha256": {"model.safetensors": expected}}
    assert "checksums.json" in upload_contents(finished)  # published, so a Hub user can verify too


def test_evaluate_refuses_damaged_weights_and_a_folder_without_the_record_loads_as_before(damaged):
    with pytest.raises(ChecksumError, match=rf"{damaged / 'model.safetensors'} does not match .*delete"):
        evaluate_folder(damaged)
    (damaged / "checksums.json").unlink()  # what the message says to do after changing the weights on purpose
    assert "eval_loss" in evaluate_folder(damaged)


def test_generate_and_push_dry_run_refuse_damaged_weights(damaged, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", str(damaged), "--prompt", "def", "--max-new-tokens", "2"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert err.startswith("hf-seq: error: ") and "model.safetensors does not match" in err
    with pytest.raises(ChecksumError, match="model.safetensors does not match"):
        push(damaged, "someone/tiny", dry_run=True)


def test_a_missing_weight_file_is_named(damaged):
    (damaged / "model.safetensors").unlink()
    with pytest.raises(ChecksumError, match="model.safetensors is missing"):
        evaluate_folder(damaged)


def test_resume_treats_a_damaged_checkpoint_as_damage_and_uses_the_previous_one(tmp_path, capsys):
    out = tmp_path / "run"
    overrides = ("training.max_steps=6", "training.save_every=2", "training.threads=1")
    run(_recipe(out, *overrides), progress=False)  # keeps the checkpoints of steps 2 and 4
    (out / "model.safetensors").unlink()  # as if the run had died after step 4
    latest = out / "checkpoints" / "checkpoint-4"
    assert (latest / "checksums.json").exists()
    flip_data_bytes(latest / "model.safetensors")
    capsys.readouterr()
    summary = run(_recipe(out, *overrides), resume=True, progress=False)
    printed = capsys.readouterr().out
    assert f"{latest / 'model.safetensors'} does not match" in printed
    assert "(step 2)" in printed and summary["steps"] == 6


@pytest.mark.parametrize(
    "how, says",
    [("nan", "holds NaN or infinite values"), ("exponent", r"holds a value of magnitude \S+e\+\d+, beyond 1e\+10")],
)
def test_without_a_record_damaged_weights_are_refused_naming_the_tensor(finished, tmp_path, capsys, how, says):
    folder = tmp_path / "run"
    shutil.copytree(finished, folder)
    (folder / "checksums.json").unlink()  # as save_pretrained leaves a folder
    name = damage_one_value(folder / "model.safetensors", how)
    named = rf"{folder / 'model.safetensors'}: tensor {name} {says}"
    with pytest.raises(WeightValuesError, match=named):
        evaluate_folder(folder)
    with pytest.raises(WeightValuesError, match=named):
        push(folder, "someone/tiny", dry_run=True)
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", str(folder), "--prompt", "def", "--max-new-tokens", "2"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("hf-seq: error: ") and err.count("\n") == 1, err
    assert re.search(named, err)
    # a run that starts from the folder (model.from_pretrained) refuses it the same way, before any training
    from hf_seq.training.finetuning import finetune
    from hf_seq.training.recipes import load_recipe

    tree = {"family": "gpt", "task": "sequence_classification", "model": {"from_pretrained": str(folder)}}
    tree |= {"data": {"dataset": "parentheses", "block_size": 32, "max_examples": 64, "eval_examples": 8}}
    tree |= {"training": {"batch_size": 8, "max_steps": 1, "output_dir": str(tmp_path / "from-damaged")}}
    with pytest.raises(WeightValuesError, match=named):
        finetune(load_recipe(tree, command="finetune"))
