"""`hf-seq experiment chung`: the tanh RNN, the GRU and the LSTM at matched sizes on music, with Chung et al.'s two
claims judged by the seeds' ranges."""

import math

import pytest

pytest.importorskip("symusic")
pytest.importorskip("miditok")

from hf_seq.experiments import EXPERIMENTS, chung  # noqa: E402


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("chung")
    return out, chung.run(quick=True, output_dir=out)


def test_quick_run_measures_every_cell_at_matched_sizes(quick):
    out, results = quick
    assert "chung" in EXPERIMENTS
    models = results["models"]
    assert set(models) == set(chung.CELLS)
    for size in chung.QUICK.sizes:
        entries = [models[cell][str(size)] for cell in chung.CELLS]
        for key in ("params", "non_embedding_params"):
            counts = [e[key] for e in entries]
            assert max(counts) <= 1.1 * min(counts), (key, counts)
        for e in entries:
            assert len(e["runs"]) == chung.QUICK.seeds
            assert all(math.isfinite(r["test"]) and r["test"] > 0 for r in e["runs"])
            assert e["min"] <= e["mean"] <= e["max"]
    assert [set(c) for c in results["claims"]] == [{"claim", "measured", "agrees"}] * 2
    assert all(isinstance(c["agrees"], bool) for c in results["claims"])
    assert "Chung et al. 2014" in results["claims"][0]["claim"]
    assert (out / "results.md").is_file() and (out / "bits_per_note.png").stat().st_size > 5_000


def fake(values: dict) -> dict:
    """models as `measured` gives them, from {cell: {size: [bits per note of each seed]}}."""
    return {cell: {str(size): {"runs": v, "mean": sum(v) / len(v), "min": min(v), "max": max(v)}
                   for size, v in sizes.items()} for cell, sizes in values.items()}  # fmt: skip


@pytest.mark.parametrize(
    ("values", "agrees"),
    [
        ({"elman": {1: [3.0, 3.1]}, "gru": {1: [2.0, 2.1]}, "lstm": {1: [2.05, 2.2]}}, [True, True]),
        ({"elman": {1: [3.0, 3.1]}, "gru": {1: [2.0, 3.05]}, "lstm": {1: [2.5, 2.6]}}, [False, True]),
        ({"elman": {1: [3.0], 2: [2.9]}, "gru": {1: [2.0], 2: [1.9]}, "lstm": {1: [2.5], 2: [2.4]}}, [True, False]),
        ({"elman": {1: [3.0], 2: [2.9]}, "gru": {1: [2.0], 2: [2.4]}, "lstm": {1: [2.5], 2: [1.9]}}, [True, True]),
    ],
)
def test_the_claims_follow_their_stated_rules(values, agrees):
    sizes = tuple(values["elman"])
    assert [c["agrees"] for c in chung.claims(fake(values), sizes)] == agrees
