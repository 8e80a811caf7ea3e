"""The tree shows the layers (README "Code map"): imports run only downwards, no module imports
itself back through others, nothing grows past what a reader takes in at once."""

import ast
import os

import pytest

import lms_refresh

# The package under test: the source tree's (an editable install) or the installed one (debian/tests/suite).
PACKAGE = os.path.dirname(lms_refresh.__file__)
ROOT = os.path.dirname(PACKAGE)

# Top to bottom, as the code map lists them; a module may import its own layer and those below.
LAYERS = [
    {"lms_refresh.__main__"},
    {"lms_refresh.cli", "lms_refresh.demo"},
    {"lms_refresh.ops"},
    {"lms_refresh.run"},
    {"lms_refresh.sources", "lms_refresh.store"},
    {"lms_refresh.config", "lms_refresh.disclosure"},
    {"lms_refresh", "lms_refresh.errors", "lms_refresh.logs", "lms_refresh.window",
     "lms_refresh.state_directory", "lms_refresh.credentials", "lms_refresh.postgresql", "lms_refresh.faults",
     "lms_refresh.atomic", "lms_refresh.instants", "lms_refresh.regular_files"},
]
MAX_TOP_LEVEL_MODULES = 12  # the top of lms_refresh/ holds foundations only; the rest lives in its layer


def modules():
    """{dotted name: path} of every module of the package."""
    found = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                relative = os.path.relpath(os.path.join(folder, name), ROOT)[:-3].split(os.sep)
                if relative[-1] == "__init__":
                    relative = relative[:-1]
                found[".".join(relative)] = os.path.join(folder, name)
    return found


def imports(path, dotted, top_level_only=False):
    """The lms_refresh modules `path` imports (everywhere in it, or at its top level only)."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    nodes = tree.body if top_level_only else ast.walk(tree)
    package = dotted if path.endswith("__init__.py") else dotted.rpartition(".")[0]
    known = modules()
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            submodules = {f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known}
            found.update(submodules)
            if len(submodules) < len(node.names):  # names from the module itself, not only its submodules
                found.add(base)
    return {name for name in found if name == "lms_refresh" or name.startswith("lms_refresh.")}


def layer(dotted):
    for index, members in enumerate(LAYERS):
        if any(dotted == member or dotted.startswith(member + ".") for member in members if member != "lms_refresh"):
            return index
    assert dotted == "lms_refresh", f"{dotted} belongs to no layer: add it to the code map and LAYERS"
    return len(LAYERS) - 1


@pytest.mark.parametrize("dotted", sorted(modules()))
def test_no_import_runs_back_up_a_layer(dotted):
    path = modules()[dotted]
    upward = sorted(name for name in imports(path, dotted) if layer(name) < layer(dotted))
    assert upward == [], f"{dotted} (layer {layer(dotted)}) imports from a layer above it"


# The store aggregates and keeps what it is given; what is published of a cell (threshold, perturbation,
# the settings in force) is lms_refresh.disclosure's to decide, called from the run layer. Only how text
# is shown (disclosure.redaction: the run log's messages, quarantined records, URLs) reaches into the store.
STORE_MAY_USE_OF_DISCLOSURE = {"lms_refresh.disclosure.redaction"}


@pytest.mark.parametrize("dotted", sorted(name for name in modules() if name.startswith("lms_refresh.store")))
def test_the_store_does_not_decide_what_is_published(dotted):
    used = sorted(name for name in imports(modules()[dotted], dotted)
                  if (name == "lms_refresh.disclosure" or name.startswith("lms_refresh.disclosure."))
                  and name not in STORE_MAY_USE_OF_DISCLOSURE)
    assert used == [], f"{dotted} imports the disclosure policy: hand it the published rows instead"


def test_no_import_circle():
    graph = {name: imports(path, name, top_level_only=True) - {name} for name, path in modules().items()}
    # A package's __init__ is imported by each of its modules' imports; follow only real edges.
    state, circles = {}, []

    def visit(name, trail):
        state[name] = "open"
        for target in sorted(graph.get(name, ())):
            if target not in graph:
                continue
            if state.get(target) == "open":
                circles.append(trail[trail.index(target):] + [target] if target in trail else [name, target])
            elif target not in state:
                visit(target, trail + [target])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert circles == []


def test_few_modules_at_the_top():
    # No cap on a module's length: a module holds one concept (its docstring names it), whatever its size, and a
    # cap drew module boundaries through concepts.
    top = sorted(name for name in os.listdir(PACKAGE) if name.endswith(".py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def test_the_layer_rule_itself_catches_an_upward_import(tmp_path):
    """The rule above would pass on a tree it cannot read; show it reads one."""
    path = tmp_path / "refresh.py"
    path.write_text("from lms_refresh.ops.job import run_job\nimport lms_refresh.cli\n")
    found = imports(str(path), "lms_refresh.run.refresh")
    assert found == {"lms_refresh.ops.job", "lms_refresh.cli"}
    assert [layer(name) < layer("lms_refresh.run.refresh") for name in sorted(found)] == [True, True]
