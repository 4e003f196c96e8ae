"""The music task (hf_seq.data.music): pieces the test makes (no corpus, no download) split by piece, transposed in
range, scored in bits per note, bad files refused in one line, and a tiny LSTM trained through the task whose samples
`hf-seq generate` writes as MIDI files that parse back."""

import math
import random

import pytest

symusic = pytest.importorskip("symusic")
pytest.importorskip("miditok")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from hf_seq.cli import main  # noqa: E402
from hf_seq.data import music  # noqa: E402
from hf_seq.data.tasks import evaluate, prepare  # noqa: E402
from hf_seq.errors import UserError  # noqa: E402
from hf_seq.training import run  # noqa: E402
from hf_seq.training.recipes import load_recipe  # noqa: E402

TPQ = 480


def make_piece(seed: int, bars: int = 4, low: int = 48, high: int = 84):
    """A random two-voice piece in 4/4: quarter and eighth notes between `low` and `high`."""
    rng = random.Random(seed)
    score = symusic.Score(TPQ)
    score.time_signatures.append(symusic.TimeSignature(0, 4, 4))
    score.tempos.append(symusic.Tempo(0, 100))
    for program, (a, b) in ((0, (low, (low + high) // 2)), (40, ((low + high) // 2, high))):
        track = symusic.Track(f"voice {program}", program, False)
        time = 0
        while time < bars * 4 * TPQ:
            duration = rng.choice((TPQ, TPQ // 2))
            track.notes.append(symusic.Note(time, duration, rng.randint(a, b), 80))
            time += duration
        score.tracks.append(track)
    return score


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pieces")
    for i in range(12):
        make_piece(i).dump_midi(str(folder / f"piece{i:02d}.mid"))
    return folder


def recipe_tree(corpus, out, **data):
    return {
        "family": "rnn",
        "task": "music",
        "model": {"cell_type": "lstm", "hidden_size": 32, "num_hidden_layers": 1},
        "tokenizer": {"vocab_size": 560},
        "data": {"dataset": str(corpus), "block_size": 64, "eval_fraction": 0.2, **data},
        "training": {"output_dir": str(out), "max_steps": 2, "batch_size": 4, "eval_every": 100, "save_every": 100,
                     "log_with": "none", "warmup_steps": 1, "threads": 1},
    }  # fmt: skip


def test_pieces_are_split_whole(corpus):
    pieces = music.read_pieces(str(corpus))
    splits = music.split_pieces(pieces, 0.2, seed=1234)
    names = {split: [p.name for p in part] for split, part in splits.items()}
    assert set(names) == {"train", "validation", "test"}
    assert len(names["validation"]) == len(names["test"]) == round(12 * 0.2)
    every = [name for part in names.values() for name in part]
    assert sorted(every) == sorted(p.name for p in pieces) and len(set(every)) == len(every)  # each in one split
    assert music.split_pieces(pieces, 0.2, seed=1234).keys() == splits.keys()
    assert [p.name for p in music.split_pieces(pieces, 0.2, seed=1234)["test"]] == names["test"]  # fixed draw


def test_transposition_shifts_every_note_and_stays_in_range():
    score = make_piece(3, low=30, high=100)
    pitches = [n.pitch for t in score.tracks for n in t.notes]
    for shift in (-5, 2, 7):
        moved = music.transpose(score, shift, (21, 109))
        assert [n.pitch for t in moved.tracks for n in t.notes] == [p + shift for p in pitches]
        assert all(21 <= n.pitch < 109 for t in moved.tracks for n in t.notes)
    up, down = 109 - max(pitches), 20 - min(pitches)  # the smallest shifts that take a note out of [21, 109)
    assert up > 7 and down < -5  # so the shifts above stayed in range
    assert music.transpose(score, up, (21, 109)) is None  # skipped, not clipped
    assert music.transpose(score, down, (21, 109)) is None
    kept, skipped = music.augment([music.Piece("p", score)], [down, -5, 2, up], (21, 109))
    assert [p.name for p in kept] == ["p", "p -5", "p +2"] and skipped == 2
    for piece in kept:
        assert all(21 <= n.pitch < 109 for t in piece.score.tracks for n in t.notes)


def test_bits_per_note_is_the_total_loss_over_the_notes(corpus, tmp_path):
    recipe = load_recipe(recipe_tree(corpus, tmp_path / "run", block_size=48))
    prepared = prepare(recipe)
    torch.manual_seed(0)
    from hf_seq.training.runs import build_model

    model = build_model(recipe, prepared).eval()
    metrics = evaluate(recipe, prepared, model, "cpu")
    # independently: each held-out piece whole (BOS, tokens, EOS) in one forward pass, its notes counted in the file
    held_out = music.split_pieces(music.read_pieces(str(corpus)), 0.2, seed=1234)["validation"]
    tokenizer = prepared.tokenizer
    nll, tokens, notes = 0.0, 0, 0
    for piece in held_out:
        ids = [tokenizer.bos_token_id, *tokenizer.miditok.encode(piece.score).ids, tokenizer.eos_token_id]
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, :-1]
        nll += F.cross_entropy(logits, torch.tensor(ids[1:]), reduction="sum").item()
        tokens += len(ids) - 1
        notes += sum(len(t.notes) for t in symusic.Score(piece.name).tracks)
    assert metrics["eval_notes"] == notes and metrics["eval_tokens"] == tokens
    assert len(prepared.held_out["eval"]) > len(held_out)  # the pieces were cut into windows of 48 tokens
    assert metrics["eval_bits_per_note"] == pytest.approx(nll / math.log(2) / notes, rel=1e-4)
    assert metrics["eval_loss"] == pytest.approx(nll / tokens, rel=1e-4)
    assert metrics["eval_perplexity"] == pytest.approx(math.exp(nll / tokens), rel=1e-4)
    assert {"test_bits_per_note", "test_notes"} <= set(metrics)


@pytest.mark.parametrize("kind", ["not midi", "empty", "no music", "no notes", "missing"])
def test_a_bad_corpus_is_a_one_line_error_naming_it(tmp_path, kind):
    folder = tmp_path / "corpus"
    folder.mkdir()
    make_piece(0).dump_midi(str(folder / "good.mid"))
    bad = folder / "bad.mid"
    source = str(folder)
    if kind == "not midi":
        bad.write_text("these are words, not notes\n")
    elif kind == "empty":
        bad.write_bytes(b"")
    elif kind == "no music":
        (folder / "good.mid").unlink()
        (folder / "notes.txt").write_text("a text file\n")
        bad = folder
    elif kind == "no notes":
        empty = symusic.Score(TPQ)
        empty.tracks.append(symusic.Track("silent", 0, False))
        empty.dump_midi(str(bad))
    else:
        bad = source = folder / "nowhere"
    with pytest.raises(UserError) as error:
        music.read_pieces(source)
    message = str(error.value)
    assert "\n" not in message and str(bad) in message and message.startswith("data.dataset: ")


def test_a_bad_transpose_is_refused(corpus, tmp_path):
    with pytest.raises(UserError, match="data.transpose"):
        prepare(load_recipe(recipe_tree(corpus, tmp_path / "run", transpose=[0, 2])))


def test_train_then_generate_writes_midi_that_parses_back(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    result = run(load_recipe(recipe_tree(corpus, out, transpose=[-2, 2])), progress=False)
    assert result.summary["train_transposed"] > 0 and result.summary["eval_bits_per_note"] > 0
    assert music.holds_tokenizer(out)  # MidiTok's layout: miditok loads the folder's tokenizer as it is
    import miditok

    assert len(miditok.REMI.from_pretrained(out)) == len(result.tokenizer)
    sample = tmp_path / "sample.mid"
    args = ["generate", str(out), "--output", str(sample), "--seed", "0", "--max-new-tokens", "96", "--min-notes", "0"]
    assert main(args) == 0
    notes = sum(len(t.notes) for t in symusic.Score(str(sample)).tracks)
    assert f"{notes} notes in all" in capsys.readouterr().out
    prompt = tmp_path / "prompt.mid"
    make_piece(99, bars=1).dump_midi(str(prompt))
    continued = tmp_path / "continued.mid"
    main([*args[:3], str(continued), "--prompt-midi", str(prompt), "--max-new-tokens", "32", "--min-notes", "0"])
    assert sum(len(t.notes) for t in symusic.Score(str(continued)).tracks) >= 8  # the prompt's notes at least
    with pytest.raises(SystemExit) as exit_:  # asked for more notes than 2 tokens can hold: one line, status 2
        main([*args[:3], str(tmp_path / "short.mid"), "--max-new-tokens", "2", "--min-notes", "50"])
    assert exit_.value.code == 2 and "fewer than --min-notes 50" in capsys.readouterr().err
