"""`hf-seq lineage --quick`: every member trains and is scored on the same held-out tokens, sizes are matched, and
the files the issue names are written."""

import dataclasses
import json
import math
import shutil
import types
from pathlib import Path

import pytest
import torch

from hf_seq.experiments import lineage
from hf_seq.experiments.study import Record


def test_quick_lineage_writes_the_table_curves_and_cards(tmp_path):
    from hf_seq.cli import main

    main(["lineage", "--quick", "--output-dir", str(tmp_path)])
    result = json.loads((tmp_path / "lineage.json").read_text())
    records = {r["name"]: r for r in result["members"]}
    assert list(records) == list(lineage.MEMBERS)
    for name, r in records.items():
        for key in ("params", "non_embedding_params", "train_tokens", "seconds", "eval_bits_per_byte"):
            assert key in r, (name, key)
        assert (tmp_path / name / "README.md").exists(), name  # a model card per member
        # one held-out set for all: the same predicted tokens and bytes
        assert (r["eval_tokens"], r["eval_bytes"]) == (result["eval_tokens"], result["eval_bytes"])
        assert r["train_tokens"] == result["budget_tokens"]  # one token budget
        assert r["curve"], name
    neural = [r for r in records.values() if r["name"] != "ngram"]
    (target,) = result["sizes"]
    for r in neural:  # matched sizes: non-embedding parameters within 5% of the target, equal embeddings (the
        # Mambas, sized by whole layers and expansion factors, to the nearest: 15% at this tiny width)
        tolerance = 0.15 if r["name"] in ("ssm", "mamba2") else 0.05
        assert abs(r["non_embedding_params"] - target) <= tolerance * target, r
    # bits per byte agrees with perplexity through the counts: NLL total in bits / bytes
    for r in records.values():
        nll_bits = torch.log2(torch.tensor(r["eval_perplexity"], dtype=torch.float64)) * r["eval_tokens"]
        assert abs(nll_bits.item() / r["eval_bytes"] - r["eval_bits_per_byte"]) < 1e-6
    assert (tmp_path / "learning_curves.png").stat().st_size > 10_000
    table = (tmp_path / "lineage.md").read_text()
    assert all(lineage.TITLES[name] in table for name in lineage.MEMBERS if name != "ngram")
    # the report's first line names every member of the rows, the HMM among them
    assert table.splitlines()[0] == lineage.LINEAGE.heading(lineage.MEMBERS) and ", HMM, " in table.splitlines()[0]
    # one record type for the n-gram and the networks
    shared = {f.name for f in dataclasses.fields(Record)} | {"tokens_per_second", "target", "seed"}
    assert all(shared <= set(r) for r in records.values())


def test_matched_size_hits_the_target_for_every_neural_member():
    settings = lineage.LINEAGE.settings_for()
    for name in lineage.MEMBERS[1:]:
        size = lineage.matched_size(name, settings, vocab_size=4096)
        _, non_embedding = lineage.count_parameters(lineage.build(name, settings, size, 4096))
        tolerance = 0.03 if name in ("ssm", "mamba2") else 0.02  # the Mambas: whole layers x expansion factors
        assert abs(non_embedding - settings.target) <= tolerance * settings.target, (name, size, non_embedding)


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"give one budget .* got \['seconds', 'tokens'\]"):
        lineage.run(quick=True, output_dir=tmp_path, budget_tokens=100, budget_seconds=1.0)
    with pytest.raises(ValueError, match="--budget-flops must be positive"):
        lineage.run(quick=True, output_dir=tmp_path, budget_flops=-1.0)
    with pytest.raises(ValueError, match="--seeds must be >= 1"):
        lineage.run(quick=True, output_dir=tmp_path, seeds=0)
    with pytest.raises(ValueError, match="--sizes must be positive"):
        lineage.run(quick=True, output_dir=tmp_path, sizes=[0])
    with pytest.raises(ValueError, match="unknown member 'rnn'"):
        lineage.run(quick=True, output_dir=tmp_path, members=("rnn",))


def test_reports_and_cards_name_a_local_corpus_by_its_file_name(tmp_path, monkeypatch):
    """lineage.md, lineage.json, the plot's title and the members' cards are meant to be shared: a local corpus
    appears in them as its file name, never as this machine's path (as `hf-seq push` publishes a recipe)."""
    from hf_seq.cli import main
    from hf_seq.data.corpora import stdlib_texts

    corpus = tmp_path / "home-of-someone-7f3a" / "data" / "corpus-7f3a.txt"
    corpus.parent.mkdir(parents=True)
    corpus.write_text("\n\n".join(stdlib_texts(max_chars=150_000)))
    titles = []
    plot_curves = lineage.plot_curves
    monkeypatch.setattr(
        lineage, "plot_curves", lambda records, path, title: titles.append(title) or plot_curves(records, path, title)
    )
    out = tmp_path / "out"
    main(["lineage", "--quick", "--members", "ngram,gpt", "--corpus", str(corpus), "--output-dir", str(out)])
    # the runs' own recipe.json is the local record that `hf-seq evaluate` and `--resume` read the data from
    # (`hf-seq push` publishes it with names); every other text file is checked
    written = [p for p in out.rglob("*") if p.suffix in (".md", ".json") and p.name != "recipe.json"]
    assert {"lineage.md", "lineage.json", "README.md"} <= {p.name for p in written}
    for path in [*written, *titles]:
        text = path.read_text() if isinstance(path, Path) else path
        for leak in (str(corpus), str(corpus.parent), str(corpus.parent.parent), "home-of-someone-7f3a"):
            assert leak not in text, (path, leak)
    for path in (out / "lineage.md", out / "ngram" / "README.md", out / "gpt" / "README.md"):
        assert "corpus-7f3a.txt" in path.read_text(), path
    assert json.loads((out / "lineage.json").read_text())["corpus"] == "corpus-7f3a.txt"
    assert titles and titles[0].startswith("corpus-7f3a.txt, ")


# ---------------------------------------------------------------------------------------------- the study's knobs
FLOPS = 3e9  # the quick settings' gpt at 6,000 non-embedding parameters: about 40 steps of 8 x 32 tokens


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """One quick study with every knob turned: two sizes, two seeds, two tuning trials, a FLOPs budget, and a test
    split, on a one-sentence-a-line corpus (held-out part: its own validation file)."""
    from tests.test_corpus_layout import sentence_files

    folder = tmp_path_factory.mktemp("study")
    train, valid, test = sentence_files(folder, lines=(900, 80, 80))
    result = lineage.run(
        quick=True, output_dir=folder / "out", corpus=str(train), validation=str(valid), test=str(test),
        members=("ngram", "gpt", "lstm"), sizes=[3000, 6000], seeds=2, tune=2, budget_flops=FLOPS, progress=False,
    )  # fmt: skip
    return folder / "out", result


def neural(result, **where):
    return [r for r in result["members"] if r["name"] != "ngram" and all(r[k] == v for k, v in where.items())]


def test_tune_gives_every_member_the_same_trials_and_keeps_the_best(study):
    _, result = study
    grids = {
        (r["name"], r["target"]): [(t["learning_rate"], t["dropout"]) for t in r["trials"]] for r in neural(result)
    }
    assert len(set(map(tuple, grids.values()))) == 1  # the same trials for every member and size
    (grid,) = set(map(tuple, grids.values()))
    assert len(grid) == 2 and len({lr for lr, _ in grid}) == 2
    for r in neural(result):
        best = min(r["trials"], key=lambda t: t["eval_loss"])
        assert (r["learning_rate"], r["dropout"]) == (best["learning_rate"], best["dropout"]), r["name"]
    assert lineage.trial_grid(1, lineage.SETTINGS["quick"], past_epoch=False)[0]["learning_rate"] == 3e-3


def test_sizes_give_one_table_each_and_a_scaling_plot(study):
    out, result = study
    for target in (3000, 6000):
        for r in neural(result, target=target):
            assert abs(r["non_embedding_params"] - target) <= 0.05 * target, r["name"]
    table = (out / "lineage.md").read_text()
    assert "## Non-embedding parameters 3,000" in table and "## Non-embedding parameters 6,000" in table
    assert (out / "scaling.png").stat().st_size > 10_000


def test_seeds_give_the_mean_and_spread_of_the_test_score(study):
    _, result = study
    assert result["metric"] == "test_bits_per_byte"
    for row in result["summary"]:
        runs = [
            r["test_bits_per_byte"]
            for r in result["members"]
            if (r["name"], r["target"]) == (row["name"], row["target"])
        ]
        assert row["mean"] == pytest.approx(sum(runs) / len(runs)) and (row["min"], row["max"]) == (
            min(runs),
            max(runs),
        )
        assert row["seeds"] == (1 if row["name"] == "ngram" else 2)
    for name in ("gpt", "lstm"):
        seeds = neural(result, name=name, target=6000)
        assert {r["seed"] for r in seeds} == {0, 1} and seeds[0]["test_bits_per_byte"] != seeds[1]["test_bits_per_byte"]


def test_a_flops_budget_gives_each_member_the_steps_its_flops_per_token_allow(study):
    _, result = study
    s = lineage.SETTINGS["quick"]
    per_step = s.batch_size * s.block_size
    for r in neural(result):
        assert r["flops_per_token"] > 0
        assert r["train_tokens"] == math.ceil(FLOPS / (r["flops_per_token"] * per_step)) * per_step, r["name"]
    small, large = (neural(result, name="gpt", target=t, seed=0)[0] for t in (3000, 6000))
    assert large["train_tokens"] < small["train_tokens"]
    for r in neural(result):  # the record names of the issue
        for key in ("validation_bits_per_byte", "test_bits_per_byte", "test_perplexity", "best_step", "epochs",
                    "flops_per_token", "trials", "seed"):  # fmt: skip
            assert r[key] is not None, (r["name"], key)


def test_sizes_parse_with_their_suffixes():
    from hf_seq.cli import parse_sizes

    assert parse_sizes("0.4M,1.6M,400K,1000") == [400_000, 1_600_000, 400_000, 1000]


def test_the_same_command_again_reuses_the_finished_runs(study, capsys):
    """A study stopped part-way is started again with the same command: finished runs (trials too) are reused, not
    trained again, and give the same figures."""
    out, result = study
    kwargs = json.loads((out / "lineage.json").read_text())
    command = dict(
        quick=True, output_dir=out, corpus=str(out.parent / "train.txt"), validation=str(out.parent / "valid.txt"),
        test=str(out.parent / "test.txt"), members=("ngram", "gpt", "lstm"), sizes=[3000, 6000], seeds=2, tune=2,
        budget_flops=FLOPS, progress=True,
    )  # fmt: skip
    finished = lineage.run(**command)  # the study had finished: its lineage.json is the answer
    printed = capsys.readouterr().out
    assert "holds this very study, finished: its records are reused" in printed and "training:" not in printed
    assert finished == kwargs
    (out / "lineage.json").unlink()  # as if it had stopped before its end: every run is reused, one by one
    again = lineage.run(**command)
    printed = capsys.readouterr().out
    assert printed.count("reused") == 2 * 2 * (2 + 2) and "training:" not in printed
    assert [r["test_bits_per_byte"] for r in again["members"]] == [r["test_bits_per_byte"] for r in result["members"]]
    assert kwargs["summary"] == again["summary"]


def test_a_run_saved_before_a_recipe_key_existed_is_reused_and_a_changed_one_is_not(study, tmp_path):
    """finished_run reads the saved recipe through the loader: a key missing from it (added to hf-seq after the run)
    means its default, so the run is reused, read back as a RunResult; a setting that differs means a different run."""
    from hf_seq.training.recipes import load_recipe
    from hf_seq.training.runs import finished_run

    out, _ = study
    folder = shutil.copytree(out / "gpt-6000-seed0", tmp_path / "run")
    saved = json.loads((folder / "recipe.json").read_text())
    recipe = load_recipe(saved, [f"training.output_dir={folder}"])
    older = json.loads(json.dumps(recipe.to_dict()))
    del older["training"]["generation_length_penalty"], older["training"]["generation_max_length_a"]
    (folder / "recipe.json").write_text(json.dumps(older))
    metrics = json.loads((folder / "metrics.json").read_text())
    reused = finished_run(recipe)
    assert reused.summary == {k: v for k, v in metrics.items() if k not in ("evaluations", "learning_rates")}
    assert reused.evaluations == metrics["evaluations"] and reused.model.config.model_type == "hf_seq_gpt"
    (folder / "metrics.json").write_text(json.dumps(metrics | {"stopped": {"reason": "diverged", "step": 9}}))
    assert finished_run(recipe) is None  # a run continued from this one diverged: not a finished run to reuse
    (folder / "metrics.json").write_text(json.dumps(metrics))
    older["training"]["learning_rate"] *= 2
    (folder / "recipe.json").write_text(json.dumps(older))
    assert finished_run(recipe) is None


def test_the_power_law_fit_recovers_a_known_frontier_and_inverts_it():
    from hf_seq.experiments.study import fit_power_law, lower_envelope, power_law_reaches

    xs = [10 ** (3 + k / 2) for k in range(9)]
    curve = [(x, 1.2 + 30 * x**-0.3) for x in xs]
    # worse runs above the frontier (a bad learning rate at the same compute) are not on the envelope
    noisy = curve + [(x * 1.01, y + 0.5) for x, y in curve]
    assert lower_envelope(noisy) == curve
    fit = fit_power_law(lower_envelope(noisy))
    assert fit["floor"] == pytest.approx(1.2, abs=0.01) and fit["alpha"] == pytest.approx(0.3, rel=0.03)
    x = power_law_reaches(fit, 1.5)
    assert fit["floor"] + fit["scale"] * x ** -fit["alpha"] == pytest.approx(1.5)
    assert power_law_reaches(fit, 1.1) == math.inf  # below the floor: no compute gets there
    assert fit_power_law(curve[:3]) is None


def _record(name, target, flops_per_token, final, trials):
    """A lineage record with the fields the budget estimate reads: a final run of 100 steps of 10 tokens."""
    return {"name": name, "title": name, "target": target, "seed": 0, "flops_per_token": flops_per_token,
            "train_tokens": 1000, "tokens_per_second": 100.0, "curve": [{"tokens": 1000, "eval_bits_per_byte": final}],
            "trials": [{"steps": 25, "eval_bits_per_byte": t} for t in trials]}  # fmt: skip


def test_the_budget_estimate_names_the_member_that_reaches_the_margin_with_least_compute():
    ngram = {"name": "ngram", "seed": 0, "target": 1, "curve": [
        {"tokens": 1000, "eval_bits_per_byte": 1.5, "eval_tokens": 300, "eval_bytes": 1200}]}  # fmt: skip
    fast = lambda c: 1.0 + 50 * c**-0.3  # noqa: E731
    slow = lambda c: 1.0 + 50 * c**-0.2  # noqa: E731
    records = [ngram]
    for name, law in (("slow", slow), ("fast", fast)):
        for size, fpt in ((1, 1e6), (3, 3e6)):
            records.append(_record(name, size, fpt, law(1000 * fpt), [law(250 * fpt), law(250 * fpt) + 0.3]))
    estimate = lineage.budget_estimate(records, tokens_per_step=10)
    target = 1.5 + math.log2(0.75) * 300 / 1200  # 25% lower perplexity, in bits per byte of the same blocks
    assert estimate["name"] == "fast" and estimate["target_bits_per_byte"] == pytest.approx(target)
    assert fast(estimate["flops"]) == pytest.approx(target, rel=1e-3)
    assert estimate["hours"] == pytest.approx(estimate["flops"] / (100 * 3e6) / 3600)
    by_name = {e["name"]: e for e in estimate["members"]}  # every member's fit, for the report's table
    assert set(by_name) == {"fast", "slow"} and slow(by_name["slow"]["flops"]) == pytest.approx(target, rel=1e-3)
    assert by_name["slow"]["flops"] > estimate["flops"]
    assert lineage.budget_estimate(records[1:], tokens_per_step=10) is None  # no n-gram, no margin


def test_the_report_states_the_best_networks_margin_over_the_ngram(study):
    """The measured margin: the network with the lowest mean test perplexity at the largest size, against the
    n-gram's test perplexity, in lineage.json and in the report."""
    out, result = study
    means = {}
    for r in neural(result, target=6000):
        means.setdefault(r["name"], []).append(r["test_perplexity"])
    best = min(means, key=lambda name: sum(means[name]) / len(means[name]))
    ngram = next(r for r in result["members"] if r["name"] == "ngram")["test_perplexity"]
    margin = result["margin"]
    assert margin["name"] == best and margin["split"] == "test"
    assert margin["margin"] == pytest.approx(1 - sum(means[best]) / len(means[best]) / ngram)
    report = (out / "lineage.md").read_text()
    assert f"test perplexity {margin['perplexity']:.1f} against the n-gram's {ngram:.1f}" in report


def test_a_frontier_whose_floor_is_above_the_margin_says_no_compute_reaches_it():
    ngram = {"name": "ngram", "seed": 0, "target": 1, "curve": [
        {"tokens": 1000, "eval_bits_per_byte": 1.5, "eval_tokens": 300, "eval_bytes": 1200}]}  # fmt: skip
    law = lambda c: 1.6 + 50 * c**-0.3  # noqa: E731  (its floor, 1.6, is above the n-gram itself)
    records = [ngram] + [
        _record("gpt", size, fpt, law(1000 * fpt), [law(250 * fpt)]) for size, fpt in ((1, 1e6), (3, 3e6))
    ]
    estimate = lineage.budget_estimate(records, tokens_per_step=10)
    assert estimate["flops"] is None and estimate["hours"] is None and not estimate["reached"]
    json.dumps(estimate, allow_nan=False)  # lineage.json stays standard JSON
    result = {"sizes": [3], "estimate": estimate, "margin": {"split": "test", "name": "gpt", "perplexity": 90.0,
              "ngram": 60.0, "margin": -0.5}}  # fmt: skip
    assert "floor lies above the target" in "\n".join(lineage.margin_lines(result))


def test_a_seconds_budget_turns_dropout_on_when_the_measured_speed_passes_an_epoch():
    """Under a seconds budget the steps are not known in advance: the member's measured step time says whether the
    budget will pass an epoch of the corpus (and so whether dropout is on by default); other budgets never time."""
    from hf_seq.experiments.study import Options, StudyRun, plan_steps

    def never() -> float:
        raise AssertionError("a token budget needs no timing")

    assert plan_steps({"seconds": 10.0}, 0, 1, 100, 50_000, lambda: 0.01) == (None, True)  # 1,000 steps: 2 epochs
    assert plan_steps({"seconds": 10.0}, 0, 1, 100, 50_000, lambda: 0.5) == (None, False)  # 20 steps
    assert plan_steps({"tokens": 200_000}, 0, 1, 100, 50_000, never) == (2000, True)
    s = lineage.LINEAGE.settings_for(quick=True)
    data = types.SimpleNamespace(
        prepared=types.SimpleNamespace(tokenizer=range(320)), vocab_size=320, tokens_per_step=s.batch_size * s.block_size,
        train_tokens=10_000,
    )  # fmt: skip
    long, short = (
        StudyRun(lineage.LINEAGE, s, data, {"seconds": seconds}, Options(), Path("."), print).plan(
            lineage.LINEAGE.row("gpt"), 6000
        )
        for seconds in (1e6, 1e-6)
    )
    assert long.past_epoch and long.steps is None and not short.past_epoch


def test_a_members_step_is_timed_on_the_threads_its_runs_train_on(monkeypatch):
    # timed on every core, then trained on --threads 1, a member's planned speed (and so its dropout) was not its own
    from hf_seq.experiments import study

    threads = []
    monkeypatch.setattr(study, "seconds_per_step", lambda model, batch: threads.append(torch.get_num_threads()) or 1.0)
    s = lineage.LINEAGE.settings_for(quick=True)
    data = types.SimpleNamespace(
        prepared=types.SimpleNamespace(tokenizer=range(320)), vocab_size=320, tokens_per_step=s.batch_size * s.block_size,
        train_tokens=10_000,
    )  # fmt: skip
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        options = study.Options(threads=1)
        study.StudyRun(lineage.LINEAGE, s, data, {"seconds": 10.0}, options, Path("."), print).plan(
            lineage.LINEAGE.row("gpt"), 6000
        )
        assert threads == [1] and torch.get_num_threads() == 2  # the study's own thread count is left as it was
    finally:
        torch.set_num_threads(before)


def test_a_member_added_as_one_row_trains_in_the_quick_lineage(tmp_path, monkeypatch, capsys):
    """A new member is one `Member` row: its name, title, family, config function and knobs. The command's help
    and choices come from the rows, `--set` reaches its knobs, and it is trained and scored like the others."""
    from hf_seq.cli import main
    from hf_seq.experiments.study import Member

    row = Member("deep-lstm", "LSTM, three layers", "rnn", lineage._recurrent("lstm"), {"layers": 3}, {"layers": 2},
                 help="a deeper LSTM", short="deep LSTM")  # fmt: skip
    monkeypatch.setattr(lineage.LanguageModels, "rows", (*lineage.ROWS, row))
    with pytest.raises(SystemExit):
        main(["lineage", "--help"])
    assert "deep-lstm (a deeper LSTM)" in capsys.readouterr().out.replace("\n" + " " * 24, " ")
    main(["lineage", "--quick", "--members", "ngram,deep-lstm", "--set", "deep-lstm.layers=1", "--set", "width=12",
          "--output-dir", str(tmp_path)])  # fmt: skip
    result = json.loads((tmp_path / "lineage.json").read_text())
    record = next(r for r in result["members"] if r["name"] == "deep-lstm")
    assert record["config"]["num_hidden_layers"] == 1 and record["config"]["embedding_size"] == 12
    assert result["settings"]["knobs"]["deep-lstm"] == {"layers": 1} and result["settings"]["width"] == 12
    assert (tmp_path / "deep-lstm" / "model.safetensors").exists() and record["test_bits_per_byte"] is None
    report = (tmp_path / "lineage.md").read_text()
    assert "LSTM, three layers" in report and report.startswith("# The lineage: n-gram, deep LSTM\n")
    assert lineage.LINEAGE.order[-1] == "deep-lstm"  # last in the lectures' order, as in the table


def test_set_names_a_wrong_setting_or_knob_in_one_line(tmp_path, capsys):
    from hf_seq.cli import main

    for argument, message in (
        ("widht=3", "--set widht: not a setting of the language_model lineage"),
        ("gru.layerz=3", "--set gru.layerz: gru has no knob 'layerz'; its knobs: layers"),
        ("ssm.layers=3", "--set ssm.layers: ssm has no knob 'layers'; its knobs: none"),  # its depth is sized
        ("width=abc", "'--set width': expected int, got 'abc'"),
    ):
        with pytest.raises(SystemExit):
            main(["lineage", "--quick", "--set", argument, "--output-dir", str(tmp_path)])
        error = capsys.readouterr().err
        assert error.startswith("hf-seq: error: ") and message in error and error.count("\n") == 1, error
