"""The lineage store of one run: an embedded SQLite database plus content-addressed sources.

Layout of a run directory:
    runs/<id>/lineage.db        individuals, scenario results, LLM calls, trigger events, questions
    runs/<id>/sources/<sha>.cu  every kernel source, named by the hash of its text
    runs/<id>/config.yaml       the config the run was started with
    runs/<id>/driver.lock       held by the one driver that writes the run
    runs/<id>/questions/        questions people asked (`evokernel ask`) that the driver has not taken yet
    runs/<id>/prompts/ID.md     prompts of the `files` model; runs/<id>/answers/ID.md: their answers
    runs/<id>/notes/ID/         notes on kernel ID (`evokernel note`: measurements, remarks), shown in its prompts
Rows are written as results arrive (WAL mode), so a reader can inspect a live run.

Modules: `schema` (tables, schema version and migrations, checks of a database file), `records` (rows as
values), `database` (`Store`: reads and writes), `runs` (finding and opening runs, the
driver's lock), `inbox` (the queue of questions people ask a run), `prompt_box` (the files model's prompts and
answers), `kernel_notes` (notes on kernels that prompts show). Their public names are importable from `evokernel.store`.
"""

from evokernel.store.database import Store
from evokernel.store.kernel_notes import KernelNote, add_note, kernel_notes
from evokernel.store.records import (PROMPT_STATUSES, STATUSES, HumanQuestion, Individual, LLMCall, OpenPrompt, Outcome,
                                     ProposalFailure)
from evokernel.store.runs import (DEFAULT_RUNS, RunLock, driver_running, iter_runs, open_readonly, resolve_run,
                                  run_status)
from evokernel.store.schema import DB_NAME, SCHEMA_VERSION, DamagedDatabase

__all__ = ["DB_NAME", "DEFAULT_RUNS", "PROMPT_STATUSES", "KernelNote", "add_note", "kernel_notes", "SCHEMA_VERSION", "STATUSES", "DamagedDatabase", "HumanQuestion",
           "Individual", "LLMCall", "OpenPrompt", "Outcome", "ProposalFailure", "RunLock", "Store", "driver_running", "run_status",
           "iter_runs", "open_readonly", "resolve_run"]
