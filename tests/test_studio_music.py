"""The studio's music view (hf_seq.studio.music): the synthesiser sounds a note at its pitch for its length, the piano
roll draws one bar per note, each note's bits add up to the piece's total NLL and give the task's bits per note on a
tiny trained model, a sample marks its prompt's notes, and a music run folder opens in the Music tab only."""

import math
import wave

import numpy as np
import pytest

symusic = pytest.importorskip("symusic")
pytest.importorskip("miditok")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from hf_seq.data import music as music_data  # noqa: E402
from hf_seq.data.tasks import evaluate, prepare  # noqa: E402
from hf_seq.studio import Loaded, music  # noqa: E402
from hf_seq.training import run  # noqa: E402
from hf_seq.training.recipes import load_recipe  # noqa: E402
from tests.test_music import make_piece  # noqa: E402


def roll_of(*notes, **more) -> dict:
    """A roll of (start s, end s, pitch) notes at velocity 100."""
    start, end, pitch = (np.array(column) for column in zip(*notes))
    return {"start": start.astype(float), "end": end.astype(float), "pitch": pitch, "velocity": np.full(len(start), 100),
            **more}  # fmt: skip


# ---------------------------------------------------------------------------------------------- sound
def test_the_synthesiser_sounds_a4_at_440_hz_for_its_duration(tmp_path):
    samples = music.synthesise(roll_of((0.5, 1.5, 69)))
    assert samples.dtype == np.float32 and np.abs(samples).max() <= 1.0
    assert len(samples) == round((1.5 + music.RELEASE) * music.RATE)
    assert np.abs(samples[: int(0.49 * music.RATE)]).max() == 0.0  # silent until the note starts
    held = samples[int(0.5 * music.RATE) : int(1.5 * music.RATE)]
    spectrum = np.abs(np.fft.rfft(held * np.hanning(len(held))))
    peak = np.fft.rfftfreq(len(held), 1 / music.RATE)[spectrum.argmax()]
    assert abs(peak - 440.0) < 3.0
    two = music.synthesise(roll_of((0.0, 1.0, 69), (0.0, 1.0, 72)))  # a C5 beside it: a peak at 523 Hz too
    spectrum = np.abs(np.fft.rfft(two[: music.RATE] * np.hanning(music.RATE)))
    frequencies = np.fft.rfftfreq(music.RATE, 1 / music.RATE)
    assert {round(frequencies[i]) for i in np.argsort(spectrum)[-2:]} == {440, 523}
    music.write_wav(samples, tmp_path / "a4.wav")
    with wave.open(str(tmp_path / "a4.wav")) as back:
        assert (back.getframerate(), back.getnchannels(), back.getsampwidth()) == (music.RATE, 1, 2)
        assert back.getnframes() == len(samples)


def test_without_a_sound_font_the_audio_is_the_synthesiser(tmp_path, monkeypatch):
    monkeypatch.setattr(music, "sound_font", lambda: None)
    roll = roll_of((0.0, 0.25, 60))
    assert "sine" in music.render_audio(roll, b"", tmp_path / "x.wav")
    with wave.open(str(tmp_path / "x.wav")) as back:
        assert back.getnframes() == len(music.synthesise(roll))


# ---------------------------------------------------------------------------------------------- the piano roll
def test_the_piano_roll_draws_one_bar_per_note():
    roll = roll_of((0.0, 0.5, 60), (0.5, 1.5, 64), (1.0, 2.0, 67), prompt=np.array([True, False, False]))
    axes = music.figure_piano_roll(roll).axes[0]
    bars = [(p.get_x(), p.get_width(), p.get_y() + p.get_height() / 2) for p in axes.patches]
    np.testing.assert_allclose(bars, [(0.0, 0.5, 60), (0.5, 1.0, 64), (1.0, 1.0, 67)])
    colours = [tuple(p.get_facecolor()) for p in axes.patches]
    assert colours[1] == colours[2] != colours[0]  # the prompt in one colour, the sample in another
    coloured = music.figure_piano_roll(roll_of((0.0, 1.0, 60), (1.0, 2.0, 62), bits=np.array([1.0, 8.0])))
    first, second = (tuple(p.get_facecolor()) for p in coloured.axes[0].patches)
    assert first != second and len(coloured.axes) == 2  # coloured by bits, with a colour bar


def test_each_token_goes_to_one_note():
    tokens = ["Bar_None", "Position_0", "Program_0", "Pitch_60", "Velocity_79", "Duration_1.0.8", "Program_40",
              "Pitch_67", "Velocity_79", "Duration_1.0.8", "Position_8", "Pitch_64", "Duration_0.4.8", "EOS_None"]  # fmt: skip
    assert music.note_owners(tokens) == [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]


# ---------------------------------------------------------------------------------------------- a tiny music run
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return tiny_music_run(tmp_path_factory)


def tiny_music_run(tmp_path_factory) -> tuple:
    """A tiny LSTM trained for a few steps on pieces the test writes (seconds), its validation set one piece of its
    own: (its `Loaded`, its recipe, its run folder, the folder of the held-out pieces)."""
    folder = tmp_path_factory.mktemp("music")
    for i in range(10):
        make_piece(i).dump_midi(str(folder / f"piece{i:02d}.mid"))
    held = tmp_path_factory.mktemp("held")
    make_piece(50, bars=6).dump_midi(str(held / "validation.mid"))
    make_piece(51).dump_midi(str(held / "test.mid"))
    tree = {
        "family": "rnn", "task": "music",
        "model": {"cell_type": "lstm", "hidden_size": 32, "num_hidden_layers": 1},
        "tokenizer": {"vocab_size": 560},
        "data": {"dataset": str(folder), "block_size": 40, "validation": str(held / "validation.mid"),
                 "test": str(held / "test.mid")},
        "training": {"output_dir": str(folder / "run"), "max_steps": 12, "batch_size": 4, "eval_every": 100,
                     "save_every": 100, "log_with": "none", "warmup_steps": 1, "threads": 1, "learning_rate": 1e-2},
    }  # fmt: skip
    recipe = load_recipe(tree)
    result = run(recipe, progress=False)
    loaded = Loaded("lstm-music", result.model, result.tokenizer, music=True, extra={"recipe": recipe})
    return loaded, recipe, folder / "run", held


def test_the_notes_bits_add_up_to_the_total_and_give_the_tasks_bits_per_note(trained):
    loaded, recipe, _, held = trained
    score = symusic.Score(str(held / "validation.mid"))
    result = music.note_surprisal(loaded, score, "validation.mid")
    tokenizer = loaded.tokenizer
    ids = [tokenizer.bos_token_id, *tokenizer.encode_score(score)[0], tokenizer.eos_token_id]
    assert result["tokens"] == len(ids) - 1 > recipe.data.block_size  # the piece was cut into windows
    assert len(result["bits"]) == result["notes"] == len(result["pitch"]) and (result["bits"] > 0).all()
    assert result["bits"].sum() == pytest.approx(result["nll_bits"], rel=1e-9)
    metrics = evaluate(recipe, prepare(recipe), loaded.model, "cpu")  # the task's figures on that one piece
    assert metrics["eval_notes"] == result["notes"] and metrics["eval_tokens"] == result["tokens"]
    task_nll_bits = metrics["eval_loss"] * metrics["eval_tokens"] / math.log(2)
    assert result["bits"].sum() == pytest.approx(task_nll_bits, rel=1e-5)
    assert result["bits_per_note"] == pytest.approx(metrics["eval_bits_per_note"], rel=1e-5)
    assert result["bits"].mean() == pytest.approx(metrics["eval_bits_per_note"], rel=1e-5)
    # the window matters for a recurrent model: one pass over the whole piece gives another total
    with torch.no_grad():
        logits = loaded.model(torch.tensor([ids])).logits[0, :-1]
        whole = F.cross_entropy(logits, torch.tensor(ids[1:]), reduction="sum")
    assert float(whole) / math.log(2) != pytest.approx(result["nll_bits"], rel=1e-6)
    assert music.note_surprisal(loaded, score, block=len(ids))["nll_bits"] == pytest.approx(
        float(whole) / math.log(2), rel=1e-5
    )


def test_the_notes_are_the_pieces_in_time(trained):
    loaded, _, _, held = trained
    score = symusic.Score(str(held / "test.mid"))
    result = music.note_surprisal(loaded, score)
    prepared = loaded.tokenizer.miditok.preprocess_score(score.copy())
    assert sorted(result["pitch"].tolist()) == sorted(n.pitch for t in prepared.tracks for n in t.notes)
    assert (np.diff(result["start"]) >= 0).all() and (result["end"] > result["start"]).all()
    last = max(n.time + n.duration for t in score.tracks for n in t.notes) / score.ticks_per_quarter  # beats
    assert result["end"].max() == pytest.approx(last * 60 / score.tempos[0].qpm)  # in seconds, at the piece's tempo


def test_a_sample_marks_its_prompts_notes(trained):
    loaded, _, _, held = trained
    prompt = symusic.Score(str(held / "test.mid"))
    result = music.sample(loaded, prompt, prompt_beats=4, max_new_tokens=40, seed=3)
    given = music_data.count_notes(loaded.tokenizer.decode_ids(loaded.tokenizer.encode_score(
        music.first_beats(prompt, 4))[0]))  # fmt: skip
    assert result["prompt"].sum() == given > 0 and len(result["pitch"]) >= given
    assert (result["start"][result["prompt"]] < 2.0 + 1e-9).all()  # 4 beats at the sample's 120 per minute
    assert symusic.Score.from_midi(result["midi"]).tracks  # the MIDI file's bytes
    again = music.sample(loaded, prompt, prompt_beats=4, max_new_tokens=40, seed=3)
    assert again["midi"] == result["midi"]  # the seed fixes the sample
    alone = music.sample(loaded, None, max_new_tokens=40, seed=3)
    assert not alone["prompt"].any()


def test_a_music_run_opens_in_the_music_tab_only(trained):
    pytest.importorskip("gradio")
    from hf_seq.studio.app import _names, load
    from hf_seq.studio.views import LANGUAGE_MODEL, MUSIC

    _, _, folder, held = trained
    loaded = load(folder)
    assert loaded.music and loaded.extra["recipe"].data.block_size == 40
    assert _names([loaded], MUSIC) == ["run"] and _names([loaded], LANGUAGE_MODEL) == []
    assert [p.name for p in music.held_out_pieces(loaded)] == [str(held / "test.mid")]  # the run's test split


def test_the_music_tab_answers_through_the_page(trained, tmp_path):
    pytest.importorskip("gradio")
    import os

    from gradio_client import Client, handle_file

    from hf_seq.studio.app import OFFLINE, build
    from tests.test_studio_app import free_port

    loaded, _, _, held = trained
    os.environ.update(OFFLINE)
    app = build([loaded])
    _, url, _ = app.launch(server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True, ssr_mode=False)
    try:
        client = Client(url, analytics_enabled=False, download_files=False, verbose=False)
        piece = music.held_out_pieces(loaded)[0].name
        plot, audio, said, midi = client.predict("lstm-music", piece, None, 4, 40, 0, 1.0, api_name="/music_sample")
        assert plot["type"] == "matplotlib" and "notes" in said
        path = audio.get("path") if isinstance(audio, dict) else audio
        with wave.open(path) as back:
            assert back.getframerate() == music.RATE and back.getnframes() > 0
        plot, png, csv = client.predict("lstm-music", piece, None, api_name="/music_surprisal")
        rows = open(csv.get("path") if isinstance(csv, dict) else csv).read().splitlines()
        expected = music.note_surprisal(loaded, symusic.Score(piece))
        assert rows[0] == "start_s,end_s,pitch,name,bits" and len(rows) == 1 + expected["notes"]
        assert sum(float(r.split(",")[-1]) for r in rows[1:]) == pytest.approx(expected["nll_bits"], rel=1e-4)
        bad = tmp_path / "words.mid"
        bad.write_text("these are words, not notes\n")
        with pytest.raises(Exception, match="is not a MIDI file"):  # the one-line error, on the page
            client.predict("lstm-music", piece, handle_file(str(bad)), api_name="/music_surprisal")
    finally:
        app.close()
