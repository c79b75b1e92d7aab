"""Clients of the outside services the library uses, each over httpx against a configurable base
URL: the video search API (YouTube Data API v3 shape), an OpenAI-compatible chat model and an
OpenAI-compatible image generator. Each is None (disabled) while its key is unset."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any

import httpx

from gymctl.config import Settings
from gymctl.errors import DomainError
from gymctl.numerals import whole_number
from gymctl.providers import http_client

SEARCH_UNITS = 100  # spec B 8: a search costs 100 quota units
DETAILS_UNITS = 1  # videos.list, per call
_DURATION = re.compile(r"^P(?:(\d+)D)?T?(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?$")


class ProviderUnavailable(DomainError):
    def __init__(self, service: str, message: str) -> None:
        super().__init__(f"{service}_unavailable", message, status=503)


class QuotaExceeded(ProviderUnavailable):
    def __init__(self) -> None:
        super().__init__("video_search", "the search API's daily quota is spent")


def _client(base_url: str, key: str | None = None, timeout: float = 30) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return http_client.new_client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout)


def _secret(value) -> str | None:
    return value.get_secret_value() if value is not None else None


def duration_seconds(iso: str) -> int | None:
    """ISO 8601 durations as the API gives them (PT1M30S); None when unreadable."""
    match = _DURATION.fullmatch(iso or "")
    if not match or not any(match.groups()):
        return None
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


@dataclass(frozen=True)
class Found:
    video_id: str
    title: str
    channel_id: str
    channel_title: str


@dataclass(frozen=True)
class Details:
    duration_seconds: int | None
    view_count: int


class VideoSearch:
    def __init__(self, base_url: str, key: str) -> None:
        self._key = key
        self._http = _client(base_url)

    def _get(self, path: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            response = self._http.get(path, params={**params, "key": self._key})
        except httpx.HTTPError as error:
            raise ProviderUnavailable("video_search", type(error).__name__) from None
        if response.status_code == 403 and "quota" in response.text.lower():
            raise QuotaExceeded()
        if response.status_code != 200:
            raise ProviderUnavailable("video_search", f"answered {response.status_code}")
        try:
            return response.json()
        except ValueError:
            raise ProviderUnavailable("video_search", "answered with no JSON") from None

    def search(self, query: str, *, channel_id: str | None = None) -> list[Found]:
        params = {"part": "snippet", "type": "video", "maxResults": 10, "q": query}
        if channel_id:
            params["channelId"] = channel_id
        found = []
        for item in self._get("/search", params).get("items", []):
            video_id = (item.get("id") or {}).get("videoId")
            snippet = item.get("snippet") or {}
            if isinstance(video_id, str) and video_id:
                found.append(
                    Found(
                        video_id,
                        str(snippet.get("title", ""))[:300],
                        str(snippet.get("channelId", "")),
                        str(snippet.get("channelTitle", ""))[:200],
                    )
                )
        return found

    def details(self, video_ids: list[str]) -> dict[str, Details]:
        params = {"part": "contentDetails,statistics", "id": ",".join(video_ids)}
        out = {}
        for item in self._get("/videos", params).get("items", []):
            views = (item.get("statistics") or {}).get("viewCount", 0)
            duration = (item.get("contentDetails") or {}).get("duration", "")
            out[str(item.get("id"))] = Details(
                duration_seconds(duration), whole_number(str(views)) or 0
            )
        return out


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0


class ChatModel:
    """POST {base}/chat/completions asking for a JSON object; answers the object and the usage."""

    def __init__(self, base_url: str, key: str, model: str, price_in: float, price_out: float):
        self.model = model
        self._http = _client(base_url, key, timeout=60)
        self._price = (price_in, price_out)

    def cost_micros(self, usage: Usage) -> int:
        """USD per million tokens is micro-USD per token."""
        return round(
            usage.prompt_tokens * self._price[0] + usage.completion_tokens * self._price[1]
        )

    def complete_json(self, system: str, user: str) -> tuple[dict[str, Any], Usage]:
        body = {
            "model": self.model,
            "temperature": 0,
            "response_format": {"type": "json_object"},
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        }
        try:
            response = self._http.post("/chat/completions", json=body)
        except httpx.HTTPError as error:
            raise ProviderUnavailable("llm", type(error).__name__) from None
        if response.status_code != 200:
            raise ProviderUnavailable("llm", f"answered {response.status_code}")
        try:
            data = response.json()
            usage = data.get("usage") or {}
            content = json.loads(data["choices"][0]["message"]["content"])
            tokens = Usage(
                int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
            )
        except (ValueError, KeyError, IndexError, TypeError):
            raise ProviderUnavailable("llm", "answered with a malformed completion") from None
        if not isinstance(content, dict):
            raise ProviderUnavailable("llm", "the completion is not a JSON object")
        return content, tokens


class ImageGenerator:
    """POST {base}/images/generations {"model", "prompt", "size"} -> data[0].b64_json."""

    def __init__(self, base_url: str, key: str, model: str) -> None:
        self.model = model
        self._http = _client(base_url, key, timeout=120)

    def generate(self, prompt: str) -> bytes:
        body = {"model": self.model, "prompt": prompt, "size": "1024x1024", "n": 1}
        try:
            response = self._http.post("/images/generations", json=body)
        except httpx.HTTPError as error:
            raise ProviderUnavailable("image_generation", type(error).__name__) from None
        if response.status_code != 200:
            raise ProviderUnavailable("image_generation", f"answered {response.status_code}")
        try:
            return base64.b64decode(response.json()["data"][0]["b64_json"], validate=True)
        except (ValueError, KeyError, IndexError, TypeError):
            raise ProviderUnavailable("image_generation", "answered with no image") from None


def video_search_from_settings(settings: Settings) -> VideoSearch | None:
    key = _secret(settings.video_search_key)
    return VideoSearch(settings.video_search_url, key) if key else None


def chat_model_from_settings(settings: Settings) -> ChatModel | None:
    key = _secret(settings.llm_key)
    if not key:
        return None
    return ChatModel(
        settings.llm_url,
        key,
        settings.llm_model,
        settings.llm_usd_per_mtok_in,
        settings.llm_usd_per_mtok_out,
    )


def image_generator_from_settings(settings: Settings) -> ImageGenerator | None:
    key = _secret(settings.image_gen_key)
    return ImageGenerator(settings.image_gen_url, key, settings.image_gen_model) if key else None
