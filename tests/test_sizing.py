"""`hf-seq lineage --sizes auto`: pilots, one loss surface L(N, D) = E + A/N^alpha + B/D^beta fitted to their curves,
and each member trained at the size the surface predicts best for its budget."""

import json
import math

import pytest

from hf_seq.experiments import lineage, sizing

TRUE = {"E": 1.7, "A": 400.0, "alpha": 0.35, "B": 900.0, "beta": 0.3}


def surface_points(sizes=(1e5, 4e5, 1.6e6), tokens=(2e6, 4e6, 8e6, 1.6e7)):
    return [(n, d, sizing.predict(TRUE, n, d)) for n in sizes for d in tokens]


def test_the_fit_recovers_a_known_surface():
    fit = sizing.fit_surface(surface_points())
    assert fit["alpha"] == pytest.approx(TRUE["alpha"], abs=0.051) and fit["beta"] == pytest.approx(0.3, abs=0.051)
    for n, d in [(2e5, 3e6), (3e6, 5e7)]:  # inside the points and well outside them
        assert sizing.predict(fit, n, d) == pytest.approx(sizing.predict(TRUE, n, d), rel=0.01)
    assert sizing.fit_surface(surface_points(sizes=(1e5,))) is None  # one size: N's exponent is not determined


def test_the_chosen_size_is_the_surfaces_optimum_for_a_flops_budget():
    """With C = 6 N D FLOPs, the optimum of E + A N^-a + B D^-b has a closed form (Hoffmann et al. 2022, eq. 4):
    N* = G (C/6)^(b/(a+b)), G = (a A / (b B))^(1/(a+b))."""
    a, b = TRUE["alpha"], TRUE["beta"]
    pilots = [sizing.Pilot(0, n, 6 * n, 1.0, 1, []) for n in (1e5, 4e5, 1.6e6)]
    budget = 6 * 4e5 * 8e6
    g = (a * TRUE["A"] / (b * TRUE["B"])) ** (1 / (a + b))
    optimum = g * (budget / 6) ** (b / (a + b))
    chosen = sizing.choose(TRUE, pilots, {"flops": budget}, candidates=400)
    assert chosen["non_embedding_params"] == pytest.approx(optimum, rel=0.02)
    assert chosen["tokens"] == pytest.approx(budget / (6 * chosen["non_embedding_params"]), rel=0.01)


def test_a_seconds_budget_gives_each_size_the_tokens_the_pilots_measured_speed_allows():
    pilots = [sizing.Pilot(0, n, 0.0, seconds=10.0, tokens=round(1e11 / n), curve=[]) for n in (1e5, 4e5, 1.6e6)]
    tokens = sizing.tokens_for(pilots, {"seconds": 100.0})
    assert tokens(4e5) == pytest.approx(10 * 1e11 / 4e5, rel=1e-6)  # 10 x the pilot's time
    assert tokens(8e5) == pytest.approx(10 * 1e11 / 8e5, rel=1e-6)  # speed falls as 1/N: the power law between


def test_sizes_auto_on_quick_trains_pilots_fits_and_reports(tmp_path):
    result = lineage.run(quick=True, output_dir=tmp_path, members=("ngram", "gpt"), budget_flops=3e10, progress=False)
    assert result["sizes"] == ["auto"]  # the default under a FLOPs budget
    (gpt,) = [r for r in result["members"] if r["name"] == "gpt"]
    z = gpt["sizing"]
    assert [p["non_embedding_params"] for p in z["pilots"]] == sorted(p["non_embedding_params"] for p in z["pilots"])
    assert len(z["pilots"]) == len(sizing.PILOT_SCALES) and z["fit"] is not None and z["fit"]["points"] >= 5
    smallest, largest = z["pilots"][0]["non_embedding_params"], z["pilots"][-1]["non_embedding_params"]
    chosen = z["chosen"]["non_embedding_params"]
    assert smallest * sizing.CHOICE_RANGE[0] * 0.99 <= chosen <= largest * sizing.CHOICE_RANGE[1] * 1.01
    settings = lineage.LINEAGE.settings_for(quick=True)
    size = lineage.matched_size("gpt", settings, result["vocab_size"], chosen)  # trained at the chosen size
    assert gpt["non_embedding_params"] == lineage.count_parameters(lineage.build("gpt", settings, size, 320))[1]
    # the budget holds at the chosen size: its steps are the FLOPs budget over its FLOPs per step
    assert gpt["steps"] == math.ceil(3e10 / (gpt["flops_per_token"] * gpt["train_tokens"] / gpt["steps"]))
    assert z["predicted_at_reached"] == pytest.approx(
        sizing.predict(z["fit"], gpt["non_embedding_params"], gpt["train_tokens"])
    )
    assert z["reached_eval_loss"] == gpt["final_eval_loss"]
    report = (tmp_path / "lineage.md").read_text()
    assert "## Sizes chosen by the budget" in report and "## How the sizes were chosen" in report
    assert f"{gpt['non_embedding_params']:,}" in report
    assert (tmp_path / "pilots").is_dir()
    saved = json.loads((tmp_path / "lineage.json").read_text())
    assert saved["members"][1]["sizing"]["chosen"] == z["chosen"]


def test_sizes_auto_needs_a_seconds_or_flops_budget(tmp_path):
    with pytest.raises(ValueError, match="--sizes auto needs a --budget-seconds or --budget-flops"):
        lineage.run(quick=True, output_dir=tmp_path, sizes="auto", budget_tokens=1000)


def test_the_translation_lineage_sizes_its_members_by_the_same_rule(tmp_path):
    from hf_seq.experiments import lineage_translation as lt
    from tests.test_lineage_translation import write_parallel

    train, valid, test = write_parallel(tmp_path, counts=(300, 16, 16))
    result = lt.run(
        quick=True, output_dir=tmp_path / "out", corpus=str(train), validation=str(valid), test=str(test),
        source_column="en", target_column="es", members=("luong", "transformer"), budget_flops=2e9, threads=1,
        progress=False,
    )  # fmt: skip
    assert result["sizes"] == ["auto"]
    for r in result["members"]:
        assert len(r["sizing"]["pilots"]) == len(sizing.PILOT_SCALES), r["name"]
    report = (tmp_path / "out" / "lineage.md").read_text()
    assert "## How the sizes were chosen" in report
