"""The tiny table config and payload sizes the load-test tests serve and send (tests/integration/
test_loadtest*.py): one table per family, 4,096 rows, so a server starts in a second and the
realistic mix reaches past every table."""

import importlib.util

import pytest


def require_installed(*modules: str) -> None:
    """Fail (not skip) the module when a load-test dependency is missing: the test extra installs
    them, so a missing one is a broken install. find_spec, not import: importing locust
    monkey-patches the whole test process with gevent."""
    for mod in modules:
        if importlib.util.find_spec(mod) is None:
            pytest.fail(f"{mod} not installed: pip install -e '.[test]' (or .[loadtest])", pytrace=False)


TABLES = {
    "length": 4096,
    "tables": [
        {"family": "rope", "spec": {"head_dim": 128, "rope_theta": 10000.0}},
        {"family": "alibi", "spec": {"num_heads": 32}},
        {"family": "sinusoidal", "spec": {"d_model": 768}},
        {"family": "t5-buckets", "spec": {"bidirectional": True}},
    ],
}
# Everything inside the tiny tables, batches small, new specs cheap to build.
PAYLOADS = {
    "max_position": 4096,
    "decode_context": [1, 512],
    "pipeline_min": 100,
    "pipeline_max": 400,
    "new_spec_head_dims": [8],
}
