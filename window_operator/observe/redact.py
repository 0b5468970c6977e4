"""Secrets of ``kafka.*`` settings: recognised by name, masked wherever settings are shown.

librdkafka takes passwords and private keys as plain settings (``sasl.password``,
``ssl.key.password``, ``ssl.key.pem`` ...). They are needed by the clients and nowhere
else: :func:`redact_settings` masks them in anything printed or logged, and
:class:`RedactingFilter` removes their values from every log record, whatever logged it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["MASK", "RedactingFilter", "is_secret_setting", "redact_settings", "secret_values"]

MASK = "***"
#: Name fragments of librdkafka (and Schema Registry / JAAS) settings that hold secrets.
_SECRET_PARTS = ("password", "secret", "token", "jaas", "user.info", "credential")
#: Settings that are secrets without such a fragment in their name.
_SECRET_NAMES = frozenset({"ssl.key.pem", "ssl_key", "sasl.oauthbearer.config"})
#: Values this short are not removed from log text (they would mangle ordinary words).
_MIN_SECRET_LEN = 4


def is_secret_setting(name: str) -> bool:
    """Whether the client setting ``name`` holds a secret."""
    lowered = name.lower()
    return lowered in _SECRET_NAMES or any(part in lowered for part in _SECRET_PARTS)


def redact_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with the value of every secret setting replaced by :data:`MASK`."""
    return {k: (MASK if is_secret_setting(str(k)) else v) for k, v in settings.items()}


def secret_values(*settings: Mapping[str, Any]) -> list[str]:
    """The secret values among ``settings`` (for :class:`RedactingFilter`), longest first."""
    found = {
        str(v)
        for s in settings
        for k, v in s.items()
        if is_secret_setting(str(k)) and len(str(v)) >= _MIN_SECRET_LEN
    }
    return sorted(found, key=len, reverse=True)


class RedactingFilter(logging.Filter):
    """Replaces known secret values in log records with :data:`MASK`.

    Attached to a handler, it covers every logger that reaches the handler, including
    librdkafka's messages routed to Python logging and Spark's Python-side logs.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = sorted(set(secrets), key=len, reverse=True)

    def add(self, secrets: Iterable[str]) -> None:
        """Also mask ``secrets``."""
        self.secrets = sorted(set(self.secrets) | set(secrets), key=len, reverse=True)

    def scrub(self, text: str) -> str:
        """``text`` without any known secret."""
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        """Mask secrets in the record's final message (arguments merged in)."""
        if not self.secrets:
            return True
        message = record.getMessage()
        clean = self.scrub(message)
        if clean != message or record.exc_info or record.exc_text:
            record.msg, record.args = clean, None
            if record.exc_info and not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            if record.exc_text:
                record.exc_text = self.scrub(record.exc_text)
        return True
