"""The routes of `evokernel serve`: the page, its assets, and a JSON API that gives what the `--json` commands print.

Views open the run read-only for each request (a live run is read as it is written, a stopped or resumed one as it
is); the page polls `/stamp`, which costs a few `stat` calls, and reads the rest only when the stamp changes.
Actions (POST) are in `evokernel.web.actions`.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from importlib import resources
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from evokernel.errors import BadInput
from evokernel.lineage import Lineage, find_runs
from evokernel.output import jsonable
from evokernel.store import DB_NAME, driver_running, inbox, prompt_box
from evokernel.web.actions import Refused, action_routes
from evokernel.web.served import ServedRuns, UnknownRun

ASSETS = resources.files("evokernel") / "report_assets"
# the files the page loads; nothing else under the package is served
SERVED_ASSETS = {"report.css": "text/css", "report.js": "text/javascript", "live.js": "text/javascript"}
GRAPH_LIMIT = 400  # kernels drawn in the live lineage graph; beyond, the paths to the best GRAPH_TOP
GRAPH_TOP = 20
HEATMAP_TOP = 10
SECURITY_HEADERS = {"Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                                               "frame-ancestors 'none'",
                    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}


def stamp(run_dir: Path) -> str:
    """Changes whenever anything the page shows may have changed: the database and its WAL, the folders people
    drop questions and answers into, the driver's lock (a run stopped, killed or resumed)."""
    parts = []
    for name in (DB_NAME, f"{DB_NAME}-wal", inbox.INBOX_NAME, prompt_box.ANSWERS_DIR, prompt_box.PROMPTS_DIR):
        try:
            info = os.stat(run_dir / name)
            parts.append(f"{info.st_mtime_ns}:{info.st_size}")
        except OSError:
            parts.append("-")
    return "|".join([*parts, "running" if driver_running(run_dir) else "idle"])


def live_charts(run: Lineage) -> dict:
    """The report's chart data for the page: the graph holds every kernel while the run is small enough to draw."""
    from evokernel.report import chart_data

    ids = set(run.individuals)
    if len(ids) > GRAPH_LIMIT:
        ids = set().union(*(run.ancestors(t.id) for t in run.top(GRAPH_TOP)))
    return chart_data(run, run.top(HEATMAP_TOP), ids)


def run_document(run: Lineage, bank_dir: Path | None) -> dict:
    """Everything the page shows about a run besides single kernels, each part as its `--json` command gives it
    (`runs`, `ask --list`, `prompts --all`, `bank stats`) or as the report embeds it (the charts)."""
    from evokernel.bank.proposed_questions import review_status, reviewable_questions
    from evokernel.lineage.documents import asked_documents, prompt_documents
    from evokernel.lineage.statistics import (failures, llm_cost, proposal_failures, questions_over_runs,
                                              run_summary)

    review = reviewable_questions(run.store)
    status = review_status(review, bank_dir)
    return {"summary": asdict(run_summary(run)), "reference": run.speed_reference.words, "charts": live_charts(run),
            "asked": asked_documents(run), "prompts": prompt_documents(run, show_all=True),
            "review": [{**row, "status": status[row["id"]]} for row in review], "bank_dir": bank_dir,
            "failures": failures(run), "proposal_failures": proposal_failures(run),
            "cost": {"total_usd": run.store.total_cost(), "models": llm_cost(run), "failed": run.store.llm_failures()},
            "bank_stats": questions_over_runs([run.run_dir])}


def make_app(served: ServedRuns, token: str, bank_dir: Path | None = None,
             allowed_hosts: list[str] | None = None) -> Starlette:
    """The web application; `token` guards every action, `allowed_hosts` the Host header (None: any host)."""

    def with_run(view):
        """A view of one run: opened read-only for the request, closed after."""

        def endpoint(request: Request) -> Response:
            with Lineage(served.run_dir(request.path_params["run"])) as run:
                return JSONResponse(jsonable(view(run, request)))

        return endpoint

    def page(request: Request) -> Response:
        if "run" in request.path_params:
            served.run_dir(request.path_params["run"])
        return HTMLResponse((ASSETS / "live.html").read_text())

    def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in SERVED_ASSETS:
            return JSONResponse({"error": f"no asset '{name}'"}, status_code=404)
        return Response((ASSETS / name).read_text(), media_type=SERVED_ASSETS[name])

    def runs(request: Request) -> Response:
        found = find_runs(served.root / served.only if served.only else served.root)
        return JSONResponse(jsonable({"runs": [asdict(s) for s in found], "only": served.only}))

    def run_stamp(request: Request) -> Response:
        return JSONResponse({"stamp": stamp(served.run_dir(request.path_params["run"]))})

    def tree(run: Lineage, request: Request) -> list:
        from evokernel.lineage.documents import select_trees, tree_document

        trees, stars = select_trees(run)
        return [tree_document(run, node, None, stars) for node in trees]

    def kernel(run: Lineage, request: Request) -> dict:
        from evokernel.lineage.documents import kernel_document

        return kernel_document(run, request.path_params["kernel"])

    def prompt(run: Lineage, request: Request) -> dict:
        found = run.store.prompt(request.path_params["prompt"]) if prompt_box.PROMPT_ID.match(
            request.path_params["prompt"]) else None
        if found is None:
            raise BadInput(f"{request.path_params['prompt']} is not a prompt of run {run.name}")
        return asdict(found)

    async def refused(request: Request, exc: Exception) -> Response:
        status = exc.status if isinstance(exc, Refused) else 404 if isinstance(exc, UnknownRun) else 400
        return JSONResponse({"error": str(exc)}, status_code=status)

    async def security_headers(request: Request, call_next) -> Response:
        response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    routes = [Route("/", page), Route("/runs/{run}", page), Route("/assets/{name}", asset),
              Route("/api/runs", runs), Route("/api/runs/{run}/stamp", run_stamp),
              Route("/api/runs/{run}", with_run(lambda run, request: run_document(run, bank_dir))),
              Route("/api/runs/{run}/lineage", with_run(tree)),
              Route("/api/runs/{run}/kernels/{kernel:int}", with_run(kernel)),
              Route("/api/runs/{run}/prompts/{prompt}", with_run(prompt)),
              *action_routes(served, token, bank_dir)]
    middleware = [Middleware(BaseHTTPMiddleware, dispatch=security_headers)]
    if allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts))
    return Starlette(routes=routes, middleware=middleware,
                     exception_handlers={BadInput: refused, Refused: refused})
