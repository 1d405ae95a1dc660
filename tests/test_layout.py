"""The code's layout, read from the source with `ast` (nothing is imported): the project's
modules import one another without a cycle, every name has one import path (only the three
curated package `__init__`s — `pate`, `analysis`, `pate.data` — and `pate.config`'s sections re-export), and the steps in
`pate/steps/` sit on top of the machinery in `pate/`."""

from __future__ import annotations

import ast
import io
import tokenize

import pytest

from conftest import ROOT

PACKAGES = ("pate", "analysis")
#: The only modules that may hand out names defined elsewhere (`pate.data`: the data room's
#: public names, defined in its modules).
CURATED = {"pate", "analysis", "pate.data"}
#: `pate.config` re-exports its section dataclasses from these (see ARCHITECTURE.md).
CONFIG_SECTIONS = ("pate.config", ("pate.config.sections", "pate.config.baseline_sections"))


def _module_name(path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _project_modules() -> dict:
    """``{dotted name: path}`` of every module of pate/, analysis/ and cli.py."""
    modules = {_module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}
    modules["cli"] = ROOT / "cli.py"
    return modules


MODULES = _project_modules()
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _package_of(name: str) -> str:
    return name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]


def _imported_modules(name: str, tree: ast.Module) -> set:
    """The project modules `name` imports anywhere in its source (top level, functions,
    TYPE_CHECKING blocks): ``from p import m`` counts as importing the submodule p.m."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package_of(name).split(".")
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {t for t in targets if t in MODULES and t != name}
    return found


def _cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


GRAPH = {name: _imported_modules(name, tree) for name, tree in TREES.items()}


def _defined_names(tree: ast.Module) -> set:
    """Names a module binds itself at the top level (functions, classes, assignments),
    not names it imports."""
    names = set()

    def scan(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
                for field in ("body", "orelse", "finalbody"):
                    scan(getattr(node, field, []))
                for handler in getattr(node, "handlers", []):
                    scan(handler.body)

    scan(tree.body)
    return names


def _module_imports(tree: ast.Module) -> set:
    """Names bound by a plain ``import x`` at the top level (modules such as ``os``)."""
    return {(a.asname or a.name).split(".")[0] for node in tree.body if isinstance(node, ast.Import)
            for a in node.names}


def _providers() -> dict:
    """``{module: names another module may import from it}``: what it defines, its
    submodules, and for `pate.config` the section dataclasses it re-exports."""
    provided = {}
    for name, tree in TREES.items():
        names = _defined_names(tree) | _module_imports(tree)
        names |= {m.rpartition(".")[2] for m in MODULES if m.rpartition(".")[0] == name}
        provided[name] = names
    config, sections = CONFIG_SECTIONS
    provided[config] |= {a.asname or a.name for node in TREES[config].body
                         if isinstance(node, ast.ImportFrom) and node.module in sections for a in node.names}
    return provided


PROVIDERS = _providers()


def _python_files() -> list:
    """Every Python file of the repository that imports the project: library, cli, tests,
    bench, examples."""
    files = list(MODULES.values())
    for folder in ("tests", "bench", "examples"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return files


def _lookups(tree: ast.Module):
    """``(line, module, name)`` for each ``from module import name`` and each
    ``alias.name`` where alias is a project module imported under that name."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in MODULES and not node.level:
            for a in node.names:
                if f"{node.module}.{a.name}" in MODULES:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                else:
                    yield node.lineno, node.module, a.name
        elif isinstance(node, ast.Import):
            aliases.update({a.asname: a.name for a in node.names if a.asname and a.name in MODULES})
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            yield node.lineno, aliases[node.value.id], node.attr


# --------------------------------------------------------------------------- tests


def test_the_graph_sees_the_layers():
    """A check of the checker: known edges are found, function-level imports included."""
    assert "pate.store.rundir" in GRAPH["pate.steps.label"]
    assert "pate.programs.teacher_training" in GRAPH["pate.steps.label"]  # inside a function
    assert "pate.steps.label" in GRAPH["pate.steps.pipeline"]  # inside a function
    assert "analysis.reporting.report" in GRAPH["analysis.reporting.report_io"]  # under TYPE_CHECKING
    assert len(MODULES) > 30


def test_no_import_cycles():
    assert _cycles(GRAPH) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_analysis_never_imports_pate_or_cli():
    for name, deps in GRAPH.items():
        if name.split(".")[0] == "analysis":
            assert not {d for d in deps if d.split(".")[0] in ("pate", "cli")}, name


#: The folders of `pate/` that are machinery: the commands (`pate.steps`) and the baselines
#: (`pate.baselines`) sit on top of them.
MACHINERY = ("pate.cli", "pate.config", "pate.store", "pate.programs", "pate.release", "pate.data")


def _in(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_machinery_never_imports_a_step_or_a_baseline():
    """cli/config/store/programs/release/data sit under the commands and the baselines."""
    machinery = [name for name in GRAPH if any(_in(name, m) for m in MACHINERY)]
    assert len(machinery) > 25
    for name in machinery:
        assert not {d for d in GRAPH[name] if _in(d, "pate.steps") or _in(d, "pate.baselines")}, name


def test_steps_are_leaves():
    """One module per command; no step imports another, except `pate run`'s pipeline."""
    for name, deps in GRAPH.items():
        if _in(name, "pate.steps") and name not in ("pate.steps", "pate.steps.pipeline"):
            assert not {d for d in deps if _in(d, "pate.steps")}, name


def test_baselines_import_no_step():
    for name, deps in GRAPH.items():
        if _in(name, "pate.baselines"):
            assert not {d for d in deps if _in(d, "pate.steps")}, name


def test_the_package_shows_its_rooms():
    """`ls pate`: a handful of folders (the layers) and modules, no name prefix doing a
    folder's job, and no two library modules with one basename."""
    entries = [p.name for p in (ROOT / "pate").iterdir() if p.name != "__pycache__"]
    assert len(entries) <= 10, sorted(entries)
    names = [m.rpartition(".")[2] for m in MODULES if MODULES[m].name != "__init__.py" and m != "cli"]
    prefixed = [n for n in names if n.startswith(("config_", "cli_", "synth_", "dpsgd_"))]
    assert prefixed == []
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


@pytest.mark.parametrize("path", _python_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_name_is_imported_from_where_it_is_defined(path):
    """No caller reaches a name through a module that only imports it."""
    wrong = [f"{path.relative_to(ROOT)}:{line}: {module}.{name}"
             for line, module, name in _lookups(ast.parse(path.read_text()))
             if module not in CURATED and name not in PROVIDERS[module]]
    assert wrong == []


def _noqa_f401(path) -> bool:
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return any(t.type == tokenize.COMMENT and "noqa: F401" in t.string for t in tokens)


def _imported_names(tree: ast.Module) -> dict:
    """``{local name: module}`` of names a module's top level imports from a project module."""
    return {a.asname or a.name: node.module for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES
            for a in node.names}


@pytest.mark.parametrize("name", sorted(set(MODULES) - CURATED - {CONFIG_SECTIONS[0]}))
def test_no_module_re_exports(name):
    """Outside the curated `__init__`s and `pate.config`: no PEP 562 ``__getattr__``, no
    ``_MOVED`` table, no ``# noqa: F401`` import, no ``import x as x``, no module-level
    alias of an imported name, no ``__all__`` naming what the module does not define."""
    tree, path = TREES[name], MODULES[name]
    defined = _defined_names(tree)
    assert "__getattr__" not in defined and "_MOVED" not in defined
    assert not _noqa_f401(path)
    imported = _imported_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert all(a.asname != a.name for a in node.names), f"{name}:{node.lineno}"
    for node in tree.body:
        if isinstance(node, ast.Assign):
            value = node.value
            while isinstance(value, ast.Attribute):
                value = value.value
            is_alias = isinstance(node.value, (ast.Name, ast.Attribute)) and isinstance(value, ast.Name)
            assert not (is_alias and value.id in imported), f"{name}:{node.lineno} aliases an imported name"
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                assert set(ast.literal_eval(node.value)) <= defined, f"{name}.__all__"
    if path.name == "__init__.py":  # a package that is not curated holds no code
        assert not [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]


def test_no_module_and_function_share_a_name():
    """`pate.label` is a function, not also a module made callable."""
    api = _defined_names(TREES["pate"]) | {
        ast.literal_eval(k) for node in ast.walk(TREES["pate"]) if isinstance(node, ast.Dict)
        for k in node.keys if isinstance(k, ast.Constant)}
    assert "label" in api and "run" in api
    assert not {m for m in MODULES if m.rpartition(".")[0] == "pate" and m.rpartition(".")[2] in api}


#: The layers of `pate/`, lowest first; a module imports only its own layer and the ones below
#: (the curated `pate/__init__.py` and root `cli.py` stand outside: they name the commands);
#: `pate.arrays` (`pate.fit`: `pate run` on arrays) sits on top of the steps.
PATE_LAYERS = (("pate.data",), ("pate.config",), ("pate.store",), ("pate.programs", "pate.cli"),
               ("pate.release",), ("pate.steps", "pate.baselines"), ("pate.arrays",))
#: The rooms of `analysis/`, lowest first (docs/privacy.md, "room by room").
ANALYSIS_ROOMS = (("analysis.core",), ("analysis.accounting",), ("analysis.bounds",), ("analysis.sanitised",),
                  ("analysis.mechanisms",), ("analysis.baselines", "analysis.planning", "analysis.reporting"))


def _rank(name: str, layers) -> tuple[int, str] | None:
    for rank, rooms in enumerate(layers):
        for room in rooms:
            if _in(name, room):
                return rank, room
    return None


def _upward_imports(layers) -> list[str]:
    """``importer -> imported`` for every import of a higher layer or of a sibling room."""
    wrong = []
    for name, deps in GRAPH.items():
        mine = _rank(name, layers)
        if mine is None:
            continue
        for dep in deps:
            theirs = _rank(dep, layers)
            if theirs is not None and theirs[1] != mine[1] and theirs[0] >= mine[0]:
                wrong.append(f"{name} -> {dep}")
    return sorted(wrong)


@pytest.mark.parametrize("layers", [PATE_LAYERS, ANALYSIS_ROOMS], ids=["pate", "analysis"])
def test_every_layer_imports_downwards(layers):
    """data < config < store < programs, cli < release < steps, baselines; and in `analysis`:
    core < accounting < bounds < sanitised < mechanisms < baselines, planning, reporting.
    No module imports a layer above its own or a sibling room."""
    rooms = {room for group in layers for room in group}
    assert all(any(_in(m, room) for m in MODULES) for room in rooms), "a layer named here no longer exists"
    assert _upward_imports(layers) == []


def test_the_order_checker_finds_an_upward_import():
    """A check of the checker: a graph with store importing a step is caught."""
    saved = dict(GRAPH)
    try:
        GRAPH["pate.store.ledger"] = GRAPH["pate.store.ledger"] | {"pate.steps.label"}
        assert _upward_imports(PATE_LAYERS) == ["pate.store.ledger -> pate.steps.label"]
    finally:
        GRAPH.clear()
        GRAPH.update(saved)


def test_analysis_shows_its_rooms():
    """`ls analysis`: folders by idea and the curated `__init__.py`, at most 10 entries, and every
    module in a room (no loose module beside the rooms)."""
    entries = sorted(p.name for p in (ROOT / "analysis").iterdir() if p.name != "__pycache__")
    assert len(entries) <= 10, entries
    assert [e for e in entries if not (ROOT / "analysis" / e).is_dir()] == ["__init__.py"]
    assert {f"analysis.{e}" for e in entries if e != "__init__.py"} == {r for g in ANALYSIS_ROOMS for r in g}


@pytest.mark.parametrize("path", _python_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_project_import_names_a_module_that_exists(path):
    """An import of a project module that no longer exists (a module moved to another room) is
    caught here, not at run time inside the function that imports it."""
    missing = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        missing += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names
                    if n.split(".")[0] in PACKAGES and n not in MODULES]
    assert missing == []


@pytest.mark.parametrize("path", sorted((ROOT / "tests").rglob("test_*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_test_module_imports_test_helpers_from_its_own_folder_or_conftest(path):
    """`from test_x import ...` finds test_x.py only when it lies beside the importer (pytest puts
    each test file's own folder on sys.path); shared helpers live in tests/conftest.py."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("test_"):
            assert (path.parent / f"{node.module}.py").exists(), f"{path.name} imports {node.module} from elsewhere"
