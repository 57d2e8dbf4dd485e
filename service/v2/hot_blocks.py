"""The v2 shortcut of the block families (alibi, t5-buckets): a repeated inference of raw ``query``
and ``key`` inputs answered by the family's /v1 block template (service/shortcut/hot_blocks.c
``fill_block``; the lane's v2 routes through ``hot_v2_answer``), learnt as service/v2/hot.py learns
the row families.

A learnt request is one the full path answered twice: both inputs raw INT32/INT64 of shape [N]
(any order; each keeps its datatype and byte length, which the key fixes: the REST inference
header names them, the gRPC message before its two trailing ``raw_input_contents`` fields holds
them and each field's length is checked), every output in the answer (none into shared memory: those
stay with the full path), the block output binary. The answer's bytes around the block become the
entry's parts; the block is the one /v1 answers (``Family.template``: AlibiTemplate's float32 cells,
or the engine's own kernels for float16/bfloat16 ALiBi and T5), so no rule is written twice. At
learn time the entry's answer must equal the full path's bytes. A position that is negative or
not below the position limit, or a cell that overflows the dtype, goes to the full path (None).
"""

from __future__ import annotations

import dataclasses

from posenc.service.shortcut import templates as replay
from posenc.service.shortcut.templates import block_template, fill_block

_ITEMSIZE = {"INT32": 4, "INT64": 8}


@dataclasses.dataclass(frozen=True, slots=True)
class BlockEntry:
    template: object  # service._hot AlibiTemplate or T5Template
    itemsizes: tuple  # of the first and second input's positions: 4 or 8 each
    sizes: tuple  # the first and second input's bytes
    key_first: bool  # the first input is `key` (else `query`)
    parts: tuple  # the answer's bytes before and after the block
    size: int  # the answer's bytes
    inline: bool  # answered on the event loop (else in a thread)
    route: str  # the metrics route of the model's calls
    headers: tuple = ()  # REST: the answer's extra headers
    regions: tuple = ()  # (outputs into shared memory: never here)

    @property
    def nbytes(self) -> int:
        """The positions' bytes after a REST inference header: the two inputs', one after the other."""
        return self.sizes[0] + self.sizes[1]

    def answer(self, positions) -> bytes | None:
        """The answer's bytes for ``positions`` (REST: both inputs' bytes in one buffer; gRPC: a
        pair, grpc_answer's), or None: the full path answers (and says what is wrong)."""
        first, second = (
            positions
            if type(positions) is tuple
            else (positions[: self.sizes[0]], positions[self.sizes[0] :])
        )
        return fill_block(self.template, first, second, self.itemsizes, self.key_first, self.parts)

    def lane_entry(self, post: bytes):
        """The C lane's entry (service/shortcut/hot_blocks.c hot_v2_block_answer)."""
        return replay.BlockEntry(
            template=self.template,
            itemsizes=self.itemsizes,
            nbytes=self.sizes,
            key_first=self.key_first,
            parts=self.parts,
            post=post,
        )


def block_entry(
    v2,
    inf,
    plan,
    tensors: list,
    segments: list,
    raw_fields: tuple,
    route: str,
    headers: tuple,
    inline_bytes: int,
) -> BlockEntry | None:
    """The entry of an answered inference of a block family, or None (not one it can key exactly,
    or whose answer is not the full path's bytes)."""
    fam, client = plan.model.family, v2.client
    if (
        client is None
        or len(inf.inputs) != 2
        or len(plan.reqs) != 1
        or plan.stacked
        or len(raw_fields) not in (0, 2)
    ):
        return None
    names = [t.name for t in inf.inputs]
    if sorted(names) != sorted(fam.selections) or any(x.region is not None for x in tensors):
        return None
    sizes = tuple(_ITEMSIZE.get(t.datatype) for t in inf.inputs)
    if None in sizes or any(
        t.raw is None or "shared_memory_region" in t.params or len(t.shape) != 1 for t in inf.inputs
    ):
        return None
    probe = {**plan.reqs[0].body, **{n: [0] for n in fam.selections}}  # a block any stored table answers
    try:
        probe = v2.inferer.pipeline.request(fam.name, probe)
    except Exception:  # the spec was valid with the real positions: nothing to learn here
        return None
    if probe.table is None:
        return None
    if not client.is_mapped(probe):
        v2.hot.unmapped = True  # learnt again at the key's next answer (service/v2/hot.py)
        return None
    s = v2.settings
    view = v2.hot.view(probe)
    if view is None:
        return None
    t = block_template(probe, view, s.max_positions, s.max_response_bytes)
    gathered = [x for x in tensors if x.name in fam.batched]
    if t is None or len(gathered) != 1:
        return None
    parts, cur = [], []
    for seg in segments:
        if seg is gathered[0].array:
            parts.append(b"".join(cur))
            cur = []
        else:
            cur.append(bytes(seg))
    parts.append(b"".join(cur))
    if len(parts) != 2:  # the block is not one binary output of the answer
        return None
    expected = b"".join(segments)
    raws = tuple(bytes(x.raw) for x in inf.inputs)
    e = BlockEntry(
        t,
        sizes,
        tuple(map(len, raws)),
        names[0] != fam.selections[0],
        tuple(parts),
        len(expected),
        len(expected) <= inline_bytes,
        route,
        headers,
    )
    return e if e.answer(raws) == expected else None
