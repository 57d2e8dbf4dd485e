"""Accept negotiation (RFC 9110 §12.5.1): q-values honoured, the most specific matching range
decides a type's q, ties go to the server's order (JSON first). A missing Accept, ``*/*`` and
``application/*`` get JSON."""

from __future__ import annotations

from functools import lru_cache

from posenc.service.core.errors import HeaderTooLarge, NotAcceptable

JSON = "application/json"
SAFETENSORS = "application/x-safetensors"
NPZ = "application/x-npz"
OCTET = "application/octet-stream"  # served as safetensors

# media type offered -> format name (the order is the server's preference)
OFFERS: dict[str, str] = {JSON: "json", SAFETENSORS: "safetensors", NPZ: "npz", OCTET: "safetensors"}
CONTENT_TYPES = {"json": JSON, "safetensors": SAFETENSORS, "npz": NPZ}
MAX_ACCEPT = 4096  # bytes of Accept (all its lines joined): 431 above, before it is parsed
CACHED_ACCEPT = 256  # only values this short are remembered (256 of them: 64 KiB at most)


def _parse(accept: str):
    ranges = []
    for part in accept.split(","):
        part = part.strip()
        if not part:
            continue
        fields = [f.strip() for f in part.split(";")]
        mtype = fields[0].lower()
        if "/" not in mtype:
            continue
        q = 1.0
        for f in fields[1:]:
            if f.lower().startswith("q="):
                try:
                    q = float(f[2:])
                except ValueError:
                    q = 0.0
                q = min(max(q, 0.0), 1.0)
        ranges.append((mtype, q))
    return ranges


def _q_for(offer: str, ranges) -> float | None:
    t, s = offer.split("/")
    best, spec = None, -1
    for mtype, q in ranges:
        rt, rs = mtype.split("/", 1)
        if mtype == offer:
            level = 2
        elif rt == t and rs == "*":
            level = 1
        elif rt == "*" and rs == "*":
            level = 0
        else:
            continue
        if level > spec:
            best, spec = q, level
    return best


def choose(accept: str | None) -> str:
    """The response format for an Accept header: 'json', 'safetensors' or 'npz'. Parsing is
    linear in the value and bounded: over MAX_ACCEPT bytes is a 431 (~1 µs, whatever its size)."""
    if accept is None or len(accept) <= CACHED_ACCEPT:
        return _cached(accept)
    if len(accept) > MAX_ACCEPT:
        raise HeaderTooLarge("Accept", len(accept), MAX_ACCEPT)
    return _choose(accept)


def _choose(accept: str | None) -> str:
    if not accept or not accept.strip():
        return "json"
    ranges = _parse(accept)
    if not ranges:
        return "json"
    best, best_q = None, 0.0
    for offer, fmt in OFFERS.items():
        q = _q_for(offer, ranges)
        if q is not None and q > best_q:
            best, best_q = fmt, q
    if best is None:
        raise NotAcceptable(accept, OFFERS)
    return best


_cached = lru_cache(maxsize=256)(_choose)
