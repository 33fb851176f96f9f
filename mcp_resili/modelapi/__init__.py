"""The model API on the wire: OpenAI Chat Completions and Anthropic Messages, and the fault gateway.

`formats` (which API a request speaks, each vendor's error shape, SSE events), `render` (an answer in
either API's exact form, whole or streamed), `tamper` (what stream and content faults do to an answer),
`ledger` (episodes, model-call ordinals, trace files), `gateway` (``mcp-resili llm-proxy``: any
compatible endpoint with faults, served on aiohttp), `hosting` (sockets; uvicorn for the model server).
The faults themselves are data in `mcp_resili.faults.model_api`.
"""

from mcp_resili.modelapi.gateway import TOKEN_HEADER, GatewaySettings, ModelGateway, upstream_url
from mcp_resili.modelapi.hosting import bind, serve_app
from mcp_resili.modelapi.ledger import TRACE_SUFFIX, read_model_events

__all__ = [
    "TOKEN_HEADER",
    "TRACE_SUFFIX",
    "GatewaySettings",
    "ModelGateway",
    "bind",
    "read_model_events",
    "serve_app",
    "upstream_url",
]
