"""The project's import graph: no cycle, and every import inside a function says why it is there.

Every `import` statement counts, at module level or inside a function: an import that runs late
still closes a cycle, it only hides it until a caller takes that path.
"""

from __future__ import annotations

import ast
import pathlib

from conftest import REPO

PACKAGES = ("webgraph_contract", "webgraph_pipeline", "tfds_builder", "alx_trainer")


def _modules() -> dict[str, pathlib.Path]:
    """Dotted module name -> file, for every .py file of the project's packages."""
    out = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imports(
    name: str, path: pathlib.Path, modules: dict[str, pathlib.Path]
) -> list[tuple[str, ast.stmt]]:
    """(project module imported, the statement) for each import in `path`'s syntax tree."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import mod` imports the module pkg.mod; `from mod import name` imports mod
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        else:
            continue
        found += [(t, node) for t in targets if t in modules]
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {
        name: {t for t, _ in _imports(name, path, modules) if t != name}
        for name, path in modules.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each as a sorted
    list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []

    def visit(v: str) -> None:
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
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_the_project():
    graph = _graph()
    assert "alx_trainer.train" in graph and "webgraph_pipeline.cli" in graph
    assert "webgraph_contract.dataset_reader" in graph["alx_trainer.data.records"]
    assert (
        "tfds_builder.web_graph.web_graph_dataset_builder" in graph["tfds_builder.web_graph"]
    )  # relative import


def test_no_import_cycle():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_packages_import_downward_only():
    """The contract imports no other package (the base install needs no Beam or TensorFlow); the
    trainer imports the contract, never the pipeline or the TFDS builder."""
    allowed = {
        "webgraph_contract": {"webgraph_contract"},
        "alx_trainer": {"alx_trainer", "webgraph_contract"},
    }
    wrong = [
        f"{name} -> {target}"
        for name, targets in _graph().items()
        for target in targets
        if name.split(".")[0] in allowed and target.split(".")[0] not in allowed[name.split(".")[0]]
    ]
    assert not wrong, "imports across the install boundary:\n" + "\n".join(sorted(wrong))


def test_trainer_imports_inside_functions_say_why():
    """In the trainer, a function-level import has a comment on its line or the line above (why not
    at the top)."""
    missing = []
    for name, path in _modules().items():
        if not name.startswith("alx_trainer"):
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        tree = ast.parse("\n".join(lines))
        functions = [
            n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        ]
        late = {
            n for f in functions for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))
        }
        for node in sorted(late, key=lambda n: n.lineno):
            here, above = lines[node.lineno - 1], lines[node.lineno - 2] if node.lineno > 1 else ""
            if "#" not in here and not above.strip().startswith("#"):
                missing.append(f"{path.relative_to(REPO)}:{node.lineno}: {here.strip()}")
    assert not missing, "imports inside functions without a reason:\n" + "\n".join(missing)
