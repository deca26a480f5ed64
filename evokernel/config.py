"""Run configuration (`experiments/<name>/config.yaml`), validated with errors that name the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from evokernel.errors import BadInput, read_yaml


# Bounds beyond which a setting is a mistake (and would fail later, far from its cause).
MAX_TRIALS = 20  # as `evokernel check --trials`
MAX_EVALUATION_TIMEOUT_S = 86_400.0
MAX_CPUS_PER_EVALUATION = 1024
MAX_GPUS_PER_EVALUATION = 64
MAX_PARALLEL = 1024


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SelectionConfig(Strict):
    tournament_size: int = Field(3, ge=1, le=1000)
    elitism: int = Field(2, ge=0, description="best individuals always kept in the population")
    islands: int = Field(1, ge=1, le=1000)
    migration_interval: int = Field(20, ge=1, description="evaluations between migrations")
    migrants: int = Field(1, ge=1)


class OperatorSettings(RootModel[dict[str, Any]]):
    """Operator name -> the weight of its proposals, or a mapping of its weight and options
    (`repair: {weight: 1, max_attempts: 3}`): any registered operator (`evokernel.mutations`), each option
    checked against what that operator declares; operators a config does not name keep their registered
    default weight, and options it does not set their declared defaults."""

    root: dict[str, Any] = Field(default_factory=dict)
    model_config = ConfigDict(validate_default=True)

    @field_validator("root")
    @classmethod
    def _registered(cls, given: dict[str, Any]) -> dict[str, dict[str, Any]]:
        from evokernel.mutations import registered_operators

        known = registered_operators()
        for name in given:
            if name not in known:
                raise PydanticCustomError("unknown_operator", "unknown operator '{name}' (known: {known})",
                                          {"name": name, "known": ", ".join(sorted(known))})
        return {name: _operator_setting(registration, given.get(name, registration.default_weight))
                for name, registration in known.items()}

    def as_dict(self) -> dict[str, float]:
        """Operator name -> weight."""
        return {name: setting["weight"] for name, setting in self.root.items()}

    def options(self, name: str) -> dict[str, Any]:
        """An operator's option values (its declared defaults where the config sets none)."""
        return {key: value for key, value in self.root.get(name, {}).items() if key != "weight"}


def _operator_setting(registration, value: Any) -> dict[str, Any]:
    """One operator's entry as {weight, every option}; an error naming the field (`operators.NAME.OPTION`)."""
    def refuse(field: str, text: str) -> PydanticCustomError:
        return PydanticCustomError("operator_setting", "{text}", {"text": text, "field": f"operators.{field}"})

    name = registration.name
    setting = dict(value) if isinstance(value, dict) else {"weight": value}
    weight = setting.pop("weight", registration.default_weight)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
        raise refuse(name, f"weight {weight!r} is not a number >= 0")
    declared = {option.name: option for option in registration.options}
    for key, given in setting.items():
        if key not in declared:
            raise refuse(name, f"no option '{key}' (it takes: {', '.join(['weight', *declared])})")
        problem = declared[key].problem(given)
        if problem:
            raise refuse(f"{name}.{key}", f"{problem} ({declared[key].meaning})")
    return {"weight": float(weight), **{key: setting.get(key, option.default) for key, option in declared.items()}}


class ModelConfig(Strict):
    model: str = Field(description="any litellm model string (e.g. openai/gpt-4o, anthropic/claude-...); "
                       "'cmd:COMMAND LINE' for a command that answers on stdout; 'files' for answers given as files")
    weight: float = Field(1.0, gt=0)
    api_base: str | None = None
    api_key_env: str | None = Field(None, description="environment variable holding the API key (default: litellm's)")
    usd_per_mtok_in: float | None = Field(None, ge=0, description="USD per million prompt tokens (over litellm's price)")
    usd_per_mtok_out: float | None = Field(None, ge=0, description="USD per million completion tokens (with _in)")

    @model_validator(mode="after")
    def _both_prices(self) -> "ModelConfig":
        if (self.usd_per_mtok_in is None) != (self.usd_per_mtok_out is None):
            raise ValueError("give both usd_per_mtok_in and usd_per_mtok_out, or neither")
        if self.model.startswith("cmd:"):
            from evokernel.mutations.command_model import command_line

            try:
                command_line(self.model)
            except BadInput as exc:
                raise ValueError(str(exc)) from None
        return self

    @property
    def priced(self) -> bool:
        return self.usd_per_mtok_in is not None


class LLMConfig(Strict):
    models: list[ModelConfig] = Field(default_factory=list)
    fallbacks: list[str] = Field(default_factory=list, description="models tried when the chosen one fails")
    temperature: float = Field(0.7, ge=0, le=2)
    max_tokens: int = Field(8192, ge=256)
    timeout_s: float = Field(300, gt=0)
    max_retries: int = Field(3, ge=0, description="retries of a transient failure (rate limit, connection, server "
                             "error) per model, by litellm; a wrong key, model or request and a timeout are not")
    max_concurrent: int = Field(4, ge=1, description="LLM proposals in flight at once")
    cache: bool = Field(True, description="cache answers by question (model, operator, question id, parent "
                        "sources, prompt version) in the run directory; a resumed run takes them before asking")
    cache_dir: Path | None = Field(None, description="answer cache directory (default: <run>/llm_cache); an "
                                   "earlier run's cache answers first, a model is asked on a miss")
    retry_backoff_s: float = Field(2.0, ge=0, description="0: retry at once; otherwise litellm's exponential "
                                   "backoff between retries (1 s, doubling, at most 10 s)")
    max_consecutive_failures: int = Field(5, ge=1, description="calls in a row failed on every model that stop the "
                                          "question operators for the rest of the session (knob operators go on)")
    replay_from: Path | None = Field(None, description="a run directory whose recorded answers answer this run's "
                                     "questions, without any network (`evokernel run --replay RUN_DIR`)")
    max_open_prompts: int = Field(4, ge=1, le=1000, description="model 'files': prompts waiting for an answer at "
                                  "once; at the cap no more are written (the other operators go on)")
    answer_wait_s: float = Field(0, ge=0, le=MAX_EVALUATION_TIMEOUT_S, description="model 'files': seconds a run "
                                 "with nothing left to do but open prompts waits for their answers before it stops "
                                 "(0: it stops at once; --resume takes the answers given meanwhile)")


class BankConfig(Strict):
    builtin: bool = True
    dirs: list[Path] = Field(default_factory=list, description="directories of user question YAML files")
    stats_from: list[Path] = Field(default_factory=list, description="earlier runs whose question stats seed the bandit")


class TriggerConfig(Strict):
    stagnation_evaluations: int = Field(12, ge=1, description="evaluations without a new best that count as a stall")
    suspicious_gain: float = Field(1.5, gt=1, description="child/parent speedup ratio that counts as suspicious")
    recheck_trials: int = Field(5, ge=1, le=20, description="extra seeds for the re-check of a suspicious gain")
    propose_questions: bool = True


class BudgetConfig(Strict):
    evaluations: int | None = Field(40, ge=1)
    wall_time_s: float | None = Field(None, gt=0)
    usd: float | None = Field(None, ge=0)


class ResourceConfig(Strict):
    address: str | None = Field(None, description="Ray address ('auto' for an existing cluster); none starts a local one")
    gpus_per_evaluation: float = Field(1.0, ge=0, le=MAX_GPUS_PER_EVALUATION)
    cpus_per_evaluation: float = Field(1.0, gt=0, le=MAX_CPUS_PER_EVALUATION, description="at most what the Ray "
                                       "cluster has (checked when the run starts)")
    max_parallel: int | None = Field(None, ge=1, le=MAX_PARALLEL, description="evaluations in flight (default: what "
                                     "the cluster fits; more than its CPUs hold is refused when the run starts)")
    evaluation_timeout_s: float = Field(900, gt=0, le=MAX_EVALUATION_TIMEOUT_S, description="seconds one evaluation "
                                        "may take (at most a day)")
    evaluator: Literal["ray", "local", "replay"] = Field("ray", description="what runs the checks: ray (actors on "
                                                       "the Ray cluster), local (threads of the driver, no Ray), "
                                                       "replay (recorded reports, no harness)")
    replay_evaluations: Path | None = Field(None, description="evaluator replay: a run directory, or a directory of "
                                            "kernels beside their `evokernel check --json` reports (k1.cu, k1.json)")

    @model_validator(mode="after")
    def _replay_has_reports(self) -> "ResourceConfig":
        if (self.evaluator == "replay") != (self.replay_evaluations is not None):
            raise PydanticCustomError("replay_evaluations", "evaluator 'replay' needs replay_evaluations (the reports "
                                      "it serves), and only it takes them")
        return self


class RunConfig(Strict):
    name: str = "run"
    task: str = Field(description="a built-in task's name, or a task directory (relative to the config file)")
    scenarios: str = "quick"
    speed_reference: str | None = Field(None, description="'original', a library baseline of the task or a kernel "
                                        "file (default: the original; a task without one: its first baseline)")
    seeds: list[Path] = Field(default_factory=list, description="seed kernels (default: the task's original)")
    population_size: int = Field(8, ge=2, le=100_000)
    offspring_per_step: int = Field(1, ge=1, le=100, description="children proposed per finished evaluation")
    trials: int = Field(3, ge=1, le=MAX_TRIALS, description="random inputs per scenario (as `check --trials`)")
    reference_reuse_s: float | None = Field(300, ge=0, le=86_400, description="screen a child alone against the speed "
                                            "reference's times from an interleaved check on the same GPU at most this "
                                            "many seconds old; a child near the best is timed interleaved after all "
                                            "(none: every child interleaved)")
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    operators: OperatorSettings = Field(default_factory=OperatorSettings)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    bank: BankConfig = Field(default_factory=BankConfig)
    triggers: TriggerConfig = Field(default_factory=TriggerConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    resources: ResourceConfig = Field(default_factory=ResourceConfig)
    random_seed: int = Field(0, ge=0, lt=2**63, description="seed of the search's random choices")

    @model_validator(mode="after")
    def _check_task(self) -> "RunConfig":
        from evokernel.harness import get_task

        task = get_task(self.task)  # BadInput names the known tasks
        task.scenarios(self.scenarios)
        return self


def _field_path(location: tuple) -> str:
    return ".".join(str(part) for part in location) or "(top level)"


def _is_task_dir_spelling(task: str, base_dir: Path) -> bool:
    """Whether a config's `task` names a directory (relative to the config) rather than a built-in task: a path
    spelling (`./t`, `a/b`), or a bare name that is a task directory beside the config (`mytask`)."""
    if "/" in task or task.startswith((".", "~")):
        return True
    from evokernel.harness import task_names

    return task not in task_names() and (base_dir / task / "task.py").is_file()


def _moved_fields(data: dict, source: str, resumed: bool) -> dict:
    """`triggers.max_repairs` became the repair operator's option `max_attempts`: a resumed run's config (written
    before) is carried over; a user's config is told where the setting lives now."""
    triggers = data.get("triggers")
    if not isinstance(triggers, dict) or "max_repairs" not in triggers:
        return data
    if not resumed:
        raise BadInput(f"{source}: field 'triggers.max_repairs' is now the repair operator's option: "
                       f"operators: {{repair: {{max_attempts: {triggers['max_repairs']}}}}}")
    operators = dict(data.get("operators") or {})
    repair = operators.get("repair", {})
    repair = dict(repair) if isinstance(repair, dict) else {"weight": repair}
    operators["repair"] = {**repair, "max_attempts": triggers["max_repairs"]}
    return {**data, "triggers": {k: v for k, v in triggers.items() if k != "max_repairs"}, "operators": operators}


def parse_config(data: dict, source: str, base_dir: Path | None = None, resumed: bool = False) -> RunConfig:
    """Validate a config mapping; relative paths are taken from `base_dir`. A resumed run's seeds are not
    looked for (they were evaluated when it started, and the run may have moved to another machine)."""
    if not isinstance(data, dict):
        raise BadInput(f"{source}: expected a mapping of settings at the top level")
    data = _moved_fields(data, source, resumed)
    task = data.get("task")
    if base_dir is not None and isinstance(task, str) and _is_task_dir_spelling(task, base_dir):
        data = {**data, "task": str((base_dir / task).expanduser().resolve())}  # a task directory, beside the config
    try:
        config = RunConfig.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        message = str(error["msg"]).removeprefix("Value error, ")  # pydantic's prefix for a validator's ValueError
        field = (error.get("ctx") or {}).get("field") or _field_path(error["loc"])  # a validator may name it exactly
        raise BadInput(f"{source}: field '{field}': {message}{more}") from None
    except BadInput as exc:
        raise BadInput(f"{source}: field 'task'/'scenarios': {exc}") from None
    if base_dir is not None:
        config.seeds = [p if p.is_absolute() else (base_dir / p) for p in config.seeds]
        config.bank.dirs = [p if p.is_absolute() else (base_dir / p) for p in config.bank.dirs]
        config.bank.stats_from = [p if p.is_absolute() else (base_dir / p) for p in config.bank.stats_from]
        if config.llm.cache_dir is not None and not config.llm.cache_dir.is_absolute():
            config.llm.cache_dir = base_dir / config.llm.cache_dir
        if config.llm.replay_from is not None and not config.llm.replay_from.is_absolute():
            config.llm.replay_from = base_dir / config.llm.replay_from
        replayed = config.resources.replay_evaluations
        if replayed is not None and not replayed.is_absolute():
            config.resources.replay_evaluations = base_dir / replayed
    for index, seed in enumerate([] if resumed else config.seeds):
        if not seed.is_file():
            raise BadInput(f"{source}: field 'seeds.{index}': file not found: {seed}")
    config.speed_reference = _speed_reference(config, source, base_dir)
    return config


def _speed_reference(config: RunConfig, source: str, base_dir: Path | None) -> str:
    """'original', a library baseline of the task, or a kernel file (relative to the config's folder, as the
    seeds; the harness builds it in every evaluation), the task's default where none is given: BadInput naming
    the field otherwise, before a run starts."""
    from evokernel.harness import SpeedReference, get_task

    task = get_task(config.task)
    return str(SpeedReference.parse(config.speed_reference or task.default_speed_reference, task,
                                    where=f"{source}: field 'speed_reference'", base_dir=base_dir))


def load_config(path: Path, resumed: bool = False) -> RunConfig:
    """Read and validate a YAML config file (`resumed`: a run directory's, see `parse_config`). Its relative
    paths become absolute, so the copy a run keeps of it means the same from the run directory."""
    if not path.is_file():
        raise BadInput(f"config file not found: {path}")
    data = read_yaml(path)
    return parse_config(data, str(path), path.parent.resolve(), resumed)
