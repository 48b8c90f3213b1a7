"""Command line: ``rlstore train | probe | demo | demo-record | inspect``.

Each sub-command lives in the module that owns the feature; this file only dispatches, and
imports the feature module lazily so ``rlstore --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

# sub-command name -> module exposing ``add_arguments(parser)`` and ``run(args) -> int``
COMMANDS: dict[str, tuple[str, str]] = {
    "train": (
        "rlstore.agents.train_cli",
        "Train an agent (--algo, default PPO: FC agent on CartPole-v1).",
    ),
    "probe": (
        "rlstore.agents.probe_cli",
        "Train PPO agents on the probe environments; pass/fail table.",
    ),
    "demo": (
        "rlstore.demo",
        "Fill a replay buffer from a random policy, sample, save and reload it.",
    ),
    "demo-record": (
        "rlstore.demo_record",
        "Record one demonstration (.npz: Observation, Action, Reward, FrameSkip).",
    ),
    "inspect": ("rlstore.inspect", "Print the metadata of a saved buffer or checkpoint folder."),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlstore", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = argv[0] if argv and argv[0] in COMMANDS else None
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            importlib.import_module(module_name).add_arguments(p)
    args = parser.parse_args(argv)
    module = importlib.import_module(COMMANDS[args.command][0])
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:  # Ctrl-C: a line, not a traceback; the shell's status 128 + SIGINT
        print(f"rlstore {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `rlstore inspect DIR | head`: the reader left; no traceback
        # Python's recipe: stdout to devnull, so that the flush at exit cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
