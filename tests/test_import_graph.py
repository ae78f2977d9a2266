"""The project's import graph: no cycle, every import inside a function says why it is there, and
the benchmarks use the trainer's public names only.

Every `import` statement counts, at module level or inside a function: an import that runs late
still closes a cycle, it only hides it until a caller takes that path. The benchmarks measure the
trainer through its public names: they import no trainer name starting with `_` (a module or an
object), read no such attribute of what they imported from it, and patch none of it (`setattr`, an
assignment to or deletion of an attribute).
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
    assert "webgraph_contract.dataset_reader" in graph["alx_trainer.data.dataset"]
    # relative import
    assert "tfds_builder.web_graph.web_graph_dataset_builder" in graph["tfds_builder.web_graph"]


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


TRAINER = "alx_trainer"


def _private(dotted: str) -> bool:
    """Whether a dotted name has a part starting with `_` (dunders such as `__version__` are
    public)."""
    return any(p.startswith("_") and not p.endswith("__") for p in dotted.split("."))


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


def _trainer_misuse(source: str) -> list[str]:
    """'LINE: what' for each use of the trainer's private names or patching of the trainer in
    `source`: a private module or name imported from `alx_trainer`, a private attribute of a name
    bound to one of its imports, `setattr` on such a name, an assignment to or a deletion of its
    attribute."""
    tree = ast.parse(source)
    bound: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == TRAINER:
            for alias in node.names:
                bound.add(alias.asname or alias.name)
                if _private(f"{node.module}.{alias.name}"):
                    found.append(f"{node.lineno}: imports {node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == TRAINER:
                    bound.add(alias.asname or TRAINER)
                    if _private(alias.name):
                        found.append(f"{node.lineno}: imports {alias.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = _root(node)
            if isinstance(root, ast.Name) and root.id in bound:
                found.append(f"{node.lineno}: reads {ast.unparse(node)}")
        targets = []
        # a private name handed over as a string beside a trainer object (getattr, a patcher)
        if isinstance(node, ast.Call):
            args = [*node.args, *(k.value for k in node.keywords)]
            roots = [_root(a) for a in args]
            if any(isinstance(r, ast.Name) and r.id in bound for r in roots):
                for a in args:
                    if (
                        isinstance(a, ast.Constant)
                        and isinstance(a.value, str)
                        and _private(a.value)
                    ):
                        found.append(f"{node.lineno}: reaches {a.value!r} of a trainer object")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            targets = [node.args[0]] if node.func.id in ("setattr", "delattr") else []
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            many = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            targets = [t for t in many if isinstance(t, ast.Attribute)]
        for target in targets:
            root = _root(target)
            if isinstance(root, ast.Name) and root.id in bound:
                found.append(f"{node.lineno}: patches {ast.unparse(target)}")
    return sorted(set(found), key=lambda line: int(line.split(":")[0]))


def test_the_misuse_finder_finds_private_names_and_patches():
    bad = (
        "from alx_trainer.train import _train\n"
        "from alx_trainer.ops import side_runner\n"
        "import alx_trainer.data._hidden as h\n"
        "import alx_trainer\n"
        "def f():\n"
        "    from alx_trainer import train as t\n"
        "    t._runners(1)\n"
        "    alx_trainer.train._epoch\n"
        "    setattr(side_runner.SideRunner, 'run', f)\n"
        "    side_runner.SideRunner.run = f\n"
        "    del t.train\n"
    )
    assert [line.split(":")[0] for line in _trainer_misuse(bad)] == [
        "1",
        "3",
        "7",
        "8",
        "9",
        "10",
        "11",
    ]
    good = (
        "import jax\n"
        "from alx_trainer.train import train\n"
        "from alx_trainer.data.dataset import in_memory\n"
        "import alx_trainer\n"
        "alx_trainer.__version__\n"
        "setattr(jax, 'device_put', print)\n"
        "class C:\n"
        "    def __init__(self):\n"
        "        self._x = train\n"
    )
    assert _trainer_misuse(good) == []


def test_the_benchmarks_use_the_trainers_public_names_only():
    found = [
        f"{path.relative_to(REPO)}:{line}"
        for path in sorted((REPO / "benchmarks").rglob("*.py"))
        for line in _trainer_misuse(path.read_text(encoding="utf-8"))
    ]
    assert not found, "the benchmarks reach into the trainer:\n" + "\n".join(found)
