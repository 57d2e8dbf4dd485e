"""HTTP client for feature pipelines: numpy arrays from posenc's binary (safetensors) responses.

    from posenc.service.client import PosencClient, AsyncPosencClient
    with PosencClient("http://127.0.0.1:8000") as c:
        out = c.rope(head_dim=128, rope_theta=500000.0, positions=[0, 1, 2], dtype="bfloat16")
        out["cos"]            # numpy float32 [3, 128] (bfloat16 widened exactly; raw=True keeps uint16 bits)

A server started with a bearer token (``--auth-token``) wants ``token=``; an HTTPS one with a
private CA, ``verify=ssl.create_default_context(cafile=...)`` (any other keyword goes to httpx).
Errors raise ``PosencHTTPError`` with the status and the server's ``detail`` (for 422, the list
whose ``loc`` names the field). Needs ``httpx`` (the ``client`` extra).
"""

from __future__ import annotations

from posenc.engine.core.dtypes import bf16_bits_to_f32
from posenc.engine.core.formats import read_safetensors
from posenc.engine.tables import FAMILIES

ACCEPT = "application/x-safetensors"


class PosencHTTPError(Exception):
    def __init__(self, status: int, detail):
        self.status, self.detail = status, detail
        super().__init__(f"HTTP {status}: {detail}")


def _headers(token: str | None) -> dict:
    return {"accept": ACCEPT, **({"authorization": f"Bearer {token}"} if token else {})}


def _decode(resp, raw: bool) -> dict:
    if resp.status_code != 200:
        try:
            detail = resp.json().get("detail")
        except ValueError:
            detail = resp.text
        raise PosencHTTPError(resp.status_code, detail)
    arrays, kinds = read_safetensors(resp.content)
    out = {}
    for name, a in arrays.items():
        if kinds[name] == "bfloat16" and not raw:
            a = bf16_bits_to_f32(a)
        out[name] = float(a) if a.ndim == 0 else a
    return out


class PosencClient:
    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        timeout: float = 30.0,
        token: str | None = None,
        **httpx_kwargs,
    ):
        import httpx

        self._http = httpx.Client(base_url=base_url, timeout=timeout, headers=_headers(token), **httpx_kwargs)

    def request(self, family: str, raw: bool = False, **body) -> dict:
        return _decode(self._http.post(f"/v1/{family}", json=body), raw)

    def tables(self) -> dict:
        return self._http.get("/v1/tables").json()

    def close(self):
        self._http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class AsyncPosencClient:
    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        timeout: float = 30.0,
        token: str | None = None,
        **httpx_kwargs,
    ):
        import httpx

        self._http = httpx.AsyncClient(
            base_url=base_url, timeout=timeout, headers=_headers(token), **httpx_kwargs
        )

    async def request(self, family: str, raw: bool = False, **body) -> dict:
        return _decode(await self._http.post(f"/v1/{family}", json=body), raw)

    async def aclose(self):
        await self._http.aclose()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()


def _family_methods() -> None:
    """One method per family of the registry (``c.rope(...)``, ``c.t5_buckets(...)``)."""
    for name in FAMILIES:

        def sync(self, _name=name, **body):
            return self.request(_name, **body)

        async def asynchronous(self, _name=name, **body):
            return await self.request(_name, **body)

        for cls, fn in ((PosencClient, sync), (AsyncPosencClient, asynchronous)):
            fn.__name__ = name.replace("-", "_")
            fn.__doc__ = f"POST /v1/{name}: {FAMILIES[name].returns}"
            setattr(cls, fn.__name__, fn)


_family_methods()
