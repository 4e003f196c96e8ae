"""The registry table is the contract: every family registers with the Auto classes, importing twice is harmless,
and every registered model class is exercised by some subclass of the shared tester."""

import importlib
import pkgutil

import transformers

import hf_seq
import tests
from hf_seq.registry import FAMILIES, register
from tests.tester import ModelTesterMixin


def all_testers():
    for info in pkgutil.iter_modules(tests.__path__):
        if info.name.startswith("test_"):
            importlib.import_module(f"tests.{info.name}")
    stack, found = list(ModelTesterMixin.__subclasses__()), []
    while stack:
        cls = stack.pop()
        found.append(cls)
        stack.extend(cls.__subclasses__())
    return found


def test_every_registered_model_class_has_a_tester():
    covered = {
        (t.family, name) for t in all_testers() if t.family for name in hf_seq.registry.family(t.family).models.values()
    }
    registered = {(fam.model_type, name) for fam in FAMILIES for name in fam.models.values()}
    assert registered - covered == set(), "registered model classes without a tester"


def test_register_is_idempotent_and_auto_classes_resolve():
    register()
    register()
    for fam in FAMILIES:
        config_class = fam.config_class
        assert transformers.AutoConfig.for_model(fam.model_type).__class__ is config_class
        for auto, name in fam.models.items():
            mapping = getattr(transformers, auto)._model_mapping
            assert mapping[config_class].__name__ == name
        assert config_class.family_auto_map == fam.auto_map


def test_model_files_stay_inside_the_remote_code_boundary():
    """Files under hf_seq/models/ are copied next to saved weights; they may import only installed libraries and
    their siblings, never the hf_seq package or a parent package."""
    from pathlib import Path

    offending = []
    for path in Path(hf_seq.__file__).parent.joinpath("models").glob("*.py"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            stripped = line.strip()
            if stripped.startswith(("from hf_seq", "import hf_seq", "from ..")):
                offending.append(f"{path.name}:{number}: {stripped}")
    assert not offending, offending


def test_every_model_forward_has_its_signature_fixed():
    """transformers' generate() reads a remote-code model's forward signature at every decoding step; unwrapping the
    decorators each time cost 2% of a beam search (bench/results/transformer_beam_cpu.md). Each class's forward
    carries its signature, the one inspect would compute."""
    import inspect

    for fam in FAMILIES:
        for auto in fam.models:
            cls = fam.model_class(auto)
            forward = next(c.__dict__["forward"] for c in cls.__mro__ if "forward" in c.__dict__)
            assert "__signature__" in forward.__dict__, cls.__name__
            assert forward.__signature__ == inspect.signature(inspect.unwrap(forward)), cls.__name__


def test_a_familys_studio_kinds_come_from_its_config():
    """A family with no `kind_field` is one kind, its name; the ssm family's kinds are the values of `ssm_type`, each
    read back from a config that sets it (a new `ssm_type` without a kind here would be missing from the studio)."""
    from hf_seq.models.configuration_ssm import SSM_TYPES

    for fam in FAMILIES:
        if fam.kind_field is None:
            assert fam.kinds == (fam.name,) and set(fam.studio_views) <= {fam.name}, fam.name
            assert fam.kind_of(fam.config_class()) == fam.name
        for kind in fam.kinds if fam.kind_field else ():
            assert fam.kind_of(fam.config_class(**{fam.kind_field: kind})) == kind, (fam.name, kind)
        assert all(isinstance(views, tuple) for views in fam.studio_views.values()), fam.name
    ssm = hf_seq.registry.family("ssm")
    assert ssm.kind_field == "ssm_type" and set(ssm.kinds) == set(SSM_TYPES)
    assert "scan" in ssm.studio_views["s4d"] and "scan" not in ssm.studio_views["mamba"]
