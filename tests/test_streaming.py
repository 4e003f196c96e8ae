"""Streaming corpora (`data.streaming`): the stream packs as the cached path does (so a run without shuffling trains
on the same blocks to the same weights), its buffer shuffles by the seed, a killed run resumes to the same weights,
two processes read different documents; and `data.shuffle: false` keeps the cached path's blocks in order."""

import json
import os
import random
import subprocess
import sys
from types import SimpleNamespace

import datasets
import pytest
import torch
import yaml
from safetensors.torch import load_file
from transformers import AutoTokenizer

from hf_seq.data import corpora as data_lib
from hf_seq.data import tasks
from hf_seq.data.streaming import BlockStream, first_texts
from hf_seq.data.tokenization import train_bpe_tokenizer
from hf_seq.errors import InvalidValueError, MissingFileError
from hf_seq.training.pretraining import global_batch
from hf_seq.training.recipes import RecipeError, load_recipe
from tests.test_training import ROOT, TINY_GPT, _free_port, _weights, kill_after_first_checkpoint

WORDS = "the a of and to in is was he it for on that with as his by at from they this an be had not but are".split()


def write_corpus(path, documents: int, seed: int, name: str) -> str:
    """Blank-line-separated documents of random words, each headed by its own name (so no two are the same)."""
    rng = random.Random(seed)
    texts = [f"{name} {i}: " + " ".join(rng.choices(WORDS, k=rng.randint(4, 60))) + "." for i in range(documents)]
    path.write_text("\n\n".join(texts) + "\n")
    return str(path)


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))
    return {
        "train": write_corpus(tmp_path / "train.txt", 1500, 0, "doc"),
        "valid": write_corpus(tmp_path / "valid.txt", 40, 1, "held"),
    }


def recipe_of(corpus, **data) -> dict:
    recipe = json.loads(json.dumps(TINY_GPT))
    recipe["data"] = {"dataset": [corpus["train"]], "validation": [corpus["valid"]], "block_size": 32} | data
    return recipe


@pytest.fixture
def tokenizer(corpus, tmp_path):
    texts = list(data_lib.load_files(corpus["train"])["text"])
    train_bpe_tokenizer(texts, vocab_size=300).save_pretrained(tmp_path / "tok")
    return AutoTokenizer.from_pretrained(tmp_path / "tok")


def stream_of(corpus, tokenizer, seed=0, **data) -> BlockStream:
    recipe = recipe_of(corpus, streaming=True, **data)
    recipe["training"]["seed"] = seed
    return tasks.prepare(load_recipe(recipe), tokenizer=tokenizer).train


def blocks(stream: BlockStream, n: int) -> list[tuple]:
    return [tuple(row["input_ids"]) for row in stream.take(n)]


# ---------------------------------------------------------------------------------------------- the stream, in process
def test_unshuffled_stream_yields_the_cached_blocks_in_order_then_starts_again(corpus, tokenizer):
    cached = tasks.prepare(load_recipe(recipe_of(corpus)), tokenizer=tokenizer).train
    expected = [tuple(ids) for ids in cached["input_ids"]]
    stream = stream_of(corpus, tokenizer, shuffle=False)
    assert blocks(stream, len(expected)) == expected
    assert stream.epoch == 0 and stream.read == 1500 > data_lib.PACK_DOCUMENTS  # two groups of documents packed
    assert blocks(stream, 5) == expected[:5] and stream.epoch == 1  # the next epoch, in the same order


def test_masked_lm_streams_the_cached_blocks_between_cls_and_sep(corpus, tmp_path):
    texts = list(data_lib.load_files(corpus["train"])["text"])
    train_bpe_tokenizer(texts, vocab_size=300, style="bert").save_pretrained(tmp_path / "bert-tok")
    bert = AutoTokenizer.from_pretrained(tmp_path / "bert-tok")
    recipe = recipe_of(corpus, shuffle=False) | {
        "family": "bert",
        "model": {"hidden_size": 32, "num_attention_heads": 2},
    }
    cached = tasks.prepare(load_recipe(recipe), tokenizer=bert).train
    recipe["data"]["streaming"] = True
    stream = tasks.prepare(load_recipe(recipe), tokenizer=bert).train
    streamed = [row["input_ids"] for row in stream.take(len(cached))]
    assert streamed == cached["input_ids"]
    assert {(b[0], b[-1]) for b in streamed} == {(bert.cls_token_id, bert.sep_token_id)}


def test_shuffle_buffer_shuffles_by_the_seed(corpus, tokenizer):
    in_order = blocks(stream_of(corpus, tokenizer, shuffle=False), 3000)
    n = in_order.index(in_order[0], 1)  # one epoch's blocks (about 2,400), all different
    assert len(set(in_order[:n])) == n

    def epoch(seed):
        stream = stream_of(corpus, tokenizer, seed=seed, shuffle_buffer=200)
        return blocks(stream, n), stream

    first, stream = epoch(0)
    assert first == epoch(0)[0]  # the same seed: the same order
    assert first != epoch(1)[0]  # another seed: another order
    assert first != in_order[:n] and sorted(first) == sorted(in_order[:n])  # shuffled: every block once per epoch
    # a buffer of 200 blocks moves a block at most a few hundred places back, never before it was read
    assert max(first.index(b) - i for i, b in enumerate(in_order[:n])) > 50
    second = blocks(stream, n)
    assert stream.epoch == 1 and second != first and sorted(second) == sorted(first)


@pytest.mark.parametrize("taken", [0, 37, 1500, 2600])  # fresh, mid-group, in the second group, in the next epoch
def test_a_saved_stream_continues_with_the_same_blocks(corpus, tokenizer, tmp_path, taken):
    stream = stream_of(corpus, tokenizer, shuffle_buffer=100)
    stream.take(taken)
    stream.save(tmp_path, 0)
    expected = blocks(stream, 800)
    again = stream_of(corpus, tokenizer, shuffle_buffer=100)
    again.load(tmp_path, 0)
    assert blocks(again, 800) == expected
    other = BlockStream(again.documents, tokenizer, 32, tokenizer.eos_token_id, num_processes=2)
    with pytest.raises(InvalidValueError, match="split over 1 processes and is resumed with 2"):
        other.load(tmp_path, 0)


def test_a_hub_dataset_streams_its_train_split_and_scores_its_validation_split(corpus, tokenizer, monkeypatch):
    files = {"train": corpus["train"], "validation": corpus["valid"]}

    def hub(source, what, **kwargs):  # a Hub dataset with train and validation splits, offline
        assert source == "someone/corpus" and what == "data.dataset" and kwargs == {"streaming": True}
        return datasets.load_dataset("text", data_files=files, sample_by="paragraph", streaming=True)

    monkeypatch.setattr(data_lib, "load_hub_dataset", hub)
    recipe = load_recipe(recipe_of(corpus, dataset="someone/corpus", validation=None, streaming=True, shuffle=False))
    prepared = tasks.prepare(recipe, tokenizer=tokenizer)
    cached = tasks.prepare(load_recipe(recipe_of(corpus)), tokenizer=tokenizer)
    assert prepared.held_out["eval"]["input_ids"] == cached.held_out["eval"]["input_ids"]  # the Hub's own split
    assert blocks(prepared.train, len(cached.train)) == [tuple(ids) for ids in cached.train["input_ids"]]
    recipe.data.text_column = "body"
    with pytest.raises(InvalidValueError, match=r"train data has no column\(s\) \['body'\].*data.text_column"):
        tasks.prepare(recipe, tokenizer=tokenizer)


def test_a_stream_tokenizer_learns_from_the_first_characters():
    assert list(first_texts(["aaa", "bbb", "ccc", "ddd"], max_chars=4)) == ["aaa", "bbb"]
    assert list(first_texts(iter(["aaaa", "b"]), max_chars=4)) == ["aaaa"]


def test_processes_read_different_documents(corpus, tokenizer):
    def documents(rank):
        stream = stream_of(corpus, tokenizer, shuffle=False)
        stream.process_index, stream.num_processes = rank, 2
        text = tokenizer.decode([i for block in blocks(stream, 250) for i in block])
        return stream, {int(piece.split(":")[0]) for piece in text.split("doc ")[1:] if piece.split(":")[0].isdigit()}

    (first, zero), (second, one) = documents(0), documents(1)
    assert zero and one and not zero & one
    assert {i % 2 for i in zero} == {0} and {i % 2 for i in one} == {1}  # one file: every second document
    assert first.read == second.read


def test_cached_blocks_in_order_without_shuffle():
    rows = datasets.Dataset.from_dict({"input_ids": [[i] for i in range(40)]})
    t = SimpleNamespace(batch_size=8, gradient_accumulation_steps=2, seed=0)

    def collate(features):
        return {"input_ids": torch.tensor([f["input_ids"] for f in features])}

    def taken(step, shuffle, rank=0, processes=1):
        accelerator = SimpleNamespace(process_index=rank, num_processes=processes, device="cpu")
        batches = global_batch(rows, collate, step, t, accelerator, shuffle=shuffle)
        return [int(i) for b in batches for i in b["input_ids"].flatten()]

    assert taken(0, shuffle=False) == list(range(8))
    assert taken(3, shuffle=False) == list(range(24, 32))
    assert taken(5, shuffle=False) == list(range(0, 8))  # 40 blocks: 5 steps an epoch
    assert taken(1, shuffle=False, rank=1, processes=2) == [9, 11, 13, 15]
    assert taken(0, shuffle=True) != list(range(8))  # the default shuffles


# ---------------------------------------------------------------------------------------------- errors
def test_streaming_errors_name_the_key(corpus, tokenizer, tmp_path):
    def prepare(**data):
        recipe = recipe_of(corpus, streaming=True)
        recipe["data"] |= data
        return tasks.prepare(load_recipe(recipe), tokenizer=tokenizer)

    with pytest.raises(InvalidValueError, match="streaming needs data.validation: give a held-out file"):
        prepare(validation=None)
    with pytest.raises(MissingFileError, match="data.dataset: 'nobody/no-such-corpus'"):
        prepare(dataset="nobody/no-such-corpus")
    with pytest.raises(InvalidValueError, match="data.dataset='stdlib' is built into hf-seq"):
        prepare(dataset="stdlib")
    with pytest.raises(InvalidValueError, match=r"no column\(s\) \['body'\].*data.text_column"):
        prepare(text_column="body")
    (tmp_path / "small.txt").write_text("a few words\n\nand a few more\n")
    with pytest.raises(InvalidValueError, match="fewer than block_size=32 tokens"):
        prepare(dataset=[str(tmp_path / "small.txt")]).train.take(1)
    with pytest.raises(RecipeError, match="data.shuffle_buffer"):
        load_recipe(recipe_of(corpus, streaming=True, shuffle_buffer=0))
    classifier = {"family": "gpt", "task": "sequence_classification", "data": {"streaming": True}}
    with pytest.raises(RecipeError, match="'data.streaming'.*'causal_lm', 'masked_lm'"):
        load_recipe(classifier, command="finetune")


# ---------------------------------------------------------------------------------------------- training runs
def _train(tmp_path, out, recipe, extra=(), launcher=(sys.executable, "-m", "hf_seq.cli")):
    path = tmp_path / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    cmd = [*launcher, "train", str(path), f"training.output_dir={out}", "training.threads=1", *extra]
    env = os.environ | {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "HF_DATASETS_CACHE": str(tmp_path / "cache")}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(process) -> str:
    output = process.communicate(timeout=600)[0]
    assert process.returncode == 0, output
    return output


def test_streamed_run_without_shuffle_equals_the_cached_run(corpus, tmp_path):
    # the streamed run trains its tokenizer on the stream's first part; the cached run reuses it
    streamed = _finish(_train(tmp_path, tmp_path / "streamed", recipe_of(corpus, streaming=True, shuffle=False)))
    cached = recipe_of(corpus, shuffle=False)
    cached["tokenizer"] = {"path": str(tmp_path / "streamed")}
    _finish(_train(tmp_path, tmp_path / "cached", cached))
    a, b = _weights(tmp_path / "streamed"), _weights(tmp_path / "cached")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)
    metrics = json.loads((tmp_path / "streamed" / "metrics.json").read_text())
    assert metrics["tokens"] == 12 * 8 * 32, streamed
    assert metrics["eval_loss"] == json.loads((tmp_path / "cached" / "metrics.json").read_text())["eval_loss"]


def test_killed_streamed_run_resumes_to_the_same_weights(corpus, tmp_path):
    # 60 documents make about 100 blocks: 30 steps of 8 blocks run through more than two epochs of the stream
    small = write_corpus(tmp_path / "small.txt", 60, 2, "doc")
    recipe = recipe_of(corpus, dataset=[small], streaming=True, shuffle_buffer=40)
    recipe["training"] |= {"max_steps": 30, "eval_every": 10}
    _finish(_train(tmp_path, tmp_path / "whole", recipe))

    victim = _train(tmp_path, tmp_path / "killed", recipe, ["training.eval_every=1"])  # slower: killed mid-run
    kill_after_first_checkpoint(victim, tmp_path / "killed")
    checkpoint = sorted((tmp_path / "killed" / "checkpoints").glob("checkpoint-*"))[0]
    assert (checkpoint / "data_state_0.json").exists() and (checkpoint / "data_buffer_0.safetensors").exists()

    output = _finish(_train(tmp_path, tmp_path / "killed", recipe, ["--resume", "training.eval_every=1"]))
    assert "resuming from" in output
    whole, killed = _weights(tmp_path / "whole"), _weights(tmp_path / "killed")
    for name in whole:
        torch.testing.assert_close(killed[name], whole[name], rtol=0, atol=0, msg=name)


def test_two_processes_stream_their_own_documents(corpus, tmp_path):
    recipe = recipe_of(corpus, streaming=True, shuffle_buffer=50)
    recipe["training"] |= {"max_steps": 4, "save_every": 2}
    launcher = (sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2")
    launcher += ("--master_port", str(_free_port()), "-m", "hf_seq.cli")
    _finish(_train(tmp_path, tmp_path / "two", recipe, launcher=launcher))
    checkpoint = tmp_path / "two" / "checkpoints" / "checkpoint-2"
    states = [json.loads((checkpoint / f"data_state_{rank}.json").read_text()) for rank in (0, 1)]
    assert [s["documents_read"] for s in states] == [750, 750]  # one file of 1,500: every second document each
    held = [load_file(str(checkpoint / f"data_buffer_{rank}.safetensors"))["blocks"] for rank in (0, 1)]
    zero, one = ({tuple(b) for b in blocks.tolist()} for blocks in held)
    assert len(zero) > 10 and len(one) > 10 and not zero & one
    assert json.loads((tmp_path / "two" / "metrics.json").read_text())["tokens"] == 4 * 8 * 32
