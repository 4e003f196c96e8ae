"""The lineages' reports: lineage.md for the language models (the tables, the ordering against the lectures', how far
the best network is from the literature's margin over the n-gram, and the compute the fitted frontiers say that
margin takes) and for the translation models (BLEU, chrF, repetition and length ratio, BLEU by source length), with
their plots. Each reads the records `study.Study.run` collects.
"""

import math
import statistics
from pathlib import Path

from hf_seq.experiments import sizing, study
from hf_seq.experiments.study import save_log_plot, summarize


def member_row(result: dict, r: dict, unit: str, perplexity: str) -> str:
    """One member's row of a language-model lineage's table: its sizes, settings, epochs, validation and test
    `unit` (bits_per_byte, bits_per_note) and test perplexity (formatted by `perplexity`), and seconds."""
    fmt = lambda value, spec: "n/a" if value is None else format(value, spec)
    seed = "" if result["seeds"] == 1 or r["family"] is None else f" (seed {r['seed']})"
    return (
        f"| {r['title']}{seed} | {r['params']:,} | {fmt(r['non_embedding_params'], ',')} | "
        f"{fmt(r['flops_per_token'], ',')} | {fmt(r['learning_rate'], '.2g')} | {fmt(r['dropout'], 'g')} | "
        f"{fmt(r['best_step'], 'd')} | {fmt(r['epochs'], '.2f')} | {r['validation_' + unit]:.3f} | "
        f"{fmt(r['test_' + unit], '.3f')} | {fmt(r['test_perplexity'], perplexity)} | {r['seconds']:.0f} |"
    )


def size_sections(result: dict, header: str, row, order, higher_is_better: bool = False) -> list[str]:
    """One section per size: the table (`header`, then `row(record)` for each run at that size) and the paragraph
    on the measured order against the lectures'."""
    summary = summarize(result["members"], result["metric"])
    lines = []
    for target in result["sizes"]:
        heading = "Sizes chosen by the budget" if target == study.AUTO else f"Non-embedding parameters {target:,}"
        lines += [f"## {heading}", "", header, "|" + "---|" * (header.count("|") - 1)]
        lines += [row(r) for r in result["members"] if r["target"] == target]
        rows = [r for r in summary if r["target"] == target]
        lines += study.ordering_lines(rows, order, result["seeds"], higher_is_better)
    return lines + sizing_lines(result)


def sizing_lines(result: dict) -> list[str]:
    """`--sizes auto`: each member's search (hf_seq.experiments.sizing): the candidates at each rung, how each was
    judged (its decay branch's loss, the further drop its curve predicts, the prediction), which went on and why
    the winner won; and with --regret, the chosen size against half and twice it."""
    searched = [r for r in result["members"] if r.get("search") and r["seed"] == 0]
    if not searched:
        return []
    first = searched[0]["search"]
    lines = [
        "",
        "## How the sizes were chosen",
        "",
        f"Each member's candidates, at {', '.join(f'{x:g}' for x in first['scales'])} times the target, shared its "
        "budget by successive halving: at each rung every candidate still in trained at its peak rate (the stable "
        f"phase of the wsd schedule), then a decay branch of {sizing.BRANCH:.0%} of that on a copy gave the loss it "
        "would reach if it stopped there. The candidate with the lowest branch loss leads: it is the best size for "
        "the compute the rung has spent. The survivor will train longer, and the compute-optimal size grows about as "
        f"the square root of compute (Hoffmann et al. 2022), so the size aimed at is the leader's times (survivor's "
        f"end / rung)^{sizing.GROWTH:g}, with the time past a first epoch counted at what repeated data is worth "
        "(Muennighoff et al. 2023); the candidates nearest it in log-size went on, of those that would see at least "
        f"{sizing.MIN_TOKENS_PER_PARAMETER:g} effective tokens per non-embedding parameter by the survivor's end at "
        "the rate they trained (a size under that floor is too large for the time this machine gives it). Each candidate's predicted loss "
        "at the survivor's end (its branch loss less the further drop carried on: at the first rung from its own "
        "stable curve, E + A t^-alpha, from the second from its two branches' slope in log-time) is shown, and "
        "decides between candidates of one size at several learning rates (--tune). The "
        f"survivor continued from its own checkpoint to {first['survivor_share']:.0%} of the budget, the rest having "
        "paid for the candidates and branches. Losses are validation nats per token.",
        "",
        "| member | rung | at | candidate (non-embedding) | branch loss | drop carried to the end | judged | "
        "tokens / parameter by the end | kept |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in searched:
        for k, rung in enumerate(r["search"]["rungs"]):
            for c in rung["candidates"]:
                kept = "yes" if c["candidate"] in rung["kept"] else ""
                if c.get("diverged"):
                    lines.append(f"| {r['title']} | {k + 1} | | {candidate_cell(c)} | diverged | | | | |")
                    continue
                per_parameter = c.get("tokens_per_parameter")
                floor = f"{per_parameter:.1f}" if per_parameter is not None else ""
                lines.append(
                    f"| {r['title']} | {k + 1} | {c['reached']:.0f} {short(rung['unit'])} | {candidate_cell(c)} | "
                    f"{c['branch_loss']:.4f} | {c['predicted_drop']:.4f} | {c['predicted_loss']:.4f} | {floor} | "
                    f"{kept} |"
                )
    lines += ["", *(why_chosen(r) for r in searched)]
    return lines + regret_lines(searched) + budget_lines(searched) + [""]


def candidate_cell(candidate: dict) -> str:
    """A candidate's size, and its learning rate and dropout when the search tried several (--tune)."""
    tuned = "-lr" in candidate["candidate"]
    extra = f" (lr {candidate['learning_rate']:.3g}, dropout {candidate['dropout']:g})" if tuned else ""
    shallower = candidate.get("knobs", {}).get("layers")  # below the member's smallest shape at its depth
    extra += f" ({shallower} layer{'s' * (shallower > 1)})" if shallower else ""
    return f"{candidate['non_embedding_params']:,}{extra}"


def short(unit: str) -> str:
    return {"seconds": "s"}.get(unit, unit)


def why_chosen(record: dict) -> str:
    """One line: the winner, and why it won the last rung (the size aimed at; in records from before the aim, the
    lowest predicted loss)."""
    last = record["search"]["rungs"][-1]
    winner = next(c for c in last["candidates"] if c["candidate"] == record["search"]["chosen"])
    reached = f"it reached {record['final_eval_loss']:.4f} after {record['seconds']:.0f} s."
    aim = last.get("aim")
    if aim:
        (leader,) = [c for c in last["candidates"] if c["candidate"] == aim["leader"]]
        return (
            f"- {record['title']}: {candidate_cell(winner)} non-embedding parameters went on from the last rung, the "
            f"nearest to the size aimed at, {aim['size']:,.0f} (the rung's lowest branch loss, "
            f"{leader['branch_loss']:.4f} at {candidate_cell(leader)}, grown {aim['growth']:.2f} times)"
            f"{under_floor(last, winner, aim)}; {reached}"
        )
    others = sorted((c for c in last["candidates"] if c is not winner), key=lambda c: c["predicted_loss"])
    against = f", against {others[0]['predicted_loss']:.4f} at {candidate_cell(others[0])}" if others else ""
    return (
        f"- {record['title']}: {candidate_cell(winner)} non-embedding parameters won the last rung, judged "
        f"{winner['predicted_loss']:.4f}{against}; {reached}"
    )


def under_floor(rung: dict, winner: dict, aim: dict) -> str:
    """Where the floor of tokens per parameter set nearer candidates aside: which, and what each would have seen."""
    nearer = abs(math.log(winner["non_embedding_params"] / aim["size"]))
    floor = sizing.MIN_TOKENS_PER_PARAMETER
    aside = [
        c for c in rung["candidates"]
        if c.get("tokens_per_parameter") is not None and c["tokens_per_parameter"] < floor
        and abs(math.log(c["non_embedding_params"] / aim["size"])) < nearer
    ]  # fmt: skip
    if not aside:
        return ""
    sizes = " and ".join(candidate_cell(c) for c in aside)
    seen = " and ".join(f"{c['tokens_per_parameter']:.1f}" for c in aside)
    verb, it = ("was", "it") if len(aside) == 1 else ("were", "they")
    return (f", once the nearer {sizes} {verb} set aside: {it} would see {seen} tokens per parameter by the end at "
            f"the rate {it} trained, under the floor of {floor:g}")  # fmt: skip


def regret_cell(record: dict, label: str) -> str:
    """One cell of the regret table: the size and its validation loss (half, chosen or twice)."""
    chosen = record["non_embedding_params"]
    n = chosen if label == "chosen" else record["regret_sizes"][label]
    if label != "chosen" and n == chosen:  # the member's smallest (largest) shape: nothing else to train
        return f"{n:,}: no other shape (the chosen run)"
    loss = record["regret_losses"][label]
    if not math.isfinite(loss):
        return f"{n:,}, diverged"
    values = record.get("regret_seed_losses", {}).get(label, [])
    spread = f" ({min(values):.4f}-{max(values):.4f})" if len(values) > 1 else ""
    return f"{n:,}, {loss:.4f}{spread}"


def regret_lines(searched: list[dict]) -> list[str]:
    """--regret: the chosen size's validation loss against half and twice it, each trained from the start as long
    (with --regret N, the means over N seeds, and their range), and what the search cost its survivor."""
    measured = [r for r in searched if "regret" in r]
    if not measured:
        return []
    seeds = max(len(r.get("regret_seeds", [0])) for r in measured)
    over = f" at {seeds} seeds: each cell is the mean, with the range, and the regret compares the means" if seeds > 1 else ""
    old = any("search_cost" not in r for r in measured)  # records from before the chosen size was trained again
    lines = [
        "",
        "### The choice measured: regret",
        "",
        "Each member trained again from the start at half, the same and twice its chosen size, for as long as the "
        f"chosen run trained (the same wsd schedule){over}; the three runs of a seed took turns, in "
        f"{study.REGRET_SLICES} slices of their time each, so that the machine's speed, which drifts, was the same "
        "for the three. The regret is the chosen size's validation loss less the best of the three (0: the choice was "
        "the best of them). The searched run is the one the study scored: continued through the search's rungs, at "
        "the first seed; its cost is its loss less the chosen size's from the start at that seed.",
        "",
        "| member | half: N, loss | chosen: N, loss | twice: N, loss | regret (nats per token) | the searched run: "
        "loss, cost |",
        "|---|---|---|---|---:|---|",
    ]
    if old:
        lines[3] = (
            "Each member trained again from the start at half and twice its chosen size, for as long as the chosen "
            f"run trained (the same wsd schedule){over}; the chosen size's first seed is its searched run. The regret "
            "is the chosen size's validation loss less the best of the three (0: the choice was the best of them)."
        )
    for r in measured:
        cells = [regret_cell(r, label) for label in ("half", "chosen", "twice")]
        cost = r.get("search_cost", "old")
        searched = {"old": "the chosen's first seed", None: "(the chosen from the start diverged)"}.get(cost)
        searched = searched or f"{study.lowest_loss(r):.4f}, {cost:+.4f}"
        lines.append(f"| {r['title']} | {' | '.join(cells)} | {r['regret']:.4f} | {searched} |")
    return lines


def budget_lines(searched: list[dict]) -> list[str]:
    """Which member leads at each budget the search measured: at each rung every candidate's decay branch is the loss
    it ends at for that budget, and at the end the chosen run (with --regret, half and twice it too); each member's
    best size there, and the leader. Needs two searched members."""
    if len(searched) < 2:
        return []
    points = [_rung_points(r) for r in searched]
    lines = [
        "",
        "### Who leads at each budget",
        "",
        "The search measured each member at several sizes and budgets: a candidate's decay branch at a rung is the "
        f"loss it ends at when its training stops there (the rung's time and the branch, {sizing.BRANCH:.0%} more), "
        "and the end is the scored run (and with --regret, half and twice its size, trained as long). Each cell is "
        "the member's best measured size at that budget: validation loss (nats per token), size, training time. The "
        "sizes differ by budget: a rung measures every size still in, the end only the chosen and its neighbours.",
        "",
        "| budget | " + " | ".join(r["title"] for r in searched) + " | leads |",
        "|---|" + "---|" * len(searched) + "---|",
    ]
    for k, label in enumerate([f"rung {i + 1}" for i in range(len(sizing.RUNGS))] + ["the end"]):
        cells = [p[k] if k < len(p) else None for p in points]
        leader = min((c for c in cells if c), key=lambda c: c[0], default=None)
        shown = [f"{c[0]:.4f} at {c[1]:,} ({c[2]:.0f} {c[3]})" if c else "" for c in cells]
        lead = searched[cells.index(leader)]["title"] if leader else ""
        lines.append(f"| {label} | {' | '.join(shown)} | {lead} |")
    return lines


def _rung_points(record: dict) -> list[tuple | None]:
    """(loss, size, time, unit) of the member's best measured size at each rung's branch, then at the end."""
    search, points = record["search"], []
    for rung in search["rungs"]:
        done = [c for c in rung["candidates"] if not c.get("diverged") and math.isfinite(c["branch_loss"])]
        best = min(done, key=lambda c: c["branch_loss"], default=None)
        points.append(best and (best["branch_loss"], best["non_embedding_params"],
                                best["reached"] * (1 + sizing.BRANCH), short(search["unit"])))  # fmt: skip
    end = {record["non_embedding_params"]: record.get("regret_losses", {}).get("chosen", study.lowest_loss(record))}
    for label, n in record.get("regret_sizes", {}).items():
        end.setdefault(n, record["regret_losses"][label])
    n, loss = min(end.items(), key=lambda item: item[1])
    trained = record["seconds"] if search["unit"] == "seconds" else record["steps"]
    return points + [(loss, n, trained, short(search["unit"]))]


def _at_size(target) -> str:
    return "at the size chosen for the budget" if target == study.AUTO else f"at {target:,} non-embedding parameters"


def _loss(value) -> str:
    return "" if value is None else f"{value:.3f}"


# ---------------------------------------------------------------------------------------------- language models
def plot_curves(records: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for record in records:
        points = [(c["tokens"], c["eval_bits_per_byte"]) for c in record["curve"] if c["tokens"] > 0]
        if not points:
            continue
        style = "s--" if record["name"] == "ngram" else "o-"
        ax.plot(*zip(*points), style, ms=3, lw=1.5, label=record["title"])
    save_log_plot(fig, ax, "training tokens", "held-out bits per byte (validation)", title, path)


# The literature's margin on corpora of about a million words: on Penn Treebank, Zaremba et al. (2014)'s medium LSTM
# with dropout is 42% below a 5-gram Kneser-Ney model in perplexity (82 against 141); the report says what compute
# the networks would need to be this far below the n-gram.
NGRAM_MARGIN = 0.25


def budget_estimate(records: list[dict], tokens_per_step: int) -> dict | None:
    """Where the networks would be NGRAM_MARGIN below the n-gram in per-token perplexity, on the curves' validation
    blocks. Per member, every finished run is a point (training FLOPs, its best validation bits per byte): the seed-0
    run at each size and every tuning trial (a full schedule at a quarter of the budget). The lower envelope of the
    points, the best result for each compute (Hoffmann et al. 2022's first approach), is fitted as L = E + A C^-alpha;
    the member that gets to the target with the least compute wins, with the hours that takes at the FLOPs per second
    its largest run trained at (both None where the fit's floor lies above the target). None without an n-gram or
    four points on some member's envelope."""
    ngram = next((r for r in records if r["name"] == "ngram"), None)
    if ngram is None or not ngram["curve"]:
        return None
    last = ngram["curve"][-1]  # the n-gram on the whole training text, scored on the curves' blocks
    target = last["eval_bits_per_byte"] + math.log2(1 - NGRAM_MARGIN) * last["eval_tokens"] / last["eval_bytes"]
    estimates = []
    for name in dict.fromkeys(r["name"] for r in records if r["name"] != "ngram"):
        runs = [r for r in records if r["name"] == name and r["seed"] == 0]
        points = [
            (r["train_tokens"] * r["flops_per_token"], min(c["eval_bits_per_byte"] for c in r["curve"])) for r in runs
        ]
        points += [
            (t["steps"] * tokens_per_step * r["flops_per_token"], t["eval_bits_per_byte"])
            for r in runs
            for t in r["trials"]
        ]
        frontier = study.lower_envelope(points)
        fit = study.fit_power_law(frontier)
        if fit is None:
            continue
        largest = max(runs, key=lambda r: r["flops_per_token"])
        flops = study.power_law_reaches(fit, target)
        flops = None if math.isinf(flops) else flops
        rate = largest["tokens_per_second"] * largest["flops_per_token"]
        estimates.append(
            {"name": name, "title": runs[0]["title"], "fit": fit, "frontier": frontier, "flops": flops,
             "flops_per_second": rate, "hours": flops and flops / rate / 3600, "reached": frontier[-1][1] <= target}
        )  # fmt: skip
    if not estimates:
        return None
    best = min(estimates, key=lambda e: (math.inf if e["flops"] is None else e["flops"], e["frontier"][-1][1]))
    members = [{k: e[k] for k in ("name", "title", "fit", "flops", "hours", "flops_per_second")} for e in estimates]
    return (
        {"ngram_bits_per_byte": last["eval_bits_per_byte"], "target_bits_per_byte": target}
        | best
        | {"members": members}
    )


def measured_margin(records: list[dict], target: int) -> dict | None:
    """The best network at size `target` against the n-gram in test (else validation) perplexity, seeds averaged."""
    split = "test" if all(r.get("test_perplexity") for r in records) else "validation"
    ngram = next((r for r in records if r["name"] == "ngram"), None)
    networks = [r for r in records if r["name"] != "ngram" and r["target"] == target]
    if ngram is None or not networks:
        return None
    means = {}
    for r in networks:
        means.setdefault(r["name"], []).append(r[f"{split}_perplexity"])
    name = min(means, key=lambda n: statistics.mean(means[n]))
    perplexity = statistics.mean(means[name])
    margin = 1 - perplexity / ngram[f"{split}_perplexity"]
    return {
        "split": split,
        "name": name,
        "title": next(r["title"] for r in networks if r["name"] == name),
        "perplexity": perplexity,
        "ngram": ngram[f"{split}_perplexity"],
        "margin": margin,
    }


def plot_compute(records: list[dict], estimate: dict, path: Path, title: str) -> None:
    """Validation bits per byte against training FLOPs: every member's curves (seed 0, one line per size), the
    n-gram, the margin's line, and the envelope and fitted frontier of the member the estimate names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    colours = {}
    for r in (r for r in records if r["name"] != "ngram" and r["seed"] == 0):
        points = [(c["tokens"] * r["flops_per_token"], c["eval_bits_per_byte"]) for c in r["curve"] if c["tokens"]]
        label = None if r["name"] in colours else r["title"]  # one legend entry per member, whatever its sizes
        colour = colours.setdefault(r["name"], f"C{len(colours)}")
        ax.plot(*zip(*points), "-", color=colour, lw=1, alpha=0.7, label=label)
    ax.axhline(estimate["ngram_bits_per_byte"], ls="--", color="gray", label="n-gram (Kneser-Ney)")
    ax.axhline(
        estimate["target_bits_per_byte"], ls=":", color="black", label=f"{NGRAM_MARGIN:.0%} below it in perplexity"
    )
    fit, frontier = estimate["fit"], estimate["frontier"]
    end = min(estimate["flops"] or math.inf, 1e4 * frontier[-1][0])
    xs = [frontier[0][0] * (end / frontier[0][0]) ** (k / 80) for k in range(81)]
    ax.plot(*zip(*frontier), "ko", ms=4, label=f"{estimate['title']}: best run per compute")
    ax.plot(
        xs, [fit["floor"] + fit["scale"] * x ** -fit["alpha"] for x in xs], "k-.", lw=1, label="its fitted frontier"
    )
    save_log_plot(fig, ax, "training FLOPs", "held-out bits per byte (validation)", title, path)


def margin_lines(result: dict) -> list[str]:
    """The report's section on the networks against the n-gram: the measured margin, and the compute the fitted
    frontier says the literature's margin takes."""
    margin, estimate = result.get("margin"), result.get("estimate")
    if margin is None:
        return []
    title = margin.get("title", margin["name"])
    lines = [
        f"## How far from the literature's margin ({NGRAM_MARGIN:.0%} below the n-gram in perplexity)",
        "",
        f"Measured: the best network {_at_size(result['sizes'][-1])} ({title}) has "
        f"{margin['split']} perplexity {margin['perplexity']:.1f} against the n-gram's {margin['ngram']:.1f}: "
        + (f"{margin['margin']:.0%} below it." if margin["margin"] >= 0 else f"{-margin['margin']:.0%} above it."),
        "",
    ]
    if estimate is None:
        return lines
    fit = estimate["fit"]
    law = f"L = {fit['floor']:.3f} + {fit['scale']:.3g} C^-{fit['alpha']:.3f}"
    head = (
        f"Extrapolated: on the curves' validation blocks the target is {estimate['target_bits_per_byte']:.3f} bits per "
        f"byte (the n-gram on the whole training text: {estimate['ngram_bits_per_byte']:.3f}). The "
        f"{estimate['title']}'s compute frontier (its "
        f"best run at each training compute C: every size and tuning trial, seed 0) fits {law}"
    )
    if estimate["reached"]:
        lines.append(f"{head}, and its curves already reach the target.")
    elif estimate["flops"] is None:
        lines.append(
            f"{head}, whose floor lies above the target: more compute alone does not get there at this size of corpus."
        )
    else:
        largest = estimate["frontier"][-1][0]
        lines.append(
            f"{head}: it reaches the target at about {estimate['flops']:.1e} training FLOPs, "
            f"{estimate['flops'] / largest:,.0f} times this run's largest, {estimate['hours']:,.1f} hours at the "
            f"{estimate['flops_per_second'] / 1e9:.1f} GFLOP/s its largest run trained at. An extrapolation: it "
            "assumes the frontier keeps its shape, and past an epoch the corpus repeats (more dropout, not only more "
            "compute, is what the literature's runs used)."
        )
    lines += [
        "",
        "| member | fitted E | A | alpha | FLOPs to the target | hours at its speed |",
        "|---|---|---|---|---|---|",
    ]
    for e in estimate.get("members", []):
        fit, reach = e["fit"], "not reached (floor above it)" if e["flops"] is None else f"{e['flops']:.1e}"
        hours = "n/a" if e["hours"] is None else f"{e['hours']:,.1f}"
        lines.append(
            f"| {e['title']} | {fit['floor']:.3f} | {fit['scale']:.3g} | {fit['alpha']:.3f} | {reach} | {hours} |"
        )
    return lines + ["", "![compute](compute.png)", ""]


def write_language_model_report(result: dict, output_dir: Path, lineage: study.Study) -> None:
    """lineage.md of the language-model lineage."""
    records, metric = result["members"], result["metric"]
    lines = [
        lineage.heading(r["name"] for r in records),
        "",
        f"Corpus `{result['corpus']}` (validation: {result['validation']}; test: {result['test']}), one byte-level BPE "
        f"tokenizer of {result['vocab_size']:,} tokens, blocks of {result['block_size']} tokens, "
        f"{result['train_tokens']:,} training tokens; budget: {result['budget']}. Neural members: embedding width "
        f"{result['width']}, tied embeddings, non-embedding parameters matched per size; the weights kept are the "
        f"evaluation with the lowest validation loss. Tuning: {result['tuning']}. Seeds: {result['seeds']}. "
        f"Machine: {result['machine']}.",
        "",
        f"Ranked by **{metric.replace('_', ' ')}** ({'the test split, scored once, with the selected weights' if metric.startswith('test') else 'no test split was given'}).",
        "",
    ]
    header = (
        "| member | params | non-embedding | FLOPs / token | lr | dropout | best step | epochs | validation bpb | "
        "test bpb | test perplexity | seconds |"
    )

    def row(r: dict) -> str:
        return member_row(result, r, "bits_per_byte", ".1f")

    lines += size_sections(result, header, row, lineage.order)
    lines += [
        "The n-gram's parameters are its distinct stored n-grams (it has no embedding and no FLOPs figure), its seconds "
        "the counting; it is fit once and the same for every size and seed. FLOPs per token: 6 x the parameters a "
        "token multiplies with (+ 12 L d s for attention; hf_seq.training.compute.model_flops_per_token). Epochs: training "
        "tokens seen / training tokens in the corpus. Every trial is in lineage.json.",
        "",
        "![learning curves](learning_curves.png)",
        "",
        f"The curves (the first seed of the largest size) are scored on the first {result['settings']['curve_blocks']} "
        "validation blocks, every member on the same blocks.",
        "",
    ]
    if len(result["sizes"]) > 1:
        lines += ["![scaling](scaling.png)", ""]
    lines += margin_lines(result)
    lines += [f"## Samples (prompt: `{result['prompt']!r}`, ancestral sampling, seed 0)", ""]
    for r in records:
        if r["seed"] == 0 and r["target"] == result["sizes"][-1]:
            lines += [f"**{r['title']}**", "", "```", r["prompt_text"] + r["sample"], "```", ""]
    (output_dir / "lineage.md").write_text("\n".join(lines))


# ---------------------------------------------------------------------------------------------- translation
def plot_bleu_by_length(records: list[dict], path: Path, title: str) -> None:
    """Test BLEU against the source length bucket, one line per member (Bahdanau et al. 2015, figure 2)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    first_words = {b["bucket"]: b["min_words"] for record in records for b in record["test_bleu_by_length"]}
    sentences = {b["bucket"]: b["sentences"] for record in records for b in record["test_bleu_by_length"]}
    buckets = sorted(first_words, key=first_words.get)
    for record in records:
        points = {b["bucket"]: b["bleu"] for b in record["test_bleu_by_length"]}
        x = [i for i, name in enumerate(buckets) if name in points]
        ax.plot(x, [points[buckets[i]] for i in x], "o-", ms=4, lw=1.5, label=record["title"])
    ax.set_xticks(range(len(buckets)), [f"{name}\n({sentences[name]})" for name in buckets])  # a bucket's sentences
    save_log_plot(fig, ax, "source length in words (test sentences)", "test BLEU", title, path, log_x=False)


def write_translation_report(result: dict, output_dir: Path, lineage: study.Study) -> None:
    """lineage.md of the translation lineage."""
    records = result["members"]
    fmt = lambda v, spec: "n/a" if v is None else format(v, spec)
    lines = [
        lineage.heading(r["name"] for r in records),
        "",
        f"Corpus `{result['corpus']}` ({result['train_pairs']:,} training pairs; validation: {result['validation']}, "
        f"{result['validation_pairs']:,} pairs; test: {result['test']}, {result['test_pairs']:,} pairs), one joint "
        f"byte-level BPE tokenizer of {result['vocab_size']:,} tokens trained on the training sources and targets; "
        f"budget: {result['budget']}. Embedding width {result['width']}, non-embedding parameters matched per size; "
        f"the weights kept are the evaluation with the highest BLEU on the first {result['settings']['eval_pairs']} "
        f"validation pairs. Tuning: {result['tuning']}. Seeds: {result['seeds']}. Test translations: beam search of "
        f"{result['settings']['num_beams']} ("
        + ", ".join(f"{k} {v}" for k, v in (result["decoding"] or {}).items() if k != "do_sample")
        + "). "
        f"Machine: {result['machine']}.",
        "",
        "Ranked by **test BLEU** (the test split, scored once, with the selected weights; higher is better).",
        "",
    ]
    header = (
        "| member | params | non-embedding | FLOPs / token | lr | dropout | best step | validation perplexity | "
        "test BLEU | chrF | repetition | length ratio | seconds |"
    )

    def row(r: dict) -> str:
        seed = "" if result["seeds"] == 1 else f" (seed {r['seed']})"
        return (
            f"| {r['title']}{seed} | {r['params']:,} | {r['non_embedding_params']:,} | "
            f"{r['flops_per_token']:,} | {r['learning_rate']:.2g} | {r['dropout']:g} | "
            f"{fmt(r['best_step'], 'd')} | {r['validation_perplexity']:.2f} | {r['test_bleu']:.2f} | "
            f"{r['test_chrf']:.2f} | {100 * r['test_repetition_rate']:.1f}% | {r['test_length_ratio']:.2f} | "
            f"{r['seconds']:.0f} |"
        )

    lines += size_sections(result, header, row, lineage.order, higher_is_better=True)
    lines += [
        "The lectures' order puts Bahdanau's additive score and Luong's bilinear one level (`~`): neither is an "
        "inversion of the other. FLOPs per token: a token is a source or target token of a pair; 6 x the encoder's "
        "parameters per source token, 6 x the decoder's (with the output layer) per target token, plus the "
        "Transformer's attention (hf_seq.training.compute.seq2seq_flops_per_token). Repetition: the share of test "
        "translations that repeat a run of 1-4 words back to back (hf_seq.evaluation.repeats_back_to_back). Length "
        "ratio: translation length / reference length in BLEU's tokens. Every trial is in lineage.json.",
        "",
        "![BLEU by source length](bleu_by_length.png)",
        "",
    ]
    largest = [r for r in records if r["seed"] == 0 and r["target"] == result["sizes"][-1]]
    for r in largest:
        if r.get("alignment"):
            lines += [f"![{r['title']}: alignment]({r['alignment']})", ""]
    lines += ["## Examples (the first test pairs)", ""]
    for r in largest:
        lines += [f"**{r['title']}**", ""]
        lines += [f"- `{e['source']}` -> `{e['translation']}` (reference: `{e['reference']}`)" for e in r["examples"]]
        lines += [""]
    (output_dir / "lineage.md").write_text("\n".join(lines))


def alignment_figure(model, tokenizer, source: str, recipe, path: Path, title: str) -> None:
    """The cross-attention of `model` over its own translation of `source` (the recipe's decoding): the Bahdanau
    family's alignments alpha_ij, the Transformer's last layer averaged over heads; source tokens across, target
    tokens down. Drawn from the attention weights themselves (the eager path), not a fused kernel."""
    import torch

    from hf_seq.data.tasks import decoding, word_pieces
    from hf_seq.experiments.plotting import plot_alignment
    from hf_seq.models.seq2seq import BackToBackRepeatBlock

    kernel = model.config._attn_implementation
    if kernel not in (None, "eager"):
        model.set_attn_implementation("eager")
    ids = tokenizer(source, add_special_tokens=False, return_tensors="pt")["input_ids"][:, : recipe.data.block_size]
    ids = ids.to(model.device)
    try:
        with torch.no_grad():
            block = recipe.training.generation_block_repeats  # as the test translations are decoded
            processors = None
            if block:
                starts, keys, inside = word_pieces(tokenizer)
                processors = [BackToBackRepeatBlock(starts, block, keys, inside)]
            generated = model.generate(input_ids=ids, **decoding(recipe), logits_processor=processors)
            out = model(input_ids=ids, decoder_input_ids=generated[:, :-1], output_attentions=True)
    finally:
        if kernel not in (None, "eager"):
            model.set_attn_implementation(kernel)
    label = lambda i: tokenizer.decode([int(i)]) or tokenizer.convert_ids_to_tokens(int(i))
    plot_alignment(
        out.cross_attentions[-1][0].cpu(),  # (heads, target, source); the Bahdanau family gives one "head"
        [label(i) for i in ids[0]],
        [label(i) for i in generated[0, 1:]],
        path,
        title=title,
    )


def plot_forecasts(records: list[dict], window: dict, path: Path, title: str) -> None:
    """One panel per member: the history before the first test window, the truth over it, and the member's median
    forecast with its 80% interval (the 10% and 90% quantiles of its sample paths)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history, future = window["history"], window["future"]
    past_x, future_x = range(-len(history), 0), range(len(future))
    columns = min(3, len(records))
    rows = -(-len(records) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.2 * rows), sharex=True, squeeze=False)
    for ax, record in zip(axes.flat, records):
        forecast = record["forecast"]
        ax.plot(past_x, history, color="0.4", lw=1)
        ax.plot(future_x, future, color="black", lw=1.2, label="truth")
        ax.fill_between(future_x, forecast["low"], forecast["high"], alpha=0.3, label="80% interval")
        ax.plot(future_x, forecast["median"], lw=1.5, label="median")
        ax.set_title(f"{record['title']}: test MASE {record['test_mase']:.2f}", fontsize=9)
        ax.axvline(0, color="0.7", lw=0.8)
    for ax in list(axes.flat)[len(records) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8, loc="upper left")
    fig.suptitle(f"The first test window (MASE: over every test window): {title}", fontsize=10)
    fig.supxlabel("steps from the forecast origin")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_forecasting_report(result: dict, output_dir: Path, lineage: study.Study) -> None:
    """lineage.md of the forecasting lineage: per size, every member's test MASE, sMAPE, CRPS and NLL per value,
    each against the seasonal-naive benchmark, and where the classical members beat the networks."""
    records = result["members"]
    fmt = lambda v, spec: "n/a" if v is None else format(v, spec)
    lines = [
        lineage.heading(r["name"] for r in records),
        "",
        f"Series `{result['corpus']}` ({result['series']} series; {result['test_windows']} test "
        f"window{'s' if result['test_windows'] != 1 else ''} of {result['prediction_length']} values, validation the {result['prediction_length']} before), forecast from "
        f"the last {result['context_length']} values with lags {result['lags']}; season {result['season']}. Budget: "
        f"{result['budget']}. Width {result['width']}, non-embedding parameters matched per size; the weights kept "
        f"are the evaluation with the lowest validation NLL. Tuning: {result['tuning']}. Seeds: {result['seeds']}. "
        f"Machine: {result['machine']}.",
        "",
        *(
            ["**--quick: a test of the plumbing on tiny models and a few steps, not a result.**", ""]
            if result["quick"]
            else []
        ),
        "Ranked by **test MASE** (mean absolute error of the median forecast over the seasonal-naive method's "
        "in-sample error; below 1 beats that benchmark in sample). CRPS is the mean weighted quantile loss of the "
        "sample paths (GluonTS's and the Monash archive's figure); the NLL per value is the predicted density's "
        "(for the classical members, a normal with their sample paths' mean and spread). All from "
        "`hf_seq.evaluation.forecasting.score_samples`, as `hf-seq evaluate` reports them.",
        "",
    ]
    header = (
        "| member | params | steps | lr | dropout | test MASE | vs seasonal naive | CRPS | vs seasonal naive | sMAPE | "
        "NLL / value | validation MASE | seconds |"
    )
    reference = {r["target"]: r for r in records if r["name"] == "seasonal_naive" and r["seed"] == 0}

    def versus(r: dict, key: str) -> str:
        base = reference.get(r["target"])
        return "n/a" if not base or not base[key] else f"{r[key] / base[key] - 1:+.0%}"

    def row(r: dict) -> str:
        seed = "" if result["seeds"] == 1 or r["family"] is None else f" (seed {r['seed']})"  # a fit has no seeds
        return (
            f"| {r['title']}{seed} | {fmt(r['params'], ',')} | {fmt(r['steps'], ',')} | "
            f"{fmt(r['learning_rate'], '.2g')} | {fmt(r['dropout'], 'g')} | {r['test_mase']:.3f} | "
            f"{versus(r, 'test_mase')} | {r['test_crps']:.4f} | {versus(r, 'test_crps')} | {r['test_smape']:.2f} | "
            f"{r['test_loss']:.3f} | {r['validation_mase']:.3f} | {r['seconds']:.0f} |"
        )

    lines += size_sections(result, header, row, lineage.order)
    lines += classics_lines(result)
    lines += ["![Forecasts on the first test window](forecasts.png)", ""]
    (output_dir / "lineage.md").write_text("\n".join(lines))


def classics_lines(result: dict) -> list[str]:
    """Where the classical members beat the networks, and where the best network beats the classics, per size."""
    lines, fitted = [], {r["name"] for r in result["members"] if r["family"] is None}  # not trained: the classics
    for target in result["sizes"]:
        rows = [r for r in summarize(result["members"], "test_mase") if r["target"] == target]
        classics = [r for r in rows if r["name"] in fitted]
        networks = [r for r in rows if r not in classics]
        if not classics or not networks:
            continue
        best_classic = min(classics, key=lambda r: r["mean"])
        best_network = min(networks, key=lambda r: r["mean"])
        beaten = [r["name"] for r in networks if r["mean"] > best_classic["mean"]]
        at = "" if len(result["sizes"]) == 1 else f" at {_at_size(target)}"
        if beaten:
            lines.append(
                f"- **Where the classics win{at}:** {best_classic['title']} ({best_classic['mean']:.3f}) is ahead of "
                f"{', '.join(beaten)}."
            )
        gain = 1 - best_network["mean"] / best_classic["mean"]
        lines.append(
            f"- The best network{at}, {best_network['title']} ({best_network['mean']:.3f}), is "
            f"{abs(gain):.0%} {'below' if gain > 0 else 'above'} the best classical member's MASE."
        )
    return (["## The classics against the networks", "", *lines, ""]) if lines else []
