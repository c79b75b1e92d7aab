"""Refusals: one helper per status, every code declared in its area's codes module, and the
listing in docs/error-codes.md current."""

from __future__ import annotations

import ast

from gymctl import error_codes
from gymctl.error_codes import REPO, area_module, declared, sites, sources

LISTING = REPO / "docs" / "error-codes.md"


def _all_sites() -> list[error_codes.Site]:
    return [site for path in sources() for site in sites(path)]


def test_refusals_are_built_by_their_status_helper_not_inline():
    inline = [
        f"{site.path}:{site.line}"
        for site in _all_sites()
        if site.helper == "DomainError" and site.path != "gymctl/errors.py"
    ]
    assert inline == []


def test_every_raised_code_is_a_constant_of_its_area_codes_module():
    problems = []
    for site in _all_sites():
        if site.path == "gymctl/errors.py":
            continue
        code, module = site.code, area_module(site.path)
        where = f"{site.path}:{site.line}"
        if isinstance(code, ast.Constant):
            problems.append(f"{where}: inline code {code.value!r}, declare it in {module}")
        elif isinstance(code, ast.Attribute) and (
            ast.unparse(code.value) != "codes" or code.attr not in declared(module)
        ):
            problems.append(f"{where}: {ast.unparse(code)} is not a constant of {module}")
    assert problems == []


def test_a_codes_module_is_imported_as_its_own_area_one():
    wrong = []
    for path in sources():
        tree = ast.parse((REPO / path).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and any(a.name == "codes" for a in node.names):
                module = f"{(node.module or '').replace('.', '/')}/codes.py"
                if module != area_module(path):
                    wrong.append(f"{path}: codes of {module}")
    assert wrong == []


def test_codes_are_unique_within_an_area():
    for path in {area_module(path) for path in sources()}:
        codes = list(declared(path).values())
        assert len(codes) == len(set(codes)), path


def test_the_listing_is_current():
    assert LISTING.read_text() == error_codes.render(), "run: python -m gymctl.error_codes"
