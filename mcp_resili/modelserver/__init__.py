"""The scripted agents behind the OpenAI and Anthropic model APIs (``mcp-resili model-server``).

`app` (the HTTP app), `conversation` (a request read back into our conversation, tool names both
ways), `recognise` (which task a prompt belongs to), `tokens` (deterministic token counts).
"""

from mcp_resili.modelserver.app import ModelServer
from mcp_resili.modelserver.recognise import TASK_HEADER, TaskIndex, TaskNotRecognisedError

__all__ = ["TASK_HEADER", "ModelServer", "TaskIndex", "TaskNotRecognisedError"]
