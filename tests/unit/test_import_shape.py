"""The shape of the code, as docs/architecture.md draws it.

- The layers and the no-cycle rule within each package are import-linter
  contracts in pyproject.toml ([tool.importlinter]); ``lint-imports`` checks them.
- No module-level import cycle anywhere: a strongly connected component of the
  import graph (grimp, the library import-linter is built on) with more than
  one module fails, whatever packages it spans.  Imports inside functions count:
  a lazy import that only hides a cycle is still a cycle.  Imports under
  ``if TYPE_CHECKING:`` do not (they never run).
"""
import os
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("domain", "store", "semantic", "monikers", "tools", "profiles", "evals", "runtime", "api", "cli")


def test_the_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_no_module_imports_itself_through_others():
    sys.path.insert(0, str(ROOT))
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False, exclude_type_checking_imports=True,
                              cache_dir=None)
    cycles = strongly_connected(graph)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


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
