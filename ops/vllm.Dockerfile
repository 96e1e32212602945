# A vLLM engine with Governor's adapter (docs/engines/vllm.md): vLLM's OpenAI server image plus the
# `llm-governor` package, so `--scheduler-cls services.engines.vllm.scheduler.EbplusScheduler` and the
# `vllm.stat_logger_plugins` entry point resolve inside the container.
FROM vllm/vllm-openai:v0.32.0

WORKDIR /opt/governor
COPY pyproject.toml README.md ./
COPY schemas ./schemas
COPY estimators ./estimators
COPY policies ./policies
COPY services ./services
RUN pip install --no-cache-dir --no-deps . \
    && pip install --no-cache-dir "kafka-python>=3.0.12" "crc32c>=2.9" "redis>=8.1" "structlog>=26.1"
