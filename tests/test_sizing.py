"""`hf-seq lineage --sizes auto`: candidates at several sizes share the member's budget by successive halving, judged
by decay branches and their own curves; the survivor continues from its checkpoint; and a whole-study budget holds
(the regret's own tests: tests/test_regret.py)."""

import json
import math
import time

import pytest

from hf_seq.experiments import lineage, lineage_report, sizing


def test_the_survivor_trains_what_the_candidates_rungs_and_branches_leave():
    # 4 candidates to 6% (+ branches of a quarter of that), 2 on to 15% (+ branches), the survivor on to the end
    spent = 4 * (0.06 + 0.25 * 0.06) + 2 * (0.09 + 0.25 * 0.15)
    assert sizing.survivor_share(4) == pytest.approx(0.15 + 1 - spent)
    assert sizing.survivor_share(1) > sizing.survivor_share(2) > sizing.survivor_share(4)  # fewer candidates: more


def power_curve(e, a, alpha, times):
    return [(t, e + a * t**-alpha) for t in times]


def test_a_candidate_is_judged_at_the_end_its_own_curve_predicts():
    times = [10.0 * k for k in range(1, 9)]
    # a slow starter (large A, small alpha) still falls a lot after the rung; a fast one has flattened
    slow, fast = power_curve(2.0, 6.0, 0.4, times), power_curve(2.9, 3.0, 1.0, times)
    at, end = 80.0, 800.0
    judged_slow, judged_fast = sizing.judge(slow, slow[-1][1], at, end), sizing.judge(fast, fast[-1][1], at, end)
    assert slow[-1][1] > fast[-1][1]  # at the rung the fast one is ahead ...
    assert judged_slow["predicted_loss"] < judged_fast["predicted_loss"]  # ... at the end the slow one wins
    true_drop = 6.0 * (at**-0.4 - end**-0.4)
    observed = slow[2][1] - slow[-1][1]  # the cap: the observed drop per log-time, carried to the end
    cap = observed * math.log(end / at) / math.log(at / slow[2][0])
    assert judged_slow["predicted_drop"] == pytest.approx(min(true_drop, cap), rel=0.05)
    flat = [(t, 3.0) for t in times]
    assert sizing.judge(flat, 2.9, at, end)["predicted_loss"] == pytest.approx(2.9)  # no drop: the branch alone
    assert sizing.judge(flat[:2], 2.9, at, end)["fit"] is None  # too few points: the branch alone judges


def test_from_the_second_rung_a_candidate_is_judged_by_its_two_branches():
    """An earlier Austen study's GPT at its second rung (docs/lineage/prose's history): 134k's stable curve predicted
    the larger further drop and kept it, though 400k's branches were lower and fell faster; by the branches' slope
    400k wins."""
    at, end, earlier_at = 156.0, 619.0, 63.0
    small = sizing.judge(power_curve(3.0, 40.0, 0.5, [20.0 * k for k in range(2, 9)]), 5.0316, at, end,
                         earlier=(earlier_at, 5.3735))  # fmt: skip
    large = sizing.judge(power_curve(4.5, 5.0, 0.5, [20.0 * k for k in range(2, 9)]), 4.9882, at, end,
                         earlier=(earlier_at, 5.4017))  # fmt: skip
    assert small["judged_by"] == large["judged_by"] == "branches"
    slope = (5.4017 - 4.9882) / math.log(at / earlier_at)
    assert large["predicted_drop"] == pytest.approx(slope * math.log(end / at))
    assert large["predicted_loss"] < small["predicted_loss"]
    # a branch that rose (noise, or the larger rate's instability) predicts no drop, never a rise
    assert sizing.judge([], 5.1, at, end, earlier=(earlier_at, 5.0))["predicted_loss"] == pytest.approx(5.1)
    # a curve alone (the first rung) is judged by the curve
    assert sizing.judge(power_curve(3.0, 40.0, 0.5, [20.0 * k for k in range(1, 9)]), 5.0, at, end)["judged_by"] == "curve"


def test_repeated_data_is_worth_less_and_a_candidate_that_repeats_more_is_judged_so():
    # Muennighoff et al. 2023, eq. 5: U unique tokens seen 1 + R times are worth U (1 + R* (1 - exp(-R / R*)))
    assert sizing.effective_epochs(0.7) == 0.7  # inside the first epoch: unchanged
    assert sizing.effective_epochs(1 + sizing.REPETITION) == pytest.approx(1 + sizing.REPETITION * (1 - math.exp(-1)))
    assert sizing.effective_epochs(100.0) < 1 + sizing.REPETITION  # however often it is repeated
    # two candidates whose branches are the same, one passing 10x the epochs (a small model on a small corpus): the
    # one that would repeat its data 20 times by the end is predicted to gain less from it
    at, end, earlier = 150.0, 600.0, (60.0, 5.4)
    fresh = sizing.judge([], 5.0, at, end, earlier=earlier, epochs_per_unit=0.002)  # 1.2 epochs at the end
    repeating = sizing.judge([], 5.0, at, end, earlier=earlier, epochs_per_unit=0.02)  # 12 epochs at the end
    assert repeating["predicted_drop"] < 0.9 * fresh["predicted_drop"]
    no_rate = sizing.judge([], 5.0, at, end, earlier=earlier)
    assert fresh["predicted_drop"] == pytest.approx(no_rate["predicted_drop"], rel=0.03)  # barely past one epoch


def candidate(size: int, branch_loss: float, predicted_loss: float | None = None, reached: float = 62.0, **more):
    return {"candidate": str(size), "non_embedding_params": size, "branch_loss": branch_loss, "reached": reached,
            "predicted_loss": branch_loss if predicted_loss is None else predicted_loss, **more}  # fmt: skip


def test_a_rung_keeps_the_sizes_nearest_its_leader_grown_to_the_end():
    """The previous Austen run's LSTM (docs/lineage/prose's history) at its first rung (62 s of a survivor's 618): 100k,
    the smallest, had the lowest branch, and its stable curve predicted it the lowest loss at the end, so 100k and
    201k went on; trained for the whole run, 403k beat 201k by 0.044 nats. The compute-optimal size grows about as
    compute^0.5 (Hoffmann et al. 2022): the aim is 100k x (618 / 62)^0.5 = 316k, and 398k and 201k go on."""
    rung = [candidate(100096, 5.2766, 4.1248), candidate(201180, 5.2887, 4.2136), candidate(398780, 5.3251, 4.2316),
            candidate(798080, 5.4429, 4.4239)]  # fmt: skip
    ranked, aim = sizing.rank(rung, 618.0)
    assert aim["leader"] == "100096" and aim["size"] == pytest.approx(100096 * (618 / 62) ** 0.5)
    assert [c["candidate"] for c in ranked[:2]] == ["398780", "201180"]
    # repeated data buys less: a leader that would pass its corpus 30 times by the end aims lower
    repeating, _ = sizing.rank([c | {"epochs": 3.0} for c in rung], 618.0)
    assert sizing.aim([c | {"epochs": 3.0} for c in rung], 618.0)["size"] < 0.8 * aim["size"]
    assert [c["candidate"] for c in repeating[:2]] == ["201180", "398780"]
    # one size at two learning rates (--tune): the lower predicted loss first; a diverged candidate last
    tuned = [candidate(200000, 5.0, 4.3, candidate="a"), candidate(200000, 5.1, 4.1, candidate="b"),
             candidate(400000, math.inf, math.inf, candidate="c")]  # fmt: skip
    assert [c["candidate"] for c in sizing.rank(tuned, 62.0 * 4)[0]] == ["b", "a", "c"]
    assert sizing.rank([candidate(1000, math.inf)], 600.0) == ([candidate(1000, math.inf, tokens_per_parameter=None)],
                                                               None)  # fmt: skip


def test_a_size_that_would_see_too_few_tokens_per_parameter_is_set_aside():
    """GPT's first rung in the Austen hour on the slower machine (docs/lineage/prose/slower): 400k led, the aim grew it
    to 1.2M, and 800k went on, to be beaten at the end by 400k (0.045 nats per token). At the rate each trained, by
    the survivor's end (614 s) the 800k would have seen 2.6 effective tokens per non-embedding parameter: under the
    floor, so 400k and 200k go on."""
    corpus = 880256
    rung = [candidate(799776, 5.5230, epochs=0.247), candidate(399884, 5.4835, epochs=0.316),
            candidate(199938, 5.5352, epochs=0.419), candidate(100097, 5.5187, epochs=0.479)]  # fmt: skip
    rung = [c | {"tokens": c["epochs"] * corpus} for c in rung]
    ranked, aim = sizing.rank(rung, 614.0)
    assert aim["leader"] == "399884" and aim["size"] > 799776  # the aim alone would keep 800k first
    assert [c["candidate"] for c in ranked] == ["399884", "199938", "100097", "799776"]
    per_parameter = {c["candidate"]: c["tokens_per_parameter"] for c in ranked}
    rate = 0.247 * corpus / 62.0  # tokens a second; 614 s is 2.4 epochs, worth a little less than 2.4 fresh ones
    assert per_parameter["799776"] == pytest.approx(rate * sizing.effective_clock(0.247 / 62.0)(614.0) / 799776)
    assert per_parameter["799776"] < sizing.MIN_TOKENS_PER_PARAMETER < per_parameter["399884"]
    # the faster machine's Mamba: its 408k would see 5.9 tokens per parameter, clears the floor and goes on first
    fast = [candidate(408704, 5.2962, epochs=0.291), candidate(175232, 4.9228, epochs=0.535)]
    fast = [c | {"tokens": c["epochs"] * corpus} for c in fast]
    assert [c["candidate"] for c in sizing.rank(fast, 616.0)[0]] == ["408704", "175232"]
    # when none clears the floor, the most tokens per parameter first: the smallest at the same rate
    starved = [c | {"tokens": c["epochs"] * corpus / 10} for c in rung]
    assert [c["candidate"] for c in sizing.rank(starved, 614.0)[0]] == ["100097", "199938", "399884", "799776"]
    # a record without a token count (older runs) is ranked by the aim alone
    assert sizing.rank([candidate(1000, 5.0)], 600.0)[0][0]["tokens_per_parameter"] is None


def test_below_a_members_smallest_shape_it_goes_a_layer_shallower(tmp_path):
    """GPT at three layers of the quick width has ~3,300 non-embedding parameters at its smallest feed-forward: a
    target of 1,500 (a search's quarter, a regret's half) is met with one layer, not by the three-layer minimum."""
    result = lineage.run(quick=True, output_dir=tmp_path, members=("gpt",), sizes=[1500, 20000], set=["gpt.layers=3"],
                         budget_tokens=8 * 32 * 2, progress=False)  # fmt: skip
    small, large = sorted(result["members"], key=lambda r: r["target"])
    assert small["config"]["num_hidden_layers"] == 1 and abs(small["non_embedding_params"] - 1500) < 0.25 * 1500
    assert large["config"]["num_hidden_layers"] == 3  # a target the member's depth can meet keeps its depth


def test_sizes_auto_searches_inside_the_budget_and_the_survivor_continues(tmp_path):
    # evaluations every 5 steps: not a multiple of the first rung's cadence (its curve's 8 points)
    result = lineage.run(quick=True, output_dir=tmp_path, members=("ngram", "gpt"), budget_flops=3e10, progress=False,
                         set=["eval_every=5"])  # fmt: skip
    assert result["sizes"] == ["auto"]  # the default under a FLOPs budget
    (gpt,) = [r for r in result["members"] if r["name"] == "gpt"]
    search = gpt["search"]
    first, second = search["rungs"]
    assert len(first["candidates"]) == len(sizing.SCALES) and len(first["kept"]) == sizing.KEEP[0]
    assert {c["candidate"] for c in second["candidates"]} == set(first["kept"])
    # the first rung is judged by each candidate's curve, the second by its two branches
    assert {c["judged_by"] for c in second["candidates"]} == {"branches"}
    assert all(c["earlier_branch"][0] < c["reached"] for c in second["candidates"])
    assert second["kept"] == [str(gpt["non_embedding_params"])] == [search["chosen"]]
    # the kept are the candidates nearest the size aimed at (the rung's lowest branch loss, grown to the end) of those
    # that would see enough tokens per parameter by the end, the FLOPs budget's steps at the size's tokens a step
    leader = min(first["candidates"], key=lambda c: c["branch_loss"])
    assert first["aim"]["leader"] == leader["candidate"] and first["aim"]["growth"] > 1
    clear = [c for c in first["candidates"] if c["tokens_per_parameter"] >= sizing.MIN_TOKENS_PER_PARAMETER]
    distance = [abs(math.log(c["non_embedding_params"] / first["aim"]["size"])) for c in clear]
    assert len(clear) >= 2 and distance == sorted(distance) and first["candidates"][: len(clear)] == clear
    assert first["kept"] == [c["candidate"] for c in first["candidates"][:2]]
    end = sizing.survivor_share(len(first["candidates"])) * search["budget"]
    for c in first["candidates"]:  # tokens per parameter: the rung's rate carried to the end, repeats worth less
        fresh = sizing.effective_clock(c["epochs"] / c["reached"])(end)
        assert c["tokens_per_parameter"] == pytest.approx(c["tokens"] / c["reached"] * fresh / c["non_embedding_params"])
        assert fresh < end  # this tiny corpus is passed many times by the end
    # the survivor's run is the candidate's own, continued: its evaluations start inside the first rung
    total = search["budget"]
    assert gpt["curve"][0]["step"] <= sizing.RUNGS[0] * total
    # past its first rung (its curve's points) it evaluates at the study's cadence, and where each rung stopped: later
    # rungs are judged by their branches, not a curve
    stops = {c["reached"] for rung in search["rungs"] for c in rung["candidates"]} | {gpt["steps"]}
    later = [point["step"] for point in gpt["curve"] if point["step"] > min(stops) and point["step"] not in stops]
    assert later and all(step % 5 == 0 for step in later), later
    assert gpt["steps"] == round(sizing.survivor_share(len(first["candidates"])) * total)
    # every candidate's branch is a copy: the candidate's folder went on from its own checkpoint
    folders = sorted(p.name for p in (tmp_path / "search").iterdir())
    assert any(name.endswith("-branch1") for name in folders) and any(name.endswith("-branch2") for name in folders)
    report = (tmp_path / "lineage.md").read_text()
    assert (
        "## How the sizes were chosen" in report
        and f"{gpt['non_embedding_params']:,} non-embedding parameters went on from the last rung" in report
    )
    saved = json.loads((tmp_path / "lineage.json").read_text())
    assert saved["members"][1]["search"]["chosen"] == search["chosen"]


def test_sizes_auto_needs_a_seconds_or_flops_budget(tmp_path):
    with pytest.raises(ValueError, match="--sizes auto needs a --budget-seconds, --study-seconds or --budget-flops"):
        lineage.run(quick=True, output_dir=tmp_path, sizes="auto", budget_tokens=1000)


def test_a_whole_study_budget_holds_within_five_percent_and_regret_is_measured(tmp_path):
    """--study-seconds: the data, the n-gram, every candidate and branch, the scored runs: within 5% of it. --regret
    (after the study, not in its seconds) trains half and twice the chosen size as long as the chosen run."""
    budget = 30.0
    started = time.monotonic()
    result = lineage.run(quick=True, output_dir=tmp_path, members=("ngram", "gpt", "lstm"), study_seconds=budget,
                         regret=True, threads=1, progress=False)  # fmt: skip
    assert abs(result["elapsed_seconds"] - budget) <= 0.05 * budget, result["elapsed_seconds"]
    assert time.monotonic() - started > budget  # the regret's runs came after
    for r in result["members"]:
        if r["name"] == "ngram":
            continue
        losses = r["regret_losses"]
        assert r["regret"] == pytest.approx(losses["chosen"] - min(losses.values()))
        assert r["regret_sizes"]["half"] < r["non_embedding_params"] < r["regret_sizes"]["twice"]
    report = (tmp_path / "lineage.md").read_text()
    assert "### The choice measured: regret" in report and "30 s for the whole study" in report
    # who leads at the end: the member whose best measured size (the chosen, half or twice) has the lowest loss
    networks = [r for r in result["members"] if r["name"] != "ngram"]
    best = {r["title"]: min(r["regret_losses"].values()) for r in networks}
    (end_row,) = [line for line in report.splitlines() if line.startswith("| the end |")]
    assert end_row.rstrip(" |").endswith(min(best, key=best.get))
    assert f"{min(best.values()):.4f}" in end_row


def test_a_whole_study_budget_is_one_budget(tmp_path):
    with pytest.raises(ValueError, match="give one budget"):
        lineage.run(quick=True, output_dir=tmp_path, study_seconds=60, budget_seconds=10)
    for bad in (-1, 0):  # 0 is not "no budget": it is refused, not ignored
        with pytest.raises(ValueError, match="--study-seconds must be positive"):
            lineage.run(quick=True, output_dir=tmp_path, study_seconds=bad)


def test_the_translation_lineage_sizes_its_members_by_the_same_rule(tmp_path):
    from hf_seq.experiments import lineage_translation as lt
    from tests.test_lineage_translation import write_parallel

    train, valid, test = write_parallel(tmp_path, counts=(300, 16, 16))
    result = lt.run(
        quick=True, output_dir=tmp_path / "out", corpus=str(train), validation=str(valid), test=str(test),
        source_column="en", target_column="es", members=("transformer",), budget_flops=1e9, threads=1,
        regret=True, progress=False,
    )  # fmt: skip
    assert result["sizes"] == ["auto"]
    for r in result["members"]:
        assert r["search"]["chosen"] == str(r["non_embedding_params"]), r["name"]
        # its scored run keeps the evaluation of highest BLEU; the regret compares its lowest validation loss, as
        # the half and twice runs (selected by loss) report theirs
        assert r["searched_loss"] == min(c["eval_loss"] for c in r["curve"]) <= r["selected_eval_loss"]
    report = (tmp_path / "out" / "lineage.md").read_text()
    assert "## How the sizes were chosen" in report


def test_with_tune_the_search_tries_each_size_at_each_trials_settings(tmp_path):
    result = lineage.run(quick=True, output_dir=tmp_path, members=("gpt",), budget_flops=3e10, tune=2, progress=False)
    (gpt,) = result["members"]
    first = gpt["search"]["rungs"][0]["candidates"]
    sizes = {c["non_embedding_params"] for c in first}
    assert len(first) == 2 * len(sizes)
    assert sorted({c["learning_rate"] for c in first}) == pytest.approx([1.5e-3, 3e-3])  # the two trials' rates
    winner = gpt["search"]["rungs"][-1]["candidates"][0]  # nearest the aim; at one size, the lower predicted loss
    assert gpt["learning_rate"] == winner["learning_rate"] and gpt["search"]["chosen"] == winner["candidate"]
    assert "(lr " in (tmp_path / "lineage.md").read_text()


def test_the_report_names_a_size_the_floor_set_aside():
    """The last rung of GPT on the slower VM (docs/lineage/prose/slower), ranked with the floor: the report says why
    400k went on where the aim was nearer 800k."""
    rung = [candidate(799776, 5.0761, reached=155.0, epochs=0.640), candidate(399884, 5.0587, reached=155.0, epochs=0.805)]
    rung = [c | {"tokens": c["epochs"] * 880256} for c in rung]
    ranked, aim = sizing.rank(rung, 614.0)
    record = {"title": "GPT", "final_eval_loss": 4.59, "seconds": 744.0,
              "search": {"rungs": [{"candidates": ranked, "aim": aim}], "chosen": ranked[0]["candidate"]}}  # fmt: skip
    line = lineage_report.why_chosen(record)
    assert line.startswith("- GPT: 399,884 non-embedding parameters went on") and f"{aim['size']:,.0f}" in line
    seen = next(c["tokens_per_parameter"] for c in ranked if c["candidate"] == "799776")
    assert f"once the nearer 799,776 was set aside: it would see {seen:.1f} tokens per parameter" in line
    ranked_alone, aim_alone = sizing.rank([rung[1]], 614.0)  # nothing set aside: no such clause
    alone = {**record, "search": {"rungs": [{"candidates": ranked_alone, "aim": aim_alone}], "chosen": "399884"}}
    assert "set aside" not in lineage_report.why_chosen(alone)
