"""Named scenarios from ``scenarios.toml``: a fleet, its timing models, a workload, a duration and a seed.

``load_scenario(name, ...)`` reads the file with ``tomllib``, applies the caller's overrides
(duration, seed, arrival rate) and returns a frozen ``Scenario``; services/sim/runner.py builds
and runs it. Every bad entry raises ``InvalidInputError`` naming the scenario and the field.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np

from policies.ebplus.calibration import calibration_profile
from schemas.errors import InvalidInputError
from services.sim.dp import DpConfig
from services.sim.engine import EngineConfig
from services.sim.timing import BfioTiming, EbTiming, JitteredTiming, SlaiTiming, TimingModel
from services.sim.workload import (
    ArrivalProcess,
    BatchArrivals,
    BurstyArrivals,
    FixedLengths,
    GammaLengths,
    GeometricLengths,
    LengthSampler,
    PoissonArrivals,
    Tier,
    Workload,
    WorkloadPhase,
    load_fleetopt_cdf,
    load_sharegpt_lengths,
)

SCENARIOS_PATH = Path(__file__).resolve().parent / "scenarios.toml"
Table = Mapping[str, object]


SchedulerName = Literal["mixed", "sarathi", "sarathi-spf", "slai", "vllm", "ebplus", "fcfs", "jsq-load", "bfio"]


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineSpec:
    """One engine of a scenario: a single engine with a scheduler, or a DP deployment with a rank router."""

    config: EngineConfig | DpConfig
    scheduler: SchedulerName
    timing: TimingModel


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """A runnable fleet and workload."""

    name: str
    description: str
    duration_s: float
    seed: int
    deployment: str
    heartbeat_interval_s: float
    engines: tuple[EngineSpec, ...]
    router: Literal["least-loaded", "length"]
    boundary_tokens: int | None
    workload: Workload


def _read(path: Path) -> dict[str, object]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        msg = f"{path}: cannot be read as TOML ({exc})"
        raise InvalidInputError(msg, source=str(path)) from exc


def _table(value: object, where: str) -> Table:
    if not isinstance(value, Mapping):
        msg = f"{where} must be a table, got {value!r}"
        raise InvalidInputError(msg, field=where, value=value)
    return value


def _tables(value: object, where: str) -> list[Table]:
    if not isinstance(value, list) or not value:
        msg = f"{where} must be a non-empty array of tables"
        raise InvalidInputError(msg, field=where, value=value)
    return [_table(item, f"{where}[{i}]") for i, item in enumerate(value)]


def _num(table: Table, key: str, where: str, default: float | None = None) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"{where}.{key} must be a number, got {value!r}"
        raise InvalidInputError(msg, field=f"{where}.{key}", value=value)
    return float(value)


def _int(table: Table, key: str, where: str, default: int | None = None) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{where}.{key} must be an integer, got {value!r}"
        raise InvalidInputError(msg, field=f"{where}.{key}", value=value)
    return value


def _str(table: Table, key: str, where: str, default: str | None = None) -> str:
    value = table.get(key, default)
    if not isinstance(value, str):
        msg = f"{where}.{key} must be a string, got {value!r}"
        raise InvalidInputError(msg, field=f"{where}.{key}", value=value)
    return value


def _jitter_frac(table: Table, where: str) -> float:
    """The timing table's per-step noise ``jitter_frac`` (default 0: noise-free, as golden results assume)."""
    jitter = _num(table, "jitter_frac", where, 0.0)
    if not 0.0 <= jitter <= 0.5:
        msg = f"{where}.jitter_frac must be in [0, 0.5], got {jitter}"
        raise InvalidInputError(msg, field=f"{where}.jitter_frac", value=jitter)
    return jitter


def _timing(table: Table, where: str) -> TimingModel:
    model = _str(table, "model", where)
    if model == "eb" and "calibration" in table:
        calib_id = _str(table, "calibration", where)
        return EbTiming.from_cost_model(calibration_profile(calib_id).cost_model)
    if model == "eb":
        keys = ("alpha_p_s", "beta_p_s_per_token", "alpha_d_s", "beta_d_s_per_seq", "alpha_mb_s")
        quad = ("c0_s_per_token", "c1_s_per_token", "c2_s_per_token")
        values = {key: _num(table, key, where) for key in keys + quad}
        return EbTiming(**values)
    if model == "slai":
        slai_keys = ("a0_s", "a_tok_s_per_token", "a_seq_s_per_seq", "a_ctx_s_per_token")
        return SlaiTiming(**{key: _num(table, key, where) for key in slai_keys if key in table})
    if model == "bfio":
        bfio_keys = ("c_s", "t_l_s_per_token")
        return BfioTiming(**{key: _num(table, key, where) for key in bfio_keys if key in table})
    msg = f"{where}.model must be eb, slai or bfio, got {model!r}"
    raise InvalidInputError(msg, field=f"{where}.model", value=model)


def _arrivals(table: Table, where: str, rate_scale: float) -> ArrivalProcess:
    kind = _str(table, "kind", where)
    if kind == "poisson":
        return PoissonArrivals(rate_per_s=_num(table, "rate_per_s", where) * rate_scale)
    if kind == "bursty":
        return BurstyArrivals(
            rate_per_s=_num(table, "rate_per_s", where) * rate_scale,
            burst_rate_per_s=_num(table, "burst_rate_per_s", where) * rate_scale,
            mean_calm_s=_num(table, "mean_calm_s", where),
            mean_burst_s=_num(table, "mean_burst_s", where),
        )
    if kind == "batch":
        return BatchArrivals(count=_int(table, "count", where), at_s=_num(table, "at_s", where, 0.0))
    msg = f"{where}.kind must be poisson, bursty or batch, got {kind!r}"
    raise InvalidInputError(msg, field=f"{where}.kind", value=kind)


def _base_rate(table: Table) -> float | None:
    value = table.get("rate_per_s")
    return float(value) if isinstance(value, int | float) else None


def _lengths(table: Table, where: str) -> LengthSampler:
    kind = _str(table, "kind", where)
    if kind == "sharegpt":
        return load_sharegpt_lengths()
    if kind == "fleetopt":
        return load_fleetopt_cdf(_str(table, "workload", where))
    if kind == "fixed":
        return FixedLengths(
            prompt_tokens=_int(table, "prompt_tokens", where), output_tokens=_int(table, "output_tokens", where)
        )
    if kind == "geometric":
        return GeometricLengths(
            prompt_tokens=_int(table, "prompt_tokens", where),
            mean_output_tokens=_num(table, "mean_output_tokens", where),
        )
    if kind == "gamma":
        return GammaLengths(
            prompt_tokens=_int(table, "prompt_tokens", where),
            mean_output_tokens=_num(table, "mean_output_tokens", where),
            shape=_num(table, "shape", where),
        )
    msg = f"{where}.kind must be sharegpt, fleetopt, fixed, geometric or gamma, got {kind!r}"
    raise InvalidInputError(msg, field=f"{where}.kind", value=kind)


SCHEDULERS = ("mixed", "sarathi", "sarathi-spf", "slai", "vllm", "ebplus")


def _engines(tables: list[Table], timings: Table, where: str, seed: int) -> tuple[EngineSpec, ...]:
    """The scenario's engines; a timing table with ``jitter_frac`` > 0 gives each engine its own noise
    stream, seeded from (scenario seed, engine index) so runs repeat and engines stay independent."""
    specs: list[EngineSpec] = []
    for i, table in enumerate(tables):
        at = f"{where}.engines[{i}]"
        timing_name = _str(table, "timing", at)
        if timing_name not in timings:
            msg = f"{at}.timing names no [timing.{timing_name}] table"
            raise InvalidInputError(msg, field=f"{at}.timing", value=timing_name)
        timing_table = _table(timings[timing_name], f"timing.{timing_name}")
        base_timing = _timing(timing_table, f"timing.{timing_name}")
        jitter = _jitter_frac(timing_table, f"timing.{timing_name}")
        kind = _str(table, "kind", at, "engine")
        prefix = _str(table, "id_prefix", at, "dp-" if kind == "dp" else "engine-")
        pool = _str(table, "pool", at, "default")
        for n in range(_int(table, "count", at, 1)):
            engine_id = f"{prefix}{n}"
            timing = base_timing
            if jitter > 0.0:
                stream = np.random.SeedSequence([seed, len(specs)])
                timing = JitteredTiming(base_timing, jitter_frac=jitter, seed=stream)
            if kind == "dp":
                router = _str(table, "router", at, "fcfs")
                if router not in ("fcfs", "jsq-load", "bfio"):
                    msg = f"{at}.router must be fcfs, jsq-load or bfio, got {router!r}"
                    raise InvalidInputError(msg, field=f"{at}.router", value=router)
                config: EngineConfig | DpConfig = DpConfig(
                    engine_id=engine_id,
                    pool=pool,
                    ranks=_int(table, "ranks", at, 16),
                    slots_per_rank=_int(table, "slots_per_rank", at, 72),
                    kv_tokens_per_rank=_int(table, "kv_tokens_per_rank", at, 1_000_000),
                )
                specs.append(EngineSpec(config=config, scheduler=router, timing=timing))  # type: ignore[arg-type]
                continue
            scheduler = _str(table, "scheduler", at, "mixed")
            if scheduler not in SCHEDULERS:
                msg = f"{at}.scheduler must be one of {', '.join(SCHEDULERS)}, got {scheduler!r}"
                raise InvalidInputError(msg, field=f"{at}.scheduler", value=scheduler)
            config = EngineConfig(
                engine_id=engine_id,
                pool=pool,
                hardware_profile=_str(_table(timings[timing_name], timing_name), "calibration", at, timing_name),
                max_num_seqs=_int(table, "max_num_seqs", at, 256),
                token_budget_tokens=_int(table, "token_budget_tokens", at, 8192),
                kv_blocks_total=_int(table, "kv_blocks_total", at, 40_000),
                block_size_tokens=_int(table, "block_size_tokens", at, 16),
                max_model_len=_int(table, "max_model_len", at, 32_768),
            )
            specs.append(EngineSpec(config=config, scheduler=scheduler, timing=timing))  # type: ignore[arg-type]
    return tuple(specs)


def list_scenarios(path: Path = SCENARIOS_PATH) -> dict[str, str]:
    """Return scenario name -> description, in file order."""
    scenarios = _table(_read(path).get("scenarios", {}), "scenarios")
    return {name: str(_table(body, name).get("description", "")) for name, body in scenarios.items()}


def load_scenario(
    name: str,
    *,
    duration_s: float | None = None,
    seed: int | None = None,
    rate_per_s: float | None = None,
    path: Path = SCENARIOS_PATH,
) -> Scenario:
    """Build scenario ``name`` with optional overrides.

    Args:
        name: a ``[scenarios.NAME]`` table of the file.
        duration_s: simulated seconds to run instead of the scenario's.
        seed: the seed of every random draw instead of the scenario's.
        rate_per_s: arrival rate of the first phase; later phases (and burst rates) scale with it.
        path: the scenarios file (default: the shipped ``scenarios.toml``).

    Raises:
        InvalidInputError: an unknown name, a bad override or a bad entry (named by its field).
    """
    document = _read(path)
    scenarios = _table(document.get("scenarios", {}), "scenarios")
    if name not in scenarios:
        msg = f"unknown scenario {name!r}; known: {', '.join(scenarios)}"
        raise InvalidInputError(msg, field="scenario", value=name)
    body = _table(scenarios[name], name)
    timings = _table(document.get("timing", {}), "timing")
    phase_tables = _tables(body.get("phases"), f"{name}.phases")
    rate_scale = 1.0
    if rate_per_s is not None:
        base = _base_rate(_table(phase_tables[0].get("arrivals"), f"{name}.phases[0].arrivals"))
        if base is None or not rate_per_s > 0:
            msg = f"rate_per_s override needs a positive rate and a rated first phase, got {rate_per_s} for {name}"
            raise InvalidInputError(msg, field="rate_per_s", value=rate_per_s)
        rate_scale = rate_per_s / base
    phases = tuple(
        WorkloadPhase(
            start_s=_num(t, "start_s", f"{name}.phases[{i}]", 0.0),
            arrivals=_arrivals(_table(t.get("arrivals"), f"{name}.phases[{i}].arrivals"), name, rate_scale),
            lengths=_lengths(_table(t.get("lengths"), f"{name}.phases[{i}].lengths"), name),
        )
        for i, t in enumerate(phase_tables)
    )
    tier_tables = body.get("tiers")
    tiers = (
        tuple(
            Tier(
                name=_str(t, "name", f"{name}.tiers[{i}]"),
                weight=_num(t, "weight", f"{name}.tiers[{i}]"),
                tbt_slo_s=_num(t, "tbt_slo_s", f"{name}.tiers[{i}]") if "tbt_slo_s" in t else None,
            )
            for i, t in enumerate(_tables(tier_tables, f"{name}.tiers"))
        )
        if tier_tables is not None
        else (Tier(name="default", weight=1.0),)
    )
    max_tokens = body.get("max_tokens")
    workload = Workload(phases=phases, tiers=tiers, max_tokens=max_tokens if isinstance(max_tokens, int) else None)
    router = _str(body, "router", name, "least-loaded")
    if router not in ("least-loaded", "length"):
        msg = f"{name}.router must be least-loaded or length, got {router!r}"
        raise InvalidInputError(msg, field=f"{name}.router", value=router)
    run_seed = seed if seed is not None else _int(body, "seed", name, 0)
    scenario = Scenario(
        name=name,
        description=_str(body, "description", name, ""),
        duration_s=_num(body, "duration_s", name),
        seed=_int(body, "seed", name, 0),
        deployment=_str(body, "deployment", name, "sim"),
        heartbeat_interval_s=_num(body, "heartbeat_interval_s", name, 5.0),
        engines=_engines(_tables(body.get("engines"), f"{name}.engines"), timings, name, run_seed),
        router=router,  # type: ignore[arg-type]
        boundary_tokens=_int(body, "boundary_tokens", name) if router == "length" else None,
        workload=workload,
    )
    if duration_s is not None:
        if not duration_s > 0:
            msg = f"duration_s must be > 0, got {duration_s}"
            raise InvalidInputError(msg, field="duration_s", value=duration_s)
        scenario = replace(scenario, duration_s=duration_s)
    if seed is not None:
        scenario = replace(scenario, seed=seed)
    return scenario
