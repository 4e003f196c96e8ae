"""`hf-seq lineage --task music`: the lineage's members on pieces the test makes (no corpus, no download), every one
scored in bits per note on the same held-out pieces, the n-gram's figure recomputed from its saved counts."""

import math

import pytest

symusic = pytest.importorskip("symusic")
pytest.importorskip("miditok")

from hf_seq.cli import main  # noqa: E402
from hf_seq.experiments import lineage_music  # noqa: E402
from tests.test_music import make_piece  # noqa: E402  (the same made pieces)

BLOCK = 256  # longer than any piece made here: each held-out piece is one window


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    corpus = tmp_path_factory.mktemp("pieces")
    for i in range(14):
        make_piece(i).dump_midi(str(corpus / f"piece{i:02d}.mid"))
    out = tmp_path_factory.mktemp("music")
    result = lineage_music.run(quick=True, corpus=str(corpus), members=("ngram", "lstm", "gpt"), output_dir=out,
                               set=(f"block_size={BLOCK}", "batch_size=4"), progress=False, threads=1)  # fmt: skip
    return corpus, out, result


def test_every_member_is_scored_in_bits_per_note_on_the_same_pieces(quick):
    from hf_seq.data import music
    from hf_seq.data.corpora import HELD_OUT_SEED

    corpus, out, result = quick
    assert [r["name"] for r in result["members"]] == ["ngram", "lstm", "gpt"]
    assert result["metric"] == "test_bits_per_note"
    splits = music.split_pieces(music.read_pieces(str(corpus)), 0.1, seed=HELD_OUT_SEED)
    notes = {split: sum(sum(len(t.notes) for t in piece.score.tracks) for piece in splits[split])
             for split in ("validation", "test")}  # fmt: skip
    for record in result["members"]:
        assert record["test_notes"] == notes["test"] and record["validation_notes"] == notes["validation"]
        assert math.isfinite(record["test_bits_per_note"]) and record["test_bits_per_note"] > 0
        assert math.isfinite(record["validation_bits_per_note"])
    assert len({r["test_tokens"] for r in result["members"]}) == 1  # the same tokens predicted by every member


def test_the_ngram_s_bits_per_note_is_its_total_nll_over_the_notes(quick):
    """Recomputed from the saved counts on each test piece whole (BOS, its tokens, EOS), notes counted in the files."""
    from hf_seq.baselines.ngram import KneserNeyLM
    from hf_seq.data import music
    from hf_seq.data.corpora import HELD_OUT_SEED

    corpus, out, result = quick
    lm = KneserNeyLM.from_pretrained(out / "ngram")
    tokenizer = music.MidiTokTokenizer.from_pretrained(out / "tokenizer")
    held_out = music.split_pieces(music.read_pieces(str(corpus)), 0.1, seed=HELD_OUT_SEED)["test"]
    nll, notes = 0.0, 0
    for piece in held_out:
        ids = [tokenizer.bos_token_id, *tokenizer.miditok.encode(piece.score).ids, tokenizer.eos_token_id]
        assert len(ids) <= BLOCK
        nll += float(lm.token_nll(ids).sum())
        notes += sum(len(t.notes) for t in symusic.Score(piece.name).tracks)
    record = next(r for r in result["members"] if r["name"] == "ngram")
    assert record["test_notes"] == notes
    assert record["test_bits_per_note"] == pytest.approx(nll / math.log(2) / notes, rel=1e-9)


def test_the_report_lists_every_member(quick):
    _, out, result = quick
    report = (out / "lineage.md").read_text()
    assert report.startswith("# The music lineage: n-gram, LSTM, GPT\n")
    for record in result["members"]:
        assert f"| {record['title']} |" in report
    assert "test bits / note" in report and (out / "learning_curves.png").stat().st_size > 5_000


def test_lineage_help_offers_the_music_task(capsys):
    with pytest.raises(SystemExit):
        main(["lineage", "--help"])
    text = capsys.readouterr().out
    assert "music" in text.split("--task")[1] and "bits per note" in text
