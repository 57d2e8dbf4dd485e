"""A new kind of template costs one C file and one registration line (service/shortcut/hot.h's
top comment), shown by doing it: a copy of the shortcut's sources gets hot_probe.c (a kind whose
rows are twice their positions) and ``X(probe)`` in HOT_KINDS, and nothing else; the copy builds
with -Wall -Wextra -Werror, and in a fresh interpreter the new module has ProbeTemplate, a
template of kind "probe" on the shared base, which fill() answers through the kind's operations
and the block route refuses as it refuses every kind without blocks."""

from __future__ import annotations

import difflib
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SHORTCUT = ROOT / "service" / "shortcut"

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler (gcc)")

PROBE_C = r"""
/* hot_probe.c -- a kind of template that exists only in tests/service/shortcut/test_hot_new_kind.py:
 * one array of int64 rows, each twice its position. */
#include "hot.h"

typedef struct {
    HOT_TEMPLATE_HEAD
} ProbeTemplate;

static PyTypeObject ProbeTemplateType; /* below */

static void ProbeTemplate_dealloc(ProbeTemplate *t)
{
    Py_XDECREF(t->header_for);
    Py_XDECREF(t->tail);
    Py_XDECREF(t->heads);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static int ProbeTemplate_init(ProbeTemplate *t, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, ":ProbeTemplate", kwlist)) return -1;
    return (t->heads = PyDict_New()) ? 0 : -1;
}

static int probe_arrays(const HotTemplate *t)
{
    (void)t;
    return 1;
}

static int probe_raw_rows(HotTemplate *t, const char *pos, Py_ssize_t len, Py_ssize_t isz, Sel *rows,
                          Py_ssize_t *block)
{
    (void)t;
    int rc = hot_raw_positions(pos, len, isz, rows);
    if (rc > 0) *block = rows->n * (Py_ssize_t)sizeof(int64_t);
    return rc;
}

static int probe_rows_into(char **slots, HotTemplate *t, const Sel *rows, int keep)
{
    (void)t;
    (void)keep;
    for (Py_ssize_t i = 0; i < rows->n; i++) {
        int64_t v = 2 * hot_sel_at(rows, i);
        memcpy(slots[0] + i * (Py_ssize_t)sizeof v, &v, sizeof v);
    }
    return 0;
}

const struct hot_ops hot_probe_ops = {
    .kind = "probe",
    .name = "ProbeTemplate",
    .type = &ProbeTemplateType,
    .dims = 1,
    .arrays = probe_arrays,
    .raw_rows = probe_raw_rows,
    .rows_into = probe_rows_into,
};

static PyTypeObject ProbeTemplateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "posenc.service._hot.ProbeTemplate",
    .tp_basicsize = sizeof(ProbeTemplate),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = hot_template_new,
    .tp_init = (initproc)ProbeTemplate_init,
    .tp_base = &hot_TemplateType,
    .tp_dealloc = (destructor)ProbeTemplate_dealloc,
};
"""

BUILD = """
import glob
from setuptools import Extension, setup
setup(
    name="hot-probe",
    script_args=["-q", "build_ext", "--inplace"],
    ext_modules=[Extension(
        "_hot",
        sorted(glob.glob("service/shortcut/*.c")),
        include_dirs=["engine/kernels", "service/shortcut/vendor"],
        extra_compile_args=["-O0", "-std=c11", "-fno-strict-aliasing", "-fvisibility=hidden",
                            "-Wall", "-Wextra", "-Werror"],
    )],
)
"""

USE = """
import glob, importlib.util, sys
import numpy as np
from posenc.service.core.settings import current
from posenc.service.shortcut.templates import native_rules
spec = importlib.util.spec_from_file_location("_hot", glob.glob("_hot*.so")[0])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
m.configure(**native_rules(current()))
t = m.ProbeTemplate()
assert t.kind == "probe" and isinstance(t, m.Template), (t.kind, type(t).__mro__)
got = m.fill(t, np.array([3, 5, 1000], np.int64).tobytes(), 8, parts=(b"<", b">"))
assert got == b"<" + np.array([6, 10, 2000], np.int64).tobytes() + b">", got
try:
    m.fill_block(t, b"", 8, b"", 8, (b"", b""))
except TypeError:
    pass
else:
    raise AssertionError("fill_block took a kind without blocks")
print("ok", sorted(k for k in dir(m) if k.endswith("Template")))
"""


def _copy(dst: Path) -> None:
    shutil.copytree(
        SHORTCUT, dst / "service" / "shortcut", ignore=shutil.ignore_patterns("*.so", "*.py", "__pycache__")
    )
    (dst / "engine" / "kernels").mkdir(parents=True)
    for h in (ROOT / "engine" / "kernels").glob("*.h"):
        shutil.copy(h, dst / "engine" / "kernels" / h.name)


@pytest.mark.slow
def test_a_new_kind_is_one_c_file_and_one_registration_line(tmp_path):
    _copy(tmp_path)
    hot_h = tmp_path / "service" / "shortcut" / "hot.h"
    before = hot_h.read_text()
    line = next(x for x in before.splitlines() if x.startswith("#define HOT_KINDS(X)"))
    hot_h.write_text(before.replace(line, line + " X(probe)", 1))
    (tmp_path / "service" / "shortcut" / "hot_probe.c").write_text(textwrap.dedent(PROBE_C))
    # what changed against the shortcut's own sources: the one file added, the one line
    changed = [
        d
        for d in difflib.unified_diff(before.splitlines(), hot_h.read_text().splitlines(), lineterm="", n=0)
        if d[:1] in "+-" and not d.startswith(("+++", "---"))
    ]
    assert changed == [f"-{line}", f"+{line} X(probe)"], changed
    ours = {p.name for p in SHORTCUT.glob("*.[ch]")}
    theirs = {p.name for p in (tmp_path / "service" / "shortcut").glob("*.[ch]")}
    assert theirs - ours == {"hot_probe.c"} and ours <= theirs
    for name in ours - {"hot.h"}:
        assert (SHORTCUT / name).read_bytes() == (tmp_path / "service" / "shortcut" / name).read_bytes(), name
    build = subprocess.run(
        [sys.executable, "-c", BUILD], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert build.returncode == 0, build.stderr[-4000:]
    use = subprocess.run(
        [sys.executable, "-c", USE], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert use.returncode == 0 and use.stdout.startswith("ok"), (use.stdout, use.stderr[-3000:])
    assert "ProbeTemplate" in use.stdout
