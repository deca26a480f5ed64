"""What a person does to a run from the page: ask it a question, answer an open prompt of the `files` model, accept
a question it offers into a bank. Each goes through the function the command line calls (`evokernel ask`,
`evokernel answer`, `evokernel bank review --accept`), so it lands in the same place.

Every action needs the server's token (sent by the page as the X-Evokernel-Token header): missing is 401, wrong
is 403, and nothing is written. A custom header also keeps other sites' pages from posting here (a browser only
sends one cross-site after a CORS check this server never passes).
"""

from __future__ import annotations

import hmac
import json
from pathlib import Path
from typing import Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from evokernel.errors import BadInput
from evokernel.output import jsonable
from evokernel.web.served import ServedRuns

TOKEN_HEADER = "X-Evokernel-Token"
MAX_BODY = 4 * 1024 * 1024  # an answer is a kernel source: a few hundred KiB at most


class Refused(Exception):
    """An action refused before it ran (no or wrong token, a body that is not JSON): `status` is the HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def check_token(request: Request, token: str) -> None:
    given = request.headers.get(TOKEN_HEADER)
    if not given:
        raise Refused(401, "this action needs the server's token: open the page from the address evokernel serve "
                           "printed (it ends in #token=...)")
    if not hmac.compare_digest(given.encode(), token.encode()):
        raise Refused(403, "wrong token: it changes every time evokernel serve starts; open the page from the address "
                           "the running server printed")


async def _body(request: Request) -> dict:
    data = await request.body()
    if len(data) > MAX_BODY:
        raise Refused(413, f"the request is larger than {MAX_BODY // (1024 * 1024)} MiB")
    try:
        body = json.loads(data or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise Refused(400, "the request's body is not JSON") from None
    if not isinstance(body, dict):
        raise Refused(400, "the request's body is not a JSON object")
    return body


def _text(body: dict, name: str, default: str | None = None) -> str | None:
    value = body.get(name, default)
    if value is not None and not isinstance(value, (str, int)):
        raise Refused(400, f"'{name}' must be text")
    return None if value is None else str(value)


def _layers(body: dict) -> list[str]:
    layers = body.get("layers") or []
    if not isinstance(layers, list) or not all(isinstance(layer, str) for layer in layers):
        raise Refused(400, "'layers' must be a list of layer names")
    return layers


def ask(run_dir: Path, body: dict, bank_dir: Path | None) -> dict:
    from evokernel.steering import queue_question

    receipt = queue_question(run_dir, _text(body, "question") or "", _text(body, "target", "best"),
                             _text(body, "times", "1"), _layers(body))
    return {"id": receipt.id, "file": receipt.path, "message": receipt.message, "notes": receipt.notes}


def answer(run_dir: Path, body: dict, bank_dir: Path | None, prompt_id: str) -> dict:
    from evokernel.steering import answer_prompt

    receipt = answer_prompt(run_dir, prompt_id, _text(body, "answer") or "", (_text(body, "by") or "").strip() or None)
    return {"id": receipt.id, "file": receipt.path, "message": receipt.message}


def accept(run_dir: Path, body: dict, bank_dir: Path | None, question_id: str) -> dict:
    from evokernel.bank import review_proposed
    from evokernel.store import open_readonly

    if bank_dir is None:
        raise BadInput("this server has no bank to accept questions into: start it with evokernel serve --bank DIR "
                       f"(or run evokernel bank review {run_dir} --accept {question_id} --bank DIR)")
    with open_readonly(run_dir) as store:
        path = review_proposed(store, question_id, True, bank_dir, _layers(body))
    return {"id": question_id, "file": path, "message": f"accepted {question_id} into {path}"}


def action_routes(served: ServedRuns, token: str, bank_dir: Path | None) -> list[Route]:
    """The POST routes, each checking the token before anything else is read."""

    def route(path: str, action: Callable[..., dict], *names: str) -> Route:
        async def endpoint(request: Request) -> Response:
            check_token(request, token)
            run_dir = served.run_dir(request.path_params["run"])
            body = await _body(request)
            done = await run_in_threadpool(action, run_dir, body, bank_dir,
                                           *(request.path_params[name] for name in names))
            return JSONResponse(jsonable(done))

        return Route(path, endpoint, methods=["POST"])

    return [route("/api/runs/{run}/ask", ask),
            route("/api/runs/{run}/prompts/{prompt}/answer", answer, "prompt"),
            route("/api/runs/{run}/review/{question}/accept", accept, "question")]
