"""``posenc engine``: the flags it shares with ``python -m posenc.engine.process.main`` (which
``posenc serve`` runs), the settings they override, and ``--dry-run``."""

from __future__ import annotations

from ..core import settings
from ..core.errors import EngineRunning
from .configured import load_config
from .core import EngineOptions, log, run


def dry_run(tables_path: str | None) -> int:
    tables = load_config(tables_path)
    total = 0
    print(f"{'name':<20} {'family':<11} {'dtype':<9} {'length':>8} {'bytes':>12}")
    for ct in tables:
        t = ct.table
        nb = t.nbytes()
        total += nb
        print(f"{ct.name:<20} {t.family:<11} {str(t.dtype):<9} {t.length:>8} {nb:>12}")
    print(
        f"total {total} bytes ({total / 2**20:.1f} MiB) in {len(tables)} tables; "
        "add the on-demand budget (--memory-budget) to size /dev/shm"
    )
    return 0


def add_parser(sub) -> None:
    e = sub.add_parser("engine", help="run the engine alone: precompute tables into shared memory")
    add_engine_args(e)
    e.add_argument(
        "--dry-run", action="store_true", help="print the bytes each configured table uses and exit"
    )
    e.set_defaults(func=_cmd_engine)


def add_engine_args(p) -> None:
    p.add_argument("--tables", help="table config JSON (default: POSENC_TABLES or the embedded set)")
    p.add_argument("--shm-dir", help="directory for segments (default /dev/shm)")
    p.add_argument("--namespace", help="segment name prefix (default posenc)")
    p.add_argument("--memory-budget", type=int, help="bytes for on-demand tables (default 2 GiB)")
    p.add_argument("--group", help="let this Unix group read the segments (mode 0440)")
    p.add_argument(
        "--verify-interval",
        type=float,
        help="seconds between two checksum sweeps of every segment (default 60; 0: never)",
    )


def engine_options(args):
    """(settings, EngineOptions): this process's settings with the flags applied."""
    s = settings.current().override(
        tables=getattr(args, "tables", None),
        shm_dir=getattr(args, "shm_dir", None),
        namespace=getattr(args, "namespace", None),
        memory_budget_bytes=getattr(args, "memory_budget", None),
        shm_group=getattr(args, "group", None),
        verify_interval_s=getattr(args, "verify_interval", None),
    )
    return s, EngineOptions(
        shm_dir=s.shm_dir,
        namespace=s.namespace,
        memory_budget_bytes=s.memory_budget_bytes,
        group=s.shm_group,
        verify_interval_s=s.verify_interval_s,
    )


def _cmd_engine(args) -> int:
    s, opts = engine_options(args)
    if args.dry_run:
        return dry_run(s.tables)
    try:
        return run(s.tables, opts, parent_watch=False)
    except EngineRunning as e:
        log(str(e))
        return 1
