"""The fuzz targets' checked-in corpora replayed in the ordinary suite (no atheris, no
instrumented build): every seed and every regression input of tests/fuzz/corpus/<target>/ (a
crash the fuzzer found is added there as regression-<what>) runs through its harness's
one_input, oracles and all. .ci/fuzz fuzzes from the same files."""

from __future__ import annotations

import importlib
import pathlib

import pytest

from posenc.service.shortcut import templates as replay

pytestmark = pytest.mark.skipif(not replay.NATIVE, reason="service._hot is not built")

CORPUS = pathlib.Path(__file__).parent / "corpus"
TARGETS = ("lane", "answer", "fill", "select", "h2", "grpc")


def test_every_target_has_a_corpus():
    assert sorted(p.name for p in CORPUS.iterdir()) == sorted(TARGETS)
    for t in TARGETS:
        assert len(list((CORPUS / t).iterdir())) >= 10, t


@pytest.mark.parametrize("target", TARGETS)
def test_the_corpus_replays_clean(target):
    if target == "h2":
        from posenc.service import grpclane

        if grpclane._h2 is None:
            pytest.skip("service/grpclane/_h2 is not built (no libnghttp2 headers)")
    one_input = importlib.import_module(f"tests.fuzz.fuzz_{target}").one_input
    files = sorted((CORPUS / target).iterdir())
    for f in files:
        one_input(f.read_bytes())
