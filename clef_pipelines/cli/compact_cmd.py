"""`compact`'s work, shared by the typer command (`query_cmds.compact`) and its fast path.

`fast_main` runs a plain `clef-pipelines compact` from the console script before typer
builds its command group: it takes the command's own options in their plain forms
(`--query TEXT`, `--query=TEXT`, `-q TEXT`, flags alone), and leaves everything else to
typer (help, a usage error, an unknown option, a short option with its value attached, an
invalid --budget, shell completion), which then parses the arguments as before. Both paths
run `run_compact_command`, so a run prints the same output and exits with the same code.
Settings come from `config_compact.load_compact_sections`: the sections compaction reads.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from clef_pipelines.cli.base import load_env_file, print_error

Fail = Callable[..., NoReturn]

#: Options that take a value: the keyword argument of `run_compact_command` each fills.
_VALUES = {
    "--query": "query_text",
    "-q": "query_text",
    "--doc": "docs",
    "-d": "docs",
    "--input": "input_file",
    "-i": "input_file",
    "--budget": "budget",
    "--config": "config",
    "-c": "config",
}
_FLAGS = {
    "--gate": ("gate", True),
    "--no-gate": ("gate", False),
    "--verbose": ("verbose", True),
    "-v": ("verbose", True),
    "--json": ("as_json", True),
}


def parse_compact_args(args: list[str]) -> dict[str, Any] | None:
    """The keyword arguments of `run_compact_command` for `compact ARGS`, or None for
    anything typer should parse (see the module docstring)."""
    out: dict[str, Any] = {
        "docs": None,
        "input_file": None,
        "budget": None,
        "gate": False,
        "verbose": False,
        "as_json": False,
        "config": None,
    }
    docs: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _FLAGS:
            key, flag = _FLAGS[arg]
            out[key] = flag
            i += 1
            continue
        if arg in _VALUES and i + 1 < len(args):
            name, value = arg, args[i + 1]
            i += 2
        elif arg.startswith("--") and "=" in arg and arg.split("=", 1)[0] in _VALUES:
            name, value = arg.split("=", 1)
            i += 1
        else:
            return None
        if value == "--":
            return None
        key = _VALUES[name]
        if key == "docs":
            docs.append(value)
        elif key == "budget":
            try:
                budget = int(value)
            except ValueError:
                return None
            if budget < 1:
                return None
            out["budget"] = budget
        elif key in ("input_file", "config"):
            out[key] = Path(value)
        else:
            out[key] = value
    if "query_text" not in out:
        return None
    out["docs"] = docs or None
    return out


def fast_main(argv: list[str]) -> None:
    """Run `compact` and exit when `argv` is a plain `compact` command line; else return."""
    if argv[:1] != ["compact"] or any(
        k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ
    ):
        return
    kwargs = parse_compact_args(argv[1:])
    if kwargs is None:
        return
    try:
        run_compact_command(**kwargs, fail=_fail)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        # As click does: nothing more is written to the closed pipe, and the exit is 1.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives until the exit
        sys.exit(1)
    sys.exit(0)


def _fail(message: str, code: int = 2) -> NoReturn:
    print_error(message)
    sys.exit(code)


def read_passages(docs: list[str] | None, input_file: Path | None, fail: Fail) -> list[Any]:
    out: list[Any] = list(docs or [])
    if input_file is None:
        return out
    raw = sys.stdin.read() if str(input_file) == "-" else None
    if raw is None:
        try:
            raw = input_file.read_text(encoding="utf-8")
        except OSError as exc:
            fail(f"cannot read {input_file}: {exc}")
    name = "stdin" if str(input_file) == "-" else str(input_file)
    stripped = raw.lstrip()
    if stripped.startswith("["):
        try:
            items = json.loads(raw)
        except json.JSONDecodeError as exc:
            fail(f"{name}: not valid JSON: {exc}")
        out.extend(items)
        return out
    for n, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            fail(f"{name}:{n}: not valid JSON ({exc}); give a JSON list or JSONL of passages")
    return out


def command_errors() -> tuple[type[BaseException], ...]:
    """What `compact`, `query` and `ask` report as one error line (looked up only when
    something was raised: an `except` clause is evaluated then)."""
    from clef_pipelines.clef.errors import ClefError
    from clef_pipelines.embedding.base import EmbedderError
    from clef_pipelines.retrieval.answer import AnswerError
    from clef_pipelines.stores import StoreError

    return (StoreError, ValueError, ClefError, AnswerError, EmbedderError)


def run_compact_command(
    query_text: str,
    docs: list[str] | None,
    input_file: Path | None,
    budget: int | None,
    gate: bool,
    verbose: bool,
    as_json: bool,
    config: Path | None,
    fail: Fail,
) -> None:
    """`clef-pipelines compact`: read the passages, compact them, print the result."""
    passages = read_passages(docs, input_file, fail)
    if not passages:
        fail("no passages: give --doc TEXT (repeatable) or --input FILE")
    from clef_pipelines.config_compact import load_compact_sections
    from clef_pipelines.config_file import ConfigError
    from clef_pipelines.privacy import apply_file_privacy

    load_env_file()
    try:
        settings = load_compact_sections(config)
    except ConfigError as exc:
        fail(str(exc))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    apply_file_privacy(settings)
    from clef_pipelines.retrieval.fast_start import quick_clef_import

    try:
        with quick_clef_import():
            from clef_pipelines.retrieval.compaction import compact as run_compact

            result = run_compact(
                query_text,
                passages,
                token_budget=budget,
                gate=gate,
                config=settings.retrieval,
                clef=settings.clef,
                data_dir=str(settings.data_path),
                guard=settings.guard,
                base_dir=settings.base_dir,
                one_shot=True,
            )
    except command_errors() as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps(result.to_dict(), indent=2, default=str))
        return
    from clef_pipelines.cli.base import console, lit
    from clef_pipelines.cli.result_view import print_result, why

    print_result(result, verbose=verbose, header=False)
    if not verbose:
        t = result.tokens
        console.print(
            f"tokens {t.before} -> {t.after} (saved {t.saved_fraction:.0%}); "
            f"dropped {len(result.dropped)}: "
            + ", ".join(
                f"#{c.rank} {lit(why(c))}" for c in sorted(result.dropped, key=lambda c: c.rank)
            )
        )
