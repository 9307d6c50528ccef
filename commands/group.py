"""The command groups of `rmqdelay`: Typer's own groups (typer.core.TyperGroup, the class its
documentation subclasses), with two things added through the group's public methods:

- the root loads a command's module only when the command is asked for (``get_command``:
  to run it, show its help, or list it in the root's --help), so `rmqdelay --version` (answered
  in entry.py before this is imported) and a command load only what they use;
- resolving a command records its path (``inspect cq``) for the one-line errors of main.py,
  and rewrites the old spellings of its options (aliases.py) with a note on stderr, before the
  command parses them.

Light: typer only, imported before the arguments are parsed.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

import typer
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True, slots=True)
class LazyCommand:
    module: str  # in rmqdelay.commands
    attr: str  # a command function, or the Typer app of a command group
    help: str  # what the root's --help lists: the command's first paragraph (a test holds them equal)


class Invocation:
    """What this run of the CLI was asked: the command's path (``inspect cq``) once resolved,
    and the old option spellings it used ({new: old}), for the one-line messages of main()."""

    command = ""
    renamed: dict[str, str] = {}

    @classmethod
    def reset(cls) -> None:
        cls.command, cls.renamed = "", {}


def say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class Group(TyperGroup):
    """A command group that records the command given and rewrites its old option spellings."""

    def resolve_command(self, ctx: typer.Context, args: list[str]):
        name, command, rest = super().resolve_command(ctx, args)
        if command is None or ctx.resilient_parsing:
            return name, command, rest
        path = f"{ctx.command_path} {name}".partition(" ")[2]
        Invocation.command = path
        if not isinstance(command, TyperGroup):
            from . import aliases

            rest, used = aliases.rewrite(path, rest)
            for new, old in used.items():
                if new not in Invocation.renamed:
                    say(aliases.note(old, new))
            Invocation.renamed.update(used)
        return name, command, rest


def typer_app(help: str, **settings) -> typer.Typer:
    """A command group's Typer app, as every group of rmqdelay is made: Typer's plain help page
    (its help text flows to the terminal's width, each option's text at least ~45 columns at
    80, tests/test_cli_contract.py), -h as --help, no completion options of its own."""
    return typer.Typer(help=help, cls=Group, rich_markup_mode=None, add_completion=False,
                       pretty_exceptions_enable=False, no_args_is_help=True, **settings)


class LazyGroup(Group):
    """The root group: each command of ``commands`` is imported and built the first time it is
    asked for, as ``app.command`` / ``app.add_typer`` would have built it."""

    commands_table: dict[str, LazyCommand] = {}
    _resolving = False

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return list(self.commands_table)

    def resolve_command(self, ctx: typer.Context, args: list[str]):
        self._resolving = True  # the command given is loaded; the others only listed
        try:
            return super().resolve_command(ctx, args)
        finally:
            self._resolving = False

    def get_command(self, ctx: typer.Context, name: str):
        if name not in self.commands and name in self.commands_table:
            if not self._resolving:
                # Listed in the root's --help: its name and line are all that is read.
                return TyperCommand(name, help=self.commands_table[name].help)
            self.commands[name] = self._load(name)
        return self.commands.get(name)

    def _load(self, name: str):
        lazy = self.commands_table[name]
        target = getattr(importlib.import_module(f"{__package__}.{lazy.module}"), lazy.attr)
        if isinstance(target, typer.Typer):
            group = typer.main.get_group(target)
            group.name = name
            return group
        holder = typer.Typer(rich_markup_mode=None, add_completion=False, pretty_exceptions_enable=False)
        holder.command(name)(target)
        return typer.main.get_command(holder)
