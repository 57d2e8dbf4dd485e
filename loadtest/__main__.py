"""``python -m posenc.loadtest``: report | probe | floor | render.

python -m posenc.loadtest report                      # start posenc serve, measure, write ./posenc-loadtest/<ts>/
python -m posenc.loadtest report --url http://host:8000 --server-cpus '' --client-cpus ''
python -m posenc.loadtest probe --url ... --rates 1000,5000
python -m posenc.loadtest floor --port 8100
python -m posenc.loadtest render posenc-loadtest/<ts>    # re-render summary.md/latency.png from results.json
"""

from __future__ import annotations

import argparse
import sys

from . import missing_extra, missing_module


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    missing = missing_module()  # before anything, --help included: the extra's, not a traceback
    if missing:
        print(missing_extra("python -m posenc.loadtest", missing), file=sys.stderr)
        return 1
    from . import runner
    from .drivers import probe
    from .floors import asgi_app as floor

    if argv and argv[0] in ("probe", "floor"):
        return {"probe": probe.main, "floor": floor.main}[argv[0]](argv[1:])
    p = argparse.ArgumentParser(
        prog="python -m posenc.loadtest", description="posenc load tests (docs/loadtest.md)"
    )
    sub = p.add_subparsers(dest="command", required=True)

    runner.add_parser(sub)
    sub.add_parser("probe", help="the open-loop latency probe alone (see --help)")
    sub.add_parser("floor", help="the raw ASGI floor server alone (see --help)")
    r = sub.add_parser("render", help="re-render a report directory from its results.json")
    r.add_argument("out")
    r.set_defaults(
        func=lambda a: (
            __import__("posenc.loadtest.reports.summary").loadtest.reports.summary.render(a.out),
            0,
        )[1]
    )
    args = p.parse_args(argv)
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())
