"""``GovernorStatLogger``: the vLLM stat-logger plugin that feeds Governor from a stock engine.

Registered under the entry-point group ``vllm.stat_logger_plugins`` (pyproject.toml), so that
``pip install 'llm-governor[vllm]'`` and the Governor environment (``GOVERNOR_ENGINE_ID``,
``GOVERNOR_DEPLOYMENT``, ``GOVERNOR_KAFKA_BOOTSTRAP``) are all an operator of ``vllm serve`` needs.
vLLM calls ``record`` once per engine step in its front-end process with the step's
``SchedulerStats`` and ``IterationStats``; the plugin publishes through the non-blocking
``TelemetryPublisher`` and returns at once.

What vLLM gives a stat logger, and what the plugin derives where it gives less:

- registration: model, max_num_seqs, token budget, max_model_len and the KV cache's block size and
  count, from the engine's ``VllmConfig`` once the engine is up;
- steps: with ``--enable-logging-iteration-details`` the step's prefill requests and tokens, decode
  requests and model time are exact; without it the plugin counts first tokens (prefills that
  completed) and inter-token gaps (decodes), takes the prompt tokens computed for the completed
  prefills and the time since the previous busy step, so a chunked prefill's middle chunks are missed.
  The summed decode context is not reported (0). Queue sizes and KV use (``kv_cache_usage`` times the
  block count) are exact either way.
- requests: vLLM reports a request to stat loggers only when it finishes, with its id, lengths,
  ``max_tokens``, finish reason and latencies. The plugin then emits its ``request.arrived`` (late by
  the request's end-to-end latency, so arrival rates lag in transients) and its ``request.finished``
  with the true arrival time, TTFT = end-to-end latency - decode time, and the mean TPOT; the per-gap
  TBT tail is not available. Tiers are the engine's ``GOVERNOR_TIER``.

Under vLLM's internal data parallelism the front end builds one stat logger per rank (``engine_index``),
and each publishes as that rank of the one engine (``EngineLink.open``), without ``rank.step`` reports.

The schedulers in ``services.engines.vllm.scheduler`` see all of this exactly from inside the engine
core. When one of them runs, it publishes the engine's stream itself and this plugin stays silent, so
each engine has exactly one producer.
"""

from __future__ import annotations

import time
from typing import Any

import structlog
from vllm.config import VllmConfig
from vllm.v1.metrics.loggers import StatLoggerBase
from vllm.v1.metrics.stats import FinishedRequestStats, IterationStats, SchedulerStats

from services.engines.stream import RequestTrack
from services.engines.vllm.connect import EngineLink, VllmEngineSettings, finish_reason_name, identifier
from services.sdk.step_counts import StepCounts

log = structlog.get_logger(__name__)

SCHEDULER_MODULE = "services.engines.vllm.scheduler"
MODE = "vllm"


def runs_governor_scheduler(vllm_config: Any) -> bool:
    """True when the engine's ``--scheduler-cls`` is one of Governor's (which then publishes itself)."""
    configured = getattr(vllm_config.scheduler_config, "scheduler_cls", None)
    name = configured if isinstance(configured, str) else getattr(configured, "__module__", "")
    return isinstance(name, str) and name.startswith(SCHEDULER_MODULE)


class GovernorStatLogger(StatLoggerBase):
    """Publishes a stock vLLM engine's registration, steps and finished requests to Governor."""

    def __init__(self, vllm_config: VllmConfig, engine_index: int = 0) -> None:
        self.vllm_config = vllm_config
        self.engine_index = engine_index
        self.settings = VllmEngineSettings.load()
        self.passive = self.settings.engine_id is None or runs_governor_scheduler(vllm_config)
        self.link: EngineLink | None = None
        self._load = (0, 0)
        self._last_busy_s: float | None = None
        self._anonymous = 0

    def log_engine_initialized(self) -> None:
        """Register the engine, now that its KV cache is sized."""
        if self.passive:
            reason = "GOVERNOR_ENGINE_ID is not set" if self.settings.engine_id is None else "a Governor scheduler runs"
            log.info("governor_stat_logger_passive", reason=reason)
            return
        self._open()

    def record(
        self,
        scheduler_stats: SchedulerStats | None,
        iteration_stats: IterationStats | None,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None:
        """Publish the step and the requests that finished in it."""
        if self.passive:
            return
        link = self._open()
        now_s = iteration_stats.iteration_timestamp if iteration_stats is not None else time.time()
        if iteration_stats is not None:
            for finished in iteration_stats.finished_requests:
                self._finished(link, now_s, finished)
        if scheduler_stats is not None:
            self._step(link, now_s, scheduler_stats, iteration_stats)

    def log(self) -> None:
        """vLLM's periodic log call: a heartbeat, so an idle engine still holds its place in the fleet."""
        if self.link is not None:
            running, waiting = self._load
            self.link.stream.heartbeat(time.time(), num_running=running, num_waiting=waiting)

    def _open(self) -> EngineLink:
        if self.link is None:
            cache = self.vllm_config.cache_config
            self.link = EngineLink.open(
                self.vllm_config,
                block_size_tokens=int(cache.block_size),
                kv_blocks_total=self._kv_blocks_total(),
                scheduler=MODE,
                obeys=[],
                load=lambda: self._load,
                settings=self.settings,
                engine_index=self.engine_index,
            )
        return self.link

    def _kv_blocks_total(self) -> int:
        blocks = getattr(self.vllm_config.cache_config, "num_gpu_blocks", None)
        return max(1, int(blocks) - 1) if isinstance(blocks, int) else 1

    def _finished(self, link: EngineLink, now_s: float, finished: FinishedRequestStats) -> None:
        e2e_s = max(0.0, float(getattr(finished, "e2e_latency", 0.0)))
        request_id = finished.request_id
        if request_id is None:
            self._anonymous += 1
            request_id = f"vllm-{self._anonymous}"
        settings = link.settings
        max_tokens = finished.max_tokens_param
        track = RequestTrack(
            request_id=identifier(request_id),
            arrived_s=max(0.0, now_s - e2e_s),
            prompt_tokens=finished.num_prompt_tokens,
            max_tokens=max_tokens if isinstance(max_tokens, int) and max_tokens >= 1 else None,
            tier=settings.tier,
            tbt_slo_s=settings.tbt_slo_s,
            admitted_s=max(0.0, now_s - e2e_s + finished.queued_time),
            output_tokens=finished.num_generation_tokens,
            preemptions=finished.num_preemptions,
        )
        ttft_s = max(0.0, e2e_s - finished.decode_time) if finished.num_generation_tokens > 0 else None
        tpot_s = finished.mean_time_per_output_token
        link.stream.summarised(
            now_s,
            track,
            finish_reason_name(str(finished.finish_reason)),
            ttft_s=ttft_s,
            tbt_mean_s=tpot_s if tpot_s > 0.0 else None,
        )

    def _step(self, link: EngineLink, now_s: float, stats: SchedulerStats, iteration: IterationStats | None) -> None:
        self._load = (stats.num_running_reqs, stats.num_waiting_reqs + stats.num_skipped_waiting_reqs)
        details = stats.iteration_details
        if details is not None and not details.is_dummy:
            duration_s: float | None = details.elapsed_ms / 1000.0
            prefill_requests, prefill_tokens = details.num_ctx_requests, details.num_ctx_tokens
            decode_requests = details.num_generation_requests
        elif iteration is not None:
            previous = self._last_busy_s
            duration_s = None if previous is None else now_s - previous
            prefill_requests = len(iteration.time_to_first_tokens_iter)
            prefill_tokens = iteration.prompt_token_stats.computed
            decode_requests = len(iteration.inter_token_latencies_iter)
        else:
            return
        self._last_busy_s = now_s if stats.num_running_reqs > 0 else None
        if duration_s is None or duration_s <= 0.0:
            return
        total = self._kv_blocks_total()
        link.stream.step(
            now_s,
            StepCounts(
                duration_s=duration_s,
                num_prefill_requests=prefill_requests,
                sum_prefill_tokens=prefill_tokens,
                num_decode_requests=decode_requests,
                sum_decode_kv_tokens=0,
                num_running=stats.num_running_reqs,
                num_waiting=stats.num_waiting_reqs + stats.num_skipped_waiting_reqs,
                kv_blocks_used=round(stats.kv_cache_usage * total),
                kv_blocks_total=total,
                num_preempted=iteration.num_preempted_reqs if iteration is not None else 0,
                scheduler_mode=MODE,
            ),
        )
