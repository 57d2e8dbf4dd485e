"""The one store of a process's learnt templates, for every route.

Every shortcut answers from what the full path taught it: /v1 bodies (per family: the C templates
of service/shortcut/templates.py), v2 REST binary and JSON-tensor infers and gRPC ModelInfer
messages (service/v2/hot.py, hot_blocks.py, hot_json.py: typed entries over the same templates).
Their keys differ (a /v1 body around its selections, a v2 JSON header, a serialized request before
its raw inputs), their bookkeeping does not, and it is here, once:

- **one learn rule**: a key is learnt the second time the full path answers it (``admit``). A key
  seen once costs an entry in a bounded set, not a template: a client that sends something new in
  every request (a fresh request id) never fills the store;
- **one cap**: MAX_TEMPLATES entries in all routes together (each key at most MAX_KEY_BYTES: the
  keys are client input); past it every entry is dropped, to be learnt again;
- **one freshness check** (``fresh``): templates learnt under one engine manifest answer under a
  later one only while it has only gained tables (``still_mapped``); any other change (an eviction,
  a repaired table, a new engine generation) drops them all, so that no template reads a mapping the
  engine replaced. Keys remembered as no template are forgotten at any new manifest (one may have
  waited for a table now built).

The C lookups read plain dicts (``route``): a route's dict is made once and cleared in place, so
what C holds stays the store's. Which routes there are is the callers' business (a family's name, a
v2 REST target, gRPC's messages); the store only keeps them.
"""

from __future__ import annotations

MAX_TEMPLATES = 1024  # entries in all routes together
MAX_KEY_BYTES = 4096  # a key is client input: the cap's 1024 keys hold 4 MiB at most


def still_mapped(old: dict | None, new: dict | None) -> bool:
    """Whether templates learnt under engine manifest ``old`` may answer under ``new``: the same
    engine generation, and every table of ``old`` still in ``new`` in the same file (the manifest
    only gained tables)."""
    if old is None or new is None or new["generation"] != old["generation"]:
        return False
    now = new["tables"]
    return all(d in now and now[d]["file"] == e["file"] for d, e in old["tables"].items())


class Store:
    """The learnt templates of one process. ``manifest()``: the engine manifest the process reads
    now (its reader client's), or None."""

    def __init__(self, manifest=lambda: None):
        self._manifest = manifest
        self.seen = None  # the manifest the entries were last checked against
        self.known: dict = {}  # (route, key) -> its entry, or None: answered, not a template
        self.once: set = set()  # (route, key) the full path has answered once
        self.routes: dict = {}  # route -> {key: entry}: what the C lookups read

    def route(self, name) -> dict:
        """Route ``name``'s dict of entries (made, empty, the first time), which C reads."""
        d = self.routes.get(name)
        if d is None:
            d = self.routes[name] = {}
        return d

    def fresh(self) -> bool:
        """Check the entries against the engine's manifest; False when they were all dropped."""
        m = self._manifest()
        if m is self.seen:
            return True
        kept = still_mapped(self.seen, m)
        if kept:
            for k in [k for k, e in self.known.items() if e is None]:
                del self.known[k]
        else:
            self.clear()
        self.seen = m
        return kept

    def clear(self) -> None:
        """Drop every entry of every route (each route's dict cleared in place); the keys seen once
        stay (each is learnt at its next answer)."""
        self.known.clear()
        for d in self.routes.values():
            d.clear()

    def admit(self, route, key) -> bool:
        """Whether to learn ``key`` of ``route`` now: the second time the full path answers it,
        checked against the manifest first (so that what is learnt is not dropped at the next
        lookup). A full set of keys seen once is dropped; a full store is cleared."""
        k = (route, key)  # (the callers bound the key's bytes by MAX_KEY_BYTES)
        if k in self.known:
            return False
        if k not in self.once:
            if len(self.once) >= MAX_TEMPLATES:
                self.once.clear()
            self.once.add(k)
            return False
        self.once.discard(k)
        self.fresh()
        if len(self.known) >= MAX_TEMPLATES:
            self.clear()
        return True

    def keep(self, route, key, entry) -> None:
        """An admitted ``key`` of ``route`` learnt as ``entry`` (None: not a template); where the
        route has a dict C reads (``route()``), the entry goes there too."""
        self.known[(route, key)] = entry
        d = self.routes.get(route)
        if entry is not None and d is not None:
            d[key] = entry

    def get(self, route, key):
        """``key``'s entry in ``route``, or None."""
        return self.known.get((route, key))

    def again(self, route, key) -> None:
        """``key`` is learnt at its next answer (its table was not mapped when it was learnt)."""
        self.once.add((route, key))
