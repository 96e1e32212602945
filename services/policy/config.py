"""The policy configuration file: every policy's parameters and which engines it applies to, in TOML.

One schema (the pydantic models below; docs/operations.md lists every key) maps each ``[section]``
onto the policy's params dataclass (policies/*/params): a key left out keeps the paper's default.
``applies_to`` narrows the engines a policy decides for, by engine id glob, model glob or the
scheduler the engine registered; an engine is never sent a kind it does not obey (its
registration's ``obeys``), whatever the file says. The file is read with the standard library's
``tomllib``; every mistake is one line naming the file, the key path and what was expected.

The policy service never reads the file itself: ``governor run policy --config FILE`` validates it
and appends it to ``gov.estimates`` as a ``PolicyConfigRecord``, and the service applies the
records it reads in log order (services/policy/service.py), so a replay decides exactly as live did.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from decide.registry import PolicyRegistry
from decide.specs import default_registry
from decide.wiring.fleetopt import FLEET_SLOT_S
from policies.admission import AdmissionParams
from policies.bfio import BfioParams
from policies.ebplus import EbplusParams
from policies.ebplus.calibration import CALIBRATION_PROFILES
from policies.fleetopt import FleetoptParams, PlannerMode
from policies.slai import OffsetMode, PrefillOrder, SlaiParams, TierSlo
from schemas.errors import InvalidInputError
from schemas.estimates import EngineRegistration
from services.toml_files import read_toml

Positive = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
Fraction = Annotated[float, Field(gt=0.0, le=1.0)]
Count = Annotated[int, Field(ge=1)]
NO_CALIBRATION = "none"


class Section(BaseModel):
    """Base of every table of the file: unknown keys are errors, values are checked as typed."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class AppliesTo(Section):
    """Which engines a policy decides for; every list given must match (an empty list matches none).

    Attributes:
        engines: glob patterns on the engine id (``fnmatch``: ``prod-*``, ``gpu-[0-3]``).
        models: glob patterns on the model the engine registered.
        schedulers: names of the scheduler the engine registered (``ebplus``, ``slai``, ``vllm``, ...).
    """

    engines: list[str] | None = None
    models: list[str] | None = None
    schedulers: list[str] | None = None

    def matches(self, engine_id: str, *, model: str | None, scheduler: str | None) -> bool:
        """True when the engine (its id, and the model and scheduler it registered) passes every list given."""
        if self.engines is not None and not any(fnmatch.fnmatchcase(engine_id, p) for p in self.engines):
            return False
        if self.models is not None and not (
            model is not None and any(fnmatch.fnmatchcase(model, p) for p in self.models)
        ):
            return False
        return self.schedulers is None or scheduler in self.schedulers


class AdmissionSection(Section):
    """``[admission]``: the admission-pressure thresholds (policies/admission/decide.py)."""

    applies_to: AppliesTo | None = None
    kv_comfort_frac: float | None = Field(default=None, gt=0.0, lt=1.0)
    flow_saturation: float | None = Field(default=None, gt=1.0, allow_inf_nan=False)
    smoothing_up: Fraction | None = None
    smoothing_down: Fraction | None = None
    busy_at: Fraction | None = None
    overloaded_at: Fraction | None = None
    hysteresis: NonNegative | None = None
    valid_for_s: Positive | None = None


class EbplusSection(Section):
    """``[ebplus]``: EB+ (seed 001, policies/ebplus/params.py), its calibration and its TBT guard."""

    applies_to: AppliesTo | None = None
    t_upd_completions: Count | None = None
    w_min_samples: Count | None = None
    theta_default: Fraction | None = None
    theta_min: Fraction | None = None
    theta_max: Fraction | None = None
    theta_ema_alpha: Fraction | None = None
    eps_oom: Fraction | None = None
    sticky_factor: Positive | None = None
    cooldown_evaluations: int | None = Field(default=None, ge=0)
    n_obs_min: NonNegative | None = None
    calibration_id: str | None = Field(
        default=None, description="fallback cost-model profile id, or 'none' to probe EB until fitted"
    )
    online_cost_model: bool | None = None
    tbt_guard: bool | None = None
    mb_step_budget: bool | None = None
    kv_gate_s_kv: NonNegative | None = None
    kv_gate_f_min: NonNegative | None = None
    kv_gate_f_max: Fraction | None = None
    valid_for_s: Positive | None = None


class SlaiSection(Section):
    """``[slai]``: SLAI (seed 000, policies/slai/params.py): the offset rule, the tiers' TBT SLOs, caps."""

    applies_to: AppliesTo | None = None
    offset_mode: Literal["fixed", "dynamic"] | None = None
    delta_fixed: Positive | None = None
    delta_lo: Positive | None = None
    delta_hi: Positive | None = None
    kv_threshold_frac: Fraction | None = None
    delta_override: Positive | None = None
    tiers: dict[str, Positive] | None = Field(default=None, min_length=1, description="tier -> TBT SLO, seconds")
    default_tbt_s: Positive | None = None
    token_budget_tokens: Count | None = None
    max_active: Count | None = None
    max_decodes: Count | None = None
    prefill_order: Literal["spf", "fcfs", "spf_paid_first"] | None = None
    adaptive_enabled: bool | None = None
    ttft_target_s: Positive | None = None
    tbt_attainment_target_frac: Fraction | None = None
    valid_for_s: Positive | None = None


class GpuProfileSection(Section):
    """``[fleetopt.gpu]``: the FleetOpt GPU profile (one profile unit = one serving replica)."""

    w_s: Positive | None = None
    h_s_per_slot: Positive | None = None
    chunk_tokens: Count | None = None
    calib_slots: Count | None = None
    calib_ctx_tokens: Count | None = None
    kv_blocks: Count | None = None
    kv_block_tokens: Count | None = None
    long_ctx_tokens: Count | None = None


class FleetoptSection(Section):
    """``[fleetopt]``: the fleet planner (seed 002, policies/fleetopt/params.py): SLO, prices, slot, GPU."""

    slot_s: Positive | None = Field(default=None, description="event-time slot the planner decides per, seconds")
    mode: Literal["paper", "exact"] | None = None
    t_slo_s: Positive | None = None
    rho_max: Fraction | None = None
    short_cost_usd_per_hr: Positive | None = None
    long_cost_usd_per_hr: Positive | None = None
    hours_per_year: Positive | None = None
    max_short_ctx_tokens: Count | None = None
    safe_categories: list[str] | None = None
    deadband_frac: NonNegative | None = None
    scale_down_dwell_s: NonNegative | None = None
    b_short_dwell_s: NonNegative | None = None
    valid_for_s: Positive | None = None
    gpu: GpuProfileSection = Field(default_factory=GpuProfileSection)


class BfioSection(Section):
    """``[bfio]``: the BF-IO router bundle (seed 003, policies/bfio/params.py) and its solver budget."""

    applies_to: AppliesTo | None = None
    solver_budget_s: NonNegative | None = None
    horizon_steps: int | None = Field(default=None, ge=0)
    candidate_window: Count | None = None
    aging_deadline_s: NonNegative | None = None
    local_search_rounds: int | None = Field(default=None, ge=0)
    min_survival_events: int | None = Field(default=None, ge=0)
    bundle_ttl_s: NonNegative | None = None
    self_check: bool | None = None


class PolicyConfig(Section):
    """The whole file: an optional description and one table per policy kind."""

    description: str = ""
    admission: AdmissionSection = Field(default_factory=AdmissionSection)
    ebplus: EbplusSection = Field(default_factory=EbplusSection)
    slai: SlaiSection = Field(default_factory=SlaiSection)
    fleetopt: FleetoptSection = Field(default_factory=FleetoptSection)
    bfio: BfioSection = Field(default_factory=BfioSection)


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicySet:
    """What a configuration decides with: the registry of specs and each kind's ``applies_to``.

    Attributes:
        registry: the policies with the configured params bound.
        scopes: kind -> the engines it applies to (kinds not listed: every engine that obeys it).
        digest: the configuration's content hash, recorded on each decision; None for the defaults.
    """

    registry: PolicyRegistry
    scopes: Mapping[str, AppliesTo] = field(default_factory=dict)
    digest: str | None = None

    def applies(self, kind: str, engine_id: str, engine: EngineRegistration | None) -> bool:
        """True when the configuration lets ``kind`` decide for this engine (``engine``: its registration, if seen)."""
        selector = self.scopes.get(kind)
        if selector is None:
            return True
        model = None if engine is None else engine.model
        scheduler = None if engine is None else engine.scheduler
        return selector.matches(engine_id, model=model, scheduler=scheduler)


def config_digest(config: Mapping[str, Any]) -> str:
    """A short content hash of a configuration (its canonical JSON), to name it on decisions."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _expected(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The keys allowed in the table that holds ``loc`` (for an unknown-key error)."""
    current: Any = model
    for part in loc[:-1]:
        field_info = current.model_fields.get(part) if isinstance(part, str) else None
        if field_info is None:
            return []
        annotation = field_info.annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        current = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if current is None:
            return []
    return sorted(current.model_fields)


def _error_line(source: str, exc: ValidationError) -> InvalidInputError:
    first = exc.errors(include_url=False)[0]
    loc = tuple(first["loc"])
    path = ".".join(str(p) for p in loc) or "(top level)"
    if first["type"] == "extra_forbidden":
        allowed = _expected(PolicyConfig, loc)
        what = f"unknown key (expected one of: {', '.join(allowed)})"
    else:
        what = f"{first['msg']}, got {first.get('input')!r}"
    return InvalidInputError(f"{source}: {path}: {what}", field=path, source=source)


def parse_config(data: Mapping[str, Any], source: str) -> PolicyConfig:
    """Validate a configuration's tables (from TOML or from a config record) into the schema.

    Raises:
        InvalidInputError: one line naming ``source``, the key path and what was expected.
    """
    try:
        config = PolicyConfig.model_validate(data)
    except ValidationError as exc:
        raise _error_line(source, exc) from None
    calibration = config.ebplus.calibration_id
    if calibration is not None and calibration != NO_CALIBRATION and calibration not in CALIBRATION_PROFILES:
        known = ", ".join([*sorted(CALIBRATION_PROFILES), NO_CALIBRATION])
        msg = f"{source}: ebplus.calibration_id: unknown profile {calibration!r} (expected one of: {known})"
        raise InvalidInputError(msg, field="ebplus.calibration_id", source=source)
    policy_set(config, source=source)
    return config


def read_config(path: Path) -> tuple[PolicyConfig, dict[str, Any]]:
    """Read and validate the TOML file at ``path``; return the schema and the tables as read.

    Raises:
        InvalidInputError: the file cannot be read, is not TOML, or does not fit the schema.
    """
    data = read_toml(path, "the policy config")
    return parse_config(data, str(path)), data


def _set(section: Section, *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The keys a section sets (None: keep the default), without ``applies_to`` and ``skip``."""
    return {
        name: value
        for name, value in section
        if value is not None and name != "applies_to" and name not in skip and not isinstance(value, Section)
    }


def _params(kind: str, params_type: type[Any], values: dict[str, Any], source: str) -> Any:
    """Build ``params_type`` from its defaults and ``values``; its own range checks name the key."""
    try:
        return params_type(**values)
    except InvalidInputError as exc:
        path = f"{kind}.{exc.field}" if exc.field else kind
        msg = f"{source}: {path}: {exc}"
        raise InvalidInputError(msg, field=path, source=source) from None


def ebplus_params(section: EbplusSection, source: str) -> EbplusParams:
    """EB+ params from ``[ebplus]`` (``calibration_id = "none"``: no fallback profile)."""
    values = _set(section, skip=("online_cost_model",))
    if values.get("calibration_id") == NO_CALIBRATION:
        values["calibration_id"] = None
    result: EbplusParams = _params("ebplus", EbplusParams, values, source)
    return result


def slai_params(section: SlaiSection, source: str) -> SlaiParams:
    """SLAI params from ``[slai]``: the tier table becomes the tier -> TBT map."""
    values = _set(section, skip=("tiers", "offset_mode", "prefill_order"))
    if section.tiers is not None:
        values["tiers"] = tuple(TierSlo(tier=name, tbt_slo_s=slo) for name, slo in sorted(section.tiers.items()))
    if section.offset_mode is not None:
        values["offset_mode"] = OffsetMode(section.offset_mode)
    if section.prefill_order is not None:
        values["prefill_order"] = PrefillOrder(section.prefill_order)
    result: SlaiParams = _params("slai", SlaiParams, values, source)
    return result


def fleetopt_params(section: FleetoptSection, source: str) -> FleetoptParams:
    """FleetOpt params from ``[fleetopt]`` and its ``[fleetopt.gpu]`` profile."""
    values = {**_set(section, skip=("slot_s", "mode", "safe_categories")), **_set(section.gpu)}
    if section.mode is not None:
        values["mode"] = PlannerMode(section.mode)
    if section.safe_categories is not None:
        values["safe_categories"] = tuple(section.safe_categories)
    result: FleetoptParams = _params("fleetopt", FleetoptParams, values, source)
    return result


def policy_set(config: PolicyConfig, *, source: str, fleet_slot_s: float = FLEET_SLOT_S) -> PolicySet:
    """The registry and scopes a configuration decides with (the digest is set by the caller).

    ``fleet_slot_s`` is the slot used when ``[fleetopt] slot_s`` is not given.

    Raises:
        InvalidInputError: a value the params' own checks refuse (``theta_min > theta_max``, ...).
    """
    admission: AdmissionParams = _params("admission", AdmissionParams, _set(config.admission), source)
    bfio: BfioParams = _params("bfio", BfioParams, _set(config.bfio), source)
    slot_s = config.fleetopt.slot_s or fleet_slot_s
    registry = default_registry(
        ebplus=ebplus_params(config.ebplus, source),
        admission=admission,
        slai=slai_params(config.slai, source),
        fleetopt=fleetopt_params(config.fleetopt, source),
        bfio=bfio,
        fleet_slot_s=slot_s,
        online_cost_model=bool(config.ebplus.online_cost_model),
    )
    scopes = {
        kind: section.applies_to
        for kind, section in (
            ("admission", config.admission),
            ("ebplus", config.ebplus),
            ("slai", config.slai),
            ("bfio", config.bfio),
        )
        if section.applies_to is not None
    }
    return PolicySet(registry=registry, scopes=scopes)


def config_policy_set(data: Mapping[str, Any] | None, *, source: str, fleet_slot_s: float) -> PolicySet:
    """The policy set of a configuration's tables, digest included; None: the built-in defaults."""
    if data is None:
        return PolicySet(registry=default_registry(fleet_slot_s=fleet_slot_s))
    config = parse_config(data, source)
    built = policy_set(config, source=source, fleet_slot_s=fleet_slot_s)
    return dataclasses.replace(built, digest=config_digest(data))
