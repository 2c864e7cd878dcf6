"""One error policy for every app event: a failure becomes one gr.Error line and the server keeps serving;
Stop ends a run quietly."""
from __future__ import annotations

import functools
import inspect
import logging

import gradio as gr

from decoding import ModelError

from .stream import Stopped

log = logging.getLogger("decodescope.app")


def one_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def friendly(fn):
    """Turn every failure into one gr.Error line (the server keeps serving); Stop ends quietly."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen(*a, **k):
            try:
                yield from fn(*a, **k)
            except (gr.Error, GeneratorExit):
                raise
            except Stopped:
                return
            except Exception as e:  # noqa: BLE001
                raise _as_gr_error(e) from None
        return gen

    @functools.wraps(fn)
    def call(*a, **k):
        try:
            return fn(*a, **k)
        except gr.Error:
            raise
        except Stopped:
            raise gr.Error("stopped") from None
        except Exception as e:  # noqa: BLE001
            raise _as_gr_error(e) from None
    return call


def _as_gr_error(e: Exception) -> gr.Error:
    """Bad input reads as its own first line; anything else is logged with its traceback (call this
    inside the except block) and shown with its type."""
    if isinstance(e, (ValueError, ModelError, KeyError, TypeError, OSError)):
        return gr.Error(one_line(e))
    log.exception("unexpected error")
    return gr.Error(f"{type(e).__name__}: {one_line(e)}")
