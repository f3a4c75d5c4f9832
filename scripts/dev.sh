#!/usr/bin/env bash
# One entry point for a fresh machine: `bash scripts/dev.sh demo` or `bash scripts/dev.sh test`
# (`bash scripts/dev.sh docs`: the documentation site).
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

# One Airflow version (e.g. 2.11.2) in its own venv, .venv-airflow-<version>, as a DAG author
# installs it: that Airflow, then the wheel built from this checkout with [test] (which brings
# [spark]). DELTA_WHEEL names a wheel built already (CI builds one for every version's venv).
setup_airflow() {
    local version="$1" venv=".venv-airflow-$1" wheel="${DELTA_WHEEL:-}"
    if [ -z "$wheel" ]; then
        wheel="$(build_wheel "build/wheel-$version")"
    fi
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv "$venv"
    fi
    "$venv/bin/python" -m pip install -q --disable-pip-version-check uv
    local constraints=()
    if [ -n "$(airflow_release_day "$version")" ]; then
        # Airflow's own dependency closure as it resolved the day the release came out: a
        # stand-in for its constraints file. Providers are released on their own, so a user takes
        # the ones this provider needs; they stay out of the pins.
        echo "apache-airflow==$version" > "$venv/airflow-release.in"
        "$venv/bin/python" -m uv pip compile -q -p "$venv/bin/python" --no-annotate --no-header \
            --exclude-newer "$(airflow_release_day "$version")" "$venv/airflow-release.in" \
            | grep -v '^apache-airflow-providers-' > "$venv/airflow-release-constraints.txt"
        constraints=(-c "$venv/airflow-release-constraints.txt")
    fi
    "$venv/bin/python" -m uv pip install -q -p "$venv/bin/python" --reinstall-package airflow-provider-delta \
        "apache-airflow==$version" "$wheel[test]" "${constraints[@]}" $(airflow_pins "$version")
}

# Airflow releases that break under today's versions of their own dependencies (a plain @task
# fails in dag.test()), not because of this provider; what a user's constraints file holds back.
# airflow_release_day: the day after the release reached PyPI; its dependencies resolve as of
# then. 3.2.2 (on PyPI 2026-05-29): under today's pydantic its execution API fails with a
# discriminator error, and with older Cadwyn/Starlette alone `svcs_registry` is missing.
airflow_release_day() {
    case "$1" in
        3.2.2) echo 2026-05-30 ;;
    esac
}

# airflow_pins: the few pins where the whole closure of the release day cannot hold: 3.0.6's
# (2025-08-29) pins opentelemetry-exporter-otlp 1.36.0, whose googleapis-common-protos 1.70.0
# pyspark[connect] >= 4.1 refuses. Its execution API answers every task start with a 422 under
# FastAPI >= 0.117 / Cadwyn >= 5.5.
airflow_pins() {
    case "$1" in
        3.0.*) echo "fastapi<0.117 cadwyn<5.5" ;;
    esac
}

# The documentation site (docs/, Sphinx) into build/docs/html, warnings as errors. The API
# pages import the package, so Airflow reads its configuration: a home of its own, in build/.
docs() {
    setup
    .venv/bin/python -m uv pip install -q -p .venv/bin/python -e ".[docs]"
    rm -rf build/docs
    mkdir -p build/docs/airflow-home
    AIRFLOW_HOME="$PWD/build/docs/airflow-home" AIRFLOW__LOGGING__LOGGING_LEVEL=WARNING \
        .venv/bin/python -m sphinx -W --keep-going -q \
        -b html -d build/docs/doctrees docs build/docs/html
}

# The wheel of this checkout, built into folder $1; prints its path.
build_wheel() {
    local python=.venv/bin/python  # its uv; a venv of its own where there is none yet
    rm -rf "$1"
    if [ ! -x "$python" ]; then
        python3 -m venv "$1/venv"
        python="$1/venv/bin/python"
        "$python" -m pip install -q --disable-pip-version-check uv
    fi
    "$python" -m uv build -q --wheel --out-dir "$1" . >&2
    realpath "$1"/airflow_provider_delta-*.whl
}

case "${1:-}" in
    setup) setup ;;
    # The other venvs alone (CI installs them in the background while the main suite runs).
    setup-lowest) setup_lowest ;;
    setup-delta-spark) setup_delta_spark ;;
    setup-airflow) setup_airflow "${2:?usage: bash scripts/dev.sh setup-airflow <airflow version>}" ;;
    demo)
        setup
        shift
        .venv/bin/python -m dags_examples.demo "$@"  # --connect: on a local Spark Connect server
        ;;
    test)
        # Two pytest-xdist workers, one a core (DELTA_TEST_WORKERS=0: one process); tests that
        # share a costly session fixture go to one worker (tests/conftest.py, xdist_group).
        setup
        shift
        .venv/bin/python -m pytest -n "${DELTA_TEST_WORKERS:-2}" --dist loadgroup "$@"
        ;;
    # DELTA_VENVS_READY=1: the venv was installed already in this run (CI installs them all
    # first), so it is not resolved and installed again.
    test-lowest)
        [ "${DELTA_VENVS_READY:-}" = 1 ] || setup_lowest
        shift
        .venv-lowest/bin/python -m pytest "$@"
        ;;
    test-delta-spark)
        [ "${DELTA_VENVS_READY:-}" = 1 ] || setup_delta_spark
        shift
        .venv-delta-spark/bin/python -m pytest "$@"
        ;;
    test-airflow)
        # The parts of the suite that run on every supported Airflow (see tests/versions/).
        version="${2:?usage: bash scripts/dev.sh test-airflow <airflow version> [pytest args]}"
        [ "${DELTA_VENVS_READY:-}" = 1 ] || setup_airflow "$version"
        shift 2
        DELTA_FROM_WHEEL=1 .venv-airflow-"$version"/bin/python -m pytest "${@:-tests/versions}"
        ;;
    docs) docs ;;
    wheel)
        build_wheel "${2:-build/wheel}"
        ;;
    *)
        echo "usage: bash scripts/dev.sh {setup|setup-lowest|setup-delta-spark|setup-airflow <version>|demo [--connect]|test [pytest args]|test-lowest [pytest args]|test-delta-spark [pytest args]|test-airflow <version> [pytest args]|docs|wheel [folder]}" >&2
        exit 2
        ;;
esac
