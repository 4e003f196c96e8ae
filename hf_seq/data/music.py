"""Symbolic music for the `music` task: scores read, split by piece, transposed, and tokenized by MidiTok.

A score is a sequence of note events. `data.dataset` names the corpus: `chorales`, the Bach chorales that music21
ships in its wheel (the 371 four-part chorales of its chorale iterator, Riemenschneider's numbering; converted to
MIDI by music21 once and cached under HF_HOME, so no download), a folder (searched recursively), a glob, or files of
MIDI (.mid, .midi) or of the formats music21 reads (MusicXML .xml / .musicxml / .mxl, Humdrum .krn).

Pieces are split whole into train / validation / test (`data.eval_fraction` of the pieces each, drawn with a fixed
seed; `data.validation` / `data.test` name files of their own instead), so no piece is in two splits.
`data.transpose` adds each training piece again shifted by each of its semitone offsets (augmentation; a shift that
would take a note out of the tokenizer's pitch range is skipped for that piece and counted).

The tokenizer is MidiTok's REMI (Huang & Yang 2020: bar, position, program, pitch, velocity and duration tokens; every
track in one stream, each note after its program), with BPE merges learned on the training pieces through
`tokenizers` up to `tokenizer.vocab_size`. It is saved as MidiTok saves it (tokenizer.json in a run folder, the
layout `miditok.REMI.from_pretrained` reads from a folder or the Hub). A piece becomes BOS, its tokens, EOS; training
packs those sequences into blocks, and each held-out piece is scored whole, cut into windows that predict each of its
tokens once, so its total NLL over its notes is **bits per note**, a figure that does not depend on the tokenization.
The notes are counted in the score as the tokenizer reads it (MidiTok's preprocessing: pitches in range, times on its
grid), not from the tokens.

MidiTok, symusic and music21 are the optional extra `hf-seq[music]`; they are imported when a score is first read.
"""

import glob
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import datasets
import torch

from hf_seq.data.corpora import CHORALES, HELD_OUT_SEED, pack_token_ids
from hf_seq.errors import InvalidValueError, MissingFileError, UserError

INSTALL = "pip install 'hf-seq[music]'"
MIDI_SUFFIXES = (".mid", ".midi")
MUSIC21_SUFFIXES = (".xml", ".musicxml", ".mxl", ".krn")  # read by music21, written to MIDI in memory
MUSIC_SUFFIXES = MIDI_SUFFIXES + MUSIC21_SUFFIXES
MAX_TRANSPOSE = 24  # data.transpose: semitones, two octaves either way at most
# the tokenizer's settings (MidiTok's TokenizerConfig): every track in one stream, each note after its program
TOKENIZER_SETTINGS = {"use_programs": True, "one_token_stream_for_programs": True}


def _import(name: str):
    """A module of the `music` extra, or a one-line error saying how to install it."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        raise UserError(f"the music task needs the {name} package, which is not installed: {INSTALL}") from None


@dataclass
class Piece:
    """One score of the corpus: its name (a file, or `chorales/bwv269`) and its notes as a symusic Score."""

    name: str
    score: object  # symusic.Score


# ---------------------------------------------------------------------------------------------- reading
def read_pieces(source, what: str = "data.dataset") -> list[Piece]:
    """The pieces `source` names: `chorales`, a folder, a glob, a music file, or a list of those. A folder or glob
    without music, and a file that is empty, not music or without notes, is a one-line error naming it."""
    if source == CHORALES:
        return chorale_pieces()
    return [Piece(str(path), read_score(path, what)) for path in music_files(source, what)]


def music_files(source, what: str = "data.dataset") -> list[Path]:
    """The music files of a folder (recursively), a glob, a file, or a list of them, in a fixed order."""
    items = source if isinstance(source, list | tuple) else [source]
    files = []
    for item in items:
        path = Path(str(item)).expanduser()
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in MUSIC_SUFFIXES)
            if not found:
                raise MissingFileError(f"{what}: the folder {str(path)!r} holds no music files {list(MUSIC_SUFFIXES)}")
            files += found
        elif glob.has_magic(str(item)):
            found = sorted(Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).is_file())
            if not found:
                raise MissingFileError(f"{what}: no file matches {str(item)!r}")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise MissingFileError(
                f"{what}: {str(item)!r} is neither '{CHORALES}' (the Bach chorales shipped with music21), a folder, a "
                "glob nor a music file"
            )
    return files


def read_score(path, what: str = "data.dataset"):
    """A file as a symusic Score (ticks): MIDI read by symusic, MusicXML and Humdrum by music21."""
    symusic = _import("symusic")
    path = Path(path)
    if path.stat().st_size == 0:
        raise InvalidValueError(f"{what}: {str(path)!r} is empty: give MIDI or MusicXML files")
    suffix = path.suffix.lower()
    if suffix not in MUSIC_SUFFIXES:
        raise InvalidValueError(f"{what}: {str(path)!r} is not a music file; allowed: {list(MUSIC_SUFFIXES)}")
    try:
        score = symusic.Score(str(path)) if suffix in MIDI_SUFFIXES else symusic.Score.from_midi(music21_midi(path))
    except UserError:
        raise
    except Exception as error:  # noqa: BLE001  (symusic and music21 raise many kinds for a file they cannot read)
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        kind = "a MIDI file" if suffix in MIDI_SUFFIXES else "a score music21 reads"
        raise InvalidValueError(f"{what}: {str(path)!r} is not {kind} ({reason})") from None
    if count_notes(score) == 0:
        raise InvalidValueError(f"{what}: {str(path)!r} holds no notes")
    return score


def music21_midi(source) -> bytes:
    """A score music21 reads (a path, or a corpus name such as bach/bwv269) as the bytes of a MIDI file. A score whose
    repeats music21 cannot expand is written without them."""
    music21 = _import("music21")
    score = music21.corpus.parse(source) if isinstance(source, str) else music21.converter.parse(source)
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "score.mid"
        try:
            score.write("midi", fp=out)
        except music21.repeat.ExpanderException:  # badly formed repeat marks (one chorale has them)
            _drop_repeats(score)
            score.write("midi", fp=out)
        return out.read_bytes()


def _drop_repeats(score) -> None:
    from music21 import bar, repeat, stream

    for measure in score.recurse().getElementsByClass(stream.Measure):
        if isinstance(measure.leftBarline, bar.Repeat):
            measure.leftBarline = None
        if isinstance(measure.rightBarline, bar.Repeat):
            measure.rightBarline = None
    for mark in list(score.recurse().getElementsByClass(repeat.RepeatExpression)):
        mark.activeSite.remove(mark)


def chorale_cache() -> Path:
    """Where the chorales are kept as MIDI files: HF_HOME/hf_seq/chorales-music21-VERSION."""
    from huggingface_hub import constants

    return Path(constants.HF_HOME) / "hf_seq" / f"chorales-music21-{_import('music21').__version__}"


def chorale_pieces() -> list[Piece]:
    """The Bach chorales of music21's chorale iterator (each once, in its order), converted to MIDI the first time and
    read from the cache after."""
    music21, symusic = _import("music21"), _import("symusic")
    names = list(dict.fromkeys(music21.corpus.chorales.Iterator(returnType="filename")))
    folder = chorale_cache()
    missing = [name for name in names if not (folder / f"{Path(name).name}.mid").is_file()]
    if missing:
        print(f"converting {len(missing)} Bach chorales to MIDI with music21 (once; about 0.3 s each) into {folder}",
              file=sys.stderr)  # fmt: skip
        folder.mkdir(parents=True, exist_ok=True)
    for name in missing:
        target = folder / f"{Path(name).name}.mid"
        partial = target.with_suffix(f".{os.getpid()}.part")
        partial.write_bytes(music21_midi(name))
        partial.replace(target)  # whole files only, also if two runs convert at once
    return [Piece(f"{CHORALES}/{Path(n).name}", symusic.Score(str(folder / f"{Path(n).name}.mid"))) for n in names]


def count_notes(score) -> int:
    return sum(len(track.notes) for track in score.tracks)


# ---------------------------------------------------------------------------------------------- splits, transposition
def split_pieces(pieces: list[Piece], fraction: float, seed: int, test: bool = True) -> dict[str, list[Piece]]:
    """`train`, `validation` and (with `test`) `test`: `fraction` of the pieces each (at least one), drawn with `seed`,
    each split in corpus order. A piece is in one split only."""
    held = max(1, round(len(pieces) * fraction))
    parts = 2 if test else 1
    if held * parts >= len(pieces):
        raise InvalidValueError(
            f"data.eval_fraction={fraction} of {len(pieces)} pieces leaves no training pieces; give more pieces or a "
            "smaller data.eval_fraction"
        )
    order = torch.randperm(len(pieces), generator=torch.Generator().manual_seed(seed)).tolist()
    taken = {"validation": order[:held], "test": order[held : held * parts], "train": order[held * parts :]}
    return {split: [pieces[i] for i in sorted(rows)] for split, rows in taken.items() if rows}


def transpose(score, semitones: int, pitch_range: tuple[int, int] = (0, 128)):
    """The score with every pitched note shifted by `semitones` (drum tracks kept), or None where a note would leave
    `pitch_range` (low inclusive, high exclusive, as MidiTok's)."""
    pitched = [note.pitch for track in score.tracks if not track.is_drum for note in track.notes]
    low, high = pitch_range
    if pitched and not (low <= min(pitched) + semitones and max(pitched) + semitones < high):
        return None
    shifted = score.copy()
    for track in shifted.tracks:
        if not track.is_drum:
            track.shift_pitch(semitones, inplace=True)
    return shifted


def check_shifts(shifts) -> list[int]:
    shifts = list(shifts or [])
    if any(isinstance(s, bool) or not isinstance(s, int) or not 0 < abs(s) <= MAX_TRANSPOSE for s in shifts) or len(
        set(shifts)
    ) < len(shifts):
        raise InvalidValueError(
            f"recipe key 'data.transpose': {shifts!r}; a list of distinct semitone shifts, each a nonzero integer in "
            f"[-{MAX_TRANSPOSE}, {MAX_TRANSPOSE}], e.g. [-2, -1, 1, 2]"
        )
    return shifts


def augment(pieces: list[Piece], shifts, pitch_range: tuple[int, int]) -> tuple[list[Piece], int]:
    """Each piece followed by its transpositions by `shifts` that keep it in `pitch_range`, and the number skipped."""
    out, skipped = [], 0
    for piece in pieces:
        out.append(piece)
        for shift in shifts:
            moved = transpose(piece.score, shift, pitch_range)
            skipped += moved is None
            if moved is not None:
                out.append(Piece(f"{piece.name} {shift:+d}", moved))
    return out, skipped


# ---------------------------------------------------------------------------------------------- the tokenizer
class MidiTokTokenizer:
    """A MidiTok tokenizer as the training loop and a run folder use a tokenizer: its size, its special-token ids
    (PAD, BOS, EOS), `model_max_length` and `save_pretrained` (MidiTok's tokenizer.json). `miditok` is the MidiTok
    tokenizer itself, for anything else."""

    def __init__(self, miditok_tokenizer):
        self.miditok = miditok_tokenizer
        self.model_max_length = None

    @classmethod
    def from_pretrained(cls, source) -> "MidiTokTokenizer":
        """The tokenizer MidiTok saved in a folder (its tokenizer.json) or a Hub repository."""
        import json

        miditok = _import("miditok")
        saved = Path(source) / "tokenizer.json"
        if saved.is_file():  # read as MidiTok's from_pretrained reads it, without the Hub mixin's config.json lookup
            return cls(getattr(miditok, json.loads(saved.read_text())["tokenization"])(params=saved))
        return cls(miditok.MusicTokenizer.from_pretrained(str(source)))

    def __len__(self) -> int:
        return len(self.miditok)

    @property
    def pad_token_id(self) -> int:
        return self.miditok.pad_token_id

    @property
    def bos_token_id(self) -> int:
        return self.miditok["BOS_None"]

    @property
    def eos_token_id(self) -> int:
        return self.miditok["EOS_None"]

    @property
    def all_special_ids(self) -> list[int]:
        return self.miditok.special_tokens_ids

    @property
    def pitch_range(self) -> tuple[int, int]:
        return tuple(self.miditok.config.pitch_range)

    def save_pretrained(self, folder) -> None:
        self.miditok.save_pretrained(folder)

    def encode_score(self, score) -> tuple[list[int], int]:
        """(token ids, notes) of a score: the notes counted after MidiTok's preprocessing, which the ids encode."""
        prepared = self.miditok.preprocess_score(score.copy())
        return list(self.miditok.encode(prepared, no_preprocess_score=True).ids), count_notes(prepared)

    def decode_ids(self, ids: list[int]):
        """The symusic Score of token ids (special tokens and anything after EOS dropped)."""
        if self.eos_token_id in ids:
            ids = ids[: ids.index(self.eos_token_id)]
        special = set(self.all_special_ids)
        return self.miditok.decode([i for i in ids if i not in special])


def holds_tokenizer(folder) -> bool:
    """Whether `folder` holds a tokenizer saved by MidiTok (its tokenizer.json names a `tokenization`)."""
    import json

    path = Path(folder) / "tokenizer.json"
    try:
        return path.is_file() and "tokenization" in json.loads(path.read_text())
    except ValueError:
        return False


def train_tokenizer(pieces: list[Piece], vocab_size: int, min_frequency: int = 2) -> MidiTokTokenizer:
    """REMI with BPE merges learned on `pieces` (MidiTok 3 trains through `tokenizers`) up to `vocab_size` tokens."""
    miditok = _import("miditok")
    remi = miditok.REMI(miditok.TokenizerConfig(**TOKENIZER_SETTINGS))
    if vocab_size <= len(remi):
        raise InvalidValueError(
            f"recipe key 'tokenizer.vocab_size': {vocab_size}; the music task learns BPE merges over REMI's {len(remi)} "
            f"tokens: give more than {len(remi)}"
        )
    with tempfile.TemporaryDirectory() as folder:  # MidiTok trains from files
        paths = [Path(folder) / f"{i}.mid" for i in range(len(pieces))]
        for path, piece in zip(paths, pieces):
            piece.score.dump_midi(str(path))
        remi.train(vocab_size=vocab_size, model="BPE", files_paths=paths, min_frequency=min_frequency)
    return MidiTokTokenizer(remi)


# ---------------------------------------------------------------------------------------------- encoding
def encode_pieces(tokenizer: MidiTokTokenizer, pieces: list[Piece]) -> list[tuple[list[int], int]]:
    """Each piece as (BOS, its token ids, EOS) and its number of notes."""
    out = []
    for piece in pieces:
        ids, notes = tokenizer.encode_score(piece.score)
        out.append(([tokenizer.bos_token_id, *ids, tokenizer.eos_token_id], notes))
    return out


def training_blocks(sequences: list[list[int]], block_size: int) -> datasets.Dataset:
    """The sequences in order, packed into blocks of `block_size` tokens (the tail shorter than a block dropped)."""
    return datasets.Dataset.from_dict({"input_ids": list(pack_token_ids(sequences, block_size, separator=None))})


def held_out_windows(encoded: list[tuple[list[int], int]], block_size: int) -> datasets.Dataset:
    """Each piece cut into windows of at most `block_size` tokens, each starting at the last token of the one before,
    so that every token after BOS is predicted exactly once (the context starts again at each window). `notes`: the
    piece's notes on its first window, 0 on the others, so a sum over windows counts each piece once."""
    rows, notes = [], []
    step = block_size - 1
    for ids, count in encoded:
        starts = range(0, max(len(ids) - 1, 1), step)
        for k, start in enumerate(starts):
            rows.append(ids[start : start + block_size])
            notes.append(count if k == 0 else 0)
    return datasets.Dataset.from_dict({"input_ids": rows, "notes": notes})


class MusicCollator:
    """Blocks and windows padded on the right to the longest: labels are the inputs (the model shifts them), -100 on
    padding, and an attention mask."""

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def __call__(self, features):
        length = max(len(f["input_ids"]) for f in features)
        ids = torch.full((len(features), length), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(features), length), dtype=torch.long)
        for row, feature in enumerate(features):
            ids[row, : len(feature["input_ids"])] = torch.tensor(feature["input_ids"])
            mask[row, : len(feature["input_ids"])] = 1
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


# ---------------------------------------------------------------------------------------------- the task's data
def obtain_tokenizer(recipe, train: list[Piece], folder: Path | None, is_main: bool, wait) -> MidiTokTokenizer:
    """`tokenizer.path` (a folder MidiTok saved), or REMI + BPE trained on the training pieces, saved once in `folder`
    (on the main process) and loaded from there by every process."""
    path = recipe.tokenizer.path or recipe.model.get("from_pretrained")
    if path:
        if Path(path).is_dir() and not holds_tokenizer(path):
            raise MissingFileError(f"tokenizer.path: {path} holds no MidiTok tokenizer (tokenizer.json)")
        return MidiTokTokenizer.from_pretrained(path)
    if recipe.tokenizer.style is not None:
        raise InvalidValueError(
            f"recipe key 'tokenizer.style': {recipe.tokenizer.style!r}; the music task's tokenizer is MidiTok's REMI "
            "with BPE: leave tokenizer.style unset"
        )
    if is_main and (folder is None or not holds_tokenizer(folder)):
        tokenizer = train_tokenizer(train, recipe.tokenizer.vocab_size, recipe.tokenizer.min_frequency)
        if folder is None:
            return tokenizer
        tokenizer.save_pretrained(folder)
    wait()
    return MidiTokTokenizer.from_pretrained(folder)


def read_splits(data) -> dict[str, list[Piece]]:
    """The pieces of `data.dataset` split by piece, with `data.validation` / `data.test` files where given."""
    if data.streaming or data.batch_tokens:
        key = "data.streaming" if data.streaming else "data.batch_tokens"
        raise InvalidValueError(f"recipe key {key!r}: the music task packs whole pieces into blocks; leave it unset")
    given = {split: read_pieces(getattr(data, split), f"data.{split}") for split in ("validation", "test")
             if getattr(data, split) is not None}  # fmt: skip
    pieces = read_pieces(data.dataset)
    if "validation" in given:
        splits = {"train": pieces}
    else:
        splits = split_pieces(pieces, data.eval_fraction, HELD_OUT_SEED, test="test" not in given)
    splits |= given
    if data.max_examples is not None:
        splits["train"] = splits["train"][: data.max_examples]
    return splits


def prepare_music(recipe, tokenizer=None, folder=None, is_main: bool = True, wait=lambda: None, main_first=None):
    """The music task's data: (tokenizer, encoded splits {train, validation, test}, notes). Training pieces are
    transposed by `data.transpose` and packed into blocks; held-out pieces are cut into windows (`held_out_windows`),
    at most `data.eval_examples` pieces of each. `main_first`: the main process reads (and caches) the corpus first."""
    import contextlib

    data = recipe.data
    shifts = check_shifts(data.transpose)
    with main_first() if main_first else contextlib.nullcontext():
        splits = read_splits(data)
    if tokenizer is None:
        tokenizer = obtain_tokenizer(recipe, splits["train"], folder, is_main, wait)
    train, skipped = augment(splits["train"], shifts, tokenizer.pitch_range)
    encoded = encode_pieces(tokenizer, train)
    notes = {"train_pieces": len(splits["train"]), "train_transposed": len(train) - len(splits["train"])}
    notes |= {"train_transpositions_skipped": skipped} if shifts else {}
    out = {"train": training_blocks([ids for ids, _ in encoded], data.block_size)}
    for split, prefix in (("validation", "eval"), ("test", "test")):
        if split not in splits:
            continue
        pieces = splits[split]
        if data.eval_examples is not None and data.eval_examples < len(pieces):
            notes[f"{prefix}_pieces_total"] = len(pieces)
            pieces = pieces[: data.eval_examples]
        notes[f"{prefix}_pieces"] = len(pieces)
        out[split] = held_out_windows(encode_pieces(tokenizer, pieces), data.block_size)
    return tokenizer, out, notes


# ---------------------------------------------------------------------------------------------- sampling to files
@torch.no_grad()
def sample_midi(model, tokenizer: MidiTokTokenizer, output, prompt=None, max_new_tokens: int = 256, **sampling):
    """Continue the piece in the MIDI file `prompt` (or start one from BOS), write the prompt and its continuation to
    the MIDI file `output`, read the file back, and return (notes in the file, notes of the prompt)."""
    symusic = _import("symusic")
    ids, prompt_notes = [tokenizer.bos_token_id], 0
    if prompt is not None:
        prompt_ids, prompt_notes = tokenizer.encode_score(read_score(prompt, "--prompt-midi"))
        ids += prompt_ids
    inputs = torch.tensor([ids], device=model.device)
    out = model.generate(
        inputs,
        attention_mask=torch.ones_like(inputs),
        max_new_tokens=max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **sampling,
    )
    score = tokenizer.decode_ids(out[0].tolist())
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    score.dump_midi(str(output))
    try:
        written = symusic.Score(str(output))
    except RuntimeError as error:
        raise RuntimeError(f"{output}: the MIDI file written does not parse back ({error})") from error
    return count_notes(written), prompt_notes


__all__ = [
    "CHORALES",
    "MidiTokTokenizer",
    "MusicCollator",
    "Piece",
    "augment",
    "count_notes",
    "held_out_windows",
    "prepare_music",
    "read_pieces",
    "read_score",
    "sample_midi",
    "split_pieces",
    "train_tokenizer",
    "transpose",
]
