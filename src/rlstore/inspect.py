"""``rlstore inspect DIR``: print the metadata of a saved buffer in a readable form.

Reads only the JSON sidecar(s) in ``DIR`` (``<prefix>metadata.json``); ``--verify`` also loads
the arrays and checks their checksum and schema. Several checkpoints in one folder (different
prefixes, e.g. ``buffer_`` and ``agent_buffer_``) are all shown unless ``--prefix`` picks one.

    rlstore inspect /tmp/rlstore-demo-x1y2
    rlstore inspect ckpt/ --prefix agent_buffer_ --verify
    rlstore inspect ckpt/ --json          # the raw sidecar, for scripts ({prefix: sidecar}
                                          # when the folder holds several checkpoints)

Exit status: 0 on success, 2 when a checkpoint is missing, unreadable or (with ``--verify``)
corrupted.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path
from typing import Any

from rlstore._trees import flat_items

__all__ = ["add_arguments", "run", "format_metadata", "find_prefixes"]

_SUFFIX = "metadata.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``rlstore inspect`` options on ``parser``."""
    parser.add_argument("dir", type=Path, help="checkpoint folder")
    parser.add_argument("--prefix", default=None, help="file prefix (default: every one found)")
    parser.add_argument(
        "--json", action="store_true",
        help="print the raw JSON sidecar (several checkpoints: one object, {prefix: sidecar})",
    )  # fmt: skip
    parser.add_argument("--verify", action="store_true", help="also load and checksum arrays")


def find_prefixes(directory: Path) -> list[str]:
    """Prefixes of the ``<prefix>metadata.json`` files in ``directory`` (sorted)."""
    return sorted(p.name[: -len(_SUFFIX)] for p in directory.glob(f"*{_SUFFIX}") if p.is_file())


def _short(value: Any, limit: int = 70) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_metadata(sidecar: dict[str, Any], *, title: str = "") -> str:
    """A readable multi-line rendering of a checkpoint sidecar (see :mod:`rlstore.checkpoint`)."""
    lines = [title] if title else []
    created = sidecar.get("created_unix")
    when = (
        _dt.datetime.fromtimestamp(created, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        if isinstance(created, (int, float))
        else "?"
    )
    head = [
        ("class", sidecar.get("class")),
        ("format_version", sidecar.get("format_version")),
        ("created", when),
        ("state file", f"{sidecar.get('state_file')} ({sidecar.get('state_nbytes', 0):,} bytes)"),
        ("sha256", str(sidecar.get("state_sha256", ""))[:16] + "..."),
    ]
    width = max(len(k) for k, _ in head)
    lines += [f"  {k:<{width}}  {v}" for k, v in head]
    for section in ("config", "metadata"):
        block = sidecar.get(section)
        if isinstance(block, dict) and block:
            lines.append(f"  {section}:")
            w = max(len(str(k)) for k in block)
            lines += [f"    {k:<{w}}  {_short(v)}" for k, v in block.items()]
    schema = sidecar.get("schema") or {}
    if schema:
        lines.append(f"  arrays ({len(schema)}):")
        w = max(len(k) for k in schema)
        for key, entry in schema.items():
            shape = "x".join(str(s) for s in entry.get("shape", [])) or "scalar"
            lines.append(f"    {key:<{w}}  {entry.get('dtype', '?'):<8} {shape}")
    state = list(flat_items(sidecar.get("state") or {}).items())
    if state:
        lines.append(f"  other state ({len(state)}):")
        w = max(len(k) for k, _ in state)
        lines += [f"    {k:<{w}}  {_short(v)}" for k, v in state]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the checkpoint(s) in ``args.dir``; returns the process exit status."""
    from rlstore.checkpoint import load_state, read_metadata
    from rlstore.errors import CheckpointError

    directory: Path = args.dir
    if not directory.is_dir():
        print(f"rlstore inspect: error: {directory}: not a folder", file=sys.stderr)
        return 2
    prefixes = [args.prefix] if args.prefix is not None else find_prefixes(directory)
    if not prefixes:
        below = sorted({str(p.parent) for p in directory.rglob(f"*{_SUFFIX}") if p.is_file()})
        if len(below) > 3:
            below = [below[0], "...", f"{below[-1]} ({len(below)} folders)"]
        hint = f"; the checkpoint folders below it: {', '.join(below)}" if below else ""
        print(f"rlstore inspect: error: {directory}: no *{_SUFFIX} found{hint}", file=sys.stderr)
        return 2
    status, sidecars = 0, {}
    for prefix in prefixes:
        try:
            sidecar = read_metadata(directory, prefix=prefix)
            if args.verify:
                load_state(directory, prefix=prefix)
        except CheckpointError as exc:
            print(f"rlstore inspect: error: {exc}", file=sys.stderr)
            status = 2
            continue
        sidecars[prefix] = sidecar
        if args.json:
            continue
        print(format_metadata(sidecar, title=f"{directory / prefix}*"))
        if args.verify:
            print("  verified  checksum, keys, shapes and dtypes match")
    if args.json and sidecars:  # one JSON document, whatever the number of checkpoints
        print(json.dumps(sidecars if len(prefixes) > 1 else sidecars[prefixes[0]], indent=2))
    return status
