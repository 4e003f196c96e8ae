"""A study in one place: `hf-seq lineage`'s `--task` choices, `--members` help and per-study flags, the reports'
first line and the records' fields all come from the registered studies (`hf_seq.experiments.study.STUDIES`) and
their rows. A throwaway member and a throwaway study, each added the way the docs say, show up everywhere without
another edit."""

import dataclasses
import json
import re
import textwrap

import pytest

from hf_seq.cli import main
from hf_seq.errors import InvalidValueError
from hf_seq.experiments import lineage, study
from hf_seq.experiments.study import Member, Record


def lineage_help(capsys, monkeypatch) -> str:
    """`hf-seq lineage --help` on one line (argparse wraps to $COLUMNS, breaking words at hyphens)."""
    monkeypatch.setenv("COLUMNS", "100000")
    with pytest.raises(SystemExit) as exit_info:
        main(["lineage", "--help"])
    assert exit_info.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_the_help_lists_every_registered_study_its_members_and_its_own_flags(capsys, monkeypatch):
    text = lineage_help(capsys, monkeypatch)
    assert f"--task {{{','.join(study.STUDIES)}}}" in text
    for name, registered in study.all_studies().items():
        assert f"{name}: {registered.about}" in text
        for row in registered.rows:
            assert f"{row.name} ({row.help})" in text, (name, row.name)
        for option in registered.own_options:
            assert "--" + option.replace("_", "-") in text, (name, option)
    assert "--source-column SOURCE_COLUMN translation: the source column" in text and "(default source)" in text


# A new study: one file (this text, written to a module of its own) and one line in STUDIES.
COIN_STUDY = """
from dataclasses import dataclass
from types import SimpleNamespace

from hf_seq.experiments.study import Member, Options, Record, Settings, Study, StudyData, option


@dataclass
class CoinOptions(Options):
    sides: int = option(2, "how many sides each coin has")


@dataclass
class CoinData(StudyData):
    sides: int = 2


class Coins(Study):
    name, title, report_title, about = "coins", "coin study", "coin study", "coins tossed, nothing trained"
    rows = (
        Member("fair", "a fair coin", None, help="every side equally likely", short="fair coin"),
        Member("loaded", "a loaded coin", None, help="one side twice as likely", short="loaded coin"),
    )
    settings = {
        mode: Settings(vocab_size=1, block_size=1, batch_size=1, width=1, target=1, learning_rate=0.0,
                       warmup_steps=0, eval_every=1, budget_tokens=100)
        for mode in ("default", "quick")
    }
    options_class, auto_class, default_corpus, corpus_help = CoinOptions, "", "tosses", "tosses, made up"
    files = "lineage.md and lineage.json"

    def prepare(self, s, options, output_dir):
        names = {"validation": "none", "test": "none"}
        return CoinData(SimpleNamespace(tokenizer=None), None, None, "tosses", 100, 1, 0, names, options.sides)

    def metric(self, data):
        return "test_error"

    def fit_fixed(self, row, data, s, given, output_dir):
        weight = 1 if row.name == "fair" else 2  # the likeliest side's weight against 1 for each other side
        error = 1 - weight / (weight + data.sides - 1)  # guessing the likeliest side
        return Record(row.name, row.title, None).to_dict({"test_error": error, "sides": data.sides})

    def report(self, result, data, output_dir, title):
        (output_dir / "lineage.md").write_text(self.heading(r["name"] for r in result["members"]) + "\\n")


LINEAGE = Coins()
"""


@pytest.fixture
def coins(tmp_path, monkeypatch):
    """The coin study registered as `--task coins` (its module on the path, one entry in STUDIES)."""
    (tmp_path / "coin_study.py").write_text(textwrap.dedent(COIN_STUDY))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(study.STUDIES, "coins", "coin_study")
    return tmp_path / "out"


def test_a_new_study_is_one_file_and_one_registration(coins, capsys, monkeypatch):
    text = lineage_help(capsys, monkeypatch)
    assert list(study.STUDIES)[-1] == "coins" and f"--task {{{','.join(study.STUDIES)}}}" in text
    assert "coins: coins tossed, nothing trained" in text and "coins: tosses, made up" in text
    assert "fair (every side equally likely), loaded (one side twice as likely)" in text
    assert "--sides SIDES coins: how many sides each coin has (default 2)" in text
    assert "coins: 100 training tokens" in text  # its default budget, from its settings

    main(["lineage", "--task", "coins", "--quick", "--sides", "3", "--output-dir", str(coins)])
    printed = capsys.readouterr().out
    result = json.loads((coins / "lineage.json").read_text())
    records = {r["name"]: r for r in result["members"]}
    assert list(records) == ["fair", "loaded"] and result["task"] == "coins"
    shared = {f.name for f in dataclasses.fields(Record)} | {"tokens_per_second", "target", "seed"}
    for r in records.values():
        assert shared <= set(r) and r["sides"] == 3, r  # its own option reached its data
    assert records["fair"]["test_error"] == pytest.approx(2 / 3) and records["loaded"]["test_error"] == 0.5
    assert (coins / "lineage.md").read_text() == "# The coin study: fair coin, loaded coin\n"
    assert "loaded: 0.5000 test error" in printed and f"lineage.md and lineage.json in {coins}/" in printed


def test_a_flag_of_another_study_names_the_study_that_takes_it(coins, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["lineage", "--quick", "--sides", "3", "--output-dir", str(coins)])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert (
        error
        == "hf-seq: error: lineage: --sides 3 is for --task coins; --task language_model's own options: --max-chars\n"
    )
    with pytest.raises(InvalidValueError, match=r"--colour 'red' is not an option of any study; --task translation's "
                       r"own options: --source-column, --target-column, --target-language"):  # fmt: skip
        study.get_study("translation").make_options(colour="red")
    allowed = re.escape(str(list(study.STUDIES)))  # the registered studies, the coins among them
    with pytest.raises(InvalidValueError, match=rf"--task 'dice' is not a study; allowed values: {allowed}"):
        study.get_study("dice")


def test_a_new_member_is_one_row_in_the_help_and_the_report_heading(monkeypatch, capsys):
    row = Member("deep-lstm", "LSTM, three layers", "rnn", lineage._recurrent("lstm"), {"layers": 3},
                 help="a deeper LSTM", short="deep LSTM")  # fmt: skip
    monkeypatch.setattr(lineage.LanguageModels, "rows", (*lineage.ROWS, row))
    assert "deep-lstm (a deeper LSTM)" in lineage_help(capsys, monkeypatch)
    heading = lineage.LINEAGE.heading(lineage.LINEAGE.members)
    assert heading == ("# The lineage: n-gram, HMM, fixed window, WaveNet, Elman, GRU, LSTM, GPT, Mamba, Mamba-2, "
                       "deep LSTM")
    assert lineage.LINEAGE.heading(["deep-lstm", "ngram"]) == "# The lineage: n-gram, deep LSTM"  # the rows' order


def test_mamba2_is_a_member_in_the_help_ranked_level_with_mamba_and_sized_to_the_target(monkeypatch, capsys):
    from hf_seq.experiments import lineage_forecasting

    for registered in (lineage.LINEAGE, lineage_forecasting.LINEAGE):
        assert registered.members.index("mamba2") == registered.members.index("ssm") + 1
        assert ("ssm", "mamba2") in registered.order  # the lectures do not rank the two Mambas
    assert "mamba2 (Mamba-2's state-space duality (Dao and Gu 2024))" in lineage_help(capsys, monkeypatch)
    for registered, quick in [(lineage.LINEAGE, False), (lineage.LINEAGE, True), (lineage_forecasting.LINEAGE, True)]:
        settings = registered.settings_for(quick)
        size = registered.matched_size("mamba2", settings, max(settings.vocab_size, 4096))
        model = registered.build("mamba2", settings, size, max(settings.vocab_size, 4096))
        config = model.config
        assert config.ssm_type == "mamba2" and config.num_heads * config.head_dim == config.intermediate_size
        assert config.state_size == settings.knobs["mamba2"]["state"], (registered.name, quick)
        _, non_embedding = study.count_parameters(model)
        # whole layers x expansion factors, to the nearest: within 5% at these widths (1.4% at the default's)
        assert abs(non_embedding - settings.target) <= 0.05 * settings.target, (registered.name, quick, non_embedding)


def test_every_study_heads_its_report_with_every_member():
    for registered in study.all_studies().values():
        heading = registered.heading(registered.members)
        assert heading.startswith(f"# The {registered.report_title}: ")
        assert heading.count(", ") == len(registered.rows) - 1
        assert all(row.heading in heading for row in registered.rows)


def test_a_record_is_the_same_fields_for_every_member_and_keeps_figures_apart():
    fitted = Record("ngram", "3-gram", None, 10, train_tokens=500, seconds=2.0).to_dict({"test_loss": 1.5})
    trained = Record("gpt", "GPT", "gpt", 20, 10, 6e3, 1e-3, 0.0, 4, 1.0, 4, 400, 1.0).to_dict({"test_loss": 1.2})
    assert list(fitted)[:-1] == list(trained)[:-1]  # the same fields, in the same order
    assert fitted["tokens_per_second"] == 250.0 and fitted["family"] is None and fitted["test_loss"] == 1.5
    assert Record("naive", "naive", None).to_dict({})["tokens_per_second"] is None  # nothing counted, no speed
    with pytest.raises(ValueError, match=r"gpt: the study's figures \['params'\] are Record fields"):
        Record("gpt", "GPT", "gpt").to_dict({"params": 3})


def test_the_lineage_help_imports_neither_torch_nor_transformers():
    from tests.test_startup import HEAVY, run_fresh

    result = run_fresh(
        HEAVY
        + """
import contextlib, io
import hf_seq.cli
with contextlib.redirect_stdout(io.StringIO()):
    try:
        hf_seq.cli.main(["lineage", "--help"])
    except SystemExit:
        pass
print(json.dumps(loaded()))
"""
    )
    assert not result["torch"] and not result["transformers"], result
