"""How the packages show their faces, and how the old import paths keep working.

Each package of hf_seq (`data`, `training`, `hub`, ...) names what it offers in its `__init__.py` as a table of
public name -> the submodule that defines it, and imports that submodule on the name's first lookup (PEP 562):
`from hf_seq.training import run` works, yet `import hf_seq.data` costs nothing until a name is used, so that
`hf-seq --help` imports neither torch nor transformers.

Until 0.1.0 the package was one flat room of modules (`hf_seq.runs`, `hf_seq.tasks`, `hf_seq.forecasting`, ...).
`MOVED` maps each of those import paths to where the module lives now; `import hf_seq` installs a finder that
answers the old path with the new module itself (the same object, so a monkeypatch or an `isinstance` agrees), or,
for a module that was split, with a view whose names come from the parts.
"""

import importlib
import importlib.abc
import importlib.machinery
import sys
import types


def lazy_exports(package: str, table: dict[str, list[str]]):
    """`__getattr__`, `__dir__` and `__all__` for a package face: `table` maps each submodule (relative to
    `package`) to the public names it gives the face."""
    where = {name: module for module, names in table.items() for name in names}

    def __getattr__(name: str):
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        setattr(sys.modules[package], name, value)  # later lookups skip __getattr__
        return value

    def __dir__():
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__, sorted(where)


# The rooms of the package, bottom up: each top-level module or package imports only rooms of the layers below it
# (tests/test_layout.py walks the imports; docs/guide/layout.md is drawn from this table and that graph). "hf_seq" is
# the package's own face, __init__.py.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "faces"),
    ("models",),
    ("registry",),
    ("hf_seq",),
    ("evaluation", "convert", "pipelines"),
    ("baselines",),
    ("data",),
    ("hub",),
    ("training",),
    ("experiments",),
    ("studio",),
    ("cli",),
)

# old import path -> the module that holds it now (a tuple: a module that was split, looked up in that order)
MOVED: dict[str, str | tuple[str, ...]] = {
    "hf_seq.cards": "hf_seq.hub.cards",
    "hf_seq.checkpoints": "hf_seq.training.checkpointing",
    "hf_seq.checksums": "hf_seq.hub.checksums",
    "hf_seq.compute": "hf_seq.training.compute",
    "hf_seq.finetuning": "hf_seq.training.finetuning",
    "hf_seq.forecasting": ("hf_seq.evaluation.forecasting", "hf_seq.baselines.forecasting", "hf_seq.data.series"),
    "hf_seq.ngram": "hf_seq.baselines.ngram",
    "hf_seq.plotting": "hf_seq.experiments.plotting",
    "hf_seq.qa": "hf_seq.pipelines.qa",
    "hf_seq.recipes": "hf_seq.training.recipes",
    "hf_seq.runs": "hf_seq.training.runs",
    "hf_seq.schedules": "hf_seq.training.schedules",
    "hf_seq.series": "hf_seq.data.series",
    "hf_seq.sharding": "hf_seq.training.sharding",
    "hf_seq.streaming": "hf_seq.data.streaming",
    "hf_seq.tasks": "hf_seq.data.tasks",
    "hf_seq.tokenization": "hf_seq.data.tokenization",
}


class SplitModule(types.ModuleType):
    """An old module that was split: each name is looked up in the parts, in order."""

    def __init__(self, name: str, parts: tuple[str, ...]):
        super().__init__(name, f"Moved: the names of {name} are now in {', '.join(parts)}.")
        self._parts = parts

    def __getattr__(self, name: str):
        for part in self._parts:
            module = importlib.import_module(part)
            if hasattr(module, name) and not name.startswith("__"):
                return getattr(module, name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r} (it moved to {self._parts})")

    def __dir__(self):
        return sorted({name for part in self._parts for name in dir(importlib.import_module(part))})


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `MOVED`'s old paths: the import returns the module at its new place."""

    def __init__(self):
        self.own_specs = {}

    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        target = MOVED[spec.name]
        if isinstance(target, tuple):
            return SplitModule(spec.name, target)
        module = importlib.import_module(target)
        self.own_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module):
        # The module at its new place is imported already; the import system has just set its __spec__ to the old
        # path's: give it back its own, so that the module still says where it lives.
        if not isinstance(module, SplitModule):
            module.__spec__ = self.own_specs.pop(module.__spec__.name)


def install() -> None:
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModules())
