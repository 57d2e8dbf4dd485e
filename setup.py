"""Build of the optional C extensions (the SIMD kernels, the HTTP hot path's template
shortcut, the load test's open-loop sender and, where libnghttp2's header is, the gRPC lane's
HTTP/2 sessions); all other metadata is in pyproject.toml.

    python setup.py build_ext --inplace      # development build next to the sources
    POSENC_SANITIZE=1 ...                    # + AddressSanitizer / UBSan (see docs/native.md)
    POSENC_WERROR=1 ...                      # + -Wall -Wextra -Werror, and no extension optional

The extensions are optional: without a working C compiler the install still succeeds and
engine.kernels falls back to its numpy backend. That also hides a compile error, so CI (.ci/run)
builds with POSENC_WERROR=1, where an extension that fails to build, or warns, fails the install,
and tests/test_build.py checks in the simd pass that all three are built.
"""

import glob
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _on(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


class BuildExt(build_ext):
    """Adds flags that depend on the compiler family (MSVC takes none of GCC/Clang's)."""

    def build_extensions(self):
        if self.compiler.compiler_type == "msvc":
            cflags, lflags = ["/O2", "/fp:precise"], []
        else:
            # -ffp-contract=off: each multiply rounds once, never fused into an FMA, so the
            # results stay bit-identical to numpy's (see engine/kernels/_native.c).
            # -fvisibility=hidden: an extension exports its PyInit only; the names its files share
            # (hot_*, native_*) stay inside it, called directly rather than through the PLT.
            cflags, lflags = (
                ["-O3", "-std=c11", "-ffp-contract=off", "-fno-strict-aliasing", "-fvisibility=hidden"],
                [],
            )
            if _on("POSENC_WERROR"):
                cflags += ["-Wall", "-Wextra", "-Werror"]
            if _on("POSENC_SANITIZE"):
                san = [
                    "-fsanitize=address,undefined",
                    "-fno-sanitize-recover=undefined",
                    "-fno-omit-frame-pointer",
                    "-g",
                ]
                cflags, lflags = cflags + san, lflags + san
        for ext in self.extensions:
            ext.extra_compile_args = cflags + list(ext.extra_compile_args or [])
            ext.extra_link_args = lflags + list(ext.extra_link_args or [])
        super().build_extensions()


# A plain build may fail quietly (numpy backend); a sanitizer or -Werror build is asked for on
# purpose, so there a failure stops the build.
_OPTIONAL = not (_on("POSENC_SANITIZE") or _on("POSENC_WERROR"))

# Each extension's sources, one file per concern; its headers are dependencies (a change rebuilds
# it): its private one, engine/kernels/alibi_cell.h, the ALiBi cell both extensions compute,
# engine/kernels/row_gather.h, the row gather both build, and engine/kernels/native_api.h, the
# capsule through which the shortcut borrows the sincos kernel.
NATIVE = [
    "engine/kernels/" + f for f in ("_native.c", "native_levels.c", "native_kernels.c", "native_lookup.c")
]
# every C file of the shortcut, each of one concern (service/shortcut/_hot.c lists them, hot.h says
# how they layer): a new one, such as a new kind of template, needs no line here; .ci/fuzz builds the same
HOT = sorted(glob.glob("service/shortcut/*.c"))


def _have_nghttp2() -> bool:
    """Whether libnghttp2's header is where the compiler looks (Debian's libnghttp2-dev);
    POSENC_NGHTTP2=0 builds without the gRPC lane all the same (tests/test_build.py's check)."""
    if os.environ.get("POSENC_NGHTTP2", "") == "0":
        return False
    dirs = ["/usr/include", "/usr/local/include"]
    for var in ("CPATH", "C_INCLUDE_PATH"):
        dirs += [d for d in os.environ.get(var, "").split(os.pathsep) if d]
    return any(os.path.exists(os.path.join(d, "nghttp2", "nghttp2.h")) for d in dirs)


# the gRPC lane's HTTP/2 sessions (service/grpclane/_h2.c, h2_nv.c and h2_expire.c, on libnghttp2): built where
# its header is; without it a gRPC process runs grpcio alone and says so (service/grpclane/__init__.py
# status)
H2 = (
    [
        Extension(
            "posenc.service.grpclane._h2",
            ["service/grpclane/_h2.c", "service/grpclane/h2_nv.c", "service/grpclane/h2_expire.c"],
            depends=["service/grpclane/h2_nv.h", "service/grpclane/h2_session.h"],
            libraries=["nghttp2"],
            optional=_OPTIONAL,
        )
    ]
    if _have_nghttp2()
    else []
)

setup(
    ext_modules=[
        Extension(
            "posenc.engine.kernels._native",
            NATIVE,
            depends=[
                "engine/kernels/native.h",
                "engine/kernels/alibi_cell.h",
                "engine/kernels/native_api.h",
                "engine/kernels/round_f64.h",
                "engine/kernels/row_gather.h",
            ],
            optional=_OPTIONAL,
        ),
        # the HTTP hot path's spec-template shortcut (service/shortcut/_hot.c and its parts);
        # service/shortcut/templates.py learns its templates, and without it every request takes the full path
        Extension(
            "posenc.service.shortcut._hot",
            HOT,
            include_dirs=["engine/kernels", "service/shortcut/vendor"],
            depends=[
                "service/shortcut/hot.h",
                "service/shortcut/hot_rows.h",
                "engine/kernels/alibi_cell.h",
                "engine/kernels/native_api.h",
                "engine/kernels/row_gather.h",
                "service/shortcut/vendor/zmij/zmij.c",
                "service/shortcut/vendor/zmij/zmij-c.h",
            ],
            optional=_OPTIONAL,
        ),
        # the load test's open-loop sender (loadtest/_sender.c: epoll, Linux); without it the probe
        # runs its Python loop, which holds far lower rates (loadtest/drivers/sender.py says which ran)
        Extension("posenc.loadtest._sender", ["loadtest/_sender.c"], optional=_OPTIONAL),
        *H2,
    ],
    cmdclass={"build_ext": BuildExt},
)
