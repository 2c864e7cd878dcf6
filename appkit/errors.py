"""One error policy for every app event.

A failure must not wipe the page: the message goes to a persistent Markdown beside the settings (the
event's first output) and to a toast, the status line (second output) is reset so it never stays on
"loading model…", and every other output is left as it was (gr.skip(), no red "Error" badge).
"""
from __future__ import annotations

import functools
import inspect
import logging

import gradio as gr

from decoding import ModelError

from .run.settings import InputError

log = logging.getLogger("decodescope.app")
NOT_RUN = "Not run — see the message above. The previous result is kept."


def one_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def text_of(e: BaseException) -> str:
    """What the user reads: bad input as written, anything unexpected with its type (and logged)."""
    if isinstance(e, InputError):
        return str(e)
    if isinstance(e, (ValueError, ModelError, KeyError, TypeError, OSError)):
        return one_line(e)
    log.error("unexpected error", exc_info=e)
    return f"{type(e).__name__}: {one_line(e)}"


def failure(e: BaseException, n_outputs: int, status: str | None = NOT_RUN, toast: bool = True) -> tuple:
    """(persistent message, status reset, skip…) for an event with n_outputs outputs; shows a toast.
    status None: the event has no status line of its own (its second output is left as it was)."""
    msg = text_of(e)
    if toast:
        gr.Warning(msg.replace("**", ""), title="Not run")
    shown = f"⚠️ {msg}" if "\n" not in msg else f"⚠️ **Not run:**\n\n{msg}"
    return (shown, gr.skip() if status is None else status, *([gr.skip()] * (n_outputs - 2)))


def reported(n_outputs: int, status: str | None = NOT_RUN, client_error: bool = False):
    """Decorator: failures become `failure(...)` instead of an exception (see the module docstring).
    client_error (the API's model events): the message is shown beside the controls first, then raised as
    gr.Error so a script calling the endpoint gets an exception with the same words, not a normal result.
    Such handlers are always generators (the message must be sent before the error)."""
    def wrap(fn):
        if inspect.isgeneratorfunction(fn) or client_error:
            @functools.wraps(fn)
            def gen(*a, **k):
                try:
                    if inspect.isgeneratorfunction(fn):
                        yield from fn(*a, **k)
                    else:
                        yield fn(*a, **k)
                except GeneratorExit:
                    raise
                except Exception as e:  # noqa: BLE001
                    yield failure(e, n_outputs, status, toast=not client_error)
                    if client_error:
                        raise gr.Error(text_of(e).replace("**", ""), title="Not run", print_exception=False) from None
            return gen

        @functools.wraps(fn)
        def call(*a, **k):
            try:
                return fn(*a, **k)
            except Exception as e:  # noqa: BLE001
                return failure(e, n_outputs, status)
        return call
    return wrap
