"""deploy/kserve: the KServe ServingRuntime and InferenceServices, checked offline.

kubernetes-validate ships the schemas of Kubernetes' own kinds, not KServe's CRDs, so the custom
objects are checked in two parts: every core Kubernetes part they embed (the runtime's containers
and volumes) is validated strictly as the Pod it becomes; the KServe fields are checked against
the names of KServe's v1alpha1/v1beta1 API (a misspelt field fails) and wired to posenc's real
settings (ports, probe paths, POSENC_* names, /dev/shm sizing), so that neither can drift.
"""

from __future__ import annotations

import pytest
import yaml
from kubernetes_validate import utils as kv

from tests.integration.deploy_files import (
    DEPLOY,
    ENGINE_WORKING_SET,
    K8S_VERSIONS,
    PINNED_ALLOWANCE,
    ROOT,
    container_env,
    quantity,
    settings_of,
)

KSERVE = DEPLOY / "kserve"
# The fields this project uses, with their siblings, from KServe's API (serving.kserve.io)
RUNTIME_SPEC = {
    "annotations",
    "supportedModelFormats",
    "protocolVersions",
    "containers",
    "volumes",
    "multiModel",
    "disabled",
    "builtInAdapter",
    "nodeSelector",
    "affinity",
    "tolerations",
    "labels",
    "imagePullSecrets",
    "hostIPC",
    "workerSpec",
}
MODEL_FORMAT = {"name", "version", "autoSelect", "priority"}
PROTOCOLS = {"v1", "v2", "grpc-v1", "grpc-v2"}
PREDICTOR_MODEL = {
    "modelFormat",
    "runtime",
    "protocolVersion",
    "storageUri",
    "ports",
    "env",
    "resources",
    "args",
    "command",
    "volumeMounts",
    "image",
    "name",
}


def _docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((KSERVE / name).read_text()) if d]


@pytest.fixture(scope="module")
def runtime() -> dict:
    (rt,) = _docs("servingruntime.yaml")
    assert (rt["apiVersion"], rt["kind"]) == ("serving.kserve.io/v1alpha1", "ServingRuntime")
    return rt


@pytest.fixture(scope="module")
def services() -> list[dict]:
    isvcs = _docs("inferenceservice.yaml")
    assert {(d["apiVersion"], d["kind"]) for d in isvcs} == {
        ("serving.kserve.io/v1beta1", "InferenceService")
    }
    return isvcs


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_runtime_pod_parts_validate_strictly(runtime, version):
    spec = runtime["spec"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "posenc"},
        "spec": {"containers": spec["containers"], "volumes": spec["volumes"]},
    }
    kv.validate(pod, version, strict=True)


def test_kserve_fields_are_kserve_names(runtime, services):
    spec = runtime["spec"]
    assert set(spec) <= RUNTIME_SPEC
    for f in spec["supportedModelFormats"]:
        assert set(f) <= MODEL_FORMAT
    assert set(spec["protocolVersions"]) <= PROTOCOLS
    for isvc in services:
        assert set(isvc["spec"]) == {"predictor"} and set(isvc["spec"]["predictor"]) == {"model"}
        assert set(isvc["spec"]["predictor"]["model"]) <= PREDICTOR_MODEL


def test_runtime_container_matches_settings(runtime):
    spec = runtime["spec"]
    (c,) = spec["containers"]
    assert c["name"] == "kserve-container" and c["args"] == ["serve"]
    s = settings_of(container_env(c))
    assert s.host == "0.0.0.0"
    assert [p["containerPort"] for p in c["ports"]] == [s.port] == [8080]  # KServe's REST port
    assert s.grpc_port == 8081  # and its gRPC port
    assert c["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": s.port}
    assert c["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": s.port}
    assert spec["annotations"]["prometheus.kserve.io/port"] == str(s.port)
    version = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())["services"]["posenc"]["image"]
    assert c["image"] == version
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    dshm = volumes[mounts[s.shm_dir]]["emptyDir"]
    assert dshm["medium"] == "Memory"
    assert quantity(dshm["sizeLimit"]) >= PINNED_ALLOWANCE + s.memory_budget_bytes
    # One container writes the tables (tmpfs pages count against it) and runs every server process.
    assert quantity(c["resources"]["limits"]["memory"]) >= quantity(dshm["sizeLimit"]) + ENGINE_WORKING_SET
    assert s.workers <= quantity(c["resources"]["limits"]["cpu"])


def test_services_select_the_runtime_per_protocol(runtime, services):
    formats = {f["name"] for f in runtime["spec"]["supportedModelFormats"]}
    s = settings_of(container_env(runtime["spec"]["containers"][0]))
    protocols = {}
    for isvc in services:
        model = isvc["spec"]["predictor"]["model"]
        assert model["modelFormat"]["name"] in formats and model["runtime"] == runtime["metadata"]["name"]
        assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]
        assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "RawDeployment"
        protocols[model["protocolVersion"]] = model
    assert set(protocols) == {"v2", "grpc-v2"}
    (h2c,) = protocols["grpc-v2"]["ports"]
    assert h2c["name"] == "h2c" and h2c["containerPort"] == s.grpc_port  # KServe's name for a gRPC port
