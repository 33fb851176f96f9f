"""``mcp-resili model-server``: the scripted agents behind the OpenAI and Anthropic model APIs.

Like a real model it is stateless: each request is read back into a conversation (`conversation`),
the task is recognised from its prompt (`recognise`), the scripted agent the ``model`` field names
(``scripted:oracle`` or ``oracle``, every suite's own agents too) decides the next turn, and the turn
goes back in the API's exact form (`mcp_resili.modelapi.render`), whole or streamed, with
deterministic token usage (`tokens`). Routes: ``POST /v1/chat/completions``, ``POST /v1/messages``,
``POST /v1/messages/count_tokens``, ``GET /v1/models``. Refusals are the API's own error shapes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
from collections.abc import Callable, Mapping

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from mcp_resili.agents.model import Model, ModelRequest, ModelResponse, ToolResultsMessage
from mcp_resili.agents.scripted import SCRIPTED_AGENTS
from mcp_resili.constants import DISCOVERY_TOOLS, EPISODE_HEADER, FINISH_TOOL
from mcp_resili.modelapi.formats import Api, ApiError, api_error, bad_request
from mcp_resili.modelapi.render import Answer, Stop, WireToolCall, render, render_stream, words
from mcp_resili.modelserver.conversation import (
    Conversation,
    NameBridge,
    RequestError,
    asks_for_reflection,
    read_anthropic,
    read_memory,
    read_openai,
    with_mcp_names,
)
from mcp_resili.modelserver.recognise import TASK_HEADER, KnownTask, TaskIndex, TaskNotRecognisedError
from mcp_resili.modelserver.tokens import count_tokens, input_tokens, output_tokens
from mcp_resili.registry.suites import Suite

logger = logging.getLogger(__name__)

#: The ``model`` prefix of scripted agents (the name alone is accepted too).
SCRIPTED = "scripted:"
_CALL_ID = re.compile(r"[^A-Za-z0-9_-]")


class ModelServer:
    """The app and what it keeps between requests: the task index and the agents (both stateless).

    ``suites`` are handed down by the top (the ``model-server`` command: every installed suite); their
    tasks are what prompts are recognised against, their scripted agents what it serves.
    """

    def __init__(
        self, suites: Mapping[str, Suite], index: TaskIndex | None = None, token: str | None = None
    ) -> None:
        self.index = index if index is not None else TaskIndex(suites=dict(suites))
        self._factories: dict[str, Callable[[], Model]] = dict(SCRIPTED_AGENTS)
        for suite in suites.values():
            for name, factory in suite.agents.items():
                self._factories.setdefault(name, factory)
        self._token = token.encode() if token else None
        self._agents: dict[str, Model] = {}
        self._tool_names: dict[str, tuple[str, ...]] = {}
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )

    def prepare(self) -> None:
        """Index every suite's default tasks now (else the first request does)."""
        self.index.prepare()

    async def _chat(self, request: Request) -> Response:
        return await self._complete(request, "openai")

    async def _messages(self, request: Request) -> Response:
        return await self._complete(request, "anthropic")

    def _refused(self, request: Request, api: Api) -> Response | None:
        """401 when the server has a token and the request does not carry it."""
        if self._token is None:
            return None
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        offered = given.strip() if scheme.lower() == "bearer" else request.headers.get("x-api-key", "")
        if hmac.compare_digest(offered.encode(), self._token):
            return None
        message = "Incorrect API key provided." if api == "openai" else "invalid x-api-key"
        code = "invalid_api_key" if api == "openai" else None
        return _error(api_error(api, 401, message, key="auth", code=code))

    async def _complete(self, request: Request, api: Api) -> Response:
        refused = self._refused(request, api)
        if refused is not None:
            return refused
        raw = await request.body()
        key = hashlib.blake2b(raw, digest_size=12).hexdigest()
        try:
            body = json.loads(raw)
        except ValueError as exc:
            return _error(
                bad_request(api, f"We could not parse the JSON body of your request: {exc}", key=key)
            )
        try:
            conversation = read_openai(body) if api == "openai" else read_anthropic(body)
        except RequestError as exc:
            return _error(bad_request(api, str(exc), key=key, param=exc.param))
        agent = self._agent(conversation.model)
        if agent is None:
            return _error(_unknown_model(api, conversation.model, key))
        try:
            known = self._task(request, conversation)
        except TaskNotRecognisedError as exc:
            return _error(bad_request(api, str(exc), key=key))
        model_request, bridge = self._model_request(conversation, known)
        try:
            response = _after_finish(model_request) or await agent.generate(model_request)
        except ValueError as exc:  # the agent cannot play this task (another suite's agent...)
            return _error(bad_request(api, f"{conversation.model}: {exc}", key=key, param="model"))
        except Exception as exc:  # a bug in an agent: one line, never a traceback on the wire
            logger.warning("scripted agent %s failed: %r", conversation.model, exc)
            message = f"the scripted agent failed: {type(exc).__name__}: {exc}"
            return _error(api_error(api, 500, message, key=key, openai_type="server_error"))
        answer = _answer(api, conversation, response, bridge, key)
        headers = {"x-request-id" if api == "openai" else "request-id": f"req_{key}"}
        if not conversation.stream:
            return JSONResponse(render(api, answer), headers=headers)
        events = render_stream(api, answer, include_usage=conversation.include_usage)
        return StreamingResponse(
            events, media_type="text/event-stream", headers={**headers, "cache-control": "no-cache"}
        )

    def _agent(self, model: str) -> Model | None:
        name = model[len(SCRIPTED) :] if model.startswith(SCRIPTED) else model
        if name not in self._agents:
            factory = self._factories.get(name)
            if factory is None:
                return None
            self._agents[name] = factory()
        return self._agents[name]

    def _task(self, request: Request, conversation: Conversation) -> KnownTask:
        """The task named by a header, else the one whose prompt the conversation holds."""
        named = request.headers.get(TASK_HEADER)
        if named:
            return self.index.named(named.strip())
        episode = request.headers.get(EPISODE_HEADER, "")
        if episode.lstrip().startswith("{"):
            try:
                task = json.loads(episode).get("task")
            except (ValueError, AttributeError):
                task = None
            if isinstance(task, str) and task:
                return self.index.named(task)
        return self.index.recognise(conversation.texts)

    def _model_request(self, conversation: Conversation, known: KnownTask) -> tuple[ModelRequest, NameBridge]:
        offered = [t.name for t in conversation.tools]
        offered += [c.name for m in conversation.messages for c in getattr(m, "tool_calls", ())]
        bridge = NameBridge(offered, self._known_tools(known))
        tools, messages = with_mcp_names(conversation, bridge)
        first = next((t for t in conversation.texts[1:2]), "")
        request = ModelRequest(
            messages=messages,
            tools=tools,
            system=conversation.system or None,
            task=known.task,
            max_turns=known.task.constraints.max_turns,
            purpose="reflect" if asks_for_reflection(messages) else "act",
            memory=read_memory(first),
        )
        return request, bridge

    def _known_tools(self, known: KnownTask) -> tuple[str, ...]:
        if known.suite not in self._tool_names:
            library = self.index.suites[known.suite].library
            self._tool_names[known.suite] = (*(spec.name for spec in library), FINISH_TOOL, *DISCOVERY_TOOLS)
        return self._tool_names[known.suite]

    async def _count_tokens(self, request: Request) -> Response:
        refused = self._refused(request, "anthropic")
        if refused is not None:
            return refused
        raw = await request.body()
        key = hashlib.blake2b(raw, digest_size=12).hexdigest()
        try:
            body = json.loads(raw)
            if isinstance(body, dict):
                body = {"max_tokens": 1, **body}
            conversation = read_anthropic(body)
        except ValueError as exc:
            return _error(bad_request("anthropic", str(exc), key=key, param=getattr(exc, "param", None)))
        tokens = input_tokens(conversation.system, conversation.messages, conversation.tools)
        return JSONResponse({"input_tokens": tokens})

    async def _models(self, request: Request) -> Response:
        refused = self._refused(request, "anthropic" if "anthropic-version" in request.headers else "openai")
        if refused is not None:
            return refused
        names = [f"{SCRIPTED}{name}" for name in sorted(self._factories)]
        data = [
            {
                "id": name,
                "object": "model",
                "created": 0,
                "owned_by": "mcp-resili",
                "type": "model",
                "display_name": name,
                "created_at": "1970-01-01T00:00:00Z",
            }
            for name in names
        ]
        return JSONResponse(
            {"object": "list", "data": data, "has_more": False, "first_id": names[0], "last_id": names[-1]}
        )


def _after_finish(request: ModelRequest) -> ModelResponse | None:
    """The closing words once the agent's ``finish`` call was accepted (None: the agent plays on).

    A framework's loop asks its model again after every tool result and stops at an answer in text;
    our loop stops at ``finish`` itself. Answered this way, both end the episode at the same point.
    """
    last = request.messages[-1] if request.messages else None
    if not isinstance(last, ToolResultsMessage):
        return None
    for result in last.results:
        if result.name == FINISH_TOOL and not result.is_error:
            return ModelResponse(text="The episode is over: finish was called and accepted.")
    return None


def _error(error: ApiError) -> Response:
    return Response(
        error.body, status_code=error.status, headers=dict(error.headers), media_type="application/json"
    )


def _unknown_model(api: Api, model: str, key: str) -> ApiError:
    if api == "openai":
        message = f"The model `{model}` does not exist or you do not have access to it."
        return api_error(api, 404, message, key=key, code="model_not_found")
    return api_error(api, 404, f"model: {model}", key=key)


def _answer(
    api: Api,
    conversation: Conversation,
    response: ModelResponse,
    bridge: NameBridge,
    key: str,
) -> Answer:
    """The agent's turn as the API's answer; an answer over the request's output budget is cut."""
    calls = tuple(
        WireToolCall(_CALL_ID.sub("_", c.id) or "call", bridge.provider(c.name), json.dumps(c.arguments))
        for c in response.tool_calls
    )
    spent = output_tokens(response)
    text = response.text
    stop: Stop = "tool_calls" if calls else "end"
    budget = conversation.max_output
    if budget is not None and spent > budget:
        # Out of tokens, as a real model: the text so far, no tool call (it was never finished).
        kept: list[str] = []
        for piece in words(text):
            if count_tokens("".join([*kept, piece])) > budget:
                break
            kept.append(piece)
        text, calls, stop, spent = "".join(kept), (), "max_tokens", budget
    return Answer(
        id=f"chatcmpl-{key}" if api == "openai" else f"msg_{key}",
        model=conversation.model,
        text=text,
        tool_calls=calls,
        stop=stop,
        input_tokens=input_tokens(conversation.system, conversation.messages, conversation.tools),
        output_tokens=spent,
    )
