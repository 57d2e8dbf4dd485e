"""The ``posenc`` command: compute | engine | serve | loadtest. It sits above every layer: the
engine and the service never import it. Choices come from the registries; a subcommand whose
extra is not installed still shows, and says which extra to install."""

from __future__ import annotations

import argparse
import json
import os
import sys

from posenc.engine.core import jsonread
from posenc.engine.core.dtypes import BFLOAT16
from posenc.engine.core.errors import PosencError, SpecError
from posenc.engine.tables import FAMILIES


def _read_spec(text: str, field: str = "spec", allowed=jsonread.in_hf_config):
    """JSON text or @FILE; NaN/Infinity only where ``allowed`` (a model config: engine/core/jsonread.py)."""
    if text.startswith("@"):
        path = text[1:]
        try:
            with open(path, "rb") as f:
                text = f.read().decode()
        except OSError as e:
            raise SpecError((field,), f"cannot read {path}: {e.strerror}") from None
    try:
        return jsonread.loads(text, allowed)
    except SpecError as e:  # a NaN outside the model config: at its path
        raise SpecError((field, *e.loc), e.msg, e.kind) from None
    except ValueError as e:
        raise SpecError((field,), f"not valid JSON: {e}") from None


def _body(args) -> dict:
    """--spec, with --hf-config FILE (and --layer-type) beside it."""
    body = _read_spec(args.spec)
    if args.hf_config is not None or args.layer_type is not None:
        if not isinstance(body, dict):
            raise SpecError(("spec",), "must be a JSON object")
        body = dict(body)
        if args.hf_config is not None:
            body["hf_config"] = _read_spec("@" + args.hf_config, "hf_config", jsonread.anywhere)
        if args.layer_type is not None:
            body["layer_type"] = args.layer_type
    return body


def _named(args, body) -> dict | None:
    """The tables a {"table": NAME} body may name: with no engine to ask, the table config the
    engine would load (--tables, else POSENC_TABLES, else the embedded default)."""
    if not isinstance(body, dict) or body.get("table") is None:
        return None
    from posenc.engine.process.cli import engine_options
    from posenc.engine.process.configured import load_config, named_specs

    settings, _ = engine_options(args)
    return named_specs(load_config(settings.tables))


# output file suffix -> the encoder's format name
OUT_FORMATS = {".npz": "npz", ".safetensors": "safetensors"}


def cmd_compute(args) -> int:
    """The pipeline (parse -> check -> arrays -> encode) with no shared memory, into a file."""
    from posenc.engine.answer import pipeline
    from posenc.engine.core.encode import as_arrays, encode

    out = args.out
    fmt = next((f for suffix, f in OUT_FORMATS.items() if out.endswith(suffix)), None)
    if fmt is None:
        raise SpecError(("out",), f"must end in {' or '.join(OUT_FORMATS)}")
    body = _body(args)
    req = pipeline.parse(args.family, body, named=_named(args, body))
    pipeline.check(req, args.max_bytes)
    result = pipeline.arrays(req)
    data, _ = encode(req.family, result, req.dtype, fmt)
    arrays, bf16 = as_arrays(req.family, result, req.dtype)
    tmp = f"{out}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, out)
    shapes = ", ".join(
        f"{k} {list(v.shape)} {BFLOAT16 if k in bf16 else v.dtype}" for k, v in arrays.items() if k != "spec"
    )
    print(f"wrote {out}: {shapes}", file=sys.stderr)
    if req.shown is not None:  # what an hf_config or table was understood as
        print(f"spec: {json.dumps(req.shown, sort_keys=True)}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="posenc", description="Exact positional encodings, served from shared memory."
    )
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("compute", help="compute one spec (with its selections) into a file")
    c.add_argument("family", choices=list(FAMILIES))
    c.add_argument("--spec", required=True, help="the request JSON, or @FILE")
    c.add_argument(
        "--hf-config",
        metavar="FILE",
        help="a model's config.json, instead of the spec fields (docs/models.md lists the "
        "model types of each family)",
    )
    c.add_argument(
        "--layer-type",
        help="with --hf-config: which part of the config (e.g. full_attention of "
        "a per-layer-type rope_parameters, encoder or decoder of a T5)",
    )
    c.add_argument(
        "--tables",
        help='table config whose names {"table": NAME} may use (default: POSENC_TABLES or the embedded set)',
    )
    c.add_argument("--out", required=True, help="output file: .npz or .safetensors")
    c.add_argument(
        "--max-bytes",
        type=int,
        default=64 * 2**20,
        help="refuse results larger than this many bytes (default 64 MiB)",
    )
    c.set_defaults(func=cmd_compute)

    from posenc.engine.process import cli as engine_cli
    from posenc.service.supervise import serve

    engine_cli.add_parser(sub)
    serve.add_parser(sub)
    from posenc.loadtest import missing_module  # (the package itself needs nothing of the extra)

    missing = missing_module()
    if missing:  # the loadtest extra is missing: say so instead of "invalid choice" or a traceback
        _missing_extra(sub, "loadtest", "run the load test and write a report", missing)
    else:
        from posenc.loadtest import runner

        runner.add_parser(sub, "loadtest")
    return p


def _missing_extra(sub, name: str, what: str, module: str) -> None:
    from posenc.loadtest import missing_extra

    def refuse(args) -> int:
        print(missing_extra(f"posenc {name}", module), file=sys.stderr)
        return 1

    # every argument, options and --help included, lands in "rest": whatever is asked, the answer
    # is what to install (no option of this parser starts with the NUL prefix)
    q = sub.add_parser(
        name, help=f"{what} (needs: pip install 'posenc[loadtest]')", add_help=False, prefix_chars="\0"
    )
    q.add_argument("rest", nargs="*")
    q.set_defaults(func=refuse)


_PREFIX = {422: "invalid spec: "}
_HINT = {413: " (raise it with --max-bytes)"}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except PosencError as e:  # the HTTP status's message; a refused input (4xx) exits 2
        print(f"posenc: {_PREFIX.get(e.status, '')}{e}{_HINT.get(e.status, '')}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
