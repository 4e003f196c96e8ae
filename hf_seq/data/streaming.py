"""Streaming corpora (`data.streaming: true`): packed, shuffled, resumable blocks read from a `datasets`
IterableDataset, for corpora larger than the disk. Nothing is cached: documents are read, tokenized and packed
as training asks for blocks.

Order. Process p of P reads its own share of the documents (`datasets.distributed.split_dataset_by_node`: whole
shards, i.e. files, when P divides their number, else every P-th document), in document order. Each group of
`data.PACK_DOCUMENTS` (1,000) documents is tokenized and packed as the cached path packs it (`data.pack_token_ids`:
a separator after each document, the tail shorter than a block dropped per group), so with `data.shuffle: false`
and one process the stream yields the cached path's blocks in the cached path's order. The blocks enter a buffer:
while it holds fewer than `data.shuffle_buffer` blocks the next group is read, then one block is drawn from it,
uniformly, by a `random.Random` seeded with (seed, epoch) (with `data.shuffle: false`, the oldest block). When the
documents end, the buffer is drawn empty, then the stream starts again at epoch + 1 under the next seed: every
epoch yields each of its blocks once, and epochs do not mix.

State. Where a process's stream stands is: the epoch, the position in the documents
(`IterableDataset.state_dict()`: shard and example index, after the last group read), the blocks in the buffer
and the buffer's RNG. `datasets` restores the position but not a shuffle buffer of its own ("examples from
shuffle buffers are lost when resuming", its `state_dict` docs), so the buffer is kept here. `save` writes
`data_state_{rank}.json` (epoch, position, RNG) and `data_buffer_{rank}.safetensors` (the buffer, one row per
block) into a checkpoint; `load` reads them back and runs no code. A resumed stream yields exactly the blocks the
uninterrupted one would have.
"""

import itertools
import json
import random
from collections import deque
from pathlib import Path

import datasets
import torch
from datasets.distributed import split_dataset_by_node
from safetensors.torch import load_file, save_file

from hf_seq.data import corpora as data_lib
from hf_seq.errors import InvalidValueError, MissingFileError

# A tokenizer trained for a stream (no tokenizer.path) learns from the first documents, up to this many characters.
TOKENIZER_SAMPLE_CHARS = 5_000_000


def load_splits(data, columns: dict[str, str]) -> dict:
    """`train`: the documents of `data.dataset` as an IterableDataset (a Hub dataset's train split, or local files
    read as `data.load_files` reads them); `validation` (and `test`): read whole, as the cached path reads them, from
    `data.validation` / `data.test` (files, or splits of the Hub dataset), else the Hub dataset's own splits.
    Columns are renamed to the task's names (`columns`: task's name -> the dataset's column)."""
    if isinstance(data.dataset, str) and data.dataset in data_lib.EMBEDDED:
        raise InvalidValueError(
            f"data.streaming: data.dataset={data.dataset!r} is built into hf-seq and small: set data.streaming false, "
            "or stream a Hub dataset or local files"
        )
    held_out = {split: getattr(data, split) for split in ("validation", "test")}
    if data_lib._looks_like_files(data.dataset):
        if held_out["validation"] is None:
            raise InvalidValueError(
                f"streaming needs data.validation: give a held-out file (data.dataset={data.dataset!r} is local "
                "files, and a stream holds out no part of them)"
            )
        hub = {"train": data_lib.load_files(data.dataset, streaming=True)}
    else:
        hub = data_lib.load_hub_dataset(data.dataset, what="data.dataset", streaming=True)
        if "train" not in hub:
            raise InvalidValueError(f"data.dataset: {data.dataset!r} has no train split (splits: {list(hub)})")
    splits = {"train": hub["train"] if data.max_examples is None else hub["train"].take(data.max_examples)}
    for split, named in held_out.items():
        if named is None and split in hub:  # the Hub dataset's own held-out split
            named = split
        if named is None:
            continue
        if isinstance(named, str) and named in hub and named != "train":
            splits[split] = datasets.Dataset.from_list(list(hub[named]))  # held-out sets are small
        elif data_lib._looks_like_files(named):
            splits[split] = data_lib.load_files(named, what=f"data.{split}")
        else:
            raise MissingFileError(
                f"data.{split}: {named!r} is neither a file nor a held-out split of {data.dataset!r} "
                f"(splits: {sorted(set(hub) - {'train'})})"
            )
    if splits["train"].column_names is None:  # a stream of json or text files: its columns are known once read
        first = next(iter(splits["train"]), None)
        if first is None:
            raise InvalidValueError(f"data.dataset: {data.dataset!r} holds no documents")
        names = list(first)
    else:
        names = splits["train"].column_names
    return data_lib.select_columns(splits, columns, {"train": names})


def first_texts(texts, max_chars: int = TOKENIZER_SAMPLE_CHARS):
    """Whole texts from the start of `texts` until they hold `max_chars` characters: what a tokenizer learns from."""
    total = 0
    for text in texts:
        yield text
        total += len(text)
        if total >= max_chars:
            return


class BlockStream:
    """This process's training blocks of a stream of documents (see the module's docstring for the order and the
    state). `take(n)` gives the next n blocks as rows (`{"input_ids": [...]}`), as the cached path's rows read."""

    def __init__(
        self,
        documents: datasets.IterableDataset,
        tokenizer,
        block_size: int,
        separator: int | None,
        wrap: tuple[int, int] | None = None,
        *,
        seed: int = 0,
        shuffle: bool = True,
        buffer_size: int = 1000,
        process_index: int = 0,
        num_processes: int = 1,
    ):
        self.documents, self.tokenizer = documents, tokenizer
        self.block_size, self.separator, self.wrap = block_size, separator, wrap
        self.seed, self.shuffle, self.buffer_size = seed, shuffle, buffer_size
        self.process_index, self.num_processes = process_index, num_processes
        self.epoch, self.position, self.read, self.blocks_of_epoch, self.ended = 0, None, 0, 0, False
        self.buffer: deque[list[int]] = deque()
        self.rng = random.Random(self._seed())
        self._iterator = None  # opened at the first read, at `position`

    def _seed(self) -> int:
        return self.seed * 100003 + self.epoch  # as the cached path seeds its permutation of epoch e

    def take(self, n: int) -> list[dict]:
        return [{"input_ids": self._next_block()} for _ in range(n)]

    def _next_block(self) -> list[int]:
        while len(self.buffer) < (self.buffer_size if self.shuffle else 1) and not self.ended:
            self._read_group()
        if not self.buffer:  # the epoch's documents ended and its last block was drawn
            self._next_epoch()
            return self._next_block()
        if not self.shuffle:
            return self.buffer.popleft()
        j = self.rng.randrange(len(self.buffer))
        self.buffer[j], self.buffer[-1] = self.buffer[-1], self.buffer[j]
        return self.buffer.pop()

    def _read_group(self) -> None:
        """Tokenize and pack the next group of documents into the buffer, or mark the end of the epoch's documents."""
        if self._iterator is None:
            documents = self.documents
            if self.num_processes > 1:
                documents = split_dataset_by_node(documents, self.process_index, self.num_processes)
            else:
                documents = documents.select_columns(["text"])  # a fresh object: no position from an earlier epoch
            if self.position is not None:
                documents.load_state_dict(self.position)
            self._documents, self._iterator = documents, iter(documents)
        texts = [row["text"] for row in itertools.islice(self._iterator, data_lib.PACK_DOCUMENTS)]
        if not texts:
            self.ended = True
            return
        ids = self.tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
        inner = self.block_size - (2 if self.wrap else 0)
        for block in data_lib.pack_token_ids(ids, inner, self.separator):
            self.buffer.append([self.wrap[0], *block, self.wrap[1]] if self.wrap else block)
            self.blocks_of_epoch += 1
        self.position, self.read = self._documents.state_dict(), self.read + len(texts)

    def _next_epoch(self) -> None:
        if self.blocks_of_epoch == 0:
            raise InvalidValueError(
                f"the text holds fewer than block_size={self.block_size} tokens"
                + (f" in process {self.process_index}'s share of it" if self.num_processes > 1 else "")
                + ": use more text or a smaller data.block_size"
            )
        self.epoch, self.position, self.read, self.blocks_of_epoch, self.ended = self.epoch + 1, None, 0, 0, False
        self.rng, self._iterator = random.Random(self._seed()), None

    # ------------------------------------------------------------------------------------------ checkpoints
    def save(self, folder: Path, rank: int) -> None:
        """This process's state into a checkpoint folder: JSON and safetensors only."""
        blocks = torch.tensor(list(self.buffer), dtype=torch.int64).reshape(-1, self.block_size)
        save_file({"blocks": blocks}, str(Path(folder) / f"data_buffer_{rank}.safetensors"))
        state = {
            "epoch": self.epoch,
            "position": self.position,
            "documents_read": self.read,  # this epoch, by this process
            "blocks_of_epoch": self.blocks_of_epoch,
            "ended": self.ended,  # the epoch's documents are all read; the buffer holds its last blocks
            "rng": self.rng.getstate(),
            "num_processes": self.num_processes,
        }
        (Path(folder) / f"data_state_{rank}.json").write_text(json.dumps(state))

    def load(self, folder: Path, rank: int) -> None:
        """Continue where `save` stopped: the stream then yields what the saved one would have yielded next."""
        state = json.loads((Path(folder) / f"data_state_{rank}.json").read_text())
        blocks = load_file(str(Path(folder) / f"data_buffer_{rank}.safetensors"))["blocks"]
        if state["num_processes"] != self.num_processes:
            raise InvalidValueError(
                f"the stream was split over {state['num_processes']} processes and is resumed with "
                f"{self.num_processes}: each process's position holds only for its share; resume with "
                f"{state['num_processes']}"
            )
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.epoch, self.position = state["epoch"], state["position"]
        self.read, self.blocks_of_epoch, self.ended = state["documents_read"], state["blocks_of_epoch"], state["ended"]
        self.buffer, self._iterator = deque(blocks.tolist()), None
