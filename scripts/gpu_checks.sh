#!/usr/bin/env bash
# The CUDA tests and measurements that the device modes still wait for, prepared for a GPU machine
# that starts bare, with no network and no fairseq, and is lent for minutes: nothing there should be typed, built or
# debugged that could be settled here.
#
#   here, once (needs PyPI; writes .whl/, which git ignores): the packages the GPU machine lacks, as wheels for its
#   Python 3.12, at the versions make setup installs (fairseq-fixed has a cp312 wheel: nothing is built there)
#     bash scripts/gpu_checks.sh wheels
#   there (with .whl/ copied beside the tree), the parts in order of value, in calls of under 10 minutes each
#   (the limits below add up to at most 570 s a call; installing the wheels took about 10 s; a session's 15 minutes
#   of device time, the start included, held on 2026-12-04 a first call of 519 s and a second of 143 s). The tests
#   come first: a change since they last passed is checked before anything is measured. The compile modes, still
#   refused, are next; the parts run on 2026-12-04 (transformer, graphed, merged_*: results.md) last
#     bash scripts/gpu_checks.sh run tests capture compile overhead shapes
#     bash scripts/gpu_checks.sh run largest lstm floor_lstm floor phases
#     bash scripts/gpu_checks.sh run transformer graphed merged_lstm merged_transformer
#
# Parts (each a command; see part_command below):
#   tests     the plan's tests first (what runs where), then the CUDA tests of the graphed passes, fairseq-train
#             with the captured step (and with the default, "auto") and the oracles around them (passed on an H200,
#             2026-12-04: 160 tests in 126 s, before the plan's tests joined them)
#   capture   tests/test_capture.py alone, each test's time listed (on an H200, 2026-12-04: 86 passed in 96 s with
#             4 workers; the LSTM's compiled bucket step takes 44 s alone, so each test is allowed 150 s)
#   graphed   the paper's LSTM (24K, B = 128, length 50): teacher-forced passes eager vs replayed as CUDA graphs
#   lstm      the paper's REINFORCE table (24K and 70K), small vs full vs the chunked full softmax, the
#             sampling step captured (the graphed passes: the graphed and phases parts)
#   transformer  the base Transformer's REINFORCE table (32K and 128K, B = 128 x 4 samples, loo), small vs full
#             vs the chunked full softmax, the sampling step captured
#   shapes    the NLLB-200 600M Transformer (|V| = 256,206, 12 + 12 layers, B = 16 x 4 samples, length 64, loo):
#             small (K = 1000, 2000) vs full vs the chunked full softmax (the chunked full softmax's GPU targets)
#   largest   the same: the largest REINFORCE batch whose step fits, small (K = 1000) vs full vs chunked
#   merged_lstm  one teacher-forced pass for the CE term and the samples' scores, off vs on: the paper's LSTM
#             (24K, its sampling step captured, so that its samples are scored by a pass)
#   merged_transformer  the same for the base Transformer (32K, B = 32 x 4 samples)
#   floor     the base Transformer's REINFORCE step (32K and 128K, small and full) against its matrix products
#             replayed alone as one CUDA graph: how far the step is from its arithmetic
#   floor_lstm  the paper's LSTM (24K and 70K, B = 128, length 50) against its products and cuDNN's RNN kernels
#             replayed alone as one CUDA graph (the floor of the captured step; not yet run on a GPU)
#   compile   the base Transformer's captured step (32K, B = 32 x 4 samples): alone vs fused by torch.compile
#   overhead  the same: the hand capture vs torch.compile(mode="reduce-overhead") making its own graphs
#   phases    the LSTM's phase breakdown with the graphed passes on (where the rest of the step goes)
# Each part writes $OUT/<part>.log (default OUT: gpu-checks/; eight files with env.log, as many as a machine that
# returns at most 8 gives back) and is stopped at its time limit (LIMIT_<part>=seconds overrides it), so that a
# slow part leaves time for the next.
# DRY=1 prints each part's command instead of running it (tests/test_documented_commands.py parse-checks them).
set -uo pipefail
cd "$(dirname "$0")/.."

# what make setup installs, or where it pins none, a version the others accept (tests/test_documented_commands.py)
WHEELS=(fairseq-fixed==0.12.3.1 hydra-core==1.3.2 omegaconf==2.3.0 bitarray==3.12.3)
SDIST_WHEELS=(antlr4-python3-runtime==4.9.3)  # on PyPI as an sdist only; pure Python, so a wheel made here serves
GPU_PYTHON=3.12  # the GPU machine's python3 (the one that holds its torch)
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64)
PARTS=(tests capture graphed lstm transformer merged_lstm merged_transformer shapes largest floor_lstm floor compile
       overhead phases)
declare -A LIMIT=([tests]=180 [capture]=150 [graphed]=60 [lstm]=200 [transformer]=120 [merged_lstm]=70
                  [merged_transformer]=70 [shapes]=120 [largest]=120 [floor_lstm]=90 [floor]=90 [compile]=60
                  [overhead]=60 [phases]=60)
NLLB=(--device cuda --shape nllb200_600m --modes reinforce --rl-samples 4 --rl-baseline loo --max-len 64
      --full-chunked)

LSTM_24K=(--device cuda --modes reinforce --vocab-sizes 24000 --k 1000 --k-sweep --batch 128 --max-len 50)
TRANSFORMER_32K=(--device cuda --arch transformer --vocab-sizes 32000 --k 1000 --k-sweep --modes reinforce
                 --rl-samples 4 --rl-baseline loo --batch 32 --max-len 30)
GRAPHED=graphed_pass  # the engine's settings that --ab and --set name (fairseq_smallvocab/engine/settings.py)
COMPILE=compile
CAPTURED=(--set capture=cuda-graphs)
UNTESTED=(--set untested_cuda_modes=on)  # the compile modes, refused on a GPU until their benchmark step runs

part_command() {  # the argv of one part, one word per line
    case "$1" in
        tests) printf '%s\n' python3 -m pytest tests/test_reinforce_config.py tests/test_layout.py \
            tests/test_graphed_pass.py tests/test_static_state.py tests/test_reinforce_gradients.py \
            tests/test_output_layer_grads.py tests/test_floor.py \
            tests/test_reinforce_cli.py::test_fairseq_train_on_a_gpu_replays_what_the_eager_loop_computes \
            -n 8 -q -ra ${PYTEST_TIMEOUT:+--timeout "$PYTEST_TIMEOUT"} ;;
        capture) printf '%s\n' python3 -m pytest tests/test_capture.py -n 4 -q -ra --durations 15 \
            ${PYTEST_TIMEOUT:+--timeout 150} ;;
        graphed) printf '%s\n' python3 scripts/benchmark.py "${LSTM_24K[@]}" "${CAPTURED[@]}" "${UNTESTED[@]}" \
            --ab "$GRAPHED=off,cuda-graphs" ;;
        lstm) printf '%s\n' python3 scripts/benchmark.py --device cuda --modes reinforce --vocab-sizes 24000 70000 \
            --k 1000 --k-sweep --batch 128 --max-len 50 --rounds 2 --full-chunked "${CAPTURED[@]}" "${UNTESTED[@]}" ;;
        transformer) printf '%s\n' python3 scripts/benchmark.py --device cuda --arch transformer --vocab-sizes 32000 \
            128000 --k 1000 --k-sweep --modes reinforce --rl-samples 4 --rl-baseline loo --batch 128 --max-len 32 \
            --full-chunked "${CAPTURED[@]}" "${UNTESTED[@]}" ;;
        merged_lstm) printf '%s\n' python3 scripts/benchmark.py "${LSTM_24K[@]}" "${CAPTURED[@]}" "${UNTESTED[@]}" \
            --ab merged_pass=off,on ;;
        merged_transformer) printf '%s\n' python3 scripts/benchmark.py "${TRANSFORMER_32K[@]}" --ab merged_pass=off,on ;;
        shapes) printf '%s\n' python3 scripts/benchmark.py "${NLLB[@]}" --batch 16 --k 1000 2000 ;;
        largest) printf '%s\n' python3 scripts/benchmark.py "${NLLB[@]}" --k 1000 --largest-batch --steps 2 \
            --warmup 1 ;;
        floor_lstm) printf '%s\n' python3 scripts/benchmark.py --device cuda --modes reinforce --vocab-sizes 24000 \
            70000 --k 1000 --k-sweep --batch 128 --max-len 50 --floor --steps 3 --warmup 1 "${UNTESTED[@]}" ;;
        floor) printf '%s\n' python3 scripts/benchmark.py --device cuda --arch transformer --vocab-sizes 32000 \
            128000 --k 1000 --k-sweep --modes reinforce --rl-samples 4 --rl-baseline loo --batch 32 --max-len 30 \
            --floor --steps 3 --warmup 1 ;;
        compile) printf '%s\n' python3 scripts/benchmark.py "${TRANSFORMER_32K[@]}" "${CAPTURED[@]}" "${UNTESTED[@]}" \
            --ab "$COMPILE=off,fuse" ;;
        overhead) printf '%s\n' python3 scripts/benchmark.py "${TRANSFORMER_32K[@]}" "${CAPTURED[@]}" \
            "${UNTESTED[@]}" --ab "$COMPILE=off,reduce-overhead" ;;
        phases) printf '%s\n' python3 scripts/benchmark.py "${LSTM_24K[@]}" --phases "${CAPTURED[@]}" "${UNTESTED[@]}" \
            --set "$GRAPHED=cuda-graphs" ;;
        *) echo "gpu_checks.sh: no part '$1'; the parts: ${PARTS[*]}" >&2; return 2 ;;
    esac
}

wheels() {
    local python=python3 platforms=() p
    [ -x .venv/bin/python ] && python=.venv/bin/python
    for p in "${PLATFORMS[@]}"; do platforms+=(--platform "$p"); done
    local download=("$python" -m pip download --no-deps --only-binary=:all: --python-version "$GPU_PYTHON"
                    --implementation cp "${platforms[@]}" -d .whl "${WHEELS[@]}")
    local build=("$python" -m pip wheel --no-deps -w .whl "${SDIST_WHEELS[@]}")
    if [ -n "${DRY:-}" ]; then echo "${download[*]}"; echo "${build[*]}"; return; fi
    "${download[@]}" && "${build[@]}" && du -sh .whl
}

install() {  # the carried wheels beside the image's own torch and numpy; the tree itself on the path
    if ! ls .whl/*.whl >/dev/null 2>&1; then
        echo "gpu_checks.sh: no .whl/ here: run 'bash scripts/gpu_checks.sh wheels' where PyPI is reachable," \
             "then name .whl in the device call's carry" >&2
        return 1
    fi
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl || return 1
    export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PATH="/tmp/site/bin:$PATH" PYTHONUNBUFFERED=1
    python3 -c "import torch, fairseq, fairseq_smallvocab; assert torch.cuda.is_available(), 'torch sees no GPU'" \
        || return 1
    # a test that hangs (a stuck CUDA call) is stopped alone where pytest-timeout is installed (the GPU image has it)
    if python3 -c "import pytest_timeout" 2>/dev/null; then export PYTEST_TIMEOUT=200; fi
}

environment() {
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    nproc
    python3 - <<'EOF'
import sys, numpy, torch, fairseq
print("python", sys.version.split()[0], "| torch", torch.__version__, "| numpy", numpy.__version__,
      "| fairseq", fairseq.__version__)
EOF
    git rev-parse HEAD 2>/dev/null || echo "(no .git: the commit is the one the device call was made from)"
}

run() {
    local out=${OUT:-gpu-checks} part status start
    [ $# -gt 0 ] || set -- "${PARTS[@]}"
    for part in "$@"; do part_command "$part" >/dev/null || return 2; done
    if [ -n "${DRY:-}" ]; then
        for part in "$@"; do mapfile -t argv < <(part_command "$part"); printf '%q ' "${argv[@]}"; echo; done
        return
    fi
    mkdir -p "$out"
    install || return 1
    environment >"$out/env.log" 2>&1
    cat "$out/env.log"
    for part in "$@"; do
        mapfile -t argv < <(part_command "$part")
        local limit_name="LIMIT_$part"
        local limit=${!limit_name:-${LIMIT[$part]}}
        start=$SECONDS
        { printf '$'; printf ' %q' "${argv[@]}"; echo; } >"$out/$part.log"
        timeout -k 10 "$limit" "${argv[@]}" >>"$out/$part.log" 2>&1
        status=$?
        echo "== $part: exit $status after $((SECONDS - start)) s (limit $limit s; 124 is the limit) =="
        tail -n 25 "$out/$part.log"
    done
}

case "${1:-}" in
    wheels) wheels ;;
    run) shift; run "$@" ;;
    *) echo "usage: bash scripts/gpu_checks.sh wheels | run [${PARTS[*]}]" >&2; exit 2 ;;
esac
