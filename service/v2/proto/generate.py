"""Regenerate the Python message classes of the vendored protos (grpc_service.proto,
model_config.proto; see README.md beside this file):

    pip install grpcio-tools==1.81.1        # bundles protoc 33.5 (protobuf 6.33 gencode)
    python -m posenc.service.v2.proto.generate          # writes *_pb2.py beside the protos
    python -m posenc.service.v2.proto.generate --check  # exit 1 if the committed files differ

It runs grpcio-tools' protoc (``--python_out`` only: the server registers its methods itself,
so no ``*_pb2_grpc.py``), then rewrites two things in its output so that the classes can live
inside the ``posenc`` package and beside ``tritonclient`` in one process:
- protoc imports the dependency as a top-level module (``import model_config_pb2``): made
  relative (``from . import model_config_pb2``);
- protoc registers the files in protobuf's default descriptor pool, where ``tritonclient``
  registers its own copy of the same ``inference.*`` messages (a second registration fails):
  the files go into this package's private pool, ``posenc.service.v2.proto.POOL``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOS = ("model_config.proto", "grpc_service.proto")


def _rewrite(text: str) -> str:
    text = re.sub(r"^import (\w+_pb2) as (\w+)$", r"from . import \1 as \2", text, flags=re.M)
    text = text.replace(
        "from google.protobuf import descriptor_pool as _descriptor_pool\n", "from . import POOL as _POOL\n"
    )
    return text.replace("_descriptor_pool.Default()", "_POOL")


def generate(out_dir: str) -> list[str]:
    from grpc_tools import protoc

    argv = ["protoc", f"-I{HERE}", f"--python_out={out_dir}", *(os.path.join(HERE, p) for p in PROTOS)]
    if protoc.main(argv) != 0:
        raise SystemExit("protoc failed")
    names = []
    for p in PROTOS:
        name = p.replace(".proto", "_pb2.py")
        path = os.path.join(out_dir, name)
        with open(path) as f:
            text = _rewrite(f.read())
        with open(path, "w") as f:
            f.write(text)
        names.append(name)
    return names


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    args = p.parse_args(argv)
    if not args.check:
        generate(HERE)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        stale = []
        for name in generate(tmp):
            with open(os.path.join(tmp, name)) as a, open(os.path.join(HERE, name)) as b:
                if a.read() != b.read():
                    stale.append(name)
    if stale:
        print(
            f"stale generated files: {', '.join(stale)} (run python -m posenc.service.v2.proto.generate)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
