# Two entry points (see README): `make demo` and `make test`. Everything else is set up on demand.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: jvm demo test test-fast typecheck test-spark bench fuzz test-faults test-fencing test-parity test-parity-debts test-cluster-faults test-sidecar-cluster test-franz test-kafka-apps test-topology test-connsetup test-tansu test-tokens test-console test-containers test-migration test-backends test-dlq soak test-soak test-hostile test-nemesis nemesis-schedule clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@rm -f $(VENV)/.installed-*; touch $@

# The real brokers of the harness run on a JVM from Maven Central's jars: checked before any target that
# starts one. test-fast, typecheck and bench need neither.
jvm:
	@command -v java >/dev/null || { echo "java not found: install a Java 17+ runtime"; exit 2; }
	@command -v mvn >/dev/null || { echo "mvn not found: install Apache Maven"; exit 2; }

demo: $(STAMP) jvm
	$(VENV)/bin/kshare demo

# The type check runs first (seconds; a type error fails the suite before the brokers start).
# The Spark source has its own suite (PySpark is ~450 MB and the suite takes minutes): test-spark.
test: $(STAMP) jvm
	$(PY) -m mypy
	$(PY) -m pytest -q -rfEs --ignore=tests/spark

test-spark: $(STAMP) jvm
	$(PY) -m pip install -q -e '.[test,spark]'
	$(PY) -m pytest -q -rfEs tests/spark

test-fast: $(STAMP)
	$(PY) -m pytest -q tests/unit

# mypy over kshare_sidecar/ with the settings in pyproject.toml ([tool.mypy]); also the first step of `test`.
typecheck: $(STAMP)
	$(PY) -m mypy

bench: $(STAMP)
	$(PY) benchmarks/engine.py --quick

# Process faults under load (docs/testing.md): broker restarts, a leader killed, a sidecar restart; opt-in.
test-faults: $(STAMP) jvm
	$(PY) -m pytest -q -rfEs --run faults tests/e2e/test_backend_outage.py tests/e2e/test_passthrough_outage.py \
		tests/e2e/test_passthrough_multibroker.py tests/e2e/test_ext_backoff.py

# Hostile frames against a live sidecar on Kafka 3.9 (docs/wire.md, "Reliability"); opt-in.
FUZZ_MINUTES ?= 10
fuzz: $(STAMP) jvm
	$(PY) tests/fuzz/run.py --minutes $(FUZZ_MINUTES) --progress

# The fencing fault scenarios (docs/persistence.md), each run FENCING_REPEAT times in a row; opt-in.
FENCING_REPEAT ?= 5
test-fencing: $(STAMP) jvm
	KSHARE_FENCING_REPEAT=$(FENCING_REPEAT) KSHARE_FENCING_MODES=fenced,transactional $(PY) -m pytest -q -rfEs -m kafka --run fencing tests/e2e/test_fencing_faults.py tests/e2e/test_sidecar_restart.py

# The differential harness (docs/testing.md): PARITY_EXAMPLES generated sequences on native Kafka
# 4.4 (the reference, alias "4") and kshare on 3.9, step by step; opt-in (hours for thousands).
PARITY_EXAMPLES ?= 1000
test-parity: $(STAMP) jvm
	KSHARE_PARITY_EXPLORE=1 KSHARE_PARITY_EXAMPLES=$(PARITY_EXAMPLES) $(PY) -m pytest -q -rfEs tests/e2e/parity

# Parity debts found side by side (docs/compatibility.md): a fresh ACL grant on SASL_SSL, group configs
# changed under a running consumer, a consumer_byte_rate quota, allow.everyone.if.no.acl.found —
# each on native Kafka 4.4 and kshare over 3.9; opt-in (about 8 minutes: each file starts its own 4.4 broker).
test-parity-debts: $(STAMP) jvm
	$(PY) -m pytest -q -rfEs -s --run parity-debts tests/e2e/test_fresh_grant_parity.py \
		tests/e2e/test_live_group_config_parity.py tests/e2e/test_client_quota_parity.py \
		tests/e2e/test_acl_everyone_parity.py

# Dead-letter queues and Kafka 4.4's tools side by side: the same scenarios on native Kafka 4.4.0 and
# kshare on 3.9, compared field by field (docs/extensions.md); opt-in, a few minutes.
test-dlq: $(STAMP) jvm
	$(PY) -m pytest -q -rfEs --run dlq tests/e2e/test_dlq_parity.py tests/e2e/test_tools_44.py

# A 3-broker backend: partition and state-topic leaders restarted under a 200k share-consume; opt-in.
test-cluster-faults: $(STAMP) jvm
	$(PY) -m pytest -q -rfEs --run cluster-faults tests/e2e/test_cluster3_failover.py

# A cluster of sidecars: kill -9 / a fourth joining under 200k records, rolling restart, a single
# sidecar's (older layout) state topic taken over by three, and the native reference (3-broker Kafka
# 4.3.1, a broker killed under the same load); opt-in.
test-sidecar-cluster: $(STAMP) jvm
	$(PY) -m pytest -q -rfEs -s --run sidecar-cluster tests/e2e/test_sidecar_cluster.py tests/e2e/test_cluster_layout.py tests/e2e/test_cluster_native_reference.py

# The connection setup timeout against a real Kafka across a real partition (two network
# namespaces; root and iproute2): prints how soon after the heal a bound and a plain aiokafka
# client get metadata again; opt-in, about a minute.
test-connsetup: $(STAMP) jvm
	$(PY) -m pytest -q -rfEs -s --run connsetup tests/e2e/test_connection_setup_lab.py

# The deployment topologies run for real (compose/kafka39-cluster.yml, compose/kubernetes/): each
# host a network namespace (root and iproute2); opt-in, a few minutes.
test-topology: $(STAMP) jvm
	$(PY) -m pytest -q -rfEs -s --run topology tests/e2e/test_topology.py

# franz-go's own integration suite (pkg/kgo, pinned version from the Go module proxy) with the
# sidecar as its one bootstrap, on Kafka 3.9 and 4.3 backends, beside native Kafka 4.3; opt-in (~30 min).
test-franz: $(STAMP) jvm
	$(PY) -m pytest -q -rfEs -s --run franz tests/e2e/test_franz_suite.py

# Kafka 4.4's own applications (Kafka Streams EOS word count with a SIGKILL, VerifiableProducer/
# VerifiableConsumer, TransactionalMessageCopier) through the sidecar and natively; opt-in.
test-kafka-apps: $(STAMP) jvm
	$(PY) -m pytest -q -rfEs -s --run kafka-apps tests/e2e/test_kafka_apps.py

# kshare on tansu 0.6.0, a Kafka-compatible broker that is not Apache Kafka (docs/compatibility.md,
# "Tansu"); opt-in. Builds tansu with cargo into ~/.cache/kshare/tansu-0.6.0 first if missing (~40 min on 2 cores).
test-tansu: $(STAMP) jvm
	$(VENV)/bin/kshare dev install-tansu
	$(PY) -m pytest -q -rfEs --run tansu tests/integration/test_tansu_backend.py tests/e2e/test_tansu.py

# Credentials that expire under load: delegation tokens of 8 s replaced while an mTLS
# client produces for 25 s through a sidecar passing through as the client, upstreams
# re-authenticating in place; a sidecar without CREATE_TOKENS; OAUTHBEARER tokens from an endpoint
# refreshed while the sidecar's backend sessions re-authenticate (KIP-368); opt-in (~2 min).
test-tokens: $(STAMP) jvm
	$(PY) -m pytest -q -rfEs -s --run tokens tests/e2e/test_acl_parity.py tests/e2e/test_backend_oauth_endpoint.py \
		-k "tokens_are_replaced or without_create_tokens or tokens_refresh_and_sessions_reauthenticate"

# The console's opt-in suite (docs/console.md): Debian's headless chromium driven through its chromedriver
# (pages, numbers, a redrive from the page, refused actions, hostile payloads, the screenshots of
# docs/console/), Debian's Prometheus scraping a live sidecar under load (every dashboard query returns
# series; the alert rules load), and a redrive of 600 dead letters under load with the sidecar killed
# mid-way; ~6 min. Installs the Debian packages (as root) and the `browser` extra when missing.
test-console: $(STAMP) jvm
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null && command -v prometheus >/dev/null \
		|| flock /tmp/apt.lock apt-get install -y -q chromium chromium-driver prometheus
	$(PY) -m pip install -q -e '.[test,console,browser]'
	$(PY) -m pytest -q -rfEs -s --run console tests/e2e/test_console_browser.py tests/e2e/test_console_redrive.py \
		tests/integration/test_prometheus_live.py tests/integration/test_prometheus_rules.py tests/integration/test_dlq_cli.py

# Share groups moved between kshare and native Kafka 4.4 both ways, and docs/migration.md's upgrade
# procedure (Kafka 3.9 upgraded in place to 4.4 while kshare serves it) run as written; opt-in (~15 min).
test-migration: $(STAMP) jvm
	$(PY) -m pytest -q -rfEs -s --run migration tests/e2e/test_migration.py tests/e2e/test_migration_upgrade.py

# The backend matrix (docs/compatibility.md, "Backends"): kshare on Kafka 2.8.2 and 3.5.2 (ZooKeeper), 3.7.2,
# 3.9.2, 4.0.1, 4.1.1 and 4.4.0 (KRaft), one release at a time: share scenarios, every state write mode with
# a sidecar kill -9, zombie sidecars, pass-through, a backend restart; Kafka 2.4 refused. Writes
# docs/compatibility-matrix.json and renders the table into docs/compatibility.md; opt-in (~1 h).
test-backends: $(STAMP) jvm
	$(PY) -m pytest -q -rfEs --run backends tests/e2e/backends; rc=$$?; \
		$(PY) -m kshare_sidecar.testing.matrix; exit $$rc

# The nemesis (docs/testing.md, "The nemesis"): a cluster of sidecars on network namespaces under a
# share-consume while links are cut, split, slowed, flapped; each fault class NEMESIS_REPEAT times,
# the checker over every run; root, iproute2, iptables; opt-in (about two hours on a quiet machine).
NEMESIS_REPEAT ?= 5
test-nemesis: $(STAMP) jvm
	$(PY) -m pytest -q -rfEs -s -p tests.e2e.nemesis_options --run nemesis --timeout 1800 \
		--nemesis-repeat $(NEMESIS_REPEAT) tests/e2e/test_nemesis.py

# A seeded random schedule of the nemesis' faults (one or two at a time) for MINUTES; a failure
# prints the seed: `make nemesis-schedule MINUTES=30 SEED=1234` replays it. NEMESIS_BROKERS=3: a
# 3-broker backend (broker isolation in the mix).
MINUTES ?= 30
SEED ?=
NEMESIS_BROKERS ?= 1
nemesis-schedule: $(STAMP) jvm
	$(PY) -m pytest -q -rfEs -s -p tests.e2e.nemesis_options --run nemesis \
		--timeout $$(( $(MINUTES) * 60 + 1800 )) --nemesis-minutes $(MINUTES) --nemesis-brokers $(NEMESIS_BROKERS) \
		$(if $(SEED),--nemesis-seed $(SEED)) tests/e2e/test_nemesis.py -k test_seeded_schedule

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache

# Containers for real (docs/testing.md, "Containers"): a Docker engine (the one that answers, else
# Debian's docker.io installed if missing and a private dockerd started, then stopped at the end),
# local images from Debian's packages (cached by tag), the project's Dockerfile built on them, the
# testcontainers example of docs/testing.md, and every compose file run, a sidecar killed under load; opt-in.
test-containers: $(STAMP) jvm
	$(PY) -m pytest -q -rfEs --run containers tests/containers

# The soak (docs/testing.md, "The soak"): steady share-consume load through two sidecars over Kafka 3.9
# with a fault every 4 minutes; figures per SOAK_INTERVAL_MINUTES; fails on growth that does not level
# off, a lost or doubly accepted record; opt-in (SOAK_MINUTES, 60 by default; 5 for a smoke run).
SOAK_MINUTES ?= 60
SOAK_INTERVAL_MINUTES ?= 10
SOAK_OUT ?= soak-out
soak: $(STAMP) jvm
	$(PY) -m pytest -q -rfEs -s --run soak tests/soak/test_soak.py --soak-minutes $(SOAK_MINUTES) \
		--soak-interval-minutes $(SOAK_INTERVAL_MINUTES) --soak-out $(SOAK_OUT)
test-soak: soak  # the name the opt-in marker's skip message gives

# Hostile authenticated clients (docs/security.md, "Hostile authenticated clients"): 10,000 share sessions,
# a billion MaxRecords, a client that never acknowledges, connections over the per-address limit, requests
# over socket.request.max.bytes — each on native Kafka 4.4 and kshare over 3.9 — and, on kshare, thousands
# of connections at the open-file limit and a pipelined flood; opt-in (~4 min with the 4.4 broker's start).
test-hostile: $(STAMP) jvm
	$(PY) -m pytest -q -rfEs -s --run hostile tests/e2e/test_hostile_clients.py
