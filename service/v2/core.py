"""What both transports answer (REST in service/v2/rest.py, gRPC in service/v2/grpc_server.py):
health, metadata, readiness, inference and the shared-memory registry of one server process."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from posenc import __version__
from posenc.service.shortcut.store import Store
from posenc.service.v2.hot import Hot
from posenc.service.v2.infer import Inference, Inferer, Plan, Tensor
from posenc.service.v2.models import Models
from posenc.service.v2.shm import Regions

NAME = "posenc"
EXTENSIONS = ["binary_tensor_data", "system_shared_memory", "parameters"]


class V2:
    def __init__(self, settings, client, ready: Callable[[], bool], store: Store | None = None):
        self.settings = settings
        self.client = client
        # the process's learnt templates (service/shortcut/store.py): the HTTP worker's /v1 service
        # shares its own, so that one cap, rule and freshness check hold for every route
        self.store = (
            Store(client.manifest if client is not None else lambda: None) if store is None else store
        )
        self.is_ready = ready
        self.models = Models(client)
        self.regions = Regions(
            settings.shm_dir,
            settings.namespace,
            max_regions=settings.max_shm_regions,
            open_regions=settings.open_shm_regions,
        )
        self.inferer = Inferer(settings, client, self.models, self.regions)
        self.hot = Hot(self)  # repeated row requests answered by one C call (service/v2/hot.py)

    def server_metadata(self) -> dict:
        return {"name": NAME, "version": __version__, "extensions": EXTENSIONS}

    def model_metadata(self, name, version: str = "") -> dict:
        return self.models.get(name, version).metadata

    def model_ready(self, name, version: str = "") -> bool:
        """Raises ModelNotFound for an unknown model; else whether it answers now."""
        return self.models.ready(self.models.get(name, version)) and self.is_ready()

    async def infer(self, inf: Inference, reserve=None, as_json=None) -> tuple[Plan, list[Tensor]]:
        """Plan on the event loop; answer there when small and mapped, else in a thread (a new
        table's build or a large answer must not stall the other requests). ``reserve(nbytes)``,
        given the planned answer's size before it is built, may refuse it (service/v2/admit.py).
        ``as_json(i)``: whether output ``i`` goes as JSON text (REST), which the limit counts."""
        plan = self.inferer.plan(inf, as_json)
        if reserve is not None:
            reserve(plan.nbytes)
        if plan.inline:
            return plan, self.inferer.execute(plan)
        return plan, await anyio.to_thread.run_sync(self.inferer.execute, plan)
