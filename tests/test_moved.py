"""What 0.1.0's users had keeps working after the package was grouped into packages by job: the old import paths of
the flat modules, the names the old modules offered, and model folders saved by 0.1.0, with hf-seq and without it."""

import importlib
import textwrap
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file

import hf_seq
from hf_seq.faces import MOVED

SAVED = Path(__file__).parent / "fixtures" / "release-0.1.0"  # saved by hf-seq 0.1.0 at 846e5a0
# hf_seq.forecasting's __all__ in 0.1.0
OLD_FORECASTING = ["AutoRegressive", "co2_weekly", "crps_from_samples", "gaussian_nll_from_samples",
                   "interval_from_samples", "mase", "naive_forecast", "naive_forecast_scale", "naive_samples",
                   "quantile_loss", "score_samples", "seasonal_naive_forecast", "select_order", "smape",
                   "weighted_quantile_loss"]  # fmt: skip
FACES = ["baselines", "data", "evaluation", "hub", "pipelines", "training"]


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_path_imports_the_module_at_its_new_place(old):
    module = importlib.import_module(old)
    target = MOVED[old]
    if isinstance(target, str):
        assert module is importlib.import_module(target)
        assert module.__spec__.name == target  # the module still says where it lives
    else:  # hf_seq.forecasting, split into the metrics, the benchmark forecasts and the embedded series
        assert set(OLD_FORECASTING) <= set(dir(module))
        for name in OLD_FORECASTING:
            assert getattr(module, name).__module__ in target, name


def test_from_hf_seq_import_an_old_module():
    from hf_seq import forecasting, ngram, runs, tasks  # noqa: F401  (the import is the test)

    assert tasks is importlib.import_module("hf_seq.data.tasks")
    assert runs.RunResult is importlib.import_module("hf_seq.training.runs").RunResult
    assert forecasting.co2_weekly is importlib.import_module("hf_seq.data.series").co2_weekly
    with pytest.raises(AttributeError, match="no_such_name"):
        forecasting.no_such_name  # noqa: B018


@pytest.mark.parametrize("package", FACES)
def test_every_name_a_face_offers_is_defined_where_it_says(package):
    face = importlib.import_module(f"hf_seq.{package}")
    assert face.__all__, package
    for name in face.__all__:
        assert getattr(face, name) is not None
    with pytest.raises(AttributeError, match=f"hf_seq.{package}' has no attribute 'no_such_name'"):
        face.no_such_name  # noqa: B018


def test_names_of_the_old_modules_that_became_packages():
    """`hf_seq.training`, `hf_seq.data`, `hf_seq.evaluation` and `hf_seq.hub` were modules: their names stay."""
    from hf_seq.data import corpora
    from hf_seq.evaluation import metrics
    from hf_seq.hub import publish
    from hf_seq.training import checkpointing, pretraining, runs

    assert hf_seq.training.run is pretraining.run
    assert hf_seq.training.latest_checkpoint is checkpointing.latest_checkpoint
    assert hf_seq.training.checkpoints is checkpointing.checkpoints  # a function, as before
    assert hf_seq.training.evaluate_folder is runs.evaluate_folder
    assert hf_seq.data.sequence_reversal is corpora.sequence_reversal
    assert hf_seq.evaluation.evaluate_language_model is metrics.evaluate_language_model
    assert hf_seq.hub.push is publish.push


@pytest.mark.parametrize("name", ["gpt", "lstm", "mamba"])
def test_a_folder_saved_by_0_1_0_loads_with_from_pretrained(name):
    expected = load_file(SAVED / "expected.safetensors")
    model = transformers.AutoModelForCausalLM.from_pretrained(SAVED / name).eval()
    assert type(model).__module__.startswith("hf_seq.models.")
    with torch.no_grad():
        logits = model(input_ids=expected["input_ids"]).logits
    torch.testing.assert_close(logits, expected[f"{name}.logits"], rtol=1e-5, atol=1e-6)


def test_a_folder_saved_by_0_1_0_loads_with_remote_code_where_hf_seq_is_not_installed(clean_python):
    script = textwrap.dedent(
        f"""
        import torch, transformers
        from safetensors.torch import load_file
        expected = load_file({str(SAVED / "expected.safetensors")!r})
        for name in ("gpt", "lstm", "mamba"):
            folder = {str(SAVED)!r} + "/" + name
            model = transformers.AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
            assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
            with torch.no_grad():
                logits = model(input_ids=expected["input_ids"]).logits
            torch.testing.assert_close(logits, expected[name + ".logits"], rtol=1e-5, atol=1e-6)
            out = model.generate(expected["input_ids"][:1], max_new_tokens=3, do_sample=False, pad_token_id=0)
            assert out.shape == (1, 10), out.shape
        print("remote ok")
        """
    )
    assert "remote ok" in clean_python.run(script)


def test_the_interpreter_of_the_remote_code_checks_cannot_import_hf_seq(clean_python):
    """Every check that a folder loads without hf-seq runs in this interpreter (tests/clean_python.py): it must refuse
    the package, and a script that raises must fail the test with its traceback."""
    with pytest.raises(AssertionError, match="import of hf_seq halted"):
        clean_python.run("import hf_seq")
    with pytest.raises(AssertionError, match="ModuleNotFoundError"):
        clean_python.run("from hf_seq.models import modeling_gpt")
    assert clean_python.run("print('after a failure it still answers')") == "after a failure it still answers\n"
