"""The shape of the code, as docs/architecture.md draws it.

- The layers and the no-cycle rule within each package are import-linter
  contracts in pyproject.toml ([tool.importlinter]); ``lint-imports`` checks them.
- No module-level import cycle anywhere: a strongly connected component of the
  import graph (grimp, the library import-linter is built on) with more than
  one module fails, whatever packages it spans.  Imports inside functions count:
  a lazy import that only hides a cycle is still a cycle, and so do imports
  under ``if TYPE_CHECKING:``: they never run, but a module that names another
  in its annotations depends on it as much as one that calls it (a cycle kept
  only for the type checker was, every time, a helper that reaches back into
  the class that calls it).
- app.py, agents.py and settings.py are top-level modules, which grimp does not
  graph: :func:`test_the_processes_import_only_their_side` reads their imports.
"""
import ast
import os
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("domain", "store", "semantic", "monikers", "tools", "profiles", "evals", "runtime", "api", "cli",
            "client")


def test_the_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_no_module_imports_itself_through_others():
    sys.path.insert(0, str(ROOT))
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False, exclude_type_checking_imports=False,
                              cache_dir=None)
    cycles = strongly_connected(graph)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


# What each top-level module may import of this repo's packages: app.py is the
# API process (no runtime/), agents.py the agent process (no api/), settings.py
# is read by both (neither process's own packages, nor cli/).
MAY_NOT_IMPORT = {"app.py": {"runtime", "cli"}, "agents.py": {"api", "cli"},
                  "settings.py": {"runtime", "api", "cli"}, "serve.py": {"runtime", "api", "cli"},
                  "local_model.py": {"runtime", "api", "cli"}}


def test_the_processes_import_only_their_side():
    wrong = []
    for name, forbidden in MAY_NOT_IMPORT.items():
        for node in ast.walk(ast.parse((ROOT / name).read_text())):
            modules = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                       [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            wrong += [f"{name} imports {m}" for m in modules if m.split(".")[0] in forbidden]
    assert not wrong, wrong


def strongly_connected(graph) -> list[list[str]]:
    """Tarjan's algorithm over the module graph, iteratively (no recursion
    limit); returns the components of more than one module."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found
