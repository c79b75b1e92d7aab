"""Loopback stand-ins for the library's outside services, speaking their HTTP shapes:
an OpenAI-compatible embeddings endpoint (vectors from the local model, so similarities are
real), the video search API (YouTube Data API v3: /search, /videos), an OpenAI-compatible chat
model and image generator. Each records its requests; switches inject failures."""

from __future__ import annotations

import base64
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from PIL import Image

from gymctl.movements.embeddings import LocalEmbedder
from tests.loopback import serve_in_thread


def png_bytes(size=(256, 256), colour=(30, 90, 200)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, "PNG")
    return out.getvalue()


class FakeServices:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, Any]] = []
        self.fail_status: dict[str, int] = {}  # path -> status to answer
        # video search: query text -> list of (videoId, channelId, seconds, views)
        self.videos: dict[str, list[tuple[str, str, int, int]]] = {}
        self.quota_exceeded = False
        # chat: videoId -> score; cues answer (None: a valid default)
        self.scores: dict[str, float] = {}
        self.failing_movements: set[str] = set()  # the chat model answers 500 for these
        self.cues_answer: dict[str, Any] | None = None
        self._local = LocalEmbedder()
        self._lock = threading.Lock()
        services = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                status, body = services.handle("GET", parts.path, query, dict(self.headers))
                self._answer(status, body)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                payload = json.loads(self.rfile.read(length) or b"{}")
                status, body = services.handle("POST", self.path, payload, dict(self.headers))
                self._answer(status, body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        serve_in_thread(self._server)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def calls(self, path: str) -> list[Any]:
        return [body for _method, p, body in self.requests if p == path]

    def handle(self, method: str, path: str, body: Any, headers: dict) -> tuple[int, Any]:
        with self._lock:
            self.requests.append((method, path, body))
        if path in self.fail_status:
            return self.fail_status[path], {"error": {"message": "injected"}}
        if path == "/v1/embeddings":
            vectors = self._local.embed(body["input"])
            data = [{"index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
            return 200, {"data": data, "model": body["model"]}
        if path == "/yt/search":
            if self.quota_exceeded:
                return 403, {"error": {"errors": [{"reason": "quotaExceeded"}]}}
            items = [
                {
                    "id": {"videoId": vid},
                    "snippet": {"title": f"{body['q']} {vid}", "channelId": ch, "channelTitle": ch},
                }
                for vid, ch, _s, _v in self.videos.get(body["q"], [])
                if "channelId" not in body or body["channelId"] == ch
            ]
            return 200, {"items": items}
        if path == "/yt/videos":
            known = {v[0]: v for found in self.videos.values() for v in found}
            items = [
                {
                    "id": vid,
                    "contentDetails": {
                        "duration": f"PT{known[vid][2] // 60}M{known[vid][2] % 60}S"
                    },
                    "statistics": {"viewCount": str(known[vid][3])},
                }
                for vid in body["id"].split(",")
                if vid in known
            ]
            return 200, {"items": items}
        if path == "/v1/chat/completions":
            user = json.loads(body["messages"][1]["content"])
            if user.get("movement") in self.failing_movements:
                return 500, {"error": {"message": "injected"}}
            if "candidates" in user:
                answer = {
                    "scores": [
                        {"videoId": c["videoId"], "score": self.scores[c["videoId"]]}
                        for c in user["candidates"]
                        if c["videoId"] in self.scores
                    ]
                }
            else:
                answer = self.cues_answer or {
                    "cues": [
                        f"Brace before each {user['movement']} rep",
                        "Drive evenly",
                        "Breathe",
                    ],
                    "commonFaults": ["Rushing the descent", "Losing position"],
                    "scalingOptions": ["Use a lighter load", "Shorten the range"],
                }
            return 200, {
                "choices": [{"message": {"content": json.dumps(answer)}}],
                "usage": {"prompt_tokens": 1000, "completion_tokens": 100},
            }
        if path == "/v1/images/generations":
            return 200, {"data": [{"b64_json": base64.b64encode(png_bytes()).decode()}]}
        return 404, {"error": "unknown path"}
