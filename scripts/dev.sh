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

# Delta's own jars (sink="delta-spark", Delta's reader as the tests' oracle) exist for Spark 4.2
# at the newest (io.delta:delta-spark_2.13:4.4.0); on Spark 4.3 they fail (NoSuchMethodError in
# LogicalRDD). Their tests run in .venv-delta-spark on pyspark 4.2.0; the jars come from Maven
# Central through spark.jars.packages into ./.ivy2 (tests/delta_spark/conftest.py).
setup_delta_spark() {
    if [ ! -x .venv-delta-spark/bin/python ]; then
        python3 -m venv .venv-delta-spark
    fi
    .venv-delta-spark/bin/python -m pip install -q --disable-pip-version-check uv
    .venv-delta-spark/bin/python -m uv pip install -q -p .venv-delta-spark/bin/python \
        -e ".[test,delta-spark]" "pyspark==4.2.0" "pyspark-client==4.2.0" "delta-spark==4.4.0"
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
    test-delta-spark)
        setup_delta_spark
        shift
        .venv-delta-spark/bin/python -m pytest "$@"
        ;;
    *)
        echo "usage: bash scripts/dev.sh {setup|demo [--connect]|test [pytest args]|test-lowest [pytest args]|test-delta-spark [pytest args]}" >&2
        exit 2
        ;;
esac
