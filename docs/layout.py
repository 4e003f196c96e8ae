"""The layout page drawn from the code: `python docs/layout.py` reads every import in hf_seq (with `ast`, imports
inside functions included) and rewrites the part of docs/guide/layout.md between its two markers: the layers as a
picture, bottom up, and a list of the rooms, each with its face's first sentence, its modules and the rooms it
imports. tests/test_layout.py fails when the page and the code disagree, and when an import does not go down a
layer (`hf_seq.faces.LAYERS`)."""

import ast
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hf_seq"
PAGE = ROOT / "docs" / "guide" / "layout.md"
BEGIN, END = "<!-- drawn by docs/layout.py: begin -->", "<!-- drawn by docs/layout.py: end -->"


def module_files() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own name, for its __init__.py)."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ("hf_seq", *path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that `name` imports anywhere in its file: `import hf_seq.x`, `from hf_seq.x import y`,
    `from .x import y`, and `from . import x` where x is a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            found.add(source)
            found.update(f"{source}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return {m for m in found if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def room(module: str) -> str:
    """The top-level module or package a module belongs to ("hf_seq" for the package's own __init__.py)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "hf_seq"


def room_imports(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Which rooms each room imports."""
    edges = {room(name): set() for name in graph}
    for source, targets in graph.items():
        edges[room(source)].update(room(t) for t in targets if room(t) != room(source))
    return edges


def face_sentence(name: str) -> str:
    """The first sentence of a room's docstring (its package's __init__.py, or the module itself)."""
    path = PACKAGE / "__init__.py" if name == "hf_seq" else PACKAGE / name / "__init__.py"
    if not path.exists():
        path = PACKAGE / f"{name}.py"
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    return re.split(r"(?<=\.)\s", first)[0].rstrip(".:")


def members(name: str, modules) -> list[str]:
    """A package's modules (a sub-package counts as one), or [] for a module."""
    found = {module.split(".")[2] for module in modules if room(module) == name and module.count(".") >= 2}
    return sorted(found)


def render(layers) -> str:
    """The generated part of the page: the picture, then the list."""
    graph = import_graph()
    edges = room_imports(graph)
    picture = ["```", "layer  rooms (each imports only rooms of the layers below it)"]
    for level in reversed(range(len(layers))):
        picture.append(f"{level:>5}  " + "   ".join(f"{name}/" if members(name, graph) else name for name in layers[level]))
        if level:
            picture.append("         │")
    picture.append("```")
    rows = ["| layer | room | what it holds | its modules | imports |", "|---:|---|---|---|---|"]
    for level in reversed(range(len(layers))):
        for name in layers[level]:
            inside = ", ".join(members(name, graph)) or "(a module)"
            if name == "models":
                inside = "one configuration and one modeling file per family, the shared leaf layers"
            if name == "hf_seq":
                inside = "`__init__.py`: the public names, imported on first use"
            uses = ", ".join(sorted(edges[name])) or "nothing of hf_seq"
            rows.append(f"| {level} | `{name}` | {face_sentence(name)} | {inside} | {uses} |")
    count = sum(len(targets) for targets in edges.values())
    summary = f"{sum(len(names) for names in layers)} rooms on {len(layers)} layers, {count} arrows between rooms."
    return "\n".join([BEGIN, "", *picture, "", summary, "", *rows, "", END])


def page_with(text: str, drawn: str) -> str:
    start, stop = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + drawn + text[stop:]


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from hf_seq.faces import LAYERS

    PAGE.write_text(page_with(PAGE.read_text(), render(LAYERS)))
    print(textwrap.shorten(f"wrote {PAGE.relative_to(ROOT)}", 200))


if __name__ == "__main__":
    main()
