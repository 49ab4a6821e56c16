"""The root of every error the client raises."""

from __future__ import annotations

from typing import Any


class WalletError(Exception):
    """Anything the wallet client raises derives from this."""


class DecodeError(WalletError):
    """A response that does not match the API document.

    Raised instead of inventing a value: a required member that is missing,
    or a member of the wrong type. `body` is the parsed body when it was
    JSON, else None; `text` the raw text.
    """

    def __init__(self, message: str, *, status: int | None = None, body: Any = None, text: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        self.text = text
