"""Real vLLM CPU servers on the tiny random Llama with a word-level tokenizer built here, for the gateway.

The model directory is services/engines/vllm/tiny_model's config (dummy weights) with a word-level tokenizer
(``tokenizers``, which comes with vLLM; vocabulary: ASCII punctuation and a few hundred English words, the rest
``<unk>``) and a plain chat template, so text prompts work and ``/tokenize`` answers with the served model's
own count. ``governor fleet up``, tests/integration/test_gateway.py and the gateway's benchmarks on real ranks
start their servers with these helpers (they need the ``vllm`` extra).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import tokenizers

from services.settings import child_environment

TINY_MODEL = Path(__file__).resolve().parent / "tiny_model"
SERVED_MODEL = "tiny"
WORDS = (
    "the a of to in is it that for on with as was be by at this are from or have not but what all were when we "
    "there can your which their said if do will each about how up out them then she many some so these would "
    "other into has more her two like him see time could no make than first been its who now people my made over "
    "did down only way find use may water long little very after words called just where most know get through "
    "back much go good new write our me man too any day same right look think also around another came come work "
    "three word must because does part even place well such here take why things help put years different away "
    "again off went old number great tell men say small every found still between name should home big give air "
    "line set own under read last never us left end along while might next sound below saw something thought "
    "both few those always looked show large often together asked house world going want school important until "
    "form food keep children feet land side without boy once animals life enough took sometimes four head above "
    "kind began almost live page got earth need far hand high year mother light parts country father let night "
    "river valley dam farmers crops flood spring council market town rain festival library choir tourists"
)
TEXT = (
    "The river flooded the valley in spring. Farmers in the valley lost their crops to the river. "
    "A festival was held in the town last year. Engineers said a dam on the river would help the valley. "
    "The dam would keep the spring flood away from valley farms. Some people liked the market. "
    "The council talked about the river dam for many months. Tourists came to the market in the town. "
    "Rain records show the river floods the valley often. A choir sang at the new library. "
    "Some said the dam costs too much for the valley. Should the council build the dam on the river?"
)


def vocabulary() -> list[str]:
    """The word-level tokenizer's tokens in id order: the specials, ASCII punctuation, then ``WORDS``."""
    specials = ["<unk>", "<s>", "</s>"]
    punctuation = [chr(c) for c in range(33, 127) if not chr(c).isalnum()]
    return list(dict.fromkeys([*specials, *punctuation, *WORDS.split()]))


def word_token_ids(count: int) -> tuple[int, ...]:
    """The token ids of the first ``count`` words of ``WORDS``.

    The random model emits them at random, so a request with them as ``stop_token_ids`` ends with finish
    reason ``stop`` after a random number of tokens (measured on the CPU build: 60 ids end a request after
    about 20 tokens, 20 after about 60), as a real model's answers end; ``ignore_eos`` does not affect them.
    """
    tokens = vocabulary()
    first = tokens.index(WORDS.split(maxsplit=1)[0])
    return tuple(range(first, first + count))


def tiny_model_dir(folder: Path) -> Path:
    """The tiny model's config plus a word-level tokenizer and a plain chat template."""
    shutil.copy(TINY_MODEL / "config.json", folder / "config.json")
    tokens = vocabulary()
    model = tokenizers.models.WordLevel(vocab={t: i for i, t in enumerate(tokens)}, unk_token="<unk>")
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))
    template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": 1024,
        "chat_template": template,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def vllm_command(
    model: Path,
    port: int,
    *,
    max_num_seqs: int = 4,
    max_model_len: int = 512,
    seed: int = 0,
    scheduler_cls: str | None = None,
) -> list[str]:
    """The OpenAI server of vLLM on ``model`` with dummy weights, float32, eager, serving ``tiny``.

    ``scheduler_cls`` is passed as ``--scheduler-cls`` (one of Governor's schedulers,
    services/engines/vllm/scheduler.py); None keeps vLLM's own scheduler.
    """
    scheduler = [] if scheduler_cls is None else ["--scheduler-cls", scheduler_cls]
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        *("--model", str(model), "--served-model-name", SERVED_MODEL, "--load-format", "dummy", "--dtype", "float32"),
        *("--max-model-len", str(max_model_len), "--max-num-seqs", str(max_num_seqs), "--enforce-eager"),
        *("--seed", str(seed), "--host", "127.0.0.1", "--port", str(port)),
        *scheduler,
    ]


def start_vllm(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Start one server with one OpenMP thread and 1 GiB of KV cache, its output in ``log``."""
    env = child_environment({"OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"})
    with log.open("w") as output:
        return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)


def wait_healthy(process: subprocess.Popen[bytes], url: str, log: Path, timeout_s: float) -> None:
    """Return once ``url``/health answers; RuntimeError with the log's tail if the server exits or times out."""
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            msg = f"vLLM exited with {process.returncode}: {log.read_text()[-3000:]}"
            raise RuntimeError(msg)
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5.0):
                return
        except OSError:
            if time.monotonic() > deadline:
                msg = f"vLLM did not start in {timeout_s} s: {log.read_text()[-3000:]}"
                raise RuntimeError(msg) from None
            time.sleep(1.0)


def stop_vllm(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 60 s."""
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
