"""``specguard sim serve``: the simulated engine behind an OpenAI-compatible streaming API, in real time.

POST /v1/completions and /v1/chat/completions (streamed or not), GET /v1/models, /version, /health and
/metrics (vLLM-named series, see ``serve_metrics``). Every response carries ``X-Specguard-Simulated: true``;
/version says ``"simulated": true`` and its version has the local tag ``+specguard.sim`` (``0.32.0+specguard.sim``),
which parses as the release it imitates and which ``bench`` records in run.json's ``server_version``.

Output is one `` tok`` per token, ``finish_reason`` always ``length``: the engine has no EOS, so a request
generates ``max_tokens`` tokens (``ignore_eos`` or not), or the default output length without ``max_tokens``.
A step that emits several tokens (speculation) sends them in one chunk, as vLLM does. Usage follows vLLM:
with ``stream_options.include_usage`` a final ``choices: []`` event, with ``continuous_usage_stats`` usage on
every chunk too, and none otherwise. The prompt's length is estimated from its text (words x 1.3, see
``prompt_tokens``), or is the length of a token-id prompt.

Run: python -m specguard.sim.serve --json '<SimRequest JSON>' --port P [--host H --served-model-name N --time-scale S]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import time
import uuid
import zlib
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
from aiohttp import web

from specguard.sim.engine import EngineConfig, SimEngine
from specguard.sim.run import SimRequest, build_arm
from specguard.sim.serve_loop import EngineLoop, Stream
from specguard.sim.serve_metrics import SimMetrics
from specguard.sim.step_time import StepTime
from specguard.simulated import IMITATED_VLLM, SIM_HEADER, SIM_VERSION

__all__ = ["IMITATED_VLLM", "SIM_HEADER", "SimServer", "build_server", "prompt_tokens", "serve"]

WORDS_TO_TOKENS = 1.3  # a rough English BPE ratio; the estimate only has to be deterministic
TOKEN_TEXT = " tok"


def prompt_tokens(body: dict[str, Any], chat: bool) -> int:
    """A deterministic estimate of the prompt's length in tokens: ids counted, text as words x 1.3."""
    if chat:
        parts = [m.get("content") for m in body.get("messages") or [] if isinstance(m, dict)]
        text = " ".join(
            p if isinstance(p, str) else " ".join(str(c.get("text", "")) for c in p if isinstance(c, dict)) for p in parts if p
        )
        return max(1, math.ceil(len(text.split()) * WORDS_TO_TOKENS) + 4 * len(parts))  # + a template's few per turn
    prompt = body.get("prompt", "")
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    if isinstance(prompt, list):
        prompt = " ".join(str(p) for p in prompt)
    return max(1, math.ceil(len(str(prompt).split()) * WORDS_TO_TOKENS))


def _error(message: str, status: int, kind: str = "BadRequestError", param: str | None = None) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "param": param, "code": status}}, status=status)


class SimServer:
    def __init__(
        self, config: EngineConfig, step: StepTime, served_name: str, time_scale: float, seed: int, default_max_tokens: int
    ) -> None:
        self.served_name = served_name
        self.default_max_tokens = default_max_tokens
        engine = SimEngine(config, step, np.random.default_rng(seed))
        self.metrics = SimMetrics(served_name, engine)
        self.loop = EngineLoop(engine, self.metrics, time_scale)
        self.version_body = {
            "version": SIM_VERSION,
            "simulated": True,
            "imitates": f"vLLM {IMITATED_VLLM}",
            "engine": "specguard sim (a model of vLLM's V1 engine; no GPU, no model)",
            "speculation": config.speculation.method if config.speculation else None,
            "num_kv_blocks": config.num_kv_blocks,
            "time_scale": time_scale,
        }

    async def completions(self, request: web.Request) -> web.StreamResponse:
        chat = request.path.endswith("/chat/completions")
        try:
            body: dict[str, Any] = await request.json()
        except (ValueError, UnicodeDecodeError):
            return _error("the body is not JSON", 400)
        if not isinstance(body, dict):
            return _error("the body is not a JSON object", 400)
        if body.get("model") not in (None, self.served_name):
            return _error(f"The model `{body.get('model')}` does not exist.", 404, "NotFoundError", "model")
        max_tokens = body.get("max_completion_tokens") if chat else None
        max_tokens = max_tokens or body.get("max_tokens") or self.default_max_tokens
        if not isinstance(max_tokens, int) or max_tokens < 1:
            return _error(f"max_tokens must be a positive integer, got {max_tokens!r}", 400, param="max_tokens")
        n_prompt = prompt_tokens(body, chat)
        if not self.loop.fits(n_prompt, max_tokens):
            return _error(
                f"{n_prompt} prompt + {max_tokens} output tokens do not fit the simulated KV cache "
                f"({self.loop.engine.cfg.num_kv_blocks} blocks of {self.loop.engine.cfg.block_size})",
                400,
            )
        stream = self.loop.submit(n_prompt, max_tokens)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        ids = _token_ids(body) if body.get("return_token_ids") else None
        if not body.get("stream"):
            return await self._whole(stream, rid, chat, ids)
        opts = body.get("stream_options") or {}
        usage = "continuous" if opts.get("continuous_usage_stats") else "final" if opts.get("include_usage") else "none"
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        head = (
            json.dumps(
                {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion", "created": int(time.time())},
                separators=(",", ":"),
            )[:-1]
            + f',"model":{json.dumps(self.served_name)},"choices":['
        )
        total = 0
        try:
            async for n, done, error in _deliveries(stream):
                if error is not None:
                    err = {"error": {"message": error, "type": "InternalServerError", "param": None, "code": 500}}
                    await resp.write(b"data: " + json.dumps(err).encode() + b"\n\n")
                    break
                if n == 0:
                    continue
                delta = ids[total : total + n] if ids is not None else None
                total += n
                text = TOKEN_TEXT * n
                fin = '"length"' if done else "null"
                tok = f',"token_ids":{json.dumps(delta)}' if delta is not None else ""
                role = '"role":"assistant",' if chat and total == n else ""
                piece = (
                    f'{{"index":0,"delta":{{{role}"content":"{text}"}},"logprobs":null,"finish_reason":{fin}{tok}}}'
                    if chat
                    else f'{{"index":0,"text":"{text}","logprobs":null,"finish_reason":{fin},"stop_reason":null{tok}}}'
                )
                use = f',"usage":{_usage(n_prompt, total)}' if usage == "continuous" else ""
                await resp.write(f"data: {head}{piece}]{use}}}\n\n".encode())
            if usage != "none":
                await resp.write(f'data: {head}],"usage":{_usage(n_prompt, total)}}}\n\n'.encode())
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            self.loop.abandon(stream)
            raise
        return resp

    async def _whole(self, stream: Stream, rid: str, chat: bool, ids: list[int] | None) -> web.Response:
        total = 0
        async for n, _, error in _deliveries(stream):
            if error is not None:
                return _error(error, 500, "InternalServerError")
            total += n
        text = TOKEN_TEXT * total
        choice: dict[str, Any] = (
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
            if chat
            else {"index": 0, "text": text, "finish_reason": "length", "stop_reason": None}
        )
        if ids is not None:
            choice["token_ids"] = ids[:total]
        return web.json_response(
            {
                "id": rid,
                "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()),
                "model": self.served_name,
                "choices": [choice],
                "usage": {
                    "prompt_tokens": stream.prompt_tokens,
                    "completion_tokens": total,
                    "total_tokens": stream.prompt_tokens + total,
                },
            }
        )

    async def models(self, _: web.Request) -> web.Response:
        model: dict[str, Any] = {
            "id": self.served_name,
            "object": "model",
            "owned_by": "specguard-sim",
            "root": self.served_name,
            "simulated": True,
        }
        return web.json_response({"object": "list", "data": [model]})

    async def version(self, _: web.Request) -> web.Response:
        return web.json_response(self.version_body)

    async def health(self, _: web.Request) -> web.Response:
        return web.Response(text="")

    async def metrics_page(self, _: web.Request) -> web.Response:
        return web.Response(body=self.metrics.text(), content_type="text/plain", charset="utf-8")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/version", self.version)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics_page)
        app.on_response_prepare.append(_mark_simulated)
        app.cleanup_ctx.append(self._engine_task)
        return app

    async def _engine_task(self, _: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(self.loop.run())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _mark_simulated(_: web.Request, response: web.StreamResponse) -> None:
    response.headers[SIM_HEADER] = "true"


async def _deliveries(stream: Stream) -> AsyncIterator[tuple[int, bool, str | None]]:
    while True:
        d = await stream.queue.get()
        yield d.tokens, d.done, d.error
        if d.done:
            return


def _usage(prompt: int, completion: int) -> str:
    # completion_tokens last, then the closing braces: the shape specguard's SSE fast path counts (loadgen/sse.py)
    return f'{{"prompt_tokens":{prompt},"total_tokens":{prompt + completion},"completion_tokens":{completion}}}'


def _token_ids(body: dict[str, Any]) -> list[int]:
    """Output ids that depend on the prompt alone (equal prompts, equal outputs), as many as max_tokens allows."""
    prompt = json.dumps(body.get("prompt", body.get("messages")), sort_keys=True)
    base = zlib.crc32(prompt.encode()) % 30_000
    n = int(body.get("max_completion_tokens") or body.get("max_tokens") or 0) or 1 << 16
    return [base + j for j in range(min(n, 1 << 16))]


def build_server(req: SimRequest, served_name: str, time_scale: float) -> SimServer:
    config, step = build_arm(req, speculative=req.method is not None)
    return SimServer(config, step, served_name, time_scale, req.seed, req.output_len)


def serve(req: SimRequest, host: str, port: int, served_name: str, time_scale: float) -> None:
    """Run until interrupted (SIGINT/SIGTERM end aiohttp's loop)."""
    server = build_server(req, served_name, time_scale)
    web.run_app(server.app(), host=host, port=port, print=lambda *_: None, access_log=None, backlog=1024)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", required=True, help="a SimRequest as JSON (rates may be left out)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--served-model-name", default="sim")
    p.add_argument("--time-scale", type=float, default=1.0)
    a = p.parse_args()
    fields = json.loads(a.json)
    fields.setdefault("rates", [1.0])
    serve(SimRequest.model_validate(fields), a.host, a.port, a.served_model_name, a.time_scale)


if __name__ == "__main__":
    main()
