"""Pure, incremental, serialisable and mergeable estimators (no I/O, no clock).

See docs/estimators.md for each estimator, its parameters and defaults, and the policy that reads it.
"""

from estimators.cost_model import (
    BatchTimeFit,
    BatchTimeModel,
    LinearCostFit,
    LinearCostModel,
    MixedCostFit,
    MixedCostModel,
    StepTimeFit,
    StepTimeModel,
)
from estimators.dp_load import DpLoadSummary, DpLoadTracker, RankLoad, rank_load
from estimators.ema import AsymmetricEma, Ema, EmaSnapshot
from estimators.hazard import HazardTable, LinearHazardFit, empirical_hazard, fit_linear_hazard
from estimators.histogram import (
    BUCKET_EDGES_TOKENS,
    FLEETOPT_BREAKPOINTS_TOKENS,
    LengthDistribution,
    LengthHistogram,
    bucket_of,
)
from estimators.least_squares import LeastSquares, LeastSquaresFit, NotEnoughData
from estimators.quantiles import QuantileSketch, QuantileSummary, WindowedQuantileSketch
from estimators.rates import EventRate, RateSnapshot
from estimators.shadow_sums import ShadowJudgementWindow, ShadowSums
from estimators.survival import (
    DEFAULT_MAX_SURVIVAL_EDGES,
    InFlightAges,
    OutputLengthSample,
    OutputLengthWindow,
    SurvivalCurve,
    SurvivalTable,
    fine_bin_edges_tokens,
    fine_survival_table,
    kaplan_meier,
    log_bin_edges_tokens,
    smoothed_survival_table,
    survival_table,
)
from estimators.window import CountWindowMean, SlotRing

__all__ = [
    "BUCKET_EDGES_TOKENS",
    "DEFAULT_MAX_SURVIVAL_EDGES",
    "FLEETOPT_BREAKPOINTS_TOKENS",
    "AsymmetricEma",
    "BatchTimeFit",
    "BatchTimeModel",
    "CountWindowMean",
    "DpLoadSummary",
    "DpLoadTracker",
    "Ema",
    "EmaSnapshot",
    "EventRate",
    "HazardTable",
    "InFlightAges",
    "LeastSquares",
    "LeastSquaresFit",
    "LengthDistribution",
    "LengthHistogram",
    "LinearCostFit",
    "LinearCostModel",
    "LinearHazardFit",
    "MixedCostFit",
    "MixedCostModel",
    "NotEnoughData",
    "OutputLengthSample",
    "OutputLengthWindow",
    "QuantileSketch",
    "QuantileSummary",
    "RankLoad",
    "RateSnapshot",
    "ShadowJudgementWindow",
    "ShadowSums",
    "SlotRing",
    "StepTimeFit",
    "StepTimeModel",
    "SurvivalCurve",
    "SurvivalTable",
    "WindowedQuantileSketch",
    "bucket_of",
    "empirical_hazard",
    "fine_bin_edges_tokens",
    "fine_survival_table",
    "fit_linear_hazard",
    "kaplan_meier",
    "log_bin_edges_tokens",
    "rank_load",
    "smoothed_survival_table",
    "survival_table",
]
