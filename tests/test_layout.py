"""The package's layout: hf_seq's rooms import only the layers below them and make no circle (DESIGN: the layers go
bottom up, nothing imports upward), and docs/guide/layout.md shows the layout the code has. The graph is read from the
sources with `ast` (docs/layout.py), imports inside functions included: a function-level import hides a circle from
Python at import time, not from a reader."""

import ast

from docs.layout import BEGIN, END, PACKAGE, PAGE, import_graph, page_with, render, room
from hf_seq.faces import LAYERS


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle through each strongly connected group of modules (Tarjan's algorithm), as the path
    a -> b -> ... -> a."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [circle_in(graph, group) for group in groups]


def circle_in(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest circle through the group's first module, by breadth-first search inside the group."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & group):
                if target == start:
                    return [*paths[node], start]
                if target not in paths:
                    paths[target] = [*paths[node], target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"no circle through {start} in {sorted(group)}")


def test_the_graph_sees_every_kind_of_import():
    graph = import_graph()
    assert "hf_seq.registry" in graph["hf_seq"]  # from .registry import ... (package __init__)
    assert "hf_seq.data.corpora" in graph["hf_seq.hub.cards"]  # from hf_seq.data.corpora import ... (module level)
    assert "hf_seq.data.corpora" in graph["hf_seq.hub.publish"]  # from hf_seq.data.corpora import ... (inside a function)
    assert "hf_seq.models.configuration_gpt" in graph["hf_seq.training.compute"]


def test_circles_are_found_and_named():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert circles(graph) == [["a", "b", "c", "a"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    found = circles(import_graph())
    assert not found, "import circles in hf_seq:\n" + "\n".join(" -> ".join(circle) for circle in found)


def upward_imports(graph: dict[str, set[str]], layers) -> list[str]:
    """Every import of a module from a room on its own layer or above, as "a -> b (room layer -> room layer)"."""
    layer = {name: level for level, names in enumerate(layers) for name in names}
    found = []
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            here, there = room(source), room(target)
            if here != there and layer[there] >= layer[here]:
                found.append(f"{source} -> {target} ({here} {layer[here]} -> {there} {layer[there]})")
    return found


def test_every_room_has_a_layer():
    rooms = {room(name) for name in import_graph()}
    assert rooms == {name for names in LAYERS for name in names}


def test_upward_imports_are_found():
    graph = {"hf_seq.cli": {"hf_seq.errors"}, "hf_seq.errors": {"hf_seq.cli"}}
    assert upward_imports(graph, (("errors",), ("cli",))) == ["hf_seq.errors -> hf_seq.cli (errors 0 -> cli 1)"]
    assert upward_imports(graph, (("errors", "cli"),)) == [
        "hf_seq.cli -> hf_seq.errors (cli 0 -> errors 0)",
        "hf_seq.errors -> hf_seq.cli (errors 0 -> cli 0)",
    ]


def test_each_room_imports_only_the_layers_below_it():
    found = upward_imports(import_graph(), LAYERS)
    assert not found, "imports that do not go down a layer:\n" + "\n".join(found)


def test_the_top_level_is_a_few_rooms():
    """The top level holds packages by job; a module there is a leaf everyone needs, the face, or the command."""
    modules = sorted(path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__")
    assert modules == ["cli", "errors", "faces", "registry"]


def test_the_layout_page_is_drawn_from_the_code():
    page = PAGE.read_text()
    assert page == page_with(page, render(LAYERS)), "docs/guide/layout.md is out of date: run python docs/layout.py"
    assert page.count(BEGIN) == 1 and page.count(END) == 1


def test_the_page_would_show_a_new_room_and_a_new_arrow():
    """The drawing follows the graph: another layer table gives another picture."""
    moved = tuple((*names, "cli") if "studio" in names else tuple(n for n in names if n != "cli") for names in LAYERS)
    assert render(tuple(names for names in moved if names)) != render(LAYERS)


# Functions allowed past 80 lines: flat tables, read row by row, that a split would only scatter.
FLAT_TABLES = {
    "hf_seq.training.recipes.validate": "one check per recipe key, each with its message",
}


def long_functions(limit: int = 80) -> dict[str, int]:
    """Every function of hf_seq longer than `limit` lines, by its dotted name."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(("hf_seq", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > limit:
                    found[f"{module}.{node.name}"] = length
    return found


def test_no_function_is_over_80_lines_except_the_flat_tables():
    found = {name: length for name, length in long_functions().items() if name not in FLAT_TABLES}
    assert not found, f"functions over 80 lines: {found}"
    assert set(FLAT_TABLES) <= set(long_functions()), "a flat table got short: drop it from FLAT_TABLES"
