"""service/v2/rest.py's reading of an inference header: each output entry is checked at its own
index, with any number of inputs, none included (a request the fuzzer found: no inputs and one
output was a 500, the outputs' check reading the inputs' loop variable)."""

from __future__ import annotations

import pytest

from posenc.service.v2.errors import BadRequest
from posenc.service.v2.rest import inference

ONE = {"name": "positions", "datatype": "INT64", "shape": [1], "data": [0]}


@pytest.mark.parametrize("n_inputs", [0, 1, 3])
def test_outputs_are_read_with_any_number_of_inputs(n_inputs):
    head = {"inputs": [ONE] * n_inputs, "outputs": [{"name": "cos"}, {"name": "sin", "parameters": {}}]}
    inf = inference("rope", "", head, memoryview(b""))
    assert [o.name for o in inf.outputs] == ["cos", "sin"] and len(inf.inputs) == n_inputs


@pytest.mark.parametrize("n_inputs", [0, 3])
def test_a_bad_output_is_named_at_its_own_index(n_inputs):
    head = {"inputs": [ONE] * n_inputs, "outputs": [{"name": "cos"}, {"name": "sin", "bogus": 1}]}
    with pytest.raises(BadRequest) as e:
        inference("rope", "", head, memoryview(b""))
    assert e.value.path == "outputs[1].bogus"
    head = {"inputs": [ONE] * n_inputs, "outputs": [{"name": "cos"}, "sin"]}
    with pytest.raises(BadRequest) as e:
        inference("rope", "", head, memoryview(b""))
    assert e.value.path == "outputs[1]"
