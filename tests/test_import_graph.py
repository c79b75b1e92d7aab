"""No import circles between the product's modules (issue 25).

Static: every module of gymctl/, webhooks/ and daemons/ is parsed with ast and each import it can
run is an edge, those inside functions too (a deferred import only hides a circle until the
function runs). Not counted:
- imports under `if TYPE_CHECKING:`: they never run, so they cannot make a module see another
  half-initialized; a callee naming its caller's type in an annotation is the usual way out.
- the implicit import of a package's `__init__` when one of its modules is imported: a package
  that re-exports its modules (gymctl/models/__init__.py) would otherwise be a circle with each
  of them. An explicit `from gymctl.models import X` inside gymctl/models/ is still an edge to
  the package, and so still a circle.
- imports by name at run time (importlib; the CLI's lazy groups): not statements.
A strongly connected component of more than one module is a circle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gymctl", "webhooks", "daemons")


def modules(root: Path, packages: tuple[str, ...]) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package's __init__)."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: at any depth, but not in `if TYPE_CHECKING:`."""
    for child in ast.iter_child_nodes(node):
        runs = (
            child.orelse if isinstance(child, ast.If) and _is_type_checking(child.test) else [child]
        )
        for statement in runs:
            if isinstance(statement, ast.Import | ast.ImportFrom):
                yield statement
            else:
                yield from _imports(statement)


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    known = modules(root, packages)
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, (path, is_package) in known.items():
        package = name if is_package else name.rpartition(".")[0]
        for statement in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(statement, ast.Import):
                targets = [alias.name for alias in statement.names]
            else:
                base = statement.module or ""
                if statement.level:
                    anchor = package.split(".")[: len(package.split(".")) - statement.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                # `from package import module` loads the package only as the module's parent (left
                # out, as for every module); `from package import name` runs the package.
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                    for alias in statement.names
                ]
            graph[name].update(t for t in targets if t in known and t != name)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
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
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_circle_between_the_products_modules():
    graph = import_graph(ROOT)
    assert len(graph) > 200  # the scan saw the product, not an empty tree
    # Edges the sign-up and the card provider need, one way only (the circles issue 25 broke).
    assert "gymctl.identity.users" in graph["gymctl.access.identity_events"]
    assert "gymctl.access.invitations" not in graph["gymctl.identity.users"]
    assert "gymctl.providers.card_wire" in graph["gymctl.providers.card_simulator"]
    assert circles(graph) == []


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_scan_finds_a_circle_hidden_in_a_function_and_skips_type_only_imports(tmp_path):
    """The detector itself: a deferred import closes a circle, a relative import and a
    `from package import module` are followed (`from package import name` reaches the package),
    TYPE_CHECKING and a re-exporting __init__ are not circles."""
    _write(
        tmp_path,
        {
            "app/__init__.py": "from app.models import Row\n",
            "app/models.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from app.service import run\nRow = object\n",
            "app/service.py": "from app.models import Row\n"
            "def run():\n    from .late import later\n    return later()\n",
            "app/late.py": "from app import service\ndef later(): pass\n",
            "app/alone.py": "import app.models\n",
            "app/user.py": "from app import Row\n",
        },
    )
    graph = import_graph(tmp_path, ("app",))
    assert graph == {
        "app": {"app.models"},
        "app.models": set(),
        "app.service": {"app.models", "app.late"},
        "app.late": {"app.service"},  # the package runs only as the module's parent
        "app.alone": {"app.models"},
        "app.user": {"app"},  # a name the package defines runs the package
    }
    assert circles(graph) == [["app.late", "app.service"]]
