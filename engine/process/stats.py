"""The engine's build and eviction counts, for the manifest (``"stats"``) and so for /metrics.

Derived from each change of the table set (``noted``: the engine notes every build and every
eviction; ``update`` compares a whole table set, at a full manifest write): a digest that
appears, or whose file changed, is a build (its ``built_s`` goes into the histogram); one that
disappears is an eviction. The counts start at zero with each engine
process, as a Prometheus counter does when its process restarts.
"""

from __future__ import annotations

BUILD_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class BuildStats:
    def __init__(self):
        self.seen: dict[str, str] = {}  # digest -> file at the last manifest
        self.builds = self.evictions = 0
        self.counts = [0] * (len(BUILD_BUCKETS_S) + 1)
        self.seconds = 0.0
        self.last: dict = self.figures()

    def adopted(self, tables: dict) -> None:
        """Tables a restarted engine adopted: not builds of this process."""
        self.seen.update({d: e["file"] for d, e in tables.items()})
        self.adopted_tables = len(tables)
        self.last = self.figures()

    adopted_tables = 0

    def update(self, tables: dict) -> dict:
        for digest, e in tables.items():
            if self.seen.get(digest) != e["file"]:
                s = float(e.get("built_s", 0.0))
                self.builds += 1
                self.seconds += s
                self.counts[next((i for i, le in enumerate(BUILD_BUCKETS_S) if s <= le), -1)] += 1
        self.evictions += sum(1 for d in self.seen if d not in tables)
        self.seen = {d: e["file"] for d, e in tables.items()}
        self.last = self.figures()
        return self.last

    def noted(self, digest: str, entry: dict | None) -> None:
        """One table published or replaced (``entry``) or dropped (None): ``update`` for one digest."""
        if entry is None:
            if self.seen.pop(digest, None) is not None:
                self.evictions += 1
        elif self.seen.get(digest) != entry["file"]:
            s = float(entry.get("built_s", 0.0))
            self.builds += 1
            self.seconds += s
            self.counts[next((i for i, le in enumerate(BUILD_BUCKETS_S) if s <= le), -1)] += 1
            self.seen[digest] = entry["file"]
        else:
            return
        self.last = self.figures()

    def figures(self) -> dict:
        return {
            "builds": self.builds,
            "evictions": self.evictions,
            "adopted": self.adopted_tables,
            "build_seconds_sum": round(self.seconds, 6),
            "build_seconds_buckets": list(BUILD_BUCKETS_S),
            "build_seconds_counts": list(self.counts),
        }
