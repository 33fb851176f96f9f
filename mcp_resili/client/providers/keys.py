"""Where API keys come from (the environment, nowhere else) and how they are kept out of messages."""

from __future__ import annotations

import os
import re

#: The environment variable each provider reads its key from. Keys are never taken from flags or files,
#: so they never reach a stored config, a trace or a log line.
API_KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
#: Key-shaped tokens providers echo in error messages (OpenAI's 401 names a masked key, for one).
_KEY_SHAPED = re.compile(r"\bsk-[A-Za-z0-9*_\-]{6,}")


def redact(text: str) -> str:
    """``text`` with every configured API key, and anything shaped like one, replaced."""
    for variable in API_KEY_ENV.values():
        key = os.environ.get(variable, "")
        if len(key) >= 6:
            text = text.replace(key, "[redacted]")
    return _KEY_SHAPED.sub("[redacted]", text)
