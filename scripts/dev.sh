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
    *)
        echo "usage: bash scripts/dev.sh {setup|demo [--connect]|test [pytest args]}" >&2
        exit 2
        ;;
esac
