"""Command groups loaded when run, not when listed: `gymctl --help` names every group without
importing one, and `gymctl billing ...` imports the billing CLI module only."""

from __future__ import annotations

from importlib import import_module
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup


class LazyCommand(TyperCommand):
    """What the top-level help lists for a group: its name and one line of help."""

    def __init__(self, name: str, target: str, help: str) -> None:
        super().__init__(name, help=help, short_help=help)
        self.target = target

    def load(self) -> Any:
        """The real click command: `module:attribute` names a Typer app (a group) or a function
        (one command)."""
        module, attribute = self.target.split(":")
        found = getattr(import_module(module), attribute)
        if isinstance(found, typer.Typer):
            command = typer.main.get_group(found)
        else:
            single = typer.Typer()
            single.command(self.name)(found)
            command = typer.main.get_command(single)
        command.name = self.name
        command.help = command.help or self.help
        return command


class LazyGroup(TyperGroup):
    """The top-level group: `commands` maps each name to (`module:attribute`, help)."""

    commands_table: dict[str, tuple[str, str]] = {}

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for name, (target, help) in self.commands_table.items():
            self.commands.setdefault(name, LazyCommand(name, target, help))

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if isinstance(command, LazyCommand):
            command = command.load()
        return name, command, rest
