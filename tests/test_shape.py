"""The shape the code keeps (docs/guide/layout.md): short functions, and studies that use the runs they train as
values instead of reading their own output files back."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "hf_seq"
LONG = 80  # lines
MOST_LONG = 5  # functions of more than LONG lines allowed in the package


def test_at_most_five_functions_are_longer_than_80_lines():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > LONG:
                    long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} ({lines} lines)")
    assert len(long) <= MOST_LONG, "\n".join(long)


def test_studies_never_read_their_own_runs_back():
    """training.run returns the model and its evaluations: a study has no reason to open metrics.json or to load a
    model it just trained (a finished run from an earlier command is read back by runs.finished_run)."""
    for path in sorted((PACKAGE / "experiments").glob("*.py")):
        text = path.read_text()
        for needle in ("metrics.json", "from_pretrained("):
            assert needle not in text, f"{path.name} uses {needle}"
