"""The deploy/ Kubernetes manifests, checked offline as the real `kubectl kustomize` renders each
overlay: every object validated against the official schemas shipped in kubernetes-validate
(strict: an unknown field fails), and wired to the service's real settings so that a port, a
probe path or a POSENC_* name cannot drift. Without kubectl these tests skip and say so.
"""

from __future__ import annotations

import pytest
import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from kubernetes_validate import utils as kv

from posenc.service.core.settings import (
    DEFAULT_GRPC_PORT,
    DEFAULT_PORT,
    HEALTH_PATH,
    METRICS_PATH,
    READY_PATH,
    Settings,
)
from tests.integration.deploy_files import (
    BASE,
    COMPOSE,
    ENGINE_WORKING_SET,
    K8S_VERSIONS,
    OVERLAYS,
    PINNED_ALLOWANCE,
    ROOT,
    all_k8s_objects,
    colocated_deployment,
    container_env,
    deployment,
    final_stage,
    instrs,
    k8s_objects,
    kustomization,
    load_yaml_docs,
    pod_containers,
    quantity,
    rendered,
    settings_of,
)


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_manifest_validates_strictly(version):
    objs = all_k8s_objects()
    assert {obj["kind"] for _, obj in objs} >= {
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
    }
    for label, obj in objs:
        try:
            kv.validate(obj, version, strict=True)
        except kv.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            pytest.fail(f"{label} is invalid for Kubernetes {version}: {path}: {e.message}")
        except kv.SchemaNotFoundError as e:
            pytest.fail(f"{label}: {e.message}")


def test_strict_validation_rejects_an_unknown_field():
    # Guards the test above: a misspelt field must fail, not be ignored.
    dep = deployment()
    dep["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kv.ValidationError):
        kv.validate(dep, K8S_VERSIONS[0], strict=True)


def test_the_base_lists_every_manifest_and_each_overlay_builds_on_it():
    base = kustomization(BASE)
    assert set(base) <= {"apiVersion", "kind", "resources", "images", "patches", "labels"}
    on_disk = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(base["resources"]) == on_disk, (
        "deploy/k8s/base/kustomization.yaml must list every manifest beside it"
    )
    images = {i["name"]: i for i in base.get("images", [])}
    assert set(images) == {c["image"].split(":")[0] for c in pod_containers(deployment()).values()}
    overlays = sorted(p.name for p in OVERLAYS.iterdir())
    assert overlays == ["colocated", "default"]
    objects = {(d["kind"], d["metadata"]["name"]) for f in on_disk for d in load_yaml_docs(BASE / f)}
    for name in overlays:
        assert "../../base" in kustomization(OVERLAYS / name)["resources"]
        assert set(rendered(name)) == objects, f"overlay {name} must render exactly the base's objects"
    # the colocated overlay adds one container, the example worker, and nothing else
    plain, colocated = pod_containers(deployment()), pod_containers(colocated_deployment())
    assert set(colocated) - set(plain) == {"worker"} and set(plain) <= set(colocated)


# --------------------------------------------------------------------------- Deployment wiring


def test_service_container_matches_settings():
    dep = deployment()
    c = pod_containers(dep)["service"]
    assert c["args"] == ["serve", "--attach-only"]
    s = settings_of(container_env(c))
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": s.port, "grpc": s.grpc_port} and (s.port, s.grpc_port) == (
        DEFAULT_PORT,
        DEFAULT_GRPC_PORT,
    )

    def probe(kind):
        get = c[kind]["httpGet"]
        return get["path"], ports.get(get["port"], get["port"])

    assert probe("startupProbe") == (READY_PATH, s.port)
    assert probe("livenessProbe") == (HEALTH_PATH, s.port)
    # grpc.health.v1 (service/supervise/grpc_main.py)
    assert c["readinessProbe"]["grpc"]["port"] == s.grpc_port
    ann = dep["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/path"] == METRICS_PATH
    assert int(ann["prometheus.io/port"]) == s.port
    # One worker per CPU of the limit, not per core of the node.
    assert s.workers == int(quantity(c["resources"]["limits"]["cpu"]))


def test_engine_is_a_native_sidecar_sharing_the_same_settings():
    spec = colocated_deployment()["spec"]["template"]["spec"]
    (engine,) = spec["initContainers"]
    assert engine["name"] == "engine" and engine["args"][0] == "engine"
    # Started before the service container, stopped after it.
    assert engine["restartPolicy"] == "Always"
    containers = pod_containers(colocated_deployment())
    settings = {name: settings_of(container_env(c)) for name, c in containers.items()}
    # Every container finds the same segments...
    assert len({(s.shm_dir, s.namespace) for s in settings.values()}) == 1, settings
    # ...and the engine and the HTTP workers agree on the on-demand budget.
    assert settings["engine"].memory_budget_bytes == settings["service"].memory_budget_bytes


def test_shared_memory_volume_is_sized_and_mounted_everywhere():
    dep = colocated_deployment()
    spec = dep["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    dshm = volumes["dshm"]["emptyDir"]
    assert dshm["medium"] == "Memory"
    size = quantity(dshm["sizeLimit"])
    containers = pod_containers(dep)
    for name, c in containers.items():
        s = settings_of(container_env(c))
        mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
        assert mounts[s.shm_dir]["name"] == "dshm", f"{name} does not see the pod's /dev/shm"
    budget = settings_of(container_env(containers["engine"])).memory_budget_bytes
    assert size >= PINNED_ALLOWANCE + budget
    # Memory-backed emptyDir pages are charged to the writer: the engine's limit must hold them.
    engine_mem = quantity(containers["engine"]["resources"]["limits"]["memory"])
    assert engine_mem >= size + ENGINE_WORKING_SET
    dshm_mounts = {
        name: next(m for m in c["volumeMounts"] if m["name"] == "dshm") for name, c in containers.items()
    }
    # Readers attach read-only; the engine writes tables and the HTTP workers their metrics files.
    assert dshm_mounts["worker"]["readOnly"] is True
    assert not dshm_mounts["engine"].get("readOnly") and not dshm_mounts["service"].get("readOnly")


def test_every_container_has_requests_and_limits():
    for name, c in pod_containers(colocated_deployment()).items():
        res = c["resources"]
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(res[kind]), f"{name}: {kind} incomplete"
        assert quantity(res["requests"]["memory"]) == quantity(res["limits"]["memory"]), (
            f"{name}: memory request != limit (tmpfs pages are not reclaimable)"
        )
        assert quantity(res["requests"]["cpu"]) <= quantity(res["limits"]["cpu"])


def test_pod_runs_as_the_image_user_and_drains_gracefully():
    spec = deployment()["spec"]["template"]["spec"]
    (user,) = instrs("USER", final_stage())
    uid = int(user.args.split(":")[0])
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == uid != 0
    service = pod_containers(deployment())["service"]
    pre_stop = service["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert spec["terminationGracePeriodSeconds"] >= int(pre_stop[1]) + Settings().shutdown_timeout_s


def test_service_hpa_and_pdb_select_the_deployment():
    objs = k8s_objects()
    dep = objs[("Deployment", "posenc")]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert "replicas" not in dep["spec"], "the HorizontalPodAutoscaler owns the replica count"

    svc = objs[("Service", "posenc")]["spec"]
    assert svc["selector"].items() <= labels.items()
    port_names = {p["name"] for p in pod_containers(dep)["service"]["ports"]}
    assert {p["targetPort"] for p in svc["ports"]} <= port_names

    hpa = objs[("HorizontalPodAutoscaler", "posenc")]["spec"]
    ref = hpa["scaleTargetRef"]
    assert (ref["apiVersion"], ref["kind"], ref["name"]) == ("apps/v1", "Deployment", "posenc")
    assert 2 <= hpa["minReplicas"] <= hpa["maxReplicas"]
    for m in hpa["metrics"]:
        if m["type"] == "ContainerResource":
            assert m["containerResource"]["container"] in pod_containers(dep)

    pdb = objs[("PodDisruptionBudget", "posenc")]["spec"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items()
    # A drain must leave at least one pod serving.
    if "maxUnavailable" in pdb:
        assert 0 < pdb["maxUnavailable"] < hpa["minReplicas"]
    else:
        assert pdb["minAvailable"] >= 1


def test_images_carry_the_package_version():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    images = [c["image"] for c in pod_containers(colocated_deployment()).values()]
    images.append(yaml.safe_load(COMPOSE.read_text())["services"]["posenc"]["image"])
    assert set(images) == {f"posenc:{version}"}
    assert {i.get("newTag") for i in kustomization(BASE)["images"]} == {version}
