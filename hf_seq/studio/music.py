"""The music view: a music run's sample as a piano roll and as sound, and its surprisal note by note on a piece
(a run of the `music` task: MidiTok's REMI tokens with BPE, hf_seq.data.music).

Pure functions, usable from a notebook and tested without a server, as the other views are:
- `score_notes(score)`: a symusic Score's notes as a dict of arrays (`start`, `end` in seconds, `pitch`, `velocity`),
  in the order REMI writes them (by onset; at one onset track after track, each in its own order).
- `sample(loaded, prompt, ...)`: a piece drawn by `data.music.sample_midi`, as `hf-seq generate --output` draws it,
  from nothing or continuing the first beats of `prompt`; each note marked `prompt` or sampled.
- `note_surprisal(loaded, score)`: each note's bits (below) and the piece's bits per note.
- `figure_piano_roll(roll)`: time on x, pitch on y, each note a bar: prompt and sample in two colours, or coloured
  by `bits`.
- `synthesise(roll)`: the notes as sound, in numpy (`render_audio`: FluidSynth instead where it and a sound font are
  installed; nothing is downloaded).

A note's bits are the sum of the NLL of the tokens that make the note: the tokens that lead to it (Bar, Position,
Program, a time signature: those after the previous note's attributes), its Pitch token, and its attributes
(Velocity, Duration). A BPE token stands for several of those base tokens and shares its NLL equally among them; EOS
goes to the last note. So the notes' bits add up to the piece's total NLL, and the piece's bits per note is that
total over its notes, computed by the task's own scoring (`evaluation.note_metrics`) on the windows it scores
(`data.music.held_out_windows`): the figure `hf-seq evaluate` reports for a held-out set of this one piece.
"""

import math
import shutil
import subprocess
import tempfile
import wave
from collections import Counter
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from hf_seq.data import music as music_data
from hf_seq.errors import InvalidValueError, UserError
from hf_seq.evaluation.metrics import note_metrics
from hf_seq.studio.views import Loaded

RATE = 22_050  # samples per second of the synthesised sound
ATTACK, RELEASE = 0.01, 0.08  # seconds: the envelope's rise, and its fall after a note ends
HARMONICS = (1.0, 0.4, 0.2, 0.1)  # amplitudes of the partials 1f, 2f, 3f, 4f (an organ-like tone for chorales)
DECAY = 1.5  # seconds: the e-folding time of a held note's loudness
SOUND_FONTS = ("/usr/share/sounds/sf2", "/usr/share/soundfonts")  # where Debian's and Fedora's packages put them
DEFAULT_BLOCK = 1024  # tokens per scored window for a run without a recipe (a Hub model)
PROMPT, SAMPLED = "tab:blue", "tab:orange"


# ------------------------------------------------------------------------------------------------ notes
def _notes_in_order(score) -> list[tuple[int, int]]:
    """(track, index) of every note, by onset; at one onset track after track, each track in its own order (how
    MidiTok writes all tracks in one stream: a stable sort by time)."""
    pairs = [(t, i, note.time) for t, track in enumerate(score.tracks) for i, note in enumerate(track.notes)]
    return [(t, i) for t, i, _ in sorted(pairs, key=lambda p: p[2])]


def score_notes(score) -> dict:
    """A symusic Score's notes (ticks) as arrays in seconds, in REMI's order: start, end, pitch, velocity."""
    order = _notes_in_order(score)
    seconds = score.to("second")
    timed = [seconds.tracks[t].notes[i] for t, i in order]
    return {
        "start": np.array([n.time for n in timed], dtype=np.float64),
        "end": np.array([n.time + n.duration for n in timed], dtype=np.float64),
        "pitch": np.array([n.pitch for n in timed], dtype=np.int64),
        "velocity": np.array([n.velocity for n in timed], dtype=np.int64),
    }


def _note_keys(score) -> list[tuple[int, int, int]]:
    """(onset tick, pitch, duration) of each note in REMI's order: what marks a note of the prompt in a sample."""
    return [(n.time, n.pitch, n.duration) for n in (score.tracks[t].notes[i] for t, i in _notes_in_order(score))]


def first_beats(score, beats: float):
    """The score's notes that start in its first `beats` quarter notes (cut to end there too)."""
    end = int(round(beats * score.ticks_per_quarter))
    cut = score.clip(0, end, clip_end=True)
    if music_data.count_notes(cut) == 0:
        raise InvalidValueError(f"the prompt's first {beats:g} beats hold no notes: give more beats")
    return cut


def note_name(pitch: int) -> str:
    return ["C", "C#", "D", "Eb", "E", "F", "F#", "G", "Ab", "A", "Bb", "B"][pitch % 12] + str(pitch // 12 - 1)


# ------------------------------------------------------------------------------------------------ views
def _check_music(loaded: Loaded) -> None:
    if not isinstance(loaded.tokenizer, music_data.MidiTokTokenizer):
        raise InvalidValueError(f"the music view reads a music run (a MidiTok tokenizer); {loaded.name} is not one")


@torch.no_grad()
def sample(loaded: Loaded, prompt=None, prompt_beats: float = 8.0, max_new_tokens: int = 256, seed: int = 0,
           temperature: float = 1.0) -> dict:  # fmt: skip
    """A piece the model draws (`sample_midi`, as `hf-seq generate --output`), continuing the first `prompt_beats`
    quarter notes of `prompt` (a symusic Score; None or 0 beats: from nothing), with `seed`. Returns its notes
    (`score_notes`), `prompt` (whether each note is the prompt's, as the tokenizer reads the prompt), and the MIDI
    file's bytes (`midi`)."""
    _check_music(loaded)
    symusic = music_data._import("symusic")
    cut = first_beats(prompt, prompt_beats) if prompt is not None and prompt_beats > 0 else None
    with tempfile.TemporaryDirectory() as folder:
        prompt_file, output = (Path(folder) / "prompt.mid" if cut is not None else None), Path(folder) / "sample.mid"
        if cut is not None:
            cut.dump_midi(str(prompt_file))
        torch.manual_seed(seed)
        music_data.sample_midi(loaded.model, loaded.tokenizer, output, prompt_file, max_new_tokens, do_sample=True,
                               temperature=temperature)  # fmt: skip
        written, midi = symusic.Score(str(output)), output.read_bytes()
    given = Counter()
    if cut is not None:  # the prompt as the model read it: its tokens decoded, on the grid and at the sample's tempo
        given = Counter(_note_keys(loaded.tokenizer.decode_ids(loaded.tokenizer.encode_score(cut)[0])))
    marks = []
    for key in _note_keys(written):
        marks.append(given[key] > 0)
        given[key] -= given[key] > 0
    roll = score_notes(written)
    prompted = int(sum(marks))
    title = f"{loaded.name}: {prompted} notes of prompt, {len(marks) - prompted} sampled (seed {seed})"
    return roll | {"prompt": np.array(marks, dtype=bool), "midi": midi, "model": loaded.name, "title": title}


def block_size(loaded: Loaded) -> int:
    """The tokens per scored window: the run's `data.block_size` (as its evaluations scored), or `DEFAULT_BLOCK`."""
    recipe = loaded.extra.get("recipe")
    return recipe.data.block_size if recipe is not None else DEFAULT_BLOCK


def token_nll(model, ids: list[int], block: int) -> np.ndarray:
    """The NLL (nats) of each token after the first, the context starting again at each of the task's windows."""
    out = []
    for window in music_data.held_out_windows([(ids, 0)], block)["input_ids"]:
        inputs = torch.tensor([window], device=model.device)
        logits = model(input_ids=inputs).logits[0, :-1].float()
        out.append(F.cross_entropy(logits, inputs[0, 1:], reduction="none").cpu().double().numpy())
    return np.concatenate(out)


def note_owners(base_tokens: list[str]) -> list[int]:
    """The note each base token belongs to (notes counted by their Pitch tokens): a Pitch token its own note, a
    Velocity or Duration token the note before it, anything else (Bar, Position, Program, ..., EOS) the next note;
    tokens after the last note go to it."""
    owners, pitches = [], 0
    for token in base_tokens:
        if token.startswith("Pitch"):
            owners.append(pitches)
            pitches += 1
        elif token.startswith(("Velocity", "Duration")):
            owners.append(max(pitches - 1, 0))
        else:
            owners.append(pitches)
    if pitches == 0:
        raise InvalidValueError("the piece's tokens hold no notes")
    return [min(owner, pitches - 1) for owner in owners]


def _base_tokens(tokenizer, token_id: int) -> list[str]:
    """The base (REMI) tokens one id stands for: several for a BPE merge, one for a special token (MidiTok's table,
    as its `decode_token_ids` reads it)."""
    miditok = tokenizer.miditok
    return list(miditok._vocab_learned_bytes_to_tokens[miditok._model.id_to_token(token_id)])


@torch.no_grad()
def note_surprisal(loaded: Loaded, score, name: str = "the piece", block: int | None = None) -> dict:
    """Each note's bits on `score` (the module's docstring says how a token's NLL is shared among notes) and the
    piece's figures (`bits_per_note`, `nll_bits`, `notes`, `tokens`), scored as the task scores a held-out piece:
    BOS, its tokens, EOS, in windows of `block` tokens (default: the run's `data.block_size`)."""
    _check_music(loaded)
    tokenizer = loaded.tokenizer
    ids, notes = tokenizer.encode_score(score)
    ids = [tokenizer.bos_token_id, *ids, tokenizer.eos_token_id]
    nll = token_nll(loaded.model, ids, block or block_size(loaded))
    bases = [_base_tokens(tokenizer, i) for i in ids[1:]]  # BOS is given, not predicted
    owners = note_owners([token for base in bases for token in base])
    shares = np.concatenate([np.full(len(base), value / len(base)) for base, value in zip(bases, nll)])
    bits = np.bincount(owners, weights=shares, minlength=notes) / math.log(2)
    prepared = tokenizer.miditok.preprocess_score(score.copy())  # the notes the tokens encode
    roll = score_notes(prepared)
    if len(bits) != notes or len(roll["pitch"]) != notes:
        raise UserError(f"{name}: {len(bits)} notes in the tokens, {notes} in the score as MidiTok reads it")
    pitches = [int(t.split("_")[1]) for base in bases for t in base if t.startswith("Pitch_")]
    if pitches and pitches != roll["pitch"].tolist():
        raise UserError(f"{name}: the notes are not in the order the tokens hold them (MidiTok's order changed?)")
    figures = note_metrics(float(nll.sum()), len(nll), notes, prefix="piece")
    title = f"{loaded.name} on {name}: {figures['piece_bits_per_note']:.2f} bits per note"
    return roll | {"bits": bits, "bits_per_note": figures["piece_bits_per_note"], "nll_bits": float(nll.sum()) /
                   math.log(2), "notes": notes, "tokens": len(nll), "model": loaded.name, "title": title}  # fmt: skip


def surprisal_csv(result: dict) -> str:
    """One row per note: onset and end (s), pitch (MIDI number and name), bits."""
    rows = ["start_s,end_s,pitch,name,bits"]
    for start, end, pitch, bits in zip(result["start"], result["end"], result["pitch"], result["bits"]):
        rows.append(f"{start:.4f},{end:.4f},{pitch},{note_name(int(pitch))},{bits:.6g}")
    return "\n".join(rows) + "\n"


def held_out_pieces(loaded: Loaded) -> list:
    """The run's held-out pieces (its test split, or its validation split), read as the task reads them from the
    recipe's `data`; none where the run has no recipe or its corpus cannot be read here."""
    recipe = loaded.extra.get("recipe")
    if recipe is None:
        return []
    try:
        splits = music_data.read_splits(recipe.data)
    except UserError:
        return []
    return splits.get("test") or splits.get("validation") or []


# ------------------------------------------------------------------------------------------------ the figure
def figure_piano_roll(roll: dict):
    """Time on x (seconds), pitch on y, one bar per note: coloured by `bits` (a colour bar) where the roll has them,
    else prompt and sampled notes in two colours where it marks `prompt`, else one colour."""
    from matplotlib import colormaps
    from matplotlib.patches import Patch

    from hf_seq.studio.tokens import _figure

    start, end, pitch = roll["start"], roll["end"], roll["pitch"]
    length = float(end.max()) if len(end) else 1.0
    figure, (axes,) = _figure(min(max(6.0, 0.35 * length), 16.0), 4.0)
    if "bits" in roll:
        top = max(float(roll["bits"].max()), 1e-9) if len(roll["bits"]) else 1.0
        colours = colormaps["viridis"](roll["bits"] / top)
    elif "prompt" in roll:
        colours = [PROMPT if p else SAMPLED for p in roll["prompt"]]
    else:
        colours = SAMPLED
    axes.barh(pitch, end - start, left=start, height=0.8, color=colours, edgecolor="black", linewidth=0.3)
    if "bits" in roll:
        from matplotlib.cm import ScalarMappable
        from matplotlib.colors import Normalize

        mappable = ScalarMappable(Normalize(0.0, top), colormaps["viridis"])
        figure.colorbar(mappable, ax=axes, label="bits of the note")
    elif "prompt" in roll:
        axes.legend(handles=[Patch(color=PROMPT, label="prompt"), Patch(color=SAMPLED, label="sampled")],
                    loc="upper right", fontsize=8)  # fmt: skip
    low, high = (int(pitch.min()), int(pitch.max())) if len(pitch) else (60, 72)
    ticks = [p for p in range(low - 1, high + 2) if p % 12 == 0] or [low]
    axes.set_yticks(ticks, [note_name(p) for p in ticks])
    axes.set_ylim(low - 2, high + 2)
    axes.set_xlim(0, length)
    axes.set_xlabel("time (s)")
    axes.set_ylabel("pitch")
    axes.set_title(roll.get("title", ""), fontsize=10)
    return figure


# ------------------------------------------------------------------------------------------------ sound
def synthesise(roll: dict, rate: int = RATE) -> np.ndarray:
    """The notes as a mono waveform (float32 in [-1, 1]) at `rate`, lasting until the last note ends plus `RELEASE`:
    each note a sum of `HARMONICS` at its pitch's frequency (A4 = 440 Hz, equal temperament), loud by its velocity,
    shaped by an envelope (a linear rise over `ATTACK`, an exponential decay while held, a linear fall over `RELEASE`
    after it ends)."""
    start, end = np.asarray(roll["start"], dtype=np.float64), np.asarray(roll["end"], dtype=np.float64)
    velocity = np.asarray(roll.get("velocity", np.full(len(start), 100)), dtype=np.float64)
    total = int(round(((end.max() if len(end) else 0.0) + RELEASE) * rate))
    out = np.zeros(total, dtype=np.float64)
    for onset, stop, pitch, loudness in zip(start, end, roll["pitch"], velocity):
        frequency = 440.0 * 2.0 ** ((int(pitch) - 69) / 12)
        held = max(stop - onset, 1.0 / rate)
        first = int(round(onset * rate))
        t = np.arange(min(int(round((held + RELEASE) * rate)), total - first)) / rate
        envelope = np.minimum(t / ATTACK, 1.0) * np.exp(-t / DECAY)
        envelope *= np.clip(1.0 - (t - held) / RELEASE, 0.0, 1.0)
        tone = sum(a * np.sin(2 * np.pi * k * frequency * t) for k, a in enumerate(HARMONICS, 1)
                   if k * frequency < rate / 2)  # fmt: skip
        out[first : first + len(t)] += (loudness / 127.0) * envelope * tone
    peak = np.abs(out).max() if total else 0.0
    return (out * (0.9 / peak if peak > 0.9 else 0.25)).astype(np.float32)


def write_wav(samples: np.ndarray, target, rate: int = RATE) -> None:
    """A mono float waveform as a 16-bit PCM WAV file."""
    with wave.open(str(target), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes((np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes())


def sound_font() -> Path | None:
    """A General MIDI sound font installed with FluidSynth (the first .sf2 in `SOUND_FONTS`), or None."""
    if shutil.which("fluidsynth") is None:
        return None
    fonts = sorted(p for folder in SOUND_FONTS if Path(folder).is_dir() for p in Path(folder).glob("*.sf2"))
    return fonts[0] if fonts else None


def render_audio(roll: dict, midi: bytes, target, rate: int = RATE) -> str:
    """The piece as a WAV file at `target`: FluidSynth with an installed sound font where there is one, else
    `synthesise`. Returns which ("FluidSynth, <font>" or "a sine synthesiser")."""
    font = sound_font()
    if font is not None:
        with tempfile.TemporaryDirectory() as folder:
            source = Path(folder) / "piece.mid"
            source.write_bytes(midi)
            done = subprocess.run(["fluidsynth", "-ni", "-F", str(target), "-r", str(rate), str(font), str(source)],
                                  capture_output=True, timeout=120)  # fmt: skip
        if done.returncode == 0 and Path(target).is_file() and Path(target).stat().st_size > 44:
            return f"FluidSynth, {font.name}"
    write_wav(synthesise(roll, rate), target, rate)
    return "a sine synthesiser (4 harmonics)"
