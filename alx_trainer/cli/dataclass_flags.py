"""Command-line flags from a dataclass: one flag per field, a JSON or YAML `--config` file under
the flags, one-line errors for unknown keys and bad values."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import typing
from typing import Any, Sequence, TypeVar

import yaml

from alx_trainer.config import ConfigError
from webgraph_contract.command_line import OneLineParser

T = TypeVar("T")


def load_config_file(path: str) -> dict[str, Any]:
    """A JSON or YAML mapping of field values; a one-line error when missing or malformed."""
    if not os.path.exists(path):
        raise ConfigError(f"{path}: config file not found")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        if path.endswith((".yaml", ".yml")):
            values = yaml.safe_load(text)
        else:
            values = json.loads(text)
    except Exception as e:  # JSON and YAML raise different types; both mean a malformed file
        raise ConfigError(
            f"{path}: cannot parse config file ({type(e).__name__}: {str(e).splitlines()[0]})"
        ) from e
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: config file must hold a mapping of field names to values")
    return values


def _field_type(cls: type, field: dataclasses.Field) -> type:
    hints = typing.get_type_hints(cls)
    return hints[field.name]


def _coerce(name: str, kind: type, value: Any) -> Any:
    """A config-file value as the field's type; ValueError naming the field otherwise."""
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{name}: expected a boolean, got {value!r}")
    if kind is str and isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool) or isinstance(value, (list, dict)) or value is None:
        raise ConfigError(f"{name}: expected {kind.__name__}, got {value!r}")
    try:
        converted = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: expected {kind.__name__}, got {value!r}") from None
    if kind is int and isinstance(value, float) and converted != value:
        raise ConfigError(f"{name}: expected int, got {value!r}")
    return converted


def build_parser(
    cls: type, prog: str | None = None, description: str | None = None
) -> argparse.ArgumentParser:
    """An argparse parser with one flag per dataclass field (defaults shown in --help)."""
    parser = OneLineParser(
        prog=prog,
        description=description or (cls.__doc__ or "").strip(),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--config",
        default=None,
        help="JSON or YAML file of field values (flat, or nested by section); flags override it.",
    )
    sections = getattr(cls, "sections", None) or {"": cls}
    for title, section in sections.items():
        group = parser.add_argument_group(title, section.__doc__) if title else parser
        for field in dataclasses.fields(section):
            kind = _field_type(section, field)
            help_text = field.metadata.get("help", "")
            default = field.default if field.default is not dataclasses.MISSING else None
            if kind is bool:
                group.add_argument(
                    f"--{field.name}",
                    action=argparse.BooleanOptionalAction,
                    default=default,
                    help=help_text,
                )
            else:
                group.add_argument(f"--{field.name}", type=kind, default=default, help=help_text)
    return parser


def flat_values(cls: type, values: dict[str, Any], where: str) -> dict[str, Any]:
    """Config-file values by field name: a section name mapping to a mapping (`solver: {cg_iters:
    3}`)
    contributes its fields (field values are never mappings, so a section named like a field is told
    apart by its value)."""
    sections = getattr(cls, "sections", None) or {}
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key in sections and isinstance(value, dict):
            names = {f.name for f in dataclasses.fields(sections[key])}
            for inner, inner_value in value.items():
                if inner not in names:
                    raise ConfigError(f"{where}: unknown config key {key}.{inner!r}")
                out[inner] = inner_value
        else:
            out[key] = value
    return out


def parse_dataclass_args(
    cls: type[T],
    argv: Sequence[str] | None,
    prog: str | None = None,
    also_known: Sequence[str] = (),
) -> T:
    """Build `cls` from defaults, then `--config FILE`, then explicit flags (which win).

    Raises ValueError / FileNotFoundError with one-line messages for unknown keys or bad values;
    an unknown flag or a bad flag value exits with status 2 and one line `PROG: error: ...`.
    """
    parser = build_parser(cls, prog=prog)
    parser.also_known = list(also_known)  # the flags of a command that parsed its own first (sweep)
    args = parser.parse_args(list(argv) if argv is not None else None)
    # Which flags were given explicitly: re-parse with every default suppressed.
    given = argparse.ArgumentParser(add_help=False)
    for action in parser._actions:  # noqa: SLF001 - argparse keeps no public list of actions
        if action.dest in ("help",):
            continue
        kwargs: dict[str, Any] = {"dest": action.dest, "default": argparse.SUPPRESS}
        if isinstance(action, argparse.BooleanOptionalAction):
            given.add_argument(
                *action.option_strings, action=argparse.BooleanOptionalAction, **kwargs
            )
        else:
            given.add_argument(*action.option_strings, type=action.type, **kwargs)
    explicit = vars(given.parse_known_args(list(argv) if argv is not None else None)[0])
    explicit.pop("config", None)

    fields = {f.name: f for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    if args.config:
        for key, value in flat_values(cls, load_config_file(args.config), args.config).items():
            if key not in fields:
                raise ConfigError(f"{args.config}: unknown config key {key!r}")
            values[key] = _coerce(key, _field_type(cls, fields[key]), value)
    values.update(explicit)
    return cls(**values)
