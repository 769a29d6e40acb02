"""The identity service's settings: where its Fernet keys are, how long a token lives.

From the environment (``novakit serve`` sets them for its workers): ``NOVAKIT_FERNET_KEYS``
(default: ``fernet-keys`` in the state directory), ``NOVAKIT_TOKEN_EXPIRATION`` (seconds,
default 3600, Keystone's ``[token] expiration``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from novakit import exceptions
from novakit.config import Config

KEYS_ENV = "NOVAKIT_FERNET_KEYS"
EXPIRATION_ENV = "NOVAKIT_TOKEN_EXPIRATION"
DEFAULT_EXPIRATION = 3600


@dataclass(frozen=True)
class IdentitySettings:
    key_repository: Path
    token_expiration: int = DEFAULT_EXPIRATION

    @classmethod
    def from_env(cls, conf: Config, key_repository: Path | None = None) -> IdentitySettings:
        keys = key_repository or Path(os.environ.get(KEYS_ENV) or conf.state_dir / "fernet-keys")
        raw = os.environ.get(EXPIRATION_ENV) or str(DEFAULT_EXPIRATION)
        try:
            expiration = int(raw)
        except ValueError:
            expiration = 0
        if expiration < 1:
            reason = "must be a whole number of seconds, at least 1"
            raise exceptions.ConfigError(option=EXPIRATION_ENV, reason=reason)
        return cls(keys, expiration)
