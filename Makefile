# Two entry points (see README): `make demo` and `make test`. Everything else is set up on demand.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test test-fast typecheck test-spark bench fuzz test-fencing test-parity test-cluster-faults test-sidecar-cluster test-franz test-kafka-apps test-topology test-tansu test-tokens test-nemesis nemesis-schedule clean

$(STAMP): pyproject.toml
	@command -v java >/dev/null || { echo "java not found: install a Java 17+ runtime"; exit 2; }
	@command -v mvn >/dev/null || { echo "mvn not found: install Apache Maven"; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@rm -f $(VENV)/.installed-*; touch $@

demo: $(STAMP)
	$(VENV)/bin/kshare demo

# The type check runs first (seconds; a type error fails the suite before the brokers start).
# The Spark source has its own suite (PySpark is ~450 MB and the suite takes minutes): test-spark.
test: $(STAMP)
	$(PY) -m mypy
	$(PY) -m pytest -q -rfEs --ignore=tests/spark

test-spark: $(STAMP)
	$(PY) -m pip install -q -e '.[test,spark]'
	$(PY) -m pytest -q -rfEs tests/spark

test-fast: $(STAMP)
	$(PY) -m pytest -q tests/unit

# mypy over kshare_sidecar/ with the settings in pyproject.toml ([tool.mypy]); also the first step of `test`.
typecheck: $(STAMP)
	$(PY) -m mypy

bench: $(STAMP)
	$(PY) benchmarks/engine.py --quick

# Hostile frames against a live sidecar on Kafka 3.9 (docs/wire.md, "Reliability"); opt-in.
FUZZ_MINUTES ?= 10
fuzz: $(STAMP)
	$(PY) tests/fuzz/run.py --minutes $(FUZZ_MINUTES) --progress

# The fencing fault scenarios (docs/persistence.md), each run FENCING_REPEAT times in a row; opt-in.
FENCING_REPEAT ?= 5
test-fencing: $(STAMP)
	KSHARE_FENCING_REPEAT=$(FENCING_REPEAT) KSHARE_FENCING_MODES=fenced,transactional $(PY) -m pytest -q -rfEs -m kafka tests/e2e/test_fencing_faults.py

# The differential harness (docs/testing.md): PARITY_EXAMPLES generated sequences on native Kafka
# 4.3 and kshare on 3.9, step by step; opt-in (hours for thousands).
PARITY_EXAMPLES ?= 1000
test-parity: $(STAMP)
	KSHARE_PARITY_EXPLORE=1 KSHARE_PARITY_EXAMPLES=$(PARITY_EXAMPLES) $(PY) -m pytest -q -rfEs tests/e2e/parity

# A 3-broker backend: partition and state-topic leaders restarted under a 200k share-consume; opt-in.
test-cluster-faults: $(STAMP)
	KSHARE_CLUSTER_FAULTS=1 $(PY) -m pytest -q -rfEs tests/e2e/test_cluster3_failover.py

# A cluster of sidecars (issue 15): kill -9 / a fourth joining under 200k records, rolling restart, a single
# sidecar's (older layout) state topic taken over by three, and the native reference (3-broker Kafka
# 4.3.1, a broker killed under the same load); opt-in.
test-sidecar-cluster: $(STAMP)
	KSHARE_SIDECAR_CLUSTER=1 $(PY) -m pytest -q -rfEs -s tests/e2e/test_sidecar_cluster.py tests/e2e/test_cluster_layout.py tests/e2e/test_cluster_native_reference.py

# The deployment topologies run for real (compose/kafka39-cluster.yml, compose/kubernetes/): each
# host a network namespace (root and iproute2); opt-in, a few minutes.
test-topology: $(STAMP)
	KSHARE_TOPOLOGY=1 $(PY) -m pytest -q -rfEs -s tests/e2e/test_topology.py

# franz-go's own integration suite (pkg/kgo, pinned version from the Go module proxy) with the
# sidecar as its one bootstrap, on Kafka 3.9 and 4.3 backends, beside native Kafka 4.3; opt-in (~30 min).
test-franz: $(STAMP)
	KSHARE_FRANZ=1 $(PY) -m pytest -q -rfEs -s tests/e2e/test_franz_suite.py

# Kafka 4.3's own applications (Kafka Streams EOS word count with a SIGKILL, VerifiableProducer/
# VerifiableConsumer, TransactionalMessageCopier) through the sidecar and natively; opt-in.
test-kafka-apps: $(STAMP)
	KSHARE_KAFKA_APPS=1 $(PY) -m pytest -q -rfEs -s tests/e2e/test_kafka_apps.py

# kshare on tansu 0.6.0, a Kafka-compatible broker that is not Apache Kafka (issue 16; docs/compatibility.md,
# "Tansu"); opt-in. Builds tansu with cargo into ~/.cache/kshare/tansu-0.6.0 first if missing (~40 min on 2 cores).
test-tansu: $(STAMP)
	$(VENV)/bin/kshare dev install-tansu
	KSHARE_TANSU=1 $(PY) -m pytest -q -rfEs tests/integration/test_tansu_backend.py tests/e2e/test_tansu.py

# Credentials that expire under load (issue 16): delegation tokens of 8 s replaced while an mTLS
# client produces for 25 s through a sidecar passing through as the client, upstreams
# re-authenticating in place; a sidecar without CREATE_TOKENS; OAUTHBEARER tokens from an endpoint
# refreshed while the sidecar's backend sessions re-authenticate (KIP-368); opt-in (~2 min).
test-tokens: $(STAMP)
	KSHARE_TOKEN_REAUTH=1 $(PY) -m pytest -q -rfEs -s tests/e2e/test_acl_parity.py tests/e2e/test_backend_oauth_endpoint.py \
		-k "tokens_are_replaced or without_create_tokens or tokens_refresh_and_sessions_reauthenticate"

# The nemesis (docs/testing.md, "The nemesis"): a cluster of sidecars on network namespaces under a
# share-consume while links are cut, split, slowed, flapped; each fault class NEMESIS_REPEAT times,
# the checker over every run; root, iproute2, iptables; opt-in (about two hours on a quiet machine).
NEMESIS_REPEAT ?= 5
test-nemesis: $(STAMP)
	$(PY) -m pytest -q -rfEs -s -p tests.e2e.nemesis_options --run nemesis --timeout 1800 \
		--nemesis-repeat $(NEMESIS_REPEAT) tests/e2e/test_nemesis.py

# A seeded random schedule of the nemesis' faults (one or two at a time) for MINUTES; a failure
# prints the seed: `make nemesis-schedule MINUTES=30 SEED=1234` replays it. NEMESIS_BROKERS=3: a
# 3-broker backend (broker isolation in the mix).
MINUTES ?= 30
SEED ?=
NEMESIS_BROKERS ?= 1
nemesis-schedule: $(STAMP)
	$(PY) -m pytest -q -rfEs -s -p tests.e2e.nemesis_options --run nemesis \
		--timeout $$(( $(MINUTES) * 60 + 1800 )) --nemesis-minutes $(MINUTES) --nemesis-brokers $(NEMESIS_BROKERS) \
		$(if $(SEED),--nemesis-seed $(SEED)) tests/e2e/test_nemesis.py -k test_seeded_schedule

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache
