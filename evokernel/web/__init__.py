"""The live page of `evokernel serve`: watch runs as they are written and steer them from a browser.

Modules: `served` (which runs a server shows; run ids from URLs), `app` (the routes: the page, its assets, the JSON
API), `actions` (asking, answering, accepting into a bank; the token), `server` (the socket, the token, uvicorn).
The page's front end is the report's (`evokernel/report_assets/`): the same charts and styles, with `live.js`.
"""

from evokernel.web.served import ServedRuns
from evokernel.web.server import Server

__all__ = ["ServedRuns", "Server"]
