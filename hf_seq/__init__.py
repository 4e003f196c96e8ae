"""hf-seq: the lineage of sequence models, from Elman's RNN to GPT, as Hugging Face transformers models."""

import importlib

from . import faces
from .registry import FAMILIES, after_import, register_lazily

faces.install()  # the import paths of 0.1.0's flat modules (hf_seq.runs, hf_seq.tasks, ...) lead to their new places

# Every class is imported on first use (`hf_seq.GPTForCausalLM`): `import hf_seq` and `hf-seq --help` import neither
# torch nor transformers. The families register with the Auto classes when those are imported (see registry.py).
# Public names outside the registry's rows (state objects), each with its module under hf_seq/models/.
_ELSEWHERE = {
    "BahdanauState": "modeling_bahdanau",
    "ConvState": "modeling_conv",
    "HMMState": "modeling_hmm",
    "RecurrentState": "state",
    "SSMState": "state",
    "WindowState": "modeling_window",
}


def __getattr__(name: str):
    """A family's config or model class, or a state object, imported on its first lookup."""
    for fam in FAMILIES:
        if name == fam.config:
            value = fam.config_class
            break
        if name in fam.models.values():
            value = getattr(fam.modeling_module(), name)
            break
    else:
        if name not in _ELSEWHERE:
            raise AttributeError(f"module 'hf_seq' has no attribute {name!r}")
        value = getattr(importlib.import_module(f"hf_seq.models.{_ELSEWHERE[name]}"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__():
    return sorted({*globals(), *__all__})


def _register_pipelines() -> None:
    """Importing each module registers its tasks (at its end, so that a module being imported when transformers'
    pipelines arrive registers once it is complete)."""
    importlib.import_module("hf_seq.pipelines.qa")  # extractive question answering, which transformers 5 removed
    importlib.import_module("hf_seq.pipelines.text2text")  # translation / text2text-generation / summarization, removed too


register_lazily()
# A pipeline class subclasses transformers' Pipeline, which `pipeline(...)` imports first: register the tasks then.
after_import("transformers.pipelines", _register_pipelines)

__version__ = "0.1.0"

# The public names: every family's config and model classes (the registry's rows), the state objects that live
# beside them, and the table itself.
__all__ = sorted(["FAMILIES", *_ELSEWHERE, *(name for fam in FAMILIES for name in (fam.config, *fam.models.values()))])
