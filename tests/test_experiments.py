"""The lectures' experiments at --quick size: each writes results.md, results.json (with its claims) and its plots,
and the behaviour each one rests on holds (a causal map is causal, greedy decoding is beam search of width 1, ...)."""

import dataclasses
import json
import math

import pytest
import torch

from hf_seq.cli import main
from hf_seq.errors import InvalidValueError
from hf_seq.experiments import EXPERIMENTS, get_experiment
from hf_seq.training.schedules import scheduled_sampling_probability, teacher_forcing_probability


def check_written(folder, results: dict) -> dict:
    """The files are there, results.json holds what run() returned, and every claim has its three fields."""
    saved = json.loads((folder / "results.json").read_text())
    assert saved["experiment"] in EXPERIMENTS and saved["seconds"] == results["seconds"]
    assert saved["claims"] == results["claims"] and len(saved["claims"]) >= 2
    for row in saved["claims"]:
        assert set(row) == {"claim", "measured", "agrees"} and isinstance(row["agrees"], bool)
        assert row["claim"] and row["measured"]
    text = (folder / "results.md").read_text()
    assert "| the lecture claims | this run measured | agrees |" in text
    assert all(row["claim"] in text for row in saved["claims"])
    assert saved["plots"]
    for plot in saved["plots"]:
        assert (folder / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", plot
        assert f"]({plot})" in text
    return saved


def test_list_names_every_experiment(capsys):
    assert main(["experiment", "--list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert all(line.split()[0] in EXPERIMENTS for line in lines) and len(lines) == len(EXPERIMENTS)


def test_unknown_experiment_and_option_are_named(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["experiment", "nope"])
    assert exit_info.value.code == 2 and "unknown experiment 'nope'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="bogus"):
        get_experiment("parentheses").run(quick=True, bogus=1)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_quick_settings_are_the_defaults_made_smaller(name):
    """QUICK is the module's Settings with some sizes and budgets lowered: every number it changes is smaller, and
    a quick run starts from QUICK, a full one from the defaults."""
    module = get_experiment(name)
    default, quick = module.Settings(), module.QUICK
    changed = [f.name for f in dataclasses.fields(default) if getattr(quick, f.name) != getattr(default, f.name)]
    assert changed, f"{name}: QUICK is the default run"
    for key in changed:
        small, full = getattr(quick, key), getattr(default, key)
        if isinstance(full, int | float):
            assert small < full, (name, key, small, full)
        elif isinstance(full, tuple):
            assert len(small) < len(full), (name, key, small, full)
    with pytest.raises(dataclasses.FrozenInstanceError):
        quick.seed = 1


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_a_bad_setting_is_refused_before_the_run_naming_it(name, tmp_path):
    """An unknown key names itself, its value and every setting with its type; a value of the wrong type names the
    key, the value and the type; nothing is written."""
    module = get_experiment(name)
    with pytest.raises(InvalidValueError) as error:
        module.run(quick=True, output_dir=tmp_path / "out", overrides=["stesp=10"])
    message = str(error.value)
    assert "stesp='10'" in message and all(f.name in message for f in dataclasses.fields(module.Settings))
    assert "steps (int)" in message or "lm_steps (int)" in message
    key = "lm_steps" if name == "attention_maps" else "steps"
    with pytest.raises(InvalidValueError, match=rf"^{name}: {key}='ten': expected int$"):
        module.run(quick=True, output_dir=tmp_path / "out", overrides=[f"{key}=ten"])
    with pytest.raises(InvalidValueError, match=rf"{key}=2.5: expected int"):
        module.run(quick=True, output_dir=tmp_path / "out", **{key: 2.5})
    assert not (tmp_path / "out").exists()


def test_settings_read_each_value_as_its_type():
    from hf_seq.experiments.common import chosen_settings, settings_record

    bottleneck = get_experiment("bottleneck")
    s = chosen_settings("bottleneck", bottleneck.QUICK, ["seeds=3,4", "curriculum=1", "max_length=20"], {"steps": 7})
    assert (s.seeds, s.curriculum, s.max_length, s.steps) == ((3, 4), 1.0, 20, 7)
    assert isinstance(s.curriculum, float) and s.batch_size == bottleneck.QUICK.batch_size  # the rest kept
    assert settings_record(s, bottleneck.QUICK, True)["set"] == [
        "steps=7",
        "max_length=20",
        "curriculum=1.0",
        "seeds=3,4",
    ]
    attention = get_experiment("attention_maps")
    s = chosen_settings("attention_maps", attention.Settings(), ["threads=none", "learning_rate=1e-3", "date=1 May 99"])
    assert (s.threads, s.learning_rate, s.date) == (None, 1e-3, "1 May 99")
    with pytest.raises(InvalidValueError, match=r"threads='x': expected int or none"):
        chosen_settings("attention_maps", attention.Settings(), ["threads=x"])
    with pytest.raises(InvalidValueError, match=r"--set 'steps' is not KEY=VALUE"):
        chosen_settings("attention_maps", attention.Settings(), ["steps"])


def test_a_setting_outside_its_choices_is_refused_naming_them(tmp_path):
    with pytest.raises(
        InvalidValueError, match=r"decays=linear,cosine: unknown \['cosine'\]; allowed: \['inverse_sigmoid'"
    ):
        get_experiment("exposure_bias").run(quick=True, output_dir=tmp_path, overrides=["decays=linear,cosine"])
    with pytest.raises(InvalidValueError, match=r"members=GPT \(RoPE\),Transformer: unknown \['Transformer'\]"):
        get_experiment("induction_heads").run(quick=True, output_dir=tmp_path, members=("GPT (RoPE)", "Transformer"))


def test_total_parameters_is_the_study_runners_total():
    """One meaning per name: the experiments' count of every weight is the first of the study runner's counts."""
    from hf_seq import GPTConfig, GPTForCausalLM
    from hf_seq.experiments.common import total_parameters
    from hf_seq.experiments.study import count_parameters

    model = GPTForCausalLM(GPTConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2))
    total, non_embedding = count_parameters(model)
    assert total_parameters(model) == total == sum(p.numel() for p in model.parameters()) > non_embedding


def test_vanishing_gradients_through_the_cli(tmp_path, capsys):
    main(["experiment", "vanishing_gradients", "--quick", "--output-dir", str(tmp_path)])
    assert "[agrees]" in capsys.readouterr().out or "[DISAGREES]" in capsys.readouterr().out
    saved = check_written(tmp_path, json.loads((tmp_path / "results.json").read_text()))
    models = saved["models"]
    # the measured ratio is 1 at distance 0 and, at initialisation, the tanh Elman's falls faster than the LSTM's
    assert all(math.isclose(m["init"]["jacobian"][0], 1.0) for m in models.values())
    assert models["Elman tanh"]["init"]["jacobian_decay"] < models["LSTM"]["init"]["jacobian_decay"] < 1
    far = saved["distance_max"]
    assert models["Elman tanh"]["init"]["jacobian"][far] < 1e-3 * models["Elman tanh"]["init"]["jacobian"][1]


def test_parentheses(tmp_path):
    module = get_experiment("parentheses")
    results = module.run(quick=True, output_dir=tmp_path, overrides=["steps=20"])
    saved = check_written(tmp_path, results)
    options = saved["options"]
    # the quick settings with the one override, and a command that gives them again
    assert options == {"quick": True, "set": ["steps=20"], **dataclasses.asdict(module.QUICK), "steps": 20}
    assert saved["command"] == "hf-seq experiment parentheses --quick --set steps=20"
    for m in saved["models"].values():
        lengths = [int(n) for n in m["by_length"]]
        assert max(lengths) == options["test_length"] > options["train_length"]  # tested longer than trained
        assert all(0 <= a <= 1 for a in m["by_length"].values())
    sizes = [m["parameters"] for m in saved["models"].values()]
    assert max(sizes) < 2 * min(sizes)  # matched size
    assert module.depth("( [ ] ) { [ ( ) ] }") == 3


def test_matched_width_is_the_closest_to_the_budget_and_stops_past_it():
    from hf_seq.experiments.common import matched_width

    built = []

    def build(width):  # 10 x width weights
        layer = torch.nn.Linear(width, 10, bias=False)
        built.append((width, layer.weight.device.type))
        return layer

    assert matched_width(build, 430) == 40  # 400 weights, 30 short, against 480 at width 48
    assert built[-1] == (48, "meta")  # the first width past the budget ends the search; shapes only
    assert matched_width(build, 440) == 40  # a tie goes to the smaller model
    assert matched_width(build, 5) == 8  # the narrowest, however small the budget


def test_positions_learned_row_is_marked_beyond_its_table(tmp_path):
    results = get_experiment("positions").run(quick=True, output_dir=tmp_path)
    saved = check_written(tmp_path, results)
    context = saved["options"]["context"]
    learned = saved["models"]["learned"]["scales"]
    assert math.isfinite(learned["1"]["eval_loss"])
    assert "max_position_embeddings" in learned["2"]["error"] and "error" in learned["4"]
    assert f"beyond the table (max_position_embeddings = {context})" in (tmp_path / "results.md").read_text()
    for kind in ("sinusoidal", "rope", "alibi"):  # these read 4x the context
        scales = saved["models"][kind]["scales"]
        assert all(math.isfinite(scales[s]["eval_loss"]) for s in ("1", "2", "4"))
        assert len(scales["4"]["per_position"]) == 4 * context - 1


def test_decoding_greedy_is_beam_width_one(tmp_path):
    results = get_experiment("decoding").run(quick=True, output_dir=tmp_path)
    saved = check_written(tmp_path, results)
    assert saved["greedy_equals_beam1"] is True
    assert saved["samples"]["greedy (argmax loop)"] == saved["samples"]["beam 1"]
    strategies = saved["strategies"]
    # argmax tokens are the likeliest: the model finds its greedy output far likelier than its hot samples
    assert strategies["beam 1"]["output_perplexity"] < strategies["sampling t=1.3"]["output_perplexity"]
    assert all(0 <= s["distinct_2"] <= 1 for s in strategies.values())


def test_attention_maps_causal_and_bidirectional(tmp_path):
    results = get_experiment("attention_maps").run(quick=True, output_dir=tmp_path)
    saved = check_written(tmp_path, results)
    assert saved["gpt_weight_on_later_tokens"] == 0.0  # causal masking
    assert saved["bert_weight_on_later_tokens"] > 0.1  # no masking
    assert {"gpt.png", "bert.png", "transformer.png"} <= set(saved["plots"])


def test_exposure_bias_follows_its_schedules(tmp_path):
    results = get_experiment("exposure_bias").run(quick=True, output_dir=tmp_path)
    saved = check_written(tmp_path, results)
    models = saved["models"]
    assert models["teacher forcing"]["final_sampling_probability"] == 0.0
    for label, m in models.items():
        assert len(m["free"]) == len(m["forced"]) == saved["options"]["length"] + 1
        if label != "teacher forcing":
            assert m["final_sampling_probability"] > 0.3
            assert m["schedule"] == sorted(m["schedule"])  # the probability of reading its own token only grows


def test_scheduled_sampling_decays():
    # Bengio et al. (2015), section 2.4: epsilon_i starts near 1 and decays
    assert teacher_forcing_probability(0, "exponential", k=0.9) == 1.0
    assert math.isclose(teacher_forcing_probability(3, "exponential", k=0.9), 0.729)
    assert teacher_forcing_probability(500, "linear", k=1.0, c=0.001, minimum=0.2) == 0.5
    assert teacher_forcing_probability(5000, "linear", k=1.0, c=0.001, minimum=0.2) == 0.2
    assert math.isclose(teacher_forcing_probability(100, "inverse_sigmoid", k=100), 100 / (100 + math.e))
    steps = [scheduled_sampling_probability(i, "inverse_sigmoid", k=50) for i in range(0, 1000, 50)]
    assert steps == sorted(steps) and steps[0] < 0.05 and steps[-1] > 0.99
    with pytest.raises(ValueError, match="allowed values"):
        teacher_forcing_probability(0, "cosine", k=1)
    with pytest.raises(ValueError, match="k >= 1"):
        teacher_forcing_probability(0, "inverse_sigmoid", k=0.5)
    with pytest.raises(ValueError, match="0 < k < 1"):
        teacher_forcing_probability(0, "exponential", k=1.5)


def test_bottleneck(tmp_path):
    results = get_experiment("bottleneck").run(quick=True, output_dir=tmp_path)
    saved = check_written(tmp_path, results)
    assert set(saved["designs"]) == {"classic", "additive", "transformer"}
    for design in saved["designs"].values():
        assert [int(n) for n in design["scores"]] == saved["lengths"]
        assert all(0 <= exact <= token <= 1 or exact == 0 for exact, token in design["scores"].values())
    assert 0 <= saved["designs"]["additive"]["anti_diagonal_weight"] <= 1
    assert "alignment.png" in saved["plots"]
    for design in saved["designs"].values():  # one run per initialisation; the table holds their median
        assert set(design["runs"]) == {"0", "1"}
        for n, (exact, token) in design["scores"].items():
            assert exact == min(run["scores"][n][0] for run in design["runs"].values())  # the lower of two
            assert token == min(run["scores"][n][1] for run in design["runs"].values())
    bottleneck = get_experiment("bottleneck")
    with pytest.raises(ValueError, match="seeds must be distinct"):
        bottleneck.run(quick=True, output_dir=tmp_path, seeds=(1, 1))
    with pytest.raises(ValueError, match="curriculum must be"):
        bottleneck.run(quick=True, output_dir=tmp_path, curriculum=2)


@pytest.fixture(autouse=True)
def _restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_exposure_claims_need_an_effect_above_the_test_noise():
    """A run where every regime has learned the task (2 errors in 5,200 tokens against none) agrees with nothing; a
    clear gap that scheduled sampling closes agrees with all three claims."""
    from hf_seq.experiments.exposure_bias import MIN_EFFECT, exposure_claims

    def regime(free, forced):
        gap = [f - g for f, g in zip(free, forced)]
        return dict(
            mean_free=sum(free) / len(free),
            mean_forced=sum(forced) / len(forced),
            mean_gap=sum(gap) / len(gap),
            gap=gap,
        )

    tiny = [0.0] * 25 + [0.01]  # one position with a 1% error rate: 0.0004 on average
    saturated = {
        "teacher forcing": regime(tiny, [0.0] * 26),
        "scheduled sampling (linear)": regime([0.0] * 26, [0.0] * 26),
    }
    assert [c["agrees"] for c in exposure_claims(saturated)] == [False, False, False]
    growing = [0.0] * 13 + [0.2] * 13
    clear = {
        "teacher forcing": regime(growing, [0.01] * 26),
        "scheduled sampling (linear)": regime([0.02] * 26, [0.015] * 26),
    }
    assert [c["agrees"] for c in exposure_claims(clear)] == [True, True, True]
    assert MIN_EFFECT > 4 / 5200  # a few errors in the default test set cannot decide a claim


def test_selective_copying_examples_answer_the_data_tokens_in_order():
    from hf_seq.experiments.selective_copying import MARK, NOISE, PAD, examples

    batch = examples(200, length=20, tokens=5, vocab_size=16, generator=torch.Generator().manual_seed(0))
    ids, labels = batch["input_ids"], batch["labels"]
    assert ids.shape == labels.shape == (200, 20 + 1 + 5)
    assert (ids[:, 20] == MARK).all() and not (ids == PAD).any()
    for row, label in zip(ids.tolist(), labels.tolist()):
        body, answer = row[:20], row[21:]
        data = [t for t in body if t != NOISE]
        assert data == answer and len(data) == 5 and min(data) > MARK  # the non-noise tokens, in order
        assert label == [-100] * 21 + answer  # scored on the answer alone
    positions = {tuple(i for i, t in enumerate(row[:20]) if t != NOISE) for row in ids.tolist()}
    assert len(positions) > 150  # scattered at random, not at fixed places
    with pytest.raises(ValueError, match="tokens <= length"):
        examples(1, length=3, tokens=4, vocab_size=16, generator=torch.Generator())


def test_induction_heads_examples_answer_what_followed_the_first_trigger():
    from hf_seq.experiments.induction_heads import TRIGGER, examples

    batch = examples(200, length=24, vocab_size=16, generator=torch.Generator().manual_seed(0))
    ids, labels = batch["input_ids"], batch["labels"]
    assert ids.shape == labels.shape == (200, 25)
    firsts = set()
    for row, label in zip(ids.tolist(), labels.tolist()):
        triggers = [i for i, t in enumerate(row) if t == TRIGGER]
        assert len(triggers) == 2 and triggers[1] == 23 and triggers[0] <= 21  # once inside, once at the end
        answer = row[triggers[0] + 1]
        assert row[-1] == label[-1] == answer and answer > TRIGGER
        assert label[:-1] == [-100] * 24
        firsts.add(triggers[0])
    assert len(firsts) > 15


def test_answer_accuracy_scores_the_prediction_of_each_answer_token():
    """An oracle that reads the next token scores 1, one that repeats the current token scores near chance: the
    logits at t are scored against the label at t + 1, as the models' loss does."""
    from types import SimpleNamespace

    from hf_seq.experiments.selective_copying import answer_accuracy, examples

    batch = examples(64, length=16, tokens=4, vocab_size=16, generator=torch.Generator().manual_seed(1))

    def oracle(shift):
        def model(input_ids):
            target = torch.roll(input_ids, -shift, dims=1)
            return SimpleNamespace(logits=torch.nn.functional.one_hot(target, 16).float())

        return model

    assert answer_accuracy(oracle(1), batch).all()
    assert answer_accuracy(oracle(0), batch).float().mean() < 0.3


def test_selective_copying(tmp_path):
    results = get_experiment("selective_copying").run(quick=True, output_dir=tmp_path)
    saved = check_written(tmp_path, results)
    tokens = saved["options"]["tokens"]
    assert set(saved["models"]) | set(saved["missing"]) == {"S4D", "Mamba", "GPT", "LSTM", "WaveNet"}
    for m in saved["models"].values():
        assert 0 <= m["all_tokens_right"] <= m["accuracy"] <= 1 and len(m["accuracy_by_index"]) == tokens
    sizes = [m["parameters"] for m in saved["models"].values()]
    assert max(sizes) < 2 * min(sizes)  # matched size
    span = saved["options"]["length"] + 1 + tokens
    assert saved["models"]["WaveNet"]["receptive_field"] >= span  # it can see the whole sequence


def test_induction_heads(tmp_path):
    results = get_experiment("induction_heads").run(quick=True, output_dir=tmp_path)
    saved = check_written(tmp_path, results)
    n = saved["options"]["train_length"]
    assert saved["scales"] == [1, 2, 4, 8, 16]
    for m in saved["models"].values():
        assert [int(s) for s in m["accuracy"]] == saved["scales"]
        assert all(0 <= a <= 1 for a in m["accuracy"].values())
    assert n + 1 <= saved["models"]["WaveNet"]["receptive_field"] < 16 * n  # covers the training length only


def test_induction_claims_and_missing_families():
    from hf_seq.experiments.induction_heads import claims
    from hf_seq.experiments.selective_copying import available

    flat, falling = {1: 1.0, 2: 1.0, 4: 0.98, 8: 0.95, 16: 0.93}, {1: 1.0, 2: 0.7, 4: 0.3, 8: 0.1, 16: 0.07}
    rows = claims({"Mamba": {"accuracy": flat}, "GPT (RoPE)": {"accuracy": falling}}, {})
    assert [row["agrees"] for row in rows] == [True, True]
    rows = claims({"Mamba": {"accuracy": falling}, "GPT (RoPE)": {"accuracy": flat}}, {})
    assert [row["agrees"] for row in rows] == [False, False]
    unlearned = {s: 0.1 for s in flat}  # chance everywhere: it drops by nothing, and it never learned
    rows = claims({"Mamba": {"accuracy": flat}, "GPT (RoPE)": {"accuracy": unlearned}}, {})
    assert not rows[1]["agrees"] and "did not learn it at 1x" in rows[1]["measured"]
    kept, missing = available(["GPT", "X"], {"GPT": ("gpt", {}), "X": ("no_such_family", {})})
    assert kept == ["GPT"] and "no_such_family" in missing["X"]
    assert not claims({}, missing)[0]["agrees"]
    with pytest.raises(ValueError, match="unknown member"):
        available(["Y"])


def test_duality(tmp_path):
    """The quick run: every pair of forms agrees at every length and chunk size checked (float32 within the
    tolerance, float64 to rounding), and every form was timed at every length it is run at."""
    results = get_experiment("duality").run(quick=True, output_dir=tmp_path)
    saved = check_written(tmp_path, results)
    options, rows = saved["options"], saved["differences"]
    pairs = 1 + 2 * len(options["chunk_sizes"])  # quadratic - recurrence, then chunked against both at each size
    assert len(rows) == len(options["check_lengths"]) * 2 * pairs
    assert {row["chunk_size"] for row in rows} == {None, *options["chunk_sizes"]}
    for row in rows:
        limit = options["tolerance"] if row["dtype"] == "float32" else 1e-10
        assert 0 <= row["output"] <= limit and 0 <= row["state"] <= limit, row
    assert saved["largest_difference"]["float64"] <= 1e-10 and saved["claims"][0]["agrees"]
    for form, times in saved["seconds_per_call"].items():
        timed = [t for t in options["lengths"] if form != "recurrence" or t <= options["recurrence_max_length"]]
        assert [int(t) for t in times] == timed and all(seconds > 0 for seconds in times.values())


def test_duality_differences_catch_a_chunked_form_that_forgets_the_earlier_chunks():
    """Chunks computed each from a zero state (the off-diagonal blocks of M left out) differ from the recurrence far
    beyond the tolerance, while the quadratic form still agrees with it: the check can fail."""
    from hf_seq.experiments import duality
    from hf_seq.models.ssd import ssd_chunked

    def forgetful(inputs, q):
        length = inputs["x"].shape[1]
        pieces = [
            ssd_chunked(**{k: v[:, i : i + q] if k in ("x", "dt", "B", "C") else v for k, v in inputs.items()})
            for i in range(0, length, q)
        ]
        return torch.cat([y for y, _ in pieces], 1), pieces[-1][1]

    s = dataclasses.replace(duality.QUICK, check_lengths=(40,), chunk_sizes=(8,))
    rows = duality.differences(duality.layer(s), s, duality.FORMS | {"chunked": forgetful})
    by_pair = {(row["pair"], row["dtype"]): row for row in rows}
    assert by_pair["quadratic - recurrence", "float64"]["output"] < 1e-10
    assert by_pair["chunked - recurrence", "float32"]["output"] > 1e-2
    assert by_pair["chunked - quadratic", "float64"]["state"] > 1e-2


def test_duality_claims_follow_the_measured_growth():
    from hf_seq.experiments.duality import claims, growth_exponent

    lengths = (64, 128, 256, 512)
    linear, quadratic = {t: 1e-5 * t for t in lengths}, {t: 1e-7 * t * t for t in lengths}
    times = {"recurrence": {t: 10 * v for t, v in linear.items()}, "quadratic": quadratic, "chunked": linear}
    growth = {form: growth_exponent(times[form]) for form in times}
    assert growth["quadratic"] == pytest.approx(2) and growth["chunked"] == pytest.approx(1)
    rows = claims({"float32": 1e-7, "float64": 1e-16}, 1e-4, times, growth)
    assert [row["agrees"] for row in rows] == [True] * 4
    assert "from T = 128" in rows[2]["measured"]  # 1e-5 T below 1e-7 T^2 from T = 128 on
    times = {"recurrence": {t: v / 2 for t, v in linear.items()}, "quadratic": linear, "chunked": quadratic}
    growth = {form: growth_exponent(times[form]) for form in times}
    rows = claims({"float32": 1e-3, "float64": 1e-16}, 1e-4, times, growth)
    assert [row["agrees"] for row in rows] == [False] * 4


def test_duality_refuses_lengths_and_chunk_sizes_that_are_not_positive(tmp_path):
    module = get_experiment("duality")
    with pytest.raises(InvalidValueError, match=r"^duality: chunk_sizes=16,0: each must be a positive int$"):
        module.run(quick=True, output_dir=tmp_path / "out", overrides=["chunk_sizes=16,0"])
    with pytest.raises(InvalidValueError, match=r"^duality: lengths='64,x': expected comma-separated int$"):
        module.run(quick=True, output_dir=tmp_path / "out", overrides=["lengths=64,x"])
    with pytest.raises(InvalidValueError, match=r"^duality: steps=0: must be a positive int$"):
        module.run(quick=True, output_dir=tmp_path / "out", steps=0)
    assert not (tmp_path / "out").exists()
