#!/usr/bin/env bash
# One entry point for a fresh machine: `bash scripts/dev.sh demo` or `bash scripts/dev.sh test`.
# Everything is installed into ./.venv from the package registry; Java 17 must be on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

setup() {
    if [ ! -x .venv/bin/python ]; then
        python3 -m venv .venv
    fi
    .venv/bin/python -m pip install -q --disable-pip-version-check uv
    .venv/bin/python -m uv pip install -q -p .venv/bin/python -e ".[test]"
}

# The lowest versions every dependency declares (pyproject's floors), in their own venv:
# proves the floors are true. Transitive dependencies resolve to their newest versions.
setup_lowest() {
    if [ ! -x .venv-lowest/bin/python ]; then
        python3 -m venv .venv-lowest
    fi
    .venv-lowest/bin/python -m pip install -q --disable-pip-version-check uv
    .venv-lowest/bin/python -m uv pip install -q -p .venv-lowest/bin/python \
        --resolution lowest-direct -e ".[test]"
}

case "${1:-}" in
    setup) setup ;;
    demo)
        setup
        shift
        .venv/bin/python -m dags_examples.demo "$@"  # --connect: on a local Spark Connect server
        ;;
    test)
        setup
        shift
        .venv/bin/python -m pytest "$@"
        ;;
    test-lowest)
        setup_lowest
        shift
        .venv-lowest/bin/python -m pytest "$@"
        ;;
    *)
        echo "usage: bash scripts/dev.sh {setup|demo [--connect]|test [pytest args]|test-lowest [pytest args]}" >&2
        exit 2
        ;;
esac
