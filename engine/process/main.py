"""``python -m posenc.engine.process.main``: the engine as ``posenc serve`` starts it, a child
process with the flags of ``posenc engine`` (cli.py) plus three of its own: ``--ready-fd N``
reports readiness on that descriptor, ``--exit-with-parent`` ends it with its parent,
``--keeper-fd N`` is its end of the keeper's channel (engine/process/keeper.py)."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from ..core.errors import EngineRunning, SpecError
from .cli import add_engine_args, engine_options
from .core import log, run


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="posenc-engine")
    add_engine_args(p)
    p.add_argument("--ready-fd", type=int)
    p.add_argument("--exit-with-parent", action="store_true")
    p.add_argument("--keeper-fd", type=int)
    args = p.parse_args(argv)
    s, opts = engine_options(args)
    opts = dataclasses.replace(opts, keeper_fd=args.keeper_fd)
    try:
        return run(s.tables, opts, ready_fd=args.ready_fd, parent_watch=args.exit_with_parent)
    except SpecError as e:
        log(f"invalid table config: {e}")
        return 2
    except EngineRunning as e:
        log(str(e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
