"""Every refusal code, by area: the constants of the areas' codes modules, with the statuses
their raising sites give them (read from the source: each status has its helper in
gymctl/errors.py). `python -m gymctl.error_codes > docs/error-codes.md` writes the listing;
tests/test_error_codes.py checks it is current and that every raised code is declared.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from gymctl.errors import HELPERS

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("gymctl", "webhooks", "daemons")


def area_module(source: str) -> str:
    """The codes module (a repository path) of a source file's area: its package under gymctl,
    webhooks for the HTTP door, gymctl/codes.py for the top-level modules and the daemons."""
    parts = source.split("/")
    if parts[0] == "webhooks":
        return "webhooks/codes.py"
    if parts[0] == "gymctl" and len(parts) > 2:
        return f"gymctl/{parts[1]}/codes.py"
    return "gymctl/codes.py"


@dataclass(frozen=True)
class Site:
    """A code given to a refusal in the source: `code` is its ast node (a codes constant, or a
    name that carries one), `helper` the status helper, DomainError, or a function that passes
    its `code` parameter on to a helper (then `status` is that helper's)."""

    path: str
    line: int
    helper: str
    status: int | None
    code: ast.expr | None


def sources() -> Iterator[str]:
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            yield path.relative_to(REPO).as_posix()


@cache
def _tree(path: str) -> ast.Module:
    return ast.parse((REPO / path).read_text())


def _name(call: ast.AST) -> str:
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
        return call.func.id
    return ""


def _forwarded(function: ast.FunctionDef) -> int | None:
    """The status a function gives the `code` parameter it passes on to a helper, if it does."""
    arguments = function.args
    if "code" not in [a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs]:
        return None
    for node in ast.walk(function):
        first = node.args[0] if isinstance(node, ast.Call) and node.args else None
        if _name(node) in HELPERS and isinstance(first, ast.Name) and first.id == "code":
            return HELPERS[_name(node)]
    return None


@cache
def wrappers() -> dict[tuple[str, str], tuple[int | None, int]]:
    """(defining file, or "" for a public name; function) -> (position of `code`, status)."""
    found: dict[tuple[str, str], tuple[int | None, int]] = {}
    for path in sources():
        for function in ast.walk(_tree(path)):
            if not isinstance(function, ast.FunctionDef):
                continue
            params = [arg.arg for arg in function.args.posonlyargs + function.args.args]
            status = _forwarded(function)
            if status is not None:
                scope = path if function.name.startswith("_") else ""
                position = params.index("code") if "code" in params else None
                found[scope, function.name] = (position, status)
    return found


def sites(path: str) -> Iterator[Site]:
    known = wrappers()
    for node in ast.walk(_tree(path)):
        name = _name(node)
        if name in HELPERS or name == "DomainError":
            first = node.args[0] if node.args else None
            yield Site(path, node.lineno, name, HELPERS.get(name), first)
        wrapper = known.get((path, name)) or known.get(("", name))
        if wrapper is not None:
            position, status = wrapper
            given = [k.value for k in node.keywords if k.arg == "code"]
            if position is not None and len(node.args) > position:
                given.append(node.args[position])
            yield from (Site(path, node.lineno, name, status, code) for code in given)
        if isinstance(node, ast.FunctionDef):
            yield from _carried(path, node)


def _carried(path: str, function: ast.FunctionDef) -> Iterator[Site]:
    """Codes a name carries into a helper inside `function`: a `code` parameter's default, the
    constants assigned to the name the helper is given, or those an `if` tests it against."""
    arguments = function.args
    defaults = dict(zip(reversed(arguments.args), reversed(arguments.defaults), strict=False))
    defaults |= dict(zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True))
    status = _forwarded(function)
    for arg, default in defaults.items():
        if status is not None and arg.arg == "code" and default is not None:
            yield Site(path, default.lineno, function.name, status, default)
    for node in ast.walk(function):
        first = node.args[0] if isinstance(node, ast.Call) and node.args else None
        if _name(node) not in HELPERS or not isinstance(first, ast.Name):
            continue
        for source in ast.walk(function):
            if isinstance(source, ast.Assign) and _names(source.targets, first.id):
                value: ast.AST = source.value
            elif (
                isinstance(source, ast.If)
                and isinstance(source.test, ast.Compare)
                and _names([source.test.left], first.id)
                and any(node in ast.walk(statement) for statement in source.body)
            ):
                value = ast.Tuple(source.test.comparators)
            else:
                continue
            for code in _results(value):
                yield Site(path, code.lineno, _name(node), HELPERS[_name(node)], code)


def _results(value: ast.AST) -> Iterator[ast.expr]:
    """The values an expression can take: the branches of a conditional, a tuple's items."""
    if isinstance(value, ast.IfExp):
        yield from _results(value.body)
        yield from _results(value.orelse)
    elif isinstance(value, ast.Tuple | ast.List | ast.Set):
        for item in value.elts:
            yield from _results(item)
    elif isinstance(value, ast.expr):
        yield value


def _names(targets: list[ast.expr], name: str) -> bool:
    return any(isinstance(target, ast.Name) and target.id == name for target in targets)


@cache
def declared(module: str) -> dict[str, str]:
    """Constant name -> code, as the module assigns them."""
    file = REPO / module
    if not file.exists():
        return {}
    tree = ast.parse(file.read_text())
    return {
        node.targets[0].id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant)
    }


def statuses() -> dict[str, dict[str, set[int]]]:
    """Codes module -> constant -> the statuses its raising sites give it."""
    found: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for path in sources():
        for site in sites(path):
            code = site.code
            if site.status is not None and isinstance(code, ast.Attribute):
                found[area_module(path)][code.attr].add(site.status)
    return found


def render() -> str:
    seen = statuses()
    modules = sorted({area_module(path) for path in sources()} | set(seen))
    lines = [
        "# Refusal codes",
        "",
        'Every `code` a refusal carries (`{"code", "message"}` over HTTP, the code and exit '
        "status 1 on the command line), by the area that declares it, with the HTTP statuses "
        "its raising sites give it (-: a code the HTTP door's envelope gives werkzeug's own "
        "errors). Generated by `python -m gymctl.error_codes`; a test keeps it current.",
    ]
    for module in modules:
        codes = declared(module)
        if not codes:
            continue
        lines += ["", f"## {module}", "", "| code | status |", "|---|---|"]
        for const, code in sorted(codes.items(), key=lambda item: item[1]):
            status = ", ".join(str(s) for s in sorted(seen[module][const])) or "-"
            lines.append(f"| `{code}` | {status} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
