"""What ends a search: its budgets (evaluations, wall time, USD), and the reason it gives at the end."""

from __future__ import annotations

from evokernel.config import BudgetConfig


def time_or_money_spent(budget: BudgetConfig, elapsed_s: float, cost_usd: float | None) -> str | None:
    """Why nothing more may be proposed or submitted (queued kernels wait for a resume); None while the
    wall-time and USD budgets last. `cost_usd` None: no LLM, no money spent."""
    if budget.wall_time_s is not None and elapsed_s >= budget.wall_time_s:
        return f"wall-time budget of {budget.wall_time_s:g} s reached"
    if budget.usd is not None and cost_usd is not None and cost_usd >= budget.usd:
        return f"USD budget of {budget.usd:g} reached"
    return None


def end_reason(budget: BudgetConfig, evaluations: int, population: int) -> str:
    """Why a search that ran out of work ended."""
    if not population:
        return "no kernel passed the harness (not even a seed)"
    if budget.evaluations is not None and evaluations >= budget.evaluations:
        return f"evaluation budget of {budget.evaluations} reached"
    return "nothing left to evaluate"
