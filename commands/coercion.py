"""A parameter's value, coerced as Typer coerces it, without pydantic where it adds nothing.

Typer (0.29) coerces every value a parameter takes (a STORE given, a --format, an option's
default) through a pydantic TypeAdapter it builds for the parameter, even for an option
left unset; importing pydantic for it (and importlib.metadata, for pydantic's plugins) was
the slowest part of `rmqdelay inspect delay STORE`. For the kinds rmqdelay's parameters
are, the adapter's result is plain: a text stays the text; a path is ``Path(value)`` then
Typer's own checks; a choice is Typer's own lookup; a number already of its type (a
default) is itself. ``runtime_param`` computes those directly and hands any other value,
any value that fails, and every other kind of parameter to Typer's adapter, built then: an
error reads exactly as Typer (and main.py's wording of it) makes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Callable, get_args, get_origin

from typer._click import Context
from typer._click.exceptions import BadParameter
from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
from typer._param_types import coerce_cli_choice, coerce_cli_path, lenient_issubclass, routes_to_path
from typer._typing import is_literal_type, is_number_type, literal_values


class _Declined(Exception):
    """The value is not one the direct coercion is sure of: Typer's adapter coerces it."""


Coerce = Callable[[Any, Any, Context], Any]  # (value, param, ctx) -> the coerced value


@dataclass(frozen=True)
class DirectRuntimeParam(RuntimeParam):
    descriptor: TypeDescriptor
    direct: Coerce | None

    def _coerce_value(self, value: Any, param: Any, ctx: Context) -> Any:
        if self.direct is not None:
            try:
                return self.direct(value, param, ctx)
            except (_Declined, ValueError, AssertionError, BadParameter):
                pass  # what pydantic would wrap, or an error to word as Typer words it
        return build_runtime_param(self.descriptor)._coerce_value(value, param=param, ctx=ctx)


def runtime_param(descriptor: TypeDescriptor) -> RuntimeParam:
    """What typer.core builds to coerce a parameter's values (``build_runtime_param``),
    building Typer's pydantic adapter only for a value the direct coercion declines."""
    return DirectRuntimeParam(parameter_info=descriptor.parameter_info, annotation=descriptor.annotation,
                              descriptor=descriptor, direct=_direct(descriptor))


def _direct(descriptor: TypeDescriptor) -> Coerce | None:
    if descriptor.file_annotation is not None:
        return None
    if get_origin(descriptor.annotation) is list:
        item = _leaf(get_args(descriptor.annotation)[0], descriptor)
        if item is None:
            return None

        def each(value: Any, param: Any, ctx: Context) -> list:
            # Typer's list adapter: a lone value as a list of one, each item coerced.
            return [item(one, param, ctx) for one in (value if isinstance(value, (list, tuple)) else [value])]

        return each
    return _leaf(descriptor.annotation, descriptor)


def _leaf(annotation: Any, descriptor: TypeDescriptor) -> Coerce | None:
    """Typer's build_leaf_adapter, in its order, for the kinds coerced directly."""
    info = descriptor.parameter_info
    if info.parser is not None or (get_origin(annotation) is not None and not is_literal_type(annotation)):
        return None
    if lenient_issubclass(annotation, Enum) or is_literal_type(annotation):
        choices = list(annotation) if lenient_issubclass(annotation, Enum) else literal_values(annotation)
        return lambda value, param, ctx: coerce_cli_choice(value, choices=choices,
                                                           case_sensitive=info.case_sensitive, ctx=ctx)
    if is_number_type(annotation):
        if info.clamp:
            return None

        def number(value: Any, param: Any, ctx: Context) -> Any:
            if type(value) is not annotation or (info.min is not None and value < info.min) or \
                    (info.max is not None and value > info.max):
                raise _Declined
            return value

        return number
    if annotation is str:
        def text(value: Any, param: Any, ctx: Context) -> str:
            if type(value) is not str:
                raise _Declined
            return value

        return text
    if annotation is Path and routes_to_path(annotation, info) and info.path_type in (None, Path):
        def path(value: Any, param: Any, ctx: Context) -> Any:
            # pydantic's Path of a text is Path(text); Typer's checks then see that Path.
            # An error (raised again by Typer's adapter) names the value as it was typed.
            if type(value) is not str and not isinstance(value, Path):
                raise _Declined
            return coerce_cli_path(Path(value), info, path_type=Path, param=param, ctx=ctx)

        return path
    return None
