#!/usr/bin/env bash
# The engines that are too heavy for ".[test]" (vLLM with its CUDA torch, SGLang, torch + TRL,
# Ray) get their own virtual environments here, and each runs exactly the tests that need it.
# Elsewhere those tests skip, saying which engine is missing.
#
# usage: scripts/integration_env.sh [vllm|sglang|train|llama|all]...   (default: all but llama)
# The venvs live under $INTEGRATION_VENVS (default .integration-venvs/) and are reused when they
# exist; delete a folder to rebuild it.
set -euo pipefail
cd "$(dirname "$0")/.."
VENVS=${INTEGRATION_VENVS:-.integration-venvs}
PYTHON=${PYTHON:-python3}

# make_venv NAME PIP_ARGS...: create $VENVS/NAME once, install the project and PIP_ARGS into it.
make_venv() {
    local name=$1
    shift
    if [ ! -x "$VENVS/$name/bin/python" ]; then
        "$PYTHON" -m venv "$VENVS/$name"
        "$VENVS/$name/bin/python" -m pip install --upgrade pip
        "$VENVS/$name/bin/python" -m pip install "$@"
    fi
}

# run_tests NAME PYTEST_ARGS...: the tests of one group, in its venv.
run_tests() {
    local name=$1
    shift
    echo "== $name: $("$VENVS/$name/bin/python" --version) =="
    "$VENVS/$name/bin/python" -m pytest -p no:cacheprovider "$@"
}

# vLLM 0.33 pins torch==2.14.0 (a CUDA build from PyPI, ~9.5 GB installed) and SGLang 0.5.23
# torch==2.14.1, so the two engines cannot share a venv.
# refresh NAME: reinstall the project alone, so entry points added since the venv was built exist.
refresh() {
    "$VENVS/$1/bin/python" -m pip install --quiet --no-deps -e .
}

group_vllm() {
    make_venv vllm -e ".[vllm]" "vllm==0.33.0" "pytest>=8" "hypothesis>=6.100"
    refresh vllm
    run_tests vllm tests/integrations/test_vllm.py tests/integrations/test_vllm_serving.py \
        tests/integrations/test_vllm_render_server.py tests/integrations/test_engine_robustness.py
}

group_sglang() {
    make_venv sglang -e ".[sglang]" "sglang==0.5.23" "pytest>=8" "hypothesis>=6.100"
    refresh sglang
    run_tests sglang tests/integrations/test_sglang.py tests/integrations/test_sglang_serving.py \
        tests/integrations/test_engine_robustness.py
}

# torch is pinned to the CPU build that lies on this machine's disk: a bare "torch" (or TRL asking
# for one) would pull a CUDA build of several GB. TRL is pinned to the release whose column rules
# the data tests check (input_ids means "already tokenized", assistant_masks is always applied).
group_train() {
    make_venv train "torch==2.13.0" "trl==1.16.0" -e ".[test,data,ray]"
    refresh train
    run_tests train tests/test_data.py tests/test_train.py tests/test_rollout_model.py \
        tests/test_robustness.py -q
    # The training-data page's Ray block runs here (it skips where Ray is absent).
    run_tests train tests/test_docs.py -q -k training-data
}

# llama-cpp-python compiles llama.cpp from its sdist (no Linux wheels on PyPI): minutes of C++ on
# a small machine, so it is optional and not part of "all". The tests check qwen-encode's
# "as llama.cpp will" IDs, end-of-generation set and load behaviour against the real library,
# on GGUFs written by scripts/make_gguf.py (vocab_only: no weights needed).
group_llama() {
    make_venv llama "llama-cpp-python==0.3.36" "gguf>=0.17" -e ".[test]"
    refresh llama
    run_tests llama tests/integrations/test_llama_cpp.py -q
}

groups=("$@")
[ ${#groups[@]} -eq 0 ] && groups=(vllm sglang train)
[ "${groups[0]}" = all ] && groups=(vllm sglang train)
status=0
for g in "${groups[@]}"; do
    case $g in
        vllm | sglang | train | llama) "group_$g" || status=1 ;;
        *)
            echo "unknown group: $g (vllm, sglang, train, llama, all)" >&2
            exit 2
            ;;
    esac
done
exit $status
