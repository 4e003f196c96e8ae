"""Startup stays cheap: `hf-seq --help` and argument errors import neither torch nor transformers, and `import hf_seq`
imports no modeling module until a model is used, yet every family and pipeline is registered by the time transformers'
Auto classes or `pipeline` are used. Each check runs in a fresh interpreter (the test process has imported
everything already) and asserts which modules got imported: behaviour, not timings, which a loaded machine would
make flaky."""

import json
import subprocess
import sys

import pytest


def run_fresh(code: str) -> dict:
    """Run `code` in a new interpreter; it must print one JSON object as its last line."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


HEAVY = """
import json, sys
def loaded():
    return {
        "torch": "torch" in sys.modules,
        "transformers": "transformers" in sys.modules,
        "modeling": sorted(m for m in sys.modules if m.startswith("hf_seq.models.modeling_")),
        "pipelines": "transformers.pipelines" in sys.modules,
    }
"""


@pytest.mark.parametrize(
    "argv", [["--help"], ["train", "--help"], ["train"], ["no-such-command"], ["generate", "x", "--top-k", "many"]]
)
def test_help_and_argument_errors_import_neither_torch_nor_transformers(argv):
    result = run_fresh(
        HEAVY
        + f"""
import contextlib, io
import hf_seq.cli
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        hf_seq.cli.main({argv!r})
        code = 0
    except SystemExit as exit:
        code = exit.code
print(json.dumps({{"code": code, **loaded()}}))
"""
    )
    assert result["code"] == (0 if argv[-1] == "--help" else 2)
    assert not result["torch"] and not result["transformers"], result


def test_import_registers_families_without_importing_any_modeling_module():
    result = run_fresh(
        HEAVY
        + """
import hf_seq
after_import = loaded()
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM
from hf_seq.registry import FAMILIES
registered = {fam.model_type: type(AutoConfig.for_model(fam.model_type)).__name__ for fam in FAMILIES}
config = AutoConfig.for_model("hf_seq_gpt", hidden_size=16, num_hidden_layers=1, num_attention_heads=2, vocab_size=40)
in_mapping = type(config) in AutoModelForCausalLM._model_mapping
after_auto = loaded()
model = AutoModelForCausalLM.from_config(config)
print(json.dumps({
    "after_import": after_import, "after_auto": after_auto, "after_model": loaded(), "registered": registered,
    "in_mapping": in_mapping, "model": type(model).__name__, "auto_class": type(model)._auto_class,
    "auto_map": config.auto_map,
}))
"""
    )
    from hf_seq.registry import FAMILIES

    assert not result["after_import"]["torch"] and not result["after_import"]["transformers"]
    assert result["registered"] == {fam.model_type: fam.config for fam in FAMILIES}
    assert result["in_mapping"]
    assert result["after_auto"]["modeling"] == [] and not result["after_auto"]["pipelines"]
    # the first model built imports its own family only, marked for remote code
    assert result["after_model"]["modeling"] == ["hf_seq.models.modeling_gpt"]
    assert result["model"] == "GPTForCausalLM" and result["auto_class"] == "AutoModelForCausalLM"
    assert result["auto_map"] == FAMILIES[[f.name for f in FAMILIES].index("gpt")].auto_map


def test_pipelines_register_when_transformers_pipelines_is_imported():
    result = run_fresh(
        HEAVY
        + """
import hf_seq
before = loaded()
from transformers import pipeline
from transformers.pipelines import PIPELINE_REGISTRY
tasks = ["translation", "text2text-generation", "summarization", "hf-seq-question-answering"]
print(json.dumps({"before": before, "tasks": [t in PIPELINE_REGISTRY.supported_tasks for t in tasks]}))
"""
    )
    assert not result["before"]["pipelines"]
    assert all(result["tasks"]), result


def test_a_modeling_module_imported_by_its_path_is_marked_for_remote_code():
    """`save_pretrained` copies the code next to the weights only for a class marked by `register_for_auto_class`."""
    result = run_fresh(
        HEAVY
        + """
from hf_seq.models.modeling_rnn import RNNConfig, RNNForCausalLM
print(json.dumps({"auto_class": RNNForCausalLM._auto_class, "auto_map": RNNConfig().auto_map}))
"""
    )
    assert result["auto_class"] == "AutoModelForCausalLM"
    assert result["auto_map"]["AutoModelForCausalLM"] == "modeling_rnn.RNNForCausalLM"


def test_lazy_names_resolve_and_unknown_names_fail():
    import hf_seq

    assert hf_seq.GPTForCausalLM.__name__ == "GPTForCausalLM"
    assert hf_seq.RecurrentState.__name__ == "RecurrentState"
    assert set(hf_seq.__all__) <= set(dir(hf_seq))
    with pytest.raises(AttributeError, match="NoSuchModel"):
        hf_seq.NoSuchModel  # noqa: B018
