"""The committed message classes (service/v2/proto) are what their generator makes from the
vendored protos, and live beside tritonclient's copy of the same messages in one process."""

from __future__ import annotations

import subprocess
import sys


def test_generated_messages_are_current():
    r = subprocess.run(
        [sys.executable, "-m", "posenc.service.v2.proto.generate", "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr


def test_posenc_and_tritonclient_messages_coexist():
    from tritonclient.grpc import service_pb2 as theirs

    from posenc.service.v2.proto import grpc_service_pb2 as ours

    msg = ours.ModelInferRequest(model_name="rope", raw_input_contents=[b"\1\0\0\0"])
    msg.parameters["spec"].string_param = '{"head_dim": 8}'
    back = theirs.ModelInferRequest.FromString(msg.SerializeToString())
    assert back.model_name == "rope" and back.parameters["spec"].string_param == '{"head_dim": 8}'
