"""Seeded workloads: arrival processes, length distributions, tier mixes and mid-run shifts.

Lengths come from the SLAI paper's ShareGPT trace (specs/seed-000-slai.md section 5.1,
``data/sharegpt-lengths.csv``), from the FleetOpt total-length CDFs (specs/seed-002-fleetopt.md
section 3.3, ``data/fleetopt-*_cdf.json``, split 80/20 into prompt and output as the FleetOpt
reference does, section 1.4), or from synthetic laws (geometric outputs: the EB paper's CFR case;
gamma with a chosen shape: its IFR case, seed 001 App. E.3). Arrivals are Poisson, a two-state
bursty (Markov-modulated) Poisson process, or a batch at one instant. A workload is a list of
phases, so a rate or a distribution can shift mid-run. Every draw goes through one
``np.random.Generator``.
"""

from __future__ import annotations

import csv
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from schemas.errors import InvalidInputError
from services.sim.request import RequestSpec

DATA_DIR = Path(__file__).resolve().parent / "data"
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class LengthSampler(Protocol):
    """Draws (prompt tokens, output tokens) pairs."""

    def sample(self, rng: np.random.Generator, count: int) -> tuple[IntArray, IntArray]:
        """Return two int arrays of shape (count,): prompt and output lengths (>= 1)."""
        ...


class ArrivalProcess(Protocol):
    """Draws arrival times in a window."""

    def times(self, rng: np.random.Generator, start_s: float, end_s: float) -> FloatArray:
        """Return sorted arrival times in [start_s, end_s), seconds."""
        ...


def _positive(value: object, *names: str) -> None:
    """Raise ``InvalidInputError`` on the first of ``names`` whose attribute on ``value`` is not > 0."""
    for name in names:
        number = getattr(value, name)
        if not number > 0:
            msg = f"{name} must be > 0, got {number}"
            raise InvalidInputError(msg, field=name, value=number)


@dataclass(frozen=True, slots=True, kw_only=True)
class FixedLengths:
    """Every request has the same prompt and output length (deterministic tests, EB Table 11).

    Raises:
        InvalidInputError: a length below 1.
    """

    prompt_tokens: int
    output_tokens: int

    def __post_init__(self) -> None:
        _positive(self, "prompt_tokens", "output_tokens")

    def sample(self, rng: np.random.Generator, count: int) -> tuple[IntArray, IntArray]:
        """Constant arrays; ``rng`` is not used."""
        del rng
        return np.full(count, self.prompt_tokens, dtype=np.int64), np.full(count, self.output_tokens, dtype=np.int64)


@dataclass(frozen=True, slots=True, kw_only=True)
class GeometricLengths:
    """Fixed prompt, geometric output with mean mean_output_tokens (CFR hazard p0 = 1/mu_O, seed 001 2.2).

    Raises:
        InvalidInputError: a prompt below 1 token or a mean output below 1 token.
    """

    prompt_tokens: int
    mean_output_tokens: float

    def __post_init__(self) -> None:
        _positive(self, "prompt_tokens")
        if not self.mean_output_tokens >= 1.0:
            msg = f"mean_output_tokens must be >= 1, got {self.mean_output_tokens}"
            raise InvalidInputError(msg, field="mean_output_tokens", value=self.mean_output_tokens)

    def sample(self, rng: np.random.Generator, count: int) -> tuple[IntArray, IntArray]:
        """Geometric outputs on {1, 2, ...} with P(O = t | O >= t) = 1/mean."""
        outputs = rng.geometric(1.0 / self.mean_output_tokens, size=count).astype(np.int64)
        return np.full(count, self.prompt_tokens, dtype=np.int64), outputs


@dataclass(frozen=True, slots=True, kw_only=True)
class GammaLengths:
    """Fixed prompt, gamma output of a chosen shape and mean, rounded up (shape > 1 is IFR).

    Raises:
        InvalidInputError: a non-positive prompt, mean or shape.
    """

    prompt_tokens: int
    mean_output_tokens: float
    shape: float

    def __post_init__(self) -> None:
        _positive(self, "prompt_tokens", "mean_output_tokens", "shape")

    def sample(self, rng: np.random.Generator, count: int) -> tuple[IntArray, IntArray]:
        """Gamma(shape, mean/shape) outputs, ceil'ed to >= 1 token."""
        draws = rng.gamma(self.shape, self.mean_output_tokens / self.shape, size=count)
        return np.full(count, self.prompt_tokens, dtype=np.int64), np.maximum(1, np.ceil(draws)).astype(np.int64)


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceLengths:
    """(prompt, output) pairs drawn with replacement from a trace's rows."""

    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.prompt_tokens or len(self.prompt_tokens) != len(self.output_tokens):
            msg = f"trace needs equal, non-empty columns, got {len(self.prompt_tokens)} and {len(self.output_tokens)}"
            raise InvalidInputError(msg, field="prompt_tokens")

    def sample(self, rng: np.random.Generator, count: int) -> tuple[IntArray, IntArray]:
        """Rows drawn uniformly with replacement."""
        rows = rng.integers(0, len(self.prompt_tokens), size=count)
        prompts = np.asarray(self.prompt_tokens, dtype=np.int64)[rows]
        outputs = np.asarray(self.output_tokens, dtype=np.int64)[rows]
        return np.maximum(prompts, 1), np.maximum(outputs, 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class CdfLengths:
    """Total lengths by inverse-CDF interpolation, split prompt = floor(0.8 L), output = L - prompt.

    Deviation: the FleetOpt reference samples within CDF buckets the same way but splits 80/20 only
    inside its service model; we split at sampling so the engine sees prompt and output lengths.
    """

    total_tokens: tuple[float, ...]
    cdf: tuple[float, ...]
    prompt_frac: float = 0.8

    def sample(self, rng: np.random.Generator, count: int) -> tuple[IntArray, IntArray]:
        """Inverse-CDF draws of the total length, then the fixed split (both parts >= 1)."""
        knots = np.concatenate(([0.0], np.asarray(self.total_tokens, dtype=np.float64)))
        probs = np.concatenate(([0.0], np.asarray(self.cdf, dtype=np.float64)))
        totals = np.maximum(2, np.ceil(np.interp(rng.random(count), probs, knots))).astype(np.int64)
        prompts = np.maximum(1, np.floor(self.prompt_frac * totals)).astype(np.int64)
        return prompts, np.maximum(1, totals - prompts)


def load_sharegpt_lengths(path: Path | None = None) -> TraceLengths:
    """Read ``num_prefill_tokens,num_decode_tokens`` rows (default: the shipped ShareGPT trace).

    Raises:
        InvalidInputError: a missing file or a bad row (named by line).
    """
    source = path or DATA_DIR / "sharegpt-lengths.csv"
    prompts: list[int] = []
    outputs: list[int] = []
    try:
        with source.open(newline="") as handle:
            for line, row in enumerate(csv.DictReader(handle), start=2):
                try:
                    prompts.append(int(row["num_prefill_tokens"]))
                    outputs.append(int(row["num_decode_tokens"]))
                except (KeyError, TypeError, ValueError) as exc:
                    msg = f"{source}: line {line}: bad length row ({exc})"
                    raise InvalidInputError(msg, source=f"{source}:{line}") from exc
    except OSError as exc:
        msg = f"{source}: cannot be read ({exc})"
        raise InvalidInputError(msg, source=str(source)) from exc
    return TraceLengths(prompt_tokens=tuple(prompts), output_tokens=tuple(outputs))


def load_fleetopt_cdf(name_or_path: str | Path) -> CdfLengths:
    """Read a FleetOpt CDF file: ``[[tokens, F], ...]`` or ``{"cdf": [...]}``; a bare name means the shipped file.

    Raises:
        InvalidInputError: a missing file or a CDF that is not non-decreasing up to 1.
    """
    path = Path(name_or_path)
    if not path.suffix:
        path = DATA_DIR / f"fleetopt-{name_or_path}_cdf.json"
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        msg = f"{path}: cannot be read as JSON ({exc})"
        raise InvalidInputError(msg, source=str(path)) from exc
    points = raw["cdf"] if isinstance(raw, dict) else raw
    totals = tuple(float(p[0]) for p in points)
    cdf = tuple(float(p[1]) for p in points)
    if any(b < a for a, b in itertools.pairwise(cdf)) or abs(cdf[-1] - 1.0) > 1e-6:
        msg = f"{path}: the CDF must be non-decreasing and end at 1, got last {cdf[-1]}"
        raise InvalidInputError(msg, source=str(path))
    return CdfLengths(total_tokens=totals, cdf=cdf)


@dataclass(frozen=True, slots=True, kw_only=True)
class PoissonArrivals:
    """Poisson arrivals at ``rate_per_s``."""

    rate_per_s: float

    def __post_init__(self) -> None:
        _positive(self, "rate_per_s")

    def times(self, rng: np.random.Generator, start_s: float, end_s: float) -> FloatArray:
        """Exponential gaps from ``start_s``; the times before ``end_s``."""
        expected = max(16, int((end_s - start_s) * self.rate_per_s * 1.2) + 16)
        stamps = start_s + np.cumsum(rng.exponential(1.0 / self.rate_per_s, size=expected))
        while stamps[-1] < end_s:
            more = stamps[-1] + np.cumsum(rng.exponential(1.0 / self.rate_per_s, size=expected))
            stamps = np.concatenate((stamps, more))
        return stamps[stamps < end_s]


@dataclass(frozen=True, slots=True, kw_only=True)
class BurstyArrivals:
    """A two-state Markov-modulated Poisson process: calm at ``rate_per_s``, bursts at ``burst_rate_per_s``.

    Calm and burst periods last exponential times with means ``mean_calm_s`` and ``mean_burst_s``.
    """

    rate_per_s: float
    burst_rate_per_s: float
    mean_calm_s: float
    mean_burst_s: float

    def __post_init__(self) -> None:
        _positive(self, "rate_per_s", "burst_rate_per_s", "mean_calm_s", "mean_burst_s")

    def times(self, rng: np.random.Generator, start_s: float, end_s: float) -> FloatArray:
        """Alternate calm and burst periods, each a Poisson stretch at its rate."""
        parts: list[FloatArray] = []
        t = start_s
        bursting = False
        while t < end_s:
            mean = self.mean_burst_s if bursting else self.mean_calm_s
            stop = min(end_s, t + float(rng.exponential(mean)))
            rate = self.burst_rate_per_s if bursting else self.rate_per_s
            parts.append(PoissonArrivals(rate_per_s=rate).times(rng, t, stop))
            t = stop
            bursting = not bursting
        return np.concatenate(parts) if parts else np.zeros(0)


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchArrivals:
    """``count`` requests all arriving at ``at_s`` (saturation tests)."""

    count: int
    at_s: float = 0.0

    def times(self, rng: np.random.Generator, start_s: float, end_s: float) -> FloatArray:
        """``count`` copies of ``at_s`` when it lies in the window."""
        del rng
        inside = start_s <= self.at_s < end_s
        return np.full(self.count if inside else 0, self.at_s, dtype=np.float64)


@dataclass(frozen=True, slots=True, kw_only=True)
class Tier:
    """A service tier: its share of requests and its TBT SLO, seconds (None: no SLO)."""

    name: str
    weight: float
    tbt_slo_s: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadPhase:
    """From ``start_s`` on (until the next phase), these arrivals with these lengths.

    Attributes:
        start_s: event time the phase begins, seconds.
        arrivals: the phase's arrival process.
        lengths: the phase's prompt and output length law.
    """

    start_s: float
    arrivals: ArrivalProcess
    lengths: LengthSampler


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """Phases in time order, a tier mix and an optional ``max_tokens`` cap.

    Raises:
        InvalidInputError: no phase, phases out of order, or no tier with positive weight.
    """

    phases: tuple[WorkloadPhase, ...]
    tiers: tuple[Tier, ...] = (Tier(name="default", weight=1.0),)
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        starts = [phase.start_s for phase in self.phases]
        if not starts or starts != sorted(starts) or starts[0] < 0:
            msg = f"phases need non-negative, increasing start_s, got {starts}"
            raise InvalidInputError(msg, field="phases", value=starts)
        if sum(t.weight for t in self.tiers) <= 0:
            msg = "tiers need a positive total weight"
            raise InvalidInputError(msg, field="tiers")

    def generate(self, duration_s: float, rng: np.random.Generator, *, id_prefix: str = "r") -> list[RequestSpec]:
        """Draw every request arriving in [0, duration_s), sorted by arrival time."""
        requests: list[RequestSpec] = []
        weights = np.asarray([t.weight for t in self.tiers], dtype=np.float64)
        weights /= weights.sum()
        for index, phase in enumerate(self.phases):
            end = self.phases[index + 1].start_s if index + 1 < len(self.phases) else duration_s
            stamps = phase.arrivals.times(rng, phase.start_s, min(end, duration_s))
            prompts, outputs = phase.lengths.sample(rng, len(stamps))
            tiers = rng.choice(len(self.tiers), size=len(stamps), p=weights)
            for stamp, prompt, output, tier_index in zip(stamps, prompts, outputs, tiers, strict=True):
                tier = self.tiers[int(tier_index)]
                requests.append(
                    RequestSpec(
                        request_id=f"{id_prefix}{len(requests)}",
                        arrival_s=float(stamp),
                        prompt_tokens=int(prompt),
                        output_tokens=int(output),
                        max_tokens=self.max_tokens,
                        tier=tier.name,
                        tbt_slo_s=tier.tbt_slo_s,
                    )
                )
        return requests
