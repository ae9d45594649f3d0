"""The model a run calls: whether one is configured (``model_access``), each layout's
generation settings (``settings_for``), and the configuration, client and call of a
run's phase one and phase two models."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.conf import settings

from generation import llm

from ..models import GenerationSettings, Layout


@dataclass(frozen=True)
class ModelAccess:
    api_key: str | None
    base_url: str | None
    offline_demo: bool

    @property
    def available(self) -> bool:
        return bool(self.offline_demo or self.api_key or self.base_url)

    def resolved_base_url(self) -> str | None:
        """Where to send model calls: the offline demo model is served in this process
        (started here on first use), so every entry point works without a server."""
        if self.offline_demo:
            # Deferred: the demo model (and its server) loads only where it is used.
            from generation.offline_model import in_process_demo_url  # noqa: PLC0415

            return in_process_demo_url()
        return self.base_url


def model_access() -> ModelAccess:
    """The model this deployment uses, from the settings (MEMORYUI_DEMO_MODEL has already
    resolved "local" into OPENAI_BASE_URL)."""
    if settings.MEMORYUI_DEMO_MODEL == "offline":
        return ModelAccess(api_key=None, base_url=None, offline_demo=True)
    return ModelAccess(
        api_key=settings.OPENAI_API_KEY or None,
        base_url=settings.OPENAI_BASE_URL or None,
        offline_demo=False,
    )


def settings_for(layout: Layout) -> GenerationSettings:
    gs, _ = GenerationSettings.objects.get_or_create(
        layout=layout,
        defaults={
            "phase_one_model": settings.MEMORYUI_PHASE_ONE_MODEL,
            "phase_two_model": settings.MEMORYUI_PHASE_TWO_MODEL,
            "api": settings.MEMORYUI_OPENAI_API,
        },
    )
    return gs


def model_config(snapshot: dict[str, Any], model: str) -> llm.ModelConfig:
    access = model_access()
    if snapshot.get("offline_demo") and not access.offline_demo:
        # A run started on the demo model is answered by it in every worker, whatever
        # that worker's own settings say.
        access = ModelAccess(api_key=None, base_url=None, offline_demo=True)
    api = snapshot.get("api", "responses")
    return llm.ModelConfig(
        model=model,
        api_key=access.api_key,
        base_url=access.resolved_base_url(),
        api="responses" if api == "responses" else "chat",
        chat_format="json_object" if api == "chat_json_object" else "json_schema",
        reasoning_effort=snapshot.get("reasoning_effort") or None,
        timeout=settings.MEMORYUI_MODEL_TIMEOUT,
    )


@lru_cache(maxsize=8)
def model_client(config: llm.ModelConfig) -> Any:
    """One client (and connection pool) per model configuration, shared by the jobs of
    a process: building one costs ~20 ms of CPU (the CA bundle) and a new connection."""
    return llm.make_client(config)


def model_call(snapshot: dict[str, Any], model_key: str) -> llm.ModelCall:
    config = model_config(snapshot, snapshot[model_key])
    return llm.make_call(config, model_client(config))
