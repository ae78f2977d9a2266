"""What every command line shares: one-line errors, logging, the compilation cache, argparse types
(comma-separated K lists and sweep grids, bounded integers, fractions), and the flags made from a
dataclass.

Every command's flags are made here (`parse_dataclass_args`): one flag per field, `train`'s from
`TrainConfig` with a JSON or YAML `--config` file under the flags, the others' from their options
dataclasses (`cli.commands`), whose fields say in `option(...)` what argparse needs beyond the
field's type and default (help, aliases, a parsing function, choices, ...); unknown keys and bad
values get one-line errors.
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import json
import logging
import math
import os
import sys
import traceback
import types
import typing
from typing import Any, Callable, Sequence, TypeVar

from alx_trainer.cli import interrupt
from alx_trainer.config import ConfigError
from webgraph_contract.command_line import DEBUG_ENV, OneLineParser, debugging, one_line

# Errors the commands raise on purpose, with a message that says what, where and what to do.
EXPECTED_ERRORS = (ValueError, OSError, KeyError, ArithmeticError)


def setup_logging(level: str) -> None:
    """Send the `alx_trainer` loggers' records at `level` and above to stderr (replacing an earlier
    setup)."""
    logger = logging.getLogger("alx_trainer")
    for handler in [h for h in logger.handlers if getattr(h, "alx_cli", False)]:
        logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.alx_cli = True
    handler.setFormatter(_Formatter())
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False
    # orbax logs routine notices through absl as warnings (a read-only checkpoint manager's
    # settings): kept for --log_level debug, so an error stays one line otherwise
    logging.getLogger("absl").setLevel(logging.DEBUG if level == "debug" else logging.ERROR)


class _Formatter(logging.Formatter):
    """Progress (INFO) as the message alone; warnings, errors and debug records with their level and
    logger."""

    def __init__(self):
        super().__init__("%(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return record.getMessage() if record.levelno == logging.INFO else super().format(record)


def use_compile_cache(setting: str) -> None:
    """Turn JAX's persistent compilation cache on (`compile_cache.enable`) before anything
    compiles."""
    from alx_trainer import compile_cache  # imports JAX: not for --help

    path = compile_cache.enable(setting)
    logging.getLogger("alx_trainer").debug("compilation cache: %s", path or "off")


def run(prog: str, body: Callable[[], int]) -> int:
    """`body()`, or one line `alx_trainer PROG: error: ...` on stderr and its exit status: 2 for a
    bad flag or config value (`ConfigError`), 1 for bad data or a failure (the previous results
    stay). In the command's own process (`python -m alx_trainer`) the process then ends
    (`end_process`)."""
    status = _run(prog, body)
    if _whole_process():
        end_process(status)
    return status


def _whole_process() -> bool:
    """Whether this process is the command (`python -m alx_trainer`), not a caller of `run`."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == "alx_trainer.__main__"


def end_process(status: int) -> None:
    """End the process with `status` once its exit handlers have run (logging's flush and close,
    JAX's and orbax's shutdown, ...) and stdout and stderr are flushed, without the interpreter's
    teardown of every module and object: 0.3 s of a warm `eval` of ML-100k (1.55 s against
    1.85, 2-core host at load 4.5), the backends' and libraries' destructors. Every file a command
    writes is closed by then (a `with` block each)."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _run(prog: str, body: Callable[[], int]) -> int:
    """`run` without the process's end."""
    try:
        return body()
    except KeyboardInterrupt:
        return interrupt.report(f"alx_trainer {prog}")
    # every error becomes one line; --debug / WEBGRAPH_DEBUG=1 adds the traceback
    except Exception as e:
        # an error that Ctrl-C caused (`interrupt`)
        if interrupt.caused_error():
            return interrupt.report(f"alx_trainer {prog}")
        if debugging():
            traceback.print_exc()
        if isinstance(e, ConfigError):
            print(f"alx_trainer {prog}: error: {one_line(e)}", file=sys.stderr)
            return 2
        if isinstance(e, EXPECTED_ERRORS):
            print(f"alx_trainer {prog}: error: {one_line(e)}", file=sys.stderr)
        else:
            hint = "" if debugging() else f" (--debug or {DEBUG_ENV}=1 shows the traceback)"
            print(
                f"alx_trainer {prog}: error: {type(e).__name__}: {one_line(e)}{hint}",
                file=sys.stderr,
            )
        return 1


def ks(text: str) -> list[int]:
    """`--eval_k 20,50` as [20, 50]; an argparse error for anything else."""
    try:
        values = [int(k) for k in text.split(",") if k.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def grid(text: str) -> tuple[float, ...]:
    """A sweep's grid `--lambdas 5e-2,1e-2` as (0.05, 0.01): finite non-negative numbers; an
    argparse error for anything else."""
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}"
        ) from None
    if not values or not all(0 <= v < math.inf for v in values):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated non-negative numbers, got {text!r}"
        )
    return values


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= `low` (argparse then exits 2 with a one-line usage error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value

    return parse


def fraction(text: str) -> float:
    """An argparse type: a number in (0, 1] (what `lax.approx_max_k` takes as a recall target)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    # also refuses nan
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text}")
    return value


# Flags from a dataclass

T = TypeVar("T")


def option(
    default: Any = dataclasses.MISSING,
    help: str = "",  # noqa: A002 - mirrors argparse's name
    *,
    aliases: Sequence[str] = (),
    parse: Callable[[str], Any] | None = None,
    choices: Sequence[str] | None = None,
    metavar: str | None = None,
    nargs: str | None = None,
    positional: bool = False,
) -> Any:
    """A field of a command's options dataclass and what its flag needs.

    Args:
        default: the value when the flag is not given; a list is copied for each instance; none
            (MISSING) makes the flag required.
        help: the flag's `--help` text.
        aliases: other spellings of the flag (`--k` for `--eval_k`), accepted and shown in `--help`.
        parse: turns the flag's text into the value (default: the field's type); raises
            `argparse.ArgumentTypeError` for a bad value (exit 2, one line).
        choices: the values the flag takes.
        metavar: the value's name in `--help`.
        nargs: as argparse's (`"+"`: one or more values into a list).
        positional: an argument without a flag (the field's name shows in `--help`).
    """
    metadata = {
        "help": help,
        "aliases": tuple(aliases),
        "parse": parse,
        "choices": choices,
        "metavar": metavar,
        "nargs": nargs,
        "positional": positional,
    }
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def load_config_file(path: str) -> dict[str, Any]:
    """A JSON or YAML mapping of field values; a one-line error when missing or malformed."""
    if not os.path.exists(path):
        raise ConfigError(f"{path}: config file not found")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        if path.endswith((".yaml", ".yml")):
            # only a YAML file needs it: not imported for --help or a JSON file
            import yaml

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


def _field_type(cls: type, field: dataclasses.Field) -> Any:
    return typing.get_type_hints(cls)[field.name]


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


def _is_bool(kind: Any) -> bool:
    """`bool`, or `bool | None` (a switch whose default None means "decide by the situation")."""
    return kind is bool or (
        typing.get_origin(kind) in (typing.Union, types.UnionType) and bool in typing.get_args(kind)
    )


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults shown in `--help`, except where there is none to show: a required flag, or an
    empty default (whose meaning the help says)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.required or action.default in (None, "", [], ()):
            return action.help
        return super()._get_help_string(action)


def _groups(cls: type) -> list[tuple[str, str | None, list[dataclasses.Field]]]:
    """(title, description, fields) of each group of flags in `--help`: the `sections` of a class
    that names them (TrainConfig), else the class's own fields, then each base class's (titled by
    its docstring's first line)."""
    sections = getattr(cls, "sections", None)
    if sections:
        return [
            (title, section.__doc__, dataclasses.fields(section))
            for title, section in sections.items()
        ]
    fields, out, seen = dataclasses.fields(cls), [], set()
    for owner in cls.__mro__:
        own = [
            f
            for f in fields
            if f.name in vars(owner).get("__annotations__", {}) and f.name not in seen
        ]
        seen.update(f.name for f in own)
        if own:
            doc = (owner.__doc__ or owner.__name__).strip().splitlines()[0].rstrip(".")
            title = "" if owner is cls else doc
            out.append((title, None, own))
    return out


def _add_flag(group: Any, cls: type, field: dataclasses.Field, negatable: bool) -> None:
    """One argparse argument for `field` of `cls`, as its type and `option(...)` metadata say; a
    switch gets its `--no-` form where its default is not False or `negatable` (a config file
    may have set it)."""
    meta, kind = field.metadata, _field_type(cls, field)
    kwargs: dict[str, Any] = {"help": meta.get("help", "")}
    if field.default is not dataclasses.MISSING:
        kwargs["default"] = field.default
    elif field.default_factory is not dataclasses.MISSING:
        kwargs["default"] = field.default_factory()
    elif not meta.get("positional"):
        kwargs["required"] = True
    if _is_bool(kind):
        switch = negatable or kwargs.get("default") is not False
        kwargs["action"] = argparse.BooleanOptionalAction if switch else "store_true"
    else:
        kwargs["type"] = meta.get("parse") or (str if meta.get("nargs") else kind)
        for key in ("choices", "metavar", "nargs"):
            if meta.get(key) is not None:
                kwargs[key] = meta[key]
    if meta.get("positional"):
        group.add_argument(field.name, **kwargs)
    else:
        group.add_argument(f"--{field.name}", *meta.get("aliases", ()), dest=field.name, **kwargs)


def build_parser(
    cls: type,
    prog: str | None = None,
    description: str | None = None,
    *,
    config_file: bool = True,
    epilog: str | None = None,
) -> OneLineParser:
    """An argparse parser with one flag per dataclass field (defaults shown in --help), and with
    `config_file` a `--config FILE` flag (read by `parse_dataclass_args`)."""
    parser = OneLineParser(
        prog=prog,
        description=description or (cls.__doc__ or "").strip(),
        epilog=epilog,
        formatter_class=_HelpFormatter,
    )
    if config_file:
        parser.add_argument(
            "--config",
            default=None,
            help="JSON or YAML file of field values (flat, or nested by section); flags override "
            "it.",
        )
    for title, description_, fields in _groups(cls):
        group = parser.add_argument_group(title, description_) if title else parser
        for field in fields:
            _add_flag(group, cls, field, negatable=config_file)
    return parser


def parse_options(
    cls: type[T], argv: Sequence[str], prog: str, description: str | None = None
) -> tuple[OneLineParser, T]:
    """A command's options (`cls`, a dataclass of `option` fields) from its flags, and the parser
    (whose `error` reports a bad combination of flags as argparse reports a bad flag)."""
    parser = build_parser(cls, prog=prog, description=description, config_file=False)
    return parser, cls(**vars(parser.parse_args(list(argv))))


def flat_values(cls: type, values: dict[str, Any], where: str) -> dict[str, Any]:
    """Config-file values by field name: a section name mapping to a mapping
    (`solver: {cg_iters: 3}`) contributes its fields (field values are never mappings, so a section
    named like a field is told apart by its value)."""
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
