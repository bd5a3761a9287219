"""Handing a call on unchanged: a layer whose method passes every argument to the next layer
lists the arguments once, in its own signature, rather than again in the call."""

from __future__ import annotations

from typing import Any


def passed_on(own_locals: dict[str, Any]) -> dict[str, Any]:
    """A method's arguments by name, less `self`: call it as `passed_on(locals())` first thing in
    the method's body, before any other name is bound there."""
    return {name: value for name, value in own_locals.items() if name != "self"}
