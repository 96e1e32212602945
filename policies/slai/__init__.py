"""SLAI: SLO-aware decode deferral and prefill ordering (seed 000; specs/seed-000-slai.md)."""

from policies.slai.adaptive import AdaptiveStep, adapt_delta_lo, tuning_signal
from policies.slai.batch_builder import (
    BatchEntry,
    BatchPlan,
    BuilderParams,
    EntryKind,
    KvView,
    Preemption,
    RequestView,
    SchedulerKind,
    SchedulerQueues,
    build_batch,
    build_sarathi_batch,
    build_slai_batch,
    build_vllm_batch,
    order_waiting,
)
from policies.slai.calibration import (
    AffineFit,
    BatchTimePoint,
    SlaiTimingProfile,
    fit_affine_batch_time,
    plot1_batch_times,
)
from policies.slai.deadline import deferral_window_s, is_critical, last_schedulable_time, safety_floor_delta
from policies.slai.decide import decide
from policies.slai.inputs import SlaiInputs, TierObservation
from policies.slai.offset_rule import OffsetRule, offset_for_kv_use, offset_rule_of
from policies.slai.params import OffsetMode, PrefillOrder, SlaiParams, TierSlo

__all__ = [
    "AdaptiveStep",
    "AffineFit",
    "BatchEntry",
    "BatchPlan",
    "BatchTimePoint",
    "BuilderParams",
    "EntryKind",
    "KvView",
    "OffsetMode",
    "OffsetRule",
    "Preemption",
    "PrefillOrder",
    "RequestView",
    "SchedulerKind",
    "SchedulerQueues",
    "SlaiInputs",
    "SlaiParams",
    "SlaiTimingProfile",
    "TierObservation",
    "TierSlo",
    "adapt_delta_lo",
    "build_batch",
    "build_sarathi_batch",
    "build_slai_batch",
    "build_vllm_batch",
    "decide",
    "deferral_window_s",
    "fit_affine_batch_time",
    "is_critical",
    "last_schedulable_time",
    "offset_for_kv_use",
    "offset_rule_of",
    "order_waiting",
    "plot1_batch_times",
    "safety_floor_delta",
    "tuning_signal",
]
