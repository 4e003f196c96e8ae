"""`hf-seq lineage --regret`: the chosen size measured against half and twice it, each trained from the start for as
long as the chosen run, the three taking turns; at several seeds the means are compared, and a finished study is
reused."""

import json

import pytest

from hf_seq.experiments import lineage, sizing


def test_regret_at_several_seeds_reuses_the_finished_study_and_compares_the_means(tmp_path):
    """--regret N: half, chosen and twice from the start at N seeds; the same command again on a finished study's
    folder trains only the regret runs it lacks."""
    # under a time budget a study run again would allot its seconds afresh and train everything again
    args = dict(quick=True, output_dir=tmp_path, members=("gpt",), study_seconds=12, threads=1, progress=False)
    first = lineage.run(regret=True, **args)
    scored = (tmp_path / "gpt" / "model.safetensors").stat().st_mtime_ns
    seed0 = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "regret").glob("*/model.safetensors")}
    again = lineage.run(regret=2, **args)
    (one,), (two,) = first["members"], again["members"]
    assert (tmp_path / "gpt" / "model.safetensors").stat().st_mtime_ns == scored  # the study: not trained again
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "regret").glob("*-seed0/model.safetensors")} == seed0
    assert two["search"] == one["search"] and again["elapsed_seconds"] == first["elapsed_seconds"]
    assert two["regret_seeds"] == [0, 1]
    seeds = two["regret_seed_losses"]
    assert {label: values[0] for label, values in seeds.items()} == one["regret_losses"]  # seed 0's runs, reused
    assert seeds["chosen"][1] != seeds["chosen"][0]  # seed 1: the chosen size trained again from the start
    means = {label: sum(v) / 2 for label, v in seeds.items()}
    assert two["regret_losses"] == pytest.approx(means)
    assert two["regret"] == pytest.approx(means["chosen"] - min(means.values()))
    assert two["search_cost"] == pytest.approx(two["searched_loss"] - seeds["chosen"][0])
    report = (tmp_path / "lineage.md").read_text()
    assert f"{means['half']:.4f} ({min(seeds['half']):.4f}-{max(seeds['half']):.4f})" in report
    assert "at 2 seeds" in report and f"{two['searched_loss']:.4f}, {two['search_cost']:+.4f}" in report


def test_regret_trains_the_three_sizes_from_the_start_taking_turns(tmp_path, monkeypatch):
    """The chosen size is trained again from the start beside half and twice it, so the regret compares like with
    like, and the searched run's loss less that run's is the search's cost; the three take turns in slices of their
    time, each slice continuing its run, so a machine that slows part-way slows the three alike; interrupted, the
    same command again goes on after the last finished slice."""
    from hf_seq.experiments import study

    calls, stop_at = [], [7]
    train = study.StudyRun.train

    def spy(self, row, plan, settings, seed, folder, steps, seconds, score, **kw):
        if folder.parent.name == "regret":
            if len(calls) + 1 == stop_at[0]:
                raise KeyboardInterrupt  # interrupted after two slices of each run
            calls.append((folder.name, steps, kw.get("resume", False), kw.get("decay_fraction")))
        return train(self, row, plan, settings, seed, folder, steps, seconds, score, **kw)

    monkeypatch.setattr(study.StudyRun, "train", spy)
    args = dict(quick=True, output_dir=tmp_path, members=("gpt",), budget_flops=5e9, regret=True, progress=False)
    with pytest.raises(KeyboardInterrupt):
        lineage.run(**args)
    stop_at[0] = None
    result = lineage.run(**args)  # the same command again: each run goes on from its second slice
    (gpt,) = result["members"]
    slices = study.REGRET_SLICES
    assert [name for name, *_ in calls] == ["gpt-half-seed0", "gpt-chosen-seed0", "gpt-twice-seed0"] * slices
    trained = gpt["steps"]
    for k in range(slices):  # slice k of every run: to k/slices of the chosen run's steps, its decay in the last
        for name, steps, resume, decay in calls[3 * k : 3 * k + 3]:
            assert steps == round(trained * (k + 1) / slices) and resume == (k > 0), (name, k)
            assert decay == (sizing.DECAY_FRACTION if k == slices - 1 else 0.0)
    fresh = json.loads((tmp_path / "regret" / "gpt-chosen-seed0" / "metrics.json").read_text())
    assert fresh["steps"] == trained and fresh["final_learning_rate"] == pytest.approx(0.0, abs=1e-12)
    assert gpt["regret_losses"]["chosen"] == pytest.approx(fresh["eval_loss"])  # not the searched run's
    assert gpt["searched_loss"] == study.lowest_loss(gpt)
    assert gpt["search_cost"] == pytest.approx(gpt["searched_loss"] - fresh["eval_loss"])
    # on a steps clock (a FLOPs budget) the survivor, continued through its rungs, is the fresh run step for step
    assert gpt["search_cost"] == pytest.approx(0.0, abs=1e-4)


def test_the_regret_table_reads_earlier_records_and_a_fresh_run_that_diverged():
    from hf_seq.experiments.lineage_report import regret_lines

    losses = {"chosen": 4.40, "half": 4.38, "twice": 4.50}
    earlier = {"title": "GPT", "non_embedding_params": 800, "regret_sizes": {"half": 400, "twice": 1600},
               "regret_losses": losses, "regret": 0.02, "best_eval_loss": 4.40, "selected_eval_loss": 4.40}  # fmt: skip
    text = "\n".join(regret_lines([earlier]))
    assert "the chosen size's first seed is its searched run" in text and "took turns" not in text
    assert "\n\n| member |" in text and "| GPT | 400, 4.3800 | 800, 4.4000 | 1,600, 4.5000 | 0.0200 |" in text
    text = "\n".join(regret_lines([earlier | {"search_cost": 0.015, "searched_loss": 4.40}]))
    assert "took turns" in text and "searched run" in text and "| 0.0200 | 4.4000, +0.0150 |" in text
    text = "\n".join(regret_lines([earlier | {"search_cost": None, "searched_loss": 4.40}]))
    assert "| 0.0200 | (the chosen from the start diverged) |" in text


def test_regret_is_refused_where_no_size_was_chosen(tmp_path):
    with pytest.raises(ValueError, match="--regret measures the size --sizes auto chose, got --sizes"):
        lineage.run(quick=True, output_dir=tmp_path, sizes=[1000], budget_seconds=5, regret=True)
    with pytest.raises(ValueError, match="--regret takes a number of seeds >= 1"):
        lineage.run(quick=True, output_dir=tmp_path, budget_seconds=5, regret=-1)
    from hf_seq.cli import build_parser

    parse = lambda *extra: build_parser().parse_args(["lineage", *extra]).regret  # noqa: E731
    assert (parse(), parse("--regret"), parse("--regret", "3")) == (0, 1, 3)


def test_regret_measures_members_side_by_side_in_processes_as_one_after_another(tmp_path, capfd):
    """--jobs 2: two members' regret runs in two spawned processes give the very losses the same runs give one after
    another in this one (a FLOPs budget: runs of fixed steps, so the same runs end alike wherever they train)."""
    import shutil

    args = dict(quick=True, members=("gpt", "lstm"), budget_flops=5e9, regret=True, threads=1)
    alone = lineage.run(output_dir=tmp_path / "alone", progress=False, **args)
    shutil.copytree(tmp_path / "alone", tmp_path / "side", ignore=shutil.ignore_patterns("regret"))
    capfd.readouterr()
    side = lineage.run(output_dir=tmp_path / "side", jobs=2, progress=True, **args)
    out = capfd.readouterr().out
    assert "holds this very study, finished: its records are reused" in out
    assert "2 members' runs in 2 processes side by side, 1 thread each" in out
    assert {p.name for p in (tmp_path / "side" / "regret").iterdir()} == {
        f"{name}-{label}-seed0" for name in ("gpt", "lstm") for label in ("half", "chosen", "twice")}  # fmt: skip
    for one, two in zip(alone["members"], side["members"], strict=True):
        assert two["regret_sizes"] == one["regret_sizes"]
        assert two["regret_losses"] == pytest.approx(one["regret_losses"], abs=1e-5)
        assert two["regret"] == pytest.approx(one["regret"], abs=1e-5)


def test_jobs_is_refused_without_regret_or_below_one(tmp_path):
    with pytest.raises(ValueError, match="--jobs .* more than 1 only with --regret; got --jobs 2 without --regret"):
        lineage.run(quick=True, output_dir=tmp_path, budget_seconds=5, jobs=2)
    with pytest.raises(ValueError, match="a number >= 1.*got --jobs 0"):
        lineage.run(quick=True, output_dir=tmp_path, budget_seconds=5, regret=True, jobs=0)
