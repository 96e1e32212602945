"""The vLLM adapter: a stat-logger plugin (telemetry) and schedulers that obey EB+ and SLAI.

Importing this package imports nothing of vLLM: ``stat_logger`` and ``scheduler`` do, and vLLM
loads them by name (the entry point ``vllm.stat_logger_plugins`` and ``--scheduler-cls``).
docs/engines/vllm.md says how to connect an engine.
"""

from services.engines.vllm.connect import EngineLink, finish_reason_name

__all__ = ["EngineLink", "finish_reason_name"]
